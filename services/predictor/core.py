"""The predictor's core, independent of NATS: the served model and the request handler.

:class:`ModelSlot` holds the current :class:`LatencyModel`; a swap is one attribute
assignment and each request reads the slot once, so a request is answered entirely by one
version even while a new one is being installed. :class:`PredictHandler` turns request
bytes into reply bytes; tests drive it directly.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from services.predictor.metrics import PredictorMetrics
from shared.features import FEATURES
from shared.latency_model import LatencyModel
from shared.schemas import (
    PREDICT_ERROR,
    PREDICT_NOT_READY,
    PREDICT_OK,
    PredictReply,
    PredictRequest,
    SchemaError,
)

log = logging.getLogger(__name__)

REQUIRED_TARGETS: tuple[str, ...] = ("ttft", "tpot")
N_FEATURES = len(FEATURES)


class ModelSlot:
    """The model currently served (None before the first successful load)."""

    def __init__(self) -> None:
        self._model: LatencyModel | None = None

    @property
    def model(self) -> LatencyModel | None:
        return self._model

    @property
    def version(self) -> str | None:
        m = self._model
        return m.version if m is not None else None

    def swap(self, model: LatencyModel) -> LatencyModel | None:
        """Install ``model``; returns the previous one."""
        old, self._model = self._model, model
        return old


def check_servable(model: LatencyModel, prefer: str = "mean") -> None:
    """A served model must carry a model for every target the reply needs and predict a
    finite value for a probe row (catches column lists that do not fit the booster).
    Raises SchemaError."""
    missing = [t for t in REQUIRED_TARGETS if model.key_for(t, prefer) is None]
    if missing:
        raise SchemaError(f"model {model.version} lacks targets {missing}", "missing_target")
    try:
        ttft, tpot = predict_rows(model, np.zeros((1, N_FEATURES), dtype=np.float64), prefer)
    except Exception as e:
        raise SchemaError(
            f"model {model.version}: probe prediction failed: {e}", "unservable"
        ) from e
    if not all(np.isfinite(ttft + tpot)):
        raise SchemaError(f"model {model.version}: probe prediction not finite", "unservable")


def predict_rows(
    model: LatencyModel, rows: np.ndarray, prefer: str = "mean"
) -> tuple[list[float], list[float]]:
    """TTFT and TPOT milliseconds for full feature rows (n x 11), in one batch, from the
    ``prefer`` objective's models (mean or quantile) when the version has both."""
    if len(rows) == 0:
        return [], []
    ttft = model.predict_key(model.key_for("ttft", prefer), rows)  # type: ignore[arg-type]
    tpot = model.predict_key(model.key_for("tpot", prefer), rows)  # type: ignore[arg-type]
    return ttft.tolist(), tpot.tolist()


class PredictHandler:
    """Answers encoded PredictRequests with encoded PredictReplies; never raises."""

    def __init__(
        self,
        slot: ModelSlot,
        metrics: PredictorMetrics,
        replica: str,
        *,
        inline_max_rows: int = 256,
        prefer: str = "mean",
    ) -> None:
        self.prefer = prefer
        self.slot = slot
        self.metrics = metrics
        self.replica = replica
        self.inline_max_rows = inline_max_rows

    def _error(self, reason: str, message: str) -> PredictReply:
        self.metrics.request_errors.labels(reason=reason).inc()
        return PredictReply(status=PREDICT_ERROR, error=message, replica=self.replica)

    async def answer(self, data: bytes) -> PredictReply:
        try:
            req = PredictRequest.decode(data)
        except SchemaError as e:
            return self._error(e.reason, str(e))
        model = self.slot.model  # read once: the whole request uses this version
        if model is None:
            return PredictReply(status=PREDICT_NOT_READY, replica=self.replica)
        rows = np.asarray(req.rows, dtype=np.float64).reshape(len(req.rows), N_FEATURES)
        started = time.perf_counter()
        try:
            if len(rows) > self.inline_max_rows:
                ttft, tpot = await asyncio.to_thread(predict_rows, model, rows, self.prefer)
            else:
                ttft, tpot = predict_rows(model, rows, self.prefer)
        except Exception as e:
            log.exception("prediction failed with model %s", model.version)
            return self._error("predict_failed", f"prediction failed: {e}")
        self.metrics.predict_seconds.observe(time.perf_counter() - started)
        self.metrics.rows.inc(len(rows))
        return PredictReply(
            status=PREDICT_OK,
            model_version=model.version,
            ttft_ms=ttft,
            tpot_ms=tpot,
            replica=self.replica,
        )

    async def handle(self, data: bytes) -> bytes:
        try:
            reply = await self.answer(data)
        except Exception as e:  # defensive: a reply is always sent
            log.exception("predict handler failed")
            reply = self._error("internal", f"internal error: {e}")
        self.metrics.requests.labels(status=reply.status).inc()
        return reply.encode()
