r"""What a ``train`` command will do, decided before anything loads: its settings (or a resumed run's own recipe), its
run folder's one resume plan, the env it sets, and its notes; :mod:`qae_lab.runs.cli` carries the plan out.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from accelerate.utils import broadcast_object_list

from qae_lab.runs.presets import PRESETS, RunArgs, build, choose_preset, field_types, fields
from qae_lab._checks import check_path
from qae_lab.storage.resume import plan_run
from qae_lab.runs.pipeline import check_run, load_records, run_settings
from qae_lab.task.data import GSM8K_ENV
from qae_lab.storage.folder import CONFIG_NAME, RunFolderError, RunLock, jsonable
from qae_lab.runs.settings import apply_env, check_env, outgoing, outgoing_lines, read_config

__all__ = ["plan"]


def _sets_from_config(stored: dict, preset: str) -> list[str]:
    r"""``--set`` values that rebuild a stored run made without a recipe (from a notebook) from its preset."""
    run, cfg = build(preset, output_dir="unused")
    built = {"trainer": jsonable(cfg.to_dict()), "run": jsonable(dataclasses.asdict(run))}
    own = set(field_types(RunArgs))
    settable = {"trainer": set(field_types(type(cfg))) - own - {"output_dir", "logging_dir", "run_name"}, "run": own}
    values = {}
    for section in ("trainer", "run"):
        for name, value in (stored.get(section) or {}).items():
            if name in settable[section] and name in built[section] and value != built[section][name]:
                values[name] = value
    return _as_sets(values)


def _as_sets(values: dict[str, Any]) -> list[str]:
    """``{field: value}`` as ``--set`` strings (``name=value``; lists, mappings and booleans as JSON)."""
    return [
        f"{name}="
        + ("none" if value is None else json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value))
        for name, value in values.items()
    ]


def _main_process_folder(cfg) -> str:
    r"""The main process's ``cfg.output_dir``, the run folder every process of a launch must share: a new run's
    default folder is named from the clock, and processes that reach it at different seconds would each plan their own.

    >>> from qae_lab.runs.presets import build
    >>> _main_process_folder(build("cpu-demo", output_dir="/tmp/x")[1])
    '/tmp/x'
    """
    if cfg.world_size <= 1:  # reading it sets up the processes, as the Trainer will
        return cfg.output_dir
    return broadcast_object_list([cfg.output_dir], from_process=0)[0]


def plan(args) -> dict[str, Any]:
    r"""Everything ``train`` checks before anything loads, from its ``args``: the settings (alone, and together:
    :func:`qae_lab.runs.pipeline.check_run`), the run folder's one :class:`~qae_lab.storage.resume.ResumePlan`
    (``plan``; ``resume``: its checkpoint or None), a local data file; a resume rebuilds the run's own settings from
    its ``config.json`` recipe, this command's values on top. ``notes``: what it does, for people; ``config_values``:
    the config file's fields, as the run records them. A refused plan raises ``RunFolderError`` (a ValueError).

    >>> import argparse, tempfile
    >>> args = argparse.Namespace(preset=None, method="mean", sets=["quantile_k=0.6"], output_dir=tempfile.mkdtemp(),
    ...                           overwrite=False, resume=None, config=None, flags=[])
    >>> p = plan(args)
    >>> p["preset"], p["cfg"].baseline, p["cfg"].quantile_k, p["plan"].kind, p["resume"], p["notes"]
    ('cpu-demo', 'mean', 0.6, 'fresh', None, [])
    >>> _ = (Path(args.output_dir) / "log.jsonl").write_text('{"step": 1}\n')
    >>> plan(args)
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: .../ already holds a run (log.jsonl): a new run would overwrite it. ...
    """
    preset, method, sets, built = args.preset, args.method, list(args.sets), {}
    config, flags = getattr(args, "config", None), list(getattr(args, "flags", None) or [])
    for flag, path in (("--config", config), ("--resume", args.resume), ("--output-dir", args.output_dir)):
        if path is not None:
            check_path(path, flag)  # before any file is looked for: a NUL byte, a name too long
    file_values, env = read_config(config) if config is not None else (None, {})
    if args.resume:
        if config is not None:
            raise ValueError(
                "--resume rebuilds the run's own settings (its config.json): give --set or --NAME VALUE "
                "for what may change, not --config"
            )
        if args.overwrite:
            raise ValueError(
                "--resume continues the run in its folder, --overwrite deletes it to start a new one: choose one"
            )
        named = {*fields().sets(sets), *fields().arguments(flags)}  # what this command itself says

        def own_settings(stored: dict, out: Path) -> dict[str, Any]:  # the run's recipe, then this command's values
            nonlocal preset, method, sets, flags, file_values, env
            recipe = _recipe(stored, out)
            preset = preset or recipe.get("preset") or stored.get("preset")
            if preset not in PRESETS:
                raise RunFolderError(
                    f"{out / CONFIG_NAME} does not say which preset built the run: give --preset "
                    f"(and the --set values it was run with)"
                )
            method = method or recipe.get("method")
            # this command's --NAME VALUE go in as --set, above the recipe's own --set values
            sets = [
                *(recipe["sets"] if "sets" in recipe else _sets_from_config(stored, preset)),
                *_as_sets(fields().arguments(flags)),
                *sets,
            ]
            flags, file_values = list(recipe.get("args") or []), recipe.get("config")
            env = check_env(recipe.get("env") or {}, f"{out / CONFIG_NAME} (the run's env)")
            built["run"], built["cfg"] = build(
                preset, sets, method, output_dir=str(out), config=file_values, args=flags
            )
            _outgoing_named_again(built["cfg"], named, out)
            return run_settings(built["run"], built["cfg"])

        ready = plan_run(args.output_dir, resume=args.resume, settings=own_settings).require()
        run, cfg = built["run"], built["cfg"]
    else:
        preset = choose_preset(preset, (file_values or {}).get("preset"), f"config file {config}")
        run, cfg = build(preset, sets, method, output_dir=args.output_dir, config=config, args=flags)
        shared = _main_process_folder(cfg)
        if shared != cfg.output_dir:  # this process named a new run's folder at another second: take the main one's
            run, cfg = build(preset, sets, method, output_dir=shared, config=config, args=flags)
        ready = plan_run(cfg.output_dir, overwrite=args.overwrite).require()
    busy = RunLock(cfg.output_dir).busy()  # another process writes the folder now: refused here, dry run included
    if busy:
        raise RunFolderError(busy)
    # the env is set now, before the checks below and anything that loads (its variables are read later)
    env_lines = apply_env(env)
    check_run(run, cfg)  # sizes one machine holds, a step's prompts, a weight per reward function, the levels
    if run.task == "gsm8k" and (run.gsm8k_path or os.environ.get(GSM8K_ENV)):
        load_records(run)  # a local data file is read now (seconds): its errors name the file, line and field
    notes = ready.lines() + [f"env: {line}" for line in env_lines] + outgoing_lines(cfg) + _reuse_note(ready, cfg)
    return {
        "run": run,
        "cfg": cfg,
        "preset": preset,
        "method": method,
        "sets": sets,
        "config": config,
        "config_values": file_values,
        "flags": flags,
        "env": env,
        "plan": ready,
        "resume": ready.checkpoint,
        "notes": notes,
        "overwrite": args.overwrite,
    }


def _reuse_note(ready, cfg) -> list[str]:
    """The note of a resume from a checkpoint inside a generation batch's reuse, whose rest no checkpoint holds."""
    every = cfg.steps_per_generation * cfg.num_iterations  # micro-batches a generation serves
    if ready.step is None or (ready.step * cfg.gradient_accumulation_steps) % every == 0:
        return []
    return [
        f"checkpoint-{ready.step} falls inside a generation batch's reuse ({every} micro-batches a generation: "
        f"steps_per_generation x num_iterations): its rest is in no checkpoint, so the first resumed step generates "
        f"anew; after it, the run generates at the steps the uninterrupted run did"
    ]


