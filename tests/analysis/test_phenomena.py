"""The phenomena experiments: their declared settings build, the committed runs are what they declare,
and the claim numbers (window means, effects, the K sweep, the search summary) against hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qae_lab.runs import presets
from qae_lab.analysis.compare import Run, find_reference_runs, load_runs
from qae_lab.methods import method_settings
from qae_lab.analysis.phenomena import (
    EXPERIMENTS,
    REGIME_SETS,
    SEARCH,
    SEARCH_SEED,
    SEARCHES,
    PHENOMENA_DIR,
    PHENOMENON_CHOSEN,
    PHENOMENON_SEARCH,
    PHENOMENON_SETS,
    choose_setting,
    entropy_ratio,
    k_sweep_rows,
    load_experiment,
    load_search,
    search_rows,
    peak,
    run_names,
    search_row,
    window_mean,
)

REF = find_reference_runs()


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_declared_run_builds(name):
    exp = EXPERIMENTS[name]
    assert exp["preset"] in presets.PRESETS and exp["what"] and len(exp["seeds"]) >= 1
    for folder, method, sets in run_names(name):
        method_settings(method)
        run, cfg = presets.build(exp["preset"], [*exp["sets"], *sets], method=method, output_dir=f"/tmp/{folder}")
        assert cfg.seed == int(sets[-1].split("=")[1])


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_committed_runs_are_the_declared_ones(name):
    runs = {r.name: r for r in load_runs(REF / PHENOMENA_DIR / name)}
    declared = run_names(name)
    assert sorted(runs) == sorted(folder for folder, _, _ in declared)
    exp = EXPERIMENTS[name]
    for folder, method, sets in declared:
        r = runs[folder]
        build = r.config["run"]["build"]
        assert build["preset"] == exp["preset"] and build["method"] == method
        assert build["sets"][: len(exp["sets"]) + len(sets)] == [*exp["sets"], *sets]  # then the bookkeeping ones
        steps = [row["step"] for row in r.rows]
        assert r.method == method and r.after is not None and steps == list(range(1, steps[-1] + 1))
        # every generation logs behaviour, diversity and the mean-baseline counterfactual; every step the ledger
        generated = [row for row in r.rows if row.get("reward") is not None]
        assert generated and all(
            "behaviour/distinct_correct" in row and "qae/neg_correct_if_mean" in row for row in generated
        )
        assert all("ledger/dh" in row for row in r.rows)
        k = r.config["run"]["eval_samples"]  # pass@k up to the samples per problem (the preset's 32, or a run's own)
        assert {"pass@1", f"pass@{k}", "distinct_correct"} <= set(r.after) and r.before is not None


def test_search_summary_is_committed_and_complete():
    """search.json holds every run of the committed SEARCH, on the search seed, none of the reported seeds."""
    rows = json.loads((REF / PHENOMENA_DIR / "search.json").read_text())
    assert sorted(row["name"] for row in rows) == sorted(name for name, _, _ in SEARCH)
    reported = {seed for exp in EXPERIMENTS.values() for seed in exp["seeds"]}
    assert SEARCH_SEED not in reported
    for row in rows:
        assert {
            "name",
            "sets",
            "steps",
            "entropy_first",
            "entropy_last",
            "entropy_peak",
            "reward_first",
            "reward_last",
            "clipped",
            "pass@1_before",
            "pass@1_after",
        } <= set(row)
        assert row["steps"] > 0 and all(0 <= row[k] < 10 for k in ("entropy_first", "entropy_last", "entropy_peak"))


def test_regime_search_summary_is_committed_and_complete():
    """search_regimes.json holds every try of REGIME_SEARCH, on the search seed, with its clipped shares."""
    tries, name = SEARCHES["regimes"]
    rows = json.loads((REF / PHENOMENA_DIR / name).read_text())
    assert sorted(row["name"] for row in rows) == sorted(n for n, _, _ in tries)
    method = {n: m for n, m, _ in tries}
    for row in rows:
        assert f"seed={SEARCH_SEED}" in row["sets"] and f"--method {method[row['name']]}" in row["sets"]
        assert 0 <= row["clipped_high"] <= row["clipped"] < 1  # the upper end is part of the clipped region
    # the reported runs use the chosen try's settings, on fresh seeds, with the preset's evaluation
    chosen = next(sets for n, _, sets in tries if n.startswith("spg8-lr5e-5"))
    assert [s for s in chosen if s != "eval_samples=8"] == EXPERIMENTS["regimes"]["sets"] == REGIME_SETS
    assert SEARCH_SEED not in EXPERIMENTS["regimes"]["seeds"]


def test_run_names_and_bad_experiment():
    assert run_names("composite")[:4] == [
        ("mean-seed0", "mean", ["seed=0"]),
        ("qae-seed0", "qae", ["seed=0"]),
        ("sa_ah-seed0", "sa_ah", ["seed=0"]),
        ("mean-seed1", "mean", ["seed=1"]),
    ]
    with pytest.raises(ValueError, match="experiment must be one of"):
        run_names("nope")
    with pytest.raises(ValueError, match="experiment must be one of"):
        load_experiment(REF, "nope")


def test_load_experiment_names_the_command_when_runs_are_missing(tmp_path):
    with pytest.raises(ValueError, match=r"phenomena_runs.py --work <dir> --only entropy"):
        load_experiment(tmp_path, "entropy")


def test_window_mean_by_hand():
    rows = [{"step": 1, "x": 1.0}, {"step": 2, "x": None}, {"step": 3, "x": 5.0}, {"step": 4}]
    assert window_mean(rows, "x") == 3.0
    assert window_mean(rows, "x", 2) == 5.0 and window_mean(rows, "x", 1, 2) == 1.0
    assert window_mean(rows, "x", 4) is None and window_mean(rows, "y") is None
    with pytest.raises(ValueError, match="start must be"):
        window_mean(rows, "x", 0)
    with pytest.raises(ValueError, match="stop must be"):
        window_mean(rows, "x", 3, 2)


def test_k_sweep_rows():
    def run(name, method, k, entropies, after):
        rows = [{"step": i + 1, "entropy": e} for i, e in enumerate(entropies)]
        return Run(name, method, 0, {"trainer": {"quantile_k": k}}, rows, None, after)

    runs = [
        run("a", "qae", 0.4, [0.5, 0.1, 0.3], {"pass@1": 0.4, "pass@8": 0.8}),
        run("b", "qae", 0.4, [0.5, 0.2, 0.2], {"pass@1": 0.6, "pass@8": 0.9}),
        run("c", "qae", 0.8, [0.5, 0.6, 0.7], None),
    ]
    rows = k_sweep_rows(runs, last=2)
    assert [r["k"] for r in rows] == [0.4, 0.8] and [r["seeds"] for r in rows] == [2, 1]
    assert rows[0]["final entropy"].mean == pytest.approx((0.2 + 0.2) / 2)  # (0.1+0.3)/2 and (0.2+0.2)/2
    assert rows[0]["pass@1"].mean == pytest.approx(0.5) and rows[1]["pass@1"] is None
    assert rows[1]["final entropy"].mean == pytest.approx(0.65)


def test_search_row_keeps_the_settings_and_the_figures():
    rows = [{"step": s, "entropy": float(s), "reward": 1.0 - s / 10} for s in range(1, 11)]
    config = {
        "run": {
            "build": {
                "preset": "cpu-demo",
                "method": "mean",
                "sets": ["sparse_update=false", "learning_rate=3e-4", "evaluate=false"],
            }
        }
    }
    rows[0] |= {"completions/mean_length": 80.0, "completions/clipped_ratio": 0.0}
    rows[4] |= {"completions/mean_length": 90.0, "completions/clipped_ratio": 0.25}
    r = search_row(Run("x", "mean", 0, config, rows, None, None))
    assert r["sets"] == ["--method mean", "learning_rate=3e-4"] and r["steps"] == 10
    assert (r["length"], r["truncated"]) == (85.0, 0.25)  # the mean length over the run, the largest cut share
    assert (r["peak/start"], r["final/start"]) == (None, None)  # 10 values: under the 2 x 10 a start and a peak need
    assert r["method"] == "mean" and r["seed"] == 0
    assert (r["entropy_first"], r["entropy_last"]) == (1.5, 9.5)  # the first and last 2 of 10 steps
    assert r["entropy_peak"] == pytest.approx(5.5)  # the one full 10-step window
    assert r["reward_first"] == pytest.approx(0.85)


def test_peak_uses_full_windows_only():
    assert peak([0.9, 0.1, 0.1, 0.5, 0.5], 2) == pytest.approx(0.5)  # not the lone first value 0.9
    assert peak([0.1, 0.3, 0.2], 1) == 0.3 and peak([0.2, 0.4], 5) == pytest.approx(0.3) and peak([], 2) is None
    with pytest.raises(ValueError, match="window must be"):
        peak([0.1], 0)


def test_the_benchmark_script_names_only_declared_experiments():
    src = (Path(__file__).resolve().parents[2] / "benchmarks" / "phenomena_runs.py").read_text()
    assert "EXPERIMENTS" in src and "run_names" in src and "search_row" in src


def test_the_k_sweep_borrows_the_entropy_experiments_qae_runs():
    exp = EXPERIMENTS["k_sweep"]
    assert exp["with"] == ("entropy", "qae") and exp["sets"] == EXPERIMENTS["entropy"]["sets"]  # the same settings
    runs = load_experiment(REF, "k_sweep")
    ks = sorted({float(r.config["trainer"]["quantile_k"]) for r in runs})
    assert ks == sorted({*exp["k_values"], 0.4}) and sum(
        float(r.config["trainer"]["quantile_k"]) == 0.4 for r in runs
    ) == len(EXPERIMENTS["entropy"]["seeds"])


def test_the_dynamic_sampling_comparison_reads_as_its_page_says():
    from qae_lab.analysis.phenomena import dynamic_sampling_rows

    rows = dynamic_sampling_rows(load_experiment(REF, "dynamic_sampling"))
    arms = {row["method"]: row for row in rows}
    without, with_ = arms["qae"], arms["qae+dynamic_sampling"]
    apart = arms["seed ranges apart"]
    assert with_["no-signal share trained"].hi == 0.0 < without["no-signal share trained"].lo  # none trained
    assert with_["completions per batch"].lo > without["completions per batch"].hi  # more spent
    assert apart["no-signal share trained"] == apart["completions per batch"] == "yes"
    assert apart["pass@1 after"] == apart["pass@32 after"] == apart["final entropy"] == "no"  # within the spread
    assert 0.05 < without["no-signal share generated"].mean < 0.2  # "about a tenth of the groups"
    assert [without["seeds"], with_["seeds"]] == [3, 3]


def test_the_sharpening_line_reads_the_committed_runs_direction_by_direction():
    # notebook 06's sentence under its table: each word checked here against the means it summarises, by hand
    from qae_lab.analysis.phenomena import load_experiment, sharpening_line, sharpening_rows

    rows = sharpening_rows(load_experiment(REF, "entropy"))
    before = {r["method"]: r for r in rows if r["when"] == "before"}
    moves = {
        key: [r[key].mean - before[r["method"]][key].mean for r in rows if r["when"] == "after"]
        for key in ("pass@1", "distinct_correct")
    }
    line = " ".join(sharpening_line(rows).split())
    distinct = (
        "rose"
        if all(d > 0 for d in moves["distinct_correct"])
        else "fell"
        if all(d < 0 for d in moves["distinct_correct"])
        else None
    )
    assert distinct is not None, moves  # the committed runs agree in direction (else the line says "both ways")
    assert f"distinct correct texts {distinct} (" in line, line
    assert ("no sharpening" in line) == (distinct == "rose"), line  # fewer distinct correct texts = sharpening
    assert ("pass@1 rose" in line) == all(d > 0 for d in moves["pass@1"]), line


def test_the_sharpening_line_calls_fewer_distinct_correct_texts_sharpening():
    from qae_lab.analysis.phenomena import sharpening_line
    from qae_lab.analysis.stats import stat

    def row(method, when, p1, pk, d):
        return {
            "method": method,
            "when": when,
            "pass@1": stat([p1]),
            "pass@32": stat([pk]),
            "distinct_correct": stat([d]),
        }

    line = sharpening_line(
        [
            row("a", "before", 0.4, 0.9, 12),
            row("a", "after", 0.6, 0.9, 9),
            row("b", "before", 0.4, 0.9, 12),
            row("b", "after", 0.5, 0.8, 12),
        ]
    )
    line = " ".join(line.split())
    assert "pass@1 rose (0.400→0.500..0.600)" in line and "pass@32 fell or stayed (0.900→0.800..0.900)" in line, line
    assert "distinct correct texts fell or stayed (12.0→9.0..12.0): no clear sharpening" in line, line


# ---------------------------------------------------------------- the entropy phenomenon: its ratios and the chooser


def _ratios_by_hand(values, end):
    """An independent reading of entropy_ratio: the start is the first 10 values' mean; the peak the largest mean of
    10 consecutive values; the final the mean of the last third (a third of the count, rounded down)."""
    start = sum(values[:10]) / 10
    if end == "peak":
        return max(sum(values[i : i + 10]) / 10 for i in range(len(values) - 9)) / start
    k = len(values) // 3
    return sum(values[-k:]) / k / start


@pytest.mark.parametrize("n", [20, 31, 47])
def test_entropy_ratio_against_a_reading_by_hand(n):
    import random

    rng = random.Random(n)
    values = [0.2 + 0.1 * rng.random() + 0.002 * i for i in range(n)]
    for end in ("peak", "final"):
        # the sums of at most 47 values near 0.3 round at ~1e-16 each: 1e-12 relative is ample and still catches
        # a window or a third off by one value (a change of >= 1e-4)
        assert entropy_ratio(values, end) == pytest.approx(_ratios_by_hand(values, end), rel=1e-12)


def test_entropy_ratio_by_hand():
    values = [0.2] * 10 + [0.3] * 10 + [0.1] * 10  # start 0.2; the 10-value windows reach 0.3; last third 0.1
    assert entropy_ratio(values, "peak") == pytest.approx(1.5)
    assert entropy_ratio(values, "final") == pytest.approx(0.5)
    # a lone high value cannot make the peak: one 0.9 among 0.2s lifts a 10-value window to 0.27 only
    assert entropy_ratio([0.2] * 15 + [0.9] + [0.2] * 14, "peak") == pytest.approx(0.27 / 0.2)
    assert entropy_ratio([0.2] * 19, "peak") is None  # under 2 x START values
    with pytest.raises(ValueError, match="end must be 'peak' or 'final'"):
        entropy_ratio(values, "max")


def _row(name, peak_start, final_start, method="mean+clip_higher"):
    return {"name": name, "method": method, "peak/start": peak_start, "final/start": final_start}


def test_choose_setting_wants_most_of_at_least_three_seeds():
    rows = [
        _row("a", 1.3, 0.9),  # one seed only: a candidate, not chosen
        _row("b", 1.0, 0.9),
        _row("b-seed101", 1.12, 0.9),
        _row("b-seed102", 1.11, 0.9),  # b: 2 of 3 seeds rose to 1.1x
        _row("c", 1.0, 0.4),
        _row("c-seed101", 1.0, 0.45),
        _row("c-seed102", 1.0, 0.3),  # c: a collapse in 3 of 3
        _row("d", 1.5, 0.9, method="qae+clip_higher"),  # not the control
    ]
    c = choose_setting(rows)
    assert (c["chosen"], c["phenomenon"], c["showed"]) == ("b", "explosion", "2/3")  # an explosion before a collapse
    assert c["candidates"] == ["a"]
    assert c["extent"] == {
        "tries": 7,
        "settings": 3,
        "largest peak/start": [1.3, "a"],
        "smallest final/start": [0.3, "c-seed102"],
    }
    # half is not most: one seed of two (of the two asked for), nor one of three
    c = choose_setting([_row("b", 1.2, 0.9), _row("b-seed101", 1.0, 0.9)], seeds=2)
    assert c["chosen"] is None and c["candidates"] == []
    c = choose_setting([_row("b", 1.2, 0.9), _row("b-seed101", 1.0, 0.9), _row("b-seed102", 1.0, 0.9)])
    assert c["chosen"] is None and c["candidates"] == []
    # at the thresholds exactly: an explosion at 1.1 and a collapse at 0.5 count
    c = choose_setting([_row(f"e-seed{s}", 1.1, 0.5) for s in (1, 2, 3)])
    assert (c["chosen"], c["phenomenon"], c["showed"]) == ("e", "explosion", "3/3")


def test_choose_setting_orders_by_the_median_ratio():
    rows = [_row(f"x-seed{s}", v, 0.9) for s, v in ((1, 1.4), (2, 1.12), (3, 1.11))]  # median 1.12
    rows += [_row(f"y-seed{s}", v, 0.9) for s, v in ((1, 1.2), (2, 1.2), (3, 1.0))]  # median 1.2
    assert choose_setting(rows)["chosen"] == "y"  # not x, whose largest single seed is larger
    rows = [_row(f"p-seed{s}", 1.0, v) for s, v in ((1, 0.3), (2, 0.45), (3, 0.5))]  # median 0.45
    rows += [_row(f"q-seed{s}", 1.0, v) for s, v in ((1, 0.2), (2, 0.4), (3, 0.9))]  # median 0.4
    assert choose_setting(rows)["chosen"] == "q"


def test_choose_setting_found_nothing():
    c = choose_setting([_row("a", 1.05, 0.8), _row("b", None, None)])
    assert (c["chosen"], c["phenomenon"], c["showed"], c["candidates"]) == (None, None, None, [])
    assert c["extent"]["largest peak/start"] == [1.05, "a"] and c["extent"]["tries"] == 2


def test_the_phenomenon_search_is_committed_and_chose_what_the_experiment_runs():
    """search_phenomenon.json holds every try of PHENOMENON_SEARCH (the mean baseline, search seeds only), the rule
    chooses PHENOMENON_CHOSEN from it, and the experiment runs that try's settings on seeds no search used."""
    rows = load_search("phenomenon")
    declared = {name: (method, sets) for name, method, sets in PHENOMENON_SEARCH}
    assert sorted(r["name"] for r in rows) == sorted(declared)
    search_seeds = set()
    for r in rows:
        method, sets = declared[r["name"]]
        assert r["method"] == method and f"--method {method}" in r["sets"]
        assert all(s in r["sets"] for s in sets if s != "evaluate=false")  # evaluate=false: hidden bookkeeping
        search_seeds.add(r["seed"])
        assert r["seed"] == int(next(s for s in reversed(r["sets"]) if s.startswith("seed=")).split("=")[1])
        assert r["steps"] == int(next(s for s in sets if s.startswith("max_steps=")).split("=")[1])  # ran to its end
        assert r["pass@1_after"] is None and 0 < r["train_s"]  # no evaluation: entropy and reward only
    assert search_seeds == {SEARCH_SEED, SEARCH_SEED + 1, SEARCH_SEED + 2}
    assert choose_setting(rows)["chosen"] == PHENOMENON_CHOSEN
    exp = EXPERIMENTS["phenomenon"]
    assert exp["sets"] == PHENOMENON_SETS and not set(exp["seeds"]) & search_seeds and len(exp["seeds"]) >= 8
    chosen = [s for s in declared[PHENOMENON_CHOSEN][1] if s != "evaluate=false"]
    assert PHENOMENON_SETS[: len(chosen)] == chosen  # then the held-out regime evaluation and pass@k's samples
    other = {seed for name, e in EXPERIMENTS.items() if name != "phenomenon" for seed in e["seeds"]}
    assert not set(exp["seeds"]) & other  # fresh: no other experiment's seeds either


def test_search_rows_say_what_each_try_changed():
    rows = load_search("phenomenon")
    table = {r["try"]: r for r in search_rows(rows)}
    assert table["base"]["changed"] == "—"
    assert table["lr3e-4"]["changed"] == "learning_rate=3e-4"
    assert table["lr3e-4-seed101"]["changed"] == "learning_rate=3e-4 (seed 101)"
    assert table["clip0.2"]["changed"] == "--method mean, epsilon=0.2, epsilon_high=0.2"
    by = {r["name"]: r for r in rows}
    assert table["spg16"]["peak / start"] == f"{by['spg16']['peak/start']:.3f}"
    with pytest.raises(ValueError, match="base must name one of the rows"):
        search_rows(rows, base="nope")
