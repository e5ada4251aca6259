"""The prompt of an OpenAI request body (pure), shared by the gateway and the simulator so both
count the same tokens and hash the same prefix blocks.

A prompt is a list of segments: text (tokenized with :func:`shared.tokenizer.tokenize`) or a
list of token ids (given by the client, or stand-ins for a non-text content part). A request
holds a batch of prompts: one for a chat request, one per string or token array of a
completions ``prompt`` or an embeddings ``input`` list.

Chat messages are rendered by one deterministic template (``<|role|> content`` per message,
then the generation prompt ``<|assistant|>``), as before tool calls and content parts:

- ``tools`` (function definitions): a first line ``<|tools|> <the tools' JSON>``;
- an assistant message's ``tool_calls``: ``<|tool_call|> <name> <arguments>`` after its
  content (``content`` may be null or absent);
- ``tool`` messages: ``<|tool|> <content>``; ``refusal`` parts are text;
- non-text content parts are passed through to the pod untouched and counted as a token
  estimate (:data:`IMAGE_TOKENS` ...): that many stand-in ids derived from the part's
  content, so the same image in two requests is the same prefix, as in vLLM's multimodal
  prefix cache.

Token estimates of non-text parts (the gateway cannot decode media; pods differ anyway):

============ ===================================================================
image_url    765 tokens (OpenAI's count for a 1024x1024 image at high detail);
             85 with ``detail: "low"``
input_audio  one token per 1,280 bytes of decoded audio (25 tokens a second of
             16 kHz 16-bit mono PCM), at least one
file         one token per 16 bytes of decoded ``file_data``; 1,000 for a ``file_id``
other types  765 (vLLM's ``video_url``, ``audio_url``, ``image_embeds`` ...)
============ ===================================================================
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from shared.tokenizer import tokenize

Segment = str | list[int]
Prompt = list[Segment]

IMAGE_TOKENS = 765
IMAGE_TOKENS_LOW = 85
AUDIO_BYTES_PER_TOKEN = 1280
FILE_BYTES_PER_TOKEN = 16
FILE_ID_TOKENS = 1000
OTHER_PART_TOKENS = 765
MAX_TOKEN_ID = (1 << 31) - 1


class PromptError(ValueError):
    """The body's prompt is not valid OpenAI input; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def stand_in_tokens(key: bytes, n: int) -> list[int]:
    """``n`` deterministic token ids standing for a non-text part whose content is ``key``."""
    base = zlib.crc32(key)
    return [(base + i * 2654435761) & MAX_TOKEN_ID for i in range(n)]


def _b64_bytes(data: str) -> int:
    """Decoded size of a base64 string (or of a data: URL's payload)."""
    comma = data.find(",", 0, 256) if data.startswith("data:") else -1
    return (len(data) - comma - 1) * 3 // 4


