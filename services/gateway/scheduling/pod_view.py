"""What the gateway knows about each pod: the latest scraped record plus its own in-flight state.

Scraped metrics lag reality (a scrape every 100 ms, a snapshot hop over NATS), so bursts routed
between two scrapes would all land on the pod that looked idle. The gateway therefore keeps,
per pod, real-time counters of what it has itself dispatched:

- ``requests``: requests in flight (dispatched, not finished),
- ``prefill_tokens_in_flight``: uncached prompt tokens of requests that have not produced
  their first token yet,
- ``decode_tokens_in_flight``: ``max_tokens`` of requests that are decoding,
- ``unseen_requests``: in-flight requests dispatched after the pod's last scrape (the scraped
  ``waiting``/``running`` cannot include them yet),
- ``backlog_s``: estimated seconds of prefill queued on the pod: the sum of the idle-pod
  prefill estimates (:class:`~services.gateway.scheduling.cost_model.PrefillCostModel` of the
  pod's hardware class, :class:`~services.gateway.scheduling.cost_model.ClassCostModels`) of
  this gateway's requests that have not produced their first token. A request priced at
  dispatch by a *cold* model (fewer than ``COLD_OBSERVATIONS`` observations: the prior still
  dominates) is re-priced at the model's current coefficients on every read (its work is kept
  as :class:`~services.gateway.scheduling.cost_model.PrefillWork`); one priced by a warm model
  keeps its dispatch price. Priced at dispatch only, a cold start's first, too slow estimates
  (the prior's 16 s for a 100k-token prompt the pods prefill in 9 s) stayed in the backlog
  while new requests were priced at the learned model, and long prompts left the pod that
  holds their prefix for an idle one; re-priced always, the warm model's small wanders moved
  every backlog at once (measured in the routing lab, docs/benchmarks.md "Session 10"). The
  backlog also counts the waiting requests the fresh scrape shows beyond those (other
  gateways', or older than this one) at this gateway's mean estimate. It is deliberately
  conservative: a prefill in progress counts in full and every queued request brings its
  fixed per-request cost, which together roughly make up for pods prefilling slower than idle while they decode (measured
  in the routing lab; docs/scheduling.md),
- ``protected_decodes``: requests a prefill sent now would slow, still worth protecting:
  this gateway's decoding ones that met their TTFT SLO (every one when it had none), its
  queued ones (no first token yet: they decode while a prefill sent after them runs) that
  are expected to meet it (the backlog ahead of them at dispatch plus their own estimate
  within it; every one without an SLO), plus the running requests the fresh scrape shows
  beyond this gateway's (its waiting ones as well: one failing check more in the routing
  lab, aggregates equal). Counting the decoding ones only, a long prompt and a short one
  released together went to one pod and the short one's tokens each waited for a chunk of
  the long prefill (the routing lab's mooncake-h1 TPOT tail, docs/benchmarks.md "Session
  11").

- ``context_tokens``: the whole prompts (cached and uncached) of this gateway's requests in
  flight on the pod: what every decode step there reads from the KV cache.

The view also trains the cost model: a request dispatched to a pod with nothing to prefill
ahead of it reports its time to first token (``on_first_token(id, now)``) as its own prefill.
And it measures each pod's TPOT: a request that finishes with the time and its output tokens
(``on_finish(id, now, output_tokens)``) after a timed first token teaches the pod's EWMA
(``Candidate.tpot_s``; the latency-cost-scorer's learned damage weight reads it, and the
tokens it generated, ``Candidate.typical_output_tokens``, over all pods, and the share of
their ``max_tokens`` those were, ``Candidate.budget_share``) and, against
the pod's mean ``context_tokens`` over its decode, the decode slope of the pod's hardware
class (:class:`~services.gateway.scheduling.cost_model.DecodeCostModel`:
``Candidate.decode_s_per_token`` and ``decode_free_tokens``; the latency-cost-scorer's
``decodeWeight`` reads them).

A record older than ``stale_after_s`` is stale: its waiting/running numbers are replaced by
the gateway's own counts (requests before their first token count as waiting, decoding ones
as running; ``unseen_requests`` is then 0 because every in-flight request is already counted).

A failed scrape does not make a pod that served recently unroutable at once
(services/gateway/scheduling/scrape_misses.py): through ``scrape_misses_tolerated`` missed
scrapes its last good record stays, counted as stale (the gateway's own counts); a
connection failure, or one miss more, makes it not ready.

Pure: no I/O, no clock. ``now`` is unix seconds (the records' ``scraped_at`` is too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from services.gateway.scheduling.cost_model import (
    ClassCostModels,
    ClassDecodeModels,
    CostModel,
    PrefillWork,
)
from services.gateway.scheduling.scrape_misses import ScrapeMisses
from shared.features import PodLoad
from shared.schemas import PodRecord, PodSnapshot


@dataclass(slots=True)
class _Ticket:
    pod: str
    prefill_tokens: float
    max_tokens: float
    dispatched_at: float
    decoding: bool = False
    tpot_slo_ms: float | None = None
    cached_tokens: float = 0.0
    service_s: float = 0.0  # estimated prefill seconds at dispatch (the mean of these prices
    # the waiting requests a scrape shows beyond this gateway's)
    ttft_slo_ms: float | None = None
    idle: bool = False  # nothing to prefill ahead at dispatch: its TTFT is its own prefill
    protected: bool = True  # met its TTFT SLO (or had none): counted while decoding
    hardware_class: str | None = None  # its pod's (which cost model it teaches)
    first_token_at: float | None = None  # when its first token arrived (the caller's clock)
    repriced: bool = False  # priced by a cold cost model: its backlog share is re-priced
    context_at_first: float | None = None  # its pod's context_tokens at its first token

    @property
    def context_tokens(self) -> float:
        return self.prefill_tokens + self.cached_tokens


@dataclass(slots=True)
class _InFlight:
    requests: int = 0
    prefill_tokens: float = 0.0
    decode_tokens: float = 0.0
    context_tokens: float = 0.0  # whole prompts (cached and uncached) of every ticket
    prefilling: int = 0
    decoding: int = 0
    slo_tickets: int = 0  # tickets carrying a TPOT SLO
    # prefilling tickets priced at dispatch by a warm cost model: their estimates, summed
    fixed_s: float = 0.0
    # prefilling tickets priced by a cold one (fewer than COLD_OBSERVATIONS): their work per
    # hardware class, re-priced at the class's model now
    work: dict[str | None, PrefillWork] = field(default_factory=dict)
    # tickets worth protecting: decoding ones that met their TTFT SLO, prefilling ones
    # expected to meet it (every one without an SLO)
    protected: int = 0
    tickets: dict[str, _Ticket] = field(default_factory=dict)

    def add_work(self, t: _Ticket, sign: float) -> None:
        if t.repriced:
            w = self.work.get(t.hardware_class)
            if w is None:
                w = self.work[t.hardware_class] = PrefillWork()
            w.add(t.prefill_tokens, t.cached_tokens, sign)
        else:
            self.fixed_s = _clamp(self.fixed_s + sign * t.service_s)
        if self.prefilling == 0:  # nothing queued: no float residue left behind
            self.work.clear()
            self.fixed_s = 0.0

    def backlog_s(self, cost: CostModel) -> float:
        """Estimated prefill seconds of the prefilling tickets (module docstring)."""
        return self.fixed_s + sum(cost.for_class(hw).price(w) for hw, w in self.work.items())

    def tightest_tpot_slo(self) -> float | None:
        if not self.slo_tickets:
            return None
        return min(t.tpot_slo_ms for t in self.tickets.values() if t.tpot_slo_ms is not None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready pod serving the requested model, with the load the feature row is built from,
    the number of requests this gateway has in flight on it and the tightest TPOT SLO among
    them (None when none carries one)."""

    name: str
    url: str
    load: PodLoad
    stale: bool
    record: PodRecord | None = None
    in_flight: int = 0
    tightest_tpot_slo_ms: float | None = None
    backlog_s: float = 0.0  # estimated seconds of prefill this gateway has queued there
    protected_decodes: int = 0  # decoding requests a new prefill would slow down
    tpot_s: float | None = None  # measured recent TPOT of this gateway's requests there
    context_tokens: float = 0.0  # prompt tokens of this gateway's requests in flight there
    # decode seconds per step per context token on the pod's hardware class (learned from
    # its measured TPOTs, a prior until then: cost_model.DecodeCostModel)
    decode_s_per_token: float = 0.0
    # the context below which attention reads take less than the rest of a step there
    decode_free_tokens: float = 0.0
    # EWMA of the tokens this gateway's finished requests generated (any pod and model;
    # None until _OUTPUT_WARM have finished): the answer length max_tokens only bounds
    typical_output_tokens: float | None = None
    # mean share of their max_tokens that this gateway's finished requests generated (1 when
    # clients send the answers' lengths, small under fixed large budgets; None until
    # _SHARE_WARM have finished): max_tokens x this is a request's expected decode steps
    budget_share: float | None = None
    # computes decode_left (below) when a scorer reads it: most profiles never do
    decode_left_of: Callable[[], tuple[tuple[float, float], ...]] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def decode_left(self) -> tuple[tuple[float, float], ...]:
        """(context tokens, expected decode steps left) of each of this gateway's requests
        in flight there, once budget_share is measured: a queued one has max_tokens x share
        steps ahead, a decoding one that less the steps the pod's measured TPOT has made
        since its first token (the context a request placed now would share over its
        decode). Read within the scheduling decision the candidate was made for."""
        return self.decode_left_of() if self.decode_left_of is not None else ()

    @property
    def hardware_class(self) -> str | None:
        return self.record.hardware_class if self.record is not None else None


