"""Tests for qae_lab.storage.resume: each cut file of a checkpoint named, the latest complete one, staged
publishing, and the rules of a resume. Pure file tests (no training): each damaged file is made the
way a crash makes it (cut short), from real torch / safetensors output."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from qae_lab.storage.resume import (
    SAFE_ON_RESUME,
    check_resume_point,
    checkpoint_problems,
    latest_complete_checkpoint,
    publish_dir,
    resume_changes,
    resume_log,
)
from qae_lab.storage.folder import LOG_NAME, RunFolderError


def _checkpoint(folder: Path, step: int) -> Path:
    """A small but real Trainer-like checkpoint: state, safetensors weights, torch-saved optimizer and RNG state."""
    ckpt = folder / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    save_file({"w": torch.arange(64.0)}, str(ckpt / "model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(300)}}}, ckpt / "optimizer.pt")
    torch.save({"last_epoch": step, "_last_lr": [1e-4]}, ckpt / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state()}, ckpt / "rng_state.pth")
    (ckpt / "config.json").write_text("{}")
    return ckpt


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# ---------------------------------------------------------------- checkpoints


def test_a_complete_checkpoint_has_no_problems(tmp_path):
    assert checkpoint_problems(_checkpoint(tmp_path, 4)) == []


@pytest.mark.parametrize(
    "name, message",
    [
        ("trainer_state.json", r"trainer_state.json is damaged \(not JSON"),
        ("rng_state.pth", r"rng_state.pth is damaged or cut short"),
        ("optimizer.pt", r"optimizer.pt is damaged or cut short"),
        ("model.safetensors", r"model.safetensors is (cut short|damaged)"),
        ("config.json", r"config.json is damaged"),
    ],
)
def test_every_cut_file_of_a_checkpoint_is_named(tmp_path, name, message):
    ckpt = _checkpoint(tmp_path, 4)
    _cut(ckpt / name, 0.6 if name != "config.json" else 0.5)
    problems = checkpoint_problems(ckpt)
    assert len(problems) == 1 and re.search(message, problems[0]), problems


def test_missing_pieces_are_named(tmp_path):
    ckpt = _checkpoint(tmp_path, 4)
    (ckpt / "trainer_state.json").unlink()
    (ckpt / "model.safetensors").unlink()
    assert checkpoint_problems(ckpt) == [
        "trainer_state.json is missing",
        "no model weights (model.safetensors, adapter_model.safetensors or a sharded model.safetensors.index.json)",
    ]
    (ckpt / "optimizer.pt").write_bytes(b"")  # a save killed right after creating the file
    assert any("optimizer.pt is damaged" in p for p in checkpoint_problems(ckpt))


def test_a_checkpoint_without_what_a_resume_loads_is_incomplete(tmp_path):
    # without optimizer.pt, scheduler.pt and rng_state.pth a resume trained on with a fresh
    # optimizer and schedule (lr 1e-4 where it had reached 0), and said nothing
    ckpt = _checkpoint(tmp_path, 4)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (ckpt / name).unlink()
    assert checkpoint_problems(ckpt) == [
        "optimizer.pt is missing (Adam's moments)",
        "scheduler.pt is missing (the learning-rate schedule's position)",
        "no RNG state (rng_state.pth): the resumed run would draw other samples than an uninterrupted one",
    ]
    torch.save({"cpu": torch.get_rng_state()}, ckpt / "rng_state_0.pth")  # one per process counts too
    assert not any("RNG" in p for p in checkpoint_problems(ckpt))
    # pickled weights only: refused (qae_lab loads safetensors only), as export refuses them
    only_bin = _checkpoint(tmp_path / "bin", 2)
    (only_bin / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, only_bin / "pytorch_model.bin")
    assert checkpoint_problems(only_bin) == [
        "no model weights (model.safetensors, adapter_model.safetensors or a "
        "sharded model.safetensors.index.json); pytorch_model.bin holds pickled "
        "weights, which qae_lab never loads"
    ]


@pytest.mark.parametrize("other", ["optimizer.pth", "rng_states.pth", "old_rng_state.pth", "extra_state.pth"])
def test_another_pth_file_is_no_rng_state(tmp_path, other):
    # Planted bug: `if resume and not any(n.endswith(".pth") for n in modes)` in checkpoint_problems (any .pth
    # counted as RNG state) -> the list is [] and this assert fails
    ckpt = _checkpoint(tmp_path / "run", 4)
    (ckpt / "rng_state.pth").unlink()
    torch.save({"cpu": torch.get_rng_state()}, ckpt / other)  # whole and loadable: only its name is wrong
    no_rng = "no RNG state (rng_state.pth): the resumed run would draw other samples than an uninterrupted one"
    assert checkpoint_problems(ckpt) == checkpoint_problems(ckpt, load=True) == [no_rng]
    assert latest_complete_checkpoint(tmp_path / "run") == (None, [f"checkpoint-4 skipped: {no_rng}"])


class _Gadget:
    """What a crafted pickle carries: an object that is no tensor (its reduce could run any code)."""

    def __reduce__(self):
        return (print, ("a crafted pickle ran",))


def test_load_checks_the_torch_files_as_the_trainer_loads_them(tmp_path, capsys):
    # a crafted optimizer.pt was refused inside torch.load as a raw UnpicklingError, exit 1
    ckpt = _checkpoint(tmp_path, 4)
    assert checkpoint_problems(ckpt, load=True) == []  # real torch files, numpy's RNG arrays among them
    import numpy as np

    torch.save({"numpy": np.random.get_state(), "cpu": torch.get_rng_state()}, ckpt / "rng_state.pth")
    assert checkpoint_problems(ckpt, load=True) == []
    torch.save({"state": _Gadget()}, ckpt / "optimizer.pt")
    assert checkpoint_problems(ckpt) == []  # whole as a zip: only loading tells
    (problem,) = checkpoint_problems(ckpt, load=True)
    assert problem.startswith("optimizer.pt holds more than tensors and plain values, which a resume never unpickles")
    assert "a crafted pickle ran" not in capsys.readouterr().out  # refused, never run
    latest, notes = latest_complete_checkpoint(tmp_path, load=True)
    assert latest is None and notes[0].startswith("checkpoint-4 skipped: optimizer.pt holds more than tensors")


def test_the_latest_complete_checkpoint_skips_damaged_ones(tmp_path):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 10)
    _cut(_checkpoint(tmp_path, 12) / "rng_state.pth")
    (tmp_path / "checkpoint-14").mkdir()  # an empty one
    latest, notes = latest_complete_checkpoint(tmp_path)
    assert latest == tmp_path / "checkpoint-10"
    assert notes[0].startswith("checkpoint-14 skipped: trainer_state.json is missing")
    assert notes[1].startswith("checkpoint-12 skipped: rng_state.pth is damaged")


def test_publish_renames_a_staged_folder_and_keeps_what_was_there(tmp_path):
    staged = _checkpoint(tmp_path / ".staging", 6)
    (tmp_path / "checkpoint-6").mkdir()
    (tmp_path / "checkpoint-6" / "half").write_text("x")
    publish_dir(staged, tmp_path / "checkpoint-6")
    assert checkpoint_problems(tmp_path / "checkpoint-6") == [] and not staged.exists()
    kept = [p for p in tmp_path.iterdir() if p.name.startswith(".replaced-checkpoint-6")]
    assert len(kept) == 1 and (kept[0] / "half").read_text() == "x"  # moved aside, not deleted


def test_resume_log_restores_a_step_whose_line_was_cut_and_supersedes_later_ones():
    rows = [{"step": s, "reward": s / 10} for s in (1, 2, 3, 4)] + [{"step": 6, "reward": 0.6}]
    history = [{"step": s, "reward": s / 10, "loss": 0.0} for s in (1, 2, 3, 4, 5)]  # the checkpoint at step 5 knew 5
    kept, later, restored = resume_log(rows, 5, history)
    assert [r["step"] for r in kept] == [1, 2, 3, 4, 5] and restored == [5]
    assert kept[-1] == {"step": 5, "reward": 0.5, "loss": 0.0, "restored_from": "checkpoint-5/trainer_state.json"}
    assert later == [{"step": 6, "reward": 0.6}]


# ---------------------------------------------------------------- the rules of a resume

STORED = {
    "trainer": {"quantile_k": 0.4, "baseline": "quantile", "max_steps": 20, "save_steps": 5, "seed": 42},
    "run": {"n_train": 64, "command": "python -m qae_lab train ..."},
}


def test_a_resume_accepts_only_safe_changes():
    same = resume_changes(STORED, dict(STORED["trainer"]), {"n_train": 64, "command": "other"}, checkpoint_step=5)
    assert same == {}
    longer = {**STORED["trainer"], "max_steps": 40, "save_steps": 10}
    assert resume_changes(STORED, longer, {"n_train": 64}, checkpoint_step=20) == {
        "max_steps": [20, 40],
        "save_steps": [5, 10],
    }
    with pytest.raises(RunFolderError, match=r"baseline 'quantile' -> 'mean', quantile_k 0.4 -> 0.6.*only max_steps"):
        resume_changes(
            STORED, {**STORED["trainer"], "quantile_k": 0.6, "baseline": "mean"}, {"n_train": 64}, checkpoint_step=5
        )
    with pytest.raises(RunFolderError, match="n_train 64 -> 128"):
        resume_changes(STORED, STORED["trainer"], {"n_train": 128}, checkpoint_step=5)
    with pytest.raises(RunFolderError, match="max_steps must exceed the checkpoint's step 20"):
        resume_changes(STORED, {**STORED["trainer"], "max_steps": 15}, {"n_train": 64}, checkpoint_step=20)
    assert "quantile_k" not in SAFE_ON_RESUME and "max_steps" in SAFE_ON_RESUME


def test_a_resume_point_older_than_kept_work_is_refused(tmp_path):
    for step in (5, 10):
        _checkpoint(tmp_path, step)
    rows = [{"step": s, "reward": 0.0} for s in range(1, 13)]
    (tmp_path / LOG_NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
    check_resume_point(tmp_path, 10)  # the latest: steps 11-12 were lost with the crash and are trained again
    with pytest.raises(RunFolderError, match=r"checkpoint-5 is not the run's latest checkpoint \(checkpoint-10 is\)"):
        check_resume_point(tmp_path, 5)
    _cut(tmp_path / "checkpoint-10" / "optimizer.pt")
    check_resume_point(tmp_path, 5)  # a damaged later checkpoint does not count
    with open(tmp_path / LOG_NAME, "a") as f:
        f.write(json.dumps({"step": 12, "train_runtime": 9.0}) + "\n")  # the run finished at step 12
    with pytest.raises(RunFolderError, match="finished at step 12, after checkpoint-5"):
        check_resume_point(tmp_path, 5)
    assert os.path.exists(tmp_path / LOG_NAME)


@pytest.mark.parametrize(
    "name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "model.safetensors"]
)
def test_a_checkpoint_file_that_is_a_link_or_a_folder_is_named(tmp_path, name):
    # finding 7: a dangling optimizer.pt link (or a folder of that name) counted as complete; transformers then
    # skipped the optimizer and schedule without a word and the resumed step trained at the wrong learning rate
    ckpt = _checkpoint(tmp_path / "run", 4)
    whole = tmp_path / f"whole-{name}"
    os.replace(ckpt / name, whole)
    (ckpt / name).symlink_to(tmp_path / "nowhere")
    assert f"{name} is a symbolic link (to {tmp_path / 'nowhere'}): a checkpoint's files are its own" in "; ".join(
        checkpoint_problems(ckpt)
    )
    (ckpt / name).unlink()
    (ckpt / name).symlink_to(whole)  # even a link to the very file: another place, which may change or go
    assert any(p.startswith(f"{name} is a symbolic link") for p in checkpoint_problems(ckpt, load=True))
    (ckpt / name).unlink()
    (ckpt / name).mkdir()
    assert f"{name} is a folder, not a regular file" in "; ".join(checkpoint_problems(ckpt))
    latest, notes = latest_complete_checkpoint(tmp_path / "run", load=True)
    assert latest is None and notes[0].startswith(f"checkpoint-4 skipped: {name} is a folder")


def test_every_link_inside_a_checkpoint_is_named(tmp_path):
    ckpt = _checkpoint(tmp_path / "run", 4)
    (ckpt / "sub").mkdir()
    (ckpt / "sub" / "notes.txt").symlink_to(tmp_path)
    (ckpt / "extra.bin").symlink_to(tmp_path / "nowhere")
    assert checkpoint_problems(ckpt, resume=False) == [
        f"extra.bin is a symbolic link (to {tmp_path / 'nowhere'}): a checkpoint's files are its own",
        f"sub/notes.txt is a symbolic link (to {tmp_path}): a checkpoint's files are its own",
    ]
    (ckpt / "sub" / "notes.txt").unlink()
    (ckpt / "extra.bin").unlink()
    linked = tmp_path / "run" / "checkpoint-6"
    linked.symlink_to(ckpt)  # a checkpoint folder that is another folder's name
    assert checkpoint_problems(linked) == [f"{linked} is a symbolic link (to {ckpt}), not a checkpoint folder"]
    assert latest_complete_checkpoint(tmp_path / "run") == (
        ckpt,
        [f"checkpoint-6 skipped: {checkpoint_problems(linked)[0]}"],
    )


def test_a_trainer_state_whose_history_names_no_whole_step_is_named(tmp_path):
    # finding 9, the checkpoint's own log: its history rows are restored into log.jsonl by a resume
    ckpt = _checkpoint(tmp_path, 4)
    for history, why in (
        ([{"step": "1", "reward": 0.5}], 'its step is "1" (a string); a log row\'s step is a whole number >= 0'),
        ([{"loss": 0.5}], "it has no step; a log row's step is a whole number >= 0"),
        ([3], "a log row is a JSON object, got int"),
    ):
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 4, "log_history": history}))
        assert checkpoint_problems(ckpt) == [f"trainer_state.json is damaged (log_history row 1: {why})"]
