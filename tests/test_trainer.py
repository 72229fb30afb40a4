"""Tests for qae_lab.trainer: QAETrainer's gradients against a plain-torch reference written from
the papers' equations, parity with TRL's GRPOTrainer, sparse updates, live knobs, logging, a LoRA
step, the config it needs and a two-process run (the config's own checks: test_config.py).

Generation is replaced by fixed completions (TRL's ``_generate_single_turn`` seam) and the reward
function returns fixed rewards from a dataset column, so ``_generate_and_score_completions`` runs
end to end on known tokens and rewards. Models are tiny random Qwen2s in float64 (or the project's
embedded model for the LoRA step); nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from step_setup import (G, REWARDS, any_nonzero, assert_same_grads, make_trainer, qae_advantages, reference_grads,
                        rows, tiny_model, trainer_grads)
from trl import GRPOConfig, GRPOTrainer

from qae_lab.advantages import group_advantages
from qae_lab.data import synthetic_task, to_grpo_dataset
from qae_lab.models import load_policy
from qae_lab.rewards import correctness_reward
from qae_lab.config import QAEConfig
from qae_lab.knobs import Knobs
from qae_lab.trainer import QAETrainer

@pytest.fixture(scope="module")
def tok():
    """The embedded model's tokenizer (left padding, pad token set)."""
    return load_policy("embedded", device="cpu")[1]


# ---------------------------------------------------------------- 1. gradients vs a plain-torch reference

@pytest.mark.parametrize("weighting", ["none", "sa_ah", "ah"])
@pytest.mark.parametrize("baseline", ["mean", "quantile"])
@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_one_step_gradients_match_reference(tmp_path, tok, loss_type, baseline, weighting):
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, baseline=baseline, token_weighting=weighting,
                           alpha=0.3, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    want_adv = qae_advantages(REWARDS, baseline=baseline)
    assert inputs["advantages"].tolist() == pytest.approx(want_adv, abs=1e-6)
    # the prompts are left-padded, the completions right-padded and ragged
    assert bool((inputs["prompt_mask"][:, 0] == 0).any()) and bool((inputs["prompt_mask"][:, -1] == 1).all())
    assert len(set(inputs["completion_mask"].sum(1).tolist())) > 1
    got = trainer_grads(trainer, inputs)
    want = reference_grads(trainer.model, inputs, want_adv, loss_type=loss_type, weighting=weighting, alpha=0.3)
    assert any_nonzero(want)
    assert_same_grads(got, want)


def test_selective_horizon_weights_weigh_down_negative_rows(tmp_path, tok):
    # the reference is sensitive to the weights: SA-AH, AH and unweighted gradients differ on this batch
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah", alpha=0.3, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = qae_advantages(REWARDS)
    assert sum(a < 0 for a in adv) == 1  # one easy-regime failure: the only row SA-AH weighs down
    grads = {w: reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting=w, alpha=0.3)
             for w in ("none", "sa_ah", "ah")}
    for a, b in (("none", "sa_ah"), ("sa_ah", "ah")):
        diff = max((grads[a][n] - grads[b][n]).abs().max().item() for n in grads[a])
        assert diff > 1e-3, (a, b)
    trainer_grads(trainer, inputs)
    w_neg = trainer._metrics["train"]["saah/w_mean_neg"]
    assert len(w_neg) == 1 and 0.0 < w_neg[0] < 0.9  # a random model is uncertain: small weights
    assert trainer._metrics["train"]["saah/alpha"] == [0.3]


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo"])
@pytest.mark.parametrize("weighting", ["sa_ah", "ah"])
def test_top_k_entropy_gradients_match_reference(tmp_path, tok, loss_type, weighting):
    # k = 5 of V = 640 on a random model: the top-k estimate is far from the exact entropy
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, token_weighting=weighting, alpha=0.7,
                           entropy_top_k=5, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = qae_advantages(REWARDS)
    got = trainer_grads(trainer, inputs)
    want = reference_grads(trainer.model, inputs, adv, loss_type=loss_type, weighting=weighting, alpha=0.7, top_k=5)
    exact = reference_grads(trainer.model, inputs, adv, loss_type=loss_type, weighting=weighting, alpha=0.7)
    assert max((want[n] - exact[n]).abs().max().item() for n in want) > 1e-4  # the test can tell them apart
    assert_same_grads(got, want)
    # the exact-entropy metric TRL logs is untouched
    assert trainer._metrics["train"]["entropy"][-1] > 0.9 * math.log(len(tok))


