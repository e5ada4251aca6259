"""The engine flags' effects: chunked prefill off (whole prompts; a long prompt holds up the
decodes it shares a step with; a prompt that does not fit the step's budget waits while
smaller ones behind it go, as vLLM V1 does) and prefix caching off (no hits, counters at
zero, as vLLM counts)."""

from __future__ import annotations

import random

from services.simulator.engine import Engine, run_until_idle
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import get_profile
from services.simulator.vllm_args import resolve

QUIET = get_profile("h100-llama3-8b").with_overrides(jitter=0.0, api_jitter=0.0, idle_wake_s=0.0)


def toks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1 << 31) for _ in range(n)]


def decode_then_long_prompt(profile) -> tuple[list, list[float]]:
    """Four requests decoding, then a 6,000-token prompt arrives: the busy steps and the
    decoders' inter-token gaps."""
    e = Engine(profile, seed=0)
    for i in range(4):
        e.submit(f"d{i}", toks(100, i), 40, 0.0)
    now = 0.0
    for _ in range(8):  # the decoders get going
        now += e.step(now).duration_s
    e.submit("long", toks(6000, 99), 2, now)
    _, log = run_until_idle(e, now)
    busy = [out for _, out in log if not out.idle]
    gaps = [g for out in busy for g in out.itl_s]
    return busy, gaps


def test_without_chunked_prefill_a_long_prompt_is_scheduled_whole_and_stalls_decodes():
    chunked = QUIET.with_overrides(max_num_batched_tokens=2048, max_model_len=8192)
    whole = QUIET.with_overrides(
        max_num_batched_tokens=8192, max_model_len=8192, enable_chunked_prefill=False
    )
    busy_c, gaps_c = decode_then_long_prompt(chunked)
    busy_w, gaps_w = decode_then_long_prompt(whole)
    # chunked: the prompt goes in budget-sized pieces next to the 4 decodes
    pieces = [out.prefill_tokens for out in busy_c if out.prefill_tokens > 0]
    assert pieces == [2048 - 4, 2048 - 4, 6000 - 2 * (2048 - 4)]
    # whole: one step computes all 6,000 tokens, and the 4 decodes in it wait for it
    [big] = [out for out in busy_w if out.prefill_tokens > 0]
    assert big.prefill_tokens == 6000 and big.decode_tokens == 4 and big.batch_size == 5
    assert big.duration_s > 2.5 * max(out.duration_s for out in busy_c)
    assert max(gaps_w) >= big.duration_s - 1e-9  # the decoders waited for the whole prefill
    assert max(gaps_w) > 2.5 * max(gaps_c)


def test_without_chunked_prefill_a_prompt_that_does_not_fit_waits_and_smaller_ones_go():
    base = QUIET.with_overrides(max_num_batched_tokens=1024, max_model_len=1024)
    for chunked, expect in ((True, {"a": 900, "b": 124}), (False, {"a": 900, "c": 100})):
        e = Engine(base.with_overrides(enable_chunked_prefill=chunked), seed=0)
        for rid, n in (("a", 900), ("b", 900), ("c", 100)):
            e.submit(rid, toks(n, ord(rid)), 2, 0.0)
        first = e.step(0.0)
        assert first.idle  # the API overhead
        e.step(first.duration_s)
        assert e.running_ids() == list(expect)  # c overtook b only without chunked prefill
        assert sum(expect.values()) == e.stats().computed_tokens
        run_until_idle(e, 1.0)
        assert e.stats().request_success == 3  # b is scheduled whole in a later step


def test_vllm_args_reach_the_engine():
    p = resolve(QUIET, "--no-enable-chunked-prefill --max-model-len=8192", "0.12").profile
    busy, _ = decode_then_long_prompt(p)
    assert max(out.prefill_tokens for out in busy) == 6000


def test_without_prefix_caching_nothing_hits_and_the_counters_stay_zero():
    prompt = toks(3200, 7)
    results = {}
    for caching in (True, False):
        profile = QUIET.with_overrides(enable_prefix_caching=caching)
        e = Engine(profile, seed=0)
        ttfts = []
        for i in range(3):
            e.submit(f"r{i}", prompt + toks(50, i), 4, 10.0 * i)
            _, log = run_until_idle(e, 10.0 * i)
            ttfts += [t for _, o in log for t in o.ttft_s]
        results[caching] = (e.stats(), ttfts, PodMetrics(e, "m").render().decode())
    on, ttft_on, _ = results[True]
    off, ttft_off, text_off = results[False]
    assert on.prefix_cache_hits >= 2 * 3200 - 32 and on.prefix_cache_queries == 3 * 3250
    assert ttft_on[1] < 0.7 * ttft_on[0]
    assert off.prefix_cache_hits == 0 and off.prefix_cache_queries == 0
    assert off.computed_tokens == 3 * (3250 + 3)  # every prompt computed in full
    assert min(ttft_off[1:]) > 0.95 * ttft_off[0]
    assert e.pool.num_cached == 0  # nothing registered for later lookups
    assert "vllm:prefix_cache_hits_total" in text_off
    for line in text_off.splitlines():
        if line.startswith(("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")):
            assert float(line.rsplit(" ", 1)[1]) == 0.0
