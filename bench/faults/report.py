"""What `headroom bench faults` reports per scenario, from what it recorded (pure: no I/O, no
clock).

- requests / failed_requests: client requests sent during the scenario and those that did
  not end in ``[DONE]`` (by status or error kind; ``mid_stream`` = after a first token);
- routing: responses by ``x-headroom-routing`` path and fallback reason;
- samples: every successful request publishes one training sample with its request id.
  ``samples_published`` = those stored in the stream (JetStream acknowledged them),
  ``samples_trained`` = those in the trainer's window, ``lost_samples`` = published but not
  in the window, ``duplicate_samples`` = stored or in the window more than once,
  ``samples_unacknowledged`` = successful requests whose sample was never stored;
- recovery_s: from the restore (the service respawned, the process thawed, the fault
  cleared) to the first request sent after it that was routed ``predicted``; 0 when
  predicted routing never stopped; None when it did not come back. For a killed service
  also ``recovery_after_up_s``, counted from when it answered /health again;
- client TTFT p50/p99 before the fault and during it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

BEFORE, FAULT, AFTER = "before", "fault", "after"
MAX_RECOVERY_S = 10.0


@dataclass(slots=True)
class Rec:
    """One client request."""

    scenario: str
    phase: str  # before | fault | after (when it was sent)
    sent: float  # seconds on the bench's clock
    gateway: int = 0  # replica index it finally went to
    status: int | None = None
    ok: bool = False
    error: str | None = None  # why it failed (None when ok)
    mid_stream: bool = False  # it failed after its first token
    path: str | None = None
    reason: str | None = None
    pod: str | None = None
    request_id: str | None = None
    ttft_s: float | None = None
    client_retries: int = 0  # resent to the other gateway replica before any response


@dataclass
class Timeline:
    fault_at: float
    restore_at: float | None = None  # None: the fault was never lifted (should not happen)
    end_at: float | None = None
    notes: dict = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default) of ``values``; None when empty."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 1)


def recovery_s(recs: Sequence[Rec], tl: Timeline) -> float | None:
    """Seconds from the restore to the first request sent at or after it that was routed
    ``predicted``; 0.0 if every answered request from the fault on was predicted."""
    answered = [r for r in recs if r.path is not None and r.sent >= tl.fault_at]
    if answered and all(r.path == "predicted" for r in answered):
        return 0.0
    if tl.restore_at is None:
        return None
    later = sorted((r for r in answered if r.sent >= tl.restore_at), key=lambda r: r.sent)
    first = next((r for r in later if r.path == "predicted"), None)
    return None if first is None else round(max(0.0, first.sent - tl.restore_at), 3)


@dataclass(frozen=True)
class Ledger:
    """Where each request id's sample ended up (read once at the end of the run)."""

    stream: Mapping[str, int]  # request id -> times stored in the stream
    window: Mapping[str, int]  # request id -> times in the trainer's window
    # (sequence, ack time) of samples JetStream acknowledged that the stream no longer holds
    acked_missing: tuple[tuple[int, float], ...] = ()


def sample_counts(recs: Iterable[Rec], ledger: Ledger) -> dict[str, int]:
    ids = [r.request_id for r in recs if r.ok and r.request_id]
    stored = [i for i in ids if ledger.stream.get(i, 0) > 0]
    return {
        "samples_expected": len(ids),
        "samples_published": len(stored),
        "samples_trained": sum(1 for i in ids if ledger.window.get(i, 0) > 0),
        "lost_samples": sum(1 for i in stored if ledger.window.get(i, 0) == 0),
        "duplicate_samples": sum(
            1 for i in ids if ledger.stream.get(i, 0) > 1 or ledger.window.get(i, 0) > 1
        ),
        "samples_unacknowledged": len(ids) - len(stored),
    }


def summarize(
    name: str,
    recs: Sequence[Rec],
    tl: Timeline,
    ledger: Ledger,
    *,
    allowed_failures: str | None = None,
) -> dict:
    """One scenario's report. ``allowed_failures``: the failures this scenario may have
    (``mid_stream_on:POD``: streams of that pod that broke after their first token;
    ``in_flight_on_gateway:I``: requests whose connection to that killed replica broke,
    i.e. streams in flight on it, sent before or after the fault began)."""
    failed = [r for r in recs if not r.ok]
    by_kind = Counter(
        f"status_{r.status}" if r.status not in (None, 200) else (r.error or "unknown")
        for r in failed
    )
    routing = Counter(f"{r.path}/{r.reason or 'ok'}" for r in recs if r.path is not None)
    before = [r.ttft_s for r in recs if r.ok and r.phase == BEFORE and r.ttft_s is not None]
    during = [r.ttft_s for r in recs if r.ok and r.phase == FAULT and r.ttft_s is not None]
    excused = [r for r in failed if _excused(r, allowed_failures)]
    out = {
        "name": name,
        "requests": len(recs),
        "failed_requests": len(failed),
        "failed_by_kind": dict(sorted(by_kind.items())),
        "failed_excused": len(excused),
        "failed_excused_rule": allowed_failures,
        "client_retries": sum(r.client_retries for r in recs),
        "routing": dict(sorted(routing.items())),
        **sample_counts(recs, ledger),
        "recovery_s": recovery_s(recs, tl),
        "fault_s": None if tl.restore_at is None else round(tl.restore_at - tl.fault_at, 3),
        "ttft_ms": {
            "before": {
                "p50": _ms(percentile(before, 50)),
                "p99": _ms(percentile(before, 99)),
                "n": len(before),
            },
            "during": {
                "p50": _ms(percentile(during, 50)),
                "p99": _ms(percentile(during, 99)),
                "n": len(during),
            },
        },
        **tl.notes,
    }
    if tl.notes.get("down_s") is not None:  # a killed service: also from its being up again
        up = Timeline(tl.fault_at, tl.fault_at + tl.notes["down_s"], tl.end_at)
        out["recovery_after_up_s"] = recovery_s(recs, up)
    out["acked_missing_from_stream"] = sum(
        1 for _, t in ledger.acked_missing
        if t >= tl.fault_at and (tl.end_at is None or t <= tl.end_at)
    )  # fmt: skip
    out["passed"] = verdict(out)
    return out


def _excused(r: Rec, rule: str | None) -> bool:
    if rule is None:
        return False
    kind, _, arg = rule.partition(":")
    if kind == "mid_stream_on":
        return r.mid_stream and r.pod == arg
    if kind == "in_flight_on_gateway":  # its connection broke with the killed replica
        return r.gateway == int(arg) and r.status in (None, 200) and r.error is not None
    return False


def verdict(s: Mapping) -> bool:
    """Issue 16's done-means 1 for one scenario: no failed request (but the excused ones),
    no lost and no duplicate sample, predicted routing back within 10 s."""
    rec = s["recovery_s"]
    return (
        s["failed_requests"] == s["failed_excused"]
        and s["lost_samples"] == 0
        and s["duplicate_samples"] == 0
        and rec is not None
        and rec <= MAX_RECOVERY_S
    )
