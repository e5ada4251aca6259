"""Decision quality in the lab: the regret of a routing decision, by replaying it on every pod.

For a sample of requests, at the moment a request reaches its pod's engine, every candidate
pod is forked (:class:`bench.lab.fork.Fork`: engine state, KV blocks, prefix cache, the step
in progress and the noise generator's state) and the request is submitted to each fork
instead. Each fork then plays forward on the *same future arrivals*: every request the run
goes on to send to that pod is also submitted to its forks, at the same virtual time, until
the sampled request has its first token there. The fork of the chosen pod therefore
reproduces what happened exactly (tested); the others show what would have happened on the
same pod had this one request gone there instead, the rest of the routing unchanged. The
regret of the decision is

    regret = TTFT on the chosen pod - min over candidates of TTFT on that pod

(>= 0; 0 when the router picked the best pod, or there was one candidate). A candidate whose
engine rejects the request (prompt too long for it) is left out.

The forks follow the real pods lazily: one is advanced to time ``t`` (its step ends at or
before ``t``, as the simulation handles step ends before arrivals at equal times) when its
pod receives a request at ``t``, and every live fork is advanced at each new sample, so only
a few are alive at once; those left when the run ends are played out without further
arrivals. The sample is drawn from the trace's request indices with the run's seed (the
same requests for every policy of a comparison); deterministic per seed.

Not modelled: the counterfactual's effect on the *routing* of later requests (the router
would have seen other loads), and on other pods.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.lab.fork import Fork, PromptHashes
from bench.lab.report import latency_stats
from services.simulator.virtual_pod import VirtualPod

INF = float("inf")
# Each sample forks every candidate and replays until the request's first token there:
# about 0.3 s of wall time on the Mooncake trace at load 1.0 with 8 pods (a full run takes
# ~5 min), so the default is 100 samples, and one per 25 requests on shorter runs.
DEFAULT_REGRET_SAMPLES = 100
REQUESTS_PER_SAMPLE = 25


def default_regret_samples(n_requests: int) -> int:
    return min(DEFAULT_REGRET_SAMPLES, max(1, n_requests // REQUESTS_PER_SAMPLE))


@dataclass(slots=True, eq=False)
class _Case:
    """One sampled decision: its request, the chosen pod and each candidate's TTFT."""

    index: int  # the trace request's index
    rid: str
    chosen: int  # pod index
    submitted_at: float
    ttft_s: dict[int, float] = field(default_factory=dict)  # pod index -> TTFT (submit -> first)
    pending: int = 0  # forks still playing

    def regret_ms(self) -> float | None:
        if self.chosen not in self.ttft_s:
            return None
        return (self.ttft_s[self.chosen] - min(self.ttft_s.values())) * 1000.0


@dataclass(slots=True, eq=False)
class _Shadow:
    """A candidate's fork of one sampled decision (:class:`bench.lab.fork.Fork`)."""

    case: _Case
    pod: int
    fork: Fork

    @property
    def done(self) -> bool:
        return self.fork.done

    def advance(self, t: float) -> None:
        was = self.fork.done
        self.fork.advance(t)
        if self.fork.done and not was:
            self.case.ttft_s[self.pod] = self.fork.ttft_s  # type: ignore[assignment]
            self.case.pending -= 1


class RegretProbe:
    """Samples decisions of one lab run and measures their regret (module docstring)."""

    def __init__(self, n_requests: int, samples: int, seed: int) -> None:
        if samples < 0:
            raise ValueError("regret samples must be >= 0")
        rng = random.Random(f"regret-{seed}")
        self.sample = frozenset(rng.sample(range(n_requests), min(samples, n_requests)))
        self.cases: list[_Case] = []
        self._shadows: dict[int, list[_Shadow]] = {}
        self._hashes = PromptHashes()

    def wants(self, index: int) -> bool:
        return index in self.sample

    def on_decision(
        self,
        index: int,
        rid: str,
        tokens: Sequence[int],
        max_tokens: int,
        candidates: Sequence[tuple[int, VirtualPod]],
        chosen: int,
        now: float,
    ) -> None:
        """A sampled request is about to reach pod ``chosen`` at ``now``; ``candidates`` are
        (pod index, pod driver) of every pod the router could have picked."""
        self.advance_all(now)
        case = _Case(index, rid, chosen, now)
        self._hashes.clear()
        for pi, driver in candidates:
            fork = Fork(driver, rid)
            if not fork.submit(rid, tokens, max_tokens, now, self._hashes):
                continue  # this pod cannot take the request: not a real alternative
            case.pending += 1
            self._shadows.setdefault(pi, []).append(_Shadow(case, pi, fork))
        self.cases.append(case)

    def on_submit(
        self, pod: int, rid: str, tokens: Sequence[int], max_tokens: int, now: float
    ) -> None:
        """The run sent a request to ``pod`` at ``now``: a future arrival for its forks."""
        shadows = self._shadows.get(pod)
        if not shadows:
            return
        live = []
        self._hashes.clear()  # one request at a time arrives here
        for s in shadows:
            s.advance(now)
            if s.done:
                continue
            live.append(s)
            if s.case.rid != rid:  # the sampled request itself is already in its forks
                s.fork.submit(rid, tokens, max_tokens, now, self._hashes)  # refused: so was it
        self._shadows[pod] = live

    def advance_all(self, now: float) -> None:
        for pod, shadows in self._shadows.items():
            for s in shadows:
                s.advance(now)
            self._shadows[pod] = [s for s in shadows if not s.done]

    def finish(self) -> None:
        """Play out the forks still alive (no further arrivals)."""
        self.advance_all(INF)
        self._shadows.clear()

    def regrets_ms(self) -> list[float]:
        return [r for c in self.cases if c.pending == 0 and (r := c.regret_ms()) is not None]

    def summary(self) -> dict:
        return regret_summary(self.regrets_ms())


def regret_summary(regrets: Sequence[float] | None) -> dict:
    """``{p50, p90, mean, sampled, best_share}`` of the sampled decisions' regret in ms;
    ``best_share`` is the share of decisions that picked a best pod (regret 0)."""
    regrets = list(regrets or [])
    stats = latency_stats(regrets)
    best = sum(1 for r in regrets if r <= 0.0)
    return {
        "p50": stats["p50"],
        "p90": stats["p90"],
        "mean": stats["mean"],
        "sampled": len(regrets),
        "best_share": round(best / len(regrets), 4) if regrets else None,
    }
