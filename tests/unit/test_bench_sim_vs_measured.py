"""`headroom bench sim-vs-measured`: the per-stage comparison, the done-means checks, the
table and the plot (on a small run whose "measured" files the simulator itself wrote)."""

from __future__ import annotations

import json

import pytest
import yaml

from bench import bench_sim_vs_measured as svm
from services import cli
from services.simulator.engine import Engine
from services.simulator.profiles import get_profile
from services.simulator.virtual_pod import VirtualPod


def row(stage, req, ach, ttft50, ttft90, e2e, ntpot):
    return {"stage": stage, "requested_rps": req, "achieved_rps": ach, "ttft_p50_ms": ttft50,
            "ttft_p90_ms": ttft90, "e2e_p50_ms": e2e, "ntpot_p50_ms": ntpot}  # fmt: skip


def test_checks_apply_the_done_means_limits():
    measured = [row(0, 10, 10, 30, 40, 500, 8.0), row(1, 100, 80, 3000, 3500, 4000, 60.0)]
    good = [row(0, 10, 9.5, 35.9, 80, 570, 9.1), row(1, 100, 84, 9000, 9000, 9000, 99.0)]
    res = svm.compare(measured, good)
    assert res["ok"], res["failures"]
    [s0, s1] = res["stages"]
    assert s0["below_knee"] and not s1["below_knee"]  # 80% achieved: above the knee
    assert s0["ttft_p50_ms"] == {"measured": 30, "simulated": 35.9, "ratio": pytest.approx(1.1967)}
    assert res["saturation_rps"]["ratio"] == pytest.approx(1.05)
    bad = [row(0, 10, 10, 37, 40, 580, 8.0), row(1, 100, 70, 3000, 3500, 4000, 60.0)]
    res = svm.compare(measured, bad)
    assert not res["ok"]
    text = " | ".join(res["failures"])
    assert "stage 0 ttft_p50_ms" in text and "stage 0 e2e_p50_ms" in text
    assert "stage 1 achieved_rps" in text and "saturation" in text
    assert "ntpot" not in text  # 8.0 vs 8.0
    table = svm.format_table("x", res)
    assert "| 1 * | 100.00 |" in table and "checks: stage 0" in table


def test_end_to_end_on_files_the_simulator_wrote(tmp_path, capsys):
    cfg = {
        "api": {"type": "completion", "streaming": True},
        "data": {"type": "shared_prefix", "shared_prefix": {
            "num_unique_system_prompts": 2, "num_users_per_system_prompt": 2,
            "system_prompt_len": 32, "question_len": 16, "output_len": 8}},
        "load": {"type": "constant", "stages": [{"rate": 5, "duration": 2},
                                                {"rate": 400, "duration": 1}],
                 "num_workers": 2, "worker_max_concurrency": 4},
        "server": {"ignore_eos": True},
    }  # fmt: skip
    measured = tmp_path / "measured"
    measured.mkdir()
    (measured / "config.yaml").write_text(yaml.safe_dump(cfg))
    flags = "--max-num-seqs=8 --max-model-len=512"
    with pytest.raises(SystemExit) as done:
        cli.main(["sim", "inference-perf", "--config", str(measured / "config.yaml"),
                  "--vllm-args", flags, "--out", str(measured / "small")])  # fmt: skip
    assert done.value.code == 0
    assert "TTFT p50" in capsys.readouterr().out
    out, png = tmp_path / "res.json", tmp_path / "plot.png"
    code = svm.run(["--measured", str(measured), "--run", f"small={flags}", "--json", str(out),
                    "--plot", str(png)])  # fmt: skip
    res = json.loads(out.read_text())
    small = res["configurations"]["small"]
    assert code == 0 and res["ok"] and small["ok"]
    for stage in small["stages"]:  # same flags, rates, prompts and seed: the same numbers
        for k in svm.METRICS:
            assert stage[k]["ratio"] == pytest.approx(1.0)
    assert not small["stages"][1]["below_knee"]  # 400 req/s through 8 client slots
    assert png.stat().st_size > 1000
    assert "checks: all pass" in capsys.readouterr().err


def test_unknown_configuration_directory_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump(
            {"data": {"type": "shared_prefix"}, "load": {"stages": [{"rate": 1, "duration": 1}]}}
        )
    )
    assert svm.run(["--measured", str(tmp_path), "--run", "nope=--max-num-seqs=4"]) == 2
    assert "no stage_0_lifecycle_metrics.json" in capsys.readouterr().err


def test_virtual_pod_steps_back_to_back_and_idles():
    pod = VirtualPod(Engine(get_profile("h100-llama3-8b"), seed=0))
    assert not pod.busy and not pod.kick(0.0)  # nothing to do
    pod.engine.submit("a", list(range(100)), 3, 0.0)
    assert pod.kick(0.0) and pod.busy and not pod.kick(0.0)
    ends, tokens = [], 0
    while pod.busy:
        before = pod.step_end
        t, out = pod.finish()
        assert t == before
        ends.append(t)
        tokens += len(out.events)
        if pod.busy:
            assert pod.step_end > t  # the next step starts when this one ends
    assert tokens == 3 and ends == sorted(ends)
    with pytest.raises(RuntimeError):
        pod.finish()
