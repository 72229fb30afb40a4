r"""A whole run: evaluate the policy on held-out problems, train it, evaluate again, write the run folder.

:func:`train` is what ``python -m qae_lab train`` (:mod:`qae_lab.cli`) and notebook 04 run:
:func:`make_trainer` builds :class:`qae_lab.trainer.QAETrainer` (model, data, the reward ``run.reward``
names in :data:`qae_lab.rewards.REWARDS`, LoRA, the :class:`~qae_lab.callbacks.RunLogger`),
:func:`evaluate_run` measures pass@1 with the one verdict of :mod:`qae_lab.answers`, and the folder
(:mod:`qae_lab.runfolder`) then holds ``config.json``, ``log.jsonl``, ``eval_*.json``, ``report.html``
and ``model/``. :func:`plan` checks all a run needs before anything loads: the settings, the run
folder (a new run never overwrites another without ``overwrite``), and, for a resume, the checkpoint
and what the resume changes (:mod:`qae_lab.checkpoints`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from qae_lab.answers import is_correct, strict_is_correct
from qae_lab.callbacks import RunLogger, train_resumable, use_compact_progress
from qae_lab.checkpoints import (
    check_resume_point,
    checkpoint_problems,
    finished_step,
    latest_complete_checkpoint,
    publish_dir,
    resume_changes,
    resume_log,
)
from qae_lab.data import sa_ah_split, synthetic_task, to_grpo_dataset
from qae_lab.sums import sums_task
from qae_lab.evaluate import EvalResult, evaluate
from qae_lab.methods import method_name
from qae_lab.models import load_policy, lora_config
from qae_lab.presets import PRESETS, RunArgs, build, field_types
from qae_lab.rewards import REWARDS
from qae_lab.runfolder import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    EVAL_AFTER,
    LOG_NAME,
    MODEL_DIR,
    STAGING_DIR,
    SUPERSEDED_NAME,
    RunFolderError,
    claim_fresh,
    jsonable,
    read_json,
    read_log,
    read_log_lines,
    run_files,
    step_rows,
)
from qae_lab.trainer import QAETrainer

__all__ = ["load_records", "evaluate_run", "eval_line", "make_trainer", "run_record", "train", "plan"]



def load_records(run: RunArgs) -> tuple[list[dict], list[dict]]:
    r"""(training records, held-out evaluation records) of the run's task.

    >>> tr, ev = load_records(RunArgs(n_train=8, n_eval=4, levels=(2, 5)))
    >>> [r["level"] for r in ev], tr[0]["id"] != ev[0]["id"]
    ([2, 5, 2, 5], True)
    """
    if run.task == "gsm8k":
        return sa_ah_split(path=run.gsm8k_path, n_train=run.n_train, n_eval=run.n_eval, seed=run.data_seed)
    draw = sums_task if run.task == "sums" else synthetic_task
    return (draw(run.n_train, levels=run.levels, seed=run.data_seed),
            draw(run.n_eval, levels=run.levels, seed=run.data_seed + 1))


def evaluate_run(model, tok, records, run: RunArgs, cfg, path: Path | None = None, *, reuse: bool = False,
                 progress: bool | None = None):
    """Strict-verdict evaluation of ``records`` as the run is configured (samples, temperature, length),
    written to ``path`` when given (read back instead when ``reuse`` and it exists).

    pass@1 and pass@k (k = 2, 4, ... up to ``eval_samples``) are :func:`~qae_lab.answers.strict_is_correct`'s;
    the lenient :func:`~qae_lab.answers.is_correct`
    is kept beside it (each completion's ``correct_lenient``, ``lenient_pass@1``, ``lenient_greedy_pass@1``).

    >>> from qae_lab.models import load_policy
    >>> run, cfg = build("cpu-demo", ["n_eval=2", "eval_samples=2", "disable_tqdm=true"], output_dir="unused")
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> res = evaluate_run(model, tok, load_records(run)[1], run, cfg)
    >>> res.summary["n_problems"], res.summary["n_samples"], sorted(k for k in res.summary if "lenient" in k)
    (2, 2, ['lenient_greedy_pass@1', 'lenient_pass@1'])
    """
    if reuse and path is not None and path.exists():
        print(f"(evaluation read back from {path})", flush=True)
        return EvalResult.from_json(path)
    # pass@k at every power of two up to the sample count: sharpening shows as pass@1 up, pass@k at large k not
    ks = sorted({1, run.eval_samples} | {2 ** i for i in range(1, 8) if 2 ** i < run.eval_samples})
    res = evaluate(model, tok, records, num_samples=run.eval_samples, ks=ks,
                   temperature=cfg.temperature, max_new_tokens=run.eval_max_new_tokens or cfg.max_completion_length,
                   batch_size=run.eval_batch_size, seed=run.data_seed,
                   progress=not cfg.disable_tqdm if progress is None else progress,
                   verdict=strict_is_correct, lenient=is_correct)
    if path is not None:
        res.to_json(path)
    return res


def eval_line(name: str, res) -> str:
    """One line: greedy and sampled pass@1 overall and per level.

    >>> res = EvalResult({"greedy_pass@1": 0.75, "pass@1": 0.5, "n_samples": 8, "lenient_pass@1": 0.5,
    ...                   "n_problems": 4}, {2: {"pass@1": 0.75}, 3: {"pass@1": 0.25}}, [])
    >>> eval_line("after", res)
    'after: greedy pass@1 0.750, sampled pass@1 0.500 (n=8; lenient 0.500) on 4 problems [L2=0.750 L3=0.250]'
    """
    s = res.summary
    levels = " ".join(f"L{lv}={m['pass@1']:.3f}" for lv, m in res.by_level.items())
    return (f"{name}: greedy pass@1 {s['greedy_pass@1']:.3f}, sampled pass@1 {s['pass@1']:.3f} "
            f"(n={int(s['n_samples'])}; lenient {s['lenient_pass@1']:.3f}) "
            f"on {int(s['n_problems'])} problems [{levels}]")


def train(run: RunArgs, cfg, *, preset: str | None = None, command: str | None = None,
          resume_from_checkpoint: str | None = None, callbacks=(), recipe: dict | None = None) -> dict[str, Any]:
    r"""Evaluate, train with :class:`~qae_lab.trainer.QAETrainer`, evaluate, write the run folder.

    Args:
        run, cfg: from :func:`qae_lab.presets.build`.
        preset, command: recorded in ``config.json`` and the report.
        resume_from_checkpoint: a checkpoint folder to continue (the "before" evaluation is
            read back from the run folder when there).
        callbacks: further ``TrainerCallback`` objects.
        recipe: ``{"preset", "method", "sets"}``, recorded for ``--resume`` (:func:`make_trainer`).

    A fresh run refuses a folder that holds another run; a resume checks its settings and
    checkpoint first (:class:`qae_lab.callbacks.RunLogger`). Resuming a finished run (a larger
    ``max_steps``) first moves its ``eval_after.json`` and ``model/`` to ``finished-step<S>/``.

    Returns:
        dict with ``output_dir``, ``interrupted``, ``checkpoint`` (when interrupted), ``global_step``,
        ``wall_s``, ``before`` / ``after`` (evaluation summaries or None) and ``report`` (its path).

    >>> import contextlib, io, tempfile
    >>> out = Path(tempfile.mkdtemp()) / "run"
    >>> run, cfg = build("cpu-demo", ["max_steps=2", "n_train=16", "per_device_train_batch_size=8", "num_generations=4",
    ...                               "evaluate=false", "disable_tqdm=true", "torch_threads=1"], output_dir=str(out))
    >>> with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    ...     result = train(run, cfg, preset="cpu-demo")
    >>> result["interrupted"], result["global_step"], [r["step"] for r in step_rows(read_log(out))]
    (False, 2, [1, 2])
    """
    threads = torch.get_num_threads()
    if run.torch_threads:
        torch.set_num_threads(run.torch_threads)
    try:
        return _run(run, cfg, preset, command, resume_from_checkpoint, callbacks, recipe)
    finally:
        torch.set_num_threads(threads)


def make_trainer(run: RunArgs, cfg, *, preset: str | None = None, command: str | None = None, callbacks=(),
                 resume: bool = False, recipe: dict | None = None):
    r"""The run's :class:`~qae_lab.trainer.QAETrainer` (model, data, reward, LoRA, :class:`RunLogger`).

    The reward is ``REWARDS[run.reward]`` (:data:`qae_lab.rewards.REWARDS`): ``"strict"`` (0/1) or
    ``"composite"`` (SA-AH-GRPO's, r_max = 7.5), both judging correctness by the evaluation's verdict.

    Args:
        run, cfg: from :func:`qae_lab.presets.build`.
        preset, command: recorded in ``config.json``.
        callbacks: further ``TrainerCallback`` objects.
        resume: the trainer will resume a checkpoint of ``cfg.output_dir``; otherwise the folder must
            not hold another run (:func:`qae_lab.runfolder.claim_fresh`, checked before anything loads).
        recipe: ``{"preset", "method", "sets"}`` that built ``run`` and ``cfg``, recorded so that
            ``--resume`` rebuilds the same settings.

    The data is read before the model loads, so a bad data file fails in seconds.

    Returns:
        ``(trainer, tokenizer, eval_records)``; the trainer's progress display is
        :func:`qae_lab.callbacks.use_compact_progress`'s.

    >>> import tempfile
    >>> run, cfg = build("cpu-demo", ["n_train=16", "n_eval=4"], output_dir=tempfile.mkdtemp())
    >>> trainer, tok, eval_records = make_trainer(run, cfg, preset="cpu-demo")
    >>> type(trainer).__name__, [f.__name__ for f in trainer.reward_funcs], len(trainer.train_dataset), len(eval_records)
    ('QAETrainer', ['strict_correctness_reward'], 16, 4)
    """
    if not resume:
        claim_fresh(cfg.output_dir)
    train_recs, eval_recs = load_records(run)
    model, tok = load_policy(run.model, dtype=run.dtype, device="cpu" if cfg.use_cpu else None)
    trainer = QAETrainer(model=model, reward_funcs=[REWARDS[run.reward]], args=cfg,
                         train_dataset=to_grpo_dataset(train_recs), processing_class=tok,
                         peft_config=lora_config(run.lora_r) if run.lora else None,
                         callbacks=[RunLogger(preset=preset, run=run_record(run, cfg, command=command, recipe=recipe)),
                                    *callbacks])
    use_compact_progress(trainer)
    return trainer, tok, eval_recs


def run_record(run: RunArgs, cfg, *, command: str | None = None, recipe: dict | None = None) -> dict[str, Any]:
    r"""What ``config.json`` records under ``"run"``: the RunArgs fields, the method, the command and the recipe.

    >>> run_record(RunArgs(n_train=8), build("cpu-demo", output_dir="/tmp/x")[1])["method"]
    'qae'
    """
    return {**dataclasses.asdict(run), "command": command, "method": method_name(cfg), "build": recipe}


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
    print(f"the run had finished at step {step}: its {', '.join(p.name for p in done)} moved to {aside}", flush=True)
    return {"set_aside": [p.name for p in done], "set_aside_to": aside.name}


def _run(run: RunArgs, cfg, preset, command, resume_from_checkpoint, callbacks, recipe=None) -> dict[str, Any]:
    t0 = time.time()
    out = Path(cfg.output_dir)
    resuming = resume_from_checkpoint is not None
    finished = finished_step(out) if resuming else None
    trains_on = finished is None or cfg.max_steps > finished  # a finished run resumed as it was trains nothing
    trainer, tok, eval_recs = make_trainer(run, cfg, preset=preset, command=command, callbacks=callbacks,
                                           resume=resuming, recipe=recipe)
    if finished is not None and trains_on:
        moved = _set_aside_finished(out, finished)
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, RunLogger):
                cb.resume_extra.update(moved)
    before = (evaluate_run(trainer.model, tok, eval_recs, run, cfg, out / "eval_before.json",
                           reuse=resume_from_checkpoint is not None) if run.evaluate else None)
    if before:
        print(eval_line("before", before), flush=True)
    outcome = train_resumable(trainer, resume_from_checkpoint)
    after = None
    if outcome.interrupted:
        print(f"interrupted at step {outcome.global_step}" + (f" ({outcome.note})" if outcome.note else "")
              + (f"; checkpoint: {outcome.checkpoint}\nresume with: python -m qae_lab train --resume {out}"
                 if outcome.checkpoint else "; no checkpoint to resume"), flush=True)
    else:
        if run.save_model and (trains_on or not (out / MODEL_DIR).is_dir()):  # staged and renamed: never half
            staged = out / STAGING_DIR / MODEL_DIR
            shutil.rmtree(staged, ignore_errors=True)
            trainer.save_model(str(staged))
            publish_dir(staged, out / MODEL_DIR)
            with contextlib.suppress(OSError):  # the staging folder, now empty
                staged.parent.rmdir()
        if run.evaluate:
            after = evaluate_run(trainer.model, tok, eval_recs, run, cfg, out / "eval_after.json", reuse=not trains_on)
            print(eval_line("after", after), flush=True)
    wall = time.time() - t0
    report = _report(out, run, cfg, preset, command, outcome, wall, before, after)
    print(f"run folder: {out}  (report: {report})", flush=True)
    return {"output_dir": str(out), "interrupted": outcome.interrupted, "checkpoint": outcome.checkpoint,
            "global_step": outcome.global_step, "wall_s": wall, "report": str(report),
            "before": before.summary if before else None, "after": after.summary if after else None}


def _report(out: Path, run: RunArgs, cfg, preset, command, outcome, wall: float, before, after) -> Path:
    """``report.html`` of a run: its facts, the before/after table, the curves of ``log.jsonl``."""
    evals = {name: {"overall": r.summary, "levels": r.by_level} for name, r in (("before", before), ("after", after))
             if r is not None}
    summary = {"preset": preset, "command": command, "model": run.model, "task": run.task,
               "levels": ",".join(map(str, run.levels)) if run.task == "synthetic" else "—",
               "method": method_name(cfg), "K": cfg.quantile_k, "alpha": cfg.alpha, "learning rate": cfg.learning_rate,
               "steps": f"{outcome.global_step} / {cfg.max_steps}" + (" (interrupted)" if outcome.interrupted else ""),
               "prompts x completions per step": f"{cfg.generation_batch_size // cfg.num_generations} x "
                                                 f"{cfg.num_generations}",
               "wall time (this process)": f"{wall:.0f} s"}
    notes = ["Verdict: correct (qae_lab.answers.is_correct) AND stopped right after </answer> (qae_lab.answers."
             "strict_is_correct), in the training reward and in every pass@1 here; 'lenient' ignores the stop.",
             "Sampled pass@1: the mean over problems of c/n, n completions each at the training temperature; "
             "greedy pass@1: one argmax completion per problem. Same problems and seeds before and after.",
             "With sparse updates (sparse_update=True) TRL's entropy covers only the updated responses and is "
             "drawn as entropy/updated_rows."][:3 if cfg.sparse_update else 2]
    from qae_lab.report import write_report  # the only drawing of a run: plotting loads here, not at import

    return write_report(out, title=f"qae_lab run: {preset or run.model}", rows=read_log(out),
                        summary=summary, evals=evals, notes=notes)


def _resume_target(path: str) -> tuple[Path, list[str]]:
    r"""The checkpoint to resume: a checkpoint folder as given (checked), or a run folder's latest complete one.

    Returns ``(checkpoint, notes)``; the notes name later checkpoints skipped as incomplete.
    Raises :class:`~qae_lab.runfolder.RunFolderError` naming each missing or damaged file.
    """
    p = Path(path)
    if not p.exists():
        raise RunFolderError(f"--resume {path}: no such folder")
    if (p / "trainer_state.json").exists() or CHECKPOINT_NAME.match(p.name):
        problems = checkpoint_problems(p)
        if problems:
            raise RunFolderError(f"--resume {path}: the checkpoint cannot be resumed: {'; '.join(problems)}")
        return p, []
    latest, notes = latest_complete_checkpoint(p)
    if latest is None:
        raise RunFolderError(f"--resume {path}: no complete checkpoint in this run folder"
                             + (f" ({'; '.join(notes)})" if notes else ""))
    return latest, notes


def _sets_from_config(stored: dict, preset: str) -> list[str]:
    r"""``--set`` values that rebuild a stored run's settings from its preset (for runs made without a recipe,
    e.g. by :func:`train` from a notebook): every stored field that the preset alone sets otherwise."""
    run, cfg = build(preset, output_dir="unused")
    built = {"trainer": jsonable(cfg.to_dict()), "run": jsonable(dataclasses.asdict(run))}
    settable = {"trainer": set(field_types(type(cfg))) - set(field_types(RunArgs)), "run": set(field_types(RunArgs))}
    sets = []
    for section in ("trainer", "run"):
        for name, value in (stored.get(section) or {}).items():
            if (name in settable[section] and name in built[section] and value != built[section][name]
                    and name not in ("output_dir", "logging_dir", "run_name")):
                raw = "none" if value is None else json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
                sets.append(f"{name}={raw}")
    return sets


def plan(args) -> dict[str, Any]:
    r"""Everything ``train`` checks before anything loads: settings, the run folder, the checkpoint to resume.

    Returns ``{"run", "cfg", "preset", "method", "sets", "resume", "notes", "overwrite"}``; raises
    ``ValueError`` (or its :class:`~qae_lab.runfolder.RunFolderError`) with the reason.

    ``args``: the ``train`` command's arguments (``preset``, ``method``, ``sets``, ``output_dir``,
    ``overwrite``, ``resume``).

    >>> import argparse, tempfile
    >>> args = argparse.Namespace(preset=None, method="mean", sets=["quantile_k=0.6"], output_dir=tempfile.mkdtemp(),
    ...                           overwrite=False, resume=None)
    >>> p = plan(args)
    >>> p["preset"], p["cfg"].baseline, p["cfg"].quantile_k, p["resume"], p["notes"]
    ('cpu-demo', 'mean', 0.6, None, [])
    >>> _ = (Path(args.output_dir) / "log.jsonl").write_text('{"step": 1}\n')
    >>> plan(args)
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: .../ already holds a run (log.jsonl): a new run would overwrite it. ...
    """
    sets, notes = list(args.sets), []
    preset, method, resume = args.preset, args.method, None
    if args.resume:
        if args.overwrite:
            raise RunFolderError("--overwrite starts a new run; --resume continues one: choose one")
        resume, notes = _resume_target(args.resume)
        out = resume.parent
        if args.output_dir and Path(args.output_dir).resolve() != out.resolve():
            raise RunFolderError(f"--resume continues its own run folder {out}/; --output-dir {args.output_dir} "
                                 f"differs (to branch off, start a new run)")
        stored = read_json(out / CONFIG_NAME, "run config")
        recipe = (stored.get("run") or {}).get("build") or {}
        preset = preset or recipe.get("preset") or stored.get("preset")
        if preset not in PRESETS:
            raise RunFolderError(f"{out / CONFIG_NAME} does not say which preset built the run: give --preset "
                                 f"(and the --set values it was run with)")
        method = method or recipe.get("method")
        sets = [*(recipe["sets"] if "sets" in recipe else _sets_from_config(stored, preset)), *sets]
        run, cfg = build(preset, sets, method, output_dir=str(out))
        state = read_json(resume / "trainer_state.json", "checkpoint state")
        step = state["global_step"]
        changes = resume_changes(stored, jsonable(cfg.to_dict()), jsonable(run_record(run, cfg)), checkpoint_step=step)
        check_resume_point(out, step)
        rows, cut = read_log_lines(out / LOG_NAME)
        _kept, later, restored = resume_log(rows, step, state.get("log_history", []))
        notes.append(f"resuming {resume} (step {step})"
                     + (f"; changed: {', '.join(f'{k} {a} -> {b}' for k, (a, b) in changes.items())}" if changes else "")
                     + (f"; steps {', '.join(map(str, sorted({r['step'] for r in step_rows(later)})))} were logged "
                        f"after the checkpoint and are trained again (their rows move to {SUPERSEDED_NAME})"
                        if step_rows(later) else "")
                     + (f"; the log's last line was cut short (moves to {SUPERSEDED_NAME})" if cut else "")
                     + (f"; steps {', '.join(map(str, restored))} missing from the log are restored from the "
                        f"checkpoint" if restored else ""))
    else:
        preset = preset or "cpu-demo"
        run, cfg = build(preset, sets, method, output_dir=args.output_dir)
        found = run_files(cfg.output_dir)
        if found and not args.overwrite:
            claim_fresh(cfg.output_dir)  # raises, with the ways on
        if found:
            notes.append(f"--overwrite: deleting the previous run's {', '.join(found)} in {cfg.output_dir}/")
    if run.task == "gsm8k" and (run.gsm8k_path or os.environ.get("QAE_LAB_GSM8K_DIR")):
        load_records(run)  # a local data file is read now (seconds): its errors name the file, line and field
    return {"run": run, "cfg": cfg, "preset": preset, "method": method, "sets": sets, "resume": resume,
            "notes": notes, "overwrite": args.overwrite}
