"""Tests for the exact sequence policy: qae_lab.seqpolicy, qae_lab.seqpolicy_ledger, qae_lab.seqpolicy_update.

Plain-Python references (loops over every sequence with ``itertools.product`` and ``math``) stand in for the
level-by-level tensor code; a V = 2, L = 2 policy pins the entropy and one gradient by hand; torch autograd
checks the analytic gradients; finite differences check the first-order ledger; a Monte-Carlo average over
many sampled groups (fixed seed, tolerance from its own standard error) checks the exact expectation.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.ledger import LEDGER_FORMS, LEDGER_PARTS, entropy_change_terms, ledger_parts, square_sums
from qae_lab.seqpolicy import (
    enumerate_sequences,
    make_tasks,
    n_prefixes,
    prefix_reach,
    sampled_values,
    sequence_entropy,
    sequence_logprobs,
    sequence_positions,
    space_of,
    state_entropies,
    success_rate,
    task_batch,
)
from qae_lab.seqpolicy_ledger import advantage_table, entropy_gradients, expected_ledger, score_dot, split_parts
from qae_lab.seqpolicy_lab import headline, summarise_run, sweep_settings, tracking
from qae_lab.seqpolicy_report import (
    cell_sentences,
    compare_sentence,
    findings_sentences,
    paired,
    summary_sentences,
    tracking_sentences,
    trainer_ledger_sentences,
    variance_sentences,
)
from qae_lab.seqpolicy_update import UpdateSettings, group_update, simulate, update_variance

F64 = torch.float64


# ---------------------------------------------------------------- plain-Python references

def py_prefix_index(vocab: int, length: int) -> dict[tuple, int]:
    """Row of every prefix: by length, then in lexicographic order (the documented layout)."""
    rows = [p for t in range(length) for p in itertools.product(range(vocab), repeat=t)]
    return {p: i for i, p in enumerate(rows)}


def py_policy(z: torch.Tensor, vocab: int, length: int) -> dict[tuple, float]:
    """pi(y) = prod_t softmax(z[y_<t])[y_t] for every sequence, by loops."""
    index = py_prefix_index(vocab, length)
    out = {}
    for y in itertools.product(range(vocab), repeat=length):
        prob = 1.0
        for t in range(length):
            row = [float(v) for v in z[index[y[:t]]]]
            total = sum(math.exp(v) for v in row)
            prob *= math.exp(row[y[t]]) / total
        out[y] = prob
    return out


def py_entropy(z, vocab, length) -> float:
    return -sum(p * math.log(p) for p in py_policy(z, vocab, length).values() if p > 0)


def binary_entropy(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


# ---------------------------------------------------------------- the policy, by hand and by loops

def test_hand_v2_l2_entropy_and_gradient():
    # root [log 3, 0]: pi(y1 = 0) = 3/4; after 0: [0, 0] (1/2, 1/2); after 1: [log 4, 0] (4/5, 1/5)
    z = torch.tensor([[math.log(3), 0.0], [0.0, 0.0], [math.log(4), 0.0]], dtype=F64)
    pi = sequence_logprobs(z).exp()
    assert torch.allclose(pi, torch.tensor([3 / 8, 3 / 8, 1 / 5, 1 / 20], dtype=F64))
    h = 3 / 4 * math.log(4 / 3) + 1 / 4 * math.log(4) + 3 / 4 * math.log(2) + 1 / 4 * binary_entropy(0.8)
    assert math.isclose(float(sequence_entropy(z)), h, rel_tol=1e-12)
    assert math.isclose(float(sequence_entropy(z)), -sum(p * math.log(p) for p in pi.tolist()), rel_tol=1e-12)
    # H = h(p) + p h(1/2) + (1 - p) h(4/5), p = sigmoid(x): dH/dx = p (1 - p) (log((1 - p)/p) + h(1/2) - h(4/5))
    p = 0.75
    dh_dx = p * (1 - p) * (math.log((1 - p) / p) + math.log(2) - binary_entropy(0.8))
    _, g, _ = entropy_gradients(z)
    assert math.isclose(float(g[0, 0]), dh_dx, rel_tol=1e-12) and math.isclose(float(g[0, 1]), -dh_dx, rel_tol=1e-12)
    assert torch.allclose(prefix_reach(z), torch.tensor([1.0, 0.75, 0.25], dtype=F64))
    assert torch.allclose(success_rate(z, torch.tensor([1.0, 0, 0, 1])), torch.tensor(3 / 8 + 1 / 20, dtype=F64))


@pytest.mark.parametrize("vocab,length", [(2, 1), (2, 3), (3, 2), (4, 3), (5, 2)])
def test_exact_quantities_match_plain_python_loops(vocab, length):
    gen = torch.Generator().manual_seed(vocab * 10 + length)
    z = 2 * torch.randn(n_prefixes(vocab, length), vocab, generator=gen, dtype=F64)
    ref = py_policy(z, vocab, length)
    tokens, prefixes = enumerate_sequences(vocab, length)
    index = py_prefix_index(vocab, length)
    assert [tuple(t) for t in tokens.tolist()] == list(ref)  # first token most significant
    assert prefixes.tolist() == [[index[y[:t]] for t in range(length)] for y in ref]
    assert torch.allclose(sequence_logprobs(z).exp(), torch.tensor(list(ref.values()), dtype=F64), atol=1e-14)
    assert math.isclose(float(sequence_entropy(z)), py_entropy(z, vocab, length), rel_tol=1e-12)
    # the chain rule H = sum_s rho(s) H(s), rho(s) summed from the loop's sequence probabilities
    rho = [sum(p for y, p in ref.items() if y[:len(s)] == s) for s in index]
    assert torch.allclose(prefix_reach(z), torch.tensor(rho, dtype=F64), atol=1e-14)
    assert math.isclose(float((prefix_reach(z) * state_entropies(z)).sum()), py_entropy(z, vocab, length),
                        rel_tol=1e-12)
    r = torch.tensor([float(sum(y) % 2) for y in ref], dtype=F64)
    assert math.isclose(float(success_rate(z, r)), sum(p for y, p in ref.items() if sum(y) % 2), rel_tol=1e-12)


def test_sampled_values_read_the_table_along_each_sequence():
    z = torch.randn(2, 3, n_prefixes(3, 3), 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    lp = torch.log_softmax(z, -1)
    y = torch.randint(0, 27, (2, 3, 5), generator=torch.Generator().manual_seed(1))
    per_token = sampled_values(lp, y)  # (2, 3, 5, 3)
    assert per_token.shape == (2, 3, 5, 3)
    assert torch.allclose(per_token.sum(-1), sequence_logprobs(z).gather(-1, y))
    tok, pre = sequence_positions(y, 3, 3)
    assert float(lp[1, 2, pre[1, 2, 4, 2], tok[1, 2, 4, 2]]) == float(per_token[1, 2, 4, 2])


# ---------------------------------------------------------------- gradients

def test_tabular_softmax_gradient_is_e_minus_pi():
    # grad_z log pi(a|s) = e_a - pi(.|s) on row s, 0 elsewhere; so g . grad log pi(a|s) = g_{s,a} - <pi, g_s>
    z = torch.randn(n_prefixes(3, 2), 3, generator=torch.Generator().manual_seed(2), dtype=F64)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    u = score_dot(g, z)
    for s, a in [(0, 1), (2, 0), (3, 2)]:
        zg = z.clone().requires_grad_(True)
        grad, = torch.autograd.grad(torch.log_softmax(zg, -1)[s, a], zg)
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
    grad, = torch.autograd.grad(sequence_entropy(zg).sum(), zg)
    assert torch.allclose(h, sequence_entropy(z)) and torch.allclose(g, grad, atol=1e-14)
    zg = z.clone().requires_grad_(True)  # the state part: rho held fixed
    grad_state, = torch.autograd.grad((prefix_reach(z) * state_entropies(zg)).sum(), zg)
    assert torch.allclose(g_state, grad_state, atol=1e-14)


# ---------------------------------------------------------------- the update and its ledgers

def peaked(n_seeds=2, n_prompts=4, vocab=2, length=3, seed=0):
    return task_batch(n_seeds, n_prompts, vocab, length, start="peaked", seed=seed, sharpness=1.5)


def test_sampled_ledger_is_the_first_order_change_and_matches_finite_differences():
    t = peaked(3, 4, 3, 3)
    for eta in (1e-5, 1e-6):
        z, m, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4, eta=eta),
                               generator=torch.Generator().manual_seed(5))
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
            assert math.isclose(float(m[f"estimator_{form}/{key}"][0]) * 3 / 2.0, ref[key], rel_tol=1e-9,
                                abs_tol=1e-15), (form, key)


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


def test_tracking_of_a_perfect_and_of_a_reversed_estimator():
    exact = torch.tensor([[1.0, -2.0, 3.0, 0.5], [2.0, 1.0, -1.0, 4.0]], dtype=F64)
    out = {"dh_first_order": exact, "estimator_npg/dh": 3 * exact, "estimator_pg/dh": -exact,
           "estimator_reinforce/dh": exact + torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=F64),
           "sampled/dh_state": exact / 4, "sampled/dh_visit": 3 * exact / 4}
    t = tracking(out)
    assert t["npg"] == {"corr": [1.0, 1.0], "sign_agree": [1.0, 1.0], "ratio": [3.0, 3.0]}
    assert t["pg"] == {"corr": [-1.0, -1.0], "sign_agree": [0.0, 0.0], "ratio": [-1.0, -1.0]}
    assert t["reinforce"]["ratio"] == [5.0, 2.667] and t["visit_share"] == [0.75, 0.75]
    out.update({k: out[k] * math.nan for k in ("sampled/dh_state", "sampled/dh_visit")})  # Adam: no split
    assert tracking(out)["visit_share"] == [None, None]


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


def test_clipping_only_from_the_second_pass_and_clip_higher_clips_less():
    t = peaked(2, 4, 2, 3)
    run = lambda **kw: group_update(t.logits, t.rewards, UpdateSettings(group_size=4, eta=60.0, **kw),  # noqa: E731
                                    generator=torch.Generator().manual_seed(11))[1]
    assert float(run(num_iterations=1)["clip_frac"].max()) == 0.0
    two, higher = run(num_iterations=2), run(num_iterations=2, epsilon_high=0.28)
    assert float(two["clip_frac"].sum()) > 0 and bool((higher["clip_frac"] <= two["clip_frac"]).all())
    assert float(run(num_iterations=2, epsilon_low=1e6, epsilon_high=1e6)["clip_frac"].max()) == 0.0
    assert torch.allclose(two["sampled/dh"], run(num_iterations=1)["sampled/dh"])  # the split is the first pass's


def test_token_weights_and_adam_leave_what_is_not_exact_undefined():
    t = peaked(2, 3, 2, 3)
    gen = lambda: torch.Generator().manual_seed(12)  # noqa: E731
    _, plain, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4), generator=gen())
    _, saah, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4, alpha=0.5), generator=gen())
    assert bool(saah["expected/dh"].isnan().all()) and bool(torch.isfinite(saah["sampled/dh"]).all())
    assert torch.allclose(saah["sampled/dh"], saah["dh_first_order"])
    _, adam, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4, optimizer="adam", eta=0.01),
                              generator=gen())
    assert bool(adam["sampled/dh"].isnan().all()) and bool(torch.isfinite(adam["dh_first_order"]).all())
    assert torch.equal(plain["zero_adv_frac"], adam["zero_adv_frac"])  # the same groups


def test_simulate_curves_pair_up_and_chain():
    t = peaked(2, 4, 2, 3)
    s = UpdateSettings(group_size=4, eta=2.0)
    out = simulate(t.logits, t.rewards, s, steps=6, seed=3)
    assert out["entropy"].shape == (2, 7) and out["clip_frac"].shape == (2, 6)
    assert torch.allclose(out["entropy"].diff(dim=-1), out["dh_exact"])
    assert torch.allclose(out["entropy_per_prompt"][..., 0].mean(-1), out["entropy"][:, 0])
    again = simulate(t.logits, t.rewards, s, steps=6, seed=3)
    assert all(torch.equal(out[k], again[k]) for k in out)


def test_update_variance_same_groups_for_every_variant():
    t = make_tasks(3, 2, 3, start="peaked", seed=1, sharpness=1.5)
    out = update_variance(t.logits, t.rewards, UpdateSettings(group_size=4, baseline="mean"), alphas=(0.5, 2.0),
                          n_draws=300, chunk=128)
    assert set(out) == {"alpha = 0", "SA-AH, alpha = 0.5", "AH, alpha = 0.5", "SA-AH, alpha = 2", "AH, alpha = 2"}
    assert math.isclose(out["alpha = 0"]["cos_plain"], 1.0, rel_tol=1e-9)
    assert all(v["trace_var"] >= 0 and -1 <= v["cos_success"] <= 1 for v in out.values())
    assert out["SA-AH, alpha = 2"]["cos_plain"] < 1 - 1e-6  # the discount changes the mean update


# ---------------------------------------------------------------- tasks

@pytest.mark.parametrize("start", ["flat", "peaked"])
def test_make_tasks_rewards_follow_their_rule_and_spread_over_both_regimes(start):
    t = make_tasks(16, 4, 4, start=start, seed=2)
    tokens, _ = enumerate_sequences(4, 4)
    for rule, r in zip(t.rules, t.rewards):
        checksum = (tokens * torch.tensor(rule["weights"])).sum(-1) % rule["modulus"]
        assert torch.equal(r, (checksum < rule["below"]).to(F64))
    p = success_rate(t.logits, t.rewards)
    assert bool((p > 0).all() and (p < 1).all()) and float(p.min()) < 0.1
    assert bool((p <= 0.6).any()) and bool((p > 0.6).any())
    h_norm = state_entropies(t.logits) / math.log(4)
    assert float(h_norm.mean()) > 0.999 if start == "flat" else float(h_norm.mean()) < 0.6
    assert torch.equal(make_tasks(16, 4, 4, start=start, seed=2).rewards, t.rewards)


# ---------------------------------------------------------------- errors name the argument

@pytest.mark.parametrize("call,name", [
    (lambda: n_prefixes(1, 3), "vocab"),
    (lambda: n_prefixes(2, 9), "length"),
    (lambda: n_prefixes(5, 7), "vocab\\*\\*length"),
    (lambda: space_of(torch.zeros(5, 2)), "z"),
    (lambda: sequence_positions(torch.tensor([8]), 2, 3), "y"),
    (lambda: make_tasks(0, 2, 2), "n_prompts"),
    (lambda: make_tasks(2, 2, 2, start="hot"), "start"),
    (lambda: make_tasks(2, 2, 2, sharpness=-1.0), "sharpness"),
    (lambda: UpdateSettings(eta=0.0), "eta"),
    (lambda: UpdateSettings(epsilon_high=-0.1), "epsilon_high"),
    (lambda: UpdateSettings(num_iterations=0), "num_iterations"),
    (lambda: UpdateSettings(optimizer="lion"), "optimizer"),
    (lambda: UpdateSettings(group_size=1), "group_size"),
    (lambda: group_update(torch.zeros(1, 2, 3, 2), torch.zeros(1, 2, 3), UpdateSettings()), "rewards"),
    (lambda: group_update(torch.zeros(2, 3, 2), torch.zeros(2, 4), UpdateSettings()), "logits"),
    (lambda: expected_ledger(torch.zeros(1, 3, 2), torch.zeros(1, 4), group_size=4, eta=1.0, scale="batch"), "scale"),
    (lambda: simulate(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 4), UpdateSettings(), steps=-1), "steps"),
    (lambda: update_variance(torch.zeros(1, 3, 2), torch.zeros(1, 4), UpdateSettings(), n_draws=1), "n_draws"),
])
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()


# ---------------------------------------------------------------- the findings and their sentences

@pytest.fixture(scope="module")
def tiny_findings() -> dict:
    """Findings of the whole sweep on a tiny policy (2 seeds, 3 steps), shaped like the committed file's."""
    t = {start: task_batch(2, 3, 2, 2, start=start) for start in ("flat", "peaked")}
    runs = {}
    for name, (start, s) in sweep_settings(eta=5.0, adam_eta=0.05, group_size=4).items():
        out = simulate(t[start].logits, t[start].rewards, s, steps=3, seed=0)
        runs[name] = summarise_run(out, every=1, early=1, estimators=headline(s))
    variants = update_variance(t["peaked"].logits[0], t["peaked"].rewards[0], UpdateSettings(group_size=4),
                               n_draws=4)
    per_start = {"peaked": {n: {k: [v[k], v[k]] for k in v} for n, v in variants.items()}}
    return {"meta": {"early_step": 1, "n_seeds": 2}, "runs": runs, "variance": {"per_start": per_start}}


