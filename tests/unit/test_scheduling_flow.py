"""Flow control: when requests pass, wait and leave, in which order, and why."""

from __future__ import annotations

import pytest

from services.gateway.scheduling.flow import (
    HOPELESS,
    MAX_WAIT,
    ROOM,
    FlowConfig,
    FlowQueue,
    QueueFull,
    Waiter,
)
from services.gateway.scheduling.pod_view import Candidate
from shared.features import PodLoad


def pods(*backlogs: float) -> list[Candidate]:
    return [
        Candidate(f"p{i}", "u", PodLoad(0, 0, 0), False, backlog_s=b)
        for i, b in enumerate(backlogs)
    ]


def w(service=0.1, at=0.0, priority=0, slo=None, model="m") -> Waiter:
    return Waiter(model, priority, service, at, slo)


def test_passes_through_while_a_pod_has_room_and_reserves_it():
    q = FlowQueue(FlowConfig(enabled=True, max_backlog_s=0.5))
    a, b, c = w(), w(), w()
    assert q.offer(a, pods(0.1, 0.9), 0.0) and a.reason == ROOM and a.queued_s() == 0.0
    # the one pod with room is reserved for a until it is dispatched
    assert not q.offer(b, pods(0.1, 0.9), 0.0) and q.queued == 1
    q.routed(a)
    assert [x.reason for x in q.take(lambda m: pods(0.1, 0.9), 1.0)] == [ROOM]
    assert b.queued_s() == 1.0 and q.queued == 0
    q.routed(b)
    assert q.offer(c, pods(0.1, 0.9), 1.0)  # nobody waits: straight through again


@pytest.mark.parametrize(
    ("order", "expected"),
    [("shortest", ["short", "mid", "long"]), ("fifo", ["long", "short", "mid"])],
)
def test_release_order(order, expected):
    q = FlowQueue(FlowConfig(enabled=True, order=order))
    busy = pods(1.0)
    named = {"long": w(5.0, 0.0), "short": w(0.05, 0.1), "mid": w(0.5, 0.2)}
    for x in named.values():
        assert not q.offer(x, busy, 0.2)
    out = []
    for t in (1.0, 2.0, 3.0):
        released = q.take(lambda m: pods(0.0), t)
        assert len(released) == 1  # one pod, one slot, reserved until routed
        out.append(next(k for k, v in named.items() if v is released[0]))
        q.routed(released[0])
    assert out == expected


def test_deadline_order_puts_a_long_prompt_that_waited_before_later_short_ones():
    # deadline = arrival + 2 x estimated prefill: long 0 + 2 x 1.0 = 2.0; short ones that
    # arrive at 0.5 (0.6) go before it, the one arriving at 2.5 (2.52) after it
    q = FlowQueue(FlowConfig(enabled=True, order="deadline", deadline_factor=2.0))
    named = {"long": w(1.0, 0.0), "late": w(0.01, 2.5), "early": w(0.05, 0.5)}
    for x in named.values():
        assert not q.offer(x, pods(1.0), x.arrived_at)
    out = []
    for t in (3.0, 4.0, 5.0):
        (released,) = q.take(lambda m: pods(0.0), t)
        assert released.reason == ROOM  # by the order, to a pod with room: not a max_wait
        out.append(next(k for k, v in named.items() if v is released))
        q.routed(released)
    assert out == ["early", "long", "late"]
    # shortest first, the long prompt would go after the one that came 2.5 s later
    shortest = FlowConfig(order="shortest")
    assert shortest.release_key(0.0, 1.0) > shortest.release_key(2.5, 0.01)


def test_room_factor_gives_a_long_prompt_its_own_gate():
    # the shared gate is 0.15 s; a 2 s prefill's own gate at roomFactor 0.25 is 0.5 s
    q = FlowQueue(FlowConfig(enabled=True, max_backlog_s=0.15, room_factor=0.25))
    busy = pods(0.3, 0.9)
    short, short2 = w(0.05, 0.0), w(0.05, 0.0)
    assert q.offer(short, pods(0.1, 0.9), 0.0)  # straight through (the shared gate)
    q.routed(short)
    assert not q.offer(short2, busy, 0.0)  # no pod under 0.15 s: it waits
    long_ = w(2.0, 0.1)
    # the long one passes the queued short one: a pod is within its own gate, not the shared
    assert q.offer(long_, busy, 0.1) and long_.reason == ROOM
    assert [c.name for c in q.route_among(long_, busy)] == ["p0"]
    q.routed(long_)
    # queued, the longest leave first as soon as a pod is within their own gate
    mid, longer = w(1.0, 0.2), w(4.0, 0.3)
    assert not q.offer(mid, pods(1.2, 1.2), 0.2) and not q.offer(longer, pods(1.2, 1.2), 0.3)
    assert q.take(lambda m: pods(0.9, 1.2), 0.4) == [longer]  # 0.9 < 1.0 = 0.25 x 4 s
    q.routed(longer)
    assert q.take(lambda m: pods(0.2, 1.2), 0.5) == [mid]  # 0.2 < 0.25 = 0.25 x 1 s
    q.routed(mid)
    assert q.take(lambda m: pods(0.1, 1.2), 0.6) == [short2] and q.queued == 0
    # off (0), the same long prompt waits behind the shared gate
    off = FlowQueue(FlowConfig(enabled=True, max_backlog_s=0.15))
    assert not off.offer(w(0.05, 0.0), busy, 0.0) and not off.offer(w(2.0, 0.1), busy, 0.1)


