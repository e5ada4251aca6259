"""The Scheduler: cycle order, paths, shedding, ranking, the timing hook, and the shipped
profiles end to end on hand-built candidates."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.scheduling.config import load_config
from services.gateway.scheduling.cycle import SchedulingRequest
from services.gateway.scheduling.plugins.filters import PrefixCacheAffinityFilter
from services.gateway.scheduling.plugins.pickers import MaxScorePicker
from services.gateway.scheduling.plugins.producer import PredictedLatencyProducer
from services.gateway.scheduling.plugins.scorers import KvCacheUtilizationScorer, QueueScorer
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.scheduler import PluginTimer, Scheduler
from tests.unit.scheduling_helpers import P, cycle, predictions_of, req, rows_of

CFG = load_config()
BUSY = {"running": 3, "in_flight": 3, "kv": 0.5}


def run(profile, pods, request=None, seed=0, reason=None, **kw):
    sched = CFG.scheduler(profile, **kw)
    preds = predictions_of(pods) if sched.predicts else None
    return sched.schedule(request or req(), rows_of(pods), preds, now=0.0,
                          rng=random.Random(seed), fallback_reason=reason)  # fmt: skip


@pytest.mark.parametrize(
    ("profile", "pods", "path", "reason"),
    [
        # headroom ranks by the cost model: predictions present or not, it never says predicted
        ("headroom", [P(pred=(1, 1))], "cost-model", None),
        ("headroom", [P()], "cost-model", None),
        ("llmd-predicted", [P(pred=(1, 1))], "predicted", None),
        ("llmd-predicted", [P()], "fallback", "timeout"),
        ("gie-default", [P()], "heuristic", None),
        ("round-robin", [P(pred=(1, 1))], "heuristic", None),
    ],
)
def test_paths(profile, pods, path, reason):
    d = run(profile, pods, reason="timeout")
    assert (d.path, d.fallback_reason, d.admitted, d.ranked) == (path, reason, True, [0])
    assert d.profile == profile


def test_fallback_reason_defaults_to_no_predictions():
    assert run("llmd-predicted", [P()]).fallback_reason == "no_predictions"


def test_predicted_values_of_the_chosen_pod():
    d = run("headroom", [P(pred=(100, 10), backlog=1.0, **BUSY), P(pred=(50, 20), **BUSY)])
    assert d.chosen == 1 and (d.predicted_ttft_ms, d.predicted_tpot_ms) == (50, 20)
    d = run("headroom", [P(), P()])
    assert d.predicted_ttft_ms is None and d.predicted_tpot_ms is None


def test_ranking_lists_every_candidate_filtered_ones_last():
    pods = [P(prefix=0.0, pred=(10, 1)), P(prefix=1.0, pred=(100, 10)), P(prefix=0.0, pred=(5, 1))]
    sched = Scheduler("t", [(PrefixCacheAffinityFilter.create(epsilon=0), 1.0),
                            (MaxScorePicker.create(), 1.0)])  # fmt: skip
    d = sched.schedule(req(), rows_of(pods), predictions_of(pods), now=0, rng=random.Random(0))
    assert d.ranked == [1, 0, 2]
    assert d.scores == [None, 0.0, None]
    assert d.notes == {"prefix-cache-affinity-filter": "sticky"}


def test_scorers_are_weighted_and_summed():
    pods = [P(waiting=0, kv=0.9), P(waiting=10, kv=0.0)]
    sched = Scheduler("t", [(QueueScorer.create(), 2.0), (KvCacheUtilizationScorer.create(), 3.0),
                            (MaxScorePicker.create(), 1.0)])  # fmt: skip
    d = sched.schedule(req(), rows_of(pods), None, now=0, rng=random.Random(0))
    assert d.scores == pytest.approx([2 * 1 + 3 * 0.1, 2 * 0 + 3 * 1.0])
    assert d.ranked == [1, 0]


def test_shedding_decision():
    pods = [P(pred=(900, 10), **BUSY), P(pred=(800, 10), **BUSY)]
    for profile in ("headroom", "llmd-predicted"):
        d = run(profile, pods, req(ttft=200, tpot=50, priority=-1))
        assert not d.admitted and d.ranked == [] and d.chosen is None
        assert d.reject_reason == "slo_unattainable" and "TTFT 200 ms" in d.reject_message
        assert d.path == "predicted"
        # the same request at priority 0 is routed, to the faster pod
        d = run(profile, pods, req(ttft=200, tpot=50, priority=0))
        assert d.admitted
    pods[0].backlog = 0.5  # headroom ranks by the time it costs (cost model), not predictions
    assert run("headroom", pods, req(ttft=200, priority=0)).chosen == 1
    # heuristic profiles never shed
    assert run("gie-default", pods, req(ttft=200, priority=-1)).admitted


def test_headroom_weighs_own_latency_against_harm_to_decoding_requests():
    # pod 0 has a second of prefill queued; pod 1 none but protected decodes to slow down.
    # headroom learns the damage weight: kappa 2 x typical prefill 0.5 s / typical decode
    # time (100 tokens x the 30 ms TPOT prior) = 1/3 on a fresh scheduler
    pods = [P(backlog=1.0, service=0.5, **BUSY), P(backlog=0.0, service=0.5, protected=10)]
    assert run("headroom", pods).chosen == 0  # 1.5 s < 0.5 s + 1/3 x 10 x 0.5 s
    pods[1].protected = 2
    assert run("headroom", pods).chosen == 1  # 1.5 s > 0.5 s + 1/3 x 2 x 0.5 s
    # a cached prefix shows as a shorter own prefill
    pods = [P(service=0.05, prefix=1.0, backlog=0.1), P(service=0.5)]
    assert run("headroom", pods).chosen == 0


def test_learned_damage_weight_follows_prefill_and_decode_sizes():
    """Short prompts with long answers (chat) weigh decodes little, long prompts with short
    answers much: kappa x typical prefill / (typical max_tokens x typical TPOT)."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    def learned(service, max_tokens, tpot_ms, n=2000):
        sc = LatencyCostScorer.create(damageAdapt=True, damageKappa=2.0)
        sched = Scheduler(
            "t",
            [(PredictedLatencyProducer.create(), 1.0), (sc, 1.0), (MaxScorePicker.create(), 1.0)],
        )
        pods = [P(service=service, pred=(100, tpot_ms)), P(service=2 * service, pred=(100, 50))]
        rows = rows_of(pods)
        for _ in range(n):
            sched.schedule(req(max_tokens=max_tokens), rows, predictions_of(pods), now=0.0,
                           rng=random.Random(0))  # fmt: skip
        return sc.damage_weight()

    chat = learned(0.06, 250, 16.0)
    reuse = learned(1.0, 150, 30.0)
    assert chat == pytest.approx(2 * 0.06 / (250 * 0.016), rel=0.02)
    assert reuse == pytest.approx(2 * 1.0 / (150 * 0.030), rel=0.02)
    # bounded, and the fixed weight without damageAdapt
    assert learned(100.0, 1, 1.0, n=50) == 5.0
    assert LatencyCostScorer.create(damageWeight=0.3).damage_weight() == 0.3


