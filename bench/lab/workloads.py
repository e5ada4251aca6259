"""Parametric workloads for the routing lab, written in the Mooncake trace format.

A workload is a named spec: a *family* (what kind of traffic), the family's parameters and a
seed. The same spec always writes the same file (``random.Random(seed)``, no global state),
one JSON object per request: ``timestamp`` (ms), ``input_length``, ``output_length`` and
``hash_ids`` (one id per 512-token block of the prompt), so ``headroom lab --trace`` runs it
unchanged.

Block ids follow the prompt's *prefix*: a block's id stands for the block together with
everything before it (as the pods' prefix cache sees it), so two prompts share the leading
ids exactly as long as they share a token prefix, and a repeated id is a block a prefix
cache could serve. Shared content (system prompts, documents, repository context) is always
a whole number of blocks; the block that holds the end of shared content and the start of
unique text is unique.

Families (parameters in the dataclasses below; lengths in tokens):

- ``chat``: short chat, no shared prefix; prompt and output lengths log-normal.
- ``multiturn``: sessions of turns; each turn's prompt is the session's system prompt, every
  earlier user message and answer, and a new message, so prefixes grow turn by turn.
- ``rag``: long-context retrieval: a shared system prompt, ``docs_per_request`` of a few hot
  documents (Zipf popularity) and a short question.
- ``code``: prefill-heavy code completion: long prompts, tiny outputs; a share of each
  prompt is its repository's context, shared with the other requests of that repository.
- ``agentic``: bursts of short calls with an agent's shared system prompt (tool
  definitions); with ``carry`` each call carries the burst's earlier calls and answers.
- ``mix``: several of the above, each a share of the requests, over the same time span.

Every family takes an :class:`Arrival` process (Poisson, gamma with a coefficient of
variation, or on/off bursts); for ``multiturn`` and ``agentic`` it times the sessions and
bursts, whose turns and calls then follow their own gaps.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, ClassVar

BLOCK = 512
Z90 = 1.2815515655446004  # the standard normal's 90th percentile


# --- distributions and arrivals -----------------------------------------------------------
@dataclass(frozen=True)
class LogNormal:
    """A log-normal length with this median and 90th percentile, clipped to [lo, hi] and
    rounded to an integer (the clip moves the mean, not the median or p90 inside it)."""

    median: float
    p90: float
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not (0 < self.lo <= self.median <= self.p90 <= self.hi):
            raise ValueError(f"need 0 < lo <= median <= p90 <= hi, got {self}")

    @property
    def sigma(self) -> float:
        return math.log(self.p90 / self.median) / Z90

    def quantile(self, q: float) -> int:
        x = self.median * math.exp(self.sigma * NormalDist().inv_cdf(q))
        return int(min(self.hi, max(self.lo, round(x))))

    def sample(self, rng: random.Random) -> int:
        x = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return int(min(self.hi, max(self.lo, round(x))))


@dataclass(frozen=True)
class Arrival:
    """When events (requests, or sessions / bursts) arrive, at ``rate_rps`` on average.

    - ``poisson``: exponential gaps;
    - ``gamma``: gamma gaps with coefficient of variation ``cv`` (> 1 is burstier);
    - ``onoff``: Poisson at ``rate_rps x (on_s + off_s) / on_s`` during ``on_s`` seconds,
      then nothing for ``off_s`` seconds, repeating (the mean rate stays ``rate_rps``).
    """

    kind: str = "poisson"
    rate_rps: float = 10.0
    cv: float = 1.0
    on_s: float = 10.0
    off_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("poisson", "gamma", "onoff"):
            raise ValueError(f"unknown arrival kind {self.kind!r}")
        if not self.rate_rps > 0 or not self.cv > 0 or not self.on_s > 0 or self.off_s < 0:
            raise ValueError(f"invalid arrival {self}")

    def times(self, rng: random.Random) -> Iterator[float]:
        """Event times in seconds from 0, increasing, without end."""
        t = 0.0
        if self.kind == "gamma":
            k = 1.0 / (self.cv * self.cv)
            while True:
                t += rng.gammavariate(k, 1.0 / (k * self.rate_rps))
                yield t
        if self.kind == "onoff":
            period = self.on_s + self.off_s
            rate_on = self.rate_rps * period / self.on_s
            while True:  # t counts time spent "on"; map it onto the wall clock
                t += rng.expovariate(rate_on)
                yield (t // self.on_s) * period + t % self.on_s
        while True:
            t += rng.expovariate(self.rate_rps)
            yield t


# --- prompts as blocks --------------------------------------------------------------------
class Blocks:
    """Hands out block ids: shared content gets the same id after the same prefix, unique
    text a fresh id."""

    def __init__(self) -> None:
        self.next_id = 0
        self._shared: dict[tuple, int] = {}

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def shared(self, prefix: list[int], key: tuple, n: int) -> list[int]:
        """The ids of ``n`` blocks of shared content ``key`` following ``prefix``."""
        out: list[int] = []
        prev = prefix[-1] if prefix else -1
        for i in range(n):
            k = (prev, key, i)
            h = self._shared.get(k)
            if h is None:
                h = self._shared[k] = self.next_id
                self.next_id += 1
            out.append(h)
            prev = h
        return out


def blocks_for(tokens: int) -> int:
    return -(-tokens // BLOCK)


def request(t_s: float, prefix: list[int], prefix_tokens: int, tail: int, out: int, ids: Blocks):
    """A request row: ``prefix`` (whole shared blocks, ``prefix_tokens`` long) then ``tail``
    unique tokens (>= 1)."""
    tail = max(1, tail)
    n = prefix_tokens + tail
    return (t_s, n, out, prefix + ids.fresh(blocks_for(n) - len(prefix)))


def extend(context: list[int], context_tokens: int, add: int, ids: Blocks) -> list[int]:
    """The ids of a context of ``context_tokens`` tokens (ids ``context``) grown by ``add``
    tokens: its whole blocks stay, the rest is new."""
    keep = context[: context_tokens // BLOCK]
    return keep + ids.fresh(blocks_for(context_tokens + add) - len(keep))


def zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


# --- families -----------------------------------------------------------------------------
Row = tuple[float, int, int, list[int]]  # (arrival s, input tokens, output tokens, hash ids)


@dataclass(frozen=True)
class Chat:
    """Short chat: every prompt unique (no shared prefix)."""

    family: ClassVar[str] = "chat"
    prompt: LogNormal = LogNormal(800, 2000, 300, 3000)
    output: LogNormal = LogNormal(180, 450, 50, 800)
    arrival: Arrival = Arrival()

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        times = self.arrival.times(rng)
        out = []
        for _ in range(n):
            t = next(times)
            out.append(request(t, [], 0, self.prompt.sample(rng), self.output.sample(rng), ids))
        return out


def _sessions(n: int, rng: random.Random, arrival: Arrival, session) -> list[Row]:
    """Sessions started by ``arrival``, each yielding its rows; the first ``n`` rows by time
    (sessions are generated until no later session could start before the n-th row)."""
    rows: list[Row] = []
    later: list[float] = []  # times of rows after the latest session start (a heap)
    settled = 0  # rows at or before it
    for start in arrival.times(rng):
        while later and later[0] <= start:
            heapq.heappop(later)
            settled += 1
        if settled >= n:
            break
        for row in session(start):
            rows.append(row)
            heapq.heappush(later, row[0])
    rows.sort(key=lambda r: r[0])
    return rows[:n]


@dataclass(frozen=True)
class MultiTurn:
    """Chat sessions whose prompts grow turn by turn (system prompt + history + message)."""

    family: ClassVar[str] = "multiturn"
    system_prompts: int = 3  # distinct system prompts; a session picks one uniformly
    system_tokens: int = 1024  # rounded up to whole blocks
    turns: float = 4.0  # mean turns per session (geometric, >= 1)
    first: LogNormal = LogNormal(600, 1800, 50, 4000)  # the first user message
    message: LogNormal = LogNormal(150, 500, 10, 2000)  # each later user message
    output: LogNormal = LogNormal(250, 600, 20, 1000)
    think_s: float = 20.0  # mean gap between a turn and the next (exponential)
    max_context: int = 32768  # a session ends before a prompt would exceed this
    arrival: Arrival = Arrival(rate_rps=1.0)  # session starts

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        sys_blocks = blocks_for(self.system_tokens)
        p_end = 1.0 / self.turns

        def session(t: float) -> list[Row]:
            s = rng.randrange(self.system_prompts)
            sys_ids = ids.shared([], ("system", s), sys_blocks)
            row = request(t, sys_ids, sys_blocks * BLOCK, self.first.sample(rng),
                          self.output.sample(rng), ids)  # fmt: skip
            out = [row]
            while rng.random() >= p_end:
                _, n_in, n_out, h = out[-1]
                add = n_out + self.message.sample(rng)
                if n_in + add > self.max_context:
                    break
                t += rng.expovariate(1.0 / self.think_s)
                out.append((t, n_in + add, self.output.sample(rng), extend(h, n_in, add, ids)))
            return out

        return _sessions(n, rng, self.arrival, session)


@dataclass(frozen=True)
class Rag:
    """Long-context retrieval over a few hot documents."""

    family: ClassVar[str] = "rag"
    documents: int = 5
    # document lengths: this distribution's quantiles at (i + 0.5) / documents
    document: LogNormal = LogNormal(30_000, 70_000, 10_000, 100_000)
    zipf: float = 1.1  # document popularity exponent
    docs_per_request: int = 1  # distinct documents per prompt, most popular first
    system_tokens: int = 512
    question: LogNormal = LogNormal(80, 250, 10, 600)
    output: LogNormal = LogNormal(120, 350, 20, 600)
    arrival: Arrival = Arrival(rate_rps=2.0)

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        if not 1 <= self.docs_per_request <= self.documents:
            raise ValueError("need 1 <= docs_per_request <= documents")
        # document lengths at evenly spaced quantiles (the few documents span the
        # distribution), their popularity ranks shuffled
        lengths = [
            self.document.quantile((i + 0.5) / self.documents) for i in range(self.documents)
        ]
        rng.shuffle(lengths)
        doc_blocks = [blocks_for(x) for x in lengths]
        weights = zipf_weights(self.documents, self.zipf)
        sys_blocks = blocks_for(self.system_tokens)
        times = self.arrival.times(rng)
        out = []
        for _ in range(n):
            t = next(times)
            chosen: set[int] = set()
            while len(chosen) < self.docs_per_request:
                chosen.add(rng.choices(range(self.documents), weights)[0])
            prefix = ids.shared([], ("system",), sys_blocks)
            for d in sorted(chosen):
                prefix = prefix + ids.shared(prefix, ("doc", d), doc_blocks[d])
            q, o = self.question.sample(rng), self.output.sample(rng)
            out.append(request(t, prefix, len(prefix) * BLOCK, q, o, ids))
        return out


@dataclass(frozen=True)
class Code:
    """Prefill-heavy code completion: a share of each prompt is repository context."""

    family: ClassVar[str] = "code"
    repos: int = 6
    zipf: float = 1.0  # repository popularity exponent
    prompt: LogNormal = LogNormal(2500, 7000, 500, 12_000)
    share_prob: float = 0.7  # probability that a prompt starts with its repository's context
    shared_fraction: float = 0.6  # that context's share of the prompt (whole blocks)
    output: LogNormal = LogNormal(15, 50, 2, 128)
    arrival: Arrival = Arrival(rate_rps=20.0)

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        weights = zipf_weights(self.repos, self.zipf)
        times = self.arrival.times(rng)
        out = []
        for _ in range(n):
            t = next(times)
            length, o = self.prompt.sample(rng), self.output.sample(rng)
            repo = rng.choices(range(self.repos), weights)[0]
            k = int(self.shared_fraction * length) // BLOCK if rng.random() < self.share_prob else 0
            prefix = ids.shared([], ("repo", repo), k)
            out.append(request(t, prefix, k * BLOCK, length - k * BLOCK, o, ids))
        return out


@dataclass(frozen=True)
class Agentic:
    """Bursts of short calls sharing an agent's system prompt."""

    family: ClassVar[str] = "agentic"
    agents: int = 2  # distinct system prompts; a burst picks one uniformly
    system_tokens: int = 3072
    calls: float = 6.0  # mean calls per burst (geometric, >= 1)
    call_gap_s: float = 0.5  # mean gap between calls of a burst (exponential)
    step: LogNormal = LogNormal(300, 1200, 20, 4000)  # new tokens per call
    carry: bool = True  # each call carries the burst's earlier calls and answers
    output: LogNormal = LogNormal(60, 200, 5, 500)
    max_context: int = 32768
    arrival: Arrival = Arrival(rate_rps=1.0)  # burst starts

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        sys_blocks = blocks_for(self.system_tokens)
        p_end = 1.0 / self.calls

        def burst(t: float) -> list[Row]:
            a = rng.randrange(self.agents)
            sys_ids = ids.shared([], ("agent", a), sys_blocks)
            out = [request(t, sys_ids, sys_blocks * BLOCK, self.step.sample(rng),
                           self.output.sample(rng), ids)]  # fmt: skip
            while rng.random() >= p_end:
                t += rng.expovariate(1.0 / self.call_gap_s)
                step, o = self.step.sample(rng), self.output.sample(rng)
                _, n_in, n_out, h = out[-1]
                if not self.carry:
                    out.append(request(t, sys_ids, sys_blocks * BLOCK, step, o, ids))
                    continue
                add = n_out + step
                if n_in + add > self.max_context:
                    break
                out.append((t, n_in + add, o, extend(h, n_in, add, ids)))
            return out

        return _sessions(n, rng, self.arrival, burst)


