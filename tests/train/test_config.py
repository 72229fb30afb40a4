"""Tests for qae_lab.train.config: QAEConfig's QAE / SA-AH knobs and the range checks of TRL's settings,
each refusal naming the field and its range."""

from __future__ import annotations

import math
import re

import pytest

from qae_lab.train import config, trainer
from qae_lab.train.config import QAEConfig


def test_the_config_has_one_home():
    assert config.__all__[0] == "QAEConfig" and "QAEConfig" not in trainer.__all__


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"baseline": "median"}, "baseline"),
        ({"baseline": None}, "baseline"),
        ({"quantile_k": 0.0}, "quantile_k"),
        ({"quantile_k": 1.0}, "quantile_k"),
        ({"quantile_k": float("nan")}, "quantile_k"),
        ({"quantile_k": True}, "quantile_k"),
        ({"quantile_method": "nearest"}, "quantile_method"),
        ({"token_weighting": "sa-ah"}, "token_weighting"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": float("-inf")}, "alpha"),
        ({"advantage_eps": -1e-6}, "advantage_eps"),
        ({"advantage_eps": float("nan")}, "advantage_eps"),
        ({"success_threshold": float("nan")}, "success_threshold"),
        ({"entropy_top_k": 0}, "entropy_top_k"),
        ({"entropy_top_k": 2.5}, "entropy_top_k"),
        ({"token_weighting": "sa_ah", "loss_type": "dr_grpo"}, "token_weighting"),
        ({"token_weighting": "ah", "loss_type": "cispo"}, "loss_type"),
        ({"advantage_mask": "positive"}, r"advantage_mask must be one of \('none', 'pos', 'neg'\)"),
        ({"cov_penalty": "clipcov"}, r"cov_penalty must be one of \('none', 'clip_cov', 'kl_cov'\)"),
        ({"cov_penalty": "kl_cov", "loss_type": "dr_grpo"}, r"cov_penalty='kl_cov' needs loss_type in"),
        ({"clip_cov_ratio": 0.0}, r"clip_cov_ratio must lie in \(0, 1\]"),
        ({"kl_cov_ratio": 1.5}, r"kl_cov_ratio must lie in \(0, 1\]"),
        ({"kl_cov_ratio": float("nan")}, "kl_cov_ratio must be (a )?finite"),
        ({"clip_cov_lb": 5.0, "clip_cov_ub": 1.0}, "clip_cov_lb must be < clip_cov_ub"),
        ({"kl_cov_coef": -1.0}, "kl_cov_coef must be >= 0"),
        ({"reflection_words": []}, "words"),
        ({"reflection_words": ["wait", "  "]}, "words"),
        # TRL's loss types and options are TRL's loss (QAE's advantages in): what needs qae_lab's loss is refused
        ({"loss_type": "ppo"}, r"loss_type must be one of \('grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'sapo', "),
        ({"loss_type": "sapo", "cov_penalty": "clip_cov"}, r"cov_penalty='clip_cov' needs"),
        (
            {"off_policy_mask_threshold": 0.5, "token_weighting": "sa_ah"},
            r"token_weighting='sa_ah' needs qae_lab's loss",
        ),
        ({"use_adaptive_entropy": True, "entropy_coef": 0.01, "cov_penalty": "kl_cov"}, "cov_penalty='kl_cov' needs"),
        # accepted by TRL, but it leaves no group baseline for QAE to replace: refused, naming why (it was ignored)
        (
            {"multi_objective_aggregation": "normalize_then_sum"},
            r"multi_objective_aggregation='normalize_then_sum' is not supported by QAETrainer: .*no group baseline",
        ),
        # TRL checks these only once the model is loaded (vllm_mode) or inside a step (the importance-sampling mode)
        ({"vllm_mode": "remote"}, r"vllm_mode must be one of \('colocate', 'server'\), got 'remote'"),
        ({"vllm_importance_sampling_mode": "token"}, "vllm_importance_sampling_mode must be one of"),
    ],
)
def test_config_rejects_bad_values(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=name):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kwargs)


