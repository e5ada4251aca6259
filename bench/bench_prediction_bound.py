"""How well can TTFT and TPOT be predicted at routing time at all? (issue 5, done-means 1)

One lab run (any policy) records, for every request as it reaches its pod, the gateway's
feature row *and* the exact state of the pod's engine at that moment (waiting and running
requests, prefill tokens left, KV context held, decode tokens left, the request's real
prefix-cache hit). The same XGBoost models the trainer fits (200 trees, depth 6, log
targets) are then fitted on three feature sets, refitted every ``--step`` samples on all
samples before and scored on the next ones, starting after ``--after`` samples:

- ``gateway``: the 11 upstream features (feature set v1, llm-d's),
- ``gateway v2``: every column of the schema-2 row (v1 plus the pod view's own estimates:
  backlog, cost-model prefill, their sum, protected decodes, decode batch, the gateway's
  queue, max_tokens),
- ``gateway v2, residual``: the same, fitted as a correction of the analytic estimate (the
  booster's base margin is log(1 + estimate_ms), so the trees learn log(actual / estimate)),
- ``gateway v2, queued split``: llm-d's split, one model for rows with ``is_queued`` and one
  for the rest,
- ``trainer v2, squared`` and ``trainer v2, relative``: the trainer's own fit
  (services/trainer/fitting.fit_models on feature set v2, its default rounds and depth) with
  squared error of log1p(ms) and with the relative point loss (pinball of log1p(ms) at the
  level chosen at each refit by MAPE on a random share of the rows, or the newest with
  ``--level-selection recent``; the chosen levels are reported), and ``trainer v2, relative
  or squared``: the same with squared error among the candidates (``squared_candidate``),
- ``analytic estimate``: TTFT = backlog + cost-model prefill, no learning,
- ``state oracle``: the engine's exact state plus the request's own tokens and real cache hit
  (what no router can know, only better than it),
- ``gateway + state oracle``.

With ``--then-trace`` (a workload shift, as ``headroom lab --then-trace``) it instead bounds
issue 15's recovery after the shift: the trainer's own TTFT fit (and the same correcting
the analytic estimate, ``ttft_base=estimate``) walk-forward with every earlier request's TTFT
known *at its dispatch* (no label delay, no publish delay: no live trainer can do better),
refitted every ``--shift-step`` requests; and a non-causal reference fitted on the second
trace's own rows (two-fold cross-fit: what the features can tell once the new regime has
been seen). Each is scored as the lab's ``prediction.mape_timeline`` scores the live
predictions (rolling TTFT MAPE in completion order, recovery within 1.2x of the pre-shift
level).

If even the state oracle cannot reach a MAPE, no routing-time feature can: what is left is
set by what happens *after* the decision (later arrivals' prefill chunks slowing every
decode step, the step that is running when the request arrives). ``--tail`` also reports
TPOT error without the trace's final drain (the last ``--tail`` seconds of arrivals), where
nothing arrives any more and TPOT falls to bare decode speed.

    headroom bench prediction-bound --trace ../shared/traces/X --rate-scale R
        [--policy headroom] [--limit N] [--only 'SET;SET'] [--json OUT]
        [--then-trace ../shared/traces/Y --then-rate-scale R2 --then-limit M]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import xgboost as xgb

from bench.lab.config import LabConfig
from bench.lab.report import OK, RequestRecord
from bench.lab.run import load_lab_traces, run_lab
from bench.lab.timeline import mape_timeline
from services.trainer.fitting import (
    SELECTION_SPLITS,
    FitConfig,
    TrainingData,
    fit_models,
    point_choice,
)
from shared.features import ALL_COLUMNS, ESTIMATE_COLUMN, FEATURES, TPOT_COLUMNS, TTFT_COLUMNS

QUEUED = FEATURES.index("is_queued")

STATE = ("waiting", "running", "decoding", "prefill_tokens", "context_tokens", "decode_tokens")


def collect(config: LabConfig) -> tuple[dict, dict[str, np.ndarray]]:
    """Run the lab; per completed request: gateway row, engine state, own tokens, labels."""
    seen: dict[str, tuple[list[float], tuple[int, ...], float]] = {}

    def on_submit(rid, engine, row, now):
        ld = engine.load()
        seen[rid] = (list(row), tuple(getattr(ld, k) for k in STATE), now)

    records: list = []
    report = run_lab(config, on_submit=on_submit, records_out=records)
    rows, state, own, ttft, tpot, t, index, finished = [], [], [], [], [], [], [], []
    for r in records:
        s = seen.get(f"r{r.index}")
        if s is None or r.pod_ttft_ms is None:
            continue
        index.append(r.index)
        finished.append(r.finished_s)
        rows.append(s[0])
        state.append(s[1])
        own.append((r.input_tokens, r.max_tokens))
        ttft.append(r.pod_ttft_ms)
        tpot.append(np.nan if r.tpot_ms is None else r.tpot_ms)
        t.append(s[2])
    data = {
        "rows": np.array(rows, dtype=np.float64),
        "state": np.array(state, dtype=np.float64),
        "own": np.array(own, dtype=np.float64),
        "ttft": np.array(ttft),
        "tpot": np.array(tpot),
        "t": np.array(t),  # reached its pod
        "index": np.array(index),  # trace index (a shift's second trace: from its first)
        "finished": np.array(finished, dtype=np.float64),
    }
    return report, data


def walk_forward(
    x: np.ndarray,
    y: np.ndarray,
    *,
    after: int,
    step: int,
    rounds: int = 200,
    base: np.ndarray | None = None,
    split: np.ndarray | None = None,
) -> np.ndarray:
    """Predictions for rows ``after..`` from models fitted (log target) on all earlier rows,
    refitted every ``step`` rows; NaN before ``after``. ``base`` (ms per row): fit the
    log-residual of it (base margin log1p(base)); ``split`` (bool per row): one model per
    side."""
    if split is not None:
        pred = np.full(len(y), np.nan)
        for side in (False, True):
            m = split == side
            if m.any():
                b = None if base is None else base[m]
                k = int((np.flatnonzero(m) < after).sum())
                pred[m] = walk_forward(x[m], y[m], after=k, step=step, rounds=rounds, base=b)
        return pred
    n = len(y)
    pred = np.full(n, np.nan)
    ok = np.isfinite(y)
    margin = None if base is None else np.log1p(np.maximum(base, 0.0))
    params = {"max_depth": 6, "eta": 0.05, "nthread": 1, "tree_method": "hist", "seed": 0}
    for start in range(max(after, 1), n, step):
        train = ok.copy()
        train[start:] = False
        if not train.any():
            continue
        dm = xgb.DMatrix(x[train], np.log1p(y[train]),
                         base_margin=None if margin is None else margin[train])  # fmt: skip
        booster = xgb.train(params, dm, rounds)
        stop = min(n, start + step)
        test = xgb.DMatrix(x[start:stop],
                           base_margin=None if margin is None else margin[start:stop])  # fmt: skip
        pred[start:stop] = np.expm1(booster.predict(test))
    return pred


# the trainer's own fits: (name, point loss, squared error among the relative candidates)
TRAINER_SETS = (
    ("trainer v2, squared", "squared", False),
    ("trainer v2, relative", "relative", False),
    ("trainer v2, relative or squared", "relative", True),
)


def walk_forward_trainer(
    rows: np.ndarray, labels: dict[str, np.ndarray], *, after: int, step: int, config: FitConfig
) -> tuple[dict[str, np.ndarray], list[dict[str, float]]]:
    """The trainer's own models walk-forward: ``fit_models`` on every row before ``start``,
    refitted every ``step`` rows, predicting rows ``start..start+step`` with each target's
    point model; NaN before ``after``. Also returns each refit's relative levels."""
    n = len(rows)
    data = TrainingData(rows, labels, np.arange(n, dtype=np.float64))
    pred = {t: np.full(n, np.nan) for t in labels}
    levels: list[dict[str, float]] = []
    for start in range(max(after, 1), n, step):
        train = np.arange(n) < start
        models = fit_models(data, train, config)
        stop = min(n, start + step)
        chosen = {}
        for m in models.values():
            if m.spec.objective == "mean":
                pred[m.spec.target][start:stop] = m.predict(rows[start:stop])
                if config.point_loss == "relative":
                    chosen[m.spec.target] = point_choice(m.spec)
        levels.append(chosen)
    return pred, levels


