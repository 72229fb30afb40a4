r"""The figures of the exact sequence policy (the lab layer). Notebook 07: the prompts' start success rates, hardest
to easiest, and QAE's Proposition 4.2 by regime in training (the committed ``regimes.json``: hard | easy | mixed
prompts, mean vs quantile baseline). Notebook 09, its appendix: one update's ledgers by part, live training runs under
the controls, the committed sweep's comparisons, SA-AH's update against GRPO's.

The numbers come from :mod:`qae_lab.seqpolicy_live`, :mod:`qae_lab.seqpolicy_lab` and
:mod:`qae_lab.seqpolicy_update`; the notebook puts the figures under its controls with
:func:`qae_lab.plots.interactive` (keyword arguments named as the controls).
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab._checks import as_real_tensor
from qae_lab.plots import PALETTE, band_figure, bar_figure, wrap_title
from qae_lab.seqpolicy_lab import REGIMES, findings_curves, regime_setting_name, run_curves, setting_name, start_split
from qae_lab.seqpolicy_live import (
    LEDGER_KINDS,
    SHARE_PARTS,
    SHOW,
    LiveRuns,
    ledger_keys,
    ledger_shares,
    variance_ratios,
)
from qae_lab.seqpolicy_update import UpdateSettings, update_variance

__all__ = ["ledger_shares_figure", "live_figure", "findings_figure", "variance_figure", "start_rates_figure",
           "regimes_figure"]


def ledger_shares_figure(metrics: Mapping[str, float], kinds: Mapping[str, str] = LEDGER_KINDS, *,
                         title: str) -> go.Figure:
    r"""One update's ledgers by part (:data:`qae_lab.seqpolicy_live.SHARE_PARTS`), each as a share of its summed
    |cells| (:func:`qae_lab.seqpolicy_live.ledger_shares`), grouped bars per ledger of ``kinds``.

    >>> m = {f"sampled/{p}": v for p, v in zip(SHARE_PARTS, [-0.2, -0.1, 0.1, -0.3, 0.1])}
    >>> fig = ledger_shares_figure(m, {"exact": "sampled"}, title="t")
    >>> list(fig.data[0].x), [round(y, 3) for y in fig.data[0].y]
    (['dh', 'dh_hard_pos', 'dh_hard_neg', 'dh_easy_pos', 'dh_easy_neg'], [-0.333, -0.167, 0.167, -0.5, 0.167])
    """
    return bar_figure(SHARE_PARTS, {label: ledger_shares(metrics, kind) for label, kind in kinds.items()},
                      title=title, x_title="part of the ledger", y_title="share of the ledger's |change|")


def live_figure(live: LiveRuns, baseline: str, K: float, clip_higher: bool, std: bool, start: str, alpha: float,
                optimizer: str, show: str) -> go.Figure:
    r"""One of :data:`qae_lab.seqpolicy_live.SHOW` over the steps of the live run with these settings (``live``
    makes it once), mean over seeds +- std; ledgers summed over the steps; about 100 points drawn.

    >>> live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=3, eta=1.0, adam_eta=0.01)
    >>> fig = live_figure(live, "mean", 0.4, True, True, "flat", 0.0, "sgd", "success")
    >>> [t.name for t in fig.data if t.name], fig.layout.yaxis.title.text
    (['success (2 runs)'], 'success rate')
    """
    out = live(baseline, K, clip_higher, std, start, alpha, optimizer)
    on = {True: "on", False: "off"}
    title = (f"{SHOW[show]}: baseline = {baseline}, K = {K:g}, Clip-Higher {on[bool(clip_higher)]}, std "
             f"{on[bool(std)]}, {start} start, α = {alpha:g}, optimizer {optimizer}")
    curves = run_curves(out, ledger_keys(show, optimizer), cumulative=True, stride=max(1, live.steps // 100))
    return band_figure(curves, title=title, y_title=SHOW[show])


def findings_figure(findings: Mapping, comparisons: Mapping[str, Mapping[str, tuple]], start: str, group: str,
                    curve: str) -> go.Figure:
    r"""One comparison of the committed sweep (``comparisons[group]``: legend name -> the setting's baseline, K,
    Clip-Higher, std[, optimizer]) from one ``start``: its ``entropy`` or ``success`` curves, mean +- std over seeds.

    >>> from qae_lab.seqpolicy_report import load_findings
    >>> from qae_lab.seqpolicy_live import COMPARISONS
    >>> fig = findings_figure(load_findings(), COMPARISONS, "flat", "mean vs quantile", "entropy")
    >>> [t.name.split(" (")[0] for t in fig.data if t.name], fig.layout.yaxis.title.text
    (['mean', 'quantile'], 'H(pi) (nats)')
    """
    names = {label: setting_name(start, *spec) for label, spec in comparisons[group].items()}
    return band_figure(findings_curves(findings, names, f"{curve}_curve"),
                       title=f"committed runs, {curve}: {group}, {start} start (mean ± std over seeds)",
                       y_title="H(pi) (nats)" if curve == "entropy" else "success rate")


def variance_figure(tasks: Mapping, alpha: float, start: str, *, eta: float, n_draws: int) -> go.Figure:
    r"""SA-AH's and AH's update at ``alpha`` against GRPO's (alpha = 0) on the same ``n_draws`` batches of the
    ``start`` task: tr Cov(dz) and |E dz| as ratios to GRPO's (:func:`qae_lab.seqpolicy_live.variance_ratios` of
    :func:`qae_lab.seqpolicy_update.update_variance`, mean baseline, G = 8).

    >>> from qae_lab.seqpolicy import make_tasks
    >>> fig = variance_figure({"peaked": make_tasks(2, 2, 2, start="peaked")}, 0.5, "peaked", eta=1.0, n_draws=4)
    >>> [t.name for t in fig.data], list(fig.data[0].y)
    (['alpha = 0', 'SA-AH, alpha = 0.5', 'AH, alpha = 0.5'], [1.0, 1.0])
    """
    t = tasks[start]
    out = update_variance(t.logits, t.rewards, UpdateSettings(group_size=8, baseline="mean", eta=eta),
                          alphas=(alpha,), n_draws=n_draws)
    return bar_figure(["tr Cov(dz) / GRPO's", "|E dz| / GRPO's"], variance_ratios(out),
                      title=f"The update against GRPO's (alpha = 0) on the same {n_draws} batches, α = {alpha:g},"
                            f" {start} start", y_title="ratio")


def start_rates_figure(p0, n: int, k: float) -> go.Figure:
    r"""The prompts' start success rates, hardest to easiest: each seed's prompts sorted by p_0, then per rank the mean
    over seeds; the ``n`` hardest and the ``n`` easiest (the groups of :func:`qae_lab.seqpolicy_lab.start_split`) in
    their own colours, and a dotted line at 1 - K, QAE's regime boundary (hard at or below it).

    Args:
        p0: (S, P) start success rates (:func:`qae_lab.seqpolicy.success_rate` of S task sets). n: prompts per group.
        k: QAE's K.

    >>> fig = start_rates_figure([[0.1, 0.9, 0.5, 0.3], [0.2, 0.6, 0.8, 0.4]], 1, 0.4)
    >>> [(t.name, list(t.x), [round(v, 2) for v in t.y]) for t in fig.data][::2]
    [('the 1 hardest', ['1'], [0.15]), ('the 1 easiest', ['4'], [0.85])]
    """
    p = as_real_tensor(p0, "p0").double()
    start_split(p, n)  # checks p0's shape and n (the groups drawn are its groups)
    s_count, p_count = p.shape
    mean = p.sort(1).values.mean(0)  # (P,): the mean over seeds of each rank's p_0, hardest first
    ranks = [str(i + 1) for i in range(p_count)]
    groups = {f"the {n} hardest": range(0, n), f"the {p_count - 2 * n} in between": range(n, p_count - n),
              f"the {n} easiest": range(p_count - n, p_count)}
    fig = bar_figure(ranks, {}, title=f"Start success rate p of the {p_count} prompts of each seed, hardest to "
                                      f"easiest, mean over {s_count} seed{'s' if s_count != 1 else ''}",
                     x_title="prompt, by rank (1 = hardest)", y_title="p at the start")
    colours = (PALETTE[4], "#7f7f7f", PALETTE[2])  # not the regimes figure's baseline colours
    for (name, idx), colour in zip(groups.items(), colours):
        if len(idx):
            fig.add_trace(go.Bar(x=[ranks[i] for i in idx], y=[float(mean[i]) for i in idx], name=name,
                                 marker_color=colour))
    fig.add_hline(y=1 - k, line_dash="dot", line_color="#444", line_width=1,
                  annotation_text=f"1 - K = {1 - k:g}: hard at or below", annotation_position="top left")
    fig.update_layout(barmode="overlay", yaxis_range=[0, 1])
    return fig


def _group_title(group: str, meta: Mapping, p0: float) -> str:
    """A panel's title: which prompts, how many, their start success rate."""
    n, n_prompts = meta["n_group"], meta["n_prompts"]
    which = {"hard": f"the {n} hardest of {n_prompts}", "easy": f"the {n} easiest of {n_prompts}",
             "mixed": f"all {n_prompts} prompts"}[group]
    return f"{group}: {which}<br>(start p {p0:.2f})"


