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
