"""The lab-only reference policies (never gateway profiles, never baselines): the greedy
TTFT oracles ``oracle-ttft`` and ``oracle-ttft-blind``, and ``oracle-predicted``.

At each decision the oracle forks every candidate pod (:class:`bench.lab.fork.Fork`) and,
on each fork, submits the requests already dispatched to that pod but still on their way
(at the times they will reach its engine), then the request being routed at the time *it*
will reach the engine (the decision time plus the pod ingress: HTTP and the pod's
tokenizer), and plays the fork forward with no further arrivals until that request's first
token. The request goes to the pod where that TTFT is least (ties: the lowest pod index);
a pod whose engine refuses the prompt is not a candidate. With no later arrival on the
chosen pod before the first token, the real TTFT equals its fork's (tested).

It reads no SLO headers and no predictions: the engines themselves, perfectly, including
the noise they will draw (the forks carry the noise generator's state: the API overhead's
22% log-normal spread on the H100 profile, the step-time jitter). No router can know that
noise, so ``oracle-ttft-blind`` forks without it (every later draw at its mean-one value,
:meth:`services.simulator.engine.Engine.fork`): it knows the engines' state, including the
step in progress and the requests on their way, but not their luck; its choices are
ranked on what the state implies, which is what a router could at best estimate.

Both are greedy, not optimal: each decision minimises that request's TTFT and ignores what
it does to the requests after it (the decode steps it slows down, the pod it fills for the
next burst; on multi-turn traffic sharing a system prompt a pod with a cold prefix cache may
never look fastest, so it is never warmed and the warm pods pile up decodes). They route
each request as it comes and never hold one back in the gateway. Their TTFT is therefore
*not* a lower bound over all routers; a target they miss is "not reached by the greedy TTFT
oracle", not impossible. Their candidates and the gateway's in-flight accounting come from
the cycle of the shipped profile :data:`REFERENCE_POLICIES` names (least-request), whose
ranking the oracle replaces (kept only when no pod can take the request, which then fails
at the pod as it would).

``oracle-predicted`` does not rank by itself: it runs the ``headroom-learned`` profile whole
(flow control, the latency-cost-scorer's damage term and hopeless rule, SLO headers read)
with the noise-blind oracle's TTFTs in place of the learned TTFT predictions (TPOT: the
learner's, when it has a model; else the pod's measured TPOT): what perfect TTFT predictions
would buy the shipped cost, the most better MAPE can win (issue 15). Not a bound either.
Since session 15 the profile's scorer has ``shortlist: 2`` (the predictions rank the cost
model's two best pods), so this reference does too; its session-12 figures ranked every pod.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.lab.fork import INF, Fork, PromptHashes
from services.simulator.virtual_pod import VirtualPod

ORACLE_TTFT = "oracle-ttft"
ORACLE_TTFT_BLIND = "oracle-ttft-blind"
ORACLE_PREDICTED = "oracle-predicted"
ORACLE_ROLLOUT = "oracle-rollout"  # the non-greedy one-step rollout (bench/lab/rollout.py)
ORACLE_ROLLOUT_BLIND = "oracle-rollout-blind"
# lab-only reference policies -> the shipped profile whose cycle gives them their candidates
# (oracle-predicted: whose cycle ranks, on the noise-blind oracle's TTFTs as predictions)
REFERENCE_POLICIES: dict[str, str] = {
    ORACLE_TTFT: "least-request",
    ORACLE_TTFT_BLIND: "least-request",
    ORACLE_PREDICTED: "headroom-learned",
    ORACLE_ROLLOUT: "headroom",
    ORACLE_ROLLOUT_BLIND: "headroom",
}
# the greedy TTFT oracles: the ones that rank the pods themselves
GREEDY_ORACLES = (ORACLE_TTFT, ORACLE_TTFT_BLIND)
ORACLE_PATH = "oracle"  # the decisions' routing path in the lab's report


def is_reference(policy: str) -> bool:
    """A lab-only reference policy (not a product policy, never a baseline)."""
    return policy in REFERENCE_POLICIES


def routing_profile(policy: str) -> str:
    """The scheduling profile that runs ``policy``'s cycle (itself for a shipped one)."""
    return REFERENCE_POLICIES.get(policy, policy)


