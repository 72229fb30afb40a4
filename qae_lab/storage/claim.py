r"""A new run in a folder: whether it may start there, what ``--overwrite`` may delete, and the claim itself.

``--overwrite`` deletes a run's files only when a run wrote them and each may go, all decided before anything is
deleted; :func:`qae_lab.storage.resume.plan_run` asks the same questions first, so a dry run gives the same refusal.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from qae_lab.storage.folder import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    LOCK_NAME,
    MARKER_NAME,
    MODEL_DIR,
    STAGING_DIR,
    RunFolderError,
    RunLock,
    atomic_write_text,
    check_folder,
    holder,
    run_files,
    run_owned,
)

__all__ = ["claim_fresh", "fresh_refusal", "held_run", "overwrite_refusal", "removal_problem", "unowned_files"]


def held_run(folder: str | os.PathLike) -> str | None:
    r"""None when ``folder`` holds no run's files (:func:`~qae_lab.storage.folder.run_files`), else the refusal, naming
    them and the three ways on.

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
    r"""Why ``--overwrite`` may not delete ``folder``'s run-named files (None: it may): no run can be shown to have
    written them (:func:`~qae_lab.storage.folder.run_owned`).

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


def removal_problem(path: str | os.PathLike) -> str | None:
    r"""Why qae_lab may not delete ``path``, one of a run folder's names (None: it may): a folder holding a run of its
    own, or a ``.staging`` holding more than a trainer stages there.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / ".staging"; (d / "checkpoint-4").mkdir(parents=True)
    >>> removal_problem(d) is None
    True
    >>> _ = (d / "notes.txt").write_text("mine"); removal_problem(d)
    '.../.staging/ holds notes.txt, which no trainer stages there (only checkpoint-N and model folders)'
    """
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if path.name == STAGING_DIR and not stat.S_ISDIR(mode):
        what = f"a symbolic link (to {os.readlink(path)})" if stat.S_ISLNK(mode) else "a file"
        return f"{path} is {what}, not a folder: a trainer stages its checkpoints in a folder of its own"
    if not stat.S_ISDIR(mode):
        return None  # a file, or a link: deleting it deletes nothing else
    nested = [
        (Path(root) / n).relative_to(path).as_posix()
        for root, dirs, files in os.walk(path)
        for n in dirs + files
        if n in (MARKER_NAME, LOCK_NAME)
    ]
    if nested:
        return f"{path}/ holds a run of its own ({', '.join(sorted(nested)[:3])}): move it out of the run folder first"
    if path.name == STAGING_DIR:
        foreign = sorted(
            e.name
            for e in os.scandir(path)
            if not (e.is_dir(follow_symlinks=False) and (CHECKPOINT_NAME.match(e.name) or e.name == MODEL_DIR))
        )
        if foreign:
            return (
                f"{path}/ holds {', '.join(foreign[:5])}, which no trainer stages there (only checkpoint-N and "
                f"{MODEL_DIR} folders)"
            )
    return None


def overwrite_refusal(folder: str | os.PathLike) -> str | None:
    r"""Why ``--overwrite`` may not delete ``folder``'s run files (None: it may): no run wrote them, or one may not go.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / MARKER_NAME).write_text('{"qae_lab_run": 1}')
    >>> (d / "model" / "x").mkdir(parents=True); _ = (d / "model" / "x" / MARKER_NAME).write_text("{}")
    >>> overwrite_refusal(d)
    '--overwrite deletes only the files of a run: .../model/ holds a run of its own (x/.qae_lab-run.json): ...'
    """
    unowned = unowned_files(folder)
    if unowned:
        return unowned
    for name in run_files(folder):
        problem = removal_problem(Path(folder) / name) if name != MARKER_NAME else None
        if problem:
            return f"--overwrite deletes only the files of a run: {problem}. Nothing was deleted."
    return None


def fresh_refusal(folder: str | os.PathLike, overwrite: bool = False) -> str | None:
    r"""Why a new run may not start in ``folder`` (None: it may): it holds a run, and ``overwrite`` is off or refused.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); fresh_refusal(d) is None
    True
    >>> _ = (d / "log.jsonl").write_text("{}"); fresh_refusal(d, overwrite=True)
    '--overwrite deletes only the files of a run: .../ holds log.jsonl, but no run wrote them ...'
    """
    held = held_run(folder)
    if held and not overwrite:
        return held
    return overwrite_refusal(folder) if overwrite else None


def claim_fresh(folder: str | os.PathLike, *, overwrite: bool = False, lock: RunLock | None = None) -> list[str]:
    r"""Make ``folder`` ready for a new run under its lock (``lock``, held, else taken here): refuse it as
    :func:`fresh_refusal` does, delete the previous run's files when ``overwrite``, write the marker; the names deleted.


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
        refused = fresh_refusal(folder, overwrite)
        if refused:
            raise RunFolderError(refused)
        found = [n for n in run_files(folder) if n != MARKER_NAME]  # empty unless overwrite: else refused above
        for name in found:
            path = folder / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        atomic_write_text(folder / MARKER_NAME, json.dumps({"qae_lab_run": 1, "claimed": holder()}) + "\n")
    finally:
        if own:
            lock.release()
    return found if overwrite else []
