"""Independent plain-Python reference implementations the vectorised code is checked against.

Written from the papers' definitions, not from qae_lab's code: loops over groups, exact
rational arithmetic for the empirical CDF, ``statistics.stdev`` for the std.
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction


def ref_quantile_paper(group: list[float], k: float) -> float:
    """b_K = inf{x : F(x) >= K}, F(x) = #{R_j <= x} / G, searched over the group's values.

    K is read as the decimal it was written as (``repr``), so 0.6 means exactly 3/5.
    """
    k_exact = Fraction(repr(k))
    g = len(group)
    return min(x for x in group if Fraction(sum(1 for r in group if r <= x), g) >= k_exact)


def ref_quantile_linear(group: list[float], k: float) -> float:
    """Linear interpolation between order statistics at position K * (G - 1)."""
    s = sorted(group)
    pos = k * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def ref_advantages(
    rewards: list[float], g: int, baseline: str, k: float, method: str, scale: str, eps: float
) -> list[float]:
    """A_i = (R_i - b(q)) / (std + eps), one group at a time."""
    out: list[float] = []
    batch_std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    for start in range(0, len(rewards), g):
        grp = rewards[start : start + g]
        if baseline == "mean":
            b = sum(grp) / g
        elif method == "paper":
            b = ref_quantile_paper(grp, k)
        else:
            b = ref_quantile_linear(grp, k)
        denom = {"group": statistics.stdev(grp) + eps, "batch": batch_std + eps, "none": 1.0}[scale]
        out.extend((r - b) / denom for r in grp)
    return out


def ref_horizon_weights(h: list[list[float]], mask: list[list[int]], alpha: float) -> list[list[float]]:
    """w_t = prod over real tokens s <= t of exp(-alpha * h_s); 0 on padding."""
    out = []
    for h_row, m_row in zip(h, mask):
        row, prod = [], 1.0
        for h_t, m_t in zip(h_row, m_row):
            if m_t:
                prod *= math.exp(-alpha * h_t)
                row.append(prod)
            else:
                row.append(0.0)
        out.append(row)
    return out


def ref_entropy(logits_row: list[float]) -> float:
    """Shannon entropy (nats) of softmax(logits_row), by the textbook formula."""
    m = max(logits_row)
    e = [math.exp(z - m) for z in logits_row]
    s = sum(e)
    return -sum((x / s) * math.log(x / s) for x in e if x > 0)


def ref_regime_token_means(
    values: list[list[float]], mask: list[list[int]], hard: list[bool]
) -> tuple[float | None, float | None]:
    """Token-weighted means over the hard rows' and the easy rows' real tokens, one token at a time (None: no token)."""
    totals = {True: [0.0, 0], False: [0.0, 0]}
    for row, m_row, is_hard in zip(values, mask, hard):
        for v, m in zip(row, m_row):
            if m:
                totals[bool(is_hard)][0] += v
                totals[bool(is_hard)][1] += 1
    return tuple(totals[h][0] / totals[h][1] if totals[h][1] else None for h in (True, False))


def ref_start_split(rates: list[float], frac: float) -> tuple[list[int], list[int]]:
    """The n = max(1, round(frac * B)) prompts of lowest / highest rate, picked one at a time, the first on a tie."""
    n = max(1, round(frac * len(rates)))
    hard: list[int] = []
    easy: list[int] = []
    for _ in range(n):
        rest = [i for i in range(len(rates)) if i not in hard]
        hard.append(min(rest, key=lambda i: (rates[i], i)))
        rest = [i for i in range(len(rates)) if i not in easy]
        easy.append(min(rest, key=lambda i: (-rates[i], i)))
    return sorted(hard), sorted(easy)
