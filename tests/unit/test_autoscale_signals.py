"""Pool signals, the per-strategy recommender and the CLI's pure parts."""

from __future__ import annotations

import orjson
import pytest

from services.autoscale.cli import SourceError, build_parser, render, signals_from_collector
from services.autoscale.hpa import Behavior
from services.autoscale.signals import STRATEGIES, PodLoad, PoolSignals, Recommender, pool_signals


def test_pool_signals_average_over_ready_pods():
    sig = pool_signals(
        [
            PodLoad(True, prefill_backlog=6, slots_used=0.5, kv_usage=0.4),
            PodLoad(True, prefill_backlog=2, slots_used=1.0, kv_usage=0.6),
            PodLoad(False),  # a failed scrape: counted as a replica, not in the averages
        ]
    )
    assert (sig.replicas, sig.ready) == (3, 2)
    assert sig.prefill_backlog_per_replica == 4.0
    assert sig.slots_used == 0.75
    assert sig.kv_usage == 0.5


def test_unreported_signals_are_none():
    sig = pool_signals([PodLoad(True, prefill_backlog=3, kv_usage=0.2)])
    assert sig.slots_used is None and sig.value("slots-used") is None
    assert pool_signals([]).prefill_backlog_per_replica is None
    assert pool_signals([PodLoad(False)]).kv_usage is None


def test_recommender_per_strategy():
    r = Recommender({"prefill-backlog": 4}, Behavior(scale_down_window_s=0))
    sig = PoolSignals(replicas=4, ready=4, prefill_backlog_per_replica=8,
                      slots_used=0.45, kv_usage=None)  # fmt: skip
    recs = {x.strategy: x for x in r.update(0, sig)}
    assert recs["prefill-backlog"].decision.recommended == 8  # ceil(4 * 8/4)
    assert recs["slots-used"].decision.recommended == 2  # ceil(4 * 0.45/0.9)
    assert recs["kv-usage"].decision is None
    assert recs["kv-usage"].target == STRATEGIES["kv-usage"].default_target


def test_recommender_rejects_bad_targets():
    with pytest.raises(ValueError, match="unknown"):
        Recommender({"queue": 1})
    with pytest.raises(ValueError, match="positive"):
        Recommender({"kv-usage": 0})


COLLECTOR_PAGE = """# HELP headroom_pool_replicas Pods discovered in the pool
# TYPE headroom_pool_replicas gauge
headroom_pool_replicas{pool="llama"} 4.0
headroom_pool_ready_replicas{pool="llama"} 3.0
headroom_pool_prefill_backlog_per_replica{pool="llama"} 7.5
headroom_pool_kv_usage{pool="llama"} 0.41
headroom_autoscale_recommended_replicas{pool="llama",strategy="prefill-backlog"} 6.0
headroom_autoscale_recommended_replicas{pool="llama",strategy="kv-usage"} 3.0
headroom_collector_pods 4.0
"""


def test_signals_from_collector_page():
    pool, sig, coll = signals_from_collector(COLLECTOR_PAGE, None)
    assert pool == "llama"
    assert sig == PoolSignals(4, 3, 7.5, None, 0.41)
    assert coll == {"prefill-backlog": 6, "kv-usage": 3}


def test_signals_from_collector_errors():
    with pytest.raises(SourceError, match="no headroom_pool"):
        signals_from_collector("up 1\n", None)
    two = COLLECTOR_PAGE + 'headroom_pool_replicas{pool="other"} 1\n'
    with pytest.raises(SourceError, match="several pools"):
        signals_from_collector(two, None)
    assert signals_from_collector(two, "other")[1].replicas == 1
    with pytest.raises(SourceError, match="not exported"):
        signals_from_collector(COLLECTOR_PAGE, "nope")


def test_render_table():
    _, sig, coll = signals_from_collector(COLLECTOR_PAGE, None)
    recs = Recommender().update(0, sig)
    text = render("llama", sig, recs, coll, sig.replicas)
    lines = {ln.split()[0]: ln for ln in text.splitlines()[2:] if ln.strip()}
    assert lines["prefill-backlog"].split()[1:5] == ["7.500", "5", "1.50", "6"]
    assert "n/a" in lines["slots-used"]
    assert "collector" in lines["kv-usage"]
    assert "4 replicas (3 ready)" in text


def test_parser_defaults():
    args = build_parser().parse_args(["recommend"])
    assert args.target_prefill_backlog == 5.0 and args.target_slots_used == 0.9
    assert args.scale_down_window_s == 300.0 and args.tolerance == 0.1
    assert args.collector == "http://127.0.0.1:9101"
    assert orjson.dumps(vars(args))  # JSON-able
