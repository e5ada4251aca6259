"""Prediction error over time in a lab run (``prediction.mape_timeline``) and its plot.

The served predictions of the chosen pods are taken in completion order (the order the
trainer receives their samples). Every ``every`` samples the timeline records the rolling
TTFT and TPOT MAPE over the last ``window`` of them. With a workload shift (``--then-trace``)
it also sums up the recovery, issue 15's done-means 3:

- ``pre_ttft_mape``: TTFT MAPE over the last ``pre`` samples of the first trace before the
  first sample of the second one;
- ``recovered_after``: the number of second-trace samples after which the rolling TTFT MAPE
  over the last ``window`` second-trace samples is back within ``tolerance`` x that level
  (None if it never is); ``ttft_mape_at_1000``: that rolling MAPE after 1,000 of them.

``headroom lab plot-timeline REPORT.json [--out PNG]`` draws the timeline: of a lab report,
or one curve per learner of a ``headroom bench prediction-bound --then-trace`` result (its
``shift.sets``).

Pure except :func:`run_plot_cli` (files).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from bench.lab.report import OK, RequestRecord

MAPE_FLOOR_MS = 1.0


def _ape(p: float | None, y: float | None) -> float | None:
    if p is None or y is None:
        return None
    return abs(p - y) / max(y, MAPE_FLOOR_MS)


def mape_timeline(
    records: Sequence[RequestRecord],
    *,
    shift_index: int | None = None,
    window: int = 250,
    every: int = 100,
    pre: int = 1000,
    tolerance: float = 1.2,
) -> dict:
    """The timeline (see the module docstring); ``shift_index`` is the index of the second
    trace's first request (records with a larger or equal index belong to it)."""
    done = [r for r in records if r.status == OK and r.predicted_ttft_ms is not None]
    done.sort(key=lambda r: (r.finished_s or 0.0, r.index))
    ttft: deque[float] = deque(maxlen=window)
    tpot: deque[float] = deque(maxlen=window)
    points = []
    shift_at = None
    for k, r in enumerate(done, 1):
        a = _ape(r.predicted_ttft_ms, r.pod_ttft_ms)
        if a is not None:
            ttft.append(a)
        b = _ape(r.predicted_tpot_ms, r.tpot_ms)
        if b is not None:
            tpot.append(b)
        if shift_at is None and shift_index is not None and r.index >= shift_index:
            shift_at = k
        if k % every == 0:
            points.append({
                "samples": k, "t": round(r.finished_s or 0.0, 3),
                "ttft_mape": round(sum(ttft) / len(ttft), 5) if ttft else None,
                "tpot_mape": round(sum(tpot) / len(tpot), 5) if tpot else None,
            })  # fmt: skip
    out: dict = {"window": window, "every": every, "points": points, "shift": None}
    if shift_index is None:
        return out
    first = [_ape(r.predicted_ttft_ms, r.pod_ttft_ms) for r in done if r.index < shift_index]
    second = [_ape(r.predicted_ttft_ms, r.pod_ttft_ms) for r in done if r.index >= shift_index]
    # the first trace's samples that completed before the second trace's first one
    before = [
        _ape(r.predicted_ttft_ms, r.pod_ttft_ms)
        for r in done[: (shift_at or len(done) + 1) - 1]
        if r.index < shift_index
    ]
    tail = [x for x in before if x is not None][-pre:]
    pre_level = sum(tail) / len(tail) if tail else None
    rolling: deque[float] = deque(maxlen=window)
    recovered = at_1000 = None
    for n, x in enumerate((x for x in second if x is not None), 1):
        rolling.append(x)
        level = sum(rolling) / len(rolling)
        if n == 1000:
            at_1000 = round(level, 5)
        if (
            recovered is None
            and n >= window
            and pre_level is not None
            and level <= tolerance * pre_level
        ):
            recovered = n
    out["shift"] = {
        "at_sample": shift_at,
        "first_trace_samples": sum(1 for x in first if x is not None),
        "second_trace_samples": sum(1 for x in second if x is not None),
        "pre_ttft_mape": None if pre_level is None else round(pre_level, 5),
        "tolerance": tolerance,
        "recovered_after": recovered,
        "ttft_mape_at_1000": at_1000,
    }
    return out


def timelines(label: str, report: dict) -> list[tuple[str, dict]]:
    """The named timelines of one JSON file: a lab report's ``prediction.mape_timeline``, or
    each set's of a prediction-bound shift result (``label: set``)."""
    sets = (report.get("shift") or {}).get("sets")
    if sets:
        return [(f"{label}: {name}", tl) for name, tl in sets.items()]
    return [(label, (report.get("prediction") or {}).get("mape_timeline") or {})]


def plot(curves: Sequence[tuple[str, dict]], out: str) -> None:
    """Rolling TTFT and TPOT MAPE of each ``(label, timeline)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    # with a shift in every curve, x counts samples from it (the curves may start apart)
    shifts = [(tl.get("shift") or {}).get("at_sample") for _, tl in curves]
    aligned = bool(curves) and all(shifts)
    for (label, tl), at in zip(curves, shifts, strict=True):
        pts = tl.get("points") or []
        xs = [p["samples"] - (at if aligned else 0) for p in pts]
        lines = []
        for ax, key in zip(axes, ("ttft_mape", "tpot_mape"), strict=True):
            ys = [None if p[key] is None else 100 * p[key] for p in pts]
            lines += ax.plot(xs, ys, label=label)
        shift = tl.get("shift") or {}
        if at:
            for ax in axes:
                ax.axvline(0 if aligned else at, color="grey", linestyle="--", linewidth=0.8)
            if shift.get("pre_ttft_mape") is not None:  # the recovery bar, in the curve's colour
                axes[0].axhline(100 * shift["pre_ttft_mape"] * shift["tolerance"],
                                color=lines[0].get_color(), linestyle=":", linewidth=0.8)  # fmt: skip
    w = next((tl for _, tl in curves), {})
    axes[0].set_ylabel(f"TTFT MAPE % (last {w.get('window', '?')})")
    axes[1].set_ylabel("TPOT MAPE %")
    axes[1].set_xlabel(
        ("samples after the shift" if aligned else "samples")
        + " (completion order); dashed: the workload shift; dotted: 1.2x the pre-shift level"
    )
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def run_plot_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="headroom lab plot-timeline",
        description="Plot prediction.mape_timeline of lab reports (rolling MAPE over samples).",
    )
    p.add_argument("reports", nargs="+", help="lab report or prediction-bound shift JSON files "
                   "(LABEL=FILE to name one)")  # fmt: skip
    p.add_argument("--out", default="mape_timeline.png", help="PNG to write")
    a = p.parse_args(argv)
    loaded = []
    for spec in a.reports:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = Path(spec).stem, spec
        loaded += timelines(label, json.loads(Path(path).read_text()))
    plot(loaded, a.out)
    print(a.out, file=sys.stderr)
    return 0