def test_top_k_at_least_vocab_is_exact_and_sparse_still_applies(tmp_path, tok):
    grads = {}
    for top_k, sparse in ((None, False), (len(tok), False), (len(tok), True)):
        trainer = make_trainer(tmp_path, tok, token_weighting="sa_ah", alpha=0.3, entropy_top_k=top_k,
                               sparse_update=sparse)
        inputs = trainer._generate_and_score_completions(rows(REWARDS))
        grads[top_k, sparse] = trainer_grads(trainer, inputs)
    assert_same_grads(grads[len(tok), False], grads[None, False])
    assert_same_grads(grads[len(tok), True], grads[None, False])


def test_top_k_refuses_models_that_rescale_logits(tmp_path, tok):
    model = tiny_model(tok)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="entropy_top_k"):
        make_trainer(tmp_path, tok, model, token_weighting="sa_ah", entropy_top_k=500)


# ---------------------------------------------------------------- 2. parity with TRL's GRPOTrainer

@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_mean_baseline_reproduces_trl(tmp_path, tok, loss_type, scale):
    rewards = [1.0, 0, 0, 0,   0.25, 0.5, 1, 0,   0, 0, 0, 0,   0.9, 0.1, 0.6, 0.6]  # not only binary
    common = {"loss_type": loss_type, "scale_rewards": scale, "advantage_eps": 1e-4}
    qae = make_trainer(tmp_path / "qae", tok, tiny_model(tok, seed=1), baseline="mean", token_weighting="none",
                       sparse_update=False, **common)
    common.pop("advantage_eps")  # TRL hard-codes 1e-4
    trl_trainer = make_trainer(tmp_path / "trl", tok, tiny_model(tok, seed=1), trainer_cls=GRPOTrainer,
                               config_cls=GRPOConfig, **common)
    assert type(trl_trainer) is GRPOTrainer
    ours = qae._generate_and_score_completions(rows(rewards))
    theirs = trl_trainer._generate_and_score_completions(rows(rewards))
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(ours[key], theirs[key]), key
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-6, atol=1e-6)
    assert_same_grads(trainer_grads(qae, ours), trainer_grads(trl_trainer, theirs))


# ---------------------------------------------------------------- 3. sparse updates

