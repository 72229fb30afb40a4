"""qae_lab.lab.notebooks.nb09_ledgers: notebook 09's live numbers and figures, against hand-computed cases, the exact policy's
facts and the numbers the figures draw."""

from __future__ import annotations

import math

import pytest

from qae_lab.analysis.seqpolicy_runs import load_findings
from qae_lab.analysis.seqpolicy_runs import findings_curves, run_curves, setting_name
from qae_lab.lab.notebooks.nb09_ledgers import (
    CELL_NAMES,
    COMPARISONS,
    SHARE_PARTS,
    SHOW,
    LiveRuns,
    expected_vs_sampled_rows,
    findings_figure,
    ledger_keys,
    ledger_shares,
    ledger_shares_figure,
    live_figure,
    one_update,
    one_update_rows,
    task_rows,
    variance_figure,
    variance_ratios,
)
from qae_lab.toys.seqpolicy import make_tasks, sequence_entropy
from qae_lab.toys.seqpolicy_training import UpdateSettings


def test_task_rows_a_flat_start_has_the_largest_entropy():
    # a flat start is the uniform policy: H(pi) = L log V exactly, and the chain rule holds to rounding
    tasks = {"flat": make_tasks(4, 2, 3, start="flat", seed=0), "peaked": make_tasks(4, 2, 3, start="peaked", seed=0)}
    flat, peaked = task_rows(tasks, 2, 3)
    bound = 3 * math.log(2)
    # float64 entropies of 8 sequences: a few ulps of log 8
    assert flat["H(pi), mean"] == pytest.approx(bound, abs=1e-12) and flat["L log V"] == bound
    assert peaked["H(pi), mean"] == pytest.approx(float(sequence_entropy(tasks["peaked"].logits).mean()), abs=1e-12)
    assert flat["chain rule's gap"] < 1e-12 and peaked["hard prompts"].endswith(" of 4")
    assert 0 <= peaked["p, lowest"] <= peaked["p, highest"] <= 1


def test_ledger_shares_by_hand():
    m = {
        "exact/dh": 0.5,
        "exact/dh_hard_pos": 1.0,
        "exact/dh_hard_neg": -1.0,
        "exact/dh_easy_pos": 0.5,
        "exact/dh_easy_neg": 0.0,
    }
    assert ledger_shares(m, "exact") == [0.2, 0.4, -0.4, 0.2, 0.0]  # |cells| sum to 2.5
    with pytest.raises(ValueError, match="cells are all 0"):
        ledger_shares({f"exact/{p}": 0.0 for p in SHARE_PARTS}, "exact")


def test_one_update_and_its_rows():
    t = make_tasks(4, 2, 3, start="peaked", seed=0)
    m = one_update(t, UpdateSettings(group_size=4, baseline="mean", eta=1.0))
    assert m["sampled/dh"] == pytest.approx(m["sampled/dh_state"] + m["sampled/dh_visit"], abs=1e-12)
    assert one_update(t, UpdateSettings(group_size=4, baseline="mean", eta=1.0)) == m  # the same seed, the same draw
    rows = one_update_rows(
        {
            "dh_exact": -0.25,
            "dh_first_order": -0.5,
            "sampled/dh_state": -0.375,
            "sampled/dh_visit": -0.125,
            "estimator_npg/dh": 1.0,
            "estimator_pg/dh": -2.0,
            "estimator_reinforce/dh": 0.5,
        }
    )
    assert [r["value"] for r in rows] == [-0.25, -0.5, -0.375, -0.125, 1.0, -2.0, 0.5]
    assert rows[4]["quantity"] == "per-token estimate npg (trainer), summed (eta / N_tok units)"
    with pytest.raises(KeyError):  # the default kinds name the reinforce estimate too
        one_update_rows({"dh_exact": 0, "dh_first_order": 0, "sampled/dh_state": 0, "sampled/dh_visit": 0})


def test_expected_vs_sampled_rows_agree_within_their_margin():
    t = make_tasks(4, 2, 3, start="peaked", seed=0)
    rows = expected_vs_sampled_rows(t, UpdateSettings(group_size=4, baseline="mean", eta=1.0), 400, prompts=2)
    assert [r["part"] for r in rows] == ["dh", "dh_hard_neg", "dh_easy_neg"]
    for r in rows:  # the sampled ledger is unbiased: its average lies near the expected one
        assert abs(r["sampled, mean"] - r["expected"]) <= 2 * r["2 s.e."] + 1e-9, r
    with pytest.raises(ValueError, match="n_groups"):
        expected_vs_sampled_rows(t, UpdateSettings(group_size=4), 1)


