"""vLLM engine flags -> the simulated engine (services/simulator/vllm_args.py), resolved as
vLLM 0.11 / 0.12 resolve them."""

from __future__ import annotations

import pytest

from bench.lab.config import LabConfig
from services.simulator.profiles import get_profile
from services.simulator.settings import SimulatorSettings
from services.simulator.vllm_args import parse, resolve, resolve_named

H100 = get_profile("h100-llama3-8b")
A100 = get_profile("a100-llama3-8b")
MEASURED = "--gpu_memory_utilization=0.9 --max-model-len=512 --max-num-seqs=128"


def test_no_flags_keep_the_profile_preset():
    r = resolve(H100, None)
    assert r.profile is H100 and r.notes == []
    assert resolve(H100, "").profile is H100


def test_unset_flags_take_vllm_defaults_for_the_card_not_the_preset():
    p = resolve(H100, "--max-model-len=4096").profile
    # vLLM 0.11, OpenAI server, >= 70 GiB card that is not an A100: 8192 tokens, 1024 seqs
    assert p.max_num_batched_tokens == 8192 and p.max_num_seqs == 1024
    assert p.enable_chunked_prefill and p.enable_prefix_caching
    assert p.max_model_len == 4096 and p.block_size == 16
    a = resolve(A100, "--max-model-len=4096").profile
    assert a.max_num_batched_tokens == 2048 and a.max_num_seqs == 256


def test_the_measured_deployments_flags():
    base = resolve_named("h100-llama3-8b", f"{MEASURED} --no-enable-prefix-caching "
                         "--no-enable-chunked-prefill")  # fmt: skip
    p = base.profile
    assert (p.max_num_seqs, p.max_model_len, p.max_num_batched_tokens) == (128, 512, 8192)
    assert not p.enable_prefix_caching
    # vLLM 0.11's V1 engine forces chunked prefill on for generative models
    assert p.enable_chunked_prefill
    assert any("no effect in vLLM 0.11" in n for n in base.notes)
    assert p.num_gpu_blocks == 26_250  # 0.9 of the card: REFERENCE's ~420k tokens
    on = resolve_named("h100-llama3-8b", f"{MEASURED} --enable-prefix-caching").profile
    assert on.enable_prefix_caching and on.enable_chunked_prefill


def test_vllm_0_12_honours_no_chunked_prefill_and_sizes_the_budget():
    p = resolve(H100, "--no-enable-chunked-prefill --max-model-len=512", "0.12.0").profile
    assert not p.enable_chunked_prefill
    assert p.max_num_batched_tokens == 8192  # max(max_model_len, card default)
    long = resolve(H100, "--no-enable-chunked-prefill --max-model-len=32768", "0.12").profile
    assert long.max_num_batched_tokens == 32768
    capped = resolve(
        H100, "--no-enable-chunked-prefill --max-model-len=16k --max-num-seqs=1", "v0.12.1"
    ).profile
    assert capped.max_num_batched_tokens == 16_000  # max_num_seqs x max_model_len
    with pytest.raises(ValueError, match="smaller than --max-model-len"):
        resolve(H100, "--no-enable-chunked-prefill --max-model-len=4096 "
                "--max-num-batched-tokens=2048", "0.12")  # fmt: skip


def test_gpu_memory_utilization_and_block_size_set_the_kv_blocks():
    half = resolve(H100, "--gpu-memory-utilization 0.5").profile
    full = resolve(H100, "--gpu-memory-utilization=0.9").profile
    assert half.num_gpu_blocks < full.num_gpu_blocks
    kv = 0.5 * H100.gpu_memory_bytes - H100.weights_bytes - H100.non_kv_bytes
    assert half.num_gpu_blocks == int(kv // (16 * H100.kv_bytes_per_token))
    big = resolve(H100, "--block-size 32").profile
    assert big.block_size == 32 and big.kv_capacity_tokens == pytest.approx(
        full.kv_capacity_tokens, rel=0.001
    )
    with pytest.raises(ValueError, match="fewer than --max-model-len"):
        resolve(H100, "--gpu-memory-utilization=0.2")  # KV < the model's 128k context
    with pytest.raises(ValueError, match="no GPU memory model"):
        resolve(H100.with_overrides(gpu_memory_bytes=0), "--gpu-memory-utilization=0.8")
    a100 = resolve(A100, "--gpu-memory-utilization=0.9").profile  # the A100's memory model
    assert a100.num_gpu_blocks == A100.num_gpu_blocks


def test_flag_spellings_and_human_readable_sizes():
    a = parse(["--max_num_seqs", "64", "--max-num-batched-tokens=8k", "--max-model-len", "2K"])
    assert (a.max_num_seqs, a.max_num_batched_tokens, a.max_model_len) == (64, 8000, 2048)
    assert parse("--no-enable-prefix-caching").enable_prefix_caching is False
    assert parse("--enable-prefix-caching").enable_prefix_caching is True


def test_other_flags_are_reported_not_dropped():
    r = resolve(H100, "meta-llama/Llama-3.1-8B --max-num-seqs=64 --port 8000 --enforce-eager")
    assert r.profile.max_num_seqs == 64
    assert r.unmodelled == ("meta-llama/Llama-3.1-8B", "--port", "8000", "--enforce-eager")
    assert any("not modelled" in n and "--enforce-eager" in n for n in r.notes)


@pytest.mark.parametrize(
    "args, match",
    [
        ("--max-num-seqs=0", "max-num-seqs"),
        ("--max-num-seqs=abc", "invalid int"),
        ("--gpu-memory-utilization=1.5", "gpu-memory-utilization"),
        ("--block-size=24", "block-size"),
        ("--max-model-len=200000", "exceeds the model"),
        ("--max-num-seqs=512 --max-num-batched-tokens=256", "must be >= --max-num-seqs"),
    ],
)
def test_invalid_flags_are_errors(args, match):
    with pytest.raises(ValueError, match=match):
        resolve(H100, args)


def test_versions():
    with pytest.raises(ValueError, match="V1 engine"):
        resolve(H100, "--max-num-seqs=8", "0.9.2")
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        resolve(H100, "--max-num-seqs=8", "latest")
    with pytest.raises(ValueError, match="not vLLM"):
        resolve_named("tpu-v5e-llama3-8b", "--max-num-seqs=8")


def test_service_settings_and_lab_config_use_the_same_resolution():
    flags = "--max-num-seqs=32 --no-enable-prefix-caching"
    s = SimulatorSettings(vllm_args=flags)
    lab = LabConfig(trace="t.jsonl", vllm_args=flags)
    assert s.engine_profile() == lab.engine_profile() == resolve(H100, flags).profile
    with pytest.raises(ValueError):
        SimulatorSettings(vllm_args="--max-num-seqs=-1")
    with pytest.raises(ValueError):
        LabConfig(trace="t.jsonl", vllm_args="--block-size=3")
