"""The non-greedy lab reference ``oracle-rollout`` (bench/lab/rollout.py): the whole lab
copied at a decision, each candidate played forward under headroom."""

from __future__ import annotations

import json

import pytest

from bench.lab.compare import check_ladder
from bench.lab.config import DEFAULT_MODEL, LabConfig
from bench.lab.oracle import ORACLE_PATH, is_reference, routing_profile
from bench.lab.rollout import ORACLE_ROLLOUT, ORACLE_ROLLOUT_BLIND, Rollout
from bench.lab.run import load_lab_trace, run_lab
from bench.lab.simulation import LabSimulation
from bench.lab.suite_run import SLO_BLIND, Workload, tasks_for
from bench.lab.synthetic import write_mooncake_trace
from services.gateway.scheduling.config import load_config
from services.gateway.settings import GatewaySettings
from services.simulator.profiles import PROFILES

H100 = PROFILES["h100-llama3-8b"]


@pytest.fixture(scope="module")
def busy_trace(tmp_path_factory):
    """More than two pods can serve: headroom's flow-control queue holds requests."""
    path = write_mooncake_trace(tmp_path_factory.mktemp("r") / "m.jsonl", 80, rate_rps=60.0)
    return load_lab_trace(LabConfig(trace=str(path)))


def sim_for(trace, policy: str = "headroom", **kw) -> LabSimulation:
    return LabSimulation(
        trace.requests, profile=H100, pods=2, seed=0, scheduling=load_config(),
        policy=policy, gateway=GatewaySettings(), model=DEFAULT_MODEL, streaming=True,
        pod_ingress_s=0.002, pod_ingress_s_per_token=1e-6, **kw,
    )  # fmt: skip


def outcome(records) -> list[tuple]:
    return [(r.status, r.pod, r.dispatched_s, r.first_token_s, r.finished_s) for r in records]


def test_a_copy_of_the_run_at_a_decision_replays_the_run_exactly(busy_trace):
    """A copy taken at a decision (queued releases included), sent the same way and played
    to the end, gives every request the same pod and times as the run itself; the copy's
    cohort cost is the sum of the run's own TTFTs for those requests."""
    copies = {}
    rollout = Rollout(horizon_s=0.5)
    released = []

    def on_decision(p, decision, now):
        released.append(now - p.request.arrival_s > 0.05)
        if p.request.index in (30, 60) and p.request.index not in copies:
            fork, fp = sim.fork(p)
            copies[p.request.index] = (fork, fp, decision, now, rollout.cohort(sim, now))

    sim = sim_for(busy_trace, on_decision=on_decision)
    sim.defer_releases = True  # as a rollout run does, so a copy resumes cleanly
    records = sim.run()
    assert sum(released) > 10  # the queue held requests: copies include its releases
    assert set(copies) == {30, 60}
    for fork, fp, decision, now, cohort in copies.values():
        assert fork.learner is None and fork.rollout is None and fork.on_decision is None
        assert fork.pods[0].driver is not sim.pods[0].driver
        assert len(cohort) > 1 and fp.request.index in cohort
        fork._dispatch(fp, decision, now)
        cost = rollout.cost(fork, cohort, now)
        assert cost == pytest.approx(
            sum(records[j].first_token_s - records[j].arrival_s for j in cohort), abs=1e-9
        )
        fork.advance()
        assert outcome(fork.records) == outcome(records)
    assert rollout.capped == 0


def test_deferring_the_queue_releases_keeps_every_request_served(busy_trace):
    plain = sim_for(busy_trace).run()
    sim = sim_for(busy_trace)
    sim.defer_releases = True
    deferred = sim.run()
    assert all(r.status == "ok" for r in plain) and all(r.status == "ok" for r in deferred)
    # requests did wait in the queue, and every one was released (none left pending)
    assert max(r.dispatched_s - r.arrival_s for r in deferred) > 0.05


def test_the_rollout_improves_headroom_on_its_own_objective(busy_trace):
    """Every decision's pick has a cohort cost no greater than headroom's choice's, and at
    least one decision differs; the run serves every request."""
    seen = []

    def on_decision(p, decision, now):
        if "rollout_cost" in decision.notes:
            n = decision.notes
            assert n["rollout_base_pick"] == decision.ranked[0] or n["rollout_cost"] < n[
                "rollout_base_cost"]  # fmt: skip
            seen.append((n["rollout_cost"], n["rollout_base_cost"]))

    sim = sim_for(busy_trace, ORACLE_ROLLOUT, on_decision=on_decision, rollout_horizon_s=0.5)
    records = sim.run()
    assert all(r.status == "ok" for r in records) and all(r.path == ORACLE_PATH for r in records)
    s = sim.rollout.summary()
    assert s["decisions"] == len(seen) == len(records) and s["forks"] == 2 * len(records)
    assert all(best <= base for best, base in seen)
    assert 0 < s["changed"] == sum(best < base for best, base in seen)
    assert s["foresight"] and s["horizon_s"] == 0.5


def test_the_rollout_is_a_lab_reference_over_headroom_and_refuses_slo_headers(tmp_path):
    assert ORACLE_ROLLOUT not in load_config().profiles
    assert is_reference(ORACLE_ROLLOUT) and is_reference(ORACLE_ROLLOUT_BLIND)
    assert routing_profile(ORACLE_ROLLOUT) == routing_profile(ORACLE_ROLLOUT_BLIND) == "headroom"
    check_ladder(LabConfig(trace="-"), [ORACLE_ROLLOUT, "gie-default"], [1.0])
    # the suite runs it without headers only and reads its attainment from those requests
    w = Workload("w", "train", "chat", "-", 0, None, {})
    for slo in ("both", "on"):
        ts = tasks_for([w], LabConfig(trace="-"), [ORACLE_ROLLOUT], [1.0], slo)
        assert [(t.headers, t.derive_slo) for t in ts] == [(False, True)]
    assert ORACLE_ROLLOUT not in SLO_BLIND  # it does not claim headers leave it unchanged
    path = write_mooncake_trace(tmp_path / "m.jsonl", 20, rate_rps=8.0)
    trace = load_lab_trace(LabConfig(trace=str(path)))
    with pytest.raises(ValueError, match="without SLO headers"):
        sim_for(trace, ORACLE_ROLLOUT, slo_ttft_ms=500.0)
    with pytest.raises(ValueError, match="rollout_horizon_s"):
        LabConfig(trace="-", rollout_horizon_s=-1.0)
    with pytest.raises(ValueError, match="horizon_s"):
        Rollout(cap_s=0.0)
    with pytest.raises(ValueError, match="objective"):
        Rollout(objective="p90")
    with pytest.raises(ValueError, match="rollout_objective"):
        LabConfig(trace="-", rollout_objective="max")
    # the run's learner refits every 0.2 s (headroom predicts for SLO requests); its copies
    # have none and no refit checks
    r = run_lab(LabConfig(trace=str(path), policy=ORACLE_ROLLOUT_BLIND, pods=2, regret_samples=0,
                          rollout_horizon_s=0.25, train_interval_s=0.2,
                          rollout_objective="squares"))  # fmt: skip
    assert r["prediction"] is not None
    assert r["rollout"]["foresight"] is False and r["rollout"]["horizon_s"] == 0.25
    assert r["rollout"]["objective"] == "squares"
    assert r["rollout"]["decisions"] == r["completed"] == 20
    assert run_lab(LabConfig(trace=str(path), pods=2, regret_samples=0))["rollout"] is None
    json.dumps(r)  # the report stays JSON
