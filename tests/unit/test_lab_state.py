"""bench/lab/state.py: a decision log's timeline of what the profile had learned and placed
(``headroom lab decisions ... --timeline``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.lab.config import LabConfig
from bench.lab.decisions import decision_log
from bench.lab.state import REPREFILL_S, table, timeline
from bench.lab.suite import suite
from bench.lab.suite_run import materialise, prepare, rate_scale
from services.gateway.scheduling.cost_model import DECODE_PRIOR_S_PER_TOKEN


def line(i: int, extra: float, w: float | None = 0.1, share: float | None = None) -> dict:
    """A decision of the log's form: two pods, the chosen one (pod-1) ``extra`` seconds of
    own prefill beyond pod-0's."""
    return {
        "index": i, "routed_s": round(i * 0.1, 4), "chosen": "pod-1",
        "pods": [["pod-0", 0.0, 0.5, 0, 0.0], ["pod-1", 0.0, 0.5 + extra, 0, 1.0]],
        "learned": {"damage_weight": w, "budget_share": share, "typical_output_tokens": None,
                    "decode_s_per_token": 6e-8},
        "context_tokens": [1000.0, 3000.0], "kv_usage": [0.2, 0.4],
    }  # fmt: skip


def test_the_timeline_bins_decisions_in_order_and_counts_the_re_prefills():
    lines = [line(i, 0.5 if i % 4 == 0 else 0.0, w=0.01 * i) for i in range(20)]
    bins = timeline(lines, 4)
    assert [b["decisions"] for b in bins] == [[0, 5], [5, 10], [10, 15], [15, 20]]
    assert bins[0]["t_s"] == [0.0, 0.4]
    assert bins[0]["damage_weight"] == pytest.approx(0.02)  # median of 0.00-0.04
    assert bins[0]["reprefill_share"] == pytest.approx(2 / 5)  # decisions 0 and 4
    assert bins[0]["reprefill_s"] == pytest.approx(1.0)
    assert bins[1]["reprefill_share"] == pytest.approx(1 / 5)  # decision 8
    assert bins[0]["budget_share"] is None  # nothing published: no median either
    assert bins[0]["context_spread"] == 2000.0
    assert (bins[0]["kv_mean"], bins[0]["kv_max"]) == (pytest.approx(0.3), 0.4)
    # a placement within REPREFILL_S of the cheapest pod's prefill is not a re-prefill
    assert timeline([line(0, REPREFILL_S / 2)], 3)[0]["reprefill_share"] == 0.0
    assert len(timeline(lines[:2], 10)) == 2  # never more bins than decisions
    # decisions in the order they were made, not by request index
    late = [{**line(0, 0.5), "routed_s": 9.0}, line(1, 0.0)]
    assert [b["reprefill_share"] for b in timeline(late, 2)] == [0.0, 1.0]
    # a request the scheduler rejected (no chosen pod) is not a placement
    assert len(timeline([{**line(0, 0.0), "chosen": None}, line(1, 0.0)], 5)) == 1
    assert "| 0-5 | 0.0-0.4 | 0.020 | – |" in table(bins)


def smoke(tmp_path, workload: str, load: float, policy: str, **kw) -> LabConfig:
    """One cell of the smoke suite, as `lab compare --suite smoke` runs it."""
    split, entry = suite("smoke", only=[workload])[0]
    base = LabConfig(trace="", streaming=True, regret_samples=0, **kw)
    w = prepare(materialise(split, entry, tmp_path), base)
    return replace(w.config(base), policy=policy, rate_scale=rate_scale(w, load))


def test_the_log_carries_the_learned_damage_weight_and_budget_share(tmp_path):
    # load 0.3: enough requests finish while others still arrive
    exact = decision_log(smoke(tmp_path / "e", "smoke-agentic", 0.3, "headroom"))
    assert len(exact) == 40
    assert all(len(d["context_tokens"]) == len(d["kv_usage"]) == 8 for d in exact)
    bins = timeline(exact, 4)
    weights = [b["damage_weight"] for b in bins]
    assert all(w is not None and 0.005 <= w <= 5.0 for w in weights)
    # nothing finished before the first decisions: no share; with exact budgets every
    # answer uses all of its max_tokens
    assert exact[0]["learned"]["budget_share"] is None
    shares = [d["learned"]["budget_share"] for d in exact if d["learned"]["budget_share"]]
    assert shares and all(s == pytest.approx(1.0) for s in shares)
    # the decode slope: the prior before any answer has finished, learned (>= 0) after
    first = min(exact, key=lambda d: d["routed_s"])
    assert first["learned"]["decode_s_per_token"] == pytest.approx(DECODE_PRIOR_S_PER_TOKEN)
    assert all(d["learned"]["decode_s_per_token"] >= 0 for d in exact)
    # under fixed 4096-token budgets the answers use a small share of them
    capped = decision_log(smoke(tmp_path / "c", "smoke-agentic", 0.3, "headroom",
                                client_max_tokens=4096))  # fmt: skip
    shares = [d["learned"]["budget_share"] for d in capped if d["learned"]["budget_share"]]
    assert shares and all(s < 0.2 for s in shares)


def test_a_profile_without_the_cost_scorer_has_no_damage_weight(tmp_path):
    log = decision_log(smoke(tmp_path, "smoke-chat", 1.0, "gie-default"))
    assert len(log) == 40 and all(d["learned"]["damage_weight"] is None for d in log)