def test_learned_damage_weight_reads_the_measured_answer_length_not_the_budget():
    """Clients often send a max_tokens far above the answer (or none: the gateway's default):
    once the budgets run above twice the pod view's measured output tokens, the typical decode
    length is the measured one, so the weight does not shrink with the budget."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    def learned(max_tokens, measured, share=1.0, scale=False):
        sc = LatencyCostScorer.create(damageAdapt=True, damageKappa=2.0, damageShare=scale)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        pods = [P(service=0.5, tpot_s=0.02, budget_share=share),
                P(service=1.0, tpot_s=0.03, budget_share=share)]  # fmt: skip
        rows = rows_of(pods)
        rows.candidates[:] = [replace(c, typical_output_tokens=measured) for c in rows.candidates]
        for _ in range(500):
            sched.schedule(req(max_tokens=max_tokens), rows, None, now=0.0, rng=random.Random(0))
        return sc.damage_weight()

    exact = learned(200, None)  # nothing finished yet: the budget stands for the answer
    assert exact == pytest.approx(2 * 0.5 / (200 * 0.02), rel=0.05)
    assert learned(4096, 200.0) == pytest.approx(exact, rel=0.05)  # measured: same weight
    assert learned(4096, None) == pytest.approx(exact * 200 / 4096, rel=0.05)
    # with damageShare, before 100 answers are measured the share of their budgets the
    # first 8 used scales the budget to the answers' length (off: as above, the weight at
    # 4096 budgets sat at its floor for most of holdout3's agentic-e@1.2 run)
    assert learned(4096, None, share=200 / 4096, scale=True) == pytest.approx(exact, rel=0.05)
    assert learned(4096, None, share=200 / 4096) == pytest.approx(exact * 200 / 4096, rel=0.05)
    assert learned(4096, None, share=None, scale=True) == pytest.approx(
        exact * 200 / 4096, rel=0.05
    )  # nothing finished: the budget stands for the answer
    assert learned(200, None, share=1.0, scale=True) == pytest.approx(exact, rel=0.05)
    # budgets within twice the measured answers are answer lengths: they stand
    assert learned(300, 200.0) == pytest.approx(exact * 200 / 300, rel=0.05)
    assert learned(200, 120.0) == pytest.approx(exact, rel=0.05)


def test_shipped_headroom_scales_fixed_budgets_by_the_measured_share():
    """`headroom` ships damageShare (session 25, rule 6: holdout7 at 4096-token budgets 9 -> 3
    attainable failing checks, identical with exact budgets): with clients sending 4096 and
    the first answers using 200 of it, the learned damage weight is the one exact budgets give,
    not 200 / 4096 of it. `headroom-learned` keeps it off (not judged for it)."""

    def learned(profile, max_tokens, share):
        sched = CFG.scheduler(profile)
        sc = next(p for p in sched.plugins if type(p).__name__ == "LatencyCostScorer")
        pods = [P(service=0.5, tpot_s=0.02, budget_share=share, pred=(500, 20)),
                P(service=1.0, tpot_s=0.03, budget_share=share, pred=(1000, 30))]  # fmt: skip
        rows = rows_of(pods)
        for _ in range(500):
            sched.schedule(req(max_tokens=max_tokens), rows, predictions_of(pods), now=0.0,
                           rng=random.Random(0))  # fmt: skip
        return sc.damage_weight()

    exact = learned("headroom", 200, 1.0)
    assert learned("headroom", 4096, 200 / 4096) == pytest.approx(exact, rel=0.05)
    assert learned("headroom-learned", 4096, 200 / 4096) == pytest.approx(
        learned("headroom-learned", 200, 1.0) * 200 / 4096, rel=0.05
    )


def test_learned_damage_weight_reads_the_measured_tpot_without_predictions():
    """headroom does not ask the predictors for most requests: the typical TPOT comes from
    the pod view's measured TPOT (the least over the pods), which wins over a prediction."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    def learned(pods, with_predictions, n=2000):
        sc = LatencyCostScorer.create(damageAdapt=True, damageKappa=2.0)
        sched = Scheduler(
            "t",
            [(PredictedLatencyProducer.create(), 1.0), (sc, 1.0), (MaxScorePicker.create(), 1.0)],
        )
        rows = rows_of(pods)
        preds = predictions_of(pods) if with_predictions else None
        for _ in range(n):
            sched.schedule(req(max_tokens=200), rows, preds, now=0.0, rng=random.Random(0))
        return sc.damage_weight()

    measured = [P(service=0.1, tpot_s=0.012), P(service=0.2, tpot_s=0.020)]
    assert learned(measured, False) == pytest.approx(2 * 0.1 / (200 * 0.012), rel=0.02)
    # no measurement, no predictions: the 30 ms prior
    assert learned([P(service=0.1), P(service=0.2)], False) == pytest.approx(
        2 * 0.1 / (200 * 0.030), rel=0.02
    )
    # a measurement beats a prediction (50 ms predicted, 12 ms measured)
    both = [P(service=0.1, tpot_s=0.012, pred=(100, 50)), P(service=0.2, pred=(100, 60))]
    assert learned(both, True) == pytest.approx(2 * 0.1 / (200 * 0.012), rel=0.02)


