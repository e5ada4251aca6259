"""Request validation, chat rendering and the upstream body."""

from __future__ import annotations

import orjson
import pytest

from services.gateway.errors import GatewayError, error_body, sse_error_event
from services.gateway.openai_request import parse_request
from services.gateway.prompt import request_tokens
from shared.tokenizer import render_chat, tokenize


def j(obj) -> bytes:
    return orjson.dumps(obj)


@pytest.mark.parametrize(
    ("kind", "raw", "param"),
    [
        ("completions", b"{not json", None),
        ("completions", b"[1, 2]", None),
        ("completions", j({"prompt": "hi"}), "model"),
        ("completions", j({"model": 3, "prompt": "hi"}), "model"),
        ("completions", j({"model": "", "prompt": "hi"}), "model"),
        ("completions", j({"model": "m"}), "prompt"),
        ("completions", j({"model": "m", "prompt": 5}), "prompt"),
        ("completions", j({"model": "m", "prompt": ["a", 1]}), "prompt"),
        ("completions", j({"model": "m", "prompt": []}), "prompt"),
        ("completions", j({"model": "m", "prompt": "x", "max_tokens": "5"}), "max_tokens"),
        ("completions", j({"model": "m", "prompt": "x", "max_tokens": 0}), "max_tokens"),
        ("completions", j({"model": "m", "prompt": "x", "max_tokens": 1.5}), "max_tokens"),
        ("completions", j({"model": "m", "prompt": "x", "max_tokens": True}), "max_tokens"),
        ("completions", j({"model": "m", "prompt": "x", "stream": "yes"}), "stream"),
        ("completions", j({"model": "m", "prompt": "x", "stream_options": 1}), "stream_options"),
        (
            "completions",
            j({"model": "m", "prompt": "x", "stream_options": {"include_usage": 1}}),
            "stream_options",
        ),
        ("chat", j({"model": "m"}), "messages"),
        ("chat", j({"model": "m", "messages": []}), "messages"),
        ("chat", j({"model": "m", "messages": "hi"}), "messages"),
        ("chat", j({"model": "m", "messages": [{"role": "user"}]}), "messages[0].content"),
        ("chat", j({"model": "m", "messages": [{"role": 1, "content": "x"}]}), "messages[0]"),
        (
            "chat",
            j({"model": "m", "messages": [{"role": "user", "content": "x"}, 3]}),
            "messages[1]",
        ),
        (
            "chat",
            j(
                {
                    "model": "m",
                    "messages": [{"role": "u", "content": "x"}],
                    "max_completion_tokens": -1,
                }
            ),
            "max_completion_tokens",
        ),
    ],
)
def test_invalid_requests_are_400_naming_the_field(kind, raw, param):
    with pytest.raises(GatewayError) as ei:
        parse_request(raw, kind)
    assert ei.value.status == 400
    assert ei.value.param == param
    body = ei.value.body()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"


def test_completions_request():
    p = parse_request(j({"model": "m", "prompt": "hello world", "max_tokens": 7}), "completions")
    assert (p.model, p.prompts, p.stream, p.include_usage, p.max_tokens, p.n) == (
        "m", [["hello world"]], False, False, 7, 1,
    )  # fmt: skip


def test_list_prompt():
    p = parse_request(j({"model": "m", "prompt": ["a b", "c"]}), "completions")
    assert p.prompts == [["a b"], ["c"]]
    # routed as one batch (the prefill is the sum); the longest prompt must fit the context
    assert request_tokens(p.prompts) == (tokenize("a b") + tokenize("c"), 2)


def test_chat_request_renders_messages():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    p = parse_request(j({"model": "m", "messages": msgs, "max_tokens": 3,
                         "max_completion_tokens": 9}), "chat")  # fmt: skip
    assert p.prompts == [["<|system|> be brief\n<|user|> hi\n<|assistant|>"]]
    assert p.prompts == [[render_chat(msgs)]]
    assert p.max_tokens == 9


@pytest.mark.parametrize(
    ("extra", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": True}, True, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": False, "stream_options": {"include_usage": True}}, False, False),
    ],
)
def test_stream_flags_and_upstream_body(extra, stream, include_usage):
    p = parse_request(j({"model": "m", "prompt": "x", "temperature": 0.5, **extra}), "completions")
    assert (p.stream, p.include_usage) == (stream, include_usage)
    up = orjson.loads(p.upstream_body())
    assert up["stream"] is True
    assert up["stream_options"]["include_usage"] is True
    assert up["temperature"] == 0.5 and up["prompt"] == "x"


def test_error_shapes():
    assert error_body("boom", "t", code="c") == {
        "error": {"message": "boom", "type": "t", "param": None, "code": "c"}
    }
    ev = sse_error_event("gone")
    assert ev.startswith(b"data: ") and ev.endswith(b"\n\n")
    assert orjson.loads(ev[6:])["error"]["message"] == "gone"


def test_chat_content_parts_render_like_plain_text():
    plain = [{"role": "user", "content": "Hello, world!"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                          {"type": "text", "text": "world!"}]}]  # fmt: skip
    p = parse_request(j({"model": "m", "messages": parts}), "chat")
    assert p.prompts == [[render_chat(plain)]]
    for bad in ([{"type": "image_url"}], 3, None):
        with pytest.raises(GatewayError) as e:
            parse_request(j({"model": "m", "messages": [{"role": "user", "content": bad}]}), "chat")
        assert e.value.status == 400
