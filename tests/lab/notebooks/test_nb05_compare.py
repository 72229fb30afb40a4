"""qae_lab.lab.notebooks.nb05_compare: notebook 05's tables about groups of runs, against hand-computed runs."""

from __future__ import annotations

import pytest

from qae_lab.analysis.compare import Run, find_reference_runs, load_runs
from qae_lab.lab.notebooks.nb05_compare import column_row, first_last_rows, plain_variance_rows, sampling_floor
from qae_lab.analysis.grouping import group_runs
from qae_lab.analysis.stats import stat


def _run(method, seed, rows, n=8):
    return Run(f"{method}-seed{seed}", method, seed, {"trainer": {"generation_batch_size": n}}, rows, None, None)


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
    rows = first_last_rows(groups, "entropy", 2)
    assert [r["group"] for r in rows] == ["qae", "mean"]
    assert (rows[0]["first"], rows[0]["last"]) == (pytest.approx(0.45), pytest.approx(0.25))
    assert rows[0]["last / first"] == pytest.approx(0.25 / 0.45) and rows[1]["last / first"] == pytest.approx(1.0)
    assert first_last_rows(groups, "entropy", 5) == []  # shorter than the window: no row
    assert first_last_rows(groups, "reward", 2) == []  # not logged


def test_plain_variance_by_hand():
    # rewards 0, 1, 0, 1: population variance 0.25; 0.5 throughout: 0
    groups = group_runs(
        [
            _run("mean", 0, [{"step": t, "reward": float(t % 2)} for t in range(1, 5)]),
            _run("sa_ah", 0, [{"step": t, "reward": 0.5} for t in range(1, 5)]),
        ]
    )
    rows = plain_variance_rows(groups)
    assert [(r["group"], r["plain variance"].mean) for r in rows] == [("mean", 0.25), ("sa_ah", 0.0)]


def test_sampling_floor_by_hand():
    # p(1-p)/N: 0.5 -> 0.25/4, 0.25 -> 0.1875/4, and 0 -> 0 with N = 2; mean of the three
    runs = [
        _run("qae", 0, [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.25}], n=4),
        _run("qae", 1, [{"step": 1, "reward": 0.0}, {"step": 2}], n=2),
    ]
    assert sampling_floor(runs) == pytest.approx((0.0625 + 0.046875 + 0.0) / 3)
    with pytest.raises(ValueError, match="no rewards"):
        sampling_floor([_run("qae", 0, [{"step": 1}])])


def test_the_committed_reference_runs_sampling_floor():
    runs = [r for r in load_runs(find_reference_runs()) if r.config.get("preset") == "cpu-demo"]
    assert 0 < sampling_floor(runs) < 0.25 / 64  # a step's mean over 64 rewards varies by at most 0.25 / 64


def test_column_row_and_its_errors():
    table = [{"method": "mean", "train var": stat([0.01, 0.03])}, {"method": "qae", "train var": None}]
    s = column_row(table, "mean", "train var")["train var"]
    assert (s.mean, s.n) == (pytest.approx(0.02), 2) and s.std == pytest.approx(0.01)
    with pytest.raises(ValueError, match="method must label a row of the table"):
        column_row(table, "sa_ah", "train var")
    with pytest.raises(ValueError, match="column 'train var' has no value in the row of 'qae'"):
        column_row(table, "qae", "train var")
