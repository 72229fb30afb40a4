r"""The run folder on disk: what a run writes there, and the rules that keep it whole.

A run folder is someone's data. Three rules hold for everything qae_lab writes into one:

1. **Nothing is replaced without an explicit choice.** A new run refuses a folder that holds
   another run's files (:func:`held_run`, asked by the one resume plan, :func:`qae_lab.storage.resume.plan_run`;
   :func:`claim_fresh` carries a fresh plan out): resume it, pass ``overwrite=True``
   (``--overwrite``), or pick another folder. ``overwrite`` deletes only files a run wrote: a claimed
   folder holds the run's own marker, ``.qae_lab-run.json`` (:func:`run_owned`), and a folder whose
   run-named files no run can be shown to have written (a model folder's ``config.json``) is refused.
   **One process at a time**: a run holds the folder's lock (:class:`RunLock`) from its claim until its last
   write; a second process is refused, naming the holder (``.qae_lab-run.lock`` says who it is). The lock is
   the operating system's (``flock`` on the folder), which dies with its process, so a killed run leaves no
   lock behind.
2. **Every write that can be interrupted leaves the old state or the new one, never half.**
   Small files are written to a temporary file and renamed over the old one
   (:func:`atomic_write_text`); checkpoints are written into ``.staging/checkpoint-N`` and renamed
   to ``checkpoint-N`` once complete (:func:`qae_lab.storage.resume.publish_dir`); the log is append-only, one
   ``fsync``-ed line per step. A process killed at any moment (Ctrl-C twice, SIGKILL, a power
   cut after the fsync) leaves at worst a cut last log line and a stale ``.staging`` folder,
   neither of which a resume mistakes for data.
3. **A resume continues the same experiment.** :func:`qae_lab.storage.resume.resume_changes` compares the settings of a
   resume with those in ``config.json``: only the fields in :data:`qae_lab.storage.resume.SAFE_ON_RESUME` may change,
   and each accepted change is recorded (an ``event`` row in ``log.jsonl`` and the ``resumes``
   list of ``config.json``), never by deleting logged steps.

Layout::

    config.json             settings (``trainer``: QAEConfig.to_dict(), ``run``: RunArgs + how it was built),
                            library versions, and every resume with what it changed
    log.jsonl               one JSON object per logged step, plus ``{"event": ...}`` rows
    log.superseded.jsonl    rows of steps that a resume trained again (they were after the last checkpoint)
    eval_before.json, eval_after.json, model/
    regime_split.json       with ``regime_eval_steps``: the held-out prompts' start success rates and their
                            hardest / easiest quarter (:mod:`qae_lab.train.regime_eval`), written before the first step
    report.html             the run's summary page (:mod:`qae_lab.lab.report`)
    checkpoint-N/           complete, resumable Trainer checkpoints (:mod:`qae_lab.storage.resume`)
    .staging/               a checkpoint being written (removed by the next save)
    .qae_lab-run.json       the run's marker, written when the folder is claimed (what --overwrite may delete)
    .qae_lab-run.lock       who holds the folder's lock (process, host, command): there while a run writes

This module is pure (files and JSON): no torch, transformers, plotting or widget import; the
report page is drawn by :mod:`qae_lab.lab.report`. Checkpoints and the rules of a resume: :mod:`qae_lab.storage.resume`; the callbacks that
write during training: :mod:`qae_lab.train.callbacks`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
import re
import shutil
import socket
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

try:  # the operating system's file locks (RunLock): fcntl on POSIX, msvcrt on Windows
    import fcntl
except ImportError:
    fcntl = None
try:
    import msvcrt
except ImportError:
    msvcrt = None

__all__ = [
    "CONFIG_NAME",
    "LOG_NAME",
    "SUPERSEDED_NAME",
    "REPORT_NAME",
    "EVAL_BEFORE",
    "EVAL_AFTER",
    "MODEL_DIR",
    "STAGING_DIR",
    "MARKER_NAME",
    "LOCK_NAME",
    "REGIME_SPLIT_NAME",
    "CHECKPOINT_NAME",
    "RunFolderError",
    "is_run_name",
    "fsync_dir",
    "atomic_write_text",
    "read_json",
    "jsonable",
    "append_line",
    "read_log_lines",
    "read_log",
    "step_rows",
    "run_files",
    "run_owned",
    "check_folder",
    "held_run",
    "unowned_files",
    "RunLock",
    "claim_fresh",
    "versions",
    "save_config",
    "write_config",
]

CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, REPORT_NAME = "config.json", "log.jsonl", "log.superseded.jsonl", "report.html"
EVAL_BEFORE, EVAL_AFTER, MODEL_DIR, STAGING_DIR = "eval_before.json", "eval_after.json", "model", ".staging"
MARKER_NAME, LOCK_NAME = ".qae_lab-run.json", ".qae_lab-run.lock"
REGIME_SPLIT_NAME = (
    "regime_split.json"  # the held-out set's start split (qae_lab.train.regime_eval), read back on a resume
)
_RUN_FILES = (
    CONFIG_NAME,
    LOG_NAME,
    SUPERSEDED_NAME,
    EVAL_BEFORE,
    EVAL_AFTER,
    REPORT_NAME,
    MODEL_DIR,
    MARKER_NAME,
    REGIME_SPLIT_NAME,
)
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")  # a Trainer checkpoint folder; group 1: its step


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: it holds another run, a damaged file, or other settings.

    A ``ValueError``, so callers that catch bad input catch it too; the CLI prints it and exits with 2.

    >>> issubclass(RunFolderError, ValueError)
    True
    """


