"""Request limits (services/gateway/limits.py): body size while reading, nesting depth, n and
batch size, the context length of the candidates (what the pods report, else the default)."""

from __future__ import annotations

import orjson
import pytest

from services.gateway import limits
from services.gateway.errors import GatewayError
from services.gateway.gateway import Gateway, context_length
from services.gateway.openai_request import parse_request
from services.gateway.scheduling.pod_view import PodView
from services.gateway.settings import GatewaySettings
from shared.schemas import PodRecord, PodSnapshot


def receiver(*chunks: bytes):
    msgs = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
            for i, c in enumerate(chunks)]  # fmt: skip
    got: list[int] = []

    async def receive():
        got.append(1)
        return msgs[len(got) - 1]

    return receive, got


async def test_body_refused_from_content_length_before_reading():
    receive, got = receiver(b"x" * 10)
    with pytest.raises(GatewayError) as e:
        await limits.read_body(receive, {"content-length": "2000"}, 1000)
    assert (e.value.status, e.value.limit, e.value.code) == (413, "body_size", "request_too_large")
    assert got == []  # not a byte read


async def test_body_refused_while_streaming_in():
    receive, got = receiver(b"a" * 600, b"b" * 600, b"c" * 600)
    with pytest.raises(GatewayError) as e:
        await limits.read_body(receive, {}, 1000)
    assert e.value.status == 413 and len(got) == 2  # stopped at the chunk that passed it
    receive, _ = receiver(b"a" * 500, b"b" * 500)
    assert (
        await limits.read_body(receive, {"content-length": "1000"}, 1000) == b"a" * 500 + b"b" * 500
    )


def nested(depth: int) -> bytes:
    return b'{"model":"m","prompt":"x","e":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize(("depth", "over"), [(1, False), (64, False), (65, True), (300, True)])
def test_depth(depth, over):
    raw = nested(depth) if depth > 1 else b'{"a":1}'
    assert limits.depth_exceeds(raw, orjson.loads(raw), 64) is over


def test_depth_counts_objects_and_arrays_and_skips_bracketless_bodies():
    raw = b'{"a":{"b":[{"c":[1]}]},"d":"[[[[[[[[[["}'
    assert limits.depth_exceeds(raw, orjson.loads(raw), 5) is False
    assert limits.depth_exceeds(raw, orjson.loads(raw), 4) is True
    wide = {"m": [[1]] * 1000}  # many brackets, shallow
    assert limits.depth_exceeds(orjson.dumps(wide), wide, 3) is False


def test_orjson_limits_the_gateway_relies_on():
    """orjson (pinned) refuses to decode deeper than 1,024 levels with a JSONDecodeError
    mentioning its depth limit (decode_body reports it as json_too_deep), and refuses to
    encode deeper than 254 (why max_json_depth is at most 250: the upstream body is
    re-encoded)."""
    with pytest.raises(orjson.JSONDecodeError, match="depth limit"):
        orjson.loads(b"[" * 1025 + b"]" * 1025)
    orjson.dumps(orjson.loads(b"[" * 250 + b"]" * 250))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(orjson.loads(b"[" * 300 + b"]" * 300))
    with pytest.raises(ValueError):
        GatewaySettings(max_json_depth=251)


@pytest.mark.parametrize("depth", [300, 2000])
def test_parse_limited_refuses_deep_bodies(depth):
    with pytest.raises(GatewayError) as e:
        limits.parse_limited(nested(depth), "completions", GatewaySettings())
    assert (e.value.status, e.value.code, e.value.limit) == (400, "json_too_deep", "json_depth")


def test_n_and_batch_limits():
    s = GatewaySettings(max_n=4, max_batch_prompts=2)
    body = {"model": "m", "prompt": "x", "n": 5}
    with pytest.raises(GatewayError) as e:
        limits.parse_limited(orjson.dumps(body), "completions", s)
    assert (e.value.param, e.value.limit) == ("n", "n")
    body = {"model": "m", "input": ["a", "b", "c"]}
    with pytest.raises(GatewayError) as e:
        limits.parse_limited(orjson.dumps(body), "embeddings", s)
    assert (e.value.param, e.value.limit) == ("input", "batch")
    ok = limits.parse_limited(orjson.dumps({"model": "m", "prompt": ["a", "b"], "n": 4}),
                              "completions", s)  # fmt: skip
    assert ok.decode_tokens(10) == 80  # 2 prompts x 4 choices x 10 tokens


def view_with(*lens: int | None) -> PodView:
    v = PodView(stale_after_s=60)
    pods = [PodRecord(name=f"p{i}", url=f"http://p{i}", ready=True, scraped_at=0.0, models=["m"],
                      max_model_len=n) for i, n in enumerate(lens)]  # fmt: skip
    v.apply_snapshot(PodSnapshot(pool="p", ts=0.0, pods=pods))
    return v


def chat(max_tokens: int | None = None):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return parse_request(orjson.dumps(body), "chat")


def test_requests_are_routed_among_the_pods_they_fit():
    gw = Gateway(GatewaySettings(default_context_length=1000))
    cands = view_with(100, 500, None).candidates("m", 0.0)
    assert [context_length(c, 1000) for c in cands] == [100, 500, 1000]
    assert gw._fitting(cands, chat(50), 40) is cands  # all fit: the same list
    assert [c.name for c in gw._fitting(cands, chat(100), 40)] == ["p1", "p2"]
    assert [c.name for c in gw._fitting(cands, chat(), 900)] == ["p2"]  # no max_tokens
    with pytest.raises(GatewayError) as e:
        gw._fitting(cands, chat(), 1001)
    err = e.value
    assert (err.status, err.code, err.param, err.limit) == (
        400, "context_length_exceeded", "messages", "context_length",
    )  # fmt: skip
    assert "maximum context length is 1000 tokens" in err.message and "1001" in err.message
    with pytest.raises(GatewayError) as e:
        gw._fitting(cands, chat(10**9), 3)
    assert (e.value.param, e.value.limit) == ("max_tokens", "max_tokens")
    assert f"{10**9 + 3} tokens (3 in the messages, {10**9} in the completion)" in e.value.message


def test_embeddings_need_only_their_prompt():
    gw = Gateway(GatewaySettings())
    req = parse_request(orjson.dumps({"model": "m", "input": ["a", "b"]}), "embeddings")
    assert req.decode_tokens(256) == 0 and not req.generates
    cands = view_with(10).candidates("m", 0.0)
    assert gw._fitting(cands, req, 10) is cands
    with pytest.raises(GatewayError) as e:
        gw._fitting(cands, req, 11)
    assert e.value.param == "input"
