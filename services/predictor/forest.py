"""Small-batch tree evaluation: XGBoost's trees as complete binary trees in numpy arrays.

A routing decision over a handful of pods asks for a few rows, and there XGBoost's own
predictor is mostly fixed cost: ~0.1-0.2 ms per call and model whatever the row count, more
when its tree nodes have left the CPU caches between decisions (measured in
docs/benchmarks.md "Hot path"). :class:`HeapForest` holds the trees of several models at once
in heap order (node ``i`` has children ``2i+1`` and ``2i+2``; every tree padded to the depth of
the deepest, a leaf above the last level copied into all the slots below it), with each
split's feature index mapped to the column of the full feature row, so one pass of a few
numpy calls per level evaluates every tree of every model on the full rows.

Results are bit-identical to XGBoost's: a row goes right when ``value >= split`` (XGBoost:
left when ``value < split``), split values and leaves are XGBoost's float32 numbers, and each
model's output is its base score plus the leaves in tree order, summed sequentially in
float32 as XGBoost's CPU predictor does. Rows must be finite (the wire format guarantees it),
so XGBoost's default direction for missing values never applies. Only what this layout
represents exactly is accepted (gbtree, an identity-link regression objective, one target,
numerical splits, depth <= :data:`MAX_DEPTH`); anything else raises :class:`ForestError` and
the caller keeps XGBoost (services/predictor/inference.py, which also checks every model
against XGBoost on probe rows before using it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_DEPTH = 10  # 2**10 slots per tree: beyond that the padded layout wastes too much
# objectives whose prediction is the raw margin (no link function to apply)
IDENTITY_OBJECTIVES = frozenset(
    {"reg:squarederror", "reg:absoluteerror", "reg:quantileerror", "reg:pseudohubererror"}
)


class ForestError(ValueError):
    """The booster uses something :class:`HeapForest` does not represent exactly."""


@dataclass(frozen=True, slots=True)
class _Tree:
    left: list[int]
    right: list[int]
    feature: list[int]  # the full row's column of each node's split
    value: list[float]  # split value (internal node) or leaf value
    depth: int


def _base_score(text: str) -> float:
    """XGBoost 2.x writes ``"5E-1"``, 3.x ``"[5E-1]"`` (one value per target)."""
    values = json.loads(text) if text.lstrip().startswith("[") else [float(text)]
    if len(values) != 1:
        raise ForestError(f"{len(values)} base scores (one target expected)")
    return float(values[0])


def _parse(booster, columns: Sequence[int]) -> tuple[float, list[_Tree]]:
    """The base score and trees of ``booster`` (fed ``row[:, columns]``)."""
    learner = json.loads(bytes(booster.save_raw("json")))["learner"]
    objective = learner["objective"]["name"]
    if objective not in IDENTITY_OBJECTIVES:
        raise ForestError(f"objective {objective} has a link function")
    gb = learner["gradient_booster"]
    if gb.get("name") != "gbtree":
        raise ForestError(f"booster {gb.get('name')} (gbtree expected)")
    params = learner["learner_model_param"]
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) != 1:
        raise ForestError("more than one output")
    base = _base_score(params["base_score"])
    cols = list(columns)
    trees = []
    for t in gb["model"]["trees"]:
        if t.get("categories_nodes"):
            raise ForestError("categorical splits")
        left, right = t["left_children"], t["right_children"]
        split = t["split_indices"]
        if any(split[n] >= len(cols) for n in range(len(left)) if left[n] != -1):
            raise ForestError("a split on a feature the model's columns lack")
        feature = [cols[split[n]] if left[n] != -1 else 0 for n in range(len(left))]
        depth, stack = 0, [(0, 0)]
        while stack:
            n, d = stack.pop()
            if left[n] == -1:
                depth = max(depth, d)
            else:
                stack += [(left[n], d + 1), (right[n], d + 1)]
        trees.append(_Tree(left, right, feature, t["split_conditions"], depth))
    return base, trees


class HeapForest:
    """The trees of ``models`` (``(booster, columns)`` pairs) for one-pass evaluation on full
    feature rows; :meth:`predict` returns one float32 array per model."""

    def __init__(self, models: Sequence[tuple[object, Sequence[int]]]) -> None:
        parsed = [_parse(b, cols) for b, cols in models]
        trees = [t for _, ts in parsed for t in ts]
        if not trees:
            raise ForestError("no trees")
        depth = max(1, max(t.depth for t in trees))
        if depth > MAX_DEPTH:
            raise ForestError(f"depth {depth} > {MAX_DEPTH}")
        n_inner, n_leaf, n_trees = (1 << depth) - 1, 1 << depth, len(trees)
        feat = np.zeros((n_trees, n_inner), np.intp)
        thr = np.full((n_trees, n_inner), np.inf, np.float32)  # padding: always go left
        leaf = np.zeros((n_trees, n_leaf), np.float32)
        for ti, t in enumerate(trees):
            stack = [(0, 0, 0)]  # (node, heap slot, level)
            while stack:
                n, h, lvl = stack.pop()
                if t.left[n] == -1:
                    span = 1 << (depth - lvl)
                    first = (h - ((1 << lvl) - 1)) * span  # leftmost last-level slot below h
                    leaf[ti, first : first + span] = np.float32(t.value[n])
                    continue
                feat[ti, h] = t.feature[n]
                thr[ti, h] = np.float32(t.value[n])
                stack += [(t.left[n], 2 * h + 1, lvl + 1), (t.right[n], 2 * h + 2, lvl + 1)]
        self.depth = depth
        self.n_trees = n_trees
        self.n_features = max((f for t in trees for f in t.feature), default=0) + 1
        self._feat, self._thr, self._leaf = feat.ravel(), thr.ravel(), leaf.ravel()
        tree = np.arange(n_trees, dtype=np.intp)[:, None]
        self._root = tree * n_inner  # each tree's first slot in the flat arrays
        self._child = 1 - tree * n_inner  # child of g: 2g + this + (went right)
        self._to_leaf = tree - n_inner  # flat leaf of the slot g reached: g + this
        self._bases = [np.float32(base) for base, _ in parsed]
        bounds = np.cumsum([0] + [len(ts) for _, ts in parsed])
        self._ranges = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))

    def predict(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each model's float32 predictions for ``rows`` (n x features, finite)."""
        x = np.ascontiguousarray(rows, dtype=np.float32)
        n, width = x.shape
        if width < self.n_features:
            raise ValueError(f"rows have {width} columns, the trees use {self.n_features}")
        flat = x.ravel()
        row_start = np.arange(0, n * width, width, dtype=np.intp)
        g = np.repeat(self._root, n, axis=1)  # trees x rows: the slot each row is at
        for _ in range(self.depth):
            f = self._feat.take(g)
            f += row_start
            right = flat.take(f) >= self._thr.take(g)
            g *= 2
            g += self._child
            g += right
        g += self._to_leaf
        leaves = self._leaf.take(g)
        out = []
        for base, (a, b) in zip(self._bases, self._ranges, strict=True):
            acc = np.empty((b - a + 1, n), np.float32)
            acc[0] = base
            acc[1:] = leaves[a:b]
            out.append(np.cumsum(acc, axis=0, dtype=np.float32)[-1])  # sequential, tree order
        return out

    def split_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(full-row column, split value) of every real split (padding excluded)."""
        real = np.isfinite(self._thr)
        return self._feat[real], self._thr[real]