# ---------------------------------------------------------------- atomic writes


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename, a new file) to disk; a no-op where folders cannot be opened.

    >>> import tempfile
    >>> fsync_dir(tempfile.mkdtemp()) is None
    True
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    r"""Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one, never half.

    The text goes to a temporary file beside ``path``, is flushed and ``fsync``-ed, then renamed
    over ``path`` (``os.replace`` is atomic on one file system).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = atomic_write_text(p, "1\n"); _ = atomic_write_text(p, "2\n"); p.read_text(), len(list(p.parent.iterdir()))
    ('2\n', 1)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def read_json(path: str | os.PathLike, what: str = "file", *, expect: type | None = None) -> Any:
    r"""A JSON file's content; a missing or damaged file raises :class:`RunFolderError` naming it.

    ``expect``: the type the content must have (e.g. ``dict``); other content counts as damaged.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = p.write_text('{"a": 1')
    >>> read_json(p, "run config")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: run config .../config.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 8 (char 7))
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFolderError(f"{what} {path} is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFolderError(f"{what} {path} cannot be read ({err})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{what} {path} is damaged (not JSON: {err})") from None
    except RecursionError:
        raise RunFolderError(f"{what} {path} is damaged (nested too deep to read)") from None
    if expect is not None and not isinstance(data, expect):
        raise RunFolderError(
            f"{what} {path} is damaged (a JSON {expect.__name__} is needed, it holds a {type(data).__name__})"
        )
    return data


# ---------------------------------------------------------------- the log


def jsonable(x: Any) -> Any:
    r"""x with NaN/inf as None and tuples/sets as lists, so the JSON is strict.

    >>> jsonable({"a": float("nan"), "b": (1, 2)})
    {'a': None, 'b': [1, 2]}
    """
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (str, int, bool)):
        return x
    return str(x)


