"""Tests for qae_lab.storage.folder: atomic writes, damaged files named, claiming a folder, reading the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qae_lab.storage import folder
from qae_lab.storage.folder import (
    CONFIG_NAME,
    LOCK_NAME,
    LOG_NAME,
    MARKER_NAME,
    RunFolderError,
    RunLock,
    atomic_write_text,
    check_folder,
    claim_fresh,
    read_json,
    read_log,
    read_log_lines,
    run_files,
    run_owned,
)


# ---------------------------------------------------------------- atomic writes


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    atomic_write_text(path, '{"old": 1}\n')

    def killed(src, dst):
        raise KeyboardInterrupt  # the process stops between writing the new text and the rename

    monkeypatch.setattr(folder.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, '{"new": 2}\n')
    assert path.read_text() == '{"old": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left behind


def test_read_json_names_a_missing_or_damaged_file(tmp_path):
    with pytest.raises(RunFolderError, match=r"run config .*config.json is missing"):
        read_json(tmp_path / "config.json", "run config")
    (tmp_path / "config.json").write_text('{"trainer": {"quantile_k": 0.')
    with pytest.raises(RunFolderError, match=r"config.json is damaged \(not JSON"):
        read_json(tmp_path / "config.json", "run config")


# ---------------------------------------------------------------- a fresh run


def test_claim_fresh_refuses_a_run_folder_and_overwrites_only_when_asked(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    claim_fresh(tmp_path)  # unrelated files: fine; the folder now holds the new run's marker
    assert run_files(tmp_path) == [MARKER_NAME]
    (tmp_path / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    with pytest.raises(
        RunFolderError,
        match=r"already holds a run \(.qae_lab-run.json, checkpoint-2, log.jsonl\)"
        r".*--resume.*--overwrite",
    ):
        claim_fresh(tmp_path)
    assert run_files(tmp_path) == [MARKER_NAME, "checkpoint-2", "log.jsonl"]  # refused: nothing touched
    assert claim_fresh(tmp_path, overwrite=True) == ["checkpoint-2", "log.jsonl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER_NAME, "notes.txt"]  # the user's file stays


def test_overwrite_deletes_only_what_a_run_wrote(tmp_path):
    # issue 31, finding 1: `--output-dir data/embedded --overwrite` deleted the model's config.json
    model = tmp_path / "embedded"
    model.mkdir()
    (model / CONFIG_NAME).write_text('{"model_type": "qwen2", "vocab_size": 100}')
    (model / "model.safetensors").write_bytes(b"weights")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(RunFolderError, match="deletes only the files of a run: .* holds config.json, but no run"):
        claim_fresh(model, overwrite=True)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before  # byte for byte, no lock file left
    assert run_owned(model) is False
    # a run of a version before markers: its config.json says so (trainer settings, qae_lab among the versions)
    old = tmp_path / "old-run"
    old.mkdir()
    (old / CONFIG_NAME).write_text(json.dumps({"trainer": {"quantile_k": 0.4}, "versions": {"qae_lab": "0.1.0"}}))
    (old / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    assert run_owned(old) and claim_fresh(old, overwrite=True) == [CONFIG_NAME, LOG_NAME]


# ---------------------------------------------------------------- one process at a time

_HOLD = """
import sys, time
from qae_lab.storage.folder import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _holder(folder):
    """A second process that takes the folder's lock and keeps it (until killed); returns once it holds it."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"  # blocks until the lock is held: no timing involved
    return proc


def test_a_second_process_is_refused_naming_the_holder_and_a_killed_ones_lock_is_taken_over(tmp_path):
    # issue 31, finding 2: two processes on one --output-dir both wrote one folder
    proc = _holder(tmp_path)
    try:
        with pytest.raises(
            RunFolderError,
            match=rf"is being written by process {proc.pid} on .* since .*"
            r"one run folder takes one process at a time",
        ):
            claim_fresh(tmp_path)
        assert run_files(tmp_path) == []  # refused before anything was written
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.wait()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == proc.pid  # the dead holder's name is still there
    with RunLock(tmp_path) as lock:  # but its lock died with it (flock): taken over at once
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()  # let go: nothing left behind


def test_a_second_lock_in_the_same_process_is_refused_and_the_fallback_reads_the_holder(tmp_path, monkeypatch):
    with RunLock(tmp_path):
        with pytest.raises(RunFolderError, match="this very process"):
            RunLock(tmp_path).acquire()
    # a file system without flock: the holder the file names decides (alive on this host: held; dead: taken over)
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))
    proc = _holder(tmp_path / "nfs")
    try:
        with pytest.raises(RunFolderError, match=f"process {proc.pid}"):
            RunLock(tmp_path / "nfs").acquire()
    finally:
        proc.kill()
        proc.wait()
    RunLock(tmp_path / "nfs").acquire().release()


def test_bad_run_folders_are_named(tmp_path):
    (tmp_path / "a-file").write_text("x")
    for folder, message in (
        (tmp_path / "a-file", "is a file, not a folder"),
        ("/", "the file system's root"),
        (Path.home(), "the home folder"),
        (Path.cwd().parent, "a folder above the current one"),
    ):
        with pytest.raises(RunFolderError, match=message):
            check_folder(folder)
    check_folder(tmp_path / "new")  # a new folder, or the current one, is fine
    check_folder(Path.cwd())


# ---------------------------------------------------------------- the log


def test_a_cut_last_line_is_reported_and_damage_elsewhere_names_the_line(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}')  # the newline never reached the disk
    assert read_log_lines(log) == ([{"step": 1, "reward": 0.1}], '{"step": 2, "reward": 0.2}')
    log.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log.jsonl: line 2 is damaged"):
        read_log_lines(log)
    assert read_log_lines(tmp_path / "none.jsonl") == ([], None)
    # issue 31, finding 11: a line nested 100,000 deep raised a RecursionError naming no file or line
    log.write_text('{"step": 1}\n' + "[" * 100_000 + "]" * 100_000 + '\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log.jsonl: line 2 is damaged \(nested too deep to read\)"):
        read_log_lines(log)
    log.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')  # JSON, but no row
    with pytest.raises(RunFolderError, match=r"line 2 is damaged \(a log row is a JSON object, got list\)"):
        read_log_lines(log)
    with pytest.raises(FileNotFoundError, match="no step has been logged"):
        read_log(tmp_path / "none.jsonl")
