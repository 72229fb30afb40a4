"""qae_lab.seqpolicy_figures: notebook 07's figures, checked against the numbers they draw."""

from __future__ import annotations

import pytest

from qae_lab.seqpolicy import make_tasks
from qae_lab.seqpolicy_figures import findings_figure, ledger_shares_figure, live_figure, variance_figure
from qae_lab.seqpolicy_lab import findings_curves, run_curves, setting_name
from qae_lab.seqpolicy_live import COMPARISONS, SHARE_PARTS, LiveRuns
from qae_lab.seqpolicy_report import load_findings


def test_ledger_shares_figure_one_bar_group_per_ledger():
    m = {f"{kind}/{p}": v for kind in ("sampled", "estimator_npg")
         for p, v in zip(SHARE_PARTS, [0.5, 1.0, -1.0, 0.5, 0.0])}
    fig = ledger_shares_figure(m, {"exact": "sampled", "npg": "estimator_npg"}, title="shares")
    assert [t.name for t in fig.data] == ["exact", "npg"]
    assert list(fig.data[1].x) == SHARE_PARTS and list(fig.data[1].y) == [0.2, 0.4, -0.4, 0.2, 0.0]
    assert fig.layout.xaxis.title.text == "part of the ledger"


def test_live_figure_titles_and_cumulative_ledger():
    live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=4, eta=5.0, adam_eta=0.02)
    fig = live_figure(live, "quantile", 0.6, False, True, "peaked", 0.5, "sgd", "cumulative ledger, exact")
    assert fig.layout.title.text.replace("<br>", " ") == (
        "first-order dH summed over steps (nats): baseline = quantile, K = 0.6, Clip-Higher off, std on, peaked "
        "start, α = 0.5, optimizer sgd")  # wrapped at a space
    out = live("quantile", 0.6, False, True, "peaked", 0.5, "sgd")
    want = run_curves(out, {"all": "sampled/dh"}, cumulative=True)["all"]
    line = next(t for t in fig.data if t.name and t.name.startswith("all ("))
    assert list(line.y) == pytest.approx(want.mean) and list(line.x) == [1, 2, 3, 4]
    adam = live_figure(live, "mean", 0.4, True, False, "flat", 0.0, "adam", "cumulative ledger, exact")
    assert [t.name for t in adam.data if t.name] == ["all (grad H . dz, whole step) (2 runs)"]


def test_findings_figure_draws_the_committed_curves():
    findings = load_findings()
    fig = findings_figure(findings, COMPARISONS, "peaked", "optimizer", "success")
    names = {label: setting_name("peaked", *spec) for label, spec in COMPARISONS["optimizer"].items()}
    want = findings_curves(findings, names, "success_curve")
    lines = {t.name.split(" (")[0]: t for t in fig.data if t.name}
    assert set(lines) == set(want)
    assert list(lines["quantile, Adam"].y) == pytest.approx(want["quantile, Adam"].mean)
    assert fig.layout.yaxis.title.text == "success rate" and "optimizer, peaked start" in fig.layout.title.text


def test_variance_figure_ratios_to_grpo():
    tasks = {"flat": make_tasks(2, 2, 2, start="flat", seed=0)}
    fig = variance_figure(tasks, 1.0, "flat", eta=1.0, n_draws=8)
    assert [t.name for t in fig.data] == ["alpha = 0", "SA-AH, alpha = 1", "AH, alpha = 1"]
    assert list(fig.data[0].y) == [1.0, 1.0]  # GRPO against itself
    assert list(fig.data[0].x) == ["tr Cov(dz) / GRPO's", "|E dz| / GRPO's"]
    assert "same 8 batches, α = 1, flat start" in fig.layout.title.text
