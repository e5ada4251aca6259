"""inference-perf's load generator in virtual time: timers, stage plans, the sweep probe, the
workers' concurrency slots, the prompts (services/simulator/inference_perf/)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.simulator.inference_perf.client import run_benchmark
from services.simulator.inference_perf.config import Stage, Sweep, parse_config
from services.simulator.inference_perf.datagen import LLAMA3_BOS, DataGenerator, token_scale_for
from services.simulator.inference_perf.load import (
    constant_times,
    in_flight_samples,
    poisson_times,
    saturation_estimate,
    sweep_stages,
)
from services.simulator.profiles import get_profile

H100 = get_profile("h100-llama3-8b")
SMALL = H100.with_overrides(max_model_len=512, max_num_seqs=16)


def config(load: dict, sp: dict | None = None) -> object:
    shared = {"num_unique_system_prompts": 2, "num_users_per_system_prompt": 3,
              "system_prompt_len": 48, "question_len": 16, "output_len": 8}  # fmt: skip
    return parse_config({
        "api": {"type": "completion", "streaming": True},
        "data": {"type": "shared_prefix", "shared_prefix": {**shared, **(sp or {})}},
        "load": load,
        "server": {"ignore_eos": True},
    })  # fmt: skip


def test_constant_timer_spreads_exactly_the_stage_over_its_duration():
    t = constant_times(7.5, 4.0, 10.0, np.random.default_rng(1))
    assert len(t) == 30 and t == sorted(t)
    assert t[0] > 10.0 and t[-1] == pytest.approx(14.0)  # gaps rescaled to sum to 4 s
    assert constant_times(0.1, 5.0, 0.0, np.random.default_rng(1)) == []
    assert constant_times(7.5, 4.0, 10.0, np.random.default_rng(1)) == t  # seeded


def test_poisson_timer_sends_the_stage_count():
    t = poisson_times(20.0, 3.0, 0.0, np.random.default_rng(2))
    assert len(t) == 60 and t == sorted(t)


def test_sweep_stages_linear_and_geometric():
    sw = Sweep(type="linear", num_stages=4, stage_duration=30)
    assert sweep_stages(sw, 10.0) == [Stage(1.0, 30.0), Stage(4.0, 30.0), Stage(7.0, 30.0),
                                      Stage(10.0, 30.0)]  # fmt: skip
    geo = [s.rate for s in sweep_stages(Sweep(type="geometric", num_stages=3), 100.0)]
    assert geo == [1.0, 91.0, 100.0]  # 1 + 100 - geomspace(100, 1, 3)


def test_saturation_is_a_percentile_of_the_rates_at_which_in_flight_fell():
    samples = [(0.0, 10), (0.5, 30), (1.0, 20), (1.5, 15), (2.0, 5), (2.5, 5), (3.0, 0)]
    # falls: 10 / 0.5, 5 / 0.5, 10 / 0.5, 5 / 0.5 -> 20, 10, 20, 10 req/s
    assert saturation_estimate(samples, 50, 0.0, 60) == pytest.approx(15.0)
    assert saturation_estimate(samples, 100, 0.0, 60) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="too few samples"):
        saturation_estimate(samples, 95, 0.0, 1.2)  # only what the timeout leaves
    got = in_flight_samples([0.1, 0.2, 0.9], [0.6, 1.4, 1.1], 0.0, 1.5)
    assert got == [(0.0, 0), (0.5, 2), (1.0, 2), (1.5, 0)]


def test_shared_prefix_prompts_cycle_and_share_their_system_prompt():
    gen = DataGenerator(config({"stages": [{"rate": 1, "duration": 1}]}), seed=3)
    prompts = [gen.prompt(i) for i in range(6)]
    assert len(gen) == 6 and gen.prompt(6) == prompts[0]  # data_index % len(prompts)
    assert all(p.tokens[0] == LLAMA3_BOS and len(p.tokens) == 1 + 48 + 1 + 16 for p in prompts)
    assert all(p.max_tokens == 8 for p in prompts)
    systems = {tuple(p.tokens[1:49]) for p in prompts}
    assert len(systems) == 2  # two groups of three questions
    scale = token_scale_for(gen_config := config({"stages": [{"rate": 1, "duration": 1}]}), 68.0)
    stretched = DataGenerator(gen_config, seed=3, token_scale=scale).prompt(0)
    assert len(stretched.tokens) == 68


def test_the_workers_slots_throttle_sending_when_all_are_in_flight():
    # 4 slots of ~80 ms requests (~50 req/s at most) for 100 req/s
    cfg = config({"type": "constant", "interval": 1.0, "stages": [{"rate": 100, "duration": 2}],
                  "num_workers": 2, "worker_max_concurrency": 2})  # fmt: skip
    res = run_benchmark(cfg, SMALL, seed=0)
    [stage] = res.stages
    recs = stage.records
    assert len(recs) == 200 and all(r.error is None for r in recs)
    starts = sorted((r.start, r.end) for r in recs)
    for s, _ in starts:  # never more than 4 in flight
        assert sum(1 for a, b in starts if a <= s < b) <= 4
    delays = [r.start - r.scheduled for r in recs]
    assert min(delays) >= 0 and max(delays) > 0.5  # sent late: the slots were busy
    send_duration = max(r.start for r in recs) - min(r.start for r in recs)
    assert len(recs) / send_duration < 100 * 0.7
    assert all(r.output_tokens == 8 and len(r.token_times) == 8 for r in recs)
    assert res.prefix_cache_hits > 0  # 6 prompts cycled


def test_stages_follow_each_other_after_the_poll_and_the_interval():
    cfg = config({"type": "constant", "interval": 2.0,
                  "stages": [{"rate": 4, "duration": 1}, {"rate": 2, "duration": 1}]})  # fmt: skip
    res = run_benchmark(cfg, SMALL, seed=1)
    first, second = res.stages
    assert len(first.records) == 4 and len(second.records) == 2
    assert min(r.scheduled for r in first.records) > 1.0  # starts 1 s after the queueing
    done = max(r.end for r in first.records)
    begin2 = math.ceil(done) + 2.0  # next 1 s poll, then the interval
    assert min(r.scheduled for r in second.records) > begin2 + 1.0
    again = run_benchmark(cfg, SMALL, seed=1)
    assert [r.end for r in again.stages[1].records] == [r.end for r in second.records]


def test_a_sweep_probes_then_runs_its_stages_or_the_given_rates():
    cfg = config({"type": "constant", "sweep": {"type": "linear", "num_requests": 300,
                  "timeout": 60, "num_stages": 3, "stage_duration": 2},
                  "num_workers": 4, "worker_max_concurrency": 25})  # fmt: skip
    res = run_benchmark(cfg, SMALL, seed=0)
    assert res.probe is not None and res.probe.rate == 60.0  # 300 requests over 5 s
    est = res.probe.estimate
    assert [s.rate for s in res.stages] == [1.0, round((1 + est) / 2, 2), round(est, 2)]
    assert all(s.duration == 2 for s in res.stages)
    given = run_benchmark(cfg, SMALL, seed=0, stage_rates=[3.0, 5.0])
    assert [(s.rate, len(s.records)) for s in given.stages] == [(3.0, 6), (5.0, 10)]
    assert given.probe is not None  # the probe still ran first, as in the measured run


def test_stage_rates_must_match_configured_stages():
    cfg = config({"stages": [{"rate": 1, "duration": 1}]})
    with pytest.raises(ValueError, match="2 stage rates given for 1 stages"):
        run_benchmark(cfg, SMALL, stage_rates=[1.0, 2.0])


def test_prompts_the_pod_refuses_are_failures():
    cfg = config({"stages": [{"rate": 3, "duration": 1}]}, sp={"question_len": 600})
    [stage] = run_benchmark(cfg, SMALL, seed=0).stages
    assert all(r.error is not None and "exceeds" in r.error for r in stage.records)
    assert all(r.end == r.start for r in stage.records)


def test_simulate_says_what_it_cannot_model():
    from services.simulator.inference_perf.cli import simulate
    from services.simulator.vllm_args import resolve

    cfg = config({"stages": [{"rate": 2, "duration": 1}]})
    flags = "--max-num-seqs=16 --max-model-len=512 --no-enable-chunked-prefill"
    _, reports, meta = simulate(parse_config({**_raw(cfg), "server": {}}), resolve(H100, flags))
    assert any("ignore_eos is false" in n for n in meta["notes"])
    assert any("no effect in vLLM 0.11" in n for n in meta["notes"])
    assert set(reports) == {"stage_0_lifecycle_metrics", "summary_lifecycle_metrics"}
    assert meta["client_concurrency"] == cfg.load.concurrency


def _raw(cfg) -> dict:
    sp = cfg.shared_prefix
    return {
        "api": {"type": "completion", "streaming": cfg.streaming},
        "data": {"type": "shared_prefix", "shared_prefix": {
            "num_groups": sp.num_groups, "num_prompts_per_group": sp.num_prompts_per_group,
            "system_prompt_len": sp.system_prompt_len, "question_len": sp.question_len,
            "output_len": sp.output_len}},
        "load": {"stages": [{"rate": s.rate, "duration": s.duration} for s in cfg.load.stages]},
    }  # fmt: skip
