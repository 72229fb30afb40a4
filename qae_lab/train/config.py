r"""The trainer's configuration: TRL's ``GRPOConfig`` plus the knobs of QAE and SA-AH-GRPO.

:class:`QAEConfig` adds QAE's baseline (arXiv 2509.22611: the group K-quantile b_K instead of the mean) and SA-AH-GRPO's
token weighting (arXiv 2606.05434: w_t = exp(-alpha * sum_{s<=t} H~_s) on negative-advantage rollouts). Every option
TRL reads in the code :class:`~qae_lab.train.trainer.QAETrainer` replaces is in :data:`REPLACED_CODE_OPTIONS`.

Implementer's notes: docs/implementation.md, section ``qae_lab.train.config``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path

from transformers import GenerationConfig
from transformers.generation import logits_process
from trl import GRPOConfig

from qae_lab._checks import (
    check_choice,
    check_finite_scalar,
    check_path,
    check_regular_file,
    credential_in,
    credential_name,
    json_mapping,
    nul_in,
    non_finite,
    plain_value,
)
from qae_lab.storage.folder import TENSORBOARD_DIR
from qae_lab.task.behaviour import REFLECTION_WORDS, reflection_pattern
from qae_lab.task.models import EXPERTS_IMPLEMENTATIONS, check_attention
from qae_lab.entropy_controls import ADVANTAGE_MASKS, COV_PENALTIES, check_ratio
from qae_lab.knobs import KNOBS, help_field, knob_field, validate_knobs
from qae_lab import methods
from qae_lab.methods import LOSS_TYPES, TRL_LOSS_TYPES, QUANTILE_METHODS, WEIGHTED_LOSS_TYPES, check_weighting_loss_type

__all__ = [
    "QAEConfig",
    "as_qae_config",
    "refuse_code_and_credentials",
    "MAX_STEPS",
    "MAX_REPEATS",
    "MAX_WORKERS",
    "MAX_BEAMS",
    "MODEL_INIT_KEYS",
    "MODEL_INIT_CODE",
    "GENERATION_KEYS",
    "VLLM_SAMPLING_KEYS",
    "REPLACED_CODE_OPTIONS",
]


def _in(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False, none: bool = False):
    """A range check for :data:`_SETTING_RANGES`: (test, words for the message)."""

    def test(v) -> bool:
        if v is None:
            return none
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)

    words = ("(" if lo_open else "[") + f"{lo}, {hi}" + (")" if hi_open else "]")
    return test, f"a number in {words}".replace("inf]", "inf)") + (" or None" if none else "")


_INF = math.inf
MAX_STEPS = 100_000
"""Optimizer steps a run takes, and checkpoints it keeps: the Trainer keeps every logged step in memory and in every
checkpoint. The papers' runs take hundreds of steps; 100,000 at a second a step is more than a day."""
MAX_REPEATS = 1_024
"""Times a step repeats its work (``gradient_accumulation_steps``, ``num_iterations``, dynamic sampling's rounds, a
loader's prefetch): the presets use 1 to 4, verl's DAPO recipe 10 rounds."""
MAX_WORKERS = 1_024
"""Data-loading processes (``dataloader_num_workers``): more than the hardware threads of one machine."""


def _pad_multiple(v) -> bool:  # TRL reads "auto" (128 on Neuron, else None) and a whole number's text itself
    return v is None or v == "auto" or (isinstance(v, str) and v.strip().isdigit()) or _in(1, _INF)[0](v)


# the fields neither transformers nor TRL range-checks, by range: name -> (test, allowed). The sampling values are
# checked by the generator's own code (_sampling_problems)
_SETTING_RANGES = {
    name: check
    for check, names in {
        _in(0, _INF): "learning_rate beta epsilon weight_decay max_grad_norm adam_epsilon eval_delay advantage_eps",
        _in(0, _INF, none=True): "epsilon_high neftune_noise_alpha num_completions_to_print "
        "max_tool_calling_iterations",
        _in(0, _INF, lo_open=True): "num_train_epochs save_steps logging_steps vllm_server_timeout",
        _in(0, _INF, lo_open=True, none=True): "eval_steps vllm_importance_sampling_cap",
        _in(1, _INF): "max_completion_length per_device_train_batch_size per_device_eval_batch_size ddp_timeout "
        "vllm_tensor_parallel_size ref_model_sync_steps regime_eval_samples",
        _in(1, _INF, none=True): "num_generations_eval steps_per_generation eval_accumulation_steps "
        "generation_batch_size vllm_max_model_length entropy_top_k regime_eval_steps",
        _in(2, _INF): "num_generations regime_eval_prompts",
        _in(1, MAX_REPEATS): "gradient_accumulation_steps num_iterations dynamic_sampling_max_rounds "
        "dynamic_sampling_oversample",
        _in(1, MAX_REPEATS, none=True): "dataloader_prefetch_factor",
        _in(1, MAX_STEPS, none=True): "save_total_limit",
        _in(0, MAX_WORKERS): "dataloader_num_workers",
        _in(0, 2**32 - 1): "seed",
        _in(0, 1): "top_entropy_quantile ref_model_mixup_alpha",
        _in(0, 1, hi_open=True): "adam_beta1 adam_beta2 label_smoothing_factor",
        _in(0, 1, lo_open=True): "vllm_gpu_memory_utilization",
        _in(1, 65535): "vllm_server_port vllm_group_port",
        _in(1, _INF, lo_open=True, none=True): "delta",  # TRL's two-sided clip: an upper bound on the ratio, above 1
        (_pad_multiple, "None, 'auto' or a whole number >= 1"): "pad_to_multiple_of",
    }.items()
    for name in names.split()
}
_VLLM_MODES = ("colocate", "server")
_VLLM_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# settings of transformers' generate that do nothing when vLLM generates: name -> the value that is off
_TRANSFORMERS_GENERATION = {"fast_generation": False, "compile_generation": False, "cache_implementation": None}


