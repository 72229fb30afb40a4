"""Tests for qae_lab.toys.bandit.make_bandits: bandits with exactly the success rates asked for."""

from __future__ import annotations

import pytest
import torch

from qae_lab.toys.bandit import make_bandits
from theory_setup import F64, T


# ---------------------------------------------------------------- make_bandits


@pytest.mark.parametrize("n_actions", [2, 3, 7, 16])
@pytest.mark.parametrize("sharpness", [0.0, 1.0, 3.0])
def test_make_bandits_exact_success_rates(n_actions, sharpness):
    gen = torch.Generator().manual_seed(11)
    p = 0.001 + 0.998 * torch.rand(40, generator=gen, dtype=F64)
    z, r = make_bandits(p, n_actions, sharpness, gen)
    assert z.shape == r.shape == (40, n_actions) and z.dtype == F64
    pi = torch.softmax(z, -1)
    assert ((pi * r).sum(-1) - p).abs().max().item() < 1e-12
    assert set(r.unique().tolist()) <= {0.0, 1.0}
    assert (r.sum(-1) == max(1, n_actions // 2)).all()  # half correct, at least one ...
    assert (r.sum(-1) < n_actions).all()  # ... and at least one wrong
    if sharpness == 0.0:  # uniform within each class
        for i in range(40):
            for cls in (0.0, 1.0):
                v = pi[i][r[i] == cls]
                assert (v - v[0]).abs().max().item() < 1e-14
    z2, r2 = make_bandits(p, n_actions, sharpness, torch.Generator().manual_seed(5))
    z3, r3 = make_bandits(p, n_actions, sharpness, torch.Generator().manual_seed(5))
    assert torch.equal(z2, z3) and torch.equal(r2, r3)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"p": T([0.0])}, "p"),
        ({"p": T([1.0])}, "p"),
        ({"p": T([0.5, float("nan")])}, "p"),
        ({"p": T([-0.2])}, "p"),
        ({"n_actions": 1}, "n_actions"),
        ({"n_actions": 0}, "n_actions"),
        ({"n_actions": 4.0}, "n_actions"),
        ({"n_actions": True}, "n_actions"),
        ({"sharpness": -0.1}, "sharpness"),
        ({"sharpness": float("inf")}, "sharpness"),
    ],
)
def test_make_bandits_bad_input(kwargs, name):
    args = {"p": T([0.5]), "n_actions": 4, "sharpness": 1.0} | kwargs
    with pytest.raises(ValueError, match=rf"^{name} "):
        make_bandits(**args)
