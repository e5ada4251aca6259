"""OpenAI API coverage through the real gateway and real simulator pods, with the official
``openai`` client: a tool-call round trip, an image part, ``n=2``, list and token-id prompts,
embeddings, streaming with usage. The pod's own token count (usage.prompt_tokens) equals the
gateway's (the training sample's input_tokens): both read the prompt with the same code,
tools, tool calls and the image's token estimate included."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from openai import AsyncOpenAI

from shared.openai_prompt import IMAGE_TOKENS
from tests.integration.gateway_harness import MODEL, Stack, gateway_stack

pytestmark = pytest.mark.timeout(90)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# a 1x1 PNG
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def client(st: Stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{st.url}/v1", api_key="unused", max_retries=0)


async def last_sample(st: Stack, n: int):
    samples = await st.samples(n)
    return samples[-1][0]


async def test_tool_call_round_trip(isolated):
    async with gateway_stack(isolated, n_pods=2) as st:
        await st.snapshot()
        c = client(st)
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = await c.chat.completions.create(
            model=MODEL, messages=messages, tools=[WEATHER], tool_choice="required",
            max_tokens=6, response_format={"type": "text"}, extra_body={"top_k": 5},
        )  # fmt: skip
        msg = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        assert msg.content is None and len(msg.tool_calls) == 1
        call = msg.tool_calls[0]
        assert call.type == "function" and call.function.name == "get_weather" and call.id
        args = json.loads(call.function.arguments)  # one JSON object, complete
        assert list(args) == ["city"] and args["city"]
        s1 = await last_sample(st, 1)
        assert s1.input_tokens == first.usage.prompt_tokens  # tools counted alike
        assert first.usage.completion_tokens == 6

        # the agent's next turn: the assistant's tool call (content null) and its result
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'},
        ]
        second = await c.chat.completions.create(
            model=MODEL, messages=messages, tools=[WEATHER], max_tokens=5
        )
        assert second.choices[0].message.content and second.choices[0].finish_reason == "length"
        s2 = await last_sample(st, 2)
        assert s2.input_tokens == second.usage.prompt_tokens > s1.input_tokens

        # the same call streamed: the deltas add up to the same kind of call
        stream = await c.chat.completions.create(
            model=MODEL, messages=messages[:1], tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=4, stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        name, arguments, finish, usage = "", "", None, None
        async for ch in stream:
            if ch.usage is not None:
                usage = ch.usage
            for choice in ch.choices:
                for d in choice.delta.tool_calls or ():
                    name += d.function.name or ""
                    arguments += d.function.arguments or ""
                finish = choice.finish_reason or finish
        assert name == "get_weather" and finish == "tool_calls"
        assert list(json.loads(arguments)) == ["city"]
        assert usage.completion_tokens == 4 and usage.prompt_tokens == s1.input_tokens


async def test_image_part_is_passed_through_and_counted(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        c = client(st)
        content = [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": PNG, "detail": "high"}},
        ]
        r = await c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=3
        )
        assert r.choices[0].message.content
        text_only = await c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content[:1]}], max_tokens=3
        )
        assert r.usage.prompt_tokens == text_only.usage.prompt_tokens + IMAGE_TOKENS
        sample = await last_sample(st, 1)
        assert sample.input_tokens == r.usage.prompt_tokens


async def test_n_choices_streaming_and_not(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        c = client(st)
        msgs = [{"role": "user", "content": "Tell me a story"}]
        r = await c.chat.completions.create(model=MODEL, messages=msgs, n=2, max_tokens=5)
        assert [ch.index for ch in r.choices] == [0, 1]
        assert all(ch.message.content and ch.finish_reason == "length" for ch in r.choices)
        assert r.choices[0].message.content != r.choices[1].message.content
        assert r.usage.completion_tokens == 10

        stream = await c.chat.completions.create(
            model=MODEL, messages=msgs, n=2, max_tokens=5, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        texts: dict[int, str] = {}
        usage = None
        async for ch in stream:
            usage = ch.usage or usage
            for choice in ch.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        assert texts == {0: r.choices[0].message.content, 1: r.choices[1].message.content}
        assert usage.completion_tokens == 10
        # TPOT is measured per choice: 5 tokens each, not 10 interleaved
        sample = await last_sample(st, 2)
        assert sample.tpot_ms is not None and sample.output_tokens == 10


async def test_list_and_token_id_prompts(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        c = client(st)
        r = await c.completions.create(model=MODEL, prompt=["Once upon", "a time"], max_tokens=3)
        assert [ch.index for ch in r.choices] == [0, 1] and all(ch.text for ch in r.choices)
        assert r.usage.completion_tokens == 6
        one = await c.completions.create(model=MODEL, prompt="Once upon", max_tokens=3)
        assert one.choices[0].text == r.choices[0].text  # prompt 0 of the batch alone

        r = await c.completions.create(model=MODEL, prompt=[[11, 12, 13], [14, 15]], n=2,
                                       max_tokens=2)  # fmt: skip
        assert [ch.index for ch in r.choices] == [0, 1, 2, 3]
        assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 8
        sample = await last_sample(st, 3)
        assert sample.input_tokens == 5

        r = await c.completions.create(model=MODEL, prompt=[7, 8, 9], max_tokens=2)
        assert r.usage.prompt_tokens == 3


async def test_embeddings(isolated):
    async with gateway_stack(isolated, n_pods=2) as st:
        await st.snapshot()
        c = client(st)
        # the client asks for base64 by default and decodes it
        r = await c.embeddings.create(model=MODEL, input=["hello world", "goodbye"])
        assert [d.index for d in r.data] == [0, 1]
        a, b = (np.array(d.embedding) for d in r.data)
        assert a.shape == (1024,) and abs(np.linalg.norm(a) - 1) < 1e-5
        assert not np.allclose(a, b)
        again = await c.embeddings.create(model=MODEL, input="hello world", encoding_format="float")
        assert np.allclose(again.data[0].embedding, a, atol=1e-6)  # deterministic
        assert r.usage.prompt_tokens == 3 and r.usage.total_tokens == 3
        small = await c.embeddings.create(model=MODEL, input=[[1, 2, 3]], dimensions=64)
        assert len(small.data[0].embedding) == 64

        raw = await st.post("/v1/embeddings", {"model": MODEL, "input": "x y",
                                               "encoding_format": "base64"})  # fmt: skip
        status, headers, body = raw
        assert status == 200 and headers["x-headroom-pod"] in {p.name for p in st.pods}
        vec = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
        assert vec.shape == (1024,)

        # prefill only: a TTFT sample (the reply), no TPOT, no output tokens, not streamed
        samples = await st.samples(4)
        for s, _ in samples:
            assert s.ttft_ms is not None and s.ttft_ms == pytest.approx(s.e2e_ms)
            assert s.tpot_ms is None and s.output_tokens == 0 and not s.streaming
        assert samples[0][0].input_tokens == 3
        assert st.gw.view.total_in_flight() == 0


async def test_streaming_with_and_without_usage(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        c = client(st)
        stream = await c.completions.create(
            model=MODEL, prompt="Count", max_tokens=4, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [ch async for ch in stream]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
        assert all(ch.usage is None for ch in chunks[:-1])
        assert "".join(ch.choices[0].text for ch in chunks[:-1])

        stream = await c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, stream=True
        )
        chunks = [ch async for ch in stream]
        assert all(ch.usage is None for ch in chunks) and len(chunks) == 3
        assert chunks[0].choices[0].delta.role == "assistant"
