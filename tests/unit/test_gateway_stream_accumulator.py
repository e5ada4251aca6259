"""Folding upstream stream chunks into timing, usage and a non-streaming reply."""

from __future__ import annotations

from services.gateway.stream_accumulator import StreamAccumulator


def cmpl(idx, text, finish=None):
    return {"id": "cmpl-1", "created": 5, "model": "m",
            "choices": [{"index": idx, "text": text, "finish_reason": finish}]}  # fmt: skip


def chat(delta, finish=None, idx=0):
    return {"id": "c-1", "created": 5, "model": "m",
            "choices": [{"index": idx, "delta": delta, "finish_reason": finish}]}  # fmt: skip


USAGE = {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3,
                                                  "total_tokens": 7}}  # fmt: skip


def test_completions_aggregation_per_choice_index():
    acc = StreamAccumulator("completions")
    assert acc.feed(cmpl(0, "a"), 1.0)
    assert acc.feed(cmpl(1, "x"), 1.5)
    assert acc.feed(cmpl(0, "b", "length"), 2.0)
    assert acc.feed(cmpl(1, "", "stop"), 2.1) is False
    assert acc.feed(USAGE, 2.2) is False
    assert acc.first_token_at == 1.0 and acc.last_at == 2.2 and acc.token_chunks == 3
    assert acc.output_tokens() == 3 and acc.prompt_tokens() == 4
    assert acc.completion("rid", "m", 99) == {
        "id": "cmpl-1", "object": "text_completion", "created": 5, "model": "m",
        "choices": [
            {"index": 0, "text": "ab", "logprobs": None, "finish_reason": "length"},
            {"index": 1, "text": "x", "logprobs": None, "finish_reason": "stop"},
        ],
        "usage": USAGE["usage"],
    }  # fmt: skip


def test_chat_role_chunk_is_not_a_token():
    acc = StreamAccumulator("chat")
    assert acc.feed(chat({"role": "assistant", "content": ""}), 1.0) is False
    assert acc.first_token_at is None
    assert acc.feed(chat({"content": "Hi"}), 1.2)
    assert acc.feed(chat({"content": " there"}, "stop"), 1.3)
    out = acc.completion("rid", "m", 99)
    assert out["object"] == "chat.completion"
    assert out["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hi there"},
                               "logprobs": None, "finish_reason": "stop"}]  # fmt: skip
    assert acc.first_token_at == 1.2
    # without a usage chunk the token chunks stand in
    assert out["usage"]["completion_tokens"] == 2 and acc.output_tokens() == 2


def test_defaults_when_upstream_omits_ids():
    acc = StreamAccumulator("completions")
    acc.feed({"choices": [{"text": "z"}]}, 1.0)
    out = acc.completion("rid", "model-x", 42)
    assert out["id"] == "cmpl-rid" and out["created"] == 42 and out["model"] == "model-x"
    assert out["choices"][0]["text"] == "z"
