"""Regret in the lab (bench/lab/regret.py): forks replay a decision on every candidate pod."""

from __future__ import annotations

import random

import pytest

from bench.lab.config import DEFAULT_MODEL, LabConfig
from bench.lab.regret import RegretProbe, default_regret_samples, regret_summary
from bench.lab.run import load_lab_trace, run_lab
from bench.lab.simulation import LabSimulation
from bench.lab.synthetic import write_mooncake_trace
from services.gateway.scheduling.config import load_config
from services.gateway.settings import GatewaySettings
from services.simulator.engine import Engine
from services.simulator.profiles import PROFILES
from services.simulator.virtual_pod import VirtualPod

H100 = PROFILES["h100-llama3-8b"]


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = write_mooncake_trace(tmp_path_factory.mktemp("t") / "m.jsonl", 120, rate_rps=12.0)
    return load_lab_trace(LabConfig(trace=str(path)))


def simulate(trace, pods: int, policy: str, samples: int) -> tuple[LabSimulation, RegretProbe]:
    probe = RegretProbe(len(trace), samples, seed=0)
    sim = LabSimulation(
        trace.requests, profile=H100, pods=pods, seed=0, scheduling=load_config(),
        policy=policy, gateway=GatewaySettings(), model=DEFAULT_MODEL, streaming=True,
        pod_ingress_s=0.002, regret=probe,
    )  # fmt: skip
    sim.run()
    return sim, probe


@pytest.mark.parametrize("policy", ["round-robin", "gie-default", "headroom"])
def test_regret_is_never_negative_and_the_chosen_fork_reproduces_the_run(trace, policy):
    sim, probe = simulate(trace, 3, policy, 40)
    assert len(probe.cases) == 40
    records = {r.index: r for r in sim.records}
    for case in probe.cases:
        assert case.pending == 0 and len(case.ttft_s) == 3
        assert case.regret_ms() >= 0.0
        # the fork of the chosen pod saw exactly the real future arrivals: same first token
        rec = records[case.index]
        assert case.submitted_at + case.ttft_s[case.chosen] == pytest.approx(
            rec.first_token_s, abs=1e-9
        )
    assert len(probe.regrets_ms()) == 40


def test_forking_does_not_change_the_run(trace):
    with_probe, _ = simulate(trace, 3, "gie-default", 40)
    without = LabSimulation(
        trace.requests, profile=H100, pods=3, seed=0, scheduling=load_config(),
        policy="gie-default", gateway=GatewaySettings(), model=DEFAULT_MODEL, streaming=True,
        pod_ingress_s=0.002,
    )  # fmt: skip
    without.run()
    assert [(r.pod, r.first_token_s, r.finished_s) for r in with_probe.records] == [
        (r.pod, r.first_token_s, r.finished_s) for r in without.records
    ]


def test_regret_is_zero_with_one_candidate(trace):
    _, probe = simulate(trace, 1, "round-robin", 30)
    assert probe.regrets_ms() == [0.0] * 30


def busy_pod(seed: int) -> VirtualPod:
    """A pod with 60k tokens of prefill queued."""
    pod = VirtualPod(Engine(H100, seed))
    for i in range(6):
        pod.engine.submit(f"q{i}", toks(10_000, 100 + i), 16, 0.0)
    pod.kick(0.0)
    return pod


@pytest.mark.parametrize("chosen", [0, 1])
def test_the_busy_pod_has_positive_regret_and_the_idle_one_none(chosen):
    pods = [busy_pod(1), VirtualPod(Engine(H100, 2))]
    probe = RegretProbe(1, 1, seed=0)
    probe.on_decision(0, "r", toks(500, 7), 8, list(enumerate(pods)), chosen, 0.001)
    probe.finish()
    [case] = probe.cases
    busy, idle = case.ttft_s[0], case.ttft_s[1]
    assert idle < 0.1 < 1.0 < busy  # 60k tokens of prefill ahead: well over a second
    assert case.regret_ms() == pytest.approx((busy - idle) * 1000.0 if chosen == 0 else 0.0)
    # the real pods were not touched
    assert pods[1].engine.stats().steps == 0 and "r" not in pods[0].engine


def test_a_later_arrival_reaches_the_forks_of_its_pod():
    """A request sent to the idle pod right after the sample competes with it there."""
    alone = RegretProbe(1, 1, seed=0)
    crowded = RegretProbe(1, 1, seed=0)
    ttft = []
    for probe, extra in ((alone, False), (crowded, True)):
        pods = [VirtualPod(Engine(H100, 2))]
        probe.on_decision(0, "r", toks(4000, 7), 8, list(enumerate(pods)), 0, 0.0)
        if extra:
            probe.on_submit(0, "other", toks(8000, 8), 8, 0.0)
        probe.finish()
        ttft.append(probe.cases[0].ttft_s[0])
    assert ttft[1] > ttft[0]  # the other prompt shares the sample's prefill steps


def test_sample_is_deterministic_per_seed_and_summary_shape():
    assert RegretProbe(1000, 50, 3).sample == RegretProbe(1000, 50, 3).sample
    assert RegretProbe(1000, 50, 3).sample != RegretProbe(1000, 50, 4).sample
    assert len(RegretProbe(10, 50, 0).sample) == 10
    assert default_regret_samples(12_000) == 100 and default_regret_samples(500) == 20
    s = regret_summary([0.0, 0.0, 10.0, 30.0])
    assert s["sampled"] == 4 and s["p50"] == 5.0 and s["best_share"] == 0.5
    assert regret_summary(None) == {
        "p50": None, "p90": None, "mean": None, "sampled": 0, "best_share": None,
    }  # fmt: skip


def test_lab_report_has_regret_for_every_policy(trace, tmp_path):
    path = write_mooncake_trace(tmp_path / "m.jsonl", 60, rate_rps=10.0)
    for policy in ("round-robin", "llmd-predicted"):
        r = run_lab(LabConfig(trace=str(path), policy=policy, pods=2, regret_samples=10))
        assert r["regret_ms"]["sampled"] == 10 and r["regret_ms"]["p90"] >= 0
    off = run_lab(LabConfig(trace=str(path), policy="round-robin", pods=2, regret_samples=0))
    assert off["regret_ms"]["sampled"] == 0
