"""Small exact fits on a handful of columns: non-negative least squares by trying every support, and R^2."""

from __future__ import annotations

import itertools

import numpy as np


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||x c - y|| over c >= 0, exactly, by trying every support (x has a handful of columns)."""
    n = x.shape[1]
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    best, best_res = np.zeros(n), float(np.sum(y**2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = xs[:, cols]
            if np.linalg.matrix_rank(sub) < k:
                continue
            c, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(c < 0):
                continue
            res = float(np.sum((sub @ c - y) ** 2))
            if res < best_res - 1e-12 * max(1.0, best_res):
                best, best_res = np.zeros(n), res
                best[list(cols)] = c
    return best / scale


def r_squared(y: np.ndarray, fitted: np.ndarray) -> float | None:
    if len(y) < 2:
        return None
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - fitted) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else None
    return 1.0 - ss_res / ss_tot


__all__ = ["nnls", "r_squared"]
