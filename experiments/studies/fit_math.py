"""The polynomial and rational approximations of the kernels' inline float32 exp and erf
(``stax::exp_reduce`` and ``stax::erf_float`` in stax_vec.h), fitted for least maximum relative
error by least squares with Lawson's reweighting.  Prints the coefficients (float32) and each
fit's error; ``experiments/studies/check_math.py`` then bounds the float32 functions on every input.

- exp(r) ~ 1 + r P(r) on |r| <= ln(2)/2 (the range left by the Cody-Waite reduction), P of
  degree 4, so a degree-5 polynomial: five fused multiply-adds.
- erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], P and Q of degree 5 with Q(0) = 1; beyond 4, erf rounds
  to 1 in float32.

    python -m experiments.studies.fit_math
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

EXP_DEGREE = 5
ERF_X_MAX = 4.0
ERF_NUMERATOR_DEGREE = 5
ERF_DENOMINATOR_DEGREE = 5


def chebyshev_points(lo: float, hi: float, count: int) -> np.ndarray:
    k = np.arange(count)
    return lo + (hi - lo) * (1 - np.cos(np.pi * (k + 0.5) / count)) / 2


def lawson(solve: Callable[[np.ndarray], tuple[object, np.ndarray]], points: int,
           iterations: int) -> tuple[object, float]:
    """Lawson's algorithm: ``solve(weights)`` fits by weighted least squares and returns the
    coefficients and the relative error at every point; each round multiplies the weights by
    the error, which drives the fit towards least maximum error.  Returns the best round's
    coefficients and its largest error."""
    weights = np.full(points, 1 / points)
    best = (None, math.inf)
    for _ in range(iterations):
        coefficients, error = solve(weights)
        worst = float(np.abs(error).max())
        if worst < best[1]:
            best = (coefficients, worst)
        weights = weights * np.abs(error)
        weights /= weights.sum()
    return best


def fit_exp(degree: int = EXP_DEGREE, points: int = 6000, iterations: int = 300) -> tuple[np.ndarray, float]:
    """Coefficients c_1 .. c_degree of exp(r) ~ 1 + c_1 r + ... + c_degree r^degree on
    |r| <= ln(2)/2, and the fit's largest relative error."""
    half = math.log(2) / 2
    r = chebyshev_points(-half, half, points)
    f = np.exp(r)
    powers = r[:, None] ** np.arange(1, degree + 1)

    def solve(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scale = np.sqrt(weights) / f
        c, *_ = np.linalg.lstsq(powers * scale[:, None], (f - 1) * scale, rcond=None)
        return c, (1 + powers @ c - f) / f

    return lawson(solve, points, iterations)


def fit_erf(p_degree: int = ERF_NUMERATOR_DEGREE, q_degree: int = ERF_DENOMINATOR_DEGREE, points: int = 8000,
            iterations: int = 400) -> tuple[tuple[np.ndarray, np.ndarray], float]:
    """Coefficients of P and Q in powers of x^2 (Q[0] = 1), and the largest relative error on
    the fitting points.  The fit runs in u = x^2 / ERF_X_MAX^2, which keeps the system well
    conditioned, and converts back."""
    x = np.concatenate([chebyshev_points(0, ERF_X_MAX, points), np.linspace(1e-4, ERF_X_MAX, points)])
    f = np.array([math.erf(v) for v in x])
    u = x * x / ERF_X_MAX ** 2
    denominator = np.ones_like(x)

    def solve(weights: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        nonlocal denominator
        # x P(u) - f (Q(u) - 1) = f, scaled towards relative error with the last Q
        system = np.concatenate([x[:, None] * u[:, None] ** np.arange(p_degree + 1),
                                 -f[:, None] * u[:, None] ** np.arange(1, q_degree + 1)], axis=1)
        scale = np.sqrt(weights) / (f * denominator)
        c, *_ = np.linalg.lstsq(system * scale[:, None], f * scale, rcond=None)
        p, q = c[:p_degree + 1], np.concatenate([[1.0], c[p_degree + 1:]])
        denominator = np.polyval(q[::-1], u)
        return (p, q), (x * np.polyval(p[::-1], u) / denominator - f) / f

    (p, q), worst = lawson(solve, len(x), iterations)
    return (p / ERF_X_MAX ** (2 * np.arange(p_degree + 1)), q / ERF_X_MAX ** (2 * np.arange(q_degree + 1))), worst


def float32_list(coefficients: np.ndarray) -> str:
    return ", ".join(f"{float(np.float32(c))!r}f" for c in coefficients)


def main() -> None:
    c, worst = fit_exp()
    print(f"exp: largest relative error of the fit on |r| <= ln(2)/2: {worst:.3g}")
    print(f"c_1 .. c_{len(c)}: {float32_list(c)}")
    (p, q), worst = fit_erf()
    print(f"erf: largest relative error of the fit on [0, {ERF_X_MAX}]: {worst:.3g}")
    print(f"P: {float32_list(p)}")
    print(f"Q: {float32_list(q)}")


if __name__ == "__main__":
    main()
