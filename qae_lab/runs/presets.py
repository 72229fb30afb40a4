r"""Run configurations: :class:`RunArgs`, the presets (YAML files), the methods, and overrides.

A run is configured by :class:`RunArgs` (model, data, evaluation) and :class:`qae_lab.train.config.QAEConfig`. A
preset is a YAML file of fields of either (:data:`PRESETS`), which may start from another (``preset: <name>``); a
``--config run.yaml`` takes the same form. :func:`build` layers the defaults, the preset, the config file, a method
(:func:`qae_lab.methods.method_settings`), ``--name value`` and ``--set name=value``. Nothing here loads a model or
data, so a GPU preset's configuration can be built and checked on any machine.

Implementer's notes: docs/implementation.md, section ``qae_lab.runs.presets``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
import time
import typing
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from qae_lab.threads import MAX_THREADS
from qae_lab._checks import check_int, check_path, credential_in, plain_value
from qae_lab.task.data import LEVELS
from qae_lab.methods import check_ratio_partners, method_settings
from qae_lab.task.rewards import SUCCESS_BANDS, check_reward
from qae_lab.runs.settings import FIELDS, FieldParser, read_config

__all__ = [
    "GPU_RUN",
    "RunArgs",
    "PRESETS",
    "PRESET_DIR",
    "choose_preset",
    "fields",
    "resolve",
    "build",
    "command_line",
    "field_types",
    "device_preset",
    "SMALL_GPU_PRESET",
]


DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class RunArgs:
    r"""What a run needs beyond :class:`~qae_lab.train.config.QAEConfig`: model, data, evaluation, checked when made.

    >>> RunArgs(n_train=64, levels=[3, 4]).levels
    (3, 4)
    >>> RunArgs(n_eval=0)
    Traceback (most recent call last):
    ...
    ValueError: n_eval must be an int >= 1, got 0
    """

    model: str = "embedded"
    """'embedded', 'embedded-sums', 'qwen2.5-0.5b' | 'qwen2.5-1.5b' | 'qwen2.5-3b', a Hub id or a local folder"""
    task: str = "synthetic"
    """'synthetic' (qae_lab.task.data.synthetic_task), 'sums' (qae_lab.task.sums) or 'gsm8k' (qae_lab.task.data)"""
    levels: list[int] = (2, 3, 4, 5)
    """levels of the synthetic or sums task to train and evaluate on (1-5; held as a tuple)"""
    n_train: int = 2000
    """training problems"""
    n_eval: int = 200
    """held-out evaluation problems"""
    data_seed: int = 0
    """seed of the problem draws (synthetic eval problems use data_seed + 1) and of the evaluation's sampling"""
    gsm8k_path: str | None = None
    """folder with GSM8K's train.jsonl / test.jsonl (default: $QAE_LAB_GSM8K_DIR, else the Hub)"""
    lora: bool = False
    """train LoRA adapters (qae_lab.task.models.lora_config) instead of the full model"""
    lora_r: int = 16
    """LoRA rank"""
    eval_samples: int = 8
    """sampled completions per problem for sampled pass@1 / pass@k (at the training temperature)"""
    eval_batch_size: int = 16
    """prompts per generate call in evaluation"""
    eval_max_new_tokens: int | None = None
    """evaluation length limit (None: max_completion_length)"""
    evaluate: bool = True
    """evaluate before and after training"""
    save_model: bool = True
    """save the final weights (or adapters) to <output_dir>/model"""
    torch_threads: int | None = None
    """CPU threads for the whole run (None: the lab's policy, qae_lab.threads)"""
    dtype: str = "auto"
    """model weights: 'auto' (bf16 on a bf16-capable GPU, else float32), 'bfloat16', 'float16' or 'float32'"""
    reward: str = "strict"
    """training reward, a qae_lab.task.rewards.REWARDS name: 'strict' (0/1) or 'composite' (SA-AH's, r_max 7.5;
    set success_threshold=5.0 with it); 'math_verify' (0/1 by the math-verify package: the verify extra)"""

    def __post_init__(self):
        for f in dataclasses.fields(self):  # numbers as Python's own (numpy, torch, Decimal), as QAEConfig holds them
            setattr(self, f.name, plain_value(getattr(self, f.name)))
            found = credential_in(getattr(self, f.name), f.name)  # before any message repeats a value
            if found:
                raise ValueError(f"{found}: give it without the credential (a run records its settings)")
        for name in ("model", "gsm8k_path"):  # a folder or a Hub id: a path the file system can take
            if getattr(self, name) is not None:
                check_path(getattr(self, name), name)
        for name in ("lora", "evaluate", "save_model"):  # a string "false" would be true
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("n_train", "n_eval", "eval_samples", "eval_batch_size", "lora_r", "data_seed"):
            check_int(getattr(self, name), name, 0 if name == "data_seed" else 1)
        for name, most in (("eval_max_new_tokens", None), ("torch_threads", MAX_THREADS)):
            if getattr(self, name) is not None:  # MAX_THREADS: more than one machine's hardware threads
                check_int(getattr(self, name), name, 1, most)
        if self.task not in ("synthetic", "sums", "gsm8k"):
            raise ValueError(f"task must be 'synthetic', 'sums' or 'gsm8k', got {self.task!r}")
        self.levels = tuple(self.levels)
        if not self.levels or not set(self.levels) <= set(LEVELS) or len(set(self.levels)) != len(self.levels):
            raise ValueError(
                f"levels must be a non-empty subset of {LEVELS}, each level once (a level named twice would get "
                f"twice the problems), got {self.levels!r}"
            )
        for level in self.levels:
            check_int(level, "levels", min(LEVELS), max(LEVELS))
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        check_reward(self.reward)  # a REWARDS name; "math_verify" only with the verify extra installed
        if self.gsm8k_path is not None and not Path(self.gsm8k_path).is_dir():
            raise ValueError(
                f"gsm8k_path {self.gsm8k_path} is not a folder (it must hold GSM8K's train.jsonl and "
                f"test.jsonl; None reads $QAE_LAB_GSM8K_DIR, else the Hub)"
            )


