"""How long a pod needs to prefill a prompt, learned online from the gateway's own traffic.

A model server prefills ``u`` uncached prompt tokens after ``c`` cached ones in roughly

    t(u, c) = a + b * u + d * u * (c + u / 2)

seconds: a fixed cost per request (HTTP, tokenizer, scheduling), the linear layers (per new
token) and attention (every new token attends to the cached context and, on average, half
of its own chunk). The gateway observes ``t`` directly whenever a request is dispatched to a
pod with no prefill work ahead of it: its time to first token *is* its own prefill. Those
observations are fitted by exponentially weighted least squares on relative errors (each
observation weighted by 1/t^2, so a 50 ms prefill counts as much as a 50 s one), shrunk
towards a prior so that the first few samples cannot produce a wild model, and the
coefficients are kept non-negative.

The estimate drives what the XGBoost predictions cannot give per pod and per queued request
cheaply: the seconds of prefill already queued on each pod (its *backlog*), the service
time that orders the gateway's queue (services/gateway/scheduling/flow.py), and the delay a
new prefill inflicts on the requests decoding on a pod (latency-cost-scorer).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

# H100-class priors (docs/scheduling.md): 30 ms per request, ~35k tokens/s of linear layers,
# attention 2.6 ns per (new token x context token). Replaced by what the pods show within a
# few dozen samples; the prior only keeps the first fits sane.
PRIOR = (0.030, 2.8e-5, 2.6e-9)
_SCALE = (1.0, 1e4, 1e8)  # typical feature sizes, so the normal equations are well scaled


@dataclass(frozen=True, slots=True)
class CostModelConfig:
    prior: tuple[float, float, float] = PRIOR
    prior_weight: float = 1.0  # the prior counts as this many observations
    decay: float = 0.999  # weight of the past per observation (~1,000-sample memory)
    min_seconds: float = 1e-4  # observations below this (clock noise) are ignored
    max_seconds: float = 600.0  # and above this (a stalled pod) too


@dataclass(slots=True)
class PrefillWork:
    """Prefills queued somewhere, as the sums of the model's terms over them (requests,
    uncached tokens, token pairs ``u * (c + u / 2)``): :meth:`PrefillCostModel.price` turns
    them into seconds at the model's *current* coefficients, so a backlog kept this way is
    re-priced as the model learns instead of staying at what it was thought to cost at
    dispatch (the estimate is linear in the coefficients)."""

    requests: float = 0.0
    tokens: float = 0.0
    pairs: float = 0.0

    def add(self, uncached: float, cached: float = 0.0, sign: float = 1.0) -> None:
        """Add one prefill (``sign`` -1: remove it)."""
        u = max(0.0, uncached)
        self.requests += sign
        self.tokens += sign * u
        self.pairs += sign * u * (max(0.0, cached) + u / 2.0)


class PrefillCostModel:
    """Online fit of ``t(u, c)``; see the module docstring."""

    def __init__(self, config: CostModelConfig | None = None) -> None:
        self.config = config or CostModelConfig()
        self.observations = 0
        w = self.config.prior_weight
        p = [x / s for x, s in zip(self.config.prior, _SCALE, strict=True)]
        # normal equations of the scaled problem: A theta = y, seeded with the prior as w
        # pseudo-observations of each coefficient (ridge towards the prior)
        self._a = [[w if i == j else 0.0 for j in range(3)] for i in range(3)]
        self._y = [w * p[i] for i in range(3)]
        self._theta = tuple(self.config.prior)

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(a seconds, b seconds per token, d seconds per token pair)."""
        return self._theta

    @staticmethod
    def _x(uncached: float, cached: float) -> tuple[float, float, float]:
        u = max(0.0, uncached)
        c = max(0.0, cached)
        return (1.0, u / _SCALE[1], u * (c + u / 2.0) / _SCALE[2])

    def for_class(self, hardware_class: str | None) -> PrefillCostModel:
        """The model for pods of ``hardware_class``: this one (a single model serves every
        class; :class:`ClassCostModels` keeps one per class)."""
        return self

    def estimate(self, uncached: float, cached: float = 0.0) -> float:
        """Seconds to prefill ``uncached`` tokens after ``cached`` ones on an idle pod."""
        a, b, d = self._theta
        u = max(0.0, uncached)
        return a + b * u + d * u * (max(0.0, cached) + u / 2.0)

    def price(self, work: PrefillWork) -> float:
        """Seconds to prefill all of ``work`` one after another on an idle pod: the sum of
        :meth:`estimate` over its prefills, at the current coefficients."""
        a, b, d = self._theta
        return max(0.0, a * work.requests + b * work.tokens + d * work.pairs)

    def observe(self, uncached: float, cached: float, seconds: float) -> bool:
        """Learn from one request's measured prefill (its TTFT on an idle pod); returns
        whether the observation was used."""
        cfg = self.config
        if not (cfg.min_seconds <= seconds <= cfg.max_seconds):
            return False
        x = self._x(uncached, cached)
        lam = cfg.decay
        w = cfg.prior_weight * (1.0 - lam)  # keeps the prior's pull from fading away
        p = [v / s for v, s in zip(cfg.prior, _SCALE, strict=True)]
        r = 1.0 / (seconds * seconds)  # relative least squares: 50 ms and 50 s count alike
        for i in range(3):
            for j in range(3):
                self._a[i][j] = lam * self._a[i][j] + r * x[i] * x[j] + (w if i == j else 0.0)
            self._y[i] = lam * self._y[i] + r * x[i] * seconds + w * p[i]
        self.observations += 1
        self._theta = self._solve()
        return True

    def _solve(self) -> tuple[float, float, float]:
        """Least squares with non-negative coefficients: drop a coefficient that comes out
        negative (it is 0) and solve for the rest, until all are >= 0."""
        free = [0, 1, 2]
        while free:
            sol = _solve_subset(self._a, self._y, free)
            if sol is None:
                break
            neg = [k for k, v in zip(free, sol, strict=True) if v < 0]
            if not neg:
                theta = [0.0, 0.0, 0.0]
                for k, v in zip(free, sol, strict=True):
                    theta[k] = v * (1.0 / _SCALE[k])
                return (theta[0], theta[1], theta[2])
            free = [k for k in free if k not in neg]
        return self._theta