def spy_rows(trainer) -> list[int]:
    """Record how many rows each forward of the loss's log-prob function sees."""
    seen: list[int] = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(model, input_ids, *args, **kwargs):
        seen.append(input_ids.shape[0])
        return original(model, input_ids, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = spy
    return seen


def sparse_and_dense_grads(trainer, inputs):
    """Gradients with sparse_update on, then off, and the rows each forward saw."""
    seen = spy_rows(trainer)
    trainer.args.sparse_update = True
    sparse = trainer_grads(trainer, inputs)
    n_sparse = list(seen)
    seen.clear()
    trainer.args.sparse_update = False
    dense = trainer_grads(trainer, inputs)
    return sparse, dense, n_sparse, list(seen)


@pytest.mark.parametrize("weighting", ["none", "sa_ah"])
@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_sparse_update_same_gradient_fewer_rows(tmp_path, tok, loss_type, weighting):
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, token_weighting=weighting, alpha=0.3)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = inputs["advantages"]
    assert (adv == 0).float().mean().item() == 0.75  # QAE's sparsity: 12 of 16 responses get exactly 0
    sparse, dense, n_sparse, n_dense = sparse_and_dense_grads(trainer, inputs)
    assert n_sparse == [4] and n_dense == [16]  # only the non-zero-advantage rows went through the model
    assert any_nonzero(dense)
    assert_same_grads(sparse, dense)
    # ... and both equal the reference
    want = reference_grads(trainer.model, inputs, adv.tolist(), loss_type=loss_type, weighting=weighting, alpha=0.3)
    assert_same_grads(dense, want)
    # the entropy of the updated rows only is logged under its own name
    metrics = trainer._metrics["train"]
    assert len(metrics["entropy/updated_rows"]) == 1 and len(metrics["entropy"]) == 1


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_sparse_update_drops_trailing_padding_columns(tmp_path, tok, loss_type):
    # the non-zero-advantage rows (0, 6, 13, 14) have 3 tokens, the others 9: kept rows need 3 columns
    short = {0, 6, 13, 14}
    fixed = [[20 + i] * (3 if i in short else 9) for i in range(len(REWARDS))]
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, token_weighting="sa_ah", completions=fixed)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    assert set((inputs["advantages"] != 0).nonzero().flatten().tolist()) == short
    widths: list[int] = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        widths.append(logits_to_keep)
        return original(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = spy
    sparse = trainer_grads(trainer, inputs)
    trainer.args.sparse_update = False
    dense = trainer_grads(trainer, inputs)
    assert widths == [3, 9]
    assert_same_grads(sparse, dense)


def test_row_selection_trims_known_per_token_keys_only(tmp_path, tok):
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    inputs = {"prompt_ids": torch.ones(3, 4, dtype=torch.long), "prompt_mask": torch.ones(3, 4),
              "completion_ids": torch.arange(12).view(3, 4), "completion_mask": mask,
              "old_per_token_logps": torch.randn(3, 4), "advantages": torch.tensor([1.0, 0.0, -1.0]),
              "num_items_in_batch": torch.tensor(7)}
    keep = inputs["advantages"] != 0
    sub = QAETrainer._rows(inputs, keep)
    assert sub["completion_ids"].tolist() == [[0, 1], [8, 9]] and sub["completion_mask"].tolist() == [[1, 1], [1, 0]]
    assert sub["old_per_token_logps"].shape == (2, 2) and sub["prompt_ids"].shape == (2, 4)  # prompts: never
    assert sub["num_items_in_batch"] is inputs["num_items_in_batch"]
    # an (N, T) input the trimmer does not know about: rows only, no column is dropped anywhere
    sub = QAETrainer._rows({**inputs, "token_type_ids": torch.zeros(3, 4)}, keep)
    assert sub["completion_ids"].shape == (2, 4) and sub["token_type_ids"].shape == (2, 4)


def test_sparse_update_all_zero_batch_skips_the_forward(tmp_path, tok):
    flat = [1.0] * 8 + [0.0] * 8  # every group all-equal: nothing to learn
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah")
    inputs = trainer._generate_and_score_completions(rows(flat))
    assert inputs["advantages"].abs().max().item() == 0.0
    sparse, dense, n_sparse, n_dense = sparse_and_dense_grads(trainer, inputs)
    assert n_sparse == [] and n_dense == [16]
    assert not any_nonzero(dense)
    assert_same_grads(sparse, dense)
    assert trainer._metrics["train"]["saah/alpha"] == [0.5, 0.5]  # the alpha in force is logged either way


@pytest.mark.parametrize("case", ["ah", "entropy_bonus", "kl"])
def test_sparse_falls_back_to_dense(tmp_path, tok, case):
    # AH weights zero-advantage rows too (its normaliser needs them); an entropy bonus and a KL
    # term give those rows a gradient of their own: every row must go through the model
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="ah" if case == "ah" else "sa_ah",
                           entropy_coef=0.01 if case == "entropy_bonus" else 0.0)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    if case == "kl":  # beta != 0 needs reference log-probs: any fixed ones will do
        trainer.beta = 0.04
        with torch.no_grad():
            logps = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), inputs["completion_ids"].shape[1])[0]
        g = torch.Generator().manual_seed(1)
        inputs["ref_per_token_logps"] = logps + 0.1 * torch.randn(logps.shape, generator=g, dtype=logps.dtype)
    assert trainer.args.sparse_update and not trainer._sparse_active(trainer.loss_settings())
    sparse, dense, n_sparse, n_dense = sparse_and_dense_grads(trainer, inputs)
    assert n_sparse == n_dense == [16]
    assert_same_grads(sparse, dense)
    if case == "kl":  # the KL of the zero-advantage rows is part of the gradient: skipping them would be wrong
        trainer.beta = 0.0
        without_kl = trainer_grads(trainer, {k: v for k, v in inputs.items() if k != "ref_per_token_logps"})
        assert max((dense[n] - without_kl[n]).abs().max().item() for n in dense) > 1e-4


