"""Read an inference-perf config YAML: the parts that shape the request stream (pure).

Field names and defaults are inference-perf's (``inference_perf/config``): ``api`` (``type``
completion, ``streaming``), ``data`` (``shared_prefix`` with ``num_unique_system_prompts`` /
``num_groups``, ``num_users_per_system_prompt`` / ``num_prompts_per_group``,
``system_prompt_len``, ``question_len``, ``output_len``; ``random`` with
``input_distribution`` / ``output_distribution`` ``{min, max, mean, std_dev,
total_count}``), ``load`` (``type`` constant | poisson, ``interval``, ``stages`` of
``{rate, duration}`` or a ``sweep`` ``{type linear | geometric, num_requests 2000, timeout 60,
num_stages 5, stage_duration 180, saturation_percentile 95}``, ``num_workers``,
``worker_max_concurrency`` 100), ``server.ignore_eos``, ``report.request_lifecycle.percentiles``.
Sections that do not shape the stream (``metrics``, ``storage``, ``server.base_url``,
``tokenizer``) are kept as given in :attr:`BenchConfig.ignored`. Anything the simulator
cannot reproduce (chat API, multi-turn sessions, trace replay, other data types) is an
error, not a silent approximation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# inference-perf's RequestLifecycleMetricsReportConfig.percentiles default; the measured
# files carry exactly these keys (p0.1 ... p99.9, 50 as "median")
DEFAULT_PERCENTILES = (0.1, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9)
LOAD_TYPES = ("constant", "poisson")
SWEEP_TYPES = ("linear", "geometric")


@dataclass(frozen=True)
class Distribution:
    """inference-perf's ``Distribution``: a normal draw clipped to [min, max], rounded."""

    min: int = 10
    max: int = 1024
    mean: float = 512
    std_dev: float = 200
    total_count: int | None = None


@dataclass(frozen=True)
class SharedPrefix:
    num_groups: int = 10
    num_prompts_per_group: int = 10
    system_prompt_len: int = 100
    question_len: int = 50
    output_len: int = 50
    question_distribution: Distribution | None = None
    output_distribution: Distribution | None = None


@dataclass(frozen=True)
class RandomData:
    input_distribution: Distribution
    output_distribution: Distribution


@dataclass(frozen=True)
class Stage:
    rate: float
    duration: float


@dataclass(frozen=True)
class Sweep:
    type: str
    num_requests: int = 2000
    timeout: float = 60.0
    num_stages: int = 5
    stage_duration: int = 180
    saturation_percentile: float = 95.0


@dataclass(frozen=True)
class Load:
    type: str = "constant"
    interval: float = 1.0
    stages: tuple[Stage, ...] = ()
    sweep: Sweep | None = None
    num_workers: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    worker_max_concurrency: int = 100

    @property
    def concurrency(self) -> int:
        """In-flight limit of the load generator: each worker holds at most
        ``worker_max_concurrency`` requests (sleeping until their time, or sent)."""
        return self.num_workers * self.worker_max_concurrency


@dataclass(frozen=True)
class BenchConfig:
    api_type: str
    streaming: bool
    data_type: str
    shared_prefix: SharedPrefix | None
    random: RandomData | None
    load: Load
    ignore_eos: bool = False
    model_name: str | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    ignored: dict[str, Any] = field(default_factory=dict)


def _section(cfg: dict, key: str) -> dict:
    v = cfg.get(key) or {}
    if not isinstance(v, dict):
        raise ValueError(f"config: {key!r} must be a mapping")
    return v


def _dist(d: Any, name: str) -> Distribution:
    if not isinstance(d, dict):
        raise ValueError(f"config: {name} must be a mapping of min, max, mean, std_dev")
    unknown = set(d) - {"min", "max", "mean", "std_dev", "total_count", "type"}
    if unknown:
        raise ValueError(f"config: {name}: unknown keys {sorted(unknown)}")
    if d.get("type", "normal") != "normal":
        raise ValueError(f"config: {name}: only normal distributions are supported")
    out = Distribution(**{k: v for k, v in d.items() if k != "type"})
    if out.min > out.max or not out.min <= out.mean <= out.max or out.std_dev < 0:
        raise ValueError(f"config: {name}: need min <= mean <= max and std_dev >= 0")
    return out


def _int_len(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"config: data.shared_prefix.{name} must be a non-negative integer")
    return v


