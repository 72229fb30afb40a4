r"""``python -m qae_lab export RUN_DIR OUT``: a trained run's policy as a stand-alone Hugging Face model folder.

OUT holds what ``AutoModelForCausalLM.from_pretrained(OUT)`` loads, with no qae_lab and no PEFT: the policy with its
LoRA adapter merged (W + (lora_alpha / r) B A, in float32, rounded once to ``dtype``: bfloat16 by default), the
tokenizer, a model card ``README.md`` and ``qae_lab_run.json`` (the run's ``config.json``); ``adapter_only``: the
adapter as trained.

Implementer's notes: docs/implementation.md, section ``qae_lab.runs.export``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

import torch

from qae_lab._checks import check_choice, check_path
from qae_lab.storage.resume import (
    checkpoint_problems,
    checkpoints,
    folder_problems,
    latest_complete_checkpoint,
    publish_dir,
)
from qae_lab.knobs import knob_changes
from qae_lab.methods import method_name
from qae_lab.task.models import EMBEDDED_MODELS, load_policy, resolve_name
from qae_lab._project import REPOSITORY_URL
from qae_lab.storage.claim import held_run, removal_problem
from qae_lab.storage.folder import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    EVAL_AFTER,
    EVAL_BEFORE,
    LOG_NAME,
    MODEL_DIR,
    STAGING_DIR,
    RunFolderError,
    atomic_write_text,
    check_folder,
    new_folder,
    read_json,
    read_log,
    step_rows,
)

__all__ = [
    "DTYPES",
    "Source",
    "find_source",
    "load_trained",
    "model_card",
    "export_run",
    "push",
    "save_model",
    "add_arguments",
    "main",
    "model_problems",
]

DTYPES = ("bfloat16", "float16", "float32")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_PEFT_NOISE = r"`is_gradient_checkpointing` is deprecated"


@dataclasses.dataclass(frozen=True)
class Source:
    """What an export reads: the run folder, the weights folder in it, and what the run recorded."""

    run_dir: Path
    weights: Path  # model/ or checkpoint-N/
    step: int | None  # the optimizer step of those weights (None: no log)
    adapter: bool  # a PEFT adapter over ``base`` (LoRA), else a full model
    base: str  # the base model as the run named it: "embedded", "qwen2.5-1.5b", a Hub id or a folder
    config: dict  # the run's config.json ({} when the folder has none)


def _weights(run_dir: Path, checkpoint: int | str | None) -> Path:
    """The folder of the weights to export: ``model/``, or a complete checkpoint (see :func:`find_source`)."""
    if checkpoint is None:
        weights = run_dir / MODEL_DIR
        if not weights.is_dir():
            latest, _ = latest_complete_checkpoint(run_dir, resume=False)
            raise RunFolderError(
                f"{run_dir}/ has no {MODEL_DIR}/ (the run was interrupted, or trained with save_model=false) and "
                + (
                    "no complete checkpoint: nothing to export"
                    if latest is None
                    else f"its latest complete checkpoint is {latest.name}: export that with --checkpoint latest"
                )
            )
        if not any((weights / name).is_file() for name in _WEIGHTS):
            raise RunFolderError(f"{weights}/ holds no safetensors weights (one of {', '.join(_WEIGHTS)})")
        damaged = model_problems(weights)
        if damaged:
            raise RunFolderError(f"{weights}/ is damaged: {'; '.join(damaged)}")
        return weights
    if checkpoint == "latest":
        weights, notes = latest_complete_checkpoint(run_dir, resume=False)
        if weights is None:
            raise RunFolderError(f"{run_dir}/ has no complete checkpoint" + "".join(f"; {n}" for n in notes))
    elif isinstance(checkpoint, int) and not isinstance(checkpoint, bool):
        weights = run_dir / f"checkpoint-{checkpoint}"
        if not weights.is_dir():
            found = ", ".join(str(s) for s, _ in checkpoints(run_dir)) or "none"
            raise RunFolderError(
                f"checkpoint {checkpoint}: {run_dir}/ has no {weights.name}/ (its checkpoints: {found})"
            )
    else:
        raise ValueError(f"checkpoint must be None, a step (int) or 'latest', got {checkpoint!r}")
    problems = checkpoint_problems(weights, resume=False)  # what an export reads: the state and whole weights
    if problems:
        raise RunFolderError(f"{weights}/ is not a complete checkpoint: {'; '.join(problems)}")
    return weights


def model_problems(folder: Path) -> list[str]:
    r"""What is cut short or damaged in a saved model folder (``model/``); empty when it can be loaded.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "model.safetensors").write_bytes(b"\x10" + bytes(7) + b"{}")
    >>> model_problems(d)
    ['model.safetensors is cut short (header of 16 bytes in a 10-byte file)']
    """
    if folder.is_symlink():
        return [f"{folder} is a symbolic link (to {os.readlink(folder)}), not a model folder of the run's own"]
    return folder_problems(folder, "a model folder's")


def find_source(run_dir: str | os.PathLike, checkpoint: int | str | None = None) -> Source:
    r"""The weights to export from a run folder (or a ``checkpoint-N``), checked before anything loads, and what the
    run recorded. ``checkpoint``: None (``model/``), a step N, or ``"latest"`` (the latest complete one).

    >>> find_source("runs/nowhere")
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: run_dir runs/nowhere is not a folder
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunFolderError(f"run_dir {run_dir} is not a folder")
    if checkpoint is None and CHECKPOINT_NAME.match(run_dir.name):  # a checkpoint folder given as RUN_DIR
        run_dir, checkpoint = run_dir.parent, int(CHECKPOINT_NAME.match(run_dir.name).group(1))
    weights = _weights(run_dir, checkpoint)
    config = read_json(run_dir / CONFIG_NAME, "run config", expect=dict) if (run_dir / CONFIG_NAME).is_file() else {}
    for section in ("run", "trainer", "versions"):
        if not isinstance(config.get(section) or {}, dict):
            raise RunFolderError(f"run config {run_dir / CONFIG_NAME} is damaged (its {section!r} is not a mapping)")
    adapter = (weights / "adapter_config.json").is_file()
    base = (config.get("run") or {}).get("model")
    if base is None and adapter:
        base = read_json(weights / "adapter_config.json", "adapter config").get("base_model_name_or_path")
    if base is None:
        raise RunFolderError(f"{run_dir}/ does not say which model the run trained (no {CONFIG_NAME} naming run.model)")
    if weights.name == MODEL_DIR:
        rows = step_rows(read_log(run_dir / LOG_NAME)) if (run_dir / LOG_NAME).is_file() else []
        step = rows[-1]["step"] if rows else None
    else:
        step = read_json(weights / "trainer_state.json", "trainer state")["global_step"]
    return Source(run_dir, weights, step, adapter, str(base), config)


