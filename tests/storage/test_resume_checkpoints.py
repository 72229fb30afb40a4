"""Tests for qae_lab.storage.resume: each cut file of a checkpoint named, the latest complete one, staged
publishing, and the rules of a resume. Pure file tests (no training): each damaged file is made the
way a crash makes it (cut short), from real torch / safetensors output."""

from __future__ import annotations

import json
import os
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from qae_lab.storage.resume import (
    RESUME,
    SAFE_ON_RESUME,
    ResumePlan,
    _still_complete,
    check_resume_point,
    checkpoint_problems,
    latest_complete_checkpoint,
    publish_dir,
    resume_changes,
    resume_log,
    safetensors_problem,
    shard_problems,
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


# ---------------------------------------------------------------- each check, at its edges


def _retag(path: Path, device: str) -> None:
    """Rewrite a torch.save zip as if its tensors had been saved on ``device`` (the pickle's storage location)."""
    with zipfile.ZipFile(path) as z:
        members = [(info, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in members:
            if info.filename.endswith("/data.pkl"):
                assert data.count(b"X\x03\x00\x00\x00cpu") == 1
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X" + struct.pack("<I", len(device)) + device.encode())
            z.writestr(info, data)


def test_a_torch_file_saved_on_a_gpu_loads_on_a_cpu_machine(tmp_path):
    # a checkpoint written on GPU 7 of a training node is checked (load=True) on a smaller machine: its tensors
    # load onto the CPU, as the Trainer maps them, instead of "does not load (RuntimeError: ... CUDA device ...)"
    # Planted: map_location=None, or no map_location, in _load_problem's torch.load -> fails
    ckpt = _checkpoint(tmp_path, 4)
    _retag(ckpt / "optimizer.pt", "cuda:7")
    assert checkpoint_problems(ckpt, load=True) == []


def test_the_weights_only_loader_holds_whatever_the_environment_says(tmp_path, monkeypatch, capsys):
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (set to load an old pickle elsewhere) turns torch.load's default into a
    # full unpickle; the check passes weights_only=True itself, so a crafted pickle is still refused, never run
    # Planted: weights_only=None, or no weights_only, in _load_problem's torch.load -> fails
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    ckpt = _checkpoint(tmp_path, 4)
    torch.save({"state": _Gadget()}, ckpt / "optimizer.pt")
    (problem,) = checkpoint_problems(ckpt, load=True)
    assert problem.startswith("optimizer.pt holds more than tensors and plain values")
    assert "a crafted pickle ran" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "message, named",
    [
        # torch's refusal as some versions word it: a first line over 160 characters, then the details
        ("Weights only load failed. " + "w" * 200 + "\n\t(1) details", "Weights only load failed. " + "w" * 134),
        ("  Unsupported global: GLOBAL builtins.print\nCheck the docs", "Unsupported global: GLOBAL builtins.print"),
        ("", "UnpicklingError"),  # a refusal with no words: its kind
        (" \n ", "UnpicklingError"),
    ],
)
def test_a_refused_pickle_is_named_with_the_first_line_of_torchs_reason(tmp_path, monkeypatch, message, named):
    # Planted: `if str(err).strip() and False` / `or True` / `if str(None).strip()` / str(None).strip() /
    # splitlines()[1] / type(None).__name__ / first[:161] in _load_problem -> fails (or raises IndexError)
    ckpt = _checkpoint(tmp_path, 4)
    real_load = torch.load

    def load(path, *args, **kwargs):
        if Path(path).name == "optimizer.pt":
            raise pickle.UnpicklingError(message)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    assert checkpoint_problems(ckpt, load=True) == [
        (
            "optimizer.pt holds more than tensors and plain values, which a resume never unpickles "
            f"(refused by torch's weights-only loader: {named})"
        )
    ]


def test_a_loaders_file_that_is_a_folder_or_a_pipe_is_named(tmp_path):
    # transformers' Trainer saves training_args.bin (torch) in each checkpoint: a folder there is named like one
    # at optimizer.pt; a named pipe at optimizer.pt is "a special file", never read (reading it would block)
    # Planted: "XX.binXX" / ".BIN" in _not_its_own's suffixes; `stat.S_ISDIR(mode) or True`; "XXa special fileXX"
    # / "A SPECIAL FILE" -> fails
    ckpt = _checkpoint(tmp_path / "a", 4)
    (ckpt / "training_args.bin").mkdir()
    assert checkpoint_problems(ckpt) == ["training_args.bin is a folder, not a regular file"]
    ckpt = _checkpoint(tmp_path / "b", 4)
    (ckpt / "optimizer.pt").unlink()
    os.mkfifo(ckpt / "optimizer.pt")
    assert checkpoint_problems(ckpt, load=True) == ["optimizer.pt is a special file, not a regular file"]


def test_a_trainer_state_at_step_0_or_without_a_history_is_whole(tmp_path):
    # global_step is "a whole number >= 0": 0 is one (a checkpoint saved before the first step); a state with no
    # log_history has no rows to restore, which is no damage
    # Planted: `step <= 0` / `step < 1`; data.get("log_history", None) / data.get("log_history") -> fails
    assert checkpoint_problems(_checkpoint(tmp_path, 0)) == []
    ckpt = _checkpoint(tmp_path, 4)
    (ckpt / "trainer_state.json").write_text('{"global_step": 4}')
    assert checkpoint_problems(ckpt) == []


def _index_checkpoint(folder: Path, step: int) -> Path:
    """A checkpoint whose weights are sharded: model.safetensors.index.json and the two shards it lists."""
    ckpt = _checkpoint(folder, step)
    (ckpt / "model.safetensors").unlink()
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for i, shard in enumerate(shards):
        save_file({f"w{i}": torch.zeros(4)}, str(ckpt / shard))
    index = {"metadata": {"total_size": 32}, "weight_map": {"w0": shards[0], "w1": shards[1]}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    return ckpt


def test_a_shard_missing_from_a_sharded_checkpoint_is_named(tmp_path):
    # Planted: `"model.safetensors.index.json" not in regular` / "XXmodel.safetensors.index.jsonXX" /
    # "MODEL.SAFETENSORS.INDEX.JSON" in checkpoint_problems -> fails
    ckpt = _index_checkpoint(tmp_path, 4)
    assert checkpoint_problems(ckpt) == []
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    assert checkpoint_problems(ckpt) == [
        "model-00002-of-00002.safetensors (listed in model.safetensors.index.json) is missing"
    ]


def test_a_missing_shard_is_named_beside_the_checkpoints_other_problems(tmp_path):
    # Planted: `problems = shard_problems(...)` for `+=` in checkpoint_problems (the earlier problems dropped) -> fails
    ckpt = _index_checkpoint(tmp_path, 4)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    (ckpt / "optimizer.pt").unlink()
    assert checkpoint_problems(ckpt) == [
        "optimizer.pt is missing (Adam's moments)",
        "model-00002-of-00002.safetensors (listed in model.safetensors.index.json) is missing",
    ]


def test_an_index_may_list_only_plain_file_names_of_its_folder(tmp_path):
    # a shard is a plain name in the folder: no path, no "." or "..", no empty name, no Windows separator, no number;
    # each other entry is named, sorted as text, before the plain ones that are missing.
    # Planted: any `and` of the filter as `or`, one of "", ".." or "\\" misspelt in it, map(None, ...) -> fails
    index = "model.safetensors.index.json"
    listed = ["", ".", "..", "../w.safetensors", "sub/w.safetensors", "a\\b.safetensors", 7, "gone.safetensors"]
    (tmp_path / index).write_text(json.dumps({"weight_map": {f"w{i}": s for i, s in enumerate(listed)}}))
    bad = ["", ".", "..", "../w.safetensors", "7", "a\\b.safetensors", "sub/w.safetensors"]
    assert shard_problems(tmp_path, index) == [
        f"{index} lists {s}, which is no file name in the folder" for s in bad
    ] + [f"gone.safetensors (listed in {index}) is missing"]


def test_two_pickled_weight_files_are_both_named(tmp_path):
    # Planted: 'XX, XX'.join(pickled) in checkpoint_problems -> fails
    ckpt = _checkpoint(tmp_path, 4)
    (ckpt / "model.safetensors").unlink()
    for name in ("pytorch_model.bin", "adapter_model.bin"):
        torch.save({"w": torch.zeros(2)}, ckpt / name)
    assert checkpoint_problems(ckpt) == [
        (
            "no model weights (model.safetensors, adapter_model.safetensors or a sharded "
            "model.safetensors.index.json); adapter_model.bin, pytorch_model.bin holds pickled weights, which "
            "qae_lab never loads"
        )
    ]


def test_an_export_needs_no_optimizer_schedule_or_rng_state(tmp_path):
    # resume=False asks for what an export reads: the state and the weights
    # Planted: `_RESUME_STATE.items() if resume or True` in checkpoint_problems; latest_complete_checkpoint
    # passing no resume= -> fails
    ckpt = _checkpoint(tmp_path, 4)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (ckpt / name).unlink()
    assert checkpoint_problems(ckpt, resume=False) == []
    assert latest_complete_checkpoint(tmp_path, resume=False) == (ckpt, [])
    assert latest_complete_checkpoint(tmp_path)[0] is None


@dataclass
class _Args:
    """What transformers pickles into training_args.bin: an object, no tensor."""

    learning_rate: float = 1e-4


def test_training_args_bin_is_checked_whole_but_never_loaded(tmp_path):
    # training_args.bin (the Trainer's pickled TrainingArguments) is a torch zip: a cut one is named; being no
    # tensors, the weights-only loader would refuse it, so load=True leaves it unloaded (a resume never loads it)
    # Planted: "XX.binXX" / ".BIN" in checkpoint_problems' torch suffixes -> the cut file passes; the same in
    # `path.suffix == ".bin"` -> load=True names it as a crafted pickle -> fails
    ckpt = _checkpoint(tmp_path, 4)
    torch.save(_Args(), ckpt / "training_args.bin")
    assert checkpoint_problems(ckpt, load=True) == []
    _cut(ckpt / "training_args.bin")
    (problem,) = checkpoint_problems(ckpt)
    assert problem.startswith("training_args.bin is damaged or cut short (BadZipFile: ")


@pytest.mark.parametrize("short", ["the whole file", "its header's offset", "its name"])
def test_a_zip_whose_directory_runs_past_the_end_is_named(tmp_path, short):
    # the zip directory is whole but says a member's data runs past the file's end (the data itself is lost); at the
    # boundary its header's offset plus its size is the file's size, and the data, after a local header of 30 bytes
    # and the name, still runs past it. Found: that boundary passed (the header was not counted).
    # "its name": the data, after the 30-byte header, runs past the end by the name's 16 bytes.
    # Planted: `info.header_offset - info.compress_size > size`, the local header left out, or its name's length
    # subtracted -> fails
    ckpt = _checkpoint(tmp_path, 4)
    data = bytearray((ckpt / "optimizer.pt").read_bytes())
    name = b"optimizer/data/0"
    entry = data.index(b"PK\x01\x02")  # the first central directory entry, then on to data/0's
    while data[entry + 46 : entry + 46 + len(name)] != name:
        entry = data.index(b"PK\x01\x02", entry + 4)
    offset = struct.unpack("<I", data[entry + 42 : entry + 46])[0]  # where its local header starts
    size = {"the whole file": len(data), "its header's offset": len(data) - offset}.get(short, len(data) - offset - 30)
    data[entry + 20 : entry + 24] = struct.pack("<I", size)  # its compressed size
    (ckpt / "optimizer.pt").write_bytes(bytes(data))
    assert checkpoint_problems(ckpt) == ["optimizer.pt is cut short (member optimizer/data/0 runs past the end)"]


def test_the_default_latest_checkpoint_check_reads_no_pickle_and_a_note_names_each_problem(tmp_path):
    # load=False by default: structure only (a crafted pickle is whole as a zip); a skipped checkpoint's note
    # lists every problem, "; "-separated
    # Planted: `load: bool = True` in latest_complete_checkpoint; "XX; XX".join(problems) -> fails
    ckpt = _checkpoint(tmp_path, 4)
    torch.save({"state": _Gadget()}, ckpt / "optimizer.pt")
    assert latest_complete_checkpoint(tmp_path) == (ckpt, [])
    later = _checkpoint(tmp_path, 6)
    (later / "optimizer.pt").unlink()
    (later / "scheduler.pt").unlink()
    assert latest_complete_checkpoint(tmp_path) == (
        ckpt,
        [
            (
                "checkpoint-6 skipped: optimizer.pt is missing (Adam's moments); "
                "scheduler.pt is missing (the learning-rate schedule's position)"
            )
        ],
    )


def _safetensors(path: Path, header: bytes, data: bytes, length: int | None = None) -> Path:
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


_HEADER = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} '  # 56 bytes; the tensor: 16 bytes


@pytest.mark.parametrize(
    "header, data, length, problem",
    [
        (_HEADER, bytes(16), None, None),  # whole: 8 + 56 + 16 bytes
        (_HEADER, bytes(10), None, "model.safetensors is cut short (74 bytes, 80 expected)"),
        (_HEADER[:53], b"", 56, "model.safetensors is cut short (header of 56 bytes in a 61-byte file)"),
        (
            b"{}" + b" " * 10,
            b"",
            2**64 - 1,  # a length with its top bit set: unsigned, as the format says
            "model.safetensors is cut short (header of 18446744073709551615 bytes in a 20-byte file)",
        ),
        (b"{}      ", b"", None, None),  # no tensors at all: 8 + 8 bytes, as save_file({}) writes it
        (b'{"__metadata__":{"format":"pt"},' + _HEADER[1:], bytes(16), None, None),  # transformers' metadata
    ],
)
def test_a_safetensors_file_is_whole_or_named_with_its_sizes(tmp_path, header, data, length, problem):
    # Planted in safetensors_problem: "<q" (length read signed); `n >= size - 8` / `n > size + 8` /
    # `n > size - 9`; max(..., default=None) / no default / default=1; "XX__metadata__XX" / "__METADATA__";
    # `8 + n - end` / `8 - n + end` / `9 + n + end` in the message -> fails
    assert safetensors_problem(_safetensors(tmp_path / "model.safetensors", header, data, length)) == problem


def test_a_safetensors_file_with_bytes_after_its_tensors_is_named(tmp_path):
    # "exactly the tensors' bytes": the header's 16-byte tensor ends at byte 8 + 56 + 16 = 80, so a file with bytes
    # after it (an 81- or a 96-byte file: another write's tail, a file joined to another) is not whole, and is named
    # with its size and the 80 bytes expected, as holding bytes after its tensors (it said "cut short").
    # Planted: `8 + n + end != size` -> `> size` (trailing bytes accepted) -> fails
    for extra, size in ((1, 81), (16, 96)):
        path = _safetensors(tmp_path / "model.safetensors", _HEADER, bytes(16 + extra))
        assert path.stat().st_size == size
        problem = safetensors_problem(path)
        assert problem == f"model.safetensors holds bytes after its tensors ({size} bytes, 80 expected)"


def test_a_refused_resume_point_names_the_steps_it_would_train_again(tmp_path):
    # Planted: `step - 1` / `step + 2` in either of check_resume_point's messages -> fails
    for step in (4, 10):
        _checkpoint(tmp_path, step)
    with pytest.raises(RunFolderError) as err:
        check_resume_point(tmp_path, 4)
    assert str(err.value) == (
        f"{tmp_path}/checkpoint-4 is not the run's latest checkpoint (checkpoint-10 is): resuming it in {tmp_path}/ "
        "would train steps 5-10 again over their logged rows. Resume checkpoint-10, or start a new run folder to "
        "try something else from step 4."
    )
    _cut(tmp_path / "checkpoint-10" / "optimizer.pt")
    (tmp_path / LOG_NAME).write_text(json.dumps({"step": 12, "train_runtime": 9.0}) + "\n")
    with pytest.raises(RunFolderError) as err:
        check_resume_point(tmp_path, 4)
    assert str(err.value).startswith(
        f"the run in {tmp_path}/ finished at step 12, after checkpoint-4: resuming it would train logged steps 5-12 "
        "again. "
    )


def test_a_claim_refuses_a_checkpoint_damaged_since_the_plan(tmp_path):
    # Planted: `problems = None` in _still_complete -> fails
    ckpt = _checkpoint(tmp_path, 4)
    plan = ResumePlan(RESUME, tmp_path, checkpoint=ckpt, step=4)
    assert _still_complete(plan) is None
    (ckpt / "optimizer.pt").write_bytes(b"")
    assert _still_complete(plan) == (
        "checkpoint-4: optimizer.pt is damaged or cut short (BadZipFile: File is not a zip file; 0 bytes)"
    )
    (ckpt / "scheduler.pt").unlink()  # two problems: "; "-separated. Planted: 'XX; XX'.join -> fails
    assert _still_complete(plan) == (
        "checkpoint-4: scheduler.pt is missing (the learning-rate schedule's position); "
        "optimizer.pt is damaged or cut short (BadZipFile: File is not a zip file; 0 bytes)"
    )


def test_a_claim_still_skips_the_later_checkpoints_the_plan_skipped(tmp_path):
    # checkpoint-6's optimizer.pt is whole as a zip but refused by the loader: the plan (load=True) skipped it,
    # and the claim (which checks structure only) must not count it as a later complete checkpoint
    # Planted: no skipped= / "XX skipped: XX" / " SKIPPED: " / split(...)[1] in _still_complete -> fails
    ckpt = _checkpoint(tmp_path, 4)
    torch.save({"state": _Gadget()}, _checkpoint(tmp_path, 6) / "optimizer.pt")
    latest, notes = latest_complete_checkpoint(tmp_path, load=True)
    assert latest == ckpt and len(notes) == 1
    assert _still_complete(ResumePlan(RESUME, tmp_path, checkpoint=ckpt, step=4, notes=tuple(notes))) is None


def test_a_folder_named_like_a_checkpoint_with_a_newline_after_is_none(tmp_path):
    # "checkpoint-6\n" is no Trainer checkpoint (found: CHECKPOINT_NAME's `$` matched before a final newline, so a
    # resume could pick such a folder, or a claim count it). Planted: `$` for `\Z` in CHECKPOINT_NAME -> fails
    ckpt = _checkpoint(tmp_path, 4)
    os.replace(_checkpoint(tmp_path, 6), tmp_path / "checkpoint-6\n")
    assert latest_complete_checkpoint(tmp_path) == (ckpt, [])


def test_a_claim_names_a_later_checkpoint_saved_since_the_plan(tmp_path):
    # another process trained on and saved checkpoint-6 after the plan: the claim says so, in check_resume_point's
    # words. Planted: `return str(None)` in _still_complete -> fails
    ckpt = _checkpoint(tmp_path, 4)
    plan = ResumePlan(RESUME, tmp_path, checkpoint=ckpt, step=4)
    _checkpoint(tmp_path, 6)
    assert _still_complete(plan) == (
        f"{tmp_path}/checkpoint-4 is not the run's latest checkpoint (checkpoint-6 is): resuming it in {tmp_path}/ "
        "would train steps 5-6 again over their logged rows. Resume checkpoint-6, or start a new run folder to try "
        "something else from step 4."
    )
