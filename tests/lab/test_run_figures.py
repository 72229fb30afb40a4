"""qae_lab.lab.run_figures: what the curve views, the pass@k figure and the K sweep draw, checked by hand."""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import pytest

from qae_lab.analysis.compare import Run
from qae_lab.analysis.phenomena import pass_at_k_table
from qae_lab.analysis.seqpolicy_runs import load_regimes
import functools

import ipywidgets as widgets

from qae_lab.lab.widgets import interactive
from qae_lab.lab.run_figures import (
    before_after_figure,
    curves_figure,
    detrend_figure,
    k_sweep_figure,
    pass_at_k_figure,
    regimes_figure,
)
from qae_lab.analysis.stats import stat


def _runs():
    # two seeds of qae, one of mean; reward per step and an entropy only qae logs
    rows = lambda r, e: [
        {"step": t, "reward": r * t, **({"entropy": e} if e else {})}  # noqa: E731
        for t in (1, 2, 3, 4)
    ]
    return [
        Run("qae-seed0", "qae", 0, {}, rows(0.1, 0.5), None, None),
        Run("qae-seed1", "qae", 1, {}, rows(0.3, 0.7), None, None),
        Run("mean-seed0", "mean", 0, {}, rows(0.2, None), None, None),
    ]


def _line(fig, name):
    return next(t for t in fig.data if t.name and t.name.split(" (")[0] == name)


def test_curves_figure_draws_the_mean_over_seeds_after_the_trailing_average():
    fig = curves_figure(
        _runs(),
        "reward",
        2,
        labels={"reward": "mean reward"},
        title="{label}: {metric}, {window} steps",
        y_title="y: {label}",
    )
    assert fig.layout.title.text == "mean reward: reward, 2 steps" and fig.layout.yaxis.title.text == "y: mean reward"
    # qae: seeds 0.1*t and 0.3*t, mean 0.2*t; trailing 2-step averages 0.2, 0.3, 0.5, 0.7
    assert list(_line(fig, "qae").y) == pytest.approx([0.2, 0.3, 0.5, 0.7])
    assert _line(fig, "qae").name == "qae (2 runs)" and _line(fig, "mean").name == "mean (1 run)"
    strided = curves_figure(_runs(), "reward", 1, labels={"reward": "r"}, title="t", stride=2)
    assert list(_line(strided, "qae").x) == [1, 3]


def test_curves_figure_refuses_a_metric_it_has_no_words_for():
    with pytest.raises(ValueError, match="metric must be one of"):
        curves_figure(_runs(), "loss", 1, labels={"reward": "r"}, title="t")


def test_curves_figure_under_controls_as_the_notebooks_wire_it():
    labels = {"reward": "mean reward", "entropy": "entropy (nats)"}
    menu = widgets.Dropdown(options=[(v, k) for k, v in labels.items()], description="metric")
    slider = widgets.IntSlider(value=3, min=1, max=7, description="smoothing")
    box = interactive(
        functools.partial(curves_figure, _runs(), labels=labels, title="{label} ({window})"),
        {"metric": menu, "window": slider},
        mode="static",
    )
    assert box.view.figure.layout.title.text == "mean reward (3)"
    menu.value = "entropy"  # only qae logs it
    assert box.view.figure.layout.title.text == "entropy (nats) (3)"
    assert [t.name for t in box.view.figure.data if t.name] == ["qae (2 runs)"]
    assert list(_line(box.view.figure, "qae").y) == pytest.approx([0.6] * 4)
    slider.value = 1
    assert box.view.figure.layout.title.text == "entropy (nats) (1)"
    # a fixed window (no slider): qae's mean reward 0.2 * t averaged over the trailing (up to) 4 steps
    fixed = interactive(
        functools.partial(curves_figure, _runs(), window=4, labels=labels, title="{window} steps"),
        {"metric": widgets.Dropdown(options=["reward"])},
        mode="static",
    )
    assert fixed.view.figure.layout.title.text == "4 steps"
    assert list(_line(fixed.view.figure, "qae").y) == pytest.approx([0.2, 0.3, 0.4, 0.5])


def test_pass_at_k_figure_lines_bands_and_axis():
    before = {"pass@1": 0.25, "pass@4": 0.75}
    runs = [
        Run("qae-seed0", "qae", 0, {}, [], before, {"pass@1": 0.4, "pass@4": 0.8}),
        Run("qae-seed1", "qae", 1, {}, [], before, {"pass@1": 0.6, "pass@4": 0.8}),
    ]
    fig = pass_at_k_figure(pass_at_k_table(runs))
    names = [t.name for t in fig.data]
    assert names == [None, "qae, after", "before (every method)"]  # the band (no legend), the line, before
    band, after, start = fig.data
    assert list(after.y) == pytest.approx([0.5, 0.8]) and list(start.y) == [0.25, 0.75]
    assert list(band.y) == pytest.approx([0.6, 0.8, 0.8, 0.4])  # mean + std forwards, mean - std backwards
    assert start.line.dash == "dash" and after.line.dash is None
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 4]
    assert fig.layout.xaxis.title.text == "k (samples)" and fig.layout.yaxis.title.text == "pass@k"


