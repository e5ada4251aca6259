"""PodView: candidates, staleness, and the gateway's own in-flight counters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.scheduling.cost_model import DECODE_PRIOR_S_PER_TOKEN
from services.gateway.scheduling.pod_view import COLD_OBSERVATIONS, PodView
from shared.features import PodLoad
from shared.schemas import PodRecord, PodSnapshot

MODEL = "m"


def rec(name, *, ready=True, scraped_at=100.0, models=(MODEL,), waiting=0.0, running=0.0, kv=0.0):
    return PodRecord(
        name=name, url=f"http://{name}", ready=ready, scraped_at=scraped_at,
        models=list(models), waiting=waiting, running=running, kv_usage=kv,
    )  # fmt: skip


def view(*records, stale_after_s=2.0):
    v = PodView(stale_after_s=stale_after_s)
    v.apply_snapshot(PodSnapshot(pool="p", ts=100.0, pods=list(records)))
    return v


@pytest.mark.parametrize(
    ("records", "model", "expected"),
    [
        ([rec("a"), rec("b")], MODEL, ["a", "b"]),
        ([rec("a", ready=False), rec("b")], MODEL, ["b"]),
        ([rec("a", models=("x",)), rec("b")], MODEL, ["b"]),
        ([rec("a", models=("x",))], MODEL, []),
        ([rec("b"), rec("a")], MODEL, ["a", "b"]),
        ([], MODEL, []),
    ],
)
def test_candidates_are_ready_pods_serving_the_model(records, model, expected):
    assert [c.name for c in view(*records).candidates(model, now=100.5)] == expected


def test_models_and_counts():
    v = view(rec("a", models=("x", "y")), rec("b", ready=False, models=("z",)), rec("c"))
    assert v.ready_models() == ["m", "x", "y"]
    assert v.known_models() == {"m", "x", "y", "z"}
    counts = v.counts(now=100.5)
    assert (counts.ready, counts.not_ready, counts.stale, counts.total) == (2, 1, 0, 3)
    assert v.counts(now=103.0).stale == 2


def test_fresh_record_uses_scraped_load_plus_unseen_requests():
    v = view(rec("a", waiting=2, running=3, kv=0.4, scraped_at=100.0))
    v.on_dispatch("r-before", "a", 50, 10, now=99.0)  # already visible in the scrape
    v.on_dispatch("r-after", "a", 70, 20, now=100.2)  # dispatched after the scrape
    (c,) = v.candidates(MODEL, now=100.5)
    assert not c.stale
    assert c.load == PodLoad(
        waiting=2, running=3, kv_usage=0.4, prefill_tokens_in_flight=120,
        decode_tokens_in_flight=0, unseen_requests=1,
    )  # fmt: skip
    assert v.unseen_requests("a") == 1


def test_stale_record_uses_own_in_flight_counts():
    v = view(rec("a", waiting=9, running=9, kv=0.4, scraped_at=100.0))
    v.on_dispatch("r1", "a", 50, 10, now=101.0)
    v.on_dispatch("r2", "a", 70, 20, now=101.0)
    v.on_dispatch("r3", "a", 30, 5, now=101.0)
    v.on_first_token("r2")
    (c,) = v.candidates(MODEL, now=102.5)  # 2.5 s after the scrape: stale
    assert c.stale
    assert c.load == PodLoad(
        waiting=2, running=1, kv_usage=0.4, prefill_tokens_in_flight=80,
        decode_tokens_in_flight=20, unseen_requests=0,
    )  # fmt: skip


def test_new_snapshot_makes_requests_seen():
    v = view(rec("a", scraped_at=100.0))
    v.on_dispatch("r1", "a", 10, 10, now=100.5)
    assert v.unseen_requests("a") == 1
    v.apply_snapshot(PodSnapshot(pool="p", ts=101, pods=[rec("a", scraped_at=101.0)]))
    assert v.unseen_requests("a") == 0


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # (requests, prefill tokens, decode tokens) after each outcome
        ([], (1, 100.0, 0.0)),
        (["first"], (1, 0.0, 32.0)),
        (["first", "finish"], (0, 0.0, 0.0)),  # success
        (["finish"], (0, 0.0, 0.0)),  # failure before the first token
        (["first", "first", "finish", "finish"], (0, 0.0, 0.0)),  # idempotent
    ],
)
def test_in_flight_counters_for_every_outcome(events, expected):
    v = view(rec("a"))
    v.on_dispatch("r", "a", 100, 32, now=100.0)
    for e in events:
        (v.on_first_token if e == "first" else v.on_finish)("r")
    assert v.in_flight("a") == expected


def test_retry_with_same_request_id_moves_the_ticket():
    v = view(rec("a"), rec("b"))
    v.on_dispatch("r", "a", 100, 32, now=100.0)
    v.on_dispatch("r", "b", 80, 32, now=100.1)
    assert v.in_flight("a") == (0, 0.0, 0.0)
    assert v.in_flight("b") == (1, 80.0, 0.0)
    assert v.total_in_flight() == 1


def test_unknown_request_ids_are_ignored():
    v = view(rec("a"))
    v.on_first_token("nope")
    v.on_finish("nope")
    assert v.in_flight("a") == (0, 0.0, 0.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["dispatch", "first", "finish"]),
            st.integers(0, 5),  # request id
            st.sampled_from(["a", "b"]),
            st.floats(0, 5000, allow_nan=False),
            st.floats(0, 2000, allow_nan=False),
        ),
        max_size=60,
    )
)
def test_counters_never_negative_and_return_to_zero(ops):
    v = view(rec("a"), rec("b"))
    for op, rid, pod, prefill, max_tokens in ops:
        r = f"r{rid}"
        if op == "dispatch":
            v.on_dispatch(r, pod, prefill, max_tokens, now=100.0)
        elif op == "first":
            v.on_first_token(r)
        else:
            v.on_finish(r)
        for p in ("a", "b"):
            n, pre, dec = v.in_flight(p)
            assert n >= 0 and pre >= 0 and dec >= 0
    for rid in range(6):
        v.on_finish(f"r{rid}")
    assert v.in_flight("a") == v.in_flight("b") == (0, 0.0, 0.0)
    assert v.total_in_flight() == 0


def test_candidates_carry_in_flight_counts_and_the_tightest_tpot_slo():
    v = view(rec("a"), rec("b"))
    v.on_dispatch("r1", "a", 10, 10, now=100.1, tpot_slo_ms=40.0)
    v.on_dispatch("r2", "a", 10, 10, now=100.1, tpot_slo_ms=25.0)
    v.on_dispatch("r3", "a", 10, 10, now=100.1)
    v.on_dispatch("r4", "b", 10, 10, now=100.1)
    a, b = v.candidates(MODEL, now=100.5)
    assert (a.in_flight, a.tightest_tpot_slo_ms) == (3, 25.0)
    assert (b.in_flight, b.tightest_tpot_slo_ms) == (1, None)
    v.on_first_token("r2")
    v.on_finish("r2")
    assert v.candidates(MODEL, now=100.5)[0].tightest_tpot_slo_ms == 40.0
    v.on_finish("r1")
    v.on_finish("r3")
    a, _ = v.candidates(MODEL, now=100.5)
    assert (a.in_flight, a.tightest_tpot_slo_ms) == (0, None)
    # a retry on another pod moves the SLO with the request
    v.on_dispatch("r4", "a", 10, 10, now=100.2, tpot_slo_ms=10.0)
    a, b = v.candidates(MODEL, now=100.5)
    assert (a.tightest_tpot_slo_ms, b.in_flight, b.tightest_tpot_slo_ms) == (10.0, 0, None)


# --- backlog, protected decodes, the cost model, the change hook ---------------------------
def test_backlog_is_the_estimated_prefill_of_requests_without_a_first_token():
    v = view(rec("a"))
    e1, e2 = v.cost.estimate(1000, 500), v.cost.estimate(3000, 0)  # the prior's prices
    v.on_dispatch("r1", "a", 1000, 10, 100.0, cached_tokens=500)
    v.on_dispatch("r2", "a", 3000, 10, 100.0)
    (c,) = v.candidates(MODEL, 100.0)
    assert c.backlog_s == pytest.approx(e1 + e2)
    v.on_first_token("r1", 100.2)  # r1 went to an idle pod: the model learns from it
    assert v.cost.observations == 1
    # r2 stays in the backlog at the price the model gives it now, not at dispatch's
    assert v.cost.estimate(3000, 0) != pytest.approx(e2)
    assert v.candidates(MODEL, 100.2)[0].backlog_s == pytest.approx(v.cost.estimate(3000, 0))
    v.on_finish("r2")  # failed before its first token
    v.on_finish("r1")
    assert v.candidates(MODEL, 101.0)[0].backlog_s == 0.0


def test_prices_of_a_cold_cost_model_are_revised_as_it_learns():
    """A cold start: the prior thinks a long prompt is slow; once the model has learned the
    pod is faster, the long prompt still queued is priced like a new request would be, so
    the backlog and a new request's own estimate compare in one model (the routing lab's
    rag-a cascade: priced at dispatch, a long prefill queued at the prior's 16 s stayed 16 s
    while an idle pod's cold prefill of the same prompt was priced at the learned 9 s)."""
    v = view(rec("a"), rec("b"))
    v.on_dispatch("long", "a", 100_000, 10, 100.0)
    v.on_dispatch("short", "a", 2_000, 10, 100.0, cached_tokens=40_000)
    prior = v.cost.estimate(100_000) + v.cost.estimate(2_000, 40_000)
    assert v.candidates(MODEL, 100.0)[0].backlog_s == pytest.approx(prior)
    for i in range(COLD_OBSERVATIONS - 2):  # pod b shows prefills twice as fast as the prior
        v.on_dispatch(f"t{i}", "b", 20_000 + 1000 * i, 10, 101.0 + i)
        v.on_first_token(f"t{i}", 101.0 + i + 0.5 * v.cost.estimate(20_000 + 1000 * i))
        v.on_finish(f"t{i}")
    now = v.cost.estimate(100_000) + v.cost.estimate(2_000, 40_000)
    assert now < 0.8 * prior
    a = v.candidates(MODEL, 140.0)[0]
    assert a.backlog_s == pytest.approx(now)
    v.on_first_token("long", 140.0)  # only the short one is left, at today's price
    assert v.candidates(MODEL, 140.0)[0].backlog_s == pytest.approx(v.cost.estimate(2_000, 40_000))
    v.on_finish("short")
    assert v.candidates(MODEL, 140.0)[0].backlog_s == 0.0


