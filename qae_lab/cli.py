r"""``python -m qae_lab train --preset cpu-demo``: a whole RLVR run from the command line (argument parsing only).

What a run does: :mod:`qae_lab.run`; its folder: :mod:`qae_lab.runfolder`; presets and ``--set name=value``
overrides: :mod:`qae_lab.presets`; the ``--method`` names: :mod:`qae_lab.methods`::

    python -m qae_lab train --preset cpu-demo                       # or: qae-lab train ...
    python -m qae_lab train --preset cpu-demo --method qae_sa_ah --set quantile_k=0.6 --set max_steps=50
    python -m qae_lab train --preset qwen2.5-1.5b-gsm8k --dry-run   # check everything, print the config, load nothing
    python -m qae_lab train --resume runs/cpu-demo-20260101-120000  # after Ctrl-C: the run's own settings
    python -m qae_lab presets                                       # list the presets

Ctrl-C during training saves a resumable checkpoint (:func:`qae_lab.callbacks.train_resumable`)
and exits with status 130; a failed check exits with status 2 and says why.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from qae_lab.checkpoints import SAFE_ON_RESUME, latest_complete_checkpoint
from qae_lab.methods import METHODS, PARTNERS, method_settings
from qae_lab.presets import PRESETS, RunArgs, command_line, field_types, parse_sets
from qae_lab.run import plan, train
from qae_lab.runfolder import RunFolderError

__all__ = ["main"]


def _method(name: str) -> str:
    """argparse type of ``--method``: a method name that :func:`~qae_lab.methods.method_settings` accepts."""
    try:
        method_settings(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qae-lab", description="QAE / SA-AH-GRPO runs with TRL (see qae_lab.cli).")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="evaluate, train, evaluate; write the run folder",
                       description="Run a preset. Fields of RunArgs: " + ", ".join(field_types(RunArgs))
                       + "; and every field of qae_lab.config.QAEConfig (TRL's GRPOConfig + QAE/SA-AH knobs).")
    t.add_argument("--preset", choices=sorted(PRESETS),
                   help="default cpu-demo; with --resume, the run's own (from its config.json)")
    t.add_argument("--method", type=_method, metavar="METHOD[+PARTNER...]",
                   help=f"sets baseline and token_weighting: one of {', '.join(METHODS)}, each optionally followed by "
                        f"+partner from {', '.join(PARTNERS)} (e.g. qae+clip_higher)")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                   help="override a RunArgs or QAEConfig field (repeatable), e.g. --set quantile_k=0.6; with --resume "
                        "only " + ", ".join(SAFE_ON_RESUME) + " may change")
    t.add_argument("--output-dir", help="run folder (default runs/<preset>-<timestamp>); it must not hold another run")
    t.add_argument("--overwrite", action="store_true",
                   help="delete the run already in --output-dir (its config, log, evaluations, model, checkpoints)")
    t.add_argument("--resume", metavar="PATH", help="checkpoint folder, or run folder (its latest complete checkpoint)"
                   "; the run's settings come from its config.json")
    t.add_argument("--dry-run", action="store_true", help="check everything, print the resolved configuration, exit")
    sub.add_parser("presets", help="list the presets")
    return p


def main(argv: list[str] | None = None) -> int:
    r"""The ``qae-lab`` / ``python -m qae_lab`` entry point; returns the exit status (130 when interrupted).

    Every check (settings, data folder, run folder, checkpoint) runs before anything loads, with
    ``--dry-run`` too: :func:`qae_lab.run.plan` makes the run folder's one
    :class:`~qae_lab.resume.ResumePlan` (fresh, resume checkpoint N, or refuse), which the run then
    follows. A failed check prints ``qae-lab: error: ...`` and returns 2.

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     main(["train", "--set", "max_steps=0", "--dry-run"])
    2
    >>> print(err.getvalue().strip())
    qae-lab: error: preset 'cpu-demo' with overrides {'max_steps': 0}: max_steps must be -1 (train num_train_epochs epochs) or >= 1, got 0
    """
    args = _parser().parse_args(argv)
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
    command = command_line(ready["preset"], ready["sets"], ready["method"])
    for note in ready["notes"]:
        print(note, flush=True)
    if args.dry_run:
        print(json.dumps(_resolved(ready, run, cfg, command), indent=1, default=str))
        return 0
    recipe = {"preset": ready["preset"], "method": ready["method"], "sets": ready["sets"]}
    try:  # the run follows the plan made above: a new run (its folder claimed first), or the resume of its checkpoint
        result = train(run, cfg, preset=ready["preset"], command=command, plan=ready["plan"], recipe=recipe)
    except KeyboardInterrupt:  # outside the training loop (loading, evaluation, a save): say what is on disk
        latest, _ = latest_complete_checkpoint(cfg.output_dir)
        print(f"interrupted; run folder {cfg.output_dir}: "
              + (f"latest complete checkpoint {latest.name}, resume with: python -m qae_lab train --resume "
                 f"{cfg.output_dir}" if latest else "no checkpoint to resume"), file=sys.stderr)
        return 130
    except RunFolderError as err:
        print(f"qae-lab: error: {err}", file=sys.stderr)
        return 2
    return 130 if result["interrupted"] else 0


def _resolved(plan: dict, run: RunArgs, cfg, command: str) -> dict[str, Any]:
    """What a dry run prints: the command, the RunArgs, and the resolved value of every overridden QAEConfig field."""
    overrides = {**PRESETS[plan["preset"]], **(method_settings(plan["method"]) if plan["method"] else {}),
                 **parse_sets(plan["sets"])}
    trainer = {k: getattr(cfg, k) for k in overrides if k in field_types(type(cfg))}
    trainer.update(output_dir=cfg.output_dir, generation_batch_size=cfg.generation_batch_size,
                   steps_per_generation=cfg.steps_per_generation)
    return {"command": command, "run": dataclasses.asdict(run), "trainer": trainer}
