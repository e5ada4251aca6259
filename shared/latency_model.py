"""Latency models: XGBoost regressors for TTFT, TPOT (and E2E) over the shared feature schema.

Pure (no I/O): fitting, evaluation, prediction and (de)serialisation to XGBoost's own UBJ
format with a SHA-256 checksum. The trainer fits, the predictor predicts, the routing lab
does both, all through this module.

A model version holds one booster per *model key*. A key names a target (``ttft``, ``tpot``,
``e2e``) and an objective: the plain target name is the mean model (squared error), and
``<target>_p<NN>`` is the quantile model for quantile ``NN/100`` (``ttft_p90``). The
metadata of each key records its objective and quantile, so readers never parse names for
anything but the target.

The mean (point) model has a *loss*: ``squared`` (squared error, of log1p(ms) with the log
transform: the geometric mean) or ``relative``: the pinball loss at a low ``level`` of the
log target, chosen per fit (services/trainer/fitting.py) as the level whose model has the
least MAPE on rows it did not train on. Latencies given the features are right-skewed (a
long prefill arriving beside a decode slows it many-fold, most requests see nothing of the
kind), and the prediction that minimises the mean *relative* error is the 1/y-weighted
median, below the median: walk-forward on the routing lab's Mooncake trace (`bench
prediction-bound`) the squared loss gave TTFT / TPOT MAPE 24.9% / 50.4% and the chosen
levels (0.35 / 0.25) 16.1% / 33.2% (docs/benchmarks.md "The point model's loss"). The key stays the target's plain name: a relative model is served
wherever a mean model is.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

import numpy as np
import xgboost as xgb

from shared.features import (
    ESTIMATE_COLUMN,
    FEATURE_SETS,
    FEATURES,
    SUPPORTED_MODEL_SCHEMAS,
    TPOT_COLUMNS,
    TTFT_COLUMNS,
)
from shared.schemas import ModelMeta, SchemaError

# Target -> feature columns. E2E (the "TTFT" of non-streaming mode upstream) uses TTFT's.
TARGET_COLUMNS: dict[str, tuple[int, ...]] = {
    "ttft": TTFT_COLUMNS,
    "tpot": TPOT_COLUMNS,
    "e2e": TTFT_COLUMNS,
}
OBJECTIVES = ("mean", "quantile")
# Loss of a mean (point) model: squared error, or relative (pinball at a chosen level of the
# log target: the least mean relative error; see the module docstring)
LOSSES = ("squared", "relative")
# Label transform: "log" fits log1p(ms) and predicts expm1(raw) (relative errors count
# alike for 50 ms and 50 s, which is what MAPE and SLO checks need); "none" fits raw
# milliseconds, as llm-d's predictor does.
TRANSFORMS = ("none", "log")
MAPE_FLOOR_MS = 1.0  # labels below 1 ms count as 1 ms in MAPE (no division blow-up)
# What a model's trees add to (its base): None, the trees alone from XGBoost's base score; or
# "estimate", the gateway's analytic TTFT estimate (feature estimate_ms): the booster's base
# margin is log1p(estimate_ms) of each row and the trees fit the log ratio of the latency to
# the estimate (a learned correction that extrapolates with the estimate, where trees alone
# stay within the latencies they were fitted on). TTFT models on the log transform only.
BASES = ("estimate",)
# A quantile model's conformal shift: a constant added to the booster's output in the
# target's own space (log1p(ms) on the log transform: a scale of 1 + ms) before the
# transform is undone, chosen by split-conformal calibration on rows the trees did not train
# on (services/trainer/fitting.py) so that the share of labels at or below the prediction is
# the model's quantile level. Fitted quantile trees under-cover what comes after their
# window (p90 coverage 0.49-0.79 on the validation workloads, docs/benchmarks.md).

# llm-d's predictor defaults: 200 trees, depth 6, learning rate 0.05, raw-millisecond targets.
DEFAULT_PARAMS: dict[str, object] = {
    "objective": "reg:squarederror",
    "max_depth": 6,
    "eta": 0.05,
    "nthread": 1,
    "tree_method": "hist",
}
DEFAULT_ROUNDS = 200

_KEY = re.compile(r"^(?P<target>[a-z0-9]+?)(?:_p(?P<q>\d{1,2}))?$")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What one booster of a version predicts: a target under an objective."""

    target: str
    objective: str = "mean"  # mean | quantile
    alpha: float = 0.9  # quantile level (quantile objective only)
    transform: str = "none"  # none | log (see TRANSFORMS)
    features: str = "v1"  # the feature set it reads (shared.features.FEATURE_SETS)
    loss: str = "squared"  # a mean model's loss (LOSSES); quantile models keep "squared"
    level: float | None = None  # the pinball level of a relative mean model (log target)
    base: str | None = None  # what the trees correct (BASES; None: nothing)
    shift: float | None = None  # a quantile model's conformal shift (see above; None: none)

    def __post_init__(self) -> None:
        if self.features not in FEATURE_SETS:
            raise ValueError(f"unknown feature set {self.features!r}")
        if self.target not in TARGET_COLUMNS:
            raise ValueError(f"unknown target {self.target!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}")
        if self.transform not in TRANSFORMS:
            raise ValueError(f"unknown transform {self.transform!r}")
        if self.objective == "quantile" and not 0.0 < self.alpha < 1.0:
            raise ValueError("quantile alpha must be in (0, 1)")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}")
        if self.objective != "mean" and self.loss != "squared":
            raise ValueError("only a mean model has a loss")
        if self.relative:
            if self.transform != "log":
                raise ValueError("a relative loss needs the log transform")
            if self.level is None or not 0.0 < self.level < 1.0:
                raise ValueError("a relative model's level must be in (0, 1)")
        elif self.level is not None:
            raise ValueError("only a relative model has a level")
        if self.base is not None:
            if self.base not in BASES:
                raise ValueError(f"unknown base {self.base!r} (one of {BASES})")
            if self.target != "ttft" or self.transform != "log":
                raise ValueError("an estimate base needs a TTFT model on the log transform")
        if self.shift is not None:
            if self.objective != "quantile":
                raise ValueError("only a quantile model has a conformal shift")
            if not math.isfinite(self.shift):
                raise ValueError("a conformal shift must be finite")

    @property
    def relative(self) -> bool:
        """A mean model fitted for relative error (pinball at ``level`` of the log target)."""
        return self.objective == "mean" and self.loss == "relative"

    @property
    def key(self) -> str:
        if self.objective == "mean":
            return self.target
        return f"{self.target}_p{round(self.alpha * 100):02d}"

    @property
    def columns(self) -> tuple[int, ...]:
        return FEATURE_SETS[self.features][self.target]

    @property
    def primary_metric(self) -> str:
        """The metric candidates are compared on: MAPE for mean, pinball loss for quantile."""
        return "mape" if self.objective == "mean" else "pinball"

    def params(self) -> dict[str, object]:
        # with a base the margin replaces the base score: 0, so the trees alone are the
        # booster's output without a margin (every serving path adds the margin the same way)
        base = {"base_score": 0.0} if self.base else {}
        if self.relative:
            return {"objective": "reg:quantileerror", "quantile_alpha": self.level, **base}
        if self.objective == "mean":
            return {"objective": "reg:squarederror", **base}
        return {"objective": "reg:quantileerror", "quantile_alpha": self.alpha, **base}

    def margin(self, rows: np.ndarray) -> np.ndarray | None:
        """The base margin of full feature rows (n x FEATURES), float64, or None. Read from
        the estimate as float32, as XGBoost reads every feature: float32 and float64 rows
        (the binary and JSON wire formats, one request or a batch) get the same margin."""
        if self.base is None:
            return None
        est = np.asarray(rows)[:, ESTIMATE_COLUMN].astype(np.float32).astype(np.float64)
        return np.log1p(np.maximum(est, 0.0))

    @property
    def log(self) -> bool:
        return self.transform == "log"

    def describe(self) -> dict[str, object]:
        d: dict[str, object] = {"target": self.target, "objective": self.objective}
        if self.objective == "quantile":
            d["quantile_alpha"] = self.alpha
        if self.transform != "none":
            d["transform"] = self.transform
        if self.features != "v1":
            d["features"] = self.features
        if self.relative:
            d["loss"] = self.loss
            d["level"] = self.level
        if self.base is not None:
            d["base"] = self.base
        if self.shift is not None:
            d["shift"] = self.shift
        return d