def test_findings_sentences_are_generated_for_every_result(tiny_findings):
    sentences = findings_sentences(tiny_findings)
    assert len(sentences["entropy"]) == 2 * (4 + 1 + 3) and len(sentences["ledger"]) == 2 * 5
    assert all(" vs " in line and "seeds" in line for line in sentences["entropy"] + sentences["ledger"])
    assert len(sentences["adam"]) == 2 * 3 and all(", Adam, " in line for line in sentences["adam"])
    assert len(sentences["estimator"]) == 2 * 2 + 16
    assert any(line.startswith("peaked start, Adam, quantile: per step") for line in sentences["estimator"])
    assert len(variance_sentences(tiny_findings)) == 2 * 5
    assert len(cell_sentences(tiny_findings)) == 4 and len(summary_sentences(tiny_findings)) == 4 + 4 + 4 + 1
    assert len(trainer_ledger_sentences(tiny_findings)) == 5


def headline_findings(corr: dict, sign: float = 0.9) -> dict:
    """Findings with only the eight headline runs' tracking: corr[(optimizer, form)] on both seeds (0.1 less
    under the quantile baseline)."""
    runs = {}
    for start in ("flat", "peaked"):
        for opt in ("sgd", "adam"):
            for b in ("mean", "quantile"):
                shift = 0.1 if b == "quantile" else 0.0
                track = {f: {"corr": [corr[opt, f] - shift] * 2, "sign_agree": [sign] * 2, "ratio": [2.0, 4.0]}
                         for f in LEDGER_FORMS}
                runs[sweep_settings_name(start, b, opt)] = {"tracking": {**track, "visit_share": [0.1, 0.3]}}
    return {"meta": {"n_seeds": 2}, "runs": runs}