def test_headroom_sends_a_hopeless_request_where_it_harms_the_fewest():
    # the TTFT SLO (300 ms) is out of reach everywhere: the pod with the fewest protected
    # decodes takes it even though its own wait there is the longest
    pods = [P(backlog=0.5, service=0.4, protected=30), P(backlog=2.0, service=0.4, protected=0),
            P(backlog=0.6, service=0.4, protected=5)]  # fmt: skip
    d = run("headroom", pods, req(ttft=300))
    assert d.chosen == 1 and d.notes["latency-cost-scorer"] == "hopeless"
    # within reach: pod 2 (1.0 s + 0.05 x 5 x 0.4 s) beats pod 0 (0.9 s + 0.05 x 30 x 0.4 s)
    d = run("headroom", pods, req(ttft=5000))
    assert d.chosen == 2 and d.notes["latency-cost-scorer"] == "normal"
    # time already spent in the gateway's queue counts against the SLO
    assert run("headroom", pods, req(ttft=1500, queued_s=0.2)).chosen == 2
    assert run("headroom", pods, req(ttft=1500, queued_s=0.7)).chosen == 1


# pod 1 harms nobody but has 20 s queued: a sink (own TTFT 1.4 / 20.4 / 3.4 s)
SINK_PODS = [P(backlog=1.0, service=0.4, protected=30), P(backlog=20.0, service=0.4, protected=0),
             P(backlog=3.0, service=0.4, protected=8)]  # fmt: skip


def hopeless_ranking(**params) -> list[int]:
    """The pods of SINK_PODS in the order a latency-cost-scorer with ``params`` ranks them
    for a request whose 300 ms TTFT SLO no pod can meet."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    sc = LatencyCostScorer.create(hopelessLatencyWeight=0.1, **params)
    sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
    d = sched.schedule(req(ttft=300), rows_of(SINK_PODS), None, now=0.0, rng=random.Random(0))
    assert d.notes["latency-cost-scorer"] == "hopeless"
    return d.ranked


def test_hopeless_requests_wait_at_most_hopeless_max_delay_times_their_best():
    # Unbounded, the hopeless request goes to the sink anyway; with hopelessMaxDelay 3 only
    # pods within 3 x 1.4 s of own TTFT qualify
    def chosen(max_delay):
        return hopeless_ranking(hopelessMaxDelay=max_delay)

    assert chosen(0.0)[0] == 1
    assert chosen(3.0) == [2, 0, 1]  # the sink ranks last
    assert chosen(1.0) == [0, 2, 1]  # only the fastest pod qualifies
    assert chosen(0.5) == [0, 2, 1]  # below 1: still the fastest pod, not an empty set
    assert run("headroom", SINK_PODS, req(ttft=300)).chosen == 2  # the shipped bound: 10 (14 s)


def test_hopeless_max_wait_s_bounds_the_wait_in_seconds_beside_the_multiple():
    # own TTFT 1.4 / 20.4 / 3.4 s: 10 x the best lets pod 1 (the sink) in at 14 s no more,
    # but lets pod 2 in; 1.5 s above the best leaves only pod 0, 2.5 s pods 0 and 2
    ranked = hopeless_ranking

    assert ranked(hopelessMaxWaitS=0.0)[0] == 1  # off: the sink
    assert ranked(hopelessMaxWaitS=30.0)[0] == 1  # 20.4 s is within 1.4 + 30
    assert ranked(hopelessMaxWaitS=2.5) == [2, 0, 1]
    assert ranked(hopelessMaxWaitS=1.5) == [0, 2, 1]
    # both set: the tighter one holds (10 x 1.4 = 14 s would let pod 2 in, 1.5 s does not)
    assert ranked(hopelessMaxDelay=10.0, hopelessMaxWaitS=1.5) == [0, 2, 1]
    assert ranked(hopelessMaxDelay=2.0, hopelessMaxWaitS=30.0) == [0, 2, 1]


def test_max_own_delay_s_bounds_what_the_prices_cost_a_request_that_is_not_hopeless():
    """rag-j's case (holdout8, session 26): the pod holding the document with no queue decodes
    beside a huge context, so the decode price sends the request behind a 17 s prefill
    elsewhere. maxOwnDelayS ranks pods more than that many seconds above the least own TTFT
    after the others; off (0) it changes nothing, and a hopeless request keeps its own bounds."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    # own TTFT 0.1 / 17.1 / 2.1 s; context in flight 2.4M / 0 / 2.0M tokens (mean 1.47M): the
    # decode price of 300 steps is ~28 / 0 / 16 s, so the costs are ~28.1 / 17.1 / 18.1 s
    pods = [P(service=0.1, protected=16, context=2.4e6, decode_k=1e-7),
            P(backlog=17.0, service=0.1, protected=4, decode_k=1e-7),
            P(backlog=2.0, service=0.1, protected=6, context=2.0e6, decode_k=1e-7)]  # fmt: skip

    def ranked(request=None, **params):
        sc = LatencyCostScorer.create(decodeWeight=1.0, **params)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        rq = request or req(max_tokens=300)
        return sched.schedule(rq, rows_of(pods), None, now=0.0, rng=random.Random(0)).ranked

    assert ranked()[0] == 1  # unbounded: 17 s of TTFT for a faster decode
    assert ranked(maxOwnDelayS=0.0) == ranked()
    assert ranked(maxOwnDelayS=5.0) == [2, 0, 1]  # within 5 s: pod 2, then pod 0
    assert ranked(maxOwnDelayS=1.0) == [0, 2, 1]  # only the fastest pod qualifies
    # hopeless (a 50 ms SLO): the bound does not apply, the hopeless rule places it
    hopeless = req(ttft=50, max_tokens=300)
    assert ranked(hopeless, maxOwnDelayS=1.0) == ranked(hopeless)


def test_slo_headers_beat_prefix_affinity_in_llmd_only_after_affinity():
    # pod 0 holds the whole prefix but decodes too slowly for the TPOT SLO
    pods = [P(prefix=1.0, pred=(100, 40), **BUSY), P(pred=(300, 15), **BUSY)]
    slo = req(ttft=500, tpot=20)
    llmd = Counter(run("llmd-predicted", pods, slo, seed=s).chosen for s in range(200))
    assert llmd[0] >= 190  # upstream: affinity runs before the SLO tiers


def test_headroom_is_deterministic_and_llmd_is_weighted_random():
    pods = [P(pred=(100 + 10 * i, 10), backlog=0.1 * i, **BUSY) for i in range(8)]
    head = Counter(run("headroom", pods, seed=s).chosen for s in range(200))
    llmd = Counter(run("llmd-predicted", pods, seed=s).chosen for s in range(200))
    assert head == {0: 200}
    assert len(llmd) >= 6 and llmd[7] == min(llmd.values())


