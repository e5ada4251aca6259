"""The prompt tokens the gateway counts and hashes. Chat messages are rendered by
shared.tokenizer.render_chat, the same function the simulator uses, so the gateway's token
counts and prefix blocks line up with the pod's prefix cache."""

from __future__ import annotations

from collections.abc import Sequence

from shared.tokenizer import tokenize


def prompt_tokens(texts: Sequence[str]) -> list[int]:
    """Token ids of the prompt texts, concatenated (a list prompt is one batch)."""
    out: list[int] = []
    for t in texts:
        out.extend(tokenize(t))
    return out