M = TypeVar("M")


class PerClass(Generic[M]):
    """One model per hardware class (``PodRecord.hardware_class``), made on first use; pods
    of unknown class (None) share one."""

    def __init__(self, make: Callable[[], M]) -> None:
        self._make = make
        self._models: dict[str | None, M] = {}

    def for_class(self, hardware_class: str | None) -> M:
        m = self._models.get(hardware_class)
        if m is None:
            m = self._models[hardware_class] = self._make()
        return m

    @property
    def classes(self) -> dict[str | None, M]:
        return dict(self._models)


class ClassCostModels(PerClass[PrefillCostModel]):
    """One :class:`PrefillCostModel` per hardware class (``PodRecord.hardware_class``): an
    A100 prefills the same prompt in about twice an H100's time, so a mixed pool needs one
    fit per class, each learned from its own pods' idle-pod first tokens. A class's model is
    created (at the prior) when its first pod is seen; pods of unknown class (None) share
    one model, so a pool without class labels behaves exactly as with a single model.

    Keeps :class:`PrefillCostModel`'s interface for callers that do not know the class
    (``estimate``, ``observe``, ``coefficients``: the unknown class's model;
    ``observations``: all classes')."""

    def __init__(self, config: CostModelConfig | None = None) -> None:
        self.config = config or CostModelConfig()
        super().__init__(lambda: PrefillCostModel(self.config))

    @property
    def observations(self) -> int:
        return sum(m.observations for m in self._models.values())

    @property
    def coefficients(self) -> tuple[float, float, float]:
        return self.for_class(None).coefficients

    def estimate(self, uncached: float, cached: float = 0.0) -> float:
        return self.for_class(None).estimate(uncached, cached)

    def observe(self, uncached: float, cached: float, seconds: float) -> bool:
        return self.for_class(None).observe(uncached, cached, seconds)


CostModel = PrefillCostModel | ClassCostModels


# --------------------------------------------------------------------------------------
# Decode
# --------------------------------------------------------------------------------------
# H100-class prior of the decode slope: an 8B GQA model keeps 128 KiB of KV cache per token
# (32 layers x 8 KV heads x 128 x 2 x bf16), read once per decode step at ~2.2 TB/s of
# effective bandwidth: 6e-8 s per context token per step. Replaced by what the pods show.
DECODE_PRIOR_S_PER_TOKEN = 6e-8


@dataclass(frozen=True, slots=True)
class DecodeModelConfig:
    prior: float = DECODE_PRIOR_S_PER_TOKEN
    # the prior slope counts as this many observations whose contexts spread by 10k tokens
    prior_weight: float = 20.0
    decay: float = 0.995  # weight of the past per observation (~200 finished requests)
    max_seconds: float = 10.0  # a TPOT above this (a stalled stream) is not an observation


