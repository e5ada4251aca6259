"""Every scheduling plugin, table-driven, on hand-built cycles."""

from __future__ import annotations

from collections import Counter

import pytest

from services.gateway.scheduling.plugins.admitters import LatencySloAdmitter
from services.gateway.scheduling.plugins.filters import (
    LongestPrefixFilter,
    PrefixCacheAffinityFilter,
    SloHeadroomTierFilter,
)
from services.gateway.scheduling.plugins.latency_scorer import LatencyScorer
from services.gateway.scheduling.plugins.pickers import (
    MaxScorePicker,
    RandomPicker,
    RoundRobinPicker,
    WeightedRandomPicker,
)
from services.gateway.scheduling.plugins.producer import PredictedLatencyProducer
from services.gateway.scheduling.plugins.scorers import (
    CacheAwareScorer,
    KvCacheUtilizationScorer,
    LeastRequestScorer,
    PrefixScorer,
    QueueScorer,
)
from tests.unit.scheduling_helpers import P, cycle, names, predictions_of, req


# --- predicted-latency-producer -------------------------------------------------------------
@pytest.mark.parametrize(
    ("pod", "request_", "streaming", "buffer", "expected"),
    [
        # no SLO: headroom = -prediction; a missing SLO is no constraint for meets_slo
        (P(pred=(100, 10)), req(), True, 1.0, (100, -100, -10, False, True)),
        (P(pred=(100, 10)), req(ttft=150, tpot=20), True, 1.0, (100, 50, 10, True, True)),
        (P(pred=(100, 10)), req(ttft=90, tpot=20), True, 1.0, (100, -10, 10, True, False)),
        (P(pred=(100, 10)), req(ttft=150, tpot=20), True, 0.5, (100, -25, 0, True, False)),
        # tightest running TPOT SLO on the pod limits a request without its own
        (P(pred=(100, 10), tpot_slo=8), req(), True, 1.0, (100, -100, -2, True, False)),
        (P(pred=(100, 10), tpot_slo=30), req(tpot=20), True, 1.0, (100, -100, 10, True, True)),
        (P(pred=(100, 10), tpot_slo=15), req(tpot=20), True, 1.0, (100, -100, 5, True, True)),
        # non-streaming: E2E = ttft + tpot x (max_tokens - 1) against the TTFT SLO; no TPOT
        (P(pred=(100, 10)), req(ttft=1500, max_tokens=101), False, 1.0, (1100, 400, 0, False, True)),
        (P(pred=(100, 10)), req(ttft=1000, tpot=5, max_tokens=101), False, 1.0,
         (1100, -100, 0, False, False)),
        (P(pred=(100, 10), tpot_slo=1), req(max_tokens=1), False, 1.0, (100, -100, 0, False, True)),
    ],
)  # fmt: skip
def test_producer_attaches_predictions_and_headroom(pod, request_, streaming, buffer, expected):
    (st,) = cycle([pod], request_, streaming_mode=streaming, buffer=buffer).pods
    assert (st.pred_ttft_ms, st.pred_tpot_ms) == pod.pred
    got = (st.latency_ms, st.headroom_ttft_ms, st.headroom_tpot_ms, st.tpot_limited, st.meets_slo)
    assert got == pytest.approx(expected)


def test_producer_without_predictions_leaves_pods_alone():
    cyc = cycle([P(), P()], req(ttft=100))
    assert not cyc.has_predictions
    assert all(s.pred_ttft_ms is None and not s.meets_slo for s in cyc.pods)


def test_producer_needs_one_prediction_per_pod():
    cyc = cycle([P(), P()])
    with pytest.raises(ValueError):
        PredictedLatencyProducer.create().produce(cyc, predictions_of([P(pred=(1, 1))]))


# --- prefix-cache-affinity-filter ------------------------------------------------------------
def _affinity(pods, seed=0, **params):
    cyc = cycle(pods, seed=seed)
    f = PrefixCacheAffinityFilter.create("aff", **params)
    return names(f.filter(cyc, cyc.pods)), cyc.notes.get("aff")


