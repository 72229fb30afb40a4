"""QAETrainer's sparse updates: rows with A = 0 left out of the forward and backward, the same gradient
(set-up: tests/testkit/step_setup.py).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from testkit.step_setup import (
    REWARDS,
    any_nonzero,
    assert_same_grads,
    make_trainer,
    reference_grads,
    rows,
    tiny_model,
    trainer_grads,
)
from trl import GRPOTrainer

from qae_lab.metric_names import ENTROPY_UPDATED_ROWS
from qae_lab.train.trainer import QAETrainer

# float32's rounding unit: the entropies are float32 (TRL's fused LM head), each at most log V ~ 6 nats
EPS32 = torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- 3. sparse updates


def spy_rows(trainer) -> list[int | str]:
    """Record how many rows each forward of the loss's log-prob function sees: a number for a forward with a graph,
    ``"no_grad:<n>"`` for one without (the entropy pass over the rows a sparse update leaves out)."""
    seen: list[int | str] = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(model, input_ids, *args, **kwargs):
        seen.append(input_ids.shape[0] if torch.is_grad_enabled() else f"no_grad:{input_ids.shape[0]}")
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
    # only the non-zero-advantage rows went through the model with a graph; the others once without, for `entropy`
    assert n_sparse == [4, "no_grad:12"] and n_dense == [16]
    assert any_nonzero(dense)
    assert_same_grads(sparse, dense)
    # ... and both equal the reference
    want = reference_grads(trainer.model, inputs, adv.tolist(), loss_type=loss_type, weighting=weighting, alpha=0.3)
    assert_same_grads(dense, want)
    # TRL's entropy (every token) and the updated rows' under its own name, in both runs
    metrics = trainer._metrics["train"]
    assert len(metrics[ENTROPY_UPDATED_ROWS]) == 2 and len(metrics["entropy"]) == 2


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
    assert widths == [3, 9, 9]  # kept rows (3 columns), the left-out rows' entropy pass (9), then dense (9)
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


def test_sparse_update_all_zero_batch_skips_the_backward(tmp_path, tok):
    flat = [1.0] * 8 + [0.0] * 8  # every group all-equal: nothing to learn
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah")
    inputs = trainer._generate_and_score_completions(rows(flat))
    assert inputs["advantages"].abs().max().item() == 0.0
    sparse, dense, n_sparse, n_dense = sparse_and_dense_grads(trainer, inputs)
    assert n_sparse == ["no_grad:16"] and n_dense == [16]  # no graph: only the pass for TRL's entropy
    assert not any_nonzero(dense)
    metrics = trainer._metrics["train"]
    assert metrics["entropy"] == [pytest.approx(metrics["entropy"][1], rel=16 * 9 * EPS32)] * 2  # as dense logs it
    assert math.isnan(metrics[ENTROPY_UPDATED_ROWS][0])  # no updated row: NaN, which TRL's log leaves out
    assert_same_grads(sparse, dense)
    assert trainer._metrics["train"]["saah/alpha"] == [0.5, 0.5]  # the alpha in force is logged either way


def test_sparse_update_logs_trls_entropy_of_every_token(tmp_path, tok):
    # the 4 kept rows (A != 0: 0, 6, 13, 14) hold 3 tokens each, the 12 left out 9 each: 12 + 108 tokens, so the
    # kept rows' mean, or the mean of the two parts' means, lies far from the token-weighted mean TRL logs
    short, g = {0, 6, 13, 14}, torch.Generator().manual_seed(0)
    fixed = [torch.randint(10, len(tok), (3 if i in short else 9,), generator=g).tolist() for i in range(16)]
    model = tiny_model(tok)
    with torch.no_grad():  # sharper logits: a random tiny model's entropies all lie near log V, alike everywhere
        model.get_output_embeddings().weight.mul_(10.0)
    trainer = make_trainer(tmp_path, tok, model, loss_type="bnpo", completions=fixed)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    kept = inputs["advantages"] != 0  # (16,)
    m = inputs["completion_mask"].double()  # (16, 9)
    assert kept.nonzero().flatten().tolist() == sorted(short) and (m[kept].sum(), m[~kept].sum()) == (12, 108)
    with torch.no_grad():  # the policy's token entropies, one forward over every row
        _, h, _ = trainer._policy_forward(trainer.model, inputs)
    h = h.double()  # (16, 9)
    want_all = float((h * m).sum() / m.sum())  # TRL's: every completion token
    want_kept = float((h * m)[kept].sum() / m[kept].sum())
    want_rest = float((h * m)[~kept].sum() / m[~kept].sum())

    def logged(sparse: bool, loss=QAETrainer._compute_loss) -> dict:
        trainer._metrics["train"].clear()
        trainer.args.sparse_update = sparse
        loss(trainer, trainer.model, inputs)
        return {k: list(v) for k, v in trainer._metrics["train"].items()}

    sparse, dense, trl = logged(True), logged(False), logged(False, GRPOTrainer._compute_loss)
    # TRL's fused head returns float32 entropies (each in [0, log V]), summed over 120 tokens: at most 120 float32
    # roundings of the total, relative to it (the same in every run: the positive terms cannot cancel)
    tol = 120 * EPS32
    # the premise: the wrong answers (kept rows only; the two parts' means averaged) lie far outside that tolerance
    assert want_kept != pytest.approx(want_all, rel=100 * tol)
    assert (want_kept + want_rest) / 2 != pytest.approx(want_all, rel=100 * tol)
    assert trl["entropy"] == [pytest.approx(want_all, rel=tol)]  # TRL's own loss, the same batch
    assert sparse["entropy"] == [pytest.approx(want_all, rel=tol)]
    assert dense["entropy"] == [pytest.approx(want_all, rel=tol)]
    assert sparse[ENTROPY_UPDATED_ROWS] == [pytest.approx(want_kept, rel=tol)]  # the kept rows only
    assert dense[ENTROPY_UPDATED_ROWS] == [pytest.approx(want_kept, rel=tol)]


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


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_sparse_update_logs_trls_clip_ratios_over_every_row(tmp_path, tok, level):
    # TRL's clip_ratio/* are means over every completion token (GSPO: every response) and the min / max over every
    # row's mean; the rows a sparse update leaves out (A = 0) clip nothing but count. Planted bug: the kept rows'
    # tokens (or rows) alone in the denominators, and no 0 row in the min -> low_mean, region_mean and low_min differ.
    trainer = make_trainer(
        tmp_path,
        tok,
        loss_type="bnpo",
        num_iterations=2,
        epsilon=0.05,
        epsilon_high=0.05,
        importance_sampling_level=level,
    )
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    assert inputs["old_per_token_logps"] is not None and (inputs["advantages"] == 0).sum() == 12  # the premise
    with torch.no_grad():  # a second pass's policy: ratios away from 1, so the clip acts
        gen = torch.Generator().manual_seed(3)
        for p in trainer.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)

    def logged(loss) -> dict:
        trainer._metrics["train"].clear()
        loss(trainer, trainer.model, inputs)
        return {k: v[0] for k, v in trainer._metrics["train"].items() if k.startswith("clip_ratio/")}

    seen = spy_rows(trainer)
    sparse, trl = logged(QAETrainer._compute_loss), logged(GRPOTrainer._compute_loss)
    assert seen[0] == 4  # the sparse path ran: 4 rows with a graph
    assert (
        set(sparse)
        == set(trl)
        == {f"clip_ratio/{k}" for k in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")}
    )
    assert trl["clip_ratio/region_mean"] > 0  # the premise: the clip acted
    # ratios of counts of at most 16 x 9 tokens: exact in float32 but for the division's rounding
    assert sparse == pytest.approx(trl, rel=4 * EPS32, abs=0)