def sweep_settings_name(start, baseline, optimizer):
    return [n for n, (st, s) in sweep_settings(eta=1.0, adam_eta=1.0).items()
            if st == start and s.baseline == baseline and s.optimizer == optimizer and headline(s)][0]


def test_tracking_sentences_state_the_numbers():
    corr = {("sgd", "npg"): 0.2, ("sgd", "pg"): 0.5, ("sgd", "reinforce"): 0.9,
            ("adam", "npg"): 0.8, ("adam", "pg"): 0.7, ("adam", "reinforce"): 0.6}
    f = headline_findings(corr)
    lines = tracking_sentences(f)
    assert lines[0] == (
        "flat start, SGD, mean: per step, against the exact first-order change of the whole step (grad H . dz), "
        "npg (the trainer's ledger/*) correlates +0.20±0.00, has its sign on 90%±0% of steps and sums to "
        "+3±1 times it; pg correlates +0.50±0.00, has its sign on 90%±0% of steps and sums to +3±1 times it; "
        "reinforce correlates +0.90±0.00, has its sign on 90%±0% of steps and sums to +3±1 times it; the "
        "reinforce form tracks it best; the states' visitation, which per-state terms cannot see, is 20%±10% of "
        "the exact change")
    assert "the npg form tracks it best (under Adam the sums' scale is nominal" in lines[3]
    assert lines[6].startswith("per-step correlation of the trainer's ledger (npg) with the exact change, mean, "
                               "flat start, Adam vs SGD: 0.80±0.00 vs 0.20±0.00 over 2 seeds: higher")
    said = trainer_ledger_sentences(f)
    assert said[0].startswith("QAETrainer logs the form npg as ledger/*")
    assert "Under SGD, " in said[1] and "the npg form +0.10 to +0.20 (sign right on 90% to 90% of steps)" in said[1]
    assert said[1].endswith("Best on average: reinforce") and said[2].endswith("Best on average: npg")
    assert said[3] == ("The trainer's form (npg) tracked the exact change better under Adam than under SGD in 4 of 4 "
                       "settings (mean correlation +0.75 against +0.15; its sign right on 90% against 90% of steps)")
    assert said[4] == ("Under the quantile baseline the trainer's form correlated less with the exact change than "
                       "under the mean in 4 of 4 (start, optimizer) settings (mean correlation +0.40 against +0.50)")


