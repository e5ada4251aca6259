"""Model files (export/import format) and the `headroom model list` table, without Redis."""

from __future__ import annotations

import base64

import orjson
import pytest

from services.model_cli import build_parser, describe_metrics, format_list
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared.model_store import decode_model_file, encode_model_file, imported_meta
from shared.schemas import SchemaError
from tests.unit.trainer_synth import synthetic_samples

CFG = FitConfig(rounds=5, objective="both")


@pytest.fixture(scope="module")
def version():
    result = run_cycle(TrainingData.from_samples(synthetic_samples(200)), None, CFG)
    return build_meta("v3", 1_700_000_000.0, result, CFG)


def test_model_file_round_trip(version):
    meta, blobs = version
    data = encode_model_file(meta, blobs)
    assert orjson.loads(data)["format"] == "headroom-model"
    meta2, blobs2 = decode_model_file(data)
    assert meta2 == meta and blobs2 == blobs


def _tamper(data: bytes, fn) -> bytes:
    doc = orjson.loads(data)
    fn(doc)
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d.update(format="pickle"), "bad_format"),
        (lambda d: d.update(v=9), "schema_version"),
        (lambda d: d["blobs"].update(ttft=base64.b64encode(b"garbage").decode()), "checksum"),
        (lambda d: d["blobs"].update(ttft="%%%"), "bad_format"),
        (lambda d: d["blobs"].pop("tpot"), "missing_blob"),
        (lambda d: d["meta"].update(feature_schema=99), "feature_schema"),
    ],
)
def test_bad_model_files_are_refused(version, mutate, reason):
    data = _tamper(encode_model_file(*version), mutate)
    with pytest.raises(SchemaError) as e:
        decode_model_file(data)
    assert e.value.reason == reason


def test_not_json_is_refused():
    with pytest.raises(SchemaError):
        decode_model_file(b"\x00\x01")


def test_imported_meta_gets_a_local_identity(version):
    meta, _ = version
    new = imported_meta(meta, "v12", 5.0, "/tmp/m.json")
    assert (new.version, new.created_at, new.source, new.trained_until) == (
        "v12",
        5.0,
        "import",
        None,
    )
    assert new.params["imported_from"] == {"version": "v3", "created_at": meta.created_at,
                                           "origin": "/tmp/m.json"}  # fmt: skip
    assert new.targets == meta.targets and new.metrics == meta.metrics


def test_list_table(version):
    meta, _ = version
    text = format_list([("v3", meta, None), ("v2", None, "checksum: bad")], current="v3")
    lines = text.splitlines()
    assert lines[1].startswith("* v3") and "2023-11-14 22:13:20" in lines[1]
    assert "ttft MAPE" in lines[1] and "ttft_p90" in lines[1] and "cov" in lines[1]
    assert lines[2].startswith("  v2") and "unreadable" in lines[2]
    assert "no model versions" in format_list([], None)
    assert describe_metrics(meta).count("|") == 3


def test_parser():
    p = build_parser()
    assert p.parse_args(["list", "--json"]).json
    assert p.parse_args(["--namespace", "x", "rollback", "v2"]).version == "v2"
    assert p.parse_args(["export", "-o", "f.json"]).version is None
    with pytest.raises(SystemExit):
        p.parse_args(["rollback"])
