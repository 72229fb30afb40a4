"""Tests for the exact ledgers of the sequence policy (qae_lab.toys.seqpolicy) and the update's ledgers.

Torch autograd checks the analytic gradients; finite differences check the first-order ledger; the
trainer's per-token forms (qae_lab.ledger) are replayed on the update's first pass; a Monte-Carlo average
over many sampled groups (fixed seed, tolerance from its own standard error) checks the exact expectation.
"""

from __future__ import annotations

import math

import pytest
import torch

from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.ledger import LEDGER_FORMS, LEDGER_PARTS, entropy_change_terms, ledger_parts, square_sums
from qae_lab.toys.seqpolicy import (
    n_prefixes,
    prefix_reach,
    sampled_values,
    sequence_entropy,
    sequence_logprobs,
    sequence_positions,
    space_of,
    state_entropies,
)
from qae_lab.toys.seqpolicy import advantage_table, entropy_gradients, expected_ledger, score_dot, split_parts
from qae_lab.toys.seqpolicy_training import UpdateSettings, group_update
from testkit.seqpolicy_setup import F64, peaked


# ---------------------------------------------------------------- gradients


def test_tabular_softmax_gradient_is_e_minus_pi():
    # grad_z log pi(a|s) = e_a - pi(.|s) on row s, 0 elsewhere; so g . grad log pi(a|s) = g_{s,a} - <pi, g_s>
    z = torch.randn(n_prefixes(3, 2), 3, generator=torch.Generator().manual_seed(2), dtype=F64)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    u = score_dot(g, z)
    for s, a in [(0, 1), (2, 0), (3, 2)]:
        zg = z.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(torch.log_softmax(zg, -1)[s, a], zg)
        expect = torch.zeros_like(z)
        expect[s] = -torch.softmax(z[s], -1)
        expect[s, a] += 1
        assert torch.allclose(grad, expect, atol=1e-15)
        assert math.isclose(float((g * grad).sum()), float(u[s, a]), rel_tol=1e-12)


@pytest.mark.parametrize("vocab,length", [(2, 3), (4, 3), (3, 4)])
def test_entropy_gradient_matches_autograd(vocab, length):
    z = 1.5 * torch.randn(2, n_prefixes(vocab, length), vocab, generator=torch.Generator().manual_seed(4), dtype=F64)
    h, g, g_state = entropy_gradients(z)
    zg = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(sequence_entropy(zg).sum(), zg)
    assert torch.allclose(h, sequence_entropy(z)) and torch.allclose(g, grad, atol=1e-14)
    zg = z.clone().requires_grad_(True)  # the state part: rho held fixed
    (grad_state,) = torch.autograd.grad((prefix_reach(z) * state_entropies(zg)).sum(), zg)
    assert torch.allclose(g_state, grad_state, atol=1e-14)


# ---------------------------------------------------------------- the update's ledgers


def test_sampled_ledger_is_the_first_order_change_and_matches_finite_differences():
    t = peaked(3, 4, 3, 3)
    for eta in (1e-5, 1e-6):
        z, m, _ = group_update(
            t.logits, t.rewards, UpdateSettings(group_size=4, eta=eta), generator=torch.Generator().manual_seed(5)
        )
        # exact up to the rounding of z + dz - z (|z| ~ 1, |dz| ~ eta)
        assert torch.allclose(m["sampled/dh"], m["dh_first_order"], rtol=1e-6, atol=1e-18)
        # the exact entropy change of a tiny step is the first-order one up to O(eta^2)
        assert torch.allclose(m["dh_exact"], m["dh_first_order"], rtol=1e-3, atol=1e-15)
        assert torch.allclose(m["dh_exact"], (sequence_entropy(z) - sequence_entropy(t.logits)).mean(-1))


@pytest.mark.parametrize("kind", ["sampled", "expected", *(f"estimator_{form}" for form in LEDGER_FORMS)])
@pytest.mark.parametrize("baseline", ["mean", "quantile"])
def test_ledger_parts_add_up(kind, baseline):
    t = peaked(4, 6, 2, 3)
    s = UpdateSettings(group_size=6, baseline=baseline, eta=3.0, num_iterations=2)
    _, m, _ = group_update(t.logits, t.rewards, s, generator=torch.Generator().manual_seed(6))
    p = {key: m[f"{kind}/{key}"] for key in LEDGER_PARTS}
    assert torch.allclose(p["dh"], p["dh_pos"] + p["dh_neg"]) and torch.allclose(p["dh"], p["dh_hard"] + p["dh_easy"])
    assert torch.allclose(p["dh_hard"], p["dh_hard_pos"] + p["dh_hard_neg"])
    assert torch.allclose(p["dh_pos"], p["dh_hard_pos"] + p["dh_easy_pos"])
    if kind == "sampled":
        assert torch.allclose(m["sampled/dh_state"] + m["sampled/dh_visit"], p["dh"])


