"""Readers for public LLM request traces, with deterministic prompt synthesis.

Pure except for reading the file. Two formats:

- **Mooncake JSONL** (one object per line): ``timestamp`` (ms), ``input_length``,
  ``output_length`` (tokens), ``hash_ids`` (one id per 512-token block; equal ids mean an
  identical block, so requests sharing leading ids share a prefix).
- **Azure CSV** (header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a
  datetime string such as ``2023-11-16 18:15:46.6805900``). No prefix information.

Prompts are synthesised on demand. Each Mooncake hash id maps to the same 512-token text
block everywhere (``shared.tokenizer.synth_text(512, seed=f(hash_id, seed))``), so shared
ids give identical token prefixes and real prefix-cache hits in the simulator; the last
block is cut to ``input_length`` (a prompt longer than its blocks is padded with text unique
to the request). Azure prompts are unique text. Both the prompt text (live replay) and the
token ids (routing lab) are available; ``tokenize(prompt_text()) == prompt_tokens()``.

Options: ``rate_scale`` divides inter-arrival times (2.0 = twice the rate), ``offset``
skips that many valid rows, ``limit`` keeps at most that many, ``seed`` varies the
synthesised text (not the sharing structure). Arrivals are relative to the first kept
request. A malformed line is logged with file and line number, listed in
``Trace.skipped`` and skipped; it never aborts the read.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from shared.tokenizer import synth_text, synth_tokens

log = logging.getLogger(__name__)

BLOCK_TOKENS = 512
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_SEED_STRIDE = 1_000_003
_UNIQUE_BASE = 1 << 30  # unique (per-request) text seeds live above the block seeds
_MAX_WARNINGS = 10


@dataclass(frozen=True, slots=True)
class SkippedLine:
    path: str
    line: int  # 1-based line number in the file
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class _Lru(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_or_build(self, key: int, build: Callable[[int], Any]) -> Any:
        hit = self.get(key)
        if hit is not None:
            self.move_to_end(key)
            return hit
        value = self[key] = build(key)
        if len(self) > self.size:
            self.popitem(last=False)
        return value


class PromptBuilder:
    """Deterministic prompt synthesis. Block token lists (and, separately, block texts)
    are cached per hash id in LRUs of ``cache_blocks`` entries, so shared blocks are built
    once while they are hot and memory stays bounded on 180k-block traces."""

    def __init__(self, seed: int = 0, cache_blocks: int = 8192) -> None:
        self.seed = seed
        self._tokens = _Lru(cache_blocks)
        self._texts = _Lru(cache_blocks)

    def block_seed(self, hash_id: int) -> int:
        return (self.seed * _SEED_STRIDE + hash_id) % _UNIQUE_BASE

    def unique_seed(self, key: int) -> int:
        return _UNIQUE_BASE + (self.seed * _SEED_STRIDE + key) % _UNIQUE_BASE

    def block_tokens(self, hash_id: int) -> list[int]:
        """The 512 token ids of ``hash_id``'s block (shared list: do not mutate)."""
        return self._tokens.get_or_build(
            hash_id, lambda h: synth_tokens(BLOCK_TOKENS, self.block_seed(h))
        )

    def block_text(self, hash_id: int) -> str:
        return self._texts.get_or_build(
            hash_id, lambda h: synth_text(BLOCK_TOKENS, self.block_seed(h))
        )

    @staticmethod
    def _pieces(hash_ids: Sequence[int], n_tokens: int) -> list[tuple[int | None, int]]:
        """(hash id, k) = the first k tokens of that block; (None, k) = k unique tokens."""
        out: list[tuple[int | None, int]] = []
        left = n_tokens
        for h in hash_ids:
            if left <= 0:
                break
            k = min(BLOCK_TOKENS, left)
            out.append((h, k))
            left -= k
        if left > 0:
            out.append((None, left))
        return out

    def tokens(self, hash_ids: Sequence[int], n_tokens: int, key: int) -> list[int]:
        """Prompt token ids: the blocks of ``hash_ids`` cut to ``n_tokens``, padded with
        tokens unique to ``key`` if the blocks are too short."""
        out: list[int] = []
        for h, k in self._pieces(hash_ids, n_tokens):
            if h is None:
                out += synth_tokens(k, self.unique_seed(key))
            else:
                block = self.block_tokens(h)
                out += block if k == BLOCK_TOKENS else block[:k]
        return out

    def text(self, hash_ids: Sequence[int], n_tokens: int, key: int) -> str:
        """Prompt text whose tokens are exactly :meth:`tokens`."""
        parts: list[str] = []
        for h, k in self._pieces(hash_ids, n_tokens):
            if h is None:
                parts.append(synth_text(k, self.unique_seed(key)))
            else:
                text = self.block_text(h)
                parts.append(text if k == BLOCK_TOKENS else " ".join(text.split(" ")[:k]))
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    index: int  # 0-based position among the file's valid rows
    line: int  # 1-based line number in the file
    arrival_s: float  # relative to the first kept request, after rate_scale
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]  # Mooncake 512-token block ids (empty for Azure)
    builder: PromptBuilder = field(repr=False, compare=False)

    def prompt_tokens(self) -> list[int]:
        return self.builder.tokens(self.hash_ids, self.input_tokens, self.index)

    def __deepcopy__(self, memo: dict) -> TraceRequest:
        return self  # immutable, and its builder is shared by the whole trace (the lab's forks)

    def prompt_text(self) -> str:
        return self.builder.text(self.hash_ids, self.input_tokens, self.index)


