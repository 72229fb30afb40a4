"""Tests for qae_lab.analysis.seqpolicy_findings: the committed files found and read, the regime runs the search chose,
and the sweep's table rows against the file's numbers (recomputed here)."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from qae_lab.analysis import committed_data
from qae_lab.analysis.seqpolicy_findings import (
    VARIANCE_QUANTITIES,
    cell_rows,
    find_regimes,
    load_findings,
    load_regimes,
    regime_curve,
    sweep_rows,
    variance_rows,
)
from qae_lab.analysis.seqpolicy_runs import CELLS
from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_regime_runs_are_the_searchs_choice_on_fresh_seeds():
    r = load_regimes()
    meta, search = r["meta"], r["search"]
    ranked = sorted(search["tries"], key=lambda t: -t["hard_peak_ratio"])
    pick = lambda t: {k: t[k] for k in ("sharpness", "adam_eta", "adam_passes")}  # noqa: E731
    assert search["chosen"] == pick(ranked[0]) == pick(meta) and search["runner_up"] == pick(ranked[1])
    assert r["runner_up"]["settings"] == search["runner_up"]
    for t in search["tries"]:  # the rule reads the mean of the per-seed peaks it keeps
        # the mean of the kept per-seed numbers, itself kept to 4 decimals: within 5e-5 of it
        assert t["hard_peak_ratio"] == pytest.approx(statistics.fmean(t["hard_peak_ratio_seeds"]), abs=5e-5 + 1e-12)
    searched = set(range(search["task_seed"], search["task_seed"] + search["n_seeds"]))
    assert not searched & set(range(meta["task_seed"], meta["task_seed"] + meta["n_seeds"]))
    assert meta["n_seeds"] >= 12 and len(r["runs"]) == 8
    for run in [*r["runs"].values(), *r["runner_up"]["runs"].values()]:
        for group in ("hard", "easy", "mixed"):
            kept = run["groups"][group]
            assert all(len(kept[k]) == meta["n_seeds"] for k in ("start_p", "start_h", "peak_ratio", "final_h"))
            assert kept["entropy_curve"]["n"] == meta["n_seeds"]
            assert kept["entropy_curve"]["steps"] == list(range(0, meta["steps"] + 1, meta["every"]))
    same_tasks = {tuple(run["groups"]["hard"]["start_p"]) for run in r["runs"].values()}
    assert len(same_tasks) == 1  # every setting starts from the same tasks: the seeds pair up


def test_regimes_are_found_in_a_checkout_and_in_an_installed_copy(tmp_path, monkeypatch):
    assert find_regimes(ROOT / "notebooks") == ROOT / "data" / "seqpolicy" / "regimes.json"
    # an installed package: qae_lab/seqpolicy_data in site-packages, no data/ beside it and none above the cwd
    site = tmp_path / "site-packages" / "qae_lab"
    shutil.copytree(ROOT / "data" / "seqpolicy", site / "seqpolicy_data")
    monkeypatch.setattr(committed_data, "_PACKAGE", site)
    monkeypatch.chdir(tmp_path)
    assert find_regimes() == site / "seqpolicy_data" / "regimes.json"
    assert load_regimes()["runs"] == load_regimes(ROOT / "data" / "seqpolicy" / "regimes.json")["runs"]
    assert load_findings()["runs"]  # the sibling file, found the same way
    with pytest.raises(ValueError, match="^path must be a regimes.json file.*seqpolicy_regimes.py"):
        load_regimes(tmp_path / "regimes.json")


def _benchmark():
    return load_script("benchmarks/seqpolicy_regimes.py")


def test_the_benchmarks_smoke_mode_writes_a_readable_file(tmp_path, capsys):
    bench = _benchmark()
    out = tmp_path / "regimes.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["meta"]["vocab"] == 2 and r["meta"]["n_seeds"] == 2 and len(r["search"]["tries"]) == 2
    assert sorted(r["runs"]) == sorted(bench.regime_settings(adam_eta=1.0, adam_passes=1, sgd_eta=1.0, sgd_passes=1))
    printed = capsys.readouterr().out
    assert "## chosen: sharpness 3" in printed and "| adam | hard: peak_ratio |" in printed
    assert [p.name for p in tmp_path.iterdir()] == ["regimes.json"]  # written whole, no temporary file left
    with pytest.raises(SystemExit):  # the smoke run never replaces the committed file
        bench.main(["--smoke"])


def test_regime_curve_reads_one_committed_curve_and_names_a_bad_choice():
    r = load_regimes()
    c = regime_curve(r, "easy", "quantile", "sgd", False)
    assert c == r["runs"]["sgd/quantile K=0.4/clip-0.2"]["groups"]["easy"]["entropy_curve"]
    for args, match in (
        (("hard", "median"), "^baseline must"),
        (("all", "mean"), "^group must"),
        (("hard", "mean", "lion"), "^no committed run"),
    ):
        with pytest.raises(ValueError, match=match):
            regime_curve(r, *args)


# ---------------------------------------------------------------- the sweep's tables: numbers from the file


def test_the_sweep_rows_are_the_files_numbers():
    f = load_findings()
    rows = sweep_rows(f, every=True)
    head = rows[0]  # flat start, SGD, final entropy: quantile against mean, both with Clip-Higher and the std
    q = f["runs"]["flat/quantile K=0.4/clip-higher/std"]["final_entropy"]
    m = f["runs"]["flat/mean/clip-higher/std"]["final_entropy"]
    assert (head["start"], head["setting"]) == ("flat", "SGD")
    assert head["a"] == f"quantile {statistics.fmean(q):.2f}±{statistics.stdev(q):.2f}"
    d = [a - b for a, b in zip(q, m)]
    half = 2.365 * statistics.stdev(d) / math.sqrt(len(d))  # t(7) = 2.365 for the 8 paired seeds
    mean = statistics.fmean(d)
    assert head["a - b"] == f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}]"
    assert head["seeds a > b"] == f"{sum(x > 0 for x in d)}/8"
    assert len(sweep_rows(f)) == 4 and len(rows) > 20  # headlines only, or every comparison
    assert {r["setting"] for r in rows} >= {"SGD", "Adam", "SGD, mean", "SGD, quantile"}


def test_the_cell_rows_sum_to_their_total():
    f = load_findings()
    for row in cell_rows(f):
        run = f["runs"][
            f"{row['start']}/{'quantile K=0.4' if row['baseline'] == 'quantile' else 'mean'}/clip-higher/std"
        ]["ledger"]["sampled"]
        assert row["dh"] == pytest.approx(statistics.fmean(run["dh"]))
        # the four cells of each seed sum to its dh (to the file's rounding, 4 significant digits a number)
        assert sum(row[c] for c in CELLS) == pytest.approx(row["dh"], abs=5e-3 * max(1.0, abs(row["dh"])))
    assert cell_rows(f)[1]["dh_hard_neg"] == 0.0  # the quantile baseline leaves a hard prompt's failures alone


def test_the_variance_rows_are_the_files_numbers():
    f = load_findings()
    rows = variance_rows(f)
    flat = f["variance"]["per_start"]["flat"]
    first = rows[0]
    assert first["start"] == "flat" and first["quantity"].startswith("tr Cov")
    assert (
        first["a"]
        == f"SA-AH, alpha = 0.5 {statistics.fmean(flat['SA-AH, alpha = 0.5']['trace_var']):.3f}±"
        + f"{statistics.stdev(flat['SA-AH, alpha = 0.5']['trace_var']):.3f}"
    )
    assert first["seeds a > b"] == "8/8"  # SA-AH raises the update's variance from a flat start, in every seed
    assert len(rows) == 2 * 2 * len(VARIANCE_QUANTITIES)  # two starts, SA-AH and AH, each quantity
