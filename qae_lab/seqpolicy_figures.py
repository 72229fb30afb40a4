r"""Notebook 07's figures of the exact sequence policy (the lab layer): one update's ledgers by part, live training
runs under the controls, the committed sweep's comparisons and SA-AH's update against GRPO's.

The numbers come from :mod:`qae_lab.seqpolicy_live`, :mod:`qae_lab.seqpolicy_lab` and
:mod:`qae_lab.seqpolicy_update`; the notebook puts the figures under its controls with
:func:`qae_lab.plots.interactive` (keyword arguments named as the controls).
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from qae_lab.plots import band_figure, bar_figure
from qae_lab.seqpolicy_lab import findings_curves, run_curves, setting_name
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

__all__ = ["ledger_shares_figure", "live_figure", "findings_figure", "variance_figure"]


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
