"""Tests for qae_lab.analysis.grouping: which runs are averaged together, what two groups differ in, and when a
seed-spread verdict is given. Run folders are written by hand to tmp_path with a config.json shaped like
the trainer's (settings that count and settings that do not); the comparisons on whole tables are in
test_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qae_lab.analysis.compare import load_run
from qae_lab.analysis.grouping import (
    LIVE,
    SETTINGS,
    describe_groups,
    differences,
    differences_report,
    format_differences,
    group_runs,
    run_length,
    settings_of,
)
from qae_lab.methods import method_settings


def write_run(folder: Path, *, method="qae", seed=0, steps=4, run=None, trainer=None, rows=None) -> Path:
    """A run folder whose config.json holds the fields a real one has: counted ones and ignored ones."""
    folder.mkdir(parents=True)
    run_cfg = {
        "model": "embedded",
        "task": "synthetic",
        "levels": [2, 3, 4, 5],
        "n_train": 2000,
        "n_eval": 200,
        "data_seed": 0,
        "eval_samples": 8,
        "eval_batch_size": 16,
        "save_model": False,
        "method": method,
        "command": f"python -m qae_lab train --method {method}",
        **(run or {}),
    }
    trainer_cfg = {
        "output_dir": str(folder),
        "seed": seed,
        "max_steps": 400,
        "learning_rate": 1e-4,
        "num_generations": 8,
        "generation_batch_size": 64,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "quantile_k": 0.4,
        "alpha": 0.5,
        "sparse_update": False,
        **method_settings(method),
        **(trainer or {}),
    }
    config = {"preset": "cpu-demo", "run": run_cfg, "trainer": trainer_cfg, "versions": {"torch": "2.13.0"}}
    (folder / "config.json").write_text(json.dumps(config))
    rows = rows or [{"step": s, "reward": 0.5, "qae/k": trainer_cfg["quantile_k"]} for s in range(1, steps + 1)]
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _group(tmp_path, name, mine=False, **kw):
    run = load_run(write_run(tmp_path / name, **kw))
    [g] = group_runs([], [run]) if mine else group_runs([run])
    return g


# ---------------------------------------------------------------- settings and length


def test_settings_count_what_changes_the_experiment_and_nothing_else(tmp_path):
    a = load_run(write_run(tmp_path / "a", seed=0))
    b = load_run(
        write_run(
            tmp_path / "b",
            seed=42,
            run={"eval_batch_size": 4, "command": None, "save_model": True},
            trainer={"logging_steps": 5, "save_strategy": "steps", "report_to": ["wandb"]},
        )
    )
    assert settings_of(a) == settings_of(b)  # seed, output folder, logging, saving, eval batch size: not settings
    s = settings_of(a)
    assert list(s) == [*SETTINGS, LIVE]
    assert (s["levels"], s["n_train"], s["max_steps"], s["reward"], s["dtype"], s[LIVE]) == (
        (2, 3, 4, 5),
        2000,
        400,
        "strict",
        "auto",
        None,
    )
    c = load_run(write_run(tmp_path / "c", run={"reward": "composite"}))
    assert settings_of(c)["reward"] == "composite"  # a field older configs lack: its default when missing, else read


def test_run_length_is_the_last_step_trained_not_max_steps(tmp_path):
    run = load_run(write_run(tmp_path / "stopped", steps=48))
    assert run.config["trainer"]["max_steps"] == 400 and run_length(run) == 48
    assert run_length(load_run(write_run(tmp_path / "empty", rows=[{"step": 1, "train_runtime": 1.0}]))) == 0


def test_knobs_steered_live_are_a_setting(tmp_path):
    rows = [{"step": s, "reward": 0.5, "qae/k": 0.4 if s < 3 else 0.7} for s in range(1, 5)]
    steered = load_run(write_run(tmp_path / "steered", seed=1, rows=rows))
    plain = load_run(write_run(tmp_path / "plain", seed=0))
    assert settings_of(steered)[LIVE] == "step 3: qae/k=0.7"
    groups = group_runs([plain, steered])
    assert len(groups) == 2 and differences(*groups) == {LIVE: (None, "step 3: qae/k=0.7")}


# ---------------------------------------------------------------- groups


def test_same_seed_counts_once_and_different_lengths_stay_apart(tmp_path):
    ref = [load_run(write_run(tmp_path / f"qae-seed{s}", seed=s, steps=6)) for s in (0, 1, 2)]
    mine = [
        load_run(write_run(tmp_path / name, seed=42, steps=n, rows=None))
        for name, n in (("live-48", 4), ("live-38", 3), ("live-48-again", 4))
    ]
    groups = group_runs(ref, mine)
    assert [(g.label, g.steps, g.seeds, g.mine) for g in groups] == [
        ("qae", 6, [0, 1, 2], False),
        ("qae (yours, 4 steps, seed 42)", 4, [42], True),
        ("qae (yours, 3 steps, seed 42)", 3, [42], True),
    ]
    assert len(groups[1].runs) == 1 and [r.name for r, _ in groups[1].set_aside] == ["live-48"]  # the later name kept
    text = describe_groups(groups)
    assert "qae: 6 steps, 3 seeds (0, 1, 2): qae-seed0, qae-seed1, qae-seed2" in text
    assert "  set aside: live-48 (same seed 42 as live-48-again: a rerun counts once)" in text


def test_unknown_seeds_count_once(tmp_path):
    runs = [load_run(write_run(tmp_path / n, seed=None)) for n in ("a", "b")]
    [g] = group_runs(runs)
    assert g.seeds == [None] and len(g.set_aside) == 1 and "seed ?" in g.title


def test_groups_with_one_title_are_told_apart_by_their_settings(tmp_path):
    mine = [load_run(write_run(tmp_path / f"k{k}", seed=42, trainer={"quantile_k": k})) for k in (0.4, 0.6)]
    assert [g.label for g in group_runs([], mine)] == [
        "qae (yours, 4 steps, seed 42, quantile_k=0.4)",
        "qae (yours, 4 steps, seed 42, quantile_k=0.6)",
    ]


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"runs must be a list of Run .* got int"):
        group_runs(5)
    with pytest.raises(ValueError, match=r"mine\[0\] must be a Run .* got str"):
        group_runs([], ["runs/live"])
    with pytest.raises(ValueError, match=r"limit must be None \(all\) or an int >= 1, got 0"):
        format_differences({}, limit=0)


# ---------------------------------------------------------------- differences


def test_differences_name_exactly_the_differing_settings(tmp_path):
    ref = _group(tmp_path, "ref", seed=0, steps=4)
    you = _group(
        tmp_path,
        "you",
        mine=True,
        seed=42,
        steps=3,
        run={"n_train": 64, "eval_batch_size": 4},
        trainer={"learning_rate": 5e-5, "logging_steps": 5, "output_dir": "elsewhere"},
    )
    assert differences(you, ref) == {"steps": (3, 4), "n_train": (64, 2000), "learning_rate": (5e-5, 1e-4)}
    assert differences(ref, you) == {"steps": (4, 3), "n_train": (2000, 64), "learning_rate": (1e-4, 5e-5)}
    assert differences(ref, ref) == {}
    assert (
        format_differences(differences(you, ref)) == "steps 3 vs 4, n_train 64 vs 2000, learning_rate 5e-05 vs 0.0001"
    )
    assert format_differences(differences(you, ref), limit=1) == "steps 3 vs 4, and 2 more"
    with pytest.raises(ValueError, match="b must be a Group"):
        differences(ref, "qae")


def test_a_methods_own_knobs_are_not_differences_between_methods(tmp_path):
    g = lambda name, method, **trainer: _group(tmp_path, name, method=method, trainer=trainer)  # noqa: E731
    qae6, qae4, mean4 = g("qae6", "qae", quantile_k=0.6), g("qae4", "qae"), g("mean4", "mean")
    assert differences(qae6, mean4) == {}  # K is QAE's own knob
    assert differences(qae6, qae4) == {"quantile_k": (0.6, 0.4)}  # within one method it is a setting
    assert differences(qae6, g("both4", "qae_sa_ah")) == {"quantile_k": (0.6, 0.4)}  # both use the quantile baseline
    sa1 = g("sa1", "sa_ah", alpha=1.0)
    assert differences(sa1, mean4) == {}
    assert differences(sa1, g("both5", "qae_sa_ah")) == {"alpha": (1.0, 0.5)}  # both weight tokens
    assert differences(g("clip", "mean+clip_higher"), mean4) == {}  # the partner's epsilon_high is its own
    assert differences(g("lr", "mean", learning_rate=1e-3), qae4) == {"learning_rate": (1e-3, 1e-4)}


def test_differences_report_against_the_nearest_reference_group(tmp_path):
    ref = [load_run(write_run(tmp_path / f"{m}-seed{s}", method=m, seed=s)) for m in ("mean", "qae") for s in (0, 1)]
    mine = [
        load_run(write_run(tmp_path / "short", seed=42, steps=3, run={"n_train": 64})),
        load_run(write_run(tmp_path / "same", seed=7)),
    ]
    report = differences_report(group_runs(ref, mine)).splitlines()
    assert report == [
        "qae (yours, 3 steps, seed 42) vs qae (reference, 4 steps, seeds 0-1):",
        "  differs in steps 3 vs 4, n_train 64 vs 2000",
        "qae (yours, 4 steps, seed 7) vs qae (reference, 4 steps, seeds 0-1):",
        "  comparable (same settings and length)",
    ]
    assert differences_report(group_runs(ref)).startswith("no runs of your own")


# ---------------------------------------------------------------- the seed-spread verdict
