"""The live gateway's prefix index knows where a prompt is going from the moment it is sent,
not from the pod's first event (session 30): a second request for the same long prompt, sent
while the first is still prefilling on a real simulator pod, follows it there."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.gateway_harness import MODEL, gateway_stack, wait_for

pytestmark = pytest.mark.timeout(90)

CMPL = "/v1/completions"


async def test_a_request_for_a_prefix_still_prefilling_follows_it(isolated):
    # prefix-aware keeps the pods with the longest indexed prefix and picks among them at
    # random: had the index learned the prompt only at the first event (the old timing), the
    # second request of each round would have gone to any of the 4 pods (chance 1/4 to follow,
    # 1/64 over three rounds)
    async with gateway_stack(isolated, n_pods=4, profile="prefix-aware") as st:
        await st.snapshot()
        for round_ in range(3):
            prompt = f"round {round_} document " + "lorem ipsum dolor sit amet " * 900
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "stream": True}
            first = asyncio.create_task(st.stream(CMPL, body))
            # sent (in flight on its pod) and still prefilling: no first token yet
            await wait_for(lambda: st.gw.view.total_in_flight() == 1, what="first dispatched")
            sent_at = time.monotonic()
            status, h2, _ = await st.stream(CMPL, body)
            status1, h1, _ = await first
            assert status == status1 == 200
            assert h2["x-headroom-pod"] == h1["x-headroom-pod"], round_
            assert time.monotonic() - sent_at < 30
            await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="drained")
