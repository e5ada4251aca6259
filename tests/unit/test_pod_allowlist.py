"""The gateway's pod allowlist (pure): CIDRs, base URLs, the gateway's own discovery."""

from __future__ import annotations

import pytest

from services.gateway.pod_allowlist import PodAllowlist, normalize, parse_list


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://10.0.0.1:8000", "http://10.0.0.1:8000"),
        ("http://10.0.0.1:8000/", "http://10.0.0.1:8000"),
        ("HTTP://Pod-A.Example:8000/v1", "http://pod-a.example:8000"),
        ("http://10.0.0.1", "http://10.0.0.1:80"),
        ("https://10.0.0.1", "https://10.0.0.1:443"),
        ("http://[fd00::6]:8000", "http://[fd00::6]:8000"),
        ("ftp://10.0.0.1", None),
        ("10.0.0.1:8000", None),
        ("http://10.0.0.1:99999", None),
    ],
)
def test_normalize(url, want):
    assert normalize(url) == want


def test_nothing_configured_admits_everything():
    a = PodAllowlist()
    assert not a.enforced
    assert a.refusals(["http://203.0.113.9:80", "gopher://x"]) == []


def test_cidrs():
    a = PodAllowlist(parse_list("10.0.0.0/8, fd00::/8"))
    assert a.enforced
    assert a.refusal("http://10.1.2.3:8000") is None
    assert a.refusal("http://[fd00::1]:8000") is None
    assert a.refusal("http://192.168.1.1:8000") == "not_allowed"
    assert a.refusal("http://evil.example:8000") == "not_allowed"  # a name is no IP
    assert a.refusal("not a url") == "bad_url"


def test_urls_match_on_scheme_host_and_port():
    a = PodAllowlist(urls=["http://127.0.0.1:8001", "http://127.0.0.1:8002/"])
    assert a.refusal("http://127.0.0.1:8001/") is None
    assert a.refusal("http://127.0.0.1:8002") is None
    assert a.refusal("http://127.0.0.1:8003") == "not_allowed"
    assert a.refusal("https://127.0.0.1:8001") == "not_allowed"
    with pytest.raises(ValueError):
        PodAllowlist(urls=["127.0.0.1:8001"])


def test_discovery_is_read_once_per_check_and_follows_changes():
    seen = ["http://10.0.0.1:8000"]
    calls = []

    def discovered():
        calls.append(1)
        return list(seen)

    a = PodAllowlist(discovered=discovered)
    assert a.enforced
    urls = ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.1:8000"]
    assert a.refusals(urls) == [("http://10.0.0.2:8000", "not_allowed")]
    assert len(calls) == 1
    seen.append("http://10.0.0.2:8000")  # the watch saw the new pod
    assert a.refusals(urls) == []
    seen.clear()  # ... and it went away
    assert len(a.refusals(urls)) == 3


def test_any_source_admits():
    a = PodAllowlist(["10.0.0.0/24"], ["http://127.0.0.1:9000"], lambda: ["http://10.9.9.9:80"])
    assert a.refusals(["http://10.0.0.7:1", "http://127.0.0.1:9000", "http://10.9.9.9"]) == []
    assert a.refusal("http://10.0.1.7:1") == "not_allowed"
