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
from qae_lab.lab.exercises import UpdateChange
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


def _largest_nudged(fn, rel: float, moved: list):
    """``fn`` with the largest value (in size) of each answer moved by ``rel`` of its size, where that value is not
    the first (the first stays exact); each move made is appended to ``moved``."""

    def nudged(*args):
        out = torch.as_tensor(fn(*args), dtype=torch.float64).clone()
        flat = out.view(-1)
        i = int(flat.abs().argmax())
        if i > 0:
            moved.append(rel * abs(float(flat[i])))
            flat[i] += moved[-1]
        return out

    return nudged


# the float checkers whose answers hold several values, the largest of some not the first
SEVERAL_VALUES = ("check_quantile_baseline", "check_horizon_weights", "check_mean_advantages")


@pytest.mark.parametrize("name", SEVERAL_VALUES)
@pytest.mark.parametrize("sign", [1, -1])
def test_an_answer_whose_largest_value_is_1e5_off_relative_is_refused(name, sign):
    # Planted bugs, in exercises._close: a relative tolerance, `torch.allclose(got, want.double(), rtol=1e-5,
    # atol=atol)` -> each nudged answer is "Correct" and the first assert fails; comparing the first value only,
    # `(got - want.double()).abs().view(-1)[:1] <= atol` -> the same
    check, right = getattr(ex, name), FLOAT_CHECKERS[name]
    moved = []
    assert check(_largest_nudged(right, sign * 1e-5, moved)).startswith("Not yet: ")
    # the scale: the value moved in the refused case is 1.6 to 2.2 in size (exercises.ATOL's note: of order 1), so
    # the move refused is 1e-5 x that, over ten times ATOL = 1e-6
    assert moved and abs(moved[-1]) > 10 * ex.ATOL
    assert check(_largest_nudged(right, sign * 1e-8, [])).startswith("Correct")  # 1e-8 x at most 10: well inside


@pytest.mark.parametrize("name", sorted(FLOAT_CHECKERS))
def test_a_right_answer_with_an_extra_dimension_is_refused(name):
    # _close: the answer must have the reference's shape as well as its values. The right values with a leading
    # dimension of 1 ((1, B) for (B,), (1,) for a number) broadcast onto the reference exactly, every difference 0,
    # yet are the wrong shape: "Not yet", the case showing the answer's numbers nested one level deeper.
    # Planted: _close's `got.shape == want.shape` dropped -> "Correct" -> fails
    right = FLOAT_CHECKERS[name]

    def one_more_dimension(*args):
        return torch.as_tensor(right(*args), dtype=torch.float64).unsqueeze(0)

    said = getattr(ex, name)(one_more_dimension)
    assert said.startswith("Not yet: ") and ", got [" in said, said


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


def test_a_wrong_count_gets_the_checkers_hint_wrapped_at_100_then_the_case():
    # the checker's own hint, wrapped at a notebook's 100 columns, then the case with the counts worked by hand:
    # G=4, K=0.2: c = 0 and c = 4 are all-equal groups (every A = 0), c = 1..3 lie below the gate (c/G <= 0.8),
    # where only the successes move and the G - c failures keep A = 0.
    # Planted: _NotYet's hint default "" -> "XXXX" -> fails; _not_yet's textwrap.fill(..., 100) -> 101 -> fails
    said = ex.check_zero_count(lambda c, g, k: 0)
    assert said == (
        "Not yet: below the gate (c / G <= 1 - K) only the c successes move; above it only the G - c\n"
        "failures.\n"
        "zero counts for c = 0..4, G=4, K=0.2: expected [4, 3, 2, 1, 4], got [0, 0, 0, 0, 0]"
    ), said


def test_a_function_that_raises_later_is_named_with_its_arguments_shortened():
    # a learner who wrote it for the example's one group of 4: the probe passes, the first random case (G=2, six
    # rewards) raises; the verdict shows every argument, comma-separated, each repr shortened to 60 characters (the
    # rewards' repr is 61, so it ends in [...]).
    # Planted (_theirs): shown = None / "XX, XX".join / repr(None) / shorten(..., 61) / _TheirError(None) -> fails;
    # _not_yet's fill width 100 -> 101 (the hint is 101 characters) -> fails
    def one_group(r, g, k):
        return quantile_baseline(r.view(1, 4).flatten(), 4, k)

    said = ex.check_quantile_baseline(one_group)
    hint, rest = said.split("\n(sorted).\n")
    assert hint == "Not yet: the K-quantile of a group is its ceil(K G)-th smallest reward, read per group of G", said
    assert rest.startswith("your function raised RuntimeError: "), said
    assert rest.endswith(" (called with tensor([ 1.5410, -0.2934, -2.1788, 0.5684, -1.0845, [...], 2, 0.2)"), said


