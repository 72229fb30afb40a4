r"""A new run in a folder: whether it may start there, what ``--overwrite`` may delete, and the claim itself.

The one test of "is this folder fresh" is :func:`held_run` (a folder holding any of a run's files is not);
``--overwrite`` deletes a run's own files only when a run can be shown to have written them (its marker,
:func:`unowned_files`) and each may go (:func:`removal_problem`: never a run nested inside one, and ``.staging``
only as a trainer leaves it), all decided before anything is deleted (:func:`overwrite_refusal`).
:func:`claim_fresh` carries a fresh plan out under the folder's lock and writes the new run's marker;
:func:`qae_lab.storage.resume.plan_run` asks the same questions first, so a dry run gives the same refusal.
The folder's layout, its names and its lock: :mod:`qae_lab.storage.folder`.
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
    r"""Whether a new run may start in ``folder``: None when it holds no run's files
    (:func:`~qae_lab.storage.folder.run_files`), else the refusal, naming them and the three ways on. The one test
    of "is this folder fresh" (:func:`qae_lab.storage.resume.plan_run` decides with it, :func:`claim_fresh` guards
    with it).

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
    can be shown to have written them (:func:`~qae_lab.storage.folder.run_owned`).

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
    r"""Why qae_lab may not delete ``path``, one of a run folder's own names (None: it may, or it is not there).

    Never a folder that holds a run of its own (a run marker or lock anywhere inside: a run made there before its
    names were reserved); and ``.staging`` only as a trainer leaves it: a real folder holding only ``checkpoint-N``
    and ``model`` folders (a link, a file or anything else there is someone's data).

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
    r"""Why ``--overwrite`` may not delete ``folder``'s run files (None: it may delete every one of
    :func:`~qae_lab.storage.folder.run_files` but the marker, as :func:`claim_fresh` does): no run wrote them
    (:func:`unowned_files`), or one of them may not go (:func:`removal_problem`: a run nested inside, a
    ``.staging`` no trainer left).

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
    r"""Why a new run may not start in ``folder`` (None: it may): it holds a run and ``overwrite`` is off
    (:func:`held_run`), or ``overwrite`` may not delete what it holds (:func:`overwrite_refusal`). The one decision,
    asked by the plan (:func:`qae_lab.storage.resume.plan_run`) and again by the claim (:func:`claim_fresh`).

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
    r"""Make ``folder`` ready for a new run, under its :class:`~qae_lab.storage.folder.RunLock` (``lock``, held;
    taken here when None and let go on return): refuse one that holds another run's files unless ``overwrite``,
    then write the run's marker.

    Other files in the folder are left alone. With ``overwrite=True`` the previous run's files
    (:func:`~qae_lab.storage.folder.run_files`, a stale ``.staging`` among them) are deleted: the caller chose that
    explicitly, and only when a run wrote them and each may go (otherwise refused, nothing deleted:
    :func:`overwrite_refusal`; a run nested inside one is never deleted).

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
