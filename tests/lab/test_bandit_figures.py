"""qae_lab.lab.nb01_gate: what notebooks 01 and 02 draw, checked against the numbers it draws from."""

from __future__ import annotations

import pytest
import torch

from qae_lab.lab.nb01_gate import (
    K_GRID,
    advantages_figure,
    extremes_figure,
    gate_figure,
    sparsity_figure,
    zero_sources_figure,
)
from qae_lab.lab.nb02_entropy_proofs import knob_figure, mc_figure
from qae_lab.toys.bandit import mc_entropy_curve
from qae_lab.toys.sparsity import expected_zero_fraction, expected_zero_fraction_beta, gate_table, zero_sources
from qae_lab.toys.bandit import knob_curve


def test_k_grid():
    assert K_GRID[0] == 0.05 and K_GRID[-1] == 0.95 and len(K_GRID) == 19 and 0.4 in K_GRID


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
    assert [t.name for t in fig.data if t.name][2:] == ["expected gradient (b)", "identity, b = p (a)",
                                                          "identity, b = b_K (a)"]


def test_gate_figure_is_the_gate_table():
    fig = gate_figure(8, "linear")
    z = gate_table(8, K_GRID, "linear")
    assert [[int(v) for v in row] for row in fig.data[0].z] == z.tolist()
    assert fig.layout.title.text == "Which responses get A ≠ 0: G = 8, linear quantile"


def test_sparsity_figure_exact_and_sampled():
    torch.manual_seed(0)
    fig = sparsity_figure(0.5, 0.5, 16, False, n_prompts=4000)
    exact, sampled = fig.data
    assert list(exact.y) == pytest.approx([expected_zero_fraction_beta(0.5, 0.5, 16, k) for k in K_GRID])
    assert sampled.name == "sampled, 4000 prompts" and sampled.mode == "markers"
    assert list(sampled.y) == pytest.approx(list(exact.y), abs=0.03)
    assert fig.layout.shapes[0].y0 == 0.8  # the paper's ~80%
    mixed = sparsity_figure(0.5, 0.5, 16, True, n_prompts=4000)
    assert len(mixed.data) == 1 and mixed.layout.title.text.endswith("(mixed groups only)")


def test_extremes_figure_by_hand():
    fig = extremes_figure(4, 0.4)
    names = [t.name for t in fig.data]
    assert names == [f"{n}: {e} A" for n in ("GRPO mean / std", "QAE / std", "QAE, no std") for e in ("largest",
                                                                                                         "smallest")]
    assert list(fig.data[4].y) == [0.0, 1.0, 1.0, 0.0, 0.0] and list(fig.data[5].y) == [0.0, 0.0, 0.0, -1.0, 0.0]
    assert list(fig.data[0].x) == [0, 1, 2, 3, 4]
    assert fig.layout.title.text == "Extreme advantages in a group, G = 4, K = 0.4"


def test_advantages_figure_shows_correct_responses_first():
    fig = advantages_figure(8, 0.4, (1, 7))
    hm = fig.data[0]
    assert list(hm.y) == ["c=1 · GRPO mean", "c=1 · QAE K=0.4", "c=7 · GRPO mean", "c=7 · QAE K=0.4"]
    # the x axis says "correct ones first": a group of c correct responses starts with c ticks
    for row, c in zip(hm.text, (1, 1, 7, 7)):
        assert [cell[0] for cell in row] == ["✓"] * c + ["✗"] * (8 - c)
    assert list(hm.text[1]) == ["✓ +2.83"] + ["✗ 0"] * 7  # QAE on a hard group: only the success moves
    assert list(hm.z[3][:7]) == [0.0] * 7 and hm.z[3][7] < 0  # on an easy group: only the failure


@pytest.mark.parametrize("g,k", [(16, 0.4), (8, 0.8), (5, 0.25)])
def test_zero_sources_figure_stacks_the_two_sources(g, k):
    fig = zero_sources_figure(g, k)
    assert fig.layout.title.text == f"Share of one prompt's {g} responses with A = 0, by its success rate p (K = {k:g})"
    areas, lines = fig.data[:2], fig.data[2:]
    ps = list(areas[0].x)
    assert len(ps) == 101 and ps[0] == 0 and ps[-1] == 1 and ps[50] == 0.5
    src = zero_sources(torch.tensor(ps, dtype=torch.float64), g, k)
    assert [a.stackgroup for a in areas] == ["zeros", "zeros"] and [t.stackgroup for t in lines] == [None, None]
    assert list(areas[0].y) == pytest.approx(src.all_equal.tolist())
    assert list(areas[1].y) == pytest.approx(src.gate.tolist())
    # stacked, the two areas are the whole expected share
    total = [a + b for a, b in zip(areas[0].y, areas[1].y)]
    assert total == pytest.approx(expected_zero_fraction(torch.tensor(ps, dtype=torch.float64), g, k).tolist())
    # the batch's line is the curve's average over p uniform on (0, 1): the trapezoid rule on the drawn points
    batch = expected_zero_fraction_beta(1.0, 1.0, g, k)
    trapezoid = sum((a + b) / 2 for a, b in zip(total, total[1:])) / 100
    assert list(lines[0].y) == pytest.approx([batch] * 101, abs=1e-12)  # the split and the whole agree
    assert batch == pytest.approx(trapezoid, abs=2e-3)
    assert lines[0].name == f"a batch, p uniform on (0, 1): {batch:.1%}" and set(lines[1].y) == {0.8}
    assert [s.x0 for s in fig.layout.shapes] == [pytest.approx(1 - k)]  # the regimes' boundary
