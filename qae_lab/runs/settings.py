r"""Typed run settings from YAML files and the command line, read by TRL's own parser.

A run's settings are fields of two dataclasses, :class:`qae_lab.runs.presets.RunArgs` and
:class:`qae_lab.train.config.QAEConfig` (TRL's ``GRPOConfig`` plus the QAE / SA-AH knobs). Their values
come in three forms, and every one is typed by the same parser, ``trl.TrlParser`` (an
``transformers.HfArgumentParser`` over both dataclasses), so a value means in a file what it means
on the command line:

* a YAML file (a preset in ``qae_lab/runs/configs/``, or ``--config run.yaml``): a mapping of field
  names to values (:func:`read_config`, then :meth:`FieldParser.typed`), in the form TRL's own scripts take;
* ``--name value`` after ``qae-lab train`` (:meth:`FieldParser.arguments`), as with TRL's scripts;
* ``--set name=value`` (:meth:`FieldParser.sets`), the older form, kept because runs record it.

Each value goes through the parser's own action for its field (argparse's type conversion, the
choices of an enum or ``Literal`` field, ``true``/``false`` for booleans, ``nargs`` for lists), and
a value the parser cannot read, or a name that is no field, fails with the file (or flag) and the
name in the message. ``none`` / ``null`` set a field that allows None to None; ``bf16: auto`` (the GPU
presets) is bf16 where the GPU supports it.

The parser of a run's two dataclasses is :func:`qae_lab.runs.presets.fields`:

>>> from qae_lab.runs.presets import fields
>>> fields().typed({"quantile_k": "0.6", "levels": [3, 4], "lora": True}, "run.yaml")
{'quantile_k': 0.6, 'levels': [3, 4], 'lora': True}
>>> fields().typed({"quantile_kk": 0.6}, "run.yaml")
Traceback (most recent call last):
ValueError: run.yaml: unknown field 'quantile_kk' (did you mean 'quantile_k'?): a RunArgs or QAEConfig field is needed (see `python -m qae_lab train --help`)
>>> fields().sets(["levels=3,4", "max-steps=5"]), fields().arguments(["--alpha", "0.3", "--lora"])
({'levels': [3, 4], 'max_steps': 5}, {'alpha': 0.3, 'lora': True})
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import yaml

__all__ = ["FieldParser", "read_config", "ENV_ALLOWED", "check_env", "apply_env"]

_NONE_WORDS = ("none", "null")
# fields for which "none" is a value of their own, not None (TrainingArguments.report_to: no tracker)
_NONE_IS_A_VALUE = ("report_to",)


class FieldParser:
    r"""Typed values for the fields of ``dataclass_types``, read by TRL's parser (``trl.TrlParser``).

    A field of a later dataclass shadows one of the same name in an earlier one (argparse's
    ``resolve``): :func:`qae_lab.runs.presets.fields` gives ``RunArgs.data_seed`` (the problem draws)
    precedence over ``TrainingArguments.data_seed``, as :func:`qae_lab.runs.presets.build` does.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     steps: int = 1
    ...     rate: float | None = None
    ...     tags: list[str] = ()
    >>> FieldParser([Demo]).typed({"steps": "3", "rate": "none", "tags": ["a"]}, "demo.yaml")
    {'steps': 3, 'rate': None, 'tags': ['a']}
    """

    def __init__(self, dataclass_types):
        from trl import TrlParser  # the train extra; importing TRL takes seconds, so only when settings are read

        self.parser = TrlParser(
            list(dataclass_types), exit_on_error=False, allow_abbrev=False, conflict_handler="resolve"
        )
        # a field's own action: the first for its name (a boolean that defaults to true also gets a --no_NAME
        # action, which stores false under the same name)
        self.actions = {}
        for action in self.parser._actions:
            if action.option_strings and action.dest != "help":
                self.actions.setdefault(action.dest, action)
        self.hints = {}
        for cls in dataclass_types:
            resolved = typing.get_type_hints(cls)
            self.hints.update({name: resolved[name] for name in cls.__dataclass_fields__ if name in self.actions})

    @property
    def names(self) -> set[str]:
        """Every settable field name."""
        return set(self.actions)

    def _boolean(self, name: str) -> bool:
        """Whether ``name`` is a true/false field (the parser reads it with ``string_to_bool``)."""
        return name in self.actions and getattr(self.actions[name].type, "__name__", "") == "string_to_bool"

    def _unknown(self, name: str, source: str) -> ValueError:
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return ValueError(
            f"{source}: unknown field {name!r}{hint}: a RunArgs or QAEConfig field is needed "
            f"(see `python -m qae_lab train --help`)"
        )

    def value(self, name: str, value, source: str):
        """One field's value, typed by the parser's action for it; errors name ``source`` and the field."""
        if name not in self.actions:
            raise self._unknown(name, source)
        action, hint = self.actions[name], self.hints[name]
        if value is None or (
            isinstance(value, str)
            and value.strip().lower() in _NONE_WORDS
            and _allows(hint, None)
            and name not in _NONE_IS_A_VALUE
        ):
            if not _allows(hint, None):
                raise ValueError(f"{source}: {name} may not be None (it is a {hint})")
            return None
        if name == "bf16" and isinstance(value, str) and value.strip().lower() == "auto":
            return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())  # the GPU presets' bf16
        lists = action.nargs in ("+", "*")
        if isinstance(value, (list, tuple)) and not lists:
            if _allows(hint, list):  # e.g. report_to: a string or a list of strings; the dataclass checks the items
                return [str(v) for v in value]
            raise ValueError(f"{source}: {name} takes one value, not a list (got {list(value)!r})")
        if isinstance(value, dict):
            if not _allows(hint, dict):
                raise ValueError(f"{source}: {name} takes no mapping (got {value!r})")
            return value
        if lists and isinstance(value, (list, tuple)) and not value:
            return []
        try:
            namespace, _ = self.parser.parse_known_args([action.option_strings[0], *_tokens(value)])
        except argparse.ArgumentError as err:
            raise ValueError(f"{source}: {name}: {err.message}") from None
        got = getattr(namespace, action.dest)
        if isinstance(got, Enum):  # an enum field's choice, kept as the plain string a file or a log holds
            got = got.value
        return list(got) if lists else got

    def typed(self, values: dict[str, Any], source: str) -> dict[str, Any]:
        """``{field: value}`` from a YAML file (or any mapping), each value typed as the command line would be;
        ``source`` names where they come from (e.g. the file's path) in every error."""
        return {name: self.value(name, value, source) for name, value in values.items()}

    def sets(self, sets) -> dict[str, Any]:
        """``["name=value", ...]`` (``--set``) as typed values; a list field takes ``a,b`` or a JSON list."""
        out = {}
        for item in sets:
            name, sep, raw = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or not name:
                raise ValueError(f"--set needs name=value, got {item!r}")
            if name not in self.actions:
                raise self._unknown(name, f"--set {item}")
            value: Any = raw
            if raw.strip().startswith(("[", "{")):
                try:
                    value = json.loads(raw)
                except json.JSONDecodeError as err:
                    raise ValueError(f"--set {item}: {name}: not valid JSON ({err})") from None
            elif self.actions[name].nargs in ("+", "*"):
                value = [part for part in raw.split(",") if part.strip()]
            out[name] = self.value(name, value, f"--set {item}")
        return out

    def arguments(self, tokens) -> dict[str, Any]:
        """``["--name", "value", ...]`` as typed values (``--name=value`` too; a list field takes several
        values, a boolean none for true, and ``--no_name`` is false)."""
        out, name, values = {}, None, []

        def close() -> None:
            if name is None:
                return
            if not values and not self._boolean(name):
                raise ValueError(f"command line: --{name} needs a value")
            out[name] = self.value(name, values[0] if len(values) == 1 else values or "true", "command line")

        for token in list(tokens):
            if token.startswith("--") and len(token) > 2:
                close()
                flag, sep, rest = token[2:].partition("=")
                name, values = flag.replace("-", "_"), [rest] if sep else []
                if name.startswith("no_") and not sep and self._boolean(name[3:]):
                    out[name[3:]], name = False, None  # --no_NAME, the parser's own form of NAME false
                elif name not in self.actions:
                    raise self._unknown(name, "command line")
            elif name is None:
                raise ValueError(f"command line: {token!r} is not a --name of a field (nor the value of one)")
            else:
                values.append(token)
        close()
        return out


def _allows(hint, kind) -> bool:
    """Whether the type hint ``hint`` admits ``kind`` (``None``, ``list`` or ``dict``) as a value."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if kind is None:
        return type(None) in options or hint is Any
    return any(o is kind or typing.get_origin(o) is kind for o in options)


def _tokens(value) -> list[str]:
    """A YAML scalar or list as the command-line strings that say it (booleans as true / false)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [
        "true" if v is True else "false" if v is False else json.dumps(v) if isinstance(v, dict) else str(v)
        for v in items
    ]


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, str]]:
    r"""A YAML settings file: ``(its fields, untyped, with ``preset`` if it names one; its ``env`` mapping)``.

    As in TRL's scripts, an ``env:`` mapping names environment variables for the run; only those of
    :data:`ENV_ALLOWED` are taken (:func:`check_env`), and the command line sets them (:func:`apply_env`). A file
    that is missing, not YAML, or not a mapping of field names fails with its path.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "run.yaml"
    >>> _ = p.write_text("preset: cpu-demo\nquantile_k: 0.6\nenv:\n  TOKENIZERS_PARALLELISM: false\n")
    >>> read_config(p)
    ({'preset': 'cpu-demo', 'quantile_k': 0.6}, {'TOKENIZERS_PARALLELISM': 'false'})
    """
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ValueError(f"config file {path}: cannot be read ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path}: not valid YAML ({err})") from None
    except RecursionError:
        raise ValueError(f"config file {path}: nested too deep to read") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError(
            f"config file {path}: must hold a mapping of field names to values, got {type(loaded).__name__}"
        )
    keys = [k for k in loaded if not isinstance(k, str)]
    if keys:
        raise ValueError(
            f"config file {path}: every key must be a field name (a string), got {keys[0]!r} ({type(keys[0]).__name__})"
        )
    env = loaded.pop("env", None) or {}
    if not isinstance(env, dict):
        raise ValueError(f"config file {path}: env must be a mapping of variable names to values, got {env!r}")
    return loaded, check_env(env, f"config file {path}")


