"""The plugins and the default registry (every plugin type the config may name)."""

from __future__ import annotations

from services.gateway.scheduling.plugin import Plugin, Registry
from services.gateway.scheduling.plugins.admitters import LatencySloAdmitter
from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer
from services.gateway.scheduling.plugins.filters import (
    LongestPrefixFilter,
    PrefixCacheAffinityFilter,
    SloHeadroomTierFilter,
)
from services.gateway.scheduling.plugins.latency_scorer import LatencyScorer
from services.gateway.scheduling.plugins.pickers import (
    MaxScorePicker,
    RandomPicker,
    RoundRobinPicker,
    WeightedRandomPicker,
)
from services.gateway.scheduling.plugins.producer import PredictedLatencyProducer
from services.gateway.scheduling.plugins.scorers import (
    CacheAwareScorer,
    KvCacheUtilizationScorer,
    LeastRequestScorer,
    PrefixScorer,
    QueueScorer,
)

ALL_PLUGINS: tuple[type[Plugin], ...] = (
    PredictedLatencyProducer,
    LatencySloAdmitter,
    PrefixCacheAffinityFilter,
    SloHeadroomTierFilter,
    LongestPrefixFilter,
    LatencyScorer,
    LatencyCostScorer,
    QueueScorer,
    KvCacheUtilizationScorer,
    PrefixScorer,
    LeastRequestScorer,
    CacheAwareScorer,
    MaxScorePicker,
    WeightedRandomPicker,
    RandomPicker,
    RoundRobinPicker,
)


def default_registry() -> Registry:
    return Registry(ALL_PLUGINS)
