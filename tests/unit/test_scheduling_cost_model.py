"""The prefill and decode cost models the gateway learns from its own traffic."""

from __future__ import annotations

import random

import pytest

from services.gateway.scheduling.cost_model import (
    DECODE_PRIOR_S_PER_TOKEN,
    PRIOR,
    ClassDecodeModels,
    CostModelConfig,
    DecodeCostModel,
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


# --- decode: step time against the context decoding on the pod ---------------------------
def test_the_decode_slope_starts_at_the_prior_and_learns_the_pods():
    m = DecodeCostModel()
    assert m.seconds_per_token == DECODE_PRIOR_S_PER_TOKEN
    rng = random.Random(3)
    for _ in range(600):  # an A100-like slope, 1.6x the prior, with 10% noise
        ctx = rng.uniform(0, 400_000)
        m.observe(ctx, (0.012 + 9.6e-8 * ctx) * rng.uniform(0.9, 1.1))
    assert m.seconds_per_token == pytest.approx(9.6e-8, rel=0.05)
    assert m.spread_tokens == pytest.approx(400_000 / 12**0.5, rel=0.1)


def test_the_decode_slope_needs_spread_contexts_and_stays_non_negative():
    m = DecodeCostModel()
    for _ in range(500):  # one context only: no slope can be read, the prior stays
        m.observe(20_000, 0.03)
    assert m.seconds_per_token == pytest.approx(DECODE_PRIOR_S_PER_TOKEN)
    rng = random.Random(4)
    for _ in range(2000):  # TPOT falling with the context (no such engine): clamped at 0
        ctx = rng.uniform(0, 300_000)
        m.observe(ctx, 0.05 - 1e-7 * ctx + 0.04)
    assert m.seconds_per_token == 0.0


@pytest.mark.parametrize("tpot", [0.0, -0.01, float("nan"), 11.0])
def test_implausible_decode_observations_are_ignored(tpot):
    m = DecodeCostModel()
    assert not m.observe(10_000, tpot) and m.observations == 0
    assert not m.observe(-1.0, 0.02) and not m.observe(float("nan"), 0.02)
    assert m.observe(10_000, 0.02) and m.observations == 1


def test_the_decode_slope_forgets_an_old_regime():
    m = DecodeCostModel()
    rng = random.Random(5)
    for slope in (2e-8, 1.2e-7):
        for _ in range(1500):
            ctx = rng.uniform(0, 300_000)
            m.observe(ctx, 0.01 + slope * ctx)
    assert m.seconds_per_token == pytest.approx(1.2e-7, rel=0.05)


def test_each_hardware_class_has_its_own_decode_model():
    models = ClassDecodeModels()
    for ctx in range(0, 300_000, 1000):
        models.for_class("a100").observe(ctx, 0.01 + 1e-7 * ctx)
    assert models.for_class("a100").seconds_per_token == pytest.approx(1e-7, rel=0.02)
    assert models.for_class(None).seconds_per_token == DECODE_PRIOR_S_PER_TOKEN
    assert set(models.classes) == {"a100", None}


def test_the_free_context_is_where_attention_takes_as_long_as_the_rest_of_a_step():
    m = DecodeCostModel()
    assert m.base_seconds == 0.0 and m.free_tokens == 0.0  # nothing known
    rng = random.Random(6)
    for _ in range(800):
        ctx = rng.uniform(0, 400_000)
        m.observe(ctx, 0.012 + 6e-8 * ctx)
    assert m.base_seconds == pytest.approx(0.012, rel=0.05)
    assert m.free_tokens == pytest.approx(0.012 / 6e-8, rel=0.05)
