"""QAETrainer with the entropy controls and partners (POS/NEG-MASK, Clip-Cov, KL-Cov, Clip-Higher, GSPO)
and the behaviour metrics, against plain-torch references (set-up: tests/testkit/step_setup.py).
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from testkit.step_setup import (
    REWARDS,
    any_nonzero,
    assert_same_grads,
    make_trainer,
    qae_advantages,
    reference_grads,
    rows,
    trainer_grads,
)


# ---------------------------------------------------------------- 7b. partners and behaviour metrics


def _logp_ratio(model, inputs):
    """(log pi_theta of the completion tokens, mask) by a plain forward, as reference_loss computes them."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    log_p = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1], dim=-1)
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
    assert_same_grads(
        trainer_grads(trainer, inputs), reference_grads(trainer.model, inputs, want.tolist(), loss_type="bnpo")
    )


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo"])
def test_clip_cov_zeroes_drawn_band_tokens_only(tmp_path, tok, loss_type, monkeypatch):
    import qae_lab.loss as loss_module

    drawn = []
    real = loss_module._clip_cov_select  # the loss calls the unchecked core of clip_cov_select
    monkeypatch.setattr(loss_module, "_clip_cov_select", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    trainer = make_trainer(
        tmp_path,
        tok,
        loss_type=loss_type,
        baseline="mean",
        cov_penalty="clip_cov",
        clip_cov_ratio=0.2,
        clip_cov_lb=-0.05,
        clip_cov_ub=10.0,
        sparse_update=False,
    )
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
    trainer = make_trainer(
        tmp_path,
        tok,
        loss_type=loss_type,
        baseline="mean",
        cov_penalty="kl_cov",
        kl_cov_ratio=0.1,
        kl_cov_coef=0.7,
        sparse_update=False,
    )
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = inputs["advantages"].clone()
    # on-policy (no old log-probs): |log ratio| = 0, so the penalty adds nothing, not even gradient
    on_policy = trainer_grads(trainer, inputs)
    assert_same_grads(on_policy, reference_grads(trainer.model, inputs, adv.tolist(), loss_type=loss_type))
    # off-policy: old log-probs moved by a fixed pattern, so ratios and |log ratio| are non-trivial
    logp, m = _logp_ratio(trainer.model, inputs)
    shift = 0.05 * torch.sin(torch.arange(logp.numel(), dtype=logp.dtype)).view_as(logp)
    inputs["old_per_token_logps"] = logp.detach() + shift
    got = trainer_grads(trainer, inputs)
    cov = _ref_cov(logp, adv, m)
    k = max(int(0.1 * m.sum()), 1)
    order = sorted(
        ((float(cov[i, j]), i, j) for i in range(m.shape[0]) for j in range(m.shape[1]) if m[i, j]), reverse=True
    )
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
    composite = [7.5, 7.5, 5.5, 5.5, 7.5, 0, 0, 0, 5.5, 5.5, 5.5, 5.5, 7.5, 6.0, 2.0, 0]
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
