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


def test_tool_call_deltas_fold_into_one_call():
    acc = StreamAccumulator("chat")
    call0 = {"index": 0, "id": "call-1", "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    assert acc.feed(chat({"role": "assistant", "tool_calls": [call0]}), 1.0)
    assert acc.feed(
        chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}), 1.1
    )
    assert acc.feed(chat({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                         "tool_calls"), 1.2)  # fmt: skip
    assert acc.first_token_at == 1.0 and acc.token_chunks == 3
    [choice] = acc.completion("rid", "m", 9)["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call-1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    }  # fmt: skip


def test_other_delta_strings_logprobs_and_stop_reason_are_kept():
    acc = StreamAccumulator("chat")
    lp = {"content": [{"token": "a", "logprob": -0.1}], "refusal": None}
    acc.feed(
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think"}, "logprobs": lp}]}, 1.0
    )
    acc.feed({"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": lp,
                           "finish_reason": "stop", "stop_reason": 7}]}, 1.1)  # fmt: skip
    [c] = acc.completion("rid", "m", 9)["choices"]
    assert c["message"] == {"role": "assistant", "content": "a", "reasoning_content": "think"}
    assert c["logprobs"] == {"content": lp["content"] * 2, "refusal": None}
    assert (c["finish_reason"], c["stop_reason"]) == ("stop", 7)


def test_n_choices_count_their_own_chunks():
    acc = StreamAccumulator("completions")
    for i in range(3):
        for idx in (0, 1):
            acc.feed(cmpl(idx, f"t{i}"), 1.0 + i)
    acc.feed(cmpl(2, "x"), 5.0)
    assert acc.token_chunks == 7 and acc.choice_chunks == 3  # TPOT over one choice's tokens
