"""Why the `headroom` profile wins or loses on a workload: small synthetic traces of two
shapes and a per-decision log of the lab's routing (issue 18).

Two generators (reproducible by seed, parameters in the report):

- ``chat``: Azure-format, no prefix data, lognormal prompts and outputs (default: prompts
  mean 1.15k / p90 2.4k tokens, outputs mean 253 / p90 429): short chat;
- ``reuse``: Mooncake-format, heavy block reuse: hot documents shared by many requests and
  sessions whose turns repeat the previous turn (default: ~64% of 512-token blocks are
  repeats, prompts mean ~15k / p90 ~39k, outputs mean ~149).

``python -m bench.lab.diagnose run --shape chat --n 3000 --loads 1.0 --policies
headroom,gie-default --out DIR`` writes the trace, runs the lab (the production scheduling
code, :class:`bench.lab.simulation.LabSimulation`) with a decision hook and prints, per
policy and load, the latency summary and what the decisions looked like: the chosen pod's
estimated backlog and decode count against the other pods', the scorer's note, the time
queued in the gateway and the realised TTFT by kind of decision. ``stats`` prints a trace's
shape (prompt/output distribution, block reuse) only.

Diagnostics only: nothing here is used by the gateway or by ``lab compare``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from bench.lab.compare import saturation_for
from bench.lab.config import LabConfig
from bench.lab.run import load_lab_trace, run_lab
from bench.traces import read_trace

BLOCK = 512


# --- generators ---------------------------------------------------------------------------
def _lognormal(rng: random.Random, mean: float, p90: float) -> float:
    """A lognormal draw with the given mean and 90th percentile (p90/mean <= ~2.27)."""
    r = math.log(p90 / mean)  # = 1.2816 s - s^2 / 2
    disc = 1.2816**2 - 2.0 * r
    s = 1.2816 - math.sqrt(max(0.0, disc))
    mu = math.log(mean) - s * s / 2.0
    return rng.lognormvariate(mu, s)


def _gap(rng: random.Random, rate: float, cv: float) -> float:
    """An inter-arrival gap: gamma with mean 1/rate and coefficient of variation cv."""
    k = 1.0 / (cv * cv)
    return rng.gammavariate(k, 1.0 / (k * rate))


@dataclass(frozen=True)
class ChatShape:
    n: int = 3000
    rate_rps: float = 20.0
    seed: int = 0
    prompt_mean: float = 1150.0
    prompt_p90: float = 2400.0
    output_mean: float = 253.0
    output_p90: float = 429.0
    max_prompt: int = 16_000
    max_output: int = 2048
    arrival_cv: float = 1.0  # coefficient of variation of the gaps (1 = Poisson; gamma)


def write_chat_trace(path: str | Path, shape: ChatShape) -> Path:
    rng = random.Random(shape.seed)
    path = Path(path)
    t = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for _ in range(shape.n):
        t += timedelta(seconds=_gap(rng, shape.rate_rps, shape.arrival_cv))
        p = min(
            shape.max_prompt, max(16, round(_lognormal(rng, shape.prompt_mean, shape.prompt_p90)))
        )
        o = min(
            shape.max_output, max(1, round(_lognormal(rng, shape.output_mean, shape.output_p90)))
        )
        rows.append(f"{t.strftime('%Y-%m-%d %H:%M:%S.%f')},{p},{o}")
    path.write_text("\n".join(rows) + "\n")
    return path


@dataclass(frozen=True)
class ReuseShape:
    n: int = 2000
    rate_rps: float = 3.0
    seed: int = 0
    docs: int = 120  # hot documents / long shared prefixes
    doc_zipf: float = 1.1  # popularity skew of the documents
    doc_blocks_median: float = 16.0  # ~8k tokens
    doc_blocks_sigma: float = 1.3
    p_doc: float = 0.5  # a new session starts with a hot document
    p_continue: float = 0.45  # a request is the next turn of an open session
    turn_blocks_mean: float = 10.0  # new blocks per turn (user text, tool output)
    p_end: float = 0.25  # a session ends after a turn with this probability
    output_mean: float = 149.0
    output_p90: float = 300.0
    arrival_cv: float = 1.0
    max_blocks: int = 374  # ~191k tokens


def write_reuse_trace(path: str | Path, shape: ReuseShape) -> Path:
    rng = random.Random(shape.seed)
    path = Path(path)
    next_id = 0

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    docs = []
    for _ in range(shape.docs):
        k = max(
            1, round(shape.doc_blocks_median * math.exp(rng.gauss(0.0, shape.doc_blocks_sigma)))
        )
        docs.append(fresh(min(k, shape.max_blocks - 8)))
    weights = [1.0 / (i + 1) ** shape.doc_zipf for i in range(shape.docs)]
    sessions: list[list[int]] = []
    t_ms = 0.0
    lines = []
    for _ in range(shape.n):
        t_ms += _gap(rng, shape.rate_rps, shape.arrival_cv) * 1000.0
        add = max(1, round(rng.expovariate(1.0 / shape.turn_blocks_mean)))
        if sessions and rng.random() < shape.p_continue:
            i = rng.randrange(len(sessions))
            blocks = sessions[i] + fresh(add)
            sessions[i] = blocks
            if rng.random() < shape.p_end:
                sessions.pop(i)
        else:
            base = list(rng.choices(docs, weights)[0]) if rng.random() < shape.p_doc else []
            blocks = base + fresh(add)
            sessions.append(blocks)
            if len(sessions) > 200:
                sessions.pop(0)
        blocks = blocks[: shape.max_blocks]
        n_in = BLOCK * (len(blocks) - 1) + rng.randint(16, BLOCK)
        out = max(1, round(_lognormal(rng, shape.output_mean, shape.output_p90)))
        lines.append(
            json.dumps(
                {
                    "timestamp": int(t_ms),
                    "input_length": n_in,
                    "output_length": out,
                    "hash_ids": blocks,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def trace_stats(path: str | Path) -> dict:
    """Prompt/output distribution, block reuse (fraction of blocks seen before) and rate."""
    tr = read_trace(path)
    ins = np.array([r.input_tokens for r in tr.requests], dtype=float)
    outs = np.array([r.output_tokens for r in tr.requests], dtype=float)
    seen: set[int] = set()
    total = rep = 0
    for r in tr.requests:
        for h in r.hash_ids:
            total += 1
            rep += h in seen
            seen.add(h)

    def dist(a):
        return {
            "mean": round(float(a.mean()), 1),
            "p50": round(float(np.percentile(a, 50)), 1),
            "p90": round(float(np.percentile(a, 90)), 1),
            "max": int(a.max()),
        }

    return {
        "requests": len(tr),
        "format": tr.format,
        "prompt": dist(ins),
        "output": dist(outs),
        "block_reuse": round(rep / total, 4) if total else 0.0,
        "rate_rps": round((len(tr) - 1) / tr.duration_s, 3) if tr.duration_s else None,
    }


# --- the decision log ---------------------------------------------------------------------
@dataclass(slots=True)
class DecisionRow:
    t: float
    index: int
    note: str
    queued_s: float
    reason: str | None
    chosen_backlog: float
    min_backlog: float
    chosen_service: float
    min_service: float
    chosen_decodes: int
    min_decodes: int
    chosen_running: float  # scraped running + waiting (+ unseen) of the chosen pod
    min_running: float
    chosen_kv: float
    min_kv: float


class DecisionLog:
    """The simulation's ``on_decision`` hook: one row per dispatched request."""

    def __init__(self) -> None:
        self.rows: dict[int, DecisionRow] = {}

    def __call__(self, pending, decision, now: float) -> None:
        if not decision.admitted:
            return
        rows = pending.prep.rows
        i = decision.ranked[0]
        cands = rows.candidates
        back = [c.backlog_s for c in cands]
        dec = [c.protected_decodes for c in cands]
        run = [c.load.running + c.load.waiting + c.load.unseen_requests for c in cands]
        kv = [c.load.kv_usage for c in cands]
        svc = list(rows.service_s) if rows.service_s else [0.0] * len(cands)
        w = pending.waiter
        note = ",".join(str(v) for v in decision.notes.values()) or "-"
        self.rows[pending.request.index] = DecisionRow(
            now,
            pending.request.index,
            note,
            pending.prep.request.queued_s,
            None if w is None else w.reason,
            back[i],
            min(back),
            svc[i],
            min(svc),
            dec[i],
            min(dec),
            run[i],
            min(run),
            kv[i],
            min(kv),
        )


