"""A JetStream-style pod over real HTTP: serves the OpenAI API, /metrics has JetStream names."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.simulator.server import start_pod

pytestmark = pytest.mark.timeout(60)


async def test_tpu_pod_serves_and_exposes_jetstream_metrics():
    pod = await start_pod("tpu-0", profile="tpu-v5e-llama3-8b", seed=1)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            body = {"prompt": "hello there tpu", "max_tokens": 5}
            for _ in range(2):
                async with http.post(pod.url + "/v1/completions", json=body) as r:
                    assert r.status == 200
                    assert (await r.json())["usage"]["completion_tokens"] == 5
            async with http.get(pod.url + "/metrics") as r:
                assert r.status == 200
                text = await r.text()
    finally:
        await pod.stop()
    samples = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert not any(name.startswith("vllm:") for name in samples)
    assert samples["jetstream_prefill_backlog_size"].value == 0
    assert samples["jetstream_slots_used_percentage"].value == 0
    assert samples["jetstream_transfer_backlog_size"].value == 0
    assert samples["jetstream_generate_backlog_size"].value == 0
    assert samples["jetstream_time_to_first_token_count"].value == 2
    assert samples["jetstream_time_per_output_token_count"].value == 2
    assert samples["jetstream_prefill_backlog_size"].labels == {
        "id": "tpu-0",
        "model_name": pod.model,
    }
