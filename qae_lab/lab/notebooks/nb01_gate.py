r"""Notebook 01's figures, and the table beside one: the gate's advantages, where the zero advantages come from,
the gate and its sparsity, drawn from :mod:`qae_lab.toys.sparsity`'s numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import torch

from qae_lab.labels import BASELINE_SHORT
from qae_lab.methods import DEFAULT_K
from qae_lab.lab.figures import heatmap_figure, line_figure, vline
from qae_lab.toys.sparsity import (
    advantage_extremes,
    expected_zero_fraction_beta,
    gate_table,
    group_advantage_rows,
    sampled_zero_fraction_beta,
    sampled_zero_sources,
    zero_share_rows,
    zero_sources,
    zero_sources_beta,
)

__all__ = [
    "gate_heatmap",
    "K_GRID",
    "gate_figure",
    "sparsity_figure",
    "extremes_figure",
    "advantages_figure",
    "ZERO_SOURCES",
    "zero_sources_figure",
    "zero_sources_table",
]


K_GRID = [round(0.05 * i, 2) for i in range(1, 20)]  # K = 0.05, 0.10, ..., 0.95

# (legend name, baseline, scale) of the extreme-advantage curves
_EXTREMES = (
    ("GRPO mean / std", "mean", "group"),
    ("QAE / std", "quantile", "group"),
    ("QAE, no std", "quantile", "none"),
)


def gate_figure(G: int, method: str) -> go.Figure:
    r"""Which responses get A != 0 per K of :data:`K_GRID` (rows) and success count c, under ``method``'s quantile.

    >>> fig = gate_figure(4, "paper")
    >>> len(fig.data[0].z), len(fig.data[0].z[0]), fig.layout.title.text
    (19, 5, 'Which responses get A ≠ 0: G = 4, paper quantile')
    """
    return gate_heatmap(
        gate_table(G, K_GRID, method),
        K_GRID,
        height=520,
        title=f"Which responses get A ≠ 0: G = {G}, {method} quantile",
    )


def sparsity_figure(a: float, b: float, G: int, drop_all_equal: bool, *, n_prompts: int) -> go.Figure:
    r"""The zero-advantage fraction against K for p ~ Beta(a, b): exact and (over all groups) sampled from
    ``n_prompts`` prompts with torch's global generator, the paper's 80% marked.

    >>> fig = sparsity_figure(0.5, 0.5, 8, True, n_prompts=10)
    >>> [t.name for t in fig.data], fig.layout.title.text.endswith("(mixed groups only)")
    (['exact, Beta(0.5, 0.5)'], True)
    """
    exact = [expected_zero_fraction_beta(a, b, G, k, drop_all_equal=drop_all_equal) for k in K_GRID]
    fig = line_figure(
        K_GRID,
        {f"exact, Beta({a:g}, {b:g})": exact},
        x_title="K",
        y_title="zero-advantage fraction",
        title=f"Zero-advantage fraction averaged over prompts, G = {G}"
        + (" (mixed groups only)" if drop_all_equal else ""),
    )
    if not drop_all_equal:  # the sampled check counts every group, all-equal ones included
        sampled = sampled_zero_fraction_beta(a, b, G, K_GRID, n_prompts=n_prompts)
        fig.add_scatter(x=K_GRID, y=sampled, mode="markers", name=f"sampled, {n_prompts} prompts")
    fig.add_hline(y=0.8, line_dash="dot", annotation_text="80%")
    return fig


def extremes_figure(G: int, K: float) -> go.Figure:
    r"""A group's largest and smallest advantage against its correct count c, under GRPO's mean / std, QAE / std and
    QAE without std.

    >>> fig = extremes_figure(4, 0.4)
    >>> fig.data[4].name, list(fig.data[4].y)
    ('QAE, no std: largest A', [0.0, 1.0, 1.0, 0.0, 0.0])
    """
    series = {}
    for name, baseline, scale in _EXTREMES:
        largest, smallest = advantage_extremes(G, K, baseline=baseline, scale=scale)
        series[f"{name}: largest A"] = largest.tolist()
        series[f"{name}: smallest A"] = smallest.tolist()
    return line_figure(
        list(range(G + 1)),
        series,
        markers=True,
        x_title="correct responses c",
        y_title="advantage",
        title=f"Extreme advantages in a group, G = {G}, K = {K:g}",
    )


def advantages_figure(G: int = 8, K: float = DEFAULT_K, counts: Sequence[int] = (1, 3, 5, 7)) -> go.Figure:
    r"""Each response's advantage in groups of ``G`` with c of ``counts`` correct, under the mean and QAE's baseline.

    >>> fig = advantages_figure(4, 0.4, [1])
    >>> list(fig.data[0].y)
    ['c=1 · mean', 'c=1 · QAE K=0.4']
    >>> list(fig.data[0].text[0]), list(fig.data[0].text[1])
    (['✓ +1.50', '✗ -0.50', '✗ -0.50', '✗ -0.50'], ['✓ +2.00', '✗ 0', '✗ 0', '✗ 0'])
    """
    names = {b: name + (f" K={K:g}" if b == "quantile" else "") for b, name in BASELINE_SHORT.items()}
    rows = group_advantage_rows(G, K, counts)
    text = [
        [("✓ " if ok else "✗ ") + (f"{v:+.2f}" if v else "0") for ok, v in zip(row["rewards"], row["advantages"])]
        for row in rows
    ]
    return heatmap_figure(
        [row["advantages"] for row in rows],
        x=[f"y{i + 1}" for i in range(G)],
        y=[f"c={row['c']} · {names[row['baseline']]}" for row in rows],
        text=text,
        colorbar_title="advantage A",
        height=460,
        title="Advantages per response (✓ correct, ✗ wrong)",
        x_title="response (correct ones first)",
    )


# the legend names of zero_sources_figure's two stacked areas, bottom first
ZERO_SOURCES = ("all-equal groups: A = 0 under any baseline", "mixed groups: the side the gate leaves at 0")


def zero_sources_figure(G: int, K: float) -> go.Figure:
    r"""Where QAE's zero advantages come from: the expected share of one prompt's ``G`` responses with A = 0 against p,
    stacked by source, beside a uniform batch's share, the paper's ~80% and the boundary p = 1 - K.

    >>> fig = zero_sources_figure(16, 0.4)
    >>> fig.layout.title.text
    "Share of one prompt's 16 responses with A = 0, by its success rate p (K = 0.4)"
    >>> [t.name for t in fig.data][2:]
    ['a batch, p uniform on (0, 1): 75.7%', "the paper's ~80% (Qwen3-8B)"]
    >>> [t.name for t in fig.data][:2] == list(ZERO_SOURCES), [s.x0 for s in fig.layout.shapes]
    (True, [0.6])
    """
    ps = [round(0.01 * i, 2) for i in range(101)]
    src = zero_sources(torch.tensor(ps, dtype=torch.float64), G, K)
    batch = zero_sources_beta(1.0, 1.0, G, K).total
    fig = line_figure(
        ps,
        {
            ZERO_SOURCES[0]: src.all_equal.tolist(),
            ZERO_SOURCES[1]: src.gate.tolist(),
            f"a batch, p uniform on (0, 1): {batch:.1%}": [batch] * len(ps),
            "the paper's ~80% (Qwen3-8B)": [0.8] * len(ps),
        },
        title=f"Share of one prompt's {G} responses with A = 0, by its success rate p (K = {K:g})",
        x_title="success rate p",
        y_title="share of responses with A = 0",
        height=420,
    )
    fig.update_traces(stackgroup="zeros", selector=lambda t: t.name in ZERO_SOURCES)  # their sum: the whole share
    fig.update_traces(line={"color": "#444", "width": 1.5}, selector=lambda t: t.name not in ZERO_SOURCES)
    fig.data[2].line.dash, fig.data[3].line.dash = "dash", "dot"
    vline(fig, round(1 - K, 6), "p = 1 − K: hard | easy")
    fig.update_layout(legend_traceorder="normal")  # plotly reverses a stack's legend by default
    return fig.update_yaxes(range=[0, 1.05])


def zero_sources_table(G: int, K: float, *, rates) -> list[dict]:
    r"""The table under :func:`zero_sources_figure`: a batch of one group per rate of ``rates`` sampled (seed 0), then
    the exact share under other spreads of difficulty.

    >>> rows = zero_sources_table(16, 0.4, rates=torch.rand(2000, generator=torch.Generator().manual_seed(0)))
    >>> rows[1]["success rates"], round(rows[1]["A = 0 (%)"], 1)
    ('uniform on (0, 1): Beta(1, 1)', 75.7)
    """
    return zero_share_rows(sampled_zero_sources(rates, G, K), len(rates), G, K)


GATE_SYMBOLS = {-1: "−", 0: "0", 1: "+", 2: "±"}


def gate_heatmap(table, ks: Sequence[float], *, title: str = "", height: int = 420) -> go.Figure:
    r"""The two-regime gate (:func:`qae_lab.toys.sparsity.gate_table`) as a heatmap: rows K, columns c = 0..G; +1
    only successes move (green), -1 only failures (red), 0 nobody (grey), 2 both (purple, linear convention only).

    >>> import torch
    >>> gate_heatmap(torch.tensor([[0, 1, -1, 0]]), [0.4]).data[0].text[0]
    ['0', '+', '−', '0']
    """
    rows = [[int(v) for v in row] for row in table]
    colorscale = [
        [0.0, "#d62728"],
        [0.25, "#d62728"],
        [0.25, "#e5e5e5"],
        [0.5, "#e5e5e5"],
        [0.5, "#2ca02c"],
        [0.75, "#2ca02c"],
        [0.75, "#9467bd"],
        [1.0, "#9467bd"],
    ]
    fig = heatmap_figure(
        rows,
        x=list(range(len(rows[0]))),
        y=[f"K={k:g}" for k in ks],
        title=title,
        x_title="correct responses c in the group",
        y_title="K",
        text=[[GATE_SYMBOLS[v] for v in row] for row in rows],
        colorscale=colorscale,
        zmid=None,
        zmin=-1.5,
        zmax=2.5,
        height=height,
    )
    fig.update_traces(showscale=False, selector={"type": "heatmap"})
    return fig
