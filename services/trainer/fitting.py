"""Training data, model fitting and evaluation (pure, CPU-bound, deterministic per seed).

Usable in-process without NATS or Redis (the routing lab)::

    data = TrainingData.from_samples(samples)          # or from_entries / from_arrays
    result = run_cycle(data, current=None, config=FitConfig())   # services/trainer/cycle.py
    model = result.model("v1")                         # a LatencyModel, ready to predict
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import xgboost as xgb

from services.trainer.window import N_FEATURES, WindowEntry, entries_of
from shared.latency_model import (
    BASES,
    LOSSES,
    TRANSFORMS,
    ModelSpec,
    booster_to_bytes,
    conformal_shift,
    evaluate,
    fit_booster,
    predict_booster,
    sha256,
)
from shared.schemas import TrainingSample

OBJECTIVE_CHOICES = ("mean", "quantile", "both")
BLOB_FORMAT = "ubj"
# Pinball levels a relative mean model's level is chosen from (of log1p(ms)): the MAPE-best
# level on the train suite's workloads ran from 0.15 (TPOT of short code answers) to 0.5
# (TPOT of Azure's code trace); docs/benchmarks.md "The point model's loss"
DEFAULT_POINT_LEVELS = (0.15, 0.25, 0.35, 0.5)
SELECTION_ROWS = 4000  # rows each level candidate trains on, at most (a subsample: speed)
# the level candidates are fitted coarser than the model (speed; they only rank the levels):
# this many rounds at the model's learning budget (eta x rounds, eta at most 0.3), and
# features binned into SELECTION_MAX_BIN histogram bins (XGBoost's default is 256). The
# selection then costs about a fifth of a full-size candidate fit (bench_trainer)
SELECTION_ROUNDS = 80
SELECTION_MAX_BIN = 64
SELECTION_SHARE = 0.2  # share of the rows held out to compare the level candidates
SELECTION_SPLITS = ("random", "recent")
MIN_SELECTION_ROWS = 50  # fewer labelled rows: no selection, the middle level is taken
# The quantile models' split-conformal calibration (shared.latency_model.conformal_shift):
# the newest share of a fit's rows calibrates a model fitted on the rest (the rows after a
# window are what the model serves); with fewer calibration rows than this, no shift
DEFAULT_QUANTILE_CALIBRATION = 0.3
MIN_CALIBRATION_ROWS = 50


@dataclass(frozen=True)
class FitConfig:
    """What to fit and how to judge it (the trainer builds it from its settings)."""

    targets: tuple[str, ...] = ("ttft", "tpot")
    objective: str = "mean"  # mean | quantile | both
    quantile_alpha: float = 0.9
    rounds: int = 200
    max_depth: int = 6
    eta: float = 0.05
    nthread: int = 1
    holdout_fraction: float = 0.1
    min_holdout: int = 20  # holdout rows a target needs to be compared with the current model
    margin: float = 0.05  # a candidate may be this much (relative) worse and still promoted
    min_samples: int = 1  # labelled rows every target needs for a cycle to fit at all
    transform: str = "log"  # label transform (shared.latency_model.TRANSFORMS)
    features: str = "v1"  # feature set the models read (shared.features.FEATURE_SETS)
    # the mean models' loss (shared.latency_model.LOSSES) and, for "relative", the pinball
    # levels of the log target one is chosen from at every fit (select_point_model)
    point_loss: str = "relative"
    point_levels: tuple[float, ...] = DEFAULT_POINT_LEVELS
    selection_rows: int = SELECTION_ROWS  # rows the level candidates train on, at most
    selection_rounds: int = SELECTION_ROUNDS  # rounds of a level candidate, at most
    # a relative point model may also be fitted with squared error of the log target when
    # that has the least MAPE on the selection's rows (select_point_model)
    squared_candidate: bool = False
    # which rows score the level candidates: "random" (a seeded share) or "recent" (the
    # newest share; the candidates train on the rows before it: the model predicts what
    # comes after its window). docs/benchmarks.md "Choosing the level on the newest rows"
    selection_split: str = "random"
    # what the TTFT models' trees correct (shared.latency_model.BASES): None, nothing (the
    # trees alone); "estimate", the analytic TTFT estimate (a learned correction of it).
    # docs/benchmarks.md "A learned correction of the analytic
    # estimate"
    ttft_base: str | None = None
    # share of a quantile model's rows (the newest) that calibrate it instead of training it
    # (fit_quantile_model); 0: uncalibrated trees
    quantile_calibration: float = DEFAULT_QUANTILE_CALIBRATION

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVE_CHOICES:
            raise ValueError(f"objective must be one of {OBJECTIVE_CHOICES}")
        if self.transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {TRANSFORMS}")
        if self.point_loss not in LOSSES:
            raise ValueError(f"point_loss must be one of {LOSSES}")
        if self.point_loss == "relative" and self.transform != "log":
            raise ValueError("point_loss relative needs the log transform (target_transform log)")
        if not self.point_levels or any(not 0.0 < a < 1.0 for a in self.point_levels):
            raise ValueError("point_levels must be levels in (0, 1), at least one")
        if self.ttft_base is not None:
            if self.ttft_base not in BASES:
                raise ValueError(f"ttft_base must be one of {BASES} or None")
            if self.transform != "log" or self.features == "v1":
                raise ValueError("ttft_base needs the log transform and features v2 or later")
        if not 0.0 <= self.quantile_calibration < 1.0:
            raise ValueError("quantile_calibration must be in [0, 1)")
        if self.selection_split not in SELECTION_SPLITS:
            raise ValueError(f"selection_split must be one of {SELECTION_SPLITS}")
        if self.selection_rows < 1 or self.selection_rounds < 1:
            raise ValueError("selection_rows and selection_rounds must be positive")
        if not self.targets:
            raise ValueError("at least one target")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in [0, 1)")
        self.specs()  # validates targets and alpha

    def specs(self) -> tuple[ModelSpec, ...]:
        out: list[ModelSpec] = []
        for t in self.targets:
            base = self.ttft_base if t == "ttft" else None
            if self.objective in ("mean", "both"):
                # a relative spec carries the middle level until select_point_model picks
                level = self.middle_level if self.point_loss == "relative" else None
                out.append(
                    ModelSpec(
                        t, transform=self.transform, features=self.features,
                        loss=self.point_loss, level=level, base=base,
                    )
                )  # fmt: skip
            if self.objective in ("quantile", "both"):
                out.append(
                    ModelSpec(
                        t, "quantile", self.quantile_alpha, self.transform, self.features,
                        base=base,
                    )
                )  # fmt: skip
        return tuple(out)

    @property
    def middle_level(self) -> float:
        """The level a relative model takes when none is chosen by comparison."""
        levels = sorted(self.point_levels)
        return levels[len(levels) // 2]

    def xgb_params(self) -> dict[str, object]:
        return {"max_depth": self.max_depth, "eta": self.eta, "nthread": self.nthread}

    def selection_fit(self) -> tuple[int, dict[str, object]]:
        """Rounds and XGBoost parameters of a level candidate (select_point_model): at most
        ``selection_rounds`` rounds, eta raised to keep the model's eta x rounds (raised to
        at most 0.3; never below the model's own), SELECTION_MAX_BIN bins."""
        rounds = min(self.rounds, self.selection_rounds)
        eta = max(self.eta, min(0.3, self.eta * self.rounds / rounds))
        return rounds, {**self.xgb_params(), "eta": eta, "max_bin": SELECTION_MAX_BIN}

    def describe(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "max_depth": self.max_depth,
            "eta": self.eta,
            "objective": self.objective,
            "quantile_alpha": self.quantile_alpha,
            "holdout_fraction": self.holdout_fraction,
            "margin": self.margin,
            "transform": self.transform,
            "features": self.features,
            "point_loss": self.point_loss,
            "point_levels": list(self.point_levels),
            "squared_candidate": self.squared_candidate,
            "level_selection": self.selection_split,
            "ttft_base": self.ttft_base,
            "quantile_calibration": self.quantile_calibration,
        }


