"""qae_lab.lab.nb07_sequence_policy: notebooks 07's and 09's figures, checked against the numbers they draw."""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import pytest

from qae_lab.toys.seqpolicy import make_tasks
from qae_lab.lab.nb07_sequence_policy import (
    findings_figure,
    ledger_shares_figure,
    live_figure,
    regimes_figure,
    start_rates_figure,
    variance_figure,
)
from qae_lab.analysis.seqpolicy_runs import findings_curves, run_curves, setting_name
from qae_lab.lab.nb07_sequence_policy import COMPARISONS, SHARE_PARTS, LiveRuns
from qae_lab.analysis.seqpolicy_findings import load_findings, load_regimes


def test_ledger_shares_figure_one_bar_group_per_ledger():
    m = {
        f"{kind}/{p}": v
        for kind in ("sampled", "estimator_npg")
        for p, v in zip(SHARE_PARTS, [0.5, 1.0, -1.0, 0.5, 0.0])
    }
    fig = ledger_shares_figure(m, {"exact": "sampled", "npg": "estimator_npg"}, title="shares")
    assert [t.name for t in fig.data] == ["exact", "npg"]
    assert list(fig.data[1].x) == SHARE_PARTS and list(fig.data[1].y) == [0.2, 0.4, -0.4, 0.2, 0.0]
    assert fig.layout.xaxis.title.text == "part of the ledger"


def test_live_figure_titles_and_cumulative_ledger():
    live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=4, eta=5.0, adam_eta=0.02)
    fig = live_figure(live, "quantile", 0.6, False, True, "peaked", 0.5, "sgd", "cumulative ledger, exact")
    assert fig.layout.title.text.replace("<br>", " ") == (
        "first-order dH summed over steps (nats): baseline = quantile, K = 0.6, Clip-Higher off, std on, peaked "
        "start, α = 0.5, optimizer sgd"
    )  # wrapped at a space
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


