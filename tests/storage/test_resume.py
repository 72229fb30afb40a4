"""Tests for qae_lab.storage.resume: the one resume plan. Hand-made run folders (empty, holding another run,
a complete checkpoint at N, damaged checkpoints, a finished run, changed settings) give the expected
plan; the command line, make_trainer / train, the live lab and RunLogger each follow the plan they are
given (the planner is replaced and each caller must do what the replacement says). No training."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

import qae_lab.runs.pipeline as pipeline
from qae_lab.storage import resume as resume_mod
from qae_lab.train.callbacks import RunLogger, pending_plan
from qae_lab.__main__ import main
from qae_lab.lab.live import Controls
from qae_lab.lab.live import Dashboard, LiveRun
from qae_lab.storage.resume import FRESH, REFUSE, RESUME, ResumePlan, claim, plan_run
from qae_lab.storage.folder import (
    CONFIG_NAME,
    LOG_NAME,
    MARKER_NAME,
    SUPERSEDED_NAME,
    RunFolderError,
    read_log,
    run_files,
)

SETTINGS = {"trainer": {"quantile_k": 0.4, "max_steps": 4, "save_steps": 2, "seed": 42}, "run": {"n_train": 16}}


def _checkpoint(out: Path, step: int, history_steps=None) -> Path:
    """A small but real Trainer-like checkpoint: state (with its log history), safetensors weights, torch files."""
    ckpt = out / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    history = [{"step": s, "reward": s / 10, "loss": 0.0} for s in (history_steps or range(1, step + 1))]
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))
    save_file({"w": torch.arange(16.0)}, str(ckpt / "model.safetensors"))
    torch.save({"state": {}}, ckpt / "optimizer.pt")
    torch.save({"last_epoch": step}, ckpt / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state()}, ckpt / "rng_state.pth")
    return ckpt


def _run_folder(out: Path, *, logged=(1, 2), checkpoints=(2,), finished: int | None = None, settings=SETTINGS) -> Path:
    """A run folder as a run leaves it: config.json, log.jsonl with the ``logged`` steps, the checkpoints."""
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_NAME).write_text(
        json.dumps({"preset": "cpu-demo", **settings, "versions": {"qae_lab": "0.1.0"}, "resumes": []})
    )
    rows = [{"step": s, "reward": s / 10, "loss": 0.0} for s in logged]
    rows += [{"step": finished, "train_runtime": 9.0}] if finished else []
    (out / LOG_NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step in checkpoints:
        _checkpoint(out, step)
    return out


def _with(**trainer) -> dict:
    return {"trainer": {**SETTINGS["trainer"], **trainer}, "run": dict(SETTINGS["run"])}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- hand-made folders -> the plan


def test_an_empty_or_missing_folder_is_fresh_and_planning_writes_nothing(tmp_path):
    assert plan_run(tmp_path / "new") == ResumePlan(FRESH, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's own")  # not a run's file
    p = plan_run(tmp_path / "mine")
    assert (p.kind, p.overwrite, p.start_step, p.resume_from, p.lines()) == (FRESH, (), 0, None, [])


def test_a_folder_holding_another_run_is_refused_unless_overwritten(tmp_path):
    out = _run_folder(tmp_path / "run")
    (out / "eval_before.json").write_text("{}")
    before = _snapshot(out)
    p = plan_run(out)
    assert (
        p.kind == REFUSE and "already holds a run (checkpoint-2, config.json, eval_before.json, log.jsonl)" in p.reason
    )
    assert "--resume" in p.reason and "--overwrite" in p.reason
    with pytest.raises(RunFolderError, match="already holds a run"):
        p.require()
    o = plan_run(out, overwrite=True)
    assert o.kind == FRESH and o.overwrite == ("checkpoint-2", "config.json", "eval_before.json", "log.jsonl")
    assert "deleting the previous run's checkpoint-2, config.json" in o.lines()[0]
    assert _snapshot(out) == before  # planning touched nothing
    only_eval = tmp_path / "eval-only"
    only_eval.mkdir()
    (only_eval / "eval_before.json").write_text("{}")  # a run interrupted in its first evaluation
    assert plan_run(only_eval).kind == REFUSE


@pytest.mark.parametrize("how", ["run folder", "checkpoint", "True"])
def test_a_complete_checkpoint_at_n_is_resumed(tmp_path, how):
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    resume = {"run folder": out, "checkpoint": out / "checkpoint-2", "True": True}[how]
    p = plan_run(out if how != "run folder" else None, resume=resume, settings=SETTINGS)
    assert (p.kind, p.folder, p.checkpoint, p.step, p.start_step) == (RESUME, out, out / "checkpoint-2", 2, 2)
    assert (p.changes, p.finished_at, p.trains_on, p.superseded_steps, p.restored_steps, p.cut_line) == (
        (),
        None,
        True,
        (),
        (),
        False,
    )
    assert p.lines() == [f"resuming {out / 'checkpoint-2'} (step 2)"]
    assert p.resume_from == str(out / "checkpoint-2")


def test_damaged_checkpoints_are_skipped_named_or_refused(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3, 4), checkpoints=(2, 4))
    rng = out / "checkpoint-4" / "rng_state.pth"
    rng.write_bytes(rng.read_bytes()[:100])  # cut by a crash
    p = plan_run(None, resume=out, settings=SETTINGS)
    assert p.kind == RESUME and p.step == 2 and p.superseded_steps == (3, 4)
    assert p.notes == (
        "checkpoint-4 skipped: rng_state.pth is damaged or cut short (BadZipFile: File is not a zip file; 100 bytes)",
    )
    assert p.lines()[0] == p.notes[0] and "steps 3, 4 were logged after the checkpoint" in p.lines()[1]
    named = plan_run(None, resume=out / "checkpoint-4", settings=SETTINGS)
    assert (
        named.kind == REFUSE
        and "checkpoint-4: the checkpoint cannot be resumed: rng_state.pth is damaged" in named.reason
    )
    (out / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2')
    none = plan_run(None, resume=out, settings=SETTINGS)
    assert none.kind == REFUSE and "no complete checkpoint in this run folder" in none.reason
    assert (
        "checkpoint-4 skipped" in none.reason and "checkpoint-2 skipped: trainer_state.json is damaged" in none.reason
    )
    assert plan_run(None, resume=tmp_path / "nowhere").reason.endswith("nowhere: no such folder to resume")


def test_malformed_states_configs_and_pickled_weights_are_refused_naming_the_file(tmp_path):
    # malformed trainer_state.json or config.json gave tracebacks; a checkpoint holding only
    # pytorch_model.bin was accepted here and refused by export
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    state = out / "checkpoint-2" / "trainer_state.json"
    for text in ('{"global_step": "2"}', "[2]", '{"global_step": true}', '{"global_step": 2, "log_history": 5}'):
        state.write_text(text)
        p = plan_run(None, resume=out, settings=SETTINGS)
        assert p.kind == REFUSE and "checkpoint-2 skipped: trainer_state.json" in p.reason, text
    state.write_text(json.dumps({"global_step": 2, "log_history": []}))
    for text, said in (
        ("[1, 2]", "a JSON dict is needed, it holds a list"),
        ('{"trainer": 3}', "its 'trainer' is not a mapping"),
        ("[" * 100_000, "nested too deep"),
        ('{"trainer": {}, "run": {"build": "x"}}', None),
    ):
        (out / CONFIG_NAME).write_text(text)
        if said is None:  # the command line's recipe reader: checked too
            assert main(["train", "--resume", str(out), "--dry-run"]) == 2
            continue
        p = plan_run(None, resume=out, settings=SETTINGS)
        assert p.kind == REFUSE and said in p.reason, text
    (out / CONFIG_NAME).write_text(json.dumps({"preset": "cpu-demo", **SETTINGS, "versions": {"qae_lab": "0"}}))
    weights = out / "checkpoint-2" / "model.safetensors"
    weights.unlink()
    torch.save({"w": torch.zeros(2)}, out / "checkpoint-2" / "pytorch_model.bin")
    p = plan_run(None, resume=out, settings=SETTINGS)
    assert p.kind == REFUSE and "pytorch_model.bin holds pickled weights, which qae_lab never loads" in p.reason


def test_a_finished_run_resumes_as_it_was_or_trains_on(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3, 4), checkpoints=(2, 4), finished=4)
    same = plan_run(None, resume=out, settings=SETTINGS)
    assert (same.kind, same.step, same.finished_at, same.trains_on, same.changes) == (RESUME, 4, 4, False, ())
    longer = plan_run(None, resume=out, settings=_with(max_steps=6))
    assert (longer.finished_at, longer.trains_on, longer.changed) == (4, True, {"max_steps": [4, 6]})
    assert "changed: max_steps 4 -> 6" in longer.lines()[-1]
    older = plan_run(None, resume=out / "checkpoint-2", settings=_with(max_steps=6))
    assert older.kind == REFUSE and "checkpoint-2 is not the run's latest checkpoint (checkpoint-4 is)" in older.reason
    shorter = plan_run(None, resume=out, settings=_with(max_steps=3))
    assert shorter.kind == REFUSE and "max_steps must exceed the checkpoint's step 4" in shorter.reason


def test_changed_settings_are_refused_unless_safe(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    before = _snapshot(out)
    unsafe = plan_run(None, resume=out, settings={**_with(quantile_k=0.6), "run": {"n_train": 32}})
    assert unsafe.kind == REFUSE and "other settings than the run was trained with" in unsafe.reason
    assert "quantile_k 0.4 -> 0.6" in unsafe.reason and "n_train 16 -> 32" in unsafe.reason
    safe = plan_run(None, resume=out, settings=_with(save_steps=1, max_steps=8))
    assert safe.kind == RESUME and safe.changes == (("max_steps", 4, 8), ("save_steps", 2, 1))
    assert plan_run(None, resume=out).changes == ()  # no settings given: the run's own
    assert _snapshot(out) == before


def test_the_log_around_the_checkpoint_is_planned(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3), checkpoints=(3,))
    text = (out / LOG_NAME).read_text()
    (out / LOG_NAME).write_text(text[: text.index('{"step": 3') + 12])  # step 3's line cut by a crash
    p = plan_run(None, resume=out, settings=SETTINGS)
    assert (p.step, p.restored_steps, p.cut_line, p.superseded_steps) == (3, (3,), True, ())
    assert "last line was cut short" in p.lines()[-1] and "steps 3 missing from the log are restored" in p.lines()[-1]


def test_what_a_resume_cannot_be(tmp_path):
    out = _run_folder(tmp_path / "run")
    assert (
        plan_run(out, resume=out, overwrite=True).reason
        == "--overwrite starts a new run; --resume continues one: choose one"
    )
    other = plan_run(tmp_path / "elsewhere", resume=out / "checkpoint-2")
    assert other.kind == REFUSE and "continues its own run folder" in other.reason
    (out / CONFIG_NAME).unlink()
    assert plan_run(None, resume=out, settings=SETTINGS).kind == RESUME  # nothing to compare with
    rebuilt = plan_run(None, resume=out, settings=lambda stored, folder: SETTINGS)  # rebuilt from config.json
    assert rebuilt.kind == REFUSE and "run config" in rebuilt.reason and "is missing" in rebuilt.reason


def test_a_loaded_step_is_planned_from_the_trainers_state(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1,), checkpoints=())
    history = [{"step": s, "reward": 0.5} for s in (1, 2)]  # the trainer loaded step 2 from elsewhere
    p = plan_run(out, resume=2, history=history, settings=SETTINGS)
    assert (p.kind, p.step, p.restored_steps, p.checkpoint) == (RESUME, 2, (2,), out / "checkpoint-2")
    with pytest.raises(ValueError, match="step is >= 1"):
        plan_run(out, resume=-1)


def test_the_plan_is_a_frozen_value_with_one_meaning(tmp_path):
    p = plan_run(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.kind = RESUME
    with pytest.raises(ValueError, match="kind must be"):
        ResumePlan("restart", tmp_path)
    with pytest.raises(ValueError, match="says why"):
        ResumePlan(REFUSE, tmp_path)
    with pytest.raises(ValueError, match="names its checkpoint"):
        ResumePlan(RESUME, tmp_path)
    assert plan_run(tmp_path) == p and hash(plan_run(tmp_path)) == hash(p)


def test_claim_carries_out_a_fresh_plan_and_guards_against_a_run_started_since(tmp_path):
    out = _run_folder(tmp_path / "run")
    (out / "notes.txt").write_text("keep")
    p = plan_run(out, overwrite=True)
    lock = claim(p)
    assert lock.held and sorted(x.name for x in out.iterdir()) == [
        ".qae_lab-run.json",
        ".qae_lab-run.lock",
        "notes.txt",
    ]
    lock.release()
    late = plan_run(tmp_path / "late")
    _run_folder(tmp_path / "late")  # another run started there after the plan was made
    with pytest.raises(RunFolderError, match="already holds a run"):
        claim(late)
    with pytest.raises(RunFolderError, match="refused"):
        claim(ResumePlan(REFUSE, out, reason="refused"))
    resumed = plan_run(None, resume=_run_folder(tmp_path / "resumed"), settings=SETTINGS)
    _checkpoint(tmp_path / "resumed", 4)  # trained on by someone else since the plan
    with pytest.raises(RunFolderError, match="changed since the resume was planned"):
        claim(resumed)
    assert not (tmp_path / "late" / ".qae_lab-run.lock").exists()  # a refused claim lets go at once


# ---------------------------------------------------------------- each caller follows the plan


def _planned(plan: ResumePlan, calls: list):
    def planner(*args, **kwargs):
        calls.append((args, kwargs))
        return plan

    return planner


def _no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("loaded before the plan was followed")

    monkeypatch.setattr(pipeline, "load_policy", refuse)


def test_the_command_line_follows_the_plan(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(
        "qae_lab.runs.run_plan.plan_run", _planned(ResumePlan(REFUSE, tmp_path, reason="the plan says no"), calls)
    )
    _no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert main(["train", "--output-dir", str(tmp_path), *extra]) == 2  # an empty folder: refused all the same
        assert "qae-lab: error: the plan says no" in capsys.readouterr().err
    assert len(calls) == 2 and calls[0][1]["overwrite"] is False
    # --overwrite: the command line deletes nothing itself; the plan reaches train(), which claims the folder
    out = _run_folder(tmp_path / "run")
    monkeypatch.undo()
    seen = []
    monkeypatch.setattr("qae_lab.runs.cli.train", lambda run, cfg, **kw: seen.append(kw) or {"interrupted": False})
    assert main(["train", "--output-dir", str(out), "--overwrite", "--set", "max_steps=2"]) == 0
    assert seen[0]["plan"] == plan_run(out, overwrite=True) and "resume_from_checkpoint" not in seen[0]
    assert "deleting the previous run's checkpoint-2, config.json, log.jsonl" in capsys.readouterr().out
    assert run_files(out) == ["checkpoint-2", "config.json", "log.jsonl"]


def test_the_single_test_of_a_fresh_folder_decides_for_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        resume_mod, "fresh_refusal", lambda folder, overwrite=False: f"{folder}/ is taken (so the planner says)"
    )
    assert main(["train", "--output-dir", str(tmp_path / "new"), "--dry-run"]) == 2
    assert "is taken (so the planner says)" in capsys.readouterr().err


def test_make_trainer_and_train_follow_the_plan(tmp_path, monkeypatch):
    run, cfg = pipeline.build("cpu-demo", ["n_train=8"], output_dir=str(tmp_path / "run"))
    calls = []
    monkeypatch.setattr(
        pipeline, "plan_run", _planned(ResumePlan(REFUSE, tmp_path / "run", reason="planned: no"), calls)
    )
    _no_loading(monkeypatch)
    with pytest.raises(RunFolderError, match="planned: no"):
        pipeline.make_trainer(run, cfg)
    with pytest.raises(RunFolderError, match="planned: no"):
        pipeline.train(run, cfg, resume_from_checkpoint=str(tmp_path / "run"))
    assert calls[0][1]["resume"] is None and calls[1][1]["resume"] == str(tmp_path / "run")
    assert set(calls[1][1]["settings"]) == {"trainer", "run"}  # the run's own settings, compared by the planner
    with pytest.raises(ValueError, match="the plan is for"):
        pipeline.make_trainer(run, cfg, plan=ResumePlan(FRESH, tmp_path / "other"))
    with pytest.raises(ValueError, match="not both"):
        pipeline.train(run, cfg, plan=ResumePlan(FRESH, tmp_path / "run"), resume_from_checkpoint="x")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_the_run_logger_follows_its_plan(tmp_path, monkeypatch):
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3), checkpoints=(2,))
    plan = plan_run(None, resume=out, settings=_with(max_steps=6))
    args = SimpleNamespace(output_dir=str(out), to_dict=lambda: {"anything": "else"})  # not compared again
    state = SimpleNamespace(
        global_step=2,
        epoch=0.2,
        is_world_process_zero=True,
        log_history=[{"step": s, "reward": s / 10} for s in (1, 2)],
    )
    logger = RunLogger(plan=plan)
    logger.on_train_begin(args, state, None)
    assert logger.followed is plan and logger.plan is None
    logger.on_train_end(args, state, None)  # lets go of the folder's lock
    assert logger.resume_event["changed"] == {"max_steps": [4, 6]} and logger.resume_event["superseded_steps"] == [3]
    assert json.loads((out / CONFIG_NAME).read_text())["trainer"]["max_steps"] == 6
    # a plan for another start than the trainer's is refused before anything is written
    before = _snapshot(out)
    with pytest.raises(RunFolderError, match="starts at step 0 .* plan is the resume of"):
        RunLogger(plan=plan).on_train_begin(args, SimpleNamespace(**{**vars(state), "global_step": 0}), None)
    with pytest.raises(RunFolderError, match="planned refusal"):
        RunLogger(plan=ResumePlan(REFUSE, out, reason="planned refusal")).on_train_begin(args, state, None)
    assert _snapshot(out) == before
    # a logger on its own asks the same planner, with what the trainer loaded
    calls = []
    monkeypatch.setattr("qae_lab.train.callbacks.plan_run", _planned(ResumePlan(REFUSE, out, reason="asked"), calls))
    with pytest.raises(RunFolderError, match="asked"):
        RunLogger().on_train_begin(args, state, None)
    assert calls[0][1]["resume"] == 2 and calls[0][1]["history"] == state.log_history


def test_a_fresh_plan_serves_one_start(tmp_path):
    args = SimpleNamespace(output_dir=str(tmp_path), to_dict=lambda: {"quantile_k": 0.4})
    state = SimpleNamespace(global_step=0, epoch=0.0, is_world_process_zero=True, log_history=[])
    logger = RunLogger(plan=plan_run(tmp_path))
    logger.on_train_begin(args, state, None)
    assert json.loads((tmp_path / CONFIG_NAME).read_text())["trainer"] == {"quantile_k": 0.4}
    with pytest.raises(RunFolderError, match=r"already holds a run \(config.json\)"):
        logger.on_train_begin(args, state, None)  # trained again from step 0: planned again, and refused


def _stand_in(out: Path, plan: ResumePlan | None, trained: list):
    """What LiveRun uses of a trainer (its controls given), with a RunLogger carrying ``plan``; ``train`` records
    its argument and runs no step."""
    callbacks = [RunLogger(plan=plan)]

    def train(resume_from_checkpoint=None):
        trained.append(resume_from_checkpoint)

    return SimpleNamespace(
        train=train,
        args=SimpleNamespace(max_steps=4, output_dir=str(out)),
        state=SimpleNamespace(global_step=2),
        callback_handler=SimpleNamespace(callbacks=callbacks),
        add_callback=callbacks.append,
        remove_callback=lambda cls: None,
    )


def test_the_live_lab_resumes_the_plans_checkpoint(tmp_path):
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    plan = plan_run(None, resume=out, settings=SETTINGS)
    trained = []
    trainer = _stand_in(out, plan, trained)
    assert pending_plan(trainer) is plan
    live = LiveRun(trainer, controls=Controls(), dashboard=Dashboard(max_steps=4, mode="static"))
    assert live.resume_from_checkpoint == str(out / "checkpoint-2")
    live.start().wait(60)
    assert trained == [str(out / "checkpoint-2")]
    for other in (str(out / "checkpoint-4"), str(out)):
        with pytest.raises(ValueError, match="the trainer was made for the resume of"):
            LiveRun(
                _stand_in(out, plan, []),
                resume_from_checkpoint=other,
                controls=Controls(),
                dashboard=Dashboard(4, mode="static"),
            )
    with pytest.raises(ValueError, match="made for a new run"):
        LiveRun(
            _stand_in(out, ResumePlan(FRESH, out), []),
            resume_from_checkpoint=str(out / "checkpoint-2"),
            controls=Controls(),
            dashboard=Dashboard(4, mode="static"),
        )
    fresh = []
    LiveRun(
        _stand_in(out, ResumePlan(FRESH, out), fresh), controls=Controls(), dashboard=Dashboard(4, mode="static")
    ).start().wait(60)
    assert fresh == [None]
    assert read_log(out)[-1]["step"] == 2  # the stand-ins wrote nothing


# ---------------------------------------------------------------- damaged logs, reserved names


@pytest.mark.parametrize(
    "row, why",
    [
        ({"step": "1", "reward": 0.1}, 'its step is "1" \\(a string\\)'),
        ({"reward": 0.1}, "it has no step"),
        ({"step": "4", "train_runtime": 9.0}, 'its step is "4" \\(a string\\)'),
    ],
)
def test_a_log_row_without_a_whole_step_refuses_the_resume_naming_the_line(tmp_path, row, why):
    # finding 9: `--resume` (and its dry run) crashed with a bare TypeError / KeyError
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    with open(out / LOG_NAME, "a") as f:
        f.write(json.dumps(row) + "\n" + json.dumps({"step": 3, "reward": 0.3}) + "\n")
    before = _snapshot(out)
    p = plan_run(None, resume=out, settings=SETTINGS)
    assert p.kind == REFUSE and re.search(rf"{out / LOG_NAME}: line 3 is damaged \({why}", p.reason), p.reason
    assert "a log row's step is a whole number >= 0" in p.reason
    for read in (resume_mod.finished_step, lambda d: resume_mod.check_resume_point(d, 2)):
        with pytest.raises(RunFolderError, match=rf"line 3 is damaged \({why}"):
            read(out)
    assert _snapshot(out) == before


def test_the_plan_refuses_a_folder_inside_a_runs_own_names_and_lists_all_that_overwrite_deletes(tmp_path):
    # finding 1: `train --output-dir OUTER/.staging` was planned fresh; `--overwrite OUTER` then deleted it unlisted
    out = _run_folder(tmp_path / "run")
    (out / ".qae_lab-run.json").write_text('{"qae_lab_run": 1}\n')
    for inside in (".staging", "model", "checkpoint-3", "finished-step2", "model/x"):
        p = plan_run(out / inside)
        assert p.kind == REFUSE and "is a name the run folder uses for itself" in p.reason, inside
    (out / ".staging" / "checkpoint-3").mkdir(parents=True)  # a save that was killed
    o = plan_run(out, overwrite=True)
    assert o.overwrite == (".staging", "checkpoint-2", "config.json", "log.jsonl")
    assert "deleting the previous run's .staging, checkpoint-2" in o.lines()[0]
    (out / ".staging" / "checkpoint-3" / ".qae_lab-run.json").write_text('{"qae_lab_run": 1}\n')  # a run, nested
    before = _snapshot(out)
    for p in (plan_run(out, overwrite=True), plan_run(None, resume=out, settings=SETTINGS)):
        assert p.kind == REFUSE and f"{out / '.staging'}/ holds a run of its own" in p.reason, p
    assert _snapshot(out) == before


def test_a_link_at_the_superseded_log_refuses_the_resume_and_nothing_is_written_through(tmp_path):
    # the finding: after a kill between checkpoints the resume appended the rows it supersedes to
    # log.superseded.jsonl with a plain open("a"): a link planted there sent them into the file it names
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3), checkpoints=(2,))  # step 3 logged, never saved
    outside = tmp_path / "outside.jsonl"
    outside.write_text("someone's data\n")
    link = out / SUPERSEDED_NAME
    link.symlink_to(outside)
    before = _snapshot(out)
    refused = plan_run(None, resume=out, settings=SETTINGS)  # the plan (and so --dry-run) refuses, naming the link
    assert refused.kind == REFUSE, refused
    assert refused.reason.startswith(f"{link} is a symbolic link (to {outside}), not a regular file: the resume moves")
    assert "nothing was changed" in refused.reason
    # planned before the link was planted: the resume itself refuses it when it comes to write, before anything moves
    link.unlink()
    plan = plan_run(None, resume=out, settings=SETTINGS)
    assert plan.kind == RESUME and plan.superseded_steps == (3,)
    link.symlink_to(outside)
    args = SimpleNamespace(output_dir=str(out), to_dict=lambda: {})
    state = SimpleNamespace(global_step=2, epoch=0.2, is_world_process_zero=True, log_history=[])
    with pytest.raises(RunFolderError, match=rf"{link} is a symbolic link \(to {outside}\).*nothing was written"):
        RunLogger(plan=plan).on_train_begin(args, state, None)
    assert outside.read_text() == "someone's data\n"
    assert _snapshot(out) == before and link.is_symlink()  # the log, config.json and checkpoints as they were
    assert not (out / ".qae_lab-run.lock").exists()  # the refused resume let go of the folder
    # no rows to move there: a link at a name of the run is refused all the same (a later resume would write there)
    plain = _run_folder(tmp_path / "plain", logged=(1, 2), checkpoints=(2,))
    (plain / SUPERSEDED_NAME).symlink_to(outside)
    refused = plan_run(None, resume=plain, settings=SETTINGS)
    assert refused.kind == REFUSE and "a link would send the writes elsewhere" in refused.reason
    # the link moved away: the same resume moves step 3's row aside, into a file of the run's own
    link.unlink()
    logger = RunLogger(plan=plan)
    logger.on_train_begin(args, state, None)
    logger.on_train_end(args, state, None)  # lets go of the folder's lock
    assert [json.loads(line)["step"] for line in (out / SUPERSEDED_NAME).read_text().splitlines()] == [3]
    assert outside.read_text() == "someone's data\n"


@pytest.mark.parametrize("name", ["runs", "completions", "emissions.csv", "runs/Dec06_host"])
def test_a_link_at_a_trackers_name_refuses_the_resume(tmp_path, name):
    # found: a runs/ folder replaced by a link took the resumed run's TensorBoard events elsewhere
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(elsewhere)
    refused = plan_run(None, resume=out, settings=SETTINGS)
    assert refused.kind == REFUSE and f"{out / name} is a symbolic link (to {elsewhere})" in refused.reason
    (out / name).unlink()
    assert plan_run(None, resume=out, settings=SETTINGS).kind == RESUME


def test_overwrite_replaces_a_folder_that_holds_only_a_runs_marker(tmp_path):
    # found: a start that failed after its claim left only the marker, and --overwrite planned nothing to delete and
    # then refused the folder as holding a run
    out = tmp_path / "run"
    claim(plan_run(out)).release()
    assert run_files(out) == [MARKER_NAME]
    plan = plan_run(out, overwrite=True)
    assert plan.kind == FRESH and plan.overwrite == (MARKER_NAME,)
    claim(plan).release()
    assert run_files(out) == [MARKER_NAME]


def test_a_named_pipe_among_the_trackers_files_refuses_the_resume(tmp_path):
    # found: a named pipe at completions/completions_00003.parquet blocked the resumed run forever when TRL wrote it
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    (out / "completions").mkdir()
    os.mkfifo(out / "completions" / "completions_00003.parquet")
    refused = plan_run(None, resume=out, settings=SETTINGS)
    assert refused.kind == REFUSE and "completions_00003.parquet is a named pipe" in refused.reason


# ---------------------------------------------------------------- the plan's messages and edges, in full


@pytest.mark.parametrize(
    "kwargs, said",
    [
        ({"kind": REFUSE}, "^a refused plan says why, "),
        ({"kind": FRESH, "reason": "no"}, "^a refused plan says why, "),
        ({"kind": RESUME, "checkpoint": Path("run/checkpoint-2")}, "^a resume plan names its checkpoint and step, "),
        ({"kind": RESUME, "step": 2}, "^a resume plan names its checkpoint and step, "),
    ],
)
def test_a_plan_that_means_two_things_is_refused_with_why(tmp_path, kwargs, said):
    # a resume plan needs both its checkpoint and its step; a reason belongs to a refused plan only.
    # Planted: the messages as "XX...XX" -> fails; `checkpoint is not None or step is not None` -> fails
    with pytest.raises(ValueError, match=said):
        ResumePlan(folder=tmp_path, **kwargs)


def test_a_resume_plans_line_lists_every_change_and_restored_step(tmp_path):
    # the line a person reads: each change and each restored step, comma-separated.
    # Planted: "XX, XX".join(...) for the changes, or for the restored steps -> fails
    p = ResumePlan(
        RESUME,
        tmp_path,
        checkpoint=tmp_path / "checkpoint-3",
        step=3,
        changes=(("max_steps", 4, 8), ("save_steps", 2, 1)),
        restored_steps=(2, 3),
    )
    assert p.lines() == [
        f"resuming {tmp_path}/checkpoint-3 (step 3); changed: max_steps 4 -> 8, save_steps 2 -> 1; "
        "steps 2, 3 missing from the log are restored from the checkpoint"
    ]


def test_a_loaded_step_of_1_is_the_smallest_and_resume_true_needs_its_folder(tmp_path):
    # resume=N: N >= 1 (1 is allowed, 0 is not); resume=True without a folder says what is missing.
    # found: the check came after Path(None), so its message was never said (a bare Path TypeError instead).
    # Planted: `resume <= 1`, `resume < 2` -> fails; `resume is False and folder is None` -> fails (a bare Path error)
    out = _run_folder(tmp_path / "run", logged=(), checkpoints=())
    p = plan_run(out, resume=1, history=[{"step": 1, "reward": 0.5}], settings=SETTINGS)
    assert (p.kind, p.step, p.restored_steps) == (RESUME, 1, (1,))
    with pytest.raises(ValueError, match=r"^resume=0: "):
        plan_run(out, resume=0)
    with pytest.raises(TypeError, match=r"^resume=True takes the latest checkpoint of the run folder: give the"):
        plan_run(None, resume=True)


def test_a_checkpoint_holding_a_crafted_pickle_is_refused_when_named_and_skipped_in_its_run(tmp_path):
    # each torch file is loaded as the Trainer loads it (weights only) before a resume: a named checkpoint holding
    # anything else is refused, and a run folder's latest one is skipped (its note then keeps check_resume_point
    # from calling it "the run's latest checkpoint").
    # Planted: checkpoint_problems(p, load=False/None/default) -> fails; latest_complete_checkpoint(p, load=False/
    # None/default) -> fails; check_resume_point(..) without skipped, or split on "XX skipped: XX"/" SKIPPED: ", or
    # taking [1] -> fails
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3, 4), checkpoints=(2, 4))
    torch.save({"state": SimpleNamespace(lr=0.1)}, out / "checkpoint-4" / "optimizer.pt")  # a pickle, not tensors
    named = plan_run(None, resume=out / "checkpoint-4", settings=SETTINGS)
    assert named.kind == REFUSE
    assert named.reason.startswith(
        f"{out}/checkpoint-4: the checkpoint cannot be resumed: optimizer.pt holds more than tensors"
    ), named.reason
    p = plan_run(None, resume=out, settings=SETTINGS)
    assert (p.kind, p.step, p.superseded_steps) == (RESUME, 2, (3, 4)), p
    assert len(p.notes) == 1 and p.notes[0].startswith("checkpoint-4 skipped: optimizer.pt holds more than tensors")


def test_a_checkpoint_is_known_by_its_state_or_by_its_name(tmp_path):
    # a folder holding trainer_state.json is a checkpoint whatever its name; a checkpoint-N folder is one even
    # without its state (then named as incomplete, every problem joined by "; "); a state without log_history is
    # whole (the checkpoint restores no rows).
    # Planted: `exists() and CHECKPOINT_NAME.match(...)` -> fails; "XXtrainer_state.jsonXX" / "TRAINER_STATE.JSON"
    # -> fails; 'XX; XX'.join(problems) -> fails; state.get("log_history", None) or no default -> fails (TypeError)
    out = _run_folder(tmp_path / "run", logged=(1,), checkpoints=(2,))
    (out / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')  # no log_history
    os.rename(out / "checkpoint-2", out / "best")
    p = plan_run(None, resume=out / "best", settings=SETTINGS)
    assert (p.kind, p.checkpoint, p.step, p.restored_steps) == (RESUME, out / "best", 2, ()), p
    ckpt = _checkpoint(tmp_path / "other", 2)
    (ckpt / "trainer_state.json").unlink()
    assert (
        plan_run(None, resume=ckpt).reason == f"{ckpt}: the checkpoint cannot be resumed: trainer_state.json is missing"
    )
    ckpt = _checkpoint(tmp_path / "third", 2)
    (ckpt / "optimizer.pt").unlink()
    (ckpt / "scheduler.pt").unlink()
    assert plan_run(None, resume=ckpt).reason == (
        f"{ckpt}: the checkpoint cannot be resumed: optimizer.pt is missing (Adam's moments); "
        "scheduler.pt is missing (the learning-rate schedule's position)"
    )


def test_no_complete_checkpoint_reads_in_full_with_each_skipped_one(tmp_path):
    # the reason ends with the skipped checkpoints in brackets, latest first, joined by "; " -- and with nothing
    # when none was skipped.
    # Planted: `if notes or True` -> fails; else "XXXX" -> fails; 'XX; XX'.join(notes) -> fails
    out = _run_folder(tmp_path / "run", logged=(1,), checkpoints=())
    assert plan_run(None, resume=out).reason == f"{out}/: no complete checkpoint in this run folder"
    _checkpoint(out, 2)
    _checkpoint(out, 4)
    (out / "checkpoint-4" / "optimizer.pt").unlink()
    (out / "checkpoint-2" / "scheduler.pt").unlink()
    assert plan_run(None, resume=out).reason == (
        f"{out}/: no complete checkpoint in this run folder (checkpoint-4 skipped: optimizer.pt is missing (Adam's "
        "moments); checkpoint-2 skipped: scheduler.pt is missing (the learning-rate schedule's position))"
    )


def test_a_refused_resume_says_first_which_later_checkpoint_was_skipped(tmp_path):
    # the run finished at step 4 but checkpoint-4 is damaged: the refusal says so, then ". ", then why.
    # Planted: "XX. XX".join([*notes, str(err)]) -> fails
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3, 4), checkpoints=(2, 4), finished=4)
    rng = out / "checkpoint-4" / "rng_state.pth"
    rng.write_bytes(rng.read_bytes()[:100])
    reason = plan_run(None, resume=out, settings=SETTINGS).reason
    assert reason.startswith(
        "checkpoint-4 skipped: rng_state.pth is damaged or cut short (BadZipFile: File is not a zip file; 100 bytes). "
        f"the run in {out}/ finished at step 4, after checkpoint-2: "
    ), reason


@pytest.mark.parametrize("what", ["rows", "cut line"])
def test_a_link_at_the_superseded_log_is_refused_saying_what_would_move_there(tmp_path, what):
    # the refusal says what the resume would move: the rows after the checkpoint's step, or the log's cut last line.
    # Planted: moved = None -> fails; `if later and False` -> fails (rows); `if later or True` -> fails (cut line);
    # "XXthe log's cut last lineXX" / upper case -> fails (cut line)
    out = _run_folder(tmp_path / "run", logged=(1, 2, 3) if what == "rows" else (1, 2), checkpoints=(2,))
    if what == "cut line":
        with open(out / LOG_NAME, "a") as f:
            f.write('{"step": 3, "rew')
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    (out / SUPERSEDED_NAME).symlink_to(outside)
    moved = "the log's rows after step 2" if what == "rows" else "the log's cut last line"
    reason = plan_run(None, resume=out, settings=SETTINGS).reason
    assert reason.startswith(
        f"{out / SUPERSEDED_NAME} is a symbolic link (to {outside}), not a regular file: the resume moves {moved} "
        "there, and "
    ), reason


def test_a_run_without_config_or_settings_is_resumed(tmp_path):
    # nothing to compare and nothing given: the resume goes on (trains on: no max_steps known).
    # Planted: `(wanted or stored and {})` -> fails (AttributeError on None)
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    (out / CONFIG_NAME).unlink()
    p = plan_run(None, resume=out)
    assert (p.kind, p.step, p.trains_on, p.changes) == (RESUME, 2, True, ())


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"trainer": {}, "run": 3}', "is damaged (its 'run' is not a mapping of settings)"),
        ('{"trainer": [], "run": {}}', "is damaged (its 'trainer' is not a mapping of settings)"),
        ("[1, 2]", "is damaged (a JSON dict is needed, it holds a list)"),
    ],
)
def test_a_damaged_run_config_is_named_as_the_run_config(tmp_path, text, said):
    # the refusal names the file as the run's config and says which section is not a mapping.
    # Planted: read_json(config, "XXrun configXX") -> fails; ("trainer", "XXrunXX") / ("trainer", "RUN") -> fails
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    (out / CONFIG_NAME).write_text(text)
    assert plan_run(None, resume=out, settings=SETTINGS).reason == f"run config {out / CONFIG_NAME} {said}"


def test_a_link_among_the_runs_files_is_named_even_beside_a_trackers_folder(tmp_path):
    # a link at a run's name (here eval_before.json) is refused also when a tracker's folder (runs/) is there.
    # Planted: `found = [...]` for the trackers' links (instead of +=) -> fails
    out = _run_folder(tmp_path / "run", logged=(1, 2), checkpoints=(2,))
    (out / "runs").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (out / "eval_before.json").symlink_to(outside)
    reason = plan_run(None, resume=out, settings=SETTINGS).reason
    assert reason.startswith(f"{out / 'eval_before.json'} is a symbolic link (to {outside}): a resume writes"), reason


def test_a_refused_plan_names_the_folder_it_refuses(tmp_path):
    # Planted: ResumePlan(REFUSE, None, ...) -> fails
    out = _run_folder(tmp_path / "run")
    assert (plan_run(out).kind, plan_run(out).folder) == (REFUSE, out)
    assert plan_run(None, resume=tmp_path / "nowhere").folder == tmp_path / "nowhere"


def test_publish_dir_keeps_the_folder_it_replaces_under_a_dated_name(tmp_path):
    # `.replaced-<name>-<YYYYmmdd-HHMMSS>-<pid>`: sortable by time, nothing deleted.
    # Planted: strftime("XX%Y%m%d-%H%M%SXX") or ("%y%m%d-%h%m%s") -> fails
    final = tmp_path / "checkpoint-2"
    final.mkdir()
    (final / "old.txt").write_text("old")
    staged = tmp_path / ".staging" / "checkpoint-2"
    staged.mkdir(parents=True)
    (staged / "new.txt").write_text("new")
    assert resume_mod.publish_dir(staged, final) == final and (final / "new.txt").read_text() == "new"
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith(".replaced-")]
    assert re.fullmatch(rf"\.replaced-checkpoint-2-20\d\d[01]\d[0-3]\d-[0-2]\d[0-5]\d[0-6]\d-{os.getpid()}", kept.name)
    assert (kept / "old.txt").read_text() == "old"


def test_resume_changes_edges(tmp_path):
    # max_steps must exceed the checkpoint's step (equal is refused); a number changed to another type (None, a
    # string) is a change; the refusal lists the settings that may change, comma-separated.
    # Planted: `not new > checkpoint_step` as `>=` -> fails; `isinstance(old, num) or isinstance(new, num) ...` ->
    # fails (float(None) / "42" == 42); 'XX, XX'.join(SAFE_ON_RESUME) -> fails
    changes = resume_mod.resume_changes
    stored = {"trainer": {"max_steps": 8, "seed": 42}, "run": {}}
    with pytest.raises(RunFolderError, match=r"^max_steps must exceed the checkpoint's step 4 to train on, got 4$"):
        changes(stored, {"max_steps": 4}, {}, checkpoint_step=4)
    assert changes(stored, {"max_steps": 5}, {}, checkpoint_step=4) == {"max_steps": [8, 5]}
    for new, said in ((None, "seed 42 -> None"), ("42", "seed 42 -> '42'")):
        with pytest.raises(
            RunFolderError, match=rf"^resuming with other settings than the run was trained with: {said}\."
        ):
            changes(stored, {"seed": new}, {}, checkpoint_step=4)
    with pytest.raises(RunFolderError, match=r"only max_steps, save_strategy, save_steps, save_total_limit, torch_thr"):
        changes(stored, {"seed": 1}, {}, checkpoint_step=4)
    # 42 and 42.0 are one value (a JSON file may hold either); two seeds past 2**53 that floats cannot tell apart are
    # two. Found: they were compared as floats, so seed 2**53 + 1 -> 2**53 resumed as the same run. Planted: the
    # comparison as float(old) != float(new) -> the second does not raise
    assert changes(stored, {"seed": 42.0}, {}, checkpoint_step=4) == {}
    with pytest.raises(RunFolderError, match=r"seed 9007199254740993 -> 9007199254740992\."):
        changes({"trainer": {"seed": 2**53 + 1}}, {"seed": 2**53}, {}, checkpoint_step=4)


def test_resume_log_restores_only_steps_up_to_the_checkpoint_in_step_order():
    # a missing step is restored in its place (the log sorted by step), and history past the checkpoint's step is
    # not restored.
    # Planted: sort key r.get(None, 0) / r.get("XXstepXX", 0) / r.get("STEP", 0) -> fails (unsorted);
    # h.get(None, 0) / h.get("XXstepXX", 0) / h.get("STEP", 0) <= step -> fails (step 4 restored)
    rows = [{"step": 1, "reward": 0.1}, {"step": 3, "reward": 0.3}]
    history = [{"step": s, "reward": s / 10} for s in (1, 2, 3, 4)]
    kept, later, restored = resume_mod.resume_log(rows, 3, history)
    assert [(r["step"], r.get("restored_from")) for r in kept] == [
        (1, None),
        (2, "checkpoint-3/trainer_state.json"),
        (3, None),
    ]
    assert (later, restored) == ([], [2])
