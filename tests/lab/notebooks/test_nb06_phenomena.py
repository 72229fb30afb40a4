"""qae_lab.lab.notebooks.nb06_phenomena: the metrics notebook 06's views offer, and the pass@k and K-sweep lines, against
hand-computed cases and the committed runs."""

from __future__ import annotations


import pytest

from qae_lab.analysis.compare import Run, find_reference_runs
from qae_lab.ledger import LEDGER_PARTS
from qae_lab.metric_names import LEDGER_PREFIX
from qae_lab.analysis.phenomena import k_sweep_rows, load_experiment, pass_at_k_table
from qae_lab.lab.notebooks.nb06_phenomena import (
    BEFORE,
    ENTROPY_CURVES,
    K_SWEEP_QUANTITIES,
    LEDGER_CELLS,
    LEDGER_CURVES,
    NEG_CORRECT_CURVES,
    SAAH_CURVES,
    SAAH_METHODS,
    k_sweep_lines,
    pass_at_k_lines,
    phenomenon_figure,
    relative_entropy,
    runs_of,
)
from qae_lab.analysis.stats import stat

REF = find_reference_runs()


def _run(method, seed, before, after, k=None):
    config = {"trainer": {"quantile_k": k}} if k is not None else {}
    return Run(f"{method}-seed{seed}", method, seed, config, [], before, after)


def test_ledger_curves_are_the_ledger_parts_shown():
    assert list(LEDGER_CURVES) == [LEDGER_PREFIX + p for p in LEDGER_CELLS]
    assert set(LEDGER_CELLS) <= set(LEDGER_PARTS)
    assert LEDGER_CURVES["ledger/dh_hard_neg"] == "hard prompts, A < 0"
    assert LEDGER_CURVES["ledger/dh_easy_pos"] == "easy prompts, A > 0"


def test_every_curve_offered_is_logged_by_the_committed_runs():
    # a menu entry whose metric no run logs would draw an empty figure
    runs = {name: load_experiment(REF, name) for name in ("entropy", "composite")}
    for name, labels in (
        ("entropy", ENTROPY_CURVES),
        ("entropy", LEDGER_CURVES),
        ("composite", NEG_CORRECT_CURVES),
        ("composite", SAAH_CURVES),
    ):
        logged = {key for r in runs[name] for row in r.rows for key in row}
        assert set(labels) <= logged, (name, set(labels) - logged)


def test_runs_of_keeps_order_and_only_the_methods_named():
    runs = [_run(m, s, None, None) for s in (0, 1) for m in ("mean", "qae", "sa_ah")]
    assert [r.name for r in runs_of(runs, SAAH_METHODS)] == ["mean-seed0", "sa_ah-seed0", "mean-seed1", "sa_ah-seed1"]
    assert runs_of(runs, ["nothing"]) == []
    assert runs_of(iter(runs), ("qae",)) == [runs[1], runs[4]]  # any iterable


def test_pass_at_k_lines_by_hand():
    before = {"pass@1": 0.25, "pass@2": 0.5, "pass@4": 0.75}
    runs = [
        _run("mean", 0, before, {"pass@1": 0.30, "pass@2": 0.50, "pass@4": 0.70}),
        _run("mean", 1, before, {"pass@1": 0.40, "pass@2": 0.60, "pass@4": 0.70}),
        _run("qae", 0, before, {"pass@1": 0.50, "pass@2": 0.60, "pass@4": 0.90}),
    ]
    lines = pass_at_k_lines(pass_at_k_table(runs))
    assert lines.x == [1, 2, 4]
    assert list(lines.y) == ["mean, after", "qae, after", BEFORE]  # the methods in order, the before line last
    assert lines.y["mean, after"] == pytest.approx([0.35, 0.55, 0.70])
    assert lines.y["qae, after"] == pytest.approx([0.50, 0.60, 0.90])
    assert lines.y[BEFORE] == pytest.approx([0.25, 0.50, 0.75])
    assert lines.bands["mean, after"] == pytest.approx([0.05, 0.05, 0.0])  # population std of two seeds
    assert lines.bands["qae, after"] == [0.0, 0.0, 0.0] and BEFORE not in lines.bands


def test_pass_at_k_lines_refuses_different_starting_models_and_no_runs():
    runs = [_run("mean", 0, {"pass@1": 0.25}, {"pass@1": 0.3}), _run("qae", 0, {"pass@1": 0.5}, {"pass@1": 0.3})]
    with pytest.raises(ValueError, match="qae's pass@k before training differs from mean's"):
        pass_at_k_lines(pass_at_k_table(runs))
    with pytest.raises(ValueError, match="no methods"):
        pass_at_k_lines({})