def test_a_warm_cost_models_prices_stay_as_they_were_at_dispatch():
    """Past COLD_OBSERVATIONS the model's coefficients still wander with every observation;
    re-pricing every queued prefill at each wander moves all backlogs at once (measured in
    the routing lab: more requests judged hopeless together, lower attainment), so a warm
    model's prices are kept as they were at dispatch."""
    v = view(rec("a"), rec("b"))
    for i in range(COLD_OBSERVATIONS):
        v.on_dispatch(f"w{i}", "b", 2_000 + 100 * i, 10, 100.0 + i)
        v.on_first_token(f"w{i}", 100.0 + i + v.cost.estimate(2_000 + 100 * i))
        v.on_finish(f"w{i}")
    assert v.cost.observations == COLD_OBSERVATIONS
    priced = v.cost.estimate(50_000)
    v.on_dispatch("long", "a", 50_000, 10, 140.0)
    for i in range(20):  # b turns out slower: the model moves
        v.on_dispatch(f"s{i}", "b", 4_000, 10, 141.0 + i)
        v.on_first_token(f"s{i}", 141.0 + i + 3.0 * v.cost.estimate(4_000))
        v.on_finish(f"s{i}")
    assert v.cost.estimate(50_000) > 1.2 * priced
    assert v.candidates(MODEL, 170.0)[0].backlog_s == pytest.approx(priced)
    v.on_finish("long")
    assert v.candidates(MODEL, 170.0)[0].backlog_s == 0.0


