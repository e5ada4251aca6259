"""The dev-stack launcher behind `headroom up` / `make up`.

Starts NATS and Redis (reusing reachable ones, else embedded binaries from the venv), the
simulated pods, the collector, N predictor replicas, the trainer and the gateway (or
several replicas) as child processes; waits until each answers /health; prints one ready
line; streams prefixed logs; stops every child (newest first) on Ctrl-C / SIGTERM. The e2e
tests and `headroom bench faults` drive the same class.

A service that exits is restarted (``restart``, the default; `headroom up --no-restart`
turns it off): after a backoff (services/supervision.py: 0.5 s, doubling after short runs,
at most 10 s), with a log line for the exit, the restart and the service being healthy
again. The embedded NATS and Redis it started are restarted too (same port; NATS keeps its
JetStream store, Redis comes back empty). Without ``restart`` the first exit ends
`headroom up` (exit code 1), as before. With ``restart`` the predictors have a warm spare
(``warm_spares``, services/standby.py): a process that has imported the predictor and
waits, idle; the first predictor to exit is replaced by it (given that replica's
environment) instead of a new process, so the restart skips Python's imports, and a new
spare is started once every predictor is healthy again. Predicted routing comes back when
the first predictor answers, so its start-up is what a kill of every predictor costs.

Before starting anything on a NATS it did not start itself, the launcher checks that no
other stack uses the namespace there (predictors answering its predict subject, pod
snapshots on its pool's subject): two stacks in one namespace answer each other's
predictions and route to each other's pods.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from services.supervision import RestartPolicy, RestartState
from shared import embedded
from shared.bus import redact_url
from shared.subjects import Names

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
    gateways: int = 1  # replicas: the first on gateway_port, the others on free ports
    restart: bool = True  # restart a service that exits (False: it stays down)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    # refuse to start in a namespace another stack uses on a NATS we did not start
    check_namespace: bool = True
    # With ``restart``: services kept as a warm spare (services/standby.py: imported, idle)
    # that replaces the first replica to exit, so its restart skips Python's imports (the
    # predictors': ~2 s of CPU, 8-12 s on a loaded box; predicted routing waits for them).
    warm_spares: tuple[str, ...] = ("predictor",)


@dataclass
class Child:
    name: str
    service: str
    proc: subprocess.Popen
    health_url: str
    check: Callable[[dict], bool] | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)  # what it was started with
    restart: RestartState | None = None
    healthy: bool = True  # False from its exit until it answers /health again


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
        self.gateway_urls: list[str] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.RLock()  # children and embedded servers vs the supervisor
        self._supervisor: threading.Thread | None = None
        self._embedded_restarts: dict[str, RestartState] = {}
        self._spares: dict[str, subprocess.Popen] = {}  # service -> its warm spare

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
        if self.config.restart:
            with self._lock:
                self._ensure_spares()
            self._supervisor = threading.Thread(
                target=self._supervise, name="launcher-supervisor", daemon=True
            )
            self._supervisor.start()

    def _start(self) -> None:
        c = self.config
        if embedded.reachable(f"http://{c.host}:{c.gateway_port}", 0.2):
            raise StackError(f"port {c.gateway_port} on {c.host} is in use (gateway port)")
        self.nats_url, srv = embedded.ensure("nats", c.nats_url)
        if srv:
            self.embedded.append(srv)
            self.log(
                f"[launcher] no NATS at {redact_url(c.nats_url)}: started embedded one at {srv.url}"
            )
        self.redis_url, srv = embedded.ensure("redis", c.redis_url)
        if srv:
            self.embedded.append(srv)
            self.log(
                f"[launcher] no Redis at {redact_url(c.redis_url)}: started embedded one at {srv.url}"
            )
        if c.check_namespace and not any(e.kind == "nats" for e in self.embedded):
            foreign = namespace_in_use(self._bus_settings(), Names(c.namespace), c.pool)
            if foreign:
                raise StackError(
                    f"namespace '{c.namespace}' is already in use on {redact_url(self.nats_url)} "
                    f"({foreign}): another stack would answer this one's predictions and "
                    "route to its pods; set HEADROOM_NAMESPACE to a name of your own"
                )

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
        gateways = []
        for i in range(c.gateways):
            port = c.gateway_port if i == 0 else embedded.free_port(c.host)
            url = f"http://{c.host}:{port}"
            self.gateway_urls.append(url)
            gw = self._spawn(
                "gateway" if i == 0 else f"gateway-{i}",
                "gateway",
                {
                    "HEADROOM_GATEWAY_HOST": c.host,
                    "HEADROOM_GATEWAY_PORT": str(port),
                    # only this stack's pods, whatever a snapshot on NATS names
                    "HEADROOM_GATEWAY_POD_ALLOW_URLS": ",".join(self.pod_urls.values()),
                },
                f"{url}/health",
            )
            # Up means the gateway already sees every pod as ready (first snapshots arrived).
            gw.check = lambda body: body.get("pods", {}).get("ready", 0) >= c.pods
            gateways.append(gw)
        self._wait(gateways)

    def _bus_settings(self):
        """The connection settings the services get (the environment plus ``env["*"]``)."""
        from shared.settings import CommonSettings

        fields = CommonSettings.model_fields
        given = {
            k[len("HEADROOM_") :].lower(): v
            for k, v in self.config.env.get("*", {}).items()
            if k.startswith("HEADROOM_") and k[len("HEADROOM_") :].lower() in fields
        }
        return CommonSettings(**{**given, "nats_url": self.nats_url, "redis_url": self.redis_url})

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
        child = Child(name, service, self._popen(service, full_env), health_url, env=full_env)
        child.restart = RestartState(c.restart_policy, time.monotonic())
        self.children.append(child)
        self._start_pump(child)
        return child

    @staticmethod
    def _popen(service: str, env: dict[str, str], spare: bool = False) -> subprocess.Popen:
        cmd = ["-m", "services.standby", service] if spare else ["-m", f"services.{service}"]
        return subprocess.Popen(
            [sys.executable, *cmd],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if spare else subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the launcher, which stops children in order
            text=True,
            bufsize=1,
        )

    def _ensure_spares(self) -> None:
        """A warm spare for each service in ``warm_spares`` (called with the lock held),
        started once every replica of the service is healthy, so its imports never compete
        with a restart for CPU."""
        for service in self.config.warm_spares:
            mine = [ch for ch in self.children if ch.service == service]
            spare = self._spares.get(service)
            if not mine or (spare is not None and spare.poll() is None):
                continue
            if all(ch.healthy and ch.proc.poll() is None for ch in mine):
                self._spares[service] = self._popen(service, mine[0].env, spare=True)

    def _take_spare(self, ch: Child) -> subprocess.Popen | None:
        """The service's warm spare, handed ``ch``'s environment; None if it has none."""
        spare = self._spares.pop(ch.service, None)
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return None
        try:
            spare.stdin.write(json.dumps(ch.env) + "\n")
            spare.stdin.close()
        except OSError:
            spare.kill()
            return None
        return spare

    def _start_pump(self, child: Child) -> None:
        t = threading.Thread(target=self._pump, args=(child, child.proc), daemon=True)
        t.start()
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)

    def _pump(self, child: Child, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        width = 12
        for line in proc.stdout:
            self.log(f"{child.name:<{width}}| {line.rstrip()}")

    # ------------------------------------------------------------------ supervision
    def child(self, name: str) -> Child:
        for ch in self.children:
            if ch.name == name:
                return ch
        raise KeyError(f"no service named {name!r} (have: {[c.name for c in self.children]})")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to the service ``name`` (or "nats"/"redis" when embedded); returns
        the pid it went to. With ``restart`` on, an exit is restarted by the supervisor."""
        with self._lock:
            for srv in self.embedded:
                if srv.kind == name:
                    pid = srv.proc.pid
                    srv.proc.send_signal(sig)
                    return pid
            ch = self.child(name)
            ch.proc.send_signal(sig)
            return ch.proc.pid

    def _supervise(self) -> None:
        while not self._stopping.wait(0.1):
            with self._lock:
                if self._stopping.is_set():
                    return
                now = time.monotonic()
                for srv in self.embedded:
                    self._supervise_embedded(srv, now)
                for ch in self.children:
                    self._supervise_child(ch, now)
                self._ensure_spares()

    def _supervise_child(self, ch: Child, now: float) -> None:
        st = ch.restart
        assert st is not None
        if ch.proc.poll() is not None:
            if st.restart_at is None:
                delay = st.exited(now)
                ch.healthy = False
                self.log(f"[launcher] {ch.name} exited with code {ch.proc.returncode}; "
                         f"restarting in {delay:.1f} s (restart #{st.restarts + 1})")  # fmt: skip
            elif st.due(now):
                spare = self._take_spare(ch)
                ch.proc = spare or self._popen(ch.service, ch.env)
                st.restarted(now)
                self._start_pump(ch)
                how = ", from a warm spare" if spare else ""
                self.log(f"[launcher] {ch.name} restarted (pid {ch.proc.pid}{how})")
        elif not ch.healthy and _healthy(ch.health_url, ch.check):
            ch.healthy = True
            down = now - (st.exited_at or now)
            self.log(f"[launcher] {ch.name} is healthy again ({down:.1f} s after its exit)")

    def _supervise_embedded(self, srv: embedded.EmbeddedServer, now: float) -> None:
        st = self._embedded_restarts.setdefault(
            srv.kind, RestartState(self.config.restart_policy, now)
        )
        if srv.alive:
            return
        if st.restart_at is None:
            delay = st.exited(now)
            self.log(f"[launcher] embedded {srv.kind} exited with code {srv.proc.returncode}; "
                     f"restarting in {delay:.1f} s")  # fmt: skip
        elif st.due(now):
            try:
                srv.restart()
            except embedded.EmbeddedServerError as e:
                self.log(f"[launcher] embedded {srv.kind} did not come back: {e}")
                st.exited(now)
                return
            st.restarted(now)
            self.log(f"[launcher] embedded {srv.kind} restarted at {srv.url}")

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
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5.0)
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for p in spares:
            p.kill()  # idle (or still importing): nothing to stop cleanly
        for p in spares:
            p.wait()
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
        replicas = f" (replicas: {', '.join(self.gateway_urls)})" if c.gateways > 1 else ""
        return (
            f"Headroom is up: gateway {self.gateway_url}{replicas} "
            f"(metrics {self.gateway_url}/metrics), "
            f"admin endpoints (/health, /metrics): {admin}, "
            f"{len(self.pod_urls)} pods, {c.predictors} predictors, "
            f"NATS {redact_url(self.nats_url)}, Redis {redact_url(self.redis_url)}, "
            f"namespace {c.namespace}, "
            f"{'restarting services that exit' if c.restart else 'no restarts'}. Try: curl -s "
            f"{self.gateway_url}/v1/completions -H 'Content-Type: application/json' -d '{body}'"
        )


