"""The workload generator (bench/lab/workloads.py) and the characterisation: distributions
match their parameters, block reuse is what the parameters say, the files are valid Mooncake
traces with prefix-consistent block ids, and a seed reproduces a workload byte for byte."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from bench.lab.characterise import block_repeat_fraction, characterise
from bench.lab.workloads import (
    BLOCK,
    Agentic,
    Arrival,
    Chat,
    Code,
    LogNormal,
    Mix,
    MultiTurn,
    Rag,
    WorkloadSpec,
)
from bench.traces import read_trace


def read(spec: WorkloadSpec, tmp_path):
    trace = read_trace(spec.write(tmp_path / f"{spec.name}.jsonl"))
    assert trace.skipped_count == 0 and len(trace) == spec.requests
    return trace.requests


def pct(values, q):
    return float(np.percentile(np.asarray(values, dtype=float), q))


def test_lognormal_median_and_p90_and_clip():
    d = LogNormal(800, 2000, 300, 3000)
    rng = random.Random(1)
    xs = [d.sample(rng) for _ in range(20_000)]
    assert min(xs) >= 300 and max(xs) <= 3000
    assert pct(xs, 50) == pytest.approx(800, rel=0.04)
    assert pct(xs, 90) == pytest.approx(2000, rel=0.04)
    with pytest.raises(ValueError):
        LogNormal(100, 50, 1, 1000)  # p90 below the median


@pytest.mark.parametrize(
    ("arrival", "cv"),
    [(Arrival("poisson", 20.0), 1.0), (Arrival("gamma", 20.0, cv=2.0), 2.0)],
)
def test_arrival_rate_and_burstiness(arrival, cv):
    rng = random.Random(2)
    it = arrival.times(rng)
    ts = [next(it) for _ in range(20_000)]
    gaps = np.diff(ts)
    assert (len(ts) - 1) / (ts[-1] - ts[0]) == pytest.approx(20.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_onoff_arrivals_are_silent_when_off_and_keep_the_mean_rate():
    a = Arrival("onoff", 10.0, on_s=5.0, off_s=15.0)
    it = a.times(random.Random(3))
    ts = [next(it) for _ in range(10_000)]
    assert all(t % 20.0 < 5.0 for t in ts)  # nothing in the 15 s off windows
    assert len(ts) / ts[-1] == pytest.approx(10.0, rel=0.05)


def test_chat_has_no_shared_blocks_and_its_lengths_match(tmp_path):
    spec = WorkloadSpec("c", Chat(prompt=LogNormal(900, 2200, 300, 3000),
                                  output=LogNormal(200, 450, 50, 800),
                                  arrival=Arrival("poisson", 15.0)), seed=5, requests=4000)  # fmt: skip
    reqs = read(spec, tmp_path)
    c = characterise(reqs)
    assert c["block_repeat"] == 0.0
    prompts = [r.input_tokens for r in reqs]
    outs = [r.output_tokens for r in reqs]
    assert 300 <= min(prompts) and max(prompts) <= 3000 and 50 <= min(outs) and max(outs) <= 800
    assert c["prompt"]["p50"] == pytest.approx(900, rel=0.05)
    assert c["prompt"]["p90"] == pytest.approx(2200, rel=0.05)
    assert c["output"]["p50"] == pytest.approx(200, rel=0.05)
    assert c["output"]["p90"] == pytest.approx(450, rel=0.05)
    assert c["rate_rps"] == pytest.approx(15.0, rel=0.06)
    assert c["arrival_cv"] == pytest.approx(1.0, abs=0.06)


def test_code_reuse_is_the_configured_share(tmp_path):
    params = Code(repos=4, prompt=LogNormal(3000, 8000, 500, 12_000), share_prob=0.6,
                  shared_fraction=0.5)  # fmt: skip
    reqs = read(WorkloadSpec("k", params, seed=6, requests=4000), tmp_path)
    # what the parameters imply: share_prob x floor(fraction x L / 512) of ceil(L / 512) blocks
    rng = random.Random(99)
    ls = [params.prompt.sample(rng) for _ in range(50_000)]
    shared = statistics.fmean(int(0.5 * x) // BLOCK for x in ls)
    expected = 0.6 * shared / statistics.fmean(math.ceil(x / BLOCK) for x in ls)
    assert block_repeat_fraction(reqs) == pytest.approx(expected, abs=0.02)
    assert 0.2 < expected < 0.3
    assert max(r.output_tokens for r in reqs) <= 128


def test_rag_prompts_are_documents_with_zipf_popularity(tmp_path):
    params = Rag(documents=4, document=LogNormal(20_000, 40_000, 10_000, 60_000), zipf=1.2,
                 system_tokens=512, question=LogNormal(50, 100, 10, 200))  # fmt: skip
    reqs = read(WorkloadSpec("r", params, seed=7, requests=1500), tmp_path)
    by_doc: dict[int, int] = {}
    for r in reqs:
        assert r.hash_ids[0] == reqs[0].hash_ids[0]  # the shared system prompt
        by_doc[r.hash_ids[1]] = by_doc.get(r.hash_ids[1], 0) + 1
        assert 10_000 + 512 < r.input_tokens <= 60_000 + 512 + 512 + 200
    counts = sorted(by_doc.values(), reverse=True)
    assert len(counts) == 4
    # Zipf 1.2 over 4 documents: the top one takes 1 / sum(1 / i^1.2) of the requests
    top = 1 / sum(1 / (i + 1) ** 1.2 for i in range(4))
    assert counts[0] / len(reqs) == pytest.approx(top, abs=0.04)
    assert block_repeat_fraction(reqs) > 0.95  # a few hot documents: nearly every block repeats


def test_multiturn_prompts_grow_and_carry_the_previous_turn(tmp_path):
    # first messages >= 600 tokens: every prompt has a whole block beyond the system prompt
    params = MultiTurn(system_prompts=2, system_tokens=1024, turns=5.0, think_s=5.0,
                       first=LogNormal(700, 1500, 600, 3000), max_context=1_000_000,
                       arrival=Arrival("poisson", 1.0))  # fmt: skip
    reqs = read(WorkloadSpec("m", params, seed=8, requests=3000), tmp_path)
    assert len({r.hash_ids[:2] for r in reqs}) == 2  # the system prompts (2 blocks each)
    whole: dict[tuple[int, ...], object] = {}  # an earlier prompt's whole blocks -> it
    later_turns = 0
    for r in reqs:
        prev = next((whole[r.hash_ids[:k]] for k in range(len(r.hash_ids), 2, -1)
                     if r.hash_ids[:k] in whole), None)  # fmt: skip
        if prev is not None:  # a later turn: the previous turn's prompt, its answer, more
            assert r.input_tokens > prev.input_tokens + prev.output_tokens
            assert r.arrival_s >= prev.arrival_s
            later_turns += 1
        whole[r.hash_ids[: r.input_tokens // BLOCK]] = r
    # geometric turns with mean 5: one request in five opens a session
    assert len(reqs) / (len(reqs) - later_turns) == pytest.approx(5.0, rel=0.15)
    assert characterise(reqs)["block_repeat"] > 0.6


def test_agentic_without_carry_repeats_the_system_prompt(tmp_path):
    params = Agentic(agents=3, system_tokens=4096, calls=8.0, carry=False,
                     step=LogNormal(300, 900, 20, 3000))  # fmt: skip
    reqs = read(WorkloadSpec("a", params, seed=9, requests=2000), tmp_path)
    systems = {r.hash_ids[:8] for r in reqs}
    assert len(systems) == 3
    blocks = sum(len(r.hash_ids) for r in reqs)
    # every call repeats its agent's 8 system blocks (less each agent's first call)
    assert block_repeat_fraction(reqs) == pytest.approx((8 * len(reqs) - 24) / blocks, abs=1e-3)
    assert characterise(reqs)["arrival_cv"] > 1.3  # bursts


@pytest.mark.parametrize(
    "params",
    [Chat(), MultiTurn(), Rag(documents=3), Code(), Agentic(),
     Mix(parts=((0.5, Chat()), (0.5, Agentic())), rate_rps=8.0)],
)  # fmt: skip
def test_block_ids_follow_prefixes(params, tmp_path):
    reqs = read(WorkloadSpec("p", params, seed=10, requests=600), tmp_path)
    first_prefix: dict[int, tuple[int, ...]] = {}
    for r in reqs:
        assert len(r.hash_ids) == math.ceil(r.input_tokens / BLOCK)
        for i, h in enumerate(r.hash_ids):  # an id always follows the same prefix
            assert first_prefix.setdefault(h, r.hash_ids[:i]) == r.hash_ids[:i]


def test_mix_shares_and_rate(tmp_path):
    params = Mix(parts=((0.75, Chat(prompt=LogNormal(400, 600, 300, 700))),
                        (0.25, Code(prompt=LogNormal(9000, 11000, 8000, 12000)))),
                 rate_rps=12.0)  # fmt: skip
    reqs = read(WorkloadSpec("x", params, seed=11, requests=2000), tmp_path)
    long = sum(1 for r in reqs if r.input_tokens > 7000)
    assert long == 500
    assert characterise(reqs)["rate_rps"] == pytest.approx(12.0, rel=0.08)
    # both parts span the whole workload
    t_end = reqs[-1].arrival_s
    assert max(r.arrival_s for r in reqs if r.input_tokens > 7000) > 0.9 * t_end
    assert max(r.arrival_s for r in reqs if r.input_tokens < 1000) > 0.9 * t_end


def test_a_seed_reproduces_the_file_and_another_seed_does_not(tmp_path):
    spec = WorkloadSpec("s", MultiTurn(), seed=12, requests=300)
    a = spec.write(tmp_path / "a.jsonl").read_bytes()
    b = spec.write(tmp_path / "b.jsonl").read_bytes()
    c = WorkloadSpec("s", MultiTurn(), seed=13, requests=300).write(tmp_path / "c.jsonl")
    assert a == b and a != c.read_bytes()
    assert '"family": "multiturn"' in (tmp_path / "a.spec.json").read_text()


def test_characterise_a_small_trace_exactly(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1000, "input_length": 1500, "output_length": 30, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 3000, "input_length": 200, "output_length": 20, "hash_ids": [4]}\n'
    )
    c = characterise(read_trace(p).requests)
    assert c["prompt"] == {"mean": 900.0, "p50": 1000.0, "p90": 1400.0, "max": 1500}
    assert c["output"]["mean"] == 20.0 and c["output"]["p90"] == 28.0
    assert c["block_repeat"] == pytest.approx(2 / 6, abs=1e-4)
    assert c["rate_rps"] == pytest.approx(2 / 3, abs=1e-4) and c["duration_s"] == 3.0
    assert c["arrival_cv"] == pytest.approx(1 / 3, abs=1e-3)  # gaps 1 s and 2 s


def test_the_lab_report_describes_a_generated_workload(tmp_path):
    from bench.lab.config import LabConfig
    from bench.lab.run import run_lab

    spec = WorkloadSpec("tiny", Chat(arrival=Arrival("poisson", 5.0)), seed=14, requests=12)
    path = spec.write(tmp_path / "tiny.jsonl")
    r = run_lab(LabConfig(trace=str(path), policy="least-request", pods=2))
    assert r["workload_spec"]["family"] == "chat" and r["workload_spec"]["seed"] == 14
    assert r["workload_spec"]["params"]["prompt"]["median"] == 800
    (tmp_path / "tiny.spec.json").unlink()
    assert (
        run_lab(LabConfig(trace=str(path), policy="least-request", pods=2))["workload_spec"] is None
    )
