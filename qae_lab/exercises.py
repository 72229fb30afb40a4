r"""Checkers for the notebooks' exercises, in the style of Spinning Up's ``# YOUR CODE HERE``.

Each ``check_*`` takes the learner's function, runs it on fixed random cases and compares
the result with qae_lab's own implementation by ``torch.allclose``. A function that still
returns ``None`` (the stub) is reported as not attempted rather than failed, so notebooks
run top to bottom before anyone has written a line.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from qae_lab.advantages import quantile_baseline
from qae_lab.sparsity import gate_zero_counts
from qae_lab.theory import knob_slope

__all__ = ["check_quantile_baseline", "check_knob_slope", "check_zero_count"]

NOT_ATTEMPTED = "Not attempted yet: replace the stub's `return None` and run this cell again."


def _compare(got, want, what: str) -> None:
    got = torch.as_tensor(got, dtype=torch.float64)
    if got.shape != want.shape or not torch.allclose(got, want.double(), atol=1e-6):
        raise AssertionError(f"{what}: expected {want.tolist()}, got {got.tolist()}")


def check_quantile_baseline(fn: Callable) -> str:
    r"""Check ``fn(rewards, group_size, k) -> (B,)`` against the paper's K-quantile.

    >>> check_quantile_baseline(lambda r, g, k: None) == NOT_ATTEMPTED
    True
    >>> check_quantile_baseline(quantile_baseline)
    'Correct: your baseline matches qae_lab.advantages.quantile_baseline on 30 cases.'
    """
    gen = torch.Generator().manual_seed(0)
    if fn(torch.tensor([1.0, 0, 0, 0]), 4, 0.4) is None:
        return NOT_ATTEMPTED
    cases = 0
    for g in (2, 4, 5, 8, 16):
        for k in (0.2, 0.4, 0.6, 0.28, 0.75, 0.9):
            r = (torch.rand(3 * g, generator=gen) < 0.5).float() if cases % 2 else torch.randn(3 * g, generator=gen)
            _compare(fn(r.clone(), g, k), quantile_baseline(r, g, k), f"G={g}, K={k}, rewards={r.tolist()}")
            cases += 1
    return f"Correct: your baseline matches qae_lab.advantages.quantile_baseline on {cases} cases."


def check_knob_slope(fn: Callable) -> str:
    r"""Check ``fn(z, eta) -> float``, the knob's slope eta * Cov_pi(log pi, pi).

    >>> check_knob_slope(lambda z, eta: float(knob_slope(z, eta)))
    'Correct: your slope matches qae_lab.theory.knob_slope on 10 policies.'
    """
    gen = torch.Generator().manual_seed(1)
    if fn(torch.zeros(3, dtype=torch.float64), 1.0) is None:
        return NOT_ATTEMPTED
    for i in range(10):
        z = 2.0 * torch.randn(5 + i, generator=gen, dtype=torch.float64)
        eta = 0.1 * (i + 1)
        _compare(fn(z.clone(), eta), knob_slope(z, eta), f"z={z.tolist()}, eta={eta}")
    return "Correct: your slope matches qae_lab.theory.knob_slope on 10 policies."


def check_zero_count(fn: Callable) -> str:
    r"""Check ``fn(c, group_size, k) -> int``: responses with A = 0 when c of G are correct.

    >>> check_zero_count(lambda c, g, k: int(gate_zero_counts(g, k)[c]))
    'Correct: your count matches the two-regime gate for every c, G in {4, 8, 16}, K in {0.2, 0.4, 0.6, 0.8}.'
    """
    if fn(1, 4, 0.4) is None:
        return NOT_ATTEMPTED
    for g in (4, 8, 16):
        for k in (0.2, 0.4, 0.6, 0.8):
            want = gate_zero_counts(g, k)
            got = torch.tensor([fn(c, g, k) for c in range(g + 1)])
            _compare(got, want, f"zero counts for c = 0..{g}, G={g}, K={k}")
    return "Correct: your count matches the two-regime gate for every c, G in {4, 8, 16}, K in {0.2, 0.4, 0.6, 0.8}."
