r"""The callbacks around a training run: the run log, the progress bar, Ctrl-C, the thread count on a CPU (the live
knobs' callback is :class:`qae_lab.lab.live.LiveKnobs`).

One folder per run (``<output_dir>``; its layout and rules: :mod:`qae_lab.storage.folder`)::

    config.json    QAEConfig.to_dict() + library versions + the preset and run options (+ every resume)
    log.jsonl      one JSON object per ``Trainer.log`` call: step, epoch, time, every metric; and events
    checkpoint-N/  a complete, resumable Trainer checkpoint (on Ctrl-C / Stop, or by save_strategy)
    report.html    curves and before/after pass@1, one self-contained file (see :func:`qae_lab.lab.report.write_report`)

Implementer's notes: docs/implementation.md, section ``qae_lab.train.callbacks``.
"""

from __future__ import annotations

import json
import os
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from qae_lab.metric_names import QAE_ZERO_ADV_FRAC
from qae_lab.threads import ThreadProbe, thread_probe
from qae_lab.storage.folder import (
    COMPLETIONS_DIR,
    CONFIG_NAME,
    EVAL_AFTER,
    LOG_NAME,
    MODEL_DIR,
    SUPERSEDED_NAME,
    RunFolderError,
    RunLock,
    append_line,
    append_lines,
    atomic_write_text,
    fsync_dir,
    jsonable,
    read_json,
    read_log_lines,
    save_config,
    step_rows,
    versions,
    write_config,
)
from qae_lab.storage.resume import FRESH, ResumePlan, latest_complete_checkpoint, plan_run, resume_log

__all__ = [
    "RunLogger",
    "run_logger",
    "pending_plan",
    "CompactProgress",
    "use_compact_progress",
    "TrainOutcome",
    "train_resumable",
    "ThreadTuner",
    "thread_callbacks",
]


