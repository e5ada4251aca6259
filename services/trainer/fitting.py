"""Fit one model version from the window's arrays and describe it (pure, CPU-bound).

The trainer runs :func:`fit_targets` in a worker thread; everything here is deterministic
for a given input and seed, and does no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from services.trainer.window import WindowEntry, target_arrays
from shared.features import FEATURE_SCHEMA_VERSION
from shared.latency_model import TARGET_COLUMNS, booster_to_bytes, fit_target, sha256
from shared.schemas import ModelMeta

TARGETS: tuple[str, ...] = ("ttft", "tpot")
BLOB_FORMAT = "ubj"


@dataclass(frozen=True, slots=True)
class FittedTarget:
    name: str
    blob: bytes
    sha256: str
    columns: tuple[int, ...]
    samples: int
    mape: float | None  # None when there was no holdout (fewer than 20 rows)
    mae: float | None
    holdout: int


def missing_targets(counts: dict[str, int], min_samples: int) -> list[str]:
    """Targets that do not yet have ``min_samples`` labelled rows (a version needs all)."""
    return [t for t in TARGETS if counts.get(t, 0) < min_samples]


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def fit_targets(
    arrays: dict[str, tuple[np.ndarray, np.ndarray]], *, rounds: int, seed: int = 0
) -> dict[str, FittedTarget]:
    """Fit every target in ``arrays`` (``name -> (full rows, labels ms)``)."""
    out: dict[str, FittedTarget] = {}
    for name, (x, y) in arrays.items():
        columns = TARGET_COLUMNS[name]
        res = fit_target(x, y, columns, rounds=rounds, seed=seed)
        blob = booster_to_bytes(res.booster)
        out[name] = FittedTarget(
            name=name,
            blob=blob,
            sha256=sha256(blob),
            columns=tuple(columns),
            samples=len(y),
            mape=_finite_or_none(res.mape),
            mae=_finite_or_none(res.mae),
            holdout=res.holdout,
        )
    return out


def fit_entries(
    entries: tuple[WindowEntry, ...], *, rounds: int, seed: int = 0
) -> dict[str, FittedTarget]:
    """Build the arrays from a window snapshot and fit every target (run in a thread)."""
    return fit_targets(target_arrays(entries), rounds=rounds, seed=seed)


def build_meta(
    version: str, created_at: float, samples: int, fitted: dict[str, FittedTarget]
) -> tuple[ModelMeta, dict[str, bytes]]:
    """The ModelMeta and the blob mapping to store for one version."""
    meta = ModelMeta(
        version=version,
        created_at=created_at,
        samples=samples,
        feature_schema=FEATURE_SCHEMA_VERSION,
        targets={
            f.name: {"sha256": f.sha256, "columns": list(f.columns), "format": BLOB_FORMAT}
            for f in fitted.values()
        },
        metrics={
            f.name: {"mape": f.mape, "mae": f.mae, "holdout": f.holdout, "samples": f.samples}
            for f in fitted.values()
        },
    )
    meta.validate()
    return meta, {f.name: f.blob for f in fitted.values()}