@dataclass(frozen=True)
class TrainingData:
    """Feature rows, per-target labels in ms (NaN where not measured) and sample times."""

    rows: np.ndarray  # n x N_FEATURES
    labels: dict[str, np.ndarray]  # target -> n
    ts: np.ndarray  # n, unix seconds

    def __len__(self) -> int:
        return len(self.rows)

    def labelled(self, target: str) -> np.ndarray:
        y = self.labels.get(target)
        return np.zeros(len(self), dtype=bool) if y is None else np.isfinite(y)

    def counts(self) -> dict[str, int]:
        return {t: int(np.isfinite(y).sum()) for t, y in self.labels.items()}

    @classmethod
    def from_entries(cls, entries: Iterable[WindowEntry]) -> TrainingData:
        entries = tuple(entries)
        rows = np.array([e.row for e in entries], dtype=np.float64).reshape(-1, N_FEATURES)
        labels = {
            t: np.array([e.label(t) for e in entries], dtype=np.float64)
            for t in ("ttft", "tpot", "e2e")
        }
        ts = np.array([e.ts for e in entries], dtype=np.float64)
        return cls(rows, labels, ts)

    @classmethod
    def from_samples(cls, samples: Iterable[TrainingSample]) -> TrainingData:
        return cls.from_entries(entries_of(samples))

    @classmethod
    def from_arrays(
        cls,
        rows: np.ndarray,
        labels: dict[str, np.ndarray],
        ts: np.ndarray | None = None,
    ) -> TrainingData:
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, N_FEATURES)
        ts = np.zeros(len(rows)) if ts is None else np.asarray(ts, dtype=np.float64)
        return cls(rows, {t: np.asarray(y, dtype=np.float64) for t, y in labels.items()}, ts)


