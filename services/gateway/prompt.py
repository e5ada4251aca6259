"""The prompt tokens the gateway counts and hashes. Prompts are read by
shared/openai_prompt.py and chat messages rendered there, the same code the simulator uses, so
the gateway's token counts and prefix blocks line up with the pod's prefix cache."""

from __future__ import annotations

from collections.abc import Sequence

from shared.openai_prompt import Prompt, prompt_tokens
from shared.tokenizer import tokenize, tokenize_chunked


def request_tokens(prompts: Sequence[Prompt], chunked: bool = False) -> tuple[list[int], int]:
    """Token ids of a request's prompts, concatenated (a batch is dispatched as one request:
    its prefill is the sum), and the longest prompt's length (what must fit the context).
    ``chunked``: tokenize in chunks (in the offload thread)."""
    tok = tokenize_chunked if chunked else tokenize
    if len(prompts) == 1:
        tokens = prompt_tokens(prompts[0], tok)
        return tokens, len(tokens)
    out: list[int] = []
    longest = 0
    for p in prompts:
        t = prompt_tokens(p, tok)
        out += t
        longest = max(longest, len(t))
    return out, longest
