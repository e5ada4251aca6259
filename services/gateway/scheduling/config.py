"""The scheduling config file: named plugin instances, named profiles, model objectives.

Two phases, both strict: (1) every entry of ``plugins`` is checked against the registry and
its parameters parsed (unknown keys and bad values are errors naming the plugin and the key);
(2) every profile's ``pluginRef`` must name a phase-1 plugin, weights are only for scorers,
a profile has exactly one picker and at most one producer. The result is plain data;
:meth:`SchedulingConfig.scheduler` builds a :class:`Scheduler` (fresh plugin instances) for a
profile.

Format::

    plugins:
      - type: prefix-cache-affinity-filter   # registry type name
        name: strict-affinity                # optional, defaults to the type
        parameters: {threshold: 0.99}
    profiles:
      - name: llmd-predicted
        plugins:
          - pluginRef: strict-affinity
          - pluginRef: queue-scorer
            weight: 2                        # scorers only, default 1
        flowControl:                         # optional (scheduling/flow.py), default off
          enabled: true
          maxBacklogS: 0.5
    objectives:                              # optional: priority per model ("*" = default)
      "*": {priority: 0}

Pure apart from :func:`load_config` reading the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.gateway.scheduling.flow import ORDERS, ROUTE_TO, FlowConfig
from services.gateway.scheduling.params import ConfigError, Param, parse_params
from services.gateway.scheduling.plugin import Registry
from services.gateway.scheduling.plugins import default_registry
from services.gateway.scheduling.scheduler import PluginTimer, Scheduler

DEFAULT_CONFIG_PATH = Path(__file__).with_name("profiles.yaml")
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000


@dataclass(frozen=True, slots=True)
class PluginSpec:
    type: str
    name: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str
    plugins: tuple[tuple[PluginSpec, float], ...]  # (plugin, weight) in listed order
    flow: FlowConfig = field(default_factory=FlowConfig)


# A profile's ``flowControl`` block (services/gateway/scheduling/flow.py), parsed like a
# plugin's parameters.
FLOW_PARAMS = (
    Param("enabled", bool, False, "Hold requests in the gateway while no pod has room"),
    Param("maxBacklogS", float, 0.5, "A pod has room while the prefill this gateway queued on "
          "it is estimated below this many seconds", lo=0.0, lo_open=True, hi=3600.0),
    Param("order", str, "shortest", "Release order within a priority: shortest estimated "
          "prefill first, arrival order, or the earliest deadline (arrival + deadlineFactor x "
          "estimated prefill)", choices=ORDERS),
    Param("deadlineFactor", float, 10.0, "order deadline: a request's deadline is its arrival "
          "plus this multiple of its own estimated prefill", lo=0.0, lo_open=True, hi=1e6),
    Param("maxWaitS", float, 300.0, "A request queued this long is released to any pod (bounds "
          "how long shortest-first can starve a long prompt)", lo=0.0, lo_open=True,
          hi=86400.0),
    Param("maxWaitFactor", float, 0.0, "A request queued this multiple of its own estimated "
          "prefill is released to any pod, when that is shorter than maxWaitS (0: off)",
          lo=0.0, hi=1e6),
    Param("roomFactor", float, 0.0, "A pod has room for a request while its backlog is below "
          "max(maxBacklogS, this multiple of the request's own estimated prefill) (0: the "
          "shared gate only)", lo=0.0, hi=1e6),
    Param("maxQueued", int, 10_000, "Requests that may wait; past that a request gets 503 "
          "(queue_full) with Retry-After", lo=1, hi=10_000_000),
    Param("bypassHopeless", bool, True, "Release at once (to any pod) a request whose TTFT SLO "
          "no pod can meet any more"),
    Param("routeTo", str, "room", "Route a released request among the pods with room, or "
          "among all pods (the queue then only orders and paces)", choices=ROUTE_TO),
)  # fmt: skip


def flow_config(raw: Any, where: str) -> FlowConfig:
    try:
        p = parse_params("flowControl", "flowControl", FLOW_PARAMS, raw)
    except ConfigError as err:
        raise ConfigError(str(err).replace("plugin 'flowControl'", "flowControl")) from None
    return FlowConfig(
        enabled=p["enabled"], max_backlog_s=p["maxBacklogS"], order=p["order"],
        max_wait_s=p["maxWaitS"], max_wait_factor=p["maxWaitFactor"],
        deadline_factor=p["deadlineFactor"], room_factor=p["roomFactor"],
        max_queued=p["maxQueued"],
        bypass_hopeless=p["bypassHopeless"], route_to=p["routeTo"],
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Objective:
    priority: int = 0


@dataclass
class SchedulingConfig:
    profiles: dict[str, ProfileSpec]
    objectives: dict[str, Objective] = field(default_factory=dict)
    registry: Registry = field(default_factory=default_registry)
    source: str = "<memory>"

    def scheduler(self, profile: str, timer: PluginTimer | None = None) -> Scheduler:
        """A Scheduler for ``profile`` with its own plugin instances."""
        spec = self.profiles.get(profile)
        if spec is None:
            raise ConfigError(
                f"{self.source}: unknown profile '{profile}' (known: {', '.join(self.profiles)})"
            )
        plugins = [
            (self.registry.get(p.type)(p.name, p.params), weight) for p, weight in spec.plugins
        ]
        return Scheduler(spec.name, plugins, timer=timer)

    def flow(self, profile: str) -> FlowConfig:
        """The profile's flow-control settings (disabled when it has none)."""
        spec = self.profiles.get(profile)
        return spec.flow if spec is not None else FlowConfig()

    def objective(self, model: str) -> Objective:
        return self.objectives.get(model) or self.objectives.get("*") or Objective()


