"""Pod discovery: which pods the collector scrapes.

A discovery source exposes the current target list synchronously (``targets()``) and may run
a background task between ``start()`` and ``stop()`` to keep it fresh. Today there is a
static list; a Kubernetes label watch implements the same interface later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse


@dataclass(frozen=True, slots=True)
class PodTarget:
    """A pod to scrape: ``url`` is its base URL (the gateway proxies to it too);
    ``metrics_url``, when set, is where its metrics are served instead of ``url`` + the
    metrics path (JetStream serves Prometheus on a port of its own)."""

    name: str
    url: str
    metrics_url: str | None = None
    hardware_class: str | None = None  # from the pod's label (Kubernetes discovery)


class Discovery(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def targets(self) -> Sequence[PodTarget]:
        """The current pods (cheap; called once per scrape cycle)."""
        ...


def _check_url(url: str) -> str:
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"pod url {url!r} must be an absolute http(s) URL")
    return url.rstrip("/")


def parse_pod_list(spec: str) -> list[PodTarget]:
    """Parse ``"name=url,name=url"``; a bare ``url`` entry is named ``pod-<i>`` (its index).

    Blank entries are skipped; duplicate names and non-http(s) URLs raise ValueError.
    """
    targets: list[PodTarget] = []
    seen: set[str] = set()
    entries = [e.strip() for e in spec.split(",")]
    for i, entry in enumerate(e for e in entries if e):
        name, sep, url = entry.partition("=")
        if not sep or "://" in name:  # bare url (a url may itself contain '=' in its query)
            name, url = f"pod-{i}", entry
        name, url = name.strip(), url.strip()
        if not name:
            raise ValueError(f"pod entry {entry!r} has an empty name")
        if name in seen:
            raise ValueError(f"duplicate pod name {name!r}")
        seen.add(name)
        targets.append(PodTarget(name, _check_url(url)))
    return targets


class StaticDiscovery:
    """A fixed list of pods (from settings)."""

    def __init__(self, targets: Sequence[PodTarget]) -> None:
        self._targets = tuple(targets)

    @classmethod
    def from_spec(cls, spec: str) -> StaticDiscovery:
        return cls(parse_pod_list(spec))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def targets(self) -> Sequence[PodTarget]:
        return self._targets
