r"""Typed run settings from YAML files and the command line, read by TRL's own parser.

A run's settings are fields of :class:`qae_lab.runs.presets.RunArgs` and :class:`qae_lab.train.config.QAEConfig`.
A YAML file, ``--name value`` and ``--set name=value`` are all typed by ``trl.TrlParser``, so a value means in a file
what it means on the command line; :data:`FIELDS` classifies every field a run may be given.

Implementer's notes: docs/implementation.md, section ``qae_lab.runs.settings``.

>>> from qae_lab.runs.presets import fields
>>> fields().typed({"quantile_k": "0.6", "levels": [3, 4], "lora": True}, "run.yaml")
{'quantile_k': 0.6, 'levels': [3, 4], 'lora': True}
>>> fields().typed({"quantile_kk": 0.6}, "run.yaml")
Traceback (most recent call last):
ValueError: run.yaml: unknown field 'quantile_kk' (did you mean 'quantile_k'?): a RunArgs or QAEConfig field is needed (see `python -m qae_lab train --help`)
>>> fields().sets(["levels=3,4", "max-steps=5"]), fields().arguments(["--alpha", "0.3", "--lora"])
({'levels': [3, 4], 'max_steps': 5}, {'alpha': 0.3, 'lora': True})
>>> fields().arguments(["--hub_token", "hf_secret"])
Traceback (most recent call last):
ValueError: command line: hub_token carries a credential, which a run never takes as a setting (qae_lab writes its settings into config.json, its checkpoints and their exports): log in with `hf auth login`, or set HF_TOKEN in the shell's environment
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

from qae_lab._checks import check_regular_file, credential_in, credential_name, json_mapping, json_value, key_words

__all__ = [
    "ORDINARY",
    "SENDS_OUT",
    "RUNS_CODE",
    "CREDENTIAL",
    "COMMAND_LINE",
    "FIELDS",
    "FieldParser",
    "outgoing",
    "outgoing_lines",
    "read_config",
    "MAX_CONFIG_BYTES",
    "ENV_ALLOWED",
    "ENV_SHELL_ONLY",
    "check_env",
    "apply_env",
]

_NONE_WORDS = ("none", "null")
# fields for which "none" is a value of their own, not None (TrainingArguments.report_to: no tracker)
_NONE_IS_A_VALUE = ("report_to",)


# ---------------------------------------------------------------- the classified table of settable fields

ORDINARY, SENDS_OUT, RUNS_CODE, CREDENTIAL, COMMAND_LINE = (
    "ordinary",
    "sends data out",
    "runs code",
    "credential",
    "the command line's",
)
_CLASSES = {
    # TrainingArguments (transformers 5.0-5.25: group_by_length, logging_dir and warmup_ratio are 5.0's only)
    ORDINARY: """output_dir per_device_train_batch_size num_train_epochs max_steps learning_rate lr_scheduler_type
        lr_scheduler_kwargs warmup_steps warmup_ratio optim optim_args weight_decay adam_beta1 adam_beta2 adam_epsilon
        optim_target_modules gradient_accumulation_steps average_tokens_across_devices max_grad_norm
        label_smoothing_factor bf16 fp16 bf16_full_eval fp16_full_eval tf32 activation_checkpointing
        activation_checkpointing_kwargs gradient_checkpointing gradient_checkpointing_kwargs torch_compile
        torch_compile_backend torch_compile_mode use_liger_kernel liger_kernel_config use_cache neftune_noise_alpha
        torch_empty_cache_steps auto_find_batch_size logging_strategy logging_steps logging_first_step log_on_each_node
        logging_nan_inf_filter include_num_input_tokens_seen log_level log_level_replica disable_tqdm run_name
        logging_dir eval_strategy eval_steps eval_delay per_device_eval_batch_size prediction_loss_only eval_on_start
        eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics batch_eval_metrics
        save_only_model save_strategy save_steps save_on_each_node save_total_limit enable_jit_checkpoint
        load_best_model_at_end metric_for_best_model greater_is_better ignore_data_skip
        restore_callback_states_from_checkpoint full_determinism seed data_seed use_cpu accelerator_config
        parallelism_config dataloader_drop_last dataloader_num_workers dataloader_pin_memory
        dataloader_persistent_workers dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order
        remove_unused_columns label_names train_sampling_strategy group_by_length length_column_name
        ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend ddp_timeout
        fsdp fsdp_config deepspeed debug skip_memory_metrics do_train do_eval do_predict local_rank"""
    # GRPOConfig (trl 1.16)
    + """ router_aux_loss_coef disable_dropout cast_lm_head_to_fp32 num_generations num_generations_eval
        max_completion_length ds3_gather_for_generation shuffle_dataset pad_to_multiple_of generation_batch_size
        steps_per_generation temperature top_p top_k min_p chat_template_kwargs repetition_penalty
        cache_implementation use_vllm vllm_mode vllm_model_impl vllm_enable_sleep_mode vllm_structured_outputs_regex
        vllm_server_timeout vllm_gpu_memory_utilization vllm_max_model_length vllm_tensor_parallel_size beta
        num_iterations epsilon delta epsilon_high sapo_temperature_neg sapo_temperature_pos vespo_k_pos
        vespo_lambda_pos vespo_k_neg vespo_lambda_neg importance_sampling_level reward_weights
        multi_objective_aggregation scale_rewards loss_type mask_truncated_completions sync_ref_model
        ref_model_mixup_alpha ref_model_sync_steps top_entropy_quantile entropy_coef use_adaptive_entropy
        entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target max_tool_calling_iterations
        vllm_importance_sampling_correction vllm_importance_sampling_mode vllm_importance_sampling_clip_max
        vllm_importance_sampling_clip_min vllm_importance_sampling_cap off_policy_mask_threshold
        use_bias_correction_kl log_completions log_multimodal num_completions_to_print log_unique_prompts
        use_transformers_continuous_batching transformers_continuous_batching_config use_transformers_paged"""
    # QAEConfig's own, and RunArgs
    + """ baseline quantile_k quantile_method advantage_eps token_weighting alpha entropy_top_k sparse_update
        success_threshold success_reward fast_generation compile_generation advantage_mask cov_penalty clip_cov_ratio
        dynamic_sampling dynamic_sampling_max_rounds dynamic_sampling_oversample
        clip_cov_lb clip_cov_ub kl_cov_ratio kl_cov_coef regime_eval_steps regime_eval_samples regime_eval_prompts
        reflection_words model task levels n_train n_eval gsm8k_path lora lora_r eval_samples eval_batch_size
        eval_max_new_tokens evaluate save_model torch_threads dtype reward""",
    # where data leaves the machine: the Hub, trackers, a vLLM server, a Hub repository of completions
    SENDS_OUT: """push_to_hub hub_model_id hub_strategy hub_private_repo hub_always_push hub_revision report_to
        project trackio_space_id trackio_bucket_id trackio_static_space_id log_completions_hub_repo
        vllm_server_base_url vllm_server_host vllm_server_port vllm_group_port""",
    # handed to model loading and generation: QAEConfig takes the values that run no code only
    RUNS_CODE: "trust_remote_code model_init_kwargs generation_kwargs",
    CREDENTIAL: "hub_token",
    COMMAND_LINE: "resume_from_checkpoint",
}
FIELDS: dict[str, str] = {name: kind for kind, names in _CLASSES.items() for name in names.split()}
"""Every field a config file or the command line may set, by class: the one allow-list of settings."""
# why a field of a refusing class is refused, and the way on
_REFUSED = {
    CREDENTIAL: "carries a credential, which a run never takes as a setting (qae_lab writes its settings into "
    "config.json, its checkpoints and their exports): log in with `hf auth login`, or set HF_TOKEN in the shell's "
    "environment",
    COMMAND_LINE: "is what `train --resume RUN_DIR` does (a run's own plan: the checkpoint to resume, and the "
    "settings it may change): give --resume instead",
}


class FieldParser:
    r"""Typed values for the fields of ``dataclass_types``, read by ``trl.TrlParser``; a field of a later dataclass
    shadows one of the same name in an earlier one. ``classes``: ``{field: class}`` (:data:`FIELDS`), a field it
    lacks or one of a refusing class (a credential, the command line's own) refused by name.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     steps: int = 1
    ...     rate: float | None = None
    ...     tags: list[str] = ()
    ...     key: str = ""
    >>> parser = FieldParser([Demo], {"steps": ORDINARY, "rate": ORDINARY, "tags": ORDINARY})
    >>> parser.typed({"steps": "3", "rate": "none", "tags": ["a"]}, "demo.yaml")
    {'steps': 3, 'rate': None, 'tags': ['a']}
    >>> parser.typed({"key": "x"}, "demo.yaml")
    Traceback (most recent call last):
    ValueError: demo.yaml: key is a field qae_lab has not classified yet (ordinary, sends data out, runs code, credential), so a file or the command line may not set it; it is refused until qae_lab.runs.settings.FIELDS lists it
    """

    def __init__(self, dataclass_types, classes: dict[str, str]):
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
        self.classes = dict(classes)
        self.hints = {}
        for cls in dataclass_types:
            resolved = typing.get_type_hints(cls)
            self.hints.update({name: resolved[name] for name in cls.__dataclass_fields__ if name in self.actions})

    @property
    def names(self) -> set[str]:
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

    def admit(self, name: str, source: str) -> str:
        """The class of field ``name``; an unknown one, or one :data:`FIELDS` refuses, refused naming ``source``."""
        if name not in self.actions:
            raise self._unknown(name, source)
        kind = self.classes.get(name)
        if kind is None:
            raise ValueError(
                f"{source}: {name} is a field qae_lab has not classified yet (ordinary, sends data out, runs code, "
                f"credential), so a file or the command line may not set it; it is refused until "
                f"qae_lab.runs.settings.FIELDS lists it"
            )
        if kind in _REFUSED:
            raise ValueError(f"{source}: {name} {_REFUSED[kind]}")
        return kind

    def value(self, name: str, value, source: str):
        """One field's value, typed by the parser's action for it; errors name ``source`` and the field."""
        self.admit(name, source)
        _refuse_credential(value, name, source)
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
        if isinstance(value, str) and value.strip().startswith("{") and _allows(hint, dict):
            value = json_mapping(value, f"{source}: {name}")  # read here as in every form (QAEConfig reads the same)
        if isinstance(value, dict):
            if not _allows(hint, dict):
                raise ValueError(f"{source}: {name} takes no mapping (got {value!r})")
            return value
        if lists and isinstance(value, (list, tuple)) and not value:
            return []
        try:
            namespace, left = self.parser.parse_known_args([action.option_strings[0], *_tokens(value)])
        except argparse.ArgumentError as err:
            raise ValueError(f"{source}: {name}: {err.message}") from None
        if left:  # an item argparse reads as an option ('-1e-05', '--x', '--'), never as a value: not dropped unsaid
            raise ValueError(
                f"{source}: {name}: {left[0]!r} cannot be read as one of its values (the parser reads an item that "
                f"starts with '-' as an option, unless it is a plain number such as -0.5)"
            )
        got = getattr(namespace, action.dest)
        if isinstance(got, Enum):  # an enum field's choice, kept as the plain string a file or a log holds
            got = got.value
        return list(got) if lists else got

    def typed(self, values: dict[str, Any], source: str) -> dict[str, Any]:
        """``{field: value}`` from a YAML file (or any mapping) typed as the command line would be, errors naming ``source``."""
        return {name: self.value(name, value, source) for name, value in values.items()}

    def sets(self, sets) -> dict[str, Any]:
        """``["name=value", ...]`` (``--set``) as typed values; a list field takes ``a,b`` or a JSON list."""
        out = {}
        for item in sets:
            name, sep, raw = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or not name:
                raise ValueError(f"--set needs name=value, got {item!r}")
            self.admit(name, f"--set {name}")  # before the value is read or repeated (it may be a secret)
            _refuse_credential(raw, name, f"--set {name}")
            value: Any = raw
            if raw.strip().startswith(("[", "{")):
                value = json_value(raw, f"--set {name}")
            elif self.actions[name].nargs in ("+", "*"):
                value = [part for part in raw.split(",") if part.strip()]
            _refuse_credential(value, name, f"--set {name}")  # inside a list or a mapping, unrepeated too
            out[name] = self.value(name, value, f"--set {item}")
        return out

    def arguments(self, tokens) -> dict[str, Any]:
        """``["--name", "value", ...]`` as typed values (``--name=value`` too; ``--no_name``: a boolean false)."""
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
                    self.admit(name[3:], "command line")
                    out[name[3:]], name = False, None  # --no_NAME, the parser's own form of NAME false
                else:
                    self.admit(name, "command line")
            elif name is None:
                raise ValueError(f"command line: {token!r} is not a --name of a field (nor the value of one)")
            else:
                values.append(token)
        close()
        return out


def _refuse_credential(value, name: str, source: str) -> None:
    """Refuse ``name``'s ``value`` where it holds a credential anywhere, naming ``source`` and where, never the value."""
    found = credential_in(value, name)
    if found is not None:
        raise ValueError(
            f"{source}: {found}, which a run would record (config.json, its checkpoints): give it without the "
            f"credential, and the credential the way its client takes one from the shell's environment"
        )


# trackers that write local files only: report_to with these sends nothing out
_LOCAL_TRACKERS = ("none", "tensorboard")


def outgoing(cfg) -> dict[str, Any]:
    r"""The settings of ``cfg`` through which a run sends data out of the machine, ``{field: value}``, in the form
    a resume names them again: every :data:`SENDS_OUT` field is one of these switches or says where one sends.

    >>> import types
    >>> cfg = types.SimpleNamespace(push_to_hub=False, report_to=["tensorboard", "wandb"], use_vllm=True,
    ...                             vllm_mode="colocate", log_completions_hub_repo=None)
    >>> outgoing(cfg)
    {'report_to': ['wandb']}
    """
    out: dict[str, Any] = {}
    if cfg.push_to_hub:
        out.update(push_to_hub=True, hub_model_id=cfg.hub_model_id)
    trackers = [t for t in (cfg.report_to or []) if t not in _LOCAL_TRACKERS]
    if trackers:
        out["report_to"] = trackers
    if getattr(cfg, "log_completions_hub_repo", None):
        out["log_completions_hub_repo"] = cfg.log_completions_hub_repo
    if cfg.use_vllm and cfg.vllm_mode == "server":
        out["vllm_mode"] = "server"
    return out


def outgoing_lines(cfg) -> list[str]:
    r"""The note a run that sends data out prints before it starts: what goes where (none when nothing does)."""
    sent = outgoing(cfg)
    if "vllm_mode" in sent:  # where the prompts go
        where = cfg.vllm_server_base_url or f"{cfg.vllm_server_host}:{cfg.vllm_server_port}"
        sent = {**sent, "vllm_mode": f"server (prompts to {where})"}
    return [f"sends data out: {', '.join(f'{k}={v!r}' for k, v in sent.items())}"] if sent else []


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


MAX_CONFIG_BYTES = 1 << 20
"""The largest config file read (1 MiB): a settings file is a few hundred bytes; a larger one is refused unread."""


class _PlainLoader(yaml.SafeLoader):
    """YAML's safe loader refusing, where they stand, aliases (aliases of aliases expand a few hundred bytes into
    billions of items, "billion laughs") and a key given twice (the last would silently win)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(
                f"line {mark.line + 1}, column {mark.column + 1}: an alias (*name) repeats another value; write the "
                f"value out instead"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):  # e.g. `!!set a`, `!!map [a, b]`: YAML's own error, not ours
            return super().construct_mapping(node, deep=deep)
        lines: dict = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key is not None and key in lines:
                raise _Refused(f"{key_words(key)} is set twice, on line {lines[key]} and line {line}: set it once")
            lines.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)


class _Refused(yaml.YAMLError):
    """What a config file may not hold (an alias, a repeated key); its message says where and why."""


def _config_text(path: Path) -> str:
    """The text of a config file, refused with its path (and the line of a byte that is not UTF-8)."""
    check_regular_file(path, "config file")  # a named pipe would block the read forever
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ValueError(f"config file {path}: cannot be read ({err.strerror or err})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"config file {path}: larger than a settings file may be ({MAX_CONFIG_BYTES} bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(
            f"config file {path}: line {line}, column {column}: byte 0x{data[err.start]:02x} is not UTF-8 "
            f"(save the file as UTF-8)"
        ) from None


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, str]]:
    r"""A YAML settings file: ``(its fields, untyped, with ``preset`` if it names one; its ``env:``, checked by
    :func:`check_env`)``. A file that cannot be read as one fails with its path (and the line to blame).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "run.yaml"
    >>> _ = p.write_text("preset: cpu-demo\nquantile_k: 0.6\nenv:\n  TOKENIZERS_PARALLELISM: false\n")
    >>> read_config(p)
    ({'preset': 'cpu-demo', 'quantile_k': 0.6}, {'TOKENIZERS_PARALLELISM': 'false'})
    >>> _ = p.write_text("a: &x [1, 2]\nb: [*x, *x]\n")
    >>> read_config(p)
    Traceback (most recent call last):
    ...
    ValueError: config file .../run.yaml: line 2, column 5: an alias (*name) repeats another value; write the value out instead
    """
    path = Path(path)
    text = _config_text(path)
    try:
        loaded = yaml.load(text, Loader=_PlainLoader)  # a SafeLoader without aliases
    except _Refused as err:
        raise ValueError(f"config file {path}: {err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path}: not valid YAML ({err})") from None
    except RecursionError:
        raise ValueError(f"config file {path}: nested too deep to read") from None
    loaded = {} if loaded is None else loaded  # an empty file
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
        raise ValueError(
            f"config file {path}: env must be a mapping of variable names to values, got {type(env).__name__}"
        )
    return loaded, check_env(env, f"config file {path}")


# ---------------------------------------------------------------- env: the variables a config file may set

ENV_ALLOWED = {
    "TOKENIZERS_PARALLELISM": "the tokenizers library, when it first encodes in parallel",
    "QAE_LAB_GSM8K_DIR": "qae_lab's GSM8K loader, when the data loads",
    "PYTORCH_CUDA_ALLOC_CONF": "torch's CUDA memory allocator, at the first allocation",
    "PYTORCH_ALLOC_CONF": "torch's memory allocator, at the first allocation",
    "WANDB_PROJECT": "Weights & Biases (report_to: wandb), when training starts: the project",
    "WANDB_ENTITY": "Weights & Biases, when training starts: the team or user",
    "WANDB_RUN_GROUP": "Weights & Biases, when training starts: the run's group",
    "WANDB_TAGS": "Weights & Biases, when training starts: the run's tags",
    "WANDB_NOTES": "Weights & Biases, when training starts: the run's notes",
    "WANDB_MODE": "Weights & Biases, when training starts: online, offline or disabled",
    "WANDB_DIR": "Weights & Biases, when training starts: its local folder",
    "COMET_PROJECT_NAME": "Comet (report_to: comet_ml), when training starts: the project",
    "COMET_WORKSPACE": "Comet, when training starts: the workspace",
    "COMET_MODE": "Comet, when training starts: online, offline or disabled",
    "MLFLOW_EXPERIMENT_NAME": "MLflow (report_to: mlflow), when training starts: the experiment",
    "MLFLOW_TRACKING_URI": "MLflow, when training starts: the tracking server (or a local folder)",
    "MLFLOW_TAGS": "MLflow, when training starts: the run's tags",
    "MLFLOW_NESTED_RUN": "MLflow, when training starts: nest the run",
    "MLFLOW_FLATTEN_PARAMS": "MLflow, when training starts: flatten nested settings",
    "CLEARML_PROJECT": "ClearML (report_to: clearml), when training starts: the project",
    "CLEARML_TASK": "ClearML, when training starts: the task's name",
    "NEPTUNE_PROJECT": "Neptune (report_to: neptune), when training starts: the project",
}
"""The variables a config file's ``env:`` may set, by exact name, with what reads each (after the settings are)."""
ENV_SHELL_ONLY = {
    "HF_HOME": "huggingface_hub and transformers, when they are imported",
    **dict.fromkeys(
        ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"), "huggingface_hub, when it is imported"
    ),
    **dict.fromkeys(("HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE"), "datasets, when it is imported"),
    **dict.fromkeys(("TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY"), "transformers, when it is imported"),
    "CUDA_VISIBLE_DEVICES": "CUDA, when it starts (importing the libraries may already start it)",
    **dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS"), "torch's thread pools, when torch is imported"),
    "XDG_CACHE_HOME": "the libraries' caches, when they are imported",
}
"""Variables the libraries read when imported, before any config file: a file may only repeat the shell's value."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env(env: dict, source: str = "") -> dict[str, str]:
    r"""An ``env:`` mapping as ``{name: value}`` strings: :data:`ENV_ALLOWED`'s variables, and :data:`ENV_SHELL_ONLY`'s
    where the shell already holds that very value; any other refused, naming ``source`` but never the value.

    >>> check_env({"TOKENIZERS_PARALLELISM": False, "WANDB_PROJECT": "qae"})
    {'TOKENIZERS_PARALLELISM': 'false', 'WANDB_PROJECT': 'qae'}
    >>> check_env({"WANDB_API_KEY": "x"}, "config file run.yaml")
    Traceback (most recent call last):
    ...
    ValueError: config file run.yaml: env: WANDB_API_KEY carries a credential, and a run records its env in its config.json: set it in the shell, or log in (e.g. `hf auth login`, `wandb login`)
    >>> check_env({"LD_PRELOAD": "/tmp/x.so"}, "config file run.yaml")
    Traceback (most recent call last):
    ...
    ValueError: config file run.yaml: env: LD_PRELOAD is not among the variables a file may set (TOKENIZERS_PARALLELISM, ...); set others in the shell
    """
    where = f"{source}: env" if source else "env"  # where the mapping came from, then the mapping
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{where}: {name!r} is not an environment variable's name")
        if credential_name(name):
            raise ValueError(
                f"{where}: {name} carries a credential, and a run records its env in its config.json: "
                f"set it in the shell, or log in (e.g. `hf auth login`, `wandb login`)"
            )
        if name not in ENV_ALLOWED and name not in ENV_SHELL_ONLY:
            raise ValueError(
                f"{where}: {name} is not among the variables a file may set ({', '.join(ENV_ALLOWED)}); "
                f"set others in the shell"
            )
        if isinstance(value, (dict, list, tuple)) or value is None:
            raise ValueError(f"{where}: {name} needs one plain value (a string, number or true/false)")
        text = "true" if value is True else "false" if value is False else str(value)
        if "\x00" in text:
            raise ValueError(f"{where}: {name} holds a NUL byte, which no process environment takes")
        _refuse_credential(text, name, where)
        if name in ENV_SHELL_ONLY and os.environ.get(name) != text:
            raise ValueError(
                f"{where}: {name} is read by {ENV_SHELL_ONLY[name]}, before a config file is read, so setting "
                f"it here would change nothing: set it in the shell ({name}={text} python -m qae_lab ...)"
            )
        out[name] = text
    return out


def apply_env(env: dict[str, str]) -> list[str]:
    r"""Set an ``env:`` mapping's variables (:func:`check_env`) in this process; one note line each, for the run.

    >>> apply_env(check_env({"TOKENIZERS_PARALLELISM": "false"}))
    ['TOKENIZERS_PARALLELISM=false (read by the tokenizers library, when it first encodes in parallel)']
    """
    lines = []
    for name, value in check_env(env).items():
        os.environ[name] = value
        lines.append(f"{name}={value} (read by {ENV_ALLOWED.get(name) or ENV_SHELL_ONLY[name]})")
    return lines
