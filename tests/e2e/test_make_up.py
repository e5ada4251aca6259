"""`headroom up` (what `make up` runs) as a real subprocess on a "fresh machine": no NATS or
Redis at the configured URLs, so it starts the embedded ones; ready line, a completion, then a
clean stop on Ctrl-C (SIGINT) with every child gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from shared import embedded

pytestmark = pytest.mark.e2e


def test_headroom_up_serves_and_stops_cleanly():
    port = embedded.free_port()
    env = {
        **os.environ,
        # nothing listens there: the launcher must start embedded servers
        "HEADROOM_NATS_URL": f"nats://127.0.0.1:{embedded.free_port()}",
        "HEADROOM_REDIS_URL": f"redis://127.0.0.1:{embedded.free_port()}/0",
        "HEADROOM_NAMESPACE": f"hru-{uuid.uuid4().hex[:10]}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--port", str(port), "--pods", "2",
         "--predictors", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        ready = None
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Headroom is up"):
                ready = line
                break
        assert ready, "".join(lines[-50:])
        assert f"http://127.0.0.1:{port}" in ready and "curl" in ready
        assert sum("started embedded" in x for x in lines) == 2, "".join(lines)
        body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "hello", "max_tokens": 4}
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["choices"][0]["text"]
        children = _children(proc.pid)
        # nats-server, redis-server, simulator, collector, predictor, trainer, gateway
        assert len(children) >= 7, children
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        lines.append(out)
        assert proc.returncode == 0, "".join(lines[-50:])
        assert "[launcher] stopped" in out
        time.sleep(0.2)
        alive = [pid for pid in children if _alive(pid)]
        assert not alive, f"children still running: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"
