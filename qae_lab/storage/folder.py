r"""The run folder on disk: what a run writes there, and the rules that keep it whole.

A run folder is someone's data. Three rules hold for everything qae_lab writes into one:

1. Nothing is truncated or written over without an explicit choice: a new run refuses a folder that holds a run, and
   ``--overwrite`` deletes that run's files (:func:`run_files`, its trackers' among them) and only those.
2. An interrupted write leaves the old state or the new one: small files are written to a temporary name and renamed
   (:func:`atomic_write_text`); the log grows by whole, fsync-ed lines (:func:`append_lines`).
3. Every file is opened as what it claims to be, through one opener (``_open_regular``): a regular file of the run's
   own. A symbolic link is never written through or read through, a pipe never waited on; each is refused, named.

Implementer's notes: docs/implementation.md, section ``qae_lab.storage.folder``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import platform
import re
import shutil
import socket
import stat
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

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
    "TENSORBOARD_DIR",
    "EMISSIONS_NAME",
    "COMPLETIONS_DIR",
    "TRACKER_FILES",
    "CHECKPOINT_NAME",
    "RunFolderError",
    "is_run_name",
    "symlinks",
    "irregular",
    "read_text",
    "open_to_read",
    "new_folder",
    "fsync_dir",
    "atomic_write_text",
    "read_json",
    "jsonable",
    "append_line",
    "append_lines",
    "log_row_problem",
    "read_log_lines",
    "read_log",
    "step_rows",
    "run_files",
    "run_owned",
    "check_folder",
    "holder",
    "RunLock",
    "versions",
    "save_config",
    "write_config",
]

CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, REPORT_NAME = "config.json", "log.jsonl", "log.superseded.jsonl", "report.html"
EVAL_BEFORE, EVAL_AFTER, MODEL_DIR, STAGING_DIR = "eval_before.json", "eval_after.json", "model", ".staging"
MARKER_NAME, LOCK_NAME = ".qae_lab-run.json", ".qae_lab-run.lock"
REGIME_SPLIT_NAME = "regime_split.json"  # the held-out set's start split (qae_lab.train.regime_eval)
# the trackers' and TRL's default names beside a run's files (TensorBoard runs/<date>_<host>/, codecarbon's csv, TRL's
# completions/*.parquet): the run's (run_files), deleted with it by --overwrite, continued by a resume
TENSORBOARD_DIR, EMISSIONS_NAME, COMPLETIONS_DIR = "runs", "emissions.csv", "completions"
TRACKER_FILES = (TENSORBOARD_DIR, EMISSIONS_NAME, COMPLETIONS_DIR)
_RUN_FILES = (CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, EVAL_BEFORE, EVAL_AFTER, REPORT_NAME, MODEL_DIR, MARKER_NAME)
_RUN_FILES += (REGIME_SPLIT_NAME,)
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)\Z")  # a Trainer checkpoint folder (no "\n" after); group 1: its step
_FINISHED_NAME = re.compile(r"^finished-step\d+(-\d+)?$")  # where a resume sets a finished run's results aside
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX: open the name itself, never the place a link names (Windows: lstat)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a named pipe opens at once (and is then refused), never waits for a writer


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: another run, a damaged file, other settings. A ``ValueError``: the CLI
    prints it and exits with 2.

    >>> issubclass(RunFolderError, ValueError)
    True
    """


# ---------------------------------------------------------------- files opened as what they claim to be


def _kind(mode: int) -> str:
    """What a file is, in words, from its ``lstat`` mode."""
    kinds = {"l": "a symbolic link", "d": "a folder", "p": "a named pipe", "s": "a socket", "c": "a device"}
    return kinds.get(stat.filemode(mode)[0].replace("b", "c"), "a file")


def irregular(path: str | os.PathLike) -> str | None:
    r"""``'<path> is a symbolic link (to <target>), not a regular file'`` (or a folder, ...); None for a regular file
    or none.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "log.jsonl").symlink_to("/elsewhere/log.jsonl")
    >>> irregular(d / "log.jsonl"), irregular(d / "missing.jsonl")
    ('.../log.jsonl is a symbolic link (to /elsewhere/log.jsonl), not a regular file', None)
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    target = f" (to {os.readlink(path)})" if stat.S_ISLNK(mode) else ""
    return f"{path} is {_kind(mode)}{target}, not a regular file"


def _open_regular(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` of a regular file only: a link is never followed (``O_NOFOLLOW``, else an ``lstat`` first), a pipe
    never waited on; anything else raises :class:`RunFolderError` naming it.
    """
    if not _NOFOLLOW:
        problem = irregular(path)
        if problem:
            raise RunFolderError(problem)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | getattr(os, "O_BINARY", 0), mode)
    except OSError as err:
        problem = irregular(path) if err.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO) else None
        if problem:
            raise RunFolderError(problem) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise RunFolderError(f"{path} is {_kind(st.st_mode)}, not a regular file")
    return fd


