"""The greedy TTFT oracle (bench/lab/oracle.py): a lab-only reference policy that forks every
candidate pod and sends the request where its first token comes soonest."""

from __future__ import annotations

import random

import pytest

from bench.lab.compare import check_ladder
from bench.lab.config import DEFAULT_MODEL, LabConfig
from bench.lab.oracle import (
    ORACLE_PATH,
    ORACLE_PREDICTED,
    ORACLE_TTFT,
    ORACLE_TTFT_BLIND,
    InFlight,
    TtftOracle,
    is_reference,
    routing_profile,
)
from bench.lab.run import load_lab_trace, run_lab
from bench.lab.simulation import LabSimulation
from bench.lab.suite_run import SLO_BLIND, Workload, tasks_for
from bench.lab.synthetic import write_mooncake_trace
from services.gateway.scheduling.config import load_config
from services.gateway.settings import GatewaySettings
from services.simulator.engine import Engine
from services.simulator.profiles import PROFILES
from services.simulator.virtual_pod import VirtualPod

H100 = PROFILES["h100-llama3-8b"]
POD_INGRESS_S = 0.002
POD_INGRESS_S_PER_TOKEN = 1e-6


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


def loaded_pod(seed: int, prompts: int) -> VirtualPod:
    """A pod with ``prompts`` x 8k tokens of prefill queued at t = 0."""
    pod = VirtualPod(Engine(H100, seed))
    for i in range(prompts):
        pod.engine.submit(f"q{seed}-{i}", toks(8000, 100 * seed + i), 16, 0.0)
    pod.kick(0.0)
    return pod


def test_the_least_loaded_pod_has_the_least_ttft_and_the_real_pods_are_untouched():
    pods = [loaded_pod(1, 5), loaded_pod(2, 1), loaded_pod(3, 0), loaded_pod(4, 3)]
    before = [(p.engine.stats().steps, p.step_end) for p in pods]
    oracle = TtftOracle()
    ttfts = oracle.ttfts(pods, "r", toks(600, 7), 8, 0.001, [(), (), (), ()])
    assert all(t is not None and t > 0 for t in ttfts)
    # more prefill queued ahead, later first token: 5 > 3 > 1 > 0 prompts
    assert ttfts[0] > ttfts[3] > ttfts[1] > ttfts[2]
    assert oracle.rank(ttfts, [0, 1, 2, 3]) == [2, 1, 3, 0]
    assert [(p.engine.stats().steps, p.step_end) for p in pods] == before
    assert all("r" not in p.engine for p in pods)
    assert oracle.summary()["decisions"] == 1 and oracle.summary()["forks"] == 4


def test_a_request_already_on_its_way_counts_and_a_refused_pod_is_no_candidate():
    idle = [VirtualPod(Engine(H100, 5)), VirtualPod(Engine(H100, 5))]  # twins
    oracle = TtftOracle()
    prompt = toks(600, 7)
    alone = oracle.ttfts(idle, "r", prompt, 8, 0.001, [[], []])
    assert alone[0] == alone[1] < 0.1
    for at in (0.0005, 0.001):  # 20k tokens of prefill dispatched there first
        big = InFlight(at, "big", toks(20_000, 9), 8)
        assert oracle.ttfts(idle, "r", prompt, 8, 0.001, [[big], []]) == [
            pytest.approx(0.78, abs=0.1), alone[1]]  # fmt: skip
    # arriving just after it (within its API overhead), it still shares its prefill step
    later = InFlight(0.0011, "big", toks(20_000, 9), 8)
    slower = oracle.ttfts(idle, "r", prompt, 8, 0.001, [[later], []])[0]
    assert alone[0] < slower < 0.1
    # a prompt longer than the engine takes: refused everywhere, no candidate left
    huge = toks(H100.max_model_len + 10, 3)
    assert oracle.ttfts(idle, "h", huge, 8, 0.0, [[], []]) == [None, None]
    assert oracle.rank([None, None], [0, 1]) == []
    # ties go to the lowest pod index
    assert oracle.rank([0.2, 0.1, 0.1], [2, 5, 1]) == [2, 1, 0]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = write_mooncake_trace(tmp_path_factory.mktemp("o") / "m.jsonl", 150, rate_rps=14.0)
    return load_lab_trace(LabConfig(trace=str(path)))