def test_config_defaults_and_accepted_values(tmp_path):
    cfg = QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert (
        cfg.baseline,
        cfg.quantile_k,
        cfg.quantile_method,
        cfg.token_weighting,
        cfg.alpha,
        cfg.advantage_eps,
        cfg.sparse_update,
    ) == ("quantile", 0.4, "paper", "none", 0.5, 1e-4, True)
    for loss_type in ("bnpo", "grpo", "dapo"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], token_weighting="sa_ah", loss_type=loss_type)
    QAEConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        loss_type="dr_grpo",
        advantage_eps=0.0,
        alpha=-0.25,
        quantile_method="linear",
        baseline="mean",
    )


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("max_steps", 0, "-1 (train num_train_epochs epochs) or in [1, 100000]"),
        ("max_steps", 100_001, "-1 (train num_train_epochs epochs) or in [1, 100000]"),
        ("max_steps", -3, "-1 (train"),
        ("learning_rate", -1.0, "a number in [0, inf)"),
        ("learning_rate", math.nan, "a number in [0, inf)"),
        ("beta", -0.5, "a number in [0, inf)"),
        ("epsilon_high", -1.0, "a number in [0, inf) or None"),
        ("max_completion_length", 0, "a number in [1, inf)"),
        ("gradient_accumulation_steps", 0, "a number in [1, 1024]"),
        ("pad_to_multiple_of", 0, "None, 'auto' or a whole number >= 1"),
        ("seed", -1, "a number in [0, 4294967295]"),
        ("save_total_limit", 0, "a number in [1, 100000] or None"),
        ("max_completion_length", 2.5, "a whole number"),
        ("vllm_gpu_memory_utilization", 0.0, "a number in (0, 1]"),
        ("vllm_gpu_memory_utilization", 1.2, "a number in"),
        ("vllm_tensor_parallel_size", 0, "a number in [1, inf)"),
        ("vllm_tensor_parallel_size", 1.5, "a whole number"),
        ("adam_beta1", 1.5, "a number in [0, 1)"),
        ("adam_beta2", -0.1, "a number in [0, 1)"),
        ("adam_epsilon", -1.0, "a number in [0, inf)"),
        ("logging_steps", -2, "a number in (0, inf)"),
        ("top_entropy_quantile", 1.5, "a number in [0, 1]"),
        ("ref_model_mixup_alpha", 2.0, "a number in [0, 1]"),
        ("delta", 0.5, "a number in (1, inf) or None"),
        ("per_device_eval_batch_size", 0, "a number in [1, inf)"),
        ("generation_batch_size", 0, "a number in [1, inf) or None"),
        ("vllm_server_port", -5, "a number in [1, 65535]"),
        ("dataloader_num_workers", -1, "a number in [0, 1024]"),
        ("num_completions_to_print", -1, "a number in [0, inf) or None"),
    ],
)
def test_training_settings_are_range_checked_with_their_names(tmp_path, field, value, allowed):
    # the fields here: ones GRPOConfig.__post_init__ takes out of range (test_trls_own_checks_are_not_repeated)
    with pytest.raises(ValueError, match=rf"{field} must be {re.escape(allowed)}"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **{field: value})
    QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])  # the defaults pass


# ---------------------------------------------------------------- what QAEConfig refuses itself: the notebooks
# and scripts build it directly, so these refusals are tested here, not only through the command line


def build(tmp_path, **kwargs):
    return QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"trust_remote_code": True}, "trust_remote_code=true would run Python code shipped in a model folder"),
        ({"model_init_kwargs": {"trust_remote_code": True}}, "model_init_kwargs.trust_remote_code=true would run"),
        # a string: from_pretrained reads any value but False as true
        ({"model_init_kwargs": {"trust_remote_code": "false"}}, "model_init_kwargs.trust_remote_code='false' would"),
        ({"model_init_kwargs": {"use_kernels": True}}, r"model_init_kwargs.use_kernels loads kernels from the Hub"),
        ({"model_init_kwargs": {"kernel_config": {}}}, r"model_init_kwargs.kernel_config maps layers to kernels from"),
        ({"model_init_kwargs": {"weights_only": False}}, r"model_init_kwargs.weights_only=False would unpickle"),
        (
            {"model_init_kwargs": {"experts_implementation": "deepgemm"}},
            r"model_init_kwargs.experts_implementation must be one of transformers' own",
        ),
        ({"model_init_kwargs": {"from_tf": True}}, r"model_init_kwargs may hold only adapter_kwargs, .*; got from_tf"),
        (
            {"model_init_kwargs": {"attn_implementation": "kernels-community/flash-attn"}},
            r"model_init_kwargs.attn_implementation must be one of transformers' own .* got 'kernels-community/flash-attn'",
        ),
        (
            {"generation_kwargs": {"custom_generate": "someone/decoding"}},
            r"generation_kwargs may hold only .*; got custom_generate",
        ),
        (
            {"generation_kwargs": {"trust_remote_code": True, "top_k": 5}},
            r"generation_kwargs may hold only .*; got trust_remote_code",
        ),
    ],
)
def test_settings_that_would_run_code_from_elsewhere_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(tmp_path, **kwargs)


def test_what_runs_no_code_is_still_taken(tmp_path):
    cfg = build(
        tmp_path,
        model_init_kwargs={"dtype": "bfloat16", "attn_implementation": "sdpa", "trust_remote_code": False},
        generation_kwargs={"top_k": 5, "stop": ["</answer>"]},
    )
    assert cfg.model_init_kwargs["attn_implementation"] == "sdpa" and cfg.generation_kwargs["top_k"] == 5
    build(tmp_path, model_init_kwargs={"attn_implementation": "paged|sdpa"})
    assert set(config.GENERATION_KEYS) >= {"temperature", "top_p", "max_new_tokens", "repetition_penalty"}
    assert not {"custom_generate", "trust_remote_code"} & set(config.GENERATION_KEYS)


