"""The gateway's tracemalloc diagnostics (services/gateway/memdebug.py): a diff since the
mark names the site that kept allocating; the debug routes are for loopback clients only."""

from __future__ import annotations

from services.gateway.memdebug import MemDebug, is_loopback

_KEPT: list[list[bytes]] = []


def _leak(n: int) -> None:
    for _ in range(n):
        _KEPT.append([bytes(1000)])  # a list: gc tracks containers


def test_diff_since_mark_names_the_growing_site():
    md = MemDebug(frames=4)
    md.start()
    try:
        md.mark()
        _leak(2000)
        d = md.diff(top=5)
    finally:
        md.stop()
        _KEPT.clear()
    top = d["top"][0]
    assert top["size_diff_bytes"] >= 2000 * 1000
    assert any("test_memdebug.py" in at for at in top["at"])
    assert d["traced_bytes"] > d["traced_bytes_at_mark"]
    # objects_grown counts the whole process's net change by type (other tests' lists may be
    # freed meanwhile), so only its presence is checked; the site above is the claim
    assert "objects_grown" in d


def test_only_loopback_clients():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.5") and not is_loopback(None) and not is_loopback("example")