def namespace_in_use(bus, names: Names, pool: str, listen_s: float = 0.5) -> str:
    """Why ``names``' namespace looks used by another stack on the NATS of ``bus`` (the
    services' connection settings; "" if not): something answers its predict subject, or
    pod snapshots arrive on its pool's subject."""
    return asyncio.run(_namespace_in_use(bus, names, pool, listen_s))


async def _namespace_in_use(bus, names: Names, pool: str, listen_s: float) -> str:
    import nats
    import nats.errors

    from shared.bus import nats_options

    async def _quiet(_: Exception) -> None:
        return None

    try:
        nc = await nats.connect(
            bus.nats_url, connect_timeout=2.0, allow_reconnect=False, error_cb=_quiet,
            **nats_options(bus),
        )  # fmt: skip
    except Exception:  # unreachable or refused: the services will say so themselves
        return ""
    try:
        snapshots = 0

        async def on_snapshot(_msg) -> None:
            nonlocal snapshots
            snapshots += 1

        sub = await nc.subscribe(names.pod_snapshots(pool), cb=on_snapshot)
        why = []
        try:
            await nc.request(names.predict, b"headroom-namespace-probe", timeout=listen_s)
            why.append(f"a predictor answers {names.predict}")
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        await asyncio.sleep(max(0.0, listen_s - 0.05))
        await sub.unsubscribe()
        if snapshots:
            why.append(f"pod snapshots arrive on {names.pod_snapshots(pool)}")
        return "; ".join(why)
    finally:
        await nc.close()


def run_foreground(config: StackConfig) -> int:
    """`headroom up`: start, print the ready line, stream logs until Ctrl-C (or, without
    ``restart``, until a child dies)."""
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
        dead = None if config.restart else stack.failed_child()
        if dead:
            print(f"[launcher] {dead.name} exited with code {dead.proc.returncode}", flush=True)
            code = 1
            break
    print("[launcher] stopping...", flush=True)
    stack.stop()
    print("[launcher] stopped", flush=True)
    return code