def test_a_credential_is_never_taken_as_a_setting_nor_repeated(tmp_path):
    secret = "hf_plantedSecretValue123"
    with pytest.raises(ValueError, match=r"hub_token carries a credential, .*training_args.bin.*hf auth login") as err:
        build(tmp_path, hub_token=secret)
    assert secret not in str(err.value)
    # the one rule that marks a credential, over the installed config's fields: TrainingArguments' own (it hides every
    # field ending in _token from to_dict) and the key / secret / password names
    from qae_lab._checks import credential_name

    assert {f for f in QAEConfig.__dataclass_fields__ if credential_name(f)} == {"hub_token"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reward_weights": [float("nan")]}, r"reward_weights\[0\] must be a finite number"),
        ({"reward_weights": [1.0, float("inf")]}, r"reward_weights\[1\] must be a finite number"),
        ({"reward_weights": [0.0]}, r"reward_weights must hold a weight per reward function, not all 0"),
        ({"reward_weights": []}, r"reward_weights must hold a weight per reward function"),
        ({"lr_scheduler_kwargs": {"min_lr": float("nan")}}, r"lr_scheduler_kwargs.min_lr must be a finite number"),
        ({"adam_beta1": float("nan")}, r"adam_beta1 must be a finite number"),
        ({"max_grad_norm": float("inf")}, r"max_grad_norm must be a finite number"),
    ],
)
def test_every_number_a_setting_holds_is_finite_lists_and_mappings_included(tmp_path, kwargs, message):
    # found: reward_weights=[NaN] made every reward 0 and the run exited 0 having learned nothing
    with pytest.raises(ValueError, match=message):
        build(tmp_path, **kwargs)
    build(tmp_path, reward_weights=[0.4])  # a weight below 1 is fine; so is a negative one beside a positive
    build(tmp_path, reward_weights=[1.0, -0.5])


@pytest.mark.parametrize(
    "logging_dir, refused",
    [("run/logs", True), ("run/runs/x", False), ("elsewhere/tb", False), (None, False)],
)
def test_tensorboard_writes_in_the_run_folder_only_under_its_own_runs_folder(tmp_path, logging_dir, refused):
    # transformers 5.0's logging_dir (5.25 has none: TENSORBOARD_LOGGING_DIR): a folder of its own beside the run's
    # files would survive --overwrite and mix two runs in one TensorBoard chart
    import types

    cfg = types.SimpleNamespace(
        output_dir=str(tmp_path / "run"), logging_dir=None if logging_dir is None else str(tmp_path / logging_dir)
    )
    if refused:
        with pytest.raises(ValueError, match=r"logging_dir .* lies in the run folder outside its runs/ folder"):
            config._check_tracker_folder(cfg)
    else:
        config._check_tracker_folder(cfg)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # transformers' generate builds these logits warpers under TRL's do_sample=True: its words, named, now
        ({"temperature": 0.0}, r"temperature=0.0: transformers' generate would refuse it: `temperature` \(=0.0\) has"),
        ({"top_k": -1}, r"top_k=-1: transformers' generate would refuse it: `top_k` has to be a strictly positive"),
        ({"top_p": -0.5}, r"top_p=-0.5: transformers' generate would refuse it: `top_p` has to be a float"),
        ({"generation_kwargs": {"min_p": 2.0}}, r"generation_kwargs.min_p=2.0: transformers' generate would refuse"),
        # vLLM would decode greedily; TRL divides the logits by it for the loss's log-probs
        ({"temperature": 0.0, "use_vllm": True}, r"temperature must be > 0, got 0.0: TRL divides the logits by it"),
    ],
)
def test_sampling_values_the_generator_refuses_are_refused_in_its_words(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(tmp_path, **kwargs)


def test_sampling_values_trl_takes_are_taken(tmp_path):
    # vLLM's "no top-k" (-1), and its SamplingParams keys in generation_kwargs, as TRL hands them over
    vllm_keys = {"seed": 0, "skip_special_tokens": True, "include_stop_str_in_output": False, "min_tokens": 2}
    vllm_keys |= {"presence_penalty": 0.1, "frequency_penalty": 0.1, "stop": ["</answer>"], "max_tokens": 16}
    cfg = build(tmp_path, use_vllm=True, top_k=-1, generation_kwargs=vllm_keys)
    assert cfg.top_k == -1 and cfg.generation_kwargs == vllm_keys
    build(tmp_path, temperature=0.3, top_k=0, top_p=0.9, min_p=0.05, repetition_penalty=1.1)
    build(tmp_path, generation_kwargs={"seed": 0, "skip_special_tokens": True, "include_stop_str_in_output": False})
    assert set(config.VLLM_SAMPLING_KEYS) <= set(config.GENERATION_KEYS)


def test_trls_own_checks_are_not_repeated(tmp_path):
    # warmup_steps: transformers' TrainingArguments refuses it, in its words (5.25: "Got warmup_steps = -1, Expected
    # value warmup_steps >= 0"; 5.0: "warmup_steps must be an integer or a float"); ours would only repeat it
    with pytest.raises(ValueError, match=r"Got warmup_steps = -1|warmup_steps must be an integer"):
        build(tmp_path, warmup_steps=-1)
    assert not {"warmup_steps", "temperature", "top_k", "top_p", "min_p"} & set(config._SETTING_RANGES)
