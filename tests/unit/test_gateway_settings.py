"""Gateway settings: defaults and environment names."""

from __future__ import annotations

from services.gateway.settings import GatewaySettings


def test_defaults(monkeypatch):
    import os

    for key in [k for k in os.environ if k.startswith("HEADROOM_GATEWAY_")]:
        monkeypatch.delenv(key)
    s = GatewaySettings()
    assert (s.host, s.port, s.predict_timeout_ms, s.stale_after_s) == ("127.0.0.1", 8080, 100, 2.0)
    assert (s.prefix_block_tokens, s.prefix_index_blocks) == (64, 50_000)
    assert (s.pod_connect_timeout_s, s.pod_read_timeout_s) == (2.0, 300.0)
    assert (s.retry_before_first_byte, s.retry_after_s) == (True, 1)


def test_environment(monkeypatch):
    monkeypatch.setenv("HEADROOM_GATEWAY_PORT", "9999")
    monkeypatch.setenv("HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS", "25")
    monkeypatch.setenv("HEADROOM_GATEWAY_RETRY_BEFORE_FIRST_BYTE", "false")
    monkeypatch.setenv("HEADROOM_NAMESPACE", "ns1")
    monkeypatch.setenv("HEADROOM_POOL", "blue")
    s = GatewaySettings()
    assert (s.port, s.predict_timeout_ms, s.retry_before_first_byte) == (9999, 25, False)
    assert (s.namespace, s.pool) == ("ns1", "blue")
