"""The lab-only non-greedy reference ``oracle-rollout``: one step of lookahead over the
shipped ``headroom`` policy, with the whole lab forked.

The greedy TTFT oracles (bench/lab/oracle.py) minimise each request's own TTFT and ignore
what a choice does to the requests after it. The rollout reference sees that too. At each
decision of ``headroom``'s cycle (flow control and all), for every admissible candidate it
copies the *whole simulation* (every engine with its step in progress and noise state, the
gateway's pod view and cost model, the prefix index, the flow-control queue, the events on
their way and the clock: :meth:`bench.lab.simulation.LabSimulation.fork`), sends the request
to that candidate in the copy and plays the copy forward with ``headroom`` routing every
later request, until every request of the **cohort** has its first token: the request being
routed, every request that arrived before it and has no first token yet, and every request
that arrives within ``horizon_s`` after the decision. The request goes to the candidate
whose copy has the least sum of the cohort's TTFTs (``--rollout-objective squares``: of
their squares, which weighs the tail more; ties: ``headroom``'s order), and the run goes on.
A copy that has not finished its cohort ``cap_s`` after the decision stops there; its
unfinished requests count up to that time, and a request the copy rejects or fails counts
``cap_s``.

What it knows that no router does: the future arrivals (their times and prompts) within the
horizon and after, and with ``foresight`` (the default) the noise the engines will draw, as
``oracle-ttft`` does; ``oracle-rollout-blind`` plays copies whose engines draw no noise
(:meth:`services.simulator.engine.Engine.fork`), like ``oracle-ttft-blind``. It is a policy
improvement step over ``headroom`` (on the cohort's TTFT sum, not the run's TTFT p90), not an
optimum over all routers: it never holds a request back beyond what flow control does, and
it changes one decision at a time, assuming ``headroom`` for the rest. A target it misses is
"not reached by a one-step rollout with foresight", not impossible (docs/benchmarks.md
"Session 13": on multi-turn chat it is the best reference measured, on bursty chat the
greedy exact-state oracle is ahead of it).

Only the decision point changes the run: to fork at a clean point, a rollout run (and each
copy) hands the flow-control queue's releases to the event queue at the same virtual time
instead of routing them inside the handler that freed a pod (a release then sees the view
after the whole step that freed it, rather than part-way through it).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.lab.config import DEFAULT_HORIZON_S, ROLLOUT_OBJECTIVES
from bench.lab.oracle import ORACLE_PATH, ORACLE_ROLLOUT, ORACLE_ROLLOUT_BLIND
from bench.lab.report import FAILED, REJECTED

if TYPE_CHECKING:
    from bench.lab.simulation import LabSimulation, _Pending
    from services.gateway.scheduling.cycle import Decision

ROLLOUT_POLICIES = (ORACLE_ROLLOUT, ORACLE_ROLLOUT_BLIND)
DEFAULT_CAP_S = 60.0


def _waiting(rec) -> bool:
    """No first token yet, and not rejected or failed (it may still get one)."""
    return rec.first_token_s is None and rec.status not in (FAILED, REJECTED)


class Rollout:
    """One-step lookahead at every decision (module docstring); keeps count."""

    def __init__(
        self,
        *,
        foresight: bool = True,
        horizon_s: float = DEFAULT_HORIZON_S,
        cap_s: float = DEFAULT_CAP_S,
        objective: str = "sum",
    ) -> None:
        if horizon_s < 0 or cap_s <= 0:
            raise ValueError("rollout horizon_s must be >= 0 and cap_s > 0")
        if objective not in ROLLOUT_OBJECTIVES:
            raise ValueError(f"rollout objective must be one of {ROLLOUT_OBJECTIVES}")
        self.foresight = foresight
        self.objective = objective
        self.horizon_s = horizon_s
        self.cap_s = cap_s
        self.decisions = 0  # decisions with two or more candidates played out
        self.changed = 0  # of those, where the rollout's pick differs from headroom's
        self.forks = 0
        self.capped = 0  # forks stopped at cap_s
        self.wall_s = 0.0

    def cohort(self, sim: LabSimulation, now: float) -> list[int]:
        """Trace positions of the requests whose TTFTs a copy is scored on: arrived (or
        arriving within the horizon) and without a first token yet."""
        at, records, until = sim._at, sim.records, now + self.horizon_s
        out = []
        for j in sim._order:
            if at[j] > until:
                break
            if _waiting(records[j]):
                out.append(j)
        return out

    def cost(self, sim: LabSimulation, cohort: list[int], now: float) -> float:
        """Play ``sim`` (a copy) until every cohort request has its first token, or
        ``cap_s``; the sum of their TTFTs in seconds (see the module docstring)."""
        records, limit = sim.records, now + self.cap_s
        left = list(cohort)

        def done() -> bool:
            while left and not _waiting(records[left[-1]]):
                left.pop()
            return not left or sim._now > limit

        sim.advance(stop=done)
        if left:
            self.capped += 1
        total = 0.0
        square = self.objective == "squares"
        for j in cohort:
            rec = records[j]
            if rec.first_token_s is not None:
                t = rec.first_token_s - rec.arrival_s
            elif rec.status in (FAILED, REJECTED):
                t = self.cap_s
            else:
                t = max(0.0, min(sim._now, limit) - rec.arrival_s)
            total += t * t if square else t
        return total

    def choose(self, sim: LabSimulation, p: _Pending, decision: Decision, now: float) -> Decision:
        """``decision`` (headroom's) with its first pod replaced by the candidate whose copy
        has the least cohort TTFT sum."""
        tries = list(decision.ranked)
        if len(tries) < 2:
            return decision
        started = time.perf_counter()
        cohort = self.cohort(sim, now)
        costs = []
        for i in tries:
            fork, fp = sim.fork(p, noise=self.foresight)
            ranked = [i, *(j for j in tries if j != i)]
            fork._dispatch(fp, replace(decision, ranked=ranked), now)
            costs.append(self.cost(fork, cohort, now))
        self.forks += len(tries)
        self.decisions += 1
        best = min(range(len(tries)), key=lambda k: (costs[k], k))
        if best:
            self.changed += 1
        self.wall_s += time.perf_counter() - started
        pick = tries[best]
        notes = {**decision.notes, "rollout_cost": round(costs[best], 9),
                 "rollout_base_cost": round(costs[0], 9), "rollout_base_pick": tries[0]}  # fmt: skip
        ranked = [pick, *(j for j in tries if j != pick)]
        return replace(decision, ranked=ranked, path=ORACLE_PATH, notes=notes)

    def summary(self) -> dict:
        n = self.decisions
        return {
            "foresight": self.foresight,
            "horizon_s": self.horizon_s,
            "cap_s": self.cap_s,
            "objective": self.objective,
            "decisions": n,
            "changed": self.changed,
            "forks": self.forks,
            "capped": self.capped,
            "wall_s": round(self.wall_s, 3),
            "ms_per_decision": round(1000.0 * self.wall_s / n, 3) if n else None,
        }


def rollout_for(
    policy: str, horizon_s: float = DEFAULT_HORIZON_S, objective: str = "sum"
) -> Rollout | None:
    """The rollout of reference policy ``policy`` (None for any other policy)."""
    if policy not in ROLLOUT_POLICIES:
        return None
    return Rollout(foresight=policy == ORACLE_ROLLOUT, horizon_s=horizon_s, objective=objective)