class DecodeCostModel:
    """How a pod's decode steps slow down with the context decoding there, learned online.

    Every decode step reads the KV cache of every sequence in the batch (vLLM's paged
    attention reads a shared prefix once per sequence), so a request's time per output token
    grows with the prompt tokens decoding beside it::

        tpot = e + k * context

    The gateway knows the prompt tokens of its own requests in flight on each pod; when a
    request finishes it reports its measured TPOT against the pod's mean context over its
    decode (the mean of the context at its first token and at its end), and ``k`` (seconds
    per context token per step) is the slope of an exponentially weighted least-squares
    line through those points, shrunk towards a prior (an H100-class slope, counting as
    ``prior_weight`` observations spread over 10k tokens: a ridge on the slope), clamped at
    0. Before any observation it is the prior: a pool that piles long contexts onto a few
    pods in its first seconds is what it must prevent. The intercept ``e`` (the weights, the
    batch, prefill chunks beside the decode) only sets :attr:`free_tokens`, the unit of the
    scorer's ``decodeFree`` (how far beyond the fleet's mean context a pod may go before its
    context is priced); the price itself is what the context adds.

    Pure: no I/O, no clock."""

    def __init__(self, config: DecodeModelConfig | None = None) -> None:
        self.config = config or DecodeModelConfig()
        self.observations = 0
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def observe(self, context_tokens: float, tpot_s: float) -> bool:
        """One finished request: its pod's mean context (tokens) and its measured TPOT (s).
        Returns whether it was used."""
        if not (context_tokens >= 0.0 and 0.0 < tpot_s <= self.config.max_seconds):
            return False  # also rejects NaN
        d = self.config.decay
        x = context_tokens / 1e4  # scaled so the sums stay well conditioned
        self._w = d * self._w + 1.0
        self._x = d * self._x + x
        self._y = d * self._y + tpot_s
        self._xx = d * self._xx + x * x
        self._xy = d * self._xy + x * tpot_s
        self.observations += 1
        return True

    @property
    def spread_tokens(self) -> float:
        """Weighted standard deviation of the contexts observed (tokens)."""
        if self._w <= 0.0:
            return 0.0
        var = self._xx / self._w - (self._x / self._w) ** 2
        return math.sqrt(max(0.0, var)) * 1e4

    @property
    def seconds_per_token(self) -> float:
        """``k``: decode seconds per step per context token (the prior until learned)."""
        c = self.config
        sxx = sxy = 0.0  # centred sums (x in 1e4 tokens)
        if self._w > 0.0:
            sxx = max(0.0, self._xx - self._x * self._x / self._w)
            sxy = self._xy - self._x * self._y / self._w
        prior = c.prior * 1e4  # seconds per 1e4 tokens
        slope = (sxy + c.prior_weight * prior) / (sxx + c.prior_weight)
        return max(0.0, slope) / 1e4

    def _base(self, k: float) -> float:
        if self._w <= 0.0:
            return 0.0
        return max(0.0, (self._y - k * 1e4 * self._x) / self._w)

    @property
    def base_seconds(self) -> float:
        """``e``: the step time without context (weights, batch, prefill chunks beside the
        decode), on the line of slope :attr:`seconds_per_token` through the weighted mean
        observation; 0 before any observation."""
        return self._base(self.seconds_per_token)

    def line(self) -> tuple[float, float]:
        """(:attr:`seconds_per_token`, :attr:`free_tokens`), the slope computed once."""
        k = self.seconds_per_token
        return k, (self._base(k) / k if k > 0.0 else 0.0)

    @property
    def free_tokens(self) -> float:
        """Context at which attention reads take as long as the rest of the step (``e / k``;
        0 when nothing is known): below it the context hardly sets the pod's TPOT."""
        return self.line()[1]


class ClassDecodeModels(PerClass[DecodeCostModel]):
    """One :class:`DecodeCostModel` per hardware class (an A100 reads its KV cache at ~60%
    of an H100's bandwidth); pods of unknown class (None) share one."""

    def __init__(self, config: DecodeModelConfig | None = None) -> None:
        self.config = config or DecodeModelConfig()
        super().__init__(lambda: DecodeCostModel(self.config))


def _solve_subset(a: list[list[float]], y: list[float], idx: list[int]) -> list[float] | None:
    """Solve the normal equations restricted to the coefficients ``idx`` (Gaussian
    elimination with partial pivoting); None when singular."""
    n = len(idx)
    m = [[a[i][j] for j in idx] + [y[i]] for i in idx]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    return [m[i][n] / m[i][i] for i in range(n)]
