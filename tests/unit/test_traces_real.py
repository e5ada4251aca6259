"""The real traces' slices shipped in tests/data/traces parse completely and keep the traces'
invariants. The full traces are checked by `python -m bench.check_full_traces` (they are
never part of the checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.check_full_traces import check_shared_hash_ids_give_identical_token_prefixes
from bench.traces import read_azure, read_mooncake
from shared.tokenizer import tokenize

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE_SLICE = DATA / "mooncake_conversation_head400.jsonl"
AZURE_SLICE = DATA / "azure_2023_code_head300.csv"


# --- the shipped slices ---------------------------------------------------------------------
def test_mooncake_slice_parses_completely():
    trace = read_mooncake(MOONCAKE_SLICE)
    assert len(trace) == 400
    assert trace.skipped == []
    assert trace.duration_s == pytest.approx(141, abs=1)
    assert max(r.output_tokens for r in trace) == 2000


def test_mooncake_slice_shared_hash_ids_give_identical_token_prefixes():
    check_shared_hash_ids_give_identical_token_prefixes(read_mooncake(MOONCAKE_SLICE))


def test_azure_slice_parses_completely():
    trace = read_azure(AZURE_SLICE)
    assert len(trace) == 300
    assert trace.skipped == []
    assert trace.duration_s == pytest.approx(216.8, abs=0.5)
    assert max(r.input_tokens for r in trace) == 7436
    r = trace.requests[100]
    assert tokenize(r.prompt_text()) == r.prompt_tokens()
