"""Prompts as inference-perf draws them, in token ids (pure, seeded).

inference-perf samples random token ids from the tokenizer's vocabulary, decodes them to text
and sends the text; the server tokenizes it again (with a BOS). Here the ids go to the engine
directly: ``[BOS] + ids``.

- ``shared_prefix`` (``datagen/shared_prefix_datagen.py``): ``num_groups`` system prompts of
  ``system_prompt_len`` tokens, each with ``num_prompts_per_group`` questions of
  ``question_len`` tokens; prompt = system prompt + " " + question (one separator token).
  The prompts are shuffled once; stage request ``n`` uses prompt ``n % len(prompts)``
  (``load_lazy_data``: ``data_index % len(self.prompts)``), with the output length drawn for
  it.
- ``random`` (``datagen/random_datagen.py``): ``input_distribution.total_count`` lengths and
  as many output lengths (``utils/distribution.generate_distribution``: normal, clipped,
  rounded); request ``n`` gets fresh random ids of length ``input_lengths[n % count]``.

Decoding random ids and tokenizing the text again does not give the same number of tokens
(Llama-3's tokenizer gives about 5% more). ``token_scale`` stretches every drawn length by
that factor when a measured run says how long the server's prompts were (``headroom sim
inference-perf --prompt-len-from``); by default 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.simulator.inference_perf.config import BenchConfig, Distribution

LLAMA3_VOCAB = 128_256
LLAMA3_BOS = 128_000
SEPARATOR = 220  # " " in Llama-3's tokenizer


@dataclass(frozen=True, slots=True)
class Prompt:
    tokens: list[int]
    max_tokens: int


def lengths(d: Distribution, count: int, rng: np.random.Generator) -> list[int]:
    """``generate_distribution`` (normal): clipped to [min, max] and rounded."""
    x = rng.normal(loc=d.mean, scale=d.std_dev, size=count)
    return [int(v) for v in np.clip(np.round(np.clip(x, d.min, d.max)), d.min, d.max)]


def _ids(n: int, rng: np.random.Generator) -> list[int]:
    return rng.integers(0, LLAMA3_VOCAB, size=n).tolist() if n > 0 else []


def _scaled(n: int, scale: float) -> int:
    return max(0, round(n * scale))


class DataGenerator:
    """``prompt(n)``: the request a stage sends as its ``n``-th."""

    def __init__(self, config: BenchConfig, seed: int = 0, token_scale: float = 1.0) -> None:
        if not token_scale > 0:
            raise ValueError("token_scale must be > 0")
        self.rng = np.random.default_rng(seed)
        self.scale = token_scale
        self.kind = config.data_type
        self._fixed: list[Prompt] = []
        if config.shared_prefix is not None:
            self._build_shared_prefix(config)
        elif config.random is not None:
            r = config.random
            self._in = lengths(
                r.input_distribution, r.input_distribution.total_count or 1, self.rng
            )
            self._out = lengths(
                r.output_distribution, r.output_distribution.total_count or 1, self.rng
            )
        else:
            raise ValueError("no data generator for this config")

    def _build_shared_prefix(self, config: BenchConfig) -> None:
        sp, rng, k = config.shared_prefix, self.rng, self.scale
        assert sp is not None
        prompts: list[Prompt] = []
        for _ in range(sp.num_groups):
            system = _ids(_scaled(sp.system_prompt_len, k), rng)
            n = sp.num_prompts_per_group
            q_lens = (
                lengths(sp.question_distribution, n, rng)
                if sp.question_distribution is not None
                else [sp.question_len] * n
            )
            o_lens = (
                lengths(sp.output_distribution, n, rng)
                if sp.output_distribution is not None
                else [sp.output_len] * n
            )
            for q, o in zip(q_lens, o_lens, strict=True):
                question = _ids(_scaled(q, k), rng)
                tokens = [LLAMA3_BOS, *system, SEPARATOR, *question]
                prompts.append(Prompt(tokens, max(1, o)))
        order = rng.permutation(len(prompts))
        self._fixed = [prompts[i] for i in order]

    def __len__(self) -> int:
        return len(self._fixed) if self._fixed else len(self._in)

    def prompt(self, n: int) -> Prompt:
        if self._fixed:
            return self._fixed[n % len(self._fixed)]
        i = n % len(self._in)
        return Prompt([LLAMA3_BOS, *_ids(_scaled(self._in[i], self.scale), self.rng)],
                      max(1, self._out[i]))  # fmt: skip


def token_scale_for(config: BenchConfig, prompt_len_mean: float) -> float:
    """The ``token_scale`` that makes the prompts' mean length ``prompt_len_mean`` (what a
    measured run's ``prompt_len.mean`` says the server counted, BOS included)."""
    if config.shared_prefix is not None:
        sp = config.shared_prefix
        q = sp.question_distribution.mean if sp.question_distribution else sp.question_len
        drawn, fixed = sp.system_prompt_len + q, 2  # BOS and the separator
    elif config.random is not None:
        drawn, fixed = config.random.input_distribution.mean, 1
    else:
        raise ValueError("no data generator for this config")
    if drawn <= 0 or prompt_len_mean <= fixed:
        raise ValueError(f"cannot match a mean prompt length of {prompt_len_mean}")
    return (prompt_len_mean - fixed) / drawn
