"""The routing lab on small synthetic traces: every policy runs, nothing is lost, the same
seed gives the same report, learning policies train and predict, load ladders work."""

from __future__ import annotations

import json

import pytest

from bench.lab.compare import run_compare, table_markdown, write_outputs
from bench.lab.config import LabConfig
from bench.lab.run import auto_train_interval, load_lab_trace, run_lab
from bench.lab.saturation import estimate_saturation, sample_requests
from bench.lab.synthetic import write_azure_trace, write_mooncake_trace
from services.gateway.scheduling.config import load_config
from services.simulator.profiles import get_profile
from services.trainer.settings import TrainerSettings

POLICIES = list(load_config().profiles)
FAST_TRAINER = {"min_samples": 20, "min_new_samples": 10, "rounds": 20, "interval_s": 1.0}
KEYS = {
    "policy", "trace", "pods", "profile", "rate_scale", "seed", "requests", "completed",
    "rejected", "failed", "ttft_ms", "tpot_ms", "e2e_ms", "slo", "throughput",
    "prefix_cache_hit_rate", "prediction", "wall_seconds",
}  # fmt: skip


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    return write_mooncake_trace(tmp_path_factory.mktemp("t") / "m.jsonl", 80, rate_rps=6.0)


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    return write_azure_trace(tmp_path_factory.mktemp("t") / "a.csv", 80, rate_rps=20.0)


def cfg(trace, **kw) -> LabConfig:
    base = {"trace": str(trace), "pods": 3, "trainer_overrides": FAST_TRAINER}
    return LabConfig(**{**base, **kw})


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_serves_every_request(mooncake, policy):
    r = run_lab(cfg(mooncake, policy=policy, slo_ttft_ms=1500, slo_tpot_ms=50))
    assert KEYS <= set(r)
    assert r["policy"] == policy and r["requests"] == 80
    assert r["completed"] + r["rejected"] + r["failed"] == 80 and r["failed"] == 0
    assert 0 < r["ttft_ms"]["p50"] <= r["ttft_ms"]["p90"] <= r["ttft_ms"]["p99"]
    assert 0 < r["tpot_ms"]["p50"] < r["e2e_ms"]["p50"]
    assert 0 <= r["slo"]["attainment"] <= 1 and r["slo"]["ttft_ms"] == 1500
    assert 0 < r["prefix_cache_hit_rate"] < 1
    assert sum(r["routing"].values()) == 80


def test_same_seed_same_report_and_seed_matters(mooncake):
    a = run_lab(cfg(mooncake, policy="llmd-predicted"))
    b = run_lab(cfg(mooncake, policy="llmd-predicted"))
    c = run_lab(cfg(mooncake, policy="llmd-predicted", seed=1))
    for r in (a, b, c):
        r.pop("wall_seconds")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["ttft_ms"] != c["ttft_ms"]


def test_client_max_tokens_changes_what_the_gateway_reads_not_what_the_engines_generate(
    mooncake,
):
    longest = max(r.output_tokens for r in load_lab_trace(cfg(mooncake)).requests)
    seen: dict[str, list[int]] = {"exact": [], "cap": []}

    def watch(key):
        return lambda p, d, now: seen[key].append(p.prep.request.max_tokens)

    exact_out: list = []
    cap_out: list = []
    exact = run_lab(cfg(mooncake), on_decision=watch("exact"), records_out=exact_out)
    cap = run_lab(cfg(mooncake, client_max_tokens=4 * longest), on_decision=watch("cap"),
                  records_out=cap_out)  # fmt: skip
    assert exact["client_max_tokens"] is None and cap["client_max_tokens"] == 4 * longest
    assert set(seen["cap"]) == {4 * longest} and len(seen["cap"]) == 80
    assert sorted(seen["exact"]) == sorted(r.output_tokens for r in exact_out)
    # the engines generate the same answers either way
    assert [r.output_tokens for r in cap_out] == [r.output_tokens for r in exact_out]
    with pytest.raises(ValueError, match="below a request's output"):
        run_lab(cfg(mooncake, client_max_tokens=longest - 1))
    with pytest.raises(ValueError, match="client_max_tokens"):
        cfg(mooncake, client_max_tokens=0)


def test_flow_control_queues_in_the_lab_as_in_the_gateway(mooncake):
    """headroom's flow control: on one overloaded pod requests wait in the gateway (sent to
    dispatch grows), every request still completes, the run is deterministic, and training
    samples measure TTFT from the dispatch, as the gateway's proxy does."""
    kw = {"policy": "headroom", "pods": 1, "rate_scale": 20.0}
    a, b = run_lab(cfg(mooncake, **kw)), run_lab(cfg(mooncake, **kw))
    for r in (a, b):
        r.pop("wall_seconds")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["completed"] == 80 and sum(a["flow"]["released"].values()) == 80
    assert a["routing"] == {"cost-model": 80}  # the cost model ranked; nobody asked a model
    assert a["prediction"]["predicted_requests"] == 0
    # waited in the gateway's queue: without flow control sent -> dispatched is the ingress
    # alone (gie-default: p90 ~8 ms here), with it hundreds of ms (~500)
    gie = run_lab(cfg(mooncake, policy="gie-default", pods=1, rate_scale=20.0))
    assert gie["flow"] is None and gie["dispatch_ms"]["p90"] < 20.0
    assert a["dispatch_ms"]["p90"] > 20 * gie["dispatch_ms"]["p90"]


