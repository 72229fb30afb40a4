r"""One resume plan: whether a run starts fresh, resumes checkpoint N, or is refused, decided once.

:func:`plan_run` looks at the run folder and at what was asked (a checkpoint or run folder to
resume, or none; ``overwrite``; the settings the run would train with) and returns a frozen
:class:`ResumePlan`. It writes nothing. Everything that starts a run acts on that plan and
decides nothing itself:

* the command line: :func:`qae_lab.cli.plan` makes it before anything loads (``--dry-run`` too);
* :func:`qae_lab.run.make_trainer` and :func:`qae_lab.run.train` (the notebooks' way in) make it
  when not given one, :func:`claim` carries out a fresh one (the folder made, an overwritten run's
  files deleted) and the run's :class:`~qae_lab.callbacks.RunLogger` is given it;
* :class:`qae_lab.live.LiveRun` resumes the plan's checkpoint;
* :class:`~qae_lab.callbacks.RunLogger` writes a new ``config.json`` or continues the log as the plan
  says (a logger used on its own plans from the trainer's state, with this same function).

The rules behind a refusal are :mod:`qae_lab.runfolder`'s (a new run never replaces another without
``overwrite``: :func:`~qae_lab.runfolder.held_run`) and :mod:`qae_lab.checkpoints`' (a damaged
checkpoint, a change outside :data:`~qae_lab.checkpoints.SAFE_ON_RESUME`, a checkpoint older than the
run's latest or than its end). Files and JSON (torch only to check that a checkpoint's files load):
no plotting or widget import. :func:`claim` takes the run folder's :class:`~qae_lab.runfolder.RunLock`.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> plan_run(d).kind
'fresh'
>>> _ = (d / "log.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
>>> p = plan_run(d); p.kind, "already holds a run (log.jsonl)" in p.reason
('refuse', True)
>>> plan_run(d, overwrite=True).reason   # no run's marker: these files are not a run's to delete
'--overwrite deletes only the files of a run: .../ holds log.jsonl, but no run wrote them ...'
>>> _ = (d / ".qae_lab-run.json").write_text('{"qae_lab_run": 1}')
>>> plan_run(d, overwrite=True).overwrite
('log.jsonl',)
>>> plan_run(d, resume=True).reason
'.../: no complete checkpoint in this run folder'
>>> import torch
>>> ckpt = d / "checkpoint-1"; ckpt.mkdir()
>>> _ = (ckpt / "trainer_state.json").write_text('{"global_step": 1, "log_history": []}')
>>> _ = (ckpt / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")
>>> for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"): torch.save({}, ckpt / name)
>>> p = plan_run(d, resume=True, settings={"trainer": {"max_steps": 4}, "run": {}})
>>> p.kind, p.step, p.checkpoint.name, p.start_step
('resume', 1, 'checkpoint-1', 1)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qae_lab.checkpoints import (
    check_resume_point,
    checkpoint_problems,
    finished_step,
    latest_complete_checkpoint,
    resume_changes,
    resume_log,
)
from qae_lab.runfolder import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    LOG_NAME,
    MARKER_NAME,
    SUPERSEDED_NAME,
    RunFolderError,
    RunLock,
    check_folder,
    claim_fresh,
    held_run,
    read_json,
    read_log_lines,
    run_files,
    step_rows,
    unowned_files,
)

__all__ = ["FRESH", "RESUME", "REFUSE", "ResumePlan", "plan_run", "claim"]

FRESH, RESUME, REFUSE = "fresh", "resume", "refuse"

# the settings a run would train with, in config.json's form ({"trainer": {...}, "run": {...}}), or a function
# of the stored config.json (and its run folder) that returns them (the command line rebuilds a run's own)
Settings = dict | Callable[[dict, Path], dict] | None


@dataclass(frozen=True)
class ResumePlan:
    r"""What a run does with its folder: start ``"fresh"``, ``"resume"`` a checkpoint, or ``"refuse"``.

    Made by :func:`plan_run` only. Fields (the ``resume`` ones are None or empty otherwise):

    * ``kind``, ``folder`` (the run folder), ``reason`` (``refuse``: why, and the ways on);
    * ``overwrite`` (``fresh``: the previous run's files that :func:`claim` deletes);
    * ``checkpoint``, ``step`` (``resume``: the checkpoint folder and its global step; training
      continues at ``step + 1``);
    * ``changes`` (``resume``: ``(name, old, new)`` of each setting that differs from ``config.json``,
      every one in :data:`~qae_lab.checkpoints.SAFE_ON_RESUME`);
    * ``finished_at`` (the step at which the run last finished, if it did) and ``trains_on``
      (False: a finished run resumed as it was, with nothing left to train);
    * ``superseded_steps`` (logged after the checkpoint: trained again, their rows moved aside),
      ``restored_steps`` (missing from the log, restored from the checkpoint's state), ``cut_line``
      (the log's last line was cut short);
    * ``notes`` (later checkpoints skipped as damaged).

    >>> p = ResumePlan(RESUME, Path("runs/x"), checkpoint=Path("runs/x/checkpoint-4"), step=4,
    ...                changes=(("max_steps", 4, 8),))
    >>> p.changed, p.resume_from, p.start_step, p.require() is p
    ({'max_steps': [4, 8]}, 'runs/x/checkpoint-4', 4, True)
    >>> p.summary
    'the resume of runs/x/checkpoint-4 (step 4)'
    >>> p.lines()
    ['resuming runs/x/checkpoint-4 (step 4); changed: max_steps 4 -> 8']
    >>> ResumePlan(REFUSE, Path("runs/x"), reason="no").require()
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: no
    """

    kind: str
    folder: Path
    reason: str = ""
    overwrite: tuple[str, ...] = ()
    checkpoint: Path | None = None
    step: int | None = None
    changes: tuple[tuple[str, Any, Any], ...] = ()
    finished_at: int | None = None
    trains_on: bool = True
    superseded_steps: tuple[int, ...] = ()
    restored_steps: tuple[int, ...] = ()
    cut_line: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in (FRESH, RESUME, REFUSE):
            raise ValueError(f"kind must be {FRESH!r}, {RESUME!r} or {REFUSE!r}, got {self.kind!r}")
        if (self.kind == REFUSE) != bool(self.reason):
            raise ValueError("a refused plan says why, and only a refused plan has a reason")
        if (self.kind == RESUME) != (self.checkpoint is not None and self.step is not None):
            raise ValueError("a resume plan names its checkpoint and step, and only a resume plan does")

    @property
    def changed(self) -> dict[str, list]:
        """``{name: [old, new]}`` of the settings the resume changes (what the log's resume event records)."""
        return {name: [old, new] for name, old, new in self.changes}

    @property
    def summary(self) -> str:
        """The plan in a few words: ``a new run``, ``the resume of <checkpoint> (step N)`` or ``refused: <reason>``."""
        return {FRESH: "a new run", RESUME: f"the resume of {self.checkpoint} (step {self.step})"}.get(
            self.kind, f"refused: {self.reason}")

    @property
    def start_step(self) -> int | None:
        """The trainer's global step when training begins: 0 fresh, the checkpoint's on a resume."""
        return {FRESH: 0, RESUME: self.step}.get(self.kind)

    @property
    def resume_from(self) -> str | None:
        """What ``trainer.train(resume_from_checkpoint=...)`` gets: the checkpoint's path, or None."""
        return str(self.checkpoint) if self.kind == RESUME else None

    def require(self) -> ResumePlan:
        """The plan itself; raises :class:`~qae_lab.runfolder.RunFolderError` with the reason when refused."""
        if self.kind == REFUSE:
            raise RunFolderError(self.reason)
        return self

    def lines(self) -> list[str]:
        """What the plan does, for people: the notes, then one line (none for a plain fresh start)."""
        if self.kind == FRESH:
            return [f"--overwrite: deleting the previous run's {', '.join(self.overwrite)} in {self.folder}/"] \
                if self.overwrite else []
        if self.kind == REFUSE:
            return [*self.notes, self.reason]
        said = ", ".join(f"{k} {a} -> {b}" for k, a, b in self.changes)
        steps = ", ".join(map(str, self.superseded_steps))
        return [*self.notes,
                f"resuming {self.checkpoint} (step {self.step})" + (f"; changed: {said}" if said else "")
                + (f"; steps {steps} were logged after the checkpoint and are trained again (their rows move to "
                   f"{SUPERSEDED_NAME})" if steps else "")
                + (f"; the log's last line was cut short (moves to {SUPERSEDED_NAME})" if self.cut_line else "")
                + (f"; steps {', '.join(map(str, self.restored_steps))} missing from the log are restored from "
                   f"the checkpoint" if self.restored_steps else "")]


def plan_run(folder: str | os.PathLike | None = None, *, resume: str | os.PathLike | bool | int | None = None,
             overwrite: bool = False, settings: Settings = None, history: list[dict] | None = None) -> ResumePlan:
    r"""The plan for a run in ``folder``: the one place that decides fresh, resume or refuse.

    Args:
        folder: the run folder (with ``resume`` a path, None means the checkpoint's own run folder).
        resume: None or False: a new run. True: ``folder``'s latest complete checkpoint. A path: a
            checkpoint folder (checked), or a run folder (its latest complete checkpoint). An int
            ``N > 0``: the trainer has already loaded ``folder``'s step ``N`` (its log history in
            ``history``), as :class:`~qae_lab.callbacks.RunLogger` sees it when training begins.
        overwrite: a new run replaces the run in ``folder`` (its files are listed in ``overwrite``).
        settings: the resume's settings in ``config.json``'s form, compared with the stored ones
            (None: the run's own); or a function of the stored ``config.json`` and the run folder
            returning them (the command line rebuilds the run's settings from its recipe; a missing
            ``config.json`` is then refused).

    A :class:`~qae_lab.runfolder.RunFolderError` on the way (a damaged file, a refused change) becomes
    a ``refuse`` plan with its message; other errors (a bad setting in ``settings``) are raised.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> plan_run(d, resume=d, overwrite=True).reason
    '--overwrite starts a new run; --resume continues one: choose one'
    >>> plan_run(d / "nowhere", resume=d / "nowhere").reason
    '.../nowhere: no such folder to resume'
    """
    try:
        if resume is None or resume is False:
            if folder is None:
                raise TypeError("a new run needs its run folder")
            check_folder(folder)
            held = held_run(folder)
            if held and not overwrite:
                raise RunFolderError(held)
            unowned = unowned_files(folder) if overwrite else None
            if unowned:
                raise RunFolderError(unowned)
            return ResumePlan(FRESH, Path(folder), overwrite=tuple(n for n in run_files(folder) if n != MARKER_NAME)
                              if overwrite else ())
        if overwrite:
            raise RunFolderError("--overwrite starts a new run; --resume continues one: choose one")
        return _resume(folder, resume, settings, history)
    except RunFolderError as err:
        return ResumePlan(REFUSE, Path(folder if folder is not None else resume), reason=str(err))


def _locate(folder, resume) -> tuple[Path, int, list[dict], list[str]]:
    """``(checkpoint, step, its log history, notes)`` of what ``resume`` names; refuses what cannot be resumed."""
    if isinstance(resume, int) and not isinstance(resume, bool):
        if resume < 1 or folder is None:
            raise ValueError(f"resume={resume}: a loaded checkpoint's step is >= 1, in a given run folder")
        return Path(folder) / f"checkpoint-{resume}", resume, [], []
    p = Path(folder if resume is True else resume)
    if resume is True and folder is None:
        raise TypeError("resume=True takes the latest checkpoint of the run folder: give the folder")
    if not p.exists():
        raise RunFolderError(f"{p}: no such folder to resume")
    notes: list[str] = []
    if not p.is_dir():
        raise RunFolderError(f"{p} is a file: give a run folder or one of its checkpoint-N folders to resume")
    if (p / "trainer_state.json").exists() or CHECKPOINT_NAME.match(p.name):
        problems = checkpoint_problems(p, load=True)
        if problems:
            raise RunFolderError(f"{p}: the checkpoint cannot be resumed: {'; '.join(problems)}")
        checkpoint = p
    else:
        checkpoint, notes = latest_complete_checkpoint(p, load=True)
        if checkpoint is None:
            raise RunFolderError(f"{p}/: no complete checkpoint in this run folder"
                                 + (f" ({'; '.join(notes)})" if notes else ""))
    state = read_json(checkpoint / "trainer_state.json", "checkpoint state", expect=dict)
    return checkpoint, state["global_step"], list(state.get("log_history", [])), notes


def _resume(folder, resume, settings: Settings, history) -> ResumePlan:
    checkpoint, step, log_history, notes = _locate(folder, resume)
    out = checkpoint.parent
    if folder is not None and Path(folder).resolve() != out.resolve():
        raise RunFolderError(f"--resume continues its own run folder {out}/; --output-dir {folder} differs "
                             f"(to branch off, start a new run)")
    config = out / CONFIG_NAME
    stored = read_json(config, "run config", expect=dict) if config.exists() or callable(settings) else None
    if stored is not None:
        for section in ("trainer", "run"):
            if not isinstance(stored.get(section, {}), dict):
                raise RunFolderError(f"run config {config} is damaged (its {section!r} is not a mapping of settings)")
    wanted = settings(stored, out) if callable(settings) else settings
    changes = {}
    if stored is not None:
        wanted = wanted if wanted is not None else stored
        changes = resume_changes(stored, wanted.get("trainer") or {}, wanted.get("run") or {}, checkpoint_step=step)
    try:
        check_resume_point(out, step, skipped={note.split(" skipped: ")[0] for note in notes})
    except RunFolderError as err:  # with the reason a later checkpoint was skipped, if one was
        raise RunFolderError(". ".join([*notes, str(err)])) from None
    rows, cut = read_log_lines(out / LOG_NAME)
    _kept, later, restored = resume_log(rows, step, history if history is not None else log_history)
    finished = finished_step(out)
    max_steps = ((wanted or stored or {}).get("trainer") or {}).get("max_steps")
    return ResumePlan(RESUME, out, checkpoint=checkpoint, step=step, notes=tuple(notes),
                      changes=tuple((k, a, b) for k, (a, b) in changes.items()), finished_at=finished,
                      trains_on=finished is None or max_steps is None or max_steps > finished,
                      superseded_steps=tuple(sorted({r["step"] for r in step_rows(later)})),
                      restored_steps=tuple(restored), cut_line=cut is not None)


def claim(plan: ResumePlan) -> RunLock:
    r"""Carry out a plan's claim on its folder before anything loads, under the folder's lock; returns the
    :class:`~qae_lab.runfolder.RunLock`, held (the run lets go of it when it has written its last file).

    A refused plan raises its reason. The lock is taken first (another process writing the folder is refused,
    named), then the plan is checked again against the folder as it now is: a fresh one makes the folder,
    deletes the run it overwrites and writes the new run's marker (:func:`qae_lab.runfolder.claim_fresh`, which
    refuses a run that appeared since the plan was made); a resume refuses a folder whose checkpoints or end
    changed since (another process trained it on) and touches nothing.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "run"
    >>> lock = claim(plan_run(d)); lock.held, d.is_dir(), run_files(d)
    (True, True, ['.qae_lab-run.json'])
    >>> claim(plan_run(d, overwrite=True))
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: .../run/ is being written by process ..., this very process: ...
    >>> lock.release()
    """
    plan.require()
    lock = RunLock(plan.folder).acquire()
    try:
        if plan.kind == FRESH:
            claim_fresh(plan.folder, overwrite=bool(plan.overwrite), lock=lock)
        else:
            now = _still_complete(plan)
            if now:
                raise RunFolderError(f"{plan.folder}/ changed since the resume was planned ({now}): plan it again")
    except BaseException:
        lock.release()
        raise
    return lock


def _still_complete(plan: ResumePlan) -> str | None:
    """What changed in a resumed folder between its plan and its claim (None: nothing that matters)."""
    problems = checkpoint_problems(plan.checkpoint)
    if problems:
        return f"{plan.checkpoint.name}: {'; '.join(problems)}"
    try:
        check_resume_point(plan.folder, plan.step, skipped={note.split(" skipped: ")[0] for note in plan.notes})
    except RunFolderError as err:
        return str(err)
    if finished_step(plan.folder) != plan.finished_at:
        return f"the run now ends at step {finished_step(plan.folder)}"
    return None
