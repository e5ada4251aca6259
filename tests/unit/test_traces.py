"""Trace readers (Mooncake JSONL, Azure CSV) on small files written to tmp_path."""

from __future__ import annotations

import json
import logging

import pytest

from bench.traces import (
    BLOCK_TOKENS,
    PromptBuilder,
    read_azure,
    read_mooncake,
    read_trace,
)
from services.simulator.engine import Engine, run_until_idle
from services.simulator.profiles import get_profile
from shared.tokenizer import synth_text, synth_tokens, tokenize


def mooncake(tmp_path, rows: list, name: str = "t.jsonl"):
    path = tmp_path / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def mc(ts: float, n_in: int, n_out: int, ids: list[int]) -> dict:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def azure(tmp_path, lines: list[str], header: str = AZURE_HEADER):
    path = tmp_path / "t.csv"
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


# ---- Mooncake ----------------------------------------------------------------------------


def test_mooncake_fields_and_relative_arrivals(tmp_path):
    path = mooncake(
        tmp_path, [mc(1000, 600, 5, [0, 1]), mc(1500, 100, 7, [0]), mc(4000, 1, 1, [9])]
    )
    trace = read_mooncake(path)
    assert trace.format == "mooncake" and trace.skipped == [] and len(trace) == 3
    assert [r.arrival_s for r in trace] == [0.0, 0.5, 3.0]
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in trace] == [
        (600, 5, (0, 1)),
        (100, 7, (0,)),
        (1, 1, (9,)),
    ]
    assert [r.line for r in trace] == [1, 2, 3] and [r.index for r in trace] == [0, 1, 2]
    assert trace.duration_s == 3.0


@pytest.mark.parametrize(("scale", "expected"), [(1.0, [0, 1, 3]), (2.0, [0, 0.5, 1.5])])
def test_rate_scale_divides_inter_arrival_times(tmp_path, scale, expected):
    path = mooncake(tmp_path, [mc(t, 10, 1, [t]) for t in (0, 1000, 3000)])
    assert [r.arrival_s for r in read_trace(path, rate_scale=scale)] == expected


@pytest.mark.parametrize(
    "kw", [{"rate_scale": 0}, {"rate_scale": -1}, {"offset": -1}, {"limit": -2}]
)
def test_bad_options_raise(tmp_path, kw):
    with pytest.raises(ValueError):
        read_trace(mooncake(tmp_path, [mc(0, 1, 1, [0])]), **kw)


def test_offset_and_limit_select_valid_rows_and_rebase_arrivals(tmp_path):
    rows = [mc(1000 * i, 10, 1, [i]) for i in range(6)]
    rows.insert(2, "not json")
    trace = read_trace(mooncake(tmp_path, rows), offset=2, limit=3)
    assert [r.hash_ids for r in trace] == [(2,), (3,), (4,)]
    assert [r.arrival_s for r in trace] == [0.0, 1.0, 2.0]
    assert [r.line for r in trace] == [4, 5, 6]
    assert len(read_trace(mooncake(tmp_path, rows), limit=0)) == 0


def test_malformed_mooncake_lines_are_reported_and_skipped(tmp_path, caplog):
    rows = [
        mc(0, 10, 2, [0]),
        "{broken",
        "[1, 2]",
        {"timestamp": 5, "input_length": 10, "hash_ids": [0]},  # no output_length
        mc(5, 0, 2, [0]),
        mc(5, 10, True, [0]),
        mc(-1, 10, 2, [0]),
        mc(5, 10, 2, ["a"]),
        {"timestamp": "x", "input_length": 3, "output_length": 1, "hash_ids": []},
        "",
        mc(9, 12, 3, [4]),
    ]
    path = mooncake(tmp_path, rows)
    with caplog.at_level(logging.WARNING, logger="bench.traces"):
        trace = read_mooncake(path)
    assert [r.line for r in trace] == [1, 11]
    assert [s.line for s in trace.skipped] == [2, 3, 4, 5, 6, 7, 8, 9]
    assert trace.skipped_count == 8
    assert all(s.path == str(path) for s in trace.skipped)
    assert "output_length" in trace.skipped[2].reason
    assert f"{path}:2:" in caplog.text


