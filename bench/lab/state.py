"""What the cost scorer and the pod view had learned at each decision of a lab run.

The `headroom` profile's prices rest on quantities it learns online: the damage weight
(latency-cost-scorer ``damageAdapt``), the share of ``max_tokens`` answers use (the pod
view's ``budget_share``), the decode slope per context token (``decode_s_per_token``,
against the engine's own), and what the pods hold (context in flight, KV use) and would cost
(the request's own prefill per pod). When a cell of the suite goes wrong, the first question
is whether one of them was off, and when. ``state`` runs one workload of a suite at one load
with a decision hook and reports those quantities binned by decision order::

    python -m bench.lab.diagnose state --suite holdout8 --workload rag-j --load 1.0 \\
        --policy headroom [--profiles P.yaml] [--client-max-tokens 4096] [--bins 10]

Diagnostics only: nothing here is used by the gateway or by ``lab compare``; the run is the
same run ``lab compare`` makes of that cell without SLO headers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np

from bench.lab.config import LabConfig
from bench.lab.run import run_lab
from bench.lab.suite import suite
from bench.lab.suite_run import materialise, prepare, rate_scale
from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer

# a placement that prefills more than this beyond the cheapest pod's is a re-prefill (s)
REPREFILL_S = 0.01


@dataclass(frozen=True, slots=True)
class StateRow:
    """One decision: what the profile had learned and what the pods looked like."""

    now: float
    damage_weight: float | None  # the profile's latency-cost-scorer's (None: it has none)
    budget_share: float | None  # None until the pod view publishes it
    typical_output_tokens: float | None
    decode_s_per_token: float  # median over the candidates (their classes' learned slopes)
    context_spread: float  # max - min context tokens in flight over the candidates
    kv_mean: float
    kv_max: float
    service_spread_s: float  # max - min of the request's own prefill estimate over the pods
    extra_service_s: float  # the chosen pod's own prefill beyond the cheapest pod's


class StateLog:
    """The simulation's ``on_decision`` hook: one :class:`StateRow` per admitted decision."""

    def __init__(self) -> None:
        self.rows: list[StateRow] = []

    def __call__(self, pending, decision, now: float) -> None:
        if not decision.admitted:
            return
        rows = pending.prep.rows
        cands = rows.candidates
        scorers = [p for p in pending.prep.scheduler.plugins if isinstance(p, LatencyCostScorer)]
        svc = list(rows.service_s) if rows.service_s else [0.0] * len(cands)
        ctx = [c.context_tokens for c in cands]
        kv = [c.load.kv_usage for c in cands]
        i = decision.ranked[0]
        self.rows.append(
            StateRow(
                now,
                scorers[0].damage_weight() if scorers else None,
                cands[0].budget_share,
                cands[0].typical_output_tokens,
                float(np.median([c.decode_s_per_token for c in cands])),
                max(ctx) - min(ctx),
                float(np.mean(kv)),
                max(kv),
                max(svc) - min(svc),
                svc[i] - min(svc),
            )
        )


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def timeline(rows: list[StateRow], bins: int) -> list[dict]:
    """The rows in ``bins`` consecutive groups of decisions: medians of each quantity, the
    share of decisions that placed a re-prefill and the seconds they added."""
    out = []
    n = len(rows)
    bins = min(bins, n)
    for b in range(bins):
        part = rows[b * n // bins : (b + 1) * n // bins]
        extra = [r.extra_service_s for r in part]
        out.append(
            {
                "decisions": [b * n // bins, (b + 1) * n // bins],
                "t_s": [round(part[0].now, 3), round(part[-1].now, 3)],
                "damage_weight": _median([r.damage_weight for r in part]),
                "budget_share": _median([r.budget_share for r in part]),
                "typical_output_tokens": _median([r.typical_output_tokens for r in part]),
                "decode_s_per_token": _median([r.decode_s_per_token for r in part]),
                "context_spread": _median([r.context_spread for r in part]),
                "kv_mean": _median([r.kv_mean for r in part]),
                "kv_max": _median([r.kv_max for r in part]),
                "service_spread_s": _median([r.service_spread_s for r in part]),
                "reprefill_share": sum(e > REPREFILL_S for e in extra) / len(part),
                "reprefill_s": round(sum(extra), 3),
            }
        )
    return out


def run_state(
    suite_name: str,
    workload: str,
    load: float,
    policy: str,
    *,
    profiles_path: str | None = None,
    client_max_tokens: int | None = None,
    seed: int = 0,
    pods: int = 8,
    bins: int = 10,
) -> dict:
    """One cell of a suite (no SLO headers) with the state hook: the run's summary, the
    engines' own decode slope and the timeline."""
    split, entry = suite(suite_name, only=[workload])[0]
    base = LabConfig(trace="", pods=pods, seed=seed, streaming=True, regret_samples=0,
                     profiles_path=profiles_path, client_max_tokens=client_max_tokens)  # fmt: skip
    with TemporaryDirectory() as tmp:
        w = prepare(materialise(split, entry, Path(tmp)), base)
        cfg = replace(w.config(base), policy=policy, rate_scale=rate_scale(w, load))
        log = StateLog()
        report = run_lab(cfg, on_decision=log)
    engines = {r.describe(): r.profile for r in cfg.resolved_pool()}
    return {
        "suite": suite_name, "workload": workload, "load": load, "policy": policy,
        "seed": seed, "client_max_tokens": client_max_tokens,
        "ttft_p90": report["ttft_ms"]["p90"], "tpot_p90": report["tpot_ms"]["p90"],
        "e2e_p90": report["e2e_ms"]["p90"], "prefix_hit": report["prefix_cache_hit_rate"],
        "flow": report["flow"], "decisions": len(log.rows),
        "engine_decode_s_per_token": {
            name: p.kv_bytes_per_token / p.attn_bandwidth_bps for name, p in engines.items()
        },
        "timeline": timeline(log.rows, bins),
    }  # fmt: skip


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def table(result: dict) -> str:
    """The timeline as a markdown table."""
    head = ("| decisions | t (s) | damage w | budget share | typical output | k (s/token) | "
            "context spread | KV mean / max | service spread (s) | re-prefills | their s |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for b in result["timeline"]:
        lines.append(
            f"| {b['decisions'][0]}-{b['decisions'][1]} | {b['t_s'][0]:.1f}-{b['t_s'][1]:.1f} "
            f"| {_fmt(b['damage_weight'], '.3f')} | {_fmt(b['budget_share'], '.4f')} "
            f"| {_fmt(b['typical_output_tokens'], '.0f')} | {_fmt(b['decode_s_per_token'], '.3g')} "
            f"| {_fmt(b['context_spread'], ',.0f')} | {b['kv_mean']:.2f} / {b['kv_max']:.2f} "
            f"| {_fmt(b['service_spread_s'], '.2f')} | {b['reprefill_share']:.0%} "
            f"| {b['reprefill_s']:.1f} |"
        )
    return "\n".join(lines)
