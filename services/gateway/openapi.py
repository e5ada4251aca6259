"""The proxy routes in the gateway's OpenAPI document (``GET /openapi.json``).

The proxy routes are served by services/gateway/proxy.py ahead of FastAPI, so FastAPI does not
know them; this adds them to its document: the OpenAI request bodies as the gateway reads
them (what it does not read passes through, so every object allows more properties), the
scheduling headers, and the error object. tests/integration/test_gateway_fuzz.py generates
requests from it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from services.gateway.explain import DEBUG_HEADER
from services.gateway.request_headers import (
    PRIORITY_HEADER,
    PROFILE_HEADER,
    TPOT_HEADERS,
    TTFT_HEADERS,
)

_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_PROMPT = {
    "oneOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
        _TOKEN_IDS,
        {"type": "array", "items": _TOKEN_IDS, "minItems": 1},
    ]
}
_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string"},
        "text": {"type": "string"},
        "image_url": {"type": "object", "properties": {"url": {"type": "string"}}},
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string"},
        "content": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "items": _PART},
                {"type": "null"},
            ]
        },
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
    },
}
_COMMON = {
    "model": {"type": "string", "minLength": 1},
    "stream": {"type": "boolean"},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
    "max_tokens": {"type": "integer", "minimum": 1},
    "n": {"type": "integer", "minimum": 1},
}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/completions": {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {**_COMMON, "prompt": _PROMPT},
    },
    "/v1/chat/completions": {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            **_COMMON,
            "max_completion_tokens": {"type": "integer", "minimum": 1},
            "messages": {"type": "array", "items": _MESSAGE, "minItems": 1},
            "tools": {"type": "array", "items": {"type": "object"}},
            "tool_choice": {"oneOf": [{"type": "string"}, {"type": "object"}]},
            "response_format": {"type": "object"},
        },
    },
    "/v1/embeddings": {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": _COMMON["model"],
            "input": _PROMPT,
            "encoding_format": {"type": "string", "enum": ["float", "base64"]},
            "dimensions": {"type": "integer", "minimum": 1},
        },
    },
}
HEADERS: list[dict[str, Any]] = [
    *({"name": h, "in": "header", "schema": {"type": "number", "exclusiveMinimum": 0},
       "description": "TTFT SLO in milliseconds"} for h in TTFT_HEADERS),
    *({"name": h, "in": "header", "schema": {"type": "number", "exclusiveMinimum": 0},
       "description": "TPOT SLO in milliseconds"} for h in TPOT_HEADERS),
    {"name": PRIORITY_HEADER, "in": "header", "schema": {"type": "integer"},
     "description": "Priority (< 0: sheddable)"},
    {"name": PROFILE_HEADER, "in": "header", "schema": {"type": "string"},
     "description": "Scheduling profile of this request"},
    {"name": DEBUG_HEADER, "in": "header", "schema": {"type": "string"},
     "description": "Ask for the decision's debug headers"},
]  # fmt: skip
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _operation(path: str) -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": _ERROR}}}
    return {
        "summary": f"OpenAI {path.removeprefix('/v1/')}",
        "parameters": HEADERS,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": BODIES[path]}},
        },
        "responses": {
            "200": {"description": "The reply (an SSE stream when 'stream' is true)"},
            "400": {"description": "Invalid request or over a limit", **err},
            "404": {"description": "Unknown model", **err},
            "413": {"description": "Body over the size limit", **err},
            "502": {"description": "No pod could serve it", **err},
            "503": {"description": "No ready pod, shed or queue full", **err},
        },
    }


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` include the proxy routes."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for path in BODIES:
                doc.setdefault("paths", {})[path] = {"post": _operation(path)}
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
