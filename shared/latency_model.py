"""Latency models: XGBoost regressors for TTFT and TPOT over the shared feature schema.

Pure (no I/O): fitting, evaluation, prediction and (de)serialisation to XGBoost's own UBJ
format with a SHA-256 checksum. The trainer fits, the predictor predicts, the routing lab
does both, all through this module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import xgboost as xgb

from shared.features import FEATURE_SCHEMA_VERSION, FEATURES, TPOT_COLUMNS, TTFT_COLUMNS
from shared.schemas import ModelMeta, SchemaError

TARGET_COLUMNS: dict[str, tuple[int, ...]] = {"ttft": TTFT_COLUMNS, "tpot": TPOT_COLUMNS}

# llm-d's predictor defaults: 200 trees, depth 6, learning rate 0.05, raw-millisecond targets.
DEFAULT_PARAMS: dict[str, object] = {
    "objective": "reg:squarederror",
    "max_depth": 6,
    "eta": 0.05,
    "nthread": 1,
    "tree_method": "hist",
}
DEFAULT_ROUNDS = 200


@dataclass
class FitResult:
    booster: xgb.Booster
    mape: float
    mae: float
    holdout: int


def fit_target(
    x: np.ndarray,
    y: np.ndarray,
    columns: tuple[int, ...],
    *,
    rounds: int = DEFAULT_ROUNDS,
    params: dict[str, object] | None = None,
    holdout_fraction: float = 0.1,
    seed: int = 0,
) -> FitResult:
    """Fit one target on rows ``x`` (full feature rows) and labels ``y`` (ms).

    A ``holdout_fraction`` slice (chosen by ``seed``) is kept out of training and used for
    MAPE/MAE; the model is then refit on all rows so no sample is wasted.
    """
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("fit_target needs equally many rows and labels, at least one")
    p = dict(DEFAULT_PARAMS, **(params or {}), seed=seed)
    cols = list(columns)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(x))
    n_hold = int(len(x) * holdout_fraction) if len(x) >= 20 else 0
    hold, train = idx[:n_hold], idx[n_hold:]
    xs = x[:, cols]
    mape = mae = float("nan")
    if n_hold:
        b = xgb.train(p, xgb.DMatrix(xs[train], label=y[train]), num_boost_round=rounds)
        pred = b.inplace_predict(xs[hold])
        err = np.abs(pred - y[hold])
        mae = float(err.mean())
        mape = float((err / np.maximum(np.abs(y[hold]), 1e-3)).mean())
    booster = xgb.train(p, xgb.DMatrix(xs, label=y), num_boost_round=rounds)
    return FitResult(booster=booster, mape=mape, mae=mae, holdout=int(n_hold))


def booster_to_bytes(booster: xgb.Booster) -> bytes:
    return bytes(booster.save_raw(raw_format="ubj"))


def booster_from_bytes(data: bytes) -> xgb.Booster:
    b = xgb.Booster(params={"nthread": 1})
    b.load_model(bytearray(data))
    return b


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_target_meta(version: str, name: str, info: object) -> None:
    """Metadata of one target must name a known target, UBJ format, a checksum and columns
    that index the feature row; anything else is a SchemaError("bad_meta")."""
    ok = (
        name in TARGET_COLUMNS
        and isinstance(info, dict)
        and info.get("format", "ubj") == "ubj"
        and isinstance(info.get("sha256"), str)
        and isinstance(info.get("columns"), list)
        and len(info["columns"]) > 0
        and all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(FEATURES)
            for c in info["columns"]
        )
    )
    if not ok:
        raise SchemaError(f"model {version}: bad metadata for target {name!r}", "bad_meta")


@dataclass
class LatencyModel:
    """A loaded model version: one booster per target."""

    version: str
    boosters: dict[str, xgb.Booster]
    meta: ModelMeta | None = None
    columns: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(TARGET_COLUMNS))

    def predict(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted milliseconds per target for full feature rows (n x FEATURES)."""
        out = {}
        for name, booster in self.boosters.items():
            pred = booster.inplace_predict(rows[:, list(self.columns[name])])
            out[name] = np.maximum(np.asarray(pred, dtype=np.float64), 0.0)
        return out

    @classmethod
    def from_blobs(cls, meta: ModelMeta, blobs: dict[str, bytes]) -> LatencyModel:
        """Verify checksums and the feature schema, then load. Raises SchemaError."""
        if meta.feature_schema != FEATURE_SCHEMA_VERSION:
            raise SchemaError(
                f"model {meta.version}: feature schema {meta.feature_schema} "
                f"!= {FEATURE_SCHEMA_VERSION}",
                "feature_schema",
            )
        boosters: dict[str, xgb.Booster] = {}
        columns: dict[str, tuple[int, ...]] = {}
        if not meta.targets:
            raise SchemaError(f"model {meta.version}: no targets", "bad_meta")
        for name, info in meta.targets.items():
            _check_target_meta(meta.version, name, info)
            data = blobs.get(name)
            if data is None:
                raise SchemaError(f"model {meta.version}: blob {name!r} missing", "missing_blob")
            if sha256(data) != info.get("sha256"):
                raise SchemaError(f"model {meta.version}: {name} checksum mismatch", "checksum")
            try:
                boosters[name] = booster_from_bytes(data)
            except xgb.core.XGBoostError as e:
                raise SchemaError(f"model {meta.version}: {name}: {e}", "corrupt") from e
            columns[name] = tuple(info["columns"])
        return cls(version=meta.version, boosters=boosters, meta=meta, columns=columns)
