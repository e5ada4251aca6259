"""Property-based requests against a live gateway (real simulator pods, real NATS), generated
from the gateway's own OpenAPI document (GET /openapi.json: the proxy routes' body schemas
and the scheduling headers): bodies that follow the schema with values swapped for arbitrary
JSON, fields dropped, unicode, sizes around the limits; raw bytes that are not JSON or are
nested too deeply; headers with valid and garbage values. No request gets a 500, every error
is an OpenAI error object, and the gateway is healthy afterwards with nothing in flight.

Bounded: a fixed number of examples (derandomized, so every run tries the same ones), small
max_tokens, and pods that report a 64-token context length, so no generation runs long."""

from __future__ import annotations

import asyncio
import http.client
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.subjects import Names
from tests.conftest import _cleanup
from tests.integration.gateway_harness import MODEL, Stack, gateway_stack

pytestmark = pytest.mark.timeout(240)

CONTEXT = 64
MAX_BODY = 64 * 1024
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ERROR_STATUSES = {400, 404, 405, 413, 502, 503}
PARSER_REJECTED = b"Invalid HTTP request received."  # uvicorn's answer, before the gateway


@dataclass(repr=False)
class Live:
    host: str
    port: int
    doc: dict[str, Any]
    stack: Stack

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            h = {"content-type": "application/json", **(headers or {})}
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, r.getheader("content-type") or "", r.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def live(infra) -> Iterator[Live]:
    """One gateway with two pods for the whole module, in a thread of its own (hypothesis
    drives plain blocking HTTP requests)."""
    names = Names(f"hrt-{uuid.uuid4().hex[:10]}")
    iso = {**infra, "names": names, "namespace": names.namespace}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    cm = gateway_stack(iso, n_pods=2, max_n=4, max_batch_prompts=4, max_body_bytes=MAX_BODY)

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    stack: Stack = run(cm.__aenter__())
    try:
        run(stack.snapshot(loads={p.name: {"max_model_len": CONTEXT} for p in stack.pods}))
        host, port = stack.url.removeprefix("http://").rsplit(":", 1)
        lv = Live(host, int(port), {}, stack)
        status, _, raw = lv.request("GET", "/openapi.json")
        assert status == 200
        lv.doc = orjson.loads(raw)
        yield lv
    finally:
        run(cm.__aexit__(None, None, None))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        asyncio.run(_cleanup(infra, names))


# --- strategies -----------------------------------------------------------------------------
TEXT = st.text(max_size=40)
INTS = st.integers(-(2**63), 2**64 - 1)  # what JSON numbers orjson takes as integers
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INTS | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


ODDS = [False] * 19 + [True]
SOMETIMES = [False] * 3 + [True] * 7  # an optional field is there 3 times in 10


def from_schema(schema: dict[str, Any], name: str = "") -> st.SearchStrategy:
    """Values that mostly follow ``schema`` (a small JSON Schema subset), sometimes any JSON."""
    if "oneOf" in schema:
        valid = st.one_of([from_schema(s, name) for s in schema["oneOf"]])
    elif "enum" in schema:
        valid = st.sampled_from(schema["enum"])
    else:
        t = schema.get("type")
        if name == "model":
            valid = st.sampled_from([MODEL, MODEL, MODEL, "other-model", "é" * 3])
        elif t == "object":
            props = schema.get("properties", {})
            required = set(schema.get("required", ()))

            @st.composite
            def obj(draw):
                out = {}
                for key, sub in props.items():
                    # required fields are usually there, optional ones sometimes
                    if draw(st.sampled_from(ODDS if key in required else SOMETIMES)) is False:
                        out[key] = draw(from_schema(sub, key))
                if draw(st.sampled_from(ODDS)):
                    out[draw(TEXT)] = draw(JSON_VALUES)  # an unknown field
                return out

            valid = obj()
        elif t == "array":
            valid = st.lists(from_schema(schema.get("items", {})), min_size=schema.get(
                "minItems", 0), max_size=4)  # fmt: skip
        elif t == "string":
            valid = TEXT
        elif t == "integer":
            lo = schema.get("minimum", -5)
            valid = st.integers(lo, lo + 5) if name in ("max_tokens", "max_completion_tokens",
                                                          "n", "dimensions") else INTS  # fmt: skip
        elif t == "number":
            valid = st.floats(allow_nan=False)
        elif t == "boolean":
            valid = st.booleans()
        elif t == "null":
            valid = st.none()
        else:
            valid = JSON_VALUES
    # now and then a value of any type in place of the valid one
    return st.sampled_from(ODDS).flatmap(lambda odd: JSON_VALUES if odd else valid)


def proxy_paths(doc: dict) -> list[str]:
    return sorted(p for p, ops in doc["paths"].items() if "post" in ops)


PROFILES = ["headroom", "llmd-predicted", "round-robin", "least-request", "prefix-aware"]


