r"""The run folder on disk: what a run writes there, and the rules that keep it whole.

A run folder is someone's data. Three rules hold for everything qae_lab writes into one:

1. **Nothing is replaced without an explicit choice.** A new run refuses a folder that holds
   another run's files (:func:`held_run`, asked by the one resume plan, :func:`qae_lab.resume.plan_run`;
   :func:`claim_fresh` carries a fresh plan out): resume it, pass ``overwrite=True``
   (``--overwrite``), or pick another folder.
2. **Every write that can be interrupted leaves the old state or the new one, never half.**
   Small files are written to a temporary file and renamed over the old one
   (:func:`atomic_write_text`); checkpoints are written into ``.staging/checkpoint-N`` and renamed
   to ``checkpoint-N`` once complete (:func:`qae_lab.checkpoints.publish_dir`); the log is append-only, one
   ``fsync``-ed line per step. A process killed at any moment (Ctrl-C twice, SIGKILL, a power
   cut after the fsync) leaves at worst a cut last log line and a stale ``.staging`` folder,
   neither of which a resume mistakes for data.
3. **A resume continues the same experiment.** :func:`qae_lab.checkpoints.resume_changes` compares the settings of a
   resume with those in ``config.json``: only the fields in :data:`qae_lab.checkpoints.SAFE_ON_RESUME` may change,
   and each accepted change is recorded (an ``event`` row in ``log.jsonl`` and the ``resumes``
   list of ``config.json``), never by deleting logged steps.

Layout::

    config.json             settings (``trainer``: QAEConfig.to_dict(), ``run``: RunArgs + how it was built),
                            library versions, and every resume with what it changed
    log.jsonl               one JSON object per logged step, plus ``{"event": ...}`` rows
    log.superseded.jsonl    rows of steps that a resume trained again (they were after the last checkpoint)
    eval_before.json, eval_after.json, model/
    report.html             the run's summary page (:mod:`qae_lab.report`)
    checkpoint-N/           complete, resumable Trainer checkpoints (:mod:`qae_lab.checkpoints`)
    .staging/               a checkpoint being written (removed by the next save)

This module is pure (files and JSON): no torch, transformers, plotting or widget import; the
report page is drawn by :mod:`qae_lab.report`. Checkpoints and the rules of a resume: :mod:`qae_lab.checkpoints`; the callbacks that
write during training: :mod:`qae_lab.callbacks`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_NAME", "LOG_NAME", "SUPERSEDED_NAME", "REPORT_NAME", "EVAL_BEFORE", "EVAL_AFTER", "MODEL_DIR",
           "STAGING_DIR", "CHECKPOINT_NAME", "RunFolderError", "is_run_name", "fsync_dir", "atomic_write_text", "read_json", "jsonable", "append_line",
           "read_log_lines", "read_log", "step_rows", "run_files", "held_run", "claim_fresh", "versions", "save_config",
           "write_config"]

CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, REPORT_NAME = "config.json", "log.jsonl", "log.superseded.jsonl", "report.html"
EVAL_BEFORE, EVAL_AFTER, MODEL_DIR, STAGING_DIR = "eval_before.json", "eval_after.json", "model", ".staging"
_RUN_FILES = (CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, EVAL_BEFORE, EVAL_AFTER, REPORT_NAME, MODEL_DIR)
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


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    r"""A JSON file's content; a missing or damaged file raises :class:`RunFolderError` naming it.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = p.write_text('{"a": 1')
    >>> read_json(p, "run config")
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: run config .../config.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 8 (char 7))
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFolderError(f"{what} {path} is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFolderError(f"{what} {path} cannot be read ({err})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{what} {path} is damaged (not JSON: {err})") from None


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
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1 and not tail:
                return rows, line
            raise RunFolderError(f"{path}: line {i + 1} is damaged (not JSON: {err}); only a cut last line "
                                 f"can come from an interruption") from None
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
    return [r for r in rows if (r.get("reward") is not None or r.get("loss") is not None) and "event" not in r
            and "train_runtime" not in r]


# ---------------------------------------------------------------- a fresh run, its config

def run_files(folder: str | os.PathLike) -> list[str]:
    r"""The names in ``folder`` that a run writes (config, log, evaluations, report, model, checkpoints), sorted.

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
    or where a resume sets a finished run's results aside (``finished-step<S>``).

    >>> [is_run_name(n) for n in ("model", "checkpoint-3", ".staging", "finished-step2-2", "export")]
    [True, True, True, True, False]
    """
    return (name in _RUN_FILES or name == STAGING_DIR or bool(CHECKPOINT_NAME.match(name))
            or re.match(r"^finished-step\d+(-\d+)?$", name) is not None)


def held_run(folder: str | os.PathLike) -> str | None:
    r"""Whether a new run may start in ``folder``: None when it holds no run's files (:func:`run_files`),
    else the refusal, naming them and the three ways on. The one test of "is this folder fresh"
    (:func:`qae_lab.resume.plan_run` decides with it, :func:`claim_fresh` guards with it).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "notes.txt").touch(); held_run(d) is None
    True
    >>> (d / "config.json").touch(); held_run(d)
    '.../ already holds a run (config.json): a new run would overwrite it. ...'
    """
    found = run_files(folder)
    if not found:
        return None
    return (f"{folder}/ already holds a run ({', '.join(found)}): a new run would overwrite it. Either continue it "
            f"(--resume {folder}), or replace it (--overwrite; deletes those files), or choose another folder "
            f"(--output-dir).")


def claim_fresh(folder: str | os.PathLike, *, overwrite: bool = False) -> list[str]:
    r"""Make ``folder`` ready for a new run; refuse one that holds another run's files unless ``overwrite``.

    Other files in the folder are left alone. With ``overwrite=True`` the previous run's files
    (:func:`run_files`, and a stale ``.staging``) are deleted: the caller chose that explicitly.

    Returns:
        the names deleted (empty unless ``overwrite``).

    Raises:
        RunFolderError: the folder holds a run and ``overwrite`` is False; the message lists the
        files and the three ways on.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "log.jsonl").write_text('{"step": 1}\n')
    >>> claim_fresh(d)
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: .../ already holds a run (log.jsonl): ...
    >>> claim_fresh(d, overwrite=True), run_files(d)
    (['log.jsonl'], [])
    """
    folder = Path(folder)
    held = held_run(folder)
    if held and not overwrite:
        raise RunFolderError(held)
    found = run_files(folder)
    for name in found:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.rmtree(folder / STAGING_DIR, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
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

    return {**{name: installed(name.replace("_", "-")) for name in ("qae_lab", "trl", "transformers", "torch")},
            "python": platform.python_version()}


def save_config(output_dir: str | os.PathLike, data: dict) -> Path:
    r"""Write a ``config.json`` dict atomically (strict JSON: NaN/inf as null), e.g. one updated by a resume.

    >>> import tempfile
    >>> json.loads(save_config(tempfile.mkdtemp(), {"run": {"n": 1}, "x": float("nan")}).read_text())
    {'run': {'n': 1}, 'x': None}
    """
    return atomic_write_text(Path(output_dir) / CONFIG_NAME, json.dumps(jsonable(data), indent=1) + "\n")


def write_config(output_dir: str | os.PathLike, args, *, preset: str | None = None,
                 run: dict | None = None) -> Path:
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