def test_many_malformed_lines_log_a_summary(tmp_path, caplog):
    path = mooncake(tmp_path, ["bad"] * 30 + [json.dumps(mc(0, 1, 1, []))])
    with caplog.at_level(logging.WARNING, logger="bench.traces"):
        trace = read_mooncake(path)
    assert trace.skipped_count == 30 and len(trace) == 1
    assert "30 malformed lines" in caplog.text
    assert len(caplog.records) <= 11


def test_unsorted_timestamps_are_sorted_by_arrival(tmp_path):
    trace = read_trace(mooncake(tmp_path, [mc(2000, 1, 1, [0]), mc(1000, 1, 1, [1])]))
    assert [(r.arrival_s, r.hash_ids) for r in trace] == [(0.0, (1,)), (1.0, (0,))]


def test_shared_hash_ids_give_identical_token_prefixes(tmp_path):
    rows = [mc(0, 1500, 1, [7, 8, 9]), mc(1, 1300, 1, [7, 8, 10]), mc(2, 700, 1, [11, 8])]
    a, b, c = read_mooncake(mooncake(tmp_path, rows))
    ta, tb, tc = a.prompt_tokens(), b.prompt_tokens(), c.prompt_tokens()
    assert (len(ta), len(tb), len(tc)) == (1500, 1300, 700)
    assert ta[: 2 * BLOCK_TOKENS] == tb[: 2 * BLOCK_TOKENS]
    assert (
        ta[2 * BLOCK_TOKENS : 2 * BLOCK_TOKENS + 16] != tb[2 * BLOCK_TOKENS : 2 * BLOCK_TOKENS + 16]
    )
    assert tc[:16] != ta[:16]
    # a block is the same text wherever it appears (position independent)
    assert tc[BLOCK_TOKENS:] == ta[BLOCK_TOKENS : BLOCK_TOKENS + 188]


def test_prompt_text_tokenizes_to_prompt_tokens(tmp_path):
    rows = [mc(0, 1100, 1, [1, 2, 3]), mc(0, 512, 1, [1]), mc(0, 1200, 1, [1])]  # last: padded
    for r in read_mooncake(mooncake(tmp_path, rows)):
        assert tokenize(r.prompt_text()) == r.prompt_tokens()
        assert len(r.prompt_tokens()) == r.input_tokens


def test_padding_beyond_the_blocks_is_unique_per_request(tmp_path):
    a, b = read_mooncake(mooncake(tmp_path, [mc(0, 600, 1, [1]), mc(0, 600, 1, [1])]))
    ta, tb = a.prompt_tokens(), b.prompt_tokens()
    assert ta[:BLOCK_TOKENS] == tb[:BLOCK_TOKENS]
    assert ta[BLOCK_TOKENS:] != tb[BLOCK_TOKENS:]


def test_seed_changes_text_not_sharing_and_is_deterministic(tmp_path):
    path = mooncake(tmp_path, [mc(0, 600, 1, [1, 2]), mc(0, 600, 1, [1, 3])])
    s0, s0_again, s1 = (read_mooncake(path, seed=s) for s in (0, 0, 1))
    assert [r.prompt_tokens() for r in s0] == [r.prompt_tokens() for r in s0_again]
    assert s0.requests[0].prompt_tokens() != s1.requests[0].prompt_tokens()
    t1 = [r.prompt_tokens() for r in s1]
    assert t1[0][:BLOCK_TOKENS] == t1[1][:BLOCK_TOKENS]


