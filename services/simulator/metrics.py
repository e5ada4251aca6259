"""Prometheus exposition of a simulated pod: vLLM V1 metric names, or JetStream names when
the profile's ``engine`` is ``"jetstream"`` (REFERENCE section 4).

Gauges and counters are read from ``Engine.stats()`` at scrape time; the latency histograms
are accumulated from the observations each engine step returns. Everything lives in a
per-pod ``CollectorRegistry`` (no module globals, no ``_created`` series) so a scrape every
100 ms stays cheap.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from services.simulator.engine import Engine, StepOutcome

# vLLM's bucket boundaries (seconds)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

LABELS = ("model_name", "engine")
# the pod's hardware class, read by the collector (services/collector/parsers.py)
HARDWARE_INFO = "headroom_hardware_info"
JETSTREAM_LABELS = ("id", "model_name")


class Histogram:
    """Cumulative-bucket histogram without locks (one event loop writes it)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe_many(self, values: Iterable[float]) -> None:
        for v in values:
            self.counts[bisect_left(self.bounds, v)] += 1
            self.total += v

    def cumulative(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        return out


class PodMetrics:
    """Collector for one pod; ``render()`` gives the /metrics body."""

    def __init__(self, engine: Engine, model: str, pod_id: str = "0") -> None:
        self.engine = engine
        self.model = model
        self.pod_id = pod_id
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)  # one observation per finished request
        # HTTP requests served, by (handler, method, status class), as vLLM's API server
        # counts them (prometheus-fastapi-instrumentator's http_requests_total)
        self.http_requests: dict[tuple[str, str, str], int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def record(self, out: StepOutcome) -> None:
        if out.ttft_s:
            self.ttft.observe_many(out.ttft_s)
        if out.itl_s:
            self.itl.observe_many(out.itl_s)
        if out.e2e_s:
            self.e2e.observe_many(out.e2e_s)
        if out.tpot_s:
            self.tpot.observe_many(out.tpot_s)

    def count_http(self, handler: str, method: str, status: int) -> None:
        key = (handler, method, f"{status // 100}xx")
        self.http_requests[key] = self.http_requests.get(key, 0) + 1

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        if self.engine.profile.engine == "jetstream":
            yield from self._collect_jetstream()
        else:
            yield from self._collect_vllm()
        http = CounterMetricFamily(
            "http_requests", "Total number of requests by method, status and handler.",
            labels=("handler", "method", "status"),
        )  # fmt: skip
        for (handler, method, status), n in sorted(self.http_requests.items()):
            http.add_metric([handler, method, status], n)
        yield http
        hw = self.engine.profile.hardware_class
        if hw:
            info = GaugeMetricFamily(
                HARDWARE_INFO, "The pod's hardware class (always 1).", labels=("class",)
            )
            info.add_metric([hw], 1.0)
            yield info

    def _collect_jetstream(self) -> Iterator[Metric]:
        """JetStream's names. Its prefill backlog is our waiting queue; the simulated engine
        inserts a prefilled request into its decode slot in the same step, so the transfer
        and generate backlogs stay 0."""
        s = self.engine.stats()
        slots = self.engine.profile.max_num_seqs
        gauge, _, hist = _families(JETSTREAM_LABELS, [self.pod_id, self.model])

        yield gauge("jetstream_prefill_backlog_size", "Requests waiting for prefill.", s.waiting)
        yield gauge(
            "jetstream_slots_used_percentage", "Fraction of decode slots in use.", s.running / slots
        )
        yield gauge("jetstream_transfer_backlog_size", "Prefilled requests awaiting transfer.", 0)
        yield gauge("jetstream_generate_backlog_size", "Requests awaiting a decode slot.", 0)
        yield hist("jetstream_time_to_first_token", "Time to first token (s).", self.ttft)
        yield hist(
            "jetstream_time_per_output_token",
            "Mean time per output token per request (s).",
            self.tpot,
        )

    def _collect_vllm(self) -> Iterator[Metric]:
        s = self.engine.stats()
        p = self.engine.profile
        gauge, counter, hist = _families(LABELS, [self.model, "0"])

        yield gauge("vllm:num_requests_running", "Requests in the running batch.", s.running)
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", s.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100%.", s.kv_usage)
        yield counter(
            "vllm:prefix_cache_queries", "Prefix-cache queries, in tokens.", s.prefix_cache_queries
        )
        yield counter(
            "vllm:prefix_cache_hits", "Prefix-cache hits, in tokens.", s.prefix_cache_hits
        )
        yield counter("vllm:prompt_tokens", "Prefill tokens processed.", s.prompt_tokens)
        yield counter("vllm:generation_tokens", "Generation tokens processed.", s.generation_tokens)
        yield counter("vllm:num_preemptions", "Cumulative preemptions.", s.preemptions)
        yield counter("vllm:request_success", "Successfully finished requests.", s.request_success)
        yield hist("vllm:time_to_first_token_seconds", "Time to first token.", self.ttft)
        yield hist("vllm:inter_token_latency_seconds", "Inter-token latency.", self.itl)
        yield hist("vllm:e2e_request_latency_seconds", "End-to-end request latency.", self.e2e)

        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the cache config.",
            labels=("engine", "block_size", "num_gpu_blocks", "enable_prefix_caching"),
        )
        info.add_metric(
            ["0", str(p.block_size), str(p.num_gpu_blocks), str(p.enable_prefix_caching)], 1.0
        )
        yield info
        lora = GaugeMetricFamily(
            "vllm:lora_requests_info",
            "Running stats on LoRA requests.",
            labels=("max_lora", "running_lora_adapters", "waiting_lora_adapters"),
        )
        lora.add_metric(["0", "", ""], time.time())
        yield lora


def _families(labels: Sequence[str], values: list[str]):
    """Builders of one-sample gauge, counter and histogram families with these labels."""

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=labels)
        g.add_metric(values, value)
        return g

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=labels)
        c.add_metric(values, value)
        return c

    def hist(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
        m = HistogramMetricFamily(name, doc, labels=labels)
        m.add_metric(values, h.cumulative(), h.total)
        return m

    return gauge, counter, hist
