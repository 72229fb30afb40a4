r"""A training run's record on disk: its config, a crash-safe metrics log, interruption checkpoints, a report.

One folder per run (``<output_dir>``)::

    config.json    QAEConfig.to_dict() + library versions + the preset and run options
    log.jsonl      one JSON object per ``Trainer.log`` call: step, epoch, time, every metric
    checkpoint-N/  a resumable Trainer checkpoint (written on KeyboardInterrupt, or by save_strategy)
    report.html    curves and before/after pass@1, one self-contained file (see :func:`write_report`)

:class:`RunLogger` is a ``transformers.TrainerCallback``. Each log line is written, flushed
and ``fsync``-ed before the callback returns, so a run stopped at any point (Ctrl-C, a
notebook's stop button, a killed process) leaves every finished step's line on disk;
at worst the line being written when the process died is cut short, which
:func:`read_log` drops. The metrics are TRL's and qae_lab's, under their logged names;
those the report draws:

==========================  ==============================================================
``reward``                  mean total reward of the step's completions (TRL)
``entropy``                 mean per-token entropy of the completions (TRL); with sparse
                            updates ``entropy/updated_rows``: the updated responses only
``completions/mean_length`` mean completion length in tokens (TRL)
``qae/zero_adv_frac``       fraction of responses with advantage exactly 0
``qae/hard_frac``           fraction of prompts in QAE's hard regime, p <= 1-K (``easy_frac``: p > 1-K)
``qae/k``                   the K used this step (a live knob)
``saah/alpha``              SA-AH's alpha used this step (logged with token weighting only)
``saah/w_mean_neg``         mean SA-AH weight w_t over negative-advantage tokens
==========================  ==============================================================

Interruption and resume: :func:`train_resumable` runs ``trainer.train`` and, on
``KeyboardInterrupt``, saves a full checkpoint with the Trainer's own
``_save_checkpoint`` (weights, optimizer, scheduler, RNG states, ``trainer_state.json``:
what ``trainer.train(resume_from_checkpoint=...)`` reads), then returns instead of
raising. A resumed run appends to the same ``log.jsonl``, first dropping any lines of
steps after its checkpoint (resuming from an earlier, periodic checkpoint), so the log
reads as one run.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

__all__ = ["LOG_NAME", "CONFIG_NAME", "REPORT_NAME", "RunLogger", "CompactProgress", "use_compact_progress",
           "versions", "write_config", "read_log", "step_rows", "TrainOutcome", "train_resumable", "write_report"]

LOG_NAME, CONFIG_NAME, REPORT_NAME = "log.jsonl", "config.json", "report.html"


def versions() -> dict[str, str]:
    r"""Versions of the libraries a run's numbers depend on.

    >>> sorted(versions())
    ['python', 'qae_lab', 'torch', 'transformers', 'trl']
    """
    import platform

    import torch
    import transformers
    import trl

    import qae_lab

    return {"qae_lab": qae_lab.__version__, "trl": trl.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__, "python": platform.python_version()}


def _jsonable(x: Any) -> Any:
    """x with NaN/inf as None and tuples/sets as lists, so the JSON is strict."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, (str, int, bool)):
        return x
    return str(x)


