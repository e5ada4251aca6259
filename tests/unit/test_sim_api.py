"""Pure shell pieces of the simulator: request parsing, fault state, settings, histograms."""

from __future__ import annotations

import pytest

from services.simulator import openai_api as oa
from services.simulator.engine import Engine, StepOutcome
from services.simulator.faults import FaultState
from services.simulator.metrics import Histogram, PodMetrics
from services.simulator.profiles import PROFILES
from services.simulator.settings import DEFAULT_MODEL, SimulatorSettings

# ---- parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"prompt": "hi"}, ([["hi"]], 16, False, False)),
        ({"prompt": ["hi"], "max_tokens": 3}, ([["hi"]], 3, False, False)),
        ({"prompt": ["a", "b"]}, ([["a"], ["b"]], 16, False, False)),
        ({"prompt": [1, 2]}, ([[[1, 2]]], 16, False, False)),
        ({"prompt": [[1], [2, 3]]}, ([[[1]], [[2, 3]]], 16, False, False)),
        ({"prompt": "hi", "max_tokens": None, "stream": True}, ([["hi"]], 16, True, False)),
        (
            {"prompt": "hi", "stream": True, "stream_options": {"include_usage": True}},
            ([["hi"]], 16, True, True),
        ),
        ({"prompt": "hi", "temperature": 0.7, "top_p": 1}, ([["hi"]], 16, False, False)),
    ],
)
def test_parse_completion_ok(body, expected):
    req = oa.parse_completion(body)
    assert (req.prompts, req.max_tokens, req.stream, req.include_usage) == expected
    assert not req.chat


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ("text", None),
        ({}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a", 1]}, "prompt"),
        ({"prompt": [1, -2]}, "prompt"),
        ({"prompt": [[1], []]}, "prompt"),
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 1.5}, "max_tokens"),
        ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
        ({"prompt": "x", "stream": 1}, "stream"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "x", "stream": True, "stream_options": []}, "stream_options"),
        ({"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}}, "include_usage"),
        ({"prompt": "x", "model": ["m"]}, "model"),
    ],
)
def test_parse_completion_rejects(body, param):
    with pytest.raises(oa.ApiError) as ei:
        oa.parse_completion(body)
    assert ei.value.status == 400 and ei.value.param == param
    assert ei.value.body()["error"]["type"] == "invalid_request_error"


def test_parse_chat_renders_template_and_limits():
    req = oa.parse_chat(
        {
            "messages": [
                {"role": "system", "content": "S"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ],
            "max_completion_tokens": 7,
            "max_tokens": 99,
        }
    )
    assert req.chat and req.max_tokens == 7
    assert req.prompts == [["<|system|> S\n<|user|> ab\n<|assistant|>"]]
    assert oa.parse_chat({"messages": [{"role": "user", "content": "x"}]}).max_tokens == 128


@pytest.mark.parametrize(
    "messages",
    [
        None,
        [],
        "x",
        [1],
        [{"role": "", "content": "x"}],
        [{"role": "u", "content": 3}],
        [{"role": "u", "content": [{"type": "image_url"}]}],
    ],
)
def test_parse_chat_rejects(messages):
    with pytest.raises(oa.ApiError) as ei:
        oa.parse_chat({"messages": messages})
    assert ei.value.param == "messages"


def test_chunks_shapes():
    req = oa.parse_chat({"messages": [{"role": "user", "content": "x"}], "stream": True})
    first = oa.chunk(req, "id", 1, "m", "a", 0, False)
    last = oa.chunk(req, "id", 1, "m", " b", 1, True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "a"}
    assert last["choices"][0]["delta"] == {"content": " b"}
    assert last["choices"][0]["finish_reason"] == "length"
    u = oa.usage_chunk(req, "id", 1, "m", 4, 2)
    assert u["choices"] == [] and u["usage"]["total_tokens"] == 6


def test_parse_chat_accepts_tools_tool_calls_and_parts():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}},
             {"type": "function", "function": {"name": "g"}}]  # fmt: skip
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]  # fmt: skip
    req = oa.parse_chat({"messages": msgs, "tools": tools, "n": 3, "response_format": {
        "type": "json_object"}, "logprobs": True, "seed": 4})  # fmt: skip
    assert req.n == 3 and req.tool is None and req.choices == 3
    assert oa.forced_tool({"tools": tools, "tool_choice": "required"}) == oa.Tool("f", "city")
    named = {"type": "function", "function": {"name": "g"}}
    assert oa.forced_tool({"tools": tools, "tool_choice": named}) == oa.Tool("g", "input")
    assert oa.forced_tool({"tools": tools, "tool_choice": "auto"}) is None
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}
    assert oa.forced_tool({"tools": tools, "tool_choice": allowed}) is None
    assert oa.forced_tool({"tool_choice": "required"}) is None


