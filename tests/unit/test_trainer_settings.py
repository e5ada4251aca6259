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
    assert (s.min_samples, s.min_new_samples, s.window_size) == (100, 50, 20000)
    assert (s.keep_versions, s.fetch_batch, s.rounds) == (5, 256, 200)
    assert (s.bucket_cap, s.max_age_s, s.objective, s.promotion_margin) == (500, 0.0, "mean", 0.05)
    cfg = s.fit_config()
    assert cfg.targets == ("ttft", "tpot") and [x.key for x in cfg.specs()] == ["ttft", "tpot"]
    assert list(s.strata) == [
        "num_request_waiting",
        "kv_cache_percentage",
        "prefix_score_bucket",
        "input_token_length",
    ]


def test_env(monkeypatch):
    monkeypatch.setenv("HEADROOM_NAMESPACE", "ns1")
    monkeypatch.setenv("HEADROOM_TRAINER_INTERVAL_S", "2.5")
    monkeypatch.setenv("HEADROOM_TRAINER_MIN_SAMPLES", "7")
    monkeypatch.setenv("HEADROOM_TRAINER_REPLAY_ON_START", "false")
    monkeypatch.setenv("HEADROOM_TRAINER_OBJECTIVE", "both")
    monkeypatch.setenv("HEADROOM_TRAINER_E2E_MODEL", "true")
    monkeypatch.setenv("HEADROOM_TRAINER_STRATA", '{"num_request_waiting": [1, 4]}')
    s = TrainerSettings()
    assert (s.namespace, s.interval_s, s.min_samples, s.replay_on_start) == ("ns1", 2.5, 7, False)
    assert s.strata == {"num_request_waiting": [1.0, 4.0]}
    keys = [x.key for x in s.fit_config().specs()]
    assert keys == ["ttft", "ttft_p90", "tpot", "tpot_p90", "e2e", "e2e_p90"]


def test_invalid_values_are_rejected():
    with pytest.raises(ValidationError):
        TrainerSettings(interval_s=0)
    with pytest.raises(ValidationError):
        TrainerSettings(keep_versions=0)
    with pytest.raises(ValidationError):
        TrainerSettings(strata={"no_such_feature": [1.0]})
    with pytest.raises(ValidationError):
        TrainerSettings(objective="median")
