"""JetStream, SGLang and TGI parsers on realistic exposition text (the shapes each server's
Prometheus client emits: HELP/TYPE lines, histograms, _created series, process metrics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.collector.parsers import (
    PARSERS,
    parse_jetstream,
    parse_sglang,
    parse_tgi,
    parse_vllm,
)

HOST = "jetstream-llama3-8b-7d9f8c6b5-x2kqp"
JS_MODEL = "llama3_8b"  # JetStream replaces '-' in model names with '_'

PROCESS = """# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 5821.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 8.123456e+09
"""


def jetstream_page(
    prefill: float = 3.0,
    slots: tuple[float, ...] = (0.25, 0.75),
    transfer: float = 0.0,
    generate: float = 1.0,
    kv: float | None = None,
    lora: str | None = None,
) -> str:
    lab = f'id="{HOST}",model_name="{JS_MODEL}"'
    lines = [
        PROCESS,
        "# HELP jetstream_prefill_backlog_size Size of prefill queue",
        "# TYPE jetstream_prefill_backlog_size gauge",
        f"jetstream_prefill_backlog_size{{{lab}}} {prefill}",
        "# HELP jetstream_transfer_backlog_size Size of transfer queue",
        "# TYPE jetstream_transfer_backlog_size gauge",
        f'jetstream_transfer_backlog_size{{{lab},idx="0"}} {transfer}',
        "# HELP jetstream_generate_backlog_size Size of generate queue",
        "# TYPE jetstream_generate_backlog_size gauge",
        f'jetstream_generate_backlog_size{{{lab},idx="0"}} {generate}',
        "# HELP jetstream_slots_used_percentage The percentage of decode slots currently being used",
        "# TYPE jetstream_slots_used_percentage gauge",
    ]
    lines += [
        f'jetstream_slots_used_percentage{{{lab},idx="{i}"}} {v}' for i, v in enumerate(slots)
    ]
    lines += [
        "# HELP jetstream_request_success_count_total Number of requests successfully completed",
        "# TYPE jetstream_request_success_count_total counter",
        f"jetstream_request_success_count_total{{{lab}}} 1042.0",
        f"jetstream_request_success_count_created{{{lab}}} 1.7282e+09",
        "# HELP jetstream_time_to_first_token Time to first token per request in seconds",
        "# TYPE jetstream_time_to_first_token histogram",
    ]
    for le in ("0.001", "0.01", "0.1", "1.0", "10.0", "+Inf"):
        lines.append(f'jetstream_time_to_first_token_bucket{{{lab},le="{le}"}} 17.0')
    lines += [
        f"jetstream_time_to_first_token_count{{{lab}}} 17.0",
        f"jetstream_time_to_first_token_sum{{{lab}}} 2.34",
        "# HELP num_requests_waiting Number of requests waiting to be processed for inference.",
        "# TYPE num_requests_waiting gauge",
        f"num_requests_waiting{{{lab}}} {prefill}",
    ]
    if kv is not None:
        lines += [
            "# HELP kv_cache_utilization_perc kv-cache utilization % by the requests under processing.",
            "# TYPE kv_cache_utilization_perc gauge",
            f"kv_cache_utilization_perc{{{lab}}} {kv}",
        ]
    if lora is not None:
        lines += [
            "# TYPE lora_request_info gauge",
            f'lora_request_info{{{lab},max_lora="4",running_lora_adapters=""}} 1.7281e+09',
            f'lora_request_info{{{lab},max_lora="4",running_lora_adapters="{lora}"}} 1.7282e+09',
        ]
    return "\n".join(lines) + "\n"


SGL_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def sglang_page(
    running: float = 28, queue: float = 4, usage: float = 0.28, hit: float = 0.4, ranks: int = 1
) -> str:
    out = [PROCESS]
    for name, doc, value in (
        ("num_running_reqs", "The number of running requests.", running),
        ("num_used_tokens", "The number of used tokens.", 123_123),
        ("token_usage", "The token usage.", usage),
        ("gen_throughput", "The generation throughput (token/s).", 86.5),
        ("num_queue_reqs", "The number of requests in the waiting queue.", queue),
        ("cache_hit_rate", "The prefix cache hit rate.", hit),
    ):
        out += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
        out += [
            f'sglang:{name}{{model_name="{SGL_MODEL}",tp_rank="0",dp_rank="{r}"}} {value}'
            for r in range(ranks)
        ]
    out += [
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{model_name="{SGL_MODEL}"}} 8.128902e+06',
        "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",model_name="{SGL_MODEL}"}} 12.0',
        f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="{SGL_MODEL}"}} 40.0',
        f'sglang:time_to_first_token_seconds_count{{model_name="{SGL_MODEL}"}} 40.0',
        f'sglang:time_to_first_token_seconds_sum{{model_name="{SGL_MODEL}"}} 12.5',
    ]
    return "\n".join(out) + "\n"


def tgi_page(queue: float = 5, batch: float = 12) -> str:
    """The Rust metrics-exporter-prometheus shape TGI's router serves (no HELP lines)."""
    return f"""# TYPE tgi_request_count counter
tgi_request_count 1342
# TYPE tgi_request_success counter
tgi_request_success 1337
# TYPE tgi_queue_size gauge
tgi_queue_size {queue}
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size {batch}
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 20480
# TYPE tgi_request_duration summary
tgi_request_duration{{quantile="0.5"}} 1.2
tgi_request_duration{{quantile="0.99"}} 4.8
tgi_request_duration_sum 1800.5
tgi_request_duration_count 1337
# TYPE tgi_batch_inference_duration histogram
tgi_batch_inference_duration_bucket{{method="decode",le="0.01"}} 900
tgi_batch_inference_duration_bucket{{method="decode",le="+Inf"}} 1000
tgi_batch_inference_duration_sum{{method="decode"}} 8.7
tgi_batch_inference_duration_count{{method="decode"}} 1000
"""