def test_shared_prefixes_hit_the_simulated_prefix_cache(tmp_path):
    rows = [mc(0, 1100, 2, [1, 2, 3]), mc(0, 1100, 2, [1, 2, 4])]
    a, b = read_mooncake(mooncake(tmp_path, rows))
    engine = Engine(get_profile("h100-llama3-8b"), seed=0)
    engine.submit("a", a.prompt_tokens(), a.output_tokens, 0.0)
    now, _ = run_until_idle(engine, 0.0)
    engine.submit("b", b.prompt_tokens(), b.output_tokens, now)
    run_until_idle(engine, now)
    assert engine.stats().prefix_cache_hits == 2 * BLOCK_TOKENS


def test_block_cache_is_bounded_and_rebuilds_identically():
    builder = PromptBuilder(seed=3, cache_blocks=2)
    first = list(builder.block_tokens(1))
    for h in range(2, 10):
        builder.block_tokens(h)
    assert builder.block_tokens(1) == first
    assert len(builder._tokens) == 2


@pytest.mark.parametrize("n", [0, 1, 16, 511, 512, 513, 1500])
@pytest.mark.parametrize("seed", [0, 1, 77, 2**31 + 5, 2**40])
def test_fast_token_synthesis_matches_synth_text(n, seed):
    assert synth_tokens(n, seed) == tokenize(synth_text(n, seed))


# ---- Azure -------------------------------------------------------------------------------


def test_azure_fields_and_fractional_timestamps(tmp_path):
    path = azure(
        tmp_path,
        [
            "2023-11-16 18:15:46.6805900,4808,10",
            "2023-11-16 18:15:47.1805900,3180,8",
            "2023-11-16 18:16:46.6805900,12,1",
        ],
    )
    trace = read_trace(path)
    assert trace.format == "azure" and not trace.skipped
    assert [r.arrival_s for r in trace] == pytest.approx([0.0, 0.5, 60.0])
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in trace] == [
        (4808, 10, ()),
        (3180, 8, ()),
        (12, 1, ()),
    ]
    assert [r.line for r in trace] == [2, 3, 4]


def test_azure_prompts_are_unique_and_consistent(tmp_path):
    path = azure(tmp_path, [f"2023-11-16 18:15:4{i}.0,{600 + i},3" for i in range(4)])
    reqs = read_azure(path).requests
    firsts = {tuple(r.prompt_tokens()[:16]) for r in reqs}
    assert len(firsts) == 4
    for r in reqs:
        assert len(r.prompt_tokens()) == r.input_tokens
        assert tokenize(r.prompt_text()) == r.prompt_tokens()


def test_malformed_azure_rows_are_reported_and_skipped(tmp_path, caplog):
    lines = [
        "2023-11-16 18:15:46.1,100,10",
        "2023-11-16 18:15:46.2,100",
        "yesterday,100,10",
        "2023-11-16 18:15:46.4,abc,10",
        "2023-11-16 18:15:46.5,100,0",
        "",
        "2023-11-16 18:15:46.7,100,10,extra",
        "2023-11-16 18:15:47.1,5,5",
    ]
    path = azure(tmp_path, lines)
    with caplog.at_level(logging.WARNING, logger="bench.traces"):
        trace = read_azure(path)
    assert [r.line for r in trace] == [2, 9]
    assert [s.line for s in trace.skipped] == [3, 4, 5, 6, 8]
    assert "TIMESTAMP" in trace.skipped[1].reason
    assert f"{path}:4:" in caplog.text
    assert trace.requests[1].arrival_s == pytest.approx(1.0)


def test_azure_columns_in_any_order(tmp_path):
    path = azure(
        tmp_path, ["7,2023-11-16 18:15:46,20"], header="GeneratedTokens,TIMESTAMP,ContextTokens"
    )
    [r] = read_azure(path).requests
    assert (r.input_tokens, r.output_tokens) == (20, 7)


def test_file_without_azure_header_is_rejected(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ValueError, match="not an Azure trace"):
        read_trace(path)


def test_unknown_format_rejected(tmp_path):
    with pytest.raises(ValueError, match="format"):
        read_trace(mooncake(tmp_path, []), format="sharegpt")
