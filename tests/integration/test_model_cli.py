"""`headroom model ...` against a real Redis (and NATS) holding published versions."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from services import model_cli
from services.trainer.service import TrainerService
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import current_version, delete_namespace, read_history
from shared.subjects import Names
from tests.integration.trainer_harness import (
    eventually,
    make_samples,
    publish_samples,
    trainer_settings,
)


async def run(isolated: dict, *argv: str, namespace: str | None = None) -> int:
    flags = ["--redis-url", isolated["redis_url"], "--nats-url", isolated["nats_url"],
             "--namespace", namespace or isolated["namespace"]]  # fmt: skip
    return await asyncio.to_thread(model_cli.main, [*flags, *argv])


@pytest.fixture
async def stack(isolated):
    """A running trainer that published v1 and v2 (both objectives) from real samples."""
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    settings = trainer_settings(isolated, interval_s=60.0, objective="both", promotion_margin=10.0)
    svc = TrainerService(settings)
    await svc.start()
    await publish_samples(js, names, make_samples(80, prefix="a"))
    await eventually(lambda: len(svc.window) == 80)
    assert await svc.fit_now() == "v1"
    await publish_samples(js, names, make_samples(60, prefix="b", seed=2))
    await eventually(lambda: len(svc.window) == 140)
    assert await svc.fit_now() == "v2"
    yield svc
    await svc.stop()
    await nc.close()


async def test_list_show_history(isolated, stack, capsys):
    assert await run(isolated, "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["version", "created"]
    assert out[1].startswith("* v2") and out[2].startswith("  v1")
    assert "ttft MAPE" in out[1] and "ttft_p90" in out[1] and "cov" in out[1]
    assert " 140 " in out[1] and "trainer" in out[1]

    assert await run(isolated, "list", "--json") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["current"] == "v2" and [v["version"] for v in doc["versions"]] == ["v2", "v1"]
    meta = doc["versions"][0]["meta"]
    assert meta["metrics"]["ttft_p90"]["coverage"] is not None
    assert meta["evaluation"]["compared_with"] == "v1"

    assert await run(isolated, "show", "v1") == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown["version"] == "v1" and shown["current"] is False
    assert shown["bucket_coverage"]["buckets_filled"] > 0

    assert await run(isolated, "history") == 0
    lines = capsys.readouterr().out.splitlines()
    assert "promote" in lines[0] and "v2" in lines[0]


async def test_rollback_export_import_and_errors(isolated, stack, tmp_path, capsys):
    names: Names = isolated["names"]
    r = connect_redis(isolated["redis_url"])
    try:
        assert await run(isolated, "rollback", "v1") == 0
        assert "current model: v1 (was v2); announced" in capsys.readouterr().out
        assert await current_version(r, names) == "v1"
        assert (await read_history(r, names))[0]["action"] == "rollback"
        assert await run(isolated, "rollback", "v9") == 1
        assert "cannot roll back to v9" in capsys.readouterr().err

        path = tmp_path / "m.json"
        assert await run(isolated, "export", "v2", "-o", str(path)) == 0
        capsys.readouterr()
        other = Names(f"{names.namespace}-x")
        try:
            assert await run(isolated, "import", str(path), namespace=other.namespace) == 0
            assert "as v1 (current, announced)" in capsys.readouterr().out
            assert await run(isolated, "show", namespace=other.namespace) == 0
            shown = orjson.loads(capsys.readouterr().out)
            assert (
                shown["source"] == "import" and shown["params"]["imported_from"]["version"] == "v2"
            )
            path.write_bytes(path.read_bytes().replace(b'"ttft_p90"', b'"ttft_p95"', 1))
            assert await run(isolated, "import", str(path), namespace=other.namespace) == 1
            assert "refused" in capsys.readouterr().err
        finally:
            await delete_namespace(r, other)
        assert await run(isolated, "import", str(tmp_path / "missing.json")) == 1
        assert await run(isolated, "--redis-url", "redis://127.0.0.1:1/0", "list") == 2
    finally:
        await r.aclose()


async def test_flush_asks_the_running_trainer(isolated, stack, capsys):
    assert await run(isolated, "flush") == 0
    assert orjson.loads(capsys.readouterr().out)["flushed"] == 140
    assert len(stack.window) == 0
    await stack.stop()
    assert await run(isolated, "flush", "--timeout", "0.5") == 1
    assert "no trainer answered" in capsys.readouterr().err
