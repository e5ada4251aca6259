"""latency-cost-scorer: the pod where this request costs everyone the least time.

Sending a prompt to a pod costs its own time to first token there (the prefill already
queued on the pod plus its own uncached part) and, because a prefill shares the pod's steps
with every request decoding there, it slows each of those decodes by about its own prefill
time. Per candidate pod ``i``:

    own_i    = backlog_i + service_i          (seconds; the pod view's cost model)
               or the predicted TTFT, with latency: predicted and predictions present
    cost_i   = own_i + damageWeight x protected_i x service_i
               (+ (wasteWeight + reprefillWeight x protected_i) x (service_i - min service),
                when set)

``wasteWeight`` (off by default) prices the prefill a pod would spend on the request beyond the
cheapest placement's: a prompt whose prefix another pod holds is prefilled again here, and at
full load those seconds of capacity are taken from the requests after it (on a mixed pool a
slower class's extra seconds count too). ``reprefillWeight`` (off by default) prices the same
extra prefill once per protected decode on the pod, each of which it stalls, so a copy made on
a pod with nothing to protect is free (rule 17, docs/benchmarks.md "Session 29").

``protected_i`` counts the requests on the pod that will decode while this prefill runs and
are still worth protecting: decoding ones that met their TTFT SLO (or had none) and queued
ones expected to meet it (the pod view's ``protected_decodes``). A request with a TTFT SLO
that no pod can meet any more (``min own + time already queued > SLO``) is *hopeless*: its
own SLO is lost wherever it goes, so with ``sacrificeHopeless`` it goes where it harms the
fewest protected decodes:

    cost_i   = protected_i x service_i + hopelessLatencyWeight x own_i

among the pods where ``own_i <= hopelessMaxDelay x min own`` and ``own_i <= min own +
hopelessMaxWaitS`` (each when set; the others rank after them by own TTFT), so a sacrificed
request waits at most that multiple of, or that many seconds beyond, what the fastest pod would
give it and no pod becomes a sink of ever longer waits. Likewise ``maxOwnDelayS`` (when set)
ranks the pods where ``own_i > min own + maxOwnDelayS`` after the others for a request that is
not hopeless: what the damage and decode prices may cost its own TTFT is bounded.
``maxCopyS`` (when set) bounds only the part of it that is a re-prefill: a pod where both
``service_i - min service`` and ``own_i - min own`` exceed it ranks after the others by own
TTFT (rule 18, docs/benchmarks.md "Session 30"), so the prices cannot send a question about a
document that another pod holds, with no queue, to prefill the document again for seconds.

With ``decodeWeight`` > 0 every cost also carries the decode time the request would lose on a
pod whose decode batch reads more context than the fleet's (``k_i``: decode seconds per step
per context token on the pod's hardware class, learned by the pod view from measured TPOTs,
an H100-class prior until then; ``ctx_i``: prompt tokens of this gateway's requests in flight
there; ``mean ctx``: their mean over the candidate pods; ``L``: the request's prompt tokens;
``m``: its expected decode steps, ``max_tokens`` x the share of their ``max_tokens`` that
finished requests generated (the pod view's ``budget_share``: 1 when clients send the
answers' lengths, the answers over the budget when they send a fixed one; nothing is priced
until 8 have finished); ``free_i``: the pod's free context ``e / k``, where attention reads
take as long as the rest of a step)::

    cost_i  += decodeWeight x k_i x m x max(0, ctx_i + L - mean ctx - decodeFree x free_i
                                               - decodeSlack x (free_i + mean ctx))

Every decode step reads the KV cache of every sequence in the batch, so a request placed on
a pod holding far more context than the others decodes slower there for all of its ``m``
steps. Only the excess over the fleet's mean counts (on an evenly spread fleet nothing is
priced, whatever the absolute context), and only beyond ``decodeSlack`` x the mean pod's TPOT
in context tokens (0.1: where the pod's TPOT would run more than 10% above the mean pod's on
the learned line ``tpot = k (free + ctx)``) and ``decodeFree`` x the free context (an absolute
allowance). A cached prompt costs no prefill but still costs every decode step: without this,
requests for a few hot documents piled onto the pods holding them (every hit was a cheap
TTFT) until their decode batches ran several times slower than the other pods'. The delay a
request's context adds to the others decoding beside it is not priced (measured, that term
moved long prompts off the pods holding their cache). The variants (``decodeRate``,
``decodeConfirm``, ``decodeDrain``, ``damageShare``, ``hopelessDecode``), what `headroom`
ships and the measurements behind each choice, including the options that failed their
rules, are in docs/scheduling.md "The decode price" and the parameter table there.

With ``latency: predicted`` and ``shortlist: N``, the predicted costs rank only the N pods of
least *estimated* cost (the same formulas with the cost model's own TTFT); the others rank
after them by estimated cost. Ranking every pod by a learned TTFT picks, each time, the pod
whose prediction erred lowest (the winner's curse), and its large errors send requests to
pods the cost model knows are loaded; between the cost model's best few the prediction adds
what the model knows beyond the bookkeeping (docs/benchmarks.md "A shortlist for the learned
ranking"). ``shortlistWithinS`` (off by default) narrows the shortlist further to the pods
within that many seconds of the least estimated cost: the predictions break the cost model's
near ties, its clear preferences stand (with one pod left it ranks alone and the label says
``cost-model``; rule 13, docs/benchmarks.md "Session 28").

Scores are ``(max cost - cost) / (max cost - min cost)`` (1 for the cheapest, all 1 when
equal). The picture behind it: one long prefill (a 100k-token prompt takes ~15 s on an H100
and every step of it is ~1 s of attention) ruins TPOT for every request decoding beside it,
so long or hopeless prompts are steered to pods where little would be ruined.
"""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState, SchedulingRequest
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import RANKED_COST_MODEL, Scorer