def open_to_read(path: str | os.PathLike) -> BinaryIO:
    r"""A regular file opened for reading, in binary (``_open_regular``); a missing file raises ``FileNotFoundError``.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "a.bin").write_bytes(b"PK"); (d / "b.bin").symlink_to(d / "a.bin")
    >>> with open_to_read(d / "a.bin") as f: f.read()
    b'PK'
    >>> open_to_read(d / "b.bin")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: .../b.bin is a symbolic link (to .../a.bin), not a regular file
    """
    return os.fdopen(_open_regular(Path(path), os.O_RDONLY), "rb")


def read_text(path: str | os.PathLike, *, limit: int = -1, errors: str = "strict") -> str:
    r"""The UTF-8 text of a regular file (:func:`open_to_read`): at most ``limit`` bytes when ``limit`` >= 0.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.json"; _ = p.write_text('{"a": 1}'); read_text(p, limit=4)
    '{"a"'
    """
    with open_to_read(path) as f:
        return f.read(limit).decode("utf-8", errors=errors)


def symlinks(folder: str | os.PathLike) -> list[tuple[str, str]]:
    r"""``(relative path, target)`` of every symbolic link in ``folder`` and below (none followed), sorted.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "sub").mkdir(); (d / "sub" / "optimizer.pt").symlink_to("/nowhere")
    >>> symlinks(d)
    [('sub/optimizer.pt', '/nowhere')]
    """
    folder, found = Path(folder), []
    for root, dirs, files in os.walk(folder):  # followlinks=False: a link to a folder is listed, not entered
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                found.append((path.relative_to(folder).as_posix(), os.readlink(path)))
    return sorted(found)


# ---------------------------------------------------------------- atomic writes