def test_cell_sentences_name_the_largest_cell_of_each_ledger():
    cells = {"dh_hard_pos": [-0.1, -0.1], "dh_hard_neg": [0.3, 0.5], "dh_easy_pos": [-0.2, -0.2],
             "dh_easy_neg": [0.0, 0.0]}
    ledger = {"sampled": {**cells, "dh": [0.0, 0.2]}, "estimator_npg": {**cells, "dh": [0.0, 0.2]},
              "estimator_pg": {**cells, "dh_easy_pos": [-2.0, -2.0], "dh": [0.0, 0.0]},
              "estimator_reinforce": {**cells, "dh": [0.0, 0.2]}}
    f = {"runs": {sweep_settings_name(st, b, "sgd"): {"ledger": ledger} for st in ("flat", "peaked")
                  for b in ("mean", "quantile")}}
    line = cell_sentences(f)[0]
    assert line == ("flat start, mean: the ledger cell that moved the entropy most is hard prompts' failures "
                    "(dh_hard_neg, +0.400±0.100 of the total +0.100±0.100 nats, first passes summed over training); "
                    "the per-token forms' largest cell: npg the same, pg easy prompts' successes, reinforce the same")


def test_paired_comparison_words():
    f = {"runs": {"a": {"x": [1.0, 2.0, 3.0]}, "b": {"x": [1.5, 1.9, 3.5]}, "c": {"x": [1.0, 2.0, 3.0]}}}
    assert ": no clear difference," in compare_sentence(f, "a", "b", "x", "x")
    assert "(2 of 3 paired seeds lower)" in compare_sentence(f, "a", "b", "x", "x")
    same = compare_sentence(f, "a", "c", "x", "x")
    assert ": no clear difference, 0.0 seed-spreads apart (0 of 3 paired seeds lower)" in same
    p = paired([1.0, None, 3.0], [2.0, 5.0, 4.0])
    assert p.n == 2 and p.n_lower == 2 and math.isclose(p.diff, -1.0)
    with pytest.raises(ValueError, match="^a and b "):
        paired([1.0], [1.0, 2.0])


def test_summary_of_a_run():
    t = peaked(2, 3, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=5, seed=0)
    s = summarise_run(out, every=2, early=2)
    curve = s["entropy_curve"]
    assert curve["steps"] == [0, 2, 4] and curve["n"] == 2
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(curve["mean"], out["entropy"][:, ::2].mean(0)))
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["early_entropy"], out["entropy"][:, 2]))
    for kind in ("sampled", *(f"estimator_{form}" for form in LEDGER_FORMS)):
        key = "sampled/dh" if kind == "sampled" else f"{kind}/dh"
        assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["ledger"][kind]["dh"], out[key].sum(-1)))
    tr = s["tracking"]
    assert all(-1 <= c <= 1 for f in LEDGER_FORMS for c in tr[f]["corr"])
    assert all(0 <= v <= 1 for v in tr["visit_share"])
    json.dumps(s, allow_nan=False)  # plain JSON
    lean = summarise_run(out, every=2, early=2, estimators=False)
    assert list(lean["ledger"]) == ["sampled"] and "tracking" not in lean
