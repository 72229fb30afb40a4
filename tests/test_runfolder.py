"""Tests for qae_lab.runfolder: atomic writes, damaged files named, claiming a folder, reading the log."""

from __future__ import annotations

import pytest

from qae_lab import runfolder
from qae_lab.runfolder import (
    LOG_NAME,
    RunFolderError,
    atomic_write_text,
    claim_fresh,
    read_json,
    read_log,
    read_log_lines,
    run_files,
)


# ---------------------------------------------------------------- atomic writes

def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    atomic_write_text(path, '{"old": 1}\n')

    def killed(src, dst):
        raise KeyboardInterrupt  # the process stops between writing the new text and the rename

    monkeypatch.setattr(runfolder.os, "replace", killed)
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
    claim_fresh(tmp_path)  # unrelated files: fine
    (tmp_path / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    with pytest.raises(RunFolderError, match=r"already holds a run \(checkpoint-2, log.jsonl\).*--resume.*--overwrite"):
        claim_fresh(tmp_path)
    assert run_files(tmp_path) == ["checkpoint-2", "log.jsonl"]  # refused: nothing touched
    assert claim_fresh(tmp_path, overwrite=True) == ["checkpoint-2", "log.jsonl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # the user's own file stays


# ---------------------------------------------------------------- the log

def test_a_cut_last_line_is_reported_and_damage_elsewhere_names_the_line(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}')  # the newline never reached the disk
    assert read_log_lines(log) == ([{"step": 1, "reward": 0.1}], '{"step": 2, "reward": 0.2}')
    log.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log.jsonl: line 2 is damaged"):
        read_log_lines(log)
    assert read_log_lines(tmp_path / "none.jsonl") == ([], None)
    with pytest.raises(FileNotFoundError, match="no step has been logged"):
        read_log(tmp_path / "none.jsonl")