def append_line(path: str | os.PathLike, row: dict) -> None:
    r"""One JSON line appended, flushed and fsync-ed: on disk before the call returns (NaN/inf become null).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> append_line(p, {"step": 1, "reward": float("nan")}); p.read_text()
    '{"step": 1, "reward": null}\n'
    """
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(jsonable(row), allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_log_lines(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    r"""``(rows, cut)``: the rows of a ``log.jsonl`` (a file or the run folder) and its cut last line, if any.

    A last line that does not parse, or lacks its newline, was being written when the process
    died: it is returned as ``cut`` (its raw text), not as a row. A bad line anywhere else
    raises :class:`RunFolderError` naming the file and the line. A missing log has no rows.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log_lines(p)
    ([{'step': 1, 'reward': 0.5}], '{"step": 2, "rew')
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    if not path.exists():
        return [], None
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    tail = lines.pop()  # "" when the file ends with its newline, else a line cut short
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if i == len(lines) - 1 and not tail:
                return rows, line
            raise RunFolderError(
                f"{path}: line {i + 1} is damaged (not JSON: {err}); only a cut last line can come from an interruption"
            ) from None
        except RecursionError:
            raise RunFolderError(f"{path}: line {i + 1} is damaged (nested too deep to read)") from None
        if not isinstance(row, dict):
            raise RunFolderError(
                f"{path}: line {i + 1} is damaged (a log row is a JSON object, got {type(row).__name__})"
            )
        rows.append(row)
    # a last line without its newline is cut, even when it parses: its write did not finish
    return rows, (tail if tail.strip() else None)


def read_log(path: str | os.PathLike, *, strict: bool = False) -> list[dict]:
    r"""The rows of a ``log.jsonl`` (a file or the run folder), in order.

    A cut last line (the process died while writing it) is dropped, unless ``strict``, when it
    raises; a bad line anywhere else always raises :class:`RunFolderError` (a ``ValueError``).
    A missing file raises ``FileNotFoundError`` naming it.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log(p)
    [{'step': 1, 'reward': 0.5}]
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"no log at {path}: no step has been logged there yet")
    rows, cut = read_log_lines(path)
    if cut is not None and strict:
        line = path.read_text(encoding="utf-8", errors="replace").rstrip("\n").count("\n") + 1
        raise RunFolderError(f"{path}: line {line}, the last, is cut short ({cut[:60]!r})")
    return rows


def step_rows(rows: list[dict]) -> list[dict]:
    r"""The training-step rows of a log, one per optimizer step, without events or the end-of-training summary.

    A step row holds a ``reward`` (the step generated) or a ``loss``: with ``num_iterations`` > 1 the steps
    that reuse a generation log the loss's metrics (``clip_ratio/*``, ``entropy``, ``ledger/*``) and no reward.

    >>> step_rows([{"step": 1, "reward": 0.5, "loss": 0.1}, {"step": 2, "loss": 0.2}, {"step": 2, "train_runtime": 3.0},
    ...            {"step": 2, "event": "resume"}])
    [{'step': 1, 'reward': 0.5, 'loss': 0.1}, {'step': 2, 'loss': 0.2}]
    """
    return [
        r
        for r in rows
        if (r.get("reward") is not None or r.get("loss") is not None) and "event" not in r and "train_runtime" not in r
    ]


# ---------------------------------------------------------------- a fresh run: its folder, its marker, its lock


def run_files(folder: str | os.PathLike) -> list[str]:
    r"""The names in ``folder`` that a run writes (config, log, evaluations, report, model, checkpoints, the run's
    marker), sorted.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "notes.txt").touch(); (d / "log.jsonl").touch(); (d / "checkpoint-2").mkdir()
    >>> run_files(d)
    ['checkpoint-2', 'log.jsonl']
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name in _RUN_FILES or CHECKPOINT_NAME.match(p.name))


def is_run_name(name: str) -> bool:
    r"""Whether a run folder uses ``name``: a file or folder a run writes (:func:`run_files`), its staging folder,
    its lock, or where a resume sets a finished run's results aside (``finished-step<S>``).

    >>> [is_run_name(n) for n in ("model", "checkpoint-3", ".staging", "finished-step2-2", LOCK_NAME, "export")]
    [True, True, True, True, True, False]
    """
    return (
        name in _RUN_FILES
        or name in (STAGING_DIR, LOCK_NAME)
        or bool(CHECKPOINT_NAME.match(name))
        or re.match(r"^finished-step\d+(-\d+)?$", name) is not None
    )


def run_owned(folder: str | os.PathLike) -> bool:
    r"""Whether a qae_lab run wrote the run-named files of ``folder``: it holds the run's own marker
    (``.qae_lab-run.json``, written when a run claims the folder), or a ``config.json`` that is a run's (its
    ``trainer`` settings and the library ``versions`` it ran with, qae_lab's among them: a run of a version
    before markers). A model folder's ``config.json`` is neither: ``--overwrite`` never deletes it.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text('{"model_type": "qwen2"}'); run_owned(d)
    False
    >>> _ = (d / MARKER_NAME).write_text('{"qae_lab_run": 1}'); run_owned(d)
    True
    """
    folder = Path(folder)
    for name, sign in (
        (MARKER_NAME, lambda d: "qae_lab_run" in d),
        (
            CONFIG_NAME,
            lambda d: (
                isinstance(d.get("trainer"), dict)
                and "qae_lab" in (d.get("versions") if isinstance(d.get("versions"), dict) else {})
            ),
        ),
    ):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and sign(data):
            return True
    return False


def check_folder(folder: str | os.PathLike) -> Path:
    r"""``folder`` as a run folder may be: not a file, not the file system's root, the home folder or a folder
    above the current one (a run writes ``config.json``, ``model/`` and its checkpoints straight into it).
    Returns the path; raises :class:`RunFolderError` naming it.

    >>> check_folder("/")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: output_dir / is the file system's root: a run writes config.json, log.jsonl, model/ and checkpoints straight into its folder; give it a folder of its own (e.g. runs/my-run)
    """
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise RunFolderError(
            f"output_dir {folder} is a file, not a folder: give a folder for the run (a new one, "
            f"e.g. {path.with_name(path.name + '-run')})"
        )
    where = path.resolve()
    why = (
        "the file system's root"
        if where == Path(where.anchor)
        else "the home folder"
        if where == Path.home().resolve()
        else "a folder above the current one"
        if Path.cwd().resolve().is_relative_to(where) and where != Path.cwd().resolve()
        else None
    )
    if why:
        raise RunFolderError(
            f"output_dir {folder} is {why}: a run writes config.json, log.jsonl, model/ and "
            f"checkpoints straight into its folder; give it a folder of its own (e.g. runs/my-run)"
        )
    return path


def held_run(folder: str | os.PathLike) -> str | None:
    r"""Whether a new run may start in ``folder``: None when it holds no run's files (:func:`run_files`),
    else the refusal, naming them and the three ways on. The one test of "is this folder fresh"
    (:func:`qae_lab.storage.resume.plan_run` decides with it, :func:`claim_fresh` guards with it).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "notes.txt").touch(); held_run(d) is None
    True
    >>> (d / "config.json").touch(); held_run(d)
    '.../ already holds a run (config.json): a new run would overwrite it. ...'
    """
    found = run_files(folder)
    if not found:
        return None
    return (
        f"{folder}/ already holds a run ({', '.join(found)}): a new run would overwrite it. Either continue it "
        f"(--resume {folder}), or replace it (--overwrite; deletes those files), or choose another folder "
        f"(--output-dir)."
    )


def unowned_files(folder: str | os.PathLike) -> str | None:
    r"""Why ``--overwrite`` may not delete ``folder``'s run-named files (None: it may): they are there, but no run
    can be shown to have written them (:func:`run_owned`).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text('{"model_type": "qwen2"}')
    >>> unowned_files(d)
    '--overwrite deletes only the files of a run: .../ holds config.json, but no run wrote them ...'
    """
    found = [n for n in run_files(folder) if n != MARKER_NAME]
    if not found or run_owned(folder):
        return None
    return (
        f"--overwrite deletes only the files of a run: {folder}/ holds {', '.join(found)}, but no run wrote "
        f"them (no {MARKER_NAME} marker, and no {CONFIG_NAME} of a run): a model folder, or other data. "
        f"Choose another --output-dir (or delete those files yourself)."
    )


def _holder() -> dict[str, Any]:
    """Who takes a lock: this process, its host, since when, its command line."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv)[:300],
    }