# --------------------------------------------------------------------------------------
# JetStream
# --------------------------------------------------------------------------------------
def test_jetstream_realistic_page():
    r = parse_jetstream(jetstream_page(prefill=3, slots=(0.25, 0.75), generate=1, transfer=2))
    assert r.prefill_backlog == 3.0
    assert r.waiting == 6.0  # prefill + transfer + generate: nothing of it decodes yet
    assert r.running == 0.0
    assert r.slots_used == pytest.approx(0.5)
    assert r.kv_usage == pytest.approx(0.5)  # no KV metric: slots used stands in
    assert r.models == [JS_MODEL]
    assert r.ignored == 0 and r.found > 0


def test_jetstream_docs_sample_without_model_label():
    page = (
        "# HELP jetstream_prefill_backlog_size Size of prefill queue\n"
        "# TYPE jetstream_prefill_backlog_size gauge\n"
        'jetstream_prefill_backlog_size{id="SOME-HOSTNAME-HERE>"} 0.0\n'
        "# HELP jetstream_slots_used_percentage The percentage of decode slots currently being used\n"
        "# TYPE jetstream_slots_used_percentage gauge\n"
        'jetstream_slots_used_percentage{id="<SOME-HOSTNAME-HERE>",idx="0"} 0.04166666666666663\n'
    )
    r = parse_jetstream(page)
    assert r.slots_used == pytest.approx(1 / 24)
    assert (r.prefill_backlog, r.waiting, r.models) == (0.0, 0.0, [])


def test_jetstream_kv_metric_wins_and_percent_values_are_scaled():
    r = parse_jetstream(jetstream_page(slots=(50.0,), kv=0.8))
    assert r.kv_usage == pytest.approx(0.8)
    assert r.slots_used == pytest.approx(0.5)  # 50 read as a percentage


def test_jetstream_lora_newest():
    assert parse_jetstream(jetstream_page(lora="a,b")).lora_adapters == ["a", "b"]


def test_jetstream_ignores_vllm_pages_and_vice_versa():
    from tests.unit.test_collector_parsers import vllm_page

    assert parse_jetstream(vllm_page()).found == 0
    assert parse_vllm(jetstream_page()).found == 0
    # a foreign page that only shares the un-prefixed names is not a JetStream page
    assert parse_jetstream('kv_cache_utilization_perc{id="x"} 0.5\n').found == 0


def test_jetstream_malformed_counted():
    page = jetstream_page(prefill=2) + (
        'jetstream_prefill_backlog_size{id="y"} NaN\n'
        'jetstream_slots_used_percentage{id="y",idx="1" 0.3\n'
        "jetstream_generate_backlog_size{} nope\n"
        "!!! 1\n"
    )
    r = parse_jetstream(page)
    assert r.prefill_backlog == 2.0
    assert r.ignored == 4


# --------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------
def test_sglang_realistic_page():
    r = parse_sglang(sglang_page(running=28, queue=4, usage=0.28, hit=0.4))
    assert (r.running, r.waiting, r.prefill_backlog) == (28.0, 4.0, 4.0)
    assert r.kv_usage == pytest.approx(0.28)
    assert r.prefix_hit_rate == pytest.approx(0.4)
    assert r.slots_used is None
    assert r.models == [SGL_MODEL]
    assert r.ignored == 0


def test_sglang_sums_schedulers_and_averages_fractions():
    r = parse_sglang(sglang_page(running=10, queue=1, usage=0.5, hit=0.2, ranks=4))
    assert (r.running, r.waiting) == (40.0, 4.0)
    assert r.kv_usage == pytest.approx(0.5) and r.prefix_hit_rate == pytest.approx(0.2)


def test_sglang_malformed_counted():
    r = parse_sglang(
        sglang_page() + "sglang:num_queue_reqs{model_name=x} 3\nsglang:token_usage -Inf\n"
    )
    assert r.waiting == 4.0 and r.ignored == 2


# --------------------------------------------------------------------------------------
# TGI
# --------------------------------------------------------------------------------------
def test_tgi_realistic_page():
    r = parse_tgi(tgi_page(queue=5, batch=12))
    assert (r.waiting, r.running, r.prefill_backlog) == (5.0, 12.0, 5.0)
    assert (r.kv_usage, r.prefix_hit_rate, r.models) == (0.0, 0.0, [])
    assert r.ignored == 0 and r.found == 2


def test_tgi_malformed_counted():
    r = parse_tgi(tgi_page() + "tgi_queue_size abc\ntgi_batch_current_size 1 2 3\n")
    assert (r.waiting, r.running, r.ignored) == (5.0, 12.0, 2)


# --------------------------------------------------------------------------------------
# All engines
# --------------------------------------------------------------------------------------
def test_registry_has_four_engines():
    assert set(PARSERS) == {"vllm", "jetstream", "sglang", "tgi"}


@pytest.mark.parametrize("engine", sorted(PARSERS))
@pytest.mark.parametrize("text", ["", "# only comments\n", "<html>404</html>", "up 1\n"])
def test_foreign_pages_have_no_metrics(engine, text):
    r = PARSERS[engine](text)
    assert r.found == 0 and r.waiting == 0 and r.running == 0


@pytest.mark.parametrize("engine", sorted(PARSERS))
@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_never_raises_on_garbage(engine, text):
    r = PARSERS[engine](text)
    assert 0.0 <= r.kv_usage <= 1.0 and 0.0 <= r.prefix_hit_rate <= 1.0
    assert r.slots_used is None or 0.0 <= r.slots_used <= 1.0
    assert r.ignored >= 0
