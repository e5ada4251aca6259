"""`headroom sim calibrate`: the H100 profile lands within 15% of every REFERENCE point."""

from __future__ import annotations

import json

import pytest

from services import cli
from services.simulator import calibrate as cal
from services.simulator.profiles import PROFILES, get_profile

H100 = get_profile("h100-llama3-8b")


@pytest.fixture(scope="module")
def h100_result() -> dict:
    return cal.calibrate(H100, seed=0)


@pytest.mark.parametrize("key", cal.KEYS)
def test_h100_point_within_15_percent_of_reference(h100_result, key):
    target = cal.H100_TARGETS[key]
    measured = h100_result[key]
    assert abs(measured - target) / target <= 0.15, f"{key}: {measured} vs {target}"
    assert h100_result["deviation"][key] == pytest.approx((measured - target) / target, abs=1e-3)


@pytest.mark.parametrize("seed", [1, 2])
def test_h100_within_tolerance_for_other_seeds(seed):
    assert cal.within_tolerance(cal.calibrate(H100, seed=seed))


def test_calibration_is_deterministic_by_seed(h100_result):
    assert cal.calibrate(H100, seed=0) == h100_result


def test_prefill_throughput_falls_with_prompt_length():
    rates = [cal.prefill_tok_s(H100, n=max(4, 65536 // n), prompt=n) for n in (1024, 4096, 8192)]
    assert rates[0] > rates[1] > rates[2]
    assert 28_000 <= rates[2] and rates[1] <= 48_000  # REFERENCE range for long prompts


def test_table_lists_every_point_with_target_and_deviation(h100_result):
    table = cal.format_table(h100_result)
    for key in cal.KEYS:
        [line] = [ln for ln in table.splitlines() if ln.split()[0] == key]
        assert line.rstrip().endswith("yes")
        assert "%" in line


@pytest.mark.parametrize("name", sorted(set(PROFILES) - {"h100-llama3-8b"}))
def test_profiles_without_reference_figures_report_no_deviation(name):
    result = cal.calibrate(get_profile(name))
    assert result["targets"] is None and result["deviation"] is None
    assert all(result[k] > 0 for k in cal.KEYS)
    assert cal.within_tolerance(result)
    assert "-" in cal.format_table(result)


def test_cli_writes_json_with_exactly_the_calibration_keys(tmp_path, capsys):
    out = tmp_path / "cal.json"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sim", "calibrate", "--profile", "h100-llama3-8b", "--json", str(out)])
    assert exit_info.value.code == 0
    data = json.loads(out.read_text())
    extra = {"profile", "seed", "targets", "deviation", "tolerance"}
    assert set(data) == set(cal.KEYS) | extra
    assert set(data["targets"]) == set(data["deviation"]) == set(cal.KEYS)
    assert data["profile"] == "h100-llama3-8b"
    assert "saturated_output_tok_s" in capsys.readouterr().out


def test_cli_exit_code_is_1_when_a_point_is_off(monkeypatch, capsys):
    monkeypatch.setitem(cal.TARGETS, "h100-llama3-8b", {**cal.H100_TARGETS, "itl_ms_batch1": 3})
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sim", "calibrate"])
    assert exit_info.value.code == 1
    assert "NO" in capsys.readouterr().out


def test_cli_rejects_unknown_profile(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sim", "calibrate", "--profile", "tpu-v9"])
    assert exit_info.value.code == 2
