"""The real traces in ../shared/traces (or $HEADROOM_TRACES_DIR) parse completely."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from bench.traces import BLOCK_TOKENS, read_azure, read_mooncake
from shared.tokenizer import tokenize

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traces_dir() -> Path:
    d = Path(os.environ.get("HEADROOM_TRACES_DIR", REPO_ROOT.parent / "shared" / "traces"))
    assert d.is_dir(), f"trace directory {d} is missing (set HEADROOM_TRACES_DIR)"
    return d


@pytest.fixture(scope="module")
def mooncake(traces_dir):
    return read_mooncake(traces_dir / "mooncake_conversation.jsonl")


def test_mooncake_parses_completely(mooncake):
    assert len(mooncake) == 12_031
    assert mooncake.skipped == []
    assert mooncake.duration_s == pytest.approx(3537, abs=2)
    assert max(r.output_tokens for r in mooncake) == 2000


def test_azure_parses_completely(traces_dir):
    trace = read_azure(traces_dir / "azure_2023_code.csv")
    assert len(trace) == 8_819
    assert trace.skipped == []
    assert trace.duration_s == pytest.approx(3436, abs=2)
    assert max(r.input_tokens for r in trace) == 7437
    r = trace.requests[100]
    assert tokenize(r.prompt_text()) == r.prompt_tokens()


def test_mooncake_shared_hash_ids_give_identical_token_prefixes(mooncake):
    reqs = mooncake.requests[:400]
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
