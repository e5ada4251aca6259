"""The full real traces parse completely and the shipped slices are their heads:
`python -m bench.check_full_traces [DIR]` (default: $HEADROOM_TRACES_DIR, else the
directory beside the checkout). Prints JSON and a summary; exit 1 when a check fails."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from bench.lab.synthetic import TRACE_SLICES_DIR, traces_dir
from bench.traces import BLOCK_TOKENS, Trace, read_azure, read_mooncake
from shared.tokenizer import tokenize

SLICES = (("mooncake_conversation_head400.jsonl", "mooncake_conversation.jsonl"),
          ("azure_2023_code_head300.csv", "azure_2023_code.csv"))  # fmt: skip


def check_shared_hash_ids_give_identical_token_prefixes(trace: Trace) -> None:
    reqs = trace.requests[:400]
    checked = 0
    by_first: dict[int, list] = {}
    for r in reqs:
        by_first.setdefault(r.hash_ids[0], []).append(r)
    for group in by_first.values():
        for a, b in itertools.pairwise(group):
            k = 0
            while k < min(len(a.hash_ids), len(b.hash_ids)) and a.hash_ids[k] == b.hash_ids[k]:
                k += 1
            ta, tb = a.prompt_tokens(), b.prompt_tokens()
            n = min(k * BLOCK_TOKENS, a.input_tokens, b.input_tokens)
            assert ta[:n] == tb[:n]
            if k < min(len(a.hash_ids), len(b.hash_ids)):  # first differing block differs
                s = k * BLOCK_TOKENS
                assert ta[s : s + 16] != tb[s : s + 16]
            checked += 1
    assert checked > 50
    r = reqs[0]
    assert tokenize(r.prompt_text()) == r.prompt_tokens()
    assert len(r.prompt_tokens()) == r.input_tokens


def checks(d: Path) -> dict[str, str]:
    out: dict[str, str] = {}

    def check(name: str, fn) -> None:
        try:
            fn()
            out[name] = "ok"
        except AssertionError as e:
            out[name] = f"FAIL {e}"

    def heads() -> None:
        for sl, name in SLICES:
            head = (TRACE_SLICES_DIR / sl).read_bytes()
            with open(d / name, "rb") as f:
                assert f.read(len(head)) == head, name

    def mooncake() -> None:
        t = read_mooncake(d / "mooncake_conversation.jsonl")
        assert (len(t), t.skipped) == (12_031, []), (len(t), t.skipped[:3])
        assert abs(t.duration_s - 3537) <= 2, t.duration_s
        assert max(r.output_tokens for r in t) == 2000
        check_shared_hash_ids_give_identical_token_prefixes(t)

    def azure() -> None:
        t = read_azure(d / "azure_2023_code.csv")
        assert (len(t), t.skipped) == (8_819, []), (len(t), t.skipped[:3])
        assert abs(t.duration_s - 3436) <= 2, t.duration_s
        assert max(r.input_tokens for r in t) == 7437
        r = t.requests[100]
        assert tokenize(r.prompt_text()) == r.prompt_tokens()

    check("slices_are_heads", heads)
    check("mooncake_parses_completely", mooncake)
    check("azure_parses_completely", azure)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    d = Path(argv[0]) if argv else traces_dir()
    if not d.is_dir():
        print(f"check_full_traces: {d} is not a directory", file=sys.stderr)
        return 2
    res = checks(d)
    print(json.dumps({"traces_dir": str(d), "checks": res}, indent=2))
    for k, v in res.items():
        print(f"{k}: {v}", file=sys.stderr)
    return 0 if all(v == "ok" for v in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
