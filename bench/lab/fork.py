"""A pod forked off the lab's run and played forward until one request's first token.

Shared by the regret probe (bench/lab/regret.py: the sampled request on every candidate,
with the run's later arrivals) and the greedy TTFT oracle (bench/lab/oracle.py: the request
to route on every candidate, with the requests already on their way there). A fork is
:meth:`services.simulator.virtual_pod.VirtualPod.fork` (engine state, KV blocks, prefix
cache, the step in progress and the noise generator's state), so it steps exactly as the
real pod would given the same submits at the same virtual times.

The fork follows the simulation's order at equal times: :meth:`Fork.advance` to ``t``
handles the step ends at or before ``t``, which come before an arrival at ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.simulator.virtual_pod import VirtualPod
from shared.tokenizer import block_hashes

INF = float("inf")
_MAX_STEPS = 1_000_000


class PromptHashes:
    """Block hashes of the prompts being submitted to several forks (hashed once per
    request and block size); :meth:`clear` between requests."""

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int], list[int]] = {}

    def get(self, rid: str, tokens: Sequence[int], block_size: int) -> list[int]:
        key = (rid, block_size)
        h = self._memo.get(key)
        if h is None:
            h = self._memo[key] = block_hashes(tokens, block_size)
        return h

    def clear(self) -> None:
        self._memo.clear()


class Fork:
    """A copy of a pod's driver that waits for the first token of request ``rid``
    (``noise=False``: a fork that draws no noise of its own, ``Engine.fork``).

    :meth:`submit` queues a request at ``now`` (the fork is advanced to ``now`` first);
    once ``rid`` was submitted (:attr:`submitted_at`), :meth:`advance` stops at its first
    token (:attr:`first_token_s`) and drops the forked engine."""

    __slots__ = ("first_token_s", "rid", "submitted_at", "vpod")

    def __init__(self, driver: VirtualPod, rid: str, *, noise: bool = True) -> None:
        self.vpod: VirtualPod | None = driver.fork(noise=noise)
        self.rid = rid
        self.submitted_at: float | None = None
        self.first_token_s: float | None = None

    @property
    def done(self) -> bool:
        return self.first_token_s is not None

    @property
    def ttft_s(self) -> float | None:
        """From the target's submit to its first token on this fork (None: not yet)."""
        if self.first_token_s is None or self.submitted_at is None:
            return None
        return self.first_token_s - self.submitted_at

    def submit(
        self,
        rid: str,
        tokens: Sequence[int],
        max_tokens: int,
        now: float,
        hashes: PromptHashes | None = None,
    ) -> bool:
        """Queue a request at ``now`` (after the step ends up to ``now``); False if the
        engine refuses it (the prompt is too long for it) or the fork is done."""
        self.advance(now)
        vpod = self.vpod
        if vpod is None:
            return False
        engine = vpod.engine
        ph = None if hashes is None else hashes.get(rid, tokens, engine.profile.block_size)
        try:
            engine.submit(rid, tokens, max_tokens, now, prompt_hashes=ph)
        except ValueError:
            return False
        if rid == self.rid:
            self.submitted_at = now
        vpod.kick(now)
        return True

    def advance(self, t: float) -> None:
        """Handle this fork's step ends at or before ``t`` (stop at the target's first
        token)."""
        vpod, rid = self.vpod, self.rid
        if vpod is None:
            return
        for _ in range(_MAX_STEPS):
            if not vpod.busy or vpod.step_end > t:
                return
            end, out = vpod.finish()
            for ev in out.events:
                if ev.index == 0 and ev.req_id == rid:
                    self.first_token_s = end
                    self.vpod = None  # free the forked engine
                    return
        raise RuntimeError("a forked pod did not reach the request's first token")
