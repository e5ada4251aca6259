"""A deterministic text tokenizer shared by the simulator and the gateway.

It is not a real BPE tokenizer: it splits text into words and punctuation marks and maps
each piece to a stable 31-bit id. What matters for routing is that it is deterministic and
roughly proportional to real token counts, so identical prompt prefixes give identical token
prefixes (and therefore real prefix-cache hits in the simulator) and the gateway's token
counts match the pod's.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

_PIECE = re.compile(r"\w+|[^\w\s]")
# The same pieces for ASCII text, matched on its bytes (no per-piece encode: ~30% faster).
# For ASCII, str-pattern \w is [A-Za-z0-9_] and \s is [ \t\n\r\f\v] plus \x1c-\x1f (which
# a bytes pattern's \s lacks), hence the explicit classes.
_ASCII_PIECE = re.compile(rb"[A-Za-z0-9_]+|[^A-Za-z0-9_ \t\n\r\f\v\x1c-\x1f]")


def tokenize(text: str) -> list[int]:
    """Token ids of ``text`` (stable across processes and machines)."""
    crc = zlib.crc32
    if text.isascii():
        return [crc(p) & 0x7FFFFFFF for p in _ASCII_PIECE.findall(text.encode())]
    return [crc(p.encode()) & 0x7FFFFFFF for p in _PIECE.findall(text)]


_NON_WORD = re.compile(r"\W")
TOKENIZE_CHUNK_CHARS = 1 << 16


def tokenize_chunked(text: str, chunk: int = TOKENIZE_CHUNK_CHARS) -> list[int]:
    """``tokenize(text)``, ``chunk`` characters at a time, cut where no piece spans the cut
    (before a non-word character). For a worker thread: each regex call is short, so the
    event loop's thread gets the GIL between chunks instead of waiting for the whole text."""
    n = len(text)
    if n <= chunk:
        return tokenize(text)
    out: list[int] = []
    start = 0
    while start < n:
        end = start + chunk
        if end >= n:
            end = n
        else:
            cut = max(text.rfind(" ", start + 1, end), text.rfind("\n", start + 1, end))
            if cut > start:
                end = cut
            else:  # no whitespace in the chunk: cut at the next non-word character
                m = _NON_WORD.search(text, end)
                end = m.start() if m is not None else n
        out += tokenize(text[start:end])
        start = end
    return out


def count_tokens(text: str) -> int:
    return sum(1 for _ in _PIECE.finditer(text))


def content_text(content: Any) -> str:
    """Flatten an OpenAI chat message ``content`` (a string or a list of text parts) to text.

    Raises ValueError (with a message fit for a 400 reply) for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ValueError("only text content parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise ValueError("a text content part needs a string 'text'")
            parts.append(text)
        return "".join(parts)
    raise ValueError("content must be a string or a list of text parts")


def render_chat(messages: Sequence[Mapping[str, str]]) -> str:
    """The deterministic chat template shared by the simulator and the gateway: one
    ``<|role|> content`` line per message (content already flattened to text), then the
    assistant's generation prompt. Both sides must render identically so the gateway's token
    counts and prefix blocks match the pod's prefix cache."""
    lines = [f"<|{m['role']}|> {m['content']}" for m in messages]
    lines.append("<|assistant|>")
    return "\n".join(lines)


def chain_hash(parent: int, block_tokens: Sequence[int]) -> int:
    """Hash of one block given its parent's hash (the chain link of ``block_hashes``)."""
    return hash((parent, tuple(block_tokens)))


def block_hashes(tokens: Sequence[int], block_size: int, extra_key: int = 0) -> list[int]:
    """Chained hashes of the full ``block_size``-token blocks of ``tokens``.

    Each block's hash covers its parent's hash, its own tokens and ``extra_key`` (e.g. a
    LoRA adapter id), so equal hashes mean equal prefixes. A trailing partial block is not
    hashed (only full blocks can be cached). Python's tuple-of-int hash is not salted, so
    the values are stable across processes.
    """
    out: list[int] = []
    parent = extra_key
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = chain_hash(parent, tokens[start : start + block_size])
        out.append(parent)
    return out


SYNTH_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will more can other its some what time about up out them into could then two"
).split()


def synth_text(n_tokens: int, seed: int) -> str:
    """Deterministic filler text of exactly ``n_tokens`` tokens (used for generated output
    and synthesised trace prompts)."""
    if n_tokens <= 0:
        return ""
    words = []
    x = (seed * 2654435761 + 12345) & 0xFFFFFFFF
    for _ in range(n_tokens):
        x = (1103515245 * x + 12345) & 0x7FFFFFFF
        words.append(SYNTH_WORDS[(x >> 8) % len(SYNTH_WORDS)])
    return " ".join(words)


# synth_text's generator, vectorised: x_n = A_n * x_0 + C_n (mod 2^31) for n = 1..512,
# applied chunk by chunk for longer texts
_LCG_A, _LCG_C, _MASK31 = 1103515245, 12345, (1 << 31) - 1


def _lcg_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    a_n, c_n, mult, add = [], [], 1, 0
    for _ in range(n):
        mult, add = (_LCG_A * mult) & _MASK31, (_LCG_A * add + _LCG_C) & _MASK31
        a_n.append(mult)
        c_n.append(add)
    return np.array(a_n, dtype=np.uint64), np.array(c_n, dtype=np.uint64)


_LCG_CHUNK = 512
_A_N, _C_N = _lcg_tables(_LCG_CHUNK)


@cache
def _synth_vocab() -> tuple[int, ...]:
    return tuple(tokenize(w)[0] for w in SYNTH_WORDS)


def synth_tokens(n_tokens: int, seed: int) -> list[int]:
    """``tokenize(synth_text(n_tokens, seed))``, computed with numpy (about 7x faster)."""
    vocab = _synth_vocab()
    x_prev = (seed * 2654435761 + 12345) & 0xFFFFFFFF & _MASK31
    words = np.uint64(len(vocab))
    out: list[int] = []
    for start in range(0, max(n_tokens, 0), _LCG_CHUNK):
        k = min(_LCG_CHUNK, n_tokens - start)
        x = (_A_N[:k] * np.uint64(x_prev) + _C_N[:k]) & np.uint64(_MASK31)
        out += [vocab[i] for i in ((x >> np.uint64(8)) % words).tolist()]
        x_prev = int(x[-1])
    return out
