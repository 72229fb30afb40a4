"""qae_lab.lab.nb02_entropy_proofs: notebook 02's summary sentences, against hand-made inputs and a real (tiny) run."""

from __future__ import annotations

import pytest
import torch

from qae_lab.lab.nb02_entropy_proofs import knob_figure, mc_figure, mc_verdicts, summary_01
from qae_lab.toys import bandit
from qae_lab.toys.bandit import knob_curve, mc_entropy_curve

COUNTS = dict(checked=12, hard=7, easy=5, violations_first_order=0, violations_exact=2, uniform=0)
MC = {
    "mean": [0.010, 0.010, 0.010],
    "mean_stderr": [0.001] * 3,
    "quantile": [0.002, 0.011, 0.018],
    "quantile_stderr": [0.001] * 3,
}
RUNS = {
    "mean": {"entropy": [0.9, 0.6, 0.4], "success": [0.5, 0.6, 0.8]},
    "QAE K=0.4": {"entropy": [0.9, 0.8, 0.7], "success": [0.5, 0.55, 0.6]},
}


def test_mc_verdicts_use_a_two_standard_error_margin():
    # margin 2 * sqrt(0.001^2 + 0.001^2) = 0.00283: diffs -0.008, +0.001, +0.008
    assert mc_verdicts(MC) == ["lower", "same", "higher"]
    at_margin = {"mean": [0.0], "mean_stderr": [0.0], "quantile": [0.001], "quantile_stderr": [0.0005]}
    assert mc_verdicts(at_margin) == ["same"]  # exactly two standard errors is not beyond them


def test_summary_01_states_the_numbers_it_is_given():
    text = summary_01(1.987, COUNTS, MC, RUNS)
    assert all(len(line) <= 110 for line in text.splitlines())
    bullets = " ".join(text.split()).split("* ")[1:]  # one sentence per section, wrapping undone
    assert bullets[0] == (
        "The first-order identity's error fell with log-log slope 1.99 over the smallest steps (2 is O(eta^2)). "
    )
    assert bullets[1] == (
        "Proposition 4.2 on 12 (policy, p, K) cases (7 hard, 5 easy): 0 violations to first "
        "order, 2 with the exact entropy after the step. "
    )
    assert bullets[2] == (
        "One sampled step: QAE's mean entropy change was lower than the mean baseline's at 1, "
        "higher at 1 and within two standard errors at 1 of 3 success rates. "
    )
    assert bullets[3] == (
        "After 2 steps of training, mean H / log A (mean success): mean 0.400 (0.800), QAE K=0.4 0.700 (0.600)."
    )


def test_summary_01_on_a_real_simulation():
    runs = {
        "mean": bandit.simulate_training(torch.tensor([0.2, 0.8]), steps=3, group_size=4, n_actions=8, baseline="mean")
    }
    mc = bandit.mc_entropy_curve([0.3], group_size=4, n_groups=20)
    text = summary_01(2.0, COUNTS, mc, runs)
    assert f"mean {runs['mean']['entropy'][-1]:.3f} ({runs['mean']['success'][-1]:.3f})" in text
    assert "of 1 success rates" in text and "After 3 steps" in text


def test_summary_01_rejects_bad_input():
    with pytest.raises(ValueError, match="counts must hold"):
        summary_01(2.0, {"checked": 1}, MC, RUNS)
    with pytest.raises(ValueError, match="runs must hold"):
        summary_01(2.0, COUNTS, MC, {})


def test_knob_figure_draws_the_knob_and_marks_both_baselines():
    fig = knob_figure(0.5, 1.5, 0.8, 0.4)  # p = 0.8 > 1 - K: easy, b_K = 1
    c = knob_curve(0.8, 0.4, 0.5, 1.5)
    assert list(fig.data[0].y) == c.dh.tolist() and list(fig.data[0].x) == c.b.tolist()
    assert fig.layout.title.text.endswith("b_K = 1 (easy prompt)") and f"{c.slope:.2e}" in fig.layout.title.text
    assert [(s.x0, s.line.color) for s in fig.layout.shapes] == [(0.8, None), (1.0, "red")]
    assert [a.text for a in fig.layout.annotations] == ["mean b = p", "QAE b_K"]


def test_mc_figure_bands_are_two_standard_errors():
    fig = mc_figure(0.4, 4, 0.5, 1.5, n_groups=30, ps=[0.2, 0.8])
    out = mc_entropy_curve(torch.tensor([0.2, 0.8]), group_size=4, n_groups=30, k=0.4, eta=0.5, sharpness=1.5, seed=3)
    band, line = fig.data[0], fig.data[1]  # the mean baseline's band, then its line
    assert line.name == "sampled, mean baseline (c)" and list(line.y) == pytest.approx(out["mean"])
    upper = [m + 2 * s for m, s in zip(out["mean"], out["mean_stderr"])]
    assert list(band.y)[:2] == pytest.approx(upper)
    assert [t.name for t in fig.data if t.name][2:] == [
        "expected gradient (b)",
        "identity, b = p (a)",
        "identity, b = b_K (a)",
    ]
