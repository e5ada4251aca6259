"""The shared feature builder and tokenizer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.features import (
    ALL_COLUMNS,
    FEATURE_SETS,
    FEATURES,
    FEATURES_V1,
    FEATURES_V2,
    SUPPORTED_MODEL_SCHEMAS,
    TPOT_COLUMNS,
    TTFT_COLUMNS,
    V2_COLUMNS,
    PodLoad,
    RowContext,
    build_row,
    hardware_class_code,
    prefix_bucket,
    select,
)
from shared.tokenizer import block_hashes, count_tokens, synth_text, tokenize


def test_row_layout_follows_schema():
    row = build_row(
        1000, 0.5, PodLoad(waiting=2, running=5, kv_usage=0.3, prefill_tokens_in_flight=400,
                          decode_tokens_in_flight=64, unseen_requests=1),
        RowContext(max_tokens=128, service_s=0.25, backlog_s=1.5, protected_decodes=4,
                   gateway_queued=7, hardware_class="nvidia-a100-80gb"),
    )  # fmt: skip
    named = dict(zip(FEATURES, row, strict=True))
    assert named == {
        "is_queued": 1.0,
        "kv_cache_percentage": 0.3,
        "input_token_length": 1000.0,
        "num_request_waiting": 3.0,
        "num_request_running": 5.0,
        "prefill_tokens_in_flight": 400.0,
        "decode_tokens_in_flight": 64.0,
        "prefix_cache_score": 0.5,
        "effective_input_tokens": 500.0,
        "prefix_score_bucket": 2.0,
        "pod_type": 0.0,
        "max_tokens": 128.0,
        "backlog_ms": 1500.0,
        "service_ms": 250.0,
        "estimate_ms": 1750.0,
        "protected_decodes": 4.0,
        "decode_batch": 9.0,
        "gateway_queued": 7.0,
        "hardware_class": hardware_class_code("nvidia-a100-80gb"),
    }
    assert select(row, TPOT_COLUMNS) == [1.0, 0.3, 1000.0, 3.0, 5.0, 400.0, 64.0, 0.0]
    # v1 (llm-d's eleven) is the first eleven columns, unchanged; v2 the first eighteen,
    # unchanged; v3 reads every column
    assert FEATURES[: len(FEATURES_V1)] == FEATURES_V1 and len(FEATURES_V1) == 11
    assert FEATURES[: len(FEATURES_V2)] == FEATURES_V2 and len(FEATURES_V2) == 18
    assert FEATURE_SETS["v1"]["ttft"] == TTFT_COLUMNS == tuple(range(11))
    assert FEATURE_SETS["v2"]["ttft"] == FEATURE_SETS["v2"]["tpot"] == V2_COLUMNS
    assert V2_COLUMNS == tuple(range(18))
    assert FEATURE_SETS["v3"]["ttft"] == FEATURE_SETS["v3"]["tpot"] == ALL_COLUMNS
    assert len(select(row, ALL_COLUMNS)) == len(FEATURES) == 19
    assert SUPPORTED_MODEL_SCHEMAS == (1, 2, 3)


def test_hardware_class_code_is_stable_distinct_and_exact_in_float32():
    import numpy as np

    a, h = hardware_class_code("nvidia-a100-80gb"), hardware_class_code("nvidia-h100-80gb")
    # a fixed value (CRC-32, not Python's per-process salted hash): replicas agree
    assert a == 14560771.0 == hardware_class_code(" NVIDIA-A100-80GB ")
    assert a != h and a > 0 and h > 0
    assert hardware_class_code(None) == hardware_class_code("") == 0.0
    for v in (a, h):
        assert float(np.float32(v)) == v and v == int(v) and v < 2**24


def test_row_without_context_has_zero_estimates():
    row = build_row(10, 0.0, PodLoad(waiting=1, running=2, kv_usage=0.1))
    named = dict(zip(FEATURES, row, strict=True))
    assert named["estimate_ms"] == named["backlog_ms"] == named["max_tokens"] == 0.0
    assert named["hardware_class"] == 0.0
    assert named["decode_batch"] == 4.0


def test_idle_pod_is_not_queued():
    assert build_row(10, 0.0, PodLoad(waiting=0, running=3, kv_usage=0.1))[0] == 0.0


@given(st.floats(-1, 2, allow_nan=False), st.integers(0, 200_000))
def test_prefix_score_is_clamped(score, n):
    row = build_row(n, score, PodLoad(0, 0, 0))
    assert 0.0 <= row[7] <= 1.0
    assert 0 <= row[9] <= 3
    assert row[8] == (1.0 - row[7]) * n


def test_prefix_bucket_quartiles():
    assert [prefix_bucket(x) for x in (0, 0.24, 0.25, 0.5, 0.8, 1.0)] == [0, 0, 1, 2, 3, 3]


def test_tokenizer_is_deterministic_and_counts():
    text = "Hello, world! The quick brown fox."
    assert tokenize(text) == tokenize(text)
    assert len(tokenize(text)) == count_tokens(text) == 9


def test_block_hashes_share_prefixes_only():
    a = tokenize(synth_text(64, seed=1) + " " + synth_text(40, seed=2))
    b = tokenize(synth_text(64, seed=1) + " " + synth_text(40, seed=3))
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert len(ha) == 104 // 16
    assert ha[:4] == hb[:4]
    assert ha[4] != hb[4]
    # the extra key (e.g. LoRA adapter) separates otherwise equal prefixes
    assert block_hashes(a, 16, extra_key=7)[0] != ha[0]


@given(st.integers(0, 3000), st.integers(0, 10**6))
def test_synth_text_has_exact_token_count(n, seed):
    assert count_tokens(synth_text(n, seed)) == n
