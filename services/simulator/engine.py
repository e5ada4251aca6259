"""Engine model of a vLLM V1 model server (pure step function, no clock, no I/O).

The caller owns time. It submits requests with the current time, then repeatedly calls
``step(now)``; each call plans and "executes" one engine iteration and returns how long the
iteration takes (``duration_s``) and the tokens it produced, which happen at
``now + duration_s``. The HTTP pod server drives it in real time, the routing lab in
virtual time, the unit tests directly.

Scheduling follows vLLM V1: running requests first (one decode token each, or the next
chunk of their prompt), then FCFS admission of waiting requests while ``max_num_seqs``,
the per-step token budget and free KV blocks allow. When a running request needs a block
and none is free, the newest running request is preempted (its blocks freed, recomputed
later); no new request is admitted in a step that preempted.

Without chunked prefill (``Profile.enable_chunked_prefill`` False) a waiting request is
admitted only when its whole prompt (less its prefix-cache hit) fits the step's remaining
token budget; otherwise it is skipped for this step and the requests behind it are still
considered, as vLLM V1's scheduler does (``vllm/v1/core/sched/scheduler.py``: "chunked
prefill has to be enabled explicitly ... if num_new_tokens > token_budget: skip"). The
decodes of the running requests share that step, so a long prompt lengthens it: every
running request's next token waits for the whole prefill. Without prefix caching
(``enable_prefix_caching`` False) nothing is looked up or registered, and the query and hit
counters stay at zero, as vLLM's ``KVCacheManager.get_computed_blocks`` returns before it
counts.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from services.simulator.kv_cache import BlockPool
from services.simulator.profiles import Profile
from shared.tokenizer import block_hashes, chain_hash

_MIN_IDLE_S = 1e-4


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One output token of one request, produced at the end of the step."""

    req_id: str
    index: int  # 0-based index of the output token
    finished: bool  # this was the request's last token

    @property
    def first(self) -> bool:
        return self.index == 0


@dataclass(frozen=True, slots=True)
class StepOutcome:
    duration_s: float
    events: list[TokenEvent] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)  # observations made in this step
    itl_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    batch_size: int = 0
    preempted: int = 0
    tpot_s: list[float] = field(default_factory=list)  # per finished request (>= 2 tokens)
    preempted_ids: list[str] = field(default_factory=list)  # in preemption order

    @property
    def idle(self) -> bool:
        return self.batch_size == 0


@dataclass(frozen=True, slots=True)
class EngineStats:
    waiting: int
    running: int
    kv_usage: float
    num_gpu_blocks: int
    block_size: int
    prefix_cache_queries: int  # tokens
    prefix_cache_hits: int  # tokens
    prompt_tokens: int
    generation_tokens: int
    preemptions: int
    request_success: int
    request_aborted: int
    steps: int
    computed_tokens: int = 0  # tokens run through the model (prefill chunks + decodes)
    # KV state given up by preemption or abort, in tokens (prefix-cache hits included), so
    # computed == sum(prompt + max_tokens - 1 of finished) - prefix_cache_hits + discarded
    discarded_tokens: int = 0


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """The exact state a router could at best know about an engine at one moment (the
    prediction-bound benchmark compares models on it with models on the gateway's rows)."""

    waiting: int
    running: int
    decoding: int  # running requests past their prefill
    prefill_tokens: int  # prompt (and recomputed) tokens not yet computed, waiting + running
    context_tokens: int  # tokens held by running requests (KV read by every decode step)
    decode_tokens: int  # output tokens the running requests still have to produce


