"""Fast batch inference for one served model version.

``Booster.inplace_predict`` spends ~45 us per call in Python (input type dispatch, array
interface and config JSON) before XGBoost's C predictor runs; on a 100-row decision that is
~15% of the work. :class:`CompiledModel` calls the same C entry point
(``XGBoosterPredictFromDense``, which ``inplace_predict`` itself calls for numpy input) with
the configuration prepared once, on contiguous float32 rows. Results are bit-identical to
:meth:`LatencyModel.predict_key` (checked by a probe when a model is compiled; any mismatch
or missing private API falls back to ``predict_key``). Measurements: docs/benchmarks.md.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from shared.features import FEATURES
from shared.latency_model import LatencyModel, to_ms

log = logging.getLogger(__name__)

_ALL = tuple(range(len(FEATURES)))


class _Direct:
    """One booster's prediction through the C API (raises if the API is unavailable)."""

    def __init__(self, booster, columns: tuple[int, ...], log: bool = False) -> None:
        from xgboost.core import _LIB, _check_call, c_bst_ulong, make_jcargs

        self.booster = booster  # keeps the handle alive
        self.log = log  # the model's label transform (shared.latency_model.to_ms)
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
        return to_ms(out, self.log)


class CompiledModel:
    """TTFT and TPOT predictions of one version under one objective preference."""

    def __init__(self, model: LatencyModel, prefer: str = "mean") -> None:
        self.model = model
        self.keys = (model.key_for("ttft", prefer), model.key_for("tpot", prefer))
        self.direct = False
        self._fns = [self._fallback(k) for k in self.keys]
        try:
            fns = [
                _Direct(model.boosters[k], model.columns[k], model.spec(k).log)  # type: ignore[arg-type,index]
                for k in self.keys
            ]
            probe = np.random.default_rng(0).uniform(0, 1000, (64, len(FEATURES)))
            probe = probe.astype(np.float32)
            for k, fn in zip(self.keys, fns, strict=True):
                if not np.array_equal(fn(probe), model.predict_key(k, probe)):  # type: ignore[arg-type]
                    raise RuntimeError(f"direct prediction of {k} differs")
            self._fns, self.direct = fns, True
        except Exception as e:  # older/newer XGBoost: the public API is always correct
            log.info("using inplace_predict for model %s (%s)", model.version, e)

    def _fallback(self, key):
        return lambda rows: self.model.predict_key(key, rows)

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(rows) == 0:
            return np.zeros(0), np.zeros(0)
        return self._fns[0](rows), self._fns[1](rows)
