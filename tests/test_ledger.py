"""Tests for qae_lab.ledger: hand-computed shares, the exact first-order entropy change of a softmax step,
a Monte-Carlo check of the sampled estimator, exact splits, clipping, and the trainer's ``ledger/*`` metrics
against a plain-Python reference computed from an independent forward pass."""

from __future__ import annotations

import math

import pytest
import torch
from testkit.reference import ref_advantages
from testkit.step_setup import G, REWARDS, make_trainer, rows

from qae_lab.advantages import hard_regime
from qae_lab.ledger import (
    LEDGER_PARTS,
    bandit_ledger,
    batch_ledger,
    entropy_change_terms,
    ledger_parts,
    square_sums,
    update_advantages,
)
from qae_lab.task.models import load_policy
from qae_lab.toys.bandit import entropy_change_first_order, identity_entropy_change


def ref_parts(lp, h, adv, mask, hard, normaliser=None) -> dict[str, float]:
    """The ledger from its definition, one token at a time: d = -(log pi + H) A, summed per cell."""
    out = dict.fromkeys(LEDGER_PARTS, 0.0)
    n = normaliser if normaliser is not None else sum(sum(row) for row in mask)
    for i, row in enumerate(lp):
        for t, x in enumerate(row):
            if not mask[i][t]:
                continue
            a = adv[i][t] if isinstance(adv[i], list) else adv[i]
            if a == 0:
                continue
            d = -(x + h[i][t]) * a / n
            sign, regime = ("pos" if a > 0 else "neg"), ("hard" if hard[i] else "easy")
            for key in ("dh", f"dh_{sign}", f"dh_{regime}", f"dh_{regime}_{sign}"):
                out[key] += d
    return out


def test_shares_by_hand():
    # likely token (log pi = -0.1 > -H = -0.5) rewarded: -(0.4)(1) = -0.4 ; unlikely (-2) rewarded: +1.5
    d = entropy_change_terms(torch.tensor([[-0.1, -2.0]]), torch.tensor([[0.5, 0.5]]), torch.tensor([1.0]))
    assert torch.allclose(d, torch.tensor([[-0.4, 1.5]]))
    pg = entropy_change_terms(torch.tensor([[-0.1]]), torch.tensor([[0.5]]), torch.tensor([[2.0]]), form="pg")
    assert torch.allclose(pg, torch.tensor([[-0.8 * math.exp(-0.1)]]))


