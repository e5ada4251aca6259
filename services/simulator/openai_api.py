"""OpenAI request parsing and response shapes as vLLM's server returns them (pure).

The simulator accepts every valid OpenAI completions, chat and embeddings body: it reads the
prompt with shared/openai_prompt.py (the gateway's code: tool calls, tool messages, tools,
content parts with their token estimates, token-id and list prompts), ``max_tokens``, ``n``,
``stream`` and ``stream_options``, and ignores what it does not simulate (sampling
parameters, ``response_format``, logprobs, ...). What it simulates:

- ``n`` > 1 and list prompts: one engine request per (prompt, choice), all with the prompt's
  tokens, as vLLM V1 fans a parallel-sampling request out into ``n`` child requests (the
  prefix cache shares the prompt's blocks between them); choice ``i * n + j`` is prompt i's
  sample j; usage counts each prompt once and every choice's tokens;
- a forced tool call (``tool_choice`` ``"required"`` or a named function, with ``tools``):
  the choice calls the function, its arguments a JSON object whose string value is the
  generated text (one piece per engine token), ``finish_reason`` ``"tool_calls"``;
  ``"auto"`` answers in text;
- embeddings: a prefill-only engine request per input (one token, so no decode step), then
  a deterministic unit vector per input (1,024 dimensions or ``dimensions``), float or
  base64 (little-endian float32, as OpenAI encodes them).
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.openai_prompt import Prompt, PromptError, batch_prompts, chat_prompt

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
CHAT_DEFAULT_MAX_TOKENS = 128
EMBED_DIMENSIONS = 1024
MAX_EMBED_DIMENSIONS = 8192


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
class Tool:
    """The function a forced tool call calls, and the argument it fills."""

    name: str
    argument: str = "input"


@dataclass(frozen=True, slots=True)
class GenRequest:
    chat: bool
    model: str | None
    prompts: list[Prompt]  # one per prompt of a batch (one for chat)
    max_tokens: int
    stream: bool
    include_usage: bool
    n: int = 1
    tool: Tool | None = None  # a forced tool call (chat)

    @property
    def choices(self) -> int:
        return len(self.prompts) * self.n


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    model: str | None
    prompts: list[Prompt]
    base64: bool
    dimensions: int


def _bad(message: str, param: str | None) -> ApiError:
    return ApiError(400, message, param)


def _opt_bool(body: dict, key: str) -> bool:
    v = body.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad(f"'{key}' must be a boolean", key)
    return v


def _positive_int(body: dict, key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{key}' must be an integer", key)
    if v < 1:
        raise _bad(f"'{key}' must be at least 1, got {v}", key)
    return v


def _max_tokens(body: dict, keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        v = _positive_int(body, key)
        if v is not None:
            return v
    return default


def _model(body: Any) -> str | None:
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    return model


def _common(body: Any) -> tuple[str | None, bool, bool, int]:
    model = _model(body)
    stream = _opt_bool(body, "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = _opt_bool(opts, "include_usage")
    return model, stream, include_usage, _positive_int(body, "n") or 1


def _prompts(value: Any, param: str) -> list[Prompt]:
    if value is None:
        raise _bad(f"'{param}' is required", param)
    try:
        return batch_prompts(value, param)
    except PromptError as e:
        raise _bad(str(e), param) from e


def parse_completion(body: Any) -> GenRequest:
    model, stream, include_usage, n = _common(body)
    prompts = _prompts(body.get("prompt"), "prompt")
    max_tokens = _max_tokens(body, ("max_tokens",), COMPLETIONS_DEFAULT_MAX_TOKENS)
    return GenRequest(False, model, prompts, max_tokens, stream, include_usage, n)


def forced_tool(body: dict) -> Tool | None:
    """The function a request forces a call of: ``tool_choice`` names it, or is
    ``"required"`` (the first function of ``tools``); None otherwise."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    choice = body.get("tool_choice")
    name = None
    if isinstance(choice, dict):  # a named function ("allowed_tools" and others: not forced)
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            return None
    elif choice != "required":
        return None
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        if name is None or fn["name"] == name:
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            arg = next(iter(props), "input") if isinstance(props, dict) and props else "input"
            return Tool(fn["name"], str(arg))
    return Tool(name) if isinstance(name, str) else None


def parse_chat(body: Any) -> GenRequest:
    model, stream, include_usage, n = _common(body)
    try:
        prompt = chat_prompt(body.get("messages"), body.get("tools"))
    except PromptError as e:
        raise _bad(str(e), e.param.split("[")[0].split(".")[0]) from e
    max_tokens = _max_tokens(body, ("max_completion_tokens", "max_tokens"), CHAT_DEFAULT_MAX_TOKENS)
    tool = forced_tool(body)
    return GenRequest(True, model, [prompt], max_tokens, stream, include_usage, n, tool)