def test_in_the_lab_the_oracle_picks_the_argmin_and_the_real_ttft_is_its_forks(trace):
    """Over a run on 3 pods: every decision goes to the pod whose fork reported the least
    TTFT, and where no request routed later reached that pod before the first token, the
    real TTFT (from reaching the engine) equals the chosen fork's exactly (a later decision
    with a shorter prompt may reach the pod first: not known to the oracle)."""
    seen: dict[str, tuple[list, list]] = {}

    def on_decision(p, decision, now):
        seen[p.rid] = (list(decision.scores), list(decision.ranked))

    sim = LabSimulation(
        trace.requests, profile=H100, pods=3, seed=0, scheduling=load_config(),
        policy=ORACLE_TTFT, gateway=GatewaySettings(), model=DEFAULT_MODEL, streaming=True,
        pod_ingress_s=POD_INGRESS_S, pod_ingress_s_per_token=POD_INGRESS_S_PER_TOKEN,
        on_decision=on_decision,
    )  # fmt: skip
    records = sim.run()
    assert len(seen) == len(records) and all(r.path == ORACLE_PATH for r in records)
    assert sim.oracle is not None and sim.oracle.decisions == len(records)
    names = [p.name for p in sim.pods]  # the candidates: every pod, in name order (< 10 pods)

    def reached(r) -> float:
        return r.dispatched_s + POD_INGRESS_S + POD_INGRESS_S_PER_TOKEN * r.input_tokens

    order = {int(rid[1:]): k for k, rid in enumerate(seen)}  # decision order ("r<index>")
    exact = 0
    spread = 0
    for r, req in zip(records, trace.requests, strict=True):
        scores, ranked = seen[f"r{req.index}"]
        ttft_ms = [-s for s in scores]
        best = min(range(len(ttft_ms)), key=lambda i: (ttft_ms[i], i))
        assert ranked[0] == best and r.pod == names[best]
        spread += max(ttft_ms) > 1.5 * min(ttft_ms)  # the pods' loads differ
        interfered = any(  # routed after it, reached the pod before its first token
            o.pod == r.pod and order[o.index] > order[r.index] and reached(o) <= r.first_token_s
            for o in records
        )
        if not interfered:
            real_ms = (r.first_token_s - reached(r)) * 1000.0
            assert real_ms == pytest.approx(ttft_ms[best], abs=1e-6)
            exact += 1
    assert exact > len(records) // 2 and spread > len(records) // 10


def test_the_oracle_is_a_lab_policy_accepted_by_the_ladder_and_the_suite(tmp_path):
    assert ORACLE_TTFT not in load_config().profiles  # never a gateway profile
    assert is_reference(ORACLE_TTFT) and not is_reference("headroom")
    assert routing_profile(ORACLE_TTFT) in load_config().profiles
    base = LabConfig(trace="-")
    check_ladder(base, [ORACLE_TTFT, "gie-default", "headroom"], [1.0, 1.2])
    with pytest.raises(ValueError, match="oracle-tft"):
        check_ladder(base, ["oracle-tft"], [1.0])
    # SLO-blind: one run, attainment derived from it
    assert ORACLE_TTFT in SLO_BLIND
    w = Workload("w", "train", "chat", "-", 0, None, {})
    ts = tasks_for([w], base, [ORACLE_TTFT, "headroom"], [1.0], "both")
    assert [(t.policy, t.headers, t.derive_slo) for t in ts] == [
        (ORACLE_TTFT, False, True), ("headroom", False, False), ("headroom", True, False)]  # fmt: skip
    path = write_mooncake_trace(tmp_path / "m.jsonl", 40, rate_rps=8.0)
    r = run_lab(LabConfig(trace=str(path), policy=ORACLE_TTFT, pods=2, regret_samples=5))
    assert r["policy"] == ORACLE_TTFT and r["routing"] == {ORACLE_PATH: 40}
    assert r["oracle"]["decisions"] == 40 and r["oracle"]["forks"] == 80
    assert r["oracle"]["ms_per_decision"] > 0
    assert r["regret_ms"]["sampled"] == 5
    other = run_lab(LabConfig(trace=str(path), policy="least-request", pods=2))
    assert other["oracle"] is None


def cli(argv: list[str]) -> int:
    from services.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