@pytest.mark.parametrize(
    ("pods", "params", "kept", "note"),
    [
        # sticky pods kept (epsilon 0 to be deterministic)
        ([P(prefix=1.0, pred=(100, 10)), P(prefix=0.5, pred=(50, 10))], {"epsilon": 0},
         [0], "sticky"),
        ([P(prefix=0.85, pred=(100, 10)), P(prefix=0.9, pred=(50, 10)), P(pred=(10, 1))],
         {"epsilon": 0}, [0, 1], "sticky"),
        # strict gate: 0.85 is not sticky at 0.99
        ([P(prefix=0.85, pred=(1, 1)), P(prefix=1.0, pred=(1, 1))], {"threshold": 0.99,
         "epsilon": 0}, [1], "sticky"),
        # no sticky pod, or every pod sticky: unchanged
        ([P(prefix=0.5, pred=(1, 1)), P(pred=(1, 1))], {"epsilon": 0}, [0, 1], None),
        ([P(prefix=1.0, pred=(1, 1)), P(prefix=1.0, pred=(1, 1))], {"epsilon": 0}, [0, 1], None),
        # load gate: best sticky 7000 ms vs best other 1000 ms > 5000 ms penalty
        ([P(prefix=1.0, pred=(7000, 10)), P(pred=(1000, 10))], {"epsilon": 0}, [0, 1],
         "load_gate"),
        ([P(prefix=1.0, pred=(5900, 10)), P(pred=(1000, 10))], {"epsilon": 0}, [0], "sticky"),
        ([P(prefix=1.0, pred=(7000, 10)), P(pred=(1000, 10))],
         {"epsilon": 0, "maxTTFTPenaltyMs": 18000}, [0], "sticky"),
        # always explore
        ([P(prefix=1.0, pred=(1, 1)), P(pred=(1, 1))], {"epsilon": 1.0}, [0, 1], "explore"),
        # disabled
        ([P(prefix=1.0, pred=(1, 1)), P(pred=(1, 1))], {"threshold": 0.0}, [0, 1], None),
        # without predictions: sticky by default, or steps aside
        ([P(prefix=1.0), P()], {"epsilon": 0}, [0], "sticky"),
        ([P(prefix=1.0), P()], {"epsilon": 0, "stickyWithoutPredictions": False}, [0, 1], None),
    ],
)  # fmt: skip
def test_affinity_filter(pods, params, kept, note):
    assert _affinity(pods, **params) == (kept, note)


@pytest.mark.parametrize(
    ("pods", "request_", "slo_aware", "kept", "note"),
    [
        # sticky pod 0 misses TPOT 20, pod 1 meets both: opened only when slo-aware
        ([P(prefix=1.0, pred=(100, 40)), P(pred=(300, 15))], req(ttft=500, tpot=20), True,
         [0, 1], "slo_gate"),
        ([P(prefix=1.0, pred=(100, 40)), P(pred=(300, 15))], req(ttft=500, tpot=20), False,
         [0], "sticky"),
        # a sticky pod meets it: stay sticky
        ([P(prefix=1.0, pred=(100, 10)), P(pred=(300, 15))], req(ttft=500, tpot=20), True,
         [0], "sticky"),
        # nobody meets it: stay sticky
        ([P(prefix=1.0, pred=(100, 40)), P(pred=(300, 30))], req(ttft=500, tpot=20), True,
         [0], "sticky"),
        # no SLO: nothing to protect
        ([P(prefix=1.0, pred=(100, 40)), P(pred=(300, 15))], req(), True, [0], "sticky"),
        # no SLO header but the sticky pod runs a request whose TPOT SLO it would break
        ([P(prefix=1.0, pred=(100, 40), tpot_slo=20), P(pred=(300, 15))], req(), True,
         [0, 1], "slo_gate"),
    ],
)  # fmt: skip
def test_affinity_filter_slo_aware(pods, request_, slo_aware, kept, note):
    cyc = cycle(pods, request_)
    f = PrefixCacheAffinityFilter.create("aff", epsilon=0, sloAware=slo_aware)
    assert names(f.filter(cyc, cyc.pods)) == kept and cyc.notes.get("aff") == note


