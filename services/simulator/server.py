"""HTTP shell of a simulated vLLM pod: one aiohttp site per pod, the engine run in real time.

Each pod has a driver task: while the engine has work it calls ``step(now)``, sleeps until
the step's planned end (the schedule advances by the modelled durations, so sleep overshoot
does not accumulate), then hands the step's tokens to per-request queues. With no work it
waits on an event that request handlers set.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from typing import Any, NoReturn

import orjson
from aiohttp import web
from opentelemetry.trace import SpanKind
from prometheus_client import CONTENT_TYPE_LATEST

from services.simulator import openai_api as oa
from services.simulator.engine import Engine, StepOutcome, TokenEvent
from services.simulator.faults import Fault, FaultState
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import get_profile
from services.simulator.settings import DEFAULT_MODEL
from shared import trace_context
from shared.telemetry import Telemetry
from shared.tokenizer import synth_text, tokenize

log = logging.getLogger(__name__)

MAX_LAG_S = 0.05  # behind schedule by more than this: restart the schedule from "now"
_ENGINE_FAILED = None  # queue sentinel: the driver died


class SimPod:
    """One simulated model-server pod. Build with :func:`start_pod`."""

    def __init__(
        self, name: str, profile: str, model: str, seed: int, telemetry: Telemetry | None = None
    ) -> None:
        self.name = name
        self.tel = telemetry or Telemetry.disabled("simulator")
        self.model = model
        self.seed = seed
        self.engine = Engine(get_profile(profile), seed)
        self.metrics = PodMetrics(self.engine, model, pod_id=name)
        self.faults = FaultState()
        self.url = ""
        self._queues: dict[str, asyncio.Queue[TokenEvent | None]] = {}
        self._wake = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._created = int(time.time())
        self._ids = itertools.count()

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/sim/fault", self._fault)
        app.router.add_get("/sim/fault", self._fault_state)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        self._driver = asyncio.create_task(self._drive(), name=f"sim-driver-{self.name}")
        log.info("pod started", extra={"pod": self.name})

    async def stop(self) -> None:
        """Stop abruptly, like a pod going away: the engine stops, in-flight streams are
        cut (non-streaming requests get a 500), then the listener closes."""
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver
            self._driver = None
        for q in self._queues.values():
            q.put_nowait(_ENGINE_FAILED)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- driver -------------------------------------------------------------------------

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            while True:
                if not self.engine.has_work():
                    self._wake.clear()
                    await self._wake.wait()
                    start = loop.time()
                now = loop.time()
                if now - start > MAX_LAG_S:
                    start = now
                out = self.engine.step(start)
                end = start + out.duration_s
                delay = end - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                self._deliver(out)
                start = end
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("engine driver failed", extra={"pod": self.name})
            for q in self._queues.values():
                q.put_nowait(_ENGINE_FAILED)
            raise

    def _deliver(self, out: StepOutcome) -> None:
        self.metrics.record(out)
        for ev in out.events:
            q = self._queues.get(ev.req_id)
            if q is not None:
                q.put_nowait(ev)

    # ---- simple endpoints ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._driver is not None and not self._driver.done()

    async def _health(self, _: web.Request) -> web.Response:
        if not self.running:
            return _json({"status": "engine not running"}, status=503)
        return _json({"status": "ok"})

    async def _models(self, _: web.Request) -> web.Response:
        body = oa.models_response(self.model, self._created, self.engine.max_request_tokens)
        return _json(body)

    async def _metrics(self, _: web.Request) -> web.Response:
        if self.faults.metrics_delay_s > 0:  # fault injection: a slow /metrics
            await asyncio.sleep(self.faults.metrics_delay_s)
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _fault(self, request: web.Request) -> web.Response:
        try:
            self.faults.configure(await _read_json(request))
        except oa.ApiError as e:
            return _error(e)
        log.info("fault set %s", self.faults.state(), extra={"pod": self.name})
        return _json(self.faults.state())

    async def _fault_state(self, _: web.Request) -> web.Response:
        return _json(self.faults.state())

    # ---- generation ---------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        if self.tel.enabled:
            return await self._traced(request, chat=False)
        return await self._generate(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.tel.enabled:
            return await self._traced(request, chat=True)
        return await self._generate(request, chat=True)

    async def _traced(self, request: web.Request, chat: bool) -> web.StreamResponse:
        """The request as a SERVER span, child of the caller's ``traceparent`` (the gateway's
        pod call), covering the whole generation (streamed or not)."""
        with self.tel.span(
            f"POST {request.path}",
            kind=SpanKind.SERVER,
            context=trace_context.extract(request.headers),
            attributes={
                "http.request.method": "POST",
                "url.path": request.path,
                "headroom.pod": self.name,
                "gen_ai.system": "vllm",
                "gen_ai.request.model": self.model,
            },
        ) as span:
            resp = await self._generate(request, chat)
            span.set_attribute("http.response.status_code", resp.status)
            return resp

    def _validate(self, req: oa.GenRequest) -> list[int]:
        if req.model is not None and req.model != self.model:
            raise oa.ApiError(
                404, f"The model `{req.model}` does not exist.", "model", "NotFoundError", 404
            )
        tokens = tokenize(req.prompt)
        if not tokens:
            raise oa.ApiError(400, "The prompt must contain at least one token.", "prompt")
        limit = self.engine.max_request_tokens
        if len(tokens) + req.max_tokens > limit:
            raise oa.ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {len(tokens) + req.max_tokens} tokens ({len(tokens)} in the "
                f"messages, {req.max_tokens} in the completion).",
                "max_tokens",
            )
        return tokens

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            req = oa.parse_chat(body) if chat else oa.parse_completion(body)
            prompt_tokens = self._validate(req)
        except oa.ApiError as e:
            return _error(e)
        if not self.running:
            return _error(oa.ApiError(503, "Engine is not running.", None, "server_error", 503))
        fault = self.faults.take()
        if fault is not None and fault.mode == "error":
            return _error(
                oa.ApiError(fault.status, "Simulated fault.", None, "server_error", fault.status)
            )
        if fault is not None and fault.mode == "hang":  # not even a status line
            await asyncio.sleep(fault.delay_s)
            _drop(request)
        out_seed = hash((self.seed, tuple(prompt_tokens))) & 0x7FFFFFFF
        text = synth_text(req.max_tokens, out_seed)
        words = text.split(" ")
        pieces = [words[0], *(" " + w for w in words[1:])]
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        queue: asyncio.Queue[TokenEvent | None] = asyncio.Queue()
        self._queues[rid] = queue
        loop = asyncio.get_running_loop()
        self.engine.submit(
            rid, prompt_tokens, req.max_tokens, loop.time(), output_tokens=tokenize(text)
        )
        self._wake.set()
        ctx = _Ctx(req, rid, int(time.time()), self.model, len(prompt_tokens), fault)
        try:
            if req.stream:
                return await self._stream(request, ctx, queue, pieces)
            return await self._collect(request, ctx, queue, text)
        finally:
            self._queues.pop(rid, None)
            if rid in self.engine:
                self.engine.abort(rid)

    async def _collect(
        self, request: web.Request, ctx: _Ctx, queue: asyncio.Queue, text: str
    ) -> web.StreamResponse:
        n = 0
        while True:
            ev = await queue.get()
            if ev is _ENGINE_FAILED:
                return _error(oa.ApiError(500, "Engine failed.", None, "server_error", 500))
            n += 1
            if ctx.drop_after is not None and n >= ctx.drop_after:
                _drop(request)
            if ev.finished:
                break
        if ctx.drop_after is not None:  # max_tokens < after_tokens: still no response
            _drop(request)
        body = oa.full_response(ctx.req, ctx.rid, ctx.created, ctx.model, text, ctx.n_prompt, n)
        return _json(body)

    async def _stream(
        self, request: web.Request, ctx: _Ctx, queue: asyncio.Queue, pieces: list[str]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        if ctx.drop_after == 0:
            _drop(request)
        if ctx.malformed_after == 0:
            await resp.write(b"data: {not json\n\n")
            _drop(request)
        req, n, done = ctx.req, 0, False
        while not done:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            buf = bytearray()
            for ev in batch:
                if ev is _ENGINE_FAILED:
                    await resp.write(bytes(buf))
                    _drop(request)
                chunk = oa.chunk(
                    req, ctx.rid, ctx.created, ctx.model, pieces[ev.index], ev.index, ev.finished
                )
                buf += b"data: " + orjson.dumps(chunk) + b"\n\n"
                n += 1
                if ctx.drop_after is not None and n >= ctx.drop_after:
                    await resp.write(bytes(buf))
                    _drop(request)
                if ctx.malformed_after is not None and n >= ctx.malformed_after:
                    await resp.write(bytes(buf) + b"data: {not json\n\n")
                    _drop(request)
                done = ev.finished
            await resp.write(bytes(buf))
        if ctx.drop_after is not None:  # fewer tokens than after_tokens: drop before [DONE]
            _drop(request)
        tail = b""
        if req.include_usage:
            usage = oa.usage_chunk(req, ctx.rid, ctx.created, ctx.model, ctx.n_prompt, n)
            tail = b"data: " + orjson.dumps(usage) + b"\n\n"
        await resp.write(tail + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


class _Ctx:
    __slots__ = ("created", "drop_after", "malformed_after", "model", "n_prompt", "req", "rid")

    def __init__(
        self,
        req: oa.GenRequest,
        rid: str,
        created: int,
        model: str,
        n_prompt: int,
        fault: Fault | None,
    ) -> None:
        self.req = req
        self.rid = rid
        self.created = created
        self.model = model
        self.n_prompt = n_prompt
        self.drop_after = fault.after_tokens if fault is not None and fault.mode == "drop" else None
        self.malformed_after = (
            fault.after_tokens if fault is not None and fault.mode == "malformed" else None
        )


def _drop(request: web.Request) -> NoReturn:
    """Abort the TCP connection (RST, no more bytes) and end the handler."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    raise asyncio.CancelledError


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise oa.ApiError(400, f"Malformed JSON body: {e}") from None


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(e: oa.ApiError) -> web.Response:
    return _json(e.body(), status=e.status)


async def start_pod(
    name: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    profile: str = "h100-llama3-8b",
    model: str = DEFAULT_MODEL,
    seed: int = 0,
    telemetry: Telemetry | None = None,
) -> SimPod:
    """Start one simulated pod listening on ``host:port`` (0 = a free port); ``pod.url``
    has the bound port. Call ``await pod.stop()`` to shut it down."""
    pod = SimPod(name, profile, model, seed, telemetry)
    await pod.start(host, port)
    return pod
