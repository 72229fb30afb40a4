"""Tests for qae_lab.lab.exercises: every checker accepts the right answer, reports the stub as not attempted,
and rejects plausible wrong answers (a checker that accepts anything teaches nothing)."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

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
from qae_lab.toys.seqpolicy import sequence_entropy


def _mean_baseline(r, g, k):
    return r.view(-1, g).mean(1)


def _naive_quantile(r, g, k):
    """The ceil(K G)-th smallest reward read at the unguarded index ceil(k * g) - 1."""
    return r.view(-1, g).sort(dim=1).values[:, math.ceil(k * g) - 1]


def _guarded_quantile(r, g, k):
    """The notebook's solution: ceil(K G), with K G rounded where it lies within 1e-9 of an integer."""
    x = k * g
    rank = round(x) if abs(x - round(x)) < 1e-9 else math.ceil(x)
    return r.view(-1, g).sort(dim=1).values[:, max(rank, 1) - 1]


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
            _naive_quantile,  # ceil(K G) - 1 unguarded: one too high where K G lands just above an integer
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
    said = getattr(ex, name)(wrong)  # a verdict, not a traceback: the likely mistake first, then the case
    assert said.startswith("Not yet: ") and "expected" in said.split("\n", 2)[-1], said


def test_the_naive_quantile_index_is_refused_by_name_and_the_guarded_one_accepted():
    assert 0.28 * 25 == 7.000000000000001 and math.ceil(0.28 * 25) == 8  # the notebook's warning, in floats
    said = ex.check_quantile_baseline(_naive_quantile)
    hint, case = said.split("\n", 2)[0] + " " + said.split("\n", 2)[1], said.split("\n", 2)[2]
    assert hint == (
        "Not yet: that is the index ceil(K G) - 1: in floating point K * G = 7.000000000000001, so ceil gives 8, not "
        "7; round K G when it lies within 1e-9 of an integer."
    ), said
    assert case.startswith("G=25, K=0.28, the ceil(K G) = 7-th smallest") and "expected" in case, said
    assert ex.check_quantile_baseline(_guarded_quantile).startswith("Correct")


def test_every_float_trap_is_one_and_the_naive_index_misses_it():
    # K G is an integer exactly (K a two-place decimal), floating point lands above it, and ceil then overshoots
    for g, k in ex.FLOAT_TRAPS:
        exact = Fraction(round(100 * k), 100) * g
        assert exact.denominator == 1 and k * g > exact and math.ceil(k * g) == exact + 1, (g, k, k * g)
        r = torch.randn(2 * g, generator=torch.Generator().manual_seed(g))
        assert not torch.equal(_naive_quantile(r, g, k), quantile_baseline(r, g, k))
        assert torch.equal(_guarded_quantile(r, g, k), quantile_baseline(r, g, k))


# every checker that compares floats -> its right answer
FLOAT_CHECKERS = {
    **{
        name: CASES[name][0]
        for name in (
            "check_quantile_baseline",
            "check_knob_slope",
            "check_training_variance",
            "check_horizon_weights",
            "check_mean_advantages",
            "check_entropy_change",
        )
    },
    "check_sequence_entropy": sequence_entropy,
}


def _nudged(fn, by: float):
    """``fn`` with the first value of its answer moved by ``by``."""

    def nudged(*args):
        out = fn(*args)
        if isinstance(out, float):
            return out + by
        out = torch.as_tensor(out, dtype=torch.float64).clone()
        out.view(-1)[0] += by
        return out

    return nudged


def _variance_float32(values, window):
    x = torch.tensor(values, dtype=torch.float32)
    r = torch.stack([x[t] - x[t - window + 1 : t + 1].mean() for t in range(window - 1, len(x))])
    return float(((r - r.mean()) ** 2).mean())


# each float checker's right answer computed in float32: what a learner's plain torch code returns
FLOAT32 = {
    "check_quantile_baseline": lambda r, g, k: quantile_baseline(r.float(), g, k),
    "check_knob_slope": lambda z, eta: float(knob_slope(z.float(), eta)),
    "check_training_variance": _variance_float32,
    "check_horizon_weights": lambda h, m, a: horizon_weights(h.float(), m.float(), a),
    "check_mean_advantages": lambda r: (r.float() - r.float().mean()) / (r.float().std() + 1e-6),
    "check_entropy_change": lambda z, dz: entropy_change_first_order(z.float(), dz.float()),
    "check_sequence_entropy": lambda z: sequence_entropy(z.float()),
}


