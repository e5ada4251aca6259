"""Config parsing: parameters, plugins, profiles, objectives; the shipped file; the registry;
docs/scheduling.md documents every plugin and parameter."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from services.gateway.scheduling.config import (
    DEFAULT_CONFIG_PATH,
    load_config,
    parse_config,
)
from services.gateway.scheduling.params import ConfigError, Param, parse_params
from services.gateway.scheduling.plugin import Picker, Registry
from services.gateway.scheduling.plugins import ALL_PLUGINS, default_registry
from services.gateway.scheduling.plugins.filters import PrefixCacheAffinityFilter

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_PROFILES = {"round-robin", "least-request", "gie-default", "prefix-aware",
                     "cache-aware", "llmd-predicted", "headroom"}  # fmt: skip

PARAMS = (
    Param("f", float, 1.0, "", lo=0.0, hi=2.0),
    Param("g", float, 1.0, "", lo=0.0, lo_open=True),
    Param("i", int, 3, "", lo=1),
    Param("b", bool, False, ""),
    Param("s", str, "least", "", choices=("least", "most")),
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {"f": 1.0, "g": 1.0, "i": 3, "b": False, "s": "least"}),
        ({}, {"f": 1.0, "g": 1.0, "i": 3, "b": False, "s": "least"}),
        ({"f": 2, "i": 7, "b": True, "s": "most"}, {"f": 2.0, "g": 1.0, "i": 7, "b": True,
                                                   "s": "most"}),
        ({"f": 0, "g": 1e-9}, {"f": 0.0, "g": 1e-9, "i": 3, "b": False, "s": "least"}),
    ],
)  # fmt: skip
def test_parse_params_good(raw, expected):
    got = parse_params("t", "n", PARAMS, raw)
    assert got == expected and isinstance(got["f"], float)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"x": 1}, "unknown parameter 'x'"),
        ({"f": "1"}, "'f' must be a number"),
        ({"f": True}, "'f' must be a number"),
        ({"f": 2.5}, "'f' must be >= 0, <= 2"),
        ({"f": -0.1}, "'f' must be >= 0"),
        ({"f": float("nan")}, "'f' must be finite"),
        ({"g": 0}, "'g' must be > 0"),
        ({"i": 1.5}, "'i' must be an integer"),
        ({"i": 0}, "'i' must be >= 1"),
        ({"b": 1}, "'b' must be true or false"),
        ({"b": "yes"}, "'b' must be true or false"),
        ({"s": "best"}, "'s' must be one of least, most"),
        ({"s": 1}, "'s' must be a string"),
        ([1, 2], "'parameters' must be a mapping"),
    ],
)
def test_parse_params_bad_values_name_the_plugin_and_key(raw, needle):
    with pytest.raises(ConfigError) as e:
        parse_params("some-type", "my-name", PARAMS, raw)
    assert needle in str(e.value) and "plugin 'my-name' (some-type)" in str(e.value)


def test_create_checks_parameters_like_the_loader():
    with pytest.raises(ConfigError, match="unknown parameter 'treshold'"):
        PrefixCacheAffinityFilter.create(treshold=0.5)
    f = PrefixCacheAffinityFilter.create("strict", threshold=0.99)
    assert (f.name, f.threshold, f.epsilon, f.max_penalty) == ("strict", 0.99, 0.01, 5000.0)


# --- whole configs -----------------------------------------------------------------------------
GOOD = {
    "plugins": [
        {"type": "queue-scorer"},
        {"type": "prefix-cache-affinity-filter", "name": "strict",
         "parameters": {"threshold": 0.99}},
        {"type": "prefix-cache-affinity-filter", "name": "loose"},
        {"type": "max-score-picker"},
        {"type": "predicted-latency-producer", "parameters": {"streamingMode": True}},
    ],
    "profiles": [
        {"name": "a", "plugins": [{"pluginRef": "queue-scorer", "weight": 2},
                                  {"pluginRef": "max-score-picker"}]},
        {"name": "b", "plugins": [{"pluginRef": "predicted-latency-producer"},
                                  {"pluginRef": "strict"}, {"pluginRef": "loose"},
                                  {"pluginRef": "max-score-picker"}]},
    ],
    "objectives": {"*": {"priority": 0}, "batch-model": {"priority": -1}},
}  # fmt: skip


def test_good_config():
    cfg = parse_config(copy.deepcopy(GOOD))
    assert list(cfg.profiles) == ["a", "b"]
    (scorer, w), (picker, _) = cfg.profiles["a"].plugins
    assert (scorer.type, w, picker.type) == ("queue-scorer", 2.0, "max-score-picker")
    b = cfg.scheduler("b")
    assert [f.threshold for f in b.filters] == [0.99, 0.80]
    assert b.predicts and b.predict_budget_ms == 400.0
    assert not cfg.scheduler("a").predicts
    assert cfg.objective("batch-model").priority == -1
    assert cfg.objective("other").priority == 0


def test_each_scheduler_gets_its_own_plugin_instances():
    cfg = parse_config(copy.deepcopy(GOOD))
    assert cfg.scheduler("a").picker is not cfg.scheduler("a").picker


def _set(path, value):
    def f(doc):
        obj = doc
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return f


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([], "must be a mapping"),
        ({"plugins": []}, "missing required key 'profiles'"),
        (_set(["extra"], 1), "unknown key 'extra'"),
        (_set(["plugins"], {}), "'plugins' must be a list"),
        (_set(["plugins", 0, "type"], "nope-scorer"), "unknown plugin type 'nope-scorer'"),
        (_set(["plugins", 0, "params"], {}), "plugins[0]: unknown key 'params'"),
        (_set(["plugins", 1, "parameters"], {"treshold": 1}),
         "plugin 'strict' (prefix-cache-affinity-filter): unknown parameter 'treshold'"),
        (_set(["plugins", 1, "parameters"], {"threshold": 1.5}),
         "plugin 'strict' (prefix-cache-affinity-filter): parameter 'threshold' must be"),
        (_set(["plugins", 4, "parameters"], {"streamingMode": "yes"}),
         "parameter 'streamingMode' must be true or false"),
        (_set(["plugins", 2, "name"], "strict"), "duplicate plugin name 'strict'"),
        (_set(["plugins", 2, "name"], ""), "name must be a non-empty string"),
        (_set(["profiles"], []), "'profiles' must be a non-empty list"),
        (_set(["profiles", 1, "name"], "a"), "profile 'a': duplicate profile name"),
        (_set(["profiles", 0, "plugins", 0, "pluginRef"], "ghost"),
         "pluginRef 'ghost' names no plugin"),
        (_set(["profiles", 0, "plugins", 0, "weight"], "2"), "'weight' must be a number"),
        (_set(["profiles", 0, "plugins", 0, "weight"], -1), "'weight' must be finite and >= 0"),
        (_set(["profiles", 0, "plugins", 1, "weight"], 1), "'weight' is only for scorers"),
        (_set(["profiles", 0, "plugins", 0, "wieght"], 1), "unknown key 'wieght'"),
        (_set(["profiles", 0, "plugins"], [{"pluginRef": "queue-scorer"}]),
         "needs exactly one picker, has 0"),
        (_set(["profiles", 0, "plugins"], [{"pluginRef": "max-score-picker"},
                                           {"pluginRef": "max-score-picker"}]), "listed twice"),
        (_set(["objectives"], []), "'objectives' must be a mapping"),
        (_set(["objectives", "*"], {"priority": "high"}), "'priority' must be an integer"),
        (_set(["objectives", "*"], {"priority": 5000}), "'priority' must be in -1000..1000"),
        (_set(["objectives", "*"], {"slo": 1}), "unknown key 'slo'"),
        (_set(["profiles", 0, "flowControl"], {"enabled": True, "maxBacklog": 1}),
         "profile 'a': flowControl: unknown parameter 'maxBacklog'"),
        (_set(["profiles", 0, "flowControl"], {"order": "lifo"}),
         "flowControl: parameter 'order' must be one of shortest, fifo"),
        (_set(["profiles", 0, "flowControl"], {"maxBacklogS": 0}),
         "flowControl: parameter 'maxBacklogS' must be > 0"),
        (_set(["profiles", 0, "flowControl"], {"maxQueued": 0.5}),
         "flowControl: parameter 'maxQueued' must be an integer"),
        (_set(["profiles", 0, "flowControl"], [1]), "flowControl"),
    ],
)  # fmt: skip
def test_bad_configs(doc, needle):
    data = doc
    if callable(doc):
        data = copy.deepcopy(GOOD)
        doc(data)
    with pytest.raises(ConfigError) as e:
        parse_config(data, source="test.yaml")
    assert needle in str(e.value), str(e.value)
    assert str(e.value).startswith("test.yaml")


def test_two_pickers_or_producers_are_rejected():
    doc = copy.deepcopy(GOOD)
    doc["plugins"].append({"type": "random-picker"})
    doc["profiles"][0]["plugins"].append({"pluginRef": "random-picker"})
    with pytest.raises(ConfigError, match="exactly one picker, has 2"):
        parse_config(doc)
    doc = copy.deepcopy(GOOD)
    doc["plugins"].append({"type": "predicted-latency-producer", "name": "p2"})
    doc["profiles"][1]["plugins"].append({"pluginRef": "p2"})
    with pytest.raises(ConfigError, match="at most one producer"):
        parse_config(doc)


def test_flow_control_block():
    doc = copy.deepcopy(GOOD)
    doc["profiles"][0]["flowControl"] = {"enabled": True, "maxBacklogS": 2, "routeTo": "any"}
    cfg = parse_config(doc)
    f = cfg.flow("a")
    assert (f.enabled, f.max_backlog_s, f.route_to, f.order) == (True, 2.0, "any", "shortest")
    assert not cfg.flow("b").enabled and not cfg.flow("nope").enabled
    doc["profiles"][0]["flowControl"] = {"enabled": True, "order": "deadline", "deadlineFactor": 3}
    f = parse_config(doc).flow("a")
    assert (f.order, f.deadline_factor, f.release_key(1.0, 0.5)) == ("deadline", 3.0, 2.5)
    doc["profiles"][0]["flowControl"]["roomFactor"] = 0.5
    assert parse_config(doc).flow("a").gate(2.0) == 1.0
    doc["profiles"][0]["flowControl"]["deadlineFactor"] = 0
    with pytest.raises(ConfigError, match="deadlineFactor"):
        parse_config(doc)


def test_unknown_profile():
    with pytest.raises(ConfigError, match="unknown profile 'zzz'"):
        parse_config(copy.deepcopy(GOOD)).scheduler("zzz")


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(GOOD))
    assert set(load_config(good).profiles) == {"a", "b"}


# --- the shipped file ---------------------------------------------------------------------------
def test_shipped_profiles():
    cfg = load_config()
    assert REQUIRED_PROFILES <= set(cfg.profiles)
    for name in cfg.profiles:
        cfg.scheduler(name)
    gie = {p.type: w for p, w in cfg.profiles["gie-default"].plugins}
    assert gie == {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 2.0,
                   "prefix-scorer": 3.0, "max-score-picker": 1.0}  # fmt: skip
    llmd = cfg.scheduler("llmd-predicted")
    assert [type(p).TYPE for p in llmd.plugins] == [
        "predicted-latency-producer", "latency-slo-admitter", "prefix-cache-affinity-filter",
        "prefix-cache-affinity-filter", "slo-headroom-tier-filter", "latency-scorer",
        "weighted-random-picker",
    ]  # fmt: skip
    assert [f.threshold for f in llmd.filters[:2]] == [0.99, 0.80]
    assert llmd.scorers[0][0].params == {
        "strategy": "least", "ttftWeight": 0.8, "tpotWeight": 0.2, "preferIdle": True,
        "fallbackKvWeight": 1.0, "fallbackQueueWeight": 1.0, "fallbackPrefixWeight": 1.0,
    }  # fmt: skip
    assert llmd.producer.params["sloBufferFactor"] == 1.0
    assert llmd.predict_budget_ms == 400.0
    assert cfg.scheduler("headroom").predicts
    head = cfg.scheduler("headroom")
    assert [type(p).TYPE for p in head.plugins] == [
        "predicted-latency-producer", "latency-slo-admitter", "latency-cost-scorer",
        "max-score-picker",
    ]  # fmt: skip
    f = cfg.flow("headroom")
    # the gate at 0.15 s of queued prefill, not the default 0.5: chosen on `train` and judged
    # once on `holdout8` by rule 8 (session 26, docs/benchmarks.md)
    assert (f.enabled, f.max_backlog_s, f.order, f.route_to) == (True, 0.15, "shortest", "any")
    learned = cfg.scheduler("headroom-learned")
    assert [type(p).TYPE for p in learned.plugins] == [
        "predicted-latency-producer", "latency-slo-admitter", "latency-cost-scorer",
        "max-score-picker",
    ]  # fmt: skip
    assert learned.scorers[0][0].params["latency"] == "predicted"
    # headroom-learned keeps the default gate (rule 8 judged only `headroom`'s)
    assert cfg.flow("headroom-learned") == replace(f, max_backlog_s=0.5)
    with_flow = {p for p in cfg.profiles if cfg.flow(p).enabled}
    assert with_flow == {"headroom", "headroom-learned"}


def test_shipped_file_writes_out_every_parameter_of_every_plugin_it_declares():
    doc = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    reg = default_registry()
    for entry in doc["plugins"]:
        cls = reg.get(entry["type"])
        assert set(entry.get("parameters") or {}) == {p.key for p in cls.PARAMS}, entry


def test_every_registered_plugin_is_used_by_a_shipped_profile():
    cfg = load_config()
    used = {p.type for prof in cfg.profiles.values() for p, _ in prof.plugins}
    assert used == set(default_registry().types())


def test_registry_is_explicit_and_kebab_case():
    reg = default_registry()
    assert len(reg.types()) == len(ALL_PLUGINS)
    for t in reg.types():
        assert t == t.lower() and "_" not in t and " " not in t
    with pytest.raises(ValueError, match="registered twice"):
        Registry([ALL_PLUGINS[0], ALL_PLUGINS[0]])

    class Bad(Picker):
        TYPE = "Bad_Picker"

    with pytest.raises(ValueError, match="kebab-case"):
        Registry([Bad])


def test_docs_document_every_plugin_parameter_and_header():
    doc = (ROOT / "docs" / "scheduling.md").read_text()
    for cls in ALL_PLUGINS:
        assert f"`{cls.TYPE}`" in doc, cls.TYPE
        for p in cls.PARAMS:
            assert f"`{p.key}`" in doc, (cls.TYPE, p.key)
    for name in REQUIRED_PROFILES:
        assert f"`{name}`" in doc, name
    for header in ("x-llm-d-slo-ttft-ms", "x-llm-d-slo-tpot-ms", "x-slo-ttft-ms",
                   "x-slo-tpot-ms", "x-headroom-priority", "x-headroom-profile"):  # fmt: skip
        assert f"`{header}`" in doc, header