def test_llmd_affinity_gates_strict_then_loose():
    pods = [P(prefix=0.9, pred=(500, 10), **BUSY), P(prefix=1.0, pred=(900, 10), **BUSY),
            P(pred=(100, 10), **BUSY)]  # fmt: skip
    chosen = Counter(run("llmd-predicted", pods, seed=s).chosen for s in range(300))
    assert chosen[1] >= 280  # the strict gate keeps only the full match (bar 1% exploration)
    # beyond the 5 s load gate the strict gate opens; the loose one keeps pods 0 and 1
    pods[1] = P(prefix=1.0, pred=(9000, 10), **BUSY)
    chosen = Counter(run("llmd-predicted", pods, seed=s).chosen for s in range(300))
    assert chosen[0] > 3 * chosen[1] and chosen[2] <= 10


def test_fallback_without_predictions_uses_the_composite():
    pods = [P(waiting=5, kv=0.9, **{"running": 3}), P(waiting=0, kv=0.1)]
    assert run("llmd-predicted", pods).chosen == 1
    assert run("llmd-predicted", pods).scores[1] == pytest.approx((0.9 + 1 + 0) / 3)
    # headroom needs no predictions to rank: the cost model's estimates are always there
    assert run("headroom", [P(backlog=1.0), P()]).chosen == 1


@pytest.mark.parametrize(
    ("profile", "pods", "expected"),
    [
        ("least-request", [P(in_flight=3), P(in_flight=1), P(in_flight=2)], 1),
        ("gie-default", [P(waiting=2, kv=0.5), P(waiting=0, kv=0.5, prefix=0.5)], 1),
        ("gie-default", [P(waiting=0, kv=0.9), P(waiting=1, kv=0.1, prefix=1.0)], 1),
        ("prefix-aware", [P(prefix=0.5), P(prefix=1.0), P()], 1),
        ("cache-aware", [P(in_flight=50, prefix=1.0), P(in_flight=2), P(in_flight=9)], 1),
        ("cache-aware", [P(in_flight=5, prefix=1.0), P(in_flight=2)], 0),
        ("cache-aware", [P(blocks=50), P(blocks=5)], 1),
    ],
)
def test_baseline_profiles(profile, pods, expected):
    assert run(profile, pods).chosen == expected


def test_round_robin_rotates_across_calls():
    sched = CFG.scheduler("round-robin")
    rows = rows_of([P(), P(), P()])
    firsts = [sched.schedule(req(), rows, None, now=0, rng=random.Random(0)).chosen
              for _ in range(6)]  # fmt: skip
    assert firsts == [0, 1, 2, 0, 1, 2]


def test_timer_hook_sees_every_plugin_once_per_cycle():
    seen = []
    ticks = iter(range(10_000))
    timer = PluginTimer(lambda p, s: seen.append((p.KIND, p.TYPE, p.name, s)),
                        clock=lambda: float(next(ticks)))  # fmt: skip
    pods = [P(pred=(100, 10), **BUSY), P(pred=(50, 10), **BUSY)]
    run("llmd-predicted", pods, timer=timer)
    assert [(k, n) for k, _, n, _ in seen] == [
        ("producer", "latency-producer"), ("admitter", "latency-slo-admitter"),
        ("filter", "affinity-strict"), ("filter", "affinity-loose"),
        ("filter", "slo-headroom-tier-filter"), ("scorer", "latency-scorer"),
        ("picker", "weighted-random-picker"),
    ]  # fmt: skip
    assert all(s == 1.0 for *_, s in seen)


def test_bad_inputs():
    sched = CFG.scheduler("headroom")
    with pytest.raises(ValueError):
        sched.schedule(req(), rows_of([]), None, now=0, rng=random.Random(0))
    with pytest.raises(ValueError):
        sched.schedule(req(), rows_of([P(), P()]), predictions_of([P(pred=(1, 1))]), now=0,
                       rng=random.Random(0))  # fmt: skip
    with pytest.raises(ValueError, match="no picker"):
        Scheduler("x", [(QueueScorer.create(), 1.0)])


def test_request_defaults():
    r = SchedulingRequest("m", 10)
    assert (r.slo_ttft_ms, r.slo_tpot_ms, r.priority, r.has_slo) == (None, None, 0, False)
    assert SchedulingRequest("m", 10, slo_tpot_ms=5).has_slo


pod_strategy = st.builds(
    P,
    waiting=st.integers(0, 20), running=st.integers(0, 50), kv=st.floats(0, 1),
    prefix=st.sampled_from([0.0, 0.5, 0.85, 1.0]), in_flight=st.integers(0, 50),
    blocks=st.integers(0, 1000),
    pred=st.tuples(st.floats(1, 1e5), st.floats(1, 500)),
    tpot_slo=st.one_of(st.none(), st.floats(5, 100)),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(pod_strategy, min_size=1, max_size=10), st.sampled_from(sorted(CFG.profiles)),
       st.one_of(st.none(), st.floats(10, 5000)), st.one_of(st.none(), st.floats(5, 100)),
       st.integers(-1, 1), st.booleans(), st.integers(0, 1000))  # fmt: skip
def test_every_profile_ranks_a_permutation_or_sheds(pods, profile, ttft, tpot, prio, preds, seed):
    if not preds:
        pods = [P(**{**p.__dict__, "pred": None}) for p in pods]
    d = run(profile, pods, req(ttft, tpot, prio), seed=seed)
    if d.admitted:
        assert sorted(d.ranked) == list(range(len(pods)))
        assert d.scores[d.chosen] is not None
    else:
        assert prio < 0 and d.ranked == [] and d.reject_reason == "slo_unattainable"


def _reversed_predictions(pods):
    """Two prediction sets that rank the pods in opposite orders."""
    n = len(pods)
    up = [Prediction(100.0 * (i + 1), 10.0 * (i + 1)) for i in range(n)]
    return up, list(reversed(up))


REQUESTS = {
    "plain": req(),
    "slo": req(ttft=5000, tpot=500),
    "sheddable": req(ttft=5000, tpot=500, priority=-1),
}


