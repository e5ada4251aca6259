"""Hardware/model profiles for the simulated engine (Llama-3-8B class).

A profile holds the scheduler limits and the step-time model of one accelerator serving one
model. The step time of one engine iteration is

    gemm      = tokens_in_step * per_token_s
    linear    = (weight_read_floor_s^k + gemm^k)^(1/k)     # roofline, k = roofline_sharpness
    attention = sum(context of scheduled sequences) * kv_bytes_per_token / attn_bandwidth
              + sum(new tokens x mean context of their chunk) * attn_compute_s
    overhead  = step_overhead_s + scheduled sequences * per_seq_s
    step      = (linear + attention + overhead) * jitter  (+ idle_wake_s after an idle spell)

and every request pays ``api_overhead_s`` (HTTP, tokenisation, engine-core hand-off; noise
``api_jitter``) before it can be scheduled. The prefill attention term is quadratic in the
prompt, so prefill throughput falls with prompt length (H100: ~39k tok/s at 1k-token prompts,
~36k at 4k, ~33k at 8k). The H100 profile is fitted to a measured vLLM 0.11 run
(docs/benchmarks.md "Simulator vs measured vLLM"); ``services/simulator/calibrate.py``
measures the reference points (all within 15%). ``engine`` picks the /metrics exposition:
vLLM V1 names or JetStream names. The memory fields and ``vllm_*`` defaults let
``vllm_args.py`` apply a deployment's vLLM flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

KIB = 1024
GIB = 1024**3
ENGINES = ("vllm", "jetstream")


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    max_num_seqs: int
    max_num_batched_tokens: int  # token budget per step
    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 131072
    # vLLM's --enable-chunked-prefill: off, a prompt is scheduled whole or not at all (V1:
    # it waits while it does not fit the step's remaining budget); --enable-prefix-caching
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    weight_read_floor_s: float = 0.0065  # reading the weights once per step
    per_token_s: float = 0.000016  # GEMM compute per token once above the floor
    roofline_sharpness: float = math.inf  # k of the smooth max (floor^k + gemm^k)^(1/k)
    kv_bytes_per_token: int = 128 * KIB  # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 x fp16
    attn_bandwidth_bps: float = 2.2e12  # effective HBM bandwidth for attention reads
    attn_compute_s: float = 2.6e-9  # prefill attention seconds per (query x context token)
    step_overhead_s: float = 0.0006  # fixed scheduling/launch cost per step
    per_seq_s: float = 0.000006  # per scheduled sequence and step (sampling, detokenisation)
    api_overhead_s: float = 0.0225  # per request, before the first schedulable step
    api_jitter: float = 0.03  # sigma of the log-normal noise on api_overhead_s
    # the first step after the engine had nothing to do for idle_wake_after_s costs this much
    # more (measured vLLM answers a lone request slower than one arriving at a busy engine)
    idle_wake_s: float = 0.0
    idle_wake_after_s: float = 0.002
    jitter: float = 0.03  # sigma of the multiplicative log-normal step-time noise
    engine: str = "vllm"  # which server the pod imitates on /metrics: "vllm" | "jetstream"
    # The card and the model, for vLLM's flags (services/simulator/vllm_args.py): the KV
    # cache gets gpu_memory_utilization x gpu_memory_bytes - weights_bytes - non_kv_bytes
    # (activations of the profiling run, CUDA graphs, non-torch memory); 0 = no memory model
    gpu_memory_bytes: int = 0
    weights_bytes: int = 0
    non_kv_bytes: int = 0
    model_max_len: int = 131072  # the model's context (vLLM's --max-model-len default)
    # vLLM's defaults on this card for the OpenAI server (EngineArgs._set_default_args)
    vllm_max_num_batched_tokens: int = 2048
    vllm_max_num_seqs: int = 256
    # the pod's hardware class: what the pod reports (headroom_hardware_info{class=...}) and
    # the gateway keys its per-class cost model and the models' class feature on; named like
    # GKE's cloud.google.com/gke-accelerator node label
    hardware_class: str = ""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; known: {ENGINES}")

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def gpu_blocks_for(self, gpu_memory_utilization: float, block_size: int) -> int:
        """KV blocks of ``block_size`` tokens that ``gpu_memory_utilization`` of the card
        leaves after the weights and the non-KV memory (vLLM's profiling run)."""
        if self.gpu_memory_bytes <= 0:
            raise ValueError(f"profile {self.name!r} has no GPU memory model")
        kv = gpu_memory_utilization * self.gpu_memory_bytes - self.weights_bytes - self.non_kv_bytes
        return max(0, math.floor(kv / (block_size * self.kv_bytes_per_token)))

    def with_overrides(self, **changes) -> Profile:
        return replace(self, **changes)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        # Fitted to the measured vLLM 0.11 run in ../shared/measured (both configurations,
        # every stage; docs/benchmarks.md "Simulator vs measured vLLM"), checked with
        # `headroom sim calibrate` against REFERENCE section 3 (all points within 15%).
        Profile(
            name="h100-llama3-8b",
            hardware_class="nvidia-h100-80gb",
            max_num_seqs=128,
            max_num_batched_tokens=8192,
            num_gpu_blocks=26_250,  # 420k tokens
            weight_read_floor_s=0.0065,
            per_token_s=0.0000249,
            roofline_sharpness=2.0,
            attn_bandwidth_bps=2.2e12,
            attn_compute_s=1.3e-9,
            step_overhead_s=0.0006,
            per_seq_s=0.0000123,
            api_overhead_s=0.0153,
            api_jitter=0.22,
            idle_wake_s=0.007,
            # one H100 80GB (79.2 GiB visible), Llama-3.1-8B in bf16 (8.03e9 parameters);
            # non-KV memory chosen so vLLM's default utilisation 0.9 gives REFERENCE's
            # ~420k KV tokens (26,250 blocks of 16)
            gpu_memory_bytes=85_040_352_460,
            weights_bytes=16_060_522_496,
            non_kv_bytes=5_425_000_000,
            # vLLM 0.11 on a >= 70 GiB card that is not an A100, OpenAI server
            vllm_max_num_batched_tokens=8192,
            vllm_max_num_seqs=1024,
        ),
        # One A100 80GB (SXM), same model and vLLM 0.11. No measured run: the card-bound
        # terms come from REFERENCE section 3 (linear layers ~10 ms floor, ~0.066 ms per
        # token; vLLM's A100 defaults 2048 tokens / 256 sequences) and the public spec ratios
        # to the H100 SXM (HBM 2.04 vs 3.35 TB/s for the attention reads; dense BF16 312 vs
        # 989 TFLOPS for prefill attention); the host-side terms (API overhead, per-sequence
        # cost, roofline shape, idle wake-up) are the fitted H100 ones (same CPU-side code).
        Profile(
            name="a100-llama3-8b",
            hardware_class="nvidia-a100-80gb",
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            num_gpu_blocks=26_259,  # what the memory model below gives at utilisation 0.9
            weight_read_floor_s=0.010,
            per_token_s=0.000066,
            roofline_sharpness=2.0,
            attn_bandwidth_bps=2.2e12 * 2.04 / 3.35,
            attn_compute_s=1.3e-9 * 989 / 312,
            step_overhead_s=0.0006,
            per_seq_s=0.0000123,
            api_overhead_s=0.0153,
            api_jitter=0.22,
            idle_wake_s=0.007,
            # A100-SXM4-80GB (79.2 GiB visible, as the H100 80GB), the same weights; non-KV
            # memory smaller than the H100's (a 2048-token step's activations, not 8192)
            gpu_memory_bytes=85_040_352_460,
            weights_bytes=16_060_522_496,
            non_kv_bytes=5_405_000_000,
            vllm_max_num_batched_tokens=2048,
            vllm_max_num_seqs=256,
        ),
        # JetStream on a TPU v5e-8 slice: fixed decode slots, prompts up to 8k prefilled in one
        # step; /metrics use the jetstream_* names.
        Profile(
            name="tpu-v5e-llama3-8b",
            hardware_class="tpu-v5-lite-podslice",
            engine="jetstream",
            max_num_seqs=96,
            max_num_batched_tokens=8192,
            num_gpu_blocks=49_152,  # 786k tokens: what ~100 GB of HBM holds
            max_model_len=16_384,
            weight_read_floor_s=0.009,
            per_token_s=0.000030,
            attn_bandwidth_bps=4.0e12,
            attn_compute_s=2.0e-9,
            step_overhead_s=0.0015,
            per_seq_s=0.000010,
            api_overhead_s=0.030,
        ),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown simulator profile {name!r}; known: {sorted(PROFILES)}") from None


def parse_pool(spec: str, pods: int) -> list[str]:
    """The profile name of each of ``pods`` pods from a pool spec: a plain profile name
    (every pod) or ``name:count,name:count`` with the counts summing to ``pods`` (pods
    numbered in the order given, e.g. ``h100-llama3-8b:4,a100-llama3-8b:4``)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError("empty simulator profile")
    if len(parts) == 1 and ":" not in parts[0]:
        get_profile(parts[0])
        return [parts[0]] * pods
    out: list[str] = []
    for part in parts:
        name, sep, count = part.partition(":")
        name = name.strip()
        if not sep or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(f"expected PROFILE:COUNT in a mixed pool, got {part!r}")
        get_profile(name)
        out.extend([name] * int(count))
    if len(out) != pods:
        raise ValueError(f"the pool's counts sum to {len(out)}, not to the {pods} pods")
    return out
