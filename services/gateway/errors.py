"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Send

from services.gateway.asgi import send_bytes


class GatewayError(Exception):
    """An error answered to the client; raised anywhere in the request flow."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        limit: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}
        self.limit = limit  # the request limit that refused it (services/gateway/limits.py)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, code=self.code, param=self.param)


def error_body(
    message: str, type: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(
    message: str, param: str | None = None, code: str = "invalid_value", limit: str | None = None
) -> GatewayError:
    return GatewayError(400, message, param=param, code=code, limit=limit)


async def send_error(send: Send, err: GatewayError, headers: dict[str, str] | None = None) -> None:
    """Answer ``err`` as an OpenAI error object (ASGI)."""
    await send_bytes(
        send, err.status, orjson.dumps(err.body()), headers={**err.headers, **(headers or {})}
    )


def sse_error_event(message: str, type: str = "upstream_error", code: str | None = None) -> bytes:
    """An SSE event carrying an OpenAI error object (ends a broken stream)."""
    return b"data: " + orjson.dumps(error_body(message, type, code=code)) + b"\n\n"