def _pct(a, q) -> float | None:
    return None if len(a) == 0 else round(float(np.percentile(a, q)), 1)


def analyse(records, log: DecisionLog, slo_ttft_ms: float | None) -> dict:
    """Decision kinds and what they cost: TTFT by the gateway wait vs on the pod."""
    by_kind: dict[str, list] = defaultdict(list)
    gap_run, gap_back, gap_kv, waits, pod_ttft = [], [], [], [], []
    for rec in records:
        row = log.rows.get(rec.index)
        if row is None or rec.ttft_ms is None:
            continue
        kind = f"{row.reason or 'direct'}/{row.note}"
        by_kind[kind].append(rec)
        gap_run.append(row.chosen_running - row.min_running)
        gap_back.append(row.chosen_backlog - row.min_backlog)
        gap_kv.append(row.chosen_kv - row.min_kv)
        waits.append(1000.0 * (rec.dispatched_s - rec.arrival_s))
        pod_ttft.append(rec.pod_ttft_ms)
    kinds = {}
    for k, rs in sorted(by_kind.items()):
        t = np.array([r.ttft_ms for r in rs])
        tp = np.array([r.tpot_ms for r in rs if r.tpot_ms is not None])
        kinds[k] = {
            "n": len(rs),
            "ttft_p50": _pct(t, 50),
            "ttft_p90": _pct(t, 90),
            "ttft_p99": _pct(t, 99),
            "tpot_p90": _pct(tp, 90),
            "met_ttft": None if slo_ttft_ms is None else round(float(np.mean(t <= slo_ttft_ms)), 3),
        }
    return {
        "kinds": kinds,
        "gateway_wait_ms": {"p50": _pct(waits, 50), "p90": _pct(waits, 90), "p99": _pct(waits, 99)},
        "pod_ttft_ms": {
            "p50": _pct(pod_ttft, 50),
            "p90": _pct(pod_ttft, 90),
            "p99": _pct(pod_ttft, 99),
        },
        "chosen_minus_min_running": {
            "mean": round(float(np.mean(gap_run)), 2) if gap_run else None,
            "p90": _pct(gap_run, 90),
        },
        "chosen_minus_min_backlog_s": {
            "mean": round(float(np.mean(gap_back)), 3) if gap_back else None,
            "p90": _pct(gap_back, 90),
        },
        "chosen_minus_min_kv": {"mean": round(float(np.mean(gap_kv)), 3) if gap_kv else None},
    }


