"""The dev-stack launcher behind `headroom up` / `make up`.

Starts NATS and Redis (reusing reachable ones, else embedded binaries from the venv), the
simulated pods, the collector, N predictor replicas, the trainer and the gateway as child
processes; waits until each answers /health; prints one ready line; streams prefixed logs;
stops every child (newest first) on Ctrl-C / SIGTERM. The e2e tests drive the same class.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from shared import embedded

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ADMIN_PORTS = {
    "collector": 9101,
    **{f"predictor-{i}": 9102 + i for i in range(2)},
    "trainer": 9104,
}


@dataclass
class StackConfig:
    nats_url: str = "nats://127.0.0.1:4222"
    redis_url: str = "redis://127.0.0.1:6379/0"
    namespace: str = "headroom"
    pool: str = "default"
    host: str = "127.0.0.1"
    gateway_port: int = 8080
    pods: int = 4
    predictors: int = 2
    profile: str = "h100-llama3-8b"
    model: str = DEFAULT_MODEL
    log_level: str = "INFO"
    # Extra environment per service name ("gateway", "trainer", ...) or "*" for all.
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    startup_timeout_s: float = 60.0
    # `headroom up` uses the documented admin ports when free (tools such as
    # `headroom autoscale recommend` default to them); tests use free ports.
    fixed_admin_ports: bool = False


@dataclass
class Child:
    name: str
    service: str
    proc: subprocess.Popen
    health_url: str
    check: Callable[[dict], bool] | None = None


class StackError(RuntimeError):
    pass


def _healthy(url: str, check: Callable[[dict], bool] | None = None) -> bool:
    """200 from ``url`` and, if given, ``check`` accepts its JSON body."""
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            if r.status != 200:
                return False
            return check is None or bool(check(json.loads(r.read())))
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Stack:
    """A running dev stack. ``start()`` returns once every service is healthy."""

    def __init__(self, config: StackConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.log = log or (lambda line: print(line, flush=True))
        self.children: list[Child] = []
        self.embedded: list[embedded.EmbeddedServer] = []
        self.nats_url = config.nats_url
        self.redis_url = config.redis_url
        self.pod_urls: dict[str, str] = {}
        self.admin_urls: dict[str, str] = {}
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ start / stop
    @property
    def gateway_url(self) -> str:
        return f"http://{self.config.host}:{self.config.gateway_port}"

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        c = self.config
        if embedded.reachable(f"http://{c.host}:{c.gateway_port}", 0.2):
            raise StackError(f"port {c.gateway_port} on {c.host} is in use (gateway port)")
        self.nats_url, srv = embedded.ensure("nats", c.nats_url)
        if srv:
            self.embedded.append(srv)
            self.log(f"[launcher] no NATS at {c.nats_url}: started embedded one at {srv.url}")
        self.redis_url, srv = embedded.ensure("redis", c.redis_url)
        if srv:
            self.embedded.append(srv)
            self.log(f"[launcher] no Redis at {c.redis_url}: started embedded one at {srv.url}")

        pod_ports = [embedded.free_port(c.host) for _ in range(c.pods)]
        names = [f"pod-{i}" for i in range(c.pods)]
        self.pod_urls = {n: f"http://{c.host}:{p}" for n, p in zip(names, pod_ports, strict=True)}
        sim = self._spawn(
            "simulator",
            "simulator",
            {
                "HEADROOM_SIM_HOST": c.host,
                "HEADROOM_SIM_PORTS": ",".join(map(str, pod_ports)),
                "HEADROOM_SIM_NAMES": ",".join(names),
                "HEADROOM_SIM_PROFILE": c.profile,
                "HEADROOM_SIM_MODEL": c.model,
            },
            f"{self.pod_urls[names[0]]}/health",
        )
        self._wait([sim])
        self._wait_urls([f"{u}/health" for u in self.pod_urls.values()])

        started = []
        started.append(
            self._admin_service(
                "collector",
                "collector",
                "HEADROOM_COLLECTOR_",
                {"HEADROOM_COLLECTOR_PODS": ",".join(f"{n}={u}" for n, u in self.pod_urls.items())},
            )
        )
        for i in range(c.predictors):
            started.append(
                self._admin_service(
                    f"predictor-{i}",
                    "predictor",
                    "HEADROOM_PREDICTOR_",
                    {"HEADROOM_PREDICTOR_REPLICA_ID": f"predictor-{i}"},
                )
            )
        started.append(self._admin_service("trainer", "trainer", "HEADROOM_TRAINER_", {}))
        self._wait(started)
        gw = self._spawn(
            "gateway",
            "gateway",
            {"HEADROOM_GATEWAY_HOST": c.host, "HEADROOM_GATEWAY_PORT": str(c.gateway_port)},
            f"{self.gateway_url}/health",
        )
        # Up means the gateway already sees every pod as ready (first snapshots arrived).
        gw.check = lambda body: body.get("pods", {}).get("ready", 0) >= c.pods
        self._wait([gw])

    def _admin_service(self, name: str, service: str, prefix: str, env: dict[str, str]) -> Child:
        port = self._port_for(name)
        url = f"http://{self.config.host}:{port}"
        self.admin_urls[name] = url
        env = {**env, f"{prefix}ADMIN_HOST": self.config.host, f"{prefix}ADMIN_PORT": str(port)}
        return self._spawn(name, service, env, f"{url}/health")

    def _port_for(self, name: str) -> int:
        """The service's documented default admin port (collector 9101, predictors 9102 and
        up, trainer 9104) when ``fixed_admin_ports`` is set and it is free, else any free one."""
        if self.config.fixed_admin_ports:
            preferred = ADMIN_PORTS.get(name)
            if preferred and not embedded.reachable(f"http://{self.config.host}:{preferred}", 0.2):
                return preferred
        return embedded.free_port(self.config.host)

    def _spawn(self, name: str, service: str, env: dict[str, str], health_url: str) -> Child:
        c = self.config
        full_env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "HEADROOM_NATS_URL": self.nats_url,
            "HEADROOM_REDIS_URL": self.redis_url,
            "HEADROOM_NAMESPACE": c.namespace,
            "HEADROOM_POOL": c.pool,
            "HEADROOM_LOG_LEVEL": c.log_level,
            **c.env.get("*", {}),
            **env,
            **c.env.get(service, {}),
            **c.env.get(name, {}),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}"],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the launcher, which stops children in order
            text=True,
            bufsize=1,
        )
        child = Child(name, service, proc, health_url)
        self.children.append(child)
        t = threading.Thread(target=self._pump, args=(child,), daemon=True)
        t.start()
        self._threads.append(t)
        return child

    def _pump(self, child: Child) -> None:
        assert child.proc.stdout is not None
        width = 12
        for line in child.proc.stdout:
            self.log(f"{child.name:<{width}}| {line.rstrip()}")

    def _wait(self, children: list[Child]) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pending = list(children)
        while pending:
            for ch in list(pending):
                if ch.proc.poll() is not None:
                    raise StackError(f"{ch.name} exited with code {ch.proc.returncode}")
                if _healthy(ch.health_url, ch.check):
                    pending.remove(ch)
            if pending and time.monotonic() > deadline:
                raise StackError(
                    "not healthy in time: "
                    + ", ".join(f"{c.name} ({c.health_url})" for c in pending)
                )
            if pending:
                time.sleep(0.2)

    def _wait_urls(self, urls: list[str]) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        for u in urls:
            while not _healthy(u):
                if time.monotonic() > deadline:
                    raise StackError(f"{u} not healthy in time")
                time.sleep(0.1)

    def stop(self, timeout: float = 10.0) -> None:
        for ch in reversed(self.children):
            if ch.proc.poll() is None:
                ch.proc.terminate()
        deadline = time.monotonic() + timeout
        for ch in reversed(self.children):
            try:
                ch.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"[launcher] {ch.name} did not stop in time; killing it")
                ch.proc.kill()
                ch.proc.wait()
        for t in self._threads:
            t.join(timeout=1.0)
        for srv in reversed(self.embedded):
            srv.stop()
        self.children.clear()
        self.embedded.clear()

    def failed_child(self) -> Child | None:
        return next((ch for ch in self.children if ch.proc.poll() is not None), None)

    def ready_line(self) -> str:
        c = self.config
        body = (
            '{"model": "%s", "prompt": "Say hello", "max_tokens": 16}' % c.model  # noqa: UP031
        )
        admin = ", ".join(f"{n} {u}" for n, u in self.admin_urls.items())
        return (
            f"Headroom is up: gateway {self.gateway_url} (metrics {self.gateway_url}/metrics), "
            f"admin endpoints (/health, /metrics): {admin}, "
            f"{len(self.pod_urls)} pods, {c.predictors} predictors, NATS {self.nats_url}, "
            f"Redis {self.redis_url}, namespace {c.namespace}. Try: curl -s "
            f"{self.gateway_url}/v1/completions -H 'Content-Type: application/json' -d '{body}'"
        )


def run_foreground(config: StackConfig) -> int:
    """`headroom up`: start, print the ready line, stream logs until Ctrl-C or a child dies."""
    import signal

    stack = Stack(config)
    stopping = threading.Event()

    def _stop(signum, frame):
        stopping.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        stack.start()
    except StackError as e:
        print(f"[launcher] failed to start: {e}", file=sys.stderr, flush=True)
        return 1
    print(stack.ready_line(), flush=True)
    code = 0
    while not stopping.wait(0.5):
        dead = stack.failed_child()
        if dead:
            print(f"[launcher] {dead.name} exited with code {dead.proc.returncode}", flush=True)
            code = 1
            break
    print("[launcher] stopping...", flush=True)
    stack.stop()
    print("[launcher] stopped", flush=True)
    return code
