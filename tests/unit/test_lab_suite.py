"""The workload suite (bench/lab/suite.py, suite_run.py, summary.py): train and validation
are disjoint, the summary's cells, worst-case ratios and done-means-1 check on small report
dicts, the SLO-blind profiles, the SLO rule, and `lab compare --suite` end to end."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.lab.config import LabConfig
from bench.lab.run import run_lab
from bench.lab.suite import (
    HOLDOUT,
    HOLDOUT2,
    HOLDOUT3,
    HOLDOUT4,
    HOLDOUT5,
    HOLDOUT6,
    HOLDOUT7,
    HOLDOUT8,
    HOLDOUT9,
    HOLDOUT10,
    HOLDOUT11,
    HOLDOUT12,
    SMOKE,
    TRAIN,
    VALIDATION,
    suite,
)
from bench.lab.suite_run import (
    SLO_BLIND,
    idle_latency_ms,
    materialise,
    slo_rule,
    tasks_for,
    ttft_floor_ms,
)
from bench.lab.summary import (
    across_seeds,
    cells,
    done_means_1,
    lead_not_reached_by_oracle,
    lead_unattainable,
    seeds_markdown,
    summarise,
    summary_markdown,
    versus_cells,
    versus_cells_markdown,
    versus_failures_markdown,
    versus_markdown,
    versus_reference,
    versus_reference_markdown,
    worst_case,
)
from bench.lab.workloads import Arrival, Chat, TraceSlice, WorkloadSpec, params_dict
from services.cli import main


def generated(entries):
    return [e for e in entries if isinstance(e, WorkloadSpec)]


# --- the suites ---------------------------------------------------------------------------
def parts(e):
    """The parameter sets of a generated workload: its own, or each part's of a mix."""
    p = e.params
    return [params_dict(q) for _, q in p.parts] if p.family == "mix" else [params_dict(p)]


def test_train_and_validation_are_disjoint():
    train, val = generated(TRAIN), generated(VALIDATION)
    assert not {e.seed for e in train} & {e.seed for e in val}
    assert not {e.name for e in TRAIN} & {e.name for e in VALIDATION}

    # different parameter values, not just seeds: no validation workload's parameters (or
    # those of any part of a mix) equal a training workload's
    train_params = [x for e in train for x in parts(e)]
    for e in val:
        for x in parts(e):
            assert x not in train_params, e.name
    # the real traces: the first half for training, the second for validation
    t_slices = [e for e in TRAIN if isinstance(e, TraceSlice)]
    v_slices = [e for e in VALIDATION if isinstance(e, TraceSlice)]
    assert sorted(e.file for e in t_slices) == sorted(e.file for e in v_slices)
    assert {e.half for e in t_slices} == {1} and {e.half for e in v_slices} == {2}
    for t in t_slices:
        v = next(e for e in v_slices if e.file == t.file)
        for total in (12031, 8819, 10):
            for window in (None, t.window):
                (a, n), (b, m) = (replace(x, window=window).offset_limit(total) for x in (t, v))
                assert a + n <= b and b + m <= total and n > 0 and m > 0


def assert_disjoint(fresh_set: tuple, *earlier: tuple) -> list:
    """``fresh_set`` holds generated workloads only and shares no seed, name or parameter set
    (of a workload or a part of a mix) with any ``earlier`` set; returns its workloads."""
    fresh = generated(fresh_set)
    assert len(fresh) == len(fresh_set)  # generated families only
    others = [e for s in earlier for e in generated(s)]
    assert not {e.seed for e in fresh} & {e.seed for e in others}
    assert not {e.name for e in fresh_set} & {e.name for s in earlier for e in s}
    seen = [x for e in others for x in parts(e)]
    for e in fresh:
        for x in parts(e):
            assert x not in seen, e.name
    return fresh


def test_holdout_is_disjoint_from_train_and_validation():
    """The holdout set (session 20) shares no seed, name or parameter set (of a workload or a
    part of a mix) with train or validation, and holds no real-trace rows (both halves of
    each real trace are taken)."""
    assert_disjoint(HOLDOUT, TRAIN, VALIDATION)


def test_holdout2_is_disjoint_from_every_earlier_set():
    """The second holdout set (session 21) shares no seed, name or parameter set (of a
    workload or a part of a mix) with train, validation or holdout, and covers every
    generated kind of traffic, on/off bursts included."""
    fresh = assert_disjoint(HOLDOUT2, TRAIN, VALIDATION, HOLDOUT)
    assert {e.family for e in HOLDOUT2} == {"chat", "multiturn", "rag", "code", "agentic", "mix"}
    assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff" for e in fresh)


def test_holdout3_is_disjoint_from_every_earlier_set():
    """The third holdout set (session 22) shares no seed, name or parameter set with any
    earlier set and covers hot-document and multi-document RAG, multi-turn, agentic, code,
    bursts and a mix."""
    fresh = assert_disjoint(HOLDOUT3, TRAIN, VALIDATION, HOLDOUT, HOLDOUT2)
    assert {e.family for e in HOLDOUT3} == {"multiturn", "rag", "code", "agentic", "mix"}
    assert any(getattr(e.params, "docs_per_request", 1) == 2 for e in fresh)
    assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff" for e in fresh)


def test_holdout4_is_disjoint_from_every_earlier_set():
    """The fourth holdout set (session 23) shares no seed, name or parameter set with any
    earlier set and covers every generated kind of traffic, long-document RAG and bursts."""
    fresh = assert_disjoint(HOLDOUT4, TRAIN, VALIDATION, HOLDOUT, HOLDOUT2, HOLDOUT3)
    assert {e.family for e in HOLDOUT4} == {"chat", "multiturn", "rag", "code", "agentic", "mix"}
    assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff" for e in fresh)
    assert any(e.params.document.median >= 30_000 for e in fresh if e.family == "rag")


def test_holdout5_is_disjoint_from_every_earlier_set():
    """The fifth holdout set (session 23) shares no seed, name or parameter set with any
    earlier set and covers every generated kind of traffic and bursts."""
    fresh = assert_disjoint(HOLDOUT5, TRAIN, VALIDATION, HOLDOUT, HOLDOUT2, HOLDOUT3, HOLDOUT4)
    assert {e.family for e in HOLDOUT5} == {"chat", "multiturn", "rag", "code", "agentic", "mix"}
    assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff" for e in fresh)