def load_trained(source: Source | str | os.PathLike, *, checkpoint=None, dtype: str = "float32", device: str = "cpu"):
    r"""The trained policy of a run, as it trained: ``(model, tokenizer)`` in eval mode; a LoRA run's adapter unmerged
    over its base (a ``peft.PeftModel``). ``source``: a :class:`Source`, or a run folder (with ``checkpoint``).
    """
    if not isinstance(source, Source):
        source = find_source(source, checkpoint)
    if not source.adapter:
        model, tok = load_policy(str(source.weights), dtype=dtype, device=device)
        return model.eval(), tok
    from peft import PeftModel  # the train extra: imported only when used

    base, tok = load_policy(source.base, dtype=dtype, device=device)  # a name, an alias or a folder
    with warnings.catch_warnings():  # PEFT reads transformers' deprecated is_gradient_checkpointing: not the user's
        warnings.filterwarnings("ignore", message=_PEFT_NOISE)
        model = PeftModel.from_pretrained(base, source.weights, is_trainable=False)
    return model.eval(), tok


def _check_out(out: Path, source: Source, overwrite: bool) -> None:
    """Refuse an OUT that would hide or replace what a run wrote, or that holds files (unless ``overwrite``)."""
    where, run = out.resolve(), source.run_dir.resolve()
    if where == run or run.is_relative_to(where) or where.is_relative_to(source.weights.resolve()):
        raise RunFolderError(
            f"out {out} would hold or replace the run folder {source.run_dir}/ or its "
            f"{source.weights.name}/: choose a folder beside them (e.g. {run}/export)"
        )
    check_folder(out, "out")  # no name a run folder uses, inside no such name; no file among its parents
    if out.is_symlink():
        raise RunFolderError(
            f"out {out} is a symbolic link (to {os.readlink(out)}): an export is written beside OUT "
            f"and renamed into place, which would replace the link, not fill its target; give the "
            f"folder itself"
        )
    if not out.exists():
        return
    if not out.is_dir():
        raise RunFolderError(f"out {out} is a file, not a folder")
    held = held_run(out) or (f"{out}/ is a checkpoint" if (out / "trainer_state.json").is_file() else None)
    if held:
        raise RunFolderError(f"out {out}/ holds a run's files, which an export never replaces: {held}")
    names = sorted(p.name for p in out.iterdir())
    if names and not overwrite:
        raise RunFolderError(
            f"out {out}/ is not empty ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): "
            f"choose a new folder, or pass --overwrite (overwrite=True; the old folder is kept, "
            f"renamed to .replaced-{out.name}-<time>)"
        )