def test_pass_at_k_lines_on_the_committed_entropy_runs():
    table = pass_at_k_table(load_experiment(REF, "entropy"))
    lines = pass_at_k_lines(table)
    assert lines.x == [1, 2, 4, 8, 16, 32]
    assert set(lines.y) == {f"{m}, after" for m in ("mean", "qae", "mean+clip_higher", "qae+clip_higher")} | {BEFORE}
    assert lines.y["qae, after"][0] == pytest.approx(table["qae"]["after"][1].mean)
    for y in lines.y.values():  # pass@k cannot fall as k grows
        assert all(a <= b + 1e-12 for a, b in zip(y, y[1:]))


def test_k_sweep_lines_by_hand():
    after = lambda p1: {"pass@1": p1, "pass@32": 0.9}  # noqa: E731
    runs = [
        _run("qae", 0, None, after(0.5), k=0.6),
        _run("qae", 1, None, after(0.7), k=0.6),
        _run("qae", 0, None, after(0.2), k=0.2),
    ]
    lines = k_sweep_lines(k_sweep_rows(runs), "pass@1")
    assert lines.x == [0.2, 0.6]  # sorted by K
    assert lines.y == {"pass@1": pytest.approx([0.2, 0.6])}
    assert lines.bands == {"pass@1": pytest.approx([0.0, 0.1])}


def test_k_sweep_lines_refuses_unknown_or_missing_quantities():
    rows = [{"k": 0.2, "pass@1": stat([0.5]), "pass@32": None}]
    with pytest.raises(ValueError, match="quantity must be one of"):
        k_sweep_lines(rows, "pass@8")
    with pytest.raises(ValueError, match="no pass@32 at K = 0.2"):
        k_sweep_lines(rows, "pass@32")


def test_k_sweep_lines_on_the_committed_sweep():
    rows = k_sweep_rows(load_experiment(REF, "k_sweep"), last=20)
    for quantity in K_SWEEP_QUANTITIES:
        lines = k_sweep_lines(rows, quantity)
        assert lines.x == [0.2, 0.4, 0.6, 0.8] and len(lines.y[quantity]) == len(lines.bands[quantity]) == 4


# ---------------------------------------------------------------- section 1: the entropy phenomenon search and its test


def _entropy_run(method, seed, values):
    return Run(
        f"{method}-seed{seed}",
        method,
        seed,
        {},
        [{"step": i + 1, "entropy": v} for i, v in enumerate(values)],
        None,
        None,
    )


def test_relative_entropy_by_hand():
    run = _entropy_run("mean", 0, [0.1, 0.3] * 5 + [0.4, 0.1])  # the start: the first ten's mean, 0.2
    assert relative_entropy(run, window=1) == pytest.approx(
        {**{s: (0.5 if s % 2 else 1.5) for s in range(1, 11)}, 11: 2.0, 12: 0.5}
    )
    # a 2-step trailing average: step 11 averages 0.3 and 0.4 (0.35 / 0.2), step 12 0.4 and 0.1 (0.25 / 0.2)
    smooth = relative_entropy(run, window=2)
    assert (smooth[11], smooth[12]) == pytest.approx((1.75, 1.25))
    assert relative_entropy(_entropy_run("mean", 0, [0.2] * 9)) == {}  # fewer values than the start needs


def test_phenomenon_figure_draws_the_search_and_each_baseline():
    search = [
        {"name": "base", "method": "mean+clip_higher", "peak/start": 1.02},
        {"name": "lr3e-4", "method": "mean+clip_higher", "peak/start": 1.2},
        {"name": "q", "method": "qae+clip_higher", "peak/start": 1.5},  # not the control: not drawn
    ]
    runs = [
        _entropy_run(m, s, [0.2] * 10 + [0.2 + 0.01 * s * (m == "mean")] * 10) for m in ("mean", "qae") for s in (1, 3)
    ]
    fig = phenomenon_figure(search, runs, window=1)
    bars = fig.data[0]
    assert list(bars.y) == ["base", "lr3e-4"] and list(bars.x) == [1.02, 1.2]
    assert list(bars.marker.color) == ["#bbbbbb", "#444444"]  # past ROSE: dark
    lines = {t.name: t for t in fig.data if t.showlegend}
    assert sorted(lines) == ["mean (2 seeds)", "qae (2 seeds)"]
    # the mean baseline's seeds end at 1.05 and 1.15 of their start: the mean line ends at 1.1
    assert lines["mean (2 seeds)"].y[-1] == pytest.approx(1.1) and lines["qae (2 seeds)"].y[-1] == pytest.approx(1.0)
    assert "2 fresh seeds" in fig.layout.title.text


def test_phenomenon_figure_on_the_committed_search_and_runs():
    from qae_lab.analysis.phenomena import load_search

    search, runs = load_search("phenomenon"), load_experiment(REF, "phenomenon")
    fig = phenomenon_figure(search, runs)
    assert len(fig.data[0].y) == sum(r["method"].startswith("mean") for r in search)
    assert sorted(t.name for t in fig.data if t.showlegend) == [
        "mean+clip_higher (8 seeds)",
        "qae+clip_higher (8 seeds)",
    ]