def test_affinity_epsilon_explores_about_that_often():
    pods = [P(prefix=1.0, pred=(1, 1)), P(pred=(1, 1))]
    notes = Counter(_affinity(pods, seed=s, epsilon=0.2)[1] for s in range(400))
    assert 40 <= notes["explore"] <= 130 and notes["sticky"] + notes["explore"] == 400


# --- slo-headroom-tier-filter ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("pods", "request_", "p", "kept", "note"),
    [
        ([P(pred=(100, 10)), P(pred=(300, 10))], req(ttft=200), 1.0, [0], "positive"),
        ([P(pred=(100, 10)), P(pred=(300, 10))], req(ttft=200), 0.0, [1], "negative"),
        # TPOT decides too
        ([P(pred=(100, 30)), P(pred=(300, 10))], req(ttft=400, tpot=20), 1.0, [1], "positive"),
        # all meet / none meets: unchanged
        ([P(pred=(100, 10)), P(pred=(300, 10))], req(ttft=500), 1.0, [0, 1], None),
        ([P(pred=(100, 10)), P(pred=(300, 10))], req(ttft=50), 1.0, [0, 1], None),
        # no SLO anywhere: no-op even though headroom is negative
        ([P(pred=(100, 10)), P(pred=(300, 10))], req(), 1.0, [0, 1], None),
        # no SLO header but a running TPOT SLO on pod 0 that it would break
        ([P(pred=(100, 10), tpot_slo=5), P(pred=(300, 10))], req(), 1.0, [1], "positive"),
        # no predictions: no-op
        ([P(), P()], req(ttft=1), 1.0, [0, 1], None),
    ],
)  # fmt: skip
def test_tier_filter(pods, request_, p, kept, note):
    cyc = cycle(pods, request_)
    f = SloHeadroomTierFilter.create("tier", positiveTierProbability=p)
    assert names(f.filter(cyc, cyc.pods)) == kept
    assert cyc.notes.get("tier") == note


def test_tier_filter_probability():
    pods = [P(pred=(100, 10)), P(pred=(300, 10))]
    hits = sum(
        names(SloHeadroomTierFilter.create().filter(c := cycle(pods, req(ttft=200), seed=s),
                                                    c.pods)) == [1]
        for s in range(1000)
    )  # fmt: skip
    assert 1 <= hits <= 30  # 1% of 1000 lands on the negative tier


# --- longest-prefix-filter -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("prefixes", "kept"),
    [([0.0, 0.0, 0.0], [0, 1, 2]), ([0.5, 1.0, 1.0], [1, 2]), ([0.25, 0.0, 0.5], [2])],
)
def test_longest_prefix_filter(prefixes, kept):
    cyc = cycle([P(prefix=x) for x in prefixes])
    assert names(LongestPrefixFilter.create().filter(cyc, cyc.pods)) == kept


# --- latency-scorer ---------------------------------------------------------------------------
def _latency(pods, request_=None, **params):
    cyc = cycle(pods, request_)
    s = LatencyScorer.create("lat", **params)
    return s.score(cyc, cyc.pods), cyc.notes.get("lat")


def _argmax(xs):
    return max(range(len(xs)), key=lambda i: xs[i])