def export_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    checkpoint: int | str | None = None,
    adapter_only: bool = False,
    dtype: str | None = None,
    overwrite: bool = False,
    push_to_hub: str | None = None,
    private: bool = False,
) -> Path:
    r"""Export a run's trained policy to ``out`` (empty or new, unless ``overwrite``), written beside it then renamed
    into place; ``push_to_hub``: then upload it (:func:`push`).
    """
    if adapter_only and dtype is not None:
        raise ValueError(f"dtype={dtype!r} applies to a merged model: an adapter (adapter_only) is written as trained")
    dtype = check_choice("bfloat16" if dtype is None else dtype, "dtype", DTYPES)
    check_path(run_dir, "run_dir"), check_path(out, "out")  # a NUL byte, a name too long: named before any look
    if push_to_hub is not None and not _REPO_ID.match(push_to_hub):
        raise ValueError(f"push_to_hub must be a Hub repository id 'owner/name', got {push_to_hub!r}")
    source = find_source(run_dir, checkpoint)
    if adapter_only and not source.adapter:
        raise ValueError(
            f"adapter_only: {source.weights}/ holds a full model (the run trained without LoRA), not "
            f"an adapter: export it without --adapter-only"
        )
    out = Path(out)
    _check_out(out, source, overwrite)
    model, tok = load_trained(source, dtype="float32", device="cpu")
    # this process's own (the name carries its id): a leftover, or a link planted there, removed, never written through
    staged = new_folder(out.parent / f".{out.name}.export-{os.getpid()}")
    try:
        if adapter_only:
            model.peft_config["default"].base_model_name_or_path = resolve_name(source.base)
            model.save_pretrained(staged, safe_serialization=True)
        else:
            with warnings.catch_warnings():  # as in load_trained
                warnings.filterwarnings("ignore", message=_PEFT_NOISE)
                merged = model.merge_and_unload() if source.adapter else model  # W + (alpha / r) B A, in float32
            merged = merged.to(getattr(torch, dtype))
            merged.config.dtype = dtype
            if merged.generation_config.pad_token_id is None:
                merged.generation_config.pad_token_id = tok.pad_token_id
            merged.save_pretrained(staged, safe_serialization=True)
        tok.save_pretrained(staged)
        atomic_write_text(staged / "README.md", model_card(source, dtype=None if adapter_only else dtype))
        if source.config:
            atomic_write_text(staged / "qae_lab_run.json", json.dumps(source.config, indent=1))
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # an empty folder made for the export: replaced, nothing in it is lost
        publish_dir(staged, out)
    except BaseException:  # an error or Ctrl-C: the half-written export goes, OUT stays as it was
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if push_to_hub is not None:
        push(out, push_to_hub, private=private)
    return out


_CARD = """\
---
{front}---

# {base} + {method}: {name}

`{base}` trained with RLVR (GRPO through TRL's `GRPOTrainer`) by [qae_lab]({url}), exported with \
`python -m qae_lab export`.

| | |
| --- | --- |
{facts}
{sections}## How it was made

```
{command}
```

{versions}## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

{load}
tokenizer = AutoTokenizer.from_pretrained("<this folder or repo>")
```

Prompts as in training: the tokenizer's chat template over qae_lab's system prompt \
(`qae_lab.task.data.prompt_text`); answers end with `</answer>`.
"""


