"""Trainer settings: env prefix, common un-prefixed connection settings, defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.trainer.settings import TrainerSettings


def test_defaults(monkeypatch):
    for k in ("HEADROOM_NAMESPACE", "HEADROOM_TRAINER_INTERVAL_S", "HEADROOM_TRAINER_MIN_SAMPLES"):
        monkeypatch.delenv(k, raising=False)
    s = TrainerSettings()
    assert (s.admin_host, s.admin_port, s.interval_s) == ("127.0.0.1", 9104, 10.0)
    assert (s.min_samples, s.min_new_samples, s.window_size) == (100, 20, 20000)
    assert (s.keep_versions, s.fetch_batch, s.rounds) == (5, 256, 200)


def test_env(monkeypatch):
    monkeypatch.setenv("HEADROOM_NAMESPACE", "ns1")
    monkeypatch.setenv("HEADROOM_TRAINER_INTERVAL_S", "2.5")
    monkeypatch.setenv("HEADROOM_TRAINER_MIN_SAMPLES", "7")
    monkeypatch.setenv("HEADROOM_TRAINER_REPLAY_ON_START", "false")
    s = TrainerSettings()
    assert (s.namespace, s.interval_s, s.min_samples, s.replay_on_start) == ("ns1", 2.5, 7, False)


def test_invalid_values_are_rejected():
    with pytest.raises(ValidationError):
        TrainerSettings(interval_s=0)
    with pytest.raises(ValidationError):
        TrainerSettings(keep_versions=0)
