"""Tests for qae_lab.train.trainer: QAETrainer's gradients against a plain-torch reference written from
the papers' equations, parity with TRL's GRPOTrainer, the completion table, a LoRA step and the config
it needs (sparse updates, live knobs, entropy controls and two processes: tests/test_trainer_*.py;
the recorded steps of the previous trainer: tests/train/test_trainer_recorded.py).

Generation is replaced by fixed completions (tests/testkit/step_setup.py), so ``_generate_and_score_completions``
runs end to end on known tokens and rewards. Models are tiny random Qwen2s in float64 (or the project's
embedded model for the LoRA step); nothing is downloaded.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from testkit.step_setup import (
    REWARDS,
    any_nonzero,
    assert_same_grads,
    fixed_reward,
    make_trainer,
    qae_advantages,
    reference_grads,
    rows,
    tiny_model,
    trainer_grads,
)
from trl import GRPOConfig, GRPOTrainer

from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.task.models import load_policy
from qae_lab.task.rewards import correctness_reward
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer

# ---------------------------------------------------------------- 1. gradients vs a plain-torch reference


@pytest.mark.parametrize("weighting", ["none", "sa_ah", "ah"])
@pytest.mark.parametrize("baseline", ["mean", "quantile"])
@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo"])
def test_one_step_gradients_match_reference(tmp_path, tok, loss_type, baseline, weighting):
    trainer = make_trainer(
        tmp_path, tok, loss_type=loss_type, baseline=baseline, token_weighting=weighting, alpha=0.3, sparse_update=False
    )
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
    grads = {
        w: reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting=w, alpha=0.3)
        for w in ("none", "sa_ah", "ah")
    }
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
    trainer = make_trainer(
        tmp_path, tok, loss_type=loss_type, token_weighting=weighting, alpha=0.7, entropy_top_k=5, sparse_update=False
    )
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
        trainer = make_trainer(
            tmp_path, tok, token_weighting="sa_ah", alpha=0.3, entropy_top_k=top_k, sparse_update=sparse
        )
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
    rewards = [1.0, 0, 0, 0, 0.25, 0.5, 1, 0, 0, 0, 0, 0, 0.9, 0.1, 0.6, 0.6]  # not only binary
    common = {"loss_type": loss_type, "scale_rewards": scale, "advantage_eps": 1e-4}
    qae = make_trainer(
        tmp_path / "qae",
        tok,
        tiny_model(tok, seed=1),
        baseline="mean",
        token_weighting="none",
        sparse_update=False,
        **common,
    )
    common.pop("advantage_eps")  # TRL hard-codes 1e-4
    trl_trainer = make_trainer(
        tmp_path / "trl", tok, tiny_model(tok, seed=1), trainer_cls=GRPOTrainer, config_cls=GRPOConfig, **common
    )
    assert type(trl_trainer) is GRPOTrainer
    ours = qae._generate_and_score_completions(rows(rewards))
    theirs = trl_trainer._generate_and_score_completions(rows(rewards))
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(ours[key], theirs[key]), key
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-6, atol=1e-6)
    assert_same_grads(trainer_grads(qae, ours), trainer_grads(trl_trainer, theirs))


# TRL's loss types and options that qae_lab.loss does not compute: QAETrainer hands its advantages to TRL's own loss
TRL_LOSSES = {
    "cispo": {"loss_type": "cispo"},
    "sapo": {"loss_type": "sapo"},
    "vespo": {"loss_type": "vespo"},
    "luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "off_policy_mask": {"loss_type": "dapo", "off_policy_mask_threshold": 0.5},
    "adaptive_entropy": {"loss_type": "dapo", "use_adaptive_entropy": True, "entropy_coef": 0.01},
}


@pytest.mark.parametrize("name", sorted(TRL_LOSSES))
def test_trl_losses_take_qae_advantages_and_reproduce_trl_with_the_mean(tmp_path, tok, name):
    rewards = [1.0, 0, 0, 0, 0.25, 0.5, 1, 0, 0, 0, 0, 0, 0.9, 0.1, 0.6, 0.6]
    common = TRL_LOSSES[name]
    qae = make_trainer(tmp_path / "qae", tok, tiny_model(tok, seed=1), baseline="mean", advantage_eps=1e-4, **common)
    trl_trainer = make_trainer(
        tmp_path / "trl", tok, tiny_model(tok, seed=1), trainer_cls=GRPOTrainer, config_cls=GRPOConfig, **common
    )
    ours = qae._generate_and_score_completions(rows(rewards))
    theirs = trl_trainer._generate_and_score_completions(rows(rewards))
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-6, atol=1e-6)
    assert_same_grads(trainer_grads(qae, ours), trainer_grads(trl_trainer, theirs))
    # with the K-quantile baseline the same loss moves the model by QAE's advantages: TRL's loss of those, by hand
    quantile = make_trainer(tmp_path / "quantile", tok, tiny_model(tok, seed=1), advantage_eps=1e-4, **common)
    batch = quantile._generate_and_score_completions(rows(rewards))
    assert batch["advantages"].tolist() == pytest.approx(qae_advantages(rewards, eps=1e-4), abs=1e-6)
    handed = {**theirs, "advantages": batch["advantages"]}
    assert_same_grads(trainer_grads(quantile, batch), trainer_grads(trl_trainer, handed))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_where_qae_leaves_the_loss_alone_trls_own_loss_trains(tmp_path, tok, monkeypatch, loss_type):
    # no token weighting, no covariance penalty, a dense update: TRL's _compute_loss of QAE's advantages, and what
    # TRL does not log (the ledger, the entropy by regime) from TRL's own forward. Planted bug: qae_lab's loss on
    # this path -> the first call below raises; the ledger off by its sparse counterpart -> the last assert fails.
    import qae_lab.train.trainer as trainer_module

    dense = make_trainer(tmp_path / "dense", tok, loss_type=loss_type, sparse_update=False, num_iterations=2)
    inputs = dense._generate_and_score_completions(rows(REWARDS))
    with torch.no_grad():  # a second pass's policy: ratios away from 1, so the ledger's clip acts
        gen = torch.Generator().manual_seed(3)
        for p in dense.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)

    def refuse(*args, **kwargs):
        raise AssertionError("qae_lab's loss ran where QAE leaves the loss alone")

    with monkeypatch.context() as patched:
        patched.setattr(trainer_module, "grpo_loss", refuse)
        dense._metrics["train"].clear()
        got = trainer_grads(dense, inputs)
    trl_logged = {k: list(v) for k, v in dense._metrics["train"].items()}
    dense._metrics["train"].clear()
    dense.model.zero_grad(set_to_none=True)
    GRPOTrainer._compute_loss(dense, dense.model, inputs).backward()  # TRL's, unwrapped, on the same batch
    want = {n: p.grad.clone() for n, p in dense.model.named_parameters() if p.grad is not None}
    assert_same_grads(got, want)
    assert len(trl_logged["entropy"]) == 1  # TRL's entropy, logged once (not again by qae_lab)
    assert {k for k in trl_logged if k.startswith(("ledger/", "entropy/"))} >= {"ledger/dh", "entropy/updated_rows"}
    # the same micro-batch through qae_lab's loss (the sparse update: its ledger counts the rows it left out)
    dense.args.sparse_update = True
    dense._metrics["train"].clear()
    trainer_grads(dense, inputs)
    ours = {k: v[0] for k, v in dense._metrics["train"].items() if k.startswith(("ledger/", "entropy"))}
    theirs = {k: v[0] for k, v in trl_logged.items() if k.startswith(("ledger/", "entropy"))}
    assert set(ours) == set(theirs)
    # float32 sums of at most 16 x 9 terms each at most ~log V: their rounding, relative to the largest term
    scale = max(abs(v) for v in theirs.values())
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-5 * scale)


# ---------------------------------------------------------------- 5. logged advantages


def test_completion_table_advantages_are_those_that_trained(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    out = trainer._generate_and_score_completions(rows(REWARDS))
    want = qae_advantages(REWARDS)
    trl_mean = qae_advantages(REWARDS, baseline="mean")
    logged = list(trainer._logs["advantages"])  # TRL's column `advantage` of the completion table
    assert logged == pytest.approx(want, abs=1e-6) and logged == out["advantages"].tolist()
    assert logged != pytest.approx(trl_mean, abs=1e-3)  # the premise: TRL's own mean-baseline ones differ
    assert "qae_advantage" not in trainer._logs["extra"]  # one column, TRL's name, what trained
    assert len(trainer._logs["prompt"]) == len(logged) == len(REWARDS)  # one row per completion
    trainer.set_knobs(quantile_k=0.8)
    trainer._generate_and_score_completions(rows(REWARDS))
    # TRL's deque holds one generation batch: the new one replaced the old, with the K now in force
    assert list(trainer._logs["advantages"]) == pytest.approx(qae_advantages(REWARDS, k=0.8), abs=1e-6)
    assert len(trainer._logs["prompt"]) == len(REWARDS)


def test_completion_table_written_by_trl_holds_the_trained_advantages(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", log_completions=True)
    trainer._generate_and_score_completions(rows(REWARDS))
    (tmp_path / "completions").mkdir(exist_ok=True)
    trainer.log({})
    [table] = (tmp_path / "completions").glob("completions_*.parquet")
    assert pd.read_parquet(table)["advantage"].tolist() == pytest.approx(qae_advantages(REWARDS), abs=1e-6)


# ---------------------------------------------------------------- 5b. what decides a success, and the advantage path


def test_without_success_reward_the_weighted_sum_of_the_rewards_decides_a_success(tmp_path, tok):
    # two reward functions and no success_reward: a success is a weighted sum (reward_weights multiply, as TRL)
    # >= success_threshold. fixed_reward gives 1 or 0 and the bonus 0.25 x weight 2: sums 1.5 or 0.5, so at
    # threshold 1.5 exactly REWARDS' ones succeed (fixed_reward's own 1.0 would not).
    # Planted: `rewards if col is None and False else rpf[:, col]` or `... if col is not None ...` -> raises;
    # `rpf / weights` -> fails (sums 1.125); weights `.unsqueeze(1)` -> raises.
    from qae_lab.metric_names import QAE_HARD_FRAC, QAE_SUCCESS_RATE

    def bonus(completions, **kwargs):
        return [0.25] * len(completions)

    with pytest.warns(UserWarning, match="no success_reward"):
        trainer = make_trainer(
            tmp_path, tok, reward_funcs=[fixed_reward, bonus], reward_weights=[1.0, 2.0], success_threshold=1.5
        )
    out = trainer._generate_and_score_completions(rows(REWARDS))
    metrics = trainer._metrics["train"]
    # REWARDS' groups hold 1, 3, 0 and 2 successes of 4: p = 0.25, 0.75, 0, 0.5; hard while p <= 1 - K = 0.6
    assert metrics[QAE_SUCCESS_RATE] == [0.375] and metrics[QAE_HARD_FRAC] == [0.75]
    assert out["prompt_hard"].tolist() == [True] * 4 + [False] * 4 + [True] * 8


def test_success_threshold_is_inclusive_and_decides_the_regimes_and_the_if_mean_count(tmp_path, tok):
    # a score equal to success_threshold is a success; the config's threshold (not advantage_stats' default 0.5)
    # decides every qae/* statistic, and qae/neg_correct_if_mean counts the successes the MEAN baseline punishes.
    # Groups (threshold 5): A 7.5 7.5 5 5 (4 successes, easy; mean 6.25 punishes both 5s), B 0.6 0.6 0.6 1.0
    # (none: below 5, though >= 0.5), C all 0, D 10 0 0 0 (1 success). Under QAE's quantile baseline (K = 0.4,
    # rank 2) A's 5s sit at the baseline: advantage 0, no success punished.
    # Planted: `score > threshold` -> fails (A has 2 successes, hard); the if-mean advantages without
    # baseline="mean" -> fails (0); advantage_stats(..., success=None) in the stats or the if-mean count -> fails.
    from qae_lab.metric_names import QAE_HARD_FRAC, QAE_NEG_CORRECT, QAE_NEG_CORRECT_IF_MEAN, QAE_SUCCESS_RATE

    rewards = [7.5, 7.5, 5.0, 5.0, 0.6, 0.6, 0.6, 1.0, 0, 0, 0, 0, 10, 0, 0, 0]
    trainer = make_trainer(tmp_path, tok, success_threshold=5.0)
    out = trainer._generate_and_score_completions(rows(rewards))
    metrics = trainer._metrics["train"]
    assert metrics[QAE_SUCCESS_RATE] == [(1 + 0 + 0 + 0.25) / 4]
    assert metrics[QAE_HARD_FRAC] == [0.75]
    assert out["prompt_hard"].tolist() == [False] * 4 + [True] * 12
    assert metrics[QAE_NEG_CORRECT_IF_MEAN] == [2.0] and metrics[QAE_NEG_CORRECT] == [0.0]
    assert out["advantages"].tolist() == pytest.approx(qae_advantages(rewards), abs=1e-6)


def test_quantile_method_linear_reaches_the_advantages(tmp_path, tok):
    # the config's quantile_method is the one the advantages use: 'linear' interpolates at K (G - 1) = 1.2,
    # so REWARDS' 0 1 1 0 group gets the baseline 0.2 where 'paper' (rank ceil(K G) = 2) takes 0.
    # Planted: group_advantages(...) without quantile_method= (the default 'paper') -> fails.
    trainer = make_trainer(tmp_path, tok, quantile_method="linear")
    out = trainer._generate_and_score_completions(rows(REWARDS))
    want = qae_advantages(REWARDS, method="linear")
    assert want != pytest.approx(qae_advantages(REWARDS), abs=1e-3)  # the premise: the two methods differ here
    assert out["advantages"].tolist() == pytest.approx(want, abs=1e-6)


def test_one_unscored_completion_is_refused_and_leaves_no_generation_in_force(tmp_path, tok):
    # one completion no reward function scores (None) among scored ones is refused, naming why; after it (and
    # after any generation) the trainer holds no scoring of its own: TRL's _calculate_rewards called on its own
    # returns the rewards and scores nothing. Planted: `isnan(rpf).all(dim=None)` -> no error; the message in lower
    # case ("returned none: trl leaves") -> fails; the finally's
    # `self._scoring = ""` -> the later call raises AttributeError.
    def sometimes(completions, reward, **kwargs):
        return [None if r is None else float(r) for r in reward]

    trainer = make_trainer(tmp_path, tok, reward_funcs=sometimes)
    given = rows(REWARDS)
    given[5]["reward"] = None
    with pytest.raises(
        ValueError,
        match=r"^a completion got no reward from any reward function \(every one returned None\): TRL leaves such",
    ):
        trainer._generate_and_score_completions(given)
    before = {k: list(v) for k, v in trainer._metrics["train"].items()}
    prompts = [r["prompt"] for r in rows(REWARDS)]
    got = trainer._calculate_rewards(rows(REWARDS), prompts, ["x"] * len(REWARDS), [[11]] * len(REWARDS))
    assert got[:, 0].tolist() == REWARDS
    assert {k: list(v) for k, v in trainer._metrics["train"].items()} == before  # no qae/* row added


# ---------------------------------------------------------------- 6. a LoRA step through trainer.train()


def test_lora_train_step_moves_adapter_only(tmp_path):
    model, tok = load_policy("embedded", lora=True, device="cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = QAEConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to=[],
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=40,
        max_steps=1,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = QAETrainer(
        model=model,
        reward_funcs=correctness_reward,
        args=args,
        processing_class=tok,
        train_dataset=to_grpo_dataset(synthetic_task(4, seed=0)),
    )
    trainer.train()
    assert any(a != 0 for a in trainer._logs["advantages"])  # the premise: something to learn from
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


def test_trainer_takes_a_grpo_config_as_grpotrainer_does_and_refuses_other_args_by_name(tmp_path, tok):
    # a GRPOConfig becomes a QAEConfig of its settings and QAE's defaults, said once; anything else is refused by name
    with pytest.warns(UserWarning, match="QAETrainer got a GRPOConfig"):
        trainer = make_trainer(tmp_path, tok, config_cls=GRPOConfig)
    assert type(trainer.args).__name__ == "QAEConfig" and trainer.args.baseline == "quantile"
    with pytest.raises(ValueError, match=r"args must be a trl.GRPOConfig or a QAEConfig \(or None\), got dict"):
        QAETrainer(model=tiny_model(tok, seed=1), reward_funcs=[fixed_reward], args={"output_dir": str(tmp_path)})