def test_protected_decodes_are_the_ones_within_their_ttft_slo():
    v = view(rec("a"))
    v.on_dispatch("fast", "a", 100, 10, 100.0, ttft_slo_ms=500)
    v.on_dispatch("slow", "a", 100, 10, 100.0, ttft_slo_ms=500)
    v.on_dispatch("free", "a", 100, 10, 100.0)  # no SLO: always worth protecting
    v.on_first_token("fast", 100.3)
    v.on_first_token("slow", 100.9)  # missed its 500 ms
    v.on_first_token("free", 105.0)
    assert v.candidates(MODEL, 105.0)[0].protected_decodes == 2
    v.on_first_token("fast")  # idempotent
    v.on_finish("fast")
    v.on_finish("slow")
    assert v.candidates(MODEL, 106.0)[0].protected_decodes == 1
    v.on_first_token("x")  # unknown ids are ignored
    # without a time the SLO cannot be judged: the expectation at dispatch stands
    v.on_dispatch("n", "a", 100, 10, 106.0, ttft_slo_ms=1)  # its prefill alone takes longer
    v.on_dispatch("m", "a", 100, 10, 106.0, ttft_slo_ms=5_000)
    v.on_first_token("n")
    v.on_first_token("m")
    assert v.candidates(MODEL, 106.0)[0].protected_decodes == 2