def regimes_figure(regimes: Mapping, optimizer: str = "adam", clip_higher: bool = True) -> go.Figure:
    r"""QAE's Proposition 4.2 by regime in training: three panels side by side, hard | easy | mixed (each seed's
    prompts grouped by their start success rate, :func:`qae_lab.seqpolicy_lab.start_split`), each the mean entropy
    curve over seeds +- one std under the mean and the quantile baseline, for one ``optimizer`` and Clip-Higher
    setting of the committed runs (:func:`qae_lab.seqpolicy_report.load_regimes`). A plain ``go.Figure``.

    >>> from qae_lab.seqpolicy_report import load_regimes
    >>> fig = regimes_figure(load_regimes(), "adam", True)
    >>> [t.name for t in fig.data if t.showlegend is not False]
    ['mean baseline (16 seeds)', 'quantile baseline, K = 0.4 (16 seeds)']
    """
    meta, runs = regimes["meta"], regimes["runs"]
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    names = {"mean baseline": regime_setting_name(optimizer, "mean", meta["k"], bool(clip_higher)),
             f"quantile baseline, K = {meta['k']:g}": regime_setting_name(optimizer, "quantile", meta["k"],
                                                                         bool(clip_higher))}
    groups = {label: runs[name]["groups"] for label, name in names.items()}
    first = next(iter(groups.values()))
    titles = [_group_title(g, meta, sum(first[g]["start_p"]) / len(first[g]["start_p"])) for g in REGIMES]
    fig = make_subplots(rows=1, cols=len(REGIMES), shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.04)
    for i, (label, by_group) in enumerate(groups.items()):
        color = PALETTE[i % len(PALETTE)]
        for col, group in enumerate(REGIMES, start=1):
            c = by_group[group]["entropy_curve"]
            x, mean, std = c["steps"], c["mean"], c["std"]
            upper, lower = [m + s for m, s in zip(mean, std)], [m - s for m, s in zip(mean, std)]
            # the +- std band: the upper edge forwards, the lower edge back, filled
            fig.add_trace(go.Scatter(x=x + x[::-1], y=upper + lower[::-1], fill="toself", fillcolor=color,
                                     opacity=0.2, line={"width": 0}, hoverinfo="skip", showlegend=False,
                                     legendgroup=label), row=1, col=col)
            fig.add_trace(go.Scatter(x=x, y=mean, mode="lines", line={"color": color}, legendgroup=label,
                                     name=f"{label} ({c['n']} seeds)", showlegend=col == 1), row=1, col=col)
    opt = {"adam": f"Adam, lr {meta['adam_eta']:g}, {meta['adam_passes']} passes",
           "sgd": f"SGD, step {meta['sgd_eta']:g}, {meta['sgd_passes']} passes"}[optimizer]
    n_seeds = first["mixed"]["entropy_curve"]["n"]
    title = (f"Entropy H(pi) of the prompts hard / easy at the start, mean vs quantile baseline<br>{opt}, Clip-Higher "
             f"{'on' if clip_higher else 'off'}; mean ± std over {n_seeds} seeds")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="H(pi) (nats)", row=1, col=1)
    # px: the title's lines at the top, the panels' two-line titles under it, "step" and the legend below the panels
    top, bottom, plot_h = 125, 100, 300
    height = top + plot_h + bottom
    fig.update_layout(title={"text": wrap_title(title, 100), "font": {"size": 15}, "y": 1 - 12 / height,
                             "yanchor": "top"}, template="plotly_white", height=height,
                      margin={"l": 60, "r": 20, "t": top, "b": bottom},
                      legend={"orientation": "h", "yanchor": "top", "y": -60 / plot_h})
    return fig