def test_every_float_checker_is_listed():
    float_checkers = {"check_zero_count", "check_k_changes", "check_neg_correct", "check_format_reward"}  # exact
    assert set(FLOAT_CHECKERS) == set(FLOAT32) == set(CASES) - float_checkers | {"check_sequence_entropy"}


@pytest.mark.parametrize("name", sorted(FLOAT_CHECKERS))
@pytest.mark.parametrize("sign", [1, -1])
def test_a_float_answer_1e5_off_is_refused_and_one_within_1e8_accepted(name, sign):
    check, right = getattr(ex, name), FLOAT_CHECKERS[name]
    assert check(_nudged(right, sign * 1e-5)).startswith("Not yet: ")
    assert check(_nudged(right, sign * 1e-8)).startswith("Correct")


@pytest.mark.parametrize("name", sorted(FLOAT32))
def test_a_float32_answer_is_accepted(name):
    # the tolerance's scale (exercises.ATOL): float32 rounding of answers of order 1 stays well inside it
    assert getattr(ex, name)(FLOAT32[name]).startswith("Correct")


def test_mean_advantages_accept_eps_zero_but_not_trls_eps():
    assert ex.check_mean_advantages(lambda r: (r - r.mean()) / r.std()).startswith("Correct")
    said = ex.check_mean_advantages(lambda r: (r - r.mean()) / (r.std() + 1e-4))  # TRL's advantage_eps: 1.5e-5 off
    assert said.startswith("Not yet: ") and "expected" in said, said


def test_zero_counts_are_compared_exactly():
    right = CASES["check_zero_count"][0]
    assert ex.check_zero_count(lambda c, g, k: float(right(c, g, k))).startswith("Correct")  # 3.0 is 3
    said = ex.check_zero_count(lambda c, g, k: right(c, g, k) + 1e-8)
    assert said.startswith("Not yet: ") and "expected" in said, said


def _change(after, advantages=(1.0, -0.5, -0.5)):
    """A group of three (one rewarded, two not), log pi(y_i) -1, -2, -3 before the step and ``after`` it."""
    return UpdateChange(
        ["y0 ✓", "y1 ✗", "y2 ✗"],
        torch.tensor([-1.0, -2.0, -3.0]),
        torch.tensor(after),
        torch.tensor(advantages),
        torch.zeros(3, dtype=torch.long),
        torch.full((3,), 3),
    )


def test_wrong_answers_name_the_usual_mistake():
    # the recognised mistake is the verdict's first line, before the case that shows it
    said = ex.check_mean_advantages(lambda r: r - r.mean())
    assert said.startswith("Not yet: that is R - mean R: divide by the group's std too."), said
    said = ex.check_mean_advantages(lambda r: (r - r.mean()) / r.std(unbiased=False))
    assert said.startswith("Not yet: that divides by the population std"), said


def _groups(r, g):
    return [r[i : i + g] for i in range(0, len(r), g)]


@pytest.mark.parametrize(
    "count, hint",
    [
        # the two plausible slips, each told by name
        (
            lambda r, g, t: sum(x > t and x < sum(grp) / g for grp in _groups(r, g) for x in grp),
            "equal to the threshold",
        ),
        (
            lambda r, g, t: sum(x >= t and x <= sum(grp) / g for grp in _groups(r, g) for x in grp),
            "exactly at its group",
        ),
        # the mean of the whole batch, not each group's
        (lambda r, g, t: sum(x >= t and x < sum(r) / len(r) for x in r), "the whole batch's mean"),
    ],
)
def test_neg_correct_refuses_the_plausible_slips_hint_first(count, hint):
    said = ex.check_neg_correct(count)
    first = said.split("\n")[0]
    assert said.startswith("Not yet: ") and hint in said.rsplit("\nrewards", 1)[0], said
    assert "rewards" not in first, said  # the hint comes before the case


def test_a_function_that_raises_gets_a_verdict_not_a_traceback():
    def broken(rewards):
        return rewards / undefined_name  # noqa: F821 (the learner's typo)

    said = ex.check_mean_advantages(broken)
    assert said.startswith("Not yet: subtract the group's mean"), said
    assert "your function raised NameError: name 'undefined_name' is not defined" in said, said


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
def test_prediction_on_the_punished_completions(after, prediction, verdict):
    said = ex.check_prediction(prediction, _change(after), sign="A < 0")
    assert said.startswith(f'{verdict}: you predicted "{prediction.strip().lower()}"'), said
    assert "completions with A < 0" in said, said
    if verdict == "Partly":  # names the completion that went against the prediction: y1 rose, y2 fell
        assert f"Against your prediction: {'y1' if prediction == 'down' else 'y2'} ✗." in said, said