def test_prefills_queued_ahead_count_as_protected_decodes():
    """A request queued on a pod decodes while a prefill sent after it runs, so a new
    prefill slows it too (the routing lab's mooncake-h1 TPOT tail: a short request and a
    50k-token prompt released together to one pod, the short one's few tokens each waiting
    for a chunk of the long prefill). Counted unless it is expected to miss its TTFT SLO
    (the estimated backlog ahead of it plus its own prefill exceed it): a sacrificed
    request is not worth protecting."""
    v = view(rec("a"))
    v.on_dispatch("free", "a", 1_000, 10, 100.0)  # no SLO: always worth protecting
    v.on_dispatch("ok", "a", 1_000, 10, 100.0, ttft_slo_ms=5_000)
    v.on_dispatch("late", "a", 1_000, 10, 100.0, ttft_slo_ms=1)  # cannot make 1 ms
    assert v.candidates(MODEL, 100.0)[0].protected_decodes == 2
    v.on_first_token("free", 100.1)  # decoding now: still counted, once
    assert v.candidates(MODEL, 100.1)[0].protected_decodes == 2
    v.on_finish("ok")  # failed before its first token
    assert v.candidates(MODEL, 100.2)[0].protected_decodes == 1
    v.on_first_token("late", 100.3)  # missed its SLO as expected
    assert v.candidates(MODEL, 100.3)[0].protected_decodes == 1
    v.on_finish("free")
    v.on_finish("late")
    assert v.candidates(MODEL, 101.0)[0].protected_decodes == 0


def test_finished_requests_measure_their_pods_tpot():
    v = view(rec("a"), rec("b"))
    assert [c.tpot_s for c in v.candidates(MODEL, 100.0)] == [None, None]
    v.on_dispatch("r1", "a", 100, 50, 100.0)
    v.on_first_token("r1", 100.2)
    v.on_finish("r1", 101.2, output_tokens=51)  # 50 tokens after the first in 1 s: 20 ms
    v.on_dispatch("r2", "b", 100, 50, 100.0)
    v.on_first_token("r2", 100.1)
    v.on_finish("r2", 100.1, output_tokens=1)  # one token: no TPOT
    v.on_dispatch("r3", "b", 100, 50, 100.0)
    v.on_finish("r3", 101.0, output_tokens=0)  # failed before its first token: none
    v.on_dispatch("r4", "b", 100, 50, 100.0)
    v.on_first_token("r4")  # no time given: cannot measure
    v.on_finish("r4", 102.0, output_tokens=10)
    a, b = v.candidates(MODEL, 102.0)
    assert a.tpot_s == pytest.approx(0.02) and b.tpot_s is None
    # an EWMA: a slower request moves it a step (5%) towards its own TPOT
    v.on_dispatch("r5", "a", 100, 50, 103.0)
    v.on_first_token("r5", 103.0)
    v.on_finish("r5", 105.0, output_tokens=51)  # 40 ms
    assert v.candidates(MODEL, 105.0)[0].tpot_s == pytest.approx(0.02 + 0.05 * 0.02)
    # a pod that leaves the snapshot is forgotten
    v.apply_snapshot(PodSnapshot(pool="p", ts=106.0, pods=[rec("b", scraped_at=106.0)]))
    v.apply_snapshot(PodSnapshot(pool="p", ts=107.0, pods=[rec("a", scraped_at=107.0)]))
    assert v.candidates(MODEL, 107.0)[0].tpot_s is None


def test_only_requests_dispatched_to_an_idle_pod_teach_the_cost_model():
    v = view(rec("a"), rec("b", waiting=3))
    v.on_dispatch("r1", "a", 2000, 10, 100.0)  # idle pod: teaches
    v.on_dispatch("r2", "a", 2000, 10, 100.0)  # queued behind r1: does not
    v.on_dispatch("r3", "b", 2000, 10, 100.0)  # the scrape shows a queue: does not
    for rid in ("r1", "r2", "r3"):
        v.on_first_token(rid, 100.5)
    assert v.cost.observations == 1


