"""Estimated saturation throughput of a cluster for a trace, and the rate scale of a load.

A sample of the trace's requests (``chunks`` contiguous runs spread over the trace, so
conversations keep their shared prefixes) is submitted all at once to one simulated pod
and run to completion in virtual time. The pod's saturation rate is the number of requests
it completed by the time 80% were done, divided by that time (the drain of the last few
long requests would understate it). The cluster's rate is ``pods`` times that, and load
``L`` replays the trace at ``rate_scale = L x cluster rate / trace rate``.

Pure (virtual time only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.traces import TraceRequest
from services.simulator.engine import Engine
from services.simulator.profiles import Profile

DONE_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class Saturation:
    pod_rps: float  # one pod's estimated saturation throughput, requests/s
    cluster_rps: float  # pods x pod_rps
    trace_rps: float  # the trace's own (unscaled) arrival rate
    sample: int  # requests simulated for the estimate

    def rate_scale(self, load: float) -> float:
        """The rate scale that offers ``load`` x the cluster's saturation rate."""
        return load * self.cluster_rps / self.trace_rps

    def to_dict(self) -> dict[str, float | int]:
        return {
            "pod_rps": round(self.pod_rps, 4),
            "cluster_rps": round(self.cluster_rps, 4),
            "trace_rps": round(self.trace_rps, 4),
            "sample": self.sample,
        }


def sample_requests(
    requests: Sequence[TraceRequest], size: int = 256, chunks: int = 4
) -> list[TraceRequest]:
    """``chunks`` evenly spaced contiguous runs totalling about ``size`` requests."""
    n = len(requests)
    if n <= size:
        return list(requests)
    per = max(1, size // chunks)
    out: list[TraceRequest] = []
    for c in range(chunks):
        start = (n - per) * c // max(1, chunks - 1)
        out.extend(requests[start : start + per])
    return out


def pod_saturation_rps(requests: Sequence[TraceRequest], profile: Profile, seed: int = 0) -> float:
    """Requests/s one pod sustains on these requests when they all queue at once."""
    engine = Engine(profile, seed)
    submitted = 0
    for r in requests:
        try:
            engine.submit(f"s{r.index}", r.prompt_tokens(), r.output_tokens, 0.0)
        except ValueError:
            continue  # too long for the pod: not part of the estimate
        submitted += 1
    if submitted == 0:
        raise ValueError("no request of the sample fits the pod")
    target = max(1, int(submitted * DONE_FRACTION))
    now, done = 0.0, 0
    for _ in range(10_000_000):
        out = engine.step(now)
        now += out.duration_s
        done += sum(1 for ev in out.events if ev.finished)
        if done >= target:
            return done / now
    raise RuntimeError("saturation estimate did not finish")


def estimate_saturation(
    requests: Sequence[TraceRequest],
    profile: Profile | Sequence[Profile],
    pods: int,
    *,
    sample: int = 256,
    seed: int = 0,
) -> Saturation:
    """``requests`` at the trace's native rate (rate_scale 1). ``profile`` may give one
    profile per pod (a mixed pool): the cluster's rate is then the sum of each pod's own
    estimate, and ``pod_rps`` their mean."""
    if len(requests) < 2:
        raise ValueError("a saturation estimate needs at least 2 requests")
    span = requests[-1].arrival_s - requests[0].arrival_s
    if span <= 0:
        raise ValueError("the trace's requests all arrive at once")
    chosen = sample_requests(requests, sample)
    trace_rps = (len(requests) - 1) / span
    if isinstance(profile, Profile):
        pod_rps = pod_saturation_rps(chosen, profile, seed)
        return Saturation(pod_rps, pod_rps * pods, trace_rps, len(chosen))
    if len(profile) != pods:
        raise ValueError(f"{len(profile)} profiles for {pods} pods")
    per_class: dict[Profile, float] = {}
    for p in profile:
        if p not in per_class:
            per_class[p] = pod_saturation_rps(chosen, p, seed)
    cluster = sum(per_class[p] for p in profile)
    return Saturation(cluster / pods, cluster, trace_rps, len(chosen))