def test_sparse_active_switches(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah")
    settings = trainer.loss_settings()
    assert trainer._sparse_active(settings)
    assert not trainer._sparse_active(dataclasses.replace(settings, token_weighting="ah"))
    trainer.set_knobs(token_weighting="ah")  # the live knob decides, not the config
    assert not trainer._sparse_active(trainer.loss_settings())
    trainer.model.eval()  # evaluation: no skipping
    assert not trainer._sparse_active(settings)
    trainer.model.train()
    trainer.args.sparse_update = False
    assert not trainer._sparse_active(settings)


def test_sparse_update_same_gradient_with_top_entropy_quantile(tmp_path, tok):
    # TRL's 80/20 forking-token mask thresholds the micro-batch's entropies at a quantile; leaving
    # zero-advantage rows out must not move that threshold (or sparse skipping must turn itself off)
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", top_entropy_quantile=0.5)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    sparse, dense, _, _ = sparse_and_dense_grads(trainer, inputs)
    assert_same_grads(sparse, dense)


@pytest.mark.parametrize("weighting", ["none", "sa_ah"])
@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_sparse_update_same_gradient_with_tool_mask(tmp_path, tok, loss_type, weighting):
    # multi-turn rollouts carry a tool_mask (0 on tool-output tokens); TRL's loss mask is
    # completion_mask * tool_mask, so the sparse normaliser must count the same tokens
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, token_weighting=weighting, alpha=0.3)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    tool_mask = torch.ones_like(inputs["completion_mask"])
    tool_mask[1, :2] = 0  # tool tokens in a skipped (zero-advantage) row ...
    tool_mask[0, 1] = 0  # ... and in an updated one
    inputs["tool_mask"] = tool_mask
    sparse, dense, _, _ = sparse_and_dense_grads(trainer, inputs)
    assert_same_grads(sparse, dense)


# ---------------------------------------------------------------- 4. live knobs

def test_set_knobs_k_changes_next_advantages_and_metric(tmp_path, tok):
    rewards = [0.0, 1, 1, 0] * 4  # 2 of 4 correct: hard for K = 0.4 (b = 0), easy for K = 0.6 (b = 1)
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    first = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    trainer.set_knobs(quantile_k=0.6)
    assert trainer.knobs.quantile_k == 0.6
    second = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    assert first.tolist() == pytest.approx(qae_advantages(rewards, k=0.4), abs=1e-6)
    assert second.tolist() == pytest.approx(qae_advantages(rewards, k=0.6), abs=1e-6)
    assert bool((first >= 0).all()) and bool((second <= 0).all()) and not torch.equal(first, second)
    metrics = trainer._metrics["train"]
    assert metrics["qae/k"] == [0.4, 0.6]
    assert metrics["qae/hard_frac"] == [1.0, 0.0] and metrics["qae/easy_frac"] == [0.0, 1.0]
    assert metrics["qae/quantile_baseline"] == [1.0, 1.0]
    trainer.set_knobs(baseline="mean")
    third = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    assert third.tolist() == pytest.approx(qae_advantages(rewards, baseline="mean"), abs=1e-6)
    assert metrics["qae/quantile_baseline"][-1] == 0.0


def test_set_knobs_alpha_changes_weights_and_metric(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah", alpha=0.3, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = qae_advantages(REWARDS)
    before = trainer_grads(trainer, inputs)
    trainer.set_knobs(alpha=1.5)
    after = trainer_grads(trainer, inputs)
    metrics = trainer._metrics["train"]
    assert metrics["saah/alpha"] == [0.3, 1.5]
    assert metrics["saah/w_mean_neg"][1] < metrics["saah/w_mean_neg"][0]  # smaller weights
    assert_same_grads(after, reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting="sa_ah",
                                             alpha=1.5))
    assert max((before[n] - after[n]).abs().max().item() for n in before) > 1e-4
    # token_weighting is live too: AH from the next loss on
    trainer.set_knobs(token_weighting="ah")
    assert_same_grads(trainer_grads(trainer, inputs),
                      reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting="ah", alpha=1.5))