def test_split_parts_equals_ledger_parts_per_seed():
    gen = torch.Generator().manual_seed(7)
    terms, adv = torch.randn(3, 12, 4, generator=gen, dtype=F64), torch.randn(3, 12, generator=gen, dtype=F64)
    adv[adv.abs() < 0.3] = 0.0
    hard = torch.rand(3, 12, generator=gen) < 0.5
    parts = split_parts(terms.sum(-1) / 48, adv, hard)
    for s in range(3):
        ref = ledger_parts(terms[s], adv[s], torch.ones(12, 4), hard[s])
        assert all(math.isclose(ref[k], float(parts[k][s]), rel_tol=1e-12, abs_tol=1e-15) for k in LEDGER_PARTS)


def replay_first_pass(t, s: UpdateSettings, seed: int):
    """The first seed's sampled groups of group_update, drawn again: log pi, H, the state logits, A, hard rows."""
    gen = torch.Generator().manual_seed(seed)
    g = s.group_size
    y = torch.multinomial(sequence_logprobs(t.logits[0]).exp(), g, replacement=True, generator=gen)  # (P, G)
    r = t.rewards[0].gather(-1, y)
    adv = group_advantages(r.reshape(-1), g, baseline=s.baseline, k=s.k)
    v, l = space_of(t.logits)
    tokens, prefixes = sequence_positions(y, v, l)  # (P, G, L)
    prompt = torch.arange(y.shape[0])[:, None, None]
    rows = t.logits[0][prompt, prefixes].reshape(-1, l, v)  # (P G, L, V): the logits of each sampled token's state
    lp = sampled_values(torch.log_softmax(t.logits[0], -1), y).reshape(-1, l)
    h = sampled_values(state_entropies(t.logits[0])[..., None].expand(-1, -1, v), y).reshape(-1, l)
    rho = prefix_reach(t.logits[0]).gather(-1, prefixes.flatten(-2)).view(prefixes.shape).reshape(-1, l)
    return lp, h, rows, adv, hard_regime(r.sum(-1), g, s.k).repeat_interleave(g), rho


@pytest.mark.parametrize("baseline", ["mean", "quantile"])
def test_estimator_ledgers_are_the_library_forms(baseline):
    # each estimator's parts, un-scaled by eta / P, are ledger_parts of entropy_change_terms of the first pass
    t = peaked(1, 3, 2, 3)
    s = UpdateSettings(group_size=4, eta=2.0, baseline=baseline)
    _, m, _ = group_update(t.logits, t.rewards, s, generator=torch.Generator().manual_seed(8))
    lp, h, rows, adv, hard, _ = replay_first_pass(t, s, 8)
    for form in LEDGER_FORMS:
        sums = square_sums(rows) if form == "reinforce" else None
        ref = ledger_parts(entropy_change_terms(lp, h, adv, form=form, sums=sums), adv, torch.ones(12, 3), hard)
        for key in LEDGER_PARTS:
            assert math.isclose(
                float(m[f"estimator_{form}/{key}"][0]) * 3 / 2.0, ref[key], rel_tol=1e-9, abs_tol=1e-15
            ), (form, key)


@pytest.mark.parametrize("baseline", ["mean", "quantile"])
def test_reinforce_form_weighted_by_reach_is_the_exact_per_state_change(baseline):
    # SGD, one pass: the part of grad H . dz through the states' own entropies (rho held fixed, by autograd in
    # entropy_gradients) is the "reinforce" terms weighted by rho(s_t); the "pg" form is not
    t = peaked(1, 3, 3, 3)
    s = UpdateSettings(group_size=4, eta=2.0, baseline=baseline)
    z, m, _ = group_update(t.logits, t.rewards, s, generator=torch.Generator().manual_seed(13))
    _, _, g_state = entropy_gradients(t.logits)
    exact_state = float((g_state * (z - t.logits)).sum((-1, -2)).mean(-1)[0])
    assert math.isclose(float(m["sampled/dh_state"][0]), exact_state, rel_tol=1e-9)
    lp, h, rows, adv, hard, rho = replay_first_pass(t, s, 13)
    unit = s.eta / (3 * 4 * 3) / 3  # eta / N_tok, then the mean over P = 3 prompts
    for form, equal in (("reinforce", True), ("pg", False)):
        sums = square_sums(rows) if form == "reinforce" else None
        terms = entropy_change_terms(lp, h, adv, form=form, sums=sums)
        weighted = ledger_parts(terms, adv, rho, hard, normaliser=1.0)["dh"] * unit
        assert math.isclose(weighted, exact_state, rel_tol=1e-9) == equal, form


