"""The per-request routing steps shared by the gateway and the lab
(services/gateway/scheduling/routing.py) do what the gateway did inline."""

from __future__ import annotations

import random

import pytest

from services.gateway.scheduling import routing
from services.gateway.scheduling.config import load_config
from services.gateway.scheduling.cycle import SchedulingRequest
from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import build_candidate_rows
from shared.schemas import PodRecord, PodSnapshot
from shared.tokenizer import synth_tokens

MODEL = "m"


def setup(n: int = 3):
    view = PodView(stale_after_s=2.0)
    recs = [
        PodRecord(name=f"pod-{i}", url=f"u{i}", ready=True, scraped_at=10.0, models=[MODEL],
                  waiting=float(i), running=float(2 * i), kv_usage=0.1 * i)
        for i in range(n)
    ]  # fmt: skip
    view.apply_snapshot(PodSnapshot(pool="p", ts=10.0, pods=recs))
    index = PrefixIndex(16, 1000)
    config = load_config()
    schedulers = {name: config.scheduler(name) for name in config.profiles}
    return view, index, config, schedulers


@pytest.mark.parametrize("profile", ["gie-default", "headroom", "llmd-predicted", "cache-aware"])
def test_prepare_and_decide_match_the_manual_chain(profile):
    view, index, config, schedulers = setup()
    tokens = synth_tokens(100, 3)
    index.insert("pod-2", index.hashes(tokens))
    cands = view.candidates(MODEL, 10.5)
    prep = routing.prepare(
        config, schedulers, index, cands, tokens, model=MODEL, profile=profile,
        max_tokens=50, streaming=True, slo_ttft_ms=500.0,
    )  # fmt: skip
    hashes = index.hashes(tokens)
    rows = build_candidate_rows(cands, len(tokens), hashes, index, max_tokens=50)
    assert prep.rows == rows and list(prep.hashes) == hashes and prep.profile == profile
    assert prep.request == SchedulingRequest(
        MODEL, 100, hashes, 500.0, None, config.objective(MODEL).priority, 50, True, profile
    )
    preds = [Prediction(100.0 * (i + 1), 10.0) for i in range(len(cands))]
    preds = preds if prep.scheduler.reads_predictions(prep.request) else None
    got = routing.decide(prep, preds, now=10.5, rng=random.Random(1))
    want = config.scheduler(profile).schedule(
        prep.request, rows, preds, now=10.5, rng=random.Random(1)
    )
    assert (got.ranked, got.path, got.scores) == (want.ranked, want.path, want.scores)


def test_priority_header_overrides_the_objective():
    view, index, config, schedulers = setup()
    cands = view.candidates(MODEL, 10.0)
    prep = routing.prepare(config, schedulers, index, cands, [1, 2, 3], model=MODEL,
                           profile="headroom", max_tokens=5, streaming=False, priority=-3)  # fmt: skip
    assert prep.request.priority == -3


def test_dispatch_and_accept_accounting():
    view, index, config, schedulers = setup(2)
    tokens = synth_tokens(64, 9)
    cands = view.candidates(MODEL, 10.0)
    index.insert("pod-1", index.hashes(tokens[:32]))  # half the prompt cached on pod-1
    prep = routing.prepare(config, schedulers, index, cands, tokens, model=MODEL,
                           profile="round-robin", max_tokens=7, streaming=True,
                           slo_tpot_ms=40.0)  # fmt: skip
    added = routing.on_dispatch(view, index, "r1", prep, 1, 10.1)
    assert view.in_flight("pod-1") == (1, 32.0, 0.0)
    # the prefix index knows at dispatch, before any answer, where the prompt's blocks go;
    # the blocks pod-1 held before are not among the newly recorded ones
    assert index.score("pod-1", prep.hashes) == 1.0 and index.score("pod-0", prep.hashes) == 0
    assert added == list(prep.hashes[2:])
    view.on_first_token("r1")
    assert view.in_flight("pod-1") == (1, 0.0, 7.0)
    assert view.candidates(MODEL, 10.2)[1].tightest_tpot_slo_ms == 40.0
    view.on_finish("r1")
    assert view.total_in_flight() == 0


