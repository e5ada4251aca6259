"""The compact binary wire format of the prediction hot path (gateway <-> predictor).

One message = a fixed 24-byte header, a segment table, a text block, padding to a multiple
of 8 bytes, then a row-major numpy value matrix. All integers are little-endian.

====== ==== ==================================================================
offset size field
====== ==== ==================================================================
0      4    magic ``b"HRWF"``
4      1    version (1)
5      1    kind: 1 = predict request, 2 = predict reply
6      1    dtype of the values: 1 = float32, 2 = float64 (little-endian IEEE 754)
7      1    status (replies: 0 ok, 1 not_ready, 2 error; requests: 0)
8      2    feature schema (u16; requests: shared.features.FEATURE_SCHEMA_VERSION)
10     2    n_cols (u16; requests: len(FEATURES); replies: 2 = ttft_ms, tpot_ms)
12     4    n_rows (u32)
16     4    n_segments (u32): entries of the segment table (0 = one caller)
20     4    text_len (u32): bytes of the text block
24     4*S  segment table: u32 start row of each caller's rows, first 0, non-decreasing,
            each <= n_rows (requests coalesced from several callers; replies: none)
..     T    text block: UTF-8 strings, each a u16 length then bytes; replies carry three
            (model_version, replica, error; empty = none), requests none
..     pad  zero bytes up to the next multiple of 8 (values are 8-byte aligned)
..     V    values: n_rows x n_cols numbers of ``dtype``, row-major; nothing after them
====== ==== ==================================================================

Receivers validate everything (magic, version, kind, dtype, status, schema, column count,
exact total length, segment table, UTF-8, finite values) and raise
:class:`shared.schemas.SchemaError` with a short reason; a predictor answers a malformed
request with an error reply and never crashes. ``docs/wire-format.md`` has the same table.
The JSON messages of shared/schemas.py stay accepted by the predictor (first byte ``{``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.features import FEATURE_SCHEMA_VERSION, FEATURES
from shared.schemas import (
    PREDICT_ERROR,
    PREDICT_NOT_READY,
    PREDICT_OK,
    PredictRequest,
    SchemaError,
)

MAGIC = b"HRWF"
VERSION = 1
KIND_REQUEST = 1
KIND_REPLY = 2
REPLY_COLS = 2  # ttft_ms, tpot_ms

_HEADER = struct.Struct("<4sBBBBHHIII")
HEADER_SIZE = _HEADER.size  # 24
_DTYPES: dict[int, np.dtype] = {1: np.dtype("<f4"), 2: np.dtype("<f8")}
_DTYPE_CODES = {np.dtype("<f4"): 1, np.dtype("<f8"): 2}
_STATUS = {PREDICT_OK: 0, PREDICT_NOT_READY: 1, PREDICT_ERROR: 2}
_STATUS_NAMES = {v: k for k, v in _STATUS.items()}
MAX_ROWS = 1 << 24  # 16M rows: far above any batch, below any u32 overflow of the sizes


@dataclass(frozen=True, slots=True)
class WireRequest:
    rows: np.ndarray  # n_rows x n_cols, float32 or float64 (read-only view of the message)
    segments: tuple[int, ...]  # start row of each caller; (0,) for a single caller
    feature_schema: int = FEATURE_SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class WireReply:
    status: str
    ttft_ms: np.ndarray  # float, one per row (empty unless ok)
    tpot_ms: np.ndarray
    model_version: str | None = None
    replica: str | None = None
    error: str | None = None


def is_wire(data: bytes) -> bool:
    """True if ``data`` starts with the binary magic (else it may be a JSON message)."""
    return data[:4] == MAGIC


def _pad(n: int) -> int:
    return (-n) % 8


def _texts(*items: str | None) -> bytes:
    out = bytearray()
    for s in items:
        b = (s or "").encode()[:65535]
        out += struct.pack("<H", len(b)) + b
    return bytes(out)


def _encode(
    kind: int,
    values: np.ndarray,
    *,
    status: int = 0,
    feature_schema: int = 0,
    segments: Sequence[int] = (),
    text: bytes = b"",
) -> bytes:
    code = _DTYPE_CODES.get(values.dtype.newbyteorder("<"))
    if code is None or values.ndim != 2:
        raise ValueError("values must be a 2-d float32 or float64 array")
    n_rows, n_cols = values.shape
    head = _HEADER.pack(
        MAGIC, VERSION, kind, code, status, feature_schema, n_cols, n_rows, len(segments), len(text)
    )
    seg = np.asarray(segments, dtype="<u4").tobytes()
    meta = head + seg + text
    body = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()
    return b"".join((meta, b"\0" * _pad(len(meta)), body))


def encode_request(
    rows: np.ndarray,
    segments: Sequence[int] | None = None,
    *,
    dtype: type = np.float32,
    feature_schema: int = FEATURE_SCHEMA_VERSION,
) -> bytes:
    """Rows (n x len(FEATURES)) of one caller, or of several whose first rows are at
    ``segments`` (offsets, first 0). float32 is exact for prediction (XGBoost evaluates
    float32 features)."""
    arr = np.asarray(rows, dtype=dtype)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, len(FEATURES))
    return _encode(KIND_REQUEST, arr, feature_schema=feature_schema, segments=tuple(segments or ()))


def encode_reply(
    status: str,
    ttft_ms: np.ndarray | Sequence[float] = (),
    tpot_ms: np.ndarray | Sequence[float] = (),
    *,
    model_version: str | None = None,
    replica: str | None = None,
    error: str | None = None,
    dtype: type = np.float32,
) -> bytes:
    """A reply; predictions are float32 by default (XGBoost predicts float32, so lossless)."""
    values = np.empty((len(ttft_ms), REPLY_COLS), dtype=dtype)
    if len(ttft_ms) != len(tpot_ms):
        raise ValueError("ttft_ms and tpot_ms lengths differ")
    if len(ttft_ms):
        values[:, 0] = ttft_ms
        values[:, 1] = tpot_ms
    return _encode(
        KIND_REPLY, values, status=_STATUS[status], text=_texts(model_version, replica, error)
    )


def _header(data: bytes, kind: int) -> tuple[int, ...]:
    if len(data) < HEADER_SIZE:
        raise SchemaError(
            f"wire: message of {len(data)} bytes is shorter than a header", "truncated"
        )
    magic, version, k, dtype, status, schema, n_cols, n_rows, n_seg, text_len = _HEADER.unpack_from(
        data
    )
    if magic != MAGIC:
        raise SchemaError("wire: bad magic", "bad_magic")
    if version != VERSION:
        raise SchemaError(
            f"wire: unsupported version {version} (expected {VERSION})", "wire_version"
        )
    if k != kind:
        raise SchemaError(f"wire: message kind {k}, expected {kind}", "bad_kind")
    if dtype not in _DTYPES:
        raise SchemaError(f"wire: unknown dtype code {dtype}", "bad_dtype")
    if n_rows > MAX_ROWS or n_seg > MAX_ROWS:
        raise SchemaError(f"wire: {n_rows} rows / {n_seg} segments is too many", "too_large")
    meta = HEADER_SIZE + 4 * n_seg + text_len
    start = meta + _pad(meta)
    expected = start + n_rows * n_cols * _DTYPES[dtype].itemsize
    if len(data) != expected:
        raise SchemaError(
            f"wire: message is {len(data)} bytes, its header implies {expected}", "bad_length"
        )
    return status, schema, n_cols, n_rows, n_seg, text_len, dtype, start


def _values(data: bytes, dtype: int, start: int, n_rows: int, n_cols: int) -> np.ndarray:
    arr = np.frombuffer(data, dtype=_DTYPES[dtype], count=n_rows * n_cols, offset=start)
    arr = arr.reshape(n_rows, n_cols)
    if arr.size and not np.isfinite(arr).all():
        raise SchemaError("wire: values must be finite", "bad_value")
    return arr


def decode_request(data: bytes) -> WireRequest:
    """Validate and decode a binary request. Raises SchemaError."""
    _, schema, n_cols, n_rows, n_seg, text_len, dtype, start = _header(data, KIND_REQUEST)
    if schema != FEATURE_SCHEMA_VERSION:
        raise SchemaError(
            f"wire: feature schema {schema} not supported (expected {FEATURE_SCHEMA_VERSION})",
            "feature_schema",
        )
    if n_cols != len(FEATURES):
        raise SchemaError(f"wire: rows have {n_cols} columns, expected {len(FEATURES)}", "bad_row")
    if text_len:
        raise SchemaError("wire: a request carries no text", "bad_text")
    segments: tuple[int, ...] = (0,)
    if n_seg:
        seg = np.frombuffer(data, dtype="<u4", count=n_seg, offset=HEADER_SIZE)
        if (
            seg[0] != 0
            or (n_seg > 1 and (np.diff(seg.astype(np.int64)) < 0).any())
            or (seg[-1] > n_rows)
        ):
            raise SchemaError("wire: bad segment table", "bad_segments")
        segments = tuple(seg.tolist())
    return WireRequest(_values(data, dtype, start, n_rows, n_cols), segments, schema)


def decode_reply(data: bytes) -> WireReply:
    """Validate and decode a binary reply. Raises SchemaError."""
    status, _, n_cols, n_rows, n_seg, text_len, dtype, start = _header(data, KIND_REPLY)
    if status not in _STATUS_NAMES:
        raise SchemaError(f"wire: unknown status code {status}", "bad_value")
    if n_cols != REPLY_COLS or n_seg:
        raise SchemaError("wire: a reply has 2 columns and no segments", "bad_row")
    texts: list[str | None] = []
    pos, end = HEADER_SIZE, HEADER_SIZE + text_len
    try:
        for _ in range(3):
            (n,) = struct.unpack_from("<H", data, pos)
            if pos + 2 + n > end:
                raise SchemaError("wire: text block overruns", "bad_text")
            texts.append(data[pos + 2 : pos + 2 + n].decode() or None)
            pos += 2 + n
    except (struct.error, UnicodeDecodeError) as e:
        raise SchemaError(f"wire: bad text block: {e}", "bad_text") from e
    if pos != end:
        raise SchemaError("wire: text block length mismatch", "bad_text")
    values = _values(data, dtype, start, n_rows, n_cols)
    return WireReply(
        _STATUS_NAMES[status], values[:, 0], values[:, 1], texts[0], texts[1], texts[2]
    )


def request_rows(data: bytes) -> list[list[float]]:
    """The feature rows of a request in either encoding (binary or the JSON PredictRequest),
    as Python lists: for test responders and debugging tools. Raises SchemaError."""
    if is_wire(data):
        return decode_request(data).rows.astype(np.float64).tolist()
    return PredictRequest.decode(data).rows