def _read_holder(path: Path) -> dict | None:
    try:
        h = json.loads(path.read_text(encoding="utf-8"))
        return {"pid": int(h["pid"]), "host": str(h["host"]), "since": str(h["since"]), "command": str(h["command"])}
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None


def _describe(path: Path) -> str:
    """The holder a lock file names, in words."""
    h = _read_holder(path)
    if h is None:
        return "another process (it has not written its name yet)"
    mine = h["pid"] == os.getpid() and h["host"] == socket.gethostname()
    return f"process {h['pid']} on {h['host']} since {h['since']} ({h['command']})" + (
        ", this very process" if mine else ""
    )


def _alive(path: Path) -> bool:
    """Whether the holder a lock file names still runs (where there is no flock: same host, its pid alive)."""
    h = _read_holder(path)
    if h is None:
        return False
    if h["host"] != socket.gethostname():
        return True  # another machine's process: nothing here can tell, so it counts as running
    try:
        os.kill(h["pid"], 0)  # POSIX only (this path never runs on Windows): signal 0 tests, sends nothing
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, under another user
    return True


class RunLock:
    r"""The lock of a run folder: one process writes a run at a time.

    :meth:`acquire` takes the operating system's exclusive lock on the folder itself (``flock`` on the
    folder's descriptor) and then writes who holds it (process, host, since when, command) into
    ``<folder>/.qae_lab-run.lock``; a second process (or a second trainer of the same process) is refused with
    :class:`RunFolderError` naming that holder. :meth:`release` (or leaving a ``with`` block) deletes the file
    and lets go, so a folder is left as it was, byte for byte, by a run that was refused or failed.

    A lock left by a killed process does not block: the operating system drops a process's locks when it
    ends, however it ends (SIGKILL, a crash, a closed notebook), so the folder is held by nobody and the next
    run takes it, replacing the file the dead one left. Where ``flock`` is refused (some network and FUSE file
    systems) the file alone is the lock, and a holder that no longer runs on this host is taken over; on
    Windows the file is locked with ``msvcrt.locking``, which also dies with its process.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> with RunLock(d) as lock:
    ...     RunLock(d).acquire()
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: .../ is being written by process ..., this very process: ...
    >>> RunLock(d).acquire().release(); sorted(p.name for p in d.iterdir())   # let go: nothing left behind
    []
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None  # the locked descriptor (the folder's, or the lock file's)
        self._pid: int | None = None  # the process that took it (a forked child's copy never lets go of it)
        self._file_only = False  # no flock on this file system: the lock file is the lock

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock (the folder is made if missing); refuse, naming the holder, when another one holds it."""
        if self._fd is not None:
            return self
        check_folder(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, taken = _lock_folder(self.folder)
        if taken is None:  # this file system has no flock: the lock file decides
            self._file_only = True
            fd, taken = _lock_file(self.path)
        if not taken:
            raise RunFolderError(
                f"{self.folder}/ is being written by {_describe(self.path)}: one run folder takes one process at a "
                f"time. Wait until that run ends, or choose another --output-dir."
            )
        try:
            if not self._file_only:
                atomic_write_text(self.path, json.dumps(_holder()) + "\n")
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()
        return self

    def busy(self) -> str | None:
        """Whether another holds the lock now: the refusal :meth:`acquire` would give, else None. Takes nothing and
        writes nothing (a folder that does not exist is not busy), so a dry run can ask."""
        if self._fd is not None or not self.folder.is_dir():
            return None
        fd, taken = _lock_folder(self.folder)
        if fd is not None:
            os.close(fd)
        if taken is None:
            taken = not (self.path.exists() and _alive(self.path))
        return (
            None
            if taken
            else (
                f"{self.folder}/ is being written by {_describe(self.path)}: one run folder takes "
                f"one process at a time. Wait until that run ends, or choose another --output-dir."
            )
        )

    def release(self) -> None:
        """Let go of the lock (a no-op when not held): the holder's file is deleted first, then the lock."""
        fd, self._fd = self._fd, None
        if fd is None or self._pid != os.getpid():  # not held, or a forked child's copy: the parent holds it
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the descriptor drops the operating system's lock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):  # a lock object dropped while held: the descriptor (and so the lock) goes with it
        if getattr(self, "_fd", None) is not None:
            self.release()

    def __repr__(self) -> str:
        return f"RunLock({str(self.folder)!r}, held={self.held})"


def _lock_folder(folder: Path) -> tuple[int | None, bool | None]:
    """``(descriptor, taken)``: the operating system's exclusive lock on the folder; taken is False when another
    holds it, None when it cannot be had here (Windows, or a file system without flock: descriptor None)."""
    if fcntl is None:  # Windows: folders cannot be locked
        return None, None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, False
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF):
            return None, None
        raise
    return fd, True