@dataclass(frozen=True)
class Mix:
    """Several families, each ``share`` of the requests, over the same span: each part's
    arrivals are stretched so that it offers ``share x rate_rps`` requests/s."""

    family: ClassVar[str] = "mix"
    parts: tuple[tuple[float, Any], ...] = ()  # (share of requests, family params)
    rate_rps: float = 10.0

    def rows(self, n: int, rng: random.Random, ids: Blocks) -> list[Row]:
        if not self.parts or any(not s > 0 for s, _ in self.parts):
            raise ValueError("a mix needs parts with shares > 0")
        total = sum(s for s, _ in self.parts)
        counts = [round(n * s / total) for s, _ in self.parts]
        counts[-1] = n - sum(counts[:-1])
        out: list[Row] = []
        for (share, part), k in zip(self.parts, counts, strict=True):
            if k <= 0:
                continue
            rows = part.rows(k, random.Random(rng.getrandbits(64)), ids)
            span = rows[-1][0] - rows[0][0]
            target = (k - 1) / (self.rate_rps * share / total)
            f = target / span if span > 0 else 1.0
            t0 = rows[0][0]
            out.extend(((r[0] - t0) * f, r[1], r[2], r[3]) for r in rows)
        out.sort(key=lambda r: r[0])
        return out