_EPS = 1e-12
_ALPHA = 0.01  # EWMA step of the typical sizes (damageAdapt)
_PRIOR_TPOT_S = 0.03  # typical TPOT until one is measured (an H100-class decode step)
_MIN_W, _MAX_W = 0.005, 5.0  # bounds of the learned damage weight
# clients' max_tokens above this multiple of the measured answers are budgets, not lengths
_BUDGET_SLACK = 2.0


def _estimated_s(p: PodState) -> float:
    """The request's own TTFT on the pod by the cost model: prefill queued ahead + its own."""
    return p.candidate.backlog_s + p.service_s


def _shared_context(p: PodState, steps: float) -> float:
    """The context the pod's requests in flight hold on average over ``steps`` decode steps
    of a request placed now: each counts for the share of them it is expected to still
    decode (``Candidate.decode_left``; all of it while that is unmeasured)."""
    left = p.candidate.decode_left
    if not left or steps <= 0.0:
        return p.candidate.context_tokens
    return sum(c * (1.0 if r >= steps else r / steps) for c, r in left)


def _decode_excess_s(
    req: SchedulingRequest,
    p: PodState,
    mean_context: float,
    free: float = 0.0,
    slack: float = 0.0,
    context: float | None = None,
) -> float:
    """Seconds of decode the request would lose on the pod to context beyond the fleet's: its
    expected decode steps (``max_tokens`` x the share of their budgets finished requests
    used; none until that is measured) over the context there (its own prompt included; the
    pod's ``context``, when given, else its context in flight) in excess of the candidates'
    mean context plus ``free`` x the pod's free context plus ``slack`` x the mean pod's TPOT
    in context tokens (free + mean; module docstring)."""
    c = p.candidate
    if not c.budget_share:
        return 0.0
    held = c.context_tokens if context is None else context
    excess = held + float(req.input_tokens) - mean_context
    excess -= free * c.decode_free_tokens
    excess -= slack * (c.decode_free_tokens + mean_context)
    return c.decode_s_per_token * req.max_tokens * c.budget_share * max(0.0, excess)


def _within(costs: list[float], own: list[float], bound: float) -> list[float]:
    """The costs with every pod whose own TTFT is above ``bound`` ranked after every pod
    within it, by own TTFT (the pod of least own TTFT is always within, even when a
    ``hopelessMaxDelay`` below 1 puts the bound under it)."""
    bound = max(bound, min(own))
    return _kept_first(costs, own, [o <= bound for o in own])