def test_the_change_hook_runs_whenever_load_falls():
    v = view(rec("a"))
    calls = []
    v.on_change = lambda: calls.append(1)
    v.on_dispatch("r1", "a", 10, 10, 100.0)
    assert calls == []  # more load: nothing to release
    v.on_first_token("r1", 100.1)
    v.on_finish("r1")
    v.apply_snapshot(PodSnapshot(pool="p", ts=101.0, pods=[rec("a", scraped_at=101.0)]))
    assert len(calls) == 3


def test_work_the_scrape_shows_beyond_our_own_counts_too():
    """Another gateway's requests (or ones older than this gateway) show only in the scrape:
    its waiting ones add backlog at our mean estimate, its running ones protected decodes
    (its waiting ones are not counted there: routing lab, docs/benchmarks.md "Session 11")."""
    v = view(rec("a", waiting=3, running=5, scraped_at=100.0), rec("b", scraped_at=100.0))
    mean = v.cost.estimate(0)  # nothing dispatched yet: the estimate of an empty prompt
    a, b = v.candidates(MODEL, 100.5)
    assert a.backlog_s == pytest.approx(3 * mean) and a.protected_decodes == 5
    assert (b.backlog_s, b.protected_decodes) == (0.0, 0)
    # our own requests that the scrape includes are not counted twice
    v.on_dispatch("r1", "b", 1000, 10, 99.0)
    v.apply_snapshot(PodSnapshot(pool="p", ts=100.0, pods=[
        rec("a", waiting=3, running=5, scraped_at=100.0), rec("b", waiting=1, scraped_at=100.0),
    ]))  # fmt: skip
    b = v.candidates(MODEL, 100.5)[1]
    assert b.backlog_s == pytest.approx(v.cost.estimate(1000)) and b.protected_decodes == 1
    # a stale scrape says nothing about others
    assert v.candidates(MODEL, 103.0)[0].backlog_s == 0.0


def test_the_context_in_flight_is_counted_and_teaches_the_decode_slope():
    v = view(rec("a"), rec("b"))
    v.on_dispatch("r1", "a", 1000, 50, 100.0, cached_tokens=30_000)  # a cached document
    v.on_dispatch("r2", "a", 500, 50, 100.0)
    a, b = v.candidates(MODEL, 100.0)
    assert a.context_tokens == 31_500 and b.context_tokens == 0.0
    assert a.decode_s_per_token == DECODE_PRIOR_S_PER_TOKEN  # nothing learned yet
    v.on_first_token("r1", 100.5)  # the pod holds 31,500 tokens at its first token
    v.on_finish("r2", 101.0, output_tokens=0)  # failed: leaves, teaches nothing
    assert v.decode.for_class(None).observations == 0
    # 20 ms over a mean context of 31,250: 31,500 at its first token, its own 31,000 at its end
    v.on_finish("r1", 101.5, output_tokens=51)
    m = v.decode.for_class(None)
    assert m.observations == 1 and m._x == pytest.approx(3.125)  # in units of 1e4 tokens
    assert v.candidates(MODEL, 102.0)[0].context_tokens == 0.0
    # untimed first tokens teach nothing
    v.on_dispatch("r3", "a", 100, 50, 103.0)
    v.on_first_token("r3")
    v.on_finish("r3", 104.0, output_tokens=51)
    assert m.observations == 1


def test_the_typical_answer_length_is_measured_from_finished_requests():
    v = view(rec("a"), rec("b"))
    assert all(c.typical_output_tokens is None for c in v.candidates(MODEL, 0.0))
    t = 1.0
    for i in range(300):  # answers of 100 tokens, whatever max_tokens the clients sent
        rid = f"r{i}"
        v.on_dispatch(rid, "ab"[i % 2], 500, 4096, t)
        v.on_first_token(rid, t + 0.05)
        v.on_finish(rid, t + 1.0, output_tokens=100)
        t += 1.0
        if i == 98:  # published only once 100 have finished (the first are the shortest)
            assert all(c.typical_output_tokens is None for c in v.candidates(MODEL, t))
    v.on_dispatch("gone", "a", 500, 4096, t)
    v.on_finish("gone")  # ended without a time (failure, disconnect): not an answer length
    for c in v.candidates(MODEL, t):
        assert c.typical_output_tokens == pytest.approx(100.0)


