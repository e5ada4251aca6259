"""Prometheus text-exposition parsing and one metrics parser per model-server engine (pure).

The line parser (:func:`parse_sample`, :func:`iter_samples`) understands the Prometheus text
format 0.0.4: ``# HELP`` / ``# TYPE`` / other comments, ``name{label="value",...} value
[timestamp]``, escaped label values (``\\"``, ``\\\\``, ``\\n``), ``NaN`` / ``+Inf`` /
``-Inf`` values and a trailing OpenMetrics exemplar (``# {...} v``), which is ignored.

It is fast because it is selective: an engine parser names the metric families it needs and
every other line costs one name scan and a set lookup. Lines whose name is not a valid metric
name, and wanted lines that fail to parse, are counted as ignored.

Engine parsers share one signature, ``(text: str) -> ParseResult``, and are registered in
:data:`PARSERS` by engine name; JetStream, SGLang and TGI parsers are added as siblings of
:func:`parse_vllm`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

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


# --------------------------------------------------------------------------------------
# Engine-neutral result
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class ParseResult:
    """Engine-neutral pod state parsed from one /metrics page (PodRecord's load fields)."""

    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # 0..1
    prefix_hit_rate: float = 0.0  # 0..1, lifetime hits / queries (0 when no queries)
    models: list[str] = field(default_factory=list)
    lora_adapters: list[str] = field(default_factory=list)  # running LoRA adapters
    ignored: int = 0  # malformed lines and wanted samples with unusable (NaN/Inf) values
    found: int = 0  # samples of wanted metrics that were used


Parser = Callable[[str], ParseResult]


# --------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_KV = "vllm:kv_cache_usage_perc"
VLLM_KV_OLD = "vllm:gpu_cache_usage_perc"
VLLM_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
VLLM_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
VLLM_LORA = "vllm:lora_requests_info"
_VLLM_WANTED = frozenset(
    {VLLM_WAITING, VLLM_RUNNING, VLLM_KV, VLLM_KV_OLD, VLLM_LORA, *VLLM_HITS, *VLLM_QUERIES}
)


def _split_adapters(s: str) -> list[str]:
    return [a.strip() for a in s.split(",") if a.strip()]


def parse_vllm(text: str) -> ParseResult:
    """Parse a vLLM /metrics page.

    Gauges and counters are summed over label sets (several engines or models in one pod),
    except KV usage, which is a fraction and is averaged over label sets. The newer KV name
    wins over the older ``vllm:gpu_cache_usage_perc`` when both are present. Running LoRA
    adapters come from the newest ``vllm:lora_requests_info`` label set per engine (its value
    is the time it was last set; older label sets linger in the exposition).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    models: set[str] = set()
    lora_newest: dict[str, tuple[float, str]] = {}
    ignored = 0
    for s in iter_samples(text, _VLLM_WANTED):
        if s is None:
            ignored += 1
            continue
        if not math.isfinite(s.value):
            ignored += 1
            continue
        model = s.labels.get("model_name")
        if model:
            models.add(model)
        if s.name == VLLM_LORA:
            engine = s.labels.get("engine", "")
            prev = lora_newest.get(engine)
            if prev is None or s.value >= prev[0]:
                lora_newest[engine] = (s.value, s.labels.get("running_lora_adapters", ""))
            counts[s.name] = counts.get(s.name, 0) + 1
            continue
        sums[s.name] = sums.get(s.name, 0.0) + s.value
        counts[s.name] = counts.get(s.name, 0) + 1

    kv_name = VLLM_KV if VLLM_KV in counts else VLLM_KV_OLD
    kv = sums.get(kv_name, 0.0) / counts[kv_name] if kv_name in counts else 0.0
    hits = next((sums[n] for n in VLLM_HITS if n in counts), 0.0)
    queries = next((sums[n] for n in VLLM_QUERIES if n in counts), 0.0)
    adapters: set[str] = set()
    for _, running in lora_newest.values():
        adapters.update(_split_adapters(running))
    return ParseResult(
        waiting=max(0.0, sums.get(VLLM_WAITING, 0.0)),
        running=max(0.0, sums.get(VLLM_RUNNING, 0.0)),
        kv_usage=min(1.0, max(0.0, kv)),
        prefix_hit_rate=min(1.0, max(0.0, hits / queries)) if queries > 0 else 0.0,
        models=sorted(models),
        lora_adapters=sorted(adapters),
        ignored=ignored,
        found=sum(counts.values()),
    )


# --------------------------------------------------------------------------------------
# Registry: engine name -> parser (JetStream, SGLang, TGI join here)
# --------------------------------------------------------------------------------------
PARSERS: dict[str, Parser] = {"vllm": parse_vllm}


def get_parser(engine: str) -> Parser:
    try:
        return PARSERS[engine]
    except KeyError:
        raise ValueError(
            f"unknown engine {engine!r}; supported: {', '.join(sorted(PARSERS))}"
        ) from None