class RunLogger(TrainerCallback):
    r"""Writes ``config.json`` when training begins and one ``log.jsonl`` line per ``on_log`` (``step``, ``epoch``,
    ``time`` in Unix seconds, ``elapsed_s`` since this process began training, every metric); main process only.

    ``preset`` and ``run`` (further JSON-able run options) are recorded in ``config.json``. When training begins the
    logger follows ``plan`` (the run's :class:`~qae_lab.storage.resume.ResumePlan`, from
    :func:`qae_lab.runs.pipeline.make_trainer`; then None, and ``followed`` holds it) and decides nothing itself: a
    fresh plan writes ``config.json``; a resume plan continues the log from its checkpoint
    (:func:`~qae_lab.storage.resume.resume_log`) and records its settings changes (``resume_event``: the row
    written); a refused plan, or one whose start step is not the trainer's, raises
    :class:`~qae_lab.storage.folder.RunFolderError`. Without a plan (a logger on its own, or a second start) it plans
    from the trainer's state (:func:`qae_lab.storage.resume.plan_run`), so a fresh start refuses a folder with a run.

    >>> import tempfile, types
    >>> out = tempfile.mkdtemp()
    >>> args = types.SimpleNamespace(output_dir=out, to_dict=lambda: {"quantile_k": 0.4})
    >>> state = types.SimpleNamespace(global_step=0, epoch=0.0, is_world_process_zero=True, log_history=[])
    >>> logger = RunLogger(preset="cpu-demo"); logger.on_train_begin(args, state, None)
    >>> state.global_step = 1; logger.on_log(args, state, None, logs={"reward": 0.5})
    >>> [(r["step"], r["reward"]) for r in read_log_lines(Path(out) / LOG_NAME)[0]]
    [(1, 0.5)]
    """

    def __init__(
        self,
        preset: str | None = None,
        run: dict | None = None,
        plan: ResumePlan | None = None,
        lock: RunLock | None = None,
    ):
        self.preset, self.run = preset, dict(run or {})
        self.plan, self.followed = plan, None
        self.lock = lock  # the run folder's lock (qae_lab.storage.resume.claim took it), or taken at a start alone
        self.hold_lock = False  # True: whoever set it lets go (qae_lab.runs.pipeline.train, after the run's last write)
        self.start = None
        self.resume_event: dict | None = None
        self.resume_extra: dict = {}  # further facts for the resume event

    def release_lock(self, *, force: bool = False) -> None:
        """Let go of the run folder's lock, unless someone else holds it for longer (``hold_lock``; ``force``)."""
        if self.lock is not None and (force or not self.hold_lock):
            self.lock.release()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()
        if not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        if self.lock is None or not self.lock.held:  # a start of its own (no claim, or a second start): lock first
            self.lock = RunLock(out).acquire()
        try:
            self._begin(out, args, state)
        except BaseException:
            self.release_lock()  # refused or failed before training: the folder is free again
            raise

    def _begin(self, out: Path, args, state) -> None:
        plan, self.plan = self.plan, None  # a plan serves one start
        if plan is None:  # on its own: the one planner, from what the trainer has loaded
            plan = plan_run(
                out,
                resume=state.global_step or None,
                history=list(state.log_history),
                settings={"trainer": jsonable(args.to_dict()), "run": jsonable(self.run)},
            )
        plan.require()
        if plan.start_step != state.global_step or Path(plan.folder).resolve() != out.resolve():
            raise RunFolderError(
                f"the trainer starts at step {state.global_step} in {out}/, but its run's plan is "
                f"{plan.summary} in {plan.folder}/: train as planned, or make a new trainer "
                f"(make_trainer(..., resume=...)) for the other start"
            )
        self.followed = plan
        if plan.kind == FRESH:
            write_config(out, args, preset=self.preset, run=self.run)
        else:
            self.resume_event = self._continue(out, args, state, plan)

    def on_train_end(self, args, state, control, **kwargs):
        self.release_lock()

    def _continue(self, out: Path, args, state, plan: ResumePlan) -> dict:
        step, changes = state.global_step, plan.changed
        config_path = out / CONFIG_NAME
        stored = read_json(config_path, "run config", expect=dict) if config_path.exists() else None
        rows, cut = read_log_lines(out / LOG_NAME)
        kept, later, restored = resume_log(rows, step, list(state.log_history))
        # the checkpoint has loaded (weights, optimizer, schedule; its RNG state was checked by the plan): only now
        # does the resume change the folder, so a resume refused or failing while loading leaves it as it was. The
        # superseded rows are written first, in one append: a link planted at their file after the plan was made
        # refuses the resume here (append_lines never writes through one), before anything else has moved
        if later or cut is not None:  # kept beside the log before the log drops them
            append_lines(out / SUPERSEDED_NAME, [*later, *([{"cut_line": cut}] if cut is not None else [])])
        moved = _set_aside_finished(out, plan.finished_at) if plan.finished_at is not None and plan.trains_on else {}
        moved.update(_set_aside_completions(out, step))
        event = {
            "event": "resume",
            "step": step,
            "time": time.time(),
            "changed": changes,
            "superseded_steps": [r["step"] for r in step_rows(later)],
            "restored_steps": restored,
            "cut_line": cut is not None,
            **moved,
            **self.resume_extra,
        }
        atomic_write_text(out / LOG_NAME, "".join(json.dumps(jsonable(r)) + "\n" for r in [*kept, event]))
        if stored is None:
            write_config(out, args, preset=self.preset, run=self.run)
        else:
            for name, (_old, new) in changes.items():
                stored["trainer" if name in stored.get("trainer", {}) else "run"][name] = new
            if self.run.get("build"):  # how to rebuild the settings now in force (the next --resume reads it)
                stored.setdefault("run", {})["build"] = self.run["build"]
            now = versions()
            stored.setdefault("resumes", []).append(
                {
                    "step": step,
                    "time": event["time"],
                    "changed": changes,
                    **({"versions": now} if now != stored.get("versions") else {}),
                }
            )
            save_config(out, stored)
        return event

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero:
            return
        now = time.time()
        row = {
            "step": state.global_step,
            "epoch": state.epoch,
            "time": now,
            "elapsed_s": now - (self.start if self.start is not None else now),
            **(logs or {}),
        }
        append_line(Path(args.output_dir) / LOG_NAME, row)


def _set_aside_completions(out: Path, step: int) -> dict:
    """TRL's completion tables of the steps after ``step`` (a resume trains them again, and TRL would write over
    them) renamed aside, ``...superseded.parquet``; returns ``{"completions_set_aside": [names]}`` or ``{}``."""
    folder, moved = out / COMPLETIONS_DIR, []
    if not folder.is_dir() or folder.is_symlink():
        return {}
    for path in sorted(folder.glob("completions_*.parquet")):
        number = path.stem.removeprefix("completions_")
        if number.isdigit() and int(number) > step and not path.is_symlink():
            target, n = path.with_name(f"{path.stem}.superseded.parquet"), 1
            while os.path.lexists(target):
                n += 1
                target = path.with_name(f"{path.stem}.superseded-{n}.parquet")
            os.replace(path, target)
            moved.append(target.name)
    if moved:
        fsync_dir(folder)
    return {"completions_set_aside": moved} if moved else {}