@dataclass(slots=True)
class Trace:
    path: str
    format: str  # "mooncake" | "azure"
    requests: list[TraceRequest]
    skipped: list[SkippedLine]

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[TraceRequest]:
        return iter(self.requests)


class _Row(NamedTuple):
    time_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    line: int


def _int_field(obj: dict[str, Any], name: str, minimum: int) -> int:
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def _parse_mooncake(raw: str) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e.msg}") from None
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise ValueError(f"timestamp must be a non-negative number of ms, got {ts!r}")
    n_in = _int_field(obj, "input_length", 1)
    n_out = _int_field(obj, "output_length", 1)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
    ):
        raise ValueError("hash_ids must be a list of non-negative integers")
    return ts / 1000.0, n_in, n_out, tuple(ids)


def _parse_azure(
    row: list[str], col: dict[str, int], width: int
) -> tuple[float, int, int, tuple[int, ...]]:
    if len(row) != width:
        raise ValueError(f"expected {width} columns, got {len(row)}")
    raw_ts = row[col["TIMESTAMP"]].strip()
    try:
        dt = datetime.fromisoformat(raw_ts)
    except ValueError:
        raise ValueError(f"bad TIMESTAMP {raw_ts!r}") from None
    ts = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()  # naive = UTC, no DST
    out = []
    for name in ("ContextTokens", "GeneratedTokens"):
        raw = row[col[name]].strip()
        try:
            v = int(raw)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from None
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
        out.append(v)
    return ts, out[0], out[1], ()


def _rows(path: Path, fmt: str, skipped: list[SkippedLine]) -> Iterator[_Row]:
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        if fmt == "mooncake":
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    yield _Row(*_parse_mooncake(raw), lineno)
                except ValueError as e:
                    skipped.append(SkippedLine(str(path), lineno, str(e)))
            return
        reader = csv.reader(f)
        header = next(reader, None)
        names = [h.strip() for h in header or []]
        missing = [c for c in AZURE_COLUMNS if c not in names]
        if missing:
            raise ValueError(f"{path}: not an Azure trace, missing columns {missing}")
        col = {c: names.index(c) for c in AZURE_COLUMNS}
        for row in reader:
            if not row or not any(c.strip() for c in row):
                continue
            try:
                yield _Row(*_parse_azure(row, col, len(names)), reader.line_num)
            except ValueError as e:
                skipped.append(SkippedLine(str(path), reader.line_num, str(e)))


def read_trace(
    path: str | Path,
    *,
    format: str | None = None,
    rate_scale: float = 1.0,
    limit: int | None = None,
    offset: int = 0,
    seed: int = 0,
    builder: PromptBuilder | None = None,
) -> Trace:
    """Read a Mooncake (``.jsonl``) or Azure (``.csv``) trace; ``format`` overrides the
    guess from the suffix. Requests come sorted by arrival (stable)."""
    path = Path(path)
    fmt = format or ("azure" if path.suffix.lower() == ".csv" else "mooncake")
    if fmt not in ("mooncake", "azure"):
        raise ValueError(f"unknown trace format {fmt!r}")
    if not rate_scale > 0:
        raise ValueError("rate_scale must be > 0")
    if offset < 0 or (limit is not None and limit < 0):
        raise ValueError("offset and limit must be >= 0")
    builder = builder or PromptBuilder(seed)
    skipped: list[SkippedLine] = []
    kept: list[tuple[int, _Row]] = []
    for i, row in enumerate(_rows(path, fmt, skipped)):
        if limit is not None and i >= offset + limit:
            break
        if i >= offset:
            kept.append((i, row))
    for s in skipped[:_MAX_WARNINGS]:
        log.warning("skipped malformed trace line %s", s)
    if len(skipped) > _MAX_WARNINGS:
        log.warning("%s: %d malformed lines skipped in total", path, len(skipped))
    t0 = min((row.time_s for _, row in kept), default=0.0)
    requests = [
        TraceRequest(
            index=i,
            line=row.line,
            arrival_s=(row.time_s - t0) / rate_scale,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            hash_ids=row.hash_ids,
            builder=builder,
        )
        for i, row in kept
    ]
    requests.sort(key=lambda r: r.arrival_s)
    return Trace(path=str(path), format=fmt, requests=requests, skipped=skipped)


def read_mooncake(path: str | Path, **options: Any) -> Trace:
    return read_trace(path, format="mooncake", **options)


def read_azure(path: str | Path, **options: Any) -> Trace:
    return read_trace(path, format="azure", **options)
