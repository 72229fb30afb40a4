"""QAETrainer's sparse updates: rows with A = 0 left out of the forward and backward, the same gradient
(set-up: tests/testkit/step_setup.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from testkit.step_setup import (
    REWARDS,
    any_nonzero,
    assert_same_grads,
    make_trainer,
    reference_grads,
    rows,
    trainer_grads,
)

from qae_lab.train.trainer import QAETrainer


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
    inputs = {
        "prompt_ids": torch.ones(3, 4, dtype=torch.long),
        "prompt_mask": torch.ones(3, 4),
        "completion_ids": torch.arange(12).view(3, 4),
        "completion_mask": mask,
        "old_per_token_logps": torch.randn(3, 4),
        "advantages": torch.tensor([1.0, 0.0, -1.0]),
        "num_items_in_batch": torch.tensor(7),
    }
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
    trainer = make_trainer(
        tmp_path,
        tok,
        loss_type="bnpo",
        token_weighting="ah" if case == "ah" else "sa_ah",
        entropy_coef=0.01 if case == "entropy_bonus" else 0.0,
    )
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    if case == "kl":  # beta != 0 needs reference log-probs: any fixed ones will do
        trainer.beta = 0.04
        with torch.no_grad():
            logps = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
                inputs["completion_ids"].shape[1],
            )[0]
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
