"""What the collector would publish for a simulated pod, straight from the engine's stats
(pure): the routing lab's stand-in for "scrape /metrics, parse, build a PodRecord".

It maps :class:`~services.simulator.engine.EngineStats` the way the pod server exposes them
(services/simulator/metrics.py) and the collector parses them (services/collector/parsers.py):

- vLLM profiles: waiting, running, KV-cache usage and the lifetime prefix-cache hit rate
  (hits / queries, in tokens; 0 before any query);
- every profile: the context length its ``/v1/models`` reports (``max_model_len``, read by
  the collector's scraper) and its hardware class (``headroom_hardware_info``);
- JetStream profiles: the prefill backlog is ``waiting``, ``running`` is not exposed (0) and
  ``kv_usage`` is the decode slots' fullness (running / slots), as the collector reads a
  JetStream page without a KV gauge.

``tests/unit/test_lab_pod_record.py`` checks the mapping against the real exposition parsed by
the real collector parser.
"""

from __future__ import annotations

from services.simulator.engine import EngineStats
from services.simulator.profiles import Profile
from shared.schemas import PodRecord


def pod_record(
    stats: EngineStats,
    profile: Profile,
    *,
    name: str,
    url: str,
    model: str,
    scraped_at: float,
) -> PodRecord:
    """A ready record for one scrape of a simulated pod at ``scraped_at``."""
    if profile.engine == "jetstream":
        slots = stats.running / profile.max_num_seqs if profile.max_num_seqs else 0.0
        waiting, running, kv, hit_rate = float(stats.waiting), 0.0, min(1.0, slots), 0.0
    else:
        q = stats.prefix_cache_queries
        waiting, running = float(stats.waiting), float(stats.running)
        kv = min(1.0, max(0.0, stats.kv_usage))
        hit_rate = min(1.0, stats.prefix_cache_hits / q) if q > 0 else 0.0
    return PodRecord(
        name=name,
        url=url,
        ready=True,
        scraped_at=scraped_at,
        models=[model],
        engine=profile.engine,
        waiting=waiting,
        running=running,
        kv_usage=kv,
        prefix_hit_rate=hit_rate,
        kv_capacity_tokens=None
        if profile.engine == "jetstream"
        else float(stats.num_gpu_blocks * stats.block_size),
        max_model_len=min(profile.max_model_len, profile.kv_capacity_tokens),
        hardware_class=profile.hardware_class or None,
    )