def _lock_file(path: Path) -> tuple[int | None, bool]:
    """Where folders cannot be locked: the lock file is the lock (Windows: locked with msvcrt, which dies with its
    process; elsewhere: created exclusively, and taken over when the holder it names no longer runs on this
    host). ``(descriptor, taken)``."""
    if msvcrt is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            os.close(fd)
            return None, False
    else:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            if _alive(path):
                return None, False
            fd = os.open(path, os.O_RDWR | os.O_TRUNC)  # a dead holder's file: taken over
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(_holder()) + "\n").encode())
    os.fsync(fd)
    return fd, True


def claim_fresh(folder: str | os.PathLike, *, overwrite: bool = False, lock: RunLock | None = None) -> list[str]:
    r"""Make ``folder`` ready for a new run, under its :class:`RunLock` (``lock``, held; taken here when None and
    let go on return): refuse one that holds another run's files unless ``overwrite``, then write the run's marker.

    Other files in the folder are left alone. With ``overwrite=True`` the previous run's files
    (:func:`run_files`, and a stale ``.staging``) are deleted: the caller chose that explicitly, and only when a
    run wrote them (:func:`run_owned`; otherwise refused, :func:`unowned_files`).

    Returns:
        the names deleted (empty unless ``overwrite``).

    Raises:
        RunFolderError: the folder holds a run and ``overwrite`` is False (the message lists the files and the
        three ways on), or ``overwrite`` meets files no run wrote, or another process holds the lock.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "log.jsonl").write_text('{"step": 1}\n')
    >>> claim_fresh(d)
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: .../ already holds a run (log.jsonl): ...
    >>> claim_fresh(d, overwrite=True)
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: --overwrite deletes only the files of a run: .../ holds log.jsonl, but no run wrote them ...
    >>> _ = (d / MARKER_NAME).write_text('{"qae_lab_run": 1}')
    >>> claim_fresh(d, overwrite=True), run_files(d)
    (['log.jsonl'], ['.qae_lab-run.json'])
    """
    folder = check_folder(folder)
    own = lock is None
    lock = (lock or RunLock(folder)).acquire()
    try:
        held = held_run(folder)
        if held and not overwrite:
            raise RunFolderError(held)
        unowned = unowned_files(folder) if overwrite else None
        if unowned:
            raise RunFolderError(unowned)
        found = [n for n in run_files(folder) if n != MARKER_NAME]
        for name in found:
            path = folder / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        shutil.rmtree(folder / STAGING_DIR, ignore_errors=True)
        atomic_write_text(folder / MARKER_NAME, json.dumps({"qae_lab_run": 1, "claimed": _holder()}) + "\n")
    finally:
        if own:
            lock.release()
    return found if overwrite else []


