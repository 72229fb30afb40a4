"""QAETrainer's entropy split by regime: ``entropy/hard`` and ``entropy/easy`` beside TRL's ``entropy``
(set-up: tests/testkit/step_setup.py; K's live change: tests/train/test_trainer_knobs.py).
"""

from __future__ import annotations

import pytest
import torch
from testkit.reference import ref_entropy, ref_regime_token_means
from testkit.step_setup import REWARDS, make_trainer, rows

from qae_lab.metric_names import ENTROPY_EASY, ENTROPY_HARD, ENTROPY_UPDATED_EASY, ENTROPY_UPDATED_HARD

EPS32 = torch.finfo(torch.float32).eps
# REWARDS' four groups of 4 under K = 0.4 (hard while p <= 0.6): 1/4 hard, 3/4 easy, 0/4 hard, 2/4 hard
HARD = [True] * 4 + [False] * 4 + [True] * 8


def spy_entropies(trainer) -> list[torch.Tensor]:
    """Keep the (B, T) token entropies of each loss forward (TRL's fused LM head computes them)."""
    seen: list[torch.Tensor] = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        seen.append(entropies.detach().clone())
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = spy
    return seen


def textbook_entropies(model, inputs) -> list[list[float]]:
    """H_t of softmax(z_t) at every completion position, by the textbook formula on the model's own logits
    (temperature 1, the config's default)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)  # (N, P+T)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)  # (N, P+T)
    t = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        z = model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1]  # (N, T, V): position p predicts p+1
    return [[ref_entropy(z[i, s].tolist()) for s in range(t)] for i in range(z.shape[0])]


def test_dense_split_matches_the_reference_and_recombines_to_entropy(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", sparse_update=False)
    seen = spy_entropies(trainer)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    assert inputs["prompt_hard"].tolist() == HARD  # the regimes this test is built on
    trainer._compute_loss(trainer.model, inputs)
    metrics = trainer._metrics["train"]
    mask = inputs["completion_mask"].tolist()
    [entropies] = seen
    want_hard, want_easy = ref_regime_token_means(entropies.tolist(), mask, HARD)
    # TRL's fused LM head returns float32 entropies (of at most log V ~ 6 nats); the trainer sums n of them in
    # float32, the reference in float64: they differ by at most n float32 roundings of the total
    tol = float(inputs["completion_mask"].sum()) * EPS32
    assert metrics[ENTROPY_HARD] == [pytest.approx(want_hard, rel=tol)]
    assert metrics[ENTROPY_EASY] == [pytest.approx(want_easy, rel=tol)]
    # and those are the policy's token entropies at the sampled positions (the textbook formula on the model's
    # float64 logits), to the same float32 rounding
    textbook = ref_regime_token_means(textbook_entropies(trainer.model, inputs), mask, HARD)
    assert (metrics[ENTROPY_HARD][0], metrics[ENTROPY_EASY][0]) == pytest.approx(textbook, rel=tol)
    n_hard = sum(sum(m) for m, h in zip(mask, HARD) if h)
    n_easy = sum(sum(m) for m, h in zip(mask, HARD) if not h)
    # weighted by their token counts, the two give TRL's entropy of the whole micro-batch
    whole = (n_hard * metrics[ENTROPY_HARD][0] + n_easy * metrics[ENTROPY_EASY][0]) / (n_hard + n_easy)
    assert metrics["entropy"] == [pytest.approx(whole, rel=tol)]
    # the updated rows (A != 0) are a part of the same forward, logged beside it
    updated = inputs["advantages"] != 0
    upd_hard, upd_easy = ref_regime_token_means(
        [e for e, u in zip(entropies.tolist(), updated) if u],
        [m for m, u in zip(mask, updated) if u],
        [h for h, u in zip(HARD, updated) if u],
    )
    assert metrics[ENTROPY_UPDATED_HARD] == [pytest.approx(upd_hard, rel=tol)]
    assert metrics[ENTROPY_UPDATED_EASY] == [pytest.approx(upd_easy, rel=tol)]


def test_sparse_split_covers_every_row_and_the_updated_rows_under_their_own_names(tmp_path, tok):
    dense = make_trainer(tmp_path, tok, loss_type="bnpo", sparse_update=False)
    dense._compute_loss(dense.model, dense._generate_and_score_completions(rows(REWARDS)))
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", sparse_update=True)
    seen = spy_entropies(trainer)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    updated = (inputs["advantages"] != 0).tolist()
    # QAE with 0/1 rewards: hard groups move their successes only, the easy group its failure only
    assert [i for i, u in enumerate(updated) if u] == [0, 6, 13, 14]
    trainer._compute_loss(trainer.model, inputs)
    metrics = trainer._metrics["train"]
    entropies, _ = seen  # (4, T'): the forward saw the 4 kept rows, trimmed of trailing padding; then the others
    keep = [i for i, u in enumerate(updated) if u]
    mask = inputs["completion_mask"][keep, : entropies.shape[1]].tolist()
    want_hard, want_easy = ref_regime_token_means(entropies.tolist(), mask, [HARD[i] for i in keep])
    tol = float(inputs["completion_mask"].sum()) * EPS32  # as above: n float32 roundings of the total
    assert metrics[ENTROPY_UPDATED_HARD] == [pytest.approx(want_hard, rel=tol)]
    assert metrics[ENTROPY_UPDATED_EASY] == [pytest.approx(want_easy, rel=tol)]
    # TRL's entropy and its split cover every row (the left-out ones from a pass without a graph): as a dense update
    for name in ("entropy", ENTROPY_HARD, ENTROPY_EASY):
        assert metrics[name] == [pytest.approx(dense._metrics["train"][name][0], rel=tol)], name


def test_a_regime_without_responses_logs_nothing(tmp_path, tok):
    every_group_hard = [1.0, 0, 0, 0] * 4  # 1/4 correct everywhere: every prompt hard under K = 0.4
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", sparse_update=False)
    trainer._compute_loss(trainer.model, trainer._generate_and_score_completions(rows(every_group_hard)))
    metrics = trainer._metrics["train"]
    tol = 128 * EPS32  # the same float32 sum, divided in float32 (TRL's entropy) or float64: a few roundings apart
    assert metrics[ENTROPY_HARD] == [pytest.approx(metrics["entropy"][0], rel=tol)]  # the whole batch
    assert ENTROPY_EASY not in metrics  # not 0: no easy response was seen


# ---------------------------------------------------------------- which score decides a success


def test_a_success_is_the_correctness_rewards_own_verdict_whatever_its_weight(tmp_path, tok):
    # found: with reward_weights=[0.4] the weighted reward of a correct answer is 0.4 < 0.5, and the
    # regime statistics read 0 successes, every prompt hard, while 7 of 16 completions were correct
    from qae_lab.metric_names import QAE_HARD_FRAC, QAE_SUCCESS_RATE

    trainer = make_trainer(tmp_path, tok, reward_weights=[0.4])
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    metrics = trainer._metrics["train"]
    # REWARDS' groups hold 1, 3, 0 and 2 successes of 4: p = 0.25, 0.75, 0, 0.5 (mean 0.375), one easy prompt of 4
    assert metrics[QAE_SUCCESS_RATE] == [0.375] and metrics[QAE_HARD_FRAC] == [0.75]
    assert inputs["prompt_hard"].tolist() == HARD


def test_several_reward_functions_name_the_one_that_decides_a_success(tmp_path, tok):
    import warnings

    from datasets import Dataset
    from testkit.step_setup import fixed_reward, tiny_model

    from qae_lab.metric_names import QAE_SUCCESS_RATE
    from qae_lab.train.config import QAEConfig
    from qae_lab.train.trainer import QAETrainer

    def format_bonus(completions, **kwargs):  # 2.0 for every completion: the weighted sum passes 0.5 everywhere
        return [2.0] * len(completions)

    def build(**kwargs):
        args = QAEConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            report_to=[],
            per_device_train_batch_size=16,
            num_generations=4,
            save_strategy="no",
            **kwargs,
        )
        return QAETrainer(
            model=tiny_model(tok),
            reward_funcs=[format_bonus, fixed_reward],
            args=args,
            processing_class=tok,
            train_dataset=Dataset.from_list(rows(REWARDS)),
        )

    with pytest.warns(
        UserWarning,
        match=r"2 reward functions \(format_bonus, fixed_reward\) and no success_reward: .*"
        r"weighted sum",
    ):
        assert build()._success_column is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # named: no warning
        trainer = build(success_reward="fixed_reward")
    assert trainer._success_column == 1
    trainer._generate_single_turn = lambda prompt_ids, *a, **k: ([[11, 12, 13]] * len(prompt_ids), None)
    trainer._generate_and_score_completions(rows(REWARDS))
    assert trainer._metrics["train"][QAE_SUCCESS_RATE] == [0.375]  # fixed_reward's own verdict, not 2.0 + r
    with pytest.raises(
        ValueError,
        match=r"success_reward must name one of this trainer's reward functions "
        r"\['format_bonus', 'fixed_reward'\], got 'correctness'",
    ):
        build(success_reward="correctness")
