"""One training cycle (pure): hold out, fit, evaluate, compare with the current model, decide.

The holdout is drawn only from samples the current model never trained on (stamped after
its ``trained_until``), so candidate and current are judged on the same unseen rows; at
most half of those are held out, the rest are trained on. The candidate is promoted if,
on every target with at least ``min_holdout`` holdout rows, its primary metric (MAPE for
mean models, pinball loss for quantile models) is not worse than the current model's by
more than ``margin`` (relative). What is evaluated is what is shipped: the promoted model
is the one fitted without the holdout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from services.trainer.fitting import (
    BLOB_FORMAT,
    FitConfig,
    FittedModel,
    TrainingData,
    evaluate_on,
    fit_models,
)
from shared.features import FEATURE_SCHEMA_VERSION
from shared.latency_model import LatencyModel, ModelSpec
from shared.schemas import ModelMeta

PROMOTE, REJECT, SKIP = "promote", "reject", "skip"


@dataclass
class CycleResult:
    decision: str  # promote | reject | skip
    reason: str
    samples: int = 0
    holdout: int = 0
    models: dict[str, FittedModel] = field(default_factory=dict)
    metrics: dict[str, dict] = field(default_factory=dict)  # candidate, on the holdout
    current_metrics: dict[str, dict] = field(default_factory=dict)  # current, same holdout
    compared_with: str | None = None
    compared_keys: list[str] = field(default_factory=list)
    worse_keys: list[str] = field(default_factory=list)
    trained_until: float | None = None

    def model(self, version: str) -> LatencyModel:
        """The candidate as a servable in-process model."""
        return LatencyModel.from_boosters(
            version,
            {k: m.booster for k, m in self.models.items()},
            {k: m.spec for k, m in self.models.items()},
        )


def select_holdout(
    data: TrainingData,
    *,
    fraction: float,
    seed: int,
    unseen_after: float | None = None,
    has_current: bool = False,
) -> np.ndarray:
    """Boolean mask of holdout rows (see the module docstring)."""
    n = len(data)
    mask = np.zeros(n, dtype=bool)
    if not has_current:
        pool = np.arange(n)
        h = int(n * fraction) if n >= 20 else 0
    else:
        pool = np.arange(n) if unseen_after is None else np.flatnonzero(data.ts > unseen_after)
        h = min(math.ceil(n * fraction), len(pool) // 2)
    if h > 0:
        rng = np.random.default_rng(seed)
        mask[rng.choice(pool, size=h, replace=False)] = True
    return mask


def comparable(spec: ModelSpec, current: LatencyModel) -> bool:
    return spec.key in current.boosters and tuple(current.columns[spec.key]) == spec.columns


def decide(
    specs: tuple[ModelSpec, ...],
    candidate: dict[str, dict],
    current: dict[str, dict],
    *,
    margin: float,
    min_holdout: int,
) -> tuple[str, str, list[str], list[str]]:
    """(decision, reason, compared keys, worse keys) from metrics on the same holdout."""
    compared, worse, notes = [], [], []
    for spec in specs:
        cand, cur = candidate.get(spec.key), current.get(spec.key)
        if cand is None or cur is None or (cand.get("n") or 0) < min_holdout:
            continue
        m = spec.primary_metric
        c, k = cand.get(m), cur.get(m)
        if c is None or k is None:
            continue
        compared.append(spec.key)
        if c > k * (1.0 + margin) + 1e-12:
            worse.append(spec.key)
            notes.append(f"{spec.key} {m} {c:.4g} > current {k:.4g} (+{margin:.0%} allowed)")
    if not compared:
        return SKIP, "too_few_unseen_samples", compared, worse
    if worse:
        return REJECT, "worse: " + "; ".join(notes), compared, worse
    return PROMOTE, "not_worse", compared, worse


def run_cycle(
    data: TrainingData,
    current: LatencyModel | None,
    config: FitConfig,
    *,
    seed: int = 0,
) -> CycleResult:
    """Hold out, fit, evaluate and decide (no I/O; run it off the event loop)."""
    specs = config.specs()
    counts = data.counts()
    lacking = [t for t in config.targets if counts.get(t, 0) < max(config.min_samples, 1)]
    if lacking:
        return CycleResult(SKIP, "too_few_samples: " + ",".join(lacking), samples=len(data))
    meta = current.meta if current is not None else None
    cmp_specs = tuple(s for s in specs if current is not None and comparable(s, current))
    unseen_after = meta.trained_until if meta is not None else None
    holdout = select_holdout(
        data,
        fraction=config.holdout_fraction,
        seed=seed,
        unseen_after=unseen_after,
        has_current=bool(cmp_specs),
    )
    if cmp_specs:
        enough = [
            s
            for s in cmp_specs
            if int((holdout & data.labelled(s.target)).sum()) >= config.min_holdout
        ]
        if not enough:
            return CycleResult(
                SKIP, "too_few_unseen_samples", samples=len(data), holdout=int(holdout.sum())
            )
    train = ~holdout
    models = fit_models(data, train, config, seed=seed)
    cand = evaluate_on({k: m.predict for k, m in models.items()}, data, holdout, specs)
    for k, m in models.items():
        cand[k]["samples"] = m.samples
    ts_train = data.ts[train]
    result = CycleResult(
        PROMOTE,
        "first_model" if current is None else "not_comparable",
        samples=len(data),
        holdout=int(holdout.sum()),
        models=models,
        metrics=cand,
        trained_until=float(ts_train.max()) if len(ts_train) else None,
    )
    if current is None or not cmp_specs:
        return result
    result.compared_with = current.version
    result.current_metrics = evaluate_on(
        {s.key: (lambda rows, k=s.key: current.predict_key(k, rows)) for s in cmp_specs},
        data,
        holdout,
        cmp_specs,
    )
    result.decision, result.reason, result.compared_keys, result.worse_keys = decide(
        specs, cand, result.current_metrics, margin=config.margin, min_holdout=config.min_holdout
    )
    return result


def build_meta(
    version: str,
    created_at: float,
    result: CycleResult,
    config: FitConfig,
    *,
    bucket_coverage: dict | None = None,
) -> tuple[ModelMeta, dict[str, bytes]]:
    """The ModelMeta and blob mapping to store for a promoted candidate."""
    targets = {}
    for key, m in result.models.items():
        targets[key] = {
            "sha256": m.sha256,
            "columns": list(m.spec.columns),
            "format": BLOB_FORMAT,
            **m.spec.describe(),
        }
    meta = ModelMeta(
        version=version,
        created_at=created_at,
        samples=result.samples,
        feature_schema=FEATURE_SCHEMA_VERSION,
        targets=targets,
        metrics={k: dict(v, holdout=v.get("n", 0)) for k, v in result.metrics.items()},
        bucket_coverage=bucket_coverage or {},
        evaluation=evaluation_record(result, config),
        trained_until=result.trained_until,
        source="trainer",
        params=config.describe(),
    )
    meta.validate()
    return meta, {k: m.blob for k, m in result.models.items()}


def evaluation_record(result: CycleResult, config: FitConfig) -> dict:
    return {
        "decision": result.decision,
        "reason": result.reason,
        "holdout": result.holdout,
        "samples": result.samples,
        "compared_with": result.compared_with,
        "compared_keys": result.compared_keys,
        "worse_keys": result.worse_keys,
        "current": result.current_metrics,
        "candidate": result.metrics,
        "margin": config.margin,
    }