def _kept_first(costs: list[float], own: list[float], keep: list[bool]) -> list[float]:
    """The costs with every pod not kept ranked after every kept one, by own TTFT (at least
    one pod is kept)."""
    top = max(c for c, k in zip(costs, keep, strict=True) if k)
    return [c if k else top + 1.0 + o for c, o, k in zip(costs, own, keep, strict=True)]


def _best_tpot_s(cycle: CycleState, pods: list[PodState]) -> float | None:
    """The least TPOT over the pods, in seconds: measured (the pod view's EWMA of finished
    requests) where any pod has one, else predicted when the cycle has predictions."""
    measured = [p.candidate.tpot_s for p in pods if p.candidate.tpot_s]
    if measured:
        return min(measured)
    if cycle.has_predictions:
        tpots = [p.pred_tpot_ms for p in pods if p.pred_tpot_ms is not None and p.pred_tpot_ms > 0]
        if tpots:
            return min(tpots) / 1000.0
    return None


class LatencyCostScorer(Scorer):
    TYPE = "latency-cost-scorer"
    DOC = "Scores pods by own TTFT plus the prefill delay inflicted on requests decoding there."
    RANKS_BY = RANKED_COST_MODEL
    PARAMS = (
        Param("damageWeight", float, 0.05, "Weight of the delay inflicted on each protected "
              "decoding request (seconds of its time per second of own TTFT)", lo=0.0,
              hi=100.0),
        Param("latency", str, "estimated", "Own TTFT: estimated (backlog + service from the "
              "cost model) or predicted (the producer's predicted TTFT, when present)",
              choices=("estimated", "predicted")),
        Param("sacrificeHopeless", bool, True, "A request that can no longer meet its TTFT SLO "
              "goes where it harms the fewest protected decodes"),
        Param("hopelessLatencyWeight", float, 0.01, "Weight of a hopeless request's own TTFT "
              "against the harm it does (higher spreads hopeless requests, bounding their "
              "latency)", lo=0.0, hi=100.0),
        Param("hopelessMaxDelay", float, 0.0, "A hopeless request goes only to pods where its "
              "own TTFT is at most this multiple of its least own TTFT over the pods (bounds "
              "the sacrificed requests' wait; 0: no bound)", lo=0.0, hi=1000.0),
        Param("hopelessMaxWaitS", float, 0.0, "A hopeless request goes only to pods where its "
              "own TTFT is at most this many seconds above its least own TTFT over the pods "
              "(with hopelessMaxDelay: both bounds; 0: no bound)", lo=0.0, hi=100_000.0),
        Param("maxOwnDelayS", float, 0.0, "A request that is not hopeless goes only to pods "
              "where its own TTFT is at most this many seconds above its least own TTFT over "
              "the pods (the others rank after them by own TTFT): bounds what the damage and "
              "decode prices may cost its TTFT (0: no bound)", lo=0.0, hi=100_000.0),
        Param("damageAdapt", bool, False, "Learn the damage weight online instead of "
              "damageWeight: damageKappa x typical own prefill / typical decode time, both "
              "measured from the requests scheduled"),
        Param("damageKappa", float, 5.0, "With damageAdapt: relative worth of a decode's "
              "time against own TTFT, each relative to its typical size", lo=0.0, hi=1000.0),
        Param("damageShare", bool, False, "With damageAdapt: the typical answer length is "
              "max_tokens x the share of their budgets finished requests used (from the 8th), "
              "not max_tokens until 100 answers are measured"),
        Param("decodeWeight", float, 0.0, "Weight of the decode time the request would lose "
              "on a pod holding more context in flight than the fleet's mean (seconds per "
              "second of own TTFT; 0: off)", lo=0.0, hi=100.0),
        Param("decodeFree", float, 0.0, "With decodeWeight: price only the context beyond "
              "the fleet's mean plus this multiple of the pod's free context (where attention "
              "reads take as long as the rest of a step)", lo=0.0, hi=1000.0),
        Param("decodeSlack", float, 0.0, "With decodeWeight: price only the context beyond "
              "the fleet's mean plus this fraction of the mean pod's TPOT (in context "
              "tokens: the free context plus the mean)", lo=0.0, hi=1000.0),
        Param("decodeRate", str, "fixed", "With decodeWeight: the decode seconds are priced "
              "at decodeWeight (fixed) or at decodeWeight x the damage weight (damage: the "
              "exchange rate of decode time against own TTFT the protected decodes get)",
              choices=("fixed", "damage")),
        Param("decodeConfirm", bool, False, "With decodeWeight: price only pods whose "
              "measured TPOT (EWMA of finished requests) also runs more than decodeSlack above "
              "the mean measured TPOT of the pods (a lasting imbalance, not a passing one)"),
        Param("hopelessDecode", bool, True, "With decodeWeight: a hopeless request's own "
              "decode is priced too (false: not; its SLO is lost wherever it goes, and the "
              "harm it does decides where)"),
        Param("decodeDrain", bool, False, "With decodeWeight: a request in flight counts "
              "its context only for the share of the new request's decode steps it is "
              "expected to still decode (the context drains as they finish), on every pod "
              "and in the mean"),
        Param("shortlist", int, 0, "With latency: predicted, the predictions rank only the "
              "this many pods of least estimated cost (the cost model's own TTFT); the others "
              "rank after them by estimated cost (0: the predictions rank every pod)", lo=0,
              hi=10_000),
        Param("wasteWeight", float, 0.0, "A request that is not hopeless: seconds of cost per "
              "second of prefill the pod would spend on it beyond the least over the pods "
              "(service_i - min service: a prompt cached elsewhere, prefilled again here, takes "
              "that much capacity from the requests after it; 0: off)", lo=0.0, hi=100.0),
        Param("reprefillWeight", float, 0.0, "A request that is not hopeless: seconds of cost "
              "per second of prefill the pod would spend on it beyond the least over the pods, "
              "per protected decode there (each of them waits through that extra prefill: a "
              "prompt cached elsewhere re-prefilled beside decodes; 0: off)", lo=0.0, hi=100.0),
        Param("maxCopyS", float, 0.0, "A request that is not hopeless goes only to pods "
              "where the prefill beyond the least over the pods (service_i - min service: a "
              "prompt cached elsewhere, prefilled again) or its own TTFT beyond its least is "
              "at most this many seconds (the others rank after them by own TTFT): the "
              "damage and decode prices may not buy a longer re-prefill (0: no bound)",
              lo=0.0, hi=100_000.0),
        Param("shortlistWithinS", float, 0.0, "With a shortlist, only the shortlisted pods "
              "whose estimated cost is within this many seconds of the least: a near tie "
              "for the cost model's bookkeeping is what the predictions break; a clear "
              "preference stands (0: off; with one pod left, the cost model decides)",
              lo=0.0, hi=3600.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self._ranked_note = f"{name}:ranked"  # cycle note: what ranked, when not the default
        self.w: float = params["damageWeight"]
        self.predicted: bool = params["latency"] == "predicted"
        self.sacrifice: bool = params["sacrificeHopeless"]
        self.hopeless_own: float = params["hopelessLatencyWeight"]
        self.max_delay: float = params["hopelessMaxDelay"]
        self.max_wait_s: float = params["hopelessMaxWaitS"]
        self.max_own_delay_s: float = params["maxOwnDelayS"]
        self.adapt: bool = params["damageAdapt"]
        self.kappa: float = params["damageKappa"]
        self.damage_share: bool = params["damageShare"]
        self.shortlist: int = params["shortlist"]
        self.shortlist_within_s: float = params["shortlistWithinS"]
        self.waste_w: float = params["wasteWeight"]
        self.reprefill_w: float = params["reprefillWeight"]
        self.max_copy_s: float = params["maxCopyS"]
        self.decode_w: float = params["decodeWeight"]
        self.decode_free: float = params["decodeFree"]
        self.decode_slack: float = params["decodeSlack"]
        self.decode_at_damage: bool = params["decodeRate"] == "damage"
        self.decode_confirm: bool = params["decodeConfirm"]
        self.decode_drain: bool = params["decodeDrain"]
        self.hopeless_decode: bool = params["hopelessDecode"]
        # typical sizes, learned from the requests this scorer sees (EWMA, ~1/_ALPHA requests)
        self.typical_service_s: float | None = None  # the request's best prefill estimate
        # its answer length: the EWMA of max_tokens (_budget_tokens), or the pod view's
        # measured answers when the budgets run above _BUDGET_SLACK x them
        self.typical_tokens: float | None = None
        self._budget_tokens: float | None = None
        # the best TPOT over the pods: measured by the pod view from finished requests
        # (Candidate.tpot_s), else predicted when the cycle has predictions, else the prior
        self.typical_tpot_s: float = _PRIOR_TPOT_S

    def damage_weight(self) -> float:
        """The weight of each protected decode's delay: damageWeight, or with damageAdapt
        damageKappa x typical prefill / typical decode time (clamped to a sane range)."""
        if not self.adapt or self.typical_service_s is None or not self.typical_tokens:
            return self.w
        decode_s = self.typical_tokens * self.typical_tpot_s
        return min(_MAX_W, max(_MIN_W, self.kappa * self.typical_service_s / decode_s))

    def _learn(self, cycle: CycleState, pods: list[PodState]) -> None:
        svc = min(p.service_s for p in pods)
        tok = float(cycle.request.max_tokens)
        if self.typical_service_s is None or self._budget_tokens is None:
            self.typical_service_s, self._budget_tokens = svc, tok
        else:
            self.typical_service_s += _ALPHA * (svc - self.typical_service_s)
            self._budget_tokens += _ALPHA * (tok - self._budget_tokens)
        # the clients' max_tokens stand for the answers' length unless they run above twice
        # what the pod view measured of the requests that finished (budgets, not lengths)
        measured = pods[0].candidate.typical_output_tokens
        budget = self._budget_tokens
        share = pods[0].candidate.budget_share  # 1 when budgets are the answers' lengths
        if self.damage_share and share:
            budget *= share
        uninformative = measured is not None and budget > _BUDGET_SLACK * measured
        self.typical_tokens = measured if uninformative else budget
        best = _best_tpot_s(cycle, pods)
        if best is not None:
            self.typical_tpot_s += _ALPHA * (best - self.typical_tpot_s)

    def reads_predictions(self, request: SchedulingRequest) -> bool:
        # a shortlist of one pod leaves the predictions nothing to rank
        return self.predicted and self.shortlist != 1

    def ranked_by(self, cycle: CycleState) -> str | None:
        # shortlistWithinS can leave one pod: then the cost model ranked this decision
        return cycle.notes.get(self._ranked_note) or super().ranked_by(cycle)

    def own_seconds(self, cycle: CycleState, p: PodState) -> float:
        if self.predicted and cycle.has_predictions and p.pred_ttft_ms is not None:
            return p.pred_ttft_ms / 1000.0
        return _estimated_s(p)

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        if not pods:
            return []
        if self.adapt:
            self._learn(cycle, pods)
        w = self.damage_weight()
        own = [self.own_seconds(cycle, p) for p in pods]
        est: list[float] | None = None  # the estimated costs, when a shortlist applies
        if self.shortlist and len(pods) > self.shortlist and self.predicted:
            estimated = [_estimated_s(p) for p in pods]
            if estimated != own:  # predictions present: they rank only the shortlist
                est = self._costs(cycle, pods, estimated, w)
        costs = self._costs(cycle, pods, own, w)
        if est is not None:
            ranked = sorted(range(len(pods)), key=est.__getitem__)[: self.shortlist]
            if self.shortlist_within_s > 0.0:
                bound = est[ranked[0]] + self.shortlist_within_s
                ranked = [i for i in ranked if est[i] <= bound]
            keep = set(ranked)
            if len(keep) == 1:  # nothing for the predictions to rank: the cost model decides
                costs = est
                cycle.notes[self._ranked_note] = RANKED_COST_MODEL
            else:
                top = max(costs[i] for i in keep)
                costs = [c if i in keep else top + 1.0 + est[i] for i, c in enumerate(costs)]
        lo, hi = min(costs), max(costs)
        if hi - lo <= _EPS:
            return [1.0] * len(pods)
        return [(hi - c) / (hi - lo) for c in costs]

    def _confirmed(self, pods: list[PodState]) -> list[bool]:
        """Pods whose measured TPOT runs more than decodeSlack above the mean measured TPOT
        of the pods that have one (none without measurements)."""
        tpots = [p.candidate.tpot_s for p in pods if p.candidate.tpot_s]
        if not tpots:
            return [False] * len(pods)
        bar = (1.0 + self.decode_slack) * sum(tpots) / len(tpots)
        return [bool(p.candidate.tpot_s and p.candidate.tpot_s > bar) for p in pods]

    def _costs(
        self, cycle: CycleState, pods: list[PodState], own: list[float], w: float
    ) -> list[float]:
        """Each pod's cost given the request's own TTFT there (module docstring); notes
        whether the request is hopeless."""
        req = cycle.request
        slo = req.slo_ttft_ms
        hopeless = self.sacrifice and slo is not None and min(own) + req.queued_s > slo / 1000.0
        if hopeless:
            costs = [
                p.candidate.protected_decodes * p.service_s + self.hopeless_own * o
                for p, o in zip(pods, own, strict=True)
            ]
            if self.max_delay > 0 or self.max_wait_s > 0:
                # never more than max_delay x the best own TTFT, nor max_wait_s above it (no
                # pod becomes a sink of ever longer waits)
                best = min(own)
                costs = _within(
                    costs,
                    own,
                    min(
                        self.max_delay * best if self.max_delay > 0 else float("inf"),
                        best + self.max_wait_s if self.max_wait_s > 0 else float("inf"),
                    ),
                )
        else:
            costs = [
                o + w * p.candidate.protected_decodes * p.service_s
                for p, o in zip(pods, own, strict=True)
            ]
            if self.waste_w > 0.0 or self.reprefill_w > 0.0:
                # the prefill spent here beyond the cheapest placement is capacity the
                # requests after it lose (waste) and a stall of every protected decode beside
                # it (reprefill)
                least = min(p.service_s for p in pods)
                costs = [
                    c
                    + (self.waste_w + self.reprefill_w * p.candidate.protected_decodes)
                    * (p.service_s - least)
                    for c, p in zip(costs, pods, strict=True)
                ]
        if self.decode_w > 0.0 and (self.hopeless_decode or not hopeless):
            share = pods[0].candidate.budget_share
            if self.decode_drain and share:
                steps = req.max_tokens * share
                held = [_shared_context(p, steps) for p in pods]
            else:
                held = [p.candidate.context_tokens for p in pods]
            mean_context = sum(held) / len(pods)
            rate = self.decode_w * (w if self.decode_at_damage else 1.0)
            priced = self._confirmed(pods) if self.decode_confirm else [True] * len(pods)
            costs = [
                c
                + rate
                * _decode_excess_s(
                    req, p, mean_context, self.decode_free, self.decode_slack, context
                )
                if ok
                else c
                for c, p, ok, context in zip(costs, pods, priced, held, strict=True)
            ]
        if self.max_own_delay_s > 0 and not hopeless:
            # what the damage and decode prices may cost the request's own TTFT is bounded
            costs = _within(costs, own, min(own) + self.max_own_delay_s)
        if self.max_copy_s > 0 and not hopeless:
            # the prices may not buy a re-prefill longer than max_copy_s: a pod where both
            # the extra prefill and the own TTFT given up exceed it ranks after the others
            least, best = min(p.service_s for p in pods), min(own)
            keep = [
                min(p.service_s - least, o - best) <= self.max_copy_s
                for p, o in zip(pods, own, strict=True)
            ]
            costs = _kept_first(costs, own, keep)
        cycle.notes[self.name] = "hopeless" if hopeless else "normal"
        return costs
