"""What a workload looks like, in the terms of issue 18's table: prompt and output length
distributions, block reuse and arrival rate. Pure (works on a read trace).

- prompt / output: mean, p50, p90, max tokens (percentiles by linear interpolation);
- ``block_repeat``: the share of the prompts' 512-token blocks (``hash_ids``) whose id was
  already seen earlier in the workload, i.e. blocks a prefix cache holding everything could
  serve; None for a trace without block ids (Azure: the lab gives those prompts unique text);
- ``rate_rps``: (requests - 1) / (last arrival - first arrival);
- ``arrival_cv``: coefficient of variation of the gaps between arrivals (1 for Poisson,
  larger for bursty traffic);
- ``duration_s``: first to last arrival at the native rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.traces import TraceRequest


def _dist(values: Sequence[int]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    p50, p90 = np.percentile(a, [50, 90])
    return {
        "mean": round(float(a.mean()), 1),
        "p50": round(float(p50), 1),
        "p90": round(float(p90), 1),
        "max": int(a.max()),
    }


def block_repeat_fraction(requests: Sequence[TraceRequest]) -> float | None:
    seen: set[int] = set()
    total = repeats = 0
    for r in requests:
        for h in r.hash_ids:
            total += 1
            if h in seen:
                repeats += 1
            else:
                seen.add(h)
    return round(repeats / total, 4) if total else None


def characterise(requests: Sequence[TraceRequest]) -> dict:
    if len(requests) < 2:
        raise ValueError("characterising a workload needs at least 2 requests")
    arrivals = np.asarray([r.arrival_s for r in requests], dtype=np.float64)
    gaps = np.diff(arrivals)
    span = float(arrivals[-1] - arrivals[0])
    cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else None
    return {
        "requests": len(requests),
        "prompt": _dist([r.input_tokens for r in requests]),
        "output": _dist([r.output_tokens for r in requests]),
        "block_repeat": block_repeat_fraction(requests),
        "rate_rps": round((len(requests) - 1) / span, 4) if span > 0 else None,
        "arrival_cv": None if cv is None else round(cv, 3),
        "duration_s": round(span, 1),
    }


COLUMNS = (
    "| workload | split | family | requests | prompt mean / p90 / max | output mean / p90 "
    "| block repeats | rate req/s | arrival CV |"
)


def table_row(name: str, split: str, family: str, c: dict) -> str:
    p, o = c["prompt"], c["output"]
    rep = c["block_repeat"]
    rep_s = "– (no block ids)" if rep is None else f"{100 * rep:.1f}%"
    cv = "–" if c["arrival_cv"] is None else f"{c['arrival_cv']:.2f}"
    rate = "–" if c["rate_rps"] is None else f"{c['rate_rps']:.2f}"
    return (
        f"| {name} | {split} | {family} | {c['requests']:,} "
        f"| {p['mean']:,.0f} / {p['p90']:,.0f} / {p['max']:,} "
        f"| {o['mean']:,.0f} / {o['p90']:,.0f} | {rep_s} | {rate} | {cv} |"
    )


def table_markdown(rows: Sequence[tuple[str, str, str, dict]]) -> str:
    lines = [COLUMNS, "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [table_row(*r) for r in rows]
    return "\n".join(lines) + "\n"
