"""Predictor inference paths against each other, per batch size, in one process.

    headroom bench inference [--trees 200] [--depth 6] [--repeat 200] [--json OUT]

Fits TTFT and TPOT models (``--trees`` trees of ``--depth``, llm-d's 200 x 6 by default) on
the trainer benchmark's synthetic samples, then times both models' predictions for batches
of 1 to 10,000 rows with

- ``inplace_predict``: XGBoost's public API (``LatencyModel.predict_key``),
- ``direct``: the same C entry point called with its configuration prepared once,
- ``forest``: services/predictor/forest.py (both models in one numpy pass),
- ``served``: what the predictor actually runs (services/predictor/inference.py picks the
  forest up to ``forest_rows`` rows, ``direct`` above),

warm (calls back to back; median of ``--repeat``) and, for batches up to 100 rows, cold
(a 10 ms sleep before each call, as between the lone decisions of a lightly loaded gateway;
median of ``--repeat // 4``). Every path's output is checked bit for bit against
``inplace_predict`` on the same rows. Prints JSON and a table; no network.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

SIZES = (1, 8, 32, 100, 1000, 10_000)
COLD_MAX_ROWS = 100


def _model(trees: int, depth: int):
    from bench.bench_trainer import synthetic
    from services.trainer.cycle import run_cycle
    from services.trainer.fitting import FitConfig, TrainingData

    cfg = FitConfig(rounds=trees, max_depth=depth)
    return run_cycle(TrainingData.from_samples(synthetic(4000, seed=0)), None, cfg).model("v1")


def _rows(n: int, seed: int) -> np.ndarray:
    from bench.bench_predictor import decision_rows

    per = max(1, min(n, 100))
    blocks = decision_rows(per, n=(n + per - 1) // per, seed=seed)
    return np.concatenate([np.asarray(b, dtype=np.float32) for b in blocks])[:n]


def _time(fn, x: np.ndarray, repeat: int, gap_s: float = 0.0) -> float:
    """Median milliseconds of ``fn(x)`` over ``repeat`` calls (after one warm-up call)."""
    fn(x)
    out = []
    for _ in range(repeat):
        if gap_s:
            time.sleep(gap_s)
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def run_bench(trees: int, depth: int, repeat: int) -> dict:
    from services.predictor.forest import ForestError, HeapForest
    from services.predictor.inference import CompiledModel, _Direct, forest_rows

    model = _model(trees, depth)
    served = CompiledModel(model)
    keys = served.keys
    forest = served.forest  # None if it was not built or disagreed with XGBoost
    if forest is None:
        try:  # time it anyway; the identity check below reports the disagreement
            forest = HeapForest([(model.boosters[k], model.columns[k]) for k in keys])
        except ForestError:
            pass
    direct = [_Direct(model.boosters[k], model.columns[k], model.spec(k)) for k in keys]
    paths = {
        "inplace_predict": lambda x: [model.predict_key(k, x) for k in keys],
        "direct": lambda x: [fn(x) for fn in direct],
        "served": lambda x: list(served.predict(x)),
    }
    if forest is not None:
        paths["forest"] = lambda x: served._from_forest(forest, x)
    results = []
    for n in SIZES:
        x = _rows(n, seed=n)
        want = paths["inplace_predict"](x)
        row: dict = {"rows": n, "warm_ms": {}, "cold_ms": {}, "identical": {}}
        for name, fn in paths.items():
            got = fn(x)
            row["identical"][name] = all(
                np.array_equal(a, b) for a, b in zip(got, want, strict=True)
            )
            reps = max(3, repeat if n <= 1000 else repeat // 20)
            row["warm_ms"][name] = round(_time(fn, x, reps), 4)
            if n <= COLD_MAX_ROWS:
                row["cold_ms"][name] = round(_time(fn, x, max(3, repeat // 4), 0.01), 4)
        results.append(row)
    return {
        "model": {"trees": trees, "depth": depth, "targets": list(keys)},
        "forest": None
        if forest is None
        else {
            "trees": forest.n_trees,
            "depth": forest.depth,
            "used_up_to_rows": forest_rows(forest),
        },
        "served_uses": {"forest_rows": served.forest_rows, "direct": served.direct},
        "results": results,
    }


def summary(r: dict) -> str:
    names = list(r["results"][0]["warm_ms"])
    lines = [
        f"model: 2 x {r['model']['trees']} trees of depth {r['model']['depth']}; "
        f"forest used up to {r['served_uses']['forest_rows']} rows",
        "rows    " + "".join(f"{n:>17}" for n in names) + "   (warm ms; cold ms in brackets)",
    ]
    for row in r["results"]:
        cells = []
        for n in names:
            c = row["cold_ms"].get(n)
            mark = "" if row["identical"][n] else " !="
            cells.append(
                f"{row['warm_ms'][n]:>8.3f}" + (f" [{c:.3f}]" if c is not None else " " * 8) + mark
            )
        lines.append(f"{row['rows']:<8}" + "".join(f"{c:>17}" for c in cells))
    lines.append("every path is bit-identical to inplace_predict" if all(
        all(row["identical"].values()) for row in r["results"]) else "SOME PATH DIFFERS (!=)")  # fmt: skip
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="headroom bench inference", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--trees", type=int, default=200)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--repeat", type=int, default=200, help="timed calls per (path, size)")
    p.add_argument("--json", default=None, help="write the result here too")
    args = p.parse_args(argv)
    r = run_bench(args.trees, args.depth, args.repeat)
    text = json.dumps(r, indent=2)
    print(text)
    print(summary(r))
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if all(all(row["identical"].values()) for row in r["results"]) else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
