"""Pickers: order the surviving pods best first (the first is chosen, the rest are the retry
order). Randomness comes from the cycle's rng."""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState
from services.gateway.scheduling.plugin import Picker


class MaxScorePicker(Picker):
    TYPE = "max-score-picker"
    DOC = "Highest combined score first; exact ties broken at random."
    RANKS_BY = None  # follows the scores

    def pick(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        r = cycle.rng.random
        keyed = [(-p.score, r(), k) for k, p in enumerate(pods)]
        keyed.sort()
        return [pods[k] for _, _, k in keyed]


class WeightedRandomPicker(Picker):
    """Weighted reservoir sampling (A-Res): key = U^(1/score), largest key first, so a pod is
    chosen with probability proportional to its score; pods scored <= 0 come last; all <= 0:
    uniform."""

    TYPE = "weighted-random-picker"
    DOC = "Chooses with probability proportional to the score (A-Res); uniform if all <= 0."
    RANKS_BY = None  # follows the scores

    def pick(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        r = cycle.rng.random
        keyed = []
        for k, p in enumerate(pods):
            u = r()
            key = u ** (1.0 / p.score) if p.score > 0 else -1.0 + u  # <= 0 scores: last, random
            keyed.append((-key, k))
        keyed.sort()
        return [pods[k] for _, k in keyed]


class RandomPicker(Picker):
    TYPE = "random-picker"
    DOC = "Uniformly random order (scores ignored)."

    def pick(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        out = list(pods)
        cycle.rng.shuffle(out)
        return out


class RoundRobinPicker(Picker):
    """Kubernetes Service style: rotate through the pods (in candidate order, i.e. by name);
    the counter lives in the plugin instance and advances once per cycle."""

    TYPE = "round-robin-picker"
    DOC = "Rotates through the candidates (ordered by name), one step per request."

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.counter = 0

    def pick(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        n = len(pods)
        start = self.counter % n
        self.counter += 1
        return pods[start:] + pods[:start]