def test_sacrificed_requests_are_counted(mooncake):
    """The report says how many requests headroom routed as lost causes (past their TTFT
    SLO): none without SLO headers, some on an overloaded pod with a tight SLO, none for a
    profile without the cost scorer."""
    kw = {"policy": "headroom", "pods": 1, "rate_scale": 20.0}
    assert run_lab(cfg(mooncake, **kw))["sacrificed"] == 0
    tight = run_lab(cfg(mooncake, slo_ttft_ms=300.0, **kw))
    assert 0 < tight["sacrificed"] <= 80
    assert tight["sacrificed_share"] == pytest.approx(tight["sacrificed"] / 80, abs=1e-5)
    gie = run_lab(cfg(mooncake, policy="gie-default", pods=1, rate_scale=20.0, slo_ttft_ms=300.0))
    assert gie["sacrificed"] == 0


def test_learning_policy_trains_and_predicts(mooncake):
    r = run_lab(cfg(mooncake, policy="llmd-predicted", mape_after=30,
                    trainer_overrides={**FAST_TRAINER, "objective": "both"}))  # fmt: skip
    p = r["prediction"]
    assert p["samples"] == 80 and p["model_versions"] >= 1 and p["refits"] >= 1
    assert r["routing"]["predicted"] > 0 and p["fallback_decisions"] == r["routing"]["fallback"]
    assert p["ttft_mape"] is not None and p["tpot_mape"] is not None
    assert p["requests_after"] > 0 and p["ttft_p90_coverage_after"] is not None
    assert p["trainer_objective"] == "both" and p["train_interval_s"] == 1.0


def test_the_llmd_twin_learns_from_the_same_samples_and_never_routes(mooncake):
    """--llmd-twin: llmd-predicted's learner, fed the run's own samples, predicts the chosen
    pod beside the routing model; both MAPEs are read over the same requests. The routing
    is the run's without the twin, request by request."""
    kw = {"policy": "headroom-learned", "mape_after": 30, "regret_samples": 0}
    plain, twinned = [], []
    a = run_lab(cfg(mooncake, **kw), records_out=plain)
    b = run_lab(cfg(mooncake, **kw, llmd_twin=True), records_out=twinned)
    assert [(r.pod, r.first_token_s) for r in plain] == [(r.pod, r.first_token_s) for r in twinned]
    assert a["prediction"]["ttft_mape"] == b["prediction"]["ttft_mape"]
    assert "llmd_twin" not in a["prediction"]
    t = b["prediction"]["llmd_twin"]
    assert (t["feature_set"], t["point_loss"]) == ("v1", "squared")
    assert t["samples"] == b["prediction"]["samples"] and t["model_versions"] >= 1
    both = [r for r in twinned if r.trained_samples >= 30 and r.twin_ttft_ms is not None
            and r.predicted_ttft_ms is not None]  # fmt: skip
    assert t["requests"] == len(both) > 0
    # the twin's own predictions, not a copy of the routing model's
    assert any(r.twin_ttft_ms != r.predicted_ttft_ms for r in both)
    assert t["ttft_ratio"] == pytest.approx(t["ttft_mape_after"] / t["twin_ttft_mape_after"],
                                            abs=1e-3)  # fmt: skip
    assert t["tpot_ratio"] == pytest.approx(t["tpot_mape_after"] / t["twin_tpot_mape_after"],
                                            abs=1e-3)  # fmt: skip
    # lab compare's table gains the two models side by side, only when a run had the twin
    table = table_markdown([{**a, "load": 1.0}, {**b, "load": 1.0}])
    assert "llm-d twin" in table and f"| {t['ttft_ratio']:.2f} |" in table
    assert "llm-d twin" not in table_markdown([{**a, "load": 1.0}])


def test_heuristic_policy_has_null_prediction(azure):
    r = run_lab(cfg(azure, policy="gie-default"))
    assert r["trace_format"] == "azure"
    assert r["prediction"] == dict.fromkeys(
        ("ttft_mape", "tpot_mape", "samples", "model_versions", "fallback_decisions")
    )
    assert r["slo"]["attainment"] is None and r["routing"] == {"heuristic": 80}


