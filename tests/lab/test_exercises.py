"""Tests for qae_lab.lab.exercises: every checker accepts the right answer, reports the stub as not attempted,
and rejects plausible wrong answers (a checker that accepts anything teaches nothing)."""

from __future__ import annotations

import statistics

import pytest
import torch

from qae_lab.lab import exercises as ex
from qae_lab.advantages import quantile_baseline
from qae_lab.horizon import horizon_weights
from qae_lab.lab.nb00_plain_grpo import UpdateChange
from qae_lab.task.rewards import soft_format_reward
from qae_lab.analysis.stats import detrended_variance
from qae_lab.toys.sparsity import gate_zero_counts
from qae_lab.toys.bandit import entropy_change_exact, entropy_change_first_order, knob_slope


def _mean_baseline(r, g, k):
    return r.view(-1, g).mean(1)


def _k_changes(rows):
    return [r["step"] for i, r in enumerate(rows) if i == 0 or r["qae/k"] != rows[i - 1]["qae/k"]]


def _neg_correct(r, g, t, below=lambda x, m: x < m, correct=lambda x, t: x >= t):
    groups = [r[i : i + g] for i in range(0, len(r), g)]
    return sum(correct(x, t) and below(x, sum(grp) / g) for grp in groups for x in grp)


def _uniform_cov(log_pi, dz):
    """-Cov(log pi, dz) with every token weighted alike: the covariance without pi."""
    return -((log_pi - log_pi.mean(-1, keepdim=True)) * (dz - dz.mean(-1, keepdim=True))).mean(-1)


# checker -> (the right answer, the stub, plausible wrong answers)
CASES = {
    "check_quantile_baseline": (
        quantile_baseline,
        lambda r, g, k: None,
        [
            _mean_baseline,  # GRPO's baseline, not QAE's
            lambda r, g, k: quantile_baseline(r, g, 1 - k),  # K read the other way round
        ],
    ),
    "check_knob_slope": (
        lambda z, eta: float(knob_slope(z, eta)),
        lambda z, eta: None,
        [
            lambda z, eta: float(-knob_slope(z, eta)),  # sign flipped
            lambda z, eta: float(knob_slope(z, 1.0)),  # eta forgotten
        ],
    ),
    "check_zero_count": (
        lambda c, g, k: int(gate_zero_counts(g, k)[c]),
        lambda c, g, k: None,
        [
            lambda c, g, k: 0,  # no zeros at all
            lambda c, g, k: g - c,  # the failures, whatever the regime
        ],
    ),
    "check_training_variance": (
        detrended_variance,
        lambda v, w: None,
        [
            lambda v, w: statistics.pvariance(v),  # not detrended
            lambda v, w: detrended_variance(v, w + 1),  # window off by one
        ],
    ),
    "check_horizon_weights": (
        horizon_weights,
        lambda h, m, a: None,
        [
            lambda h, m, a: torch.exp(-a * h.cumsum(-1)),  # padding not zeroed
            lambda h, m, a: torch.exp(-a * h) * m,  # not cumulative
            lambda h, m, a: torch.exp(-a * (h.cumsum(-1) - h)) * m,  # s < t instead of s <= t
        ],
    ),
    "check_format_reward": (
        soft_format_reward,
        lambda completions, **kw: None,
        [
            lambda completions, **kw: [1.0] * len(completions),  # everything passes
            lambda completions, **kw: [float("<answer>" in c[0]["content"]) for c in completions],  # the answer alone
            lambda completions, **kw: [
                float(c[0]["content"].count("</reasoning>") == 1 and "<answer>" in c[0]["content"]) for c in completions
            ],  # in any order, anything between
        ],
    ),
    "check_k_changes": (
        _k_changes,
        lambda rows: None,
        [
            lambda rows: _k_changes(rows)[1:],  # the first step left out
            lambda rows: [r["step"] for r in rows],  # every step
        ],
    ),
    "check_mean_advantages": (
        lambda r: (r - r.mean()) / (r.std() + 1e-6),
        lambda r: None,
        [
            lambda r: r - r.mean(),  # Dr.GRPO: no std division
            lambda r: (r - r.mean()) / r.std(unbiased=False),  # the population std
            lambda r: (r - r.median()) / r.std(),  # another baseline
        ],
    ),
    "check_entropy_change": (
        entropy_change_first_order,
        lambda z, dz: None,
        [
            entropy_change_exact,  # the exact change, not the first order
            lambda z, dz: -entropy_change_first_order(z, dz),  # the sign flipped
            lambda z, dz: _uniform_cov(torch.log_softmax(z, -1), dz),  # the covariance under uniform weights, not pi
        ],
    ),
    "check_neg_correct": (
        _neg_correct,
        lambda r, g, t: None,
        [
            lambda r, g, t: _neg_correct(r, g, t, correct=lambda x, t: x < t),  # the wrong answers counted
            lambda r, g, t: _neg_correct(r, g, t, below=lambda x, m: True),  # every correct answer counted
        ],
    ),
}


