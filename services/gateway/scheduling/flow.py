"""Flow control: hold requests in the gateway while every pod is busy prefilling, release them
best first, and route each one at release time (late binding).

A pod *has room* when the prefill this gateway has queued on it (the pod view's
``backlog_s``, estimated by the cost model) is below ``max_backlog_s``. While some pod for
the request's model has room, requests pass straight through. Otherwise they wait here and
are released, as pods make room, in order of

1. priority (higher first),
2. ``order: shortest`` (default): the shortest estimated prefill first (the request's best
   service time over the pods, prefix hits included), which keeps short prompts from
   queueing behind long ones; ``order: fifo``: arrival order; ``order: deadline``: the
   earliest ``arrived + deadline_factor x estimated prefill`` first, a deadline proportional
   to what the request costs (shortest first among requests that arrived together, while a
   long prompt that has waited long enough goes before short ones that came much later, in
   its turn, instead of being starved until ``max_wait`` releases it),

With ``room_factor`` > 0 the gate is the request's own: a pod has room for a request while
its backlog is below ``max(max_backlog_s, room_factor x its estimated prefill)``, so a long
prompt, whose own prefill dwarfs a short one's wait, is not held by a gate meant for short
ones: it passes through (or, queued, leaves longest first) while some pod's backlog is within
its own gate.

Each released request is routed among the pods with room only. Two kinds of request
leave the queue regardless and may go to any pod: a request whose TTFT SLO can no longer be
met even by the least loaded pod (``hopeless``: waiting longer only hurts the requests
behind it; the scheduler's latency-cost-scorer then places it where it harms the fewest
others) and one that has waited ``max_wait_s``, or ``max_wait_factor`` times its own
estimated prefill when that is shorter (a bound on how long shortest-first can starve a
long prompt, relative to what it costs). Past ``max_queued`` waiting requests a new one is refused (the shell
answers 503 with Retry-After).

The queue is pure (no clock, no I/O): the gateway resolves a future per released request,
the routing lab continues the request in virtual time; both call :meth:`FlowQueue.take`
whenever a pod may have made room (first tokens, finished requests, new snapshots, new
arrivals) and :meth:`FlowQueue.routed` once a released request has been dispatched (until
then it holds a reservation, so one free slot is not handed out twice).

Released and cancelled requests leave the heaps lazily (skipped when they reach the front);
so that they cannot pile up behind a long-waiting head, a sub-queue's heaps are compacted
(rebuilt from the entries still queued) once one holds more than ``2 x queued + 64``
entries, and cleared when nothing is queued: each heap then holds at most ``2 x queued + 64``
entries between takes, whatever the arrival rate. Every heap key ends with the request's
unique sequence number, so the pop order of the queued entries is a total order that a
rebuild cannot change (tests/unit/test_scheduling_flow.py compares release sequences).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.gateway.scheduling.pod_view import Candidate

ORDERS = ("shortest", "fifo", "deadline")
ROUTE_TO = ("room", "any")
QUEUED, RELEASED, CANCELLED = "queued", "released", "cancelled"
# why a request left the queue
ROOM, HOPELESS, MAX_WAIT = "room", "hopeless", "max_wait"
# a heap holding more than COMPACT_FACTOR x queued + COMPACT_SLACK entries is rebuilt
COMPACT_FACTOR, COMPACT_SLACK = 2, 64


@dataclass(frozen=True, slots=True)
class FlowConfig:
    enabled: bool = False
    max_backlog_s: float = 0.5
    order: str = "shortest"
    max_wait_s: float = 300.0
    # a request also leaves once it waited this multiple of its own estimated prefill (0: off)
    max_wait_factor: float = 0.0
    # order "deadline": release by arrived + deadline_factor x estimated prefill
    deadline_factor: float = 10.0
    # a pod has room for a request below max(max_backlog_s, room_factor x its prefill); 0: off
    room_factor: float = 0.0
    max_queued: int = 10_000
    bypass_hopeless: bool = True
    route_to: str = "room"  # room: route a released request among pods with room; any: all

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}")
        if self.route_to not in ROUTE_TO:
            raise ValueError(f"route_to must be one of {ROUTE_TO}")
        if not self.max_backlog_s > 0 or not self.max_wait_s > 0 or self.max_queued < 1:
            raise ValueError("max_backlog_s, max_wait_s and max_queued must be positive")
        if self.max_wait_factor < 0:
            raise ValueError("max_wait_factor must be >= 0")
        if not self.deadline_factor > 0:
            raise ValueError("deadline_factor must be positive")
        if self.room_factor < 0:
            raise ValueError("room_factor must be >= 0")

    def gate(self, service_s: float) -> float:
        """A pod has room for a request with this estimated prefill while its backlog is
        below this many seconds."""
        return max(self.max_backlog_s, self.room_factor * service_s)

    def release_key(self, arrived_at: float, service_s: float) -> float:
        """A queued request's place within its priority (smaller leaves first; the sequence
        number breaks ties)."""
        if self.order == "shortest":
            return service_s
        if self.order == "deadline":
            return arrived_at + self.deadline_factor * service_s
        return 0.0

    def max_wait_for(self, service_s: float) -> float:
        """How long a request with this estimated prefill may wait in the queue."""
        if self.max_wait_factor > 0:
            return min(self.max_wait_s, self.max_wait_factor * service_s)
        return self.max_wait_s


@dataclass(eq=False, slots=True)
class Waiter:
    """One request in (or through) the queue."""

    model: str
    priority: int
    service_s: float  # best estimated prefill seconds over the pods (the shortest-first key)
    arrived_at: float
    slo_ttft_ms: float | None = None
    payload: object = None  # the shell's own data (a future, a pending lab request)
    seq: int = 0
    state: str = QUEUED
    reason: str | None = None  # ROOM | HOPELESS | MAX_WAIT once released
    released_at: float | None = None
    reserved: bool = False

    @property
    def any_pod(self) -> bool:
        """Released regardless of room: may be routed to any pod."""
        return self.reason in (HOPELESS, MAX_WAIT)

    def queued_s(self) -> float:
        return 0.0 if self.released_at is None else self.released_at - self.arrived_at


class QueueFull(Exception):
    """The queue holds ``max_queued`` requests already."""


@dataclass(slots=True)
class _ModelQueue:
    ready: list[tuple] = field(default_factory=list)  # heap: (-priority, key, seq, waiter)
    # room_factor > 0: heap (-service_s, seq, waiter), the longest first (the widest own gate)
    longest: list[tuple] = field(default_factory=list)
    deadlines: list[tuple] = field(default_factory=list)  # heap: (hopeless at, seq, waiter)
    timeouts: list[tuple] = field(default_factory=list)  # heap: (must leave at, seq, waiter)
    reserved: int = 0
    queued: int = 0
    rebuilds: int = 0  # compactions while requests were queued (for tests)

    def retained(self) -> int:
        """Entries in the heaps (queued requests and released ones not yet skipped)."""
        return len(self.ready) + len(self.deadlines) + len(self.timeouts) + len(self.longest)

    def compact(self) -> int:
        """Drop the entries of requests no longer queued once a heap holds too many (all of
        them when nothing is queued); returns how many were dropped."""
        if self.queued == 0:
            dropped = self.retained()
            if dropped:
                self.ready.clear()
                self.deadlines.clear()
                self.timeouts.clear()
                self.longest.clear()
            return dropped
        limit = COMPACT_FACTOR * self.queued + COMPACT_SLACK
        dropped = 0
        for heap in (self.ready, self.deadlines, self.timeouts, self.longest):
            if len(heap) > limit:
                kept = [e for e in heap if e[-1].state == QUEUED]
                dropped += len(heap) - len(kept)
                heapq.heapify(kept)
                heap[:] = kept
                self.rebuilds += 1
        return dropped


Candidates = Callable[[str], Sequence[Candidate]]  # model -> the view's candidates now


class FlowQueue:
    def __init__(self, config: FlowConfig) -> None:
        self.config = config
        self._q: dict[str, _ModelQueue] = {}
        self._seq = itertools.count()
        self.queued = 0
        self.released: dict[str, int] = {ROOM: 0, HOPELESS: 0, MAX_WAIT: 0}
        self.compacted = 0  # heap entries dropped by compaction (released or cancelled)

    # --- room ---------------------------------------------------------------------------
    def rooms(self, candidates: Sequence[Candidate], service_s: float = 0.0) -> list[Candidate]:
        """The pods with room for a request with this estimated prefill (the shared gate
        for 0)."""
        gate = self.config.gate(service_s)
        return [c for c in candidates if c.backlog_s < gate]

    def route_among(self, w: Waiter, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The pods a released request is routed among: every pod for a hopeless or
        over-waited one (and with ``route_to: any``), else the pods with room (all of them
        if room vanished meanwhile)."""
        cands = list(candidates)
        if w.any_pod or self.config.route_to == "any":
            return cands
        return self.rooms(cands, w.service_s) or cands

    # --- the queue ----------------------------------------------------------------------
    def offer(self, waiter: Waiter, candidates: Sequence[Candidate], now: float) -> bool:
        """Queue ``waiter``; True when it is released at once (a pod has room and nobody of
        its model waits, or it is hopeless already). Raises :class:`QueueFull`."""
        q = self._q.setdefault(waiter.model, _ModelQueue())
        waiter.seq = next(self._seq)
        own = len(self.rooms(candidates, waiter.service_s))
        wider = self.config.room_factor > 0 and own > len(self.rooms(candidates))
        if own > q.reserved and (q.queued == 0 or wider):
            # a free slot nobody waits for; or (room_factor) a pod within this request's own
            # gate that the queued requests, waiting for the shared gate, cannot take
            self._release(q, waiter, ROOM, now)
            return True
        if self._hopeless_now(waiter, candidates, now):
            self._release(q, waiter, HOPELESS, now)
            return True
        if self.queued >= self.config.max_queued:
            raise QueueFull(f"{self.queued} requests are queued already")
        key = self.config.release_key(waiter.arrived_at, waiter.service_s)
        heapq.heappush(q.ready, (-waiter.priority, key, waiter.seq, waiter))
        if self.config.room_factor > 0:
            heapq.heappush(q.longest, (-waiter.service_s, waiter.seq, waiter))
        if waiter.slo_ttft_ms is not None and self.config.bypass_hopeless:
            # hopeless for sure once even an idle pod cannot serve it in time
            due = waiter.arrived_at + waiter.slo_ttft_ms / 1000.0 - waiter.service_s
            heapq.heappush(q.deadlines, (due, waiter.seq, waiter))
        leave = waiter.arrived_at + self.config.max_wait_for(waiter.service_s)
        heapq.heappush(q.timeouts, (leave, waiter.seq, waiter))
        q.queued += 1
        self.queued += 1
        return False

    def cancel(self, waiter: Waiter) -> None:
        """The request went away (client disconnect) while queued, or before being routed."""
        q = self._q.get(waiter.model)
        if q is None:
            return
        if waiter.state == QUEUED:
            waiter.state = CANCELLED
            q.queued -= 1
            self.queued -= 1
            self.compacted += q.compact()
        self.routed(waiter)

    def routed(self, waiter: Waiter) -> None:
        """A released request was dispatched (or failed before): its reservation ends."""
        q = self._q.get(waiter.model)
        if q is not None and waiter.reserved:
            waiter.reserved = False
            q.reserved -= 1

    def take(self, candidates: Candidates, now: float) -> list[Waiter]:
        """Release what can go now (hopeless and over-waited requests, then the best ones
        while pods have room); returns them in release order."""
        out: list[Waiter] = []
        for model, q in self._q.items():
            if q.queued == 0:
                continue
            cands = candidates(model)
            self._take_bypass(q, cands, now, out)
            room = len(self.rooms(cands)) - q.reserved
            while room > 0 and q.queued > 0:
                w = self._pop_ready(q)
                if w is None:
                    break
                self._release(q, w, ROOM, now)
                out.append(w)
                room -= 1
            if self.config.room_factor > 0:
                self._take_longest(q, cands, now, out)
            self.compacted += q.compact()
        return out

    def retained(self) -> int:
        """Heap entries over all sub-queues (bounded: see the module docstring)."""
        return sum(q.retained() for q in self._q.values())

    # --- internals ----------------------------------------------------------------------
    def _hopeless_now(self, w: Waiter, cands: Sequence[Candidate], now: float) -> bool:
        if w.slo_ttft_ms is None or not self.config.bypass_hopeless or not cands:
            return False
        least = min(c.backlog_s for c in cands)
        return now + least + w.service_s > w.arrived_at + w.slo_ttft_ms / 1000.0

    def _take_bypass(
        self, q: _ModelQueue, cands: Sequence[Candidate], now: float, out: list[Waiter]
    ) -> None:
        least = min((c.backlog_s for c in cands), default=0.0)
        while q.deadlines and q.deadlines[0][0] < now + least:
            w = heapq.heappop(q.deadlines)[2]
            if w.state == QUEUED:
                self._dequeue(q, w)
                self._release(q, w, HOPELESS, now)
                out.append(w)
        while q.timeouts and (q.timeouts[0][2].state != QUEUED or q.timeouts[0][0] < now):
            w = heapq.heappop(q.timeouts)[2]
            if w.state == QUEUED:
                self._dequeue(q, w)
                self._release(q, w, MAX_WAIT, now)
                out.append(w)

    def _take_longest(
        self, q: _ModelQueue, cands: Sequence[Candidate], now: float, out: list[Waiter]
    ) -> None:
        """Release, longest first, the requests whose own gate has room (a wider gate the
        longer the prefill, so the first that does not fit ends the pass)."""
        while q.longest and q.queued > 0:
            w = q.longest[0][2]
            if w.state != QUEUED:
                heapq.heappop(q.longest)
                continue
            if len(self.rooms(cands, w.service_s)) <= q.reserved:
                return
            heapq.heappop(q.longest)
            self._dequeue(q, w)
            self._release(q, w, ROOM, now)
            out.append(w)

    def _pop_ready(self, q: _ModelQueue) -> Waiter | None:
        while q.ready:
            w = heapq.heappop(q.ready)[3]
            if w.state == QUEUED:
                self._dequeue(q, w)
                return w
        return None

    def _dequeue(self, q: _ModelQueue, w: Waiter) -> None:
        w.state = RELEASED
        q.queued -= 1
        self.queued -= 1

    def _release(self, q: _ModelQueue, w: Waiter, reason: str, now: float) -> None:
        w.state = RELEASED
        w.reason = reason
        w.released_at = now
        self.released[reason] += 1
        if reason == ROOM:
            w.reserved = True
            q.reserved += 1
