"""Tests for qae_lab.storage.folder: atomic writes, damaged files named, claiming a folder, reading the log."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from qae_lab.storage import folder
from qae_lab.storage.claim import claim_fresh
from qae_lab.storage.folder import (
    CONFIG_NAME,
    COMPLETIONS_DIR,
    EMISSIONS_NAME,
    LOCK_NAME,
    LOG_NAME,
    MARKER_NAME,
    STAGING_DIR,
    TENSORBOARD_DIR,
    RunFolderError,
    RunLock,
    atomic_write_text,
    check_folder,
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
    # `--output-dir data/embedded --overwrite` deleted the model's config.json
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


def test_the_trackers_files_are_the_runs_own_and_go_with_it_on_overwrite(tmp_path):
    # the finding: --overwrite left the replaced run's TensorBoard events (transformers' <output_dir>/runs/<date>_<host>/)
    # beside the new run's, so one chart showed both runs
    run = _outer_run(tmp_path / "run")
    (run / TENSORBOARD_DIR / "Jan01_00-00-00_host").mkdir(parents=True)
    (run / TENSORBOARD_DIR / "Jan01_00-00-00_host" / "events.out.tfevents.1.host.1.0").write_bytes(b"old run")
    (run / EMISSIONS_NAME).write_text("timestamp,duration\n2026-01-01,9.0\n")  # codecarbon appends a row per run
    (run / COMPLETIONS_DIR).mkdir()  # TRL's log_completions: one parquet file a logged step
    (run / COMPLETIONS_DIR / "completions_00003.parquet").write_bytes(b"old run")
    (run / "notes.txt").write_text("mine")
    (run / "tb-mine").mkdir()  # the user's own folders and files, whatever they hold
    (run / "tb-mine" / "events.out.tfevents.2.host.1.0").write_bytes(b"mine")
    assert claim_fresh(run, overwrite=True) == [
        "checkpoint-2",
        COMPLETIONS_DIR,
        EMISSIONS_NAME,
        LOG_NAME,
        TENSORBOARD_DIR,
    ]
    assert sorted(p.name for p in run.iterdir()) == [MARKER_NAME, "notes.txt", "tb-mine"]
    assert (run / "tb-mine" / "events.out.tfevents.2.host.1.0").read_bytes() == b"mine"
    # someone's TensorBoard folder with no run beside it: a new run would write into it, so it is refused, and
    # --overwrite may not delete it (no run wrote it)
    logs = tmp_path / "logs"
    (logs / TENSORBOARD_DIR).mkdir(parents=True)
    with pytest.raises(RunFolderError, match=r"already holds a run \(runs\)"):
        claim_fresh(logs)
    with pytest.raises(RunFolderError, match="holds runs, but no run wrote them"):
        claim_fresh(logs, overwrite=True)
    assert sorted(p.name for p in logs.iterdir()) == [TENSORBOARD_DIR]
    # runs/ is where run folders are kept: fine beside anything but a run's own names
    (tmp_path / "project" / "model").mkdir(parents=True)
    (tmp_path / "project" / CONFIG_NAME).write_text("{}")
    assert check_folder(tmp_path / "project" / "runs" / "x")
    for bad in (run / TENSORBOARD_DIR / "x", run / TENSORBOARD_DIR, run / EMISSIONS_NAME):  # inside a run's: refused
        with pytest.raises(RunFolderError, match=r"is a name the run folder uses for itself \(the run's"):
            check_folder(bad)


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
    # two processes on one --output-dir both wrote one folder
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
    for where, message in (
        (tmp_path / "a-file", "is a file, not a folder"),
        ("/", "the file system's root"),
        (Path.home(), "the home folder"),
        (Path.cwd().parent, "a folder above the current one"),
    ):
        with pytest.raises(RunFolderError, match=message):
            check_folder(where)
    check_folder(tmp_path / "new")  # a new folder, or the current one, is fine
    check_folder(Path.cwd())


RUN_WRITES = "a run writes config.json, log.jsonl, model/ and checkpoints straight into its folder"
EXPORT_WRITES = "an export writes model.safetensors, config.json and the tokenizer straight into its folder"


@pytest.mark.parametrize(
    "where, what, why, writes, example",
    [
        ("root", "output_dir", "the file system's root", RUN_WRITES, "runs/my-run"),
        ("root", "out", "the file system's root", EXPORT_WRITES, "exports/my-model"),
        ("home", "out", "the home folder", EXPORT_WRITES, "exports/my-model"),
        ("above", "output_dir", "a folder above the current one", RUN_WRITES, "runs/my-run"),
    ],
)
def test_a_folder_too_wide_for_a_run_is_refused_saying_what_it_is_and_what_to_give(
    tmp_path, monkeypatch, where, what, why, writes, example
):
    # The whole message, per command: what the folder is, what the run (or export) would write there, and the
    # kind of folder to give instead. Planted: each of the three "why" texts, the run's or the export's "writes"
    # text and the e.g. folder (XX..XX, upper case, None), `what == "out"` negated, "OUT"/"XXoutXX", `and False`,
    # `or True` -> fails.
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    folder_ = {"root": "/", "home": Path.home(), "above": tmp_path / "a"}[where]
    with pytest.raises(RunFolderError) as err:
        check_folder(folder_, what)
    assert str(err.value) == f"{what} {folder_} is {why}: {writes}; give it a folder of its own (e.g. {example})"


# ---------------------------------------------------------------- the log


def test_a_cut_last_line_is_reported_and_damage_elsewhere_names_the_line(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}')  # the newline never reached the disk
    assert read_log_lines(log) == ([{"step": 1, "reward": 0.1}], '{"step": 2, "reward": 0.2}')
    log.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log.jsonl: line 2 is damaged"):
        read_log_lines(log)
    assert read_log_lines(tmp_path / "none.jsonl") == ([], None)
    # a line nested 100,000 deep raised a RecursionError naming no file or line
    log.write_text('{"step": 1}\n' + "[" * 100_000 + "]" * 100_000 + '\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log.jsonl: line 2 is damaged \(nested too deep to read\)"):
        read_log_lines(log)
    log.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')  # JSON, but no row
    with pytest.raises(RunFolderError, match=r"line 2 is damaged \(a log row is a JSON object, got list\)"):
        read_log_lines(log)
    with pytest.raises(FileNotFoundError, match="no step has been logged"):
        read_log(tmp_path / "none.jsonl")


# ---------------------------------------------------------------- the names a run owns


def _outer_run(folder: Path) -> Path:
    """A claimed run folder: its marker, a log line, a checkpoint."""
    folder.mkdir(parents=True)
    (folder / MARKER_NAME).write_text('{"qae_lab_run": 1}\n')
    (folder / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    (folder / "checkpoint-2").mkdir()
    return folder


def test_no_run_or_export_folder_is_or_lies_inside_a_name_a_run_folder_uses(tmp_path):
    # finding 1: `train --output-dir OUTER/.staging` was accepted; `--overwrite OUTER` then deleted that run
    outer = _outer_run(tmp_path / "outer")
    (tmp_path / "plain" / "model").mkdir(parents=True)  # "model" in a folder that holds no run
    (tmp_path / "outer-link").symlink_to(outer / STAGING_DIR)  # the same place under another name
    for bad in (
        outer / STAGING_DIR,
        outer / STAGING_DIR / "x",
        outer / "model",
        outer / "Model",  # the same folder where names ignore case (macOS, Windows)
        outer / "model" / "x",
        outer / "checkpoint-3",
        outer / "checkpoint-2" / "x",
        outer / "finished-step2",
        outer / "finished-step2-3" / "x",
        outer / MARKER_NAME,
        outer / LOCK_NAME,
        outer / "config.json",
        outer / "eval_after.json" / "x",
        tmp_path / "far" / "checkpoint-5" / "x",  # the distinctive names: anywhere in the path
        tmp_path / "far" / STAGING_DIR / "x",
        tmp_path / "plain" / "model",  # the generic ones: as the folder's own name, wherever it is
        tmp_path / "outer-link",
    ):
        with pytest.raises(RunFolderError, match=r"is a name the run folder uses for itself .*: choose another"):
            check_folder(bad)
        with pytest.raises(RunFolderError, match="is a name the run folder uses"):
            RunLock(bad).acquire()
    assert check_folder(tmp_path / "plain" / "model" / "runs" / "x")  # as an ancestor: only where a run is beside it
    assert check_folder(tmp_path / "model-runs" / "checkpoint-3x") and check_folder(outer / "exports")
    assert sorted(p.name for p in outer.iterdir()) == [MARKER_NAME, "checkpoint-2", LOG_NAME]  # nothing made


@pytest.mark.parametrize(
    "inside, what, role, instead",
    [
        (".staging/x", "output_dir", "where a checkpoint is written before it is renamed into place", "staging-run/x"),
        (".staging/x", "out", "where a checkpoint is written before it is renamed into place", "staging-export/x"),
        ("checkpoint-3", "output_dir", "a checkpoint, which the trainer's rotation deletes", "checkpoint-3-run"),
        (
            "finished-step2-3/x/y",
            "out",
            "where a resume sets a finished run's model and evaluation aside",
            "finished-step2-3-export/x/y",
        ),
        (".qae_lab-run.json", "output_dir", "the run's marker", "qae_lab-run.json-run"),
        (".qae_lab-run.lock", "out", "the run's lock", "qae_lab-run.lock-export"),
        ("Model/x", "output_dir", "the trained model", "Model-run/x"),  # named as written, judged case-blind
        ("runs/x", "output_dir", "the run's TensorBoard logs", "runs-run/x"),
        ("emissions.csv", "output_dir", "the run's codecarbon emissions", "emissions.csv-run"),
        ("completions/x", "out", "the run's logged completions (TRL's log_completions)", "completions-export/x"),
        ("config.json", "output_dir", "a file a run writes", "config.json-run"),
        ("log.jsonl/x", "out", "a file a run writes", "log.jsonl-export/x"),
    ],
)
def test_a_refused_run_name_is_named_with_what_it_is_for_and_the_folder_to_use_instead(
    tmp_path, inside, what, role, instead
):
    # The refusal names the folder as given, the part that is a run's own name, what the run uses that name for,
    # and a folder to use instead: the same path with that one part renamed (its leading dot dropped, "-run" or
    # "-export" added), everything before and after it kept. Planted: any role text (XX..XX, upper case, TRL or
    # TensorBoard lower-cased, the default None or dropped), `instead = None`, the parts before or after the name
    # dropped, `parts[i - 1:]`/`parts[i + 2:]`, lstrip(None)/rstrip('.'), the -export/-run choice negated, forced
    # (`and False`, `or True`) or its literals changed ("OUT", XX..XX, upper case) -> fails.
    outer = _outer_run(tmp_path / "outer")
    bad = outer / inside
    with pytest.raises(RunFolderError) as err:
        check_folder(bad, what)
    name = inside.split("/")[0]
    assert str(err.value) == (
        f"{what} {bad}: {name} is a name the run folder uses for itself ({role}), so no run or export may be it or "
        f"lie inside it: choose another folder (e.g. {outer / instead})"
    )


def test_a_common_run_name_is_refused_as_a_parent_only_beside_a_runs_files(tmp_path):
    # `OUTER/model/x` is refused where OUTER holds a run's files, a log or config.json included (a run of a version
    # before markers has no own names); beside anything else (notes.txt) `model` is a parent like any other. The
    # trackers' names need the run's own names beside them: a log alone does not refuse `OUTER/runs/x`.
    # Planted: `own` defaulting to True, `own or True`, `_is_own_name(n) and n in _RUN_FILES`,
    # `n not in _RUN_FILES` -> fails.
    old = tmp_path / "old-run"
    old.mkdir()
    (old / CONFIG_NAME).write_text("{}")
    (old / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    with pytest.raises(RunFolderError, match=r"model is a name the run folder uses for itself \(the trained model\)"):
        check_folder(old / "model" / "x")
    assert check_folder(old / "runs" / "x") == old / "runs" / "x"
    plain = tmp_path / "plain"
    (plain / "model").mkdir(parents=True)
    (plain / "notes.txt").write_text("mine")
    assert check_folder(plain / "model" / "x") == plain / "model" / "x"


def test_a_folder_under_a_file_is_refused_naming_the_file(tmp_path):
    # finding 11: `--output-dir notes.txt/run` passed --dry-run, then the run died with NotADirectoryError
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "file-link").symlink_to(tmp_path / "notes.txt")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for bad, kind in (
        (tmp_path / "notes.txt" / "run", "is a file"),
        (tmp_path / "notes.txt" / "a" / "b", "is a file"),
        (tmp_path / "file-link" / "run", "is a symbolic link to a file"),
        (tmp_path / "dangling" / "run", "is a symbolic link to nothing"),
    ):
        anchor = bad.parent if bad.parent.name != "a" else bad.parent.parent
        with pytest.raises(RunFolderError, match=rf"output_dir {bad}: {anchor} {kind}, not a folder"):
            check_folder(bad)
    with pytest.raises(RunFolderError, match=r"output_dir .*dangling is a symbolic link to nothing, not a folder"):
        check_folder(tmp_path / "dangling")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_overwrite_never_deletes_a_nested_run_or_what_no_trainer_staged(tmp_path):
    # finding 1, the deleting side: `--overwrite` (and the fresh claim) deleted .staging, whatever it held
    outer = _outer_run(tmp_path / "outer")
    nested = outer / STAGING_DIR
    nested.mkdir()
    (nested / MARKER_NAME).write_text('{"qae_lab_run": 1}\n')  # a run made there before names were reserved
    (nested / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    before = {str(p.relative_to(outer)) for p in outer.rglob("*")}
    with pytest.raises(RunFolderError, match=rf"{nested}/ holds a run of its own \({MARKER_NAME}\)"):
        claim_fresh(outer, overwrite=True)
    shutil.rmtree(nested)
    nested.mkdir()
    (nested / "notes.txt").write_text("mine")  # not what a trainer stages
    with pytest.raises(RunFolderError, match=rf"{nested}/ holds notes.txt, which no trainer stages there"):
        claim_fresh(outer, overwrite=True)
    (nested / "notes.txt").unlink()
    (outer / "model").mkdir()
    (outer / "model" / "sub").mkdir()
    (outer / "model" / "sub" / LOCK_NAME).write_text("{}")  # a run being written inside model/
    with pytest.raises(RunFolderError, match=rf"{outer / 'model'}/ holds a run of its own \(sub/{LOCK_NAME}\)"):
        claim_fresh(outer, overwrite=True)
    shutil.rmtree(outer / "model")
    assert {str(p.relative_to(outer)) for p in outer.rglob("*")} == before - {
        f"{STAGING_DIR}/{MARKER_NAME}",
        f"{STAGING_DIR}/{LOG_NAME}",
    }
    # a folder holding only a stale .staging is not fresh: nothing is deleted without --overwrite
    stale = tmp_path / "stale"
    (stale / STAGING_DIR / "checkpoint-4").mkdir(parents=True)
    with pytest.raises(RunFolderError, match=r"already holds a run \(.staging\)"):
        claim_fresh(stale)
    assert (stale / STAGING_DIR / "checkpoint-4").is_dir()
    # what a trainer stages goes with --overwrite, and is named among what goes
    (nested / "checkpoint-3").mkdir()
    (nested / "model").mkdir()
    assert claim_fresh(outer, overwrite=True) == [STAGING_DIR, "checkpoint-2", LOG_NAME]
    assert sorted(p.name for p in outer.iterdir()) == [MARKER_NAME]
    nested.symlink_to(tmp_path / "stale" / STAGING_DIR)  # a link is no staging folder: refused, named
    with pytest.raises(RunFolderError, match=rf"{nested} is a symbolic link"):
        claim_fresh(outer, overwrite=True)


# ---------------------------------------------------------------- files opened as what they claim to be


def _dead_pid() -> int:
    """The id of a process that has ended (its holder record names no running process)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_lock_file_that_is_a_link_or_no_file_is_refused_and_nothing_outside_is_written(tmp_path, monkeypatch):
    # finding 2: where flock is refused, a lock file linked elsewhere was followed and truncated: the file it named,
    # outside the run folder, was overwritten with the holder's JSON
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))  # a file system without flock
    victim = tmp_path / "victim.json"
    dead = {"pid": _dead_pid(), "host": socket.gethostname(), "since": "then", "command": "x"}
    victim.write_text(json.dumps(dead))  # a dead holder, as far as a reader through the link can tell
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(victim)
    with pytest.raises(RunFolderError, match=rf"{run / LOCK_NAME} is a symbolic link \(to {victim}\).*regular file"):
        RunLock(run).acquire()
    assert RunLock(run).busy().startswith(f"{run / LOCK_NAME} is a symbolic link")  # the dry run's answer too
    assert json.loads(victim.read_text()) == dead  # untouched
    (run / LOCK_NAME).unlink()
    os.link(victim, run / LOCK_NAME)  # a hard link: the same file under the run folder's name
    with pytest.raises(RunFolderError, match=rf"{run / LOCK_NAME} has 2 names.*regular file"):
        RunLock(run).acquire()
    assert json.loads(victim.read_text()) == dead
    (run / LOCK_NAME).unlink()
    (run / LOCK_NAME).mkdir()
    for fallback in (True, False):  # with flock too: the lock path is checked before it is used
        if not fallback:
            monkeypatch.undo()
        with pytest.raises(RunFolderError, match=rf"{run / LOCK_NAME} is a folder, not a regular file"):
            RunLock(run).acquire()
    (run / LOCK_NAME).rmdir()
    os.mkfifo(run / LOCK_NAME)  # reading a pipe would wait for a writer forever
    assert "is a named pipe" in RunLock(run).busy()
    with pytest.raises(RunFolderError, match="is a named pipe, not a regular file"):
        RunLock(run).acquire()
    (run / LOCK_NAME).unlink()
    with RunLock(run):  # a regular lock file: taken as before
        assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_atomic_writes_and_the_markers_read_no_link_and_no_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    run = tmp_path / "run"
    run.mkdir()
    (run / f".config.json.tmp-{os.getpid()}").symlink_to(victim)  # a temporary name planted in advance
    atomic_write_text(run / "config.json", "{}\n")
    assert victim.read_text() == "mine" and (run / "config.json").read_text() == "{}\n"
    (run / "report.html").mkdir()
    with pytest.raises(RunFolderError, match=r"report.html is a folder, not a regular file"):
        atomic_write_text(run / "report.html", "<html>")
    (run / "eval_after.json").symlink_to(victim)
    with pytest.raises(RunFolderError, match=r"eval_after.json is a symbolic link \(to .*victim.txt\)"):
        atomic_write_text(run / "eval_after.json", "{}")
    assert victim.read_text() == "mine"
    # another run's marker, linked in: no proof that a run wrote this folder (--overwrite may not delete it)
    other = _outer_run(tmp_path / "other")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / MARKER_NAME).symlink_to(other / MARKER_NAME)
    (mine / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    assert run_owned(mine) is False
    with pytest.raises(RunFolderError, match="no run wrote them"):
        claim_fresh(mine, overwrite=True)
    # the readers: a log or config that is a link or a pipe is named, never followed or waited on
    (mine / LOG_NAME).unlink()
    (mine / LOG_NAME).symlink_to(other / LOG_NAME)
    with pytest.raises(RunFolderError, match=rf"{mine / LOG_NAME} is a symbolic link"):
        read_log_lines(mine)
    os.mkfifo(mine / CONFIG_NAME)
    with pytest.raises(RunFolderError, match=rf"run config {mine / CONFIG_NAME} is a named pipe, not a regular file"):
        read_json(mine / CONFIG_NAME, "run config")


# ---------------------------------------------------------------- each log row's step


def test_a_log_row_without_a_whole_step_is_named_by_file_and_line(tmp_path):
    # finding 9: a row with "step": "1", or none, crashed --resume with a bare TypeError / KeyError
    log = tmp_path / LOG_NAME
    for row, why in (
        ('{"step": "1", "reward": 0.5}', 'its step is "1" \\(a string\\)'),
        ('{"reward": 0.5}', "it has no step"),
        ('{"step": true, "loss": 0.1}', "its step is true \\(a boolean\\)"),
        ('{"step": -1, "reward": 0.5}', "its step is -1 \\(below 0\\)"),
        ('{"step": 2.5, "reward": 0.5}', "its step is 2.5 \\(not a whole number\\)"),
        ('{"step": null, "train_runtime": 9.0}', "its step is null"),
        ('{"event": "resume"}', "it has no step"),
    ):
        log.write_text('{"step": 1, "reward": 0.1}\n' + row + '\n{"step": 3, "reward": 0.3}\n')
        with pytest.raises(RunFolderError, match=rf"{log}: line 2 is damaged \({why}.*a whole number >= 0"):
            read_log_lines(log)
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": "2", "rew')  # a cut last line is still only cut
    assert read_log_lines(log) == ([{"step": 1, "reward": 0.1}], '{"step": "2", "rew')
    log.write_text('{"step": 1, "reward": 0.1}\n{"step": "2"}')  # whole JSON, but its newline never came: cut
    assert read_log_lines(log)[1] == '{"step": "2"}'