@pytest.mark.parametrize(
    "after, prediction, verdict",
    [
        ([-1.5, -2.5, -3.5], "down", "Right"),  # a large step: every completion less likely, the rewarded one too
        ([-1.5, -2.5, -3.5], "up", "Wrong"),
        ([-0.5, -2.5, -3.5], "up", "Right"),
        ([-0.5, -2.5, -3.5], "down", "Wrong"),
    ],
)
def test_prediction_on_the_rewarded_completions(after, prediction, verdict):
    said = ex.check_prediction(prediction, _change(after))  # notebook 00's question: the completions with A > 0
    assert said.startswith(f'{verdict}: you predicted "{prediction}"'), said
    assert f"all 1 completions with A > 0 became {'less' if after[0] < -1 else 'more'} likely" in said, said


def test_prediction_partly_on_the_rewarded_completions():
    c = _change([-0.5, -2.5, -3.5], advantages=(1.0, 0.5, -1.5))  # y0 rose, y1 fell: both had A > 0
    said = ex.check_prediction("down", c)
    assert said.startswith('Partly: you predicted "down"; 1 of 2 completions with A > 0 became less likely'), said
    assert "Against your prediction: y0 ✓." in said, said


def test_prediction_unset_says_what_to_do_and_a_bad_one_is_refused():
    assert ex.check_prediction(None, _change([-0.9, -2.5, -3.5])) == ex.NO_PREDICTION
    assert 'PREDICTION = "up" or "down"' in ex.NO_PREDICTION
    for bad in ("sideways", 1, True):  # the participant's slip: a verdict saying what to write, not a traceback
        said = ex.check_prediction(bad, _change([-0.9, -2.5, -3.5]))
        assert said.startswith('Not yet: write PREDICTION = "up" or "down"') and repr(bad) in said, said
    with pytest.raises(ValueError, match="UpdateChange"):
        ex.check_prediction("up", {"delta": [0.1]})
    with pytest.raises(ValueError, match="sign must be one of"):
        ex.check_prediction("up", _change([-0.9, -2.5, -3.5]), sign="A >= 0")


def test_prediction_without_completions_of_that_sign():
    c = UpdateChange(
        ["y0 ✓", "y1 ✓"],
        torch.tensor([-1.0, -1.0]),
        torch.tensor([-1.0, -1.0]),
        torch.zeros(2),
        torch.zeros(2),
        torch.ones(2),
    )
    assert "no completion with A > 0" in ex.check_prediction("down", c)
    assert "no completion with A < 0" in ex.check_prediction("down", c, sign="A < 0")


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
    for bad in ("sideways", "higher", 1, True):
        said = check_direction(bad, 1.0, 2.0, **kw)
        assert said.startswith('Not yet: write PREDICTION = "up", "down" or "same"') and repr(bad) in said, said
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
    for bad in ("80", "80%", float("nan"), True):
        said = ex.check_estimate(bad, 1.0, quantity="q", tolerance=1)
        assert said.startswith("Not yet: write PREDICTION as a number") and repr(bad) in said, said
    said = ex.check_estimate(0.8, 79.4, quantity="q", tolerance=10, unit="%")  # a fraction for a percentage
    assert said.startswith("Not yet: PREDICTION is in percent") and "did you mean 80?" in said, said
    with pytest.raises(ValueError, match="measured must be a finite number"):
        ex.check_estimate(50, float("nan"), quantity="q", tolerance=1)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        ex.check_estimate(1, 1.0, quantity="q", tolerance=-1)


def test_check_direction_over_seeds_uses_the_tables_interval_rule():
    from qae_lab.lab.exercises import check_direction

    # the means moved down (0.0150 -> 0.0138), but the 95% interval of the change includes zero: "same", as the table
    kw = {"quantity": "the variance", "change": "QAE came in", "interval": (-0.0035, 0.0012)}
    assert check_direction("same", 0.0150, 0.0138, **kw).startswith("Right")
    assert check_direction("down", 0.0150, 0.0138, **kw).startswith("Wrong")
    assert check_direction("up", 1.0, 1.2, quantity="x", change="y", interval=(0.1, 0.3)).startswith("Right")
    assert check_direction("down", 1.2, 1.0, quantity="x", change="y", interval=(-0.3, -0.1)).startswith("Right")
    with pytest.raises(ValueError, match="interval must be"):
        check_direction("up", 1.0, 1.2, quantity="x", change="y", interval=(0.3, 0.1))
