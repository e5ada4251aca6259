"""Fast batch inference for one served model version.

``Booster.inplace_predict`` spends ~45 us per call in Python (input type dispatch, array
interface and config JSON) before XGBoost's C predictor runs; on a 100-row decision that is
~15% of the work. :class:`CompiledModel` calls the same C entry point
(``XGBoosterPredictFromDense``, which ``inplace_predict`` itself calls for numpy input) with
the configuration prepared once, on contiguous float32 rows. Results are bit-identical to
:meth:`LatencyModel.predict_key` (checked by a probe when a model is compiled; any mismatch
or missing private API falls back to ``predict_key``).

Small batches (a lone routing decision) go to :class:`services.predictor.forest.HeapForest`
instead: both models in one pass of numpy calls, 3-9x faster than XGBoost's per-call cost up
to a few dozen rows (and far less sensitive to cold caches), bit-identical too (the same
probe). The row count up to which it is used follows from the forest's size (trees x depth):
32 rows for two 200-tree depth-6 models, where the two are about even. Measurements:
docs/benchmarks.md ("Hot path").
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from services.predictor.forest import ForestError, HeapForest
from shared.features import FEATURES
from shared.latency_model import LatencyModel, ModelSpec, to_ms

log = logging.getLogger(__name__)

_ALL = tuple(range(len(FEATURES)))
# rows x trees x depth up to which the forest beats XGBoost's fixed per-call cost (measured:
# even at ~40 rows for 2 x 200 trees of depth 6, so 32 rows there)
FOREST_WORK = 76_800
FOREST_MAX_ROWS = 256  # never beyond the inline batch size


def forest_rows(forest: HeapForest) -> int:
    """Batches of at most this many rows go to ``forest``."""
    return max(8, min(FOREST_MAX_ROWS, FOREST_WORK // (forest.n_trees * forest.depth)))


def _probe_rows(forest: HeapForest | None, n: int = 64) -> np.ndarray:
    """Rows to compare fast paths with XGBoost on: uniform values, and values exactly at,
    just below and just above the forest's split points (where a comparison could differ)."""
    rng = np.random.default_rng(0)
    rows = [rng.uniform(0, 1000, (n, len(FEATURES))).astype(np.float32)]
    if forest is not None:
        feat, thr = forest.split_points()
        if len(thr):
            pick = rng.integers(0, len(thr), (3 * n, len(FEATURES)))
            edge = np.empty((3 * n, len(FEATURES)), np.float32)  # neighbours in float32
            for c in range(len(FEATURES)):
                mine = thr[feat == c]
                if not len(mine):
                    edge[:, c] = rng.uniform(0, 1000, 3 * n)
                    continue
                v = mine[pick[:, c] % len(mine)]
                edge[:, c] = np.concatenate([
                    v[:n], np.nextafter(v[n : 2 * n], -np.inf), np.nextafter(v[2 * n :], np.inf)
                ])  # fmt: skip
            rows.append(edge)
    return np.concatenate(rows)


class _Direct:
    """One booster's prediction through the C API (raises if the API is unavailable)."""

    def __init__(self, booster, columns: tuple[int, ...], spec: ModelSpec) -> None:
        from xgboost.core import _LIB, _check_call, c_bst_ulong, make_jcargs

        self.booster = booster  # keeps the handle alive
        self.spec = spec  # its transform and base margin (shared.latency_model.to_ms)
        self.columns = None if tuple(columns) == _ALL else list(columns)
        self._lib, self._check, self._ulong = _LIB, _check_call, c_bst_ulong
        self._args = make_jcargs(
            type=0,
            training=False,
            iteration_begin=0,
            iteration_end=0,
            missing=float("nan"),
            strict_shape=False,
            cache_id=0,
        )

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        x = rows if self.columns is None else rows[:, self.columns]
        x = np.ascontiguousarray(x, dtype=np.float32)
        n, m = x.shape
        iface = b'{"data":[%d,true],"shape":[%d,%d],"typestr":"<f4","version":3}' % (
            x.ctypes.data,
            n,
            m,
        )
        shape = ctypes.POINTER(self._ulong)()
        dims = self._ulong()
        preds = ctypes.POINTER(ctypes.c_float)()
        self._check(
            self._lib.XGBoosterPredictFromDense(
                self.booster.handle,
                iface,
                self._args,
                ctypes.c_void_p(),
                ctypes.byref(shape),
                ctypes.byref(dims),
                ctypes.byref(preds),
            )
        )
        if dims.value != 1 or shape[0] != n:
            raise RuntimeError(f"unexpected prediction shape (dims {dims.value})")
        out = np.ctypeslib.as_array(preds, shape=(n,)).astype(np.float64)  # copies
        return to_ms(out, self.spec, rows)


class CompiledModel:
    """TTFT and TPOT predictions of one version under one objective preference."""

    def __init__(self, model: LatencyModel, prefer: str = "mean") -> None:
        self.model = model
        self.keys = (model.key_for("ttft", prefer), model.key_for("tpot", prefer))
        self.direct = False
        self.forest: HeapForest | None = None
        self.forest_rows = 0
        self._specs = [model.spec(k) for k in self.keys]  # type: ignore[arg-type]
        self._fns = [self._fallback(k) for k in self.keys]
        forest = self._forest()
        probe = _probe_rows(forest)
        want = [model.predict_key(k, probe) for k in self.keys]  # type: ignore[arg-type]
        try:
            fns = [
                _Direct(model.boosters[k], model.columns[k], sp)  # type: ignore[index]
                for k, sp in zip(self.keys, self._specs, strict=True)
            ]
            for k, fn, w in zip(self.keys, fns, want, strict=True):
                if not np.array_equal(fn(probe), w):
                    raise RuntimeError(f"direct prediction of {k} differs")
            self._fns, self.direct = fns, True
        except Exception as e:  # older/newer XGBoost: the public API is always correct
            log.info("using inplace_predict for model %s (%s)", model.version, e)
        if forest is not None:
            got = self._from_forest(forest, probe)
            if all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)):
                self.forest, self.forest_rows = forest, forest_rows(forest)
            else:
                log.warning("forest predictions of model %s differ; using XGBoost", model.version)

    def _forest(self) -> HeapForest | None:
        m = self.model
        try:
            return HeapForest([(m.boosters[k], m.columns[k]) for k in self.keys])  # type: ignore[index]
        except (ForestError, KeyError, ValueError) as e:
            log.info("model %s: no forest (%s)", m.version, e)
            return None

    def _from_forest(self, forest: HeapForest, rows: np.ndarray) -> list[np.ndarray]:
        return [
            to_ms(p.astype(np.float64), sp, rows)
            for p, sp in zip(forest.predict(rows), self._specs, strict=True)
        ]

    def _fallback(self, key):
        return lambda rows: self.model.predict_key(key, rows)

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(rows) == 0:
            return np.zeros(0), np.zeros(0)
        if len(rows) <= self.forest_rows:
            ttft, tpot = self._from_forest(self.forest, rows)  # type: ignore[arg-type]
            return ttft, tpot
        return self._fns[0](rows), self._fns[1](rows)