def errors(pred: np.ndarray, y: np.ndarray, mask: np.ndarray) -> dict[str, float | int | None]:
    m = mask & np.isfinite(pred) & np.isfinite(y)
    if not m.any():
        return {"mape": None, "median_ape": None, "n": 0}
    ape = np.abs(pred[m] - y[m]) / np.maximum(y[m], 1.0)
    return {"mape": round(float(ape.mean()), 4), "median_ape": round(float(np.median(ape)), 4),
            "n": int(m.sum())}  # fmt: skip


def evaluate(
    data: dict[str, np.ndarray],
    *,
    after: int,
    step: int,
    tail_s: float,
    only: frozenset[str] | None = None,
    level_selection: str = "random",
) -> dict:
    """Errors per target and feature set (see the module docstring); ``only``: the names of
    the sets to compute (default every one); ``level_selection``: the trainer fits' rows for
    choosing the relative level (FitConfig.selection_split)."""
    order = np.argsort(data["t"], kind="stable")
    d = {k: v[order] for k, v in data.items()}
    rows, state, own = d["rows"], d["state"], d["own"]
    # the request's own uncached tokens, as the engine saw them, belong to the oracle
    oracle = np.column_stack([state, own])
    n = len(d["ttft"])
    scored = np.arange(n) >= after
    steady = scored & (d["t"] < d["t"].max() - tail_s)
    out: dict = {}
    v2 = rows[:, list(ALL_COLUMNS)]
    estimate = rows[:, ESTIMATE_COLUMN]
    queued = rows[:, QUEUED] > 0
    for target, cols in (("ttft", TTFT_COLUMNS), ("tpot", TPOT_COLUMNS)):
        y = d[target]
        gw = rows[:, list(cols)]
        sets: dict = {"gateway": (gw, {}), "gateway v2": (v2, {}),
                      "gateway v2, queued split": (v2, {"split": queued})}  # fmt: skip
        if target == "ttft":
            sets["gateway v2, residual"] = (v2, {"base": estimate})
        sets["state oracle"] = (oracle, {})
        sets["gateway + state oracle"] = (np.column_stack([gw, oracle]), {})
        sets["gateway v2 + state oracle"] = (np.column_stack([v2, oracle]), {})
        res = {}
        if target == "ttft":
            res["analytic estimate"] = errors(estimate, y, scored)
        for name, (x, kw) in sets.items():
            if only is not None and name not in only:
                continue
            pred = walk_forward(x, y, after=after, step=step, **kw)
            res[name] = errors(pred, y, scored)
            if target == "tpot":
                res[name]["without_final_drain"] = errors(pred, y, steady)
        out[target] = res
    labels = {"ttft": d["ttft"], "tpot": d["tpot"]}
    for name, loss, squared in TRAINER_SETS:
        if only is not None and name not in only:
            continue
        config = FitConfig(features="v2", point_loss=loss, selection_split=level_selection,
                           squared_candidate=squared)  # fmt: skip
        preds, levels = walk_forward_trainer(rows, labels, after=after, step=step, config=config)
        for target, pred in preds.items():
            out[target][name] = errors(pred, labels[target], scored)
            if target == "tpot":
                out[target][name]["without_final_drain"] = errors(pred, labels[target], steady)
            if loss == "relative":
                out[target][name]["levels"] = [c.get(target) for c in levels]
    return out