MAX_BEAMS = 64
"""Beams of a beam search in ``generation_kwargs`` (``num_beams``, ``num_beam_groups``): each multiplies the
generation batch; sampling, what GRPO does, uses 1."""
_LENGTH_KEYS = (
    "max_new_tokens",
    "min_new_tokens",
    "max_tokens",
    "min_tokens",
)  # completion tokens (vLLM: the last two)
_WINDOW_KEYS = ("max_length", "min_length", "max_cache_len")  # prompt and completion tokens together
MAX_PROMPT_TOKENS = 32_768
"""The prompt tokens a ``generation_kwargs`` window (``max_length``, ``max_cache_len``) may add to
``max_completion_length``: far more than any prompt here (GSM8K's longest is about 300)."""


def _generation_size_problems(cfg) -> list[str]:
    """``generation_kwargs`` entries that size a generation past what the run's own settings bound: TRL applies them
    after ``max_completion_length``, so a length there overrides it."""
    kwargs = cfg.generation_kwargs if isinstance(cfg.generation_kwargs, dict) else {}
    bad = []
    for key in _LENGTH_KEYS:
        value = kwargs.get(key)
        if value is not None and not (isinstance(value, int) and 0 <= value <= cfg.max_completion_length):
            bad.append(
                f"generation_kwargs.{key} must be a whole number in [0, max_completion_length={cfg.max_completion_length}] "
                f"(TRL applies it after max_completion_length, which sizes the run), got {value!r}"
            )
    for key in _WINDOW_KEYS:
        value, most = kwargs.get(key), cfg.max_completion_length + MAX_PROMPT_TOKENS
        if value is not None and not (isinstance(value, int) and 0 <= value <= most):
            bad.append(
                f"generation_kwargs.{key} must be a whole number in [0, max_completion_length + {MAX_PROMPT_TOKENS} = "
                f"{most}] (MAX_PROMPT_TOKENS: prompt and completion tokens together), got {value!r}"
            )
    for key in ("num_beams", "num_beam_groups"):
        value = kwargs.get(key)
        if value is not None and not (isinstance(value, int) and 1 <= value <= MAX_BEAMS):
            bad.append(f"generation_kwargs.{key} must be a whole number in [1, {MAX_BEAMS}] (MAX_BEAMS), got {value!r}")
    for key in ("num_return_sequences", "n"):  # transformers', vLLM's
        if kwargs.get(key) not in (None, 1):
            bad.append(
                f"generation_kwargs.{key} must be 1 (TRL generates one completion a row, each group's rows repeat "
                f"its prompt: num_generations sets the group size), got {kwargs[key]!r}"
            )
    return bad


# transformers' logits warpers for GRPOConfig's sampling fields, each built when transformers' generate builds it
# (GenerationMixin._get_logits_processor, under do_sample=True): their constructors are transformers' checks
_WARPERS = {
    "temperature": (lambda v: v != 1.0, lambda v: logits_process.TemperatureLogitsWarper(v)),
    "top_k": (lambda v: v != 0, lambda v: logits_process.TopKLogitsWarper(top_k=v)),
    "top_p": (lambda v: v < 1.0, lambda v: logits_process.TopPLogitsWarper(top_p=v)),
    "min_p": (lambda v: True, lambda v: logits_process.MinPLogitsWarper(min_p=v)),
    "repetition_penalty": (lambda v: v != 1.0, lambda v: logits_process.RepetitionPenaltyLogitsProcessor(penalty=v)),
}


def _sampling_problems(cfg) -> list[str]:
    r"""The sampling values (:data:`_WARPERS`' fields, or ``generation_kwargs``') the generator would refuse at its
    first step, in its own words (transformers' warpers, or vLLM's ``SamplingParams``), now."""
    kwargs = cfg.generation_kwargs if isinstance(cfg.generation_kwargs, dict) else {}
    values = {name: kwargs.get(name, getattr(cfg, name)) for name in _WARPERS}
    where = {name: f"generation_kwargs.{name}" if name in kwargs else name for name in _WARPERS}
    bad = []
    if cfg.use_vllm:
        t = values["temperature"]
        if not (isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0):
            bad.append(
                f"{where['temperature']} must be > 0, got {t!r}: TRL divides the logits by it for the log-probs the "
                f"loss uses (0, vLLM's greedy decoding, gives NaN; and a group of identical completions learns nothing)"
            )
        if importlib.util.find_spec("vllm") is not None:
            from vllm import SamplingParams  # the vllm extra: imported only when it is installed and used

            try:
                SamplingParams(**{**{k: v for k, v in values.items() if v is not None}, **kwargs})
            except (ValueError, TypeError) as err:  # vLLM's own validation (VLLMValidationError is a ValueError)
                bad.append(f"generation_kwargs / sampling settings refused by vLLM's SamplingParams: {err}")
        return bad
    for name, (applies, build) in _WARPERS.items():
        value = values[name]
        if value is None:
            continue
        try:
            if applies(value):
                build(value)
        except (ValueError, TypeError) as err:  # transformers' message names the setting (`top_k`, `temperature`)
            bad.append(f"{where[name]}={value!r}: transformers' generate would refuse it: {err}")
    return bad