# variables an ``env:`` mapping may set: what reads each, after the settings are read (so setting it then works)
ENV_ALLOWED = {
    "TOKENIZERS_PARALLELISM": "the tokenizers library, when it first encodes in parallel",
    "QAE_LAB_GSM8K_DIR": "qae_lab's GSM8K loader, when the data loads",
    "PYTORCH_CUDA_ALLOC_CONF": "torch's CUDA memory allocator, at the first allocation",
    "PYTORCH_ALLOC_CONF": "torch's memory allocator, at the first allocation",
    "WANDB_*": "Weights & Biases, when training starts (report_to: wandb)",
    "COMET_*": "Comet, when training starts (report_to: comet_ml)",
    "MLFLOW_*": "MLflow, when training starts (report_to: mlflow)",
    "TRACKIO_*": "Trackio, when training starts (report_to: trackio)",
    "CLEARML_*": "ClearML, when training starts (report_to: clearml)",
    "NEPTUNE_*": "Neptune, when training starts (report_to: neptune)",
}
# read when a library is imported or starts, which qae-lab does before it reads a config file: too early to matter
_ENV_TOO_EARLY = {
    "HF_*": "huggingface_hub and transformers, when they are imported",
    "HUGGINGFACE_*": "huggingface_hub, when it is imported",
    "TRANSFORMERS_*": "transformers, when it is imported",
    "ACCELERATE_*": "accelerate, when it is imported",
    "CUDA_VISIBLE_DEVICES": "CUDA, when it starts (importing the libraries may already start it)",
    "OMP_NUM_THREADS": "torch's thread pools, when torch is imported",
    "MKL_NUM_THREADS": "torch's thread pools, when torch is imported",
    "XDG_CACHE_HOME": "the libraries' caches, when they are imported",
}
# never from a file: these change which code runs, or are credentials (a run records its env in config.json)
_ENV_REFUSED = {
    "LD_*": "it makes the dynamic linker load other code into every process",
    "DYLD_*": "it makes the dynamic linker load other code into every process",
    "PYTHON*": "it changes which Python code runs and how",
    "PATH": "it changes which programs run",
}
_ENV_SECRETS = {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "CREDENTIAL"}  # name parts
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _matching(name: str, table: dict[str, str]) -> str | None:
    for pattern, words in table.items():
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return words
    return None


