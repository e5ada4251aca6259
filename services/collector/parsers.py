"""One metrics parser per model-server engine (pure): a /metrics page -> :class:`ParseResult`.

Engine parsers share one signature, ``(text: str) -> ParseResult``, and are registered in
:data:`PARSERS` by engine name (``vllm``, ``jetstream``, ``sglang``, ``tgi``). Each names the
metric families it reads; the line parser (:mod:`services.collector.exposition`) skips every
other line after a name check. Malformed lines and non-finite values of the metrics read are
counted in ``ParseResult.ignored``; pages are never rejected for them.

How each engine maps onto the engine-neutral result (REFERENCE section 4):

========== ================================ ============================ ===================
field      vLLM V1                          JetStream                    SGLang / TGI
========== ================================ ============================ ===================
waiting    num_requests_waiting (sum)       prefill+transfer+generate    num_queue_reqs /
                                            backlogs (sum)               tgi_queue_size
running    num_requests_running (sum)       0 (not exposed)              num_running_reqs /
                                                                         tgi_batch_current_size
kv_usage   kv_cache_usage_perc (mean; older kv_cache_utilization_perc    token_usage (mean) /
           gpu_cache_usage_perc)            (mean) else slots used       0 (TGI: not exposed)
prefix hit prefix_cache_hits / queries      0                            cache_hit_rate / 0
prefill    = waiting                        prefill_backlog_size (sum)   = waiting
backlog
slots used None (derived from running and   slots_used_percentage (mean  None
           a configured slot count)         over idx, a fraction)
LoRA       lora_requests_info (newest)      lora_request_info (newest)   none
========== ================================ ============================ ===================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from services.collector.exposition import (
    Labels,
    MalformedLine,
    Sample,
    iter_samples,
    metric_name,
    parse_sample,
)

__all__ = [
    "PARSERS",
    "Labels",
    "MalformedLine",
    "ParseResult",
    "Parser",
    "Sample",
    "get_parser",
    "iter_samples",
    "metric_name",
    "parse_jetstream",
    "parse_sample",
    "parse_sglang",
    "parse_tgi",
    "parse_vllm",
]


@dataclass(slots=True)
class ParseResult:
    """Engine-neutral pod state parsed from one /metrics page.

    ``waiting`` .. ``lora_adapters`` become the :class:`~shared.schemas.PodRecord` load fields;
    ``prefill_backlog`` and ``slots_used`` feed the collector's autoscaling signals (None when
    the engine does not expose them).
    """

    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # 0..1
    prefix_hit_rate: float = 0.0  # 0..1, lifetime hits / queries (0 when no queries)
    models: list[str] = field(default_factory=list)
    lora_adapters: list[str] = field(default_factory=list)  # running LoRA adapters
    prefill_backlog: float | None = None  # requests queued for prefill
    slots_used: float | None = None  # 0..1, batch (decode-slot) fullness
    kv_capacity_tokens: float | None = None  # KV-cache capacity (vLLM cache_config_info)
    hardware_class: str | None = None  # headroom_hardware_info{class=...} (the simulator's)
    ignored: int = 0  # malformed lines and wanted samples with unusable (NaN/Inf) values
    found: int = 0  # samples of wanted metrics that were used


Parser = Callable[[str], ParseResult]


def _clamp01(x: float) -> float:
    return min(1.0, max(0.0, x))


def _fraction(x: float) -> float:
    """A usage value that may be a fraction (0..1) or a percentage (0..100)."""
    return _clamp01(x / 100.0 if x > 1.0 else x)


def _split_adapters(s: str) -> list[str]:
    return [a.strip() for a in s.split(",") if a.strip()]


class _Acc:
    """Sums and counts per metric name over label sets, models and the newest LoRA label set
    per ``lora_key`` label; malformed and non-finite samples are counted as ignored."""

    __slots__ = ("cache_info", "counts", "hardware", "ignored", "lora_newest", "models", "sums")

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.models: set[str] = set()
        self.lora_newest: dict[str, tuple[float, str]] = {}
        self.cache_info: dict[str, float] = {}  # engine -> KV capacity in tokens
        self.ignored = 0
        self.hardware: str | None = None

    def feed(
        self,
        text: str,
        wanted: frozenset[str],
        lora: str | None = None,
        lora_key: tuple[str, ...] = ("engine",),
        cache_info: str | None = None,
    ) -> _Acc:
        sums, counts = self.sums, self.counts
        for s in iter_samples(text, wanted):
            if s is None or not math.isfinite(s.value):
                self.ignored += 1
                continue
            model = s.labels.get("model_name")
            if model:
                self.models.add(model)
            if s.name == HARDWARE_INFO:
                hw = s.labels.get("class", "").strip()
                if hw and self.hardware is None:
                    self.hardware = hw
                elif not hw:
                    self.ignored += 1
                continue
            counts[s.name] = counts.get(s.name, 0) + 1
            if s.name == cache_info:
                self._cache_info(s.labels)
                continue
            if s.name == lora:
                key = "\0".join(s.labels.get(k, "") for k in lora_key)
                prev = self.lora_newest.get(key)
                if prev is None or s.value >= prev[0]:
                    self.lora_newest[key] = (s.value, s.labels.get("running_lora_adapters", ""))
                continue
            sums[s.name] = sums.get(s.name, 0.0) + s.value
        return self

    def _cache_info(self, labels: dict[str, str]) -> None:
        try:
            tokens = float(labels["num_gpu_blocks"]) * float(labels["block_size"])
        except (KeyError, ValueError):
            self.ignored += 1  # an info gauge without usable capacity labels
            return
        if math.isfinite(tokens) and tokens > 0:
            self.cache_info[labels.get("engine", "")] = tokens
        else:
            self.ignored += 1

    def kv_capacity(self) -> float | None:
        """KV capacity in tokens summed over engines (None when no engine reported it)."""
        return sum(self.cache_info.values()) if self.cache_info else None

    def has(self, name: str) -> bool:
        return name in self.counts

    def total(self, *names: str) -> float:
        """Sum over label sets of each name, added up (0 when absent)."""
        return sum(self.sums.get(n, 0.0) for n in names)

    def mean(self, name: str) -> float:
        return self.sums.get(name, 0.0) / self.counts[name] if name in self.counts else 0.0

    def first_total(self, names: Iterable[str]) -> float:
        """The sum of the first present name (newer names listed first)."""
        return next((self.sums.get(n, 0.0) for n in names if n in self.counts), 0.0)

    def adapters(self) -> list[str]:
        out: set[str] = set()
        for _, running in self.lora_newest.values():
            out.update(_split_adapters(running))
        return sorted(out)

    def result(self, **fields: object) -> ParseResult:
        return ParseResult(
            models=sorted(self.models),
            lora_adapters=self.adapters(),
            hardware_class=self.hardware,
            ignored=self.ignored,
            found=sum(self.counts.values()),
            **fields,  # type: ignore[arg-type]
        )


# Every engine's page may carry the pod's hardware class as an info gauge (the simulator
# exposes it; a real server's class comes from its Kubernetes label, services/collector/
# k8s_discovery.py). It does not count as one of the engine's metrics (``found``).
HARDWARE_INFO = "headroom_hardware_info"
_COMMON_WANTED = frozenset({HARDWARE_INFO})


# --------------------------------------------------------------------------------------
# vLLM V1
# --------------------------------------------------------------------------------------
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_KV = "vllm:kv_cache_usage_perc"
VLLM_KV_OLD = "vllm:gpu_cache_usage_perc"
VLLM_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
VLLM_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
VLLM_LORA = "vllm:lora_requests_info"
VLLM_CACHE_INFO = "vllm:cache_config_info"
_VLLM_WANTED = frozenset(
    {VLLM_WAITING, VLLM_RUNNING, VLLM_KV, VLLM_KV_OLD, VLLM_LORA, VLLM_CACHE_INFO, *VLLM_HITS,
     *VLLM_QUERIES}
) | _COMMON_WANTED  # fmt: skip


def parse_vllm(text: str) -> ParseResult:
    """Parse a vLLM /metrics page.

    Gauges and counters are summed over label sets (several engines or models in one pod),
    except KV usage, which is a fraction and is averaged over label sets. The newer KV name
    wins over the older ``vllm:gpu_cache_usage_perc`` when both are present. Running LoRA
    adapters come from the newest ``vllm:lora_requests_info`` label set per engine (its value
    is the time it was last set; older label sets linger in the exposition). The KV-cache
    capacity is ``num_gpu_blocks x block_size`` of ``vllm:cache_config_info``, summed over
    engines (None when absent).
    """
    a = _Acc()
    a.feed(text, _VLLM_WANTED, lora=VLLM_LORA, cache_info=VLLM_CACHE_INFO)
    kv = a.mean(VLLM_KV if a.has(VLLM_KV) else VLLM_KV_OLD)
    hits, queries = a.first_total(VLLM_HITS), a.first_total(VLLM_QUERIES)
    waiting = max(0.0, a.total(VLLM_WAITING))
    return a.result(
        waiting=waiting,
        running=max(0.0, a.total(VLLM_RUNNING)),
        kv_usage=_clamp01(kv),
        prefix_hit_rate=_clamp01(hits / queries) if queries > 0 else 0.0,
        prefill_backlog=waiting,
        kv_capacity_tokens=a.kv_capacity(),
    )


# --------------------------------------------------------------------------------------
# JetStream (labels id, model_name; per-engine gauges add idx)
# --------------------------------------------------------------------------------------
JS_PREFILL = "jetstream_prefill_backlog_size"
JS_TRANSFER = "jetstream_transfer_backlog_size"
JS_GENERATE = "jetstream_generate_backlog_size"
JS_SLOTS = "jetstream_slots_used_percentage"
JS_KV = "kv_cache_utilization_perc"
JS_LORA = "lora_request_info"
_JS_WANTED = (
    frozenset({JS_PREFILL, JS_TRANSFER, JS_GENERATE, JS_SLOTS, JS_KV, JS_LORA}) | _COMMON_WANTED
)


def parse_jetstream(text: str) -> ParseResult:
    """Parse a JetStream /metrics page.

    Every request not yet decoding counts as ``waiting`` (prefill, transfer and generate
    backlogs); JetStream does not expose a running count, so ``running`` stays 0 and load
    shows in ``slots_used`` (mean of ``jetstream_slots_used_percentage`` over its decode
    engines; a fraction, values above 1 are read as percentages). ``kv_usage`` is
    ``kv_cache_utilization_perc`` where the server exports it, otherwise slots used (the
    closest proxy for how full a TPU's HBM-resident batch is). A page that holds only
    unrelated ``kv_cache_utilization_perc`` / ``lora_request_info`` series (no jetstream_*
    gauge) is reported as holding no JetStream metrics.
    """
    a = _Acc()
    a.feed(text, _JS_WANTED, lora=JS_LORA, lora_key=("id",))
    if not (a.has(JS_PREFILL) or a.has(JS_SLOTS) or a.has(JS_GENERATE) or a.has(JS_TRANSFER)):
        return ParseResult(ignored=a.ignored)
    slots = _fraction(a.mean(JS_SLOTS)) if a.has(JS_SLOTS) else None
    kv = _fraction(a.mean(JS_KV)) if a.has(JS_KV) else (slots or 0.0)
    prefill = max(0.0, a.total(JS_PREFILL))
    return a.result(
        waiting=max(0.0, a.total(JS_PREFILL, JS_TRANSFER, JS_GENERATE)),
        running=0.0,
        kv_usage=kv,
        prefix_hit_rate=0.0,
        prefill_backlog=prefill,
        slots_used=slots,
    )


# --------------------------------------------------------------------------------------
# SGLang (labels model_name and, per scheduler, tp_rank / dp_rank ...)
# --------------------------------------------------------------------------------------
SGL_RUNNING = "sglang:num_running_reqs"
SGL_QUEUE = "sglang:num_queue_reqs"
SGL_TOKEN_USAGE = "sglang:token_usage"
SGL_HIT_RATE = "sglang:cache_hit_rate"
_SGL_WANTED = frozenset({SGL_RUNNING, SGL_QUEUE, SGL_TOKEN_USAGE, SGL_HIT_RATE}) | _COMMON_WANTED


def parse_sglang(text: str) -> ParseResult:
    """Parse an SGLang /metrics page: queue and running requests are summed over schedulers,
    token (KV pool) usage and the prefix-cache hit rate (both fractions) are averaged."""
    a = _Acc()
    a.feed(text, _SGL_WANTED)
    waiting = max(0.0, a.total(SGL_QUEUE))
    return a.result(
        waiting=waiting,
        running=max(0.0, a.total(SGL_RUNNING)),
        kv_usage=_clamp01(a.mean(SGL_TOKEN_USAGE)),
        prefix_hit_rate=_clamp01(a.mean(SGL_HIT_RATE)),
        prefill_backlog=waiting,
    )


# --------------------------------------------------------------------------------------
# TGI (text-generation-inference; unlabelled gauges)
# --------------------------------------------------------------------------------------
TGI_QUEUE = "tgi_queue_size"
TGI_BATCH = "tgi_batch_current_size"
_TGI_WANTED = frozenset({TGI_QUEUE, TGI_BATCH}) | _COMMON_WANTED


def parse_tgi(text: str) -> ParseResult:
    """Parse a TGI /metrics page: ``tgi_queue_size`` is waiting, ``tgi_batch_current_size``
    running. TGI exposes no KV usage or prefix-cache counters (both stay 0)."""
    a = _Acc()
    a.feed(text, _TGI_WANTED)
    waiting = max(0.0, a.total(TGI_QUEUE))
    return a.result(
        waiting=waiting,
        running=max(0.0, a.total(TGI_BATCH)),
        prefill_backlog=waiting,
    )


# --------------------------------------------------------------------------------------
# Registry: engine name -> parser
# --------------------------------------------------------------------------------------
PARSERS: dict[str, Parser] = {
    "vllm": parse_vllm,
    "jetstream": parse_jetstream,
    "sglang": parse_sglang,
    "tgi": parse_tgi,
}


def get_parser(engine: str) -> Parser:
    try:
        return PARSERS[engine]
    except KeyError:
        raise ValueError(
            f"unknown engine {engine!r}; supported: {', '.join(sorted(PARSERS))}"
        ) from None
