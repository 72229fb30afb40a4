"""Tests for qae_lab.analysis.seqpolicy_runs: estimator tracking, a run's summary, the regime split; the committed files
found and read, the regime runs the search chose, and the sweep's table rows against the file's numbers (recomputed
here)."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch

from qae_lab.analysis import committed_data
from qae_lab.analysis.seqpolicy_runs import (
    CELLS,
    REGIMES,
    VARIANCE_QUANTITIES,
    cell_rows,
    curve_summary,
    find_regimes,
    first_move,
    load_findings,
    load_regimes,
    regime_settings,
    seqpolicy_regime_curve,
    start_group_curves,
    start_groups,
    summarise_regimes,
    summarise_run,
    sweep_rows,
    tracking,
    variance_rows,
)
from qae_lab.ledger import LEDGER_FORMS
from qae_lab.toys.seqpolicy_training import UpdateSettings, simulate
from testkit.scripts import load_script
from testkit.seqpolicy_setup import F64, peaked


def test_tracking_of_a_perfect_and_of_a_reversed_estimator():
    exact = torch.tensor([[1.0, -2.0, 3.0, 0.5], [2.0, 1.0, -1.0, 4.0]], dtype=F64)
    out = {
        "dh_first_order": exact,
        "estimator_npg/dh": 3 * exact,
        "estimator_pg/dh": -exact,
        "estimator_reinforce/dh": exact + torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=F64),
        "sampled/dh_state": exact / 4,
        "sampled/dh_visit": 3 * exact / 4,
    }
    t = tracking(out)
    assert t["npg"] == {"corr": [1.0, 1.0], "sign_agree": [1.0, 1.0], "ratio": [3.0, 3.0]}
    assert t["pg"] == {"corr": [-1.0, -1.0], "sign_agree": [0.0, 0.0], "ratio": [-1.0, -1.0]}
    assert t["reinforce"]["ratio"] == [5.0, 2.667] and t["visit_share"] == [0.75, 0.75]
    out.update({k: out[k] * math.nan for k in ("sampled/dh_state", "sampled/dh_visit")})  # Adam: no split
    assert tracking(out)["visit_share"] == [None, None]


def test_summary_of_a_run():
    t = peaked(2, 3, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=5, seed=0)
    s = summarise_run(out, every=2, early=2)
    curve = s["entropy_curve"]
    assert curve["steps"] == [0, 2, 4] and curve["n"] == 2
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(curve["mean"], out["entropy"][:, ::2].mean(0)))
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["early_entropy"], out["entropy"][:, 2]))
    for kind in ("sampled", *(f"estimator_{form}" for form in LEDGER_FORMS)):
        key = "sampled/dh" if kind == "sampled" else f"{kind}/dh"
        assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["ledger"][kind]["dh"], out[key].sum(-1)))
    tr = s["tracking"]
    assert all(-1 <= c <= 1 for f in LEDGER_FORMS for c in tr[f]["corr"])
    assert all(0 <= v <= 1 for v in tr["visit_share"])
    json.dumps(s, allow_nan=False)  # plain JSON
    lean = summarise_run(out, every=2, early=2, estimators=False)
    assert list(lean["ledger"]) == ["sampled"] and "tracking" not in lean


# ---------------------------------------------------------------- Proposition 4.2 by regime


def test_start_groups_by_hand():
    p0 = torch.tensor(
        [
            [0.3, 0.1, 0.8, 0.5, 0.1, 0.9],  # two hardest: the two 0.1s; two easiest: 0.9, 0.8
            [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        ],  # all tied: the lower index counts as harder
        dtype=F64,
    )
    m = start_groups(p0, 2)
    assert m["hard"].nonzero().tolist() == [[0, 1], [0, 4], [1, 0], [1, 1]]
    assert m["easy"].nonzero().tolist() == [[0, 2], [0, 5], [1, 4], [1, 5]]
    assert bool(m["mixed"].all()) and not bool((m["hard"] & m["easy"]).any())
    assert start_groups(p0, 3)["hard"][0].nonzero().flatten().tolist() == [0, 1, 4]  # 0.1, 0.1, then 0.3


def _reference_groups(p0: list, n: int) -> dict[str, list[list[int]]]:
    """The hard / easy / mixed prompts of each seed by a plain sort on (p0, index)."""
    out = {"hard": [], "easy": [], "mixed": []}
    for row in p0:
        order = sorted(range(len(row)), key=lambda q: (row[q], q))
        out["hard"].append(order[:n])
        out["easy"].append(order[-n:])
        out["mixed"].append(order)
    return out


def test_regime_curves_and_summary_match_a_plain_loop():
    gen = torch.Generator().manual_seed(7)
    n_seeds, n_prompts, steps, n = 3, 7, 9, 3
    p0 = (torch.rand(n_seeds, n_prompts, generator=gen, dtype=F64) * 4).round() / 4  # quarters: many ties
    x = torch.rand(n_seeds, n_prompts, steps, generator=gen, dtype=F64) + 0.5
    got = start_group_curves(x, p0, n)
    groups = _reference_groups(p0.tolist(), n)
    # float64 values in [0.5, 1.5], means over at most 7 prompts: the two orders of summation differ by a few
    # ulps of 1.5 (eps64 = 2.2e-16); 1e-12 is far above that and far below any planted error
    tol = 1e-12
    for group in REGIMES:
        for s in range(n_seeds):
            want = [sum(x[s, q, t].item() for q in groups[group][s]) / len(groups[group][s]) for t in range(steps)]
            assert got[group][s].tolist() == pytest.approx(want, rel=tol, abs=0), (group, s)
            summary = curve_summary(got[group], 4)
            assert summary["peak_ratio"][s].item() == pytest.approx(max(want) / want[0], rel=tol, abs=0)
            assert (
                summary["start"][s].item(),
                summary["early"][s].item(),
                summary["final"][s].item(),
            ) == pytest.approx((want[0], want[4], want[-1]), rel=tol, abs=0)


def test_summarise_regimes_keeps_the_groups_numbers():
    t = peaked(2, 6, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=6, seed=1)
    keep = summarise_regimes(out, 2, early=2, every=3)
    json.dumps(keep, allow_nan=False)  # plain JSON
    h = start_group_curves(out["entropy_curves"], out["success_curves"][..., 0], 2)
    p = start_group_curves(out["success_curves"], out["success_curves"][..., 0], 2)
    # the file keeps 4 significant digits: a kept number is within 5e-4 of the value, relative
    close = lambda a, b: all(math.isclose(x, float(y), rel_tol=5e-4) for x, y in zip(a, b))  # noqa: E731
    for group in REGIMES:
        g = keep[group]
        assert close(g["start_p"], p[group][:, 0]) and close(g["final_p"], p[group][:, -1])
        assert close(g["peak_ratio"], h[group].amax(1) / h[group][:, 0]) and close(g["early_h"], h[group][:, 2])
        assert g["entropy_curve"]["steps"] == [0, 3, 6] and g["entropy_curve"]["n"] == 2
        assert close(g["entropy_curve"]["mean"], h[group][:, ::3].mean(0))
    assert close(keep["mixed"]["final_h"], out["entropy"][:, -1])  # every prompt: the run's own mean curve
    assert all(a < b for a, b in zip(keep["hard"]["start_p"], keep["easy"]["start_p"]))


def test_regime_grid():
    g = regime_settings(adam_eta=0.02, adam_passes=4, sgd_eta=40.0, sgd_passes=2)
    assert sorted(g) == sorted(
        f"{o}/{b}/{c}" for o in ("adam", "sgd") for b in ("mean", "quantile K=0.4") for c in ("clip-higher", "clip-0.2")
    )
    adam = g["adam/quantile K=0.4/clip-higher"]
    assert (adam.optimizer, adam.eta, adam.num_iterations, adam.epsilon_high, adam.k) == ("adam", 0.02, 4, 0.28, 0.4)
    sgd = g["sgd/mean/clip-0.2"]
    assert (sgd.optimizer, sgd.eta, sgd.num_iterations, sgd.epsilon_high, sgd.baseline) == ("sgd", 40.0, 2, 0.2, "mean")


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: start_groups(torch.zeros(2, 4), 3), "n"),
        (lambda: start_groups(torch.zeros(2, 4), 0), "n"),
        (lambda: start_groups(torch.zeros(4), 1), "p0"),
        (lambda: start_groups(torch.zeros(2, 1), 1), "p0"),
        (lambda: start_group_curves(torch.zeros(2, 3, 5), torch.zeros(2, 4), 1), "curves"),
        (lambda: curve_summary(torch.ones(2, 5), 5), "early"),
        (lambda: curve_summary(torch.ones(5), 0), "curve"),
    ],
)
def test_regime_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        call()


def test_first_move_up_down_flat_and_a_return_to_the_start():
    steps = [0, 5, 10, 15, 20]
    assert first_move([1.0, 1.2, 1.5, 0.9, 2.0], steps) == (1.0, 1.5, 10)  # the later, higher peak: a second move
    assert first_move([1.0, 0.9, 0.6, 0.8, 0.5], steps) == (1.0, 0.5, 20)  # below the start throughout: one fall
    assert first_move([1.0, 0.9, 0.6, 1.0, 0.2], steps) == (1.0, 0.6, 10)  # back at the start ends the move
    assert first_move([1.0, 1.0, 1.0, 1.3, 1.3], steps) == (1.0, 1.3, 15)  # flat, then up: the first of equal peaks
    assert first_move([2.0] * 5, steps) == (2.0, 2.0, 0)  # never moves
    with pytest.raises(ValueError, match="one per step"):
        first_move([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="finite"):
        first_move([1.0, math.nan], [0, 1])


def test_first_move_of_the_committed_hard_prompts_under_the_mean_baseline_is_a_rise():
    c = seqpolicy_regime_curve(load_regimes(), "hard", "mean", "adam", True)
    move = first_move(c["mean"], c["steps"])
    assert move.start == c["mean"][0] and move.extreme == max(c["mean"]) > move.start and move.step > 0


# ---------------------------------------------------------------- the committed files

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


def test_seqpolicy_regime_curve_reads_one_committed_curve_and_names_a_bad_choice():
    r = load_regimes()
    c = seqpolicy_regime_curve(r, "easy", "quantile", "sgd", False)
    assert c == r["runs"]["sgd/quantile K=0.4/clip-0.2"]["groups"]["easy"]["entropy_curve"]
    for args, match in (
        (("hard", "median"), "^baseline must"),
        (("all", "mean"), "^group must"),
        (("hard", "mean", "lion"), "^no committed run"),
    ):
        with pytest.raises(ValueError, match=match):
            seqpolicy_regime_curve(r, *args)


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