def spec_from_info(key: str, info: dict) -> ModelSpec:
    """The spec a version's metadata describes for ``key`` (ValueError if inconsistent)."""
    m = _KEY.match(key)
    if not m:
        raise ValueError(f"bad model key {key!r}")
    target = info.get("target", m.group("target"))
    objective = info.get("objective", "quantile" if m.group("q") else "mean")
    alpha = info.get("quantile_alpha", int(m.group("q")) / 100 if m.group("q") else 0.9)
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise ValueError("quantile_alpha must be a number")
    transform = info.get("transform", "none")  # versions before transforms: raw ms
    features = info.get("features", "v1")  # versions before feature sets: llm-d's columns
    loss = info.get("loss", "squared")  # versions before losses: squared error
    level = info.get("level")
    base = info.get("base")  # versions before bases: the trees alone
    if base is not None and not isinstance(base, str):
        raise ValueError("base must be a name")
    shift = info.get("shift")  # versions before calibration: none
    if shift is not None and (not isinstance(shift, int | float) or isinstance(shift, bool)):
        raise ValueError("shift must be a number")
    if level is not None and (not isinstance(level, int | float) or isinstance(level, bool)):
        raise ValueError("level must be a number")
    spec = ModelSpec(
        str(target),
        str(objective),
        float(alpha),
        str(transform),
        str(features),
        str(loss),
        None if level is None else float(level),
        base,
        None if shift is None else float(shift),
    )
    if spec.key != key:
        raise ValueError(f"model key {key!r} does not match its spec ({spec.key!r})")
    return spec


