"""vLLM engine flags -> the simulated engine's configuration (pure; no I/O).

A pod is described the way its deployment is: a hardware profile (``profiles.py``: the card
and the model, with vLLM's per-card defaults) plus the ``vllm serve`` flags, resolved as vLLM
resolves them. The simulator service (``HEADROOM_SIM_VLLM_ARGS``), ``headroom sim
inference-perf --vllm-args`` and the lab (``headroom lab --vllm-args``) all go through
:func:`resolve`.

Flags that shape the engine: ``--max-num-seqs``, ``--max-num-batched-tokens``,
``--enable-/--no-enable-chunked-prefill``, ``--enable-/--no-enable-prefix-caching``,
``--max-model-len``, ``--gpu-memory-utilization`` (KV blocks, through the profile's memory
model), ``--block-size``. ``--flag=value`` and ``--flag value`` both work, and underscores
may stand for dashes (vLLM's ``FlexibleArgumentParser`` accepts ``--gpu_memory_utilization``
too). Other flags are listed in :attr:`Resolved.unmodelled`, never dropped silently.

How vLLM resolves them (``vllm/engine/arg_utils.py``, ``EngineArgs._set_default_args``, and
``vllm/config/scheduler.py``):

- vLLM 0.11 (V1 engine): "V1 uses chunked prefills and prefix caching by default for
  non-pooling tasks" sets ``enable_chunked_prefill = True`` for every generative model,
  whatever the user passed, so ``--no-enable-chunked-prefill`` has no effect (vLLM issue
  #18547; PR #21645 proposed to raise instead). ``max_num_batched_tokens`` defaults per usage
  context and card: OpenAI server 8192 on a >= 70 GiB card that is not an A100 (H100,
  MI300x), 2048 otherwise; ``max_num_seqs`` to ``min(1024 | 256, max_num_batched_tokens)``.
- vLLM >= 0.12 (PR #26623, then #29186's warning "This model does not officially support
  disabling chunked prefill"): the flag is honoured; with chunked prefill off and no
  explicit budget, ``max_num_batched_tokens = min(max(max_model_len, card default),
  max_num_seqs x max_model_len)``.
- Without chunked prefill ``max_num_batched_tokens`` must be >= ``max_model_len`` (a prompt
  must fit one step); it must always be >= ``max_num_seqs``.
- Prefix caching is on unless ``--no-enable-prefix-caching``.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.simulator.profiles import Profile, get_profile

DEFAULT_VLLM_VERSION = "0.11"  # the version the shipped measurements ran (vllm-openai:v0.11.0)
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)  # vLLM's CacheConfig.block_size choices (CUDA)
_HONOURS_NO_CHUNKED_PREFILL = (0, 12)


@dataclass(frozen=True)
class VllmArgs:
    """The engine flags as given (None: not given, vLLM's default applies)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    unmodelled: tuple[str, ...] = ()  # other flags, as given


@dataclass(frozen=True)
class Resolved:
    """A profile with the flags applied, and what the resolution says about them."""

    profile: Profile
    args: VllmArgs
    vllm_version: str
    notes: list[str] = field(default_factory=list)

    @property
    def unmodelled(self) -> tuple[str, ...]:
        return self.args.unmodelled

    def describe(self) -> str:
        p = self.profile
        return (
            f"{p.name} as vLLM {self.vllm_version}: max_num_seqs={p.max_num_seqs} "
            f"max_num_batched_tokens={p.max_num_batched_tokens} "
            f"chunked_prefill={'on' if p.enable_chunked_prefill else 'off'} "
            f"prefix_caching={'on' if p.enable_prefix_caching else 'off'} "
            f"max_model_len={p.max_model_len} block_size={p.block_size} "
            f"num_gpu_blocks={p.num_gpu_blocks} ({p.kv_capacity_tokens:,} KV tokens)"
        )


def _human_int(v: str) -> int:
    """vLLM's ``human_readable_int``: 8192, 8k (10^3), 8K (2^10)."""
    v = v.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG])", v)
    if m is None:
        return int(v)
    number, suffix = m.groups()
    if suffix.islower():
        return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9}[suffix])
    return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30}[suffix]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # raise instead of exiting
        raise ValueError(f"vLLM args: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=_human_int)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    p.add_argument("--max-model-len", type=_human_int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--block-size", type=int)
    return p


def _normalise(tokens: Sequence[str]) -> list[str]:
    """``--a_b=c`` -> ``--a-b=c`` (vLLM's FlexibleArgumentParser does the same)."""
    out = []
    for t in tokens:
        if t.startswith("--"):
            name, sep, value = t.partition("=")
            t = name.replace("_", "-") + sep + value
        out.append(t)
    return out