def versions() -> dict[str, str]:
    r"""Versions of the libraries a run's numbers depend on (read from the installed packages' metadata).

    >>> sorted(versions())
    ['python', 'qae_lab', 'torch', 'transformers', 'trl']
    """

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        **{name: installed(name.replace("_", "-")) for name in ("qae_lab", "trl", "transformers", "torch")},
        "python": platform.python_version(),
    }


def save_config(output_dir: str | os.PathLike, data: dict) -> Path:
    r"""Write a ``config.json`` dict atomically (strict JSON: NaN/inf as null), e.g. one updated by a resume.

    >>> import tempfile
    >>> json.loads(save_config(tempfile.mkdtemp(), {"run": {"n": 1}, "x": float("nan")}).read_text())
    {'run': {'n': 1}, 'x': None}
    """
    return atomic_write_text(Path(output_dir) / CONFIG_NAME, json.dumps(jsonable(data), indent=1) + "\n")


def write_config(output_dir: str | os.PathLike, args, *, preset: str | None = None, run: dict | None = None) -> Path:
    r"""Write ``config.json`` (atomically): ``{"preset", "run", "trainer": args.to_dict(), "versions", "resumes"}``.

    ``args``: anything with ``to_dict()`` (a ``QAEConfig``).

    >>> import tempfile, types
    >>> args = types.SimpleNamespace(to_dict=lambda: {"quantile_k": 0.4, "max_steps": 20})
    >>> path = write_config(tempfile.mkdtemp(), args, preset="cpu-demo", run={"n_train": 64})
    >>> data = json.loads(path.read_text()); data["trainer"], data["run"], sorted(data["versions"])[:2]
    ({'quantile_k': 0.4, 'max_steps': 20}, {'n_train': 64}, ['python', 'qae_lab'])
    """
    data = {"preset": preset, "run": run or {}, "trainer": args.to_dict(), "versions": versions(), "resumes": []}
    return save_config(output_dir, data)