def test_regimes_figure_draws_the_committed_curves_in_three_panels():
    r = load_regimes()
    meta = r["meta"]
    fig = regimes_figure(r, "sgd", False)
    assert type(fig) is go.Figure  # a plain figure, not a FigureWidget
    titles = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    start_p = lambda g: sum(r["runs"]["sgd/mean/clip-0.2"]["groups"][g]["start_p"]) / meta["n_seeds"]  # noqa: E731
    assert titles == [
        f"hard: the {meta['n_group']} hardest of {meta['n_prompts']} (start p {start_p('hard'):.2f})",
        f"easy: the {meta['n_group']} easiest of {meta['n_prompts']} (start p {start_p('easy'):.2f})",
        f"mixed: all {meta['n_prompts']} prompts (start p {start_p('mixed'):.2f})",
    ]
    title = fig.layout.title.text.replace("<br>", " ")
    assert (
        f"SGD, learning rate {meta['sgd_eta']:g}, {meta['sgd_passes']} passes, Clip-Higher off; mean ± std over "
        f"{meta['n_seeds']} seeds"
    ) in title
    assert [fig.layout[f"xaxis{i}"].title.text for i in ("", "2", "3")] == ["step"] * 3
    assert fig.layout.yaxis.title.text == "H(pi) (nats)"
    # three panels side by side on one shared y axis
    assert fig.layout.yaxis2.matches == "y" and fig.layout.yaxis3.matches == "y"
    assert (
        fig.layout.xaxis.domain[1]
        < fig.layout.xaxis2.domain[0]
        < fig.layout.xaxis2.domain[1]
        < fig.layout.xaxis3.domain[0]
    )
    lines = [t for t in fig.data if t.fill != "toself"]
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(lines) == len(bands) == 6
    assert [t.name for t in lines if t.showlegend] == [
        f"mean baseline ({meta['n_seeds']} seeds)",
        f"quantile baseline, K = 0.4 ({meta['n_seeds']} seeds)",
    ]
    for i, (band, line) in enumerate(zip(bands, lines)):
        base = ("mean", "quantile K=0.4")[i // 3]
        c = r["runs"][f"sgd/{base}/clip-0.2"]["groups"][("hard", "easy", "mixed")[i % 3]]["entropy_curve"]
        assert line.xaxis == band.xaxis == ("x", "x2", "x3")[i % 3]
        assert list(line.x) == c["steps"] and list(line.y) == c["mean"]
        n = len(c["steps"])  # the band: mean + std forwards, mean - std backwards
        assert list(band.y[:n]) == pytest.approx([m + s for m, s in zip(c["mean"], c["std"])])
        assert list(band.y[n:][::-1]) == pytest.approx([m - s for m, s in zip(c["mean"], c["std"])])


def test_regimes_figure_counts_follow_the_data():
    r = copy.deepcopy(load_regimes())
    r["meta"].update(n_group=2, n_prompts=6, k=0.6)
    r["runs"] = {name.replace("K=0.4", "K=0.6"): run for name, run in r["runs"].items()}
    for run in r["runs"].values():
        for g in run["groups"].values():
            g["entropy_curve"]["n"] = 3
    fig = regimes_figure(r)
    assert fig.layout.annotations[0].text.startswith("hard: the 2 hardest of 6")
    assert fig.layout.annotations[2].text.startswith("mixed: all 6 prompts")
    assert [t.name for t in fig.data if t.showlegend] == [
        "mean baseline (3 seeds)",
        "quantile baseline, K = 0.6 (3 seeds)",
    ]
    assert "Adam, learning rate" in fig.layout.title.text and "over 3 seeds" in fig.layout.title.text
    with pytest.raises(ValueError, match="^optimizer must"):
        regimes_figure(r, "lion")


def test_regimes_figure_names_the_step_size_as_a_learning_rate():
    # "SGD, step 40" read as a training step: both optimizers' step sizes are called learning rates
    r = load_regimes()
    for optimizer in ("sgd", "adam"):
        title = regimes_figure(r, optimizer).layout.title.text.replace("<br>", " ")
        eta = r["meta"][f"{optimizer}_eta"]
        assert f"learning rate {eta:g}," in title and "step " not in title.split(";")[0], title


def test_start_rates_figure_sorts_each_seed_then_averages_by_rank():
    p0 = [[0.1, 0.9, 0.5, 0.3, 0.7, 0.2], [0.4, 0.2, 0.8, 0.6, 0.0, 1.0]]
    fig = start_rates_figure(p0, 2)
    assert [t.name for t in fig.data] == ["hard: the 2 hardest of 6", "the 2 in between", "easy: the 2 easiest of 6"]
    want = [sum(v) / 2 for v in zip(sorted(p0[0]), sorted(p0[1]))]  # rank by rank, hardest first
    drawn = [y for t in fig.data for y in t.y]
    assert drawn == pytest.approx(want) and [x for t in fig.data for x in t.x] == ["1", "2", "3", "4", "5", "6"]
    assert fig.layout.title.text.replace("<br>", " ") == (
        "Start success rate p of the 6 prompts of each seed, hardest to easiest, mean over 2 seeds"
    )
    assert fig.layout.barmode == "overlay"
    assert [t.name for t in start_rates_figure([[0.1, 0.9]], 1).data] == [
        "hard: the 1 hardest of 2",
        "easy: the 1 easiest of 2",
    ]
    with pytest.raises(ValueError, match="n"):
        start_rates_figure(p0, 4)  # the groups would overlap


def test_start_rates_figure_has_one_notion_of_hard_the_regimes_figures():
    # its groups are named as the regimes figure's panels, and no second "hard" (QAE's 1 - K line) is drawn
    r = load_regimes()
    meta = r["meta"]
    fig = start_rates_figure([[0.1 * i for i in range(meta["n_prompts"])]], meta["n_group"])
    panels = [a.text.split("<br>")[0] for a in regimes_figure(r).layout.annotations]
    names = [t.name for t in fig.data]
    assert [names[0], names[-1]] == panels[:2], (names, panels)
    assert not fig.layout.shapes and not fig.layout.annotations