def new_folder(path: str | os.PathLike) -> Path:
    r"""An empty folder made anew at ``path`` for a staged write (a leftover removed, a link unlinked, never followed);
    its parent is made if missing and must not be a link.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "x").symlink_to("/elsewhere"); new_folder(d / "x").is_symlink()
    False
    """
    path = Path(path)
    if path.parent.is_symlink():
        raise RunFolderError(f"{path.parent} is a symbolic link (to {os.readlink(path.parent)}): move it away")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    os.mkdir(path)
    return path


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
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    r"""Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one: a temporary file
    beside it (created anew), fsync-ed, then ``os.replace``. Only a regular file is replaced.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = atomic_write_text(p, "1\n"); _ = atomic_write_text(p, "2\n"); p.read_text(), len(list(p.parent.iterdir()))
    ('2\n', 1)
    """
    path = Path(path)
    problem = irregular(path)
    if problem:
        raise RunFolderError(f"{problem}: qae_lab replaces only regular files; move it away (nothing was written)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if tmp.is_symlink() or tmp.is_file():  # a leftover (or a planted link): removed, not written through
            tmp.unlink()
        elif os.path.lexists(tmp):
            raise RunFolderError(f"{tmp} is in the way of writing {path.name}: {irregular(tmp)}; move it away")
        with os.fdopen(_open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def read_json(path: str | os.PathLike, what: str = "file", *, expect: type | None = None) -> Any:
    r"""A JSON file's content; a missing, damaged or irregular file (or content not of type ``expect``) raises
    :class:`RunFolderError` naming it.

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
        text = read_text(path)
    except FileNotFoundError:
        raise RunFolderError(f"{what} {path} is missing") from None
    except RunFolderError as err:
        raise RunFolderError(f"{what} {err}: a run's files are regular files of its own") from None
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
    r"""``x`` with NaN/inf as None and tuples/sets as lists, so the JSON is strict.

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


def append_lines(path: str | os.PathLike, rows: list[dict]) -> None:
    r"""JSON lines (NaN/inf as null) appended in one fsync-ed write to a regular file (created if missing).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.superseded.jsonl"
    >>> append_lines(p, [{"step": 3, "reward": 0.5}, {"cut_line": '{"step": 4, "rew'}]); print(p.read_text(), end="")
    {"step": 3, "reward": 0.5}
    {"cut_line": "{\"step\": 4, \"rew"}
    """
    text = "".join(json.dumps(jsonable(row), allow_nan=False) + "\n" for row in rows)
    try:
        fd = _open_regular(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except RunFolderError as err:
        raise RunFolderError(
            f"{err}: qae_lab appends only to a regular file of the run's own (nothing was written)"
        ) from None
    with os.fdopen(fd, "ab") as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def append_line(path: str | os.PathLike, row: dict) -> None:
    r"""One JSON line appended (:func:`append_lines`).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> append_line(p, {"step": 1, "reward": float("nan")}); p.read_text()
    '{"step": 1, "reward": null}\n'
    """
    append_lines(path, [row])


def log_row_problem(row: Any) -> str | None:
    r"""What is wrong with a row of a run's log (None: nothing): a JSON object whose ``step`` is a whole number >= 0.

    >>> log_row_problem({"step": 3, "reward": 0.5}) is None
    True
    >>> log_row_problem({"step": "1", "reward": 0.5}), log_row_problem({"reward": 0.5})
    ('its step is "1" (a string); a log row\'s step is a whole number >= 0', "it has no step; a log row's step is a whole number >= 0")
    """
    if not isinstance(row, dict):
        return f"a log row is a JSON object, got {type(row).__name__}"
    if "step" not in row:
        return "it has no step; a log row's step is a whole number >= 0"
    step = row["step"]
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return None
    kinds = {bool: "a boolean", int: "below 0", float: "not a whole number", str: "a string", list: "a list"}
    kind = {**kinds, dict: "an object"}.get(type(step))  # JSON's types, exactly
    said = json.dumps(step)
    return f"its step is {said[:40]}{f' ({kind})' if kind else ''}; a log row's step is a whole number >= 0"


def read_log_lines(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    r"""``(rows, cut)``: the rows of a ``log.jsonl`` (a file or the run folder) and its cut last line, if any: one that
    does not parse or lacks its newline (an interrupted write). A bad line anywhere else (:func:`log_row_problem`)
    raises :class:`RunFolderError` naming it. A missing log has no rows.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log_lines(p)
    ([{'step': 1, 'reward': 0.5}], '{"step": 2, "rew')
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    try:
        text = read_text(path, errors="replace")
    except FileNotFoundError:
        return [], None
    except RunFolderError as err:
        raise RunFolderError(f"{err}: a run's log is a regular file of its own") from None
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
        problem = log_row_problem(row)
        if problem:
            raise RunFolderError(f"{path}: line {i + 1} is damaged ({problem})")
        rows.append(row)
    # a last line without its newline is cut, even when it parses: its write did not finish
    return rows, (tail if tail.strip() else None)


def read_log(path: str | os.PathLike, *, strict: bool = False) -> list[dict]:
    r"""The rows of a ``log.jsonl`` (a file or the run folder): a cut last line dropped (``strict``: raises).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log(p)
    [{'step': 1, 'reward': 0.5}]
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no log at {path}: no step has been logged there yet")
    rows, cut = read_log_lines(path)
    if cut is not None and strict:
        line = read_text(path, errors="replace").rstrip("\n").count("\n") + 1
        raise RunFolderError(f"{path}: line {line}, the last, is cut short ({cut[:60]!r})")
    return rows


def step_rows(rows: list[dict]) -> list[dict]:
    r"""The training-step rows of a log: a ``reward`` or a ``loss`` (steps that reuse a generation log no reward), no
    events, no end-of-training summary.

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
    r"""The names in ``folder`` that a run writes (every :func:`is_run_name` but the lock), sorted.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "notes.txt").touch(); (d / "log.jsonl").touch(); (d / "checkpoint-2").mkdir()
    >>> (d / "runs").mkdir(); run_files(d)
    ['checkpoint-2', 'log.jsonl', 'runs']
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if is_run_name(p.name) and p.name != LOCK_NAME)


def is_run_name(name: str) -> bool:
    r"""Whether a run folder uses ``name``: what a run or its trackers write, its staging folder, its lock, or a
    ``finished-step<S>``.

    >>> [is_run_name(n) for n in ("model", "checkpoint-3", ".staging", "finished-step2-2", LOCK_NAME, "runs", "export")]
    [True, True, True, True, True, True, False]
    """
    return _is_own_name(name) or name in _RUN_FILES or name in TRACKER_FILES


def _is_own_name(name: str) -> bool:
    """The names only a run uses (never met far from a run, unlike ``model`` or ``config.json``)."""
    return (
        name in (STAGING_DIR, MARKER_NAME, LOCK_NAME)
        or bool(CHECKPOINT_NAME.match(name))
        or bool(_FINISHED_NAME.match(name))
    )


def run_owned(folder: str | os.PathLike) -> bool:
    r"""Whether a qae_lab run wrote ``folder``'s run-named files: its marker, or a run's ``config.json`` (``trainer``
    settings and qae_lab among its ``versions``), each a regular file; a model folder's ``config.json`` is neither.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text('{"model_type": "qwen2"}'); run_owned(d)
    False
    >>> _ = (d / MARKER_NAME).write_text('{"qae_lab_run": 1}'); run_owned(d)
    True
    """

    def read(name: str) -> dict:  # a regular file only: a link to another run's marker proves nothing
        try:
            data = json.loads(read_text(Path(folder) / name))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    marker, config = read(MARKER_NAME), read(CONFIG_NAME)
    versions = config.get("versions")
    return "qae_lab_run" in marker or (
        isinstance(config.get("trainer"), dict) and isinstance(versions, dict) and "qae_lab" in versions
    )


def check_folder(folder: str | os.PathLike, what: str = "output_dir") -> Path:
    r"""``folder`` as a run folder (``what``: ``output_dir``) or an export (``out``) may be; returns the path, or raises
    :class:`RunFolderError` naming what is wrong and the form allowed.

    * A folder or a path to make one (no part a file); not the root, the home folder or a folder above the current one.
    * No name a run folder uses for itself, nor inside one (links resolved, case ignored): the names only a run uses
      nowhere; the common ones (``model``, ``config.json``, ...) not the folder's own name, nor a parent's beside a
      run's files; the trackers' (``runs``, ...) only beside a run's own names, so ``runs/my-run`` is fine.

    >>> check_folder("/")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: output_dir / is the file system's root: a run writes config.json, log.jsonl, model/ and checkpoints straight into its folder; give it a folder of its own (e.g. runs/my-run)
    >>> check_folder("runs/x/.staging/y")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: output_dir runs/x/.staging/y: .staging is a name the run folder uses for itself (where a checkpoint is written before it is renamed into place), so no run or export may be it or lie inside it: choose another folder (e.g. .../runs/x/staging-run/y)
    """
    path, made = Path(folder), "export" if what == "out" else "run"
    where, full = path.resolve(), Path.cwd() / path
    for whole in (full, where):  # as written, and where it leads
        parts = whole.parts
        for i, name in enumerate(parts[1:], 1):
            key, parent = name.casefold(), Path(*parts[:i])  # MODEL is model where names ignore case (macOS, Windows)
            if (
                _is_own_name(key)
                or (key in _RUN_FILES and (i == len(parts) - 1 or _beside_a_run(parent, key)))
                or (key in TRACKER_FILES and _beside_a_run(parent, key, own=True))
            ):
                instead = Path(*parts[:i], f"{name.lstrip('.')}-{made}", *parts[i + 1 :])
                raise RunFolderError(
                    f"{what} {folder}: {name} is a name the run folder uses for itself ({_role(key)}), so no run or "
                    f"export may be it or lie inside it: choose another folder (e.g. {instead})"
                )
    for part in (full, *full.parents):  # not resolved: a link among the parts is judged as the link it is
        try:
            mode = os.lstat(part).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there yet: its parent decides
        except OSError:
            break  # cannot be looked at (permissions): making the folder will say so
        try:
            kind = f"a symbolic link to {_kind(os.stat(part).st_mode)}" if stat.S_ISLNK(mode) else _kind(mode)
        except OSError:
            kind = "a symbolic link to nothing"
        if kind.endswith("a folder"):  # a folder, or a link to one
            break
        raise RunFolderError(
            f"{what} {path} is {kind}, not a folder: give a folder for the {made} (a new one, e.g. "
            f"{path.with_name(path.name + '-run')})"
            if part == full
            else f"{what} {path}: {part} is {kind}, not a folder, so nothing can be made inside it: give a path whose "
            f"parts are folders (e.g. {part.parent / (part.name + '-runs') / full.relative_to(part)})"
        )
    cwd = Path.cwd().resolve()
    for why, wide in (
        ("the file system's root", where == Path(where.anchor)),
        ("the home folder", where == Path.home().resolve()),
        ("a folder above the current one", cwd.is_relative_to(where) and where != cwd),
    ):
        if wide:
            writes, example = _WRITES[made]
            raise RunFolderError(
                f"{what} {folder} is {why}: {writes} straight into its folder; give it a folder of its own "
                f"(e.g. {example})"
            )
    return path


_WRITES = {  # what a run and an export write into their folder, and a folder to give them
    "run": ("a run writes config.json, log.jsonl, model/ and checkpoints", "runs/my-run"),
    "export": ("an export writes model.safetensors, config.json and the tokenizer", "exports/my-model"),
}


def _beside_a_run(parent: Path, name: str, *, own: bool = False) -> bool:
    """Whether ``parent`` holds a run's files besides ``name``; with ``own``, only the names a run alone uses."""
    sign = _is_own_name if own else (lambda n: _is_own_name(n) or n in _RUN_FILES)
    try:
        return any(sign(n.casefold()) and n.casefold() != name for n in os.listdir(parent))
    except OSError:  # missing, or not to be listed: nothing there can be shown to be a run
        return False


def _role(name: str) -> str:
    """What a name a run folder uses is for, in words."""
    if CHECKPOINT_NAME.match(name):
        return "a checkpoint, which the trainer's rotation deletes"
    if _FINISHED_NAME.match(name):
        return "where a resume sets a finished run's model and evaluation aside"
    return {
        STAGING_DIR: "where a checkpoint is written before it is renamed into place",
        MARKER_NAME: "the run's marker",
        LOCK_NAME: "the run's lock",
        MODEL_DIR: "the trained model",
        TENSORBOARD_DIR: "the run's TensorBoard logs",
        EMISSIONS_NAME: "the run's codecarbon emissions",
        COMPLETIONS_DIR: "the run's logged completions (TRL's log_completions)",
    }.get(name, "a file a run writes")


def holder() -> dict[str, Any]:
    r"""Who takes a lock (or claims a folder): this process, its host, since when, its command.

    >>> sorted(holder())
    ['command', 'host', 'pid', 'since']
    """
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv)[:300],
    }


