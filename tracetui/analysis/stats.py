"""Statistics on step times, with no knowledge of runs or rows: quantiles and the median, the
median's intervals (bootstrap and order statistics), and Student's t quantiles for run-level
intervals. Pure Python but for the bootstrap (numpy, imported when first resampled)."""

from __future__ import annotations

import math

BOOTSTRAP = 1000


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return quantile(values, 0.5)


def bootstrap_medians(values: list[float], n: int = BOOTSTRAP, seed: int = 0) -> list[float]:
    """Medians of ``n`` resamples (fixed seed: the same data always gives the same interval)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    # in slices of about a million draws (16 MB), the same draws as all at once: memory stays
    # bounded however many steps there are (all at once it grows as resamples times steps)
    rows = max(1, (1 << 20) // max(1, len(arr)))
    out: list[float] = []
    for start in range(0, n, rows):
        idx = rng.integers(0, len(arr), size=(min(rows, n - start), len(arr)))
        out += np.median(arr[idx], axis=1).tolist()
    return out


def order_stat_ci(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics (ranks n/2 -+ z*sqrt(n)/2).

    Costs one sort, no resampling: cheap enough to evaluate after every training step."""
    xs = sorted(values)
    n = len(xs)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return xs[lo], xs[hi]


#: the fewest steps a 95% median interval can be formed from (see :func:`enough_for_interval`)
MIN_INTERVAL_STEPS = 6


def enough_for_interval(n: int, z: float = 1.96) -> bool:
    """Whether ``n`` values can hold a median interval of the level ``z`` stands for: even the
    whole range of n values covers the median only with probability 1 - 2**(1-n) (6 values for
    95%, 7 for 97.5%); below that, any interval claims more than the data can say."""
    return n >= 2 and 1 - 2.0 ** (1 - n) >= math.erf(z / math.sqrt(2))


def median_ci(boots: list[float], level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median, from :func:`bootstrap_medians`."""
    a = (1 - level) / 2
    return quantile(boots, a), quantile(boots, 1 - a)


def ratio_ci(slow_boots: list[float], fast_boots: list[float], level: float = 0.95) -> tuple[float, float]:
    """Bootstrap interval of median(slow) / median(fast): the two samples were resampled
    independently (different seeds), so pairing their bootstrap medians is a valid draw."""
    if len(slow_boots) != len(fast_boots) or len(slow_boots) < 2:
        raise ValueError("ratio_ci needs two bootstrap samples of the same size")
    ratios = [s / f for s, f in zip(slow_boots, fast_boots) if f > 0]
    if not ratios:
        raise ValueError("ratio_ci needs positive medians")
    a = (1 - level) / 2
    return quantile(ratios, a), quantile(ratios, 1 - a)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def _t_cdf(t: float, df: float) -> float:
    """Student's t distribution function (through the regularised incomplete beta)."""
    x = df / (df + t * t)
    a, b = df / 2.0, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    ibeta = front * _betacf(a, b, x) / a if x < (a + 1) / (a + b + 2) else 1.0 - front * _betacf(b, a, 1 - x) / b
    tail = 0.5 * ibeta
    return 1.0 - tail if t >= 0 else tail


_T_CACHE: dict[tuple[float, int], float] = {}


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (p > 0.5), by bisection."""
    key = (p, df)
    if key not in _T_CACHE:
        lo, hi = 0.0, 1e4
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        _T_CACHE[key] = (lo + hi) / 2
    return _T_CACHE[key]


def simultaneous_t(df: int, splits: int) -> float:
    """t for 95% intervals that hold together over every pair of ``splits`` splits (Bonferroni).

    The verdict compares the fastest and the slowest split, picked after looking: with three
    equally fast splits a plain 95% interval would call one "faster" about one time in ten."""
    pairs = max(1, splits * (splits - 1) // 2)
    return t_quantile(1 - 0.025 / pairs, df)


def t975(df: int) -> float:
    """Student's t quantile for a 95% two-sided interval with ``df`` degrees of freedom."""
    return t_quantile(0.975, df)
