"""Tests for qae_lab.train.staged: a save over a damaged ``checkpoint-N`` publishes a complete one and sets the
damaged one aside (``.replaced-checkpoint-N-<time>-<pid>``, :func:`qae_lab.storage.resume.publish_dir`), nothing
deleted. A real QAETrainer run of the embedded model on the CPU (tests/testkit/tiny_runs.py), one step."""

from __future__ import annotations

import json

import pytest
from testkit.tiny_runs import tiny_trainer

from qae_lab.storage.folder import STAGING_DIR
from qae_lab.storage.resume import checkpoint_problems


@pytest.mark.slow(seconds=20)
def test_training_again_through_a_damaged_checkpoint_saves_a_complete_one_and_sets_the_damaged_one_aside(tmp_path):
    # Planted bugs, in StagedCheckpoints._save_checkpoint: `if final.is_dir(): return` (the save skipped when the
    # folder exists) -> checkpoint-2 keeps its problems and the first assert after the resume fails; in publish_dir,
    # `shutil.rmtree(final)` instead of the rename aside -> no .replaced-checkpoint-2-* and the `len(aside) == 1`
    # assert fails
    out = tmp_path / "run"
    settings = {"max_completion_length": 8, "save_strategy": "steps", "save_steps": 1}
    tiny_trainer(out, max_steps=1, **settings).train()
    assert checkpoint_problems(out / "checkpoint-1", load=True) == []
    damaged = out / "checkpoint-2"  # what a save interrupted in place leaves: a state and a cut optimizer
    damaged.mkdir()
    left = {"trainer_state.json": b'{"global_step": 2, "log_history": []}', "optimizer.pt": b"PK\x03\x04"}
    for name, data in left.items():
        (damaged / name).write_bytes(data)
    assert checkpoint_problems(damaged)

    resumed = tiny_trainer(out, max_steps=2, **settings)
    resumed.train(resume_from_checkpoint=True)  # the latest complete checkpoint, checkpoint-1: step 2 trained again

    assert resumed.state.global_step == 2
    assert checkpoint_problems(out / "checkpoint-2", load=True) == []
    assert json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2
    aside = [p for p in out.iterdir() if p.name.startswith(".replaced-checkpoint-2-")]
    assert len(aside) == 1, sorted(p.name for p in out.iterdir())
    assert {p.name: p.read_bytes() for p in aside[0].iterdir()} == left  # moved aside whole, nothing deleted
    assert not (out / STAGING_DIR).exists()