def test_the_share_of_their_budgets_the_answers_used_is_measured_after_a_few_finish():
    """budget_share: the mean of min(1, output / max_tokens) over finished requests, from the
    eighth on. Clients that send the answers' lengths give 1 at once; under fixed budgets
    the share is the answers' over the budget (the first to finish are the shortest, so it
    starts low); an answer beyond its budget counts as 1; a request ended without a time
    teaches nothing."""

    def shares(budgets, outputs):
        v = view(rec("a"), rec("b"))
        t, out = 1.0, []
        for i, (m, n) in enumerate(zip(budgets, outputs, strict=True)):
            rid = f"r{i}"
            v.on_dispatch(rid, "ab"[i % 2], 500, m, t)
            v.on_first_token(rid, t + 0.05)
            v.on_finish(rid, t + 1.0, output_tokens=n)
            out.append(v.candidates(MODEL, t)[0].budget_share)
            t += 1.0
        v.on_dispatch("gone", "a", 500, 4096, t)
        v.on_finish("gone")  # failure, disconnect: not an answer
        assert v.candidates(MODEL, t)[0].budget_share == out[-1]
        return out

    exact = shares([50, 400, 120, 800] * 5, [50, 400, 120, 800] * 5)
    assert exact[:7] == [None] * 7
    assert exact[7:] == [pytest.approx(1.0)] * 13
    fixed = shares([4096] * 300, [100, 300] * 150)
    assert fixed[7] == pytest.approx(200 / 4096)
    assert fixed[-1] == pytest.approx(200 / 4096, rel=0.02)
    over = shares([100] * 8, [150] * 8)  # generated beyond the budget sent: capped at 1
    assert over[-1] == pytest.approx(1.0)


def test_the_decode_slope_is_learned_from_the_pods_own_tpot():
    v = view(rec("a"))
    t = 100.0
    for i in range(400):  # one request decoding beside i % 8 others of 20k tokens each
        others = [f"o{i}-{j}" for j in range(i % 8)]
        for o in others:
            v.on_dispatch(o, "a", 20_000, 10, t)
        v.on_dispatch(f"r{i}", "a", 20_000, 50, t)
        v.on_first_token(f"r{i}", t)
        ctx = 20_000 * (len(others) + 1)
        v.on_finish(f"r{i}", t + 50 * (0.01 + 9e-8 * ctx), output_tokens=51)
        for o in others:
            v.on_finish(o)
        t += 10.0
    a = v.candidates(MODEL, t)[0]
    assert a.decode_s_per_token == pytest.approx(9e-8, rel=0.05)
    assert a.decode_free_tokens == pytest.approx(0.01 / 9e-8, rel=0.1)


def test_each_request_in_flight_has_its_context_and_expected_decode_steps_left():
    """decode_left: (context, steps left) per request in flight, once the budgets' share is
    measured: a queued request has max_tokens x share steps ahead, a decoding one that less
    the steps its pod's measured TPOT made since its first token (never below 0)."""
    v = view(rec("a"), rec("b"))
    t = 1.0
    assert v.candidates(MODEL, t)[0].decode_left == ()
    for i in range(8):  # answers use half their budgets; pod a decodes at 10 ms per token
        rid = f"r{i}"
        v.on_dispatch(rid, "a", 500, 200, t)
        v.on_first_token(rid, t + 0.05)
        v.on_finish(rid, t + 0.05 + 0.99, output_tokens=100)
        t += 2.0
    v.on_dispatch("queued", "a", 1_000, 400, t, cached_tokens=3_000)
    v.on_dispatch("decoding", "a", 2_000, 400, t)
    v.on_first_token("decoding", t + 0.1)
    v.on_dispatch("long-done", "a", 500, 400, t)
    v.on_first_token("long-done", t + 0.1)
    a = v.candidates(MODEL, t + 0.6)[0]
    assert a.budget_share == pytest.approx(0.5)
    assert dict(zip(("queued", "decoding", "long-done"), a.decode_left, strict=True)) == {
        "queued": (4_000, pytest.approx(200.0)),
        "decoding": (2_000, pytest.approx(150.0)),  # 0.5 s at 10 ms: 50 of 200 made
        "long-done": (500, pytest.approx(150.0)),
    }
    assert v.candidates(MODEL, t + 10.0)[0].decode_left[1] == (2_000, 0.0)  # past its share
    assert v.candidates(MODEL, t)[1].decode_left == ()  # pod b: nothing in flight