def run_one(cfg: LabConfig, trace) -> tuple[dict, dict]:
    log = DecisionLog()
    records: list = []
    report = run_lab(cfg, trace=trace, records_out=records, on_decision=log)
    return report, analyse(records, log, cfg.slo_ttft_ms)


def _summary(r: dict) -> dict:
    return {
        "ttft_p50": r["ttft_ms"]["p50"], "ttft_p90": r["ttft_ms"]["p90"],
        "ttft_p99": r["ttft_ms"]["p99"], "tpot_p50": r["tpot_ms"]["p50"],
        "tpot_p90": r["tpot_ms"]["p90"], "e2e_p90": r["e2e_ms"]["p90"],
        "attainment": r["slo"]["attainment"], "prefix_hit": r["prefix_cache_hit_rate"],
        "preemptions": r["preemptions"], "flow": r["flow"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lab.diagnose")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats", help="a trace's shape")
    st.add_argument("trace")
    wr = sub.add_parser("write", help="write a synthetic trace")
    rn = sub.add_parser("run", help="write a synthetic trace and diagnose policies on it")
    for p in (wr, rn):
        p.add_argument("--shape", choices=("chat", "reuse"), required=True)
        p.add_argument("--n", type=int)
        p.add_argument("--gen-seed", type=int, default=0)
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a generator parameter (e.g. arrival_cv=3)",
        )
        p.add_argument("--out", required=True)
    rn.add_argument("--policies", default="headroom,gie-default")
    rn.add_argument("--loads", default="1.0")
    rn.add_argument("--pods", type=int, default=8)
    rn.add_argument("--seed", type=int, default=11)
    rn.add_argument("--slo-ttft-ms", type=float)
    rn.add_argument("--slo-tpot-ms", type=float)
    rn.add_argument("--profiles", dest="profiles_path")
    args = ap.parse_args(argv)
    if args.cmd == "stats":
        print(json.dumps(trace_stats(args.trace), indent=1))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kw: dict = {"seed": args.gen_seed, **({"n": args.n} if args.n else {})}
    for item in args.set:
        k, _, v = item.partition("=")
        kw[k] = type(getattr(ChatShape if args.shape == "chat" else ReuseShape, k))(v)
    if args.shape == "chat":
        shape = ChatShape(**kw)
        path = write_chat_trace(out / f"chat-{args.gen_seed}.csv", shape)
    else:
        shape = ReuseShape(**kw)
        path = write_reuse_trace(out / f"reuse-{args.gen_seed}.jsonl", shape)
    stats = trace_stats(path)
    print(json.dumps({"shape": vars(shape), "stats": stats}), flush=True)
    if args.cmd == "write":
        return 0
    base = LabConfig(
        trace=str(path),
        pods=args.pods,
        seed=args.seed,
        streaming=True,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        profiles_path=args.profiles_path,
    )
    sat = saturation_for(base)
    print(json.dumps({"saturation": sat.to_dict()}), flush=True)
    results = []
    for load in [float(x) for x in args.loads.split(",")]:
        scale = sat.rate_scale(load)
        trace = load_lab_trace(replace(base, rate_scale=scale))
        for policy in args.policies.split(","):
            cfg = replace(base, policy=policy, rate_scale=scale)
            report, diag = run_one(cfg, trace)
            line = {"load": load, "policy": policy, **_summary(report), "diag": diag}
            results.append(line)
            print(json.dumps(line), flush=True)
    (out / "diagnose.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