@pytest.mark.parametrize("profile", sorted(CFG.profiles))
@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_the_label_says_predicted_exactly_when_predictions_ranked(profile, kind):
    """x-headroom-routing comes from Decision.path: it must say ``predicted`` when, and only
    when, the learned predictions decided the ranking. Feed every shipped profile the same
    pods with two prediction sets that rank them in opposite orders: where the ranking does
    not move with the predictions, the label must not claim them; where it says predicted,
    the predictions must have moved it; and the predictors are asked only when a plugin
    reads them."""
    sched = CFG.scheduler(profile)
    request = REQUESTS[kind]
    pods = [P(waiting=w, kv=0.3, backlog=b, **{"running": 2, "in_flight": 2})
            for w, b in ((0, 0.4), (1, 0.2), (2, 0.1), (0, 0.3))]  # fmt: skip
    up, down = _reversed_predictions(pods)

    def once(preds):  # a fresh scheduler each time (round-robin keeps a counter)
        return CFG.scheduler(profile).schedule(
            request, rows_of(pods), preds, now=0, rng=random.Random(3)
        )

    a, b = once(up), once(down)
    moved = a.ranked != b.ranked
    assert a.path == b.path
    assert (a.path == "predicted") == moved, (profile, kind, a.path, a.ranked, b.ranked)
    if a.path == "predicted":
        assert sched.reads_predictions(request)
    if not sched.reads_predictions(request):
        assert a.path != "predicted"
        none = once(None)
        assert none.path == a.path and none.ranked == a.ranked  # predictions not read at all


def test_headroom_asks_the_predictors_only_for_sheddable_requests_with_slos():
    sched = CFG.scheduler("headroom")
    assert sched.predicts
    assert not sched.reads_predictions(req())
    assert not sched.reads_predictions(req(ttft=500))
    assert not sched.reads_predictions(req(priority=-1))
    assert sched.reads_predictions(req(ttft=500, priority=-1))
    assert CFG.scheduler("llmd-predicted").reads_predictions(req())
    assert not CFG.scheduler("gie-default").reads_predictions(req())


def test_a_shortlist_lets_the_predictions_rank_only_the_least_estimated_pods():
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    # estimated own TTFT (backlog + service): 0.2 / 0.5 / 3.0 s; predicted: 400 / 300 / 100 ms
    pods = [P(backlog=0.0, service=0.2, pred=(400, 10)), P(backlog=0.3, service=0.2, pred=(300, 10)),
            P(backlog=2.8, service=0.2, pred=(100, 10))]  # fmt: skip

    def decide(shortlist, with_predictions=True):
        sc = LatencyCostScorer.create(latency="predicted", shortlist=shortlist)
        producer = PredictedLatencyProducer.create()
        sched = Scheduler("t", [(producer, 1.0), (sc, 1.0), (MaxScorePicker.create(), 1.0)])
        preds = predictions_of(pods) if with_predictions else None
        return sched.schedule(req(), rows_of(pods), preds, now=0.0, rng=random.Random(0))

    assert decide(0).ranked == [2, 1, 0]  # the predictions rank every pod
    assert decide(2).ranked == [1, 0, 2]  # the two least estimated, by prediction; pod 2 after
    assert decide(3).ranked == [2, 1, 0]  # as long as the pool: no change
    assert decide(2).path == "predicted"
    assert decide(2, with_predictions=False).ranked == [0, 1, 2]  # none: estimated costs
    # a shortlist of one: the cost model decides, and the label and the call say so
    one = decide(1)
    assert (one.ranked, one.path) == ([0, 1, 2], "cost-model")
    assert not LatencyCostScorer.create(latency="predicted", shortlist=1).reads_predictions(req())