def _lock_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a run folder's lock file (None: it can): a regular file with one name."""
    problem = irregular(path)
    if problem is None:
        try:
            links = os.lstat(path).st_nlink
        except FileNotFoundError:
            return None
        if links == 1:
            return None
        problem = f"{path} has {links} names (hard links), not one"
    return (
        f"{problem}: a run folder's lock is a regular file of its own, written only by the run that holds it; "
        f"remove it if no run is writing this folder"
    )


def _lock_folder(folder: Path) -> tuple[int | None, bool | None]:
    """``(descriptor, taken)`` of the folder's flock; taken False: another holds it, None: no flock here."""
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


class RunLock:
    r"""The lock of a run folder: one process writes a run at a time.

    :meth:`acquire` takes ``flock`` on the folder, then writes the holder into ``.qae_lab-run.lock``; another taker is
    refused, the holder named. :meth:`release` deletes the file and lets go. The operating system drops a killed
    process's lock. Where ``flock`` is refused (some network file systems) the file alone is the lock, a dead holder on
    this host taken over; on Windows the file is locked with ``msvcrt.locking``.

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

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock (the folder is made if missing); refuse, naming the holder, when another holds it."""
        if self._fd is not None:
            return self
        check_folder(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        problem = _lock_problem(self.path)
        if problem:
            raise RunFolderError(problem)
        fd, taken = _lock_folder(self.folder)
        file_only = taken is None  # this file system has no flock: the lock file decides
        if file_only:
            fd, taken = self._lock_file()
        if not taken:
            raise RunFolderError(self._held_elsewhere())
        try:
            if not file_only:
                atomic_write_text(self.path, json.dumps(holder()) + "\n")
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()
        return self

    def _lock_file(self) -> tuple[int | None, bool]:
        """``(descriptor, taken)`` of the lock file as the lock (Windows: msvcrt; elsewhere created exclusively, taken
        over when its holder no longer runs on this host), the holder written through that descriptor."""
        if msvcrt is not None:
            fd = _open_regular(self.path, os.O_RDWR | os.O_CREAT)
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            except OSError:
                os.close(fd)
                return None, False
        else:
            try:
                fd = _open_regular(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                if self._alive():
                    return None, False
                fd = _open_regular(self.path, os.O_RDWR)  # a dead holder's file: taken over (emptied below)
        if os.fstat(fd).st_nlink != 1:  # another name of the same file (a hard link) would be rewritten too
            os.close(fd)
            raise RunFolderError(_lock_problem(self.path) or f"{self.path} has several names (hard links), not one")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder()) + "\n").encode())
        os.fsync(fd)
        return fd, True

    def _holder(self) -> dict | None:
        """The holder the lock file names (None: none, or no regular file: never read through a link)."""
        try:
            h = json.loads(read_text(self.path, limit=4096))
            return {
                "pid": int(h["pid"]),
                "host": str(h["host"]),
                "since": str(h["since"]),
                "command": str(h["command"]),
            }
        except (OSError, ValueError, TypeError, KeyError, RecursionError):  # RunFolderError is a ValueError
            return None

    def _alive(self) -> bool:
        """Whether the holder the lock file names still runs (where there is no flock: same host, its pid alive)."""
        h = self._holder()
        if msvcrt is not None:  # Windows: os.kill(pid, 0) would send CTRL_C_EVENT; the file's own lock answers
            return h is not None and self._file_locked()
        if h is None or h["host"] != socket.gethostname():
            return h is not None  # another machine's process: nothing here can tell, so it counts as running
        try:
            os.kill(h["pid"], 0)  # POSIX: signal 0 tests, sends nothing
        except ProcessLookupError:
            return False
        except OSError:
            pass  # it exists, under another user
        return True

    def _file_locked(self) -> bool:
        """Windows: whether another descriptor holds the lock file's ``msvcrt`` lock (probed, let go at once)."""
        try:
            fd = _open_regular(self.path, os.O_RDWR)
        except OSError:
            return False
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return True
        else:
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            return False
        finally:
            os.close(fd)

    def busy(self) -> str | None:
        """The refusal :meth:`acquire` would give now, else None; takes and writes nothing (for a dry run)."""
        if self._fd is not None or not self.folder.is_dir():
            return None
        problem = _lock_problem(self.path)
        if problem:
            return problem
        fd, taken = _lock_folder(self.folder)
        if fd is not None:
            os.close(fd)
        if taken is None:
            taken = not (self.path.exists() and self._alive())
        return None if taken else self._held_elsewhere()

    def _held_elsewhere(self) -> str:
        """The one refusal of a folder another process holds, naming that process."""
        h = self._holder()
        who = (
            f"process {h['pid']} on {h['host']} since {h['since']} ({h['command']})"
            + (", this very process" if (h["pid"], h["host"]) == (os.getpid(), socket.gethostname()) else "")
            if h
            else "another process (it has not written its name yet)"
        )
        return (
            f"{self.folder}/ is being written by {who}: one run folder takes one process at a time. Wait until that "
            f"run ends, or choose another --output-dir."
        )

    def release(self) -> None:
        """Let go (a no-op when not held): the holder's file is deleted first, then the lock."""
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