def _shared_prefix(d: dict) -> SharedPrefix:
    alias = {"num_unique_system_prompts": "num_groups",
             "num_users_per_system_prompt": "num_prompts_per_group"}  # fmt: skip
    d = {alias.get(k, k): v for k, v in d.items()}
    if d.pop("enable_multi_turn_chat", False):
        raise ValueError("config: shared_prefix.enable_multi_turn_chat is not supported")
    known = {"num_groups", "num_prompts_per_group", "system_prompt_len", "question_len",
             "output_len", "question_distribution", "output_distribution"}  # fmt: skip
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"config: data.shared_prefix: unknown keys {sorted(unknown)}")
    kw: dict[str, Any] = {}
    for k in ("num_groups", "num_prompts_per_group"):
        if k in d:
            if _int_len(d[k], k) < 1:
                raise ValueError(f"config: data.shared_prefix.{k} must be >= 1")
            kw[k] = d[k]
    for k in ("system_prompt_len", "question_len", "output_len"):
        if k in d:
            kw[k] = _int_len(d[k], k)
    for k in ("question_distribution", "output_distribution"):
        if d.get(k) is not None:
            kw[k] = _dist(d[k], f"data.shared_prefix.{k}")
    sp = SharedPrefix(**kw)
    if sp.output_len < 1 and sp.output_distribution is None:
        raise ValueError("config: data.shared_prefix.output_len must be >= 1")
    return sp


def _load(d: dict) -> Load:
    kw: dict[str, Any] = {}
    t = d.get("type", "constant")
    if t not in LOAD_TYPES:
        raise ValueError(f"config: load.type {t!r} is not supported (supported: {LOAD_TYPES})")
    kw["type"] = t
    if "interval" in d:
        kw["interval"] = float(d["interval"])
    stages = []
    for i, s in enumerate(d.get("stages") or []):
        if not isinstance(s, dict) or "rate" not in s or "duration" not in s:
            raise ValueError(f"config: load.stages[{i}] needs rate and duration")
        if not (float(s["rate"]) > 0 and float(s["duration"]) > 0):
            raise ValueError(f"config: load.stages[{i}]: rate and duration must be > 0")
        stages.append(Stage(float(s["rate"]), float(s["duration"])))
    kw["stages"] = tuple(stages)
    if d.get("sweep") is not None:
        sw = dict(d["sweep"])
        if sw.get("type") not in SWEEP_TYPES:
            raise ValueError(f"config: load.sweep.type must be one of {SWEEP_TYPES}")
        unknown = set(sw) - {"type", "num_requests", "timeout", "num_stages", "stage_duration",
                             "saturation_percentile"}  # fmt: skip
        if unknown:
            raise ValueError(f"config: load.sweep: unknown keys {sorted(unknown)}")
        kw["sweep"] = Sweep(**sw)
    if not stages and "sweep" not in kw:
        raise ValueError("config: load needs stages or a sweep")
    for k in ("num_workers", "worker_max_concurrency"):
        if k in d:
            if int(d[k]) < 1:
                raise ValueError(f"config: load.{k} must be >= 1")
            kw[k] = int(d[k])
    for k in ("trace", "lora_traffic_split", "circuit_breakers"):
        if d.get(k):
            raise ValueError(f"config: load.{k} is not supported")
    return Load(**kw)


def parse_config(cfg: dict) -> BenchConfig:
    """The benchmark an inference-perf config describes (see the module docstring)."""
    if not isinstance(cfg, dict):
        raise ValueError("config: expected a mapping at the top level")
    api = _section(cfg, "api")
    api_type = api.get("type", "completion")
    if api_type != "completion":
        raise ValueError(f"config: api.type {api_type!r}: only completion is supported")
    data = _section(cfg, "data")
    data_type = data.get("type", "mock")
    sp = rnd = None
    if data_type == "shared_prefix":
        sp = _shared_prefix(_section(data, "shared_prefix"))
    elif data_type == "random":
        for k in ("input_distribution", "output_distribution"):
            if k not in data:
                raise ValueError(f"config: data.type random needs data.{k}")
        rnd = RandomData(
            _dist(data["input_distribution"], "data.input_distribution"),
            _dist(data["output_distribution"], "data.output_distribution"),
        )
        if (
            rnd.input_distribution.total_count is None
            or rnd.output_distribution.total_count is None
        ):
            raise ValueError("config: random data distributions need total_count")
    else:
        raise ValueError(
            f"config: data.type {data_type!r} is not supported (supported: shared_prefix, random)"
        )
    server = _section(cfg, "server")
    report = _section(cfg, "report")
    lifecycle = _section(report, "request_lifecycle")
    percentiles = tuple(float(p) for p in lifecycle.get("percentiles", DEFAULT_PERCENTILES))
    ignored = {k: cfg[k] for k in ("metrics", "storage", "tokenizer") if k in cfg}
    ignored.update({f"server.{k}": v for k, v in server.items()
                    if k not in ("ignore_eos", "model_name")})  # fmt: skip
    return BenchConfig(
        api_type=api_type,
        streaming=bool(api.get("streaming", False)),
        data_type=data_type,
        shared_prefix=sp,
        random=rnd,
        load=_load(_section(cfg, "load")),
        ignore_eos=bool(server.get("ignore_eos", False)),
        model_name=server.get("model_name"),
        percentiles=percentiles,
        ignored=ignored,
    )


def read_config(path: str | Path) -> BenchConfig:
    try:
        cfg = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"config {path}: not valid YAML ({e})") from e
    return parse_config(cfg)
