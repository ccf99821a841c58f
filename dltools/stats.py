"""Comparing runs that differ only in their configuration, seed by seed.

Two training runs with the same random seed start from the same network (and, in one process, see
the images in the same order), so the difference between two configurations is measured most
sharply seed by seed: ``a[seed] - b[seed]``. :func:`paired_interval` gives the mean of those
differences and a confidence interval for it (Student's t, as ``scipy.stats.ttest_rel`` uses).
With three seeds the interval is wide: t's 97.5% quantile with 2 degrees of freedom is 4.30.
"""
from collections import namedtuple

import numpy as np
from scipy import optimize, stats


class Interval(namedtuple("Interval", "mean low high n level")):
    """A mean difference and its confidence interval; prints as one line."""
    __slots__ = ()

    def __str__(self):
        return (f"{self.mean:+.3f}, {self.level:.0%} interval [{self.low:+.3f}, {self.high:+.3f}] "
                f"over {self.n} pairs")

    @property
    def excludes_zero(self):
        """True when the interval lies wholly above or wholly below 0."""
        return self.low > 0 or self.high < 0


def paired_interval(a, b, level=0.95):
    """Mean of ``a - b`` over paired runs and its ``level`` confidence interval.

    ``a`` and ``b``: one number per seed, as sequences in the same order or as pandas Series
    indexed by seed (matched by index). Needs at least 2 pairs.

    >>> print(paired_interval([0.86, 0.87, 0.85], [0.82, 0.83, 0.80]))
    +0.043, 95% interval [+0.029, +0.058] over 3 pairs
    >>> paired_interval([0.86, 0.87, 0.85], [0.85, 0.88, 0.84]).excludes_zero
    False
    """
    if hasattr(a, "align") and hasattr(b, "align"):   # pandas: pair by seed
        a, b = a.align(b, join="inner")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError(f"need at least 2 paired values, got {len(d) if d.ndim == 1 else d.shape}")
    mean = d.mean()
    half = stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return Interval(float(mean), float(mean - half), float(mean + half), len(d), level)


def fit_costs(columns, seconds):
    """Non-negative coefficients ``c`` of ``seconds ~ sum_j c[j] * columns[j]``: least squares on
    the *relative* errors, so that short and long timings count alike (scipy's ``nnls``, as
    notebook 03 fits the alpha-beta model: a column of messages and one of bytes give alpha and
    beta). A coefficient the data push below 0 is 0.

    >>> [round(c, 9) for c in fit_costs([[1, 1, 1], [1, 2, 4]], [3.0, 5.0, 9.0])]
    [1.0, 2.0]
    >>> fit_costs([[1, 1], [1, 2]], [1.0, 1.0])[1]   # a flat line: no cost per unit
    0.0
    """
    A = np.asarray(columns, dtype=float).T
    t = np.asarray(seconds, dtype=float)
    coef, _ = optimize.nnls(A / t[:, None], np.ones_like(t))
    return [float(c) for c in coef]
