"""Tests for qae_lab.analysis.compare: run folders of both layouts, curves and the summary table over seeds.
Small logs are written by hand to tmp_path and the numbers worked out by hand; one test reads the
committed reference runs (the statistics themselves: test_stats.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qae_lab.analysis.compare import (
    Run,
    find_reference_runs,
    find_up,
    group_by_method,
    load_run,
    load_runs,
    metric_curves,
    summary_table,
    versus_baseline,
)
from qae_lab.analysis.grouping import group_runs
from qae_lab.methods import METHODS
from qae_lab.analysis.stats import stat

# ---------------------------------------------------------------- run folders on disk


def write_run(
    folder: Path,
    *,
    method=None,
    baseline="mean",
    token_weighting="none",
    seed=0,
    rows=(),
    before=None,
    after=None,
    layout="reference",
) -> Path:
    """A run folder: config.json, log.jsonl (+ a train_runtime row), and the evaluations in either layout."""
    folder.mkdir(parents=True)
    run = {"method": method} if method else {}
    config = {
        "preset": "cpu-demo",
        "run": run,
        "versions": {},
        "trainer": {"seed": seed, "baseline": baseline, "token_weighting": token_weighting},
    }
    (folder / "config.json").write_text(json.dumps(config))
    lines = [json.dumps(r) for r in rows]
    if rows:
        lines.append(json.dumps({"step": rows[-1]["step"], "train_runtime": 1.0}))
    (folder / "log.jsonl").write_text("".join(line + "\n" for line in lines))
    if layout == "reference":
        summary = {
            w: {"summary": s, "by_level": {}, "success_rates": []} for w, s in (("before", before), ("after", after))
        }
        (folder / "summary.json").write_text(json.dumps(summary))
    else:  # python -m qae_lab train: full EvalResult JSON, after missing when interrupted
        for when, s in (("before", before), ("after", after)):
            if s is not None:
                (folder / f"eval_{when}.json").write_text(json.dumps({"summary": s, "by_level": {}, "problems": []}))
    return folder


def log_rows(rewards, **metrics):
    """Step rows 1..n with the given rewards and per-step metric lists."""
    return [
        {"step": t + 1, "reward": r, **{k.replace("__", "/"): v[t] for k, v in metrics.items()}}
        for t, r in enumerate(rewards)
    ]


# ---------------------------------------------------------------- loading


def test_load_reference_and_user_layouts(tmp_path):
    rows = log_rows([0.25, 0.5], entropy=[0.1, 0.2])
    ref = write_run(
        tmp_path / "qae-seed3", method="qae", seed=3, rows=rows, before={"pass@1": 0.3}, after={"pass@1": 0.6}
    )
    user = write_run(
        tmp_path / "cpu-demo-20260101",
        baseline="quantile",
        token_weighting="sa_ah",
        seed=7,
        rows=rows,
        before={"pass@1": 0.2},
        after=None,
        layout="user",
    )
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
    assert {m: [r.seed for r in g] for m, g in group_by_method(runs).items()} == {
        "mean": [0],
        "qae": [0, 1],
        "custom": [0],
    }
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
    runs = [
        _run("qae", 0, [0.0, 0.2, 0.4], entropy=[1.0, 3.0, 5.0]),
        _run("qae", 1, [0.0, 0.4, 0.8], entropy=[3.0, 5.0, 7.0]),
        _run("mean", 0, [0.1, 0.1, 0.1]),
    ]
    c = metric_curves(runs, "entropy")
    assert list(c) == ["qae"]  # mean never logged entropy here
    q = c["qae"]
    assert (q.steps, q.mean, q.std, q.lo, q.hi, q.n_runs) == (
        [1, 2, 3],
        [2.0, 4.0, 6.0],
        [1.0, 1.0, 1.0],
        [1.0, 3.0, 5.0],
        [3.0, 5.0, 7.0],
        2,
    )
    # smoothed per run first: seed 0 -> [1, 2, 4], seed 1 -> [3, 4, 6, 8]
    s = metric_curves(runs, "entropy", window=2)["qae"]
    assert s.mean == pytest.approx([2.0, 3.0, 5.0]) and s.std == pytest.approx([1.0, 1.0, 1.0])
    assert metric_curves(runs, "reward")["mean"].mean == pytest.approx([0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="window"):
        metric_curves(runs, "entropy", window=0)
    # a longer run is not averaged with the shorter ones: it is a group of its own, labelled with its length
    longer = _run("qae", 2, [0.0, 0.4, 0.8, 0.9], entropy=[3.0, 5.0, 7.0, 9.0])
    c = metric_curves(runs + [longer], "entropy")
    assert {k: v.n_runs for k, v in c.items()} == {
        "qae (reference, 3 steps, seeds 0-1)": 2,
        "qae (reference, 4 steps, seed 2)": 1,
    }
    assert c["qae (reference, 4 steps, seed 2)"].mean == [3.0, 5.0, 7.0, 9.0]
    groups = group_runs(runs + [longer])
    assert metric_curves(groups, "entropy").keys() == c.keys()  # groups as given, or runs grouped alike
    with pytest.raises(ValueError, match="runs must be all Runs or all Groups"):
        metric_curves([groups[0], longer], "entropy")


def test_versus_baseline_rows():
    table = [
        {"method": "mean", "x": stat([0.5, 0.55, 0.6])},
        {"method": "qae", "x": stat([0.65, 0.7, 0.75])},
        {"method": "sa_ah", "x": stat([0.9])},
        {"method": "custom", "x": None},
    ]
    rows = versus_baseline(table, "x", digits=2)
    assert [r["group"] for r in rows] == ["mean", "qae", "sa_ah", "custom"]
    assert rows[0]["- mean"] == "—" and rows[0]["x"].mean == pytest.approx(0.55) and rows[0]["seeds"] == 3
    # Welch: both sides' sample std 0.05, se = 0.05 * sqrt(2/3), df = 4, t(4) = 2.776
    half = 2.776 * 0.05 * (2 / 3) ** 0.5
    assert rows[1]["- mean"] == f"+0.15 [{0.15 - half:+.2f}, {0.15 + half:+.2f}]"
    assert rows[2]["- mean"] == "not compared: fewer than two seeds"
    assert rows[3]["x"] is None and rows[3]["- mean"] == "—"
    assert all(r["- mean"] == "—" for r in versus_baseline(table[1:], "x"))  # no baseline method: no comparisons


def test_summary_table_by_hand(tmp_path):
    rewards = [0.0, 0.5, 0.0, 0.5]
    for seed, (b, a) in enumerate(((0.3, 0.5), (0.3, 0.7))):
        write_run(
            tmp_path / f"sa_ah-seed{seed}",
            method="sa_ah",
            seed=seed,
            rows=log_rows(
                rewards,
                entropy=[0.4, 0.3, 0.2, 0.1 * (seed + 1)],
                qae__zero_adv_frac=[0.2, 0.4, 0.2, 0.4],
                saah__w_mean_neg=[1.0, 0.8, 0.8, 0.8],
            ),
            before={"pass@1": b, "greedy_pass@1": 0.5, "pass@8": 0.9},
            after={"pass@1": a},
        )
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


def test_committed_reference_runs():
    runs = load_runs(find_reference_runs(Path(__file__).parent))
    groups = group_by_method(runs)
    assert list(groups) == list(METHODS) and all(len(g) >= 2 for g in groups.values())
    for row in summary_table(runs):
        token_weighting = METHODS[row["method"]]["token_weighting"] != "none"
        assert row["group"].label == row["method"] and row["group"].steps == 400 and row["seeds"] == 3
        for key, value in row.items():
            if key in ("method", "seeds", "group"):
                continue
            if key == "w_mean_neg" and not token_weighting:
                assert value is None
                continue
            assert value is not None and all(math.isfinite(x) for x in value[:5]), (row["method"], key)
        assert row["pass@1 after"].mean > row["pass@1 before"].mean
    assert set(metric_curves(runs, "saah/w_mean_neg")) == {"sa_ah", "qae_sa_ah"}


# ---------------------------------------------------------------- honest comparisons


def test_a_repeated_seed_counts_once(tmp_path):
    # two runs of yours with one seed, the same settings and length: one seed, the newest run kept
    for name, t, after in (("live-b", 1.0, 0.2), ("live-a", 2.0, 0.4)):  # live-a is the newer, not the last by name
        rows = [dict(r, time=t + r["step"]) for r in log_rows([0.25, 0.5, 0.75])]
        write_run(tmp_path / name, method="qae", seed=42, rows=rows, after={"pass@1": after}, layout="user")
    mine = load_runs(tmp_path)
    [g] = group_runs([], mine)
    assert [r.name for r in g.runs] == ["live-a"] and g.seeds == [42]
    assert [(r.name, why) for r, why in g.set_aside] == [("live-b", "same seed 42 as live-a: a rerun counts once")]
    [row] = summary_table([g], window=2)
    assert row["method"] == "qae (yours, 3 steps, seed 42)" and row["seeds"] == 1
    assert row["pass@1 after"].n == 1 and row["pass@1 after"].mean == pytest.approx(0.4)
    assert metric_curves(mine, "reward")["qae"].n_runs == 1  # plain runs: grouped alike, as reference runs
    assert versus_baseline([row], "pass@1 after")[0]["- mean"] == "—"  # no baseline row: no comparison at all


def _verdicts(tmp_path) -> dict[str, str]:
    """versus_baseline's differences by label, for reference mean / qae / sa_ah runs and two groups of your qae runs."""
    ref, yours = tmp_path / "ref", tmp_path / "runs"
    six, four = log_rows([0.5] * 6), log_rows([0.5] * 4)
    for seed, (m, q) in enumerate(((0.5, 0.65), (0.6, 0.7))):
        write_run(ref / f"mean-seed{seed}", method="mean", seed=seed, rows=six, after={"pass@1": m})
        write_run(ref / f"qae-seed{seed}", method="qae", seed=seed, rows=six, after={"pass@1": q})
    write_run(ref / "sa_ah-seed0", method="sa_ah", seed=0, rows=six, after={"pass@1": 0.9})
    for name, seed, rows, after in (
        ("short-0", 0, four, 0.9),
        ("short-1", 1, four, 0.95),
        ("full-5", 5, six, 0.3),
        ("full-6", 6, six, 0.4),
    ):
        write_run(yours / name, method="qae", seed=seed, rows=rows, after={"pass@1": after}, layout="user")
    table = summary_table(group_runs(load_runs(ref), load_runs(yours)), window=2)
    return {r["group"]: r["- mean"] for r in versus_baseline(table, "pass@1 after", digits=2)}


def test_versus_baseline_compares_comparable_groups_only(tmp_path):
    said = _verdicts(tmp_path)
    assert list(said) == ["mean", "qae", "sa_ah", "qae (yours, 4 steps, seeds 0-1)", "qae (yours, 6 steps, seeds 5-6)"]
    assert said["mean"] == "—"  # the baseline itself
    # same settings and length, 2 seeds each: a difference with its interval, for reference runs and comparable ones
    assert said["qae"].startswith("+0.12 [") and said["qae (yours, 6 steps, seeds 5-6)"].startswith("-0.20 [")
    assert said["sa_ah"] == "not compared: fewer than two seeds"
    # another length: no difference claimed
    assert said["qae (yours, 4 steps, seeds 0-1)"] == "not compared: steps 4 vs 6"