def parse_embedding(body: Any) -> EmbedRequest:
    model = _model(body)
    value = body.get("input")
    if value == "":
        raise _bad("'input' cannot be an empty string", "input")
    prompts = _prompts(value, "input")
    fmt = body.get("encoding_format")
    if fmt not in (None, "float", "base64"):
        raise _bad("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    dims = _positive_int(body, "dimensions") or EMBED_DIMENSIONS
    if dims > MAX_EMBED_DIMENSIONS:
        raise _bad(f"'dimensions' must be at most {MAX_EMBED_DIMENSIONS}", "dimensions")
    return EmbedRequest(model, prompts, fmt == "base64", dims)


# ---- generated output --------------------------------------------------------------------


def output_pieces(words: list[str], tool: Tool | None) -> list[str]:
    """One piece of output text per engine token: the words, or a tool call's arguments (a
    JSON object holding the words, complete with the last piece)."""
    pieces = [words[0], *(" " + w for w in words[1:])]
    if tool is not None:
        pieces[0] = '{"' + tool.argument + '": "' + pieces[0]
        pieces[-1] += '"}'
    return pieces


# ---- responses ---------------------------------------------------------------------------


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _finish(req: GenRequest) -> str:
    return "tool_calls" if req.tool is not None else "length"


def full_response(
    req: GenRequest,
    rid: str,
    created: int,
    model: str,
    texts: list[str],
    prompt_tokens: int,
    n: int,
) -> dict[str, Any]:
    """The non-streamed reply: ``texts[i]`` is choice i's output text."""
    choices = []
    for i, text in enumerate(texts):
        if req.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
            if req.tool is not None:
                msg["content"] = None
                fn = {"name": req.tool.name, "arguments": text}
                msg["tool_calls"] = [{"id": tool_call_id(rid, i), "type": "function",
                                      "function": fn}]  # fmt: skip
            choice: dict[str, Any] = {"index": i, "message": msg}
        else:
            choice = {"index": i, "text": text}
        choice.update(logprobs=None, finish_reason=_finish(req), stop_reason=None)
        choices.append(choice)
    return {
        "id": rid,
        "object": "chat.completion" if req.chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, n),
    }


def tool_call_id(rid: str, choice: int) -> str:
    return f"chatcmpl-tool-{zlib.crc32(f'{rid}/{choice}'.encode()):08x}"


def chunk(
    req: GenRequest,
    rid: str,
    created: int,
    model: str,
    piece: str,
    index: int,
    last: bool,
    choice: int = 0,
) -> dict[str, Any]:
    """The streamed chunk for output token ``index`` of ``choice`` (the last one carries
    finish_reason)."""
    finish = _finish(req) if last else None
    if req.chat:
        delta: dict[str, Any]
        if req.tool is not None:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
            if index == 0:
                call = {"index": 0, "id": tool_call_id(rid, choice), "type": "function",
                        "function": {"name": req.tool.name, "arguments": piece}}  # fmt: skip
            delta = {"tool_calls": [call]}
        else:
            delta = {"content": piece}
        if index == 0:
            delta = {"role": "assistant", **delta}
        c: dict[str, Any] = {"index": choice, "delta": delta, "logprobs": None,
                             "finish_reason": finish}  # fmt: skip
        obj = "chat.completion.chunk"
    else:
        c = {"index": choice, "text": piece, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    if last:
        c["stop_reason"] = None
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [c]}


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


def embedding_vector(tokens: list[int], dimensions: int) -> np.ndarray:
    """A deterministic unit vector (float32) for a prompt's tokens."""
    seed = zlib.crc32(np.asarray(tokens, dtype=np.uint32).tobytes())
    v = np.random.default_rng(seed).standard_normal(dimensions).astype(np.float32)
    return v / np.float32(np.linalg.norm(v) or 1.0)


def embeddings_response(
    req: EmbedRequest, rid: str, created: int, model: str, vectors: list[np.ndarray], tokens: int
) -> dict[str, Any]:
    data = []
    for i, v in enumerate(vectors):
        emb: Any = (
            base64.b64encode(v.astype("<f4").tobytes()).decode()
            if req.base64
            else [float(x) for x in v.tolist()]
        )
        data.append({"index": i, "object": "embedding", "embedding": emb})
    return {
        "id": rid,
        "object": "list",
        "created": created,
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
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