# every set in the order it was added; a fresh set is disjoint from all before it
ORDERED_SETS = (TRAIN, VALIDATION, HOLDOUT, HOLDOUT2, HOLDOUT3, HOLDOUT4, HOLDOUT5, HOLDOUT6,
                HOLDOUT7, HOLDOUT8, HOLDOUT9, HOLDOUT10, HOLDOUT11, HOLDOUT12)  # fmt: skip


@pytest.mark.parametrize(
    "fresh_set",
    [HOLDOUT6, HOLDOUT7, HOLDOUT8, HOLDOUT9, HOLDOUT10, HOLDOUT11, HOLDOUT12],
    ids=["holdout6", "holdout7", "holdout8", "holdout9", "holdout10", "holdout11", "holdout12"],
)
def test_later_holdouts_are_disjoint_from_every_earlier_set(fresh_set):
    """The sixth and seventh holdout sets (session 24; the seventh for the session's second
    candidate), the eighth (session 25), the ninth (session 26), the tenth (session 27), the eleventh (session 28) and the twelfth (session 30) share no seed, name or parameter set with any
    earlier set and cover every generated kind of traffic, bursts and hot documents."""
    earlier = ORDERED_SETS[: ORDERED_SETS.index(fresh_set)]
    fresh = assert_disjoint(fresh_set, *earlier)
    assert {e.family for e in fresh_set} == {"chat", "multiturn", "rag", "code", "agentic", "mix"}
    assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff" for e in fresh)
    assert any(e.name.startswith("rag-hot") for e in fresh)


def test_each_split_covers_every_kind_of_traffic():
    for entries in (TRAIN, VALIDATION):
        fams = {e.family for e in entries}
        assert fams == {"chat", "multiturn", "rag", "code", "agentic", "mix", "trace"}
        assert any(getattr(e.params, "arrival", Arrival()).kind == "onoff"
                   for e in generated(entries))  # fmt: skip
        assert {e.file for e in entries if isinstance(e, TraceSlice)} == {
            "mooncake_conversation.jsonl", "azure_2023_code.csv"}  # fmt: skip
        assert all(500 <= e.requests <= 3000 for e in generated(entries))


def test_suite_lookup():
    assert [s for s, _ in suite("all")] == ["train"] * len(TRAIN) + ["validation"] * len(VALIDATION)
    full = [e for _, e in suite("train", full_traces=True) if isinstance(e, TraceSlice)]
    assert full and all(e.window is None for e in full)
    with pytest.raises(ValueError, match="unknown suite"):
        suite("nope")