@pytest.mark.parametrize(
    ("pods", "request_", "params", "best", "note"),
    [
        # no SLO: all negative, both miss: lowest blended latency wins
        ([P(pred=(100, 10)), P(pred=(50, 10)), P(pred=(70, 10))], req(), {}, 1, "both_miss"),
        ([P(pred=(100, 5)), P(pred=(90, 50))], req(), {}, 1, "both_miss"),
        ([P(pred=(100, 20)), P(pred=(100, 10))], req(), {}, 1, "both_miss"),
        ([P(pred=(100, 5)), P(pred=(90, 50))], req(), {"ttftWeight": 0, "tpotWeight": 1}, 0,
         "both_miss"),
        # positive headroom: least = tightest, most = largest
        ([P(pred=(100, 10)), P(pred=(900, 10))], req(ttft=1000, tpot=20), {}, 1, "positive"),
        ([P(pred=(100, 10)), P(pred=(900, 10))], req(ttft=1000, tpot=20), {"strategy": "most"},
         0, "positive"),
        # only positive pods are scored
        ([P(pred=(100, 10)), P(pred=(2000, 10))], req(ttft=1000, tpot=20), {"strategy": "most"},
         0, "positive"),
        # idle pods preferred when nobody has positive headroom
        ([P(pred=(100, 10)), P(pred=(900, 10), running=0, in_flight=0)], req(), {}, 1,
         "both_miss"),
        ([P(pred=(100, 10)), P(pred=(900, 10), running=0, in_flight=0)], req(),
         {"preferIdle": False}, 0, "both_miss"),
        # buckets: only TPOT misses beats only TTFT misses beats both miss
        ([P(pred=(2000, 10)), P(pred=(500, 30)), P(pred=(100, 10))], req(ttft=1000, tpot=20),
         {}, 2, "positive"),
        ([P(pred=(2000, 10)), P(pred=(500, 30)), P(pred=(3000, 40))], req(ttft=1000, tpot=20),
         {}, 1, "tpot_misses"),
        ([P(pred=(2000, 10)), P(pred=(1500, 30)), P(pred=(3000, 40))], req(ttft=1000, tpot=20),
         {}, 0, "ttft_misses"),
        ([P(pred=(2000, 50)), P(pred=(1500, 30)), P(pred=(3000, 40))], req(ttft=1000, tpot=20),
         {}, 1, "both_miss"),
    ],
)  # fmt: skip
def test_latency_scorer_best(pods, request_, params, best, note):
    scores, got_note = _latency(pods, request_, **params)
    assert _argmax(scores) == best and got_note == note
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_latency_scorer_unscored_pods_get_zero():
    scores, _ = _latency([P(pred=(100, 10)), P(pred=(2000, 10))], req(ttft=1000, tpot=20))
    assert scores[1] == 0.0 and scores[0] > 0
    scores, note = _latency([P(pred=(2000, 10)), P(pred=(500, 30))], req(ttft=1000, tpot=20))
    assert note == "tpot_misses" and scores[0] == 0.0 and scores[1] > 0


def test_latency_scorer_positive_and_deficit_ranges():
    # least: the tightest headroom (pod 1 on both TTFT and TPOT) gets 1, the loosest 2/101
    scores, _ = _latency([P(pred=(100, 10)), P(pred=(900, 15))], req(ttft=1000, tpot=20))
    assert scores == pytest.approx([2 / 101, 1.0])
    # equal TPOT headroom normalises to 0.5 for everyone
    scores, _ = _latency([P(pred=(100, 10)), P(pred=(900, 10))], req(ttft=1000, tpot=20))
    assert scores == pytest.approx([(2 + 99 * 0.1) / 101, (2 + 99 * 0.9) / 101])
    scores, _ = _latency([P(pred=(100, 10)), P(pred=(900, 10))], req())
    assert scores == pytest.approx([82 / 101, (2 + 80 * 0.2) / 101])


@pytest.mark.parametrize(
    ("pods", "params", "expected"),
    [
        ([P(waiting=4, kv=0.5), P(waiting=0, kv=0.5)], {}, [0.5 / 3, 1.5 / 3]),
        ([P(kv=0.2, prefix=1.0), P(kv=0.2)], {}, [2.8 / 3, 1.8 / 3]),
        ([P(kv=0.2, prefix=1.0), P(kv=0.2)], {"fallbackPrefixWeight": 0}, [0.9, 0.9]),
        ([P(waiting=4, kv=0.0), P(kv=1.0)], {"fallbackKvWeight": 0, "fallbackPrefixWeight": 0},
         [0.0, 1.0]),
    ],
)  # fmt: skip
def test_latency_scorer_composite_fallback(pods, params, expected):
    scores, note = _latency(pods, **params)
    assert scores == pytest.approx(expected) and note is None


