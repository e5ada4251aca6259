"""Plugin kinds and the one explicit registry.

Every plugin is a small class with a kebab-case ``TYPE``, a ``KIND``, typed ``PARAMS`` and one
method for its kind:

- producer: ``produce(cycle, predictions)`` attaches data to every pod state (runs first; the
  shell obtained ``predictions`` before the cycle when some plugin of the profile reads them
  for this request, see below),
- admitter: ``admit(cycle)`` returns None (admit) or ``(reason, message)`` (shed),
- filter: ``filter(cycle, pods)`` returns the pods to keep (an empty result keeps the input),
- scorer: ``score(cycle, pods)`` returns one score per pod (higher is better); the profile
  adds ``weight * score`` into each pod's ``score``,
- picker: ``pick(cycle, pods)`` returns the pods best first (the first is chosen, the rest
  are the retry order).

Every plugin declares whether it reads the predictions (``reads_predictions(request)``,
default ``READS_PREDICTIONS``): the shell asks the predictors only when one of the profile's
plugins does, for this request. Scorers and pickers also declare what they rank by
(``RANKS_BY``: ``predicted`` for the ones that read predictions, ``cost-model`` for the
analytic estimate, ``heuristic``; None for a picker that only follows the scores), so the
routing label (``x-headroom-routing``) names what actually ranked the pods.

Plugins are pure: time and randomness come from the cycle. A plugin instance may keep state
across cycles (the round-robin counter); each Scheduler builds its own instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from services.gateway.scheduling.cycle import CycleState, PodState, SchedulingRequest
from services.gateway.scheduling.params import ConfigError, Param, parse_params
from services.gateway.scheduling.prediction import Prediction

KINDS = ("producer", "admitter", "filter", "scorer", "picker")

# What ranked the pods of one decision (the routing label, x-headroom-routing):
RANKED_PREDICTED = "predicted"  # a scorer read the learned predictions
RANKED_COST_MODEL = "cost-model"  # the analytic cost model (pod view's prefill estimates)
RANKED_HEURISTIC = "heuristic"  # load / prefix / request-count heuristics, random, round robin
RANKED_FALLBACK = "fallback"  # a scorer would have read predictions, but there were none


class Plugin:
    TYPE: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    DOC: ClassVar[str] = ""
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    READS_PREDICTIONS: ClassVar[bool] = False
    # scorers and pickers: what they rank by when they do not read predictions (None: a
    # picker that follows the scores)
    RANKS_BY: ClassVar[str | None] = RANKED_HEURISTIC

    def reads_predictions(self, request: SchedulingRequest) -> bool:
        """Whether this plugin uses the predictions for ``request`` (the shell asks the
        predictors only if some plugin of the profile does)."""
        return self.READS_PREDICTIONS

    def ranked_by(self, cycle: CycleState) -> str | None:
        """What this scorer or picker ranked by in ``cycle`` (see the module docstring)."""
        if self.reads_predictions(cycle.request):
            return RANKED_PREDICTED if cycle.has_predictions else RANKED_FALLBACK
        return self.RANKS_BY

    def __init__(self, name: str, params: Mapping[str, Any]) -> None:
        self.name = name
        self.params = dict(params)

    @classmethod
    def create(cls, name: str | None = None, **params: Any) -> Plugin:
        """Build with parameters checked exactly as the config loader does (tests, the lab)."""
        n = name or cls.TYPE
        return cls(n, parse_params(cls.TYPE, n, cls.PARAMS, params))

    def __repr__(self) -> str:
        return f"<{self.TYPE} {self.name!r}>"


class Producer(Plugin):
    KIND = "producer"

    def produce(self, cycle: CycleState, predictions: Sequence[Prediction] | None) -> None:
        raise NotImplementedError


class Admitter(Plugin):
    KIND = "admitter"

    def admit(self, cycle: CycleState) -> tuple[str, str] | None:
        raise NotImplementedError


class Filter(Plugin):
    KIND = "filter"

    def filter(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        raise NotImplementedError


class Scorer(Plugin):
    KIND = "scorer"

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        raise NotImplementedError


class Picker(Plugin):
    KIND = "picker"

    def pick(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        raise NotImplementedError


class Registry:
    """Plugin type name -> class. Registration is explicit (see plugins/__init__.py)."""

    def __init__(self, classes: Iterable[type[Plugin]] = ()) -> None:
        self._classes: dict[str, type[Plugin]] = {}
        for c in classes:
            self.register(c)

    def register(self, cls: type[Plugin]) -> None:
        t = cls.TYPE
        if not t or t != t.lower() or " " in t or "_" in t:
            raise ValueError(f"plugin type {t!r} must be kebab-case")
        if cls.KIND not in KINDS:
            raise ValueError(f"plugin {t}: unknown kind {cls.KIND!r}")
        if t in self._classes:
            raise ValueError(f"plugin type {t!r} registered twice")
        self._classes[t] = cls

    def get(self, type_name: str) -> type[Plugin]:
        try:
            return self._classes[type_name]
        except KeyError:
            raise ConfigError(
                f"unknown plugin type '{type_name}' (known: {', '.join(sorted(self._classes))})"
            ) from None

    def types(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, type_name: str) -> bool:
        return type_name in self._classes