SHIFT_SETS = ("trainer v2, relative", "trainer v2, relative, estimate base")


def _timeline(data: dict[str, np.ndarray], pred: np.ndarray, shift_index: int) -> dict:
    """``mape_timeline`` of ``pred`` (TTFT ms per row, NaN: not predicted) on ``data``."""
    cols = (data["index"], data["t"], data["ttft"], data["finished"], pred)
    recs = [
        RequestRecord(
            int(i),
            arrival_s=float(t),
            input_tokens=0,
            max_tokens=0,
            status=OK,
            first_token_s=float(t) + float(y) / 1000.0,
            finished_s=float(f),
            predicted_ttft_ms=float(p),
        )
        for i, t, y, f, p in zip(*cols, strict=True)
        if np.isfinite(p)
    ]
    return mape_timeline(recs, shift_index=shift_index)


def shift_bound(
    data: dict[str, np.ndarray], shift_index: int, *, step: int, lead: int = 1500, seed: int = 0
) -> dict:
    """Issue 15 item 3's recovery for learners no live trainer can beat (the module
    docstring): per set, the timeline (its ``shift`` summary and points). Walk-forward
    starts ``lead`` requests (dispatch order) before the second trace's first."""
    order = np.argsort(data["t"], kind="stable")
    d = {k: v[order] for k, v in data.items()}
    new = d["index"] >= shift_index
    labels = {"ttft": d["ttft"]}
    out: dict = {"step": step, "labels_known": "at dispatch", "sets": {}}
    preds = {}
    after = max(1, int(np.argmax(new)) - lead)
    for name, base in zip(SHIFT_SETS, (None, "estimate"), strict=True):
        config = FitConfig(targets=("ttft",), features="v2", ttft_base=base)
        preds[name] = walk_forward_trainer(d["rows"], labels, after=after, step=step,
                                           config=config)[0]["ttft"]  # fmt: skip
        out["sets"][name] = _timeline(d, preds[name], shift_index)
    # non-causal: each second-trace row predicted by a fit on the other half of them (the
    # first trace keeps the plain walk-forward's predictions: the same pre-shift level)
    fold = np.random.default_rng(seed).integers(0, 2, len(new))
    everything = TrainingData(d["rows"], labels, d["t"])
    ref = preds[SHIFT_SETS[0]].copy()
    config = FitConfig(targets=("ttft",), features="v2")
    for f in (0, 1):
        model = fit_models(everything, new & (fold != f), config, seed=seed)["ttft"]
        ref[new & (fold == f)] = model.predict(d["rows"][new & (fold == f)])
    out["sets"]["cross-fit on the second trace (non-causal)"] = _timeline(d, ref, shift_index)
    return out