def _set_aside_finished(out: Path, step: int) -> dict[str, Any]:
    """Before a finished run trains on: its after-training evaluation and model move to ``finished-step<S>/``
    (a new name if that exists), renamed, not copied. Returns what moved where (for the resume event)."""
    done = [out / name for name in (EVAL_AFTER, MODEL_DIR) if (out / name).exists()]
    if not done:
        return {}
    aside, n = out / f"finished-step{step}", 1
    while aside.exists():
        n += 1
        aside = out / f"finished-step{step}-{n}"
    aside.mkdir()
    for path in done:
        os.rename(path, aside / path.name)
    fsync_dir(out)
    print(f"the run had finished at step {step}: its {', '.join(p.name for p in done)} moved to {aside}", flush=True)
    return {"set_aside": [p.name for p in done], "set_aside_to": aside.name}


def run_logger(trainer) -> RunLogger | None:
    r"""The trainer's :class:`RunLogger`, or None.

    >>> import types
    >>> logger = RunLogger()
    >>> run_logger(types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=[logger]))) is logger
    True
    """
    loggers = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, RunLogger)]
    return loggers[0] if loggers else None


def pending_plan(trainer) -> ResumePlan | None:
    r"""The plan the trainer's :class:`RunLogger` will follow when training next begins (None: none given, or
    already followed): what :class:`qae_lab.lab.live.LiveRun` resumes.

    >>> import types
    >>> from qae_lab.storage.resume import RESUME
    >>> plan = ResumePlan(RESUME, Path("runs/x"), checkpoint=Path("runs/x/checkpoint-2"), step=2)
    >>> trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=[RunLogger(plan=plan)]))
    >>> pending_plan(trainer).resume_from
    'runs/x/checkpoint-2'
    """
    logger = run_logger(trainer)
    return logger.plan if logger is not None else None


class CompactProgress(ProgressCallback):
    r"""transformers' progress bar with a few metrics as its postfix, instead of printing every log dict.

    >>> sorted(CompactProgress.SHOWN.values())
    ['H', 'H_upd', 'len', 'reward', 'zero_adv']
    """

    SHOWN: typing.ClassVar[dict[str, str]] = {  # logged name -> short label
        "reward": "reward",
        "completions/mean_length": "len",
        QAE_ZERO_ADV_FRAC: "zero_adv",
        "entropy": "H",
        "entropy/updated_rows": "H_upd",
    }

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {short: f"{logs[k]:.3g}" for k, short in self.SHOWN.items() if isinstance(logs.get(k), float)}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)


def use_compact_progress(trainer) -> None:
    r"""Swap the trainer's log printing for :class:`CompactProgress` (no bar at all with ``disable_tqdm``).

    >>> import types
    >>> calls = []
    >>> trainer = types.SimpleNamespace(args=types.SimpleNamespace(disable_tqdm=False),
    ...     remove_callback=lambda cls: calls.append(("remove", cls.__name__)),
    ...     add_callback=lambda cb: calls.append(("add", type(cb).__name__)))
    >>> use_compact_progress(trainer); calls
    [('remove', 'ProgressCallback'), ('remove', 'PrinterCallback'), ('add', 'CompactProgress')]
    """
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if not trainer.args.disable_tqdm:
        trainer.add_callback(CompactProgress())


@dataclass
class TrainOutcome:
    r"""How :func:`train_resumable` ended: ``checkpoint`` to resume from (or None), ``global_step`` the last finished
    step, ``note`` what happened to the interruption's checkpoint when it is not the obvious one, ``asked`` the steps
    the run was asked for (the Trainer's ``state.max_steps``).

    >>> TrainOutcome(True, "runs/x/checkpoint-4", 4, asked=8).finished, TrainOutcome(False, None, 8, asked=8).finished
    (False, True)
    >>> TrainOutcome(False, None, 3, asked=8).finished   # ended on its own, short of its steps
    False
    """

    interrupted: bool
    checkpoint: str | None
    global_step: int
    note: str = ""
    asked: int | None = None

    @property
    def finished(self) -> bool:
        """Whether the run trained every step it was asked for: never after an interruption, nor one ended short."""
        return not self.interrupted and self.asked is not None and self.global_step >= self.asked


