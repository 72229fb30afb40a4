"""Tests for qae_lab.knobs: the live knobs' checks, their one frozen value, and where a log says they changed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from qae_lab.knobs import KNOBS, Knobs, knob_changes, validate_knobs
from qae_lab.metric_names import KNOB_METRICS


def test_the_knobs():
    assert KNOBS == ("quantile_k", "alpha", "baseline", "token_weighting")


def test_validate_knobs_cleans():
    assert validate_knobs() == {}
    assert validate_knobs(quantile_k=0.25, alpha=1, baseline="mean", token_weighting="ah") == {
        "quantile_k": 0.25,
        "alpha": 1.0,
        "baseline": "mean",
        "token_weighting": "ah",
    }
    assert validate_knobs(alpha=torch.tensor(-0.5)) == {"alpha": -0.5}  # a scalar tensor: a float
    assert type(validate_knobs(alpha=2)["alpha"]) is float


@pytest.mark.parametrize(
    "knobs, message",
    [
        ({"quantile_k": 0.0}, r"quantile_k must lie in the open interval \(0, 1\), got 0.0"),
        ({"quantile_k": 1}, r"quantile_k must lie in the open interval \(0, 1\), got 1.0"),
        ({"quantile_k": float("nan")}, "quantile_k must be finite, got nan"),
        ({"quantile_k": "0.4"}, "quantile_k must be a finite real number, got '0.4'"),
        ({"alpha": float("inf")}, "alpha must be finite, got inf"),
        ({"alpha": True}, "alpha must be a finite real number, got True"),
        ({"baseline": "median"}, r"baseline must be one of \('mean', 'quantile'\), got 'median'"),
        ({"token_weighting": "sa-ah"}, r"token_weighting must be one of \('none', 'ah', 'sa_ah'\), got 'sa-ah'"),
        ({"k": 0.5}, r"unknown knob\(s\) \['k'\]; allowed: \['alpha', 'baseline', 'quantile_k', 'token_weighting'\]"),
        ({"quantile_k": 0.5, "beta": 0.1, "K": 1}, r"unknown knob\(s\) \['K', 'beta'\]"),
    ],
)
def test_validate_knobs_errors_name_the_knob_and_range(knobs, message):
    with pytest.raises(ValueError, match=message):
        validate_knobs(**knobs)


def test_validate_knobs_knows_exactly_the_knobs():
    for knob, value in zip(KNOBS, (0.5, 0.5, "mean", "none")):
        assert validate_knobs(**{knob: value}) == {knob: value}


def test_knob_changes_lists_the_first_step_and_every_change():
    assert KNOB_METRICS == ("qae/k", "qae/quantile_baseline", "saah/alpha", "knobs/token_weighting")
    rows = [
        {"step": 1, "qae/k": 0.4, "qae/quantile_baseline": 0.0, "reward": 0.1},
        {"step": 2, "qae/k": 0.4, "qae/quantile_baseline": 0.0, "reward": 0.9},  # only the reward moved
        {"step": 3, "qae/k": 0.4, "qae/quantile_baseline": 0.0, "saah/alpha": 0.5},  # token weighting on
        {"step": 4, "qae/k": 0.4, "qae/quantile_baseline": 0.0, "saah/alpha": 1.0},
        {"step": 5, "qae/k": 0.4, "qae/quantile_baseline": 0.0},
    ]  # and off again
    assert [(c["step"], c["saah/alpha"]) for c in knob_changes(rows)] == [(1, None), (3, 0.5), (4, 1.0), (5, None)]
    assert knob_changes(rows)[0] == {
        "step": 1,
        "qae/k": 0.4,
        "qae/quantile_baseline": 0.0,
        "saah/alpha": None,
        "knobs/token_weighting": None,  # a log written before the weighting was logged
    }
    # the weighting named in the log: a change from SA-AH to AH at the same alpha is a change
    named = [{"step": s, "saah/alpha": 0.5, "knobs/token_weighting": w} for s, w in ((1, "sa_ah"), (2, "ah"))]
    assert [c["knobs/token_weighting"] for c in knob_changes(named)] == ["sa_ah", "ah"]
    assert knob_changes([]) == []
    with pytest.raises(ValueError, match=r"rows must be log rows with a 'step', got keys \['event'\]"):
        knob_changes([{"event": "resume"}])


def test_knobs_value_is_frozen_checked_and_replaced_whole():
    k = Knobs()
    assert k.as_dict() == {"quantile_k": 0.4, "alpha": 0.5, "baseline": "quantile", "token_weighting": "none"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.alpha = 1.0
    moved = k.replace(quantile_k=0.7, alpha=2)
    assert (moved.quantile_k, moved.alpha, type(moved.alpha)) == (0.7, 2.0, float) and k.quantile_k == 0.4
    with pytest.raises(ValueError, match="unknown knob"):
        k.replace(beta=0.1)
    with pytest.raises(ValueError, match="token_weighting must be one of"):
        Knobs(token_weighting="soft")
    assert Knobs(alpha=torch.tensor(1.5)).alpha == 1.5  # a scalar tensor becomes a float
