"""HTTP shell of a simulated vLLM pod: one aiohttp site per pod, the engine run in real time.

Each pod has a driver task: while the engine has work it calls ``step(now)``, sleeps until
the step's planned end (the schedule advances by the modelled durations, so sleep overshoot
does not accumulate), then hands the step's tokens to per-request queues. With no work it
waits on an event that request handlers set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn

import orjson
from aiohttp import web
from opentelemetry.trace import SpanKind
from prometheus_client import CONTENT_TYPE_LATEST

from services.simulator import openai_api as oa
from services.simulator.engine import Engine, StepOutcome, TokenEvent
from services.simulator.faults import Fault, FaultState
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import Profile, get_profile
from services.simulator.settings import DEFAULT_MODEL, LISTEN_BACKLOG
from shared import trace_context
from shared.openai_prompt import Prompt, prompt_tokens
from shared.telemetry import Telemetry
from shared.tokenizer import synth_text, tokenize, tokenize_chunked

log = logging.getLogger(__name__)

MAX_LAG_S = 0.05  # behind schedule by more than this: restart the schedule from "now"
OFFLOAD_BYTES = 64 * 1024  # request bodies larger than this are tokenized in a thread
_ENGINE_FAILED = None  # queue sentinel: the driver died


class SimPod:
    """One simulated model-server pod. Build with :func:`start_pod`."""

    def __init__(
        self,
        name: str,
        profile: str | Profile,
        model: str,
        seed: int,
        telemetry: Telemetry | None = None,
        api_keys: Sequence[str] = (),
    ) -> None:
        self.name = name
        # like vLLM --api-key: /v1/* needs "Authorization: Bearer <one of them>"
        self._key_digests = [hashlib.sha256(k.encode()).digest() for k in api_keys if k]
        self.tel = telemetry or Telemetry.disabled("simulator")
        self.model = model
        self.seed = seed
        self.engine = Engine(get_profile(profile) if isinstance(profile, str) else profile, seed)
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

    async def start(self, host: str, port: int, backlog: int = LISTEN_BACKLOG) -> None:
        """Listen on ``host:port`` with a kernel accept queue of ``backlog`` connections
        (vLLM's uvicorn: 2048; aiohttp's own default, 128, fills within one busy event-loop
        turn when a gateway opens hundreds of connections at once, and the kernel then drops
        SYNs: the gateway's connects time out against a live pod)."""
        middlewares = [self._count] + ([self._check_api_key] if self._key_digests else [])
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/sim/fault", self._fault)
        app.router.add_get("/sim/fault", self._fault_state)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=backlog)
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

    @web.middleware
    async def _check_api_key(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """vLLM's API-key check: every path under /v1 needs a configured key as a bearer
        token (compared as SHA-256 digests in constant time), else 401
        ``{"error": "Unauthorized"}``; /health, /metrics and /sim/* stay open."""
        if request.path.startswith("/v1") and not self._authorized(request):
            return _json({"error": "Unauthorized"}, status=401)
        return await handler(request)

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        ok = False
        for d in self._key_digests:
            ok |= hmac.compare_digest(digest, d)
        return ok

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

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Count every request by handler, method and status class (http_requests_total)."""
        status = 500  # cancelled (the client went away) or failed
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            resource = request.match_info.route.resource
            path = resource.canonical if resource is not None else "none"
            self.metrics.count_http(path, request.method, status)

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

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model:
            raise oa.ApiError(
                404, f"The model `{model}` does not exist.", "model", "NotFoundError", 404
            )

    async def _prompt_tokens(
        self, request: web.Request, prompts: list[Prompt], max_tokens: int
    ) -> list[list[int]]:
        """Each prompt's tokens, checked against the context length as vLLM does. A large
        body is tokenized in a thread, in chunks (vLLM tokenizes off its engine loop too):
        the pods of one simulator process share an event loop."""
        if (request.content_length or 0) > OFFLOAD_BYTES:
            return await asyncio.to_thread(self._count_tokens, prompts, max_tokens, True)
        return self._count_tokens(prompts, max_tokens)

    def _count_tokens(
        self, prompts: list[Prompt], max_tokens: int, chunked: bool = False
    ) -> list[list[int]]:
        out = []
        limit = self.engine.max_request_tokens
        tok = tokenize_chunked if chunked else tokenize
        for prompt in prompts:
            tokens = prompt_tokens(prompt, tok)
            if not tokens:
                raise oa.ApiError(400, "The prompt must contain at least one token.", "prompt")
            if len(tokens) + max_tokens > limit:
                raise oa.ApiError(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {len(tokens) + max_tokens} tokens ({len(tokens)} in the "
                    f"messages, {max_tokens} in the completion).",
                    "max_tokens",
                )
            out.append(tokens)
        return out

    def _refusal(self) -> web.Response | None:
        """A not-running engine or an error fault answers instead of the engine."""
        if not self.running:
            return _error(oa.ApiError(503, "Engine is not running.", None, "server_error", 503))
        return None

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            req = oa.parse_chat(body) if chat else oa.parse_completion(body)
            self._check_model(req.model)
            prompts = await self._prompt_tokens(request, req.prompts, req.max_tokens)
        except oa.ApiError as e:
            return _error(e)
        if (refused := self._refusal()) is not None:
            return refused
        fault = self.faults.take()
        if fault is not None and fault.mode == "error":
            return _error(
                oa.ApiError(fault.status, "Simulated fault.", None, "server_error", fault.status)
            )
        if fault is not None and fault.mode == "hang":  # not even a status line
            await asyncio.sleep(fault.delay_s)
            _drop(request)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        queue: asyncio.Queue[TokenEvent | None] = asyncio.Queue()
        now = asyncio.get_running_loop().time()
        # one engine request per (prompt, sample): choice i * n + j
        texts: list[str] = []
        pieces: list[list[str]] = []
        choice_of: dict[str, int] = {}
        for tokens in prompts:
            for j in range(req.n):
                key = (self.seed, tuple(tokens)) if j == 0 else (self.seed, tuple(tokens), j)
                text = synth_text(req.max_tokens, hash(key) & 0x7FFFFFFF)
                c = len(texts)
                p = oa.output_pieces(text.split(" "), req.tool)
                texts.append("".join(p))
                pieces.append(p)
                eid = rid if c == 0 else f"{rid}/{c}"
                choice_of[eid] = c
                self._queues[eid] = queue
                self.engine.submit(eid, tokens, req.max_tokens, now, output_tokens=tokenize(text))
        self._wake.set()
        n_prompt = sum(len(t) for t in prompts)
        ctx = _Ctx(req, rid, int(time.time()), self.model, n_prompt, fault, choice_of)
        try:
            if req.stream:
                return await self._stream(request, ctx, queue, pieces)
            return await self._collect(request, ctx, queue, texts)
        finally:
            for eid in choice_of:
                self._queues.pop(eid, None)
                if eid in self.engine:
                    self.engine.abort(eid)

    async def _collect(
        self, request: web.Request, ctx: _Ctx, queue: asyncio.Queue, texts: list[str]
    ) -> web.StreamResponse:
        n = 0
        running = len(texts)
        while running:
            ev = await queue.get()
            if ev is _ENGINE_FAILED:
                return _error(oa.ApiError(500, "Engine failed.", None, "server_error", 500))
            n += 1
            if ctx.drop_after is not None and n >= ctx.drop_after:
                _drop(request)
            if ev.finished:
                running -= 1
        if ctx.drop_after is not None:  # max_tokens < after_tokens: still no response
            _drop(request)
        body = oa.full_response(ctx.req, ctx.rid, ctx.created, ctx.model, texts, ctx.n_prompt, n)
        return _json(body)

    async def _stream(
        self, request: web.Request, ctx: _Ctx, queue: asyncio.Queue, pieces: list[list[str]]
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
        req, n, running = ctx.req, 0, len(pieces)
        while running:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            buf = bytearray()
            for ev in batch:
                if ev is _ENGINE_FAILED:
                    await resp.write(bytes(buf))
                    _drop(request)
                c = ctx.choice_of[ev.req_id]
                chunk = oa.chunk(
                    req, ctx.rid, ctx.created, ctx.model, pieces[c][ev.index], ev.index,
                    ev.finished, c,
                )  # fmt: skip
                buf += b"data: " + orjson.dumps(chunk) + b"\n\n"
                n += 1
                if ctx.drop_after is not None and n >= ctx.drop_after:
                    await resp.write(bytes(buf))
                    _drop(request)
                if ctx.malformed_after is not None and n >= ctx.malformed_after:
                    await resp.write(bytes(buf) + b"data: {not json\n\n")
                    _drop(request)
                if ev.finished:
                    running -= 1
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

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """Each input is a prefill-only engine request (one token: the end of its prefill,
        no decode step); the reply comes when all are done."""
        try:
            req = oa.parse_embedding(await _read_json(request))
            self._check_model(req.model)
            prompts = await self._prompt_tokens(request, req.prompts, 1)
        except oa.ApiError as e:
            return _error(e)
        if (refused := self._refusal()) is not None:
            return refused
        fault = self.faults.take()
        if fault is not None:  # drop: no reply at all
            if fault.mode == "drop":
                _drop(request)
            return _error(
                oa.ApiError(fault.status, "Simulated fault.", None, "server_error", fault.status)
            )
        rid = f"embd-{uuid.uuid4().hex}"
        queue: asyncio.Queue[TokenEvent | None] = asyncio.Queue()
        now = asyncio.get_running_loop().time()
        eids = [rid if i == 0 else f"{rid}/{i}" for i in range(len(prompts))]
        for eid, tokens in zip(eids, prompts, strict=True):
            self._queues[eid] = queue
            self.engine.submit(eid, tokens, 1, now)
        self._wake.set()
        try:
            for _ in eids:
                if await queue.get() is _ENGINE_FAILED:
                    return _error(oa.ApiError(500, "Engine failed.", None, "server_error", 500))
        finally:
            for eid in eids:
                self._queues.pop(eid, None)
                if eid in self.engine:
                    self.engine.abort(eid)
        vectors = [oa.embedding_vector(t, req.dimensions) for t in prompts]
        n_prompt = sum(len(t) for t in prompts)
        body = oa.embeddings_response(req, rid, int(time.time()), self.model, vectors, n_prompt)
        return _json(body)


class _Ctx:
    __slots__ = (
        "choice_of", "created", "drop_after", "malformed_after", "model", "n_prompt", "req", "rid",
    )  # fmt: skip

    def __init__(
        self,
        req: oa.GenRequest,
        rid: str,
        created: int,
        model: str,
        n_prompt: int,
        fault: Fault | None,
        choice_of: dict[str, int],
    ) -> None:
        self.req = req
        self.rid = rid
        self.created = created
        self.model = model
        self.n_prompt = n_prompt
        self.choice_of = choice_of  # engine request id -> choice index
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
    profile: str | Profile = "h100-llama3-8b",
    model: str = DEFAULT_MODEL,
    seed: int = 0,
    telemetry: Telemetry | None = None,
    api_keys: Sequence[str] = (),
    backlog: int = LISTEN_BACKLOG,
) -> SimPod:
    """Start one simulated pod listening on ``host:port`` (0 = a free port); ``pod.url``
    has the bound port. With ``api_keys``, /v1/* needs one of them as a bearer token (vLLM
    ``--api-key``). Call ``await pod.stop()`` to shut it down."""
    pod = SimPod(name, profile, model, seed, telemetry, api_keys)
    await pod.start(host, port, backlog)
    return pod
