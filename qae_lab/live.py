r"""The live lab: training in a background thread, a dashboard that grows as the steps arrive, and
the live controls (:mod:`qae_lab.controls`) bound to the running :class:`~qae_lab.trainer.QAETrainer`.

Why a thread: a notebook kernel handles widget events only between cells, so a cell that runs
``trainer.train()`` would leave every slider dead until training ends. :meth:`LiveRun.start`
returns at once; the training loop runs in a daemon thread and reads the controls at every step.

* :class:`~qae_lab.controls.Controls` (in :mod:`qae_lab.controls`) — K, alpha, baseline, token
  weighting and a Stop button, their value one frozen :class:`~qae_lab.knobs.Knobs`;
  :class:`~qae_lab.callbacks.LiveKnobs` (in :mod:`qae_lab.callbacks`) hands that value to
  ``trainer.set_knobs`` at every ``on_step_begin`` and ends training after Stop, with a checkpoint.
* :class:`Dashboard` — reward and pass rate, entropy, zero-advantage fraction, hard/easy regime
  fractions, SA-AH's mean weight on negative rollouts, the K and alpha in force, and the entropy
  ledger (``ledger/*``: the update's first-order entropy change by sign of A and by regime), one
  panel each, plus a progress bar. It draws through :class:`qae_lab.plots.FigureView`: a
  ``FigureWidget`` where that renders, else a plain figure re-drawn into an ``Output`` (Colab's
  ipywidgets 7.7 / plotly 5.24). Redraws are throttled; every step is kept in ``rows``.
  :class:`DashboardFeed` is the ``TrainerCallback`` that sends it each logged step.
* :class:`LiveRun` — wires the three to a trainer, runs it, shows errors and warnings of the
  training thread under the dashboard (errors are re-raised by :meth:`LiveRun.wait`), runs
  follow-up work (:meth:`LiveRun.then`, e.g. the after-training evaluation) in the same thread,
  and reads the steps logged so far (:meth:`LiveRun.logged_steps`; where the knobs changed in
  them: :func:`qae_lab.knobs.knob_changes`).

Stopping: the Stop button, or :meth:`LiveRun.stop`. A kernel interrupt does not reach a
background thread, so use Stop. The run's ``log.jsonl`` (:class:`qae_lab.callbacks.RunLogger`) keeps
every finished step either way.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import ipywidgets as widgets
import torch
from IPython.display import display
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.utils.notebook import NotebookProgressCallback

from qae_lab._checks import check_finite_scalar
from qae_lab.callbacks import LiveKnobs, TrainOutcome, pending_plan, run_logger
from qae_lab.controls import Controls
from qae_lab.methods import (
    LEDGER_PREFIX,
    QAE_EASY_FRAC,
    QAE_HARD_FRAC,
    QAE_K,
    QAE_SUCCESS_RATE,
    QAE_ZERO_ADV_FRAC,
    SAAH_ALPHA,
    SAAH_W_MEAN_NEG,
)
from qae_lab.plots import FigureView, run_curves_figure
from qae_lab.presets import device_preset
from qae_lab.runfolder import LOG_NAME, read_log_lines, step_rows

__all__ = ["LIVE_PANELS", "Dashboard", "DashboardFeed", "LiveRun", "auto_preset"]

# panel title -> logged metrics drawn in it (names: docs/metrics.md)
LIVE_PANELS = {
    "reward and pass rate": ("reward", QAE_SUCCESS_RATE),
    "entropy": ("entropy", "entropy/updated_rows"),
    "zero-advantage fraction": (QAE_ZERO_ADV_FRAC,),
    "hard / easy prompt fractions": (QAE_HARD_FRAC, QAE_EASY_FRAC),
    "SA-AH mean weight, negative rollouts": (SAAH_W_MEAN_NEG,),
    "K and alpha in force": (QAE_K, SAAH_ALPHA),
    # the entropy ledger (qae_lab.ledger): the update's first-order entropy change, and which responses it comes from
    "entropy ledger: dH by sign of A": tuple(LEDGER_PREFIX + p for p in ("dh", "dh_pos", "dh_neg")),
    "entropy ledger: dH by QAE regime": tuple(LEDGER_PREFIX + p for p in ("dh_hard", "dh_easy")),
}

def auto_preset(gpu_preset: str = "qwen2.5-1.5b-gsm8k") -> tuple[str, str]:
    r"""``(preset, reason)`` for this machine: ``gpu_preset`` on a GPU, the float16 0.5B preset
    (``qwen2.5-0.5b-gsm8k-t4``) on a GPU without bf16 and with under 20 GiB (a T4), the CPU demo without a
    GPU (:func:`qae_lab.presets.device_preset` decides from the device's name, memory and bf16 support).

    >>> auto_preset("qwen2.5-1.5b-gsm8k")[0] in ("qwen2.5-1.5b-gsm8k", "qwen2.5-0.5b-gsm8k-t4", "cpu-demo")
    True
    """
    if not torch.cuda.is_available():
        return device_preset(gpu_preset, name=None)
    return device_preset(gpu_preset, name=torch.cuda.get_device_name(0),
                         total_memory=torch.cuda.get_device_properties(0).total_memory,
                         bf16=torch.cuda.is_bf16_supported())


class Dashboard:
    r"""Live training curves (:data:`LIVE_PANELS`), a progress bar and a status line.

    Args:
        max_steps: the progress bar's length.
        mode: :class:`~qae_lab.plots.FigureView`'s ``"auto"``, ``"widget"`` or ``"static"``.
        min_interval_s: least time between two redraws (the last step is always drawn by
            :meth:`refresh`); every row is kept in ``rows`` regardless.

    >>> d = Dashboard(max_steps=4, mode="static")
    >>> d.add({"step": 1, "reward": 0.25, "qae/k": 0.4}); d.refresh()
    >>> d.progress.value, [t.name for t in d.view.figure.data]
    (1, ['reward', 'qae/k'])
    """

    def __init__(self, max_steps: int, *, mode: str = "auto", min_interval_s: float = 0.5):
        self.rows: list[dict] = []
        self._lock = threading.Lock()
        self._last_draw = 0.0
        self.min_interval_s = check_finite_scalar(min_interval_s, "min_interval_s")
        self.view = FigureView(run_curves_figure([], LIVE_PANELS), mode=mode)
        self.progress = widgets.IntProgress(value=0, min=0, max=max(int(max_steps), 1), description="step")
        self.status = widgets.HTML(value="not started")
        self.widget = widgets.VBox([widgets.HBox([self.progress, self.status]), self.view.widget])

    def add(self, row: dict) -> None:
        """Record one step's metrics (``row["step"]`` is the global step) and redraw when due."""
        with self._lock:
            self.rows.append(dict(row))
            self.progress.value = min(int(row["step"]), self.progress.max)
            due = time.monotonic() - self._last_draw >= self.min_interval_s
        if due:
            self.refresh()

    def refresh(self) -> None:
        """Redraw every recorded step now."""
        with self._lock:
            rows = list(self.rows)
            self._last_draw = time.monotonic()
        last = rows[-1] if rows else {}
        title = (f"step {last.get('step', 0)} / {self.progress.max}: K = {last.get(QAE_K, float('nan')):.2f}"
                 + (f", alpha = {last[SAAH_ALPHA]:.2f}" if last.get(SAAH_ALPHA) is not None else ""))
        self.view.update(run_curves_figure(rows, LIVE_PANELS, title=title if rows else ""))

    def set_status(self, text: str) -> None:
        self.status.value = text


class DashboardFeed(TrainerCallback):
    r"""Sends every logged training step (a log with ``reward``) to a :class:`Dashboard`.

    >>> import types
    >>> feed, state = DashboardFeed(Dashboard(max_steps=4, mode="static")), types.SimpleNamespace(global_step=0)
    >>> feed.on_train_begin(None, state, None); state.global_step = 1
    >>> feed.on_log(None, state, None, logs={"reward": 0.5, "qae/k": 0.4})
    >>> feed.on_log(None, state, None, logs={"train_runtime": 9.0})       # no reward: not a training step
    >>> [row["step"] for row in feed.dashboard.rows], feed.dashboard.status.value.endswith(" s/step")
    ([1], True)
    """

    def __init__(self, dashboard: Dashboard):
        self.dashboard = dashboard
        self._t0 = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = time.monotonic()
        self.dashboard.set_status("training")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and logs.get("reward") is not None:
            self.dashboard.add({"step": state.global_step, **logs})
            per_step = (time.monotonic() - self._t0) / max(state.global_step, 1)
            self.dashboard.set_status(f"training: {per_step:.2f} s/step")

    def on_train_end(self, args, state, control, **kwargs):
        self.dashboard.refresh()


@contextlib.contextmanager
def _thread_warnings_to(output: widgets.Output):
    r"""Show the warnings that the calling thread raises inside the block in ``output``; other threads'
    warnings go where they went before.

    A background thread's warnings otherwise land in whichever notebook cell happens to run.
    ``warnings.catch_warnings`` cannot help: it swaps process-wide state (before Python 3.14), so
    this wraps ``warnings.showwarning`` for the block and dispatches on the thread. Filters
    (``-W error``, pytest's) apply as before.
    """
    thread, before, active = threading.get_ident(), warnings.showwarning, [True]

    def show(message, category, filename, lineno, file=None, line=None):
        if active[0] and threading.get_ident() == thread:
            output.append_stderr(warnings.formatwarning(message, category, filename, lineno, line))
        else:  # another thread, or this hook left installed by someone's catch_warnings after the block
            before(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        active[0] = False
        if warnings.showwarning is show:
            warnings.showwarning = before


class LiveRun:
    r"""A trainer with live :class:`~qae_lab.controls.Controls` and a :class:`Dashboard`, trained in a background thread.

    Args:
        trainer: a :class:`~qae_lab.trainer.QAETrainer` (its ``RunLogger`` keeps ``log.jsonl``).
        controls, dashboard: made from the trainer when None.
        resume_from_checkpoint: passed to ``trainer.train``. None: what the trainer's run plan says
            (:func:`qae_lab.run.make_trainer`'s :class:`~qae_lab.resume.ResumePlan`: its checkpoint
            when it resumes one); a checkpoint that is not the plan's is refused here, before
            anything starts.

    ``display(run)`` (or the cell's last expression) shows controls, dashboard and a message
    area (``messages``: the training thread's warnings, errors and follow-up results); :meth:`start`
    returns at once; :meth:`logged_steps` reads the steps logged so far; :meth:`wait` blocks until
    the thread ends and returns the :class:`~qae_lab.callbacks.TrainOutcome` (``interrupted`` is True
    after Stop).

    A stand-in for a trainer, with what LiveRun uses of one, that trains one step:

    >>> import types
    >>> from qae_lab.knobs import Knobs
    >>> used, callbacks = [], []
    >>> def train(resume_from_checkpoint=None):      # one step, calling the callbacks as the Trainer does
    ...     for cb in callbacks:
    ...         cb.on_step_begin(trainer.args, trainer.state, None)
    ...     trainer.state.global_step = 1
    >>> trainer = types.SimpleNamespace(
    ...     knobs=Knobs(), set_knobs=used.append, loss_type="dapo", train=train,
    ...     args=types.SimpleNamespace(max_steps=3, output_dir="runs/demo"), state=types.SimpleNamespace(global_step=0),
    ...     callback_handler=types.SimpleNamespace(callbacks=callbacks), add_callback=callbacks.append)
    >>> run = LiveRun(trainer, dashboard=Dashboard(max_steps=3, mode="static"))
    >>> run.controls.k.value = 0.7                   # a slider move before the step
    >>> run.then(lambda run: "evaluated").start().wait()
    TrainOutcome(interrupted=False, checkpoint=None, global_step=1, note='')
    >>> used[-1].quantile_k, run.dashboard.status.value, run.messages.outputs[0]["text"]
    (0.7, 'finished: 1 steps', 'evaluated\n')
    """

    def __init__(self, trainer, *, controls: Controls | None = None, dashboard: Dashboard | None = None,
                 resume_from_checkpoint: str | None = None):
        self.trainer = trainer
        self.controls = controls or Controls.for_trainer(trainer)
        self.dashboard = dashboard or Dashboard(trainer.args.max_steps)
        self.messages = widgets.Output()
        plan = pending_plan(trainer)
        if plan is not None:  # the trainer was made for a plan: follow it
            if resume_from_checkpoint is None:
                resume_from_checkpoint = plan.resume_from
            elif plan.resume_from is None or Path(resume_from_checkpoint).resolve() != Path(plan.resume_from).resolve():
                raise ValueError(f"resume_from_checkpoint={resume_from_checkpoint}, but the trainer was made for "
                                 f"{plan.summary}: make the trainer with make_trainer(..., resume=...) for that")
        self.resume_from_checkpoint = resume_from_checkpoint
        self.knobs = LiveKnobs(self.controls, trainer)
        # progress bars or log printing from a thread would land in whichever cell runs: the dashboard replaces
        # them (transformers picks NotebookProgressCallback inside a notebook, ProgressCallback elsewhere)
        for cls in (ProgressCallback, NotebookProgressCallback, PrinterCallback):
            while any(isinstance(cb, cls) for cb in trainer.callback_handler.callbacks):
                trainer.remove_callback(cls)
        trainer.add_callback(self.knobs)
        trainer.add_callback(DashboardFeed(self.dashboard))
        self.outcome = None
        self.error: BaseException | None = None
        self._after: list[Callable] = []
        self._thread: threading.Thread | None = None
        self.widget = widgets.VBox([self.controls.widget, self.dashboard.widget, self.messages])

    def _ipython_display_(self):
        display(self.widget)

    def then(self, fn: Callable) -> LiveRun:
        """Run ``fn(self)`` in the training thread after training ends (also after Stop, not after an
        error); a returned string is shown under the dashboard, another non-None value displayed."""
        self._after.append(fn)
        return self

    def start(self) -> LiveRun:
        """Start training in a background thread and return at once."""
        if self._thread is not None:
            raise RuntimeError("this LiveRun was already started; make a new one (resume_from_checkpoint) to go on")
        self._thread = threading.Thread(target=self._train, name="qae_lab-live-training", daemon=True)
        self._thread.start()
        return self

    def _train(self) -> None:
        with _thread_warnings_to(self.messages):
            self._train_and_follow_up()

    def _train_and_follow_up(self) -> None:
        try:
            self.trainer.train(resume_from_checkpoint=self.resume_from_checkpoint)
            step = self.trainer.state.global_step
            stopped = self.controls.stop_requested
            ckpt = Path(self.trainer.args.output_dir) / f"checkpoint-{step}"
            self.outcome = TrainOutcome(stopped, str(ckpt) if stopped else None, step)
            self.dashboard.set_status(f"stopped after step {step}; checkpoint {ckpt}" if stopped
                                      else f"finished: {step} steps")
            self.controls.finish()  # before the follow-ups (an evaluation can take minutes)
            for fn in self._after:
                self._show(fn(self))
        except BaseException as err:  # shown in the notebook, re-raised by wait()
            self.error = err
            self.dashboard.set_status(f"<b style='color:#c00'>failed: {type(err).__name__}: {err}</b>")
            self.messages.append_stderr(traceback.format_exc())
        finally:
            self.controls.finish(failed=self.error is not None)
            logger = run_logger(self.trainer)
            if logger is not None:  # training that failed never reached on_train_end: let go of the folder's lock
                logger.release_lock()

    def _show(self, value) -> None:
        if isinstance(value, str):
            self.messages.append_stdout(value + "\n")
        elif value is not None:
            self.messages.append_display_data(value)

    def logged_steps(self) -> list[dict]:
        r"""The training-step rows (:func:`~qae_lab.runfolder.step_rows`) of the run folder's ``log.jsonl``
        so far, in step order: ``[]`` before the first step is written. Safe to call while training
        goes on (a line being written is not read half)."""
        return step_rows(read_log_lines(Path(self.trainer.args.output_dir) / LOG_NAME)[0])

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Same as pressing Stop: end after the current step, with a checkpoint."""
        self.controls.request_stop()

    def wait(self, timeout: float | None = None):
        """Block until the run ends; its TrainOutcome. Re-raises the training thread's error.

        Blocking a notebook cell also blocks the widgets: call it only where nobody is using them
        (scripts, tests, a headless notebook run)."""
        if self._thread is None:
            raise RuntimeError("not started: call start() first")
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"training still running after {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"training failed in the background thread: {self.error!r}") from self.error
        return self.outcome
