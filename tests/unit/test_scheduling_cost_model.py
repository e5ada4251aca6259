"""The prefill cost model the gateway learns from its own traffic."""

from __future__ import annotations

import random

import pytest

from services.gateway.scheduling.cost_model import (
    PRIOR,
    CostModelConfig,
    PrefillCostModel,
    PrefillWork,
)

TRUE = (0.0225, 1.6e-5, 2.6e-9)  # the simulator's H100 profile


def true_t(u: float, c: float) -> float:
    a, b, d = TRUE
    return a + b * u + d * u * (c + u / 2)


def test_starts_at_the_prior():
    m = PrefillCostModel()
    assert m.coefficients == PRIOR and m.observations == 0
    a, b, d = PRIOR
    assert m.estimate(1000, 500) == pytest.approx(a + b * 1000 + d * 1000 * (500 + 500))
    assert m.estimate(-5) == pytest.approx(a)  # negative token counts are 0


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_converges_to_the_pods_behaviour(noise):
    rng = random.Random(0)
    m = PrefillCostModel()
    for _ in range(400):
        u = rng.uniform(50, 60_000)
        c = rng.choice([0.0, rng.uniform(0, 40_000)])
        assert m.observe(u, c, true_t(u, c) * rng.lognormvariate(0, noise))
    for u, c in ((200, 0), (8_000, 0), (12_000, 30_000), (60_000, 0)):
        assert m.estimate(u, c) == pytest.approx(true_t(u, c), rel=0.1), (u, c)
    assert all(x >= 0 for x in m.coefficients)


def test_coefficients_stay_non_negative_on_adversarial_data():
    m = PrefillCostModel()
    # longer prompts faster than short ones would need a negative slope
    for u in range(100, 20_000, 100):
        m.observe(u, 0.0, max(0.001, 1.0 - u / 25_000))
    assert all(x >= 0 for x in m.coefficients)
    assert m.estimate(10_000) > 0


@pytest.mark.parametrize("seconds", [0.0, -1.0, 1e-6, 1e6])
def test_implausible_observations_are_ignored(seconds):
    m = PrefillCostModel()
    assert not m.observe(1000, 0, seconds)
    assert m.observations == 0 and m.coefficients == PRIOR


def test_forgets_an_old_regime():
    m = PrefillCostModel(CostModelConfig(decay=0.99))
    for _ in range(500):
        m.observe(10_000, 0, 1.0)
    for _ in range(500):
        m.observe(10_000, 0, 0.25)  # the pods got four times faster
    assert m.estimate(10_000) == pytest.approx(0.25, rel=0.05)


def test_prefill_work_is_priced_like_the_sum_of_its_estimates_at_any_coefficients():
    rng = random.Random(7)
    m = PrefillCostModel()
    work = PrefillWork()
    queued = [(rng.uniform(0, 80_000), rng.uniform(0, 40_000)) for _ in range(25)]
    for u, c in queued:
        work.add(u, c)
    for u, c in queued[:5]:
        work.add(u, c, -1.0)
    left = queued[5:]
    assert m.price(work) == pytest.approx(sum(m.estimate(u, c) for u, c in left), rel=1e-9)
    for _ in range(40):  # the model learns: the same work now costs what it says now
        u = rng.uniform(1_000, 60_000)
        m.observe(u, 0.0, 0.4 * m.estimate(u))
    assert m.price(work) == pytest.approx(sum(m.estimate(u, c) for u, c in left), rel=1e-9)
    assert m.price(PrefillWork()) == 0.0
