"""Shared setup of the bandit tests (qae_lab.toys.bandit): float64 tensors, and plain-Python references.

The references (the ``math`` module, loops over actions) stand in for the vectorised code.
"""

from __future__ import annotations

import math
import random

import torch
from testkit.reference import ref_entropy

F64 = torch.float64


def T(x, dtype=F64) -> torch.Tensor:
    """A float64 tensor: the library computes in float64, and float32 inputs would round the hand values."""
    return torch.tensor(x, dtype=dtype)


LOG3 = math.log(3.0)


def py_softmax(z: list[float]) -> list[float]:
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def py_cov(pi: list[float], x: list[float], y: list[float]) -> float:
    """Cov_{a~pi}(x_a, y_a), by the textbook formula."""
    ex = sum(p * a for p, a in zip(pi, x))
    ey = sum(p * b for p, b in zip(pi, y))
    return sum(p * (a - ex) * (b - ey) for p, a, b in zip(pi, x, y))


def py_first_order(z: list[float], dz: list[float]) -> float:
    """dH ~= -Cov_pi(log pi, dz)."""
    pi = py_softmax(z)
    return -py_cov(pi, [math.log(p) for p in pi], dz)


def py_exact(z: list[float], dz: list[float]) -> float:
    return ref_entropy([a + b for a, b in zip(z, dz)]) - ref_entropy(z)


def py_mean_reward(z: list[float], r: list[float]) -> float:
    return sum(p * x for p, x in zip(py_softmax(z), r))


def py_population_quantile(pi: list[float], r: list[float], k: float) -> float:
    """inf{x : P_pi(r <= x) >= K}: walk the rewards in increasing order, adding their pi mass."""
    cum = 0.0
    for x, p in sorted(zip(r, pi)):
        cum += p
        if cum >= k:
            return x
    return max(r)  # only reached if rounding leaves the total mass a hair below K


def random_policy(rng: random.Random, n_actions: int, scale: float = 1.5) -> list[float]:
    return [rng.gauss(0.0, scale) for _ in range(n_actions)]
