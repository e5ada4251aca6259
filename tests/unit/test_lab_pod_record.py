"""The lab's stats -> PodRecord adapter agrees with what the collector parses from the
simulator's real /metrics exposition (vLLM and JetStream profiles)."""

from __future__ import annotations

import pytest

from services.collector.parsers import parse_jetstream, parse_vllm
from services.simulator.engine import Engine
from services.simulator.metrics import PodMetrics
from services.simulator.pod_record import pod_record
from services.simulator.profiles import get_profile
from shared.tokenizer import synth_tokens

MODEL = "m"


def busy_engine(profile_name: str) -> Engine:
    e = Engine(get_profile(profile_name), seed=1)
    shared = synth_tokens(256, 7)
    for i in range(12):
        e.submit(f"r{i}", shared + synth_tokens(300 + 50 * i, i), 40, 0.0)
    now = 0.0
    for _ in range(25):
        now += e.step(now).duration_s
    return e


@pytest.mark.parametrize(
    ("profile", "parse"),
    [("h100-llama3-8b", parse_vllm), ("a100-llama3-8b", parse_vllm),
     ("tpu-v5e-llama3-8b", parse_jetstream)],
)  # fmt: skip
def test_adapter_matches_collector_parse_of_the_exposition(profile, parse):
    e = busy_engine(profile)
    parsed = parse(PodMetrics(e, MODEL, "pod-0").render().decode())
    rec = pod_record(e.stats(), e.profile, name="pod-0", url="u", model=MODEL, scraped_at=3.0)
    assert rec.ready and rec.scraped_at == 3.0 and rec.models == [MODEL]
    assert rec.engine == e.profile.engine
    assert rec.waiting == pytest.approx(parsed.waiting)
    assert rec.running == pytest.approx(parsed.running)
    assert rec.kv_usage == pytest.approx(parsed.kv_usage, abs=1e-9)
    assert rec.prefix_hit_rate == pytest.approx(parsed.prefix_hit_rate, abs=1e-9)
    assert rec.waiting + rec.running + rec.kv_usage > 0
    assert rec.max_model_len == e.max_request_tokens  # what the pod's /v1/models reports
    assert rec.hardware_class == parsed.hardware_class == e.profile.hardware_class
    assert parsed.hardware_class.startswith(("nvidia-", "tpu-"))


def test_idle_engine_record():
    e = Engine(get_profile("h100-llama3-8b"))
    rec = pod_record(e.stats(), e.profile, name="p", url="u", model=MODEL, scraped_at=0.0)
    assert (rec.waiting, rec.running, rec.kv_usage, rec.prefix_hit_rate) == (0, 0, 0, 0)
