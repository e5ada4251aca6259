"""Parse and validate an OpenAI completions / chat-completions / embeddings request body.

The gateway reads what it routes on (model, the prompt's tokens, max_tokens, n, stream) and
passes everything else through to the pod unchanged (tools, tool_choice, response_format,
sampling parameters, vendor extensions). The prompt is read by shared/openai_prompt.py, the
same code the simulator uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from services.gateway.errors import GatewayError, bad_request
from shared.openai_prompt import Prompt, PromptError, batch_prompts, chat_prompt

Kind = Literal["completions", "chat", "embeddings"]

# what the prompt is called in each kind of body (the param of a context-length error)
PROMPT_PARAM: dict[str, str] = {"completions": "prompt", "chat": "messages", "embeddings": "input"}


@dataclass(slots=True)
class ParsedRequest:
    kind: Kind
    body: dict[str, Any]
    model: str
    prompts: list[Prompt]  # a batch of prompts (one for chat); see shared/openai_prompt.py
    stream: bool
    include_usage: bool  # the client asked for the usage chunk (streaming only)
    max_tokens: int | None
    n: int = 1  # choices per prompt
    size: int = 0  # bytes of the request body
    # (token ids of the prompts concatenated, longest prompt's length), once tokenized by
    # Gateway.prompt_tokens: the rate limiter and routing share one tokenization
    tokens: tuple[list[int], int] | None = None

    @property
    def generates(self) -> bool:
        """False for embeddings (prefill only: no tokens are generated)."""
        return self.kind != "embeddings"

    def decode_tokens(self, default_max_tokens: int) -> int:
        """The decode budget for in-flight accounting: every sequence's max_tokens (a batch
        of prompts, each with ``n`` choices), 0 for embeddings."""
        if not self.generates:
            return 0
        return (self.max_tokens or default_max_tokens) * self.n * len(self.prompts)

    def upstream_body(self) -> bytes:
        """The body sent to the pod: generation is always streamed with the usage chunk;
        embeddings go as they came."""
        body = dict(self.body)
        if self.generates:
            body["stream"] = True
            opts = body.get("stream_options")
            body["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }
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


def decode_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body. orjson's own nesting limit (1,024) is reported as
    the depth limit (services/gateway/limits.py checks the configured one)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        why = str(e).lower()
        if "depth limit" in why or "recursion" in why:  # orjson's words for its own limit
            raise GatewayError(
                400, "request body is nested too deeply", code="json_too_deep", limit="json_depth"
            ) from e
        raise bad_request(f"request body is not valid JSON: {e}", code="invalid_json") from e
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object", code="invalid_json")
    return body


def parse_body(body: dict[str, Any], kind: Kind, size: int = 0) -> ParsedRequest:
    """Raises GatewayError(400) naming the offending field."""
    model = body.get("model")
    if model is None:
        raise bad_request("'model' is required", param="model", code="missing_required")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string", param="model")

    param = PROMPT_PARAM[kind]
    value = body.get(param)
    if value is None:
        raise bad_request(f"'{param}' is required", param=param, code="missing_required")
    try:
        if kind == "chat":
            prompts = [chat_prompt(value, body.get("tools"))]
        else:
            prompts = batch_prompts(value, param)
    except PromptError as e:
        raise bad_request(str(e), param=e.param) from e

    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    include_usage = (opts or {}).get("include_usage", False)
    if include_usage is None:
        include_usage = False
    if not isinstance(include_usage, bool):
        raise bad_request(
            "'stream_options.include_usage' must be a boolean", param="stream_options"
        )
    if kind == "embeddings":
        if stream:
            raise bad_request("embeddings cannot be streamed", param="stream")
        return ParsedRequest(kind, body, model, prompts, False, False, None, 1, size)

    max_tokens = _optional_positive_int(body, "max_tokens")
    if kind == "chat":
        mct = _optional_positive_int(body, "max_completion_tokens")
        max_tokens = mct if mct is not None else max_tokens
    n = _optional_positive_int(body, "n") or 1

    return ParsedRequest(
        kind=kind,
        body=body,
        model=model,
        prompts=prompts,
        stream=bool(stream),
        include_usage=bool(stream) and include_usage,
        max_tokens=max_tokens,
        n=n,
        size=size,
    )


def parse_request(raw: bytes, kind: Kind) -> ParsedRequest:
    """``raw`` decoded and parsed (no limits: services/gateway/limits.py applies them)."""
    return parse_body(decode_body(raw), kind, len(raw))
