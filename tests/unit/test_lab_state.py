"""bench/lab/state.py: what the cost scorer and the pod view had learned per decision."""

from __future__ import annotations

import pytest

from bench.lab.state import REPREFILL_S, StateRow, run_state, table, timeline
from services.simulator.profiles import get_profile


def row(now: float, extra: float, w: float | None = 0.1, share: float | None = None) -> StateRow:
    return StateRow(now, w, share, None, 6e-8, 1000.0, 0.2, 0.3, 2.0, extra)


def test_the_timeline_bins_decisions_in_order_and_counts_the_re_prefills():
    rows = [row(i * 0.1, 0.5 if i % 4 == 0 else 0.0, w=0.01 * i) for i in range(20)]
    bins = timeline(rows, 4)
    assert [b["decisions"] for b in bins] == [[0, 5], [5, 10], [10, 15], [15, 20]]
    assert bins[0]["t_s"] == [0.0, 0.4]
    assert bins[0]["damage_weight"] == pytest.approx(0.02)  # median of 0.00-0.04
    assert bins[0]["reprefill_share"] == pytest.approx(2 / 5)  # decisions 0 and 4
    assert bins[0]["reprefill_s"] == pytest.approx(1.0)
    assert bins[1]["reprefill_share"] == pytest.approx(1 / 5)  # decision 8
    assert bins[0]["budget_share"] is None  # nothing published: no median either
    # a placement within REPREFILL_S of the cheapest pod's prefill is not a re-prefill
    assert timeline([row(0.0, REPREFILL_S / 2)], 3)[0]["reprefill_share"] == 0.0
    assert len(timeline(rows[:2], 10)) == 2  # never more bins than decisions
    assert "| 0-5 | 0.0-0.4 | 0.020 | – |" in table({"timeline": bins})


def test_the_state_of_a_headroom_run_shows_its_learned_damage_weight_and_budget_share():
    exact = run_state("smoke", "smoke-agentic", 0.3, "headroom", bins=4)
    assert exact["decisions"] == 40
    assert [b["decisions"] for b in exact["timeline"]][-1] == [30, 40]
    h100 = get_profile("h100-llama3-8b")
    (k,) = exact["engine_decode_s_per_token"].values()
    assert k == pytest.approx(h100.kv_bytes_per_token / h100.attn_bandwidth_bps)
    weights = [b["damage_weight"] for b in exact["timeline"]]
    assert all(w is not None and 0.005 <= w <= 5.0 for w in weights)
    # nothing finished before the first decisions: no share; with exact budgets every
    # answer uses all of its max_tokens (load 0.3: enough finish while requests still come)
    assert exact["timeline"][0]["budget_share"] is None
    shares = [b["budget_share"] for b in exact["timeline"] if b["budget_share"] is not None]
    assert shares and all(s == pytest.approx(1.0) for s in shares)
    # under fixed 4096-token budgets the answers use a small share of them
    capped = run_state("smoke", "smoke-agentic", 0.3, "headroom", bins=4,
                       client_max_tokens=4096)  # fmt: skip
    shares = [b["budget_share"] for b in capped["timeline"] if b["budget_share"] is not None]
    assert shares and all(s < 0.2 for s in shares)


def test_a_profile_without_the_cost_scorer_has_no_damage_weight():
    result = run_state("smoke", "smoke-chat", 1.0, "gie-default", bins=2)
    assert [b["damage_weight"] for b in result["timeline"]] == [None, None]
    assert result["decisions"] == 40