def versions() -> dict[str, str]:
    r"""Versions of the libraries a run's numbers depend on.


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
    r"""Write a ``config.json`` dict atomically (strict JSON: NaN/inf as null).

    >>> import tempfile
    >>> json.loads(save_config(tempfile.mkdtemp(), {"run": {"n": 1}, "x": float("nan")}).read_text())
    {'run': {'n': 1}, 'x': None}
    """
    return atomic_write_text(Path(output_dir) / CONFIG_NAME, json.dumps(jsonable(data), indent=1) + "\n")


def write_config(output_dir: str | os.PathLike, args, *, preset: str | None = None, run: dict | None = None) -> Path:
    r"""Write ``config.json``: ``{"preset", "run", "trainer": args.to_dict(), "versions", "resumes"}``.

    >>> import tempfile, types
    >>> args = types.SimpleNamespace(to_dict=lambda: {"quantile_k": 0.4, "max_steps": 20})
    >>> path = write_config(tempfile.mkdtemp(), args, preset="cpu-demo", run={"n_train": 64})
    >>> data = json.loads(path.read_text()); data["trainer"], data["run"], sorted(data["versions"])[:2]
    ({'quantile_k': 0.4, 'max_steps': 20}, {'n_train': 64}, ['python', 'qae_lab'])
    """
    data = {"preset": preset, "run": run or {}, "trainer": args.to_dict(), "versions": versions(), "resumes": []}
    return save_config(output_dir, data)
