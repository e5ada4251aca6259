"""Predictor settings: env prefix, replica id default, validation."""

from __future__ import annotations

import os
import socket

import pytest
from pydantic import ValidationError

from services.predictor.settings import PredictorSettings


def test_defaults(monkeypatch):
    for k in ("HEADROOM_PREDICTOR_REPLICA_ID", "HEADROOM_PREDICTOR_RELOAD_INTERVAL_S"):
        monkeypatch.delenv(k, raising=False)
    s = PredictorSettings()
    assert (s.admin_host, s.admin_port, s.reload_interval_s) == ("127.0.0.1", 9102, 2.0)
    assert s.objective == "mean"
    assert s.replica_id == f"{socket.gethostname()}-{os.getpid()}"


def test_env(monkeypatch):
    monkeypatch.setenv("HEADROOM_NATS_URL", "nats://example:4222")
    monkeypatch.setenv("HEADROOM_PREDICTOR_REPLICA_ID", "p-7")
    monkeypatch.setenv("HEADROOM_PREDICTOR_RELOAD_INTERVAL_S", "0.5")
    s = PredictorSettings()
    assert (s.nats_url, s.replica_id, s.reload_interval_s) == ("nats://example:4222", "p-7", 0.5)


def test_invalid_values_are_rejected():
    with pytest.raises(ValidationError):
        PredictorSettings(reload_interval_s=0)
    with pytest.raises(ValidationError):
        PredictorSettings(objective="both")