def test_estimators_sum_the_passes_and_survive_adam():
    t = peaked(2, 3, 2, 3)

    def run(**kw):
        gen = torch.Generator().manual_seed(14)
        return group_update(t.logits, t.rewards, UpdateSettings(group_size=4, **kw), generator=gen)[1]

    one, two = run(eta=1e-6), run(eta=1e-6, num_iterations=2)  # a tiny step: the second pass sees nearly z0
    for form in LEDGER_FORMS:
        assert torch.allclose(two[f"estimator_{form}/dh"], 2 * one[f"estimator_{form}/dh"], rtol=1e-4)
    assert torch.allclose(two["sampled/dh"], one["sampled/dh"])  # the sampled split is the first pass's
    adam = run(eta=0.01, optimizer="adam", num_iterations=2)
    assert bool(adam["sampled/dh_state"].isnan().all())
    assert all(bool(torch.isfinite(adam[f"estimator_{f}/{k}"]).all()) for f in LEDGER_FORMS for k in LEDGER_PARTS)


@pytest.mark.parametrize("baseline,scale", [("mean", "group"), ("quantile", "group"), ("quantile", "none")])
def test_expected_ledger_matches_monte_carlo_over_groups(baseline, scale):
    # many seeds hold the same task: the mean of their sampled ledgers estimates the exact expectation
    t = peaked(1, 3, 2, 3, seed=3)
    n = 6000
    z, r = t.logits.expand(n, -1, -1, -1), t.rewards.expand(n, -1, -1)
    s = UpdateSettings(group_size=4, baseline=baseline, scale=scale, eta=1.0)
    _, m, _ = group_update(z, r, s, generator=torch.Generator().manual_seed(9))
    for key in ("dh", "dh_pos", "dh_neg", "dh_hard", "dh_easy_neg"):
        mc, exact = m[f"sampled/{key}"], m[f"expected/{key}"]
        assert torch.allclose(exact, exact[0].expand(n))  # the expectation does not depend on the draw
        se = float(mc.std()) / math.sqrt(n)
        assert abs(float(mc.mean()) - float(exact[0])) < 4 * se + 1e-12, (key, float(mc.mean()), float(exact[0]), se)
    assert abs(float(m["expected/dh"][0])) > 1e-4  # a non-trivial case


def test_advantage_table_hand_and_against_group_advantages():
    a1, a0 = advantage_table(4, baseline="mean", scale="none")
    assert a1.tolist() == [0.0, 0.75, 0.5, 0.25, 0.0] and a0.tolist() == [0.0, -0.25, -0.5, -0.75, 0.0]
    a1, a0 = advantage_table(8, baseline="quantile", k=0.4)
    adv = group_advantages(torch.tensor([1.0, 1, 1, 0, 0, 0, 0, 0], dtype=F64), 8, baseline="quantile", k=0.4)
    assert math.isclose(float(a1[3]), float(adv[0])) and float(a0[3]) == 0.0  # c = 3: hard, failures untouched


def test_expected_ledger_is_zero_for_groups_that_cannot_differ():
    z = torch.randn(1, 2, 7, 2, generator=torch.Generator().manual_seed(10), dtype=F64)
    r = torch.stack([torch.ones(8), torch.zeros(8)])[None].to(F64)  # every answer right / every answer wrong
    parts = expected_ledger(z, r, group_size=4, eta=1.0)
    assert all(float(v.abs().max()) == 0.0 for v in parts.values())


def test_expected_ledger_names_a_bad_scale():
    with pytest.raises(ValueError, match="^scale "):
        expected_ledger(torch.zeros(1, 3, 2), torch.zeros(1, 4), group_size=4, eta=1.0, scale="batch")