def test_rejected_requests_when_shedding(mooncake):
    # sheddable requests with an impossible SLO on a busy cluster: the admitter sheds some
    r = run_lab(cfg(mooncake, policy="headroom", pods=1, rate_scale=2.0, priority=-1,
                    slo_ttft_ms=1.0, slo_tpot_ms=1.0))  # fmt: skip
    assert r["rejected"] > 0 and r["completed"] + r["rejected"] == 80
    assert r["slo"]["attainment"] == 0.0


def test_too_long_prompt_fails_without_crashing(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 200000, "output_length": 5, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 100, "output_length": 5, "hash_ids": [2]}\n'
    )
    r = run_lab(cfg(path, policy="least-request"))
    assert (r["completed"], r["failed"]) == (1, 1)


def test_auto_train_interval():
    s = TrainerSettings(interval_s=10.0)
    assert auto_train_interval(s, 300.0, 60) == 10.0
    assert auto_train_interval(s, 3600.0, 60) == 60.0


def test_saturation_and_rate_scale(mooncake):
    trace = load_lab_trace(cfg(mooncake))
    assert len(sample_requests(trace.requests, 40, 4)) == 40
    sat = estimate_saturation(trace.requests, get_profile("h100-llama3-8b"), 3, sample=40)
    assert sat.cluster_rps == pytest.approx(3 * sat.pod_rps) and sat.pod_rps > 0
    assert sat.rate_scale(1.0) == pytest.approx(sat.cluster_rps / sat.trace_rps)
    assert sat.rate_scale(0.5) == pytest.approx(sat.rate_scale(1.0) / 2)


def test_compare_writes_results_table_and_plots(azure, tmp_path):
    base = cfg(azure, limit=40, slo_ttft_ms=500, slo_tpot_ms=60)
    sat, results = run_compare(base, ["round-robin", "headroom"], [0.5, 1.0])
    assert [(r["load"], r["policy"]) for r in results] == [
        (0.5, "round-robin"), (0.5, "headroom"), (1.0, "round-robin"), (1.0, "headroom")
    ]  # fmt: skip
    assert results[2]["rate_scale"] == pytest.approx(sat.rate_scale(1.0))
    paths = write_outputs(results, tmp_path / "out", "test")
    names = sorted(p.name for p in paths)
    assert names == ["results.json", "slo_attainment.png", "table.md", "ttft_p90.png"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())[0]["load"] == 0.5
    assert (tmp_path / "out" / "ttft_p90.png").read_bytes()[:4] == b"\x89PNG"
    assert table_markdown(results).count("\n") == 2 + 4
    with pytest.raises(ValueError, match="unknown policies"):
        run_compare(base, ["nope"], [1.0], saturation=sat)


def test_then_trace_shifts_the_workload_and_reports_the_timeline(mooncake, azure):
    """--then-trace: the second trace's requests follow the first's (distinct ids), the
    model that ranks pods keeps being learned across the shift, and the report carries the
    rolling MAPE timeline with the shift's position and recovery summary."""
    r = run_lab(cfg(mooncake, policy="headroom-learned", then_trace=str(azure),
                    then_rate_scale=1.0, mape_after=20))  # fmt: skip
    assert r["requests"] == r["completed"] == 160 and r["then_trace"] == azure.name
    tl = r["prediction"]["mape_timeline"]
    assert tl["points"] and all(p["ttft_mape"] is not None for p in tl["points"])
    assert [p["samples"] for p in tl["points"]] == list(
        range(100, 100 * len(tl["points"]) + 1, 100)
    )
    s = tl["shift"]
    assert s["at_sample"] is not None and s["first_trace_samples"] > 0
    assert s["second_trace_samples"] > 0 and s["pre_ttft_mape"] is not None
    assert (
        r["prediction"]["shifts_detected"] == [] or "began" in r["prediction"]["shifts_detected"][0]
    )
    assert run_lab(cfg(mooncake, policy="headroom-learned"))["prediction"]["mape_timeline"][
        "shift"] is None  # fmt: skip


def test_llmd_predicted_learns_on_llmds_own_features_in_raw_ms():
    """The upstream baseline fits llm-d's eleven columns (v1) in raw ms with squared error
    unless overridden; our profiles keep the trainer's defaults (v2, log, relative)."""
    from bench.lab.run import trainer_settings

    llmd = trainer_settings(LabConfig(trace="t.jsonl", policy="llmd-predicted"))
    assert (llmd.feature_set, llmd.target_transform, llmd.point_loss) == ("v1", "none", "squared")
    assert llmd.fit_config().features == "v1"
    ours = trainer_settings(LabConfig(trace="t.jsonl", policy="headroom-learned"))
    assert (ours.feature_set, ours.target_transform, ours.point_loss) == ("v2", "log", "relative")
    override = LabConfig(
        trace="t.jsonl", policy="llmd-predicted", trainer_overrides={"feature_set": "v2"}
    )
    assert trainer_settings(override).feature_set == "v2"
