"""Kubernetes discovery: the Ready pods matching a label selector in one namespace.

Like an InferencePool, the pool is "pods with these labels in this namespace"; each pod is
scraped at ``http://<pod IP>:<target port>``. The set is kept by the Kubernetes list/watch
protocol, not by polling:

1. LIST pods (``labelSelector``) and remember the list's ``resourceVersion``;
2. WATCH from that version (``allowWatchBookmarks``, a server-side ``timeoutSeconds``) and
   apply each ADDED / MODIFIED / DELETED event; BOOKMARK events only advance the version;
3. when the watch ends (server timeout, connection closed), watch again from the last seen
   version without relisting;
4. when the version has expired (HTTP 410 Gone, or an ERROR event with code 410), relist:
   the new list replaces the set, so pods deleted meanwhile leave;
5. any other failure keeps the current set and retries the whole cycle with exponential
   backoff (a flapping API server never empties the pool).

A pod is a target only while it is Running, has a pod IP, has condition Ready=True and has no
``deletionTimestamp``: a terminating pod leaves at the first event that marks it, before its
containers stop. :func:`pod_target` and :class:`PodSet` are pure; :class:`KubernetesDiscovery`
is the asyncio shell on the ``kubernetes_asyncio`` client (its configuration, auth and URL
building; events are read as raw JSON lines, no model deserialisation).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from services.collector.discovery import PodTarget

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_MAX_EVENT_BYTES = 16 << 20


# --------------------------------------------------------------------------------------
# Pure: which pods are targets
# --------------------------------------------------------------------------------------
def _host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Running, with an IP, condition Ready=True, and not terminating."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return False
    if status.get("phase") != "Running" or not status.get("podIP"):
        return False
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_target(
    pod: Mapping[str, Any],
    port: int,
    scheme: str = "http",
    metrics_port: int = 0,
    metrics_path: str = "/metrics",
    hardware_class_label: str = "",
) -> PodTarget | None:
    """The scrape target of a pod object (a dict as the API returns it), or None when the
    pod must not receive traffic. ``metrics_port`` (0: the serving port) is where its
    Prometheus metrics are served; the value of its ``hardware_class_label`` label (when
    set) is its hardware class."""
    if not is_ready(pod):
        return None
    name = (pod.get("metadata") or {}).get("name")
    if not name:
        return None
    host = _host(pod["status"]["podIP"])
    metrics_url = None
    if metrics_port and metrics_port != port:
        metrics_url = f"{scheme}://{host}:{metrics_port}{metrics_path}"
    hw = None
    if hardware_class_label:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        hw = str(labels.get(hardware_class_label) or "").strip() or None
    return PodTarget(name, f"{scheme}://{host}:{port}", metrics_url, hw)


@dataclass(slots=True)
class PodSet:
    """The current targets, updated from a full list or one watch event at a time."""

    port: int
    scheme: str = "http"
    metrics_port: int = 0
    metrics_path: str = "/metrics"
    hardware_class_label: str = ""
    _targets: dict[str, PodTarget] = field(default_factory=dict)
    _sorted: tuple[PodTarget, ...] = ()

    def _target(self, pod: Mapping[str, Any]) -> PodTarget | None:
        return pod_target(
            pod, self.port, self.scheme, self.metrics_port, self.metrics_path,
            self.hardware_class_label,
        )  # fmt: skip

    def _changed(self) -> None:
        self._sorted = tuple(self._targets[k] for k in sorted(self._targets))

    def replace(self, pods: Sequence[Mapping[str, Any]]) -> None:
        targets = (self._target(p) for p in pods)
        self._targets = {t.name: t for t in targets if t is not None}
        self._changed()

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Apply one watch event; True if the target set changed."""
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return False
        target = None if event_type == "DELETED" else self._target(pod)
        if target is None:
            if self._targets.pop(name, None) is None:
                return False
        elif self._targets.get(name) == target:
            return False
        else:
            self._targets[name] = target
        self._changed()
        return True

    def targets(self) -> tuple[PodTarget, ...]:
        return self._sorted


# --------------------------------------------------------------------------------------
# Shell: list/watch loop
# --------------------------------------------------------------------------------------
class ResourceExpired(Exception):
    """The resourceVersion we watch from is too old (410 Gone): relist."""


class ApiError(Exception):
    """The API server refused or broke a list/watch request."""


@dataclass(slots=True)
class DiscoveryStats:
    lists: int = 0
    watches: int = 0
    expired: int = 0  # 410 Gone -> relist
    errors: int = 0  # other failures (backoff, then relist)
    events: int = 0


async def _default_namespace() -> str:
    def read() -> str:
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"

    return await asyncio.to_thread(read)