@functools.cache
def _int_fields(cls) -> tuple[str, ...]:
    """The fields of ``cls`` typed ``int`` or ``int | None``: a whole number each (a float would pass TRL)."""
    return tuple(name for name, hint in typing.get_type_hints(cls).items() if {int} <= _options(hint) <= {int, None})


def _options(hint) -> set:
    """The types a type hint admits, None for ``None`` (``int | None``: ``{int, None}``)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return {None if o is type(None) else o for o in options}


def _check_training_settings(cfg) -> None:
    """Refuse the trainer settings that would fail late or train silently wrong, each named with its range."""
    bad = []
    for name in _int_fields(type(cfg)):
        value = getattr(cfg, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            bad.append(f"{name} must be a whole number, got {value!r}")
    for f in dataclasses.fields(cfg):
        where = non_finite(getattr(cfg, f.name, None), f.name) if f.init else None
        if where:
            bad.append(f"{where} must be a finite number (not NaN or inf)")
    weights = cfg.reward_weights
    if weights is not None and (not weights or all(w == 0 for w in weights if not isinstance(w, bool))):
        bad.append(
            f"reward_weights must hold a weight per reward function, not all 0 (that trains on nothing), got {weights!r}"
        )
    if isinstance(cfg.max_steps, int) and not (cfg.max_steps == -1 or 1 <= cfg.max_steps <= MAX_STEPS):
        bad.append(
            f"max_steps must be -1 (train num_train_epochs epochs) or in [1, {MAX_STEPS}] (MAX_STEPS: the Trainer keeps "
            f"every logged step in memory), got {cfg.max_steps}"
        )
    bad += _generation_size_problems(cfg)
    bad += _sampling_problems(cfg)
    for name, (test, allowed) in _SETTING_RANGES.items():
        if hasattr(cfg, name) and not test(getattr(cfg, name)):
            bad.append(f"{name} must be {allowed}, got {getattr(cfg, name)!r}")
    if bad:
        raise ValueError("; ".join(bad))


# what model_init_kwargs may hold (TRL hands it to from_pretrained): every keyword transformers 5.x's from_pretrained
# documents or reads, and use_cache, less the internal ones and MODEL_INIT_CODE's, refused by name
MODEL_INIT_CODE = {
    "use_kernels": "loads kernels from the Hub (the kernels package), code no one here wrote",
    "kernel_config": "maps layers to kernels from the Hub, code no one here wrote",
    "allow_all_kernels": "lets from_pretrained load any Hub kernel a model names, code no one here wrote",
    "kernels_mode": "chooses how Hub kernels load, code no one here wrote",
    "tqdm_class": "is a class from_pretrained calls: a setting of a file or the command line names no code",
}
MODEL_INIT_KEYS = tuple(
    """
    adapter_kwargs adapter_name attn_implementation cache_dir config device_map device_mesh disable_mmap
    distributed_config dtype experts_implementation force_download fusion_config generation_config gguf_file
    ignore_mismatched_sizes key_mapping local_files_only low_cpu_mem_usage max_memory offload_buffers
    offload_folder output_loading_info proxies quantization_config revision state_dict subfolder torch_dtype
    tp_plan tp_size trust_remote_code use_cache use_safetensors variant weights_only
    """.split()
)
# what generation_kwargs may hold: the fields of transformers' GenerationConfig and every input of vLLM 0.31's
# SamplingParams (TRL hands it to one or the other); not generate()'s arguments that fetch or run code (custom_generate)
VLLM_SAMPLING_KEYS = tuple(
    """
    n presence_penalty frequency_penalty repetition_penalty temperature top_p top_k min_p seed stop
    stop_token_ids ignore_eos max_tokens min_tokens logprobs prompt_logprobs prompt_logprob_token_ids
    prompt_logprob_start logprob_token_ids flat_logprobs detokenize skip_special_tokens
    spaces_between_special_tokens include_stop_str_in_output output_kind stream_interval skip_clone
    structured_outputs logit_bias allowed_token_ids extra_args bad_words skip_reading_prefix_cache
    thinking_token_budget repetition_detection routed_experts_prompt_start trace_decode_token_ids
    """.split()
)
GENERATION_KEYS = tuple(
    sorted(
        {k for k in GenerationConfig().to_dict() if not k.startswith("_") and k != "transformers_version"}
        | set(VLLM_SAMPLING_KEYS)
    )
)


# Every GRPOConfig option TRL reads in the code QAETrainer may replace (_compute_loss, the advantages of
# _generate_and_score_completions), with how it is honoured or why a value is refused, and the tests that show it
# (tests/train/test_trl_options.py checks the list against TRL's source). TRL reads every other option unchanged.
_OFF = "tests/train/test_trl_options.py::test_each_loss_option_off_default_is_trls_and_changes_the_step"
_TRL_LOSS = (
    "TRL's own loss of QAE's advantages (uses_trl_loss), unchanged: "
    "tests/train/test_trainer.py::test_trl_losses_take_qae_advantages_and_reproduce_trl_with_the_mean"
)
REPLACED_CODE_OPTIONS: dict[str, str] = {
    "loss_type": "grpo, bnpo, dr_grpo, dapo: TRL's own loss, or qae_lab.loss.grpo_loss under token weighting, "
    "Clip-Cov / KL-Cov or the sparse update; cispo, sapo, vespo, luspo: "
    + _TRL_LOSS
    + "; tests/train/test_trainer.py::test_mean_baseline_reproduces_trl, "
    + _OFF,
    "epsilon": "LossSettings.epsilon_low (the clipped surrogate): " + _OFF,
    "epsilon_high": "LossSettings.epsilon_high (Clip-Higher): " + _OFF,
    "delta": "LossSettings.delta (the two-sided bound): " + _OFF,
    "beta": "LossSettings.beta (the k3 KL term on TRL's reference log-probs): " + _OFF,
    "use_bias_correction_kl": "LossSettings.kl_ratio_correction: " + _OFF,
    "importance_sampling_level": "LossSettings.sequence_ratio (GSPO): " + _OFF,
    "top_entropy_quantile": "TRL's get_high_entropy_mask, applied in qae_lab.loss.grpo_loss: " + _OFF,
    "entropy_coef": "LossSettings.entropy_coef (a fixed bonus; adaptive: TRL's loss): " + _OFF,
    "max_completion_length": "LossSettings.max_completion_length (dr_grpo's constant normaliser): " + _OFF,
    "gradient_accumulation_steps": "LossScale.accumulation (the Trainer's current_gradient_accumulation_steps: every "
    "loss type divides by it in training): "
    "tests/train/test_trl_options.py::test_several_micro_batches_per_generation_step_as_trl, " + _OFF,
    "steps_per_generation": "LossScale.steps_per_generation (dapo's generation-batch normaliser): "
    "tests/test_loss.py::test_each_loss_type_reduces_as_trl_and_sparse_rows_stay_in_the_denominators, "
    "tests/train/test_trl_options.py::test_several_micro_batches_per_generation_step_as_trl, " + _OFF,
    "router_aux_loss_coef": "a mixture-of-experts router's balance loss added as TRL adds it: "
    "tests/train/test_trl_options.py::test_a_routers_balance_loss_is_trls",
    "use_vllm": "the sampler's log-probs and TRL's importance ratio in the batch: "
    "tests/train/test_vllm.py::test_qae_trains_on_vllms_completions",
    "vllm_importance_sampling_correction": "the ratio TRL put in the batch multiplies the loss, or is absent: "
    "tests/train/test_vllm.py::test_without_the_importance_correction_the_loss_gets_no_sampler_ratio",
    "off_policy_mask_threshold": _TRL_LOSS + ", " + _OFF,
    "use_adaptive_entropy": _TRL_LOSS + ", " + _OFF,
    **{
        name: f"with {when}, {_TRL_LOSS}, {_OFF}"
        for when, names in (
            ("use_adaptive_entropy", "entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target"),
            ("loss_type='sapo'", "sapo_temperature_pos sapo_temperature_neg"),
            ("loss_type='vespo'", "vespo_k_pos vespo_k_neg vespo_lambda_pos vespo_lambda_neg"),
        )
        for name in names.split()
    },
    "scale_rewards": "group_advantages(scale=...): " + _OFF,
    "reward_weights": "the weighted sum the baseline is taken of, as TRL's: "
    "tests/train/test_trl_options.py::test_reward_weights_weigh_the_rewards_as_trl",
    "num_generations": "the group size G: " + _OFF,
    "num_generations_eval": "the group size in evaluation: "
    "tests/train/test_trl_options.py::test_num_generations_eval_sets_the_evaluation_group_size",
    "multi_objective_aggregation": "'sum_then_normalize' (TRL's default) honoured; 'normalize_then_sum' refused, "
    "with why (it leaves no group baseline to replace): tests/train/test_config.py::test_config_rejects_bad_values",
}


def _unknown_keys(mapping, name: str, allowed: tuple[str, ...]) -> str | None:
    if mapping is None or isinstance(mapping, str):  # None, or a JSON string TRL has not read into a dict yet
        return None
    if not isinstance(mapping, dict):
        return f"{name} must be a mapping, got {type(mapping).__name__}"
    unknown = sorted(str(k) for k in mapping if k not in allowed)
    if unknown:
        return f"{name} may hold only {', '.join(allowed)}; got {', '.join(unknown)}"
    return None


# the mapping settings TRL reads from a JSON string (TrainingArguments._VALID_DICT_FIELDS) that take no file's path
_MAPPINGS = tuple(
    """model_init_kwargs generation_kwargs chat_template_kwargs transformers_continuous_batching_config
    lr_scheduler_kwargs activation_checkpointing_kwargs gradient_checkpointing_kwargs""".split()
)
_PATHS = ("output_dir", "logging_dir")  # the folders a run writes
RUN_PATH_ROOM = 512
"""Bytes kept for what a run writes inside its folder (``.staging/checkpoint-N/generation_config.json``, a TensorBoard
file named by host and time, a lock's temporary name): its folder's absolute path may take 4096 less these."""
_FILES = ("deepspeed", "fsdp_config", "accelerator_config")  # JSON files transformers reads, when given by path


def refuse_code_and_credentials(cfg, *, read: bool = True) -> None:
    r"""Refuse, each named with what to do instead, the settings that would run code from elsewhere or hold a
    credential (never repeating its value). ``read``: TRL's ``__post_init__`` has run, so a mapping setting still a
    string is refused. QAETrainer calls it again on its config (a field can change after the config is built)."""
    if read:
        for name in _MAPPINGS:
            value = getattr(cfg, name, None)
            if value is not None and not isinstance(value, dict):
                raise ValueError(
                    f"{name} must be a mapping: a dict, or a JSON object ('{{...}}', read by TRL only when it starts "
                    f"with '{{'), got a {type(value).__name__} TRL did not read as one"
                )
    kwargs = cfg.model_init_kwargs if isinstance(cfg.model_init_kwargs, dict) else {}
    remote = kwargs.get("trust_remote_code", False)
    if cfg.trust_remote_code or remote is not False:
        where = "trust_remote_code" if cfg.trust_remote_code else "model_init_kwargs.trust_remote_code"
        value = cfg.trust_remote_code if cfg.trust_remote_code else remote
        said = "true" if value is True else repr(value)
        raise ValueError(
            f"{where}={said} would run Python code shipped in a model folder (its modelling files; from_pretrained "
            f"reads any value but False as true), which qae_lab never does: models load as transformers' own "
            f"architectures, from safetensors. Leave {where} out, or set it to false (the Qwen2.5 models need no "
            f"remote code)"
        )
    for key, why in MODEL_INIT_CODE.items():
        if key in kwargs:
            raise ValueError(
                f"model_init_kwargs.{key} {why}, which qae_lab never runs: leave it out (transformers' own attention "
                f"and kernels need none)"
            )
    if kwargs.get("weights_only", True) is not True:
        raise ValueError(
            f"model_init_kwargs.weights_only={kwargs['weights_only']!r} would unpickle a checkpoint, which runs any "
            f"code the file holds: leave it out (true), and load safetensors"
        )
    experts = kwargs.get("experts_implementation")
    if experts is not None and experts not in EXPERTS_IMPLEMENTATIONS:
        raise ValueError(
            f"model_init_kwargs.experts_implementation must be one of transformers' own {EXPERTS_IMPLEMENTATIONS}, "
            f"got {experts!r}: another would fetch and run a kernel from the Hub"
        )
    for problem in (
        _unknown_keys(cfg.model_init_kwargs, "model_init_kwargs", MODEL_INIT_KEYS),
        _unknown_keys(cfg.generation_kwargs, "generation_kwargs", GENERATION_KEYS),
    ):
        if problem:
            raise ValueError(problem)
    check_attention(kwargs.get("attn_implementation"), "model_init_kwargs.attn_implementation")
    for f in dataclasses.fields(cfg):
        if not f.init:
            continue
        value = getattr(cfg, f.name)
        if credential_name(f.name) and value not in (None, ""):
            raise ValueError(
                f"{f.name} carries a credential, which qae_lab never takes as a setting: the Trainer writes its "
                f"settings into every checkpoint (training_args.bin). Log in instead (`hf auth login`), or set "
                f"HF_TOKEN in the environment; leave {f.name} unset"
            )
        found = credential_in(value, f.name)
        if found:
            raise ValueError(
                f"{found}, which a run would record (config.json, every checkpoint): give it without the "
                f"credential, and the credential the way its client takes one from the shell's environment"
            )


@functools.cache
def _mapping_fields(cls) -> dict[str, bool]:
    """``{field: whether it also takes a string}`` for every field of ``cls`` whose type admits a mapping."""
    hints = typing.get_type_hints(cls).items()
    return {
        name: str in _options(h)
        for name, h in hints
        if any(o is dict or typing.get_origin(o) is dict for o in _options(h))
    }


def _normalise(cfg) -> None:
    """Every setting in one form before any check: numbers as Python's own (:func:`~qae_lab._checks.plain_value`), a
    JSON object string read as a mapping, a value among its field's ``choices``, the run's folders as usable paths."""
    mappings = _mapping_fields(type(cfg))
    for f in dataclasses.fields(cfg):
        if not f.init:
            continue
        value = plain_value(getattr(cfg, f.name))
        if isinstance(value, str) and f.name in mappings:
            if value.strip().startswith("{"):
                value = json_mapping(value, f.name)
            elif not mappings[f.name]:
                raise ValueError(f"{f.name} must be a mapping (a dict or a JSON object), got a string")
        setattr(cfg, f.name, value)
        if nul_in(value, f.name):
            raise ValueError(
                f"{nul_in(value, f.name)} holds a NUL byte, which no file system, process or library takes"
            )
        choices = f.metadata.get("choices")
        if choices is not None and value is not None and value not in list(choices):
            raise ValueError(f"{f.name} must be one of {list(choices)}, got {value!r}")
    for name in _PATHS:
        if getattr(cfg, name, None) is not None:
            check_path(getattr(cfg, name), name, room=RUN_PATH_ROOM)
    for name in _FILES:  # transformers reads these files itself (a named pipe would block it forever)
        value = getattr(cfg, name, None)
        if isinstance(value, str) and value.strip():
            check_regular_file(value, name)
    if cfg.deepspeed and importlib.util.find_spec("deepspeed") is None:
        raise ValueError(
            "deepspeed needs the deepspeed package, which is not installed here: install it, or unset deepspeed"
        )
    _check_tracker_folder(cfg)


def _check_tracker_folder(cfg) -> None:
    """Refuse a ``logging_dir`` inside the run folder but outside its ``runs/``, which ``--overwrite`` would leave."""
    for name, logging_dir in (
        ("logging_dir", getattr(cfg, "logging_dir", None)),
        ("TENSORBOARD_LOGGING_DIR", os.environ.get("TENSORBOARD_LOGGING_DIR")),  # transformers' override (>= 5.1)
    ):
        if not logging_dir or cfg.output_dir is None:
            continue
        run, logs = Path(cfg.output_dir).resolve(), Path(logging_dir).resolve()
        if logs.is_relative_to(run) and not logs.is_relative_to(run / TENSORBOARD_DIR):
            raise ValueError(
                f"{name} {logging_dir} lies in the run folder outside its {TENSORBOARD_DIR}/ folder, where a later "
                f"--overwrite would leave it behind: leave it unset, or put it under {run / TENSORBOARD_DIR} "
                f"or outside the run folder"
            )


def uses_trl_loss(cfg) -> bool:
    r"""Whether QAETrainer computes ``cfg``'s loss with TRL's own ``_compute_loss`` on QAE's advantages: for
    :data:`~qae_lab.methods.TRL_LOSS_TYPES` and the options :mod:`qae_lab.loss` does not compute.

    >>> import types
    >>> uses_trl_loss(types.SimpleNamespace(loss_type="cispo", off_policy_mask_threshold=None, use_adaptive_entropy=False))
    True
    >>> uses_trl_loss(types.SimpleNamespace(loss_type="dapo", off_policy_mask_threshold=None, use_adaptive_entropy=False))
    False
    """
    return (
        cfg.loss_type in TRL_LOSS_TYPES or cfg.off_policy_mask_threshold is not None or bool(cfg.use_adaptive_entropy)
    )


def check_lab_loss_options(cfg, **values) -> None:
    r"""Refuse, naming it, an option that needs qae_lab's loss (token weighting, the covariance penalties) where
    ``cfg``'s loss is TRL's (:func:`uses_trl_loss`); ``values`` stand in for ``cfg``'s (a live knob change).

    >>> import types
    >>> cfg = types.SimpleNamespace(loss_type="dapo", off_policy_mask_threshold=0.5, use_adaptive_entropy=False,
    ...                             token_weighting="none", cov_penalty="none")
    >>> check_lab_loss_options(cfg, token_weighting="sa_ah")
    Traceback (most recent call last):
    ...
    ValueError: token_weighting='sa_ah' needs qae_lab's loss, but loss_type='dapo', off_policy_mask_threshold=0.5 and use_adaptive_entropy=False are TRL's loss: set token_weighting='none', or loss_type in ('grpo', 'bnpo', 'dr_grpo', 'dapo') without those two options
    """
    if not uses_trl_loss(cfg):
        return
    for name, off in {"token_weighting": "none", "cov_penalty": "none"}.items():
        value = values.get(name, getattr(cfg, name))
        if value != off:
            raise ValueError(
                f"{name}={value!r} needs qae_lab's loss, but loss_type={cfg.loss_type!r}, "
                f"off_policy_mask_threshold={cfg.off_policy_mask_threshold} and use_adaptive_entropy="
                f"{cfg.use_adaptive_entropy} are TRL's loss: set {name}={off!r}, or loss_type in "
                f"{LOSS_TYPES} without those two options"
            )


def _vllm_generates(cfg) -> None:
    r"""With ``use_vllm=True``, switch off the settings of transformers' ``generate``, saying so in a ``UserWarning``."""
    on = {name: getattr(cfg, name) for name, off in _TRANSFORMERS_GENERATION.items() if getattr(cfg, name) != off}
    if not cfg.use_vllm or not on:
        return
    for name in on:
        setattr(cfg, name, _TRANSFORMERS_GENERATION[name])
    said = ", ".join(f"{name}={value!r} -> {_TRANSFORMERS_GENERATION[name]!r}" for name, value in on.items())
    # stacklevel 4: the code that built the config (this function < __post_init__ < the dataclass __init__)
    warnings.warn(
        f"use_vllm=True: vLLM generates (vllm_mode={cfg.vllm_mode!r}), so the settings of transformers' "
        f"generate step aside: {said}",
        UserWarning,
        stacklevel=4,
    )


@dataclass
class QAEConfig(GRPOConfig):
    r"""``trl.GRPOConfig`` plus the knobs of QAE and SA-AH-GRPO, every setting checked when the config is built.

    >>> cfg = QAEConfig(output_dir="runs/doc", use_cpu=True, report_to=[], quantile_k=0.6, token_weighting="sa_ah")
    >>> cfg.baseline, cfg.quantile_k, cfg.token_weighting, cfg.alpha
    ('quantile', 0.6, 'sa_ah', 0.5)
    >>> QAEConfig(output_dir="runs/doc", use_cpu=True, report_to=[], quantile_k=1.5)
    Traceback (most recent call last):
    ValueError: quantile_k must lie in the open interval (0, 1), got 1.5
    """

    # the live knobs: qae_lab.knobs.Knobs' fields (help, default) and validate_knobs (range)
    baseline: str = knob_field("baseline")
    quantile_k: float = knob_field("quantile_k")
    quantile_method: str = help_field(
        "'paper' (ceil(K*G)-th smallest reward) or 'linear' (torch.quantile, as QAE's code).",
        default=methods.DEFAULT_QUANTILE_METHOD,
    )
    advantage_eps: float = help_field("Added to the std when scaling (TRL uses 1e-4).", default=1e-4)
    token_weighting: str = knob_field("token_weighting")
    alpha: float = knob_field("alpha")
    entropy_top_k: int | None = help_field(
        "H~_t of the horizon weights: None for the loss forward's exact entropy, k for SA-AH's top-k estimate "
        "H_topk / log V (arXiv 2606.05434: k = 500; an extra no-grad LM-head projection).",
        default=None,
    )
    sparse_update: bool = help_field(
        "Skip the forward/backward of responses with advantage exactly 0 (same gradient); dense when beta != 0 or "
        "an entropy bonus is on.",
        default=True,
    )
    success_threshold: float = help_field(
        "Score of success_reward at or above which a response is a success in the qae/* metrics (0.5 for a 0/1 "
        "reward, 5.0 for SA-AH's composite one).",
        default=methods.DEFAULT_SUCCESS_THRESHOLD,
    )
    success_reward: str | None = help_field(
        "The reward function (as TRL names it) whose own score decides a success. None: the only one; with "
        "several, the weighted sum, and the trainer warns.",
        default=None,
    )
    fast_generation: bool = help_field(
        "Sample in eval mode with LoRA merged, restored bit-exactly after (qae_lab.train.generation). "
        "Transformers generation only.",
        default=False,
    )
    compile_generation: bool = help_field(
        "Let transformers compile the decode step (TRL passes disable_compile=True); with "
        "cache_implementation='static' on a GPU. Transformers generation only.",
        default=False,
    )
    advantage_mask: str = help_field(
        "'none', 'pos' (POS-MASK: only A > 0 responses train) or 'neg' (NEG-MASK: only A < 0).", default="none"
    )
    # Cui et al. 2025 (arXiv 2505.22617), qae_lab.entropy_controls
    cov_penalty: str = help_field("'none', 'clip_cov' or 'kl_cov'.", default=methods.DEFAULT_COV_PENALTY)
    clip_cov_ratio: float = help_field(
        "Clip-Cov: fraction of tokens detached, in (0, 1] (paper 2e-4; at least one).",
        default=methods.DEFAULT_CLIP_COV_RATIO,
    )
    clip_cov_lb: float = help_field("Clip-Cov: covariance band's low end.", default=methods.DEFAULT_CLIP_COV_LB)
    clip_cov_ub: float = help_field("Clip-Cov: covariance band's top end.", default=methods.DEFAULT_CLIP_COV_UB)
    kl_cov_ratio: float = help_field(
        "KL-Cov: fraction of tokens penalised, in (0, 1] (paper 2e-4 to 2e-3; at least one).",
        default=methods.DEFAULT_KL_COV_RATIO,
    )
    kl_cov_coef: float = help_field(
        "KL-Cov: weight of |log pi - log pi_old|, >= 0.", default=methods.DEFAULT_KL_COV_COEF
    )
    regime_eval_steps: int | None = help_field(
        "Every this many steps (and before the first and after the last) log a fixed held-out prompt set's "
        "entropy and success by start regime (regime_eval/*, qae_lab.train.regime_eval). None: off.",
        default=None,
    )
    regime_eval_samples: int = help_field(
        "Completions per held-out prompt at each regime evaluation (the start split: 4x).", default=8
    )
    regime_eval_prompts: int = help_field(
        "Held-out prompts of the regime evaluation (the first of the run's).", default=64
    )
    dynamic_sampling: bool = help_field(
        "DAPO's dynamic sampling (arXiv 2503.14476, sec. 3.2): drop groups whose advantages are all 0 and refill "
        "from the epoch's next prompts (qae_lab.train.dynamic_sampling). One process.",
        default=False,
    )
    dynamic_sampling_max_rounds: int = help_field(
        "Generation rounds a batch may take (verl's DAPO: 10); then groups without signal fill it.", default=10
    )
    dynamic_sampling_oversample: float = help_field(
        "Each refill generates for ceil(this x groups still needed) prompts (verl's DAPO: 3).", default=1.0
    )
    reflection_words: list[str] = help_field(
        "Words counted as reflective in the behaviour/reflect_* metrics (whole words, any case).",
        default_factory=lambda: list(REFLECTION_WORDS),
    )

    def __post_init__(self):
        _normalise(self)  # one form for every value, whichever route it came by (Python, a file, the command line)
        refuse_code_and_credentials(self, read=False)  # first: a later message may repeat a value
        _check_training_settings(self)  # before TRL's own checks, whose messages name fewer ranges
        super().__post_init__()
        # again on what TRL's __post_init__ made of the values (a JSON string is a mapping now, derived sizes are set)
        _check_training_settings(self)
        refuse_code_and_credentials(self)
        validate_knobs(**{name: getattr(self, name) for name in KNOBS})
        check_choice(self.quantile_method, "quantile_method", QUANTILE_METHODS)
        check_finite_scalar(self.success_threshold, "success_threshold")
        check_choice(self.vllm_mode, "vllm_mode", _VLLM_MODES)
        check_choice(self.vllm_importance_sampling_mode, "vllm_importance_sampling_mode", _VLLM_IS_MODES)
        _vllm_generates(self)  # fast_generation / compile_generation / cache_implementation off when vLLM samples
        # LOSS_TYPES: qae_lab.loss.grpo_loss; TRL's others: TRL's own loss on QAE's advantages (uses_trl_loss)
        check_choice(self.loss_type, "loss_type", LOSS_TYPES + TRL_LOSS_TYPES)
        check_weighting_loss_type(self.token_weighting, self.loss_type)
        check_lab_loss_options(self)
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported by QAETrainer: its "
                "baseline (the group's mean or K-quantile) is taken of one reward per response, the weighted sum of "
                "the reward functions (TRL's 'sum_then_normalize'); 'normalize_then_sum' normalises each reward "
                "function within the group and then over the batch, which leaves no group baseline to replace"
            )
        check_choice(self.advantage_mask, "advantage_mask", ADVANTAGE_MASKS)
        check_choice(self.cov_penalty, "cov_penalty", COV_PENALTIES)
        if self.cov_penalty != "none" and self.loss_type not in WEIGHTED_LOSS_TYPES:
            raise ValueError(
                f"cov_penalty={self.cov_penalty!r} needs loss_type in {WEIGHTED_LOSS_TYPES}, got {self.loss_type!r}"
            )
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            check_ratio(getattr(self, name), name)
        lb, ub = (check_finite_scalar(getattr(self, name), name) for name in ("clip_cov_lb", "clip_cov_ub"))
        if not lb < ub:
            raise ValueError(f"clip_cov_lb must be < clip_cov_ub, got {self.clip_cov_lb} and {self.clip_cov_ub}")
        if not check_finite_scalar(self.kl_cov_coef, "kl_cov_coef") >= 0:
            raise ValueError(f"kl_cov_coef must be >= 0, got {self.kl_cov_coef}")
        reflection_pattern(self.reflection_words)  # refuses an empty list or an empty word, naming it
        if self.dynamic_sampling and self.scale_rewards == "batch":
            raise ValueError(
                "dynamic_sampling with scale_rewards='batch' would scale each group by the std of the round it was "
                "generated in, not of the batch it trains in: set scale_rewards='group' or 'none'"
            )


