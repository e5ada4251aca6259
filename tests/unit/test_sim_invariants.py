"""Engine invariants under random workloads (hypothesis), checked after every step:

- tokens: every finished request produced exactly ``max_tokens`` tokens, in order, once;
  the tokens run through the model add up (prompt tokens are computed again after a
  preemption, cache hits are not computed); vLLM's prompt counter counts each request once;
- blocks: free + used == total, ref counts never negative and equal to the running
  requests holding each block, every cached hash reachable (``Engine.audit``);
- no request lost: each submitted request finishes exactly once or is aborted;
- preemption takes the newest running request(s) and admits nobody in that step;
- eviction: the free queue is LRU, a released chain enters it tail first (model-based).
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.simulator.engine import Engine
from services.simulator.kv_cache import BlockPool
from services.simulator.profiles import PROFILES

H100 = PROFILES["h100-llama3-8b"]


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


request = st.tuples(
    st.integers(min_value=1, max_value=240),  # prompt tokens
    st.integers(min_value=1, max_value=40),  # max tokens
    st.integers(min_value=0, max_value=3),  # shared-prefix group
    st.floats(min_value=0.0, max_value=0.3),  # arrival
    st.integers(min_value=-1, max_value=5),  # abort after this many tokens (-1: never)
)
engine_shape = st.fixed_dictionaries(
    {
        "num_gpu_blocks": st.integers(min_value=12, max_value=200),
        "max_num_seqs": st.integers(min_value=1, max_value=12),
        "max_num_batched_tokens": st.integers(min_value=8, max_value=400),
        "block_size": st.sampled_from([4, 16]),
        "jitter": st.sampled_from([0.0, 0.05]),
    }
)


class Run:
    """Drives one engine through a workload, checking the per-step invariants."""

    def __init__(self, shape: dict, reqs: list, seed: int) -> None:
        shape = dict(shape)
        shape["max_model_len"] = shape["num_gpu_blocks"] * shape["block_size"]
        self.engine = Engine(H100.with_overrides(**shape), seed=seed)
        self.groups = {g: toks(300, 1000 + g) for g in range(4)}
        self.pending = sorted(enumerate(reqs), key=lambda x: x[1][3])
        self.spec: dict[str, tuple[list[int], int, int]] = {}  # id -> prompt, max, abort_at
        self.events: dict[str, list] = {}
        self.aborted: set[str] = set()
        self.steps: list = []
        self.preemptions_seen = 0

    def submit_due(self, now: float) -> None:
        e = self.engine
        while self.pending and self.pending[0][1][3] <= now:
            i, (n, m, g, _at, abort_at) = self.pending.pop(0)
            prompt = self.groups[g][:n] if g else toks(n, i)
            if n + m <= e.max_request_tokens:
                e.submit(f"r{i}", prompt, m, now)
                self.spec[f"r{i}"] = (prompt, m, abort_at)

    def step(self, now: float) -> float:
        e = self.engine
        running_before = e.running_ids()
        out = e.step(now)
        assert out.duration_s > 0
        e.audit()
        k = len(out.preempted_ids)
        assert k == out.preempted
        if k:
            # the newest running requests, newest first; nobody admitted in that step
            assert out.preempted_ids == running_before[::-1][:k]
            assert set(e.running_ids()) <= set(running_before) - set(out.preempted_ids)
            self.preemptions_seen += k
        self.steps.append(out)
        for ev in out.events:
            self.events.setdefault(ev.req_id, []).append(ev)
        for rid, evs in self.events.items():
            abort_at = self.spec[rid][2]
            if 0 <= abort_at <= len(evs) and rid in e and rid not in self.aborted:
                assert e.abort(rid)
                self.aborted.add(rid)
                e.audit()
        return now + out.duration_s

    def drain(self) -> None:
        e, now = self.engine, 0.0
        for _ in range(200_000):
            self.submit_due(now)
            if not e.has_work():
                if not self.pending:
                    return
                now = self.pending[0][1][3]
                continue
            now = self.step(now)
        raise AssertionError("engine did not drain")


@settings(max_examples=60, deadline=None)
@given(shape=engine_shape, reqs=st.lists(request, min_size=1, max_size=20), seed=st.integers(0, 9))
def test_engine_invariants_hold_under_random_workloads(shape, reqs, seed):
    run = Run(shape, reqs, seed)
    run.drain()
    e, s = run.engine, run.engine.stats()

    # no request lost: every accepted request finished exactly once or was aborted
    assert not e.has_work() and s.waiting == s.running == 0
    finished = {rid for rid, evs in run.events.items() if any(ev.finished for ev in evs)}
    assert finished.isdisjoint(run.aborted)
    assert finished | run.aborted == set(run.spec)
    assert s.request_success == len(finished) and s.request_aborted == len(run.aborted)
    assert s.preemptions == run.preemptions_seen

    # tokens: exactly max_tokens per finished request, in order, the last one flagged
    for rid, evs in run.events.items():
        assert [ev.index for ev in evs] == list(range(len(evs)))
        if rid in finished:
            assert len(evs) == run.spec[rid][1]
            assert [ev.finished for ev in evs] == [False] * (len(evs) - 1) + [True]
    assert s.generation_tokens == sum(len(evs) for evs in run.events.values())
    # vLLM's prompt-token counter: once per request that produced a token
    assert s.prompt_tokens == sum(len(run.spec[rid][0]) for rid in run.events)
    # computed tokens: prompt (+ regenerated output) once per admission, recomputed after a
    # preemption, minus prefix-cache hits; each finished request computes p + m - 1 tokens
    computed = sum(o.prefill_tokens + o.decode_tokens for o in run.steps)
    assert computed == s.computed_tokens
    expected = sum(len(run.spec[r][0]) + run.spec[r][1] - 1 for r in finished)
    assert computed == expected - s.prefix_cache_hits + s.discarded_tokens
    if not run.aborted and s.preemptions == 0:
        assert s.discarded_tokens == 0

    # blocks: everything released, and every block of the pool is free again
    assert s.kv_usage == 0.0
    assert sorted(e.pool.free_order()) == list(range(e.pool.num_blocks))


def test_preemption_happens_and_recomputes_the_victim():
    """A deterministic squeeze: the newest request is preempted and computed again (what
    its freed blocks still cache comes back as hits)."""
    run = Run(
        {
            "num_gpu_blocks": 10,
            "max_num_seqs": 4,
            "max_num_batched_tokens": 8192,
            "block_size": 16,
            "jitter": 0.0,
            "api_jitter": 0.0,  # both reach the engine in submission order
        },
        [(64, 40, 0, 0.0, -1), (64, 40, 0, 0.0, -1)],
        seed=0,
    )
    run.drain()
    s = run.engine.stats()
    assert s.preemptions >= 1
    assert all(o.preempted_ids in ([], ["r1"]) for o in run.steps)
    assert s.discarded_tokens > 0
    assert s.prefix_cache_hits > 0  # the victim's own freed blocks
    assert s.computed_tokens == 2 * (64 + 39) - s.prefix_cache_hits + s.discarded_tokens


# ---- block pool: LRU free queue, tail blocks of a chain first (model-based) --------------

pool_op = st.one_of(
    st.tuples(st.just("alloc"), st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("release"), st.integers(min_value=0, max_value=50)),
    st.tuples(st.just("revive"), st.integers(min_value=0, max_value=50)),
)


@settings(max_examples=100, deadline=None)
@given(n_blocks=st.integers(min_value=4, max_value=24), ops=st.lists(pool_op, max_size=60))
def test_free_queue_is_lru_with_chain_tails_first(n_blocks, ops):
    pool = BlockPool(n_blocks)
    free = list(range(n_blocks))  # model of the free queue, eviction order
    ref = [0] * n_blocks
    chains: list[tuple[list[int], list[int]]] = []  # (blocks, hashes) of live holders
    released: list[tuple[list[int], list[int]]] = []  # chains that may be revived
    next_hash = 1
    for op, arg in ops:
        if op == "alloc":
            if arg > len(free):
                continue
            expect, free = free[:arg], free[arg:]
            evicted = [pool.cached_hash(b) for b in expect]
            blocks = pool.allocate(arg)
            assert blocks == expect  # least recently freed first
            for h in evicted:
                if h is not None:
                    assert pool.lookup([h]) == []  # eviction drops the hash
            hashes = list(range(next_hash, next_hash + arg))
            next_hash += arg
            for b, h in zip(blocks, hashes, strict=True):
                pool.cache(b, h)
                ref[b] = 1
            chains.append((blocks, hashes))
        elif op == "release" and chains:
            blocks, hashes = chains.pop(arg % len(chains))
            pool.release(blocks)
            for b in reversed(blocks):  # tail first
                ref[b] -= 1
                if ref[b] == 0:
                    free.append(b)
            released.append((blocks, hashes))
        elif op == "revive" and released:
            _, hashes = released[arg % len(released)]
            hits = pool.lookup(hashes)
            pool.touch(hits)
            for b in hits:
                if ref[b] == 0:
                    free.remove(b)
                ref[b] += 1
            chains.append((hits, hashes[: len(hits)]))
        pool.audit()
        assert pool.free_order() == free
        assert pool.ref_counts() == ref


def test_evicting_a_released_chain_keeps_its_head_longest():
    e = Engine(H100.with_overrides(jitter=0.0, num_gpu_blocks=8, max_model_len=128), seed=0)
    prompt = toks(64, 1)  # four full blocks
    e.submit("a", prompt, 1, 0.0)
    while e.has_work():
        e.step(1.0)
    blocks = [b for b in e.pool.free_order() if e.pool.cached_hash(b) is not None]
    # the chain's tail entered the free queue first: it is evicted before the head
    hashes = [e.pool.cached_hash(b) for b in blocks]
    assert e.pool.lookup(hashes[::-1]) == blocks[::-1]
    e.pool.allocate(len(e.pool.free_order()) - len(blocks) + 1)
    assert e.pool.lookup(hashes[::-1]) == blocks[::-1][:3]
