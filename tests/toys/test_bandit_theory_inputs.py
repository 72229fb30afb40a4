"""Tests for how qae_lab.toys.bandit takes its inputs: Python numbers at full float64 precision, and bad input
refused with an error that names the argument."""

from __future__ import annotations

import pytest
import torch

from qae_lab.toys.sparsity import expected_zero_fraction, expected_zero_fraction_beta, gate_zero_counts
from qae_lab.toys.bandit import (
    check_proposition_42,
    entropy,
    entropy_change_exact,
    entropy_change_first_order,
    expected_pg_step,
    first_order_errors,
    identity_entropy_change,
    identity_step,
    knob_slope,
    make_bandits,
    population_quantile,
)
from theory_setup import T


# ---------------------------------------------------------------- Python numbers are taken at full precision


def test_python_numbers_keep_float64_precision():
    # The maths runs in float64; a Python float or list must mean the same as a float64 tensor of it, not its
    # float32 rounding (0.1 -> 0.10000000149...), which would break "E_pi[r] = p exactly" by ~1e-9.
    z, r = T([1.0, 0.0, -1.0]), T([1.0, 0.0, 0.0])
    torch.testing.assert_close(identity_step(z, r, 0.1, 1.0), identity_step(z, r, T(0.1), 1.0), rtol=1e-15, atol=0)
    torch.testing.assert_close(
        identity_entropy_change(z, r, [0.1, 0.3], 1.0),
        identity_entropy_change(z, r, T([0.1, 0.3]), 1.0),
        rtol=1e-15,
        atol=0,
    )
    zb, rb = make_bandits([0.1, 0.3, 0.7], 6, 1.0, torch.Generator().manual_seed(0))
    assert ((torch.softmax(zb, -1) * rb).sum(-1) - T([0.1, 0.3, 0.7])).abs().max().item() < 1e-12
    assert expected_zero_fraction(0.1, 8, 0.4).item() == pytest.approx(
        expected_zero_fraction(T(0.1), 8, 0.4).item(), rel=1e-14
    )
    torch.testing.assert_close(
        first_order_errors(z, r, [0.1, 0.01]), first_order_errors(z, r, T([0.1, 0.01])), rtol=1e-12, atol=0
    )


# ---------------------------------------------------------------- bad input, generally

GOOD_Z, GOOD_R = T([1.0, 0.0, -1.0]), T([1.0, 0.0, 0.0])


def _calls_with(z=GOOD_Z, r=GOOD_R, eta=0.5, k=0.4) -> dict:
    """One call of every function taking z and r, by name, with the given argument and the others good."""
    return {
        "identity_step": lambda: identity_step(z, r, 0.5, eta),
        "expected_pg_step": lambda: expected_pg_step(z, r, eta),
        "identity_entropy_change": lambda: identity_entropy_change(z, r, T([0.0, 1.0]), eta),
        "population_quantile": lambda: population_quantile(z, r, k),
        "check_proposition_42": lambda: check_proposition_42(z, r, k, eta),
    }


@pytest.mark.parametrize("z", [T([1.0]), T(1.0), torch.zeros(3, 1), T([1.0, float("nan"), 0.0])])
def test_bad_z(z):
    for call in [
        *_calls_with(z=z).values(),
        lambda: entropy(z),
        lambda: knob_slope(z, 1.0),
        lambda: entropy_change_exact(z, torch.zeros_like(z)),
        lambda: entropy_change_first_order(z, torch.zeros_like(z)),
        lambda: first_order_errors(z, torch.ones_like(z), [0.1]),
    ]:
        with pytest.raises(ValueError, match=r"^z "):
            call()


@pytest.mark.parametrize("r", [T([1.0, 0.0]), T([1.0, 0.0, 0.0, 1.0]), T([1.0, float("inf"), 0.0])])
def test_bad_r(r):
    for call in _calls_with(r=r).values():
        with pytest.raises(ValueError, match=r"^r "):
            call()


@pytest.mark.parametrize("eta", [0.0, -0.1, float("nan"), float("inf"), "0.1", None])
def test_bad_eta(eta):
    takes_eta = [c for name, c in _calls_with(eta=eta).items() if name != "population_quantile"]
    for call in takes_eta + [lambda: knob_slope(GOOD_Z, eta)]:
        with pytest.raises(ValueError, match="eta"):
            call()
    with pytest.raises(ValueError, match="etas"):
        first_order_errors(GOOD_Z, GOOD_Z, [1e-2, eta if isinstance(eta, float) else -1.0])


@pytest.mark.parametrize("k", [0.0, 1.0, -0.2, 1.3, float("nan"), True, "0.4"])
def test_bad_k(k):
    calls = _calls_with(k=k)
    for call in [
        calls["population_quantile"],
        calls["check_proposition_42"],
        lambda: gate_zero_counts(4, k),
        lambda: expected_zero_fraction(0.5, 4, k),
        lambda: expected_zero_fraction_beta(1.0, 1.0, 4, k),
    ]:
        with pytest.raises(ValueError, match=r"^k "):
            call()


def test_mismatched_step_shapes_are_value_errors():
    # like r, a step dz (or a direction) must have one entry per action
    with pytest.raises(ValueError, match="dz"):
        entropy_change_exact(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="dz"):
        entropy_change_first_order(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="direction"):
        first_order_errors(torch.zeros(3), torch.ones(4), [0.1])