def test_every_checker_is_covered():
    # the predict-then-run checkers: their tests below
    assert set(CASES) | {"check_prediction", "check_direction", "check_estimate", "check_sequence_entropy"} == set(
        ex.__all__
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_checker_accepts_the_right_answer_and_reports_the_stub(name):
    right, stub, _ = CASES[name]
    check = getattr(ex, name)
    assert check(right).startswith("Correct")
    assert check(stub) == ex.NOT_ATTEMPTED


@pytest.mark.parametrize("name,which", [(n, i) for n in sorted(CASES) for i in range(len(CASES[n][2]))])
def test_checker_rejects_a_wrong_answer(name, which):
    wrong = CASES[name][2][which]
    with pytest.raises(AssertionError, match="expected"):
        getattr(ex, name)(wrong)


def _change(after):
    """A group of three (one rewarded, two not), log pi(y_i) -1, -2, -3 before the step and ``after`` it."""
    return UpdateChange(
        ["y0 ✓", "y1 ✗", "y2 ✗"],
        torch.tensor([-1.0, -2.0, -3.0]),
        torch.tensor(after),
        torch.tensor([1.0, -0.5, -0.5]),
        0,
        9,
    )


def test_wrong_answers_name_the_usual_mistake():
    with pytest.raises(AssertionError, match="divide by the group's std"):
        ex.check_mean_advantages(lambda r: r - r.mean())
    with pytest.raises(AssertionError, match="population std"):
        ex.check_mean_advantages(lambda r: (r - r.mean()) / r.std(unbiased=False))


@pytest.mark.parametrize(
    "after, prediction, verdict",
    [
        ([-0.9, -2.5, -3.5], "down", "Right"),
        ([-0.9, -2.5, -3.5], " Down ", "Right"),
        ([-0.9, -2.5, -3.5], "up", "Wrong"),
        ([-0.9, -1.5, -2.5], "up", "Right"),
        ([-0.9, -1.5, -2.5], "down", "Wrong"),
        ([-0.9, -1.5, -3.5], "down", "Partly"),
        ([-0.9, -1.5, -3.5], "up", "Partly"),
    ],
)
def test_prediction_is_compared_with_what_was_measured(after, prediction, verdict):
    said = ex.check_prediction(prediction, _change(after))
    assert said.startswith(f'{verdict}: you predicted "{prediction.strip().lower()}"'), said
    if verdict == "Partly":  # names the completion that went against the prediction: y1 rose, y2 fell
        assert f"Against your prediction: {'y1' if prediction == 'down' else 'y2'} ✗." in said, said


def test_prediction_unset_says_what_to_do_and_a_bad_one_is_refused():
    assert ex.check_prediction(None, _change([-0.9, -2.5, -3.5])) == ex.NO_PREDICTION
    assert 'PREDICTION = "up" or "down"' in ex.NO_PREDICTION
    for bad in ("sideways", 1, True):
        with pytest.raises(ValueError, match="prediction must be"):
            ex.check_prediction(bad, _change([-0.9, -2.5, -3.5]))
    with pytest.raises(ValueError, match="UpdateChange"):
        ex.check_prediction("up", {"delta": [0.1]})


def test_prediction_without_negative_advantages():
    c = UpdateChange(["y0 ✓", "y1 ✓"], torch.tensor([-1.0, -1.0]), torch.tensor([-1.0, -1.0]), torch.zeros(2), 0, 4)
    assert "no completion with A < 0" in ex.check_prediction("down", c)


def test_check_direction_says_right_wrong_same_and_refuses_bad_input():
    from qae_lab.lab.exercises import check_direction

    kw = {"quantity": "the entropy", "change": "K rose"}
    assert check_direction("up", 1.0, 2.0, **kw).startswith("Right")
    assert check_direction("down", 1.0, 2.0, **kw).startswith("Wrong")
    assert check_direction("Down ", 2.0, 1.0, **kw).startswith("Right")
    assert check_direction("same", 1.0, 1.05, tolerance=0.1, **kw).startswith("Right")
    assert check_direction("up", 1.0, 1.05, tolerance=0.1, **kw).startswith("Wrong")  # within tolerance: same
    assert check_direction("same", 1.0, 1.05, **kw).startswith("Wrong")
    assert "No prediction yet" in check_direction(None, 1.0, 2.0, **kw)
    for bad in ("sideways", 1, True):
        with pytest.raises(ValueError, match="prediction must be one of"):
            check_direction(bad, 1.0, 2.0, **kw)
    with pytest.raises(ValueError, match="after must be a finite number"):
        check_direction("up", 1.0, float("nan"), **kw)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        check_direction("up", 1.0, 2.0, tolerance=-1, **kw)


@pytest.mark.parametrize(
    "guess, measured, tolerance, verdict",
    [
        (80, 79.4, 5, "Right"),
        (79.4, 79.4, 0, "Right"),
        (70, 79.4, 5, "Off"),
        (90, 79.4, 5, "Off"),
        (74.4, 79.4, 5, "Right"),  # the edge counts as right
    ],
)
def test_check_estimate_says_right_or_how_far_off(guess, measured, tolerance, verdict):
    text = ex.check_estimate(guess, measured, quantity="the share", tolerance=tolerance, unit="%")
    assert text.startswith(verdict + ":"), text
    if verdict == "Off":
        side = "higher" if measured > guess else "lower"
        assert f"{abs(measured - guess):.3g}% {side} than your guess" in text, text


def test_check_estimate_refuses_bad_input():
    assert ex.check_estimate(None, 1.0, quantity="q", tolerance=1).startswith("No guess yet")
    for bad in ("80", float("nan"), True):
        with pytest.raises(ValueError, match="prediction must be a finite number"):
            ex.check_estimate(bad, 1.0, quantity="q", tolerance=1)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        ex.check_estimate(1, 1.0, quantity="q", tolerance=-1)