def test_k_sweep_figure():
    rows = [
        {"k": 0.2, "final entropy": stat([0.1, 0.3]), "pass@1": stat([0.5])},
        {"k": 0.8, "final entropy": stat([0.4, 0.4]), "pass@1": stat([0.6])},
    ]
    fig = k_sweep_figure(rows, "final entropy")
    assert list(fig.data[-1].x) == [0.2, 0.8] and list(fig.data[-1].y) == pytest.approx([0.2, 0.4])
    assert list(fig.data[0].y) == pytest.approx([0.3, 0.4, 0.4, 0.1])  # band: 0.2 +- 0.1, 0.4 +- 0
    assert fig.layout.xaxis.title.text == "K" and fig.layout.title.text == "final entropy after training against K"
    assert list(k_sweep_figure(rows, "pass@1").data[-1].y) == pytest.approx([0.5, 0.6])


def test_before_after_figure_skips_rows_not_evaluated_both_times():
    table = [
        {"method": "mean", "pass@1 before": stat([0.3, 0.3]), "pass@1 after": stat([0.5, 0.6])},
        {"method": "mine", "pass@1 before": None, "pass@1 after": stat([0.7])},
        {"method": "qae", "pass@1 before": stat([0.3]), "pass@1 after": stat([0.4])},
    ]
    fig = before_after_figure(table, "pass@1")
    before, after = fig.data
    assert list(before.x) == list(after.x) == ["mean", "qae"]
    assert list(after.y) == pytest.approx([0.55, 0.4]) and list(after.error_y.array) == pytest.approx([0.05, 0.0])
    assert fig.layout.title.text.startswith("pass@1 before and after training")


def test_detrend_figure():
    rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 1.0, 0.0, 1.0, 0.0], 1)]
    runs = [Run("mean-seed0", "mean", 0, {}, rows, None, None)]
    fig = detrend_figure(runs, "mean-seed0", 2, stride=2)
    raw, avg = fig.data
    assert list(raw.x) == [1, 3, 5] and list(raw.y) == [0.0, 0.0, 0.0]  # every 2nd step
    assert list(avg.y) == [0.0, 0.5, 0.5]  # trailing 2-step averages at steps 1, 3, 5
    # residuals at steps 2..5: 0.5, -0.5, 0.5, -0.5 -> variance 0.25; plain variance of 0,1,0,1,0: 0.24
    assert fig.layout.title.text == "mean-seed0: detrended variance 0.2500 (window 2), plain variance 0.2400"
    assert detrend_figure(runs, "mean-seed0", 5).layout.title.text == "mean-seed0"  # no full window beyond the run
    with pytest.raises(ValueError, match="no run named 'x'"):
        detrend_figure(runs, "x", 2)


# ---------------------------------------------------------------- notebook 04: completions before and after


def _evaluation(verdicts, text="<reasoning>\nstep\n</reasoning>\n<answer>{gold}</answer>"):
    from qae_lab.task.evaluate import EvalResult

    problems = [
        {
            "id": i,
            "question": f"{i} + {i}?",
            "gold": str(2 * i),
            "greedy": {"completion": text.format(gold=2 * i), "correct": ok},
            "samples": [{"completion": f"sample of {i}", "correct": not ok}],
        }
        for i, ok in enumerate(verdicts)
    ]
    return EvalResult({}, {}, problems)


def test_paired_completions_pair_the_same_problems(tmp_path):
    from qae_lab.lab.run_figures import paired_completions

    before, after = _evaluation([False, True, False, False, True]), _evaluation([True, True, False, True, True])
    after.to_json(tmp_path / "eval_after.json")  # a path works as well as the result
    rows = paired_completions(before, tmp_path / "eval_after.json", n=4)
    assert [r["before_correct"] for r in rows] == [False, True, False, False]
    assert [r["after_correct"] for r in rows] == [True, True, False, True] and rows[2]["question"] == "2 + 2?"
    sampled = paired_completions(before, after, n=2, sample=0)
    assert [r["before"] for r in sampled] == ["sample of 0", "sample of 1"] and sampled[0]["before_correct"]
    assert len(paired_completions(before, after, n=99)) == 5


def test_paired_completions_refuse_different_problems():
    from qae_lab.lab.run_figures import paired_completions

    other = _evaluation([True, True])
    other.problems[1]["question"] = "something else?"
    with pytest.raises(ValueError, match="the same problems"):
        paired_completions(_evaluation([True, False]), other)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        paired_completions(other, other, n=0)


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