def _outgoing_named_again(cfg, named: set[str], out: Path) -> None:
    r"""Refuse a resume's outgoing setting (:func:`qae_lab.runs.settings.outgoing`) this command does not name again."""
    unnamed = {k: v for k, v in outgoing(cfg).items() if k not in named}
    if unnamed:
        said = ", ".join(f"{k}={v!r}" for k, v in unnamed.items())
        again = " ".join(f"--set {s}" for s in _as_sets(unnamed))
        off = " ".join(f"--set {k}={_SENDS_NOTHING[k]}" for k in unnamed if k in _SENDS_NOTHING)
        raise RunFolderError(
            f"the run in {out}/ recorded settings that send data out ({said}); a resume takes "
            f"them only when this command names them again: add {again} to keep them, or "
            f"switch them off ({off})"
        )


# the value of each switch of qae_lab.runs.settings.outgoing that sends nothing
_SENDS_NOTHING = dict(push_to_hub="false", report_to="none", log_completions_hub_repo="none", vllm_mode="colocate")


def _recipe(stored: dict, out: Path) -> dict[str, Any]:
    """A stored run's recipe (``run.build``: preset, method, sets, config, args, env), its shape checked."""
    recipe = (stored.get("run") or {}).get("build") or {}
    where = f"{out / CONFIG_NAME}"
    if not isinstance(recipe, dict):
        raise RunFolderError(f"run config {where} is damaged (its run.build is not a mapping)")
    none = type(None)
    kinds = dict(preset=(str, none), method=(str, none), sets=list, args=list, config=(dict, none), env=(dict, none))
    for key, kind in kinds.items():
        if key in recipe and not isinstance(recipe[key], kind):
            raise RunFolderError(
                f"run config {where} is damaged (its run.build.{key} is a {type(recipe[key]).__name__})"
            )
    for key in ("sets", "args"):
        if any(not isinstance(item, str) for item in recipe.get(key) or []):
            raise RunFolderError(f"run config {where} is damaged (its run.build.{key} holds a non-string)")
    return recipe
