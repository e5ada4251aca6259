"""The dev launcher restarts a service that exits (issue 16, done-means 4): kill -9 each
service of a launched stack in turn (and the embedded NATS and Redis it started): each comes
back with a new pid and the stack keeps serving completions. `headroom up --no-restart`
keeps the old behaviour: the first exit stops the whole stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from services.launcher import DEFAULT_MODEL, Stack, StackConfig
from services.supervision import RestartPolicy
from shared import embedded
from tests.e2e.conftest import metric_value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]


def _complete(url: str, timeout: float = 30.0) -> dict:
    body = {"model": DEFAULT_MODEL, "prompt": "hello again", "max_tokens": 4}
    req = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _serves(url: str, deadline: float) -> None:
    """A completion succeeds before ``deadline`` (the stack keeps serving)."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if _complete(url)["choices"][0]["text"]:
                return
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"the stack did not serve again: {last}")


def _gateway_ready_pods(url: str) -> float:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return json.loads(r.read())["pods"]["ready"]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return 0


def test_each_killed_service_is_restarted_and_the_stack_keeps_serving():
    logs: list[str] = []
    stack = Stack(
        StackConfig(
            # nothing listens there: the launcher starts (and supervises) embedded servers
            nats_url=f"nats://127.0.0.1:{embedded.free_port()}",
            redis_url=f"redis://127.0.0.1:{embedded.free_port()}/0",
            namespace=f"hrr-{uuid.uuid4().hex[:10]}",
            gateway_port=embedded.free_port(),
            pods=2, predictors=1, restart=True,
            restart_policy=RestartPolicy(initial_s=0.2, max_s=2.0),
        ),
        log=logs.append,
    )  # fmt: skip
    stack.start()
    try:
        _serves(stack.gateway_url, time.monotonic() + 30)
        for name in ("simulator", "collector", "predictor-0", "trainer", "gateway"):
            ch = stack.child(name)
            old = ch.proc.pid
            assert stack.kill(name) == old
            deadline = time.monotonic() + 90
            while ch.proc.pid == old or not ch.healthy:
                assert time.monotonic() < deadline, f"{name} not back:\n" + "\n".join(logs[-40:])
                time.sleep(0.1)
            assert ch.restart is not None and ch.restart.restarts == 1
            while _gateway_ready_pods(stack.gateway_url) < 2:
                assert time.monotonic() < deadline, "pods not ready again"
                time.sleep(0.1)
            _serves(stack.gateway_url, deadline)
        # the predictor came back from its warm spare, with the replica's own settings
        assert any("[launcher] predictor-0 restarted (pid" in x and "from a warm spare" in x
                   for x in logs), "\n".join(logs[-40:])  # fmt: skip
        with urllib.request.urlopen(stack.admin_urls["predictor-0"] + "/health", timeout=5) as r:
            assert json.loads(r.read())["replica"] == "predictor-0"
        for kind in ("nats", "redis"):
            srv = next(e for e in stack.embedded if e.kind == kind)
            old = srv.proc.pid
            stack.kill(kind)
            deadline = time.monotonic() + 60
            while srv.proc.pid == old or not srv.alive:
                assert time.monotonic() < deadline, f"{kind} not back:\n" + "\n".join(logs[-40:])
                time.sleep(0.1)
            _serves(stack.gateway_url, deadline)
        with urllib.request.urlopen(stack.gateway_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        assert metric_value(text, "headroom_gateway_requests_total", status="200") >= 1
        for name in ("simulator", "collector", "predictor-0", "trainer", "gateway"):
            assert any(f"[launcher] {name} exited with code -9; restarting" in x for x in logs)
            assert any(f"[launcher] {name} is healthy again" in x for x in logs)
        assert any("[launcher] embedded nats restarted" in x for x in logs)
        assert any("[launcher] embedded redis restarted" in x for x in logs)
    finally:
        procs = [ch.proc for ch in stack.children] + [e.proc for e in stack.embedded]
        stack.stop()
    assert all(p.poll() is not None for p in procs)  # restarted ones are stopped too


def test_no_restart_stops_the_stack_at_the_first_exit():
    port = embedded.free_port()
    env = {
        **os.environ,
        "HEADROOM_NATS_URL": f"nats://127.0.0.1:{embedded.free_port()}",
        "HEADROOM_REDIS_URL": f"redis://127.0.0.1:{embedded.free_port()}/0",
        "HEADROOM_NAMESPACE": f"hrn-{uuid.uuid4().hex[:10]}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--port", str(port), "--pods", "1",
         "--predictors", "1", "--no-restart"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Headroom is up"):
                break
        assert lines and lines[-1].startswith("Headroom is up"), "".join(lines[-50:])
        assert "no restarts" in lines[-1]
        ps = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(proc.pid)],
                            capture_output=True, text=True).stdout  # fmt: skip
        pid = next(int(x.split()[0]) for x in ps.splitlines() if "services.predictor" in x)
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 1, out
        assert "[launcher] predictor-0 exited with code -9" in out
        assert "restarting" not in out and "[launcher] stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
