"""The rational approximation of float32 erf used by the kernels (``stax::erf_float`` in
stax_vec.h): erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], P of degree 5, Q of degree 5 with Q(0) = 1,
fitted for least maximum relative error by linearized least squares with Lawson's reweighting.
Beyond 4, erf rounds to 1 in float32.  Prints the coefficients (float32) and the fit's error.

    python -m experiments.fit_erf
"""
from __future__ import annotations

import math

import numpy as np

X_MAX = 4.0
NUMERATOR_DEGREE = 5
DENOMINATOR_DEGREE = 5


def fit(p_degree: int = NUMERATOR_DEGREE, q_degree: int = DENOMINATOR_DEGREE, points: int = 8000,
        iterations: int = 400) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients of P and Q in powers of x^2 (Q[0] = 1), and the largest relative error on
    the fitting points.  The fit runs in u = x^2 / X_MAX^2, which keeps the system well
    conditioned, and converts back."""
    k = np.arange(points)
    x = np.concatenate([X_MAX * (1 - np.cos(np.pi * (k + 0.5) / points)) / 2, np.linspace(1e-4, X_MAX, points)])
    f = np.array([math.erf(v) for v in x])
    u = x * x / X_MAX ** 2
    denominator = np.ones_like(x)
    weights = np.full_like(x, 1 / len(x))
    best = (math.inf, None)
    for _ in range(iterations):
        # x P(u) - f (Q(u) - 1) = f, scaled towards relative error with the last Q
        system = np.concatenate([x[:, None] * u[:, None] ** np.arange(p_degree + 1),
                                 -f[:, None] * u[:, None] ** np.arange(1, q_degree + 1)], axis=1)
        scale = np.sqrt(weights) / (f * denominator)
        c, *_ = np.linalg.lstsq(system * scale[:, None], f * scale, rcond=None)
        p, q = c[:p_degree + 1], np.concatenate([[1.0], c[p_degree + 1:]])
        denominator = np.polyval(q[::-1], u)
        error = (x * np.polyval(p[::-1], u) / denominator - f) / f
        worst = float(np.abs(error).max())
        if worst < best[0]:
            best = (worst, (p, q))
        weights = weights * np.abs(error)
        weights /= weights.sum()
    worst, (p, q) = best
    return p / X_MAX ** (2 * np.arange(p_degree + 1)), q / X_MAX ** (2 * np.arange(q_degree + 1)), worst


def main() -> None:
    p, q, worst = fit()
    print(f"largest relative error of the fit on [0, {X_MAX}]: {worst:.3g}")
    for name, coeffs in (("P", p), ("Q", q)):
        print(f"{name}: " + ", ".join(f"{float(np.float32(c))!r}f" for c in coeffs))


if __name__ == "__main__":
    main()
