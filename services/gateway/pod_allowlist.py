"""Which pods the gateway may route to, whatever a snapshot on NATS says (pure).

A pod snapshot only tells the gateway about pods; it must not be able to send prompts
anywhere. A pod URL is admitted when its host is an IP inside one of the allowed CIDRs, when
it is one of the allowed base URLs, or when the gateway's own discovery (a Kubernetes label
watch, the same code as the collector's: services/collector/k8s_discovery.py) currently
sees a pod at that URL. With none of them configured every pod is admitted (the gateway
logs a warning at start); `headroom up` and the Kubernetes manifests configure one.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


@functools.lru_cache(maxsize=4096)  # the same few pod URLs arrive in every snapshot
def normalize(url: str) -> str | None:
    """``scheme://host:port`` of a pod URL (lower-case, explicit port), None if unusable."""
    try:
        u = urlsplit(url.strip())
        port = u.port
    except ValueError:
        return None
    if u.scheme not in _DEFAULT_PORTS or not u.hostname:
        return None
    host = u.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{u.scheme}://{host}:{port or _DEFAULT_PORTS[u.scheme]}"


def parse_list(spec: str) -> list[str]:
    return [x.strip() for x in spec.split(",") if x.strip()]


class PodAllowlist:
    def __init__(
        self,
        cidrs: Sequence[str] = (),
        urls: Sequence[str] = (),
        discovered: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``discovered()`` returns the base URLs the gateway's own discovery sees now."""
        self.networks = [ipaddress.ip_network(c, strict=False) for c in cidrs]
        self.urls = set()
        for u in urls:
            n = normalize(u)
            if n is None:
                raise ValueError(f"allowed pod URL {u!r} must be an absolute http(s) URL")
            self.urls.add(n)
        self.discovered = discovered

    @property
    def enforced(self) -> bool:
        return bool(self.networks or self.urls or self.discovered is not None)

    def refusals(self, urls: Iterable[str]) -> list[tuple[str, str]]:
        """``(url, reason)`` of each pod URL that may not be routed to (empty: all admitted)."""
        if not self.enforced:
            return []
        seen = None
        if self.discovered is not None:
            seen = {n for u in self.discovered() if (n := normalize(u)) is not None}
        out = []
        for url in urls:
            why = self._refusal(url, seen)
            if why is not None:
                out.append((url, why))
        return out

    def refusal(self, url: str) -> str | None:
        """Why the pod at ``url`` may not be routed to (None: admitted)."""
        found = self.refusals([url])
        return found[0][1] if found else None

    def _refusal(self, url: str, seen: set[str] | None) -> str | None:
        n = normalize(url)
        if n is None:
            return "bad_url"
        if n in self.urls:
            return None
        if self.networks:
            host = urlsplit(n).hostname or ""
            try:
                ip = ipaddress.ip_address(host)
            except ValueError:
                ip = None
            if ip is not None and any(ip in net for net in self.networks):
                return None
        if seen is not None and n in seen:
            return None
        return "not_allowed"