def header_values(schema: dict) -> st.SearchStrategy[str]:
    garbage = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=24)
    if schema.get("type") == "number":
        valid = st.one_of(st.floats(0.5, 1e6).map(repr), st.integers(1, 10**6).map(str),
                          st.floats(allow_nan=True, allow_infinity=True).map(repr))  # fmt: skip
    elif schema.get("type") == "integer":
        valid = st.integers(-1500, 1500).map(str)
    else:
        valid = st.sampled_from([*PROFILES, "1", "true", "0"])
    return st.sampled_from([False] * 4 + [True]).flatmap(lambda odd: garbage if odd else valid)


@st.composite
def headers_for(draw, doc: dict, path: str, most: int = 2) -> dict[str, str]:
    """Up to ``most`` headers of the document, mostly with valid values."""
    params = [p for p in doc["paths"][path]["post"]["parameters"] if p["in"] == "header"]
    chosen = draw(st.lists(st.sampled_from(params), max_size=most, unique_by=lambda p: p["name"]))
    return {p["name"]: draw(header_values(p["schema"])).strip() for p in chosen}


def check(status: int, ctype: str, raw: bytes) -> None:
    assert status == 200 or status in ERROR_STATUSES, (status, raw[:300])  # never a 500
    if status == 400 and raw == PARSER_REJECTED:  # HTTP itself is broken (a DEL in a header)
        return
    if status >= 400:
        err = orjson.loads(raw)["error"]
        assert isinstance(err["message"], str) and isinstance(err["type"], str), err
    elif ctype.startswith("text/event-stream"):
        assert raw.endswith(b"data: [DONE]\n\n"), raw[-200:]
    else:
        orjson.loads(raw)


# --- the properties ---------------------------------------------------------------------------
def test_openapi_document_has_the_proxy_routes(live):
    assert proxy_paths(live.doc) == ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
    for path in proxy_paths(live.doc):
        op = live.doc["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["required"]


def body_strategy(doc: dict, path: str) -> st.SearchStrategy:
    op = doc["paths"][path]["post"]
    return from_schema(op["requestBody"]["content"]["application/json"]["schema"])


def short(body: Any, path: str) -> Any:
    if isinstance(body, dict) and "max_tokens" not in body and path != "/v1/embeddings":
        body["max_tokens"] = 2  # keep generation short (the pods' default is up to 128)
    return body


@FUZZ
@given(data=st.data())
def test_schema_bodies_never_get_a_500(live, data):
    path = data.draw(st.sampled_from(proxy_paths(live.doc)))
    body = short(data.draw(body_strategy(live.doc, path)), path)
    headers = data.draw(headers_for(live.doc, path, most=1))
    check(*live.request("POST", path, orjson.dumps(body), headers))


VALID = {
    "/v1/completions": {"model": MODEL, "prompt": "hello", "max_tokens": 2},
    "/v1/chat/completions": {"model": MODEL, "max_tokens": 2, "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]},
    "/v1/embeddings": {"model": MODEL, "input": ["a", "b"]},
}  # fmt: skip


@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_headers_never_get_a_500(live, data):
    path = data.draw(st.sampled_from(sorted(VALID)))
    headers = data.draw(headers_for(live.doc, path, most=3))
    check(*live.request("POST", path, orjson.dumps(VALID[path]), headers))


RAW = st.one_of(
    st.binary(max_size=64),
    st.integers(1, 3000).map(lambda d: b'{"model":"m","prompt":"x","e":' + b"[" * d + b"]" * d + b"}"),
    st.integers(MAX_BODY - 64, MAX_BODY + 64).map(lambda n: b'{"model":"' + b"a" * n + b'"}'),
    st.sampled_from([b"", b"null", b"[]", b'"x"', b"{", b'{"model": "\\ud800"}',
                     b'{"model": "m", "prompt": "\xff\xfe"}', b'{"model": 1e999}',
                     b'{"model":"m","prompt":[18446744073709551616]}']),
)  # fmt: skip


@FUZZ
@given(path=st.sampled_from(["/v1/completions", "/v1/chat/completions", "/v1/embeddings"]),
       raw=RAW)  # fmt: skip
def test_raw_bodies_never_get_a_500(live, path, raw):
    check(*live.request("POST", path, raw))


@settings(FUZZ, max_examples=40)
@given(path=st.sampled_from(["/v1/models", "/health", "/metrics", "/openapi.json",
                             "/v1/nope", "/v1/completions"]),
       method=st.sampled_from(["GET", "PUT", "DELETE"]))  # fmt: skip
def test_other_routes_and_methods_never_get_a_500(live, path, method):
    status, _, raw = live.request(method, path)
    assert status < 500, (method, path, status, raw[:200])


def test_gateway_is_healthy_after_the_fuzzing(live):
    status, _, raw = live.request("GET", "/health")
    assert status == 200, raw
    assert orjson.loads(raw)["in_flight"] == 0