def test_shortlist_within_s_lets_the_predictions_break_only_near_ties():
    """shortlistWithinS: the predictions rank only the shortlisted pods whose estimated cost is
    within that many seconds of the least; a clear preference of the cost model stands, and
    then the label says cost-model."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    # estimated own TTFT: 0.20 / 0.23 / 0.50 / 3.0 s; predicted: 400 / 300 / 200 / 100 ms
    pods = [P(backlog=0.0, service=0.2, pred=(400, 10)), P(backlog=0.03, service=0.2, pred=(300, 10)),
            P(backlog=0.3, service=0.2, pred=(200, 10)), P(backlog=2.8, service=0.2, pred=(100, 10))]  # fmt: skip

    def decide(within, shortlist=3):
        sc = LatencyCostScorer.create(latency="predicted", shortlist=shortlist,
                                      shortlistWithinS=within)  # fmt: skip
        producer = PredictedLatencyProducer.create()
        sched = Scheduler("t", [(producer, 1.0), (sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(req(), rows_of(pods), predictions_of(pods), now=0.0,
                              rng=random.Random(0))  # fmt: skip

    off = decide(0.0)  # the shortlist of three, by prediction
    assert (off.ranked, off.path) == ([2, 1, 0, 3], "predicted")
    near = decide(0.05)  # pods 0 and 1 are a near tie: the predictions break it
    assert (near.ranked, near.path) == ([1, 0, 2, 3], "predicted")
    assert decide(0.05, shortlist=0).ranked == [3, 2, 1, 0]  # it bounds a shortlist only
    wide = decide(0.35)  # all three within 0.35 s: as without the bound
    assert wide.ranked == off.ranked
    clear = decide(0.01)  # nothing within 10 ms of the best: the cost model's order stands
    assert (clear.ranked, clear.path) == ([0, 1, 2, 3], "cost-model")


def test_the_decode_price_moves_a_request_off_a_pod_crowded_with_long_contexts():
    """A cached 37k-token prompt costs no prefill on the pod holding its document, but every
    decode step there reads 2M tokens of context while the other pod reads none: with
    decodeWeight its 200 steps over the excess (beyond the fleet's mean) outweigh a cold 2 s
    prefill on the empty pod."""
    from services.gateway.scheduling.plugins.cost_scorer import (
        LatencyCostScorer,
        _decode_excess_s,
    )

    k = 6e-8
    pods = [P(service=0.05, context=2_000_000, in_flight=60, decode_k=k),
            P(service=2.0, context=0, in_flight=0, decode_k=k)]  # fmt: skip
    request = req(input_tokens=37_000, max_tokens=200)

    def chosen(weight, pods=pods):
        sc = LatencyCostScorer.create(decodeWeight=weight)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    cr = rows_of(pods)
    states = cycle(pods, request).pods
    mean = 1_000_000.0
    assert _decode_excess_s(request, states[0], mean) == pytest.approx(k * 200 * 1_037_000)
    assert _decode_excess_s(request, states[1], mean) == 0.0  # below the mean: nothing
    assert cr.candidates[0].context_tokens == 2_000_000
    assert chosen(0.0) == 0  # off: the cache hit wins
    assert chosen(0.1) == 0  # 0.05 + 1.24 s < 2.0 s
    assert chosen(1.0) == 1  # 0.05 + 12.4 s > 2.0 s
    # nothing learned about the pods' decode (k = 0): nothing priced
    flat = [P(service=0.05, context=2_000_000, in_flight=60), P(service=2.0)]
    assert chosen(1.0, flat) == 0


def test_the_decode_price_counts_only_the_context_beyond_the_fleets_mean_and_free_multiple():
    """An evenly loaded fleet prices nothing, however much context every pod holds; a pod
    above the mean is priced only beyond decodeFree x its free context."""
    from services.gateway.scheduling.plugins.cost_scorer import (
        LatencyCostScorer,
        _decode_excess_s,
    )

    k, free = 6e-8, 200_000.0  # attention takes as long as the rest of a step at 200k tokens
    request = req(input_tokens=10_000, max_tokens=200)

    def chosen(pods, weight=1.0, free_multiple=0.0):
        for p in pods:
            p.decode_free = free
        sc = LatencyCostScorer.create(decodeWeight=weight, decodeFree=free_multiple)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    # every pod reads 3M tokens per step: no pod's excess, the cached prefix wins at any weight
    even = [P(service=0.05, context=3_000_000, decode_k=k), P(service=0.5, context=3_000_000,
            decode_k=k)]  # fmt: skip
    assert chosen(even, weight=100.0) == 0

    pods = [P(service=0.05, context=2_000_000, in_flight=20, decode_k=k),
            P(service=0.5, context=0, in_flight=0, decode_k=k)]  # fmt: skip
    for p in pods:
        p.decode_free = free
    states = cycle(pods, request).pods
    excess = 2_000_000 + 10_000 - 1_000_000
    assert _decode_excess_s(request, states[0], 1e6) == pytest.approx(k * 200 * excess)
    assert _decode_excess_s(request, states[0], 1e6, 4.0) == pytest.approx(
        k * 200 * (excess - 800_000)
    )
    assert _decode_excess_s(request, states[0], 1e6, 8.0) == 0.0  # within 8 x free context
    assert chosen(pods) == 1  # 0.05 + 12.1 s against 0.5 s
    assert chosen(pods, free_multiple=4.0) == 1  # 0.05 + 2.5 s against 0.5 s
    assert chosen(pods, free_multiple=8.0) == 0  # within 8 x the free context: the cache wins


def priced(pods, request=None, **params):
    """The decision of a latency-cost-scorer with the decode price (weight 1) and ``params``
    for a 37k-token prompt with 200 tokens to generate (or ``request``) over ``pods``."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    sc = LatencyCostScorer.create(decodeWeight=1.0, **params)
    sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
    return sched.schedule(request or req(input_tokens=37_000, max_tokens=200),
                          rows_of(pods), None, now=0.0, rng=random.Random(0))  # fmt: skip


def test_the_waste_weight_prices_prefill_spent_beyond_the_cheapest_placement():
    """wasteWeight adds wasteWeight x (service_i - least service) to a pod's cost: a cached
    prompt sent to a cold pod spends capacity there that the requests after it lose. It moves
    a decision the decode price had sent away; equal services (no cache anywhere) price
    nothing; a hopeless request is not priced."""

    def decide(pods, waste, request=None):
        return priced(pods, request, wasteWeight=waste)

    # cached pod: own 0.05 s + the decode price 12.4 s; cold pod: own 2.0 s + nothing
    assert decide(crowded(), 0.0).chosen == 1
    assert decide(crowded(), 5.0).chosen == 1  # 2.0 + 5 x 1.95 = 11.8 s < 12.5 s
    assert decide(crowded(), 8.0).chosen == 0  # 2.0 + 8 x 1.95 = 17.6 s > 12.5 s
    # equal services: nothing to price, the backlog decides as without it
    even = [P(service=0.5, backlog=0.3), P(service=0.5, backlog=0.1)]
    assert decide(even, 100.0).chosen == 1
    # a hopeless request (its SLO is lost wherever it goes) keeps its own cost
    hopeless = req(input_tokens=37_000, max_tokens=200, ttft=10)
    assert decide(crowded(), 8.0, hopeless).chosen == decide(crowded(), 0.0, hopeless).chosen


def test_the_reprefill_weight_prices_extra_prefill_by_the_protected_decodes_beside_it():
    """reprefillWeight adds reprefillWeight x protected_i x (service_i - least service): the
    prefill a pod would spend beyond the cheapest placement stalls each protected decode
    there. A cold pod with decodes to protect loses the request the decode price had sent
    it; an idle cold pod (nothing to stall) does not; equal services price nothing; a
    hopeless request keeps its own cost."""

    def decide(pods, weight, request=None):
        return priced(pods, request, reprefillWeight=weight)

    def busy(protected):
        pods = crowded()
        pods[1].protected = protected
        return pods

    # cached pod: own 0.05 s + the decode price 12.4 s; cold pod: own 2.0 s + the damage
    # 0.05 x protected x 2.0 s + reprefillWeight x protected x 1.95 s
    assert decide(busy(0), 0.0).chosen == 1
    assert decide(busy(0), 100.0).chosen == 1  # nothing decodes on the cold pod: free copy
    assert decide(busy(4), 1.0).chosen == 1  # 2.0 + 0.4 + 4 x 1.95 = 10.2 s < 12.5 s
    assert decide(busy(8), 1.0).chosen == 0  # 2.0 + 0.8 + 8 x 1.95 = 18.4 s > 12.5 s
    assert decide(busy(8), 0.5).chosen == 1  # 2.0 + 0.8 + 0.5 x 8 x 1.95 = 10.6 s
    # equal services: nothing to price, the backlog decides as without it
    even = [P(service=0.5, backlog=0.3, protected=9), P(service=0.5, backlog=0.1, protected=9)]
    assert decide(even, 100.0).chosen == 1
    # a hopeless request (its SLO is lost wherever it goes) keeps its own cost
    hopeless = req(input_tokens=37_000, max_tokens=200, ttft=10)
    assert decide(busy(8), 1.0, hopeless).chosen == decide(busy(8), 0.0, hopeless).chosen


def test_max_copy_s_bounds_the_re_prefill_the_prices_may_buy():
    """maxCopyS: a pod where both the prefill beyond the least (a prompt cached elsewhere,
    prefilled again) and the own TTFT given up exceed it ranks after the others by own TTFT.
    rag-j's case (holdout8, session 29): a question over a 106k-token document that two pods
    hold with no queue was sent to prefill it again for 17 s by the decode price. A re-prefill
    the holders' queue pays for (own TTFT no worse) stays allowed; so does a pod slower by its
    queue alone (equal services: nothing is re-prefilled); off (0) it changes nothing; a
    hopeless request keeps its own bounds."""

    def decide(pods, bound, request=None):
        return priced(pods, request, maxCopyS=bound)

    # cached pod: own 0.05 s + the decode price 12.4 s; cold pod: own 2.0 s, 1.95 s of re-prefill
    assert decide(crowded(), 0.0).chosen == 1
    assert decide(crowded(), 2.0).chosen == 1  # within the bound: the copy stands
    assert decide(crowded(), 1.0).ranked == [0, 1]  # 1.95 s bought by the price alone
    # the cached pod queues 3 s: the copy costs no own TTFT (2.0 < 3.05 s), so it stays
    queued = crowded()
    queued[0].backlog = 3.0
    assert decide(queued, 1.0).chosen == 1
    # equal services, the slower pod by its queue only: nothing re-prefilled, nothing bounded
    # (the idle pod's damage price, 0.05 x 400 x 0.5 s, makes the queued one the choice)
    even = [P(service=0.5, backlog=3.0, protected=0), P(service=0.5, backlog=0.0, protected=400)]
    assert decide(even, 0.0).chosen == 0
    assert decide(even, 0.1).chosen == 0
    # a hopeless request (its SLO is lost wherever it goes) keeps its own cost
    hopeless = req(input_tokens=37_000, max_tokens=200, ttft=10)
    assert decide(crowded(), 1.0, hopeless).chosen == decide(crowded(), 0.0, hopeless).chosen


def crowded(share: float | None = 1.0, tpots=(None, None)) -> list[P]:
    """A cached pod whose decode batch reads 2M context tokens (60 decoding) beside an empty
    one where the request would be a cold 2 s prefill (the decode-price tests' fleet)."""
    k = 6e-8
    return [P(service=0.05, context=2_000_000, in_flight=60, decode_k=k, budget_share=share,
              tpot_s=tpots[0]),
            P(service=2.0, context=0, in_flight=0, decode_k=k, budget_share=share,
              tpot_s=tpots[1])]  # fmt: skip


def test_the_decode_price_charges_the_share_of_max_tokens_the_answers_measured_use():
    """The price charges max_tokens x the measured budget share decode steps: nothing until
    the share is measured, all of them when clients send the answers' lengths, a fraction
    under fixed large budgets (4096 tokens, answers ~200: the same steps as an exact 200)."""
    from services.gateway.scheduling.plugins.cost_scorer import (
        LatencyCostScorer,
        _decode_excess_s,
    )

    k, fleet = 6e-8, crowded

    def chosen(pods, request):
        sc = LatencyCostScorer.create(decodeWeight=1.0)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    exact, budget = req(input_tokens=37_000, max_tokens=200), req(input_tokens=37_000,
                                                                 max_tokens=4096)  # fmt: skip
    excess = 2_000_000 + 37_000 - 1_000_000
    unmeasured = cycle(fleet(None), budget).pods[0]
    assert _decode_excess_s(budget, unmeasured, 1e6) == 0.0
    assert chosen(fleet(None), budget) == 0  # no answers measured yet: the cache hit wins
    full = cycle(fleet(1.0), exact).pods[0]
    assert _decode_excess_s(exact, full, 1e6) == pytest.approx(k * 200 * excess)
    share = 200 / 4096
    part = cycle(fleet(share), budget).pods[0]
    assert _decode_excess_s(budget, part, 1e6) == pytest.approx(k * 200 * excess)
    assert chosen(fleet(1.0), exact) == chosen(fleet(share), budget) == 1  # 12.4 s > 2 s
    assert chosen(fleet(1.0), budget) == 1


@pytest.mark.parametrize(("hopeless_decode", "protected", "want"), [
    (True, 0, 1),  # the price moves even a hopeless request off the crowded pod
    (False, 0, 0),  # unpriced: its SLO is lost anyway, and it harms no protected decode there
    (False, 60, 1),  # the harm it would do to 60 protected decodes still decides
])  # fmt: skip
def test_hopeless_decode_false_leaves_a_hopeless_requests_own_decode_unpriced(
    hopeless_decode, protected, want
):
    """With hopelessDecode false a request that can no longer meet its TTFT SLO (10 ms here,
    the best pod's own TTFT is 50 ms) is placed by the harm it does, not by its own decode
    time, which no longer counts towards its SLO; a request with time left is priced as
    before (test_the_decode_price_...)."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    pods = crowded(1.0)
    pods[0] = replace(pods[0], protected=protected)
    sc = LatencyCostScorer.create(decodeWeight=1.0, hopelessDecode=hopeless_decode)
    sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])

    def chosen(request):
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    assert chosen(req(ttft=10.0, input_tokens=37_000, max_tokens=400)) == want
    assert chosen(req(ttft=5_000.0, input_tokens=37_000, max_tokens=400)) == 1  # not hopeless


def test_shipped_headroom_prices_the_decode_once_the_answers_share_is_measured():
    """The shipped `headroom` (decodeWeight 1, decodeSlack 0.1, session 24; 0.5 / 0.25 from
    session 22) moves a cached request off a pod whose decode batch reads far more context
    than the others', once the share of their budgets the answers use is measured; before
    that, and when the answers use little of large budgets, the cache hit wins as unpriced.
    At a 10% share (40 steps) the shipped price moves the request where session 22's did not
    (0.5 x 1.89 s beyond a 25% slack < 2 s)."""
    fleet = crowded
    request = req(input_tokens=37_000, max_tokens=400)
    assert run("headroom", fleet(1.0), request).chosen == 1  # 1 x 22.5 s of decode > 2 s
    assert run("headroom", fleet(None), request).chosen == 0  # nothing measured yet
    assert run("headroom", fleet(0.1), request).chosen == 1  # 40 steps: 1 x 2.25 s > 2 s
    assert run("headroom", fleet(0.05), request).chosen == 0  # 20 steps: 1 x 1.12 s < 2 s


def test_shipped_headroom_learned_carries_session_22s_decode_price():
    """`headroom-learned` prices the decode at session 22's half weight and 25% slack
    (session 23: on the fresh holdout5 it halved the learned profile's failing checks;
    `headroom`'s full weight and 10% slack of session 24 failed its rule for the learned
    profile on holdout6): with the learned TTFTs ranking (a cached 50 ms against a cold 2 s)
    or without predictions (the cost model's fallback), a request leaves the pod crowded
    with long contexts once the answers' share is measured; at a 10% share (0.5 x 1.89 s
    beyond the slack) it stays where `headroom` now moves."""
    request = req(input_tokens=37_000, max_tokens=400)

    def fleet(share, preds=True):
        pods = crowded(share)
        if preds:
            pods[0].pred, pods[1].pred = (50.0, 20.0), (2000.0, 20.0)
        return pods

    assert run("headroom-learned", fleet(1.0)).path == "predicted"
    assert run("headroom-learned", fleet(1.0), request).chosen == 1
    assert run("headroom-learned", fleet(1.0, preds=False), request).chosen == 1
    assert run("headroom-learned", fleet(None), request).chosen == 0  # nothing measured yet
    assert run("headroom-learned", fleet(0.1, preds=False), request).chosen == 0
    assert run("headroom", crowded(0.1), request).chosen == 1


def test_decode_confirm_prices_only_pods_whose_measured_tpot_also_runs_above_the_mean():
    """With decodeConfirm the context excess is priced only on a pod whose measured TPOT runs
    more than decodeSlack above the pods' mean measured TPOT; not on one whose TPOT is like
    the others' (a passing pile of context), nor before any TPOT is measured."""
    from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

    request = req(input_tokens=37_000, max_tokens=200)

    def fleet(tpots):
        return crowded(tpots=tpots)

    def chosen(pods, confirm):
        sc = LatencyCostScorer.create(decodeWeight=1.0, decodeSlack=0.25, decodeConfirm=confirm)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    assert chosen(fleet((0.02, 0.02)), False) == 1  # priced on the context alone: moved
    assert chosen(fleet((0.02, 0.02)), True) == 0  # measured alike: the cache hit wins
    assert chosen(fleet((None, None)), True) == 0  # nothing measured: nothing priced
    assert chosen(fleet((0.05, 0.02)), True) == 1  # 0.05 > 1.25 x 0.035: priced, moved
    assert chosen(fleet((0.04, 0.03)), True) == 0  # 0.04 < 1.25 x 0.035: within the slack


def test_decode_drain_prices_only_the_context_still_decoding_beside_the_request():
    """With decodeDrain each request in flight counts its context for the share of the new
    request's decode steps it is expected to still decode: a pod whose 60 long contexts are
    10 steps from done holds little of them over a 200-step answer (the cache hit wins), one
    whose contexts decode on for 400 steps holds all of it (moved, as without the drain)."""
    from services.gateway.scheduling.plugins.cost_scorer import (
        LatencyCostScorer,
        _shared_context,
    )

    request = req(input_tokens=37_000, max_tokens=200)

    def fleet(steps_left):
        pods = crowded()
        pods[0].left = tuple((2_000_000 / 60, steps_left) for _ in range(60))
        return pods

    def chosen(pods, drain):
        sc = LatencyCostScorer.create(decodeWeight=1.0, decodeDrain=drain)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    ending, lasting = fleet(10.0), fleet(400.0)
    assert _shared_context(cycle(ending, request).pods[0], 200.0) == pytest.approx(100_000)
    assert _shared_context(cycle(lasting, request).pods[0], 200.0) == pytest.approx(2_000_000)
    assert _shared_context(cycle(ending, request).pods[1], 200.0) == 0.0  # nothing in flight
    assert chosen(ending, False) == 1  # the pod's context in flight, priced for 200 steps
    assert chosen(ending, True) == 0  # 0.05 + 200 k (100k + 37k - 50k) = 1.09 s < 2 s
    assert chosen(lasting, True) == 1  # still decoding through the answer: moved


def test_the_decode_slack_prices_only_a_pod_whose_tpot_runs_beyond_a_fraction_of_the_means():
    """decodeSlack s prices the context beyond the mean plus s x (free context + mean): the
    pod's TPOT more than s x the mean pod's. The same excess is priced on a fleet reading
    little context and within the slack on one reading much (the threshold scales with it)."""
    from services.gateway.scheduling.plugins.cost_scorer import (
        LatencyCostScorer,
        _decode_excess_s,
    )

    k, free = 6e-8, 200_000.0
    request = req(input_tokens=10_000, max_tokens=200)

    def fleet(low, high):
        pods = [P(service=0.05, context=high, in_flight=20, decode_k=k),
                P(service=0.5, context=low, in_flight=5, decode_k=k)]  # fmt: skip
        for p in pods:
            p.decode_free = free
        return pods

    def chosen(pods, slack):
        sc = LatencyCostScorer.create(decodeWeight=1.0, decodeSlack=slack)
        sched = Scheduler("t", [(sc, 1.0), (MaxScorePicker.create(), 1.0)])
        return sched.schedule(request, rows_of(pods), None, now=0.0, rng=random.Random(0)).chosen

    # 400k tokens apart either way: mean 200k (small fleet) or 1.2M (large)
    small, large = fleet(0.0, 400_000.0), fleet(1_000_000.0, 1_400_000.0)
    s_small = cycle(small, request).pods[0]
    s_large = cycle(large, request).pods[0]
    excess = 400_000 + 10_000 - 200_000
    assert _decode_excess_s(request, s_small, 200_000.0, 0.0, 0.25) == pytest.approx(
        k * 200 * (excess - 0.25 * (free + 200_000))
    )
    # on the large fleet the same gap is within a quarter of the mean pod's TPOT
    assert _decode_excess_s(request, s_large, 1_200_000.0, 0.0, 0.25) == 0.0
    assert chosen(small, 0.25) == 1  # 0.05 + 1.3 s against 0.5 s: off the crowded pod
    assert chosen(large, 0.25) == 0  # not priced: the cache wins
    assert chosen(small, 1.0) == 0  # within the mean pod's TPOT again: not priced
