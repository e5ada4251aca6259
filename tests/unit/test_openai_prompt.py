"""The prompt of an OpenAI body (shared/openai_prompt.py): chat rendering with tools, tool
calls and content parts, batch prompts, token estimates of non-text parts, chunked
tokenization."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.openai_prompt import (
    AUDIO_BYTES_PER_TOKEN,
    FILE_ID_TOKENS,
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    OTHER_PART_TOKENS,
    PromptError,
    batch_prompts,
    chat_prompt,
    prompt_tokens,
)
from shared.tokenizer import render_chat, tokenize, tokenize_chunked

IMG = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def test_text_only_messages_render_as_before():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    assert chat_prompt(msgs) == [render_chat(msgs)]
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                          {"type": "text", "text": "b"}]}]  # fmt: skip
    assert chat_prompt(parts) == [render_chat([{"role": "user", "content": "ab"}])]


def test_tools_tool_calls_and_tool_messages():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "tool_calls": [{"type": "custom", "id": "c2",
                                              "custom": {"name": "g", "input": "raw"}}]},
        {"role": "assistant", "function_call": {"name": "h", "arguments": "{}"}},
    ]  # fmt: skip
    [text] = chat_prompt(msgs, tools)
    assert text == (
        '<|tools|> [{"type":"function","function":{"name":"f","parameters":{}}}]\n'
        "<|user|> go\n"
        '<|assistant|> <|tool_call|> f {"x": 1}\n'
        "<|tool|> 42\n"
        "<|assistant|> <|tool_call|> g raw\n"
        "<|assistant|> <|tool_call|> h {}\n"
        "<|assistant|>"
    )
    assert chat_prompt(msgs[:1], []) == chat_prompt(msgs[:1])  # no tools: no tools line


def test_non_text_parts_are_stand_in_tokens():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "look:"}, IMG,
                                         {"type": "text", "text": "ok?"}]}]  # fmt: skip
    p = chat_prompt(msgs)
    assert p[0] == "<|user|> look:" and p[2] == "ok?\n<|assistant|>"
    assert len(p[1]) == IMAGE_TOKENS
    assert chat_prompt(msgs) == p  # deterministic: the same image is the same prefix
    other = {"type": "image_url", "image_url": {"url": "https://example.com/dog.png"}}
    assert chat_prompt([{"role": "user", "content": [other]}])[1] != p[1]
    n = len(prompt_tokens(p))
    assert n == len(tokenize("<|user|> look:")) + IMAGE_TOKENS + len(tokenize("ok?\n<|assistant|>"))


@pytest.mark.parametrize(
    ("part", "tokens"),
    [
        ({"type": "image_url", "image_url": {"url": "u", "detail": "low"}}, IMAGE_TOKENS_LOW),
        ({"type": "image_url", "image_url": {"url": "u", "detail": "auto"}}, IMAGE_TOKENS),
        (
            {"type": "input_audio", "input_audio": {
                "data": base64.b64encode(b"\0" * AUDIO_BYTES_PER_TOKEN * 10).decode(),
                "format": "wav"}},
            10,
        ),
        ({"type": "input_audio", "input_audio": {"data": "", "format": "mp3"}}, 1),
        ({"type": "file", "file": {"file_data": "data:application/pdf;base64," + "A" * 64}}, 3),
        ({"type": "file", "file": {"file_id": "file-1"}}, FILE_ID_TOKENS),
        ({"type": "video_url", "video_url": {"url": "v"}}, OTHER_PART_TOKENS),
    ],
)  # fmt: skip
def test_token_estimates_of_parts(part, tokens):
    p = chat_prompt([{"role": "user", "content": [part]}])
    assert len(p[1]) == tokens


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hi", "messages"),
        ([{"content": "x"}], "messages[0]"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": None}], "messages[0].content"),
        ([{"role": "user", "content": {"text": "x"}}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": ["x"]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
         "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "file", "file": "x"}]}], "messages[0].content[0]"),
        ([{"role": "assistant", "tool_calls": {"id": 1}}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": [1]}], "messages[0].tool_calls[0]"),
    ],
)  # fmt: skip
def test_invalid_messages_name_the_field(messages, param):
    with pytest.raises(PromptError) as e:
        chat_prompt(messages)
    assert e.value.param == param


def test_assistant_content_may_be_absent_and_tools_must_be_a_list():
    assert chat_prompt([{"role": "assistant"}]) == ["<|assistant|> \n<|assistant|>"]
    with pytest.raises(PromptError) as e:
        chat_prompt([{"role": "user", "content": "x"}], {"type": "function"})
    assert e.value.param == "tools"


@pytest.mark.parametrize(
    ("value", "prompts"),
    [
        ("a b", [["a b"]]),
        (["a", "b"], [["a"], ["b"]]),
        ([1, 2, 3], [[[1, 2, 3]]]),
        ([[1], [2, 3]], [[[1]], [[2, 3]]]),
    ],
)
def test_batch_prompts(value, prompts):
    assert batch_prompts(value, "prompt") == prompts


@pytest.mark.parametrize(
    "value", [None, 5, [], ["a", 1], [1, "a"], [1.5], [True], [-1], [1 << 31], [[1], []], [[1], 2]]
)
def test_batch_prompts_rejects(value):
    with pytest.raises(PromptError) as e:
        batch_prompts(value, "input")
    assert e.value.param == "input"


def test_token_id_prompts_are_their_own_tokens():
    assert prompt_tokens([[5, 6, 7]]) == [5, 6, 7]
    assert prompt_tokens(["a", [5], "b"]) == [*tokenize("a"), 5, *tokenize("b")]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab é,.!\n\t\x1c_9"), max_size=400),
       st.integers(min_value=1, max_value=40))  # fmt: skip
def test_chunked_tokenization_equals_tokenize(text, chunk):
    assert tokenize_chunked(text, chunk) == tokenize(text)