def test_lab_run_compare_and_suite_take_the_oracle(tmp_path):
    import json

    path = write_mooncake_trace(tmp_path / "m.jsonl", 40, rate_rps=8.0)
    common = ["--pods", "2", "--streaming", "--quiet", "--regret-samples", "0"]
    assert cli(["lab", "--trace", str(path), "--policy", ORACLE_TTFT, *common,
                "--json", str(tmp_path / "one.json")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "one.json").read_text())["oracle"]["decisions"] == 40
    assert cli(["lab", "compare", "--trace", str(path), "--policies", f"{ORACLE_TTFT},gie-default",
                "--loads", "1.0", *common, "--out", str(tmp_path / "c")]) == 0  # fmt: skip
    assert f"| 1 | {ORACLE_TTFT} |" in (tmp_path / "c" / "table.md").read_text()
    assert cli(["lab", "compare", "--suite", "smoke", "--policies",
                f"{ORACLE_TTFT},gie-default,headroom", "--loads", "1.0", "--slo", "off",
                *common, "--out", str(tmp_path / "s")]) == 0  # fmt: skip
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert ORACLE_TTFT in s["policies"] and ORACLE_TTFT not in s["done_means_1"]["baselines"]
    md = (tmp_path / "s" / "summary.md").read_text()
    assert f"| {ORACLE_TTFT} (reference) |" in md and "greedy oracle TTFT p90 / gie-default" in md


def test_the_noise_blind_oracle_forecasts_the_state_not_the_luck():
    """oracle-ttft-blind forks without noise: its forecast does not depend on the pods'
    generator states (the clairvoyant one's does), and it is a reference policy like the
    other, SLO-blind, with the same base profile."""

    def pods(noise_seed: int) -> list[VirtualPod]:
        out = [loaded_pod(1, 2), loaded_pod(2, 1), loaded_pod(3, 0)]
        for p in out:
            p.engine._rng.seed(noise_seed)
        return out

    blind = TtftOracle(foresight=False)
    seer = TtftOracle()
    args = ("r", toks(900, 5), 8, 0.002, [(), (), ()])
    assert blind.ttfts(pods(1), *args) == blind.ttfts(pods(2), *args)
    assert seer.ttfts(pods(1), *args) != seer.ttfts(pods(2), *args)
    assert blind.summary()["foresight"] is False and seer.summary()["foresight"] is True
    assert is_reference(ORACLE_TTFT_BLIND) and ORACLE_TTFT_BLIND in SLO_BLIND
    assert routing_profile(ORACLE_TTFT_BLIND) == routing_profile(ORACLE_TTFT)
    assert ORACLE_TTFT_BLIND not in load_config().profiles


def test_the_lab_runs_the_noise_blind_oracle(tmp_path):
    path = write_mooncake_trace(tmp_path / "m.jsonl", 30, rate_rps=8.0)
    r = run_lab(LabConfig(trace=str(path), policy=ORACLE_TTFT_BLIND, pods=2, regret_samples=0))
    assert r["policy"] == ORACLE_TTFT_BLIND and r["routing"] == {ORACLE_PATH: 30}
    assert r["oracle"]["foresight"] is False and r["oracle"]["forks"] == 60


def test_oracle_predicted_ranks_the_headroom_learned_cost_on_the_blind_oracles_ttfts(tmp_path):
    """oracle-predicted runs headroom-learned's cycle with the noise-blind oracle's TTFTs as
    its predictions: the learned-cost-scorer ranks on them (path predicted), each request's
    prediction on its pod is its fork's TTFT from the dispatch, and the realised TTFT is close
    to it (exact where nothing dispatched later overtook it; the forks draw no noise). It
    reads SLO headers (not SLO-blind) and is never a gateway profile."""
    path = write_mooncake_trace(tmp_path / "m.jsonl", 120, rate_rps=12.0)
    recs: list = []
    r = run_lab(LabConfig(trace=str(path), policy=ORACLE_PREDICTED, pods=3, streaming=True,
                          regret_samples=0), records_out=recs)  # fmt: skip
    assert r["policy"] == ORACLE_PREDICTED and r["routing"].get("predicted", 0) >= 110
    assert r["oracle"]["ranks"] is False and r["oracle"]["foresight"] is False
    assert r["oracle"]["decisions"] >= 110
    err = [abs(x.pod_ttft_ms - x.predicted_ttft_ms) / x.pod_ttft_ms for x in recs
           if x.pod_ttft_ms and x.predicted_ttft_ms is not None and x.path == "predicted"]  # fmt: skip
    assert len(err) >= 110
    err.sort()
    assert err[len(err) // 2] < 0.06  # median error (2% seen): the noise, later arrivals
    assert ORACLE_PREDICTED not in SLO_BLIND and is_reference(ORACLE_PREDICTED)
    assert routing_profile(ORACLE_PREDICTED) == "headroom-learned"
    assert ORACLE_PREDICTED not in load_config().profiles
