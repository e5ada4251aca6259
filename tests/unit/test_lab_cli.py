"""`headroom lab` and `headroom lab compare` from the command line."""

from __future__ import annotations

import json

import pytest

from bench.lab.synthetic import write_mooncake_trace
from services.cli import main


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_mooncake_trace(tmp_path_factory.mktemp("t") / "m.jsonl", 40, rate_rps=5.0)


def cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


def test_lab_writes_the_report(trace, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["lab", "--trace", str(trace), "--policy", "gie-default", "--pods", "2",
            "--rate-scale", "2", "--limit", "30", "--slo-ttft-ms", "800", "--slo-tpot-ms",
            "40", "--streaming", "--seed", "3", "--json", str(out)]  # fmt: skip
    assert cli(argv) == 0
    r = json.loads(out.read_text())
    assert (r["policy"], r["pods"], r["rate_scale"], r["seed"], r["requests"]) == (
        "gie-default", 2, 2.0, 3, 30
    )  # fmt: skip
    assert r["streaming"] is True and r["slo"]["tpot_ms"] == 40
    assert "gie-default: 30/30 done" in capsys.readouterr().err


def test_lab_prints_json_without_out_and_rejects_bad_input(trace, capsys):
    assert cli(["lab", "--trace", str(trace), "--policy", "round-robin", "--limit", "5",
                "--quiet"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["completed"] == 5
    assert cli(["lab", "--trace", str(trace), "--policy", "nope", "--quiet"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    assert cli(["lab", "--trace", "/nonexistent.jsonl", "--quiet"]) == 2


def test_compare_writes_outputs(trace, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["lab", "compare", "--trace", str(trace), "--policies", "round-robin,least-request",
            "--loads", "0.5,1.0", "--pods", "2", "--limit", "30", "--slo-ttft-ms", "800",
            "--out", str(out)]  # fmt: skip
    assert cli(argv) == 0
    err = capsys.readouterr().err
    assert "estimated saturation" in err and "rate scale per load" in err
    assert {p.name for p in out.iterdir()} == {
        "results.json", "table.md", "ttft_p90.png", "slo_attainment.png"
    }  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert [(r["load"], r["policy"]) for r in results] == [
        (0.5, "round-robin"), (0.5, "least-request"), (1.0, "round-robin"),
        (1.0, "least-request"),
    ]  # fmt: skip
    assert "| 0.5 | round-robin |" in (out / "table.md").read_text()


def test_the_trace_slices_the_tests_read_are_inside_the_checkout():
    """Tests read only the tests/data slices (the full traces are bench/ work, found through
    HEADROOM_TRACES_DIR)."""
    from bench.lab.synthetic import CHECKOUT, TRACE_SLICES_DIR

    assert TRACE_SLICES_DIR.is_relative_to(CHECKOUT) and TRACE_SLICES_DIR.is_dir()