def _checkpointing_field() -> str:
    r"""The installed transformers' name of activation checkpointing (``gradient_checkpointing`` before 5.23), read
    from the package metadata: importing transformers would add seconds to every ``import qae_lab.runs.presets``.

    >>> _checkpointing_field() in ("activation_checkpointing", "gradient_checkpointing")
    True
    """
    try:
        installed = metadata.version("transformers")
    except metadata.PackageNotFoundError:  # no train extra: nothing can be built, the name does not matter
        return "activation_checkpointing"
    release = tuple(int(part) for part in re.findall(r"\d+", installed)[:2])
    return "activation_checkpointing" if release >= (5, 23) else "gradient_checkpointing"


_CHECKPOINTING = _checkpointing_field()
PRESET_DIR = Path(__file__).with_name("configs")
"""The presets: one YAML file each, ``qae_lab/runs/configs/<name>.yaml`` (installed with the package)."""


def _preset_values(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's fields as its file says them (untyped), the preset it names as ``preset:`` applied first."""
    if name in seen:
        raise ValueError(f"presets name each other in a circle: {' -> '.join((*seen, name))}")
    path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown preset {name!r}; presets: {sorted(p.stem for p in PRESET_DIR.glob('*.yaml'))}")
    values, _ = read_config(path)
    base = values.pop("preset", None)
    return {**(_preset_values(base, (*seen, name)) if base else {}), **values}


def _installed_names(values: dict[str, Any]) -> dict[str, Any]:
    """A file's ``activation_checkpointing`` under the name the installed transformers has (older: the old name)."""
    if "activation_checkpointing" in values and _CHECKPOINTING != "activation_checkpointing":
        values = {(_CHECKPOINTING if k == "activation_checkpointing" else k): v for k, v in values.items()}
    return values


PRESETS: dict[str, dict[str, Any]] = {
    p.stem: _installed_names(_preset_values(p.stem)) for p in sorted(PRESET_DIR.glob("*.yaml"))
}
"""Every preset's fields, as its file gives them (``bf16: auto`` is decided when a run is built)."""


def field_types(cls) -> dict[str, Any]:
    r"""``{field name: type hint}`` of a dataclass's constructor fields (what ``--set`` can set).

    >>> types_ = field_types(RunArgs); types_["n_train"], types_["levels"]
    (<class 'int'>, list[int])
    """
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def choose_preset(preset: str | None, named: str | None = None, source: str = "config") -> str:
    r"""The run's preset: ``preset`` (the command line's), else ``named`` (a config file's ``preset:``), else
    ``cpu-demo``; both given and different is an error naming ``source``, and so is an unknown name.

    >>> choose_preset(None, "cpu-sums"), choose_preset("cpu-sums", "cpu-sums"), choose_preset(None)
    ('cpu-sums', 'cpu-sums', 'cpu-demo')
    """
    if named and preset and named != preset:
        raise ValueError(f"{source} names preset {named!r} and the command line {preset!r}: give one")
    preset = preset or named or "cpu-demo"
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {sorted(PRESETS)}")
    return preset


@functools.cache
def fields() -> FieldParser:
    r"""The parser of a run's settings, over :class:`~qae_lab.train.config.QAEConfig` and :class:`RunArgs` (whose
    ``data_seed``, the problem draws, shadows ``TrainingArguments.data_seed``); built once.

    >>> fields().arguments(["--quantile_k", "0.6", "--levels", "3", "4"])
    {'quantile_k': 0.6, 'levels': [3, 4]}
    """
    from qae_lab.train.config import QAEConfig  # imports TRL (the train extra, seconds): only to read settings

    return FieldParser([QAEConfig, RunArgs], FIELDS)


def resolve(
    preset: str | None = None, sets=(), method: str | None = None, *, config=None, args=()
) -> tuple[str, dict[str, Any]]:
    r"""``(preset name, {field: typed value})``: the preset's file < ``config`` (a YAML file, or the mapping a run
    recorded) < ``method`` < ``args`` (``--name value``) < ``sets`` (``name=value``); the preset: :func:`choose_preset`.

    >>> resolve("cpu-demo", ["quantile_k=0.6"], "qae_sa_ah")[1]["token_weighting"]
    'sa_ah'
    """
    source, file_values = "config", {}
    if isinstance(config, dict):
        file_values = dict(config)
    elif config is not None:
        source = f"config file {config}"
        file_values, _env = read_config(config)  # its env: checked there, set by the command line (settings.apply_env)
    preset = choose_preset(preset, file_values.pop("preset", None), source)
    parser = fields()
    layers = [
        parser.typed(PRESETS[preset], f"preset {preset} ({PRESET_DIR / preset}.yaml)"),
        parser.typed(_installed_names(file_values), source),
        method_settings(method) if method else {},
        parser.arguments(args),
        parser.sets(sets),
    ]
    return preset, {k: v for layer in layers for k, v in layer.items()}


def build(
    preset: str | None = "cpu-demo",
    sets=(),
    method: str | None = None,
    *,
    output_dir: str | None = None,
    config=None,
    args=(),
):
    r"""The run's :class:`RunArgs` and :class:`~qae_lab.train.config.QAEConfig` from :func:`resolve`'s settings, in
    ``output_dir``, else the settings' ``output_dir``, else ``runs/<preset>-<timestamp>``; nothing loaded.

    >>> run, cfg = build("cpu-demo", ["quantile_k=0.6"], method="qae_sa_ah", output_dir="/tmp/x")
    >>> run.model, cfg.quantile_k, cfg.token_weighting, cfg.per_device_train_batch_size
    ('embedded', 0.6, 'sa_ah', 64)
    """
    from qae_lab.train.config import QAEConfig  # imports TRL (the train extra, seconds): only to build

    preset, overrides = resolve(preset, sets, method, config=config, args=args)
    run_names = set(field_types(RunArgs))
    run_kw = {k: v for k, v in overrides.items() if k in run_names}
    cfg_kw = {k: v for k, v in overrides.items() if k not in run_names}

    def where() -> str:  # an error's context: the preset, the file, what the command changed (read on failure only)
        said = {**fields().arguments(args), **fields().sets(sets)}  # a value that holds a credential is not repeated
        said = {k: "<not shown: it holds a credential>" if credential_in(v, k) else v for k, v in said.items()}
        return (
            f"preset {preset!r}"
            + (f", config file {config}" if config is not None and not isinstance(config, dict) else "")
            + (f" with overrides {said}" if said else "")
        )

    try:
        run = RunArgs(**run_kw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where()}: {err}") from None
    if output_dir is not None:
        cfg_kw["output_dir"] = output_dir
    cfg_kw.setdefault("output_dir", _new_folder(Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"))
    try:
        cfg = QAEConfig(**cfg_kw)
        if method:
            check_ratio_partners(method, cfg.num_iterations, cfg.steps_per_generation, cfg.gradient_accumulation_steps)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where()}: {err}") from None
    lo, hi = SUCCESS_BANDS[run.reward]  # the qae/* metrics must count exactly the correct responses as successes
    if not lo < cfg.success_threshold <= hi:
        raise ValueError(
            f"{where()}: success_threshold must lie in ({lo}, {hi}] with reward {run.reward!r} (wrong "
            f"answers score at most {lo}, correct ones at least {hi}), got {cfg.success_threshold}"
        )
    return run, cfg


# notebook 04's run on a GPU: steps and held-out problems (fewer than the presets' 500: minutes to evaluate); the
# README estimates its minutes from these
GPU_RUN = {"max_steps": 200, "n_eval": 100}
SMALL_GPU_PRESET = "qwen2.5-0.5b-gsm8k-t4"
SMALL_GPU_GIB = 20
"""A GPU without bf16 and with less memory than this (GiB) gets :data:`SMALL_GPU_PRESET` (a T4: 15 GiB)."""


def device_preset(
    gpu_preset: str,
    *,
    name: str | None,
    total_memory: int = 0,
    bf16: bool = False,
    small_preset: str = SMALL_GPU_PRESET,
) -> tuple[str, str]:
    r"""``(preset, reason)`` for a device: ``name`` None (no CUDA device) gives ``cpu-demo``; a GPU without bf16 and
    with less than :data:`SMALL_GPU_GIB` GiB (``total_memory`` in bytes) ``small_preset``, the 0.5B model in float16
    (float32, what ``dtype="auto"`` means there, would exceed such a card); any other GPU ``gpu_preset``.

    >>> device_preset("qwen2.5-1.5b-gsm8k-live", name="Tesla T4", total_memory=15 * 2**30)[0]
    'qwen2.5-0.5b-gsm8k-t4'
    >>> device_preset("qwen2.5-1.5b-gsm8k-live", name="NVIDIA A100-SXM4-40GB", total_memory=40 * 2**30, bf16=True)[0]
    'qwen2.5-1.5b-gsm8k-live'
    >>> device_preset("qwen2.5-1.5b-gsm8k-live", name=None)[0]
    'cpu-demo'
    """
    for preset in (gpu_preset, small_preset):
        choose_preset(preset)  # refuses an unknown one
    if name is None:
        return "cpu-demo", (
            f"no GPU here, so the embedded tiny model on the synthetic task (cpu-demo)\ninstead of {gpu_preset}"
        )
    gib = total_memory / 2**30
    found = f"GPU found ({name}, {gib:.1f} GiB, {'bf16' if bf16 else 'no bf16'})"
    if not bf16 and gib < SMALL_GPU_GIB:
        return small_preset, (
            f"{found}: {small_preset}, the 0.5B model in float16, instead of {gpu_preset} (without bf16 it would "
            f"train in float32: an estimated peak near or above this card's memory)"
        )
    return gpu_preset, f"{found}: {gpu_preset}"


def _new_folder(path: Path) -> str:
    """``path``, or ``path-2``, ``path-3``, ... when it exists: two runs started in the same second get two folders."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return str(candidate)


def command_line(
    preset: str, sets=(), method: str | None = None, *, config: str | None = None, args=(), width: int | None = None
) -> str:
    r"""The shell command that reproduces a run; with ``width``, continued on further lines (a shell's `` \``) so that
    no line is longer (a notebook's column: a browser would break it anywhere).

    >>> command_line("cpu-demo", ["quantile_k=0.6"], "qae")
    'python -m qae_lab train --preset cpu-demo --method qae --set quantile_k=0.6'
    >>> command_line("cpu-demo", config="my run.yaml", args=["--alpha", "0.3"])
    "python -m qae_lab train --preset cpu-demo --config 'my run.yaml' --alpha 0.3"
    >>> print(command_line("cpu-demo", ["quantile_k=0.6", "max_steps=40"], "qae", width=60))
    python -m qae_lab train --preset cpu-demo --method qae \
        --set quantile_k=0.6 --set max_steps=40
    """
    parts = ["python -m qae_lab train", f"--preset {preset}"]
    parts += [f"--config {shlex.quote(str(config))}"] if config is not None else []
    parts += [f"--method {method}"] if method else []
    parts += [shlex.quote(a) for a in args]
    parts += [f"--set {shlex.quote(s)}" for s in sets]
    if width is None:
        return " ".join(parts)
    lines = [parts[0]]
    for part in parts[1:]:  # a part goes on the line if it fits with the " \\" that may follow it
        if len(lines[-1]) + 1 + len(part) + 2 > width and lines[-1].strip():
            lines.append("    " + part)
        else:
            lines[-1] += " " + part
    return " \\\n".join(lines)
