"""Tests for qae_lab.train.callbacks (and the runfolder writers they call): the config and log files, the tolerant reader, the report, and
interruption: a KeyboardInterrupt raised from a callback leaves a complete log and a checkpoint
that ``trainer.train(resume_from_checkpoint=...)`` continues to the same weights as an
uninterrupted run. Training runs are real QAETrainer runs of the embedded model on the CPU
(2 prompts x 4 completions per step); nothing is downloaded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from testkit.interrupts import InterruptAt
from testkit.tiny_runs import tiny_trainer
from safetensors.torch import load_file

from qae_lab.storage import folder
from qae_lab.train.callbacks import CompactProgress, RunLogger, train_resumable
from qae_lab.storage.folder import (
    CONFIG_NAME,
    LOG_NAME,
    SUPERSEDED_NAME,
    RunFolderError,
    read_log,
    step_rows,
    write_config,
)
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer

# ---------------------------------------------------------------- files, without training


def _args(out: Path) -> QAEConfig:
    return QAEConfig(output_dir=str(out), use_cpu=True, bf16=False, report_to=[], quantile_k=0.6)


def _state(step: int = 0):
    return SimpleNamespace(global_step=step, epoch=step / 10, is_world_process_zero=True, log_history=[])


def test_write_config_has_the_trainer_config_versions_and_preset(tmp_path):
    path = write_config(tmp_path, _args(tmp_path), preset="cpu-demo", run={"model": "embedded", "levels": (2, 3)})
    data = json.loads(path.read_text())
    assert data["preset"] == "cpu-demo" and data["run"] == {"model": "embedded", "levels": [2, 3]}
    assert data["trainer"]["quantile_k"] == 0.6 and data["trainer"]["baseline"] == "quantile"
    assert set(data["versions"]) >= {"qae_lab", "trl", "transformers", "torch"}
    assert data["versions"]["torch"] == torch.__version__


def test_logger_writes_one_fsynced_line_per_log_call(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(folder.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    args, cb = _args(tmp_path), RunLogger(preset="p", run={"a": 1})
    cb.on_train_begin(args, _state(), None)
    assert json.loads((tmp_path / CONFIG_NAME).read_text())["run"] == {"a": 1}
    synced.clear()  # config.json's own fsyncs (file and folder: it is written atomically)
    for step in (1, 2):
        cb.on_log(
            args, _state(step), None, logs={"reward": 0.25 * step, "qae/k": 0.6, "entropy": None, "bad": float("nan")}
        )
    assert len(synced) == 2  # every line reached the disk before on_log returned
    rows = read_log(tmp_path)
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["reward"] == 0.5 and rows[0]["qae/k"] == 0.6
    assert rows[0]["entropy"] is None and rows[0]["bad"] is None  # NaN written as null: strict JSON
    assert {"epoch", "time", "elapsed_s"} <= set(rows[0])


def test_read_log_drops_only_a_truncated_last_line(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}\n{"step": 3, "rew')
    assert [r["step"] for r in read_log(log)] == [1, 2]
    assert read_log(tmp_path) == read_log(log)  # a run folder works too
    with pytest.raises(ValueError, match="line 3"):
        read_log(log, strict=True)
    log.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')  # corruption in the middle is an error
    with pytest.raises(ValueError, match="line 2"):
        read_log(log)


def test_resumed_logger_moves_lines_after_the_checkpoint_aside_and_a_fresh_run_refuses_the_folder(tmp_path):
    (tmp_path / LOG_NAME).write_text("".join(json.dumps({"step": s, "reward": 0.0}) + "\n" for s in (1, 2, 3)))
    logger = RunLogger()
    logger.on_train_begin(_args(tmp_path), _state(2), None)  # resumed from checkpoint-2
    rows = read_log(tmp_path)
    assert [r["step"] for r in step_rows(rows)] == [1, 2]
    assert rows[-1] == logger.resume_event and logger.resume_event["superseded_steps"] == [3]
    assert [r["step"] for r in read_log(tmp_path / SUPERSEDED_NAME)] == [3]  # kept, not deleted
    with pytest.raises(RunFolderError, match="is being written by process .*, this very process"):
        RunLogger().on_train_begin(_args(tmp_path), _state(0), None)  # while the first one trains
    logger.on_train_end(_args(tmp_path), _state(2), None)
    with pytest.raises(RunFolderError, match="already holds a run"):
        RunLogger().on_train_begin(_args(tmp_path), _state(0), None)  # a fresh run in the same folder
    assert [r["step"] for r in step_rows(read_log(tmp_path))] == [1, 2]


def test_compact_progress_shows_metrics_instead_of_printing_the_log(capsys):
    class Bar:
        postfix = None

        def set_postfix(self, shown, refresh=False):
            self.postfix = shown

        def write(self, text):
            raise AssertionError("the log dict must not be printed")

    cb = CompactProgress()
    cb.training_bar = Bar()
    cb.on_log(None, _state(3), None, logs={"reward": 0.625, "qae/zero_adv_frac": 0.75, "entropy": None, "loss": 1.0})
    assert cb.training_bar.postfix == {"reward": "0.625", "zero_adv": "0.75"}
    assert capsys.readouterr().out == ""


def test_step_rows_skip_the_summary_line():
    rows = [{"step": 1, "reward": 0.5}, {"step": 1, "train_runtime": 2.0}, {"step": 2, "reward": None}]
    assert step_rows(rows) == [{"step": 1, "reward": 0.5}]


# ---------------------------------------------------------------- interruption and resume


def _trainer(out: Path, callbacks=(), **settings) -> QAETrainer:
    return tiny_trainer(out, callbacks, **settings)


@pytest.mark.slow
def test_interrupt_leaves_log_and_checkpoint_and_resume_matches_an_uninterrupted_run(tmp_path):
    outcome = train_resumable(_trainer(tmp_path / "cut", [InterruptAt(2)]))
    ckpt = Path(outcome.checkpoint)
    assert outcome.interrupted and outcome.global_step == 2 and ckpt == tmp_path / "cut" / "checkpoint-2"
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == 2
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"} <= {p.name for p in ckpt.iterdir()}
    rows = read_log(tmp_path / "cut")
    assert [r["step"] for r in rows] == [1, 2]  # every finished step, nothing after
    assert all(r["qae/k"] == 0.4 and 0.0 <= r["reward"] <= 1.0 for r in rows)

    resumed = _trainer(tmp_path / "cut")
    assert not train_resumable(resumed, resume_from_checkpoint=str(ckpt)).interrupted
    assert resumed.state.global_step == 4
    assert [r["step"] for r in step_rows(read_log(tmp_path / "cut"))] == [1, 2, 3, 4]

    whole = _trainer(tmp_path / "whole")
    train_resumable(whole)
    cut_rows, whole_rows = step_rows(read_log(tmp_path / "cut")), step_rows(read_log(tmp_path / "whole"))
    assert [r["reward"] for r in cut_rows] == [r["reward"] for r in whole_rows]
    resumed.save_model(str(tmp_path / "cut_model"))
    whole.save_model(str(tmp_path / "whole_model"))
    a = load_file(tmp_path / "cut_model" / "model.safetensors")
    b = load_file(tmp_path / "whole_model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same weights: nothing lost, nothing repeated


@pytest.mark.slow
def test_checkpoints_are_staged_renamed_rotated_and_checked_before_a_resume(tmp_path, monkeypatch):
    out = tmp_path / "run"
    seen = []
    real = QAETrainer._save_rng_state

    def watch(self, output_dir):  # where the Trainer writes while a checkpoint is being saved
        seen.append(Path(output_dir).relative_to(out).as_posix())
        return real(self, output_dir)

    monkeypatch.setattr(QAETrainer, "_save_rng_state", watch)
    trainer = _trainer(out, [InterruptAt(4)], max_steps=6, save_strategy="steps", save_steps=1, save_total_limit=2)
    outcome = train_resumable(trainer)  # Ctrl-C as step 5 begins: checkpoint-4 is already saved and complete
    assert outcome.interrupted and outcome.checkpoint == str(out / "checkpoint-4")
    assert seen == [f".staging/checkpoint-{s}" for s in (1, 2, 3, 4)]  # never into checkpoint-N itself
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(("checkpoint-", ".staging"))) == [
        "checkpoint-3",
        "checkpoint-4",
    ]  # renamed into place, rotated by save_total_limit, no staging left
    monkeypatch.undo()

    rng = out / "checkpoint-4" / "rng_state.pth"
    rng.write_bytes(rng.read_bytes()[:100])  # as a crash mid-write would leave it, were it not staged
    with pytest.raises(RunFolderError, match=r"checkpoint-4: rng_state.pth is damaged or cut short"):
        _trainer(out, max_steps=6, save_strategy="steps", save_steps=1, save_total_limit=2).train(
            resume_from_checkpoint=str(out / "checkpoint-4")
        )
    resumed = _trainer(out, max_steps=6, save_strategy="steps", save_steps=1, save_total_limit=2)
    resumed.train(resume_from_checkpoint=True)  # True: the latest *complete* checkpoint, checkpoint-3
    assert resumed.state.global_step == 6
    rows = read_log(out)
    event = next(r for r in rows if r.get("event") == "resume")
    assert event["step"] == 3 and event["superseded_steps"] == [4] and event["changed"] == {}
    assert [r["step"] for r in step_rows(rows)] == [1, 2, 3, 4, 5, 6]


def test_a_resume_sets_aside_the_completion_tables_of_the_steps_it_trains_again(tmp_path):
    # found: TRL's completions_<step>.parquet of the steps after the checkpoint were written over by the resumed steps
    from qae_lab.train.callbacks import _set_aside_completions

    folder = tmp_path / "completions"
    folder.mkdir()
    for step in (1, 2, 3, 4):
        (folder / f"completions_{step:05d}.parquet").write_bytes(b"step %d" % step)
    (folder / "completions_00004.superseded.parquet").write_bytes(b"an earlier resume's")
    assert _set_aside_completions(tmp_path, 2) == {
        "completions_set_aside": ["completions_00003.superseded.parquet", "completions_00004.superseded-2.parquet"]
    }
    assert sorted(p.name for p in folder.iterdir()) == [
        "completions_00001.parquet",
        "completions_00002.parquet",
        "completions_00003.superseded.parquet",
        "completions_00004.superseded-2.parquet",
        "completions_00004.superseded.parquet",
    ]
    assert (folder / "completions_00004.superseded-2.parquet").read_bytes() == b"step 4"
    assert _set_aside_completions(tmp_path / "nowhere", 2) == {}