def test_a_missing_real_trace_says_where_to_put_it(monkeypatch, tmp_path):
    """HEADROOM_TRACES_DIR is where the real traces are looked for (an empty one here)."""
    monkeypatch.setenv("HEADROOM_TRACES_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="HEADROOM_TRACES_DIR") as e:
        materialise("train", TRAIN[-1], tmp_path)
    assert str(e.value).startswith(str(tmp_path))


# --- the SLO rule and the SLO-blind profiles ----------------------------------------------
def _shape(p50, repeat):
    return {"prompt": {"p50": p50}, "block_repeat": repeat}


def test_slo_rule_follows_the_shape():
    prof = LabConfig(trace="-").engine_profile()
    short, long_ = slo_rule(_shape(800, 0.0), prof), slo_rule(_shape(12_000, 0.0), prof)
    assert short == {"ttft_ms": 300.0, "tpot_ms": 60.0}  # the floors / 8 x idle TPOT
    assert long_["ttft_ms"] > 1000 and long_["ttft_ms"] % 50 == 0
    cached = slo_rule(_shape(12_000, 0.8), prof)  # a warm cache leaves less to prefill
    assert cached["ttft_ms"] < long_["ttft_ms"]


def test_slo_blind_profiles_route_the_same_with_and_without_slo_headers(tmp_path):
    """suite_run.SLO_BLIND: these profiles' runs with SLO headers are not run, their
    attainment is read from the run without them; this holds only while their decisions do
    not depend on the headers."""
    spec = WorkloadSpec("b", Chat(arrival=Arrival("poisson", 30.0)), seed=3, requests=80)
    path = spec.write(tmp_path / "b.jsonl")
    for policy in sorted(SLO_BLIND):
        runs = []
        for slo in ((None, None), (150.0, 20.0)):
            recs: list = []
            cfg = LabConfig(trace=str(path), policy=policy, pods=2, rate_scale=3.0,
                            slo_ttft_ms=slo[0], slo_tpot_ms=slo[1], streaming=True)  # fmt: skip
            run_lab(cfg, records_out=recs)
            runs.append([(r.pod, r.status, r.first_token_s, r.finished_s) for r in recs])
        assert runs[0] == runs[1], policy


def test_tasks_skip_header_runs_of_slo_blind_policies():
    from bench.lab.suite_run import Workload

    w = Workload("w", "train", "chat", "-", 0, None, {})
    base = LabConfig(trace="-")
    both = tasks_for([w], base, ["gie-default", "headroom"], [1.0], "both")
    assert [(t.policy, t.headers, t.derive_slo) for t in both] == [
        ("gie-default", False, True), ("headroom", False, False), ("headroom", True, False)]  # fmt: skip
    on = tasks_for([w], base, ["gie-default", "headroom"], [1.0], "on")
    assert [(t.policy, t.headers, t.derive_slo, t.keep_plain) for t in on] == [
        ("gie-default", False, True, False), ("headroom", True, False, True)]  # fmt: skip
    off = tasks_for([w], base, ["gie-default", "headroom"], [1.0], "off")
    assert [(t.headers, t.derive_slo) for t in off] == [(False, False), (False, False)]


# --- the summary on small report dicts ----------------------------------------------------
def report(workload, load, policy, ttft90, *, tpot90=10.0, e2e90=1000.0, att=None, headers=False):
    return {
        "workload": workload, "load": load, "policy": policy, "slo_headers": headers,
        "ttft_ms": {"p50": ttft90 / 2, "p90": ttft90, "p99": ttft90 * 2},
        "tpot_ms": {"p90": tpot90}, "e2e_ms": {"p90": e2e90}, "rejected": 0,
        "slo": {"attainment": att, "goodput_rps": None if att is None else 10 * att},
    }  # fmt: skip


def small_results():
    out = []
    for load in (0.8, 1.0):
        out += [
            report("w", load, "gie-default", 100.0),
            report("w", load, "least-request", 90.0, tpot90=12.0),
            report("w", load, "headroom", 95.0 if load == 0.8 else 60.0, tpot90=11.5),
            report("w", load, "gie-default", 110.0, att=0.80, headers=True),
            report("w", load, "least-request", 95.0, att=0.82, headers=True),
            report("w", load, "headroom", 90.0, att=0.85, headers=True),
        ]
    out += [
        report("v", 1.2, "gie-default", 100.0, e2e90=900.0),
        report("v", 1.2, "headroom", 80.0, e2e90=1000.0),
        report("v", 1.2, "gie-default", 100.0, att=0.5, headers=True),
        report("v", 1.2, "headroom", 80.0, att=0.55, headers=True),
    ]
    return out


def test_cells_take_latency_without_headers_and_attainment_with_them():
    rs = small_results()
    next(r for r in rs if r["policy"] == "headroom" and r["slo_headers"])["sacrificed_share"] = 0.02
    cs = cells(rs)
    assert len(cs) == 8
    assert next(c for c in cs if c["policy"] == "headroom")["sacrificed_share"] == 0.02
    c = next(c for c in cs if (c["workload"], c["load"], c["policy"]) == ("w", 1.0, "headroom"))
    assert c["ttft_p90"] == 60.0 and c["ttft_p99"] == 120.0 and c["attainment"] == 0.85
    assert c["ttft_p99_slo"] == 180.0 and c["goodput"] == pytest.approx(8.5)
    # headers only (--slo on): the latencies come from the header runs
    on = cells([r for r in small_results() if r["slo_headers"]])
    assert next(c for c in on if c["policy"] == "headroom")["ttft_p90"] == 90.0


def test_worst_case_ratio_against_the_best_other_policy():
    wc = worst_case(cells(small_results()), ["gie-default", "least-request", "headroom"])
    h = wc["headroom"]
    # TTFT p90: 95 / 90 at (w, 0.8) is its worst (60 / 90 and 80 / 100 elsewhere)
    assert h["ttft_p90"]["ratio"] == pytest.approx(95 / 90, abs=1e-4)
    assert (h["ttft_p90"]["vs"], h["ttft_p90"]["workload"], h["ttft_p90"]["load"]) == (
        "least-request", "w", 0.8)  # fmt: skip
    assert h["e2e_p90"]["ratio"] == pytest.approx(1000 / 900, abs=1e-4)
    assert h["tpot_p90"]["ratio"] == pytest.approx(11.5 / 10, abs=1e-4)
    # attainment: higher is better, so the worst is the lowest ratio; headroom leads everywhere
    assert h["attainment"]["ratio"] == pytest.approx(0.85 / 0.82, abs=1e-4)  # not 0.55 / 0.5
    assert h["attainment"]["points"] == pytest.approx(3.0)
    lr = wc["least-request"]
    assert lr["attainment"]["ratio"] == pytest.approx(0.82 / 0.85, abs=1e-4)
    assert lr["attainment"]["points"] == pytest.approx(-3.0)


def test_done_means_1_lists_every_failing_cell():
    dm = done_means_1(cells(small_results()))
    assert dm["cells_checked"] == 3 and dm["pass"] is False
    got = sorted((f["workload"], f["load"], f["check"].split()[0]) for f in dm["failures"])
    # (w, 0.8): TTFT p90 95 > 1.05 x 90 (least-request) and TPOT 11.5 > 1.1 x 10 (gie);
    # (w, 1.0): TPOT again, TTFT 60 <= 0.7 x 100 so the lead holds;
    # (v, 1.2): E2E 1000 > 1.1 x 900, and neither TTFT 80 <= 70 nor +5 pts >= +10 pts
    assert got == [("v", 1.2, "e2e_p90"), ("v", 1.2, "ttft_p90"), ("w", 0.8, "tpot_p90"),
                   ("w", 0.8, "ttft_p90"), ("w", 1.0, "tpot_p90")]  # fmt: skip
    lead = next(f for f in dm["failures"] if f["workload"] == "v" and "gie" in f["check"])
    assert lead["ratio"] == 0.8 and lead["points"] == pytest.approx(5.0)
    ok = [r for r in small_results() if r["workload"] == "w" and r["load"] == 1.0]
    for r in ok:
        r["tpot_ms"]["p90"] = 10.0
    assert done_means_1(cells(ok))["pass"] is True


def test_ttft_floor_is_the_idle_pod_ttft_with_every_earlier_block_cached():
    from types import SimpleNamespace as R

    from services.simulator.profiles import get_profile

    prof = get_profile("h100-llama3-8b")
    cold = [R(input_tokens=4096, hash_ids=tuple(range(i * 8, i * 8 + 8))) for i in range(10)]
    warm = [R(input_tokens=4096, hash_ids=tuple(range(8))) for _ in range(10)]
    f_cold, f_warm = ttft_floor_ms(cold, prof), ttft_floor_ms(warm, prof)
    idle = idle_latency_ms(prof, 4096, 2)[0]
    assert f_cold["p50"] == pytest.approx(idle, rel=0.03)  # interpolated on the grid
    # the repeats find all 8 blocks cached: 1 token left to prefill; the first is cold
    assert f_warm["p50"] == pytest.approx(idle_latency_ms(prof, 1, 2)[0], rel=0.03)
    assert f_warm["p99"] > 0.8 * idle and f_warm["p50"] < 0.5 * f_cold["p50"]
    # no block ids (Azure): no cache hits
    azure = [R(input_tokens=4096, hash_ids=()) for _ in range(10)]
    assert ttft_floor_ms(azure, prof)["p90"] == pytest.approx(f_cold["p90"], rel=1e-6)


def test_a_lead_no_router_could_reach_says_why():
    gie = {"ttft_p90": 100.0, "attainment": 0.995}
    why = lead_unattainable(gie, {"p50": 50.0, "p90": 75.0, "p99": 90.0})
    assert why is not None and "75.0 ms > 0.7x" in why and "99.5%" in why
    assert lead_unattainable(gie, {"p90": 65.0}) is None  # 0.7 x 100 is above the floor
    assert lead_unattainable({"ttft_p90": 100.0, "attainment": 0.85}, {"p90": 75.0}) is None
    assert lead_unattainable(gie, None) is None
    # in done-means 1: still a failure (the check is not waived), with the reason
    rs = [report("c", 1.0, "gie-default", 100.0), report("c", 1.0, "headroom", 95.0),
          report("c", 1.0, "gie-default", 100.0, att=1.0, headers=True),
          report("c", 1.0, "headroom", 95.0, att=1.0, headers=True)]  # fmt: skip
    dm = done_means_1(cells(rs), floors={"c": {"p90": 80.0}})
    assert dm["pass"] is False and dm["unattainable"] == 1
    assert dm["failures"][0]["unattainable"].startswith("no router can")
    assert done_means_1(cells(rs))["failures"][0]["unattainable"] is None


def with_oracle(ttft90: float, att: float = 1.0, *, workload="w", load=1.0) -> list[dict]:
    """The oracle's runs in one cell (SLO-blind: attainment derived from the same run)."""
    return [report(workload, load, "oracle-ttft", ttft90, tpot90=5.0, e2e90=500.0),
            report(workload, load, "oracle-ttft", ttft90, tpot90=5.0, e2e90=500.0, att=att,
                   headers=True)]  # fmt: skip


def test_the_oracle_is_a_reference_never_a_baseline_nor_the_best_other_policy():
    rs = small_results()
    oracle = [x for load in (0.8, 1.0) for x in with_oracle(30.0, load=load)]
    oracle += with_oracle(30.0, workload="v", load=1.2)
    cs, cs_oracle = cells(rs), cells(rs + oracle)
    # done-means 1 is the same with the oracle's cells, even when it is named a baseline
    plain = done_means_1(cs)
    for baselines in (None, ["gie-default", "least-request", "cache-aware", "oracle-ttft"]):
        kw = {} if baselines is None else {"baselines": baselines}
        dm = done_means_1(cs_oracle, **kw)
        assert "oracle-ttft" not in dm["baselines"]
        assert [(f["workload"], f["load"], f["check"], f["best"]) for f in dm["failures"]] == [
            (f["workload"], f["load"], f["check"], f["best"]) for f in plain["failures"]]  # fmt: skip
    # the worst case of every policy is against the best *non-reference* other policy
    policies = ["gie-default", "least-request", "headroom"]
    assert worst_case(cs_oracle, policies) == worst_case(cs, policies)
    wo = worst_case(cs_oracle, [*policies, "oracle-ttft"])["oracle-ttft"]
    assert (wo["ttft_p90"]["vs"], wo["ttft_p90"]["ratio"]) == ("headroom", 0.5)  # 30 / 60
    md = summary_markdown(summarise(rs + oracle, [], {"suite": "t", "pods": 8, "profile": "p",
                          "seed": 0, "streaming": True, "loads": [0.8, 1.0], "slo": "both"}))  # fmt: skip
    assert "| oracle-ttft (reference) |" in md and "not a lower bound" in md
    assert "vs oracle-ttft" not in md


def test_a_lead_the_greedy_oracle_does_not_reach_says_so():
    gie = {"ttft_p90": 100.0, "attainment": 0.995}
    why = lead_not_reached_by_oracle(gie, {"ttft_p90": 80.0})
    assert why is not None and why.startswith("not reached by the greedy TTFT oracle")
    assert "0.800x gie-default's" in why and "99.5%" in why and "impossible" not in why
    assert lead_not_reached_by_oracle(gie, {"ttft_p90": 70.0}) is None  # the oracle reaches it
    low = {"ttft_p90": 100.0, "attainment": 0.85}
    assert lead_not_reached_by_oracle(low, {"ttft_p90": 80.0}) is None  # +10 pts possible
    assert lead_not_reached_by_oracle(gie, None) is None  # the oracle did not run
    rs = [report("c", 1.0, "gie-default", 100.0), report("c", 1.0, "headroom", 90.0),
          report("c", 1.0, "gie-default", 100.0, att=0.995, headers=True),
          report("c", 1.0, "headroom", 90.0, att=1.0, headers=True)]  # fmt: skip
    dm = done_means_1(cells(rs + with_oracle(80.0, workload="c")))
    assert dm["pass"] is False and dm["not_reached_by_oracle"] == 1
    assert dm["failures"][0]["oracle"] == why and dm["unattainable"] == 0
    assert done_means_1(cells(rs))["failures"][0]["oracle"] is None
    # the oracle reaches 0.7x: the failure stays and says nothing about the oracle
    [f] = done_means_1(cells(rs + with_oracle(65.0, workload="c")))["failures"]
    assert f["oracle"] is None and f["oracle_ratio"] == 0.65
    md = summary_markdown(summarise(rs + with_oracle(65.0, workload="c"), [], {
        "suite": "t", "pods": 8, "profile": "p", "seed": 0, "streaming": True, "loads": [1.0],
        "slo": "both"}))  # fmt: skip
    assert "the greedy TTFT oracle reaches it: TTFT p90 0.650x gie-default's" in md
    s = summarise(rs + with_oracle(80.0, workload="c"), [], {
        "suite": "t", "pods": 8, "profile": "p", "seed": 0, "streaming": True, "loads": [1.0],
        "slo": "both"})  # fmt: skip
    md = summary_markdown(s)
    assert "1 of them not passed by the greedy TTFT oracle either" in md and why in md
    # per cell: the oracle's TTFT p90 over gie-default's, only when the oracle ran
    vs = versus_markdown(s["cells"])
    assert "greedy oracle TTFT p90 / gie-default |" in vs and vs.splitlines()[2].endswith(" 0.80 |")
    assert "greedy oracle" not in versus_markdown(cells(rs))


def test_the_best_oracle_that_ran_speaks_for_the_cell():
    """Both greedy oracles ran: the lead check reads the one with the least TTFT p90; only
    the noise-blind one ran: it speaks alone; neither is ever a baseline."""
    rs = [report("c", 1.0, "gie-default", 100.0), report("c", 1.0, "headroom", 90.0),
          report("c", 1.0, "gie-default", 100.0, att=0.995, headers=True),
          report("c", 1.0, "headroom", 90.0, att=1.0, headers=True)]  # fmt: skip

    def blind(ttft90: float) -> list[dict]:
        return [{**r, "policy": "oracle-ttft-blind"} for r in with_oracle(ttft90, workload="c")]

    [f] = done_means_1(cells(rs + with_oracle(65.0, workload="c") + blind(80.0)))["failures"]
    assert f["oracle"] is None and f["oracle_ratio"] == 0.65
    [f] = done_means_1(cells(rs + with_oracle(85.0, workload="c") + blind(80.0)))["failures"]
    assert f["oracle_ratio"] == 0.8 and f["oracle"].startswith("not reached by the greedy")
    dm = done_means_1(cells(rs + blind(75.0)), baselines=["gie-default", "oracle-ttft-blind"])
    assert dm["baselines"] == ["gie-default"] and dm["failures"][0]["oracle_ratio"] == 0.75


def test_summary_markdown_names_the_failures():
    ws = [{"name": "w", "split": "train", "family": "chat",
           "spec": {"seed": 1, "description": "prompt 800/2000"},
           "characterisation": {"requests": 10, "prompt": {"mean": 1, "p90": 2, "max": 3},
                                "output": {"mean": 1, "p90": 2}, "block_repeat": 0.0,
                                "rate_rps": 1.0, "arrival_cv": 1.0},
           "saturation": {"cluster_rps": 5.0}, "slo": {"ttft_ms": 300, "tpot_ms": 60}}]  # fmt: skip
    meta = {"suite": "t", "pods": 8, "profile": "p", "seed": 0, "streaming": True,
            "loads": [0.8, 1.0, 1.2], "slo": "both", "commit": "abc"}  # fmt: skip
    s = summarise(small_results(), ws, meta)
    md = summary_markdown(s)
    assert "**FAIL** (5 failing checks)" in md and "| v | 1.2 | e2e_p90 <= 1.1x best |" in md
    assert "1.06x vs least-request (w @ 0.8)" in md and "`w` (seed 1): prompt 800/2000" in md
    json.dumps(s)


def test_versus_reference_scores_each_candidate_against_the_shipped_profile():
    rs = small_results()
    # a candidate: TTFT p90 0.9x headroom's on w, 1.25x on v; TPOT 2x; attainment -5 points
    for r in [r for r in rs if r["policy"] == "headroom"]:
        c = json.loads(json.dumps(r))
        c["policy"] = "cand"
        c["ttft_ms"] = {k: v * (0.9 if r["workload"] == "w" else 1.25)
                        for k, v in r["ttft_ms"].items()}  # fmt: skip
        c["tpot_ms"] = {"p90": 2 * r["tpot_ms"]["p90"]}
        if r["slo_headers"]:
            c["slo"] = {"attainment": r["slo"]["attainment"] - 0.05, "goodput_rps": 1.0}
        rs.append(c)
    rows = {r["policy"]: r for r in versus_reference(cells(rs), "headroom")}
    assert set(rows) == {"headroom", "cand"}  # baselines are not scored
    h, c = rows["headroom"], rows["cand"]
    assert (h["ttft_p90"], h["tpot_p90"], h["attainment_pts"]) == (1.0, 1.0, 0.0)
    assert h["attainable"] == len(done_means_1(cells(small_results()))["failures"])
    assert c["cells"] == 3
    assert c["ttft_p90"] == pytest.approx((0.9 * 0.9 * 1.25) ** (1 / 3), abs=1e-3)
    assert c["tpot_p90"] == 2.0 and c["e2e_p90"] == 1.0
    # the TTFT p99 of the runs with SLO headers (the sacrificed requests' tail) has its ratio
    assert c["ttft_p99_slo"] == pytest.approx(c["ttft_p90"], abs=1e-3) and h["ttft_p99_slo"] == 1
    assert c["attainment_pts"] == pytest.approx(-5.0)
    # 0.9x TTFT passes w@0.8's TTFT check (85.5 vs 90 ms), 2x TPOT fails v@1.2's (20 vs 10)
    assert h["attainable"] == c["attainable"] == 5 and c["unattainable"] == 0
    fails = {(f["workload"], f["load"], f["check"][:8])
             for f in done_means_1(cells(rs), policy="cand")["failures"]}  # fmt: skip
    assert ("v", 1.2, "tpot_p90") in fails and ("w", 0.8, "ttft_p90") not in fails
    assert "| cand | 3 |" in versus_reference_markdown(list(rows.values()), "headroom")
    # each row carries its failing checks, listed one per line (what a rule's table quotes)
    assert c["failures"] == done_means_1(cells(rs), policy="cand")["failures"]
    listed = versus_failures_markdown(list(rows.values()))
    assert listed.count("| cand |") == len(c["failures"]) == 5
    assert listed.count("| headroom |") == len(h["failures"])
    assert "| cand | v | 1.2 | tpot_p90 <= 1.1x best | 20 | 10 |" in listed
    with pytest.raises(ValueError, match="did not run"):
        versus_reference(cells(rs), "headroom-s19")
    # cell by cell: the candidate's values beside the reference's, only the candidate's rows
    per = versus_cells(cells(rs), "headroom")
    assert {(c["policy"], c["workload"], c["load"]) for c in per} == {
        ("cand", w, load) for w, load in ((r["workload"], r["load"]) for r in rs)}  # fmt: skip
    for c in per:
        t = c["ttft_p90"]
        assert t["candidate"] == pytest.approx(t["reference"] * (0.9 if c["workload"] == "w"
                                                                 else 1.25))  # fmt: skip
        a = c["attainment"]
        assert a["candidate"] == pytest.approx(a["reference"] - 0.05)
        # the tail beside the p90: the same scaling (every TTFT percentile was scaled)
        t99 = c["ttft_p99"]
        assert t99["candidate"] == pytest.approx(t99["reference"] * t["candidate"] / t["reference"])
    md = versus_cells_markdown(per, "headroom")
    assert "(1.25x)" in md and "(-5.0 pts)" in md and md.count("| cand |") == len(per)
    assert "| TTFT p99 ms |" in md and all(row.count("x)") == 4 for row in md.splitlines()[2:])
    with pytest.raises(ValueError, match="did not run"):
        versus_cells(cells(rs), "headroom-s19")


# --- end to end ---------------------------------------------------------------------------
def cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


def test_lab_compare_suite_end_to_end_and_jobs_do_not_change_results(tmp_path, capsys):
    argv = ["lab", "compare", "--suite", "smoke", "--pods", "2", "--policies",
            "least-request,headroom", "--loads", "1.0", "--streaming", "--quiet"]  # fmt: skip
    assert cli([*argv, "--jobs", "2", "--out", str(tmp_path / "j2")]) == 0
    assert cli([*argv, "--jobs", "1", "--out", str(tmp_path / "j1")]) == 0
    s = json.loads((tmp_path / "j2" / "summary.json").read_text())
    assert [w["name"] for w in s["workloads"]] == [e.name for e in SMOKE]
    assert {(c["workload"], c["policy"]) for c in s["cells"]} == {
        (e.name, p) for e in SMOKE for p in ("least-request", "headroom")}  # fmt: skip
    assert all(c["attainment"] is not None for c in s["cells"])
    assert s["done_means_1"]["cells_checked"] == 2
    assert "## Issue 18 done-means 1" in (tmp_path / "j2" / "summary.md").read_text()
    assert (tmp_path / "j2" / "workloads" / "smoke-chat.jsonl").is_file()
    assert (tmp_path / "j2" / "suite_ttft_p90.png").is_file()
    assert (tmp_path / "j2" / "suite_attainment.png").is_file()

    def strip(p: Path):
        return [{k: v for k, v in r.items() if k != "wall_seconds"}
                for r in json.loads(p.read_text())]  # fmt: skip

    assert strip(tmp_path / "j1" / "results.json") == strip(tmp_path / "j2" / "results.json")
    # --workloads runs some of the suite's workloads exactly as the whole suite runs them
    last = SMOKE[-1].name
    assert cli([*argv, "--workloads", last, "--out", str(tmp_path / "one")]) == 0
    one = strip(tmp_path / "one" / "results.json")
    assert one and one == [r for r in strip(tmp_path / "j1" / "results.json")
                           if r["workload"] == last]  # fmt: skip
    assert f"`smoke ({last})`" in (tmp_path / "one" / "summary.md").read_text()
    for bad, says in ((["--workloads", "smoke-nope"], "has no workload smoke-nope"),
                      (["--workloads", ","], "has no workload (none named)")):  # fmt: skip
        assert cli([*argv, *bad, "--out", str(tmp_path / "wrong")]) == 2
        assert says in capsys.readouterr().err
        assert not (tmp_path / "wrong").exists()  # refused before anything is written
    assert cli(["lab", "compare", "--trace", "x.jsonl", "--workloads", last, "--out",
                str(tmp_path / "wrong")]) == 2  # fmt: skip
    assert "--workloads is for --suite" in capsys.readouterr().err
    partial = (tmp_path / "j2" / "results.partial.jsonl").read_text().splitlines()
    assert len(partial) == len(json.loads((tmp_path / "j2" / "results.json").read_text()))
    assert len((tmp_path / "j2" / "workloads.partial.jsonl").read_text().splitlines()) == 2
    assert cli(["lab", "compare", "--suite", "smoke", "--trace", "x", "--out",
                str(tmp_path / "bad")]) == 2  # fmt: skip
    assert "picks its own traces" in capsys.readouterr().err
    # every workload has its TTFT floor, and `lab summary` re-writes the summary of a suite
    # cut short from its partial results (here: only the first workload's runs)
    assert all(w["floor"]["p90"] > 0 for w in s["workloads"])
    cut = tmp_path / "cut"
    cut.mkdir()
    first = SMOKE[0].name
    lines = [x for x in partial if json.loads(x)["workload"] == first]
    (cut / "results.partial.jsonl").write_text("\n".join(lines) + "\n")
    rows = [
        json.loads(x)
        for x in (tmp_path / "j2" / "workloads.partial.jsonl").read_text().splitlines()
    ]
    for w in rows:
        w["floor"] = None  # as a suite prepared before floors existed left them
    (cut / "workloads.partial.jsonl").write_text("".join(json.dumps(w) + "\n" for w in rows))
    assert cli(["lab", "summary", str(cut), "--suite", "smoke"]) == 0
    s2 = json.loads((cut / "summary.json").read_text())
    assert [w["name"] for w in s2["workloads"]] == [first]
    mine = next(w for w in s["workloads"] if w["name"] == first)
    assert s2["workloads"][0]["floor"] == mine["floor"]
    assert {c["workload"] for c in s2["cells"]} == {first}
    assert cli(["lab", "summary", str(tmp_path / "bad")]) == 2
    assert "neither results.json" in capsys.readouterr().err


def test_lab_workloads_prints_the_characterisation(tmp_path, capsys):
    assert cli(["lab", "workloads", "--suite", "smoke", "--json", "--write", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [w["name"] for w in out] == [e.name for e in SMOKE]
    assert out[0]["characterisation"]["block_repeat"] == 0.0
    assert out[1]["spec"]["params"]["family"] == "agentic"
    assert (tmp_path / "smoke-agentic.jsonl").is_file()
    assert cli(["lab", "workloads", "--suite", "smoke"]) == 0
    assert "| smoke-chat | smoke | chat | 40 |" in capsys.readouterr().out


def test_lab_workloads_characterises_any_trace(capsys):
    from bench.lab.synthetic import TRACE_SLICES_DIR

    t = TRACE_SLICES_DIR / "mooncake_conversation_head400.jsonl"
    assert cli(["lab", "workloads", "--trace", str(t), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == t.name and row["characterisation"]["requests"] == 400
    assert 0 < row["characterisation"]["block_repeat"] < 1


# --- several lab seeds ----------------------------------------------------------------------
def _fail(w, load, check, ratio, unattainable=None, oracle=None):
    return {"workload": w, "load": load, "check": check, "ratio": ratio,
            "unattainable": unattainable, "oracle": oracle}  # fmt: skip


def _dm(failures):
    """A done_means_1 result holding ``failures`` (its counts as done_means_1 makes them)."""
    return {"failures": failures,
            "unattainable": sum(1 for f in failures if f["unattainable"]),
            "not_reached_by_oracle": sum(1 for f in failures if f["oracle"])}  # fmt: skip


def test_across_seeds_counts_per_seed_sums_the_attainable_and_lists_the_seeds_of_each_check():
    lead = "ttft_p90 <= 0.7x gie-default or attainment >= gie-default + 10 pts"
    per_seed = {
        0: _dm([_fail("a", 1.0, lead, 0.9, unattainable="floor"),
                _fail("b", 0.8, "tpot_p90 <= 1.1x best", 1.2)]),
        2: _dm([_fail("a", 1.0, lead, 0.92, unattainable="floor", oracle="x"),
                _fail("c", 1.2, "e2e_p90 <= 1.1x best", 1.15)]),
        1: _dm([]),
    }  # fmt: skip
    a = across_seeds(per_seed)
    assert a["seeds"] == [0, 1, 2]
    assert a["per_seed"]["0"] == {"failing": 2, "unattainable": 1, "attainable": 1,
                                  "not_reached_by_oracle": 0}  # fmt: skip
    assert a["per_seed"]["1"]["failing"] == 0
    assert a["per_seed"]["2"]["not_reached_by_oracle"] == 1
    assert a["attainable_total"] == 2  # b on seed 0, c on seed 2; a is "no router can"
    rows = {(f["workload"], f["check"]): f for f in a["failures"]}
    assert rows[("a", lead)]["seeds"] == [0, 2] and rows[("a", lead)]["ratios"] == [0.9, 0.92]
    assert rows[("a", lead)]["unattainable"] is True
    assert rows[("b", "tpot_p90 <= 1.1x best")]["seeds"] == [0]
    md = seeds_markdown(a, "train")
    assert "| 0 | 2 | 1 | 1 | 0 |" in md and "| 1 | 0 | 0 | 0 | 0 |" in md
    assert "summed over the seeds: **2**" in md
    assert "| a | 1 | " + lead + " | 0, 2 (2 of 3) | 0.90 / 0.92 | yes |" in md


def test_lab_compare_suite_at_several_seeds_writes_one_summary_per_seed(tmp_path, capsys):
    argv = ["lab", "compare", "--suite", "smoke", "--pods", "2", "--policies",
            "least-request,headroom", "--loads", "1.0", "--streaming", "--quiet", "--slo", "off"]  # fmt: skip
    out = tmp_path / "seeds"
    assert cli([*argv, "--seeds", "3,4", "--jobs", "2", "--out", str(out)]) == 0
    one = tmp_path / "one"
    assert cli([*argv, "--seed", "4", "--out", str(one)]) == 0

    def strip(p: Path):
        return [{k: v for k, v in r.items() if k != "wall_seconds"}
                for r in json.loads(p.read_text())]  # fmt: skip

    s3 = json.loads((out / "seed-3" / "summary.json").read_text())
    s4 = json.loads((out / "seed-4" / "summary.json").read_text())
    assert s3["seed"] == 3 and s4["seed"] == 4
    runs3, runs4 = strip(out / "seed-3" / "results.json"), strip(out / "seed-4" / "results.json")
    assert {r["seed"] for r in runs3} == {3} and {r["seed"] for r in runs4} == {4}
    # the seeds differ (the engines' noise) ...
    assert [r["ttft_ms"] for r in runs3] != [r["ttft_ms"] for r in runs4]
    # ... over the same workloads (prepared once, with the first seed)
    assert [(r["workload"], r["policy"]) for r in runs3] == [
        (r["workload"], r["policy"]) for r in runs4
    ]
    assert [r["requests"] for r in runs4] == [r["requests"] for r in strip(one / "results.json")]
    a = json.loads((out / "seeds.json").read_text())
    assert a["seeds"] == [3, 4] and a["suite"] == "smoke" and a["loads"] == [1.0]
    assert set(a["per_seed"]) == {"3", "4"}
    assert "Lab suite `smoke` at seeds 3, 4" in (out / "seeds.md").read_text()
    # `lab summary` of the multi-seed directory re-writes the per-seed summaries from the
    # partial results (every seed's runs in one file)
    (out / "seed-3" / "summary.json").unlink()
    assert cli(["lab", "summary", str(out)]) == 0
    assert json.loads((out / "seed-3" / "summary.json").read_text())["seed"] == 3
    assert json.loads((out / "seeds.json").read_text())["per_seed"] == a["per_seed"]
    # candidates alone (no headroom: no done-means 1 to sum): the per-seed summaries only
    alone = tmp_path / "alone"
    assert cli([*argv[:7], "least-request", *argv[8:], "--seeds", "3,4", "--out", str(alone)]) == 0
    assert (alone / "seed-4" / "summary.json").is_file() and not (alone / "seeds.json").exists()
    assert cli(["lab", "compare", "--suite", "smoke", "--seeds", "1,1", "--out",
                str(tmp_path / "rep")]) == 2  # fmt: skip
    assert "seeds repeat" in capsys.readouterr().err
    assert cli(["lab", "compare", "--trace", "x", "--seeds", "1,2", "--out",
                str(tmp_path / "tr")]) == 2  # fmt: skip
    assert "--seeds is for --suite" in capsys.readouterr().err


def test_lab_decisions_logs_each_decision_of_a_suite_cell(tmp_path, capsys):
    out = tmp_path / "s"
    argv = ["lab", "compare", "--suite", "smoke", "--pods", "2", "--policies", "headroom",
            "--loads", "1.0", "--slo", "off", "--regret-samples", "0", "--out", str(out)]  # fmt: skip
    assert cli(argv) == 0
    capsys.readouterr()
    assert cli(["lab", "decisions", str(out), "smoke-chat", "1.0", "--pods", "2",
                "--from", "3", "--to", "9"]) == 0  # fmt: skip
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [d["index"] for d in lines] == list(range(3, 9))
    for d in lines:
        assert d["chosen"] in {p[0] for p in d["pods"]} and len(d["pods"]) == 2
        assert d["ttft_s"] > 0 and d["queued_s"] >= 0 and d["routed_s"] >= d["arrival_s"]
        # the chosen pod has the best score (max-score-picker)
        best = max(p[4] for p in d["pods"])
        assert next(p for p in d["pods"] if p[0] == d["chosen"])[4] == best
    assert cli(["lab", "decisions", str(out), "nope", "1.0"]) == 2
    assert "no workload 'nope'" in capsys.readouterr().err


def test_lab_versus_scores_several_seeds_per_seed_and_pooled(tmp_path, capsys):
    """Runs of two lab seeds (a `--seeds 1,2` suite's seed-1 / seed-2): each seed scored on
    its own, then every seed's cells as one suite's (checks summed, geomeans over all)."""
    for sd, slower in ((1, 1.0), (2, 1.21)):
        rows = [dict(r, seed=sd) for r in small_results()]
        rows += [dict(r, policy="cand", ttft_ms={k: v * slower for k, v in r["ttft_ms"].items()})
                 for r in rows if r["policy"] == "headroom"]  # fmt: skip
        (tmp_path / f"seed-{sd}").mkdir()
        (tmp_path / f"seed-{sd}" / "results.json").write_text(json.dumps(rows))
    dirs = [str(tmp_path / "seed-1"), str(tmp_path / "seed-2")]
    assert cli(["lab", "versus", *dirs, "--reference", "headroom", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per = {sd: {r["policy"]: r for r in rows} for sd, rows in out["seeds"].items()}
    pooled = {r["policy"]: r for r in out["pooled"]}
    assert per["1"]["cand"]["ttft_p90"] == 1.0 and per["2"]["cand"]["ttft_p90"] == 1.21
    assert pooled["cand"]["ttft_p90"] == 1.1  # sqrt(1.21): the same cells on both seeds
    assert pooled["cand"]["cells"] == per["1"]["cand"]["cells"] + per["2"]["cand"]["cells"]
    assert (
        pooled["cand"]["attainable"]
        == per["1"]["cand"]["attainable"] + per["2"]["cand"]["attainable"]
    )
    assert all("(seed " in f["workload"] for f in pooled["cand"]["failures"])
    assert cli(["lab", "versus", *dirs, "--reference", "headroom"]) == 0
    text = capsys.readouterr().out
    assert "seed 1:" in text and "seed 2:" in text and "seeds 1, 2 pooled" in text
    # a seed's runs in two directories are still refused
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "results.json").write_text(
        (tmp_path / "seed-2" / "results.json").read_text()
    )
    assert cli(["lab", "versus", *dirs, str(tmp_path / "copy")]) == 2
    assert "give each policy one directory" in capsys.readouterr().err


def test_lab_versus_merges_suite_directories_and_refuses_a_policy_run_twice(tmp_path, capsys):
    rs = small_results()
    base = [r for r in rs if r["policy"] != "headroom"]
    ship = [r for r in rs if r["policy"] == "headroom"]
    cand = [dict(r, policy="cand") for r in ship]
    for name, rows in (("base", base + ship), ("cand", cand)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(rows))
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "cand"),
                "--reference", "headroom", "--json"]) == 0  # fmt: skip
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cand"]["ttft_p90"] == 1.0 and rows["cand"]["cells"] == 3
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "cand"), "--cells",
                "--json"]) == 0  # fmt: skip
    both = json.loads(capsys.readouterr().out)
    assert {r["policy"]: r for r in both["policies"]} == rows
    assert len(both["cells"]) == 3 and all(c["policy"] == "cand" for c in both["cells"])
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "cand"), "--cells"]) == 0
    assert "| cand | w | 0.8 |" in capsys.readouterr().out
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "cand"),
                "--failures"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.count("| cand | ") == 1 + rows["cand"]["failing"]  # its row and each check
    assert rows["cand"]["attainable"] == rows["headroom"]["attainable"]
    # the same policy's runs in two directories: refused, not silently merged
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "results.json").write_text(json.dumps(ship))
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "again")]) == 2
    assert "give each policy one directory" in capsys.readouterr().err
    # ... unless DIR:POLICIES takes only the baselines from the first (the shipped profile from
    # the other, e.g. a run with other client budgets)
    baselines = ",".join(sorted({r["policy"] for r in base}))
    assert cli(["lab", "versus", f"{tmp_path / 'base'}:{baselines}", str(tmp_path / "again"),
                str(tmp_path / "cand"), "--json"]) == 0  # fmt: skip
    again = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert again["cand"] == rows["cand"]
    assert cli(["lab", "versus", f"{tmp_path / 'base'}:", str(tmp_path / "cand")]) == 2
    # POLICY=NAME: the same profile's runs from two directories, one under another name
    assert cli(["lab", "versus", str(tmp_path / "base"), f"{tmp_path / 'again'}:headroom=rerun",
                "--json"]) == 0  # fmt: skip
    rerun = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}["rerun"]
    assert rerun["ttft_p90"] == 1.0 and rerun["cells"] == 3  # the same runs: ratio 1
    assert rerun["attainable"] == rows["headroom"]["attainable"]
    assert cli(["lab", "versus", str(tmp_path / "base"), f"{tmp_path / 'again'}:headroom="]) == 2
    assert "not POLICY or POLICY=NAME" in capsys.readouterr().err
    assert cli(["lab", "versus", str(tmp_path / "nowhere")]) == 2
    # runs of the same cell at other rates (a suite prepared with another first seed): refused
    (tmp_path / "other").mkdir()
    moved = [dict(r, policy="cand2", rate_scale=(r.get("rate_scale") or 1.0) * 1.01) for r in ship]
    (tmp_path / "other" / "results.json").write_text(json.dumps(moved))
    assert cli(["lab", "versus", str(tmp_path / "base"), str(tmp_path / "other")]) == 2
    assert "compare suites prepared alike" in capsys.readouterr().err
