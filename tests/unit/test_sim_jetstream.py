"""JetStream-style TPU profile: engine field, /metrics exposition with JetStream names."""

from __future__ import annotations

import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.simulator.engine import Engine, run_until_idle
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import PROFILES, Profile, get_profile

TPU = get_profile("tpu-v5e-llama3-8b")
JETSTREAM_GAUGES = (
    "jetstream_prefill_backlog_size",
    "jetstream_slots_used_percentage",
    "jetstream_transfer_backlog_size",
    "jetstream_generate_backlog_size",
)
JETSTREAM_HISTOGRAMS = ("jetstream_time_to_first_token", "jetstream_time_per_output_token")


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


def scrape(m: PodMetrics) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            key = s.labels.get("le", "")
            out.setdefault(s.name, {})[key] = s.value
            out.setdefault("_labels", {}).update({k: 0 for k in s.labels if k != "le"})
    return out


def test_profile_engines():
    assert TPU.engine == "jetstream"
    assert {p.engine for n, p in PROFILES.items() if n != TPU.name} == {"vllm"}
    with pytest.raises(ValueError, match="unknown engine"):
        Profile(name="x", max_num_seqs=1, max_num_batched_tokens=1, num_gpu_blocks=1, engine="tgi")


def test_jetstream_names_replace_vllm_names():
    m = PodMetrics(Engine(TPU, seed=0), "llama", pod_id="tpu-0")
    text = m.render().decode()
    assert "vllm:" not in text
    got = scrape(m)
    for name in JETSTREAM_GAUGES:
        assert got[name] == {"": 0.0}
    for name in JETSTREAM_HISTOGRAMS:
        assert got[f"{name}_count"] == {"": 0.0}
    # "class" is headroom_hardware_info's label (the pod's hardware class)
    assert set(got["_labels"]) == {"id", "model_name", "class"}
    assert 'id="tpu-0"' in text and 'model_name="llama"' in text


def test_jetstream_gauges_follow_the_engine():
    e = Engine(TPU.with_overrides(max_num_seqs=4), seed=0)
    m = PodMetrics(e, "llama")
    for i in range(6):
        e.submit(f"r{i}", toks(100, i), 8, 0.0)
    got = scrape(m)
    assert got["jetstream_prefill_backlog_size"][""] == 6
    assert got["jetstream_slots_used_percentage"][""] == 0
    m.record(e.step(1.0))
    got = scrape(m)
    assert got["jetstream_prefill_backlog_size"][""] == 2
    assert got["jetstream_slots_used_percentage"][""] == pytest.approx(1.0)


def test_jetstream_histograms_count_requests_and_per_request_tpot():
    e = Engine(TPU.with_overrides(jitter=0.0), seed=0)
    m = PodMetrics(e, "llama")
    e.submit("a", toks(50, 1), 10, 0.0)
    e.submit("b", toks(50, 2), 1, 0.0)  # one token: no TPOT observation
    _, log = run_until_idle(e, 0.0)
    for _, out in log:
        m.record(out)
    got = scrape(m)
    assert got["jetstream_time_to_first_token_count"][""] == 2
    assert got["jetstream_time_per_output_token_count"][""] == 1
    [tpot] = [x for _, o in log for x in o.tpot_s]
    itl = [x for _, o in log for x in o.itl_s]
    assert tpot == pytest.approx(sum(itl) / len(itl))
    assert got["jetstream_time_per_output_token_sum"][""] == pytest.approx(tpot)
    assert got["jetstream_time_per_output_token_bucket"]["+Inf"] == 1


def test_vllm_profile_still_exposes_vllm_names_only():
    text = PodMetrics(Engine(get_profile("h100-llama3-8b")), "m").render().decode()
    assert "vllm:num_requests_waiting" in text and "jetstream_" not in text