def test_set_knobs_validates(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    before = trainer.knobs
    for knobs, name in (({"quantile_k": 0.0}, "quantile_k"), ({"quantile_k": 1.0}, "quantile_k"),
                        ({"quantile_k": float("nan")}, "quantile_k"), ({"quantile_k": "0.4"}, "quantile_k"),
                        ({"alpha": float("nan")}, "alpha"), ({"alpha": float("inf")}, "alpha"),
                        ({"baseline": "median"}, "baseline"), ({"token_weighting": "sa-ah"}, "token_weighting"),
                        ({"k": 0.5}, "unknown knob"), ({"quantile_k": 0.5, "beta": 0.1}, "unknown knob"),
                        ({"quantile_k": 0.5, "alpha": float("nan")}, "alpha")):
        with pytest.raises(ValueError, match=name):
            trainer.set_knobs(**knobs)
    assert trainer.knobs is before  # a rejected call changes nothing, not even its valid part
    trainer.set_knobs(quantile_k=0.25, alpha=0.0)
    assert trainer.knobs == Knobs(quantile_k=0.25, alpha=0.0)
    trainer.set_knobs(Knobs(quantile_k=0.7, token_weighting="sa_ah"))  # a whole value, as the live controls hand it
    assert trainer.knobs.as_dict() == {"quantile_k": 0.7, "alpha": 0.5, "baseline": "quantile", "token_weighting": "sa_ah"}
    with pytest.raises(ValueError, match="knobs must be a qae_lab.knobs.Knobs"):
        trainer.set_knobs({"quantile_k": 0.5})
    dr = make_trainer(tmp_path / "dr", tok, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="loss_type"):
        dr.set_knobs(token_weighting="sa_ah")


# ---------------------------------------------------------------- 5. logged advantages

def test_completion_table_gets_a_qae_column_and_trl_keeps_its_own(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    out = trainer._generate_and_score_completions(rows(REWARDS))
    want = qae_advantages(REWARDS)
    trl_mean = qae_advantages(REWARDS, baseline="mean")
    ours = list(trainer._logs["extra"]["qae_advantage"])
    assert ours == pytest.approx(want, abs=1e-6) and ours == out["advantages"].tolist()
    assert list(trainer._logs["advantages"]) == pytest.approx(trl_mean, abs=1e-5)  # TRL's log, untouched
    assert ours != pytest.approx(trl_mean, abs=1e-3)
    assert len(trainer._logs["prompt"]) == len(ours) == len(REWARDS)  # one row per completion
    trainer.set_knobs(quantile_k=0.8)
    trainer._generate_and_score_completions(rows(REWARDS))
    assert list(trainer._logs["extra"]["qae_advantage"])[-len(REWARDS):] == pytest.approx(
        qae_advantages(REWARDS, k=0.8), abs=1e-6)


# ---------------------------------------------------------------- 6. a LoRA step through trainer.train()

def test_lora_train_step_moves_adapter_only(tmp_path):
    model, tok = load_policy("embedded", lora=True, device="cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = QAEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=16,
                     num_generations=4, max_completion_length=40, max_steps=1, learning_rate=1e-2, logging_steps=1,
                     save_strategy="no", seed=0)
    trainer = QAETrainer(model=model, reward_funcs=correctness_reward, args=args, processing_class=tok,
                         train_dataset=to_grpo_dataset(synthetic_task(4, seed=0)))
    trainer.train()
    assert any(a != 0 for a in trainer._logs["extra"]["qae_advantage"])  # the premise: something to learn from
    log = trainer.state.log_history[0]
    assert log["qae/k"] == 0.4 and math.isfinite(log["loss"]) and log["grad_norm"] > 0
    params = dict(trainer.model.named_parameters())
    assert params.keys() == before.keys()
    base = [n for n in params if "lora_" not in n]
    lora_b = [n for n in params if "lora_B" in n]
    assert base and lora_b
    assert all(torch.equal(params[n].detach(), before[n]) for n in base)  # every base weight bit-identical
    assert all(not torch.equal(params[n].detach(), before[n]) for n in lora_b)  # the adapter moved


# ---------------------------------------------------------------- 7. the config it needs

def test_trainer_needs_qae_config(tmp_path, tok):
    with pytest.raises(ValueError, match="QAEConfig"):
        make_trainer(tmp_path, tok, config_cls=GRPOConfig)


# ---------------------------------------------------------------- 7b. partners and behaviour metrics

def _logp_ratio(model, inputs):
    """(log pi_theta of the completion tokens, mask) by a plain forward, as reference_loss computes them."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    log_p = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits[:, -t - 1:-1], dim=-1)
    return log_p.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1), inputs["completion_mask"].double()


def _ref_cov(logp, adv, m):
    """Cui et al.'s centred product over the valid tokens, written out: (N, T), 0 off the mask."""
    lp, a = logp.detach(), adv[:, None].expand_as(logp).double()
    n = m.sum()
    mean_lp, mean_a = (lp * m).sum() / n, (a * m).sum() / n
    return torch.where(m > 0, (lp - mean_lp) * (a - mean_a), torch.zeros_like(lp))


@pytest.mark.parametrize("keep", ["pos", "neg"])
def test_sign_masks_train_on_one_side_only(tmp_path, tok, keep):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", baseline="mean", advantage_mask=keep, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    full = torch.tensor(qae_advantages(REWARDS, baseline="mean"))
    want = torch.where(full > 0 if keep == "pos" else full < 0, full, torch.zeros_like(full))
    assert inputs["advantages"].tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert_same_grads(trainer_grads(trainer, inputs),
                      reference_grads(trainer.model, inputs, want.tolist(), loss_type="bnpo"))


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo"])
def test_clip_cov_zeroes_drawn_band_tokens_only(tmp_path, tok, loss_type, monkeypatch):
    import qae_lab.loss as loss_module

    drawn = []
    real = loss_module.clip_cov_select
    monkeypatch.setattr(loss_module, "clip_cov_select", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, baseline="mean", cov_penalty="clip_cov",
                           clip_cov_ratio=0.2, clip_cov_lb=-0.05, clip_cov_ub=10.0, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = inputs["advantages"].clone()
    got = trainer_grads(trainer, inputs)
    (chosen,) = drawn
    logp, m = _logp_ratio(trainer.model, inputs)
    cov = _ref_cov(logp, adv, m)
    assert int(chosen.sum()) == int(0.2 * m.sum())  # the fraction of all valid tokens
    assert bool((cov[chosen] > -0.05).all()) and bool(m[chosen].all())  # drawn in the band, on real tokens
    # the reference: -A_t ratio_t per token with A_t = 0 on the drawn tokens, TRL's normaliser
    a = adv[:, None].expand_as(logp).masked_fill(chosen, 0.0)
    per_token = -a * torch.exp(logp - logp.detach()) * m
    loss = (per_token.sum(-1) / m.sum(-1)).mean() if loss_type == "grpo" else per_token.sum() / m.sum()
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()
    want = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    assert_same_grads(got, want)
    assert trainer._metrics["train"]["cov/selected_frac"] == [pytest.approx(float(chosen.sum() / m.sum()))]
    assert trainer._metrics["train"]["cov/token_cov"] == [pytest.approx(float(cov.sum() / m.sum()), rel=1e-5)]
    # each draw is seeded by (seed, step, micro-batch of the step): the step's second micro-batch draws anew,
    # and a run resumed at this step (TRL's micro-batch count restarted) draws the first one's tokens again
    trainer.current_gradient_accumulation_steps, trainer._step = 2, 1
    trainer_grads(trainer, inputs)
    trainer._step = 0
    trainer_grads(trainer, inputs)
    assert not torch.equal(drawn[0], drawn[1]) and torch.equal(drawn[0], drawn[2])


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_kl_cov_penalises_the_top_covariance_tokens_off_policy(tmp_path, tok, loss_type):
    trainer = make_trainer(tmp_path, tok, loss_type=loss_type, baseline="mean", cov_penalty="kl_cov",
                           kl_cov_ratio=0.1, kl_cov_coef=0.7, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = inputs["advantages"].clone()
    # on-policy (no old log-probs): |log ratio| = 0, so the penalty adds nothing, not even gradient
    on_policy = trainer_grads(trainer, inputs)
    assert_same_grads(on_policy, reference_grads(trainer.model, inputs, adv.tolist(), loss_type=loss_type))
    # off-policy: old log-probs moved by a fixed pattern, so ratios and |log ratio| are non-trivial
    logp, m = _logp_ratio(trainer.model, inputs)
    shift = 0.05 * torch.sin(torch.arange(logp.numel(), dtype=logp.dtype)).view_as(logp)
    inputs["old_per_token_logps"] = (logp.detach() + shift)
    got = trainer_grads(trainer, inputs)
    cov = _ref_cov(logp, adv, m)
    k = max(int(0.1 * m.sum()), 1)
    order = sorted(((float(cov[i, j]), i, j) for i in range(m.shape[0]) for j in range(m.shape[1]) if m[i, j]),
                   reverse=True)
    chosen = torch.zeros_like(m, dtype=torch.bool)
    for _, i, j in order[:k]:
        chosen[i, j] = True
    ratio = torch.exp(logp - inputs["old_per_token_logps"])
    a = adv[:, None]
    policy = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a)  # TRL's default epsilon 0.2
    per_token = (policy + 0.7 * (logp - inputs["old_per_token_logps"]).abs() * chosen) * m
    if loss_type == "grpo":
        loss = (per_token.sum(-1) / m.sum(-1)).mean()
    elif loss_type == "bnpo":
        loss = per_token.sum() / m.sum()
    else:  # dapo: the generation batch's token count, one process, one micro-batch
        loss = per_token.sum() / inputs["num_items_in_batch"]
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()
    want = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    assert_same_grads(got, want)
    assert trainer._metrics["train"]["cov/selected_frac"][-1] == pytest.approx(k / float(m.sum()))


def test_cov_penalties_turn_sparse_updates_off_and_need_a_weighting_loss_type(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", cov_penalty="kl_cov")
    assert not trainer._sparse_active(trainer.loss_settings())
    with pytest.raises(ValueError, match=r"cov_penalty='clip_cov' needs loss_type in \('bnpo', 'dapo', 'grpo'\)"):
        make_trainer(tmp_path, tok, loss_type="dr_grpo", cov_penalty="clip_cov")


def test_behaviour_and_counterfactual_metrics_every_step(tmp_path, tok):
    composite = [7.5, 7.5, 5.5, 5.5,   7.5, 0, 0, 0,   5.5, 5.5, 5.5, 5.5,   7.5, 6.0, 2.0, 0]
    texts = ["Wait, 2 + 3 = 5", "let me check: 12 * 2 = 24", "Hi", "9 + 4 = 13"] * 4
    completions = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", success_threshold=5.0, completions=completions)
    trainer.train_dataset = Dataset.from_list(rows(composite))
    trainer._generate_and_score_completions(rows(composite))
    metrics = trainer._metrics["train"]
    lengths = [len(c) for c in completions]
    assert metrics["behaviour/length_mean"] == [pytest.approx(sum(lengths) / len(lengths))]
    assert metrics["behaviour/reflect_per_response"] == [pytest.approx(3 / 4)]  # wait; let me, check
    assert metrics["behaviour/reflect_frac"] == [pytest.approx(0.5)]
    # mean baseline on these rewards: 5.5 < 6.5 in group 1 (two), 6.0 < 7.5+... in group 4: 5.5s never below
    mean_adv = torch.tensor(qae_advantages(composite, baseline="mean"))
    want_if_mean = int(((torch.tensor(composite) >= 5.0) & (mean_adv < 0)).sum())
    assert metrics["qae/neg_correct_if_mean"] == [want_if_mean] and want_if_mean >= 2
    qae_adv = torch.tensor(qae_advantages(composite))
    assert metrics["qae/neg_correct"] == [int(((torch.tensor(composite) >= 5.0) & (qae_adv < 0)).sum())]


@pytest.mark.parametrize("partner", ["clip_higher", "gspo", "clip_cov", "kl_cov", "pos_mask", "neg_mask"])
def test_every_partner_trains_a_step_with_both_baselines(tmp_path, tok, partner):
    from qae_lab.methods import method_settings

    for base in ("mean", "qae"):
        settings = method_settings(f"{base}+{partner}")
        trainer = make_trainer(tmp_path, tok, **{"loss_type": "bnpo", **settings})
        inputs = trainer._generate_and_score_completions(rows(REWARDS))
        grads = trainer_grads(trainer, inputs)
        assert any_nonzero(grads) and all(bool(torch.isfinite(g).all()) for g in grads.values())


# ---------------------------------------------------------------- 8. two processes (gloo)

MP_REWARDS = [1.0, 0, 0, 0,   0, 1, 1, 0,   1, 1, 0, 0]  # 3 groups over 2 ranks of 6: group 2 spans both
MP_WORKER = r'''
"""One rank of the two-process check: generation on fixed completions, then sparse vs dense losses."""
import datetime, json, os, sys

import torch

torch.set_num_threads(1)
out, tests_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, tests_dir)
from step_setup import completion_ids, make_trainer, rows, trainer_grads  # noqa: E402
from test_trainer import MP_REWARDS  # noqa: E402

from qae_lab.models import load_policy  # noqa: E402

# a short collective timeout: a rank stuck waiting for another fails instead of hanging the test
torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank, n = int(os.environ["RANK"]), len(MP_REWARDS) // 2
tok = load_policy("embedded", device="cpu")[1]
local = slice(rank * n, (rank + 1) * n)
trainer = make_trainer(os.path.join(out, f"run{rank}"), tok, n=n, completions=completion_ids(2 * n, len(tok))[local],
                       loss_type="bnpo", token_weighting="sa_ah")
assert trainer.accelerator.num_processes == 2 and trainer.accelerator.process_index == rank
inputs = trainer._generate_and_score_completions(rows(MP_REWARDS)[local])
with open(os.path.join(out, f"adv{rank}.json"), "w") as f:
    json.dump({"local": inputs["advantages"].tolist(), "logged": list(trainer._logs["extra"]["qae_advantage"]),
               "zero_adv_frac": trainer._metrics["train"]["qae/zero_adv_frac"]}, f)


def max_diff(idx, name):
    """Sparse vs dense gradients of the rows idx of this rank's batch; both ranks call it together."""
    sub = {k: (v[idx] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n else v)
           for k, v in inputs.items()}
    trainer.args.sparse_update = False
    dense = trainer_grads(trainer, sub)
    trainer.args.sparse_update = True
    sparse = trainer_grads(trainer, sub)
    diff = max((sparse[p] - dense[p]).abs().max().item() for p in dense)
    with open(os.path.join(out, f"{name}{rank}.json"), "w") as f:
        json.dump({"max_diff": diff, "kept": int((sub["advantages"] != 0).sum())}, f)


# the ranks keep different numbers of non-zero-advantage rows (2 and 3) ...
max_diff(torch.arange(n), "uneven")
# ... and one rank's micro-batch is all zero-advantage while the other's is not
max_diff(torch.tensor([1, 2, 3]) if rank == 0 else torch.tensor([0, 1, 2]), "allzero")
torch.distributed.barrier()
torch.distributed.destroy_process_group()
'''


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """Launch MP_WORKER on 2 CPU processes (torchrun, gloo) once; return its output folder and log."""
    out = tmp_path_factory.mktemp("two_process")
    script = out / "worker.py"
    script.write_text(MP_WORKER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", "2",
           str(script), str(out), str(Path(__file__).resolve().parent)]
    try:
        proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
        text = proc.stdout + proc.stderr
        key = [line for line in text.splitlines() if any(s in line for s in ("what()", "Error", "trainer.py"))]
        log = "\n".join(dict.fromkeys(key)) + "\n...\n" + text[-3000:]
    except subprocess.TimeoutExpired as err:
        log = f"timed out: {err}"
    return out, log


def read_ranks(out: Path, name: str, log: str) -> list[dict]:
    paths = [out / f"{name}{rank}.json" for rank in range(2)]
    assert all(p.exists() for p in paths), f"a rank did not get through '{name}':\n{log}"
    return [json.loads(p.read_text()) for p in paths]


@pytest.mark.slow
def test_two_processes_same_advantages_as_one(two_process_run):
    out, log = two_process_run
    ranks = read_ranks(out, "adv", log)
    want = group_advantages(torch.tensor(MP_REWARDS), G, eps=1e-4).tolist()
    assert want == pytest.approx(qae_advantages(MP_REWARDS), abs=1e-6)
    n = len(MP_REWARDS) // 2
    for rank, got in enumerate(ranks):
        assert got["local"] == pytest.approx(want[rank * n:(rank + 1) * n], abs=1e-6)  # each rank its own slice
        assert got["logged"] == pytest.approx(want, abs=1e-6)  # the gathered batch in the completion table
        assert got["zero_adv_frac"] == [pytest.approx(7 / 12)]


@pytest.mark.slow
def test_two_processes_sparse_update_same_gradient(two_process_run):
    # sparse skipping leaves a different number of rows on each rank; TRL's loss then gathers
    # per-row metrics and reduces per-token ones across ranks, which needs every rank to take part
    out, log = two_process_run
    for name, kept in (("uneven", [2, 3]), ("allzero", [0, 2])):
        ranks = read_ranks(out, name, log)
        assert [r["kept"] for r in ranks] == kept
        assert all(r["max_diff"] < 1e-6 for r in ranks), ranks