# what a QAEConfig adds to a GRPOConfig at its defaults, said when one is made from a GRPOConfig (as_qae_config)
_QAE_DEFAULTS_SAID = (
    f"baseline={methods.DEFAULT_BASELINE!r} (QAE, arXiv 2509.22611: the group's K-quantile instead of its mean, "
    f"quantile_k={methods.DEFAULT_K}), sparse_update=True (the rows with advantage 0 skip the forward and backward; "
    f"same gradient); every other QAE and SA-AH knob off (token_weighting={methods.DEFAULT_TOKEN_WEIGHTING!r}). "
    "baseline='mean' trains as GRPOTrainer"
)


def as_qae_config(args, model) -> QAEConfig:
    r"""The :class:`QAEConfig` QAETrainer trains with, given ``GRPOTrainer``'s ``args``: a QAEConfig as it is; a
    ``GRPOConfig``, or None (named ``{model_name}-QAE``), with QAE's fields at their defaults and a ``UserWarning``.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as said:
    ...     warnings.simplefilter("always")
    ...     cfg = as_qae_config(GRPOConfig(output_dir="runs/doc", use_cpu=True, report_to=[], top_k=5), "Qwen/Qwen2.5-0.5B")
    >>> type(cfg).__name__, cfg.top_k, cfg.baseline, cfg.quantile_k, sum("got a GRPOConfig" in str(w.message) for w in said)
    ('QAEConfig', 5, 'quantile', 0.4, 1)
    """
    if isinstance(args, QAEConfig):
        return args
    if args is not None and not isinstance(args, GRPOConfig):
        raise ValueError(f"args must be a trl.GRPOConfig or a QAEConfig (or None), got {type(args).__name__}")
    if args is None:
        name = model if isinstance(model, str) else model.config._name_or_path
        made, source = QAEConfig(f"{name.split('/')[-1]}-QAE"), "no args"
    else:
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
        if values["steps_per_generation"] is not None:  # TRL's __post_init__ derived the other of the two
            values["generation_batch_size"] = None
        made, source = QAEConfig(**values), f"a {type(args).__name__}"
    warnings.warn(
        f"QAETrainer got {source}: it trains with a QAEConfig holding every GRPOConfig setting"
        f"{'' if args is not None else ' at its default'} (output_dir={made.output_dir!r}), and QAE's at theirs: "
        f"{_QAE_DEFAULTS_SAID}",
        UserWarning,
        stacklevel=3,
    )
    return made
