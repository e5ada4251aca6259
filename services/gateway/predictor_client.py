"""Ask the predictors (NATS request-reply) for TTFT/TPOT predictions of the candidate rows.

Never raises: a failed call comes back as a fallback reason, and the request is routed by
the composite score instead. Reasons: ``no_model`` (predictor answered not_ready),
``timeout``, ``no_responders`` (no predictor subscribed), ``error`` (anything else, including
an invalid reply).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client as NATS

from services.gateway.scheduling.prediction import Prediction
from shared.schemas import (
    PREDICT_NOT_READY,
    PREDICT_OK,
    PredictReply,
    PredictRequest,
    SchemaError,
)

log = logging.getLogger(__name__)

REASON_NO_MODEL = "no_model"
REASON_TIMEOUT = "timeout"
REASON_NO_RESPONDERS = "no_responders"
REASON_ERROR = "error"


@dataclass(frozen=True, slots=True)
class PredictOutcome:
    predictions: list[Prediction] | None
    model_version: str | None = None
    reason: str | None = None  # fallback reason when predictions is None
    replica: str | None = None


class PredictorClient:
    def __init__(self, nc: NATS, subject: str, timeout_s: float) -> None:
        self.nc = nc
        self.subject = subject
        self.timeout_s = timeout_s

    async def predict(
        self, rows: Sequence[list[float]], timeout_s: float | None = None
    ) -> PredictOutcome:
        """One request for all rows; ``timeout_s`` overrides the client's deadline."""
        payload = PredictRequest(rows=[list(r) for r in rows]).encode()
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            msg = await self.nc.request(self.subject, payload, timeout=timeout)
        except nats.errors.NoRespondersError:
            return PredictOutcome(None, reason=REASON_NO_RESPONDERS)
        except nats.errors.TimeoutError:
            return PredictOutcome(None, reason=REASON_TIMEOUT)
        except Exception as e:  # connection closed, draining, ...
            log.warning("prediction request failed: %s", e)
            return PredictOutcome(None, reason=REASON_ERROR)
        try:
            reply = PredictReply.decode(msg.data)
        except SchemaError as e:
            log.warning("invalid prediction reply: %s", e)
            return PredictOutcome(None, reason=REASON_ERROR)
        if reply.status == PREDICT_NOT_READY:
            return PredictOutcome(None, reason=REASON_NO_MODEL, replica=reply.replica)
        if reply.status != PREDICT_OK or len(reply.ttft_ms) != len(rows):
            log.warning("prediction reply unusable: status=%s error=%s", reply.status, reply.error)
            return PredictOutcome(None, reason=REASON_ERROR, replica=reply.replica)
        preds = [Prediction(a, b) for a, b in zip(reply.ttft_ms, reply.tpot_ms, strict=True)]
        return PredictOutcome(preds, model_version=reply.model_version, replica=reply.replica)