# --------------------------------------------------------------------------------------
# Fitting and evaluation
# --------------------------------------------------------------------------------------
def fit_booster(
    x: np.ndarray,
    y: np.ndarray,
    spec: ModelSpec,
    *,
    rounds: int = DEFAULT_ROUNDS,
    params: dict[str, object] | None = None,
    seed: int = 0,
) -> xgb.Booster:
    """Fit one booster on full feature rows ``x`` (n x FEATURES) and labels ``y`` (ms)."""
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("fit_booster needs equally many rows and labels, at least one")
    p = {**DEFAULT_PARAMS, **(params or {}), **spec.params(), "seed": seed}
    xs = np.ascontiguousarray(x[:, list(spec.columns)])
    label = np.log1p(np.maximum(y, 0.0)) if spec.log else y
    dm = xgb.DMatrix(xs, label=label, base_margin=spec.margin(x))
    return xgb.train(p, dm, num_boost_round=rounds)


def to_ms(raw: np.ndarray, spec: ModelSpec, rows: np.ndarray) -> np.ndarray:
    """A booster's output without a margin (float64, modified in place) for full feature
    ``rows`` as milliseconds >= 0: plus the spec's base margin and conformal shift, then its
    transform undone. Every serving path (XGBoost, the C API, the tree forest) ends here, so
    all agree."""
    margin = spec.margin(rows)
    if margin is not None:
        raw += margin
    if spec.shift is not None:
        raw += spec.shift
    if spec.log:
        np.expm1(raw, out=raw)
    return np.maximum(raw, 0.0, out=raw)


