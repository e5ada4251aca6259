"""Accumulate upstream OpenAI stream chunks: token timing, usage and the aggregated reply.

The gateway always streams from the pod; for a non-streaming client the chunks are folded
into a normal ``text_completion`` / ``chat.completion`` object (text concatenated per choice
index, finish reason, usage). Pure: no I/O; arrival times are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.gateway.openai_request import Kind


@dataclass(slots=True)
class _Choice:
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    role: str = "assistant"


class StreamAccumulator:
    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.choices: dict[int, _Choice] = {}
        self.token_chunks = 0
        self.first_token_at: float | None = None
        self.last_at: float | None = None
        self.usage: dict[str, Any] | None = None
        self.id: str | None = None
        self.created: int | None = None
        self.model: str | None = None

    def feed(self, chunk: dict[str, Any], now: float) -> bool:
        """Account one chunk; True when it carries generated text (a token chunk)."""
        self.last_at = now
        if self.id is None:
            self.id = chunk.get("id")
            self.created = chunk.get("created")
            self.model = chunk.get("model")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        carries = False
        for c in chunk.get("choices") or ():
            if not isinstance(c, dict):
                continue
            idx = c.get("index", 0)
            ch = self.choices.setdefault(idx if isinstance(idx, int) else 0, _Choice())
            if self.kind == "completions":
                text = c.get("text")
            else:
                delta = c.get("delta") or {}
                text = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(delta, dict) and isinstance(delta.get("role"), str):
                    ch.role = delta["role"]
            if isinstance(text, str) and text:
                ch.parts.append(text)
                carries = True
            if c.get("finish_reason") is not None:
                ch.finish_reason = c["finish_reason"]
        if carries:
            self.token_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = now
        return carries

    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return self.usage["completion_tokens"]
        return self.token_chunks

    def prompt_tokens(self) -> int | None:
        if self.usage and isinstance(self.usage.get("prompt_tokens"), int):
            return self.usage["prompt_tokens"]
        return None

    def completion(self, request_id: str, model: str, now_unix: int) -> dict[str, Any]:
        """The aggregated non-streaming reply."""
        choices = []
        for idx in sorted(self.choices):
            ch = self.choices[idx]
            text = "".join(ch.parts)
            if self.kind == "completions":
                choices.append({"index": idx, "text": text, "logprobs": None,
                                "finish_reason": ch.finish_reason})  # fmt: skip
            else:
                choices.append({"index": idx, "message": {"role": ch.role, "content": text},
                                "logprobs": None, "finish_reason": ch.finish_reason})  # fmt: skip
        usage = self.usage or {
            "prompt_tokens": 0,
            "completion_tokens": self.token_chunks,
            "total_tokens": self.token_chunks,
        }
        prefix = "cmpl" if self.kind == "completions" else "chatcmpl"
        return {
            "id": self.id or f"{prefix}-{request_id}",
            "object": "text_completion" if self.kind == "completions" else "chat.completion",
            "created": self.created if isinstance(self.created, int) else now_unix,
            "model": self.model or model,
            "choices": choices,
            "usage": usage,
        }