def test_priority_comes_before_shortest():
    q = FlowQueue(FlowConfig(enabled=True))
    low, high = w(0.01, priority=0), w(9.0, priority=5)
    q.offer(low, pods(1.0), 0.0)
    q.offer(high, pods(1.0), 0.0)
    assert q.take(lambda m: pods(0.0), 1.0) == [high]


def test_hopeless_requests_leave_at_once_for_any_pod():
    q = FlowQueue(FlowConfig(enabled=True))
    # already hopeless on arrival: 0.8 s queued on the least loaded pod + 0.4 s > 1 s SLO
    x = w(0.4, at=0.0, slo=1000.0)
    assert q.offer(x, pods(0.8, 2.0), 0.0) and x.reason == HOPELESS and x.any_pod
    # becomes hopeless while waiting
    y = w(0.4, at=0.0, slo=1000.0)
    assert not q.offer(y, pods(0.55, 0.6), 0.0)
    assert q.take(lambda m: pods(0.55, 0.6), 0.02) == []  # 0.02 + 0.55 + 0.4 < 1 s
    assert q.take(lambda m: pods(0.55, 0.6), 0.1) == [y] and y.reason == HOPELESS
    assert q.queued == 0 and q.released == {ROOM: 0, HOPELESS: 2, MAX_WAIT: 0}
    # hopeless requests do not hold a reservation
    assert q.offer(w(), pods(0.1), 0.3)


def test_bypass_can_be_turned_off():
    q = FlowQueue(FlowConfig(enabled=True, bypass_hopeless=False))
    assert not q.offer(w(0.4, slo=1.0), pods(0.8), 0.0)
    assert q.take(lambda m: pods(0.8), 10.0) == []


def test_max_wait_bounds_starvation():
    q = FlowQueue(FlowConfig(enabled=True, max_wait_s=10.0))
    big = w(50.0, at=0.0)
    q.offer(big, pods(1.0), 0.0)
    for i in range(5):
        q.offer(w(0.01, at=1.0 + i), pods(1.0), 1.0 + i)
    assert q.take(lambda m: pods(1.0), 9.0) == []
    assert q.take(lambda m: pods(1.0), 10.5) == [big] and big.reason == MAX_WAIT
    assert q.queued == 5


def test_max_wait_factor_bounds_the_wait_relative_to_the_prefill():
    q = FlowQueue(FlowConfig(enabled=True, max_wait_s=60.0, max_wait_factor=10.0))
    busy = pods(1.0)
    small, big, huge = w(service=0.2), w(service=3.0), w(service=30.0)
    for x in (small, big, huge):
        assert not q.offer(x, busy, 0.0)
    assert q.config.max_wait_for(0.2) == 2.0 and q.config.max_wait_for(30.0) == 60.0
    assert q.take(lambda m: busy, 1.9) == []
    assert q.take(lambda m: busy, 2.1) == [small] and small.reason == MAX_WAIT
    assert q.take(lambda m: busy, 30.1) == [big]
    assert q.take(lambda m: busy, 59.9) == [] and q.take(lambda m: busy, 60.1) == [huge]
    assert q.queued == 0 and q.released[MAX_WAIT] == 3
    with pytest.raises(ValueError):
        FlowConfig(max_wait_factor=-1.0)


def test_full_queue_and_cancel():
    q = FlowQueue(FlowConfig(enabled=True, max_queued=2))
    a, b = w(), w()
    q.offer(a, pods(1.0), 0.0)
    q.offer(b, pods(1.0), 0.0)
    with pytest.raises(QueueFull):
        q.offer(w(), pods(1.0), 0.0)
    q.cancel(a)
    assert q.queued == 1
    assert q.take(lambda m: pods(0.0), 1.0) == [b]  # the cancelled one is skipped
    q.cancel(b)  # released and then gone before routing: its reservation ends
    assert q.offer(w(), pods(0.0), 1.0)


def test_models_queue_separately():
    q = FlowQueue(FlowConfig(enabled=True))
    a, b = w(model="a"), w(model="b")
    q.offer(a, pods(1.0), 0.0)
    assert q.offer(b, pods(0.0), 0.0)  # model b's pods have room
    cands = {"a": pods(0.0), "b": pods(1.0)}
    assert q.take(lambda m: cands[m], 1.0) == [a]


