r"""What notebook 06 (the papers' phenomena on the committed sums runs) draws: which logged metrics its views offer,
in which words, and which runs each view shows; the figures are :mod:`qae_lab.lab.run_figures`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab.analysis.compare import Curve, Run, group_by_method, series
from qae_lab.analysis.phenomena import ROSE, START
from qae_lab.analysis.stats import moving_average
from qae_lab.lab.figures import add_band_line, wrap_title
from qae_lab.labels import PALETTE
from qae_lab.labels import ENTROPY_CURVES, LEDGER_CELLS, LEDGER_CURVES, NEG_CORRECT_CURVES, SAAH_CURVES
from qae_lab.lab.run_figures import BEFORE, K_SWEEP_QUANTITIES, Lines, k_sweep_lines, pass_at_k_lines

__all__ = [
    "ENTROPY_CURVES",
    "LEDGER_CELLS",
    "LEDGER_CURVES",
    "NEG_CORRECT_CURVES",
    "SAAH_CURVES",
    "SAAH_METHODS",
    "K_SWEEP_QUANTITIES",
    "BEFORE",
    "runs_of",
    "relative_entropy",
    "phenomenon_figure",
    "Lines",
    "pass_at_k_lines",
    "k_sweep_lines",
]

# SA-AH against GRPO under the composite reward (sec. 6): the two methods compared, the curves offered
SAAH_METHODS: tuple[str, ...] = ("mean", "sa_ah")
# the columns of qae_lab.analysis.phenomena.k_sweep_rows drawn against K


def runs_of(runs: Iterable[Run], methods: Iterable[str]) -> list[Run]:
    r"""The runs whose method is one of ``methods``, in their order.

    >>> runs = [Run(f"{m}-seed0", m, 0, {}, [], None, None) for m in ("mean", "qae", "sa_ah")]
    >>> [r.method for r in runs_of(runs, SAAH_METHODS)]
    ['mean', 'sa_ah']
    """
    wanted = set(methods)
    return [r for r in runs if r.method in wanted]


_PAST, _BELOW = "#444444", "#bbbbbb"  # a search try's bar: past the explosion's threshold, or not


def relative_entropy(run: Run, window: int = START) -> dict[int, float]:
    r"""``{step: entropy / start}`` of one run, the entropy a trailing ``window``-step average and the start the mean
    of its first :data:`~qae_lab.analysis.phenomena.START` values, as the explosion's peak / start is read.

    >>> run = Run("r", "mean", 0, {}, [{"step": s, "entropy": 0.2 if s <= 10 else 0.3} for s in range(1, 13)], None,
    ...           None)
    >>> {s: round(v, 3) for s, v in relative_entropy(run, window=1).items() if s > 9}
    {10: 1.0, 11: 1.5, 12: 1.5}
    """
    steps, values = series(run, "entropy")
    if len(values) < START:
        return {}
    start = sum(values[:START]) / START
    return {s: v / start for s, v in zip(steps, moving_average(values, window))}


def phenomenon_figure(search: Sequence[Mapping], runs: Sequence[Run], window: int = START) -> go.Figure:
    r"""The entropy phenomenon search and its test: left, each try's peak / start under the mean baseline (the control)
    against the explosion's threshold; right, entropy / start of the chosen setting's fresh seeds, mean +- std per
    method (a ``window``-step trailing average).

    >>> row = lambda name, p: {"name": name, "method": "mean+clip_higher", "peak/start": p}
    >>> runs = [Run(f"{m}-seed{s}", m, s, {}, [{"step": t, "entropy": 0.2 + 0.001 * t * s} for t in range(1, 31)],
    ...             None, None) for m in ("mean+clip_higher", "qae+clip_higher") for s in (1, 2)]
    >>> fig = phenomenon_figure([row("base", 1.01), row("lr3e-4", 1.2)], runs)
    >>> [t.name for t in fig.data if t.showlegend is not False]
    ['mean+clip_higher (2 seeds)', 'qae+clip_higher (2 seeds)']
    """
    control = [r for r in search if str(r.get("method", "")).startswith("mean") and r.get("peak/start") is not None]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.4, 0.6],
        horizontal_spacing=0.2,
        subplot_titles=(
            f"the search: {len(control)} runs of the mean baseline",
            "the chosen setting on fresh seeds",
        ),
    )
    ratios = [r["peak/start"] for r in control]
    colours = [_PAST if v >= ROSE else _BELOW for v in ratios]
    names = [r["name"] for r in control]
    fig.add_trace(
        go.Bar(x=ratios, y=names, orientation="h", marker_color=colours, showlegend=False, name="peak / start"),
        row=1,
        col=1,
    )
    n_seeds = 0
    for i, (method, group) in enumerate(group_by_method(runs).items()):
        points = [p for r in group if (p := relative_entropy(r, window))]
        if not points:
            continue
        c = Curve.over(points)
        n_seeds = max(n_seeds, c.n_runs)
        name = f"{method} ({c.n_runs} seed{'s' * (c.n_runs != 1)})"
        add_band_line(fig, c.steps, c.mean, c.std, PALETTE[i % len(PALETTE)], name, method, 2, legend=True)
    dashed = {"line_dash": "dash", "line_color": "#444", "line_width": 1, "row": 1}
    fig.add_vline(ROSE, col=1, **dashed)  # the explosion's threshold, on the bars' axis
    fig.add_hline(ROSE, col=2, **dashed)  # and on the curves'
    low = min([*ratios, 1.0]) - 0.05  # the bars start near 1, where the differences are
    fig.update_xaxes(
        title_text="entropy peak / start (10-step averages)", range=[low, max([*ratios, ROSE]) + 0.05], row=1, col=1
    )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="optimizer steps", row=1, col=2)
    fig.update_yaxes(title_text=f"entropy / start ({window}-step average)", row=1, col=2)
    title = (
        f"The mean baseline's entropy explodes where its peak passes {ROSE:.1f}x its start (dashed): the tries of the "
        f"search (dark: past it), then the chosen setting, mean ± std over {n_seeds} fresh seeds"
    )
    fig.update_layout(
        title={"text": wrap_title(title, 100), "font": {"size": 15}},
        template="plotly_white",
        height=500,
        margin={"l": 110, "r": 20, "t": 120, "b": 90},
        legend={"orientation": "h", "yanchor": "top", "y": -0.18},
    )
    return fig