@pytest.mark.parametrize("form", ["npg", "pg"])
def test_expectation_is_the_exact_first_order_change_of_a_softmax_step(form):
    """Over a ~ pi, the shares average to -Cov_pi(log pi, dz) with dz = A (npg) or pi A (pg), Cui et al.'s Lemma 1."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        z = torch.randn(7, generator=gen, dtype=torch.float64) * 2
        a = torch.randn(7, generator=gen, dtype=torch.float64)
        log_pi = torch.log_softmax(z, -1)
        pi, h = log_pi.exp(), -(log_pi.exp() * log_pi).sum()
        dz = a if form == "npg" else pi * a
        exact = float(entropy_change_first_order(z, dz))
        terms = entropy_change_terms(log_pi[:, None], h.expand(7, 1), a[:, None], form=form)  # (A, 1)
        parts = ledger_parts(terms, a[:, None], pi[:, None], normaliser=1.0)
        assert parts["dh"] == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_reinforce_form_is_the_exact_first_order_change_of_a_sampled_step():
    """One sampled token a with advantage A moves the logits by A (e_a - pi): form L3 is its exact first-order
    change of H, the -pi part included (form "pg" drops it and misses)."""
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(6, generator=gen, dtype=torch.float64) * 2
    log_pi = torch.log_softmax(z, -1)
    h = -(log_pi.exp() * log_pi).sum()
    for a_tok, adv in ((0, 1.3), (3, -0.7), (5, 2.0)):
        dz = adv * (torch.nn.functional.one_hot(torch.tensor(a_tok), 6).double() - log_pi.exp())
        exact = float(entropy_change_first_order(z, dz))
        lp, hh, av = log_pi[a_tok].reshape(1, 1), h.reshape(1, 1), torch.tensor([adv], dtype=torch.float64)
        got = entropy_change_terms(lp, hh, av, form="reinforce", sums=tuple(x.reshape(1, 1) for x in square_sums(z)))
        assert float(got) == pytest.approx(exact, rel=1e-10, abs=1e-14)
        assert float(entropy_change_terms(lp, hh, av, form="pg")) != pytest.approx(exact, rel=1e-3)
    with pytest.raises(ValueError, match="sums must be given with form='reinforce'"):
        entropy_change_terms(lp, hh, av, form="reinforce")


def test_sampled_tokens_estimate_it_without_bias():
    """Tokens drawn from pi: the mean share converges to the exact first-order change (6 standard errors)."""
    gen = torch.Generator().manual_seed(1)
    z = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)
    a = torch.tensor([1.0, -0.5, 0.3, -2.0], dtype=torch.float64)
    log_pi = torch.log_softmax(z, -1)
    h = -(log_pi.exp() * log_pi).sum()
    draws = torch.multinomial(log_pi.exp(), 200_000, replacement=True, generator=gen)
    d = entropy_change_terms(log_pi[draws][None], h.expand(1, draws.numel()), a[draws][None])  # (1, M)
    exact = float(entropy_change_first_order(z, a))
    assert abs(float(d.mean()) - exact) < 6 * float(d.std()) / math.sqrt(draws.numel())


def test_parts_match_a_loop_and_split_exactly():
    gen = torch.Generator().manual_seed(2)
    lp = -torch.rand(6, 5, generator=gen, dtype=torch.float64) * 3
    h = torch.rand(6, 5, generator=gen, dtype=torch.float64) * 2
    adv = torch.tensor([1.0, 0.0, -0.5, 2.0, -1.0, 0.0], dtype=torch.float64)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).double()
    hard = torch.tensor([True, True, False, False, True, False])
    got = ledger_parts(entropy_change_terms(lp, h, adv), adv, mask, hard)
    want = ref_parts(lp.tolist(), h.tolist(), adv.tolist(), mask.long().tolist(), hard.tolist())
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert got["dh"] == pytest.approx(got["dh_pos"] + got["dh_neg"]) == pytest.approx(got["dh_hard"] + got["dh_easy"])
    # zero-advantage rows add nothing: drop them and the sum (over the same normaliser) is unchanged
    keep = adv != 0
    sub = ledger_parts(
        entropy_change_terms(lp[keep], h[keep], adv[keep]),
        adv[keep],
        mask[keep],
        hard[keep],
        normaliser=float(mask.sum()),
    )
    assert sub == pytest.approx(got, rel=1e-12, abs=1e-15)
    assert ledger_parts(torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 3)) == dict.fromkeys(LEDGER_PARTS, 0.0)


def test_clipped_tokens_carry_nothing_and_the_ratio_scales_the_rest():
    a = update_advantages(
        torch.tensor([[1.0, 1.0, -1.0, -1.0]]),
        torch.tensor([[0.1, 0.5, -0.5, 0.1]]),
        torch.tensor([[False, True, True, False]]),
    )
    assert torch.allclose(a, torch.tensor([[math.exp(0.1), 0.0, 0.0, -math.exp(0.1)]]))
    lp, h, m = torch.tensor([[-0.2, -0.3]]), torch.tensor([[0.6, 0.6]]), torch.ones(1, 2)
    on_policy = batch_ledger(lp, h, torch.tensor([1.0]), m)
    # Clip-Higher (eps_high 0.28) lets a ratio of 1.25 through; the symmetric 0.2 clips it
    old = lp - math.log(1.25)
    assert batch_ledger(lp, h, torch.tensor([1.0]), m, old_logps=old, epsilon_high=0.28)["dh"] == pytest.approx(
        1.25 * on_policy["dh"]
    )
    assert batch_ledger(lp, h, torch.tensor([1.0]), m, old_logps=old, epsilon_high=0.2)["dh"] == 0.0
    # GSPO: one ratio per response, the mean log-ratio: exp((0.3 + 0) / 2)
    seq = batch_ledger(
        lp, h, torch.tensor([1.0]), m, old_logps=lp - torch.tensor([[0.3, 0.0]]), sequence_level=True, epsilon_high=1.0
    )
    assert seq["dh"] == pytest.approx(math.exp(0.15) * on_policy["dh"])


def test_normalisers_follow_the_loss_type():
    lp = torch.tensor([[-0.2, -0.3, -0.1], [-1.0, -2.0, 0.0]])
    h = torch.full((2, 3), 0.7)
    m = torch.tensor([[1.0, 1, 1], [1, 0, 0]])
    adv = torch.tensor([1.0, -1.0])
    d = entropy_change_terms(lp, h, adv) * m
    tokens = batch_ledger(lp, h, adv, m, skipped_tokens=4.0)["dh"]
    assert tokens == pytest.approx(float(d.sum()) / (4 + 4))  # 4 real tokens + 4 of skipped rows
    per_seq = batch_ledger(lp, h, adv, m, per_sequence=True, skipped_rows=2)["dh"]
    assert per_seq == pytest.approx(float(d[0].sum() / 3 + d[1].sum() / 1) / (2 + 2))


def test_bandit_ledger_is_the_identity_and_the_gate_moves_its_parts():
    """QAE's bandit: the ledger's total is the identity's first-order change; on a hard prompt b_K = 0 removes
    the negative part entirely, and lowers the total against the mean baseline (Prop. 4.2)."""
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        z = torch.randn(8, generator=gen, dtype=torch.float64) * 1.5
        r = (torch.rand(8, generator=gen) < 0.3).double()
        p = float((torch.softmax(z, -1) * r).sum())
        for b in (0.0, p, 1.0):
            want = float(identity_entropy_change(z, r, torch.tensor([b], dtype=torch.float64), 1.0)[0])
            assert bandit_ledger(z, r, b)["dh"] == pytest.approx(want, rel=1e-9, abs=1e-12)
        q = bandit_ledger(z, r, 0.0, hard=True)
        assert q["dh_neg"] == 0.0 and q["dh"] == q["dh_hard"] == q["dh_hard_pos"]
        assert q["dh"] <= bandit_ledger(z, r, p)["dh"] + 1e-12


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: entropy_change_terms(torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1)), "entropies must be >= 0"),
        (
            lambda: entropy_change_terms(torch.zeros(1, 2), torch.ones(1, 3), torch.ones(1)),
            r"entropies must have shape",
        ),
        (lambda: entropy_change_terms(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1), form="adam"), "form must be"),
        (lambda: ledger_parts(torch.zeros(1, 2), torch.ones(1), -torch.ones(1, 2)), "weights must be >= 0"),
        (
            lambda: ledger_parts(torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), normaliser=0),
            "normaliser must be > 0",
        ),
        (
            lambda: ledger_parts(torch.zeros(2, 2), torch.ones(2), torch.ones(2, 2), torch.ones(3)),
            "hard_rows must have",
        ),
        (lambda: update_advantages(torch.ones(2, 3), clipped=torch.ones(3, 3)), "clipped must have shape"),
        (lambda: bandit_ledger(torch.zeros(3), torch.zeros(2), 0.5), "r must have shape"),
        (lambda: entropy_change_terms([[float("nan")]], [[0.0]], [1.0]), "logps must be finite"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- the trainer's ledger/* metrics


@pytest.fixture(scope="module")
def tok():
    return load_policy("embedded", device="cpu")[1]


def _reference_from_forward(trainer, inputs, adv, k: float = 0.4) -> dict[str, float]:
    """log pi and H from a plain forward of the same model (float64), the ledger by :func:`ref_parts`."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        log_p = torch.log_softmax(trainer.model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1], -1)
    lp = log_p.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    h = -(log_p.exp() * log_p).sum(-1)
    counts = torch.tensor(REWARDS).view(-1, G).sum(1)
    hard = hard_regime(counts, G, k).repeat_interleave(G).tolist()
    return ref_parts(lp.tolist(), h.tolist(), adv, inputs["completion_mask"].long().tolist(), hard)