@pytest.mark.parametrize("route_to", ["room", "any"])
def test_route_among(route_to):
    q = FlowQueue(FlowConfig(enabled=True, route_to=route_to))
    cands = pods(0.1, 0.9)
    x = w()
    q.offer(x, cands, 0.0)
    expected = ["p0"] if route_to == "room" else ["p0", "p1"]
    assert [c.name for c in q.route_among(x, cands)] == expected
    assert [c.name for c in q.route_among(x, pods(0.9, 0.9))] == ["p0", "p1"]  # room vanished


@pytest.mark.parametrize(
    "kwargs",
    [{"order": "lifo"}, {"deadline_factor": 0}, {"room_factor": -1}, {"max_backlog_s": 0}, {"max_wait_s": -1}, {"max_queued": 0},
     {"route_to": "none"}],
)  # fmt: skip
def test_bad_config(kwargs):
    with pytest.raises(ValueError):
        FlowConfig(enabled=True, **kwargs)


def _workload(
    q: FlowQueue, seed: int, steps: int = 4000, room: float = 0.12
) -> tuple[list, list[int]]:
    """A seeded mix of arrivals (priorities, SLOs, two models), cancels and takes on pods
    whose room comes and goes; returns the release sequence (arrival number, reason, time)
    and the heap entries retained after every step."""
    import random

    rng = random.Random(seed)
    waiting: list[Waiter] = []
    number: dict[int, int] = {}  # id(waiter) -> arrival number
    released, retained = [], []
    t = 0.0
    for i in range(steps):
        t += rng.expovariate(50.0)
        busy = pods(*(0.2 if rng.random() < room else 1.5 for _ in range(3)))
        x = rng.random()
        if x < 0.55:
            slo = rng.choice((None, None, 500.0, 3000.0))
            waiter = w(rng.lognormvariate(-2.0, 1.0), t, rng.choice((0, 0, 1)), slo,
                       rng.choice(("a", "b")))  # fmt: skip
            number[id(waiter)] = i
            try:
                if q.offer(waiter, busy, t):
                    released.append((i, waiter.reason, t))
                    q.routed(waiter)
                else:
                    waiting.append(waiter)
            except QueueFull:
                pass
        elif x < 0.62 and waiting:
            q.cancel(waiting.pop(rng.randrange(len(waiting))))
        else:
            for r in q.take(lambda m, busy=busy: busy, t):
                released.append((number[id(r)], r.reason, t))
                q.routed(r)
        retained.append(q.retained())
        waiting = [v for v in waiting if v.state == "queued"]
    return released, retained


@pytest.mark.parametrize("room_factor", [0.0, 5.0])  # 5: the long waiters' own gate
def test_compaction_keeps_the_release_order(monkeypatch, room_factor):
    """The lab replays through this queue: compacting the heaps must not change which
    request leaves when, nor why."""
    cfg = FlowConfig(enabled=True, max_wait_s=30.0, max_queued=400, room_factor=room_factor)
    compacting = FlowQueue(cfg)
    with_compaction, _ = _workload(compacting, seed=7, room=0.1)
    # it did trigger, many times, with requests queued (a rebuild, not just a clear)
    assert sum(sub.rebuilds for sub in compacting._q.values()) > 10
    monkeypatch.setattr("services.gateway.scheduling.flow._ModelQueue.compact", lambda q: 0)
    lazy = FlowQueue(cfg)
    without, _ = _workload(lazy, seed=7, room=0.1)
    assert lazy.compacted == 0
    assert len(with_compaction) > 1000 and {r for _, r, _ in without} == {ROOM, HOPELESS, MAX_WAIT}
    assert with_compaction == without


@pytest.mark.parametrize("room_factor", [0.0, 5.0])  # 5: the long waiters' own gate
def test_retained_entries_are_bounded_by_the_queued_count(monkeypatch, room_factor):
    cfg = FlowConfig(enabled=True, max_wait_s=60.0, max_queued=400, room_factor=room_factor)
    q = FlowQueue(cfg)
    _, retained = _workload(q, seed=7, room=0.1)
    # every step ends with each of the 4 heaps of each model within 2 x queued + 64
    for sub in q._q.values():
        for heap in (sub.ready, sub.deadlines, sub.timeouts, sub.longest):
            assert len(heap) <= 2 * sub.queued + 64
    bound = 2 * 4 * (2 * cfg.max_queued + 64)
    assert max(retained) <= bound
    # without compaction the same workload retains far more (the bound is not vacuous)
    monkeypatch.setattr("services.gateway.scheduling.flow._ModelQueue.compact", lambda q: 0)
    _, lazy = _workload(FlowQueue(cfg), seed=7, room=0.1)
    assert max(lazy) > 2 * max(retained)


def test_heaps_are_cleared_when_nothing_is_queued():
    q = FlowQueue(FlowConfig(enabled=True))
    xs = [w(0.1, slo=5000.0) for _ in range(10)]
    for x in xs:
        q.offer(x, pods(1.0), 0.0)
    assert q.retained() == 30  # ready, deadline and timeout entries
    q.cancel(xs[0])
    released = []
    while q.queued:
        got = q.take(lambda m: pods(0.0), 1.0)
        released += got
        for r in got:
            q.routed(r)
    assert released == xs[1:] and q.retained() == 0
