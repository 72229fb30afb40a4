r"""Notebook 02's figures and closing summary: the linear knob, the Monte-Carlo entropy change, and the sentences that state what its checks measured.

Notebook 02's closing summary: the sentences that state what its toy-softmax checks measured.

The numbers come from :mod:`qae_lab.toys.bandit` (the identity's first-order error, Prop. 4.2 of QAE, arXiv 2509.22611)
and :mod:`qae_lab.toys.bandit` (one sampled-group step, a small training run); this module only words them, so
each sentence says what the notebook's own run showed and stays true when a knob or the seed changes.
Nothing here imports plotly or ipywidgets.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab.lab.plots import line_figure
from qae_lab.toys.bandit import knob_curve, mc_entropy_curve, mc_verdicts

__all__ = ["mc_verdicts", "summary_01", "knob_figure", "mc_figure"]


_COUNT_KEYS = ("checked", "hard", "easy", "violations_first_order", "violations_exact")


def summary_01(
    slope: float,
    counts: Mapping[str, int],
    mc: Mapping[str, Sequence[float]],
    runs: Mapping[str, Mapping[str, Sequence[float]]],
) -> str:
    r"""The summary of notebook 02, one sentence per section, from the values its cells computed (each wrapped
    at 110 characters).

    Args:
        slope: the log-log slope of the identity's first-order error (:func:`qae_lab.toys.bandit.loglog_slope`).
        counts: :func:`qae_lab.toys.bandit.proposition_42_sweep`'s counts.
        mc: :func:`qae_lab.toys.bandit.mc_entropy_curve`'s output (one entry per success rate).
        runs: ``{name: simulate_training(...)}`` (at least one run).

    >>> mc = {"mean": [0.01, 0.01], "mean_stderr": [0.001] * 2, "quantile": [0.002, 0.011],
    ...       "quantile_stderr": [0.001] * 2}
    >>> runs = {"mean": {"entropy": [0.9, 0.4], "success": [0.5, 0.8]},
    ...         "QAE": {"entropy": [0.9, 0.6], "success": [0.5, 0.7]}}
    >>> counts = dict(checked=8, hard=5, easy=3, violations_first_order=0, violations_exact=1)
    >>> print(summary_01(2.01, counts, mc, runs))
    * The first-order identity's error fell with log-log slope 2.01 over the smallest steps (2 is O(eta^2)).
    * Proposition 4.2 on 8 (policy, p, K) cases (5 hard, 3 easy): 0 violations to first order, 1 with the exact
      entropy after the step.
    * One sampled step: QAE's mean entropy change was lower than the mean baseline's at 1, higher at 0 and within
      two standard errors at 1 of 2 success rates.
    * After 1 steps of training, mean H / log A (mean success): mean 0.400 (0.800), QAE 0.600 (0.700).
    """
    missing = [key for key in _COUNT_KEYS if key not in counts]
    if missing:
        raise ValueError(f"counts must hold {_COUNT_KEYS} (proposition_42_sweep's), missing {missing}")
    if not runs:
        raise ValueError("runs must hold at least one simulated run")
    verdicts = mc_verdicts(mc)
    steps = len(next(iter(runs.values()))["entropy"]) - 1
    finals = ", ".join(f"{name} {o['entropy'][-1]:.3f} ({o['success'][-1]:.3f})" for name, o in runs.items())
    return "\n".join(
        textwrap.fill(line, 110, subsequent_indent="  ")
        for line in [
            f"* The first-order identity's error fell with log-log slope {slope:.2f} over the smallest steps "
            f"(2 is O(eta^2)).",
            f"* Proposition 4.2 on {counts['checked']} (policy, p, K) cases ({counts['hard']} hard, {counts['easy']} "
            f"easy): {counts['violations_first_order']} violations to first order, {counts['violations_exact']} with "
            f"the exact "
            f"entropy after the step.",
            f"* One sampled step: QAE's mean entropy change was lower than the mean baseline's at "
            f"{verdicts.count('lower')}, higher at {verdicts.count('higher')} and "
            f"within two standard errors at "
            f"{verdicts.count('same')} of {len(verdicts)} success rates.",
            f"* After {steps} steps of training, mean H / log A (mean success): {finals}.",
        ]
    )


def knob_figure(eta: float, sharpness: float, p: float, K: float) -> go.Figure:
    r"""The linear knob of one bandit (:func:`qae_lab.toys.bandit.knob_curve`): first-order dH against the baseline b,
    with the mean baseline b = p and QAE's b_K marked.

    >>> fig = knob_figure(0.5, 1.5, 0.3, 0.4)
    >>> fig.layout.title.text.endswith("b_K = 0 (hard prompt)"), [s.x0 for s in fig.layout.shapes]
    (True, [0.3, 0.0])
    """
    c = knob_curve(p, K, eta, sharpness)
    fig = line_figure(
        c.b.tolist(),
        {"dH(b), first order": c.dh.tolist()},
        x_title="baseline b",
        y_title="dH",
        title=f"slope eta*Cov(log pi, pi) = {c.slope:.2e};  b_K = {c.b_k:.0f} ({'hard' if c.hard else 'easy'} prompt)",
    )
    fig.add_vline(x=p, line_dash="dot", annotation_text="mean b = p")
    fig.add_vline(x=c.b_k, line_color="red", annotation_text="QAE b_K")
    return fig


def mc_figure(
    K: float, G: int, eta: float, sharpness: float, *, n_groups: int, ps: Sequence[float] | None = None
) -> go.Figure:
    r"""E[dH] after one step against the success rate: sampled groups under the mean and the QAE baseline (+- two
    standard errors), the expected gradient and the identity's predictions (:func:`qae_lab.toys.bandit.mc_entropy_curve`
    with seed 3, at ``ps``, default 13 rates from 0.05 to 0.95).

    >>> fig = mc_figure(0.4, 8, 0.5, 1.5, n_groups=20, ps=[0.3, 0.7])
    >>> [t.name for t in fig.data if t.name][:2], fig.layout.title.text
    (['sampled, mean baseline (c)', 'sampled, QAE baseline (c)'], 'E[dH] after one step, K = 0.4, G = 8')
    """
    ps = torch.linspace(0.05, 0.95, 13) if ps is None else torch.tensor(list(ps))
    out = mc_entropy_curve(ps, group_size=G, n_groups=n_groups, k=K, eta=eta, sharpness=sharpness, seed=3)
    return line_figure(
        ps.tolist(),
        {
            "sampled, mean baseline (c)": out["mean"],
            "sampled, QAE baseline (c)": out["quantile"],
            "expected gradient (b)": out["expected_pg"],
            "identity, b = p (a)": out["identity_mean"],
            "identity, b = b_K (a)": out["identity_quantile"],
        },
        bands={
            "sampled, mean baseline (c)": [2 * s for s in out["mean_stderr"]],
            "sampled, QAE baseline (c)": [2 * s for s in out["quantile_stderr"]],
        },
        title=f"E[dH] after one step, K = {K:g}, G = {G}",
        x_title="success rate p",
        y_title="entropy change",
        markers=True,
    )