def model_card(source: Source, *, dtype: str | None) -> str:
    r"""The export's ``README.md`` (:data:`_CARD`): front matter for the Hub, then what the run was and what it scored."""
    run, trainer = source.config.get("run") or {}, source.config.get("trainer") or {}
    hub_id = None if source.base in EMBEDDED_MODELS else resolve_name(source.base)
    hub_id = None if hub_id is None or Path(hub_id).exists() else hub_id  # a local folder is no Hub id
    method = method_name(source.config) if run.get("method") or "baseline" in trainer else "unknown"
    tags = [t for t in ("qae-lab", "grpo", "rlvr", "trl", method.replace("_", "-")) if t != "unknown"]
    front = [*([f"base_model: {hub_id}"] if hub_id else []), f"library_name: {'transformers' if dtype else 'peft'}"]
    front += ["pipeline_tag: text-generation", "tags:", *[f"- {t}" for t in tags]]
    what = (
        f"{'LoRA merged into the base' if source.adapter else 'the full model'}, {dtype}"
        if dtype
        else "the LoRA adapter (load it over the base model)"
    )
    alpha_used = trainer.get("token_weighting") == "sa_ah"
    facts = {
        "base model": f"`{source.base}`" + (f" (`{hub_id}`)" if hub_id and hub_id != source.base else ""),
        "method": f"{method} (baseline {trainer.get('baseline', '?')}, token weighting "
        f"{trainer.get('token_weighting', '?')})",
        "K (quantile_k)": _num(trainer.get("quantile_k")),
        "alpha": _num(trainer.get("alpha")) + ("" if alpha_used else " (not used: no SA-AH token weighting)"),
        "steps": f"{_num(source.step)} of max_steps {_num(trainer.get('max_steps'))}",
        "task": run.get("task", "?") + (f", levels {run['levels']}" if run.get("task") == "synthetic" else ""),
        "reward": run.get("reward", "?"),
        "learning rate": _num(trainer.get("learning_rate")),
        "weights": f"{what}; from {source.weights.name}/ of the run folder",
    }
    versions = ", ".join(f"{k} {v}" for k, v in (source.config.get("versions") or {}).items())
    return _CARD.format(
        front="".join(line + "\n" for line in front),
        base=source.base,
        method=method,
        name=source.run_dir.name,
        url=REPOSITORY_URL,
        facts="\n".join(f"| {k} | {v} |" for k, v in facts.items()),
        sections="".join(line + "\n" for line in [""] + _knob_lines(source) + _eval_lines(source)),
        command=run.get("command")
        or f"made from Python (a notebook or a script), preset {source.config.get('preset') or '?'}; its settings: "
        "qae_lab_run.json",
        versions=f"Versions: {versions}.\n\n" if versions else "",
        load='model = AutoModelForCausalLM.from_pretrained("<this folder or repo>")'
        if dtype
        else f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{resolve_name(source.base)}"), '
        '"<this folder or repo>")  # from peft import PeftModel',
    )


def _num(x) -> str:
    return "?" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def _knob_lines(source: Source) -> list[str]:
    """The knobs in force when they changed during the run (live controls); nothing when they never did."""
    log = source.run_dir / LOG_NAME
    rows = step_rows(read_log(log)) if log.is_file() else []
    changes = knob_changes([r for r in rows if source.step is None or r["step"] <= source.step])
    if len(changes) < 2:
        return []
    return (
        ["The knobs changed during the run (steps from which they held, as logged):", ""]
        + [
            f"* step {c['step']}: " + ", ".join(f"{k} = {_num(v)}" for k, v in c.items() if k != "step")
            for c in changes
        ]
        + [""]
    )


def _eval_lines(source: Source) -> list[str]:
    """Greedy and sampled pass@1 before and after training, from the run's evaluation files."""
    final = source.weights.name == MODEL_DIR  # eval_after.json evaluated model/, not a checkpoint
    paths = (source.run_dir / EVAL_BEFORE, source.run_dir / EVAL_AFTER)
    before, after = (
        read_json(p, "evaluation")["summary"] if p.is_file() and (final or i == 0) else None
        for i, p in enumerate(paths)
    )
    if before is None and after is None:
        return ["## Evaluation", "", "Not evaluated (the run had evaluate=false, or ended before its evaluation).", ""]
    lines = [
        "## Evaluation",
        "",
        "Held-out problems, the strict verdict (correct and stopped right after "
        "`</answer>`), the same problems and seeds before and after training.",
        "",
        "| | before training | after training |",
        "| --- | --- | --- |",
    ]
    for key, label in (("greedy_pass@1", "greedy pass@1"), ("pass@1", "sampled pass@1")):
        lines.append(
            f"| {label} | " + " | ".join(f"{s[key]:.3f}" if s and key in s else "—" for s in (before, after)) + " |"
        )
    s = after or before
    lines += [
        "",
        f"{int(s['n_problems'])} problems; sampled pass@1 is the mean over problems of c/n with "
        f"n = {int(s['n_samples'])} completions each at the training temperature.",
    ]
    if not final:
        lines.append(
            f"After training: not evaluated at checkpoint step {source.step} ({EVAL_AFTER} is the final model's)."
        )
    return lines + [""]


