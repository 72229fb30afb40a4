"""Every GRPOConfig option QAETrainer accepts works as in TRL: those read by the TRL code it replaces (the loss, the
advantages) are listed in qae_lab.train.config.REPLACED_CODE_OPTIONS, each with how it is honoured or why it is
refused and the tests that show it; the list is checked against TRL's source, so an option TRL adds to that code
fails here until it is classified. The rest are read by TRL code that QAETrainer calls unchanged (every override
calls TRL's own). Off-policy parity: with each loss option at a value other than its default, on a policy moved
away from the one that sampled (so that ratios, clipping and the KL term act), QAETrainer's gradient with the mean
baseline is GRPOTrainer's, and differs from the gradient at the default."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch
import transformers
from testkit.step_setup import (
    REWARDS,
    assert_same_grads,
    fixed_reward,
    make_trainer,
    rows,
    tiny_config,
    tiny_model,
    trainer_grads,
)
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from qae_lab.train.config import REPLACED_CODE_OPTIONS, QAEConfig
from qae_lab.train.trainer import QAETrainer

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
# TRL's attribute -> the option it holds, where the names differ (the Trainer keeps the accumulation it is in as
# current_gradient_accumulation_steps, from args.gradient_accumulation_steps)
ATTRIBUTE_OF = {"epsilon_low": "epsilon", "current_gradient_accumulation_steps": "gradient_accumulation_steps"}


def _options_read(source: str) -> set[str]:
    names = set(re.findall(r"self\.(?:args\.)?(\w+)", source))
    return {ATTRIBUTE_OF.get(n, n) for n in names} & FIELDS


def test_the_options_of_the_replaced_code_are_exactly_the_classified_ones():
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    generate = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    advantages = generate[
        generate.index("rewards_per_func = self._calculate_rewards") : generate.index("# Slice to keep only the local")
    ]
    assert _options_read(loss) | _options_read(advantages) == set(REPLACED_CODE_OPTIONS)


@pytest.mark.parametrize("option", sorted(REPLACED_CODE_OPTIONS))
def test_each_classified_option_names_tests_that_exist(option):
    how = REPLACED_CODE_OPTIONS[option]
    named = re.findall(r"(tests/[\w/]+\.py)::(\w+)", how)
    assert named, f"{option}: names no test"
    for path, test in named:
        assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.M), f"{option}: {path}::{test}"


def test_every_override_of_a_trl_method_calls_trls_own():
    # so the options TRL reads there (generation, rewards, logging) stay TRL's; _compute_loss calls it for TRL's loss
    # types and replaces it for qae_lab's (the options of REPLACED_CODE_OPTIONS)
    for name in ("_generate_single_turn", "_calculate_rewards", "_generate_and_score_completions", "_compute_loss"):
        source = "".join(
            inspect.getsource(getattr(QAETrainer, m)) for m in ("_generate_round", name) if hasattr(QAETrainer, m)
        )
        assert f"super().{name}(" in source, name


# ---------------------------------------------------------------- off-policy parity, option by option

# each option at a value other than its default (with what it needs beside it)
OFF_DEFAULT = {
    "epsilon": {"epsilon": 0.05},
    "epsilon_high": {"epsilon_high": 0.6},
    "delta": {"delta": 1.05},
    "beta": {"beta": 0.3},
    "use_bias_correction_kl": {"beta": 0.3, "use_bias_correction_kl": False},  # TRL's default: True
    "importance_sampling_level": {"importance_sampling_level": "sequence"},
    "top_entropy_quantile": {"top_entropy_quantile": 0.5},
    "entropy_coef": {"entropy_coef": 0.05},
    "max_completion_length": {"loss_type": "dr_grpo", "max_completion_length": 40},
    "loss_type": {"loss_type": "grpo"},
}


def _moved_grads(tmp_path, tok, trainer_cls, config_cls, **settings):
    """One generation on the tiny policy, then the loss's gradient after the policy moved away from it."""
    extra = {"baseline": "mean", "advantage_eps": 1e-4, "sparse_update": False} if trainer_cls is QAETrainer else {}
    model = tiny_model(tok, seed=1)
    if settings.get("beta"):  # TRL loads its reference model from the policy's folder
        model.save_pretrained(tmp_path / "policy")
        model.config._name_or_path = str(tmp_path / "policy")
    trainer = make_trainer(
        tmp_path, tok, model, trainer_cls=trainer_cls, config_cls=config_cls, num_iterations=2, **extra, **settings
    )
    batch = trainer._generate_and_score_completions(rows(REWARDS))
    assert batch["old_per_token_logps"] is not None  # two passes per generation: TRL keeps the sampler's log-probs
    with torch.no_grad():  # the same move for every trainer: a second pass's policy
        gen = torch.Generator().manual_seed(3)
        for p in trainer.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)
    return trainer_grads(trainer, batch)


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("option", sorted(OFF_DEFAULT))
def test_each_loss_option_off_default_is_trls_and_changes_the_step(tmp_path, tok, option):
    settings = OFF_DEFAULT[option]
    ours = _moved_grads(tmp_path / "qae", tok, QAETrainer, QAEConfig, **settings)
    theirs = _moved_grads(tmp_path / "trl", tok, GRPOTrainer, GRPOConfig, **settings)
    assert_same_grads(ours, theirs)
    beside = {name: value for name, value in settings.items() if name != option}  # what the option needs with it
    default = _moved_grads(tmp_path / "default", tok, QAETrainer, QAEConfig, **beside)
    assert any(not torch.allclose(ours[n], default[n], rtol=1e-4, atol=1e-8) for n in ours), option


