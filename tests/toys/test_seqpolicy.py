"""Tests for the exact sequence policy itself (qae_lab.toys.seqpolicy): sequences, probabilities, entropy, tasks.

Plain-Python references (loops over every sequence with ``itertools.product`` and ``math``) stand in for the
level-by-level tensor code; a V = 2, L = 2 policy pins the entropy and one gradient by hand. The ledgers are
tested in test_seqpolicy_ledger.py, the update in test_seqpolicy_training.py, the findings in
test_seqpolicy_runs.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from qae_lab.toys.seqpolicy import (
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
)
from qae_lab.toys.seqpolicy import entropy_gradients
from testkit.seqpolicy_setup import F64


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
    rho = [sum(p for y, p in ref.items() if y[: len(s)] == s) for s in index]
    assert torch.allclose(prefix_reach(z), torch.tensor(rho, dtype=F64), atol=1e-14)
    assert math.isclose(
        float((prefix_reach(z) * state_entropies(z)).sum()), py_entropy(z, vocab, length), rel_tol=1e-12
    )
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


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: n_prefixes(1, 3), "vocab"),
        (lambda: n_prefixes(2, 9), "length"),
        (lambda: n_prefixes(5, 7), "vocab\\*\\*length"),
        (lambda: space_of(torch.zeros(5, 2)), "z"),
        (lambda: sequence_positions(torch.tensor([8]), 2, 3), "y"),
        (lambda: make_tasks(0, 2, 2), "n_prompts"),
        (lambda: make_tasks(2, 2, 2, start="hot"), "start"),
        (lambda: make_tasks(2, 2, 2, sharpness=-1.0), "sharpness"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