def push(folder: str | os.PathLike, repo: str, *, private: bool = False) -> str:
    """Upload ``folder`` to the Hub repository ``repo`` (created if missing); its URL. Needs a Hub login."""
    from huggingface_hub import HfApi  # installed with transformers (the train extra)

    api = HfApi()
    api.create_repo(repo, exist_ok=True, private=private)
    info = api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="qae_lab export")
    return str(getattr(info, "commit_url", info))


def save_model(trainer, run_dir: str | os.PathLike, *, replace: bool = False) -> Path:
    r"""Write a trainer's model to the run folder's ``model/``, staged then renamed; an existing one is refused (with
    ``replace``: kept aside). Every process calls it; the main one writes.

    """
    run_dir = Path(run_dir)
    final = run_dir / MODEL_DIR
    if final.exists() and not replace:
        raise RunFolderError(f"{final}/ exists already: export it, or save elsewhere (nothing is written over)")
    staged = run_dir / STAGING_DIR / MODEL_DIR
    main = trainer.is_world_process_zero()
    problem = removal_problem(run_dir / STAGING_DIR)  # a leftover save's staging goes below, nothing else: every
    if problem:  # process asks, so none waits below for one that stopped here
        raise RunFolderError(f"{problem}; nothing was saved")
    if main:  # a leftover, or a link planted there, removed, never written through
        (run_dir / STAGING_DIR).mkdir(exist_ok=True)
        new_folder(staged)
    trainer.accelerator.wait_for_everyone()  # none saves into the staging folder before it is clear
    trainer.save_model(str(staged))
    if main:
        publish_dir(staged, final)
        if not any(staged.parent.iterdir()):
            staged.parent.rmdir()  # the staging folder, now empty
    return final


# ---------------------------------------------------------------- the command line


def _checkpoint(text: str) -> int | str:
    if text == "latest" or text.isdigit():
        return text if text == "latest" else int(text)
    raise argparse.ArgumentTypeError(f"a step (e.g. 200) or 'latest', got {text!r}")


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``export`` subcommand's arguments (:mod:`qae_lab.runs.cli` registers it)."""
    p.add_argument("run_dir", metavar="RUN_DIR", help="run folder (its model/), or one of its checkpoint-N folders")
    p.add_argument("out", metavar="OUT", help="new folder to write; must not exist or be empty (see --overwrite)")
    p.add_argument(
        "--checkpoint",
        type=_checkpoint,
        metavar="STEP|latest",
        help="export checkpoint-STEP (or the latest complete one) instead of model/",
    )
    p.add_argument("--adapter-only", action="store_true", help="write the LoRA adapter, not the merged model")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="precision of the merged model (default bfloat16; float16 for "
        "GPUs without bf16; float32: the trained weights unrounded)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT (renamed aside, not deleted)")
    p.add_argument("--push-to-hub", metavar="REPO", help="then upload OUT to this Hub repository (owner/name)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    return p


def main(args: argparse.Namespace) -> int:
    """Run ``export`` from parsed arguments; the exit status (2: a failed check, 1: a failed upload, 130: Ctrl-C)."""
    try:
        if args.push_to_hub is not None and not _REPO_ID.match(args.push_to_hub):
            raise ValueError(f"--push-to-hub must be a Hub repository id 'owner/name', got {args.push_to_hub!r}")
        out = export_run(
            args.run_dir,
            args.out,
            checkpoint=args.checkpoint,
            adapter_only=args.adapter_only,
            dtype=args.dtype,
            overwrite=args.overwrite,
        )
    except ValueError as err:
        print(f"qae-lab: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    print(f"exported {args.run_dir} -> {out} ({', '.join(sorted(p.name for p in out.iterdir()))})", flush=True)
    if args.push_to_hub is not None:
        try:
            print(f"pushed: {push(out, args.push_to_hub, private=args.private)}")
        except Exception as err:  # no login, no network, no rights: the export itself is whole
            print(
                f"qae-lab: error: the upload to {args.push_to_hub} failed ({type(err).__name__}: {err}); {out} is "
                f"complete: upload it with `hf upload {args.push_to_hub} {out}`",
                file=sys.stderr,
            )
            return 1
    return 0
