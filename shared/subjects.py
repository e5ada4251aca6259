"""Names of every NATS subject, JetStream stream and Redis key, derived from a namespace.

All services and tests derive names from :class:`Names`, so two stacks (or two test runs)
with different namespaces never see each other's traffic or keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VALID = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Names:
    namespace: str = "headroom"

    def __post_init__(self) -> None:
        if not _VALID.match(self.namespace):
            raise ValueError(
                f"namespace {self.namespace!r} must match [A-Za-z0-9_-]+ "
                "(it prefixes NATS subjects, stream names and Redis keys)"
            )

    # --- NATS core subjects -------------------------------------------------------------
    def pod_snapshots(self, pool: str) -> str:
        """Collector -> gateway: one PodSnapshot message per scrape cycle of a pool."""
        return f"{self.namespace}.pods.{pool}.snapshot"

    @property
    def predict(self) -> str:
        """Gateway -> predictor request-reply subject (queue group: predict_queue)."""
        return f"{self.namespace}.predict"

    @property
    def predict_queue(self) -> str:
        return f"{self.namespace}-predictors"

    @property
    def model_announce(self) -> str:
        """Trainer -> predictors: a new current model version (ModelAnnouncement)."""
        return f"{self.namespace}.model.announce"

    # --- JetStream ----------------------------------------------------------------------
    @property
    def samples_stream(self) -> str:
        """JetStream stream holding completed-request training samples."""
        return f"{self.namespace.upper().replace('-', '_')}_SAMPLES"

    def samples(self, pool: str) -> str:
        return f"{self.namespace}.samples.{pool}"

    @property
    def samples_wildcard(self) -> str:
        return f"{self.namespace}.samples.>"

    @property
    def trainer_durable(self) -> str:
        return "trainer"

    @property
    def trainer_flush(self) -> str:
        """Request-reply: flush the trainer's window (``headroom model flush``)."""
        return f"{self.namespace}.trainer.flush"

    # --- Redis keys ---------------------------------------------------------------------
    @property
    def redis_prefix(self) -> str:
        return f"{self.namespace}:"

    @property
    def model_current(self) -> str:
        """String key: the current model version id."""
        return f"{self.namespace}:model:current"

    @property
    def model_versions(self) -> str:
        """List key: kept version ids, newest first."""
        return f"{self.namespace}:model:versions"

    @property
    def model_seq(self) -> str:
        """Counter key: INCR gives the next version number."""
        return f"{self.namespace}:model:seq"

    @property
    def model_history(self) -> str:
        """List key: JSON records of promotions, rejected candidates and rollbacks, newest first."""
        return f"{self.namespace}:model:history"

    @property
    def trainer_flushed_at(self) -> str:
        """String key: unix time before which samples are not (re)admitted to the window."""
        return f"{self.namespace}:trainer:flushed_at"

    def model_blob(self, version: str) -> str:
        """Hash key: fields ``meta`` (JSON ModelMeta) and one field per target (UBJ bytes)."""
        return f"{self.namespace}:model:blob:{version}"