def test_a_pod_that_refuses_the_request_keeps_only_the_blocks_it_held_before():
    """on_refused (the pod failed or refused the request before its first byte): it is no
    longer in flight there and the index forgets the blocks the dispatch newly recorded, not
    the half of the prompt the pod held from an earlier request."""
    view, index, config, schedulers = setup(2)
    tokens = synth_tokens(64, 9)
    cands = view.candidates(MODEL, 10.0)
    index.insert("pod-1", index.hashes(tokens[:32]))
    prep = routing.prepare(config, schedulers, index, cands, tokens, model=MODEL,
                           profile="round-robin", max_tokens=7, streaming=True)  # fmt: skip
    added = routing.on_dispatch(view, index, "r1", prep, 1, 10.1)
    routing.on_refused(view, index, "r1", prep, 1, added)
    assert view.total_in_flight() == 0
    assert index.score("pod-1", prep.hashes) == 0.5  # the blocks it held before stay


@pytest.mark.parametrize("profile", ["headroom", "llmd-predicted"])
def test_a_second_request_for_a_prefix_on_its_way_goes_where_it_is_going(profile):
    """Two requests for the same long uncached prompt, the second routed right after the
    first was sent (before any answer): the first goes to the idle pod-1; the second sees the
    prefix on its way there and follows it, instead of prefilling it again on pod-0 (one
    request waiting). Recorded only once a pod answered, as before session 30, the second
    saw no prefix anywhere and both profiles sent it to pod-0: the prompt prefilled twice."""
    view, index, config, schedulers = setup(2)
    view.apply_snapshot(PodSnapshot(pool="p", ts=10.0, pods=[
        PodRecord(name=f"pod-{i}", url=f"u{i}", ready=True, scraped_at=10.0, models=[MODEL],
                  waiting=1.0 - i)
        for i in range(2)
    ]))  # fmt: skip
    tokens = synth_tokens(4096, 5)

    def route(rid, now):
        cands = view.candidates(MODEL, now)
        prep = routing.prepare(config, schedulers, index, cands, tokens, model=MODEL,
                               profile=profile, max_tokens=20, streaming=True,
                               cost=view.cost)  # fmt: skip
        preds = [Prediction(100.0, 10.0)] * len(cands)
        preds = preds if prep.scheduler.reads_predictions(prep.request) else None
        d = routing.decide(prep, preds, now=now, rng=random.Random(0))
        i = d.ranked[0]
        routing.on_dispatch(view, index, rid, prep, i, now)
        return prep.rows.candidates[i].name

    assert route("r1", 10.0) == "pod-1"
    assert route("r2", 10.001) == "pod-1"


def test_refresh_reads_the_loads_again_after_the_prediction_call():
    """Two requests of one burst prepared on the same loads: without refresh both pick the
    same empty pod; with it the second sees the first's prefill queued there."""
    view, index, config, schedulers = setup(2)
    view.apply_snapshot(PodSnapshot(pool="p", ts=10.0, pods=[
        PodRecord(name=f"pod-{i}", url=f"u{i}", ready=True, scraped_at=10.0, models=[MODEL])
        for i in range(2)
    ]))  # fmt: skip
    tokens = [synth_tokens(2000, k) for k in (1, 2)]
    cands = view.candidates(MODEL, 10.0)
    preps = [
        routing.prepare(config, schedulers, index, cands, t, model=MODEL, profile="headroom",
                        max_tokens=10, streaming=True, cost=view.cost)
        for t in tokens
    ]  # fmt: skip
    preds = [Prediction(100.0, 10.0)] * 2
    first = routing.decide(preps[0], preds, now=10.002, rng=random.Random(0))
    routing.on_dispatch(view, index, "a", preps[0], first.ranked[0], 10.002)
    stale = routing.decide(preps[1], preds, now=10.002, rng=random.Random(0))
    fresh_prep = routing.refresh(preps[1], view.candidates(MODEL, 10.002))
    fresh = routing.decide(fresh_prep, preds, now=10.002, rng=random.Random(0))
    assert stale.ranked[0] == first.ranked[0]
    assert fresh.ranked[0] != first.ranked[0]
    # the feature rows the predictions were made on are kept; only the loads move
    assert fresh_prep.rows.rows == preps[1].rows.rows
    assert fresh_prep.rows.candidates[first.ranked[0]].backlog_s > 0
    assert preps[1].rows.candidates[first.ranked[0]].backlog_s == 0