FAMILIES: dict[str, type] = {c.family: c for c in (Chat, MultiTurn, Rag, Code, Agentic, Mix)}


# --- specs --------------------------------------------------------------------------------
def params_dict(params: Any) -> dict:
    """A family's parameters as plain JSON-able values (``family`` first)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            d = {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return {"family": v.family, **d} if hasattr(v, "family") else d
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        return v

    return plain(params)


def describe(params: Any) -> str:
    """A one-line human description of a family's parameters."""

    def short(v: Any) -> str:
        if isinstance(v, LogNormal):
            return f"{v.median:g}/{v.p90:g} [{v.lo}-{v.hi}]"
        if isinstance(v, Arrival):
            if v.kind == "gamma":
                return f"gamma cv {v.cv:g} @ {v.rate_rps:g}/s"
            if v.kind == "onoff":
                return f"on {v.on_s:g}s/off {v.off_s:g}s @ {v.rate_rps:g}/s"
            return f"poisson @ {v.rate_rps:g}/s"
        return f"{v:g}" if isinstance(v, float) else str(v)

    if isinstance(params, Mix):
        inner = "; ".join(f"{s:g} x {p.family}({describe(p)})" for s, p in params.parts)
        return f"rate {params.rate_rps:g}/s: {inner}"
    return ", ".join(
        f"{f.name} {short(getattr(params, f.name))}" for f in dataclasses.fields(params)
    )


