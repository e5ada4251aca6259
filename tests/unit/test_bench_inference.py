"""`headroom bench inference` runs every inference path on every batch size and finds them
bit-identical (a small model, few repeats)."""

from __future__ import annotations

import json

from bench.bench_inference import SIZES, run, run_bench, summary


def test_every_path_is_timed_and_identical():
    r = run_bench(trees=5, depth=3, repeat=3)
    assert [row["rows"] for row in r["results"]] == list(SIZES)
    for row in r["results"]:
        assert set(row["warm_ms"]) == {"inplace_predict", "direct", "served", "forest"}
        assert all(row["identical"].values()), row
        assert all(v > 0 for v in row["warm_ms"].values())
        assert bool(row["cold_ms"]) == (row["rows"] <= 100)
    assert r["served_uses"]["forest_rows"] == r["forest"]["used_up_to_rows"] > 0
    assert "bit-identical" in summary(r)


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "inf.json"
    assert run(["--trees", "3", "--depth", "2", "--repeat", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["model"] == {
        "trees": 3, "depth": 2, "targets": ["ttft", "tpot"]
    }  # fmt: skip
    assert "forest used up to" in capsys.readouterr().out