def test_live_runs_settings_and_cache():
    live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=3, eta=40.0, adam_eta=0.02)
    s = live.settings("quantile", 0.6, False, False, 0.5, "sgd")
    assert (s.baseline, s.k, s.scale, s.eta, s.epsilon_high, s.alpha, s.num_iterations) == (
        "quantile",
        0.6,
        "none",
        40.0,
        0.2,
        0.5,
        2,
    )
    s = live.settings("mean", 0.4, True, True, 0.0, "adam")
    assert (s.scale, s.eta, s.epsilon_high, s.optimizer) == ("group", 0.02, 0.28, "adam")
    out = live("mean", 0.4, True, True, "flat", 0.0, "sgd")
    assert out["entropy"].shape == (2, 4) and out["sampled/dh"].shape == (2, 3)
    assert live("mean", 0.4, True, True, "flat", 0.0, "sgd") is out  # made once
    assert live("mean", 0.4, True, True, "peaked", 0.0, "sgd") is not out


def test_ledger_keys_every_choice():
    assert ledger_keys("cumulative ledger, exact", "sgd") == {k: f"sampled/{v}" for k, v in CELL_NAMES.items()}
    assert ledger_keys("cumulative ledger, exact", "adam") == {"all (grad H . dz, whole step)": "dh_first_order"}
    assert ledger_keys("cumulative ledger, trainer's npg", "adam") == {
        k: f"estimator_npg/{v}" for k, v in CELL_NAMES.items()
    }
    assert ledger_keys("success", "sgd") == {"success": "success"} and set(SHOW) >= {"entropy", "success"}
    with pytest.raises(ValueError, match="show must be one of"):
        ledger_keys("loss", "sgd")


def test_variance_ratios_by_hand():
    out = {"alpha = 0": {"trace_var": 4.0, "mean_norm": 2.0}, "AH, alpha = 1": {"trace_var": 1.0, "mean_norm": 3.0}}
    assert variance_ratios(out) == {"alpha = 0": [1.0, 1.0], "AH, alpha = 1": [0.25, 1.5]}


def test_comparisons_name_settings_of_the_committed_sweep():
    runs = load_findings()["runs"]
    for group in COMPARISONS.values():
        for spec in group.values():
            for start in ("flat", "peaked"):
                assert setting_name(start, *spec) in runs, (start, spec)


def test_ledger_shares_figure_one_bar_group_per_ledger():
    m = {
        f"{kind}/{p}": v
        for kind in ("sampled", "estimator_npg")
        for p, v in zip(SHARE_PARTS, [0.5, 1.0, -1.0, 0.5, 0.0])
    }
    fig = ledger_shares_figure(m, {"exact": "sampled", "npg": "estimator_npg"}, title="shares")
    assert [t.name for t in fig.data] == ["exact", "npg"]
    assert list(fig.data[1].x) == SHARE_PARTS and list(fig.data[1].y) == [0.2, 0.4, -0.4, 0.2, 0.0]
    assert fig.layout.xaxis.title.text == "part of the ledger"


def test_live_figure_titles_and_cumulative_ledger():
    live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=4, eta=5.0, adam_eta=0.02)
    fig = live_figure(live, "quantile", 0.6, False, True, "peaked", 0.5, "sgd", "cumulative ledger, exact")
    assert fig.layout.title.text.replace("<br>", " ") == (
        "first-order dH summed over steps (nats): baseline = quantile, K = 0.6, Clip-Higher off, std on, peaked "
        "start, α = 0.5, optimizer sgd"
    )  # wrapped at a space
    out = live("quantile", 0.6, False, True, "peaked", 0.5, "sgd")
    want = run_curves(out, {"all": "sampled/dh"}, cumulative=True)["all"]
    line = next(t for t in fig.data if t.name and t.name.startswith("all ("))
    assert list(line.y) == pytest.approx(want.mean) and list(line.x) == [1, 2, 3, 4]
    adam = live_figure(live, "mean", 0.4, True, False, "flat", 0.0, "adam", "cumulative ledger, exact")
    assert [t.name for t in adam.data if t.name] == ["all (grad H . dz, whole step) (2 runs)"]


def test_findings_figure_draws_the_committed_curves():
    findings = load_findings()
    fig = findings_figure(findings, COMPARISONS, "peaked", "optimizer", "success")
    names = {label: setting_name("peaked", *spec) for label, spec in COMPARISONS["optimizer"].items()}
    want = findings_curves(findings, names, "success_curve")
    lines = {t.name.split(" (")[0]: t for t in fig.data if t.name}
    assert set(lines) == set(want)
    assert list(lines["quantile, Adam"].y) == pytest.approx(want["quantile, Adam"].mean)
    assert fig.layout.yaxis.title.text == "success rate" and "optimizer, peaked start" in fig.layout.title.text


def test_variance_figure_ratios_to_grpo():
    tasks = {"flat": make_tasks(2, 2, 2, start="flat", seed=0)}
    fig = variance_figure(tasks, 1.0, "flat", eta=1.0, n_draws=8)
    assert [t.name for t in fig.data] == ["alpha = 0", "SA-AH, alpha = 1", "AH, alpha = 1"]
    assert list(fig.data[0].y) == [1.0, 1.0]  # GRPO against itself
    assert list(fig.data[0].x) == ["tr Cov(dz) / GRPO's", "|E dz| / GRPO's"]
    assert "same 8 batches, α = 1, flat start" in fig.layout.title.text