@pytest.mark.parametrize("baseline, sparse", [("mean", False), ("quantile", False), ("quantile", True)])
def test_trainer_logs_the_ledger_of_its_own_update(tmp_path, tok, baseline, sparse):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", baseline=baseline, sparse_update=sparse)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    trainer._compute_loss(trainer.model, inputs)
    got = {part: trainer._metrics["train"][f"ledger/{part}"][-1] for part in LEDGER_PARTS}
    adv = ref_advantages(REWARDS, G, baseline, 0.4, "paper", "group", 1e-4)
    # float32 advantages (TRL keeps them so) against float64 references: agreement to float32 precision
    assert got == pytest.approx(_reference_from_forward(trainer, inputs, adv), rel=1e-5, abs=1e-7)
    if baseline == "quantile":  # 0/1 rewards: the gate leaves no hard failure and no easy success
        assert got["dh_hard_neg"] == 0.0 and got["dh_easy_pos"] == 0.0 and got["dh_hard_pos"] != 0.0


def test_a_live_k_change_moves_the_ledgers_regime_split(tmp_path, tok):
    # config K = 0.4, then K = 0.6 set live: the fourth prompt (2 of 4 correct, p = 0.5) is hard under 0.4 and easy
    # under 0.6, so each response's regime, and the ledger's hard/easy split, must follow the K in force
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", baseline="mean", sparse_update=False, quantile_k=0.4)
    trainer.set_knobs(quantile_k=0.6)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    counts = torch.tensor(REWARDS).view(-1, G).sum(1)
    assert inputs["prompt_hard"].tolist() == hard_regime(counts, G, 0.6).repeat_interleave(G).tolist()
    assert inputs["prompt_hard"].tolist() != hard_regime(counts, G, 0.4).repeat_interleave(G).tolist()
    trainer._compute_loss(trainer.model, inputs)
    got = {part: trainer._metrics["train"][f"ledger/{part}"][-1] for part in LEDGER_PARTS}
    adv = ref_advantages(REWARDS, G, "mean", 0.6, "paper", "group", 1e-4)
    want = _reference_from_forward(trainer, inputs, adv, k=0.6)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
    stale = _reference_from_forward(trainer, inputs, adv, k=0.4)  # the split the config's K would give
    assert got["dh_easy"] != pytest.approx(stale["dh_easy"], rel=1e-3)
    assert trainer._metrics["train"]["qae/hard_frac"][-1] == 0.5  # two of the four prompts


