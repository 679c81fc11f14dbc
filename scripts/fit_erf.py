#!/usr/bin/env python3
"""Fits the coefficients of em_erff (src/backends/cpu/ew_math.h) and prints them as C floats.

Usage: python scripts/fit_erf.py   (numpy and scipy, pinned in scripts/requirements-fixtures.txt)

Two near-minimax polynomials, by least squares on a dense grid reweighted towards the largest
errors (Lawson's iteration), their f64 coefficients rounded to f32:
  - |x| < 0.921875: erf(x) = x + x P(x^2), P of degree 6 fitted to erf(x)/x - 1 in x^2;
  - 0.921875 <= |x| < 3.921875: erf(x) = 1 - exp(Q(|x|)), Q of degree 6 fitted to log(erfc(x))
    with the weight erfc(x) (the error this leaves in erf, which is 1 - erfc).
The error of the f32 evaluation over all floats is measured by bench/lab_erf.c.
ew_math.h's values came from this fit with mpmath's erf/erfc as the references; with scipy's
the f32 coefficients are the same but Q's constant term, one f32 ulp away (1.5e-11).
"""
import numpy as np
from scipy.special import erf, erfc

T1, T2 = 0.921875, 3.921875


def lawson(t, f, w, deg, iters=30):
    """Coefficients c (ascending powers of t) near the minimax of w * (sum c_k t^k - f)."""
    V = np.stack([t ** k for k in range(deg + 1)], 1)
    lw = np.ones_like(t)
    for _ in range(iters):
        s = w * np.sqrt(lw)
        c = np.linalg.lstsq(V * s[:, None], f * s, rcond=None)[0]
        e = np.abs((V @ c - f) * w)
        lw = lw * e
        lw /= lw.sum()
    return c, np.max(np.abs((V @ c - f) * w))


def main():
    x = np.linspace(1e-4, T1, 3000)
    cp, ep = lawson(x * x, erf(x) / x - 1, np.ones_like(x), 6)
    a = np.linspace(T1, T2, 4000)
    cq, eq = lawson(a, np.log(erfc(a)), erfc(a), 6)
    for name, c, e in (("P", cp, ep), ("Q", cq, eq)):
        print(f"{name} (fit error {e:.2e}), degree 6 down to 0:")
        print("  " + ", ".join("%.9ef" % float(np.float32(v)) for v in c[::-1]))


if __name__ == "__main__":
    main()