def unknown_policies(profiles, policies: Sequence[str]) -> list[str]:
    """The ``policies`` that are neither a profile of ``profiles`` nor a reference policy
    whose profile is there."""
    return [p for p in policies if routing_profile(p) not in profiles]


def known_policies(profiles) -> list[str]:
    return [*profiles, *(p for p, base in REFERENCE_POLICIES.items() if base in profiles)]


def check_policies(profiles, policies: str | Sequence[str]) -> None:
    """ValueError naming the policy (a ``str``) or the ``policies`` (a list) that are neither
    a profile of ``profiles`` nor a reference policy whose profile is there, and the ones
    that are."""
    one = isinstance(policies, str)
    unknown = unknown_policies(profiles, [policies] if one else policies)
    if not unknown:
        return
    what = f"policy {unknown[0]!r}" if one else f"policies {unknown}"
    raise ValueError(f"unknown {what} (profiles: {', '.join(known_policies(profiles))})")


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request dispatched to a pod that has not reached its engine yet."""

    at: float  # when it reaches the engine
    rid: str
    tokens: Sequence[int]
    max_tokens: int


def oracle_for(policy: str) -> TtftOracle | None:
    """The oracle of reference policy ``policy`` (None for a product policy)."""
    if policy == ORACLE_TTFT:
        return TtftOracle()
    if policy == ORACLE_TTFT_BLIND:
        return TtftOracle(foresight=False)
    if policy == ORACLE_PREDICTED:
        return TtftOracle(foresight=False, ranks=False)
    return None


class TtftOracle:
    """Plays each decision on forks of every candidate (module docstring) and keeps count;
    ``foresight=False``: forks that draw no noise (the noise-blind oracle); ``ranks=False``:
    its TTFTs are the predictions of the profile that ranks (``oracle-predicted``)."""

    def __init__(self, *, foresight: bool = True, ranks: bool = True) -> None:
        self.foresight = foresight
        self.ranks = ranks
        self.decisions = 0
        self.forks = 0
        self.wall_s = 0.0

    def ttfts(
        self,
        pods: Sequence[VirtualPod],
        rid: str,
        tokens: Sequence[int],
        max_tokens: int,
        at: float,
        in_flight: Sequence[Sequence[InFlight]],
    ) -> list[float | None]:
        """Per pod, the TTFT in seconds (from ``at`` to the first token) of request ``rid``
        reaching its engine at ``at``, after ``in_flight[i]`` (sorted by arrival; those
        arriving at ``at`` too were dispatched first, so they go first) and with no other
        arrival; None where the engine refuses it."""
        started = time.perf_counter()
        hashes = PromptHashes()
        out: list[float | None] = []
        for driver, flying in zip(pods, in_flight, strict=True):
            fork = Fork(driver, rid, noise=self.foresight)
            later = [f for f in flying if f.at > at]
            for f in flying:
                if f.at <= at:
                    fork.submit(f.rid, f.tokens, f.max_tokens, f.at, hashes)
            if not fork.submit(rid, tokens, max_tokens, at, hashes):
                out.append(None)
                continue
            for f in later:
                fork.submit(f.rid, f.tokens, f.max_tokens, f.at, hashes)
            fork.advance(INF)
            out.append(fork.ttft_s)
        self.decisions += 1
        self.forks += len(out)
        self.wall_s += time.perf_counter() - started
        return out

    @staticmethod
    def rank(ttfts: Sequence[float | None], keys: Sequence[int]) -> list[int]:
        """Candidate indices by TTFT, ties by ``keys`` (pod indices); refused ones left
        out."""
        ok = [i for i, t in enumerate(ttfts) if t is not None]
        return sorted(ok, key=lambda i: (ttfts[i], keys[i]))

    def summary(self) -> dict:
        n = self.decisions
        return {
            "foresight": self.foresight,
            "ranks": self.ranks,
            "decisions": n,
            "forks": self.forks,
            "wall_s": round(self.wall_s, 3),
            "ms_per_decision": round(1000.0 * self.wall_s / n, 3) if n else None,
        }
