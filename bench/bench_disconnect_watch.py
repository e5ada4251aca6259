"""What watching for a client disconnect costs per request, on uvloop, against uvicorn's
request cycle (no sockets: the cycle's transport is a no-op):

- ``task``: the streaming path's watch before issue 14: a task waiting in ``receive()`` for
  ``http.disconnect`` (created, stepped once, cancelled, stepped once more);
- ``hook``: services/gateway/lifecycle.py's RequestLife with asgi.on_disconnect, which swaps
  the cycle's ``message_event`` for a hook uvicorn's ``connection_lost`` sets (no task).

    python -m bench.bench_disconnect_watch [--n 20000] [--repeat 7] [--json OUT]

Process CPU time per request, the loop's own two yields per request subtracted (an empty
loop of the same shape); medians over ``--repeat`` interleaved runs. Prints JSON and a
summary."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import time

from prometheus_client import CollectorRegistry, Counter
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from services.gateway.lifecycle import RequestLife
from shared.runner import loop_factory


class _Transport(asyncio.Transport):
    def write(self, data) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle() -> RequestResponseCycle:
    t = _Transport()
    scope = {"type": "http", "method": "POST", "http_version": "1.1", "path": "/v1/completions",
             "headers": [], "client": ("127.0.0.1", 1), "query_string": b""}  # fmt: skip
    log = logging.getLogger(__name__)
    c = RequestResponseCycle(
        scope, t, FlowControl(t), log, log, False, [], asyncio.Event(), False, True, lambda: None
    )  # type: ignore[arg-type]  # fmt: skip
    c.more_body = False  # the body has been read
    return c


async def _receive_until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _task(n: int) -> float:
    cycles = [_cycle() for _ in range(n)]
    t0 = time.process_time()
    for c in cycles:
        watch = asyncio.ensure_future(_receive_until_disconnect(c.receive))
        cb = _noop
        watch.add_done_callback(cb)
        await asyncio.sleep(0)  # its first step: waits in receive()
        watch.remove_done_callback(cb)
        watch.cancel()
        await asyncio.sleep(0)  # the cancellation's step
    return (time.process_time() - t0) / n


async def _hook(n: int) -> float:
    counter = Counter("disconnects", "x", ["stage"], registry=CollectorRegistry())
    cycles = [_cycle() for _ in range(n)]
    t0 = time.process_time()
    for c in cycles:
        life = RequestLife(counter, "id", "/v1/completions")
        life.watch(c.send, c.receive)
        await asyncio.sleep(0)
        life.finish()
        await asyncio.sleep(0)
    return (time.process_time() - t0) / n


async def _empty(n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    return (time.process_time() - t0) / n


def _noop(_: object) -> None:
    pass


async def measure(n: int, repeat: int) -> dict:
    runs: dict[str, list[float]] = {"task": [], "hook": [], "empty": []}
    for _ in range(repeat):
        for name, f in (("task", _task), ("hook", _hook), ("empty", _empty)):
            runs[name].append(await f(n) * 1e6)
    base = statistics.median(runs["empty"])
    out = {
        name: {
            "us_per_request": round(statistics.median(runs[name]) - base, 2),
            "runs_us": [round(x - base, 2) for x in runs[name]],
        }
        for name in ("task", "hook")
    }
    return {"n": n, "repeat": repeat, "empty_loop_us": round(base, 2), **out}


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_disconnect_watch")
    p.add_argument("--n", type=int, default=20_000, help="requests per run")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", dest="out", help="write the result here")
    args = p.parse_args(argv)
    n, repeat = min(args.n, 200_000), min(args.repeat, 50)  # bounded
    with asyncio.Runner(loop_factory=loop_factory(True)) as runner:
        result = runner.run(measure(n, repeat))
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    print(
        f"disconnect watch per request: task {result['task']['us_per_request']} us, "
        f"hook {result['hook']['us_per_request']} us (CPU, medians of {repeat} runs of {n})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
