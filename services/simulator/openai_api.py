"""OpenAI request parsing and response shapes as vLLM's server returns them (pure).

Parsing is strict about the fields the simulator uses (model, prompt/messages, max_tokens,
stream, stream_options) and ignores sampling parameters it does not model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.tokenizer import content_text, render_chat

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
CHAT_DEFAULT_MAX_TOKENS = 128


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        err_type: str = "invalid_request_error",
        code: str | int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.err_type = err_type
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.err_type, self.param, self.code)


def error_body(
    message: str, err_type: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


@dataclass(frozen=True, slots=True)
class GenRequest:
    chat: bool
    model: str | None
    prompt: str  # rendered prompt text (chat messages already templated)
    max_tokens: int
    stream: bool
    include_usage: bool


def _bad(message: str, param: str | None) -> ApiError:
    return ApiError(400, message, param)


def _opt_bool(body: dict, key: str) -> bool:
    v = body.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad(f"'{key}' must be a boolean", key)
    return v


def _max_tokens(body: dict, keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise _bad(f"'{key}' must be an integer", key)
        if v < 1:
            raise _bad(f"'{key}' must be at least 1, got {v}", key)
        return v
    return default


def _common(body: Any) -> tuple[str | None, bool, bool]:
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    stream = _opt_bool(body, "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = _opt_bool(opts, "include_usage")
    return model, stream, include_usage


def parse_completion(body: Any) -> GenRequest:
    model, stream, include_usage = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("'prompt' must be a string or a list of one string", "prompt")
    max_tokens = _max_tokens(body, ("max_tokens",), COMPLETIONS_DEFAULT_MAX_TOKENS)
    return GenRequest(False, model, prompt, max_tokens, stream, include_usage)


def _content_text(content: Any, i: int) -> str:
    try:
        return content_text(content)
    except ValueError as e:
        raise _bad(f"messages[{i}].content: {e}", "messages") from e


def parse_chat(body: Any) -> GenRequest:
    model, stream, include_usage = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    rendered = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}] must be an object", "messages")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise _bad(f"messages[{i}].role must be a non-empty string", "messages")
        rendered.append({"role": role, "content": _content_text(m.get("content"), i)})
    max_tokens = _max_tokens(body, ("max_completion_tokens", "max_tokens"), CHAT_DEFAULT_MAX_TOKENS)
    return GenRequest(True, model, render_chat(rendered), max_tokens, stream, include_usage)


# ---- responses ---------------------------------------------------------------------------


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def full_response(
    req: GenRequest, rid: str, created: int, model: str, text: str, prompt_tokens: int, n: int
) -> dict[str, Any]:
    if req.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, n),
    }


def chunk(
    req: GenRequest, rid: str, created: int, model: str, piece: str, index: int, last: bool
) -> dict[str, Any]:
    """The streamed chunk for output token ``index`` (the last one carries finish_reason)."""
    finish = "length" if last else None
    if req.chat:
        delta: dict[str, str] = {"content": piece}
        if index == 0:
            delta = {"role": "assistant", "content": piece}
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    if last:
        choice["stop_reason"] = None
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}


def usage_chunk(
    req: GenRequest, rid: str, created: int, model: str, prompt_tokens: int, n: int
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk" if req.chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, n),
    }


def models_response(model: str, created: int, max_model_len: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [],
            }
        ],
    }