def parse(args: str | Sequence[str] | None) -> VllmArgs:
    """Parse ``vllm serve`` flags (a string is split like a shell would)."""
    if args is None:
        return VllmArgs()
    tokens = _normalise(shlex.split(args) if isinstance(args, str) else list(args))
    known, rest = _parser().parse_known_args(tokens)
    a = VllmArgs(**vars(known), unmodelled=tuple(rest))
    if a.max_num_seqs is not None and a.max_num_seqs < 1:
        raise ValueError("vLLM args: --max-num-seqs must be >= 1")
    if a.max_num_batched_tokens is not None and a.max_num_batched_tokens < 1:
        raise ValueError("vLLM args: --max-num-batched-tokens must be >= 1")
    if a.max_model_len is not None and a.max_model_len < 1:
        raise ValueError("vLLM args: --max-model-len must be >= 1")
    if a.gpu_memory_utilization is not None and not 0 < a.gpu_memory_utilization <= 1:
        raise ValueError("vLLM args: --gpu-memory-utilization must be in (0, 1]")
    if a.block_size is not None and a.block_size not in BLOCK_SIZES:
        raise ValueError(f"vLLM args: --block-size must be one of {BLOCK_SIZES}")
    return a


def _version(v: str) -> tuple[int, int]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:\S*)", v.strip())
    if m is None:
        raise ValueError(f"vLLM version {v!r}: expected MAJOR.MINOR[.PATCH], e.g. 0.11.0")
    ver = (int(m.group(1)), int(m.group(2)))
    if ver < (0, 10):
        raise ValueError(f"vLLM version {v}: only the V1 engine (0.10 and later) is modelled")
    return ver


def resolve(
    base: Profile, args: str | Sequence[str] | VllmArgs | None, vllm_version: str | None = None
) -> Resolved:
    """``base`` with vLLM's flags applied as ``vllm_version`` resolves them. With no flags
    at all the profile is returned unchanged (its own preset)."""
    version = vllm_version or DEFAULT_VLLM_VERSION
    ver = _version(version)
    a = args if isinstance(args, VllmArgs) else parse(args)
    if a == VllmArgs():
        return Resolved(base, a, version)
    if base.engine != "vllm":
        raise ValueError(f"profile {base.name!r} imitates {base.engine}, not vLLM: no vLLM flags")
    notes: list[str] = []
    chunked = True if a.enable_chunked_prefill is None else a.enable_chunked_prefill
    if not chunked and ver < _HONOURS_NO_CHUNKED_PREFILL:
        chunked = True
        notes.append(
            f"--no-enable-chunked-prefill has no effect in vLLM {version}: its V1 engine "
            "always uses chunked prefill for generative models (EngineArgs._set_default_args)"
        )
    caching = True if a.enable_prefix_caching is None else a.enable_prefix_caching
    max_model_len = a.max_model_len or base.model_max_len
    if max_model_len > base.model_max_len:
        raise ValueError(
            f"--max-model-len {max_model_len} exceeds the model's context ({base.model_max_len})"
        )
    budget = a.max_num_batched_tokens
    if budget is None:
        budget = base.vllm_max_num_batched_tokens
        if not chunked:  # vLLM >= 0.12
            seqs = a.max_num_seqs or base.vllm_max_num_seqs
            budget = min(max(max_model_len, budget), seqs * max_model_len)
    seqs = a.max_num_seqs or min(base.vllm_max_num_seqs, budget)
    if not chunked and budget < max_model_len:
        raise ValueError(
            f"--max-num-batched-tokens ({budget}) is smaller than --max-model-len "
            f"({max_model_len}): without chunked prefill a prompt must fit one step"
        )
    if budget < seqs:
        raise ValueError(f"--max-num-batched-tokens ({budget}) must be >= --max-num-seqs ({seqs})")
    block_size = a.block_size or 16
    if base.gpu_memory_bytes > 0:
        util = 0.9 if a.gpu_memory_utilization is None else a.gpu_memory_utilization
        blocks = base.gpu_blocks_for(util, block_size)
    elif a.gpu_memory_utilization is not None:
        raise ValueError(
            f"profile {base.name!r} has no GPU memory model: --gpu-memory-utilization "
            "cannot be applied"
        )
    else:  # keep the preset's KV capacity in tokens
        blocks = base.kv_capacity_tokens // block_size
    if blocks * block_size < max_model_len:
        raise ValueError(
            f"the KV cache holds {blocks * block_size} tokens, fewer than --max-model-len "
            f"({max_model_len}): vLLM refuses to start"
        )
    if a.unmodelled:
        notes.append("not modelled (no effect on the simulated engine): " + " ".join(a.unmodelled))
    profile = base.with_overrides(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=caching,
        max_model_len=max_model_len,
        block_size=block_size,
        num_gpu_blocks=blocks,
    )
    return Resolved(profile, a, version, notes)


def resolve_named(
    profile: str, args: str | Sequence[str] | None, vllm_version: str | None = None
) -> Resolved:
    return resolve(get_profile(profile), args, vllm_version)
