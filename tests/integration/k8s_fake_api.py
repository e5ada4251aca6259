"""A small in-process Kubernetes API server that speaks the pod list/watch protocol.

``GET /api/v1/namespaces/{ns}/pods`` with ``labelSelector`` (equality terms), and with
``watch=true``: replay of the events after ``resourceVersion``, then live events as JSON lines,
``BOOKMARK`` events on request, ``timeoutSeconds``, and an ``ERROR`` event with code 410 when
the version is older than the compaction point (as etcd compaction makes it). Like the real
server, a selector watch sees ``DELETED`` when a pod stops matching and ``ADDED`` when it
starts to. Tests drive it with ``put_pod`` / ``delete_pod`` / ``close_watches`` / ``compact``
and fail requests with ``fail_next``.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


def make_pod(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    ready: bool = True,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    namespace: str = "models",
    deleting: bool = False,
) -> dict[str, Any]:
    """A pod object shaped like the API's JSON (trimmed to what matters plus some noise)."""
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "ContainersReady", "status": "True" if ready else "False"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "hostIP": "10.128.0.7",
        "qosClass": "Burstable",
        "startTime": "2025-05-01T10:00:00Z",
    }
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels if labels is not None else {"app": "vllm"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-05-01T09:59:00Z"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-6c"}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-05-01T11:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.9.0"}]},
        "status": status,
    }


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = (s.strip() for s in term.split("!=", 1))
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, _, v = term.partition("=")
            if labels.get(k.strip()) != v.removeprefix("=").strip():
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class _Watcher:
    selector: str
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    bookmarks: bool = False


class FakeKubeApi:
    def __init__(self, namespace: str = "models") -> None:
        self.namespace = namespace
        self.rv = 100
        self.pods: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, object)
        self.compacted = 0  # watches from a version below this get 410
        self.watchers: list[_Watcher] = []
        self.requests: list[dict[str, str]] = []
        self.lists = 0
        self.watches = 0
        self.fail: list[int] = []  # statuses for the next requests
        self.gone_http = False  # answer expired watches with HTTP 410 instead of an event
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- control -------------------------------------------------------------------------
    def _emit(self, kind: str, obj: dict[str, Any], before: dict[str, Any] | None) -> None:
        self.log.append((self.rv, kind, obj))
        for w in self.watchers:
            old = before is not None and _matches(w.selector, before["metadata"]["labels"])
            new = _matches(w.selector, obj["metadata"]["labels"])
            if kind == "DELETED":
                if old or new:
                    w.queue.put_nowait(("DELETED", obj))
            elif new:
                w.queue.put_nowait(("ADDED" if not old else kind, obj))
            elif old:
                w.queue.put_nowait(("DELETED", obj))

    def put_pod(self, pod: dict[str, Any]) -> int:
        self.rv += 1
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = str(self.rv)
        name = pod["metadata"]["name"]
        before = self.pods.get(name)
        self.pods[name] = pod
        self._emit("MODIFIED" if before else "ADDED", pod, before)
        return self.rv

    def delete_pod(self, name: str) -> int:
        self.rv += 1
        pod = self.pods.pop(name)
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self._emit("DELETED", pod, pod)
        return self.rv

    def bookmark(self) -> None:
        self.rv += 1
        for w in self.watchers:
            if w.bookmarks:
                w.queue.put_nowait(("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                                 "metadata": {"resourceVersion": str(self.rv)}}))  # fmt: skip

    def close_watches(self) -> None:
        """End every open watch stream (an API server restart or its timeout)."""
        for w in self.watchers:
            w.queue.put_nowait(None)

    def compact(self) -> None:
        """Forget history: any watch from an older version gets 410 Gone."""
        self.compacted = self.rv
        self.log.clear()

    # --- HTTP ----------------------------------------------------------------------------
    async def _pods(self, request: web.Request) -> web.StreamResponse:
        q = dict(request.query)
        self.requests.append(q)
        if request.match_info["ns"] != self.namespace:
            return web.json_response({"items": [], "metadata": {"resourceVersion": str(self.rv)}})
        if self.fail:
            status = self.fail.pop(0)
            return web.json_response({"kind": "Status", "code": status}, status=status)
        selector = q.get("labelSelector", "")
        if q.get("watch", "").lower() not in ("true", "1"):  # Go's ParseBool: True too
            self.lists += 1
            items = [p for p in self.pods.values() if _matches(selector, p["metadata"]["labels"])]
            return web.Response(
                body=orjson.dumps({"kind": "PodList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(self.rv)}, "items": items}),
                content_type="application/json",
            )  # fmt: skip
        return await self._watch(request, q, selector)

    async def _watch(self, request: web.Request, q: dict, selector: str) -> web.StreamResponse:
        self.watches += 1
        since = int(q.get("resourceVersion") or 0)
        if since < self.compacted and self.gone_http:
            return web.json_response(
                {"kind": "Status", "code": 410, "reason": "Expired"}, status=410
            )
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if since < self.compacted:
            err = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                   "status": "Failure", "reason": "Expired", "code": 410,
                   "message": f"too old resource version: {since} ({self.compacted})"}}  # fmt: skip
            await resp.write(orjson.dumps(err) + b"\n")
            return resp
        w = _Watcher(selector, bookmarks=q.get("allowWatchBookmarks", "").lower() == "true")
        for rv, kind, obj in self.log:  # replay what the client missed
            if rv > since and _matches(selector, obj["metadata"]["labels"]):
                w.queue.put_nowait((kind, obj))
        self.watchers.append(w)
        timeout = float(q.get("timeoutSeconds") or 3600)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                try:
                    item = await asyncio.wait_for(w.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                if item is None:
                    break
                kind, obj = item
                await resp.write(orjson.dumps({"type": kind, "object": obj}) + b"\n")
        finally:
            self.watchers.remove(w)
        return resp

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
