"""``python -m services.collector`` as a real process: env configuration, snapshots on NATS,
clean exit on SIGTERM (also while NATS is unreachable at start-up)."""

from __future__ import annotations

import asyncio

from shared.bus import connect_nats
from shared.embedded import free_port
from shared.schemas import PodSnapshot
from tests.integration.service_process import spawn, terminate
from tests.integration.test_collector_scraper import FakePod
from tests.unit.test_collector_parsers import vllm_page


async def _spawn(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await spawn("services.collector", env)


async def _terminate(proc: asyncio.subprocess.Process) -> tuple[int, bytes]:
    return await terminate(proc, "collector")


async def test_process_publishes_and_stops_on_sigterm(isolated):
    pod = await FakePod().start()
    pod.page = vllm_page(waiting=6)
    nc = await connect_nats(isolated["nats_url"], "test-collector-process")
    got: asyncio.Queue[PodSnapshot] = asyncio.Queue()

    async def cb(msg) -> None:
        await got.put(PodSnapshot.decode(msg.data))

    await nc.subscribe(isolated["names"].pod_snapshots("pp"), cb=cb)
    await nc.flush()
    proc = await _spawn({
        "HEADROOM_NATS_URL": isolated["nats_url"],
        "HEADROOM_NAMESPACE": isolated["namespace"],
        "HEADROOM_POOL": "pp",
        "HEADROOM_COLLECTOR_PODS": f"a={pod.url}",
        "HEADROOM_COLLECTOR_ADMIN_PORT": str(free_port()),
    })  # fmt: skip
    try:
        snap = await asyncio.wait_for(got.get(), 15)
        (rec,) = snap.pods
        assert (rec.name, rec.ready, rec.waiting) == ("a", True, 6.0)
    finally:
        rc, err = await _terminate(proc)
        await nc.close()
        await pod.stop()
    assert rc == 0, err.decode()[-2000:]


async def test_sigterm_while_waiting_for_nats():
    proc = await _spawn({
        "HEADROOM_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "HEADROOM_COLLECTOR_ADMIN_PORT": str(free_port()),
    })  # fmt: skip
    # signal handlers are installed before the NATS connection is attempted
    seen = b""
    async with asyncio.timeout(15):
        while b"connecting to NATS" not in seen:
            line = await proc.stderr.readline()
            assert line, "collector exited early"
            seen += line
    rc, err = await _terminate(proc)
    assert rc == 0, err.decode()[-2000:]