@dataclass(frozen=True, slots=True)
class PodCounts:
    ready: int
    not_ready: int
    stale: int
    missed: int = 0  # ready ones kept through missed scrapes (counted in stale too)

    @property
    def total(self) -> int:
        return self.ready + self.not_ready


class PodView:
    def __init__(
        self,
        stale_after_s: float = 2.0,
        cost: CostModel | None = None,
        *,
        scrape_misses_tolerated: int = 3,
        served_recently_s: float = 10.0,
    ) -> None:
        self.stale_after_s = stale_after_s
        # one prefill cost model per hardware class (PodRecord.hardware_class)
        self.cost: CostModel = cost if cost is not None else ClassCostModels()
        self.misses = ScrapeMisses(scrape_misses_tolerated)
        self.served_recently_s = served_recently_s
        self._first_token_at: dict[str, float] = {}  # pod -> its latest first token (now)
        # called after a pod's load fell (a first token, a finished request, a snapshot):
        # the shell's flow control may release queued requests then
        self.on_change: Callable[[], None] | None = None
        # EWMA of dispatched requests' estimates, per hardware class
        self._mean_service_s: dict[str | None, float] = {}
        # pod -> EWMA of the TPOT its finished requests measured (on_finish with now)
        self._tpot_s: dict[str, float] = {}
        # EWMA of the output tokens of finished requests (on_finish with now) and how many
        # taught it; published (typical_output_tokens) once _OUTPUT_WARM have finished
        self._output_mean: float | None = None
        self._outputs_seen = 0
        # mean of min(1, output tokens / max_tokens) over finished requests (a running mean,
        # then an EWMA of the same memory); published once _SHARE_WARM have finished
        self._share_mean = 0.0
        # per hardware class: decode step time against the prompt tokens decoding beside it
        self.decode = ClassDecodeModels()
        self._records: dict[str, PodRecord] = {}
        self._inflight: dict[str, _InFlight] = {}
        self._tickets: dict[str, _Ticket] = {}  # request id -> ticket

    @classmethod
    def from_settings(cls, settings, cost: CostModel | None = None) -> PodView:
        """The view as the gateway's settings (services/gateway/settings.py) configure it:
        the gateway and the routing lab build it here."""
        return cls(
            settings.stale_after_s,
            cost,
            scrape_misses_tolerated=settings.scrape_misses_tolerated,
            served_recently_s=settings.served_recently_s,
        )

    # --- scraped state ------------------------------------------------------------------
    def apply_snapshot(self, snapshot: PodSnapshot) -> None:
        """Replace the records with a pool's snapshot (pods missing from it are forgotten;
        in-flight counters of such pods stay until their requests finish). A failed
        scrape's record may be replaced by the pod's last good one (module docstring)."""
        latest: dict[str, PodRecord] = {}
        for rec in snapshot.pods:
            old = latest.get(rec.name)
            if old is None or rec.scraped_at >= old.scraped_at:
                latest[rec.name] = rec
        now = snapshot.ts
        self.misses.retain(latest)
        for name in [n for n in self._first_token_at if n not in latest]:
            del self._first_token_at[name]
        for name in [n for n in self._tpot_s if n not in latest]:
            del self._tpot_s[name]
        records = {
            name: self.misses.admit(rec, not rec.ready and self.served_recently(name, now))
            for name, rec in latest.items()
        }
        self._records = records
        self._changed()

    def served_recently(self, pod: str, now: float) -> bool:
        """A request of this gateway decodes on ``pod`` now, or one had its first token
        there within ``served_recently_s`` (with the time given to ``on_first_token``)."""
        fl = self._inflight.get(pod)
        if fl is not None and fl.decoding > 0:
            return True
        at = self._first_token_at.get(pod)
        return at is not None and now - at <= self.served_recently_s

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def record(self, pod: str) -> PodRecord | None:
        return self._records.get(pod)

    def is_stale(self, rec: PodRecord, now: float) -> bool:
        """Older than ``stale_after_s``, or kept through a missed scrape."""
        kept = self.misses.kept
        return now - rec.scraped_at > self.stale_after_s or (bool(kept) and rec.name in kept)

    def counts(self, now: float) -> PodCounts:
        ready = sum(1 for r in self._records.values() if r.ready)
        stale = sum(1 for r in self._records.values() if r.ready and self.is_stale(r, now))
        missed = sum(1 for n in self.misses.kept if n in self._records)
        return PodCounts(ready, len(self._records) - ready, stale, missed)

    def known_models(self) -> set[str]:
        """Models named by any pod's record, ready or not."""
        return {m for r in self._records.values() for m in r.models}

    def ready_models(self) -> list[str]:
        """Union of the models the ready pods serve, sorted."""
        return sorted({m for r in self._records.values() if r.ready for m in r.models})

    def context_lengths(self) -> dict[str, int]:
        """The largest context length (``max_model_len``) a ready pod reports per model, for
        the models some ready pod reports one for."""
        out: dict[str, int] = {}
        for r in self._records.values():
            if r.ready and r.max_model_len:
                for m in r.models:
                    out[m] = max(out.get(m, 0), r.max_model_len)
        return out

    def candidates(self, model: str, now: float) -> list[Candidate]:
        """Ready pods serving ``model``, sorted by name, each with its current load."""
        out = []
        lines: dict[str | None, tuple[float, float]] = {}  # decode line per class, once
        # the first requests to finish are the shortest answers: published after a warm-up
        output_tokens = self._output_mean if self._outputs_seen >= _OUTPUT_WARM else None
        # ... but the share of the budgets they used is the same for short and long answers
        # when budgets are the lengths, and biased low (no price) while budgets are not
        share = self._share_mean if self._outputs_seen >= _SHARE_WARM else None
        for name in sorted(self._records):
            rec = self._records[name]
            if not rec.ready or model not in rec.models:
                continue
            fl = self._inflight.get(name)
            load = self._load(rec, now)
            backlog, protected = self._pressure(rec, fl, load, now)
            hw = rec.hardware_class
            if hw not in lines:
                lines[hw] = self.decode.for_class(hw).line()
            left = partial(_decode_left, fl, share, self._tpot_s.get(name), now) if fl else None
            out.append(
                Candidate(
                    name, rec.url, load, self.is_stale(rec, now), rec,
                    fl.requests if fl else 0, fl.tightest_tpot_slo() if fl else None,
                    backlog, protected, self._tpot_s.get(name),
                    fl.context_tokens if fl else 0.0,
                    *lines[hw], output_tokens, share, left,
                )
            )  # fmt: skip
        return out

    def _pressure(
        self, rec: PodRecord, fl: _InFlight | None, load: PodLoad, now: float
    ) -> tuple[float, int]:
        """(backlog_s, protected_decodes): this gateway's, plus what a fresh scrape shows
        beyond this gateway's own requests (see the module docstring)."""
        backlog = fl.backlog_s(self.cost) if fl else 0.0
        protected = fl.protected if fl else 0
        if self.is_stale(rec, now):
            return backlog, protected
        seen = (fl.requests if fl else 0) - load.unseen_requests  # ours the scrape may show
        others = rec.waiting + rec.running - seen
        if others <= 0:
            return backlog, protected
        waiting = min(others, rec.waiting)
        hw = rec.hardware_class
        mean = self._mean_service_s.get(hw)
        if mean is None:
            mean = self.cost.for_class(hw).estimate(0)
        return backlog + waiting * mean, protected + int(others - waiting)

    def _load(self, rec: PodRecord, now: float) -> PodLoad:
        fl = self._inflight.get(rec.name) or _InFlight()
        if self.is_stale(rec, now):
            waiting, running, unseen = float(fl.prefilling), float(fl.decoding), 0.0
        else:
            waiting, running = rec.waiting, rec.running
            unseen = float(sum(1 for t in fl.tickets.values() if t.dispatched_at > rec.scraped_at))
        return PodLoad(
            waiting=waiting,
            running=running,
            kv_usage=rec.kv_usage,
            prefill_tokens_in_flight=fl.prefill_tokens,
            decode_tokens_in_flight=fl.decode_tokens,
            unseen_requests=unseen,
        )

    # --- the gateway's own in-flight state ----------------------------------------------
    def in_flight(self, pod: str) -> tuple[int, float, float]:
        """(requests, prefill_tokens_in_flight, decode_tokens_in_flight) of ``pod``."""
        fl = self._inflight.get(pod)
        if fl is None:
            return (0, 0.0, 0.0)
        return (fl.requests, fl.prefill_tokens, fl.decode_tokens)

    def unseen_requests(self, pod: str) -> int:
        fl = self._inflight.get(pod)
        rec = self._records.get(pod)
        if fl is None:
            return 0
        if rec is None:
            return len(fl.tickets)
        return sum(1 for t in fl.tickets.values() if t.dispatched_at > rec.scraped_at)

    def on_dispatch(
        self,
        request_id: str,
        pod: str,
        prefill_tokens: float,
        max_tokens: float,
        now: float,
        tpot_slo_ms: float | None = None,
        *,
        cached_tokens: float = 0.0,
        ttft_slo_ms: float | None = None,
    ) -> None:
        """A request was sent to ``pod`` with ``prefill_tokens`` uncached prompt tokens after
        ``cached_tokens`` cached ones (and its SLOs, if any). A request id already in flight
        is finished first (a retry on another pod reuses the id)."""
        self.on_finish(request_id)
        fl = self._inflight.setdefault(pod, _InFlight())
        rec = self._records.get(pod)
        idle = fl.prefilling == 0 and (rec is None or rec.waiting <= 0 or self.is_stale(rec, now))
        u, c = max(0.0, prefill_tokens), max(0.0, cached_tokens)
        hw = rec.hardware_class if rec is not None else None
        model = self.cost.for_class(hw)
        t = _Ticket(
            pod, u, max(0.0, max_tokens), now, False, tpot_slo_ms, c, model.estimate(u, c),
            ttft_slo_ms, idle, hardware_class=hw,
            repriced=model.observations < COLD_OBSERVATIONS,
        )  # fmt: skip
        if ttft_slo_ms is not None:  # expected to meet its TTFT SLO: worth protecting
            t.protected = (fl.backlog_s(self.cost) + t.service_s) * 1000.0 <= ttft_slo_ms
        self._tickets[request_id] = t
        fl.tickets[request_id] = t
        fl.protected += t.protected
        fl.requests += 1
        fl.slo_tickets += tpot_slo_ms is not None
        fl.prefilling += 1
        fl.prefill_tokens += t.prefill_tokens
        fl.context_tokens += t.context_tokens
        fl.add_work(t, 1.0)
        m = self._mean_service_s.get(hw)
        self._mean_service_s[hw] = t.service_s if m is None else m + 0.05 * (t.service_s - m)

    def on_first_token(self, request_id: str, now: float | None = None) -> None:
        """The request's first token arrived (at ``now``, when the caller knows it): its
        prompt is no longer prefill work; its ``max_tokens`` become decode work. With ``now``,
        its TTFT (since dispatch) decides whether it met its TTFT SLO, and a request that had
        nothing to prefill ahead of it teaches the cost model. Idempotent."""
        t = self._tickets.get(request_id)
        if t is None or t.decoding:
            return
        t.decoding = True
        fl = self._inflight[t.pod]
        fl.prefilling -= 1
        fl.protected -= t.protected  # judged again by the TTFT it got (below)
        fl.prefill_tokens = _clamp(fl.prefill_tokens - t.prefill_tokens)
        fl.add_work(t, -1.0)
        fl.decoding += 1
        fl.decode_tokens += t.max_tokens
        if now is not None:
            self._first_token_at[t.pod] = now
            t.first_token_at = now
            t.context_at_first = fl.context_tokens
            ttft_s = now - t.dispatched_at
            if t.ttft_slo_ms is not None:
                t.protected = ttft_s * 1000.0 <= t.ttft_slo_ms
            if t.idle:
                model = self.cost.for_class(t.hardware_class)
                model.observe(t.prefill_tokens, t.cached_tokens, ttft_s)
        fl.protected += t.protected
        self._changed()

    def on_finish(self, request_id: str, now: float | None = None, output_tokens: int = 0) -> None:
        """The request ended for any reason (success, failure, client disconnect).
        Idempotent; unknown ids are ignored. With ``now`` and the ``output_tokens`` it
        streamed, a request that decoded at least two tokens measures its pod's TPOT
        (time from its first token to its last over the tokens after the first), which the
        view keeps per pod as an EWMA (``Candidate.tpot_s``)."""
        t = self._tickets.pop(request_id, None)
        if t is None:
            return
        fl = self._inflight[t.pod]
        if now is not None and output_tokens >= 1 and t.first_token_at is not None:
            n, m = float(output_tokens), self._output_mean
            self._output_mean = n if m is None else m + _OUTPUT_ALPHA * (n - m)
            self._outputs_seen += 1
            used = min(1.0, n / t.max_tokens) if t.max_tokens > 0 else 1.0
            step = max(_OUTPUT_ALPHA, 1.0 / self._outputs_seen)
            self._share_mean += step * (used - self._share_mean)
        if now is not None and output_tokens >= 2 and t.first_token_at is not None:
            tpot = max(0.0, now - t.first_token_at) / (output_tokens - 1)
            m = self._tpot_s.get(t.pod)
            self._tpot_s[t.pod] = tpot if m is None else m + _TPOT_ALPHA * (tpot - m)
            if t.context_at_first is not None:  # the pod's mean context over its decode
                context = 0.5 * (t.context_at_first + fl.context_tokens)
                self.decode.for_class(t.hardware_class).observe(context, tpot)
        del fl.tickets[request_id]
        fl.protected -= t.protected
        fl.requests -= 1
        fl.context_tokens = _clamp(fl.context_tokens - t.context_tokens)
        fl.slo_tickets -= t.tpot_slo_ms is not None
        if t.decoding:
            fl.decoding -= 1
            fl.decode_tokens = _clamp(fl.decode_tokens - t.max_tokens)
        else:
            fl.prefilling -= 1
            fl.prefill_tokens = _clamp(fl.prefill_tokens - t.prefill_tokens)
            fl.add_work(t, -1.0)
        if fl.requests == 0:
            del self._inflight[t.pod]
        self._changed()

    def total_in_flight(self) -> int:
        return len(self._tickets)


_TPOT_ALPHA = 0.05  # EWMA step of the measured TPOT per pod (~20 requests)
_OUTPUT_ALPHA = 0.01  # EWMA step of the finished requests' output tokens (~100 requests)
_OUTPUT_WARM = 100  # finished requests before that EWMA is published (its memory)
_SHARE_WARM = 8  # finished requests before the share of the budgets used is published
# a cost model with fewer observations than this is cold (its prior still dominates): the
# backlog share of requests it priced is re-priced at the model's current coefficients
COLD_OBSERVATIONS = 8


def _decode_left(
    fl: _InFlight, share: float | None, tpot_s: float | None, now: float
) -> tuple[tuple[float, float], ...]:
    """(context tokens, expected decode steps left) per ticket (``Candidate.decode_left``);
    nothing before the budgets' share is measured."""
    if share is None:
        return ()
    out = []
    for t in fl.tickets.values():
        steps = t.max_tokens * share
        if t.first_token_at is not None and tpot_s:
            steps = max(0.0, steps - (now - t.first_token_at) / tpot_s)
        out.append((t.context_tokens, steps))
    return tuple(out)


def _clamp(x: float) -> float:
    # float subtraction can leave -1e-13 behind; counters never go negative
    return x if x > 1e-9 else 0.0
