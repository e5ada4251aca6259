"""Online learning in the lab: the live trainer's window and training cycle, and the live
predictor's inference, in process and in virtual time.

Samples go through the trainer's own code path (``TrainingSample.validate``, the plausibility
``check``, ``SampleWindow.offer``); every ``interval_s`` of virtual time a refit check runs
the way ``TrainerService.fit_now`` does (``refit_gate``: skip under ``min_new_samples`` new samples or
``min_samples`` labelled ones, then ``run_cycle`` against the current model, promote only
when not worse, ``build_meta`` + ``LatencyModel.from_blobs`` for the new current model). A
promoted version reaches the predictor ``publish_delay_s`` later (fit time, Redis,
announcement), passes ``check_servable`` and answers through the predictor's own
``CompiledModel`` (its ``objective`` picks mean or quantile models).

Deterministic for a given seed (XGBoost single-threaded, seeded holdouts). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.predictor.core import check_servable
from services.predictor.inference import CompiledModel
from services.trainer.cycle import PROMOTE, REJECT, build_meta, run_cycle
from services.trainer.fitting import TrainingData, point_choice, refit_gate
from services.trainer.settings import TrainerSettings
from services.trainer.validation import check
from services.trainer.window import ADDED
from shared.latency_model import LatencyModel
from shared.schemas import SchemaError, TrainingSample


@dataclass(frozen=True, slots=True)
class Served:
    """Predictions for the candidate rows of one request (candidate order)."""

    version: str
    ttft_ms: list[float]
    tpot_ms: list[float]


class OnlineLearner:
    def __init__(
        self,
        trainer: TrainerSettings,
        *,
        interval_s: float,
        publish_delay_s: float = 0.5,
        predictor_objective: str = "mean",
    ) -> None:
        s = trainer
        self.settings = s
        self.interval_s = interval_s
        self.publish_delay_s = publish_delay_s
        self.prefer = predictor_objective
        self.window = s.sample_window()
        self.config = s.fit_config()
        self.limits = s.limits()
        self.current: LatencyModel | None = None  # the trainer's current version
        self.served: LatencyModel | None = None  # what the predictor answers with
        self._compiled: CompiledModel | None = None  # its fast inference
        self._pending: list[tuple[float, LatencyModel]] = []  # (install at, model)
        self._fitted_at_added = 0
        self._seq = 0
        self.cycles = self.promoted = self.rejected = 0
        self.rejected_samples: dict[str, int] = {}
        self.fit_wall_s = 0.0  # filled by the caller's timer, if any
        self.history: list[dict] = []
        self.shift = s.shift_detector()  # live TTFT error -> forget + refit (trainer's)
        self.shifts: list[dict] = []
        self._force = False
        self._recovery_fits = 0  # refits left, one per shift_window samples, after a shift
        # a second learner fed the same samples and ticked at the same times, that never
        # routes (e.g. llm-d's, for a MAPE ratio on the same run: run_lab's llmd_twin)
        self.twin: OnlineLearner | None = None

    # --- samples ------------------------------------------------------------------------
    def offer(self, sample: TrainingSample, now: float) -> str:
        """Validate and offer one sample (what the trainer does per message)."""
        try:
            sample.validate()
        except SchemaError as e:
            reason = e.reason
        else:
            reason = check(sample, self.limits, now) or self.window.offer(sample, now)
        if reason != ADDED:
            self.rejected_samples[reason] = self.rejected_samples.get(reason, 0) + 1
        elif self.shift is not None:
            began = self.shift.observe(sample.predicted_ttft_ms, sample.ttft_ms, sample.ts)
            if began is not None:  # what TrainerService.admit does
                dropped = self.window.forget_before(began)
                self._force = True
                self.shifts.append({"t": round(now, 3), "began": round(began, 3),
                                    "samples": self.samples, "dropped": dropped})  # fmt: skip
                self._recovery_fits = self.settings.shift_refits
                self._tick(now)  # the trainer refits at once (TrainerService._on_shift)
            elif self._recovery_fits > 0 and (
                self.window.added_total - self._fitted_at_added >= self.settings.shift_window
            ):
                self._recovery_fits -= 1
                self._force = True
                self._tick(now)
        return reason

    @property
    def samples(self) -> int:
        """Samples accepted into the window so far."""
        return self.window.added_total

    # --- the trainer's cadence ----------------------------------------------------------
    def tick(self, now: float) -> str | None:
        """One refit check at virtual time ``now`` (the twin's too); returns a promoted
        version or None."""
        if self.twin is not None:
            self.twin.tick(now)
        return self._tick(now)

    def _tick(self, now: float) -> str | None:
        s = self.settings
        self.window.expire(now)
        due, _ = refit_gate(
            self.window.added_total - self._fitted_at_added, self.window.counts(),
            min_new_samples=s.min_new_samples, min_samples=s.min_samples,
            targets=self.config.targets, force=self._force,
        )  # fmt: skip
        if not due:
            return None
        self._force = False
        added_at = self.window.added_total
        coverage = self.window.coverage()
        data = TrainingData.from_entries(self.window.snapshot())
        result = run_cycle(data, self.current, self.config, seed=s.seed)
        self._fitted_at_added = added_at
        self.cycles += 1
        entry = {"t": round(now, 3), "decision": result.decision, "reason": result.reason,
                 "samples": result.samples}  # fmt: skip
        if self.config.point_loss == "relative":  # the point model chosen per key
            entry["levels"] = {
                m.spec.key: point_choice(m.spec)
                for m in result.models.values()
                if m.spec.objective == "mean"
            }
        self.history.append(entry)
        if result.decision == REJECT:
            self.rejected += 1
            return None
        if result.decision != PROMOTE:
            return None
        self._seq += 1
        version = f"v{self._seq}"
        meta, blobs = build_meta(version, now, result, self.config, bucket_coverage=coverage)
        model = LatencyModel.from_blobs(meta, blobs)
        self.current = model
        self.promoted += 1
        self._pending.append((now + self.publish_delay_s, model))
        return version

    def install_due(self, now: float) -> None:
        """Predictor side: load every announced version whose time has come (the twin's
        too)."""
        if self.twin is not None:
            self.twin.install_due(now)
        while self._pending and self._pending[0][0] <= now:
            _, model = self._pending.pop(0)
            try:
                check_servable(model, self.prefer)
            except SchemaError:
                continue  # refused; the last good model stays in service
            self.served = model
            self._compiled = CompiledModel(model, self.prefer)

    def next_install(self) -> float | None:
        own = self._pending[0][0] if self._pending else None
        twin = self.twin.next_install() if self.twin is not None else None
        due = [t for t in (own, twin) if t is not None]
        return min(due) if due else None

    # --- the predictor ------------------------------------------------------------------
    def predict(self, rows: list[list[float]]) -> Served | None:
        """The predictor's answer for these rows, or None before the first model."""
        model, compiled = self.served, self._compiled
        if model is None or compiled is None:
            return None
        ttft, tpot = compiled.predict(np.asarray(rows, dtype=np.float32))
        return Served(model.version, ttft.tolist(), tpot.tolist())

    def quantile_row(self, row: list[float]) -> tuple[float | None, float | None]:
        """The served version's p90 (quantile) predictions for one row, when it has quantile
        models and they are not what routing already used (for coverage reporting)."""
        model = self.served
        if model is None:
            return None, None
        out: list[float | None] = []
        x = None
        for target in ("ttft", "tpot"):
            key = model.key_for(target, "quantile")
            if key is None or model.spec(key).objective != "quantile":
                out.append(None)
                continue
            if x is None:
                x = np.asarray([row], dtype=np.float64)
            out.append(float(model.predict_key(key, x)[0]))
        return out[0], out[1]
