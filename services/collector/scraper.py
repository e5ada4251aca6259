"""Scrape one pod: fetch its metrics page, parse it, build a :class:`PodRecord`.

No NATS here; the scraper needs only an aiohttp session, so tests drive it against plain HTTP
servers. Every failure becomes a record with ``ready=False``, an ``error`` message and a short
machine-readable reason (``error_reason``, also the metric label; the gateway's pod view
treats ``connect`` as the pod being down and every other one as a missed scrape):

    timeout      the whole fetch did not finish within the scrape timeout
    connect      the TCP connection failed (refused, unreachable, DNS)
    http_status  the pod answered with a status other than 200
    http_error   any other HTTP client error (disconnect mid-response, bad framing)
    too_large    the body exceeded the size limit
    no_metrics   the page parsed but held none of the engine's metrics
    parse        the parser raised (a bug: parsers count bad lines instead of raising)

The pod's context length is read from its model list (``GET /v1/models``: vLLM and SGLang
give each model's ``max_model_len``; vLLM's metrics do not carry it) after a successful
scrape, at most every ``model_info_refresh_s`` per pod (sooner again after a failure), and
published as ``PodRecord.max_model_len``. A failed or missing model list never fails the
scrape: the last known value (or None) stands.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from services.collector.discovery import PodTarget
from services.collector.parsers import ParseResult, get_parser
from shared.pod_credentials import PodCredentials
from shared.schemas import PodRecord

log = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 240
_MODEL_INFO_MAX_BYTES = 1 << 20
_MODEL_INFO_RETRY_S = 5.0  # after a failed model-list fetch


@dataclass(slots=True)
class ScrapeOutcome:
    record: PodRecord
    duration_s: float
    reason: str | None = None  # None on success
    ignored_lines: int = 0
    result: ParseResult | None = None  # the parsed page (on success)


class ScrapeFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def max_model_len(models: Any) -> int | None:
    """The smallest positive ``max_model_len`` of an OpenAI ``/v1/models`` list (every
    model of a vLLM pod, LoRA adapters included, has the base model's), else None."""
    data = models.get("data") if isinstance(models, dict) else None
    lens = [
        m["max_model_len"]
        for m in data or ()
        if isinstance(m, dict)
        and isinstance(m.get("max_model_len"), int)
        and not isinstance(m.get("max_model_len"), bool)
        and m["max_model_len"] > 0
    ]
    return min(lens) if lens else None


def record_from_result(
    target: PodTarget,
    engine: str,
    result: ParseResult,
    scraped_at: float,
    context_length: int | None = None,
) -> PodRecord:
    """A ready record from a parsed page (pure)."""
    return PodRecord(
        name=target.name,
        url=target.url,
        ready=True,
        scraped_at=scraped_at,
        models=list(result.models),
        engine=engine,
        waiting=result.waiting,
        running=result.running,
        kv_usage=result.kv_usage,
        prefix_hit_rate=result.prefix_hit_rate,
        lora_adapters=list(result.lora_adapters),
        prefill_backlog=result.prefill_backlog,
        slots_used=result.slots_used,
        kv_capacity_tokens=result.kv_capacity_tokens,
        max_model_len=context_length,
        # the pod's Kubernetes label wins over what its page says
        hardware_class=target.hardware_class or result.hardware_class,
    )


def error_record(
    target: PodTarget, engine: str, error: str, scraped_at: float, reason: str | None = None
) -> PodRecord:
    """A not-ready record carrying the failure and its ``reason`` (pure)."""
    return PodRecord(
        name=target.name,
        url=target.url,
        ready=False,
        scraped_at=scraped_at,
        engine=engine,
        error=error[:_MAX_ERROR_CHARS],
        error_reason=reason,
    )


def _describe(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Scraper:
    """Fetches and parses one pod's metrics page per call to :meth:`scrape`.

    ``clock`` gives unix time for ``scraped_at``; ``timer`` is a monotonic clock for durations.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        engine: str = "vllm",
        timeout_s: float = 1.0,
        metrics_path: str = "/metrics",
        max_body_bytes: int = 8 << 20,
        model_info_path: str = "/v1/models",
        model_info_refresh_s: float = 60.0,
        credentials: PodCredentials | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._session = session
        self.engine = engine
        self._parse = get_parser(engine)
        self.timeout_s = timeout_s
        self._path = metrics_path
        self._max_body = max_body_bytes
        self._clock = clock
        self._timer = timer
        self._info_path = model_info_path
        self._info_refresh_s = model_info_refresh_s
        self._credentials = credentials  # Authorization for the model list (pods' API key)
        # pod name -> (url, max_model_len, when to fetch again (timer))
        self._info: dict[str, tuple[str, int | None, float]] = {}

    def forget(self, name: str) -> None:
        """Drop what is cached about a pod that left."""
        self._info.pop(name, None)

    async def context_length(self, target: PodTarget) -> int | None:
        """The pod's max_model_len (cached; fetched when due). Never raises."""
        if not self._info_path:
            return None
        cached = self._info.get(target.name)
        now = self._timer()
        if cached is not None and cached[0] == target.url and now < cached[2]:
            return cached[1]
        known = cached[1] if cached is not None and cached[0] == target.url else None
        headers = None
        if self._credentials is not None:
            self._credentials.reload_if_changed()
            auth = self._credentials.authorization({})
            headers = {"Authorization": auth} if auth else None
        try:
            async with asyncio.timeout(self.timeout_s):
                url = target.url + self._info_path
                async with self._session.get(url, headers=headers) as resp:
                    if resp.status != 200:
                        raise ValueError(f"HTTP {resp.status}")
                    body = await resp.content.read(_MODEL_INFO_MAX_BYTES + 1)
            if len(body) > _MODEL_INFO_MAX_BYTES:
                raise ValueError("model list too large")
            value = max_model_len(orjson.loads(body))
            next_at = now + self._info_refresh_s
        except (TimeoutError, aiohttp.ClientError, ValueError) as e:
            log.debug("model list of %s: %s", target.name, _describe(e))
            value, next_at = known, now + min(_MODEL_INFO_RETRY_S, self._info_refresh_s)
        self._info[target.name] = (target.url, value, next_at)
        return value

    def metrics_url(self, target: PodTarget) -> str:
        return target.metrics_url or target.url + self._path

    async def _fetch(self, url: str) -> bytes:
        async with self._session.get(url) as resp:
            if resp.status != 200:
                raise ScrapeFailed("http_status", f"GET {self._path} returned HTTP {resp.status}")
            if resp.content_length is not None and resp.content_length > self._max_body:
                raise ScrapeFailed("too_large", f"body of {resp.content_length} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_any():
                size += len(chunk)
                if size > self._max_body:
                    raise ScrapeFailed("too_large", f"body over {self._max_body} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    async def scrape(self, target: PodTarget) -> ScrapeOutcome:
        start = self._timer()
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    body = await self._fetch(self.metrics_url(target))
            except TimeoutError:
                raise ScrapeFailed(
                    "timeout", f"no complete response within {self.timeout_s:g}s"
                ) from None
            except aiohttp.ClientConnectorError as e:
                raise ScrapeFailed("connect", _describe(e)) from e
            except aiohttp.ClientError as e:
                raise ScrapeFailed("http_error", _describe(e)) from e
            try:
                result = self._parse(body.decode("utf-8", errors="replace"))
            except Exception as e:
                log.exception("parser failed on %s", target.name)
                raise ScrapeFailed("parse", _describe(e)) from e
            if result.found == 0:
                raise ScrapeFailed("no_metrics", f"no {self.engine} metrics in the response")
        except ScrapeFailed as f:
            return ScrapeOutcome(
                record=error_record(
                    target, self.engine, f"{f.reason}: {f}", self._clock(), f.reason
                ),
                duration_s=self._timer() - start,
                reason=f.reason,
            )
        context = await self.context_length(target)
        return ScrapeOutcome(
            record=record_from_result(target, self.engine, result, self._clock(), context),
            duration_s=self._timer() - start,
            ignored_lines=result.ignored,
            result=result,
        )
