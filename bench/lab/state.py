"""A decision log's timeline: what the profile had learned, and what it placed, over a run.

The `headroom` profile's prices rest on quantities it learns online: the damage weight
(latency-cost-scorer ``damageAdapt``), the share of ``max_tokens`` answers use (the pod
view's ``budget_share``) and the decode slope per context token (``decode_s_per_token``,
beside the engine's own). When a suite cell goes wrong, the first questions are whether one
of them was off, and when, and whether the profile re-prefilled prompts cached elsewhere.
``headroom lab decisions DIR WORKLOAD LOAD --timeline BINS`` bins the cell's decision log
(bench/lab/decisions.py) by decision order and prints, per bin, the medians of those
quantities, the spread of context in flight and of the request's own prefill over the pods,
KV use, and the decisions that placed a re-prefill (the chosen pod's own prefill more than
``REPREFILL_S`` beyond the cheapest pod's) with the seconds they added.

Diagnostics only; pure: it reads the log's dicts.
"""

from __future__ import annotations

import numpy as np

# a placement that prefills more than this beyond the cheapest pod's is a re-prefill (s)
REPREFILL_S = 0.01


def _median(values) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def _service_gaps(line: dict) -> tuple[float, float]:
    """(the spread of the request's own prefill estimate over the pods, the chosen pod's
    beyond the least), seconds."""
    service = [p[2] for p in line["pods"]]
    chosen = [p[0] for p in line["pods"]].index(line["chosen"])
    least = min(service)
    return max(service) - least, service[chosen] - least


def timeline(lines: list[dict], bins: int) -> list[dict]:
    """The routed decisions of a log in ``bins`` consecutive groups (never more groups than
    decisions): medians of the learned quantities and of the pods' spreads, the share of
    decisions that placed a re-prefill and the seconds those added."""
    # in the order the decisions were made (the log is by request index; flow control
    # releases requests out of arrival order)
    lines = sorted((d for d in lines if d["chosen"] is not None), key=lambda d: d["routed_s"])
    n = len(lines)
    bins = min(bins, n)
    out = []
    for b in range(bins):
        part = lines[b * n // bins : (b + 1) * n // bins]
        svc, extra = zip(*(_service_gaps(d) for d in part), strict=True)
        learned = [d["learned"] for d in part]
        ctx = [max(d["context_tokens"]) - min(d["context_tokens"]) for d in part]
        out.append(
            {
                "decisions": [b * n // bins, (b + 1) * n // bins],
                "t_s": [part[0]["routed_s"], part[-1]["routed_s"]],
                **{k: _median([x[k] for x in learned]) for k in learned[0]},
                "context_spread": _median(ctx),
                "kv_mean": _median([float(np.mean(d["kv_usage"])) for d in part]),
                "kv_max": _median([max(d["kv_usage"]) for d in part]),
                "service_spread_s": _median(svc),
                "reprefill_share": sum(e > REPREFILL_S for e in extra) / len(part),
                "reprefill_s": round(sum(extra), 3),
            }
        )
    return out


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def table(bins: list[dict]) -> str:
    """The timeline as a markdown table."""
    head = ("| decisions | t (s) | damage w | budget share | typical output | k (s/token) | "
            "context spread | KV mean / max | service spread (s) | re-prefills | their s |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for b in bins:
        lines.append(
            f"| {b['decisions'][0]}-{b['decisions'][1]} | {b['t_s'][0]:.1f}-{b['t_s'][1]:.1f} "
            f"| {_fmt(b['damage_weight'], '.3f')} | {_fmt(b['budget_share'], '.4f')} "
            f"| {_fmt(b['typical_output_tokens'], '.0f')} | {_fmt(b['decode_s_per_token'], '.3g')} "
            f"| {_fmt(b['context_spread'], ',.0f')} | {b['kv_mean']:.2f} / {b['kv_max']:.2f} "
            f"| {_fmt(b['service_spread_s'], '.2f')} | {b['reprefill_share']:.0%} "
            f"| {b['reprefill_s']:.1f} |"
        )
    return "\n".join(lines)
