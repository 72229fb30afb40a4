"""qae_lab.live_lines: notebook 04's counterfactual zero-advantage fraction and its closing summary."""

from __future__ import annotations

from math import comb

import pytest

from qae_lab.live_lines import gate_zero_fraction, logged_mean, summary_lines

BEFORE = {"pass@1": 0.25, "greedy_pass@1": 0.5, "n_problems": 8}
AFTER = {"pass@1": 0.5, "greedy_pass@1": 0.375, "n_problems": 8}


def _zero_fraction_by_loop(p, g, k):
    """An independent count: a group with c of g right is hard when c <= g - ceil(k g) (its failures get 0),
    else easy (its successes get 0); weighted by the Binomial(g, p) probability of c."""
    hard_max = g - -(-k * g // 1)  # g - ceil(k g)
    total = 0.0
    for c in range(g + 1):
        zeros = g - c if c <= hard_max else c
        total += comb(g, c) * p ** c * (1 - p) ** (g - c) * zeros / g
    return total


@pytest.mark.parametrize("g", [4, 8, 16])
@pytest.mark.parametrize("k", [0.2, 0.4, 0.8])
def test_gate_zero_fraction_matches_a_loop_and_averages_over_steps(g, k):
    rates = [0.1, 0.35, 0.6, 0.9]
    rows = [{"step": t, "qae/success_rate": p} for t, p in enumerate(rates, 1)]
    expected = sum(_zero_fraction_by_loop(p, g, k) for p in rates) / len(rates)
    assert gate_zero_fraction(rows, k, g) == pytest.approx(expected, abs=1e-12)


def test_gate_zero_fraction_hand_values_and_rows_without_a_rate():
    # p = 0 or 1: every group all-equal, every advantage 0, at any K
    assert gate_zero_fraction([{"step": 1, "qae/success_rate": 0.0}], 0.4, 8) == 1.0
    # G = 2, K = 0.4: hard while c <= 2 - 1 = 1; p = 0.5 gives c = 0, 1, 2 with 1/4, 1/2, 1/4 and 2, 1, 2 zeros
    rows = [{"step": 1, "qae/success_rate": 0.5}, {"step": 2}]  # a row without a rate is left out
    assert gate_zero_fraction(rows, 0.4, 2) == pytest.approx((0.25 * 2 + 0.5 * 1 + 0.25 * 2) / 2)


def test_raising_k_lowers_the_zeros_at_a_middling_success_rate():
    # notebook 04's exercise: at p = 0.4 with G = 8, K = 0.8 makes groups with 2-3 successes easy, and an
    # easy group's zeros are its c successes instead of its 8 - c failures
    rows = [{"step": 1, "qae/success_rate": 0.4}]
    assert gate_zero_fraction(rows, 0.8, 8) < gate_zero_fraction(rows, 0.4, 8)


@pytest.mark.parametrize("k, g, rows, match", [
    (0.0, 8, [{"step": 1, "qae/success_rate": 0.5}], "k must lie"),
    (1.5, 8, [{"step": 1, "qae/success_rate": 0.5}], "k must lie"),
    (0.4, 1, [{"step": 1, "qae/success_rate": 0.5}], "group_size must be >= 2"),
    (0.4, 8, [{"step": 1}], "qae/success_rate"),
    (0.4, 8, [], "qae/success_rate"),
    (0.4, 8, [{"step": 1, "qae/success_rate": 1.5}], "p"),
])
def test_gate_zero_fraction_rejects_bad_input(k, g, rows, match):
    with pytest.raises(ValueError, match=match):
        gate_zero_fraction(rows, k, g)


def test_logged_mean():
    assert logged_mean([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 0.0}, {"step": 3}], "reward") == 0.5
    assert logged_mean([], "reward") is None


def test_summary_of_a_finished_run_states_the_numbers():
    rows = [{"step": t, "qae/k": 0.4, "saah/alpha": 0.5, "qae/zero_adv_frac": z}
            for t, z in enumerate([0.5, 0.75], 1)]
    assert summary_lines(rows, BEFORE, AFTER, steps=2) == [
        "steps trained: 2 of 2",
        "K in force: 0.40 at every logged step",
        "alpha in force: 0.50 at every logged step",
        "zero-advantage fraction (logged), mean over the 2 steps: 0.625",
        "sampled pass@1 on 8 held-out problems: 0.250 before -> 0.500 after training (rose)",
        "greedy pass@1 on 8 held-out problems: 0.500 before -> 0.375 after training (fell)",
    ]


def test_summary_follows_k_moved_and_back():
    rows = [{"step": 1, "qae/k": 0.4}, {"step": 2, "qae/k": 0.6}, {"step": 3, "qae/k": 0.6},
            {"step": 4, "qae/k": 0.4}]
    lines = summary_lines(rows, BEFORE, AFTER, steps=4)
    assert lines[1] == "K in force: 0.40 (from step 1) -> 0.60 (from step 2) -> 0.40 (from step 4), 2 change(s)"
    assert not any(line.startswith("alpha") for line in lines)  # never logged: no line


def test_summary_while_the_run_goes_on_or_after_it_failed():
    rows = [{"step": 1, "qae/k": 0.4}]
    running = summary_lines(rows, BEFORE, None, steps=400, running=True)
    assert running[0].startswith("steps trained: 1 of 400 so far (training goes on: run this cell again")
    assert running[-1] == "pass@1 after training: not measured yet, the evaluation follows the run"
    assert not any("before ->" in line for line in running)
    failed = summary_lines(rows, BEFORE, None, steps=400)
    assert failed[-1].startswith("pass@1 after training: no evaluation after training")
    assert summary_lines([], BEFORE, None, steps=400, running=True) == [
        "no training step logged yet: run this cell again a little later"]


def test_summary_rejects_bad_steps():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        summary_lines([{"step": 1}], BEFORE, AFTER, steps=0)