def test_format_reward_is_called_with_trls_keyword_arguments():
    # TRL passes prompts= (and more) to a reward function; one that reads them must be accepted.
    # Planted: _theirs calling fn(*args) without **kwargs -> TypeError reported, not "Correct" -> fails
    def reward(completions, prompts, **kwargs):
        assert len(prompts) == len(completions)
        return soft_format_reward(completions)

    assert ex.check_format_reward(reward).startswith("Correct"), ex.check_format_reward(reward)


@pytest.mark.parametrize(
    "check, answer, got",
    [
        (ex.check_knob_slope, lambda z, eta: 0.1, ", got 0.1"),  # a float shown as written, not as float32
        (ex.check_knob_slope, lambda z, eta: 0, ", got 0.0"),  # an int read as a float64 number
        (ex.check_knob_slope, lambda z, eta: "a slope", ", got 'a slope'"),  # not numbers: its repr
        (ex.check_horizon_weights, lambda h, m, a: torch.zeros_like(h), ", got [[0.0]]"),  # a tensor as a list
    ],
)
def test_a_wrong_float_answer_is_shown_as_numbers_after_the_checkers_hint(check, answer, got):
    # the case line ends with the learner's answer as numbers (float64, a list for a tensor), or its repr where it is
    # not numbers; the hint before it is the checker's own.
    # Planted (_compare): hint default "" -> "XXXX"; shown = None; _tensor(None); repr(got) always / never /
    # repr(None); `is not None`; (_tensor) dtype=torch.float64 dropped (0.1 shows as 0.10000000149011612) -> fails
    said = check(answer)
    assert said.endswith(got), said
    assert said.startswith(("Not yet: the slope is eta times", "Not yet: sum H~ over real tokens")), said


def test_a_value_exactly_atol_off_is_accepted():
    # ATOL is inclusive: padding answered 1e-6 instead of 0 (the difference exactly ATOL in float64) still passes;
    # some of the 15 cases are padded.
    # Planted: _close's `<= atol` -> `< atol` -> "Not yet" -> fails
    def weights(h, m, a):
        w = horizon_weights(h, m, a)
        return torch.where(m == 0, torch.full_like(w, ex.ATOL), w)

    assert ex.check_horizon_weights(weights).startswith("Correct")


def test_the_modules_naive_quantile_passes_every_random_case_and_is_caught_by_a_float_trap():
    # exercises._naive_quantile (the doctest's wrong answer) differs from the right one only at the FLOAT_TRAPS: at
    # K G <= 1 (G=2, K=0.2 is the first case) it reads the smallest reward, as ceil(K G) = 1 says.
    # Planted: _naive_quantile's max(ceil(k g), 1) -> max(..., 2) -> refused at G=2 with the generic hint -> fails
    said = ex.check_quantile_baseline(ex._naive_quantile)
    assert said.startswith("Not yet: that is the index ceil(K G) - 1"), said
    assert "G=25, K=0.28" in said, said


@pytest.mark.parametrize(
    "prediction, before, after, kw, verdict",
    [
        ("up", 1.0, 2.0, {}, 'Right: you predicted "up", and the entropy went up when K rose\n(measured 1 -> 2).'),
        ("down", 1.0, 2.0, {}, 'Wrong: you predicted "down", but the entropy went up when K rose\n(measured 1 -> 2).'),
        (
            "same",
            1.0,
            1.05,
            {"tolerance": 0.1},
            'Right: you predicted "same", and the entropy stayed the same when K rose\n'
            "(measured 1 -> 1.05, tolerance 0.1).",
        ),
        (
            "down",
            0.0150,
            0.0138,
            {"interval": (-0.0035, 0.0012)},
            'Wrong: you predicted "down", but the entropy stayed the same when K rose\n'
            "(measured 0.015 -> 0.0138, 95% interval of the change [-0.0035, +0.0012]).",
        ),
    ],
)
def test_check_direction_reads_as_a_sentence(prediction, before, after, kw, verdict):
    # the participant reads: verdict, the prediction, what was measured, and the numbers (a tolerance or an interval
    # only where one was given)
    # Planted: joint "and"/"but" -> "XXandXX"/"AND"/"XXbutXX"/"BUT"; moved = None / always or never "stayed the
    # same" / "XXstayed the sameXX" / "STAYED THE SAME" / `!= "same"` / == "XXsameXX" / == "SAME"; spread never
    # shown / [interval[1], interval[1]] / "XXXX" without an interval; tolerance always or never shown / "XXXX";
    # closing "XX).XX" -> fails
    said = ex.check_direction(prediction, before, after, quantity="the entropy", change="K rose", **kw)
    assert said == verdict, said


