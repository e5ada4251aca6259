"""`headroom bench access` runs end to end (tiny counts) against the real Redis."""

from __future__ import annotations

import argparse

from bench.bench_access import measure


async def test_bench_access_measures_every_case(infra):
    args = argparse.Namespace(keys=50, n=200, repeat=2, redis_n=20, redis_url=infra["redis_url"])
    r = await measure(args)
    for k in ("before_keys_us", "no_key_file_us", "key_us", "limited_key_wall_us",
              "limited_key_cpu_us", "redis_get_wall_us", "redis_get_cpu_us"):  # fmt: skip
        assert r[k] > 0, k
    assert r["redis_errors"] == 0 and r["keys_in_file"] == 50
