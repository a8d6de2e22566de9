"""Small exact fits: non-negative least squares by trying every support (a handful of columns) or by Lawson and
Hanson's active set (a dozen), the standard errors of a least-squares fit, and R^2."""

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


def nnls_active_set(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||x c - y|| over c >= 0 by Lawson and Hanson's active-set method (columns scaled to unit norm first);
    deterministic, exact up to rounding for full-rank x."""
    m, n = x.shape
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    tol = 10 * np.finfo(float).eps * max(m, n) * max(1.0, float(np.abs(xs).sum(axis=0).max()))
    free, c = np.zeros(n, dtype=bool), np.zeros(n)
    for _ in range(3 * n + 3):
        grad = xs.T @ (y - xs @ c)
        if free.all() or grad[~free].max() <= tol:
            break
        free[int(np.argmax(np.where(free, -np.inf, grad)))] = True
        while True:
            z = np.zeros(n)
            z[free] = np.linalg.lstsq(xs[:, free], y, rcond=None)[0]
            if np.all(z[free] > tol):
                break
            step = free & (z <= tol)
            alpha = float(np.min(c[step] / np.maximum(c[step] - z[step], 1e-300)))
            c = c + alpha * (z - c)
            free &= c > tol
            c[~free] = 0.0
        c = z
    return c / scale


def standard_errors(x: np.ndarray, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Each coefficient's standard error under least squares: sqrt(diag(s^2 (x'x)^-1)), s^2 the residuals' sum of
    squares over the degrees of freedom (rows - columns; needs more rows than columns and full column rank)."""
    m, n = x.shape
    res = y - x @ c
    s2 = float(res @ res) / (m - n)
    return np.sqrt(np.maximum(np.diag(s2 * np.linalg.inv(x.T @ x)), 0.0))


def r_squared(y: np.ndarray, fitted: np.ndarray) -> float | None:
    if len(y) < 2:
        return None
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - fitted) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else None
    return 1.0 - ss_res / ss_tot


__all__ = ["nnls", "nnls_active_set", "r_squared", "standard_errors"]
