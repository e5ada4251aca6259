"""Small synthetic traces in the Mooncake and Azure formats (tests, demos) and where the
real traces live.

Synthetic Mooncake requests come in conversations: each turn repeats the previous turn's
blocks and appends new ones, so prefixes are shared as in the real trace.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

TRACES_ENV = "HEADROOM_TRACES_DIR"
CHECKOUT = Path(__file__).resolve().parents[2]
# small slices of both real traces, shipped with their licence (tests/data/traces/README.md)
TRACE_SLICES_DIR = CHECKOUT / "tests" / "data" / "traces"
# the full traces are never part of the checkout: by default they lie beside it
DEFAULT_TRACES_DIR = CHECKOUT.parent / "shared" / "traces"


def traces_dir() -> Path:
    """Where the full real traces are: ``$HEADROOM_TRACES_DIR``, else ``../shared/traces``
    beside the checkout (they are never part of it)."""
    env = os.environ.get(TRACES_ENV)
    if env:
        return Path(env)
    return DEFAULT_TRACES_DIR


def write_mooncake_trace(
    path: str | Path,
    n: int,
    *,
    rate_rps: float = 4.0,
    seed: int = 0,
    max_blocks: int = 12,
    output: tuple[int, int] = (8, 200),
) -> Path:
    rng = random.Random(seed)
    path = Path(path)
    t_ms = 0.0
    next_id = 0
    convs: list[list[int]] = []
    lines = []
    for _ in range(n):
        t_ms += rng.expovariate(rate_rps) * 1000.0
        if convs and rng.random() < 0.6:
            blocks = rng.choice(convs)
        else:
            blocks = []
            convs.append(blocks)
        add = rng.randint(1, 3)
        blocks.extend(range(next_id, next_id + add))
        next_id += add
        del blocks[:-max_blocks]
        ids = list(blocks)
        n_in = 512 * (len(ids) - 1) + rng.randint(16, 512)
        lines.append(
            json.dumps(
                {
                    "timestamp": int(t_ms),
                    "input_length": n_in,
                    "output_length": rng.randint(*output),
                    "hash_ids": ids,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_azure_trace(
    path: str | Path,
    n: int,
    *,
    rate_rps: float = 4.0,
    seed: int = 0,
    context: tuple[int, int] = (100, 4000),
    output: tuple[int, int] = (1, 60),
) -> Path:
    rng = random.Random(seed)
    path = Path(path)
    t = datetime(2023, 11, 16, 18, 0, 0, tzinfo=UTC)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for _ in range(n):
        t += timedelta(seconds=rng.expovariate(rate_rps))
        stamp = t.strftime("%Y-%m-%d %H:%M:%S.%f")
        rows.append(f"{stamp},{rng.randint(*context)},{rng.randint(*output)}")
    path.write_text("\n".join(rows) + "\n")
    return path