def part_tokens(part: dict[str, Any], where: str) -> list[int]:
    """The token estimate of one non-text content part (see the module docstring)."""
    kind = part["type"]
    if kind == "image_url":
        img = part.get("image_url")
        url = img.get("url") if isinstance(img, dict) else None
        if not isinstance(url, str):
            raise PromptError(f"'{where}.image_url' must be an object with a string 'url'", where)
        n = IMAGE_TOKENS_LOW if img.get("detail") == "low" else IMAGE_TOKENS
        return stand_in_tokens(url.encode(), n)
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if isinstance(audio, dict) else None
        if not isinstance(data, str):
            raise PromptError(f"'{where}.input_audio' must be an object with string 'data'", where)
        n = max(1, _b64_bytes(data) // AUDIO_BYTES_PER_TOKEN)
        return stand_in_tokens(data.encode(), n)
    if kind == "file":
        f = part.get("file")
        if not isinstance(f, dict):
            raise PromptError(f"'{where}.file' must be an object", where)
        data = f.get("file_data")
        if isinstance(data, str):
            return stand_in_tokens(data.encode(), max(1, _b64_bytes(data) // FILE_BYTES_PER_TOKEN))
        return stand_in_tokens(orjson.dumps(f), FILE_ID_TOKENS)
    return stand_in_tokens(orjson.dumps(part), OTHER_PART_TOKENS)


class _Builder:
    """Text pieces are joined into one segment until a token segment comes."""

    __slots__ = ("buf", "segs")

    def __init__(self) -> None:
        self.segs: Prompt = []
        self.buf: list[str] = []

    def tokens(self, ids: list[int]) -> None:
        if self.buf:
            self.segs.append("".join(self.buf))
            self.buf = []
        self.segs.append(ids)

    def done(self) -> Prompt:
        if self.buf:
            self.segs.append("".join(self.buf))
        return self.segs


def _content(b: _Builder, content: Any, where: str, optional: bool) -> None:
    if isinstance(content, str):
        b.buf.append(content)
        return
    if content is None:
        if optional:
            return
        raise PromptError(f"'{where}' is required", where)
    if not isinstance(content, list):
        raise PromptError(f"'{where}' must be a string or a list of content parts", where)
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise PromptError(f"'{at}' must be an object with a string 'type'", at)
        if kind == "text" or kind == "refusal":
            text = part.get(kind)
            if not isinstance(text, str):
                raise PromptError(f"'{at}' of type '{kind}' needs a string '{kind}'", at)
            b.buf.append(text)
        else:
            b.tokens(part_tokens(part, at))


def _tool_calls(b: _Builder, calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise PromptError(f"'{where}' must be a list", where)
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            raise PromptError(f"'{where}[{j}]' must be an object", f"{where}[{j}]")
        fn = call.get("function") if call.get("type", "function") == "function" else None
        if isinstance(fn, dict):
            b.buf.append(f"<|tool_call|> {fn.get('name', '')} {fn.get('arguments', '')}")
        elif isinstance(custom := call.get("custom"), dict):
            b.buf.append(f"<|tool_call|> {custom.get('name', '')} {custom.get('input', '')}")
        else:
            b.buf.append("<|tool_call|> " + orjson.dumps(call).decode())


def chat_prompt(messages: Any, tools: Any = None) -> Prompt:
    """The rendered prompt of chat ``messages`` (and ``tools``). Text-only messages render as
    one segment, exactly :func:`shared.tokenizer.render_chat`'s text. Raises PromptError."""
    if not isinstance(messages, list) or not messages:
        raise PromptError("'messages' must be a non-empty list", "messages")
    b = _Builder()
    buf = b.buf
    if tools is not None:
        if not isinstance(tools, list):
            raise PromptError("'tools' must be a list", "tools")
        if tools:
            buf.append("<|tools|> " + orjson.dumps(tools).decode() + "\n")
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str) or not role:
            raise PromptError(
                f"'messages[{i}]' must be an object with a string 'role'", f"messages[{i}]"
            )
        if i:
            b.buf.append("\n")
        b.buf.append(f"<|{role}|> ")
        assistant = role == "assistant"
        _content(b, m.get("content"), f"messages[{i}].content", assistant)
        calls = m.get("tool_calls")
        if calls is not None:
            _tool_calls(b, calls, f"messages[{i}].tool_calls")
        fc = m.get("function_call")  # deprecated, still sent by older clients
        if isinstance(fc, dict):
            b.buf.append(f"<|tool_call|> {fc.get('name', '')} {fc.get('arguments', '')}")
    b.buf.append("\n<|assistant|>")
    return b.done()


def _token_ids(ids: list, param: str) -> list[int]:
    for x in ids:
        if type(x) is not int or not 0 <= x <= MAX_TOKEN_ID:
            raise PromptError(f"'{param}' token ids must be integers in 0..{MAX_TOKEN_ID}", param)
    return ids


def batch_prompts(value: Any, param: str) -> list[Prompt]:
    """The prompts of a completions ``prompt`` or an embeddings ``input``: a string, a list
    of strings, a list of token ids or a list of token-id lists. Raises PromptError."""
    if isinstance(value, str):
        return [[value]]
    if not isinstance(value, list) or not value:
        raise PromptError(
            f"'{param}' must be a string, a non-empty list of strings, a list of token ids or "
            "a list of token-id lists",
            param,
        )
    first = value[0]
    if isinstance(first, str):
        if not all(isinstance(p, str) for p in value):
            raise PromptError(f"'{param}' mixes strings with other values", param)
        return [[p] for p in value]
    if isinstance(first, list):
        out: list[Prompt] = []
        for p in value:
            if not isinstance(p, list) or not p:
                raise PromptError(f"'{param}' must hold non-empty token-id lists only", param)
            out.append([_token_ids(p, param)])
        return out
    return [[_token_ids(value, param)]]


def prompt_tokens(
    prompt: Sequence[Segment], tokenizer: Callable[[str], list[int]] = tokenize
) -> list[int]:
    """The token ids of one prompt."""
    if len(prompt) == 1:
        seg = prompt[0]
        return tokenizer(seg) if isinstance(seg, str) else list(seg)
    out: list[int] = []
    for seg in prompt:
        out.extend(tokenizer(seg) if isinstance(seg, str) else seg)
    return out
