"""qae_lab.lab.nb05_compare: notebook 05's sentences about groups of runs, against hand-computed runs."""

from __future__ import annotations

import pytest

from qae_lab.analysis.compare import Run, find_reference_runs, load_runs, summary_table
from qae_lab.lab.nb05_compare import (
    behaviour_lines,
    column_stat,
    first_last_lines,
    plain_variance_lines,
    runs_logging,
    sampling_floor,
    summary_lines,
    variance_ratio_line,
)
from qae_lab.analysis.grouping import group_runs
from qae_lab.analysis.stats import stat


def _run(method, seed, rows, n=8):
    return Run(f"{method}-seed{seed}", method, seed, {"trainer": {"generation_batch_size": n}}, rows, None, None)


def test_runs_logging_looks_at_the_first_rows_only():
    runs = [
        _run("qae", 0, [{"step": 1}, {"step": 2, "ledger/dh": 0.1}]),
        _run("qae", 1, [{"step": 1, "ledger/dh": 0}]),
        _run("qae", 2, [{"step": 1}, {"step": 2}, {"step": 3, "ledger/dh": 0.1}]),
    ]
    assert [r.seed for r in runs_logging(runs, "ledger/dh")] == [0, 1]
    assert [r.seed for r in runs_logging(runs, "ledger/dh", rows=1)] == [1]
    assert runs_logging([], "ledger/dh") == []


def test_first_last_lines_by_hand():
    # two seeds: entropy 0.4, 0.3, 0.2, 0.1 and 0.6, 0.5, 0.4, 0.3 -> mean 0.5, 0.4, 0.3, 0.2 per step;
    # trailing 2-step averages of the mean: at step 2 0.45, at step 4 0.25
    rows = lambda xs: [{"step": t, "entropy": x} for t, x in enumerate(xs, 1)]  # noqa: E731
    groups = group_runs(
        [
            _run("qae", 0, rows([0.4, 0.3, 0.2, 0.1])),
            _run("qae", 1, rows([0.6, 0.5, 0.4, 0.3])),
            _run("mean", 0, rows([0.2, 0.2, 0.2, 0.2])),
        ]
    )
    assert first_last_lines(groups, "entropy", 2, name="entropy", digits=2, change="percent", width=5) == [
        "qae   entropy, first 2 steps 0.45 -> last 2 steps 0.25 (-44%)",
        "mean  entropy, first 2 steps 0.20 -> last 2 steps 0.20 (+0%)",
    ]
    assert [line.split(": ")[-1] for line in first_last_lines(groups, "entropy", 2, name="e", change="direction")] == [
        "fell",
        "unchanged",
    ]
    assert first_last_lines(groups, "entropy", 5, name="e") == []  # shorter than the window: no line
    assert first_last_lines(groups, "reward", 2, name="r") == []  # not logged
    with pytest.raises(ValueError, match="change must be one of"):
        first_last_lines(groups, "entropy", 2, name="e", change="ratio")


def test_plain_variance_and_its_ratio_by_hand():
    # rewards 0, 1, 0, 1: population variance 0.25; 0.5 throughout: 0
    groups = group_runs(
        [
            _run("mean", 0, [{"step": t, "reward": float(t % 2)} for t in range(1, 5)]),
            _run("sa_ah", 0, [{"step": t, "reward": 0.5} for t in range(1, 5)]),
        ]
    )
    assert plain_variance_lines(groups, width=6) == ["  mean   0.250±0.000", "  sa_ah  0.000±0.000"]
    table = [{"method": "mean", "train var": stat([0.03, 0.05])}, {"method": "sa_ah", "train var": stat([0.01])}]
    assert variance_ratio_line(table) == "GRPO / SA-AH detrended variance: 4.00x (the paper's 3B runs: 3.6x)"
    assert variance_ratio_line(table[:1]) is None
    assert variance_ratio_line([*table[:1], {"method": "sa_ah", "train var": None}]) is None


def test_sampling_floor_by_hand():
    # p(1-p)/N: 0.5 -> 0.25/4, 0.25 -> 0.1875/4, and 0 -> 0 with N = 2; mean of the three
    runs = [
        _run("qae", 0, [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.25}], n=4),
        _run("qae", 1, [{"step": 1, "reward": 0.0}, {"step": 2}], n=2),
    ]
    assert sampling_floor(runs) == pytest.approx((0.0625 + 0.046875 + 0.0) / 3)
    with pytest.raises(ValueError, match="no rewards"):
        sampling_floor([_run("qae", 0, [{"step": 1}])])


def test_behaviour_lines_by_hand():
    rows = lambda lengths, refl: [
        {"step": t, "behaviour/length_mean": x, "behaviour/reflect_frac": refl}  # noqa: E731
        for t, x in enumerate(lengths, 1)
    ]
    groups = group_runs(
        [_run("sa_ah", 0, rows([40, 30, 20, 10, 10], 0.2)), _run("sa_ah", 1, rows([60, 50, 40, 30, 30], 0.4))]
    )
    # first 2 steps: (35 + 55) / 2 = 45; last 2 steps (4, 5): (10 + 30) / 2 = 20; reflective share (0.2 + 0.4) / 2
    assert behaviour_lines(groups, edge=2, width=8) == [
        "sa_ah    length first 2 steps 45.0 -> last 2 20.0 tokens; share with a reflective word 0.300"
    ]


def test_the_committed_reference_runs_give_the_variance_sentences():
    runs = [r for r in load_runs(find_reference_runs()) if r.config.get("preset") == "cpu-demo"]
    table = summary_table(runs)
    line = variance_ratio_line(table)
    byname = {row["method"]: row["train var"] for row in table}
    assert line.startswith(f"GRPO / SA-AH detrended variance: {byname['mean'].mean / byname['sa_ah'].mean:.2f}x")
    assert 0 < sampling_floor(runs) < 0.25 / 64  # a step's mean over 64 rewards varies by at most 0.25 / 64


def test_column_stat_and_its_errors():
    table = [{"method": "mean", "train var": stat([0.01, 0.03])}, {"method": "qae", "train var": None}]
    s = column_stat(table, "mean", "train var")
    assert (s.mean, s.n) == (pytest.approx(0.02), 2) and s.std == pytest.approx(0.01)
    with pytest.raises(ValueError, match="method must label a row of the table"):
        column_stat(table, "sa_ah", "train var")
    with pytest.raises(ValueError, match="column 'train var' has no value in the row of 'qae'"):
        column_stat(table, "qae", "train var")


def test_summary_lines_of_the_reference_runs_state_the_tables_numbers():
    table = summary_table(load_runs(find_reference_runs()))
    lines = summary_lines(table)
    assert len(lines) == len(table)
    for row, line in zip(table, lines):
        assert line.startswith(f"{row['method']} ({row['seeds']} seeds): sampled pass@1 ")
        assert f"{row['pass@1 before'].mean:.3f} before -> {row['pass@1 after'].mean:.3f} after" in line
        assert f"final entropy {row['final entropy'].mean:.4f}" in line
        assert f"detrended training variance {row['train var'].mean:.4f}" in line


def test_summary_lines_leave_out_what_a_row_lacks():
    one = [
        {
            "method": "mine (yours, 4 steps, seed 0)",
            "seeds": 1,
            "pass@1 before": None,
            "pass@1 after": stat([0.5]),
            "final entropy": None,
            "train var": None,
            "zero-adv frac": None,
        }
    ]
    assert summary_lines(one) == ["mine (yours, 4 steps, seed 0) (1 seed): sampled pass@1 0.500"]