@dataclass(frozen=True)
class WorkloadSpec:
    """A generated workload: ``requests`` rows of a family with these parameters and seed."""

    name: str
    params: Any  # one of the family dataclasses
    seed: int
    requests: int = 1500
    note: str = ""

    @property
    def family(self) -> str:
        return self.params.family

    def rows(self) -> list[Row]:
        return self.params.rows(self.requests, random.Random(self.seed), Blocks())

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "seed": self.seed,
            "requests": self.requests,
            "params": params_dict(self.params),
            "description": describe(self.params),
            "note": self.note,
        }

    def write(self, path: str | Path) -> Path:
        """Write the workload as a Mooncake jsonl file (and ``<name>.spec.json`` beside)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = ("timestamp", "input_length", "output_length", "hash_ids")
        lines = [
            json.dumps(dict(zip(keys, (round(t * 1000.0), n_in, n_out, h), strict=True)))
            for t, n_in, n_out, h in self.rows()
        ]
        path.write_text("\n".join(lines) + "\n")
        path.with_suffix(".spec.json").write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path


@dataclass(frozen=True)
class TraceSlice:
    """A window of a real trace (``bench.lab.synthetic.traces_dir()``): ``half`` 1 is its
    first half of rows, 2 the second; the window is the first ``window`` rows of that half
    (None: the whole half)."""

    name: str
    file: str
    half: int
    window: int | None = None
    note: str = ""
    family: str = field(default="trace", init=False)

    def path(self) -> Path:
        from bench.lab.synthetic import traces_dir

        return traces_dir() / self.file

    def rows_in_file(self) -> int:
        from bench.traces import read_trace

        return len(read_trace(self.path()))

    def offset_limit(self, total: int | None = None) -> tuple[int, int]:
        """(offset, limit) for the lab's ``--offset`` / ``--limit``."""
        total = self.rows_in_file() if total is None else total
        half = total // 2
        start, size = (0, half) if self.half == 1 else (half, total - half)
        return start, size if self.window is None else min(size, self.window)

    def to_dict(self, total: int | None = None) -> dict:
        offset, limit = self.offset_limit(total)
        return {
            "name": self.name,
            "family": "trace",
            "file": self.file,
            "half": self.half,
            "window": self.window,
            "offset": offset,
            "limit": limit,
            "description": f"{self.file} half {self.half}: rows {offset}-{offset + limit - 1}",
            "note": self.note,
        }