@dataclass(slots=True, eq=False)
class _Request:
    req_id: str
    prompt: list[int]
    output: list[int]
    max_tokens: int
    extra_key: int
    arrival: float
    ready_at: float
    hashes: list[int]  # chained hashes of full blocks of prompt + generated tokens
    generated: int = 0
    num_computed: int = 0
    num_cached_blocks: int = 0
    blocks: list[int] = field(default_factory=list)
    first_token_at: float = 0.0
    last_token_at: float = 0.0

    @property
    def total_tokens(self) -> int:
        return len(self.prompt) + self.generated

    def block_tokens(self, k: int, bs: int) -> list[int]:
        start, end = k * bs, (k + 1) * bs
        n_prompt = len(self.prompt)
        if end <= n_prompt:
            return self.prompt[start:end]
        if start >= n_prompt:
            return self.output[start - n_prompt : end - n_prompt]
        return self.prompt[start:] + self.output[: end - n_prompt]

    def hashes_upto(self, n_blocks: int, bs: int) -> list[int]:
        """Chained hashes of the first ``n_blocks`` full blocks (extended lazily)."""
        while len(self.hashes) < n_blocks:
            k = len(self.hashes)
            parent = self.hashes[-1] if self.hashes else self.extra_key
            # one block chained onto its parent = shared.tokenizer's chaining rule
            self.hashes.append(chain_hash(parent, self.block_tokens(k, bs)))
        return self.hashes[:n_blocks]


def _fork_request(r: _Request) -> _Request:
    """A copy of ``r`` sharing its immutable prompt and output token lists."""
    return _Request(
        req_id=r.req_id, prompt=r.prompt, output=r.output, max_tokens=r.max_tokens,
        extra_key=r.extra_key, arrival=r.arrival, ready_at=r.ready_at, hashes=list(r.hashes),
        generated=r.generated, num_computed=r.num_computed,
        num_cached_blocks=r.num_cached_blocks, blocks=list(r.blocks),
        first_token_at=r.first_token_at, last_token_at=r.last_token_at,
    )  # fmt: skip


def _synth_output(prompt_hashes: Sequence[int], n_prompt: int, n: int) -> list[int]:
    seed = prompt_hashes[-1] if prompt_hashes else n_prompt
    return [hash((seed, n_prompt, i)) & 0x7FFFFFFF for i in range(n)]


