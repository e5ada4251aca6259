"""A request through the gateway leaves no garbage in reference cycles: such garbage is freed
only by a full collection, which a busy gateway runs rarely (once in a 300 s soak), so it
piles up as RSS growth per request (docs/benchmarks.md "Soak (issue 16)")."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from tests.integration.gateway_harness import MODEL, gateway_stack

pytestmark = pytest.mark.timeout(60)
CMPL = "/v1/completions"


async def test_requests_leave_no_cyclic_garbage_in_the_gateway(isolated):
    async with gateway_stack(isolated, profile="headroom") as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "hello there " * 50, "max_tokens": 4}
        for stream in (True, False):  # warm: imports, caches, first connections
            await (st.stream if stream else st.post)(CMPL, {**body, "stream": stream})
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage
        try:
            for i in range(20):
                stream = i % 2 == 0
                status, _, _ = await (st.stream if stream else st.post)(
                    CMPL, {**body, "stream": stream}
                )
                assert status == 200
            gc.collect()
            ours = Counter(
                f"{type(o).__module__}.{type(o).__qualname__}"
                for o in gc.garbage
                if type(o).__module__.startswith(("services.", "uvicorn.", "starlette."))
            )
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert not ours, ours


async def test_queued_requests_leave_no_cyclic_garbage_either(isolated, tmp_path):
    """The same through the flow-control queue: requests that wait, leave for room or by
    ``maxWaitS`` (the soak's path: 1,000 streams, most released by their wait bound)."""
    import asyncio

    from tests.integration.gateway_harness import flow_profiles

    path = flow_profiles(tmp_path, maxWaitS=0.05)
    async with gateway_stack(isolated, n_pods=1, profiles_path=path) as st:
        await st.snapshot(loads={"pod-0": {}})
        body = {"model": MODEL, "prompt": "hello there " * 50, "max_tokens": 4, "stream": True}

        async def burst() -> None:
            results = await asyncio.gather(*(st.stream(CMPL, body) for _ in range(8)))
            assert [r[0] for r in results] == [200] * 8

        await burst()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                await burst()
            gc.collect()
            ours = Counter(
                f"{type(o).__module__}.{type(o).__qualname__}"
                for o in gc.garbage
                if type(o).__module__.startswith(("services.", "uvicorn.", "starlette."))
            )
            everything = Counter(type(o).__qualname__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        flow = st.gw.flows["headroom"]
        assert flow.released["max_wait"] + flow.released["room"] >= 8  # the queue was used
        assert not ours, (ours, everything.most_common(12))