def test_tool_call_output_is_one_json_object():
    import json

    tool = oa.Tool("f", "city")
    pieces = oa.output_pieces(["a", "b", "c"], tool)
    assert len(pieces) == 3 and json.loads("".join(pieces)) == {"city": "a b c"}
    assert json.loads("".join(oa.output_pieces(["z"], tool))) == {"city": "z"}
    req = oa.GenRequest(True, None, [["x"]], 2, True, False, 1, tool)
    first = oa.chunk(req, "rid", 1, "m", pieces[0], 0, False)
    delta = first["choices"][0]["delta"]
    assert delta["role"] == "assistant" and delta["tool_calls"][0]["function"]["name"] == "f"
    last = oa.chunk(req, "rid", 1, "m", pieces[-1], 2, True, choice=1)
    assert last["choices"][0]["index"] == 1 and last["choices"][0]["finish_reason"] == "tool_calls"
    full = oa.full_response(req, "rid", 1, "m", ["".join(pieces)], 3, 3)
    msg = full["choices"][0]["message"]
    assert msg["content"] is None and msg["tool_calls"][0]["function"]["arguments"] == "".join(
        pieces
    )


def test_parse_embedding_and_vectors():
    import base64

    import numpy as np

    req = oa.parse_embedding({"input": ["a", "b"], "encoding_format": "base64", "dimensions": 8})
    assert req.prompts == [["a"], ["b"]] and req.base64 and req.dimensions == 8
    assert oa.parse_embedding({"input": [1, 2]}).dimensions == oa.EMBED_DIMENSIONS
    v = oa.embedding_vector([1, 2, 3], 8)
    assert np.allclose(v, oa.embedding_vector([1, 2, 3], 8)) and abs(np.linalg.norm(v) - 1) < 1e-6
    body = oa.embeddings_response(req, "id", 1, "m", [v, v], 2)
    assert np.allclose(np.frombuffer(base64.b64decode(body["data"][1]["embedding"]), "<f4"), v)
    assert body["usage"] == {"prompt_tokens": 2, "total_tokens": 2, "completion_tokens": 0}
    for bad, param in (({"input": ""}, "input"), ({"input": None}, "input"),
                       ({"input": "a", "dimensions": 0}, "dimensions"),
                       ({"input": "a", "dimensions": 10**6}, "dimensions"),
                       ({"input": "a", "encoding_format": "hex"}, "encoding_format")):  # fmt: skip
        with pytest.raises(oa.ApiError) as e:
            oa.parse_embedding(bad)
        assert e.value.param == param


# ---- faults -----------------------------------------------------------------------------


def test_fault_counts_down_then_turns_off():
    f = FaultState()
    assert f.take() is None
    f.configure({"mode": "error", "count": 2, "status": 429})
    a, b, c = f.take(), f.take(), f.take()
    assert a.mode == b.mode == "error" and a.status == 429
    assert c is None and f.state()["mode"] == "off"


def test_fault_defaults_and_off():
    f = FaultState()
    f.configure({"mode": "drop"})
    assert f.state() == {"mode": "drop", "count": 1, "status": 500, "after_tokens": 2}
    f.configure({"mode": "off"})
    assert f.take() is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"mode": "boom"},
        {"mode": "error", "count": -1},
        {"mode": "error", "status": 700},
        {"mode": "drop", "after_tokens": "2"},
        {"mode": "error", "extra": 1},
    ],
)
def test_fault_rejects_bad_bodies(body):
    with pytest.raises(oa.ApiError):
        FaultState().configure(body)


# ---- settings ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_sim_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("HEADROOM_SIM_"):
            monkeypatch.delenv(key)


def test_settings_defaults_and_env(monkeypatch):
    s = SimulatorSettings()
    assert (s.host, s.port_list(), s.name_list()) == ("127.0.0.1", [8001], ["pod-0"])
    assert s.model == DEFAULT_MODEL and s.profile == "h100-llama3-8b"
    monkeypatch.setenv("HEADROOM_SIM_PORTS", "9001, 9002")
    monkeypatch.setenv("HEADROOM_SIM_SEED", "7")
    s = SimulatorSettings()
    assert s.port_list() == [9001, 9002] and s.name_list() == ["pod-0", "pod-1"]
    assert s.seed == 7
    monkeypatch.setenv("HEADROOM_SIM_NAMES", "a,b")
    assert SimulatorSettings().name_list() == ["a", "b"]


@pytest.mark.parametrize(
    "kw",
    [
        {"ports": ""},
        {"ports": "80x"},
        {"ports": "70000"},
        {"profile": "nope"},
        {"ports": "1,2", "names": "a"},
    ],
)
def test_settings_reject_bad_values(kw):
    with pytest.raises(ValueError):
        SimulatorSettings(**kw)


# ---- metrics ----------------------------------------------------------------------------


def test_histogram_cumulative_buckets():
    h = Histogram([0.1, 1.0])
    h.observe_many([0.05, 0.1, 0.5, 3.0])
    assert h.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert h.total == pytest.approx(3.65)


def test_pod_metrics_render_has_vllm_names():
    e = Engine(PROFILES["h100-llama3-8b"], 0)
    m = PodMetrics(e, "m")
    m.record(StepOutcome(duration_s=0.01, ttft_s=[0.03], itl_s=[0.007], e2e_s=[0.2]))
    text = m.render().decode()
    for name in (
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1.0',
        "vllm:cache_config_info{",
        "vllm:lora_requests_info{",
    ):
        assert name in text
    assert "_created" not in text