class Engine:
    """A simulated vLLM V1 engine; see the module docstring."""

    def __init__(self, profile: Profile, seed: int = 0) -> None:
        self.profile = profile
        self.pool = BlockPool(profile.num_gpu_blocks)
        self._rng = random.Random(seed)
        self._reqs: dict[str, _Request] = {}
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._queries = self._hits = self._prompt_tokens = self._gen_tokens = 0
        self._preemptions = self._success = self._aborted = self._steps = 0
        self._computed = self._discarded = 0
        self._last_end: float | None = None  # end of the last step that ran the model

    def fork(self, *, noise: bool = True) -> Engine:
        """An independent copy of the whole engine state (requests, KV blocks and prefix
        cache, counters, the noise generator's state): stepping either never changes the
        other, and both step identically given the same calls. With ``noise=False`` the
        copy draws no noise from then on (its profile's ``jitter`` and ``api_jitter`` set to
        0: every later step and API overhead at its mean-one value; what was drawn already,
        the ready times of submitted requests, stays): a copy that knows the state but not
        the noise the original will draw (the lab's noise-blind oracle). Cheaper than ``deepcopy``:
        prompts and output token lists, never mutated after submit, are shared; everything
        mutable is copied (the routing lab forks pods to replay a decision on every
        candidate, bench/lab/regret.py)."""
        new = Engine.__new__(Engine)
        new.profile = self.profile if noise else replace(self.profile, jitter=0.0, api_jitter=0.0)
        new.pool = self.pool.fork()
        new._rng = random.Random()
        new._rng.setstate(self._rng.getstate())
        copies = {rid: _fork_request(r) for rid, r in self._reqs.items()}
        new._reqs = copies
        new._waiting = deque(copies[r.req_id] for r in self._waiting)
        new._running = [copies[r.req_id] for r in self._running]
        for name in ("_queries", "_hits", "_prompt_tokens", "_gen_tokens", "_preemptions",
                     "_success", "_aborted", "_steps", "_computed", "_discarded", "_last_end"):  # fmt: skip
            setattr(new, name, getattr(self, name))
        return new

    # ---- requests -------------------------------------------------------------------

    @property
    def max_request_tokens(self) -> int:
        p = self.profile
        return min(p.max_model_len, p.kv_capacity_tokens)

    def submit(
        self,
        req_id: str,
        prompt_tokens: Sequence[int],
        max_tokens: int,
        now: float,
        extra_key: int = 0,
        output_tokens: Sequence[int] | None = None,
        prompt_hashes: Sequence[int] | None = None,
    ) -> None:
        """Queue a request arriving at ``now``. It becomes schedulable after the profile's
        per-request API overhead. ``output_tokens`` (optional, at least ``max_tokens``
        long) are the token ids it will generate; they matter only for prefix caching of
        decoded blocks (e.g. a later chat turn that repeats this answer).
        ``prompt_hashes``, when given, must be ``block_hashes(prompt_tokens, block_size,
        extra_key)``: a caller submitting one prompt to many forked engines hashes it once."""
        if req_id in self._reqs:
            raise ValueError(f"duplicate request id {req_id!r}")
        if not prompt_tokens:
            raise ValueError("prompt must contain at least one token")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if len(prompt_tokens) + max_tokens > self.max_request_tokens:
            raise ValueError(
                f"prompt ({len(prompt_tokens)} tokens) + max_tokens ({max_tokens}) exceeds "
                f"the maximum of {self.max_request_tokens} tokens"
            )
        bs = self.profile.block_size
        prompt = list(prompt_tokens)
        hashes = (
            block_hashes(prompt, bs, extra_key) if prompt_hashes is None else list(prompt_hashes)
        )
        if output_tokens is None:
            output = _synth_output(hashes, len(prompt), max_tokens)
        else:
            output = list(output_tokens[:max_tokens])
            if len(output) < max_tokens:
                raise ValueError("output_tokens shorter than max_tokens")
        r = _Request(
            req_id=req_id,
            prompt=prompt,
            output=output,
            max_tokens=max_tokens,
            extra_key=extra_key,
            arrival=now,
            ready_at=now + self.profile.api_overhead_s * self._noise(self.profile.api_jitter),
            hashes=hashes,
        )
        self._reqs[req_id] = r
        self._waiting.append(r)

    def abort(self, req_id: str) -> bool:
        """Drop a waiting or running request and free its blocks; False if unknown."""
        r = self._reqs.pop(req_id, None)
        if r is None:
            return False
        self._discarded += r.num_computed
        if r.blocks:
            self.pool.release(r.blocks)
            r.blocks = []
        try:
            self._running.remove(r)
        except ValueError:
            self._waiting.remove(r)
        self._aborted += 1
        return True

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self._reqs

    # ---- one iteration --------------------------------------------------------------

    def step(self, now: float) -> StepOutcome:
        """Plan and execute one iteration starting at ``now``."""
        p = self.profile
        bs = p.block_size
        budget = p.max_num_batched_tokens
        scheduled: list[tuple[_Request, int]] = []
        preempted: list[str] = []
        was_idle = not self._running  # nothing was running: a step now wakes the engine

        i = 0
        while i < len(self._running) and budget > 0:
            r = self._running[i]
            n = min(r.total_tokens - r.num_computed, budget)
            need = math.ceil((r.num_computed + n) / bs) - len(r.blocks)
            while need > self.pool.num_free:
                victim = self._running.pop()
                self._preempt(victim)
                preempted.append(victim.req_id)
                if victim is r:
                    break
            else:
                if need > 0:
                    r.blocks.extend(self.pool.allocate(need))
                scheduled.append((r, n))
                budget -= n
                i += 1
                continue
            break

        if not preempted:
            i = 0  # requests not yet past their API overhead, or skipped, stay where they are
            while i < len(self._waiting) and len(self._running) < p.max_num_seqs and budget > 0:
                r = self._waiting[i]
                if r.ready_at > now:
                    i += 1
                    continue
                admitted = self._admit(r, budget, scheduled)
                if admitted is None:  # no KV blocks for it: nobody behind it either (FCFS)
                    break
                if not admitted:  # whole prompt > remaining budget (no chunked prefill)
                    i += 1
                    continue
                del self._waiting[i]
                self._running.append(r)
                budget -= scheduled[-1][1]

        if not scheduled:
            wait = p.step_overhead_s
            if self._waiting and not self._running:
                wait = max(min(r.ready_at for r in self._waiting) - now, _MIN_IDLE_S)
            return StepOutcome(duration_s=wait, preempted=len(preempted), preempted_ids=preempted)
        return self._execute(now, scheduled, preempted, was_idle)

    def _admit(
        self, r: _Request, budget: int, scheduled: list[tuple[_Request, int]]
    ) -> bool | None:
        """Schedule ``r``'s first chunk: True if admitted, False if it has to wait for a
        step with more budget (no chunked prefill), None if its blocks do not fit."""
        p = self.profile
        bs = p.block_size
        total = r.total_tokens
        hits: list[int] = []
        if p.enable_prefix_caching:
            # the last token is always computed, so at most (total - 1) tokens can hit
            hits = self.pool.lookup(r.hashes_upto((total - 1) // bs, bs))
        hit_tokens = len(hits) * bs
        if not p.enable_chunked_prefill and total - hit_tokens > budget:
            return False
        n = min(total - hit_tokens, budget)
        need = math.ceil((hit_tokens + n) / bs) - len(hits)
        if not self.pool.can_allocate(need, hits):
            return None
        self.pool.touch(hits)
        r.blocks = hits + self.pool.allocate(need)
        r.num_computed = hit_tokens
        r.num_cached_blocks = len(hits)
        if p.enable_prefix_caching:
            self._queries += total
            self._hits += hit_tokens
        scheduled.append((r, n))
        return True

    def _preempt(self, r: _Request) -> None:
        self.pool.release(r.blocks)
        self._discarded += r.num_computed
        r.blocks = []
        r.num_computed = 0
        r.num_cached_blocks = 0
        self._waiting.appendleft(r)
        self._preemptions += 1

    def _step_time(self, tokens: int, seqs: int, context: int, attn_pairs: float) -> float:
        p = self.profile
        floor, gemm = p.weight_read_floor_s, tokens * p.per_token_s
        k = p.roofline_sharpness
        # memory-bound (the weights read once) vs compute-bound GEMMs: a smooth maximum,
        # the plain max as k grows (layers cross over at different batch sizes)
        linear = max(floor, gemm) if math.isinf(k) else (floor**k + gemm**k) ** (1.0 / k)
        attention = (
            context * p.kv_bytes_per_token / p.attn_bandwidth_bps + attn_pairs * p.attn_compute_s
        )
        overhead = p.step_overhead_s + seqs * p.per_seq_s
        return (linear + attention + overhead) * self._jitter()

    def _jitter(self) -> float:
        return self._noise(self.profile.jitter)

    def _noise(self, s: float) -> float:
        """A log-normal factor with mean 1 and log-sigma ``s``."""
        return math.exp(self._rng.gauss(0.0, s) - s * s / 2) if s > 0 else 1.0

    def _execute(
        self,
        now: float,
        scheduled: list[tuple[_Request, int]],
        preempted: list[str],
        was_idle: bool,
    ) -> StepOutcome:
        bs = self.profile.block_size
        caching = self.profile.enable_prefix_caching
        tokens = sum(n for _, n in scheduled)
        context = sum(r.num_computed + n for r, n in scheduled)
        attn_pairs = sum(n * (r.num_computed + n / 2) for r, n in scheduled)
        duration = self._step_time(tokens, len(scheduled), context, attn_pairs)
        p = self.profile
        idle = self._last_end is None or now - self._last_end > p.idle_wake_after_s
        if p.idle_wake_s > 0 and was_idle and idle:
            duration += p.idle_wake_s
        end = now + duration
        self._last_end = end
        events: list[TokenEvent] = []
        ttft: list[float] = []
        itl: list[float] = []
        e2e: list[float] = []
        tpot: list[float] = []
        prefill = decode = 0
        done: list[_Request] = []
        for r, n in scheduled:
            if r.total_tokens - r.num_computed == 1 and r.generated > 0:
                decode += n
            else:
                prefill += n
            r.num_computed += n
            self._computed += n
            full = r.num_computed // bs
            if caching and full > r.num_cached_blocks:
                hashes = r.hashes_upto(full, bs)
                for k in range(r.num_cached_blocks, full):
                    self.pool.cache(r.blocks[k], hashes[k])
                r.num_cached_blocks = full
            if r.num_computed < r.total_tokens:
                continue  # prefill chunk, more to come
            idx = r.generated
            r.generated += 1
            self._gen_tokens += 1
            if idx == 0:
                ttft.append(end - r.arrival)
                r.first_token_at = end
                self._prompt_tokens += len(r.prompt)
            else:
                itl.append(end - r.last_token_at)
            r.last_token_at = end
            finished = r.generated >= r.max_tokens
            events.append(TokenEvent(r.req_id, idx, finished))
            if finished:
                e2e.append(end - r.arrival)
                if r.max_tokens > 1:
                    tpot.append((end - r.first_token_at) / (r.max_tokens - 1))
                done.append(r)
        for r in done:
            self.pool.release(r.blocks)
            r.blocks = []
            del self._reqs[r.req_id]
            self._success += 1
        if done:
            finished_ids = {id(r) for r in done}
            self._running = [r for r in self._running if id(r) not in finished_ids]
        self._steps += 1
        return StepOutcome(
            duration_s=duration,
            events=events,
            ttft_s=ttft,
            itl_s=itl,
            e2e_s=e2e,
            prefill_tokens=prefill,
            decode_tokens=decode,
            batch_size=len(scheduled),
            preempted=len(preempted),
            tpot_s=tpot,
            preempted_ids=preempted,
        )

    # ---- observation ----------------------------------------------------------------

    def stats(self) -> EngineStats:
        return EngineStats(
            waiting=len(self._waiting),
            running=len(self._running),
            kv_usage=self.pool.usage,
            num_gpu_blocks=self.profile.num_gpu_blocks,
            block_size=self.profile.block_size,
            prefix_cache_queries=self._queries,
            prefix_cache_hits=self._hits,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._gen_tokens,
            preemptions=self._preemptions,
            request_success=self._success,
            request_aborted=self._aborted,
            steps=self._steps,
            computed_tokens=self._computed,
            discarded_tokens=self._discarded,
        )

    def load(self) -> EngineLoad:
        def todo(r: _Request) -> int:  # prefill left (0 once decoding)
            left = r.total_tokens - r.num_computed
            return left if r.generated == 0 or left > 1 else 0

        run = self._running
        return EngineLoad(
            waiting=len(self._waiting),
            running=len(run),
            decoding=sum(1 for r in run if r.generated > 0 and todo(r) == 0),
            prefill_tokens=sum(todo(r) for r in run) + sum(todo(r) for r in self._waiting),
            context_tokens=sum(r.num_computed for r in run),
            decode_tokens=sum(r.max_tokens - r.generated for r in run),
        )

    def running_ids(self) -> list[str]:
        """Running requests, oldest admission first (preemption takes from the end)."""
        return [r.req_id for r in self._running]

    def waiting_ids(self) -> list[str]:
        return [r.req_id for r in self._waiting]

    def audit(self) -> None:
        """Check the engine's bookkeeping (tests call it after every step); raises
        ``AssertionError`` naming the first broken invariant."""
        bs = self.profile.block_size
        self.pool.audit()
        holders = [0] * self.pool.num_blocks
        for r in self._running:
            assert len(r.blocks) == -(-r.num_computed // bs), (
                f"{r.req_id}: {len(r.blocks)} blocks for {r.num_computed} computed tokens"
            )
            assert r.num_computed <= r.total_tokens, f"{r.req_id} computed past its tokens"
            assert r.generated < r.max_tokens, f"{r.req_id} finished but still running"
            for b in r.blocks:
                holders[b] += 1
        for r in self._waiting:
            assert not r.blocks and r.num_computed == 0, f"waiting {r.req_id} holds blocks"
        assert holders == self.pool.ref_counts(), "block ref counts != running holders"
        live = {r.req_id for r in self._running} | {r.req_id for r in self._waiting}
        assert live == set(self._reqs), "request lost or duplicated"
        assert len(self._running) + len(self._waiting) == len(self._reqs)
        assert len(self._running) <= self.profile.max_num_seqs


def run_until_idle(
    engine: Engine, now: float, max_steps: int = 1_000_000
) -> tuple[float, list[tuple[float, StepOutcome]]]:
    """Virtual-time driver: step until no work is left. Returns the final time and each
    step's (start time, outcome). Raises if ``max_steps`` is exceeded."""
    log: list[tuple[float, StepOutcome]] = []
    for _ in range(max_steps):
        if not engine.has_work():
            return now, log
        out = engine.step(now)
        log.append((now, out))
        now += out.duration_s
    raise RuntimeError(f"engine still busy after {max_steps} steps")
