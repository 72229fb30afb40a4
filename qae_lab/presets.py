r"""Run configurations: :class:`RunArgs`, the presets, the methods, and command-line overrides.

A run is configured by two dataclasses: :class:`RunArgs` (model, data, evaluation: what
``qae_lab.cli`` needs beyond training) and :class:`qae_lab.config.QAEConfig` (TRL's
``GRPOConfig`` plus the QAE / SA-AH knobs). A preset is a plain dict of overrides of
fields of either (:data:`PRESETS`); :func:`build` applies, in order, the defaults, the
preset, a method (:func:`qae_lab.methods.method_settings`: ``baseline`` + ``token_weighting``, plus
any ``+partner`` such as ``qae+clip_higher``) and ``--set
name=value`` overrides, each value parsed to its field's type (:func:`parse_value`). Nothing
here loads a model or data, so a GPU preset's configuration can be built and checked on
any machine.

Presets:

* ``cpu-demo``: the embedded tiny model, synthetic task levels 2-5 (level 1 is near solved:
  greedy 1.0, sampled pass@1 0.77), 8 prompts x 8 completions per step, QAE with K = 0.4,
  lr 1e-4 decaying linearly over 400 steps; about 3 minutes on 2 CPU cores (README).
* ``cpu-sums``: the sums model (``embedded-sums``) on the sums task of :mod:`qae_lab.sums`, built so that
  the papers' phenomena can show on a CPU (notebook 06; :mod:`qae_lab.phenomena` holds the settings each
  experiment adds); 8 prompts x 8 completions of at most 160 tokens, evaluation of 64 problems with 32
  samples each (pass@k up to 32), 120 steps.
* ``qwen2.5-{0.5b,1.5b,3b}-gsm8k``: SA-AH-GRPO's set-up (arXiv 2606.05434) on one GPU:
  Qwen2.5-Instruct with LoRA r = 16, GSM8K 800 train / 500 test problems, lr 5e-6,
  8 prompts x 8 completions per step (16 per micro-batch x 4 accumulation steps),
  activation checkpointing, bf16 where the GPU supports it, and the fast generation path
  (``fast_generation``, static KV cache, compiled decoding). Their reward is SA-AH-GRPO's
  composite one (``reward="composite"``, r_max = 7.5, correctness by the strict verdict, see
  :mod:`qae_lab.rewards`), so a response counts as a success at ``success_threshold`` = 5.0;
  ``--set reward=strict --set success_threshold=0.5`` trains on QAE's 0/1 reward instead.
* ``qwen2.5-1.5b-gsm8k-live``: the 1.5B preset made quicker per step for steering by hand
  (notebook 04 on a GPU): 4 prompts x 8 completions of at most 256 tokens per step.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import shlex
import time
import types
import typing
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from qae_lab.data import LEVELS
from qae_lab.methods import check_ratio_partners, method_settings
from qae_lab.rewards import REWARDS, SUCCESS_BANDS

__all__ = ["RunArgs", "PRESETS", "parse_value", "parse_sets", "build", "command_line", "field_types"]


DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class RunArgs:
    r"""What a run needs beyond :class:`~qae_lab.config.QAEConfig`: model, data, evaluation.

    Every field is checked when the object is made, so a bad value fails before anything loads.

    >>> RunArgs(n_train=64, levels=[3, 4]).levels
    (3, 4)
    >>> RunArgs(n_eval=0)
    Traceback (most recent call last):
    ...
    ValueError: n_eval must be >= 1, got 0
    """

    model: str = "embedded"
    """'embedded', 'embedded-sums', 'qwen2.5-0.5b' | 'qwen2.5-1.5b' | 'qwen2.5-3b', a Hub id or a local folder"""
    task: str = "synthetic"
    """'synthetic' (qae_lab.data.synthetic_task), 'sums' (qae_lab.sums.sums_task) or 'gsm8k'
    (qae_lab.data.sa_ah_split)"""
    levels: tuple[int, ...] = (2, 3, 4, 5)
    """levels of the synthetic or sums task to train and evaluate on (1-5)"""
    n_train: int = 2000
    """training problems"""
    n_eval: int = 200
    """held-out evaluation problems"""
    data_seed: int = 0
    """seed of the problem draws (synthetic eval problems use data_seed + 1) and of the evaluation's sampling"""
    gsm8k_path: str | None = None
    """folder with GSM8K's train.jsonl / test.jsonl (default: $QAE_LAB_GSM8K_DIR, else the Hub)"""
    lora: bool = False
    """train LoRA adapters (qae_lab.models.lora_config) instead of the full model"""
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
    """torch.set_num_threads for the run (None: torch's default); 1 helps a tiny model on a busy machine"""
    dtype: str = "auto"
    """model weights: 'auto' (bf16 on a bf16-capable GPU, else float32), 'bfloat16', 'float16' or 'float32'"""
    reward: str = "strict"
    """training reward, a qae_lab.rewards.REWARDS name: 'strict' (0/1) or 'composite' (SA-AH's, r_max 7.5;
    set success_threshold=5.0 with it)"""

    def __post_init__(self):
        if self.task not in ("synthetic", "sums", "gsm8k"):
            raise ValueError(f"task must be 'synthetic', 'sums' or 'gsm8k', got {self.task!r}")
        self.levels = tuple(self.levels)
        if not self.levels or not set(self.levels) <= set(LEVELS):
            raise ValueError(f"levels must be a non-empty subset of {LEVELS}, got {self.levels!r}")
        for name in ("n_train", "n_eval", "eval_samples", "eval_batch_size", "lora_r"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {sorted(REWARDS)}, got {self.reward!r}")
        if self.gsm8k_path is not None and not Path(self.gsm8k_path).is_dir():
            raise ValueError(f"gsm8k_path {self.gsm8k_path} is not a folder (it must hold GSM8K's train.jsonl and "
                             f"test.jsonl; None reads $QAE_LAB_GSM8K_DIR, else the Hub)")
        for name in ("eval_max_new_tokens", "torch_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be None or >= 1, got {getattr(self, name)}")


def _checkpointing_field() -> str:
    r"""The installed transformers' ``TrainingArguments`` name of activation checkpointing.

    transformers 5.23 renamed ``gradient_checkpointing`` to ``activation_checkpointing`` (the old
    name stays a deprecated alias there); older versions only know ``gradient_checkpointing``. The
    presets use whichever the installed version has, so each builds on every supported version.
    Either name is a plain field where it exists, so ``--set activation_checkpointing=true``
    works on transformers >= 5.23 and ``--set gradient_checkpointing=true`` before it. (On >= 5.23
    the alias is ignored once the preset sets the new name: set ``activation_checkpointing`` there.)
    Decided from the installed version's metadata: importing transformers here would add seconds
    to every ``import qae_lab.presets`` (the CLI's ``presets`` listing, :mod:`qae_lab.compare`).

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
_CPU_COMMON = {"use_cpu": True, "bf16": False, _CHECKPOINTING: False, "dataloader_num_workers": 0}
_LOG = {"logging_steps": 1, "report_to": [], "disable_tqdm": False}
# In-loop generation of the GPU presets (README, "On a GPU"): eval mode with LoRA merged
# (qae_lab.generation.generation_policy), a static KV cache, and transformers' compiled decode step,
# which TRL switches off. --set compile_generation=false falls back to eager decoding.
_FAST_GENERATION = {"fast_generation": True, "cache_implementation": "static", "compile_generation": True}


def _gsm8k_preset(model: str, max_len: int) -> dict[str, Any]:
    """SA-AH-GRPO's set-up (arXiv 2606.05434) on one GPU: LoRA r=16, GSM8K 800 / 500."""
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return {"model": model, "task": "gsm8k", "n_train": 800, "n_eval": 500, "lora": True, "lora_r": 16,
            "eval_samples": 4, "eval_batch_size": 32,
            "baseline": "quantile", "quantile_k": 0.4, "token_weighting": "none", "bf16": bf16,
            # SA-AH-GRPO's composite reward: correct answers score >= 5, wrong ones <= 2.5
            "reward": "composite", "success_threshold": 5.0,
            "learning_rate": 5e-6, "num_generations": 8, "per_device_train_batch_size": 16,
            "gradient_accumulation_steps": 4,  # 64 completions = 8 prompts x 8 per optimizer step
            "max_completion_length": max_len, "temperature": 1.0, "beta": 0.0, "loss_type": "bnpo",
            _CHECKPOINTING: True, "max_steps": 200, "save_strategy": "steps", "save_steps": 50,
            **_FAST_GENERATION, **_LOG}


def _live_preset(model: str) -> dict[str, Any]:
    """A GPU preset for steering by hand (notebook 04): a step every few seconds instead of every ~10-50.

    Trades, against :func:`_gsm8k_preset`: 4 prompts x 8 completions per step instead of 8 x 8 (a
    noisier gradient, so a slider's effect takes more steps to read in the curves) and 256-token
    completions instead of 384 (a long GSM8K solution is cut and scores 0, which also rewards
    brevity), one micro-batch of 32 instead of 4 x 16 (more activation memory).
    """
    return {**_gsm8k_preset(model, 256), "per_device_train_batch_size": 32, "gradient_accumulation_steps": 1}


PRESETS: dict[str, dict[str, Any]] = {
    "cpu-demo": {
        # the embedded tiny model on synthetic levels 2-5 (level 1 is near solved already)
        "model": "embedded", "task": "synthetic", "levels": (2, 3, 4, 5), "n_train": 2000, "n_eval": 200,
        "eval_samples": 8, **_CPU_COMMON,
        # QAE, K = 0.4, binary reward, no KL; 64 completions = 8 prompts x 8 per step
        "baseline": "quantile", "quantile_k": 0.4, "token_weighting": "none", "beta": 0.0, "loss_type": "bnpo",
        "num_generations": 8, "per_device_train_batch_size": 64, "max_completion_length": 48, "temperature": 1.0,
        # tuned on 2 CPU cores: 1e-4 held constant for 300 steps lost greedy pass@1 (0.71 -> 0.50);
        # decayed linearly it kept improving to the last step
        "learning_rate": 1e-4, "lr_scheduler_type": "linear", "max_steps": 400, "save_strategy": "no", **_LOG,
    },
    "cpu-sums": {
        # the sums model on the sums task (qae_lab.sums): several correct texts per prompt, free length, real
        # entropy, format slips; the task of notebook 06's phenomena (its settings: qae_lab.phenomena)
        "model": "embedded-sums", "task": "sums", "levels": (1, 2, 3, 4, 5), "n_train": 2000, "n_eval": 64,
        "eval_samples": 32, **_CPU_COMMON,
        "baseline": "quantile", "quantile_k": 0.4, "token_weighting": "none", "beta": 0.0, "loss_type": "bnpo",
        "num_generations": 8, "per_device_train_batch_size": 64, "max_completion_length": 160, "temperature": 1.0,
        "learning_rate": 1e-4, "lr_scheduler_type": "linear", "max_steps": 120, "save_strategy": "no", **_LOG,
    },
    "qwen2.5-0.5b-gsm8k": _gsm8k_preset("qwen2.5-0.5b", 384),
    "qwen2.5-1.5b-gsm8k": _gsm8k_preset("qwen2.5-1.5b", 384),
    "qwen2.5-3b-gsm8k": _gsm8k_preset("qwen2.5-3b", 512),
    "qwen2.5-1.5b-gsm8k-live": _live_preset("qwen2.5-1.5b"),
}


def field_types(cls) -> dict[str, Any]:
    r"""``{field name: type hint}`` of a dataclass's constructor fields (what ``--set`` can set).

    >>> types_ = field_types(RunArgs); types_["n_train"], types_["levels"]
    (<class 'int'>, tuple[int, ...])
    """
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


def _parse_list(raw: str, item_type) -> list:
    raw = raw.strip()
    items = json.loads(raw) if raw.startswith("[") else [x for x in raw.split(",") if x.strip()]
    if not isinstance(items, list):
        raise ValueError(f"expected a list, got {raw!r}")
    return [parse_value(str(x) if not isinstance(x, str) else x, item_type) for x in items]


def parse_value(raw: str, tp) -> Any:
    r"""The command-line string ``raw`` as a value of type ``tp`` (a dataclass field's type hint).

    >>> parse_value("0.6", float), parse_value("none", int | None), parse_value("2,3", tuple[int, ...])
    (0.6, None, (2, 3))
    >>> parse_value("true", bool), parse_value('["a", "b"]', list[str] | None)
    (True, ['a', 'b'])
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return _parse_bool(raw)
    if tp in (int, float):
        return tp(raw.strip())
    if tp in (str, Any) or (isinstance(tp, type) and issubclass(tp, Enum)):
        return raw  # enums: TrainingArguments converts the string and checks it
    if origin is typing.Literal:
        for a in args:
            if str(a) == raw:
                return a
        raise ValueError(f"expected one of {list(args)}, got {raw!r}")
    if origin in (list, tuple):
        items = _parse_list(raw, args[0] if args else str)
        return tuple(items) if origin is tuple else items
    if tp is dict or origin is dict:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {raw!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and raw.strip().lower() in ("none", "null"):
            return None
        options = [a for a in args if a is not type(None)]

        def rank(a) -> int:  # specific before general: str (and enums) last, lists only for "[...]"
            order = [bool, int, float]
            return order.index(a) if a in order else 3 if typing.get_origin(a) in (list, dict) or a is dict else 4
        for a in sorted(options, key=rank):
            if typing.get_origin(a) is list and not raw.strip().startswith("["):
                continue
            try:
                return parse_value(raw, a)
            except (ValueError, TypeError, json.JSONDecodeError):
                continue
        raise ValueError(f"cannot read {raw!r} as {tp}")
    raise ValueError(f"fields of type {tp} cannot be set from the command line")


def _split_overrides(overrides: dict[str, Any]) -> tuple[dict, dict]:
    """Overrides split into (RunArgs fields, QAEConfig fields); unknown names raise with a suggestion."""
    from qae_lab.config import QAEConfig  # imports TRL (the train extra, seconds): only to build

    run_names, cfg_names = set(field_types(RunArgs)), set(field_types(QAEConfig))
    unknown = [k for k in overrides if k not in run_names | cfg_names]
    if unknown:
        hints = {k: difflib.get_close_matches(k, run_names | cfg_names, n=1) for k in unknown}
        said = ", ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
        raise ValueError(f"unknown field(s) {said}: a RunArgs or QAEConfig field is needed "
                         f"(see `python -m qae_lab train --help`)")
    return ({k: v for k, v in overrides.items() if k in run_names},
            {k: v for k, v in overrides.items() if k not in run_names})


def parse_sets(sets: list[str]) -> dict[str, Any]:
    r"""``["quantile_k=0.6", ...]`` -> ``{"quantile_k": 0.6}``, each value parsed to its field's type.

    >>> parse_sets(["quantile_k=0.6", "levels=3,4", "token_weighting=sa_ah"])
    {'quantile_k': 0.6, 'levels': (3, 4), 'token_weighting': 'sa_ah'}
    """
    from qae_lab.config import QAEConfig  # imports TRL (the train extra, seconds): only to build

    types_ = {**field_types(QAEConfig), **field_types(RunArgs)}
    out = {}
    for item in sets:
        name, sep, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise ValueError(f"--set needs name=value, got {item!r}")
        _split_overrides({name: None})  # unknown names fail here, with a suggestion
        try:
            out[name] = parse_value(raw, types_[name])
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"--set {item}: {name} expects {types_[name]}: {err}") from None
    return out


def build(preset: str = "cpu-demo", sets: list[str] = (), method: str | None = None, *,
          output_dir: str | None = None):
    r"""The run's :class:`RunArgs` and :class:`~qae_lab.config.QAEConfig`, without loading anything.

    Order: defaults < ``PRESETS[preset]`` < ``method_settings(method)`` < ``--set`` overrides. The output
    folder is ``output_dir``, else a ``--set output_dir=...``, else ``runs/<preset>-<timestamp>``.

    >>> run, cfg = build("cpu-demo", ["quantile_k=0.6"], method="qae_sa_ah", output_dir="/tmp/x")
    >>> run.model, cfg.quantile_k, cfg.token_weighting, cfg.per_device_train_batch_size
    ('embedded', 0.6, 'sa_ah', 64)
    """
    from qae_lab.config import QAEConfig  # imports TRL (the train extra, seconds): only to build

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {sorted(PRESETS)}")
    overrides = {**PRESETS[preset], **(method_settings(method) if method else {}), **parse_sets(list(sets))}
    run_kw, cfg_kw = _split_overrides(overrides)
    try:
        run = RunArgs(**run_kw)
    except ValueError as err:
        raise ValueError(f"preset {preset!r} with overrides {dict(parse_sets(list(sets)))}: {err}") from None
    if output_dir is not None:
        cfg_kw["output_dir"] = output_dir
    cfg_kw.setdefault("output_dir", _new_folder(Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"))
    try:
        cfg = QAEConfig(**cfg_kw)
        if method:
            check_ratio_partners(method, cfg.num_iterations, cfg.steps_per_generation, cfg.gradient_accumulation_steps)
    except ValueError as err:
        raise ValueError(f"preset {preset!r} with overrides {dict(parse_sets(list(sets)))}: {err}") from None
    lo, hi = SUCCESS_BANDS[run.reward]  # the qae/* metrics must count exactly the correct responses as successes
    if not lo < cfg.success_threshold <= hi:
        raise ValueError(f"preset {preset!r} with overrides {dict(parse_sets(list(sets)))}: success_threshold must "
                         f"lie in ({lo}, {hi}] with reward {run.reward!r} (wrong answers score at most {lo}, correct "
                         f"ones at least {hi}), got {cfg.success_threshold}")
    return run, cfg


def _new_folder(path: Path) -> str:
    """``path``, or ``path-2``, ``path-3``, ... when it exists: two runs started in the same second get two folders."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return str(candidate)


def command_line(preset: str, sets: list[str] = (), method: str | None = None) -> str:
    r"""The shell command that reproduces a run.

    >>> command_line("cpu-demo", ["quantile_k=0.6"], "qae")
    'python -m qae_lab train --preset cpu-demo --method qae --set quantile_k=0.6'
    """
    parts = ["python -m qae_lab train", f"--preset {preset}"]
    parts += [f"--method {method}"] if method else []
    parts += [f"--set {shlex.quote(s)}" for s in sets]
    return " ".join(parts)