def predict_booster(
    booster: xgb.Booster,
    x: np.ndarray,
    spec: ModelSpec,
    columns: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Milliseconds ``booster`` (fitted for ``spec``) predicts for full feature rows ``x``
    (its trees read ``columns``, default the spec's: a version's metadata names them)."""
    cols = spec.columns if columns is None else columns
    pred = booster.inplace_predict(np.ascontiguousarray(x[:, list(cols)]))
    return to_ms(np.array(pred, dtype=np.float64), spec, x)


def conformal_shift(booster: xgb.Booster, x: np.ndarray, y: np.ndarray, spec: ModelSpec) -> float:
    """The split-conformal shift of a quantile model (``spec`` without one) from calibration
    rows ``x`` (n x FEATURES) and labels ``y`` (ms) its booster did not train on: the scores
    are each label minus the booster's output in the target's space (log1p(ms) on the log
    transform, base margin included), and the shift is their ceil((n + 1) x alpha)-th
    smallest (the largest when that is beyond n): with the shift added, at least alpha of
    exchangeable future labels fall at or below the prediction (conformalized quantile
    regression, one-sided). Negative when the trees over-cover."""
    if spec.objective != "quantile":
        raise ValueError("only a quantile model is calibrated")
    if len(x) != len(y) or len(y) == 0:
        raise ValueError("conformal_shift needs equally many rows and labels, at least one")
    out = booster.inplace_predict(np.ascontiguousarray(x[:, list(spec.columns)]))
    out = np.asarray(out, dtype=np.float64)
    margin = spec.margin(x)
    if margin is not None:
        out += margin
    label = np.log1p(np.maximum(y, 0.0)) if spec.log else np.asarray(y, dtype=np.float64)
    scores = np.sort(label - out)
    k = min(len(scores), math.ceil((len(scores) + 1) * spec.alpha))
    return float(scores[k - 1])


def evaluate(pred: np.ndarray, y: np.ndarray, spec: ModelSpec) -> dict[str, float | int | None]:
    """Holdout metrics: MAPE, MAE, n; for quantile models also coverage (share of labels at
    or below the prediction) and pinball loss. Metrics are None when there are no rows."""
    n = len(y)
    out: dict[str, float | int | None] = {"n": n, "mape": None, "mae": None}
    if spec.objective == "quantile":
        out.update(coverage=None, pinball=None)
    if n == 0:
        return out
    err = pred - y
    out["mae"] = float(np.abs(err).mean())
    out["mape"] = float((np.abs(err) / np.maximum(np.abs(y), MAPE_FLOOR_MS)).mean())
    if spec.objective == "quantile":
        a = spec.alpha
        diff = y - pred
        out["coverage"] = float((y <= pred).mean())
        out["pinball"] = float(np.maximum(a * diff, (a - 1.0) * diff).mean())
    return out


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
    """Quick one-shot fit of a mean model on ``columns`` with a random holdout for MAPE/MAE,
    then a refit on all rows (kept for simple callers; the trainer uses the cycle in
    services/trainer/cycle.py, which compares against the current model)."""
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("fit_target needs equally many rows and labels, at least one")
    target = next((t for t, c in TARGET_COLUMNS.items() if c == tuple(columns)), "ttft")
    spec = ModelSpec(target)
    if spec.columns != tuple(columns):
        raise ValueError("columns must be one target's column list")
    idx = np.random.default_rng(seed).permutation(len(x))
    n_hold = int(len(x) * holdout_fraction) if len(x) >= 20 else 0
    hold, train = idx[:n_hold], idx[n_hold:]
    mape = mae = float("nan")
    if n_hold:
        b = fit_booster(x[train], y[train], spec, rounds=rounds, params=params, seed=seed)
        m = evaluate(predict_booster(b, x[hold], spec), y[hold], spec)
        mape, mae = float(m["mape"]), float(m["mae"])  # type: ignore[arg-type]
    booster = fit_booster(x, y, spec, rounds=rounds, params=params, seed=seed)
    return FitResult(booster=booster, mape=mape, mae=mae, holdout=int(n_hold))


# --------------------------------------------------------------------------------------
# Blobs
# --------------------------------------------------------------------------------------
def booster_to_bytes(booster: xgb.Booster) -> bytes:
    return bytes(booster.save_raw(raw_format="ubj"))


def booster_from_bytes(data: bytes) -> xgb.Booster:
    b = xgb.Booster(params={"nthread": 1})
    b.load_model(bytearray(data))
    return b


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_target_meta(version: str, name: str, info: object) -> ModelSpec:
    """Metadata of one model key must name a known target and objective, UBJ format, a
    checksum and columns that index the feature row; else SchemaError("bad_meta")."""
    ok = (
        isinstance(info, dict)
        and info.get("format", "ubj") == "ubj"
        and isinstance(info.get("sha256"), str)
        and isinstance(info.get("columns"), list)
        and len(info["columns"]) > 0
        and all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(FEATURES)
            for c in info["columns"]
        )
    )
    if ok:
        try:
            return spec_from_info(name, info)  # type: ignore[arg-type]
        except ValueError:
            pass
    raise SchemaError(f"model {version}: bad metadata for target {name!r}", "bad_meta")


@dataclass
class LatencyModel:
    """A loaded model version: one booster per model key (``ttft``, ``tpot``, ``ttft_p90``...)."""

    version: str
    boosters: dict[str, xgb.Booster]
    meta: ModelMeta | None = None
    columns: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(TARGET_COLUMNS))
    specs: dict[str, ModelSpec] = field(default_factory=dict)

    def spec(self, key: str) -> ModelSpec:
        s = self.specs.get(key)
        return s if s is not None else spec_from_info(key, {})

    def key_for(self, target: str, prefer: str = "mean") -> str | None:
        """The key serving ``target``: the preferred objective if present, else any."""
        keys = [k for k in self.boosters if self.spec(k).target == target]
        preferred = [k for k in keys if self.spec(k).objective == prefer]
        return (preferred or keys or [None])[0]

    def predict_key(self, key: str, rows: np.ndarray) -> np.ndarray:
        return predict_booster(self.boosters[key], rows, self.spec(key), self.columns[key])

    def predict(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted milliseconds per model key for full feature rows (n x FEATURES)."""
        return {key: self.predict_key(key, rows) for key in self.boosters}

    @classmethod
    def from_boosters(
        cls, version: str, boosters: dict[str, xgb.Booster], specs: dict[str, ModelSpec]
    ) -> LatencyModel:
        """An in-process model (the routing lab and tests), no metadata or blobs."""
        return cls(
            version=version,
            boosters=dict(boosters),
            columns={k: specs[k].columns for k in boosters},
            specs=dict(specs),
        )

    @classmethod
    def from_blobs(cls, meta: ModelMeta, blobs: dict[str, bytes]) -> LatencyModel:
        """Verify checksums and the feature schema, then load. Raises SchemaError."""
        if meta.feature_schema not in SUPPORTED_MODEL_SCHEMAS:
            raise SchemaError(
                f"model {meta.version}: feature schema {meta.feature_schema} "
                f"not in {SUPPORTED_MODEL_SCHEMAS}",
                "feature_schema",
            )
        boosters: dict[str, xgb.Booster] = {}
        columns: dict[str, tuple[int, ...]] = {}
        specs: dict[str, ModelSpec] = {}
        if not meta.targets:
            raise SchemaError(f"model {meta.version}: no targets", "bad_meta")
        for name, info in meta.targets.items():
            specs[name] = _check_target_meta(meta.version, name, info)
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
        return cls(version=meta.version, boosters=boosters, meta=meta, columns=columns, specs=specs)