def test_check_direction_without_a_prediction_wraps_at_100():
    # Planted: textwrap.fill's width 100 -> 101 or left out (70) -> fails
    said = ex.check_direction(None, 1.0, 2.0, quantity="the training variance", change="QAE came in")
    assert said == (
        'No prediction yet: set PREDICTION to "up", "down" or "same" (how will the training variance move\n'
        "when QAE came in?), run that cell, then this one."
    ), said


@pytest.mark.parametrize(
    "before, after, kw, measured",
    [
        (1.0, 1.0, {}, "same"),  # no move at all, no tolerance
        (1.0, 1.5, {"tolerance": 0.5}, "same"),  # a move of exactly the tolerance (exact in binary)
        (1.0, 1.0, {"interval": (0.0, 0.0)}, "same"),  # every seed gave the same change: lo == hi is an interval
        (1.0, 1.2, {"interval": (0.0, 0.4)}, "same"),  # an interval whose edge is zero includes zero
        (1.2, 1.0, {"interval": (-0.4, 0.0)}, "same"),
    ],
)
def test_check_direction_edges_count_as_same(before, after, kw, measured):
    # Planted: `abs(after - before) <= tolerance` -> `<`; `lo <= hi` -> `lo < hi` (raises); `interval[0] <= 0` ->
    # `< 0`; `0 <= interval[1]` -> `0 <` -> fails
    said = ex.check_direction(measured, before, after, quantity="x", change="y", **kw)
    assert said.startswith('Right: you predicted "same", and x stayed the same'), said


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ex.check_direction("up", float("nan"), 1.0, quantity="x", change="y"), "^before must be a finite"),
        (lambda: ex.check_direction("up", True, 1.0, quantity="x", change="y"), "^before must be a finite"),
        (lambda: ex.check_direction("up", "1", 1.0, quantity="x", change="y"), "^before must be a finite"),
        (lambda: ex.check_direction("up", 1.0, 2.0, quantity="x", change="y", tolerance=math.inf), "^tolerance must"),
        (lambda: ex.check_estimate(5, True, quantity="x", tolerance=1), "^measured must be a finite"),
        (lambda: ex.check_estimate(5, "5", quantity="x", tolerance=1), "^measured must be a finite"),
        (lambda: ex.check_estimate(5, 5.0, quantity="x", tolerance=float("nan")), "^tolerance must be a finite"),
    ],
)
def test_bad_numbers_get_an_error_naming_the_argument(call, message):
    # bad input gets a clear ValueError naming the argument (a bool or a string is not a number)
    # Planted: names "XXbeforeXX"/"BEFORE"/"XXtoleranceXX"/"TOLERANCE" (both checkers); `isinstance(value, bool) or
    # not isinstance(...)` -> `and` (True passes, "1" raises TypeError) -> fails
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "guess, measured, tolerance, unit, verdict",
    [
        (
            10,
            10.5,
            0.1,
            "",
            "Off: you guessed 10, the gap measured 10.5 (0.5 higher than your guess;\nwithin 0.1 counts as right).",
        ),  # no unit: bare numbers; a gap under 1 is still "higher"
        (
            0,
            79.4,
            10,
            "%",
            "Off: you guessed 0%, the gap measured 79.4% (79.4% higher than your guess;\nwithin 10% counts as right).",
        ),  # 0 is not a fraction written for a percentage
        (
            1.5,
            79.4,
            10,
            "%",
            "Off: you guessed 1.5%, the gap measured 79.4% (77.9% higher than your guess;\n"
            "within 10% counts as right).",
        ),  # above 1: read as a percentage
        (
            0.5,
            1,
            0.1,
            "%",
            "Off: you guessed 0.5%, the gap measured 1% (0.5% higher than your guess;\nwithin 0.1% counts as right).",
        ),  # measured 1%: no fraction to mistake it for
        (
            1,
            79.4,
            10,
            "%",
            "Not yet: PREDICTION is in percent: 1 means 1%; did you mean 100? Write it in percent and run this again.",
        ),  # 1 with a share of 79.4%: the fraction 1 = 100%
    ],
)
def test_check_estimate_reads_as_a_sentence(guess, measured, tolerance, unit, verdict):
    # Planted: unit default "" -> "XXXX"; side `gap > 0` -> `gap > 1`; the fraction test `0 < prediction <= 1 <
    # measured` -> `0 <=` / `< 1` / `<= 2` / `1 <= measured` -> fails
    units = {"unit": unit} if unit else {}  # no unit: the default
    said = ex.check_estimate(guess, measured, quantity="the gap", tolerance=tolerance, **units)
    assert said == verdict, said


