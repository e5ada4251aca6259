"""Hardware/model profiles for the simulated vLLM engine (Llama-3-8B class).

A profile holds the scheduler limits and the step-time model of one accelerator serving one
model. The step time of one engine iteration is

    linear    = max(weight_read_floor_s, tokens_in_step * per_token_s)   # roofline of the GEMMs
    attention = sum(context of scheduled sequences) * kv_bytes_per_token / attn_bandwidth
              + sum(new tokens x mean context of their chunk) * attn_compute_s
    step      = (linear + attention + step_overhead_s) * jitter

and every request pays ``api_overhead_s`` (HTTP, tokenisation, engine-core hand-off) before
it can be scheduled. The figures aim at the H100 calibration points in the reference notes:
TTFT about 30 ms for a 200-token prompt at low load, decode about 7.3 ms/token at batch 1
and about 11.6 ms at 128 concurrent, saturation near 10.5k output tokens/s (200 in, 64 out,
max_num_seqs 128).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KIB = 1024


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    max_num_seqs: int
    max_num_batched_tokens: int  # token budget per step (chunked prefill)
    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 131072
    weight_read_floor_s: float = 0.0061  # reading the weights once per step
    per_token_s: float = 0.000018  # GEMM compute per token once above the floor
    kv_bytes_per_token: int = 128 * KIB  # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 x fp16
    attn_bandwidth_bps: float = 3.35e12  # effective HBM bandwidth for attention reads
    attn_compute_s: float = 1.3e-12  # attention compute seconds per (query x context token)
    step_overhead_s: float = 0.0012  # scheduling, sampling, detokenisation per step
    api_overhead_s: float = 0.0225  # per request, before the first schedulable step
    jitter: float = 0.03  # sigma of the multiplicative log-normal step-time noise

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def with_overrides(self, **changes) -> Profile:
        return replace(self, **changes)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="h100-llama3-8b",
            max_num_seqs=128,
            max_num_batched_tokens=8192,
            num_gpu_blocks=26_000,
            weight_read_floor_s=0.0061,
            per_token_s=0.000018,
            attn_bandwidth_bps=3.35e12,
            attn_compute_s=1.3e-12,
            step_overhead_s=0.0012,
            api_overhead_s=0.0225,
        ),
        Profile(
            name="a100-llama3-8b",
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            num_gpu_blocks=24_000,
            weight_read_floor_s=0.010,
            per_token_s=0.000066,
            attn_bandwidth_bps=1.9e12,
            attn_compute_s=4.0e-12,
            step_overhead_s=0.0015,
            api_overhead_s=0.022,
        ),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown simulator profile {name!r}; known: {sorted(PROFILES)}") from None
