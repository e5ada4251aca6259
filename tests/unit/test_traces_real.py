"""The real traces parse completely: the slices shipped in tests/data/traces always; the full
traces only when $HEADROOM_TRACES_DIR names their directory (and then it must exist: a
directory given but missing fails, it does not skip)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from bench.traces import BLOCK_TOKENS, Trace, read_azure, read_mooncake
from shared.tokenizer import tokenize

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE_SLICE = DATA / "mooncake_conversation_head400.jsonl"
AZURE_SLICE = DATA / "azure_2023_code_head300.csv"

full = pytest.mark.skipif(
    not os.environ.get("HEADROOM_TRACES_DIR"),
    reason="full-trace checks run when HEADROOM_TRACES_DIR names the traces' directory",
)


@pytest.fixture(scope="module")
def traces_dir() -> Path:
    d = Path(os.environ["HEADROOM_TRACES_DIR"])
    assert d.is_dir(), f"HEADROOM_TRACES_DIR={d} is not a directory"
    return d


def check_shared_hash_ids_give_identical_token_prefixes(trace: Trace) -> None:
    reqs = trace.requests[:400]
    checked = 0
    by_first: dict[int, list] = {}
    for r in reqs:
        by_first.setdefault(r.hash_ids[0], []).append(r)
    for group in by_first.values():
        for a, b in itertools.pairwise(group):
            k = 0
            while k < min(len(a.hash_ids), len(b.hash_ids)) and a.hash_ids[k] == b.hash_ids[k]:
                k += 1
            ta, tb = a.prompt_tokens(), b.prompt_tokens()
            n = min(k * BLOCK_TOKENS, a.input_tokens, b.input_tokens)
            assert ta[:n] == tb[:n]
            if k < min(len(a.hash_ids), len(b.hash_ids)):  # first differing block differs
                s = k * BLOCK_TOKENS
                assert ta[s : s + 16] != tb[s : s + 16]
            checked += 1
    assert checked > 50
    r = reqs[0]
    assert tokenize(r.prompt_text()) == r.prompt_tokens()
    assert len(r.prompt_tokens()) == r.input_tokens


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


# --- the full traces (HEADROOM_TRACES_DIR) -----------------------------------------------------
@full
def test_slices_are_the_heads_of_the_full_traces(traces_dir):
    for sl, name in ((MOONCAKE_SLICE, "mooncake_conversation.jsonl"),
                     (AZURE_SLICE, "azure_2023_code.csv")):  # fmt: skip
        head = sl.read_bytes()
        with open(traces_dir / name, "rb") as f:
            assert f.read(len(head)) == head, name


@full
def test_full_mooncake_parses_completely(traces_dir):
    trace = read_mooncake(traces_dir / "mooncake_conversation.jsonl")
    assert len(trace) == 12_031
    assert trace.skipped == []
    assert trace.duration_s == pytest.approx(3537, abs=2)
    assert max(r.output_tokens for r in trace) == 2000
    check_shared_hash_ids_give_identical_token_prefixes(trace)


@full
def test_full_azure_parses_completely(traces_dir):
    trace = read_azure(traces_dir / "azure_2023_code.csv")
    assert len(trace) == 8_819
    assert trace.skipped == []
    assert trace.duration_s == pytest.approx(3436, abs=2)
    assert max(r.input_tokens for r in trace) == 7437
    r = trace.requests[100]
    assert tokenize(r.prompt_text()) == r.prompt_tokens()
