r"""Notebook 07's numbers and figures on the exact sequence policy: one prompt's logit table, prefix by prefix, and its
entropy by the chain rule (:func:`prefix_table`); the prompts' start success rates; QAE's Proposition 4.2 by regime in
training, from the committed runs (:func:`regimes_figure`, :func:`seed_differences_figure`).

The maths is :mod:`qae_lab.toys.seqpolicy`; notebook 09, 07's appendix, has :mod:`qae_lab.lab.notebooks.nb09_ledgers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from qae_lab._checks import as_real_tensor
from qae_lab.analysis.seqpolicy_runs import REGIMES, setting_name, start_groups
from qae_lab.lab.figures import bar_figure, finish_layout, wrap_title
from qae_lab.lab.run_figures import prompt_group_name, regimes_figure
from qae_lab.labels import PALETTE
from qae_lab.toys.seqpolicy import prefix_reach, sequence_logprobs, space_of, state_entropies

__all__ = [
    "prefix_table",
    "start_rates_figure",
    "regimes_figure",
    "PROP42",
    "seed_differences_figure",
    "differences_figure",
]


def _prefix_names(vocab: int, length: int) -> list[str]:
    """Every prefix's tokens as a string ("" the empty one), in the order of the logit table's rows."""
    names, level = [], [""]
    for _ in range(length):
        names += level
        level = [s + str(a) for s in level for a in range(vocab)]
    return names


def prefix_table(z) -> list[str]:
    r"""One prompt's (n, V) logits as a table, a row per prefix s: z_s, pi(.|s), reach rho(s), H(pi(.|s)); then H(pi)
    by the chain rule (eq. S2 of :mod:`qae_lab.toys.seqpolicy`) against enumeration. V <= 4, L <= 3.

    >>> import math
    >>> for line in prefix_table(torch.tensor([[0.0, math.log(3)], [0.0, 0.0], [0.0, 0.0]])):
    ...     print(line)
    prefix s    logits z_s    pi(.|s)  rho(s)  H(pi(.|s))
    (empty)     +0.0  +1.1  0.25 0.75   1.000       0.562
    0           +0.0  +0.0  0.50 0.50   0.250       0.693
    1           +0.0  +0.0  0.50 0.50   0.750       0.693
    chain rule: sum_s rho(s) H(pi(.|s)) = 1.2555 nats; enumerating the 4 sequences: H(pi) = 1.2555 nats
    """
    z = torch.as_tensor(z, dtype=torch.float64)
    if z.dim() != 2:
        raise ValueError(f"z must be one prompt's logit table (n, V), got shape {tuple(z.shape)}")
    vocab, length = space_of(z)
    if vocab > 4 or length > 3:
        raise ValueError(f"z must have V <= 4 and L <= 3 to be read as a table, got V = {vocab}, L = {length}")
    pi, rho, h = torch.softmax(z, -1), prefix_reach(z), state_entropies(z)  # (n, V), (n,), (n,)
    head = f"{'prefix s':<10}{'logits z_s':>{6 * vocab}}  {'pi(.|s)':>{5 * vocab - 1}}"
    lines = [f"{head}{'rho(s)':>8}{'H(pi(.|s))':>12}"]
    for name, zs, ps, r, hs in zip(_prefix_names(vocab, length), z.tolist(), pi.tolist(), rho.tolist(), h.tolist()):
        logits, probs = "".join(f"{v:+6.1f}" for v in zs), " ".join(f"{v:.2f}" for v in ps)
        lines.append(f"{name or '(empty)':<10}{logits}  {probs}{r:8.3f}{hs:12.3f}")
    lp = sequence_logprobs(z)  # (Y,)
    # H(pi) = sum_s rho(s) H(pi(.|s)) (chain rule) = -sum_y pi(y) log pi(y) (enumeration)
    chain, enumerated = float((rho * h).sum()), float(-(lp.exp() * lp).sum())
    lines.append(
        f"chain rule: sum_s rho(s) H(pi(.|s)) = {chain:.4f} nats; enumerating the {vocab**length} "
        f"sequences: H(pi) = {enumerated:.4f} nats"
    )
    return lines


def start_rates_figure(p0, n: int) -> go.Figure:
    r"""The (S, P) start success rates ``p0`` per rank, hardest first, mean over seeds; the ``n`` hardest and easiest
    (:func:`qae_lab.analysis.seqpolicy_runs.start_groups`) coloured and named as :func:`regimes_figure`'s panels.

    >>> fig = start_rates_figure([[0.1, 0.9, 0.5, 0.3], [0.2, 0.6, 0.8, 0.4]], 1)
    >>> [(t.name, list(t.x), [round(v, 2) for v in t.y]) for t in fig.data][::2]
    [('hard: the 1 hardest of 4', ['1'], [0.15]), ('easy: the 1 easiest of 4', ['4'], [0.85])]
    """
    p = as_real_tensor(p0, "p0").double()
    start_groups(p, n)  # checks p0's shape and n (the groups drawn are its groups)
    s_count, p_count = p.shape
    mean = p.sort(1).values.mean(0)  # (P,): the mean over seeds of each rank's p_0, hardest first
    ranks = [str(i + 1) for i in range(p_count)]
    meta = {"n_group": n, "n_prompts": p_count}
    groups = {
        prompt_group_name("hard", meta): range(0, n),
        f"the {p_count - 2 * n} in between": range(n, p_count - n),
        prompt_group_name("easy", meta): range(p_count - n, p_count),
    }
    fig = bar_figure(
        ranks,
        {},
        title=f"Start success rate p of the {p_count} prompts of each seed, hardest to "
        f"easiest, mean over {s_count} seed{'s' if s_count != 1 else ''}",
        x_title="prompt, by rank (1 = hardest)",
        y_title="p at the start",
    )
    colours = (PALETTE[4], "#7f7f7f", PALETTE[2])  # not the regimes figure's baseline colours
    for (name, idx), colour in zip(groups.items(), colours):
        if len(idx):
            fig.add_trace(
                go.Bar(x=[ranks[i] for i in idx], y=[float(mean[i]) for i in idx], name=name, marker_color=colour)
            )
    fig.update_layout(barmode="overlay", yaxis_range=[0, 1])
    return fig


# Prop. 4.2's two halves as notebook 07 measures them (qae_lab.analysis.evidence): the claim, and its row label
PROP42 = {"hard_prop42": "hard prompts: entropy peak / start", "easy_prop42": "easy prompts: entropy at step 10"}


def seed_differences_figure(judged: Mapping) -> go.Figure:
    r"""Each seed's quantile - mean for both halves of Prop. 4.2 (:data:`PROP42`) under each optimizer, with the 95%
    interval (:func:`differences_figure` of :func:`qae_lab.analysis.evidence.judge_all`'s ``judged``).

    >>> from qae_lab.analysis.evidence import judge_all
    >>> fig = seed_differences_figure(judge_all(["sequence policy"]))
    >>> list(fig.layout.yaxis.ticktext)[:2], len(fig.data[0].x)
    (['hard prompts: entropy peak / start, Adam', 'hard prompts: entropy peak / start, SGD'], 16)
    """
    rows = [
        (f"{label}, {variant}", [x - y for x, y in zip(e["values_a"], e["values_b"])], v.word, v.lo, v.hi)
        for key, label in PROP42.items()
        for (claim, setting, variant), (e, v) in judged.items()
        if claim == key and setting == "sequence policy"
    ]
    if not rows:
        raise ValueError("judged holds no sequence-policy evidence of Prop. 4.2 (qae_lab.analysis.evidence.judge_all)")
    return differences_figure(
        rows,
        title="Each seed's quantile minus mean baseline (same tasks, same start), with the 95% interval",
        x_title="quantile - mean",
    )


# a verdict's colour (qae_lab.analysis.claims.VERDICTS): held green, reversed red, no difference grey
VERDICT_COLOURS = {
    "holds": "#2ca02c",
    "reversed": "#d62728",
    "no difference": "#7f7f7f",
    "cannot be tested here": "#bbbbbb",
}


def differences_figure(
    rows: Sequence[tuple[str, Sequence[float], str, float | None, float | None]],
    *,
    title: str = "",
    x_title: str = "a - b, per seed",
    height: int | None = None,
) -> go.Figure:
    r"""Paired seeds' differences, a row per ``(label, differences, verdict, lo, hi)``: a dot per seed, the 95%
    interval a bar coloured by the verdict, and a line at zero.

    >>> fig = differences_figure([("hard, Adam", [-0.2, -0.1], "holds", -0.3, -0.01)])
    >>> [t.name for t in fig.data], list(fig.data[0].x)
    (['each seed', 'holds: 95% interval'], [-0.2, -0.1])
    """
    fig = go.Figure()
    shown: set[str] = set()
    for i, (label, diffs, word, lo, hi) in enumerate(rows):
        n = len(diffs)
        jitter = [i + 0.25 * ((j % 5) - 2) / 2 for j in range(n)]  # seeds spread a little around their row
        fig.add_trace(
            go.Scatter(
                x=[float(d) for d in diffs],
                y=jitter,
                mode="markers",
                marker={"color": "#1f77b4", "size": 7, "opacity": 0.7},
                name="each seed",
                legendgroup="seeds",
                showlegend=i == 0,
            )
        )
        if lo is not None:
            fig.add_trace(
                go.Scatter(
                    x=[lo, hi],
                    y=[i + 0.4, i + 0.4],
                    mode="lines+markers",
                    line={"color": VERDICT_COLOURS.get(word, "#444"), "width": 5},
                    marker={"symbol": "line-ns", "size": 12, "line": {"width": 2}},
                    name=f"{word}: 95% interval",
                    legendgroup=word,
                    showlegend=word not in shown,
                )
            )
            shown.add(word)
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.update_yaxes(
        tickvals=list(range(len(rows))),
        ticktext=[r[0] for r in rows],
        range=[-0.7, len(rows) - 0.3],
        autorange="reversed",
    )
    return finish_layout(fig, title, x_title, "", height or 140 + 70 * len(rows))
