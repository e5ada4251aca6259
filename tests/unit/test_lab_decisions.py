"""`headroom lab decisions` (bench/lab/decisions.py): one JSON line per routed request with the
pod view's estimates per candidate, and with ``--oracle`` the noise-blind oracle's TTFT per
candidate and the decision's regret (a diagnostic that must not change the run)."""

from __future__ import annotations

import pytest

from bench.lab.config import LabConfig
from bench.lab.decisions import decision_log, regret_ms, run_decisions_cli
from bench.lab.synthetic import write_mooncake_trace


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = write_mooncake_trace(tmp_path_factory.mktemp("d") / "m.jsonl", 80, rate_rps=12.0)
    return LabConfig(trace=str(path), policy="headroom", pods=3, streaming=True, regret_samples=0)


def test_the_log_has_every_decision_and_the_oracle_changes_nothing_but_adds_its_ttfts(config):
    plain = decision_log(config)
    seen = decision_log(config, oracle=True)
    assert len(plain) == len(seen) == 80
    for a, b in zip(plain, seen, strict=True):
        # the same run: same choice, same estimates, same realised TTFT
        assert (a["index"], a["chosen"], a["ttft_s"]) == (b["index"], b["chosen"], b["ttft_s"])
        assert [p[:5] for p in b["pods"]] == a["pods"] and all(len(p) == 5 for p in a["pods"])
        assert "regret_ms" not in a
        oracle = [p[5] for p in b["pods"]]
        chosen = [p[0] for p in b["pods"]].index(b["chosen"])
        assert all(t > 0 for t in oracle)
        assert b["regret_ms"] == pytest.approx(oracle[chosen] - min(oracle), abs=2e-3)
        assert b["regret_ms"] >= 0
    # the chosen pod's forecast is the realised TTFT from the dispatch, up to the noise and
    # later arrivals (median within 10%)
    errs = sorted(
        abs(b["pods"][[p[0] for p in b["pods"]].index(b["chosen"])][5] / 1000.0
            - (b["ttft_s"] - b["queued_s"])) / (b["ttft_s"] - b["queued_s"])
        for b in seen
    )  # fmt: skip
    assert errs[len(errs) // 2] < 0.1
    assert any(b["regret_ms"] > 1.0 for b in seen)  # headroom is not the oracle


def test_regret_needs_the_chosen_ones_forecast():
    assert regret_ms([30.0, 20.0, None], 0) == 10.0
    assert regret_ms([30.0, 20.0, None], 2) is None
    assert regret_ms([None, None], None) is None


def test_the_cli_says_what_is_missing(tmp_path, capsys):
    assert run_decisions_cli([str(tmp_path), "nope", "1.0", "--oracle"]) == 2
    assert "headroom lab decisions:" in capsys.readouterr().err