async def build_api_client(api_url: str = "") -> Any:
    """A ``kubernetes_asyncio`` ApiClient: ``api_url`` when given (tests, ``kubectl proxy``),
    else the pod's service account, else the local kubeconfig."""
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if api_url:
        cfg.host = api_url.rstrip("/")
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            await config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


class KubernetesDiscovery:
    """:class:`~services.collector.discovery.Discovery` over the Kubernetes list/watch API."""

    def __init__(
        self,
        label_selector: str,
        *,
        namespace: str = "",
        port: int = 8000,
        scheme: str = "http",
        metrics_port: int = 0,
        metrics_path: str = "/metrics",
        api_url: str = "",
        watch_timeout_s: int = 300,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sync_timeout_s: float = 10.0,
        hardware_class_label: str = "",
    ) -> None:
        if not label_selector:
            raise ValueError("Kubernetes discovery needs a label selector")
        self.label_selector = label_selector
        self.namespace = namespace
        self.api_url = api_url
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sync_timeout_s = sync_timeout_s
        self.pods = PodSet(port, scheme, metrics_port, metrics_path, hardware_class_label)
        self.stats = DiscoveryStats()
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self._api_client: Any = None
        self._core: Any = None
        self._task: asyncio.Task[None] | None = None

    def targets(self) -> Sequence[PodTarget]:
        return self.pods.targets()

    async def start(self) -> None:
        """Connect and start the list/watch loop; waits (up to ``sync_timeout_s``) for the
        first list so the first scrape cycle already sees the pool."""
        from kubernetes_asyncio import client

        if not self.namespace:
            self.namespace = await _default_namespace()
        self._api_client = await build_api_client(self.api_url)
        self._core = client.CoreV1Api(self._api_client)
        self._task = asyncio.create_task(self._run(), name="k8s-discovery")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.synced.wait(), self.sync_timeout_s)
        if not self.synced.is_set():
            log.warning("no pod list from the API server yet; continuing with an empty pool")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._api_client is not None:
            await self._api_client.close()
            self._api_client = None

    # --- protocol ------------------------------------------------------------------------
    async def _request(self, **params: Any) -> aiohttp.ClientResponse:
        resp = await self._core.list_namespaced_pod(
            self.namespace,
            label_selector=self.label_selector,
            _preload_content=False,
            **params,
        )
        if resp.status == 410:
            resp.release()
            raise ResourceExpired("HTTP 410 Gone")
        if resp.status != 200:
            text = (await resp.read())[:300].decode("utf-8", "replace")
            resp.release()
            raise ApiError(f"HTTP {resp.status}: {text}")
        return resp

    async def _list(self) -> str:
        resp = await self._request(_request_timeout=30)
        try:
            body = orjson.loads(await resp.read())
        finally:
            resp.release()
        self.stats.lists += 1
        items = body.get("items") or []
        self.pods.replace(items)
        rv = (body.get("metadata") or {}).get("resourceVersion") or ""
        log.info(
            "listed %d pods (%d ready) for %r in %s at resourceVersion %s",
            len(items),
            len(self.pods.targets()),
            self.label_selector,
            self.namespace,
            rv,
        )
        return rv

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            msg = f"{obj.get('reason')}: {obj.get('message')}"
            if code == 410:
                raise ResourceExpired(msg)
            raise ApiError(f"watch error {code}: {msg}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.stats.events += 1
            if self.pods.apply(kind, obj):
                log.info("pod %s %s; %d targets", obj["metadata"].get("name"), kind.lower(),
                         len(self.pods.targets()))  # fmt: skip
        if rv:
            self.resource_version = rv

    async def _watch(self, rv: str) -> None:
        """Watch from ``rv`` until the server ends the stream (returns) or fails (raises)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=self.watch_timeout_s + 30
        )
        resp = await self._request(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=timeout,
        )
        self.stats.watches += 1
        buf = b""
        try:
            async for chunk in resp.content.iter_any():
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._handle(orjson.loads(line))
                if len(buf) > _MAX_EVENT_BYTES:
                    raise ApiError("watch event larger than 16 MiB")
            if buf.strip():
                self._handle(orjson.loads(buf))
        finally:
            resp.release()

    async def _run(self) -> None:
        backoff = self.backoff_s
        while True:
            try:
                self.resource_version = await self._list()
                self.synced.set()
                backoff = self.backoff_s
                while True:
                    loop = asyncio.get_running_loop()
                    started, events = loop.time(), self.stats.events
                    await self._watch(self.resource_version)
                    if loop.time() - started < 1.0 and self.stats.events == events:
                        await asyncio.sleep(self.backoff_s)  # never spin on empty watches
            except ResourceExpired as e:
                self.stats.expired += 1
                log.info("resourceVersion %s expired (%s); relisting", self.resource_version, e)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.stats.errors += 1
                log.warning("pod list/watch failed (%r); retrying in %.1fs", e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(self.max_backoff_s, backoff * 2)
