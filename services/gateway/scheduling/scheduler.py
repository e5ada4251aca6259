"""The scheduler: runs one profile's plugins over the candidates of one request.

Order of a cycle: producer (attach predictions) -> admitters (may shed) -> filters in listed
order -> scorers (weighted sum into each pod's score) -> picker (ranking). Pure and
synchronous: the shell obtains predictions *before* calling :meth:`Scheduler.schedule`, and
only when :meth:`Scheduler.reads_predictions` says a plugin of the profile reads them for
this request; time and randomness are passed in.

The decision's ``path`` (the routing label) names what ranked the pods, from the weighted
scorers' and the picker's ``ranked_by``: ``fallback`` if one of them would have read
predictions that were missing, else ``predicted`` if one read them, else ``cost-model`` if
one ranked by the analytic cost model, else ``heuristic``.

Per-plugin timing is an optional hook (:class:`PluginTimer`); without it no clock is read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.gateway.scheduling.cycle import CycleState, Decision, PodState, SchedulingRequest
from services.gateway.scheduling.plugin import (
    RANKED_COST_MODEL,
    RANKED_FALLBACK,
    RANKED_HEURISTIC,
    RANKED_PREDICTED,
    Admitter,
    Filter,
    Picker,
    Plugin,
    Producer,
    Scorer,
)
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.rows import CandidateRows

PATH_PREDICTED = RANKED_PREDICTED
PATH_COST_MODEL = RANKED_COST_MODEL
PATH_FALLBACK = RANKED_FALLBACK
PATH_HEURISTIC = RANKED_HEURISTIC
PATHS = (PATH_PREDICTED, PATH_COST_MODEL, PATH_HEURISTIC, PATH_FALLBACK)
REASON_NO_PREDICTIONS = "no_predictions"


@dataclass(frozen=True, slots=True)
class PluginTimer:
    """``observe(plugin, seconds)`` after every plugin call, timed with ``clock``."""

    observe: Callable[[Plugin, float], None]
    clock: Callable[[], float] = time.perf_counter


class Scheduler:
    def __init__(
        self,
        profile: str,
        plugins: Sequence[tuple[Plugin, float]],
        timer: PluginTimer | None = None,
    ) -> None:
        self.profile = profile
        self.plugins = [p for p, _ in plugins]
        self.producer: Producer | None = None
        self.admitters: list[Admitter] = []
        self.filters: list[Filter] = []
        self.scorers: list[tuple[Scorer, float]] = []
        picker: Picker | None = None
        for p, weight in plugins:
            if isinstance(p, Producer):
                if self.producer is not None:
                    raise ValueError(f"profile {profile}: more than one producer")
                self.producer = p
            elif isinstance(p, Admitter):
                self.admitters.append(p)
            elif isinstance(p, Filter):
                self.filters.append(p)
            elif isinstance(p, Scorer):
                self.scorers.append((p, weight))
            elif isinstance(p, Picker):
                if picker is not None:
                    raise ValueError(f"profile {profile}: more than one picker")
                picker = p
            else:
                raise ValueError(f"profile {profile}: {p!r} is no known plugin kind")
        if picker is None:
            raise ValueError(f"profile {profile}: no picker")
        self.picker: Picker = picker
        self.timer = timer

    @property
    def predicts(self) -> bool:
        """The profile has a prediction producer: the learning loop serves it (some requests
        may read predictions; see :meth:`reads_predictions`)."""
        return self.producer is not None

    def reads_predictions(self, request: SchedulingRequest) -> bool:
        """Some plugin of the profile reads the predictions for ``request``: only then does
        the shell ask the predictors."""
        if self.producer is None:
            return False
        return any(p.reads_predictions(request) for p in self.plugins if p is not self.producer)

    @property
    def predict_budget_ms(self) -> float | None:
        """The producer's deadline for the prediction call (None: no producer)."""
        return getattr(self.producer, "budget_ms", None)

    def schedule(
        self,
        request: SchedulingRequest,
        rows: CandidateRows,
        predictions: Sequence[Prediction] | None = None,
        *,
        now: float,
        rng: random.Random,
        fallback_reason: str | None = None,
    ) -> Decision:
        """Rank ``rows.candidates`` for ``request``. ``predictions`` (one per candidate, in
        candidate order) or None; ``fallback_reason`` says why they are missing."""
        cands = rows.candidates
        n = len(cands)
        if n == 0:
            raise ValueError("schedule needs at least one candidate")
        if predictions is not None and len(predictions) != n:
            raise ValueError("predictions and candidates differ in length")
        blocks = rows.cached_blocks or [0] * n
        service = rows.service_s or [0.0] * n
        pods = []
        for i, c in enumerate(cands):
            ld = c.load
            pods.append(
                PodState(
                    i, c, rows.prefix_scores[i], blocks[i], c.in_flight,
                    ld.waiting + ld.unseen_requests, ld.running, ld.kv_usage, service[i],
                )
            )  # fmt: skip
        cycle = CycleState(request, pods, now, rng)
        timer = self.timer
        clock = timer.clock if timer else None

        if self.producer is not None:
            if timer:
                t0 = clock()
                self.producer.produce(cycle, predictions)
                timer.observe(self.producer, clock() - t0)
            else:
                self.producer.produce(cycle, predictions)

        for adm in self.admitters:
            if timer:
                t0 = clock()
                verdict = adm.admit(cycle)
                timer.observe(adm, clock() - t0)
            else:
                verdict = adm.admit(cycle)
            if verdict is not None:
                # the admitter decided: shed on the predictions it read
                path, reason = (
                    (PATH_PREDICTED, None)
                    if adm.reads_predictions(request) and cycle.has_predictions
                    else self._ranked_by(cycle, fallback_reason)
                )
                return Decision(
                    self.profile, False, [], [None] * n, path, reason,
                    reject_reason=verdict[0], reject_message=verdict[1], notes=cycle.notes,
                )  # fmt: skip

        alive = pods
        for f in self.filters:
            if timer:
                t0 = clock()
                kept = f.filter(cycle, alive)
                timer.observe(f, clock() - t0)
            else:
                kept = f.filter(cycle, alive)
            if kept:
                alive = kept

        for s, weight in self.scorers:
            if timer:
                t0 = clock()
                values = s.score(cycle, alive)
                timer.observe(s, clock() - t0)
            else:
                values = s.score(cycle, alive)
            if weight:
                for p, v in zip(alive, values, strict=True):
                    p.score += weight * v

        if timer:
            t0 = clock()
            order = self.picker.pick(cycle, alive)
            timer.observe(self.picker, clock() - t0)
        else:
            order = self.picker.pick(cycle, alive)

        path, reason = self._ranked_by(cycle, fallback_reason)
        scores: list[float | None] = [None] * n
        for p in alive:
            scores[p.index] = p.score
        ranked = [p.index for p in order]
        if len(alive) < n:
            survivors = set(ranked)
            ranked.extend(i for i in range(n) if i not in survivors)
        best: PodState = pods[ranked[0]]
        return Decision(
            self.profile, True, ranked, scores, path, reason,
            predicted_ttft_ms=best.pred_ttft_ms, predicted_tpot_ms=best.pred_tpot_ms,
            notes=cycle.notes,
        )  # fmt: skip

    def _ranked_by(self, cycle: CycleState, fallback_reason: str | None) -> tuple[str, str | None]:
        """(path, fallback reason) of the cycle (see the module docstring)."""
        seen = {s.ranked_by(cycle) for s, w in self.scorers if w}
        seen.add(self.picker.ranked_by(cycle))
        if RANKED_FALLBACK in seen:
            return PATH_FALLBACK, fallback_reason or REASON_NO_PREDICTIONS
        for path in (PATH_PREDICTED, PATH_COST_MODEL):
            if path in seen:
                return path, None
        return PATH_HEURISTIC, None