# --- heuristic scorers ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scorer", "pods", "expected"),
    [
        (QueueScorer, [P(waiting=0), P(waiting=5), P(waiting=10)], [1.0, 0.5, 0.0]),
        (QueueScorer, [P(waiting=3), P(waiting=3)], [1.0, 1.0]),
        (KvCacheUtilizationScorer, [P(kv=0.25), P(kv=1.0), P(kv=1.5)], [0.75, 0.0, 0.0]),
        (PrefixScorer, [P(prefix=0.5), P(prefix=0.0)], [0.5, 0.0]),
        (LeastRequestScorer, [P(in_flight=2), P(in_flight=0), P(in_flight=4)], [0.5, 1.0, 0.0]),
        (LeastRequestScorer, [P(in_flight=2)], [1.0]),
    ],
)
def test_heuristic_scorers(scorer, pods, expected):
    cyc = cycle(pods)
    assert scorer.create().score(cyc, cyc.pods) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("pods", "params", "best", "note"),
    [
        # imbalanced (max - min = 40 > 32 and 41 > 1.1 x 1): least loaded wins over prefix
        ([P(in_flight=41, prefix=1.0), P(in_flight=1), P(in_flight=20)], {}, 1, "balance"),
        # balanced: best prefix match above 0.5 wins
        ([P(in_flight=20, prefix=0.6), P(in_flight=1, prefix=0.2)], {}, 0, "prefix"),
        # match ratio not above the threshold: smallest tree wins
        ([P(prefix=0.5, blocks=100), P(prefix=0.2, blocks=10)], {}, 1, "smallest_tree"),
        ([P(prefix=0.5, blocks=100), P(prefix=0.2, blocks=10)], {"cacheThreshold": 0.4}, 0,
         "prefix"),
        # absolute gap 5 > 2 but 100 < 1.1 x 95: not imbalanced
        ([P(in_flight=100, prefix=1.0), P(in_flight=95)], {"balanceAbsThreshold": 2}, 0,
         "prefix"),
    ],
)  # fmt: skip
def test_cache_aware_scorer(pods, params, best, note):
    cyc = cycle(pods)
    name = "cache-aware-scorer"
    scores = CacheAwareScorer.create(**params).score(cyc, cyc.pods)
    assert _argmax(scores) == best and cyc.notes[name] == note


# --- pickers -----------------------------------------------------------------------------------
def _scored(scores, seed=0):
    cyc = cycle([P() for _ in scores], seed=seed)
    for st, s in zip(cyc.pods, scores, strict=True):
        st.score = s
    return cyc


@pytest.mark.parametrize(
    ("scores", "expected"), [([0.1, 0.9, 0.5], [1, 2, 0]), ([3.0], [0]), ([-1.0, 0.0], [1, 0])]
)
def test_max_score_picker(scores, expected):
    cyc = _scored(scores)
    assert names(MaxScorePicker.create().pick(cyc, cyc.pods)) == expected


def test_max_score_picker_breaks_ties_at_random_reproducibly():
    firsts = {names(MaxScorePicker.create().pick(c := _scored([0.5] * 3, s), c.pods))[0]
              for s in range(40)}  # fmt: skip
    assert firsts == {0, 1, 2}
    a, b = _scored([0.5] * 5, 7), _scored([0.5] * 5, 7)
    picker = MaxScorePicker.create()
    assert names(picker.pick(a, a.pods)) == names(picker.pick(b, b.pods))