def write_config(output_dir: str | os.PathLike, args, *, preset: str | None = None,
                 run: dict | None = None) -> Path:
    r"""Write ``config.json``: ``{"preset", "run", "trainer": args.to_dict(), "versions"}``."""
    path = Path(output_dir) / CONFIG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"preset": preset, "run": run or {}, "trainer": args.to_dict(), "versions": versions()}
    path.write_text(json.dumps(_jsonable(data), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _append_line(path: Path, row: dict) -> None:
    """One JSON line appended, flushed and fsync-ed: on disk before the call returns."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(_jsonable(row), allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_log(path: str | os.PathLike, *, strict: bool = False) -> list[dict]:
    r"""The rows of a ``log.jsonl`` (a file or the run folder), in order.

    A last line that does not parse (the process died while writing it) is dropped,
    unless ``strict``; a bad line anywhere else always raises ``ValueError``.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log(p)
    [{'step': 1, 'reward': 0.5}]
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1 and not strict:
                break  # a line cut short by the interruption
            raise ValueError(f"{path}: line {i + 1} is not JSON ({err})") from None
    return rows


def step_rows(rows: list[dict]) -> list[dict]:
    r"""The training-step rows of a log (those with a ``reward``), without the end-of-training summary.

    >>> step_rows([{"step": 1, "reward": 0.5}, {"step": 1, "train_runtime": 3.0}])
    [{'step': 1, 'reward': 0.5}]
    """
    return [r for r in rows if r.get("reward") is not None]


class RunLogger(TrainerCallback):
    r"""Writes ``config.json`` when training begins and one ``log.jsonl`` line per ``on_log``.

    Args:
        preset: the preset's name, recorded in ``config.json`` (None: none).
        run: further run options to record (model, data, evaluation), JSON-able.

    Each line holds ``step``, ``epoch``, ``time`` (Unix seconds), ``elapsed_s`` (since this
    process began training) and every metric of the log call. Only the main process writes.
    """

    def __init__(self, preset: str | None = None, run: dict | None = None):
        self.preset, self.run = preset, dict(run or {})
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()
        if not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        write_config(out, args, preset=self.preset, run=self.run)
        log = out / LOG_NAME
        if log.exists():  # resuming: keep the lines up to the checkpoint's step (a fresh run: none)
            kept = [r for r in read_log(log) if r.get("step", 0) <= state.global_step]
            tmp = log.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
            os.replace(tmp, log)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero:
            return
        now = time.time()
        row = {"step": state.global_step, "epoch": state.epoch, "time": now,
               "elapsed_s": now - (self.start if self.start is not None else now), **(logs or {})}
        _append_line(Path(args.output_dir) / LOG_NAME, row)


class CompactProgress(ProgressCallback):
    r"""transformers' progress bar with a few metrics as its postfix, instead of printing every log dict."""

    SHOWN: typing.ClassVar[dict[str, str]] = {  # logged name -> short label
        "reward": "reward", "completions/mean_length": "len", "qae/zero_adv_frac": "zero_adv",
        "entropy": "H", "entropy/updated_rows": "H_upd"}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {short: f"{logs[k]:.3g}" for k, short in self.SHOWN.items() if isinstance(logs.get(k), float)}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)


def use_compact_progress(trainer) -> None:
    r"""Swap the trainer's log printing for :class:`CompactProgress` (no bar at all with ``disable_tqdm``)."""
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if not trainer.args.disable_tqdm:
        trainer.add_callback(CompactProgress())


@dataclass
class TrainOutcome:
    r"""How :func:`train_resumable` ended: ``interrupted`` and, if so, the ``checkpoint`` it saved."""

    interrupted: bool
    checkpoint: str | None
    global_step: int


def train_resumable(trainer, resume_from_checkpoint: str | None = None) -> TrainOutcome:
    r"""``trainer.train(...)``; on ``KeyboardInterrupt`` save a resumable checkpoint and return.

    The checkpoint is ``<output_dir>/checkpoint-<global_step>``, written by the Trainer's
    ``_save_checkpoint``: the state after the last *finished* optimizer step (the
    interrupted step's partial work is discarded). Continue with
    ``trainer.train(resume_from_checkpoint=outcome.checkpoint)`` (same config and data).
    """
    try:
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    except KeyboardInterrupt:
        trainer.model.zero_grad(set_to_none=True)  # a half-accumulated gradient is not part of any step
        trainer._save_checkpoint(trainer.model, trial=None)
        step = trainer.state.global_step
        return TrainOutcome(True, str(Path(trainer.args.output_dir) / f"checkpoint-{step}"), step)
    return TrainOutcome(False, None, trainer.state.global_step)


def _table_html(header: list[str], rows: list[list]) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else ("—" if v is None else html.escape(str(v)))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(output_dir: str | os.PathLike, *, title: str, rows: list[dict], summary: dict[str, Any],
                 evals: dict[str, dict] | None = None, notes: list[str] = ()) -> Path:
    r"""Write ``report.html``: a summary table, the pass@1 table and the training curves.

    Args:
        output_dir: the run folder.
        title: the page title.
        rows: the log rows (:func:`read_log`).
        summary: key -> value facts of the run (preset, method, steps, wall time, ...).
        evals: ``{"before": {...}, "after": {...}}``, each ``{"overall": metrics, "levels":
            {level: metrics}}`` with metrics as in :attr:`qae_lab.evaluate.EvalResult.summary`.
        notes: paragraphs of text under the title.

    Returns:
        the path. The page embeds plotly.js: one file that opens offline.
    """
    from qae_lab.plots import run_curves_figure

    title = html.escape(title)
    parts = [f"<h1>{title}</h1>", *(f"<p>{html.escape(n)}</p>" for n in notes),
             "<h2>Run</h2>", _table_html(["", ""], [[k, v] for k, v in summary.items()])]
    if evals:
        keys = ("greedy_pass@1", "pass@1", "pass@8", "extracted_frac")
        table = []
        for name, ev in evals.items():
            table.append([name, "all", *(ev["overall"].get(k) for k in keys)])
            table += [[name, f"level {lv}", *(m.get(k) for k in keys)] for lv, m in ev.get("levels", {}).items()]
        parts += ["<h2>Held-out evaluation</h2>", _table_html(["model", "problems", *keys], table)]
    fig = run_curves_figure(step_rows(rows))
    parts += ["<h2>Training curves</h2>", fig.to_html(include_plotlyjs=True, full_html=False)]
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin:8px 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>")
    path = Path(output_dir) / REPORT_NAME
    path.write_text(page, encoding="utf-8")
    return path
