"""Arrival times, stage plans and the sweep's saturation probe, as inference-perf computes
them (``inference_perf/loadgen/load_timer.py``, ``load_generator.py``; pure, seeded).

- A stage of ``rate`` x ``duration`` sends ``int(rate * duration)`` requests.
- ``constant`` (``ConstantLoadTimer``): exponential gaps of mean ``1/rate``, rescaled so they
  add up to ``duration`` exactly (so the last request is due at the end of the stage);
  ``poisson`` (``PoissonLoadTimer``): each second a Poisson(rate) count, spread over that
  second by the constant timer.
- A sweep first runs a probe (stage -1, not reported): ``num_requests`` over 5 s (rate
  ``num_requests / 5``) with the sweep's ``timeout``; the number of requests in flight is
  sampled every 0.5 s, and the saturation estimate is the ``saturation_percentile`` of the
  rates at which it fell (``|Δ in flight| / Δt`` over the intervals where it dropped). The
  stages are ``linspace(1, estimate, num_stages)`` (linear) or
  ``1 + estimate - geomspace(estimate, 1, num_stages)`` (geometric), rounded to 0.01 req/s,
  each ``stage_duration`` long.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from services.simulator.inference_perf.config import Stage, Sweep

PROBE_DURATION_S = 5.0
PROBE_SAMPLE_S = 0.5


def constant_times(
    rate: float, duration: float, start: float, rng: np.random.Generator
) -> list[float]:
    n = int(rate * duration)
    if n == 0:
        return []
    gaps = rng.exponential(1.0 / rate, n)
    gaps *= duration / gaps.sum()
    return (start + np.cumsum(gaps)).tolist()


def poisson_times(
    rate: float, duration: float, start: float, rng: np.random.Generator
) -> list[float]:
    """As many times as the stage sends (``int(rate * duration)``), from per-second
    Poisson counts."""
    n = int(rate * duration)
    out: list[float] = []
    t = start
    while len(out) < n:
        k = int(rng.poisson(rate))
        if k < 1:
            t += 1.0
            continue
        times = constant_times(k, 1.0, t, rng)
        out.extend(times)
        t = times[-1]
    return out[:n]


def arrival_times(
    kind: str, rate: float, duration: float, start: float, rng: np.random.Generator
) -> list[float]:
    if kind == "constant":
        return constant_times(rate, duration, start, rng)
    if kind == "poisson":
        return poisson_times(rate, duration, start, rng)
    raise ValueError(f"unknown load type {kind!r}")


def sweep_stages(sweep: Sweep, estimate: float) -> list[Stage]:
    if sweep.type == "linear":
        rates = [round(float(r), 2) for r in np.linspace(1, estimate, sweep.num_stages)]
    else:
        rates = [
            round(float(1 + estimate - r), 2)
            for r in np.geomspace(estimate, 1, num=sweep.num_stages)
        ]
    return [Stage(r, float(sweep.stage_duration)) for r in rates]


def in_flight_samples(
    sends: Sequence[float], ends: Sequence[float], t0: float, t_end: float
) -> list[tuple[float, int]]:
    """(time, requests in flight) every 0.5 s from ``t0`` while the probe runs."""
    s, e = np.sort(np.asarray(sends)), np.sort(np.asarray(ends))
    times = np.arange(t0, t_end + 1e-9, PROBE_SAMPLE_S)
    active = np.searchsorted(s, times, side="right") - np.searchsorted(e, times, side="right")
    return list(zip(times.tolist(), active.tolist(), strict=True))


def saturation_estimate(
    samples: Sequence[tuple[float, int]], percentile: float, start: float, timeout: float
) -> float:
    samples = [(t, a) for t, a in samples if t < start + timeout]
    rates = [
        abs((a1 - a0) / (t1 - t0))
        for (t0, a0), (t1, a1) in itertools.pairwise(samples)
        if a1 - a0 < 0
    ]
    if len(rates) <= 1:
        raise ValueError(
            "the sweep's probe gathered too few samples to estimate saturation "
            "(inference-perf fails the same way): raise num_requests or timeout"
        )
    return float(np.percentile(rates, percentile))
