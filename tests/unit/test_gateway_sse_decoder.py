"""services/gateway/upstream.SseDecoder: the pod's SSE bytes in any split, line-end style
and grouping give the same events; [DONE], comments, errors and limits."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway import upstream
from services.gateway.upstream import SseDecoder, StreamBroken

CHUNKS = [{"id": "c1", "choices": [{"index": 0, "text": f"t{i}"}]} for i in range(4)]


def _stream(eol: bytes = b"\n") -> bytes:
    body = b"".join(b"data: " + orjson.dumps(c) + eol + eol for c in CHUNKS)
    return b": comment" + eol + eol + body + b"data: [DONE]" + eol + eol


def _decode_all(dec: SseDecoder, pieces: list[bytes]) -> list[dict]:
    out = []
    for p in pieces:
        out += [chunk for _, chunk in dec.feed(p)]
    return out


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_one_piece(eol):
    dec = SseDecoder()
    assert _decode_all(dec, [_stream(eol)]) == CHUNKS
    assert dec.done


@given(st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(1, 400), max_size=12))
def test_any_split_gives_the_same_events(eol, cuts):
    data = _stream(eol)
    points = sorted({c % len(data) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]
    dec = SseDecoder()
    assert _decode_all(dec, pieces) == CHUNKS
    assert dec.done


def test_raw_payload_and_multi_line_data():
    dec = SseDecoder()
    (ev,) = dec.feed(b'data: {"a":\ndata: 1}\n\n')
    assert ev == (b'{"a":\n1}', {"a": 1})
    (ev,) = dec.feed(b'event: x\ndata:{"b":2}\nid: 7\n\n')
    assert ev == (b'{"b":2}', {"b": 2})


def test_nothing_after_done():
    dec = SseDecoder()
    events = dec.feed(b'data: {"a":1}\n\ndata: [DONE]\n\ndata: {"b":2}\n\n')
    assert [c for _, c in events] == [{"a": 1}] and dec.done
    assert dec.feed(b'data: {"c":3}\n\n') == []


def test_a_bad_event_breaks_after_the_events_before_it():
    dec = SseDecoder()
    events = dec.feed(b'data: {"a":1}\n\ndata: not json\n\ndata: {"b":2}\n\n')
    assert [c for _, c in events] == [{"a": 1}]
    with pytest.raises(StreamBroken) as e:
        dec.feed(b"")
    assert e.value.reason == "bad_chunk"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(b"[1, 2]", "bad_chunk"), (b'{"error": {"message": "overloaded"}}', "error_event")],
)
def test_error_and_non_object_events(payload, reason):
    with pytest.raises(StreamBroken) as e:
        SseDecoder().feed(b"data: " + payload + b"\n\n")
    assert e.value.reason == reason


def test_an_endless_event_is_refused(monkeypatch):
    monkeypatch.setattr(upstream, "MAX_EVENT_BYTES", 100)
    dec = SseDecoder()
    assert dec.feed(b"data: " + b"x" * 90) == []
    with pytest.raises(StreamBroken) as e:
        dec.feed(b"x" * 20)
    assert e.value.reason == "bad_chunk"


def test_one_event_per_piece():  # the usual arrival (a fast path)
    dec = SseDecoder()
    for c in CHUNKS:
        assert dec.feed(b"data: " + orjson.dumps(c) + b"\n\n") == [(orjson.dumps(c), c)]
    assert dec.feed(b"data:  [DONE]\n\n") == [] and dec.done
    dec = SseDecoder()
    with pytest.raises(StreamBroken):
        dec.feed(b"data: \n\n")
