"""Request limits, checked before anything reaches a pod; each refusal is an OpenAI-style
error counted in ``headroom_gateway_limit_rejections_total{limit}``:

============== ====== ======================================= ===========================
limit          status when                                    setting
============== ====== ======================================= ===========================
body_size      413    the body is larger than the limit       max_body_bytes
                      (told by content-length: answered
                      before any of it is read; else counted
                      while it streams in)
json_depth     400    objects/arrays nested deeper than the   max_json_depth
                      limit
n              400    more choices than the limit             max_n
batch          400    more prompts/inputs than the limit      max_batch_prompts
context_length 400    a prompt longer than the model's        pods' max_model_len,
                      context length                          default_context_length
max_tokens     400    prompt + max_tokens over the context    (same)
                      length
============== ====== ======================================= ===========================

The context length of a pod is what it reports (vLLM's ``/v1/models`` ``max_model_len``,
read by the collector into ``PodRecord.max_model_len``), else ``default_context_length``.
A request is routed among the pods it fits; only when it fits none is it refused.

Bodies larger than ``offload_bytes`` are decoded, checked and tokenized in the gateway's
offload thread (tokenized in chunks, so the event loop gets the GIL between them): a huge
prompt never stalls the other requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import Receive

from services.gateway.asgi import ClientDisconnected
from services.gateway.errors import GatewayError, bad_request
from services.gateway.openai_request import (
    PROMPT_PARAM,
    Kind,
    ParsedRequest,
    decode_body,
    parse_body,
)
from services.gateway.settings import GatewaySettings

LIMITS = ("body_size", "json_depth", "n", "batch", "context_length", "max_tokens")


def body_too_large(max_bytes: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body is larger than the limit of {max_bytes} bytes",
        code="request_too_large",
        limit="body_size",
    )


async def read_body(receive: Receive, headers: Mapping[str, str], max_bytes: int) -> bytes:
    """The whole request body, refused (413) as soon as it is known to exceed ``max_bytes``:
    at once from content-length, else when the bytes received pass it (the rest is never
    held in memory). Raises asgi.ClientDisconnected if the client leaves first."""
    declared = headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise body_too_large(max_bytes)
    msg = await receive()
    if msg["type"] == "http.disconnect":
        raise ClientDisconnected
    body = msg.get("body", b"")
    if len(body) > max_bytes:
        raise body_too_large(max_bytes)
    if not msg.get("more_body", False):
        return body
    parts = [body]
    size = len(body)
    while msg.get("more_body", False):
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise body_too_large(max_bytes)
        parts.append(chunk)
    return b"".join(parts)


def depth_exceeds(raw: bytes, body: Any, limit: int) -> bool:
    """Whether ``body`` (decoded from ``raw``) nests objects/arrays deeper than ``limit``
    (the top-level object is depth 1). Bodies with no more brackets than ``limit`` cannot,
    and are not walked."""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return False
    stack = [(body, 1)]
    while stack:
        obj, depth = stack.pop()
        children = obj.values() if type(obj) is dict else obj
        for v in children:
            t = type(v)
            if t is dict or t is list:
                if depth + 1 > limit:
                    return True
                stack.append((v, depth + 1))
    return False


def parse_limited(raw: bytes, kind: Kind, s: GatewaySettings) -> ParsedRequest:
    """Decode, check the shape limits (depth, n, batch) and parse. Raises GatewayError."""
    body = decode_body(raw)
    if depth_exceeds(raw, body, s.max_json_depth):
        raise bad_request(
            f"request body is nested deeper than {s.max_json_depth} levels",
            code="json_too_deep",
            limit="json_depth",
        )
    parsed = parse_body(body, kind, len(raw))
    if parsed.n > s.max_n:
        raise bad_request(f"'n' must be at most {s.max_n}", param="n", limit="n")
    if len(parsed.prompts) > s.max_batch_prompts:
        param = PROMPT_PARAM[kind]
        raise bad_request(
            f"'{param}' holds {len(parsed.prompts)} prompts; at most {s.max_batch_prompts} "
            "are allowed in one request",
            param=param,
            limit="batch",
        )
    return parsed


def context_error(req: ParsedRequest, prompt_tokens: int, context_length: int) -> GatewayError:
    """The refusal of a request that fits no pod's context length (as vLLM words it)."""
    what = "messages" if req.kind == "chat" else "prompt"
    if prompt_tokens > context_length or req.max_tokens is None or not req.generates:
        return bad_request(
            f"This model's maximum context length is {context_length} tokens. However, your "
            f"{what} resulted in {prompt_tokens} tokens. Please reduce the length of the "
            f"{what}.",
            param=PROMPT_PARAM[req.kind],
            code="context_length_exceeded",
            limit="context_length",
        )
    total = prompt_tokens + req.max_tokens
    return bad_request(
        f"This model's maximum context length is {context_length} tokens. However, you "
        f"requested {total} tokens ({prompt_tokens} in the {what}, {req.max_tokens} in the "
        f"completion). Please reduce the length of the {what} or completion.",
        param="max_completion_tokens" if "max_completion_tokens" in req.body else "max_tokens",
        code="context_length_exceeded",
        limit="max_tokens",
    )


def context_need(req: ParsedRequest, longest_prompt: int) -> int:
    """Tokens of context the request needs on a pod: its longest prompt plus max_tokens."""
    if req.generates and req.max_tokens is not None:
        return longest_prompt + req.max_tokens
    return longest_prompt
