"""Prometheus text-exposition line parsing (pure).

:func:`parse_sample` and :func:`iter_samples` understand the Prometheus text format 0.0.4:
``# HELP`` / ``# TYPE`` / other comments, ``name{label="value",...} value [timestamp]``,
escaped label values (``\\"``, ``\\\\``, ``\\n``), ``NaN`` / ``+Inf`` / ``-Inf`` values and a
trailing OpenMetrics exemplar (``# {...} v``), which is ignored.

It is fast because it is selective: a caller names the metric families it needs and every
other line costs one name scan and a set lookup. Lines whose name is not a valid metric name,
and wanted lines that fail to parse, are yielded as ``None`` so callers can count them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# A metric name as Prometheus accepts it (the colon is allowed and used by vLLM).
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}

Labels = dict[str, str]


class MalformedLine(ValueError):
    """A sample line does not follow the text exposition format."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Labels
    value: float


def _unescape(raw: str) -> str:
    out: list[str] = []
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n:
            nxt = raw[i + 1]
            out.append(_UNESCAPE.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_labels(line: str, start: int) -> tuple[Labels, int]:
    """Parse ``{k="v",...}`` beginning at ``line[start] == "{"``; return labels and the index
    just after the closing brace."""
    labels: Labels = {}
    i = start + 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            raise MalformedLine("unterminated label set")
        if line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq < 0:
            raise MalformedLine("label without '='")
        key = line[i:eq].strip()
        if not _LABEL_NAME_RE.match(key):
            raise MalformedLine(f"bad label name {key!r}")
        i = eq + 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise MalformedLine("label value must be quoted")
        # Find the closing quote: the first '"' preceded by an even number of backslashes.
        j = i + 1
        while True:
            j = line.find('"', j)
            if j < 0:
                raise MalformedLine("unterminated label value")
            k = j - 1
            while line[k] == "\\":
                k -= 1
            if (j - 1 - k) % 2 == 0:
                break
            j += 1
        raw = line[i + 1 : j]
        labels[key] = _unescape(raw) if "\\" in raw else raw
        i = j + 1
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
        elif i < n and line[i] != "}":
            raise MalformedLine("expected ',' or '}' after a label")


def _parse_value(rest: str) -> float:
    hash_at = rest.find("#")
    if hash_at >= 0:  # OpenMetrics exemplar after the value
        rest = rest[:hash_at]
    parts = rest.split()
    if not parts or len(parts) > 2:
        raise MalformedLine("expected 'value [timestamp]'")
    try:
        value = float(parts[0])
        if len(parts) == 2:
            int(parts[1])
    except ValueError as e:
        raise MalformedLine(f"bad number: {e}") from None
    return value


def metric_name(line: str) -> str:
    """The metric name of a sample line (no validation): text up to '{' or whitespace."""
    name = line.partition("{")[0].partition(" ")[0]
    return name.partition("\t")[0] if "\t" in name else name


def parse_sample(line: str) -> Sample:
    """Parse one non-comment, non-blank line; raise :class:`MalformedLine`."""
    line = line.strip()
    name = metric_name(line)
    if not _NAME_RE.match(name):
        raise MalformedLine(f"bad metric name {name!r}")
    i = len(name)
    labels: Labels = {}
    if i < len(line) and line[i] == "{":
        labels, i = _parse_labels(line, i)
    return Sample(name, labels, _parse_value(line[i:]))


def iter_samples(
    text: str, wanted: frozenset[str] | set[str] | None = None
) -> Iterator[Sample | None]:
    """Yield a :class:`Sample` per sample line whose name is in ``wanted`` (all when None),
    and ``None`` for each malformed line. Comments, blank lines and unwanted names are
    skipped (an unwanted line is only checked for a valid metric name)."""
    for line in text.split("\n"):
        line = line.strip()
        if not line or line[0] == "#":
            continue
        name = metric_name(line)
        if wanted is not None and name not in wanted:
            if len(name) == len(line) or not _NAME_RE.match(name):
                yield None
            continue
        try:
            yield parse_sample(line)
        except MalformedLine:
            yield None
