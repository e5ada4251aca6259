"""shared/wire.py: round trips, and every malformed message is a SchemaError (never another
exception), including arbitrary mutations of valid messages."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import wire
from shared.features import FEATURE_SCHEMA_VERSION, FEATURES
from shared.schemas import PredictRequest, SchemaError

N = len(FEATURES)
ROWS = np.arange(5 * N, dtype=np.float64).reshape(5, N) / 7.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_request_round_trip(dtype):
    data = wire.encode_request(ROWS, [0, 2, 2], dtype=dtype)
    values_at = len(data) - ROWS.size * np.dtype(dtype).itemsize
    assert wire.is_wire(data) and values_at % 8 == 0  # values are 8-byte aligned
    req = wire.decode_request(data)
    assert req.rows.dtype == np.dtype(dtype) and req.rows.shape == (5, N)
    assert np.array_equal(req.rows, ROWS.astype(dtype))
    assert req.segments == (0, 2, 2)
    assert req.feature_schema == FEATURE_SCHEMA_VERSION


def test_single_caller_and_empty_requests():
    assert wire.decode_request(wire.encode_request(ROWS)).segments == (0,)
    empty = wire.decode_request(wire.encode_request(np.zeros((0, N))))
    assert empty.rows.shape == (0, N)


def test_reply_round_trip():
    data = wire.encode_reply(
        "ok", [1.5, 2.0], [3.0, 4.25], model_version="v7", replica="r-1", error=None
    )
    r = wire.decode_reply(data)
    assert (r.status, r.model_version, r.replica, r.error) == ("ok", "v7", "r-1", None)
    assert r.ttft_ms.tolist() == [1.5, 2.0] and r.tpot_ms.tolist() == [3.0, 4.25]
    nr = wire.decode_reply(wire.encode_reply("not_ready", replica="r"))
    assert nr.status == "not_ready" and len(nr.ttft_ms) == 0 and nr.model_version is None
    err = wire.decode_reply(wire.encode_reply("error", error="bad thing ü"))
    assert err.status == "error" and err.error == "bad thing ü"


def test_request_rows_reads_both_encodings():
    as_json = PredictRequest(rows=ROWS.tolist()).encode()
    assert wire.request_rows(as_json) == ROWS.tolist()
    assert wire.request_rows(wire.encode_request(ROWS, dtype=np.float64)) == ROWS.tolist()


def _patch(data: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


GOOD = wire.encode_request(ROWS, [0, 3])
GOOD_REPLY = wire.encode_reply("ok", [1.0], [2.0], model_version="v1")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (GOOD[:20], "truncated"),
        (b"XXXX" + GOOD[4:], "bad_magic"),
        (_patch(GOOD, 4, "<B", 9), "wire_version"),
        (_patch(GOOD, 5, "<B", 2), "bad_kind"),
        (_patch(GOOD, 6, "<B", 7), "bad_dtype"),
        (_patch(GOOD, 8, "<H", 99), "feature_schema"),
        (_patch(GOOD, 10, "<H", N - 1), "bad_length"),
        (_patch(GOOD, 12, "<I", 6), "bad_length"),
        (_patch(GOOD, 12, "<I", 2**31), "too_large"),
        (GOOD[:-1], "bad_length"),
        (GOOD + b"\0" * 8, "bad_length"),
        (_patch(GOOD, 24, "<I", 1), "bad_segments"),  # first offset must be 0
        (_patch(GOOD, 28, "<I", 99), "bad_segments"),  # beyond n_rows
        (wire.encode_request(np.full((1, N), np.nan)), "bad_value"),
        (wire.encode_request(np.full((1, N), np.inf), dtype=np.float64), "bad_value"),
        (GOOD_REPLY, "bad_kind"),
    ],
)
def test_malformed_requests(data, reason):
    with pytest.raises(SchemaError) as e:
        wire.decode_request(data)
    assert e.value.reason == reason


def test_wrong_column_count_is_a_bad_row():
    data = wire._encode(
        wire.KIND_REQUEST, np.zeros((2, 3), np.float32), feature_schema=FEATURE_SCHEMA_VERSION
    )
    with pytest.raises(SchemaError) as e:
        wire.decode_request(data)
    assert e.value.reason == "bad_row"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (GOOD, "bad_kind"),
        (_patch(GOOD_REPLY, 7, "<B", 9), "bad_value"),
        (_patch(GOOD_REPLY, 20, "<I", 100), "bad_length"),
        (wire._encode(wire.KIND_REPLY, np.zeros((1, 3), np.float32)), "bad_row"),
        (
            wire._encode(wire.KIND_REPLY, np.zeros((1, 2), np.float32), text=b"\x05\x00ab"),
            "bad_text",
        ),
        (
            wire._encode(wire.KIND_REPLY, np.zeros((0, 2), np.float32), text=b"\x02\x00\xff\xfe"),
            "bad_text",
        ),
    ],
)
def test_malformed_replies(data, reason):
    with pytest.raises(SchemaError) as e:
        wire.decode_reply(data)
    assert e.value.reason == reason


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_raise_anything_but_schema_error(data):
    for decode in (wire.decode_request, wire.decode_reply):
        try:
            decode(wire.MAGIC + data)
        except SchemaError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 255), st.integers(0, len(GOOD)))
def test_mutated_requests_decode_or_raise_schema_error(pos, byte, cut):
    b = bytearray(GOOD)
    b[pos] = byte
    for data in (bytes(b), bytes(b[:cut])):
        try:
            req = wire.decode_request(data)
        except SchemaError:
            continue
        assert req.rows.shape[1] == N and np.isfinite(req.rows).all()