@pytest.mark.parametrize(
    ("scores", "expected_share"),
    [
        ([1.0, 1.0], [0.5, 0.5]),
        ([3.0, 1.0], [0.75, 0.25]),
        ([1.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
        ([0.0, 0.0], [0.5, 0.5]),  # all <= 0: uniform
        ([-1.0, -2.0, -3.0], [1 / 3, 1 / 3, 1 / 3]),
    ],
)
def test_weighted_random_picker_shares(scores, expected_share):
    n = 4000
    counts = Counter()
    picker = WeightedRandomPicker.create()
    for seed in range(n):
        cyc = _scored(scores, seed)
        order = names(picker.pick(cyc, cyc.pods))
        assert sorted(order) == list(range(len(scores)))
        counts[order[0]] += 1
    for i, share in enumerate(expected_share):
        assert counts[i] / n == pytest.approx(share, abs=0.04)


def test_weighted_random_zero_scores_come_last():
    cyc = _scored([0.0, 0.2, 0.0, 0.7])
    order = names(WeightedRandomPicker.create().pick(cyc, cyc.pods))
    assert set(order[:2]) == {1, 3} and set(order[2:]) == {0, 2}


def test_random_picker_is_a_seeded_permutation():
    orders = {tuple(names(RandomPicker.create().pick(c := _scored([0] * 4, s), c.pods)))
              for s in range(50)}  # fmt: skip
    assert len(orders) > 5 and all(sorted(o) == [0, 1, 2, 3] for o in orders)


def test_round_robin_picker_rotates():
    rr = RoundRobinPicker.create()
    firsts = []
    for _ in range(7):
        cyc = _scored([0.0] * 3)
        order = names(rr.pick(cyc, cyc.pods))
        assert sorted(order) == [0, 1, 2]
        firsts.append(order[0])
    assert firsts == [0, 1, 2, 0, 1, 2, 0]


# --- latency-slo-admitter -------------------------------------------------------------------------
BUSY = {"running": 3, "in_flight": 3, "kv": 0.5}


@pytest.mark.parametrize(
    ("pods", "request_", "shed"),
    [
        # nobody meets TTFT 50, sheddable, busy and warm: shed
        ([P(pred=(100, 10), **BUSY), P(pred=(200, 10), **BUSY)], req(ttft=50, priority=-1), True),
        ([P(pred=(100, 30), **BUSY)], req(tpot=20, priority=-1), True),
        # priority >= 0 is never shed
        ([P(pred=(100, 10), **BUSY)], req(ttft=50, priority=0), False),
        # no SLO header: never shed
        ([P(pred=(100, 10), **BUSY)], req(priority=-1), False),
        # one pod meets it
        ([P(pred=(100, 10), **BUSY), P(pred=(40, 10), **BUSY)], req(ttft=50, priority=-1), False),
        # an idle pod or a cold pod (KV < 2%) admits
        ([P(pred=(100, 10), **BUSY), P(pred=(100, 10), running=0, in_flight=0, kv=0.5)],
         req(ttft=50, priority=-1), False),
        ([P(pred=(100, 10), **BUSY), P(pred=(100, 10), running=2, in_flight=2, kv=0.01)],
         req(ttft=50, priority=-1), False),
        # no predictions: admit
        ([P(**BUSY)], req(ttft=50, priority=-1), False),
    ],
)  # fmt: skip
def test_latency_slo_admitter(pods, request_, shed):
    verdict = LatencySloAdmitter.create().admit(cycle(pods, request_))
    if shed:
        assert verdict is not None and verdict[0] == "slo_unattainable"
        assert "slo_unattainable" in verdict[1] and "priority -1" in verdict[1]
    else:
        assert verdict is None


def test_admitter_cold_threshold_parameter():
    pods = [P(pred=(100, 10), running=2, in_flight=2, kv=0.01)]
    adm = LatencySloAdmitter.create(coldKvThreshold=0.0)
    assert adm.admit(cycle(pods, req(ttft=50, priority=-1))) is not None


def test_plugins_are_deterministic_given_the_rng():
    pods = [P(prefix=1.0, pred=(100, 10)), P(pred=(50, 10)), P(pred=(80, 20))]
    picks = []
    for _ in range(2):
        cyc = cycle(pods, req(ttft=90), seed=3)
        kept = PrefixCacheAffinityFilter.create(epsilon=0.5).filter(cyc, cyc.pods)
        for st, s in zip(kept, LatencyScorer.create().score(cyc, kept), strict=True):
            st.score = s
        picks.append(names(WeightedRandomPicker.create().pick(cyc, kept)))
    assert picks[0] == picks[1]