def check_env(env: dict, source: str = "env") -> dict[str, str]:
    r"""An ``env:`` mapping checked against the allow-list, as ``{name: value}`` strings; the first variable that
    may not be set this way is refused with the reason (``source`` names where it came from).

    Allowed: the variables of :data:`ENV_ALLOWED`, which their readers read after the settings are (so setting
    them then takes effect). Refused: ones that change which code runs (``LD_*``, ``DYLD_*``, ``PYTHON*``,
    ``PATH``), credentials (``*_TOKEN``, ``*_KEY``, ...: a run records its env in ``config.json``), and ones read
    when the libraries are imported, before any config file (``HF_HOME``, ``HF_HUB_OFFLINE``,
    ``CUDA_VISIBLE_DEVICES``, ...: set those in the shell), unless the environment already holds that very value.

    >>> check_env({"TOKENIZERS_PARALLELISM": False, "WANDB_PROJECT": "qae"})
    {'TOKENIZERS_PARALLELISM': 'false', 'WANDB_PROJECT': 'qae'}
    >>> check_env({"LD_PRELOAD": "/tmp/x.so"}, "config file run.yaml")
    Traceback (most recent call last):
    ...
    ValueError: config file run.yaml: env: LD_PRELOAD may not be set from a file: it makes the dynamic linker load other code into every process
    """
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{source}: env: {name!r} is not an environment variable's name")
        if isinstance(value, (dict, list, tuple)) or value is None:
            raise ValueError(
                f"{source}: env: {name} needs one plain value (a string, number or true/false), got {value!r}"
            )
        text = "true" if value is True else "false" if value is False else str(value)
        refused = _matching(name, _ENV_REFUSED)
        if refused:
            raise ValueError(f"{source}: env: {name} may not be set from a file: {refused}")
        if _ENV_SECRETS & set(name.upper().split("_")):
            raise ValueError(
                f"{source}: env: {name} looks like a credential, and a run records its env in its "
                f"config.json: set it in the shell, or log in (e.g. `hf auth login`, `wandb login`)"
            )
        early = _matching(name, _ENV_TOO_EARLY)
        if early and os.environ.get(name) != text:
            raise ValueError(
                f"{source}: env: {name} is read by {early}, before a config file is read, so setting it "
                f"here would change nothing: set it in the shell ({name}={text} python -m qae_lab ...)"
            )
        if not early and not _matching(name, ENV_ALLOWED):
            allowed = ", ".join(ENV_ALLOWED)
            raise ValueError(
                f"{source}: env: {name} is not among the variables a file may set ({allowed}): set others in the shell"
            )
        out[name] = text
    return out


def apply_env(env: dict[str, str]) -> list[str]:
    r"""Set the variables of a checked ``env:`` mapping (:func:`check_env`) in this process; returns one line per
    variable, ``NAME=value (read by ...)``, for the run's notes.

    >>> apply_env(check_env({"TOKENIZERS_PARALLELISM": "false"}))
    ['TOKENIZERS_PARALLELISM=false (read by the tokenizers library, when it first encodes in parallel)']
    """
    lines = []
    for name, value in check_env(env).items():
        os.environ[name] = value
        lines.append(f"{name}={value} (read by {_matching(name, ENV_ALLOWED) or _matching(name, _ENV_TOO_EARLY)})")
    return lines
