"""Parse and validate an OpenAI completions / chat-completions request body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from services.gateway.errors import bad_request
from shared.tokenizer import content_text, render_chat

Kind = Literal["completions", "chat"]


@dataclass(slots=True)
class ParsedRequest:
    kind: Kind
    body: dict[str, Any]
    model: str
    texts: list[str]  # prompt text(s) to tokenize
    stream: bool
    include_usage: bool  # the client asked for the usage chunk (streaming only)
    max_tokens: int | None

    def upstream_body(self) -> bytes:
        """The body sent to the pod: always streamed, always with the usage chunk."""
        body = dict(self.body)
        body["stream"] = True
        opts = body.get("stream_options")
        body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        return orjson.dumps(body)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _optional_positive_int(body: dict[str, Any], key: str) -> int | None:
    val = body.get(key)
    if val is None:
        return None
    if not _is_int(val) or val < 1:
        raise bad_request(f"'{key}' must be a positive integer", param=key)
    return val


def parse_request(raw: bytes, kind: Kind) -> ParsedRequest:
    """Raises GatewayError(400) naming the offending field."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"request body is not valid JSON: {e}", code="invalid_json") from e
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object", code="invalid_json")

    model = body.get("model")
    if model is None:
        raise bad_request("'model' is required", param="model", code="missing_required")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string", param="model")

    if kind == "completions":
        prompt = body.get("prompt")
        if prompt is None:
            raise bad_request("'prompt' is required", param="prompt", code="missing_required")
        if isinstance(prompt, str):
            texts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            texts = list(prompt)
        else:
            raise bad_request(
                "'prompt' must be a string or a non-empty list of strings", param="prompt"
            )
    else:
        messages = body.get("messages")
        if messages is None:
            raise bad_request("'messages' is required", param="messages", code="missing_required")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list", param="messages")
        flat = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise bad_request(
                    f"'messages[{i}]' must be an object with a string 'role' and a 'content'",
                    param=f"messages[{i}]",
                )
            try:
                flat.append({"role": m["role"], "content": content_text(m.get("content"))})
            except ValueError as e:
                raise bad_request(f"'messages[{i}].content': {e}", param=f"messages[{i}]") from e
        texts = [render_chat(flat)]

    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    include_usage = (opts or {}).get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_request(
            "'stream_options.include_usage' must be a boolean", param="stream_options"
        )

    max_tokens = _optional_positive_int(body, "max_tokens")
    if kind == "chat":
        mct = _optional_positive_int(body, "max_completion_tokens")
        max_tokens = mct if mct is not None else max_tokens

    return ParsedRequest(
        kind=kind,
        body=body,
        model=model,
        texts=texts,
        stream=bool(stream),
        include_usage=bool(stream) and include_usage,
        max_tokens=max_tokens,
    )