def _pair(tmp_path, tok, model_of, **settings):
    """QAETrainer (mean baseline) and GRPOTrainer on the same fixed completions, each with its own copy of the model."""
    qae = make_trainer(
        tmp_path / "qae", tok, model_of(), baseline="mean", advantage_eps=1e-4, sparse_update=False, **settings
    )
    trl = make_trainer(tmp_path / "trl", tok, model_of(), trainer_cls=GRPOTrainer, config_cls=GRPOConfig, **settings)
    return qae, trl


def test_reward_weights_weigh_the_rewards_as_trl(tmp_path, tok):
    def length_reward(completions, **kwargs):  # a second reward function: something else than the first
        return [float(len(str(c))) / 100 for c in completions]

    funcs = [fixed_reward, length_reward]
    qae, trl = _pair(tmp_path, tok, lambda: tiny_model(tok, seed=1), reward_funcs=funcs, reward_weights=[1.0, -0.5])
    qae.args.success_reward = "fixed_reward"
    ours, theirs = (t._generate_and_score_completions(rows(REWARDS)) for t in (qae, trl))
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-6, atol=1e-6)
    plain = make_trainer(tmp_path / "plain", tok, tiny_model(tok, seed=1), reward_funcs=funcs, baseline="mean")
    assert not torch.allclose(plain._generate_and_score_completions(rows(REWARDS))["advantages"], ours["advantages"])
    assert_same_grads(trainer_grads(qae, ours), trainer_grads(trl, theirs))


def test_several_micro_batches_per_generation_step_as_trl(tmp_path, tok):
    # a generation batch of 16 in two micro-batches of 8: dapo's normaliser counts the generation batch's tokens
    settings = {"loss_type": "dapo", "per_device_train_batch_size": 8, "steps_per_generation": 2}
    qae, trl = _pair(tmp_path, tok, lambda: tiny_model(tok, seed=1), gradient_accumulation_steps=2, **settings)
    for t in (qae, trl):
        t.current_gradient_accumulation_steps = 2
    ours, theirs = (split_tensor_dict(t._generate_and_score_completions(rows(REWARDS)), 2) for t in (qae, trl))
    for a, b in zip(ours, theirs):
        assert_same_grads(trainer_grads(qae, a), trainer_grads(trl, b))


def _moe(tok):
    cfg = tiny_config(
        tok,
        transformers.Qwen2MoeConfig,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
        router_aux_loss_coef=0.5,
    )
    torch.manual_seed(2)
    return transformers.Qwen2MoeForCausalLM(cfg).train()  # float32: the experts' grouped matmul takes no float64


def test_a_routers_balance_loss_is_trls(tmp_path, tok):
    qae, trl = _pair(tmp_path, tok, lambda: _moe(tok), router_aux_loss_coef=0.5)
    assert qae.aux_loss_enabled and trl.aux_loss_enabled
    ours, theirs = (t._generate_and_score_completions(rows(REWARDS)) for t in (qae, trl))
    grads = trainer_grads(qae, ours)
    # float32, the loss summed in another order: agreement to float32 rounding of each gradient's scale
    scale = max(float(g.abs().max()) for g in grads.values())
    assert_same_grads(grads, trainer_grads(trl, theirs), rtol=1e-4, atol=1e-5 * scale)
    # coefficient 0 turns TRL's balance loss off (output_router_logits alone does not)
    without = make_trainer(
        tmp_path / "off", tok, _moe(tok), baseline="mean", sparse_update=False, router_aux_loss_coef=0.0
    )
    assert not without.aux_loss_enabled
    plain = trainer_grads(without, without._generate_and_score_completions(rows(REWARDS)))
    assert any(not torch.allclose(grads[n], plain[n]) for n in grads if "gate" in n)  # the balance loss moved them
