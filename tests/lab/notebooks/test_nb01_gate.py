"""qae_lab.lab.notebooks.nb01_gate: what notebook 01 draws, checked against the numbers it draws from (notebook 02's knob and
Monte Carlo figures: test_nb02_entropy_proofs.py)."""

from __future__ import annotations

import pytest
import torch

from qae_lab.lab.notebooks.nb01_gate import (
    gate_heatmap,
    K_GRID,
    advantages_figure,
    extremes_figure,
    gate_figure,
    sparsity_figure,
    zero_sources_figure,
    zero_sources_table,
)
from qae_lab.toys.sparsity import expected_zero_fraction, expected_zero_fraction_beta, gate_table, zero_sources


def test_k_grid():
    assert K_GRID[0] == 0.05 and K_GRID[-1] == 0.95 and len(K_GRID) == 19 and 0.4 in K_GRID


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
    assert names == [
        f"{n}: {e} A" for n in ("GRPO mean / std", "QAE / std", "QAE, no std") for e in ("largest", "smallest")
    ]
    assert list(fig.data[4].y) == [0.0, 1.0, 1.0, 0.0, 0.0] and list(fig.data[5].y) == [0.0, 0.0, 0.0, -1.0, 0.0]
    assert list(fig.data[0].x) == [0, 1, 2, 3, 4]
    assert fig.layout.title.text == "Extreme advantages in a group, G = 4, K = 0.4"


def test_advantages_figure_shows_correct_responses_first():
    fig = advantages_figure(8, 0.4, (1, 7))
    hm = fig.data[0]
    assert list(hm.y) == ["c=1 · mean", "c=1 · QAE K=0.4", "c=7 · mean", "c=7 · QAE K=0.4"]
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


@pytest.mark.parametrize("g,k", [(16, 0.4), (4, 0.8), (32, 0.25)])
def test_zero_sources_table_is_the_figures_at_the_same_g_and_k(g, k):
    # the table under the figure: its uniform row is the figure's batch line, its sampled batch drawn at the same G, K
    rates = torch.rand(3000, generator=torch.Generator().manual_seed(0))
    rows = zero_sources_table(g, k, rates=rates)
    line = next(t.name for t in zero_sources_figure(g, k).data if t.name.startswith("a batch"))
    uniform = next(r for r in rows if r["success rates"].startswith("uniform on (0, 1): Beta"))
    assert line.endswith(f"{uniform['A = 0 (%)'] / 100:.1%}")
    sampled = rows[0]
    assert sampled["prompts"] == 3000 and abs(sampled["A = 0 (%)"] - uniform["A = 0 (%)"]) < 3  # 3000 groups: ~1 pt
    assert zero_sources_table(g, k, rates=rates) == rows  # the same batch at every redraw


def test_advantages_figure_colour_bar_and_row_labels():
    fig = advantages_figure(8, 0.4, (1, 7))
    assert fig.data[0].colorbar.title.text == "advantage A"
    assert fig.layout.yaxis.ticklabelstandoff >= 4 and fig.layout.margin.l > 60  # "c=7 · QAE K=0.4" needs room


def test_gate_heatmap_symbols_and_colours():
    # G=8, linear convention: c = 5 (K=0.4) and c = 3 (K=0.6) move both sides (entry 2)
    table = gate_table(8, [0.4, 0.6], "linear")
    fig = gate_heatmap(table, [0.4, 0.6], title="gate")
    hm, _ = fig.data
    assert [list(row) for row in hm.z] == [[float(v) for v in row] for row in table.tolist()]
    assert list(hm.y) == ["K=0.4", "K=0.6"] and list(hm.x) == list(range(9))
    assert list(hm.text[0]) == ["0", "+", "+", "+", "+", "±", "−", "−", "0"]
    assert hm.showscale is False and fig.layout.title.text == "gate"
    # each entry falls in its own colour band: -1 red, 0 grey, +1 green, 2 purple

    def colour(v):
        x = (v - hm.zmin) / (hm.zmax - hm.zmin)
        stops = hm.colorscale
        return next(c for (lo, c), (hi, _) in zip(stops[:-1], stops[1:]) if lo <= x <= hi and lo < hi)

    assert [colour(v) for v in (-1, 0, 1, 2)] == ["#d62728", "#e5e5e5", "#2ca02c", "#9467bd"]
