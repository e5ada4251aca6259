"""Engine.fork(): an independent copy that steps exactly like the original (the routing lab's
regret replays depend on both properties)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.simulator.engine import Engine, run_until_idle
from services.simulator.profiles import PROFILES
from services.simulator.virtual_pod import VirtualPod

H100 = PROFILES["h100-llama3-8b"]
SMALL = H100.with_overrides(num_gpu_blocks=60, max_num_seqs=4, max_num_batched_tokens=128,
                            max_model_len=960)  # fmt: skip


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


def busy_engine(steps: int, seed: int = 3) -> tuple[Engine, float]:
    """An engine mid-run: running, waiting, cached and preempted requests."""
    e = Engine(SMALL, seed=seed)
    shared = toks(300, 7)
    now = 0.0
    for i in range(8):
        e.submit(f"r{i}", shared[: 100 + 20 * i] + toks(30, i), 20 + 5 * i, now)
    for _ in range(steps):
        now += e.step(now).duration_s
    return e, now


def trace(e: Engine, now: float) -> list[tuple]:
    _, log = run_until_idle(e, now)
    return [(t, out.duration_s, out.events, out.preempted_ids) for t, out in log]


def fingerprint(e: Engine) -> tuple:
    return (e.stats(), e.load(), e.running_ids(), e.waiting_ids(), e.pool.ref_counts(),
            e.pool.free_order(), [e.pool.cached_hash(b) for b in range(e.pool.num_blocks)])  # fmt: skip


def test_fork_steps_exactly_like_the_original():
    e, now = busy_engine(12)
    f = e.fork()
    f.audit()
    assert fingerprint(f) == fingerprint(e)
    assert trace(f, now) == trace(e, now)
    assert fingerprint(f) == fingerprint(e)


def test_mutating_the_fork_never_changes_the_original():
    e, now = busy_engine(12)
    before = fingerprint(e)
    expected = trace(e.fork(), now)  # what the original does untouched
    f = e.fork()
    f.submit("extra", toks(400, 99), 50, now)
    f.abort(f.running_ids()[0])
    t = now
    for _ in range(30):
        t += f.step(t).duration_s
        f.audit()
    run_until_idle(f, t)
    assert fingerprint(e) == before
    e.audit()
    assert trace(e, now) == expected


def test_forked_virtual_pod_keeps_the_step_in_progress():
    e, now = busy_engine(5)
    pod = VirtualPod(e)
    assert pod.kick(now)
    f = pod.fork()
    assert f.busy and f.step_end == pod.step_end
    assert f.finish() == pod.finish()
    assert f.engine is not pod.engine


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(min_value=0, max_value=60), seed=st.integers(0, 5),
       extra=st.integers(min_value=1, max_value=400))  # fmt: skip
def test_fork_independence_property(steps, seed, extra):
    e, now = busy_engine(steps, seed)
    before = fingerprint(e)
    f = e.fork()
    if f.max_request_tokens >= extra + 10:
        f.submit("x", toks(extra, seed), 10, now)
    t = now
    while f.has_work():
        t += f.step(t).duration_s
        f.audit()
    assert fingerprint(e) == before
    e.audit()


def test_a_noise_blind_fork_keeps_the_state_but_draws_no_noise():
    """fork(noise=False): the same requests, blocks and ready times, but every later step and
    API overhead at its mean-one value, whatever the generator's state (the lab's noise-blind
    oracle); the original keeps its noise."""
    e, now = busy_engine(12)
    a, b = e.fork(noise=False), e.fork(noise=False)
    b._rng.seed(12345)  # another generator state: no effect without noise
    assert fingerprint(a) == fingerprint(e)
    assert a.profile.jitter == 0.0 and a.profile.api_jitter == 0.0
    assert e.profile.jitter > 0.0 and e.profile.api_jitter > 0.0
    assert trace(a, now) == trace(b, now)
    noisy = trace(e.fork(), now)
    assert [d for _, d, _, _ in noisy] != [d for _, d, _, _ in trace(e.fork(noise=False), now)]
    # the step durations of a blind fork are the profile's noiseless ones
    c = e.fork(noise=False)
    out = c.step(now)
    quiet = e.fork()
    quiet.profile = SMALL.with_overrides(jitter=0.0, api_jitter=0.0)
    assert quiet.step(now).duration_s == out.duration_s