def test_trainer_ledger_uses_the_horizon_weights_the_loss_applies(tmp_path, tok):
    """SA-AH: the negative rows' tokens carry A_i w_t c, so their part shrinks against alpha = 0."""
    parts = {}
    for alpha in (0.0, 4.0):
        trainer = make_trainer(
            tmp_path / str(alpha),
            tok,
            loss_type="bnpo",
            baseline="mean",
            token_weighting="sa_ah",
            alpha=alpha,
            sparse_update=False,
        )
        inputs = trainer._generate_and_score_completions(rows(REWARDS))
        trainer._compute_loss(trainer.model, inputs)
        parts[alpha] = {p: trainer._metrics["train"][f"ledger/{p}"][-1] for p in LEDGER_PARTS}
    plain = make_trainer(tmp_path / "plain", tok, loss_type="bnpo", baseline="mean", sparse_update=False)
    inputs = plain._generate_and_score_completions(rows(REWARDS))
    plain._compute_loss(plain.model, inputs)
    assert parts[0.0]["dh"] == pytest.approx(plain._metrics["train"]["ledger/dh"][-1], rel=1e-9)
    # alpha > 0: w_t < 1 on negative rows, and the normaliser sum(w) < sum(m) rescales every row by c > 1
    assert parts[4.0]["dh_pos"] / parts[0.0]["dh_pos"] > 1.0
    assert abs(parts[4.0]["dh_neg"]) != pytest.approx(abs(parts[0.0]["dh_neg"]))
