r"""A whole run: evaluate the policy on held-out problems, train it, evaluate again, write the run folder.

:func:`train` is what ``python -m qae_lab train`` and notebook 04 run: :func:`make_trainer` builds the
:class:`qae_lab.train.trainer.QAETrainer`, :func:`evaluate_run` measures pass@1 with the one verdict of
:mod:`qae_lab.task.answers`; what the run does with its folder is its :class:`~qae_lab.storage.resume.ResumePlan`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
from accelerate import PartialState

from qae_lab.task.answers import is_correct, strict_is_correct
from qae_lab.threads import thread_probe, use_threads
from qae_lab.train.callbacks import RunLogger, thread_callbacks, train_resumable, use_compact_progress
from qae_lab.task.data import sa_ah_split, synthetic_task, to_grpo_dataset
from qae_lab.task.sums import sums_task
from qae_lab.task.evaluate import EvalResult, evaluate
from qae_lab.runs.costs import DTYPE_BYTES
from qae_lab.runs.limits import (
    MAX_DISK,
    MAX_EVAL_COMPLETIONS,
    SMALLEST_ARCH,
    checkpoint_bytes,
    model_arch,
    over_limits,
    saved_checkpoints,
    trainer_steps,
)
from qae_lab.runs.export import save_model
from qae_lab.methods import method_name
from qae_lab.task.models import check_model_files, load_policy, lora_config, resolve_name
from qae_lab.runs.presets import RunArgs, build  # noqa: F401 -- build: the doctests
from qae_lab.train.regime_eval import SPLIT_DRAWS, add_regime_eval
from qae_lab.storage.resume import RESUME, ResumePlan, claim, plan_run
from qae_lab.task.rewards import REWARDS
from qae_lab.storage.folder import MODEL_DIR, jsonable, read_log
from qae_lab.train.trainer import QAETrainer

__all__ = [
    "load_records",
    "reward_functions",
    "check_run",
    "evaluate_run",
    "eval_line",
    "make_trainer",
    "run_record",
    "run_settings",
    "train",
]

REGIME_BATCH = 16
"""Held-out prompts per ``generate`` call of the regime evaluation (:func:`qae_lab.train.regime_eval.add_regime_eval`)."""


def load_records(run: RunArgs) -> tuple[list[dict], list[dict]]:
    r"""(training records, held-out evaluation records) of the run's task.

    >>> tr, ev = load_records(RunArgs(n_train=8, n_eval=4, levels=(2, 5)))
    >>> [r["level"] for r in ev], tr[0]["id"] != ev[0]["id"]
    ([2, 5, 2, 5], True)
    """
    if run.task == "gsm8k":
        return sa_ah_split(path=run.gsm8k_path, n_train=run.n_train, n_eval=run.n_eval, seed=run.data_seed)
    draw = sums_task if run.task == "sums" else synthetic_task
    return (
        draw(run.n_train, levels=run.levels, seed=run.data_seed),
        draw(run.n_eval, levels=run.levels, seed=run.data_seed + 1),
    )


def reward_functions(run: RunArgs) -> list[Callable]:
    r"""The reward functions the run trains on: one, ``run.reward``'s (:data:`qae_lab.task.rewards.REWARDS`).

    >>> [f.__name__ for f in reward_functions(RunArgs())]
    ['strict_correctness_reward']
    """
    return [REWARDS[run.reward]]


def check_run(run: RunArgs, cfg) -> None:
    r"""Refuse, before anything loads, a run that no machine could hold or that would train nothing, naming each setting
    and what to change (sizes past :mod:`qae_lab.runs.limits`' bounds, too few problems, mismatched reward settings).

    >>> check_run(*build("cpu-demo", ["n_train=4"], output_dir="unused"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: n_train=4 is fewer than the 8 prompts one generation batch draws (generation_batch_size 64 / ...
    """
    said = over_limits(run, cfg, regime_batch=REGIME_BATCH, regime_draws=SPLIT_DRAWS)
    if said:
        said[0] = "settings beyond what one machine or run holds (docs/command-line.md, 'Largest settings'): " + said[0]
    prompts = cfg.generation_batch_size // cfg.num_generations  # TRL's RepeatSampler: a generation batch's prompts
    if run.n_train < prompts:
        said.append(
            f"n_train={run.n_train} is fewer than the {prompts} prompts one generation batch draws "
            f"(generation_batch_size {cfg.generation_batch_size} / num_generations {cfg.num_generations}); TRL's "
            f"sampler drops an incomplete batch, so the run would train no step: set n_train >= {prompts}, or draw "
            f"fewer prompts a step (a smaller per_device_train_batch_size, steps_per_generation or "
            f"gradient_accumulation_steps, or a larger num_generations)"
        )
    functions = reward_functions(run)
    if cfg.reward_weights is not None and len(cfg.reward_weights) != len(functions):
        said.append(
            f"reward_weights holds {len(cfg.reward_weights)} weights, but the run trains on {len(functions)} reward "
            f"function{'s' if len(functions) > 1 else ''} ({', '.join(f.__name__ for f in functions)}, of "
            f"reward={run.reward!r}): give one weight per function, or leave reward_weights unset"
        )
    arch = model_arch(run.model) or SMALLEST_ARCH
    if run.n_train >= prompts:  # the steps the Trainer will count (max_steps, or the epochs' steps)
        b = 2 if run.dtype == "auto" else DTYPE_BYTES[run.dtype]
        each = checkpoint_bytes(arch, lora_r=run.lora_r if run.lora else None, dtype_bytes=b)
        kept = saved_checkpoints(cfg, trainer_steps(run, cfg))
        if kept * each > MAX_DISK:
            said.append(
                f"the run would keep {kept} checkpoints of about {each / 2**30:.1f} GiB each "
                f"({kept * each / 2**40:.1f} TiB; at most {MAX_DISK // 2**40} TiB, limits.MAX_DISK): save less often "
                f"(save_steps), keep fewer (save_total_limit) or train with LoRA"
            )
    split = min(run.n_eval, cfg.regime_eval_prompts) * cfg.regime_eval_samples * SPLIT_DRAWS
    evaluations = {
        "an evaluation (n_eval x eval_samples)": run.n_eval * run.eval_samples if run.evaluate else 0,
        f"the regime evaluation's start split (regime_eval_prompts x regime_eval_samples x {SPLIT_DRAWS})": split
        if cfg.regime_eval_steps is not None
        else 0,
    }
    for what, completions in evaluations.items():
        if completions > MAX_EVAL_COMPLETIONS:
            said.append(
                f"{what} would sample {completions:,} completions (at most {MAX_EVAL_COMPLETIONS:,}, "
                f"limits.MAX_EVAL_COMPLETIONS): more than a day's sampling on a GPU"
            )
    source = resolve_name(run.model)
    if Path(source).is_dir():  # a folder here (the embedded model's too): its config.json read now, not fetched
        try:
            check_model_files(source)
        except (ValueError, OSError) as err:
            said.append(str(err))
    names = [f.__name__ for f in functions]
    if cfg.success_reward is not None and cfg.success_reward not in names:
        said.append(f"success_reward must name one of the run's reward functions {names}, got {cfg.success_reward!r}")
    held_out = run.evaluate or cfg.regime_eval_steps is not None  # n_eval's problems are used
    for name in ("n_train", "n_eval") if held_out else ("n_train",):
        if run.task != "gsm8k" and getattr(run, name) < len(run.levels):
            said.append(
                f"{name}={getattr(run, name)} is fewer than the {len(run.levels)} levels {list(run.levels)}: the "
                f"problems cycle through the levels, so levels {list(run.levels[getattr(run, name) :])} would get "
                f"none; set {name} >= {len(run.levels)} or name fewer levels"
            )
    if said:
        raise ValueError("; ".join(said))


def evaluate_run(
    model,
    tok,
    records,
    run: RunArgs,
    cfg,
    path: Path | None = None,
    *,
    reuse: bool = False,
    progress: bool | None = None,
):
    """Strict-verdict evaluation of ``records`` as the run is configured (pass@k at k = 1, 2, 4, ... ``eval_samples``,
    the lenient verdict beside), written to ``path`` when given (read back instead when ``reuse`` and it exists).

    >>> from qae_lab.task.models import load_policy
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
    ks = sorted({1, run.eval_samples} | {2**i for i in range(1, 8) if 2**i < run.eval_samples})
    pace = thread_probe(run.torch_threads, device=cfg.device)  # the lab's thread policy, batch by batch
    if pace is not None:
        pace.start()
    try:
        res = evaluate(
            model,
            tok,
            records,
            num_samples=run.eval_samples,
            ks=ks,
            temperature=cfg.temperature,
            max_new_tokens=run.eval_max_new_tokens or cfg.max_completion_length,
            batch_size=run.eval_batch_size,
            seed=run.data_seed,
            progress=not cfg.disable_tqdm if progress is None else progress,
            verdict=strict_is_correct,
            lenient=is_correct,
            pace=pace,
        )
    finally:
        if pace is not None:
            pace.stop()
    if path is not None:
        res.to_json(path)
    return res


def eval_line(name: str, res) -> str:
    """Greedy and sampled pass@1 overall, then per level on a second line (each within 100 columns).

    >>> res = EvalResult({"greedy_pass@1": 0.75, "pass@1": 0.5, "n_samples": 8, "lenient_pass@1": 0.5,
    ...                   "n_problems": 4}, {2: {"pass@1": 0.75}, 3: {"pass@1": 0.25}}, [])
    >>> print(eval_line("after", res))
    after: greedy pass@1 0.750, sampled pass@1 0.500 (n=8; lenient 0.500) on 4 problems
      sampled pass@1 by level: L2=0.750 L3=0.250
    """
    s = res.summary
    levels = " ".join(f"L{lv}={m['pass@1']:.3f}" for lv, m in res.by_level.items())
    return (
        f"{name}: greedy pass@1 {s['greedy_pass@1']:.3f}, sampled pass@1 {s['pass@1']:.3f} "
        f"(n={int(s['n_samples'])}; lenient {s['lenient_pass@1']:.3f}) on {int(s['n_problems'])} problems\n"
        f"  sampled pass@1 by level: {levels}"
    )


def train(
    run: RunArgs,
    cfg,
    *,
    preset: str | None = None,
    command: str | None = None,
    resume_from_checkpoint: str | None = None,
    callbacks=(),
    recipe: dict | None = None,
    plan: ResumePlan | None = None,
    report: Callable[..., Path] | None = None,
) -> dict[str, Any]:
    r"""Evaluate, train, evaluate, write the run folder; returns ``output_dir``, ``interrupted``, ``finished``,
    ``checkpoint``, ``global_step``, ``wall_s``, ``before`` / ``after`` (summaries or None) and ``report``.

    ``plan``: the run's :class:`~qae_lab.storage.resume.ResumePlan` (else made from ``resume_from_checkpoint``);
    ``recipe`` is recorded for ``--resume``; ``report`` draws ``report.html`` (:func:`qae_lab.lab.report.write_report`,
    which this layer may not import). Every process trains; the main one alone evaluates, writes and reports, holding
    the folder's lock. A run that did not train every step writes no ``model/`` and no "after" evaluation.

    >>> import contextlib, io, tempfile
    >>> from qae_lab.storage.folder import step_rows
    >>> out = Path(tempfile.mkdtemp()) / "run"
    >>> run, cfg = build("cpu-demo", ["max_steps=2", "n_train=16", "per_device_train_batch_size=8", "num_generations=4",
    ...                               "evaluate=false", "disable_tqdm=true", "torch_threads=1"], output_dir=str(out))
    >>> with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    ...     result = train(run, cfg, preset="cpu-demo")
    >>> result["interrupted"], result["global_step"], [r["step"] for r in step_rows(read_log(out))]
    (False, 2, [1, 2])
    """
    threads = torch.get_num_threads()
    use_threads(run.torch_threads, device=cfg.device)  # the lab's thread policy (qae_lab.threads)
    try:
        if plan is None:
            check_run(run, cfg)
            plan = plan_run(cfg.output_dir, resume=resume_from_checkpoint, settings=run_settings(run, cfg))
        elif resume_from_checkpoint is not None:
            raise ValueError("give the run's plan or resume_from_checkpoint, not both")
        return _run(run, cfg, preset, command, plan, callbacks, recipe, report)
    finally:
        use_threads(threads)  # put back


def make_trainer(
    run: RunArgs,
    cfg,
    *,
    preset: str | None = None,
    command: str | None = None,
    callbacks=(),
    resume: bool | str | os.PathLike = False,
    recipe: dict | None = None,
    plan: ResumePlan | None = None,
):
    r"""``(trainer, tokenizer, eval_records)``: the run's :class:`~qae_lab.train.trainer.QAETrainer` (model, data,
    reward, LoRA, :class:`RunLogger`, on a CPU the thread policy's tuner). ``resume``: True or a checkpoint or run
    folder; ``plan``: the :class:`~qae_lab.storage.resume.ResumePlan` to follow (else made here), claimed by the main
    process before anything loads; the :class:`RunLogger` holds the folder's lock until training ends.

    >>> import tempfile
    >>> run, cfg = build("cpu-demo", ["n_train=16", "n_eval=4"], output_dir=tempfile.mkdtemp())
    >>> trainer, tok, eval_records = make_trainer(run, cfg, preset="cpu-demo")
    >>> type(trainer).__name__, [f.__name__ for f in trainer.reward_funcs], len(trainer.train_dataset), len(eval_records)
    ('QAETrainer', ['strict_correctness_reward'], 16, 4)
    """
    if plan is None:
        check_run(run, cfg)
        plan = plan_run(cfg.output_dir, resume=resume or None, settings=run_settings(run, cfg))
    elif Path(plan.folder).resolve() != Path(cfg.output_dir).resolve():
        raise ValueError(f"the plan is for {plan.folder}/, the trainer writes to {cfg.output_dir}/")
    device = str(cfg.device)  # as the Trainer assigns it (cuda:<local rank>); reading it sets up the processes

    state = PartialState()
    state.wait_for_everyone()  # every process has planned from the folder as it was; then the main one claims it
    lock = None
    if state.is_main_process:
        lock = claim(plan)  # the folder's lock, held by the RunLogger until the run's last write
    else:
        plan.require()
    try:
        train_recs, eval_recs = load_records(run)
        model, tok = load_policy(run.model, dtype=run.dtype, device=device)
        logger = RunLogger(
            preset=preset, run=run_record(run, cfg, command=command, recipe=recipe), plan=plan, lock=lock
        )
        trainer = QAETrainer(
            model=model,
            reward_funcs=reward_functions(run),
            args=cfg,
            train_dataset=to_grpo_dataset(train_recs),
            processing_class=tok,
            peft_config=lora_config(run.lora_r) if run.lora else None,
            callbacks=[logger, *callbacks, *thread_callbacks(run.torch_threads, device)],
        )
        # with regime_eval_steps: the first regime_eval_prompts held-out problems (a resume reads its split back now)
        add_regime_eval(trainer, eval_recs, resume=plan.kind == RESUME, batch_size=REGIME_BATCH)
    except BaseException:
        if lock is not None:
            lock.release()  # nothing trains: the folder is free again (a fresh claim leaves only its marker)
        raise
    use_compact_progress(trainer)
    return trainer, tok, eval_recs


def run_record(run: RunArgs, cfg, *, command: str | None = None, recipe: dict | None = None) -> dict[str, Any]:
    r"""What ``config.json`` records under ``"run"``: the RunArgs fields, the method, the command and the recipe.

    >>> run_record(RunArgs(n_train=8), build("cpu-demo", output_dir="/tmp/x")[1])["method"]
    'qae'
    """
    return {**dataclasses.asdict(run), "command": command, "method": method_name(cfg), "build": recipe}


def run_settings(run: RunArgs, cfg) -> dict[str, Any]:
    r"""The run's settings as ``config.json`` holds them, ``{"trainer", "run"}``: what a resume plan compares.

    >>> run_settings(RunArgs(n_train=8), build("cpu-demo", output_dir="/tmp/x")[1])["run"]["n_train"]
    8
    """
    return {"trainer": jsonable(cfg.to_dict()), "run": jsonable(run_record(run, cfg))}


def _run(run: RunArgs, cfg, preset, command, plan: ResumePlan, callbacks, recipe=None, report=None) -> dict[str, Any]:
    t0 = time.time()
    trainer, tok, eval_recs = make_trainer(
        run, cfg, preset=preset, command=command, callbacks=callbacks, recipe=recipe, plan=plan
    )
    logger = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, RunLogger))
    logger.hold_lock = True  # held through the run's last write below, not only through training
    try:
        return _train_and_write(run, cfg, preset, command, plan, trainer, tok, eval_recs, t0, report)
    finally:
        logger.release_lock(force=True)


def _train_and_write(
    run, cfg, preset, command, plan: ResumePlan, trainer, tok, eval_recs, t0, report=None
) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    resuming, trains_on = plan.kind == RESUME, plan.trains_on  # a finished run resumed as it was trains nothing
    main = trainer.is_world_process_zero()  # all processes train; the main one alone writes, evaluates, reports
    before = (
        evaluate_run(trainer.model, tok, eval_recs, run, cfg, out / "eval_before.json", reuse=resuming)
        if run.evaluate and main
        else None
    )
    if before:
        print(eval_line("before", before), flush=True)
    trainer.accelerator.wait_for_everyone()
    outcome = train_resumable(trainer, plan.resume_from)
    asked, finished = outcome.asked, outcome.finished
    after = None
    if outcome.interrupted:
        print(
            f"interrupted at step {outcome.global_step}"
            + (f" ({outcome.note})" if outcome.note else "")
            + (
                f"; checkpoint: {outcome.checkpoint}\nresume with: python -m qae_lab train --resume {out}"
                if outcome.checkpoint
                else "; no checkpoint to resume"
            ),
            flush=True,
        )
    elif not finished:  # ended on its own before its last step: not a trained run
        print(
            f"the run trained {outcome.global_step} of the {asked} steps it was asked for, so it is not finished: "
            f"no {MODEL_DIR}/ and no evaluation after training were written"
            + (
                " nor a report page (nothing trained; the likely cause: fewer training problems than one generation "
                "batch draws)"
                if outcome.global_step == 0
                else ""
            ),
            flush=True,
        )
    else:
        if run.save_model and (trains_on or not (out / MODEL_DIR).is_dir()):  # staged and renamed: never half
            save_model(trainer, out, replace=True)  # a model/ left by an interrupted end is kept aside
        if run.evaluate and main:
            after = evaluate_run(trainer.model, tok, eval_recs, run, cfg, out / "eval_after.json", reuse=not trains_on)
            print(eval_line("after", after), flush=True)
    wall = time.time() - t0
    # a report page for a run that trained at least one step: finished, or marked interrupted / stopped early
    drawn = main and report and outcome.global_step > 0
    page = _report(report, out, run, cfg, preset, command, outcome, finished, wall, before, after) if drawn else None
    if main:
        print(f"run folder: {out}" + (f"  (report: {page})" if page else ""), flush=True)
    return {
        "output_dir": str(out),
        "interrupted": outcome.interrupted,
        "finished": finished,
        "checkpoint": outcome.checkpoint,
        "global_step": outcome.global_step,
        "wall_s": wall,
        "report": str(page) if page else None,
        "before": before.summary if before else None,
        "after": after.summary if after else None,
    }


def _report(
    draw, out: Path, run: RunArgs, cfg, preset, command, outcome, finished: bool, wall: float, before, after
) -> Path:
    """``report.html`` of a run, drawn by ``draw``: its facts, the before/after table, the curves of ``log.jsonl``."""
    evals = {
        name: {"overall": r.summary, "levels": r.by_level}
        for name, r in (("before", before), ("after", after))
        if r is not None
    }
    summary = {
        "preset": preset,
        "command": command,
        "model": run.model,
        "task": run.task,
        "levels": ",".join(map(str, run.levels)) if run.task == "synthetic" else "—",
        "method": method_name(cfg),
        "K": cfg.quantile_k,
        "alpha": cfg.alpha,
        "learning rate": cfg.learning_rate,
        "steps": f"{outcome.global_step} / {cfg.max_steps}"
        + (" (interrupted)" if outcome.interrupted else "" if finished else " (stopped early: not finished)"),
        "prompts x completions per step": f"{cfg.generation_batch_size // cfg.num_generations} x {cfg.num_generations}",
        "wall time (this process)": f"{wall:.0f} s",
    }
    notes = [
        "Verdict: correct (qae_lab.task.answers.is_correct) AND stopped right after </answer> (qae_lab.task.answers."
        "strict_is_correct), in the training reward and in every pass@1 here; 'lenient' ignores the stop.",
        "Sampled pass@1: the mean over problems of c/n, n completions each at the training temperature; "
        "greedy pass@1: one argmax completion per problem. Same problems and seeds before and after.",
        "With sparse updates (sparse_update=True) entropy is still TRL's, over every completion token (the rows "
        "left out of the update measured without gradients); entropy/updated_rows is the updated rows' alone.",
    ][: 3 if cfg.sparse_update else 2]
    return draw(
        out, title=f"qae_lab run: {preset or run.model}", rows=read_log(out), summary=summary, evals=evals, notes=notes
    )