@dataclass(frozen=True)
class FittedModel:
    spec: ModelSpec
    booster: xgb.Booster
    blob: bytes
    sha256: str
    samples: int  # training rows

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return predict_booster(self.booster, rows, self.spec)


def missing_targets(
    counts: dict[str, int], min_samples: int, targets: tuple[str, ...] = ("ttft", "tpot")
) -> list[str]:
    """Targets that do not yet have ``min_samples`` labelled rows (a version needs all)."""
    return [t for t in targets if counts.get(t, 0) < min_samples]


def refit_gate(
    new_samples: int,
    counts: dict[str, int],
    *,
    min_new_samples: int,
    min_samples: int,
    targets: tuple[str, ...] = ("ttft", "tpot"),
    force: bool = False,
) -> tuple[bool, list[str]]:
    """The trainer's cadence check, shared by the trainer service and the routing lab: a
    cycle is due when ``new_samples`` since the last cycle reach ``min_new_samples`` (unless
    ``force``) and every target has ``min_samples`` labelled rows. Returns ``(due, lacking
    targets)``; ``lacking`` is empty when the new-sample check alone says no."""
    if not force and new_samples < min_new_samples:
        return False, []
    lacking = missing_targets(counts, min_samples, targets)
    return not lacking, lacking


def point_choice(spec: ModelSpec) -> float | str:
    """What a relative point model's selection chose: its pinball level, or ``squared``
    (the lab's learner history and the prediction bench report it)."""
    return spec.level if spec.relative and spec.level is not None else "squared"


def candidate_name(spec: ModelSpec) -> str:
    """A point-model candidate's name in the selection's scores (:func:`point_choice` as
    text)."""
    choice = point_choice(spec)
    return choice if isinstance(choice, str) else f"{choice:g}"


def select_point_model(
    x: np.ndarray,
    y: np.ndarray,
    spec: ModelSpec,
    config: FitConfig,
    *,
    seed: int = 0,
    ts: np.ndarray | None = None,
) -> tuple[ModelSpec, dict[str, float] | None]:
    """The spec of a relative mean model: the pinball level of each of
    ``config.point_levels`` (and squared error of the log target when
    ``config.squared_candidate``) is fitted on at most ``selection_rows`` rows (coarser than
    the model, see :meth:`FitConfig.selection_fit`) and scored by MAPE on a disjoint share of
    them (``SELECTION_SHARE``): with ``selection_split`` "recent" the newest share by ``ts``
    (the candidates train on the newest rows before it), with "random" a seeded share. The
    least MAPE wins (ties: the lower level, squared last). Returns (spec, MAPE per candidate
    name, :func:`candidate_name`); with one candidate, or fewer than ``MIN_SELECTION_ROWS``
    rows, the middle level and None."""
    candidates = [replace(spec, level=a) for a in sorted(config.point_levels)]
    if config.squared_candidate:
        candidates.append(replace(spec, loss="squared", level=None))
    n = len(y)
    if len(candidates) == 1 or n < MIN_SELECTION_ROWS:
        return replace(spec, level=config.middle_level), None
    n_val = max(1, int(n * SELECTION_SHARE))
    if config.selection_split == "recent":
        if ts is None or len(ts) != n:
            raise ValueError("a recent level selection needs every row's time (ts)")
        idx = np.argsort(-ts, kind="stable")  # newest first
    else:
        idx = np.random.default_rng(seed).permutation(n)
    val, fit = idx[:n_val], idx[n_val : n_val + config.selection_rows]
    rounds, params = config.selection_fit()
    mapes: list[float] = []
    for cand in candidates:
        b = fit_booster(x[fit], y[fit], cand, rounds=rounds, params=params, seed=seed)
        mape = evaluate(predict_booster(b, x[val], cand), y[val], cand)["mape"]
        mapes.append(float(mape))  # type: ignore[arg-type]
    best = min(range(len(candidates)), key=lambda i: (mapes[i], i))  # ties: the first
    return candidates[best], {candidate_name(c): m for c, m in zip(candidates, mapes, strict=True)}


