"""Accumulate upstream OpenAI stream chunks: token timing, usage and the aggregated reply.

The gateway always streams from the pod; for a non-streaming client the chunks are folded
into a normal ``text_completion`` / ``chat.completion`` object, per choice index: the text
(and any other string field of a chat delta: ``refusal``, vLLM's ``reasoning_content``)
concatenated, ``tool_calls`` deltas merged by their index (id, type and name as they come,
``arguments`` concatenated), ``logprobs`` lists concatenated, the finish and stop reasons;
then usage. Pure: no I/O; arrival times are passed in.

A token chunk is one that carries generated output: text, or a tool call's delta. TPOT is
measured on the choice with the most token chunks (``n`` > 1 streams the choices
interleaved).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.gateway.openai_request import Kind

_DELTA_SKIP = frozenset(("role", "tool_calls", "function_call"))


@dataclass(slots=True)
class _Choice:
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    role: str = "assistant"
    chunks: int = 0  # token chunks of this choice
    extra: dict[str, list[str]] | None = None  # other string delta fields (refusal, ...)
    tool_calls: dict[int, dict[str, Any]] | None = None  # by the delta's index
    logprobs: dict[str, Any] | None = None
    stop_reason: Any = None
    has_stop_reason: bool = False

    def fold_logprobs(self, lp: Any) -> None:
        if not isinstance(lp, dict):
            return
        if self.logprobs is None:
            self.logprobs = {}
        for k, v in lp.items():
            if isinstance(v, list):
                cur = self.logprobs.get(k)
                if isinstance(cur, list):
                    cur.extend(v)
                else:
                    self.logprobs[k] = list(v)
            elif k not in self.logprobs:
                self.logprobs[k] = v

    def fold_tool_calls(self, calls: Any) -> bool:
        if not isinstance(calls, list) or not calls:
            return False
        if self.tool_calls is None:
            self.tool_calls = {}
        for j, d in enumerate(calls):
            if not isinstance(d, dict):
                continue
            idx = d.get("index", j)
            tc = self.tool_calls.setdefault(idx if isinstance(idx, int) else j, {})
            for k in ("id", "type"):
                if d.get(k) is not None:
                    tc[k] = d[k]
            fn = d.get("function")
            if isinstance(fn, dict):
                cur = tc.setdefault("function", {})
                if fn.get("name"):
                    cur["name"] = cur.get("name", "") + fn["name"]
                args = fn.get("arguments")
                if isinstance(args, str):
                    cur["arguments"] = cur.get("arguments", "") + args
        return True


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
        self.system_fingerprint: Any = None

    def feed(self, chunk: dict[str, Any], now: float) -> bool:
        """Account one chunk; True when it carries generated output (a token chunk)."""
        self.last_at = now
        if self.id is None:
            self.id = chunk.get("id")
            self.created = chunk.get("created")
            self.model = chunk.get("model")
            self.system_fingerprint = chunk.get("system_fingerprint")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        carries = False
        for c in chunk.get("choices") or ():
            if not isinstance(c, dict):
                continue
            idx = c.get("index", 0)
            ch = self.choices.get(idx if isinstance(idx, int) else 0)
            if ch is None:
                ch = self.choices[idx if isinstance(idx, int) else 0] = _Choice()
            token = False
            if self.kind == "completions":
                text = c.get("text")
            else:
                delta = c.get("delta")
                if not isinstance(delta, dict):
                    delta = {}
                text = delta.get("content")
                if len(delta) > 1 or (delta and text is None):
                    token = self._fold_delta(ch, delta)
            if isinstance(text, str) and text:
                ch.parts.append(text)
                token = True
            if token:
                ch.chunks += 1
                carries = True
            lp = c.get("logprobs")
            if lp is not None:
                ch.fold_logprobs(lp)
            if c.get("finish_reason") is not None:
                ch.finish_reason = c["finish_reason"]
            if "stop_reason" in c:
                ch.stop_reason, ch.has_stop_reason = c["stop_reason"], True
        if carries:
            self.token_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = now
        return carries

    @staticmethod
    def _fold_delta(ch: _Choice, delta: dict[str, Any]) -> bool:
        """Fold a chat delta's fields other than content; True if it carried output."""
        token = False
        role = delta.get("role")
        if isinstance(role, str):
            ch.role = role
        if ch.fold_tool_calls(delta.get("tool_calls")):
            token = True
        fc = delta.get("function_call")  # the deprecated single function call
        if isinstance(fc, dict):
            ch.fold_tool_calls([{"index": 0, "type": "function", "function": fc}])
            token = True
        for k, v in delta.items():
            if k in _DELTA_SKIP or k == "content" or not isinstance(v, str) or not v:
                continue
            if ch.extra is None:
                ch.extra = {}
            ch.extra.setdefault(k, []).append(v)
            token = True
        return token

    @property
    def choice_chunks(self) -> int:
        """Token chunks of the choice with the most (the TPOT denominator)."""
        if len(self.choices) <= 1:
            return self.token_chunks
        return max(ch.chunks for ch in self.choices.values())

    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return self.usage["completion_tokens"]
        return self.token_chunks

    def prompt_tokens(self) -> int | None:
        if self.usage and isinstance(self.usage.get("prompt_tokens"), int):
            return self.usage["prompt_tokens"]
        return None

    def _chat_message(self, ch: _Choice) -> dict[str, Any]:
        text = "".join(ch.parts)
        msg: dict[str, Any] = {"role": ch.role, "content": text}
        if ch.extra:
            for k, parts in ch.extra.items():
                msg[k] = "".join(parts)
        if ch.tool_calls:
            calls = []
            for i in sorted(ch.tool_calls):
                tc = ch.tool_calls[i]
                fn = tc.get("function", {})
                calls.append({
                    "id": tc.get("id", ""), "type": tc.get("type", "function"),
                    "function": {"name": fn.get("name", ""), "arguments": fn.get("arguments", "")},
                })  # fmt: skip
            msg["tool_calls"] = calls
            if not ch.parts:
                msg["content"] = None
        return msg

    def completion(self, request_id: str, model: str, now_unix: int) -> dict[str, Any]:
        """The aggregated non-streaming reply."""
        choices = []
        for idx in sorted(self.choices):
            ch = self.choices[idx]
            if self.kind == "completions":
                choice: dict[str, Any] = {"index": idx, "text": "".join(ch.parts)}
            else:
                choice = {"index": idx, "message": self._chat_message(ch)}
            choice["logprobs"] = ch.logprobs
            choice["finish_reason"] = ch.finish_reason
            if ch.has_stop_reason:
                choice["stop_reason"] = ch.stop_reason
            choices.append(choice)
        usage = self.usage or {
            "prompt_tokens": 0,
            "completion_tokens": self.token_chunks,
            "total_tokens": self.token_chunks,
        }
        prefix = "cmpl" if self.kind == "completions" else "chatcmpl"
        out = {
            "id": self.id or f"{prefix}-{request_id}",
            "object": "text_completion" if self.kind == "completions" else "chat.completion",
            "created": self.created if isinstance(self.created, int) else now_unix,
            "model": self.model or model,
            "choices": choices,
            "usage": usage,
        }
        if self.system_fingerprint is not None:
            out["system_fingerprint"] = self.system_fingerprint
        return out
