"""Trainer settings (env prefix ``HEADROOM_TRAINER_``; connection settings are common)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.trainer.fitting import (
    DEFAULT_POINT_LEVELS,
    DEFAULT_QUANTILE_CALIBRATION,
    MIN_CALIBRATION_ROWS,
    FitConfig,
)
from services.trainer.strata import DEFAULT_STRATA, Strata
from services.trainer.validation import Limits
from services.trainer.window import SampleWindow
from shared.drift import ShiftDetector
from shared.settings import CommonSettings


class TrainerSettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_TRAINER_", extra="ignore", populate_by_name=True
    )

    admin_host: str = Field("127.0.0.1", description="Bind address of /health, /metrics, /flush")
    admin_port: int = Field(9104, ge=0, le=65535, description="Admin port (0 = any free port)")
    interval_s: float = Field(10.0, gt=0, description="Seconds between refit checks")
    min_samples: int = Field(100, ge=1, description="Labelled samples a target needs to fit")
    min_new_samples: int = Field(50, ge=0, description="New samples needed since the last fit")
    window_size: int = Field(20000, ge=1, description="Samples kept in the window in total")
    bucket_cap: int = Field(500, ge=1, description="Samples kept per stratum bucket (oldest out)")
    strata: dict[str, list[float]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_STRATA.items()},
        description="Window strata as JSON {feature: [ascending bin edges]}; default: queue "
        "depth, KV-cache use (5% steps), prefix-score quartile, prompt length",
    )
    max_age_s: float = Field(
        0.0, ge=0, description="Forget samples older than this many seconds (0 = never)"
    )
    dedup_size: int = Field(50000, ge=1, description="Recent request ids remembered for dedup")
    keep_versions: int = Field(5, ge=1, description="Model versions kept in Redis")
    republish_check_s: float = Field(
        2.0,
        gt=0,
        description="Seconds between checks that Redis still holds the current model; one "
        "that lost it (restarted empty) gets it written back",
    )
    fetch_batch: int = Field(256, ge=1, description="Messages per JetStream fetch")
    fetch_timeout_s: float = Field(1.0, gt=0, description="Max wait of one JetStream fetch")
    ack_wait_s: float = Field(
        30.0, gt=0, description="Seconds before JetStream redelivers an unacknowledged sample"
    )
    objective: Literal["mean", "quantile", "both"] = Field(
        "mean",
        description="Model objective: mean (the point prediction, fitted with point_loss), "
        "quantile, or both",
    )
    quantile_alpha: float = Field(0.9, gt=0, lt=1, description="Quantile of quantile models")
    target_transform: Literal["none", "log"] = Field(
        "log",
        description="Label transform: log fits log(1 + ms), so relative errors weigh alike at "
        "every latency (llm-d fits raw ms: none)",
    )
    feature_set: Literal["v1", "v2", "v3"] = Field(
        "v2",
        description="Feature columns the models read: v1 = llm-d's eleven, v2 = those plus "
        "the gateway's own estimates (backlog, cost-model prefill, protected decodes, decode "
        "batch, queue), v3 = v2 plus the pod's hardware class (shared/features.py)",
    )
    point_loss: Literal["squared", "relative"] = Field(
        "relative",
        description="Loss of the mean (point) models: relative, the pinball loss at the "
        "level of point_levels whose model has the least MAPE on rows held out at each fit "
        "(latencies are right-skewed: the least relative error lies below the median; needs "
        "target_transform log), or squared error of the transformed label (with log, a geometric "
        "mean; llm-d's loss on raw ms)",
    )
    point_levels: list[float] = Field(
        default_factory=lambda: list(DEFAULT_POINT_LEVELS),
        description="Pinball levels of the log target a relative point model is chosen from "
        "(JSON list; default [0.15, 0.25, 0.35, 0.5]; each candidate trains on at most 4,000 "
        "rows)",
    )
    point_squared_candidate: bool = Field(
        False,
        description="With point_loss relative, squared error of the log target competes with "
        "the pinball levels at each fit: the least MAPE on the held-out rows wins (better on "
        "the train suite's Azure half, worse on the validation set: docs/benchmarks.md)",
    )
    level_selection: Literal["random", "recent"] = Field(
        "random",
        description="Rows the point levels are compared on at each fit: random (a seeded "
        "fifth of the window) or recent (the newest fifth; the candidates train on the rows "
        "before it, as the model will predict requests that come after its window; better "
        "on the train suite, worse on the validation set: docs/benchmarks.md)",
    )
    ttft_base: Literal["none", "estimate"] = Field(
        "none",
        description="What the TTFT models' trees correct: none (the trees alone), or "
        "estimate: the gateway's analytic TTFT estimate (feature estimate_ms) is the "
        "booster's base margin and the trees fit the log ratio of TTFT to it, so a "
        "prediction follows the estimate beyond the latencies the window holds (needs "
        "target_transform log and feature_set v2 or v3)",
    )
    quantile_calibration: float = Field(
        DEFAULT_QUANTILE_CALIBRATION,
        ge=0,
        lt=1,
        description="Share of a quantile model's rows, the newest, held out of its fit to "
        "calibrate it (split-conformal: a constant shift of its output, log(1 + ms) by default, so "
        "that the quantile's share of those rows falls at or below it; 0: uncalibrated trees). "
        f"Needs at least {MIN_CALIBRATION_ROWS} such rows",
    )
    e2e_model: bool = Field(
        False, description="Also fit an end-to-end latency model (non-streaming mode)"
    )
    rounds: int = Field(200, ge=1, description="XGBoost boosting rounds per model")
    max_depth: int = Field(6, ge=1, le=16, description="XGBoost tree depth")
    eta: float = Field(0.05, gt=0, le=1, description="XGBoost learning rate")
    fit_threads: int = Field(1, ge=1, description="XGBoost threads per fit")
    holdout_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of the window held out to evaluate each candidate"
    )
    min_holdout: int = Field(
        20, ge=1, description="Unseen holdout rows a target needs to be compared"
    )
    promotion_margin: float = Field(
        0.05,
        ge=0,
        description="A candidate this much (relative) worse than current is still promoted",
    )
    replay_on_start: bool = Field(
        True, description="Rebuild the window from already-delivered stream samples at start"
    )
    replay_max: int = Field(
        200000, ge=0, description="Most stream messages read back when rebuilding the window"
    )
    replay_budget_s: float = Field(60.0, gt=0, description="Time limit of the replay at start")
    warm_start_file: str = Field(
        "", description="Model file (headroom model export) imported when Redis has no model"
    )
    drift_window: int = Field(
        1000, ge=1, description="Recent predictions in the live rolling-MAPE gauge"
    )
    shift_react: bool = Field(
        True,
        description="React to a workload shift seen in live TTFT error: forget the samples "
        "before it and refit on the recent window at once (no operator flush)",
    )
    shift_window: int = Field(
        200, ge=2, description="Recent predictions whose TTFT MAPE is watched for a shift"
    )
    shift_ratio: float = Field(
        1.5,
        gt=1,
        description="A shift: recent TTFT MAPE above this many times its long-run level",
    )
    shift_statistic: Literal["mean", "median"] = Field(
        "mean",
        description="Level of the watched window's TTFT errors: mean, or median (a burst's "
        "few huge errors do not move it)",
    )
    shift_refits: int = Field(
        4,
        ge=0,
        description="After a detected shift, refit again after every shift_window new "
        "samples, this many times (fast traffic would otherwise wait for interval_s)",
    )
    max_latency_ms: float = Field(
        3_600_000.0, gt=0, description="Samples with a longer TTFT or E2E are rejected"
    )
    max_tpot_ms: float = Field(
        60_000.0, gt=0, description="Samples with a longer TPOT are rejected"
    )
    seed: int = Field(0, description="Seed of the holdout split and XGBoost")

    @model_validator(mode="after")
    def _fit_config_is_valid(self) -> TrainerSettings:
        self.fit_config()  # FitConfig checks its own fields (point loss, levels, transform)
        return self

    @field_validator("strata")
    @classmethod
    def _valid_strata(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        Strata(v)  # raises ValueError on unknown features or unsorted edges
        return v

    def fit_config(self) -> FitConfig:
        targets = ("ttft", "tpot", "e2e") if self.e2e_model else ("ttft", "tpot")
        return FitConfig(
            targets=targets,
            objective=self.objective,
            quantile_alpha=self.quantile_alpha,
            rounds=self.rounds,
            max_depth=self.max_depth,
            eta=self.eta,
            nthread=self.fit_threads,
            holdout_fraction=self.holdout_fraction,
            min_holdout=self.min_holdout,
            margin=self.promotion_margin,
            min_samples=self.min_samples,
            transform=self.target_transform,
            features=self.feature_set,
            point_loss=self.point_loss,
            point_levels=tuple(self.point_levels),
            selection_split=self.level_selection,
            squared_candidate=self.point_squared_candidate,
            ttft_base=None if self.ttft_base == "none" else self.ttft_base,
            quantile_calibration=self.quantile_calibration,
        )

    def shift_detector(self) -> ShiftDetector | None:
        """The live-error shift detector these settings configure (None: no reaction)."""
        if not self.shift_react:
            return None
        return ShiftDetector(self.shift_window, self.shift_ratio, statistic=self.shift_statistic)

    def limits(self) -> Limits:
        return Limits(max_latency_ms=self.max_latency_ms, max_tpot_ms=self.max_tpot_ms)

    def sample_window(self) -> SampleWindow:
        """An empty training window as these settings size it (the service and the lab)."""
        return SampleWindow(
            self.window_size,
            self.dedup_size,
            strata=Strata(self.strata),
            bucket_cap=self.bucket_cap,
            max_age_s=self.max_age_s or None,
        )