def fit_quantile_model(
    x: np.ndarray,
    y: np.ndarray,
    ts: np.ndarray,
    spec: ModelSpec,
    config: FitConfig,
    *,
    seed: int = 0,
) -> tuple[ModelSpec, xgb.Booster, int]:
    """A quantile model with its split-conformal shift: the newest ``quantile_calibration``
    share of the rows (by ``ts``; ties keep row order) calibrates a booster fitted on the
    rest (:func:`shared.latency_model.conformal_shift`). Returns (spec with the shift,
    booster, rows trained on); without calibration (share 0, or fewer than
    ``MIN_CALIBRATION_ROWS`` calibration rows) the booster is fitted on every row, no shift."""
    n_cal = int(len(y) * config.quantile_calibration)
    rounds, params = config.rounds, config.xgb_params()
    if n_cal < MIN_CALIBRATION_ROWS:
        return spec, fit_booster(x, y, spec, rounds=rounds, params=params, seed=seed), len(y)
    order = np.argsort(ts, kind="stable")  # oldest first
    fit, cal = order[: len(y) - n_cal], order[len(y) - n_cal :]
    booster = fit_booster(x[fit], y[fit], spec, rounds=rounds, params=params, seed=seed)
    shift = conformal_shift(booster, x[cal], y[cal], spec)
    return replace(spec, shift=shift), booster, len(fit)


def fit_models(
    data: TrainingData, train: np.ndarray, config: FitConfig, *, seed: int = 0
) -> dict[str, FittedModel]:
    """Fit every spec of ``config`` on the labelled rows selected by the ``train`` mask (a
    relative mean model as :func:`select_point_model` chooses on those rows, a quantile
    model calibrated by :func:`fit_quantile_model`)."""
    out: dict[str, FittedModel] = {}
    for spec in config.specs():
        mask = train & data.labelled(spec.target)
        x, y = data.rows[mask], data.labels[spec.target][mask]
        n = int(mask.sum())
        if spec.objective == "quantile":
            spec, booster, n = fit_quantile_model(x, y, data.ts[mask], spec, config, seed=seed)
        else:
            if spec.relative:
                ts = data.ts[mask]
                spec = select_point_model(x, y, spec, config, seed=seed, ts=ts)[0]
            booster = fit_booster(
                x, y, spec, rounds=config.rounds, params=config.xgb_params(), seed=seed
            )
        blob = booster_to_bytes(booster)
        out[spec.key] = FittedModel(spec, booster, blob, sha256(blob), n)
    return out


def evaluate_on(
    predict: dict[str, object], data: TrainingData, holdout: np.ndarray, specs: Iterable[ModelSpec]
) -> dict[str, dict]:
    """Metrics per key of ``predict`` (key -> callable(rows) -> ms) on the labelled holdout."""
    out: dict[str, dict] = {}
    for spec in specs:
        fn = predict.get(spec.key)
        if fn is None:
            continue
        mask = holdout & data.labelled(spec.target)
        y = data.labels[spec.target][mask]
        pred = fn(data.rows[mask]) if len(y) else np.zeros(0)  # type: ignore[operator]
        out[spec.key] = evaluate(np.asarray(pred, dtype=np.float64), y, spec)
    return out
