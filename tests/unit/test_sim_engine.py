"""Engine model: scheduling, prefix caching, preemption, timing shape, determinism.

Everything runs in virtual time through ``run_until_idle`` / ``step``."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.simulator.engine import Engine, run_until_idle
from services.simulator.profiles import PROFILES, Profile, get_profile

H100 = PROFILES["h100-llama3-8b"]
QUIET = H100.with_overrides(jitter=0.0, api_jitter=0.0)


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


def observations(log, kind: str) -> list[float]:
    return [x for _, out in log for x in getattr(out, kind)]


def events_by_request(log) -> dict[str, list]:
    by: dict[str, list] = {}
    for _, out in log:
        for ev in out.events:
            by.setdefault(ev.req_id, []).append(ev)
    return by


def single_ttft(engine: Engine, req_id: str, prompt: list[int], now: float) -> float:
    engine.submit(req_id, prompt, 1, now)
    _, log = run_until_idle(engine, now)
    [ttft] = observations(log, "ttft_s")
    return ttft


# ---- profiles ---------------------------------------------------------------------------


def test_profiles_exist_and_are_frozen():
    for name in ("h100-llama3-8b", "a100-llama3-8b"):
        p = get_profile(name)
        assert p.block_size == 16
        assert p.max_num_seqs > 0 and p.max_num_batched_tokens > 0
    assert 400_000 <= H100.kv_capacity_tokens <= 440_000
    with pytest.raises(AttributeError):
        H100.max_num_seqs = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        get_profile("tpu-v9")


# ---- timing shape (calibration targets, loosely) ---------------------------------------


def test_low_load_ttft_and_decode_near_calibration():
    e = Engine(QUIET, seed=0)
    e.submit("a", toks(200, 1), 64, 0.0)
    _, log = run_until_idle(e, 0.0)
    [ttft] = observations(log, "ttft_s")
    itl = statistics.mean(observations(log, "itl_s"))
    assert 0.020 < ttft < 0.045
    assert 0.006 < itl < 0.009


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_decode_step_time_grows_with_batch(profile_name):
    profile = PROFILES[profile_name].with_overrides(jitter=0.0)
    means = []
    for batch in (1, 32, 128):
        e = Engine(profile, seed=0)
        for i in range(batch):
            e.submit(f"r{i}", toks(200, i), 32, 0.0)
        _, log = run_until_idle(e, 0.0)
        means.append(statistics.mean(observations(log, "itl_s")))
    assert means[0] < means[1] < means[2]


def test_attention_makes_long_contexts_decode_slower():
    e_short, e_long = Engine(QUIET, 0), Engine(QUIET, 0)
    for i in range(32):
        e_short.submit(f"r{i}", toks(100, i), 8, 0.0)
        e_long.submit(f"r{i}", toks(4000, i), 8, 0.0)
    itl_short = statistics.mean(observations(run_until_idle(e_short, 0.0)[1], "itl_s"))
    itl_long = statistics.mean(observations(run_until_idle(e_long, 0.0)[1], "itl_s"))
    assert itl_long > itl_short


def test_long_prompt_is_prefilled_in_chunks():
    e = Engine(QUIET, seed=0)
    e.submit("long", toks(20_000, 1), 2, 0.0)
    _, log = run_until_idle(e, 0.0)
    busy = [out for _, out in log if not out.idle]
    assert [out.prefill_tokens for out in busy[:3]] == [8192, 8192, 20_000 - 2 * 8192]
    assert busy[2].events and busy[2].events[0].first
    assert all(out.prefill_tokens + out.decode_tokens <= 8192 for out in busy)


def test_request_waits_for_api_overhead_before_scheduling():
    e = Engine(QUIET, seed=0)
    e.submit("a", toks(50, 1), 1, 10.0)
    first = e.step(10.0)
    assert first.idle and first.duration_s == pytest.approx(QUIET.api_overhead_s)
    assert e.stats().waiting == 1 and e.stats().running == 0
    second = e.step(10.0 + first.duration_s)
    assert not second.idle and second.events[0].finished


# ---- prefix cache ------------------------------------------------------------------------


def test_shared_prefix_hits_cache_and_cuts_ttft():
    prefix = toks(3200, 7)
    e = Engine(QUIET, seed=0)
    t_cold = single_ttft(e, "a", [*prefix, *toks(64, 8)], 0.0)
    before = e.stats()
    t_warm = single_ttft(e, "b", [*prefix, *toks(64, 9)], 10.0)
    after = e.stats()
    assert after.prefix_cache_hits - before.prefix_cache_hits == 3200
    assert after.prefix_cache_queries - before.prefix_cache_queries == 3264
    assert t_warm < t_cold
    # a different prompt of the same length gets no hits and no speed-up
    t_other = single_ttft(e, "c", toks(3264, 10), 20.0)
    assert e.stats().prefix_cache_hits == after.prefix_cache_hits
    assert t_other > t_warm


def test_identical_prompt_recomputes_at_least_the_last_token():
    p = toks(64, 3)  # exactly four blocks
    e = Engine(QUIET, seed=0)
    single_ttft(e, "a", p, 0.0)
    single_ttft(e, "b", p, 5.0)
    assert e.stats().prefix_cache_hits == 48  # three blocks; the last block is recomputed


def test_extra_key_separates_cache_entries():
    p = toks(160, 3)
    e = Engine(QUIET, seed=0)
    e.submit("a", p, 1, 0.0, extra_key=1)
    run_until_idle(e, 0.0)
    e.submit("b", p, 1, 5.0, extra_key=2)
    run_until_idle(e, 5.0)
    assert e.stats().prefix_cache_hits == 0
    e.submit("c", p, 1, 9.0, extra_key=1)
    run_until_idle(e, 9.0)
    assert e.stats().prefix_cache_hits == 144


def test_decoded_tokens_are_cached_for_the_next_turn():
    prompt, answer = toks(40, 1), toks(40, 2)
    e = Engine(QUIET, seed=0)
    e.submit("turn1", prompt, 40, 0.0, output_tokens=answer)
    run_until_idle(e, 0.0)
    e.submit("turn2", [*prompt, *answer, *toks(30, 3)], 1, 5.0)
    run_until_idle(e, 5.0)
    # prompt+answer = 80 tokens; the last decoded token's KV is never written, so 4 full
    # blocks (64 tokens) of the first turn are reusable
    assert e.stats().prefix_cache_hits == 64


# ---- admission, preemption ---------------------------------------------------------------


def small(num_gpu_blocks: int, **kw) -> Profile:
    return QUIET.with_overrides(num_gpu_blocks=num_gpu_blocks, max_model_len=4096, **kw)


def test_kv_budget_limits_admission():
    e = Engine(small(20), seed=0)
    for i in range(3):
        e.submit(f"r{i}", toks(100, i), 4, 0.0)  # 7 blocks each
    e.step(1.0)
    s = e.stats()
    assert (s.running, s.waiting) == (2, 1)
    assert s.kv_usage == pytest.approx(14 / 20)
    run_until_idle(e, 2.0)
    assert e.stats().request_success == 3


def test_max_num_seqs_limits_admission():
    e = Engine(QUIET.with_overrides(max_num_seqs=4), seed=0)
    for i in range(10):
        e.submit(f"r{i}", toks(20, i), 4, 0.0)
    e.step(1.0)
    assert (e.stats().running, e.stats().waiting) == (4, 6)


def test_preemption_under_pressure_and_requests_still_complete():
    e = Engine(small(10), seed=0)
    e.submit("old", toks(64, 1), 40, 0.0)
    e.submit("new", toks(64, 2), 40, 0.0)
    _, log = run_until_idle(e, 1.0)
    s = e.stats()
    assert s.preemptions > 0
    assert s.request_success == 2
    by = events_by_request(log)
    for rid in ("old", "new"):
        assert [ev.index for ev in by[rid]] == list(range(40))
        assert [ev.finished for ev in by[rid]] == [False] * 39 + [True]
    # the newest request is the one preempted, so the oldest finishes first
    finish_step = {
        ev.req_id: i for i, (_, out) in enumerate(log) for ev in out.events if ev.finished
    }
    assert finish_step["old"] < finish_step["new"]
    assert s.kv_usage == 0.0


def test_abort_frees_blocks_and_forgets_request():
    e = Engine(QUIET, seed=0)
    e.submit("a", toks(500, 1), 100, 0.0)
    e.submit("b", toks(500, 2), 100, 0.0)
    e.step(1.0)
    assert e.stats().kv_usage > 0
    assert e.abort("a") and e.abort("b")
    assert not e.abort("a")
    assert e.stats().kv_usage == 0.0
    assert not e.has_work()
    assert e.stats().request_aborted == 2
    e.submit("c", toks(5, 1), 1, 2.0)
    assert e.abort("c")  # while still waiting


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "match"),
    [([], 1, "at least one token"), ([1], 0, "max_tokens"), ([1] * 4000, 200, "exceeds")],
)
def test_submit_rejects_invalid_requests(prompt, max_tokens, match):
    e = Engine(small(1000), seed=0)
    with pytest.raises(ValueError, match=match):
        e.submit("x", prompt, max_tokens, 0.0)


def test_duplicate_request_id_rejected():
    e = Engine(QUIET, seed=0)
    e.submit("x", [1, 2], 1, 0.0)
    with pytest.raises(ValueError, match="duplicate"):
        e.submit("x", [1, 2], 1, 0.0)


# ---- determinism and liveness -----------------------------------------------------------


def workload(seed: int):
    e = Engine(H100.with_overrides(num_gpu_blocks=200), seed=seed)
    rng = random.Random(99)
    for i in range(60):
        e.submit(f"r{i}", toks(rng.randint(1, 600), i), rng.randint(1, 50), i * 0.002)
    return run_until_idle(e, 0.0)


def test_determinism_by_seed():
    t1, log1 = workload(5)
    t2, log2 = workload(5)
    t3, _ = workload(6)
    assert t1 == t2
    assert [o.duration_s for _, o in log1] == [o.duration_s for _, o in log2]
    assert [o.events for _, o in log1] == [o.events for _, o in log2]
    assert t3 != t1


def test_counters_add_up():
    _, log = workload(1)
    total_events = sum(len(o.events) for _, o in log)
    ttft = observations(log, "ttft_s")
    e2e = observations(log, "e2e_s")
    assert len(ttft) == len(e2e) == 60
    assert total_events == len(ttft) + len(observations(log, "itl_s"))
    assert all(a <= b for a, b in zip(sorted(ttft), sorted(e2e), strict=True))


@settings(max_examples=40, deadline=None)
@given(
    blocks=st.integers(min_value=40, max_value=300),
    max_num_seqs=st.integers(min_value=1, max_value=16),
    budget=st.integers(min_value=16, max_value=512),
    reqs=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=300),  # prompt tokens
            st.integers(min_value=1, max_value=60),  # max tokens
            st.integers(min_value=0, max_value=3),  # shared-prefix group
            st.floats(min_value=0.0, max_value=0.5),  # arrival
            st.booleans(),  # abort mid-way
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_every_submitted_request_finishes_exactly_once(blocks, max_num_seqs, budget, reqs):
    profile = H100.with_overrides(
        num_gpu_blocks=blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=blocks * 16,
    )
    e = Engine(profile, seed=1)
    groups = {g: toks(400, 1000 + g) for g in range(4)}
    pending = sorted(enumerate(reqs), key=lambda x: x[1][3])
    accepted: dict[str, int] = {}
    to_abort: set[str] = set()
    aborted: set[str] = set()
    seen: dict[str, list] = {}
    now = 0.0
    for _ in range(100_000):
        while pending and pending[0][1][3] <= now:
            i, (n, m, g, _at, abort) = pending.pop(0)
            rid = f"r{i}"
            if n + m <= e.max_request_tokens:
                e.submit(rid, groups[g][:n], m, now)
                accepted[rid] = m
                if abort:
                    to_abort.add(rid)
        if not e.has_work():
            if not pending:
                break
            now = pending[0][1][3]
            continue
        out = e.step(now)
        assert out.duration_s > 0
        now += out.duration_s
        for ev in out.events:
            seen.setdefault(ev.req_id, []).append(ev)
        for rid in list(to_abort):
            if rid in seen:  # abort after its first token
                if e.abort(rid):
                    aborted.add(rid)
                to_abort.discard(rid)
    else:
        pytest.fail("engine did not drain")
    s = e.stats()
    assert s.kv_usage == 0.0
    assert s.waiting == s.running == 0
    assert s.request_aborted == len(aborted)
    assert s.request_success + s.request_aborted == len(accepted)
    for rid, m in accepted.items():
        evs = seen.get(rid, [])
        assert [ev.index for ev in evs] == list(range(len(evs)))
        if any(ev.finished for ev in evs):
            assert len(evs) == m and evs[-1].finished
            assert sum(ev.finished for ev in evs) == 1
        else:
            assert rid in aborted


def test_load_reports_prefill_left_context_and_decodes():
    e = Engine(get_profile("h100-llama3-8b"), seed=0)
    assert e.load().prefill_tokens == 0 and e.load().running == 0
    e.submit("a", list(range(10_000)), 5, 0.0)
    e.submit("b", list(range(20_000, 20_100)), 3, 0.0)
    ld = e.load()
    assert (ld.waiting, ld.running, ld.prefill_tokens) == (2, 0, 10_100)
    now = 1.0  # past the API overhead: both become schedulable
    out = e.step(now)  # 8192 tokens of a's prompt in the first step
    ld = e.load()
    assert ld.running == 1 and ld.waiting == 1 and ld.decoding == 0
    assert ld.prefill_tokens == 10_100 - 8192 and ld.context_tokens == 8192
    now += out.duration_s
    while e.load().decoding < 2:
        now += e.step(now).duration_s
    ld = e.load()
    assert ld.prefill_tokens == 0 and ld.decode_tokens <= 5 + 3 - 2


def test_a_step_after_an_idle_spell_pays_the_wake_up_and_a_late_busy_step_does_not():
    p = QUIET.with_overrides(idle_wake_s=0.007)
    e, ref = Engine(p, seed=0), Engine(p.with_overrides(idle_wake_s=0.0), seed=0)
    for eng in (e, ref):
        eng.submit("a", toks(100, 1), 4, 0.0)
    gaps = []
    for eng in (e, ref):
        now = eng.step(0.0).duration_s  # the API overhead
        first = eng.step(now)
        now += first.duration_s + 0.5  # the driver comes back late: the engine was busy
        second = eng.step(now)
        gaps.append((first.duration_s, second.duration_s))
    (woke, late), (plain, late_ref) = gaps
    assert woke == pytest.approx(plain + 0.007)  # nothing was running before it
    assert late == pytest.approx(late_ref)  # a request was running: no wake-up
