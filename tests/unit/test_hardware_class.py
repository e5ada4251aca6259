"""Mixed hardware: pool specs, each pod's hardware class from its metrics or its Kubernetes
label into the pod record, and one prefill cost model per class."""

from __future__ import annotations

import pytest

from bench.lab.config import LabConfig
from bench.lab.run import run_lab
from bench.lab.saturation import estimate_saturation
from bench.lab.synthetic import write_mooncake_trace
from services.collector.discovery import PodTarget
from services.collector.k8s_discovery import PodSet, pod_target
from services.collector.parsers import ParseResult, parse_vllm
from services.collector.scraper import record_from_result
from services.collector.settings import CollectorSettings
from services.gateway.scheduling.cost_model import ClassCostModels, PrefillCostModel
from services.gateway.scheduling.pod_view import PodView
from services.simulator.engine import Engine
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import get_profile, parse_pool
from services.simulator.settings import SimulatorSettings
from shared.schemas import PodRecord, PodSnapshot
from tests.integration.k8s_fake_api import make_pod

H100, A100 = "h100-llama3-8b", "a100-llama3-8b"


def test_parse_pool():
    assert parse_pool(H100, 3) == [H100] * 3
    assert parse_pool(f"{H100}:2, {A100}:1", 3) == [H100, H100, A100]
    for bad, match in [(f"{H100}:2,{A100}:1", "sum to 3"), (f"{H100}:x", "PROFILE:COUNT"),
                       (f"{H100}:0,{A100}:4", "PROFILE:COUNT"), ("nope:4", "unknown"),
                       ("", "empty")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            parse_pool(bad, 4)


def test_a100_is_slower_than_h100_and_both_have_a_class():
    h, a = get_profile(H100), get_profile(A100)
    assert (h.hardware_class, a.hardware_class) == ("nvidia-h100-80gb", "nvidia-a100-80gb")
    assert a.max_num_batched_tokens == 2048 and a.max_num_seqs == 256  # vLLM's A100 defaults
    assert a.gpu_blocks_for(0.9, 16) == a.num_gpu_blocks

    def prefill_s(profile) -> float:
        e = Engine(profile.with_overrides(jitter=0.0, api_jitter=0.0), 0)
        e.submit("r", list(range(1, 8001)), 1, 0.0)
        now = 0.0
        while e.has_work():
            now += e.step(now).duration_s
        return now

    assert 1.8 < prefill_s(a) / prefill_s(h) < 3.5


def test_simulator_settings_accept_a_mixed_pool():
    s = SimulatorSettings(ports="9001,9002,9003", profile=f"{H100}:1,{A100}:2")
    assert [r.profile.name for r in s.resolved_pool()] == [H100, A100, A100]
    assert SimulatorSettings(ports="9001,9002").resolved_pool()[1].profile.name == H100
    with pytest.raises(ValueError, match="sum to"):
        SimulatorSettings(ports="9001,9002", profile=f"{H100}:1,{A100}:2")
    with pytest.raises(ValueError, match="unknown profile"):
        SimulatorSettings(ports="9001", profile="b200:1")


def test_the_simulator_exposes_its_class_and_the_collector_reads_it():
    page = PodMetrics(Engine(get_profile(A100)), "m", "pod-0").render().decode()
    assert 'headroom_hardware_info{class="nvidia-a100-80gb"} 1.0' in page
    parsed = parse_vllm(page)
    assert parsed.hardware_class == "nvidia-a100-80gb"
    # not one of the engine's own metrics: a page with only the info gauge holds none
    assert parse_vllm('headroom_hardware_info{class="x"} 1\n').found == 0
    assert parse_vllm('headroom_hardware_info{class=""} 1\n').ignored == 1
    rec = record_from_result(PodTarget("p", "http://p"), "vllm", parsed, 1.0)
    assert rec.hardware_class == "nvidia-a100-80gb"


def test_the_kubernetes_label_names_the_class_and_wins_over_the_page():
    key = CollectorSettings().k8s_hardware_class_label
    assert key == "headroom.dev/hardware-class"
    pod = make_pod("a", "10.0.0.9", labels={key: "nvidia-h100-80gb", "app": "vllm"})
    t = pod_target(pod, 8000, hardware_class_label=key)
    assert t.hardware_class == "nvidia-h100-80gb"
    assert pod_target(pod, 8000).hardware_class is None  # no label key configured
    assert pod_target(make_pod("b"), 8000, hardware_class_label=key).hardware_class is None
    ps = PodSet(8000, hardware_class_label=key)
    ps.replace([pod])
    assert ps.targets()[0].hardware_class == "nvidia-h100-80gb"
    relabelled = make_pod("a", "10.0.0.9", labels={key: "nvidia-a100-80gb"})
    assert ps.apply("MODIFIED", relabelled)  # a relabel is a change of target
    page = ParseResult(hardware_class="from-page")
    assert record_from_result(ps.targets()[0], "vllm", page, 1.0).hardware_class == (
        "nvidia-a100-80gb"
    )
    unlabelled = PodTarget("c", "http://c")
    assert record_from_result(unlabelled, "vllm", page, 1.0).hardware_class == "from-page"


def test_pod_record_round_trips_the_class():
    rec = PodRecord("p", "u", True, 1.0, ["m"], hardware_class="nvidia-a100-80gb")
    snap = PodSnapshot.decode(PodSnapshot("pool", 1.0, [rec]).encode())
    assert snap.pods[0].hardware_class == "nvidia-a100-80gb"
    with pytest.raises(ValueError):
        PodSnapshot.from_dict({**PodSnapshot("pool", 1.0, [rec]).to_dict(),
                               "pods": [{**rec.to_dict(), "hardware_class": 3}]})  # fmt: skip


def test_class_cost_models_learn_each_class_apart():
    m = ClassCostModels()
    fast, slow = m.for_class("h100"), m.for_class("a100")
    assert fast is m.for_class("h100") and fast is not slow
    for _ in range(300):
        fast.observe(8000, 0, 0.25)
        slow.observe(8000, 0, 0.60)
    assert slow.estimate(8000) == pytest.approx(0.60, rel=0.05)
    assert fast.estimate(8000) == pytest.approx(0.25, rel=0.05)
    assert m.observations == 600
    assert m.estimate(8000) == PrefillCostModel().estimate(8000)  # unknown class: the prior
    single = PrefillCostModel()
    assert single.for_class("a100") is single  # one model keeps serving every class


def view_with(classes: dict[str, str | None]) -> PodView:
    v = PodView()
    recs = [PodRecord(n, f"http://{n}", True, 0.0, ["m"], hardware_class=c)
            for n, c in classes.items()]  # fmt: skip
    v.apply_snapshot(PodSnapshot("pool", 0.0, recs))
    return v


def test_pod_view_teaches_and_charges_each_pod_at_its_class():
    v = view_with({"h": "nvidia-h100-80gb", "a": "nvidia-a100-80gb"})
    t = 0.0
    for i in range(200):  # idle-pod first tokens: the A100 takes 2.4x the H100's time
        for pod, secs in (("h", 0.25), ("a", 0.60)):
            v.on_dispatch(f"{pod}{i}", pod, 8000, 10, t)
            v.on_first_token(f"{pod}{i}", t + secs)
            v.on_finish(f"{pod}{i}")
        t += 1.0
    v.on_dispatch("x", "h", 8000, 10, t)
    v.on_dispatch("y", "a", 8000, 10, t)
    by = {c.name: c for c in v.candidates("m", t)}
    assert by["a"].backlog_s == pytest.approx(0.60, rel=0.05)
    assert by["h"].backlog_s == pytest.approx(0.25, rel=0.05)
    assert by["a"].hardware_class == "nvidia-a100-80gb"


def test_lab_runs_a_mixed_pool_with_its_own_saturation(tmp_path):
    path = write_mooncake_trace(tmp_path / "m.jsonl", 60, rate_rps=6.0)
    cfg = LabConfig(trace=str(path), pods=3, profile=f"{H100}:2,{A100}:1", regret_samples=5)
    assert [p.name for p in cfg.pod_profiles()] == [H100, H100, A100]
    r = run_lab(cfg)
    assert r["completed"] == 60 and r["profile"] == f"{H100}:2,{A100}:1"
    assert len(r["engine"]) == 2 and r["regret_ms"]["sampled"] == 5
    from bench.lab.run import load_lab_trace

    reqs = load_lab_trace(cfg).requests
    mixed = estimate_saturation(reqs, cfg.pod_profiles(), 3)
    h = estimate_saturation(reqs, get_profile(H100), 1).cluster_rps
    a = estimate_saturation(reqs, get_profile(A100), 1).cluster_rps
    assert mixed.cluster_rps == pytest.approx(2 * h + a)
    assert a < h