def test_check_prediction_reads_as_a_sentence():
    # Planted: spread = None; joint = None / "and" always or never / "XXandXX" / "AND" / `!=` / "XXbutXX" / "BUT"
    # -> fails
    right = ex.check_prediction("down", _change([-1.5, -2.5, -3.5]))
    assert right == (
        'Right: you predicted "down", and all 1 completions with A > 0 became less likely\n'
        "(change of log π(y) from -0.500 to -0.500)."
    ), right
    wrong = ex.check_prediction("up", _change([-1.5, -2.5, -3.25]), sign="A < 0")
    assert wrong == (
        'Wrong: you predicted "up", but all 2 completions with A < 0 became less likely\n'
        "(change of log π(y) from -0.500 to -0.250)."
    ), wrong


@pytest.mark.parametrize(
    "prediction, after, against",
    [
        ("down", [-1.0, -1.5, -3.0], "y1 ✗"),  # y1 rose, y2 did not move: only y1 went against "down"
        ("up", [-1.0, -2.5, -3.0], "y1 ✗"),  # y1 fell, y2 did not move: only y1 went against "up"
    ],
)
def test_prediction_partly_does_not_count_an_unmoved_completion_against(prediction, after, against):
    # Planted: `delta > 0 if guess == "down"` -> `delta >= 0`; `else delta < 0` -> `delta <= 0` -> y2 listed -> fails
    said = ex.check_prediction(prediction, _change(after), sign="A < 0")
    assert said.startswith(f'Partly: you predicted "{prediction}"; '), said
    assert f"\nAgainst your prediction: {against}. One step" in said, said


def test_prediction_partly_lists_every_completion_against():
    # Planted: ", ".join(against) -> "XX, XX".join -> fails
    c = UpdateChange(
        ["y0 ✓", "y1 ✗", "y2 ✗", "y3 ✗"],
        torch.tensor([-1.0, -2.0, -3.0, -4.0]),
        torch.tensor([-1.0, -1.5, -2.75, -4.5]),  # y1 and y2 rose, y3 fell
        torch.tensor([1.0, -0.5, -0.25, -0.25]),
        torch.zeros(4, dtype=torch.long),
        torch.full((4,), 3),
    )
    said = ex.check_prediction("down", c, sign="A < 0")
    assert said.startswith('Partly: you predicted "down"; 1 of 3 completions with A < 0 became less likely and 2'), said
    assert "\nAgainst your prediction: y1 ✗, y2 ✗. One step" in said, said


def test_prediction_refuses_a_change_of_the_wrong_type_by_its_type():
    # Planted: type(change) -> type(None) in the message -> "got NoneType" -> fails
    with pytest.raises(ValueError, match="^change must be a .*UpdateChange, got dict$"):
        ex.check_prediction("up", {"delta": [0.1]})


def test_direction_words():
    none, one = torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long)
    c = UpdateChange(
        ["a", "b", "c"], torch.zeros(3), torch.tensor([0.1, 0.0, -0.1]), torch.tensor([1.0, -1, -1]), none, one
    )
    assert (c.direction("A > 0"), c.direction("A < 0"), c.direction("A = 0")) == ("up", "mixed", None)
    flat = UpdateChange(["a"], torch.zeros(1), torch.zeros(1), torch.tensor([-1.0]), none[:1], one[:1])
    assert flat.direction("A < 0") == "unchanged"