def steps_asked(trainer) -> int:
    """The optimizer steps a trainer was asked for: the Trainer's own count once training began (``state.max_steps``,
    ``num_train_epochs`` counted in steps), else ``args.max_steps``."""
    return getattr(trainer.state, "max_steps", 0) or trainer.args.max_steps


def train_resumable(trainer, resume_from_checkpoint: str | None = None) -> TrainOutcome:
    r"""``trainer.train(...)``; on ``KeyboardInterrupt`` save a resumable checkpoint and return.

    The checkpoint is ``<output_dir>/checkpoint-<global_step>``, the state after the last *finished* optimizer step
    (none before the first). A second Ctrl-C during that save abandons it; the outcome then names the run's latest
    complete checkpoint, which the abandoned save cannot have touched (checkpoints are staged and renamed). Continue
    with ``trainer.train(resume_from_checkpoint=outcome.checkpoint)`` (same config and data).

    >>> import types
    >>> def ctrl_c(resume_from_checkpoint=None):
    ...     raise KeyboardInterrupt
    >>> trainer = types.SimpleNamespace(args=types.SimpleNamespace(output_dir="runs/x"), train=ctrl_c,
    ...                                 state=types.SimpleNamespace(global_step=0))
    >>> train_resumable(trainer)  # Ctrl-C before the first step finished: nothing to save
    TrainOutcome(interrupted=True, checkpoint=None, global_step=0, note='interrupted before the first step finished: nothing to resume', asked=None)
    """
    out = Path(trainer.args.output_dir)
    try:
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    except KeyboardInterrupt:
        step = trainer.state.global_step
        try:
            if step == 0:
                return TrainOutcome(True, None, 0, "interrupted before the first step finished: nothing to resume")
            trainer.model.zero_grad(set_to_none=True)  # a half-accumulated gradient is not part of any step
            trainer._save_checkpoint(trainer.model, trial=None)
            return TrainOutcome(True, str(out / f"checkpoint-{step}"), step)
        except KeyboardInterrupt:
            latest, _ = latest_complete_checkpoint(out)
            found = f"the latest complete checkpoint is {latest.name}" if latest else ""
            note = f"interrupted again while saving checkpoint-{step}: that save was abandoned; " + (
                found or "the run has no complete checkpoint to resume"
            )
            return TrainOutcome(True, str(latest) if latest else None, step, note)
        finally:  # training ended without on_train_end: the run folder's lock goes here (unless held for longer)
            logger = run_logger(trainer) if hasattr(trainer, "callback_handler") else None
            if logger is not None:
                logger.release_lock()
    return TrainOutcome(False, None, trainer.state.global_step, asked=steps_asked(trainer))


class ThreadTuner(TrainerCallback):
    r"""The lab's thread policy for training steps (:class:`qae_lab.threads.ThreadProbe`, a step a unit), as a
    callback; ``probe`` holds its counts and choices."""

    def __init__(self, probe: ThreadProbe):
        self.probe = probe

    def on_train_begin(self, args, state, control, **kwargs):
        self.probe.start()

    def on_step_begin(self, args, state, control, **kwargs):
        self.probe.begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.probe.end()

    def on_train_end(self, args, state, control, **kwargs):
        self.probe.stop()


def thread_callbacks(torch_threads: int | None = None, device=None, *, environ=os.environ) -> list[ThreadTuner]:
    r"""The :class:`ThreadTuner` a run on ``device`` (default: CUDA where there is one, else the CPU) trains with, as a
    list for a trainer's ``callbacks`` (:func:`qae_lab.threads.thread_probe`: a fixed count where ``torch_threads`` or
    ``$QAE_LAB_TORCH_THREADS`` names one, else probing on a CPU; none on another device with no count named).

    >>> from qae_lab.threads import TORCH_DEFAULT
    >>> thread_callbacks(None, "cuda", environ={}), thread_callbacks(3, "cuda")[0].probe.counts
    ([], (3,))
    >>> [t.probe.counts for t in thread_callbacks(None, "cpu", environ={})] == [tuple(sorted({1, TORCH_DEFAULT}))]
    True
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = thread_probe(torch_threads, device=device, environ=environ)
    return [ThreadTuner(probe)] if probe is not None else []