def summary(result: dict) -> str:
    lines = [f"{result['policy']} on {result['trace']} (rate x{result['rate_scale']}), "
             f"{result['requests']} requests, scored after {result['after']}:"]  # fmt: skip
    for target in ("ttft", "tpot"):
        for name, e in result["errors"][target].items():
            extra = ""
            w = e.get("without_final_drain")
            if w is not None and w["mape"] is not None:
                extra = f"  (without the final drain: {100 * w['mape']:.1f}%)"
            lines.append(f"  {target.upper():4s} {name:24s} MAPE {_pct(e['mape']):>6s}  "
                         f"median APE {_pct(e['median_ape']):>5s}{extra}")  # fmt: skip
    shift = result.get("shift")
    if shift:
        lines.append(f"after the shift to {result['then_trace']} (labels known at dispatch, "
                     f"refit every {shift['step']}):")  # fmt: skip
        for name, tl in shift["sets"].items():
            s = tl["shift"]
            pre, at = s["pre_ttft_mape"], s["ttft_mape_at_1000"]
            lines.append(f"  {name:44s} pre-shift {_pct(pre)}, at 1,000 after {_pct(at)}, "
                         f"back within {s['tolerance']}x after {s['recovered_after']} samples")  # fmt: skip
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="headroom bench prediction-bound", description=__doc__.splitlines()[0]
    )
    p.add_argument("--trace", required=True, help="Mooncake .jsonl or Azure .csv trace")
    p.add_argument("--rate-scale", type=float, required=True)
    p.add_argument("--policy", default="headroom")
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--after", type=int, default=2000, help="score requests after this many")
    p.add_argument("--step", type=int, default=500, help="refit every this many samples")
    p.add_argument("--tail", type=float, default=30.0, help="seconds of final drain to leave "
                   "out of the second TPOT figure")  # fmt: skip
    p.add_argument("--only", help="names of the feature sets to fit, separated by ';' (names "
                   "hold commas), e.g. 'trainer v2, squared;trainer v2, relative'; default: "
                   "every one")  # fmt: skip
    p.add_argument("--level-selection", choices=SELECTION_SPLITS, default="random",
                   help="rows the trainer fits choose the relative level on (the trainer's "
                   "level_selection)")  # fmt: skip
    p.add_argument(
        "--train-interval-s",
        type=float,
        default=None,
        help="the lab's refit cadence for a learning policy (default: auto)",
    )
    p.add_argument("--then-trace", help="a workload shift: this trace follows --trace (then "
                   "only the shift bound is computed, plus the sets --only names)")  # fmt: skip
    p.add_argument("--then-rate-scale", type=float, default=None)
    p.add_argument("--then-limit", type=int, default=None)
    p.add_argument(
        "--shift-step",
        type=int,
        default=25,
        help="with --then-trace: refit every this many requests",
    )
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)
    only = None if a.only is None else frozenset(x.strip() for x in a.only.split(";"))
    if a.then_trace and only is None:
        only = frozenset()
    started = time.perf_counter()
    config = LabConfig(trace=a.trace, policy=a.policy, pods=a.pods, rate_scale=a.rate_scale,
                       limit=a.limit, seed=a.seed, streaming=True,
                       train_interval_s=a.train_interval_s, then_trace=a.then_trace,
                       then_rate_scale=a.then_rate_scale, then_limit=a.then_limit)  # fmt: skip
    report, data = collect(config)
    result = {
        "policy": a.policy, "trace": report["trace"], "rate_scale": a.rate_scale,
        "then_trace": report["then_trace"], "then_rate_scale": a.then_rate_scale,
        "pods": a.pods, "requests": len(data["ttft"]), "after": a.after, "step": a.step,
        "errors": evaluate(data, after=a.after, step=a.step, tail_s=a.tail, only=only,
                           level_selection=a.level_selection),
        "level_selection": a.level_selection,
        "lab_prediction": report["prediction"],
    }  # fmt: skip
    if a.then_trace:
        shift_index = load_lab_traces(config)[1]
        result["shift"] = shift_bound(data, shift_index, step=a.shift_step, seed=a.seed)
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(result, indent=1)
    print(text)
    print(summary(result), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())
