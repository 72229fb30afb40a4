"""qae_lab.lab.notebooks.nb07_sequence_policy: notebook 07's prefix table, against the logit table and the chain rule, and its
figures, against the committed runs they draw."""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import pytest

from qae_lab.analysis.seqpolicy_runs import load_regimes
from qae_lab.lab.notebooks.nb07_sequence_policy import prefix_table, regimes_figure, start_rates_figure
from qae_lab.toys.seqpolicy import make_tasks, sequence_entropy


def test_prefix_table_rows_follow_the_logit_table_and_the_chain_rule_agrees():
    t = make_tasks(1, 3, 2, start="peaked", seed=1, sharpness=1.0)
    lines = prefix_table(t.logits[0])
    assert [line.split()[0] for line in lines[1:5]] == ["(empty)", "0", "1", "2"]  # one row per prefix, in order
    chain, enumerated = (float(x.split("= ")[1].split()[0]) for x in lines[-1].split("; "))
    assert chain == enumerated == pytest.approx(float(sequence_entropy(t.logits[0])), abs=1e-4)
    assert "enumerating the 9 sequences" in lines[-1]
    for bad, match in ((t.logits, "one prompt"), (make_tasks(1, 5, 2).logits[0], "V <= 4")):
        with pytest.raises(ValueError, match=match):
            prefix_table(bad)


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
