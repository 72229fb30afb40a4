"""Tests for qae_lab.compare: run folders of both layouts, curves and the summary table over seeds.
Small logs are written by hand to tmp_path and the numbers worked out by hand; one test reads the
committed reference runs (the statistics themselves: test_runstats.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qae_lab.compare import (
    Run,
    find_reference_runs,
    find_up,
    format_table,
    group_by_method,
    load_run,
    load_runs,
    metric_curves,
    summary_table,
    versus_baseline,
)
from qae_lab.methods import METHODS
from qae_lab.runstats import stat

# ---------------------------------------------------------------- run folders on disk

def write_run(folder: Path, *, method=None, baseline="mean", token_weighting="none", seed=0, rows=(),
              before=None, after=None, layout="reference") -> Path:
    """A run folder: config.json, log.jsonl (+ a train_runtime row), and the evaluations in either layout."""
    folder.mkdir(parents=True)
    run = {"method": method} if method else {}
    config = {"preset": "cpu-demo", "run": run, "versions": {},
              "trainer": {"seed": seed, "baseline": baseline, "token_weighting": token_weighting}}
    (folder / "config.json").write_text(json.dumps(config))
    lines = [json.dumps(r) for r in rows]
    if rows:
        lines.append(json.dumps({"step": rows[-1]["step"], "train_runtime": 1.0}))
    (folder / "log.jsonl").write_text("".join(line + "\n" for line in lines))
    if layout == "reference":
        summary = {w: {"summary": s, "by_level": {}, "success_rates": []} for w, s in (("before", before),
                                                                                        ("after", after))}
        (folder / "summary.json").write_text(json.dumps(summary))
    else:  # python -m qae_lab train: full EvalResult JSON, after missing when interrupted
        for when, s in (("before", before), ("after", after)):
            if s is not None:
                (folder / f"eval_{when}.json").write_text(json.dumps({"summary": s, "by_level": {}, "problems": []}))
    return folder


def log_rows(rewards, **metrics):
    """Step rows 1..n with the given rewards and per-step metric lists."""
    return [{"step": t + 1, "reward": r, **{k.replace("__", "/"): v[t] for k, v in metrics.items()}}
            for t, r in enumerate(rewards)]


# ---------------------------------------------------------------- loading

def test_load_reference_and_user_layouts(tmp_path):
    rows = log_rows([0.25, 0.5], entropy=[0.1, 0.2])
    ref = write_run(tmp_path / "qae-seed3", method="qae", seed=3, rows=rows,
                    before={"pass@1": 0.3}, after={"pass@1": 0.6})
    user = write_run(tmp_path / "cpu-demo-20260101", baseline="quantile", token_weighting="sa_ah", seed=7, rows=rows,
                     before={"pass@1": 0.2}, after=None, layout="user")
    r = load_run(ref)
    assert (r.name, r.method, r.seed, r.before, r.after) == ("qae-seed3", "qae", 3, {"pass@1": 0.3}, {"pass@1": 0.6})
    assert [row["step"] for row in r.rows] == [1, 2]  # the train_runtime row is not a step
    u = load_run(user)
    assert (u.method, u.seed, u.before, u.after) == ("qae_sa_ah", 7, {"pass@1": 0.2}, None)


def test_load_runs_sorts_groups_and_rejects_non_runs(tmp_path):
    for name, method, seed in (("b", "qae", 1), ("a", "qae", 0), ("c", "mean", 0), ("d", "custom", 0)):
        write_run(tmp_path / name, method=method, seed=seed, rows=log_rows([0.5]))
    (tmp_path / "notes").mkdir()  # not a run: skipped when scanning a parent
    runs = load_runs(tmp_path)
    assert [(r.method, r.seed) for r in runs] == [("mean", 0), ("qae", 0), ("qae", 1), ("custom", 0)]
    assert {m: [r.seed for r in g] for m, g in group_by_method(runs).items()} == {"mean": [0], "qae": [0, 1],
                                                                                 "custom": [0]}
    assert [r.name for r in load_runs([tmp_path / "b", tmp_path / "a"])] == ["a", "b"]
    assert [r.name for r in load_runs(tmp_path / "c")] == ["c"]
    with pytest.raises(ValueError, match="path"):
        load_run(tmp_path / "notes")
    with pytest.raises(ValueError, match="path"):
        load_runs([tmp_path / "a", tmp_path / "notes"])
    with pytest.raises(ValueError, match="source"):
        load_runs(tmp_path / "notes")
    with pytest.raises(ValueError, match="source"):
        load_runs(tmp_path / "missing")
    with pytest.raises(ValueError, match="source"):
        load_runs([])


def test_find_up_and_reference_runs(tmp_path):
    (tmp_path / "data" / "reference_runs").mkdir(parents=True)
    deep = tmp_path / "notebooks" / "sub"
    deep.mkdir(parents=True)
    assert find_up("data/reference_runs", deep) == tmp_path / "data" / "reference_runs"
    assert find_up("no-such-folder", deep) is None
    assert find_reference_runs(deep) == tmp_path / "data" / "reference_runs"
    assert find_reference_runs(Path(__file__).parent).name == "reference_runs"


# ---------------------------------------------------------------- over seeds

def _run(method, seed, rewards, **metrics):
    return Run(f"{method}-seed{seed}", method, seed, {}, log_rows(rewards, **metrics), None, None)


def test_metric_curves_mean_spread_and_smoothing():
    runs = [_run("qae", 0, [0.0, 0.2, 0.4], entropy=[1.0, 3.0, 5.0]),
            _run("qae", 1, [0.0, 0.4, 0.8, 0.9], entropy=[3.0, 5.0, 7.0, 9.0]),  # a longer run: step 4 dropped
            _run("mean", 0, [0.1, 0.1, 0.1])]
    c = metric_curves(runs, "entropy")
    assert list(c) == ["qae"]  # mean never logged entropy here
    q = c["qae"]
    assert (q.steps, q.mean, q.std, q.lo, q.hi, q.n_runs) == ([1, 2, 3], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0],
                                                              [1.0, 3.0, 5.0], [3.0, 5.0, 7.0], 2)
    # smoothed per run first: seed 0 -> [1, 2, 4], seed 1 -> [3, 4, 6, 8]
    s = metric_curves(runs, "entropy", window=2)["qae"]
    assert s.mean == pytest.approx([2.0, 3.0, 5.0]) and s.std == pytest.approx([1.0, 1.0, 1.0])
    assert metric_curves(runs, "reward")["mean"].mean == pytest.approx([0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="window"):
        metric_curves(runs, "entropy", window=0)


def test_versus_baseline_verdicts():
    table = [{"method": "mean", "x": stat([0.5, 0.6])}, {"method": "qae", "x": stat([0.65, 0.7])},
             {"method": "sa_ah", "x": stat([0.9])}, {"method": "custom", "x": None}]
    lines = versus_baseline(table, "x", digits=2).splitlines()
    assert lines[0].split() == ["mean", "0.55±0.05", "seeds", "[0.50,", "0.60]"]
    assert "+0.12 vs mean: outside the seed spread (the ranges of 2 and 2 seeds do not overlap)" in lines[1]
    assert "+0.35 vs mean: too few seeds" in lines[2]
    assert lines[3].split() == ["custom", "—"]
    assert "vs" not in versus_baseline(table[1:], "x")  # no baseline method: no comparisons


def test_summary_table_by_hand(tmp_path):
    rewards = [0.0, 0.5, 0.0, 0.5]
    for seed, (b, a) in enumerate(((0.3, 0.5), (0.3, 0.7))):
        write_run(tmp_path / f"sa_ah-seed{seed}", method="sa_ah", seed=seed,
                  rows=log_rows(rewards, entropy=[0.4, 0.3, 0.2, 0.1 * (seed + 1)],
                                qae__zero_adv_frac=[0.2, 0.4, 0.2, 0.4], saah__w_mean_neg=[1.0, 0.8, 0.8, 0.8]),
                  before={"pass@1": b, "greedy_pass@1": 0.5, "pass@8": 0.9}, after={"pass@1": a})
    [row] = summary_table(load_runs(tmp_path), window=2)
    assert row["method"] == "sa_ah" and row["seeds"] == 2
    assert row["pass@1 before"].mean == pytest.approx(0.3) and row["pass@1 before"].std == pytest.approx(0.0)
    assert (row["pass@1 after"].mean, row["pass@1 after"].std) == pytest.approx((0.6, 0.1))
    assert row["greedy pass@1 after"] is None and row["pass@8 before"].mean == pytest.approx(0.9)
    assert row["zero-adv frac"].mean == pytest.approx(0.3) and row["w_mean_neg"].mean == pytest.approx(0.85)
    assert row["hard frac"] is None and row["all-equal frac"] is None
    # last 2 steps: seed 0 (0.2 + 0.1)/2, seed 1 (0.2 + 0.2)/2
    assert row["final entropy"].mean == pytest.approx(0.175)
    # w = 2: m = [., .25, .25, .25], r = [.25, -.25, .25], mean 1/12 -> variance (1/36 + 1/9 + 1/36) / 3 = 1/18
    assert row["train var"].mean == pytest.approx(1 / 18) and row["train var"].std == pytest.approx(0.0)
    text = format_table([row], ["method", "seeds", "pass@1 after", "hard frac"])
    assert text.splitlines()[1].split() == ["sa_ah", "2", "0.600±0.100", "—"]


def test_committed_reference_runs():
    runs = load_runs(find_reference_runs(Path(__file__).parent))
    groups = group_by_method(runs)
    assert list(groups) == list(METHODS) and all(len(g) >= 2 for g in groups.values())
    for row in summary_table(runs):
        token_weighting = METHODS[row["method"]]["token_weighting"] != "none"
        for key, value in row.items():
            if key in ("method", "seeds"):
                continue
            if key == "w_mean_neg" and not token_weighting:
                assert value is None
                continue
            assert value is not None and all(math.isfinite(x) for x in value), (row["method"], key)
        assert row["pass@1 after"].mean > row["pass@1 before"].mean
    assert set(metric_curves(runs, "saah/w_mean_neg")) == {"sa_ah", "qae_sa_ah"}
