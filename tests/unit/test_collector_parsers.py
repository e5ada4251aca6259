"""The Prometheus line parser and the vLLM metrics parser on realistic exposition text."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.collector.parsers import (
    PARSERS,
    MalformedLine,
    get_parser,
    iter_samples,
    parse_sample,
    parse_vllm,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_TTFT_BUCKETS = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25",
                 "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "+Inf")  # fmt: skip


def _engine_block(engine: str, model: str, waiting, running, kv, hits, queries, kv_name) -> str:
    lab = f'engine="{engine}",model_name="{model}"'
    lines = [
        f"vllm:num_requests_running{{{lab}}} {running}",
        f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        f"vllm:{kv_name}{{{lab}}} {kv}",
        f"vllm:prefix_cache_queries_total{{{lab}}} {queries}",
        f"vllm:prefix_cache_queries_created{{{lab}}} 1.7281e+09",
        f"vllm:prefix_cache_hits_total{{{lab}}} {hits}",
        f"vllm:num_preemptions_total{{{lab}}} 0.0",
        f"vllm:prompt_tokens_total{{{lab}}} 123456.0",
        f"vllm:generation_tokens_total{{{lab}}} 65432.0",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} 310.0',
        f'vllm:request_success_total{{{lab},finished_reason="length"}} 12.0',
    ]
    for le in _TTFT_BUCKETS:
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} 7.0')
    lines += [
        f"vllm:time_to_first_token_seconds_count{{{lab}}} 7.0",
        f"vllm:time_to_first_token_seconds_sum{{{lab}}} 0.5123",
    ]
    return "\n".join(lines)


def vllm_page(
    waiting: float = 2.0,
    running: float = 5.0,
    kv: float = 0.25,
    hits: float = 300.0,
    queries: float = 1200.0,
    *,
    model: str = MODEL,
    engines: int = 1,
    kv_name: str = "kv_cache_usage_perc",
    lora_running: str | None = None,
) -> str:
    """A vLLM-V1-like /metrics page (HELP/TYPE lines, histograms, info gauges, process
    metrics). With several engines each engine reports the given values."""
    head = f"""# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{{generation="0"}} 12345.0