def _mapping(obj: Any, where: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {obj!r}")
    for key in obj:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(allowed))})"
            )
    for key in required:
        if key not in obj:
            raise ConfigError(f"{where}: missing required key '{key}'")
    return dict(obj)


def _name(obj: Any, where: str) -> str:
    if not isinstance(obj, str) or not obj.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {obj!r}")
    return obj


def parse_config(
    data: Any, registry: Registry | None = None, source: str = "<memory>"
) -> SchedulingConfig:
    """Validate a decoded YAML document. Raises ConfigError."""
    reg = registry or default_registry()
    doc = _mapping(data, source, {"plugins", "profiles", "objectives"}, {"plugins", "profiles"})

    plugins: dict[str, PluginSpec] = {}
    raw_plugins = doc["plugins"]
    if not isinstance(raw_plugins, list):
        raise ConfigError(f"{source}: 'plugins' must be a list")
    for i, entry in enumerate(raw_plugins):
        where = f"{source}: plugins[{i}]"
        e = _mapping(entry, where, {"type", "name", "parameters"}, {"type"})
        type_name = _name(e["type"], f"{where}.type")
        try:
            cls = reg.get(type_name)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        name = _name(e.get("name", type_name), f"{where}.name")
        if name in plugins:
            raise ConfigError(f"{where}: duplicate plugin name '{name}'")
        try:
            params = parse_params(type_name, name, cls.PARAMS, e.get("parameters"))
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        plugins[name] = PluginSpec(type_name, name, params)

    profiles: dict[str, ProfileSpec] = {}
    raw_profiles = doc["profiles"]
    if not isinstance(raw_profiles, list) or not raw_profiles:
        raise ConfigError(f"{source}: 'profiles' must be a non-empty list")
    for i, entry in enumerate(raw_profiles):
        where = f"{source}: profiles[{i}]"
        e = _mapping(entry, where, {"name", "plugins", "flowControl"}, {"name", "plugins"})
        pname = _name(e["name"], f"{where}.name")
        where = f"{source}: profile '{pname}'"
        if pname in profiles:
            raise ConfigError(f"{where}: duplicate profile name")
        refs = e["plugins"]
        if not isinstance(refs, list) or not refs:
            raise ConfigError(f"{where}: 'plugins' must be a non-empty list")
        chosen: list[tuple[PluginSpec, float]] = []
        for j, ref in enumerate(refs):
            rwhere = f"{where}: plugins[{j}]"
            r = _mapping(ref, rwhere, {"pluginRef", "weight"}, {"pluginRef"})
            ref_name = _name(r["pluginRef"], f"{rwhere}.pluginRef")
            spec = plugins.get(ref_name)
            if spec is None:
                raise ConfigError(f"{rwhere}: pluginRef '{ref_name}' names no plugin")
            kind = reg.get(spec.type).KIND
            weight = r.get("weight", 1.0)
            if "weight" in r:
                if kind != "scorer":
                    raise ConfigError(f"{rwhere}: 'weight' is only for scorers ('{ref_name}' "
                                      f"is a {kind})")  # fmt: skip
                if isinstance(weight, bool) or not isinstance(weight, int | float):
                    raise ConfigError(f"{rwhere}: 'weight' must be a number, got {weight!r}")
                if not 0 <= weight < float("inf"):
                    raise ConfigError(f"{rwhere}: 'weight' must be finite and >= 0")
            if any(s.name == ref_name for s, _ in chosen):
                raise ConfigError(f"{rwhere}: plugin '{ref_name}' listed twice")
            chosen.append((spec, float(weight)))
        kinds = [reg.get(s.type).KIND for s, _ in chosen]
        if kinds.count("picker") != 1:
            raise ConfigError(f"{where}: needs exactly one picker, has {kinds.count('picker')}")
        if kinds.count("producer") > 1:
            raise ConfigError(f"{where}: at most one producer allowed")
        try:
            flow = flow_config(e.get("flowControl"), where)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        profiles[pname] = ProfileSpec(pname, tuple(chosen), flow)

    objectives: dict[str, Objective] = {}
    raw_obj = doc.get("objectives")
    if raw_obj is None:
        raw_obj = {}
    if not isinstance(raw_obj, Mapping):
        raise ConfigError(f"{source}: 'objectives' must be a mapping of model name to settings")
    for model, entry in raw_obj.items():
        where = f"{source}: objectives['{model}']"
        _name(model, where)
        e = _mapping(entry, where, {"priority"})
        prio = e.get("priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int):
            raise ConfigError(f"{where}: 'priority' must be an integer, got {prio!r}")
        if not PRIORITY_MIN <= prio <= PRIORITY_MAX:
            raise ConfigError(f"{where}: 'priority' must be in {PRIORITY_MIN}..{PRIORITY_MAX}")
        objectives[str(model)] = Objective(priority=prio)
    return SchedulingConfig(profiles, objectives, reg, source)


def load_config(
    path: str | Path | None = None, registry: Registry | None = None
) -> SchedulingConfig:
    """Read and validate the profiles file (default: the shipped profiles.yaml)."""
    p = Path(path) if path else DEFAULT_CONFIG_PATH
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read scheduling config {p}: {e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: invalid YAML: {e}") from e
    return parse_config(data, registry, source=str(p))
