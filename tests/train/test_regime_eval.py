"""qae_lab.train.regime_eval: the held-out set grouped by start difficulty, measured every few steps, on real QAETrainer runs
of the embedded model (2 prompts x 4 completions per step, 8 held-out problems); nothing is downloaded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testkit.interrupts import InterruptAt
from testkit.tiny_runs import tiny_trainer

from qae_lab.train import regime_eval
from qae_lab.train.callbacks import run_logger, train_resumable
from qae_lab.train.config import QAEConfig
from qae_lab.task.data import synthetic_task
from qae_lab.metric_names import REGIME_EVAL_METRICS
from qae_lab.runs.presets import build
from qae_lab.train.regime_eval import REGIME_FRAC, SPLIT_DRAWS, RegimeEval, RegimeSplit, add_regime_eval
from qae_lab.regimes import start_split
from qae_lab.storage.folder import REGIME_SPLIT_NAME, RunFolderError, read_log, step_rows
from qae_lab.train.trainer import QAETrainer

HELD_OUT = synthetic_task(8, levels=(2, 3, 4, 5), seed=11)
REGIMES = {"regime_eval_steps": 2, "regime_eval_samples": 4, "regime_eval_prompts": 8}


def _trainer(out: Path, callbacks=(), regimes: bool = True, resume: bool = False, **settings) -> QAETrainer:
    trainer = tiny_trainer(out, callbacks, **(REGIMES if regimes else {}), **settings)
    add_regime_eval(trainer, HELD_OUT, resume=resume)
    return trainer


def _regime_rows(out: Path) -> dict[int, dict]:
    return {
        r["step"]: {k: r[k] for k in REGIME_EVAL_METRICS}
        for r in step_rows(read_log(out))
        if REGIME_EVAL_METRICS[0] in r
    }


@pytest.mark.slow(seconds=90)
def test_the_split_and_the_start_are_the_same_for_every_method_and_training_is_unchanged(tmp_path):
    qae = _trainer(tmp_path / "qae")
    train_resumable(qae)
    mean = _trainer(tmp_path / "mean", baseline="mean")
    train_resumable(mean)
    plain = _trainer(tmp_path / "plain", regimes=False)
    train_resumable(plain)
    # measured before step 1, every 2 steps after it (step 3) and before the last step (4), in those steps' rows
    got = _regime_rows(tmp_path / "qae")
    assert sorted(got) == [1, 3, 4] and all(set(row) == set(REGIME_EVAL_METRICS) for row in got.values())
    assert all(
        0.0 <= row["regime_eval/success_all"] <= 1.0 and row["regime_eval/entropy_all"] > 0 for row in got.values()
    )
    # the split: the start model's, written to the run folder, the same file for both methods (same seed)
    split_text = (tmp_path / "qae" / REGIME_SPLIT_NAME).read_text()
    assert split_text == (tmp_path / "mean" / REGIME_SPLIT_NAME).read_text()
    split = RegimeSplit.from_json(split_text)
    assert split == qae.callback_handler.callbacks[-1].split
    assert split.samples == SPLIT_DRAWS * 4 and len(split.prompts) == 8 and len(split.hard) == len(split.easy) == 2
    assert (list(split.hard), list(split.easy)) == start_split(split.start_success, REGIME_FRAC)
    # the start values (before any update) are the same draws of the same model: equal to the last bit
    assert _regime_rows(tmp_path / "mean")[1] == got[1]
    # sampling for the measurement leaves the training's random state and the model alone: the same steps as a run
    # without it, to the last bit
    keys = ("reward", "loss", "entropy", "qae/zero_adv_frac")
    assert [{k: r.get(k) for k in keys} for r in step_rows(read_log(tmp_path / "qae"))] == [
        {k: r.get(k) for k in keys} for r in step_rows(read_log(tmp_path / "plain"))
    ]
    assert not (tmp_path / "plain" / REGIME_SPLIT_NAME).exists()


@pytest.mark.slow(seconds=90)
def test_a_resume_reads_the_split_back_and_measures_as_an_uninterrupted_run(tmp_path, monkeypatch):
    train_resumable(_trainer(tmp_path / "whole"))
    outcome = train_resumable(_trainer(tmp_path / "cut", [InterruptAt(2)]))
    late = train_resumable(_trainer(tmp_path / "late", [InterruptAt(2)]))
    assert outcome.interrupted and sorted(_regime_rows(tmp_path / "cut")) == [1]
    split_path, log_path = tmp_path / "cut" / REGIME_SPLIT_NAME, tmp_path / "cut" / "log.jsonl"
    written, log = split_path.read_text(), log_path.read_bytes()

    # a split for other held-out problems, or none, is refused as the resumed trainer is made: nothing changed
    data = json.loads(written)
    split_path.write_text(json.dumps({**data, "prompts": ["x"] * len(data["prompts"])}))
    with pytest.raises(RunFolderError, match="was made for other prompts"):
        _trainer(tmp_path / "cut", resume=True)
    split_path.unlink()
    with pytest.raises(RunFolderError, match="regime split .* is missing"):
        _trainer(tmp_path / "cut", resume=True)
    assert log_path.read_bytes() == log
    split_path.write_text(written)

    def no_split(*args, **kwargs):
        raise AssertionError("a resume must read the split back, not remake it from the loaded model")

    monkeypatch.setattr(regime_eval, "regime_split", no_split)
    resumed = _trainer(tmp_path / "cut", resume=True)
    train_resumable(resumed, resume_from_checkpoint=outcome.checkpoint)
    assert split_path.read_text() == written
    # the same weights and seeds: the same measurements as the uninterrupted run, to the last bit
    assert _regime_rows(tmp_path / "cut") == _regime_rows(tmp_path / "whole")
    # a resumed trainer made without saying so reads the split back when training begins past step 0
    again = _trainer(tmp_path / "late")
    train_resumable(again, resume_from_checkpoint=late.checkpoint)
    assert again.callback_handler.callbacks[-1].split == RegimeSplit.from_json(written)


def test_the_command_line_run_adds_the_regime_evaluation_on_its_held_out_problems(tmp_path):
    from qae_lab.runs.pipeline import make_trainer

    run, cfg = build("cpu-sums", ["regime_eval_steps=10", "n_train=8"], output_dir=str(tmp_path / "run"))
    trainer, _, eval_recs = make_trainer(run, cfg, preset="cpu-sums")
    run_logger(trainer).release_lock(force=True)  # nothing trains here
    callbacks = trainer.callback_handler.callbacks
    [callback] = [cb for cb in callbacks if isinstance(cb, RegimeEval)]
    # after the run's logger, which checks the folder's plan before the split is written there
    assert callbacks.index(callback) > callbacks.index(run_logger(trainer))
    # cpu-sums holds 64 held-out problems; the default regime_eval_prompts takes all 64
    assert callback.records == eval_recs and len(eval_recs) == 64
    assert (cfg.regime_eval_steps, cfg.regime_eval_samples) == (10, 8)
    run, cfg = build("cpu-sums", ["n_train=8"], output_dir=str(tmp_path / "off"))
    trainer, _, _ = make_trainer(run, cfg, preset="cpu-sums")
    run_logger(trainer).release_lock(force=True)
    assert not any(isinstance(cb, RegimeEval) for cb in trainer.callback_handler.callbacks)


def test_regime_eval_needs_the_setting_and_two_problems(tmp_path):
    trainer = _trainer(tmp_path / "x", regimes=False)
    with pytest.raises(ValueError, match="regime_eval_steps"):
        RegimeEval(trainer, HELD_OUT)
    trainer.args.regime_eval_steps = 2
    with pytest.raises(ValueError, match="at least 2 held-out problems"):
        RegimeEval(trainer, HELD_OUT[:1])


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("regime_eval_steps", 0, "a number in [1, inf) or None"),
        ("regime_eval_steps", 2.5, "a whole number"),
        ("regime_eval_steps", -3, "a number in [1, inf) or None"),
        ("regime_eval_samples", 0, "a number in [1, inf)"),
        ("regime_eval_prompts", 1, "a number in [2, inf)"),
        ("regime_eval_prompts", True, "a whole number"),
    ],
)
def test_regime_settings_are_checked_with_their_names_and_ranges(tmp_path, field, value, allowed):
    with pytest.raises(ValueError, match=rf"{field} must be {re.escape(allowed)}"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **{field: value})
    cfg = QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    assert (cfg.regime_eval_steps, cfg.regime_eval_samples, cfg.regime_eval_prompts) == (None, 8, 64)
    with pytest.raises(ValueError, match="regime_eval_steps must be"):
        build("cpu-sums", ["regime_eval_steps=0"], output_dir=str(tmp_path / "cli"))