python_gc_objects_collected_total{{generation="1"}} 678.0
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 42.17
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
# HELP vllm:{kv_name} KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:{kv_name} gauge
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="26000",prefix_caching_hash_algo="sha256"}} 1.0
"""
    blocks = [
        _engine_block(str(e), model, waiting, running, kv, hits, queries, kv_name)
        for e in range(engines)
    ]
    tail = ""
    if lora_running is not None:
        tail = (
            "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
            "# TYPE vllm:lora_requests_info gauge\n"
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="",'
            'waiting_lora_adapters=""} 1.7281e+09\n'
            f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{lora_running}",'
            'waiting_lora_adapters="sql-lora"} 1.7282e+09\n'
        )
    return head + "\n".join(blocks) + "\n" + tail


# --------------------------------------------------------------------------------------
# Line parser
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, name, labels, value",
    [
        ("up 1", "up", {}, 1.0),
        ("process_cpu_seconds_total 42.17", "process_cpu_seconds_total", {}, 42.17),
        ('vllm:x{a="b"} 3.5', "vllm:x", {"a": "b"}, 3.5),
        ('m{a="b",} 2', "m", {"a": "b"}, 2.0),
        ('m{ a = "b" , c="d" } 2', "m", {"a": "b", "c": "d"}, 2.0),
        ("m{} 7", "m", {}, 7.0),
        ('m{le="+Inf"} 9', "m", {"le": "+Inf"}, 9.0),
        ('m{a="x,y=z"} 1', "m", {"a": "x,y=z"}, 1.0),
        (r'm{a="say \"hi\", ok",b="c"} 1', "m", {"a": 'say "hi", ok', "b": "c"}, 1.0),
        (r'm{path="C:\\dir\\"} 1', "m", {"path": "C:\\dir\\"}, 1.0),
        (r'm{a="line\nbreak"} 1', "m", {"a": "line\nbreak"}, 1.0),
        ('m{a="b"} 1 1700000000000', "m", {"a": "b"}, 1.0),
        ("m 1.5e+09", "m", {}, 1.5e9),
        ("m +Inf", "m", {}, math.inf),
        ("m -Inf", "m", {}, -math.inf),
        ('m{a="b"} 3 # {trace_id="abc"} 0.5', "m", {"a": "b"}, 3.0),
        ("  m\t4  ", "m", {}, 4.0),
    ],
)
def test_parse_sample_valid(line, name, labels, value):
    s = parse_sample(line)
    assert (s.name, s.labels, s.value) == (name, labels, value)


def test_parse_sample_nan():
    assert math.isnan(parse_sample("m NaN").value)


@pytest.mark.parametrize(
    "line",
    [
        "m",
        'm{a="b"}',
        "m abc",
        "m 1 2 3",
        "m 1 notatimestamp",
        "9m 1",
        'm{a="b" 1',
        "m{a=b} 1",
        'm{a="b} 1',
        'm{"a"="b"} 1',
        'm{a="b"c="d"} 1',
        "m{a} 1",
    ],
)
def test_parse_sample_malformed(line):
    with pytest.raises(MalformedLine):
        parse_sample(line)


def test_iter_samples_filters_and_flags_malformed():
    text = '# HELP a x\n# TYPE a gauge\na 1\nb{x="y"} 2\n\nbroken line here\n9bad 1\nc\n'
    out = list(iter_samples(text, frozenset({"a"})))
    assert [s.name for s in out if s] == ["a"]
    # "broken line here" has a valid-looking name and is only checked when wanted;
    # "9bad" (bad name) and "c" (no value) are flagged.
    assert sum(1 for s in out if s is None) == 2
    assert len([s for s in iter_samples(text) if s is None]) == 3


# --------------------------------------------------------------------------------------
# vLLM parser
# --------------------------------------------------------------------------------------
def test_vllm_realistic_page():
    r = parse_vllm(vllm_page(waiting=3, running=7, kv=0.42, hits=250, queries=1000))
    assert (r.waiting, r.running) == (3.0, 7.0)
    assert r.kv_usage == pytest.approx(0.42)
    assert r.prefix_hit_rate == pytest.approx(0.25)
    assert r.models == [MODEL]
    assert r.lora_adapters == []
    assert r.ignored == 0
    assert r.found > 0


def test_vllm_kv_capacity_from_cache_config_info():
    assert parse_vllm(vllm_page()).kv_capacity_tokens == 26000 * 16
    two = (
        'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="100"} 1.0\n'
        'vllm:cache_config_info{engine="1",block_size="32",num_gpu_blocks="10"} 1.0\n'
    )
    r = parse_vllm(vllm_page().split("# HELP vllm:cache_config_info")[0] + two)
    assert r.kv_capacity_tokens == 100 * 16 + 10 * 32
    bad = 'vllm:cache_config_info{engine="0",block_size="x",num_gpu_blocks="100"} 1.0\n'
    r = parse_vllm(vllm_page().split("# HELP vllm:cache_config_info")[0] + bad)
    assert r.kv_capacity_tokens is None and r.ignored == 1


def test_vllm_old_kv_name():
    r = parse_vllm(vllm_page(kv=0.6, kv_name="gpu_cache_usage_perc"))
    assert r.kv_usage == pytest.approx(0.6)


def test_vllm_new_kv_name_wins_over_old():
    page = vllm_page(kv=0.3) + f'vllm:gpu_cache_usage_perc{{model_name="{MODEL}"}} 0.9\n'
    assert parse_vllm(page).kv_usage == pytest.approx(0.3)


def test_vllm_sums_over_engines_and_averages_kv():
    r = parse_vllm(vllm_page(waiting=2, running=5, kv=0.4, hits=100, queries=400, engines=3))
    assert (r.waiting, r.running) == (6.0, 15.0)
    assert r.kv_usage == pytest.approx(0.4)
    assert r.prefix_hit_rate == pytest.approx(0.25)


def test_vllm_several_models():
    page = vllm_page(model="a") + _engine_block("1", "b", 1, 1, 0.2, 0, 0, "kv_cache_usage_perc")
    r = parse_vllm(page + "\n")
    assert r.models == ["a", "b"]
    assert r.waiting == 3.0


def test_vllm_no_queries_gives_zero_hit_rate():
    assert parse_vllm(vllm_page(hits=0, queries=0)).prefix_hit_rate == 0.0


def test_vllm_lora_newest_label_set():
    r = parse_vllm(vllm_page(lora_running="sql-lora, chat-lora,sql-lora"))
    assert r.lora_adapters == ["chat-lora", "sql-lora"]


def test_vllm_lora_escaped_label():
    page = (
        vllm_page()
        + r'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a\"q,b",waiting_lora_adapters=""} 5'
        + "\n"
    )
    assert parse_vllm(page).lora_adapters == ['a"q', "b"]


def test_vllm_malformed_and_nonfinite_are_ignored_and_counted():
    page = vllm_page(waiting=1, running=2) + (
        'vllm:num_requests_waiting{engine="9"} NaN\n'  # non-finite wanted value
        'vllm:num_requests_running{engine="9"} +Inf\n'
        'vllm:num_requests_running{engine="9" 4\n'  # malformed wanted line
        'vllm:kv_cache_usage_perc{engine="9"} abc\n'
        "}}}garbage{{{\n"  # bad name
        "lonely_name_without_value\n"
        'some_other_metric{x="NaN"} NaN\n'  # unwanted NaN is fine
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} +Inf\n'
    )
    r = parse_vllm(page)
    assert (r.waiting, r.running) == (1.0, 2.0)
    assert r.ignored == 6


def test_vllm_clamps_ranges():
    page = (
        'vllm:kv_cache_usage_perc{engine="0"} 1.7\n'
        'vllm:num_requests_waiting{engine="0"} -3\n'
        'vllm:prefix_cache_hits_total{engine="0"} 50\n'
        'vllm:prefix_cache_queries_total{engine="0"} 10\n'
    )
    r = parse_vllm(page)
    assert (r.kv_usage, r.waiting, r.prefix_hit_rate) == (1.0, 0.0, 1.0)


@pytest.mark.parametrize("text", ["", "\n\n", "# only comments\n", "<html>404</html>"])
def test_vllm_empty_or_foreign_pages(text):
    r = parse_vllm(text)
    assert r.found == 0
    assert (r.waiting, r.running, r.kv_usage, r.prefix_hit_rate) == (0, 0, 0, 0)


def test_crlf_line_endings():
    r = parse_vllm(vllm_page(waiting=4).replace("\n", "\r\n"))
    assert r.waiting == 4.0 and r.ignored == 0


def test_registry():
    assert PARSERS["vllm"] is parse_vllm
    assert get_parser("vllm") is parse_vllm
    with pytest.raises(ValueError, match="unknown engine"):
        get_parser("nope")


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------
_label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=200, deadline=None)
@given(
    labels=st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _label_values, max_size=4),
    value=st.floats(allow_nan=False),
)  # fmt: skip
def test_roundtrip_escaped_labels(labels, value):
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    s = parse_sample(f"metric_x{{{body}}} {value!r}")
    assert s.labels == labels
    assert s.value == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_vllm_never_raises_on_garbage(text):
    r = parse_vllm(text)
    assert 0.0 <= r.kv_usage <= 1.0 and 0.0 <= r.prefix_hit_rate <= 1.0
    assert r.ignored >= 0
