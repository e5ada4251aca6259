"""The predictor's core, independent of NATS: the served model and the request handler.

:class:`ModelSlot` holds the current :class:`LatencyModel`; a swap is one attribute
assignment and each batch reads the slot once, so a request is answered entirely by one
version even while a new one is being installed.

:class:`PredictHandler` turns request bytes into reply bytes. Requests come in the binary
format of shared/wire.py (the gateway's) or as JSON ``PredictRequest`` (first byte ``{``,
kept for compatibility); each is answered in its own encoding. The service decodes every
request as it arrives (:meth:`PredictHandler.decode`, cheap, on the event loop) and predicts
everything queued since the last call in one batch (:meth:`PredictHandler.run_batch`, CPU
work meant for a worker thread). Malformed requests get an error reply, never an exception.

Inference is XGBoost's own predictor on float32 rows (XGBoost evaluates float32 features, so
this is bit-identical to float64 input), called through services/predictor/inference.py;
docs/benchmarks.md ("Hot path") has the measurements against a vectorised numpy evaluator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

from services.predictor.inference import CompiledModel
from services.predictor.metrics import PredictorMetrics
from shared import wire
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
        ttft, tpot = predict_arrays(model, np.zeros((1, N_FEATURES), dtype=np.float32), prefer)
    except Exception as e:
        raise SchemaError(
            f"model {model.version}: probe prediction failed: {e}", "unservable"
        ) from e
    if not np.isfinite(ttft).all() or not np.isfinite(tpot).all():
        raise SchemaError(f"model {model.version}: probe prediction not finite", "unservable")


def predict_arrays(
    model: LatencyModel, rows: np.ndarray, prefer: str = "mean"
) -> tuple[np.ndarray, np.ndarray]:
    """TTFT and TPOT milliseconds (float64 arrays) for full feature rows (n x 11), in one
    batch, from the ``prefer`` objective's models (mean or quantile)."""
    if len(rows) == 0:
        return np.zeros(0), np.zeros(0)
    ttft = model.predict_key(model.key_for("ttft", prefer), rows)  # type: ignore[arg-type]
    tpot = model.predict_key(model.key_for("tpot", prefer), rows)  # type: ignore[arg-type]
    return ttft, tpot


@dataclass(slots=True)
class Job:
    """One decoded request: its rows, or the error reply it gets."""

    binary: bool
    rows: np.ndarray | None = None
    error: bytes | None = None  # the encoded error reply of a malformed request
    token: object = None  # the caller's handle (the service's NATS message)

    @property
    def n_rows(self) -> int:
        return 0 if self.rows is None else len(self.rows)


class PredictHandler:
    """Answers encoded requests with encoded replies; never raises."""

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
        self._compiled: list[CompiledModel] = []  # the latest two models' (old and new)

    def compiled(self, model: LatencyModel) -> CompiledModel:
        """The fast predictor of ``model`` (built once per model; the service builds it in a
        thread before installing a version, so the event loop does not)."""
        for c in self._compiled:
            if c.model is model:
                return c
        c = CompiledModel(model, self.prefer)
        self._compiled = [c, *self._compiled[:1]]
        return c

    def small_rows(self) -> int:
        """Requests of at most this many rows are cheap to answer on their own (the served
        model's forest handles them: services/predictor/inference.py); 0 before a model."""
        model = self.slot.model
        return 0 if model is None else self.compiled(model).forest_rows

    # --- replies ------------------------------------------------------------------------
    def _reply(
        self,
        binary: bool,
        status: str,
        ttft: np.ndarray | None = None,
        tpot: np.ndarray | None = None,
        version: str | None = None,
        error: str | None = None,
    ) -> bytes:
        self.metrics.requests.labels(status=status).inc()
        if binary:
            return wire.encode_reply(
                status,
                () if ttft is None else ttft,
                () if tpot is None else tpot,
                model_version=version,
                replica=self.replica,
                error=error,
            )
        return PredictReply(
            status=status,
            model_version=version,
            ttft_ms=[] if ttft is None else ttft.tolist(),
            tpot_ms=[] if tpot is None else tpot.tolist(),
            error=error,
            replica=self.replica,
        ).encode()

    def _error(self, binary: bool, reason: str, message: str) -> bytes:
        self.metrics.request_errors.labels(reason=reason).inc()
        return self._reply(binary, PREDICT_ERROR, error=message)

    # --- decode (event loop) ------------------------------------------------------------
    def decode(self, data: bytes, token: object = None) -> Job:
        """Parse and validate one request; a malformed one carries its error reply."""
        binary = wire.is_wire(data)
        try:
            if binary:
                rows = wire.decode_request(data).rows
            else:
                req = PredictRequest.decode(data)
                rows = np.asarray(req.rows, dtype=np.float64).reshape(len(req.rows), N_FEATURES)
            return Job(binary, rows=rows, token=token)
        except SchemaError as e:
            return Job(binary, error=self._error(binary, e.reason, str(e)), token=token)
        except Exception as e:  # defensive: a reply is always sent
            log.exception("could not decode a predict request")
            err = self._error(binary, "internal", f"internal error: {e}")
            return Job(binary, error=err, token=token)

    # --- predict (worker thread) --------------------------------------------------------
    def run_batch(self, jobs: list[Job], model: LatencyModel | None = None) -> list[bytes]:
        """Replies for ``jobs`` (in order): one prediction call over all their rows with
        one model version (``model``, default the slot's current one)."""
        model = self.slot.model if model is None else model
        out: list[bytes | None] = [j.error for j in jobs]
        live = [i for i, j in enumerate(jobs) if j.error is None]
        if not live:
            return out  # type: ignore[return-value]
        if model is None:
            for i in live:
                out[i] = self._reply(jobs[i].binary, PREDICT_NOT_READY)
            return out  # type: ignore[return-value]
        parts = [jobs[i].rows for i in live]
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts, dtype=np.float32)
        started = time.perf_counter()
        try:
            ttft, tpot = self.compiled(model).predict(rows)
        except Exception as e:
            log.exception("prediction failed with model %s", model.version)
            for i in live:
                out[i] = self._error(jobs[i].binary, "predict_failed", f"prediction failed: {e}")
            return out  # type: ignore[return-value]
        self.metrics.predict_seconds.observe(time.perf_counter() - started)
        self.metrics.rows.inc(len(rows))
        self.metrics.batch_requests.observe(len(live))
        at = 0
        for i in live:
            n = jobs[i].n_rows
            out[i] = self._reply(
                jobs[i].binary, PREDICT_OK, ttft[at : at + n], tpot[at : at + n], model.version
            )
            at += n
        return out  # type: ignore[return-value]

    async def handle(self, data: bytes) -> bytes:
        """One request on its own (tests, tools): predicted in a worker thread when it has
        more than ``inline_max_rows`` rows."""
        try:
            job = self.decode(data)
            if job.n_rows > self.inline_max_rows:
                return (await asyncio.to_thread(self.run_batch, [job]))[0]
            return self.run_batch([job])[0]
        except Exception as e:  # defensive: a reply is always sent
            log.exception("predict handler failed")
            return self._error(wire.is_wire(data), "internal", f"internal error: {e}")
