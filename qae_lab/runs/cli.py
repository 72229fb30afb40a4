r"""``python -m qae_lab train --preset cpu-demo``: a whole RLVR run from the command line (argument parsing only).

What a run does: :mod:`qae_lab.runs.pipeline`; its folder: :mod:`qae_lab.storage.folder`; presets and ``--set name=value``
overrides: :mod:`qae_lab.runs.presets`; the ``--method`` names: :mod:`qae_lab.methods`::

    python -m qae_lab train --preset cpu-demo                       # or: qae-lab train ...
    python -m qae_lab train --preset cpu-demo --method qae_sa_ah --quantile_k 0.6 --max_steps 50
    python -m qae_lab train --config run.yaml --alpha 0.3             # a YAML file of fields (qae_lab/runs/configs/)
    python -m qae_lab train --preset qwen2.5-1.5b-gsm8k --dry-run   # check everything, print the config, load nothing
    python -m qae_lab train --resume runs/cpu-demo-20260101-120000  # after Ctrl-C: the run's own settings
    python -m qae_lab presets                                       # list the presets
    python -m qae_lab export runs/cpu-demo-20260101-120000 exported  # merged 16-bit model + card (qae_lab.runs.export)

Ctrl-C during training saves a resumable checkpoint (:func:`qae_lab.train.callbacks.train_resumable`)
and exits with status 130; a failed check exits with status 2 and says why; a run that ends before its last step
on its own (not finished: no model, :func:`qae_lab.runs.pipeline.train`) exits with status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from qae_lab.runs import export
from qae_lab.storage.resume import SAFE_ON_RESUME, latest_complete_checkpoint
from qae_lab.methods import METHODS, PARTNERS, method_settings
from qae_lab.runs.presets import PRESET_DIR, PRESETS, RunArgs, command_line, field_types, resolve
from qae_lab.runs.pipeline import train
from qae_lab.runs.run_plan import plan
from qae_lab.storage.folder import RunFolderError

__all__ = ["main"]


def _method(name: str) -> str:
    """argparse type of ``--method``: a method name that :func:`~qae_lab.methods.method_settings` accepts."""
    try:
        method_settings(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qae-lab", description="QAE / SA-AH-GRPO runs with TRL (see qae_lab.runs.cli).", allow_abbrev=False
    )
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser(
        "train",
        help="evaluate, train, evaluate; write the run folder",
        allow_abbrev=False,
        usage="%(prog)s [--preset NAME] [--config FILE] [--method METHOD] [--NAME VALUE ...] "
        "[--set NAME=VALUE ...] [--output-dir DIR] [--overwrite] [--resume PATH] [--dry-run]",
        description="Run a preset, a YAML config file, or both, with any field overridden as --NAME VALUE (typed by "
        f"TRL's parser, as TRL's own scripts take them). Fields of RunArgs: {', '.join(field_types(RunArgs))}; and "
        "every field of qae_lab.train.config.QAEConfig, e.g. --quantile_k 0.6 --alpha 0.3 --report_to tensorboard.",
    )
    t.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help=f"default cpu-demo (or the config file's preset:); with --resume, the run's own; the "
        f"presets' files: {PRESET_DIR}",
    )
    t.add_argument(
        "--config",
        metavar="FILE",
        help="a YAML file of fields (the presets' form; `preset: NAME` starts from a preset, `env:` sets environment "
        "variables); --NAME VALUE and --set override it",
    )
    t.add_argument(
        "--method",
        type=_method,
        metavar="METHOD[+PARTNER...]",
        help=f"sets baseline and token_weighting: one of {', '.join(METHODS)}, each optionally followed by "
        f"+partner from {', '.join(PARTNERS)} (e.g. qae+clip_higher)",
    )
    t.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a RunArgs or QAEConfig field (repeatable), e.g. --set quantile_k=0.6; with --resume "
        "only " + ", ".join(SAFE_ON_RESUME) + " may change",
    )
    t.add_argument("--output-dir", help="run folder (default runs/<preset>-<timestamp>); it must not hold another run")
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run already in --output-dir (its config, log, evaluations, model, checkpoints, "
        ".staging and finished-step<S>/: listed first; never a run nested in them, nor files no run wrote)",
    )
    t.add_argument(
        "--resume",
        metavar="PATH",
        help="checkpoint folder, or run folder (its latest complete checkpoint); the run's settings come from its "
        "config.json",
    )
    t.add_argument("--dry-run", action="store_true", help="check everything, print the resolved configuration, exit")
    sub.add_parser("presets", help="list the presets")
    export.add_arguments(
        sub.add_parser(
            "export",
            help="write a run's trained model as a stand-alone model folder",
            description="The merged 16-bit model (or the LoRA adapter), tokenizer, generation config and a model card, "
            "written to a new folder OUT.",
        )
    )
    return p


def main(argv: list[str] | None = None, *, report=None) -> int:
    r"""The ``qae-lab`` / ``python -m qae_lab`` entry point; returns the exit status (module docstring). Every check
    runs before anything loads (:func:`qae_lab.runs.run_plan.plan`), ``--dry-run`` too. ``report`` draws the run's
    ``report.html`` (:func:`qae_lab.runs.pipeline.train`'s; :mod:`qae_lab.__main__` passes the lab's).

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     main(["train", "--set", "max_steps=0", "--dry-run"])
    2
    >>> print(err.getvalue().strip())
    qae-lab: error: preset 'cpu-demo' with overrides {'max_steps': 0}: max_steps must be -1 (train num_train_epochs epochs) or in [1, 100000] (MAX_STEPS: the Trainer keeps every logged step in memory), got 0
    """
    parser = _parser()
    args, flags = parser.parse_known_args(argv)
    if flags and args.command != "train":
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    args.flags = flags  # --NAME VALUE of fields, typed by qae_lab.runs.presets.fields()
    if args.command == "export":
        return export.main(args)
    if args.command == "presets":
        for name, preset in PRESETS.items():
            print(f"{name}: {json.dumps(preset, default=str)}")
        return 0
    try:
        ready = plan(args)
    except ValueError as err:
        print(f"qae-lab: error: {err}", file=sys.stderr)
        return 2
    run, cfg = ready["run"], ready["cfg"]
    command = command_line(ready["preset"], ready["sets"], ready["method"], config=ready["config"], args=ready["flags"])
    for note in ready["notes"] if cfg.process_index == 0 and not args.dry_run else ():  # once, under several too
        print(note, flush=True)
    if args.dry_run:
        print(json.dumps(_resolved(ready, run, cfg, command), indent=1, default=str))
        return 0
    recipe = {
        "preset": ready["preset"],
        "method": ready["method"],
        "sets": ready["sets"],
        "config": ready["config_values"],
        "args": ready["flags"],
        "env": ready["env"],
    }  # --resume rebuilds these
    try:  # the run follows the plan made above: a new run (its folder claimed first), or the resume of its checkpoint
        result = train(
            run, cfg, preset=ready["preset"], command=command, plan=ready["plan"], recipe=recipe, report=report
        )
    except KeyboardInterrupt:  # outside the training loop (loading, evaluation, a save): say what is on disk
        latest, _ = latest_complete_checkpoint(cfg.output_dir)
        said = "no checkpoint to resume"
        if latest:
            said = f"latest complete checkpoint {latest.name}, resume with: python -m qae_lab train --resume {cfg.output_dir}"
        print(f"interrupted; run folder {cfg.output_dir}: {said}", file=sys.stderr)
        return 130
    except RunFolderError as err:
        print(f"qae-lab: error: {err}", file=sys.stderr)
        return 2
    return 130 if result["interrupted"] else 1 if result.get("finished") is False else 0


def _resolved(plan: dict, run: RunArgs, cfg, command: str) -> dict[str, Any]:
    """What a dry run prints: the command, the RunArgs, every overridden QAEConfig field's value, the env, the notes."""
    _, overrides = resolve(
        plan["preset"], plan["sets"], plan["method"], config=plan["config_values"], args=plan["flags"]
    )
    trainer = {k: getattr(cfg, k) for k in overrides if k in field_types(type(cfg))}
    for name in ("output_dir", "generation_batch_size", "steps_per_generation"):
        trainer[name] = getattr(cfg, name)
    return dict(command=command, run=dataclasses.asdict(run), trainer=trainer, env=plan["env"], notes=plan["notes"])
