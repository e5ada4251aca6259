"""services/gateway/pod_auth.py: forward | inject | none, the pod key file's rotation, and
that the pod key appears in no error or log line."""

from __future__ import annotations

import logging
import os

import pytest
from pydantic import ValidationError

from services.gateway.pod_auth import PodCredentialError, PodCredentials
from services.gateway.settings import GatewaySettings

CLIENT = {"authorization": "Bearer client-key"}


def test_modes():
    assert PodCredentials("forward").authorization(CLIENT) == "Bearer client-key"
    assert PodCredentials("forward").authorization({}) is None
    assert PodCredentials("none").authorization(CLIENT) is None
    inject = PodCredentials("inject", key="pod-secret-1")
    inject.load()
    assert inject.authorization(CLIENT) == "Bearer pod-secret-1"
    assert inject.authorization({}) == "Bearer pod-secret-1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "inject"}, "exactly one of"),
        ({"mode": "inject", "key": "a", "key_file": "/x"}, "exactly one of"),
        ({"mode": "forward", "key": "a"}, "set pod_auth=inject"),
        ({"mode": "none", "key_file": "/x"}, "set pod_auth=inject"),
        ({"mode": "inject", "key": "two\nlines"}, "one line of ASCII"),
    ],
)
def test_misconfigurations_fail_without_naming_the_key(kwargs, message):
    with pytest.raises(PodCredentialError, match=message) as e:
        PodCredentials(**kwargs)
    assert "two\nlines" not in str(e.value)


def test_key_file_rotation_and_a_bad_file_keeping_the_old_key(tmp_path, caplog):
    f = tmp_path / "pod-key"
    f.write_text("pod-secret-old\n")
    creds = PodCredentials("inject", key_file=str(f))
    creds.load()
    assert creds.authorization({}) == "Bearer pod-secret-old"
    creds.reload_if_changed()  # unchanged
    tmp = tmp_path / "pod-key.tmp"
    tmp.write_text("pod-secret-new")
    os.replace(tmp, f)
    with caplog.at_level(logging.DEBUG):
        creds.reload_if_changed()
        assert creds.authorization({}) == "Bearer pod-secret-new"
        f.write_text("")  # emptied: refused, the previous key stays
        creds.reload_if_changed()
        assert creds.authorization({}) == "Bearer pod-secret-new"
        f.unlink()
        creds.reload_if_changed()
        assert creds.authorization({}) == "Bearer pod-secret-new"
    text = caplog.text
    assert "reloaded" in text and "keeping the previous one" in text
    assert "pod-secret" not in text


def test_a_missing_key_file_fails_start_up(tmp_path):
    creds = PodCredentials("inject", key_file=str(tmp_path / "absent"))
    with pytest.raises(PodCredentialError, match="unreadable"):
        creds.load()


def test_forwarding_with_a_key_file_is_refused():
    with pytest.raises(ValidationError, match="pod_auth=forward would send"):
        GatewaySettings(api_keys_path="/k.yaml")
    GatewaySettings(api_keys_path="/k.yaml", pod_auth="none")
    s = GatewaySettings(pod_auth="inject", pod_api_key="pod-secret-x")
    assert "pod-secret-x" not in repr(s) and "pod-secret-x" not in str(s.model_dump())


def test_a_settings_error_does_not_repeat_the_pod_key():
    from services.gateway.main import settings_errors

    with pytest.raises(ValidationError) as e:
        GatewaySettings(api_keys_path="/k.yaml", pod_api_key="pod-secret-y")
    assert "pod-secret-y" in str(e.value)  # pydantic's own message would leak it
    msg = settings_errors(e.value)
    assert "pod_auth=forward would send" in msg and "pod-secret-y" not in msg
