"""Tests for qae_lab.toys.sparsity: the two-regime gate's zero counts and zero-advantage fractions.

Reference quantiles from ``tests/testkit/reference.py`` stand in for the gate; exact Binomial and
Beta-Binomial sums are checked against direct sums, numerical integration and sampling.
"""

from __future__ import annotations

import math

import pytest
import torch
from testkit.reference import ref_quantile_linear, ref_quantile_paper

from qae_lab.advantages import group_advantages
from qae_lab.toys.sparsity import (
    ZeroSources,
    advantage_extremes,
    canonical_groups,
    convention_disagreements,
    expected_zero_fraction,
    expected_zero_fraction_beta,
    gate_table,
    gate_zero_counts,
    group_advantage_rows,
    sampled_zero_fraction,
    sampled_zero_fraction_beta,
    sampled_zero_sources,
    zero_sources,
    zero_sources_beta,
    zero_share_rows,
)

F64 = torch.float64


def T(x, dtype=F64) -> torch.Tensor:
    return torch.tensor(x, dtype=dtype)


def ref_gate(c: int, g: int, k: float, method: str) -> tuple[int, int]:
    """(#responses with A = 0, gate_table entry) for a binary group with c successes, from the reference quantiles.

    The entry is 0 for an all-equal group, +1 if b = 0 (only successes move, up), -1 if b = 1 (only failures
    move, down), 2 if b lies strictly between (both move).
    """
    if c in (0, g):
        return g, 0
    group = [0.0] * (g - c) + [1.0] * c
    b = (ref_quantile_paper if method == "paper" else ref_quantile_linear)(group, k)
    return sum(1 for x in group if x == b), (1 if b == 0.0 else -1 if b == 1.0 else 2)


def ref_zero_count(c: int, g: int, k: float, method: str) -> int:
    return ref_gate(c, g, k, method)[0]


def zero_fraction_per_group(rewards: torch.Tensor, g: int, k: float, method: str) -> torch.Tensor:
    """(M, G) binary rewards -> (M,) fraction of each group with A = 0, via group_advantages."""
    adv = group_advantages(rewards.reshape(-1), g, baseline="quantile", k=k, quantile_method=method, scale="none")
    return (adv.view(-1, g) == 0).double().mean(1)


# ---------------------------------------------------------------- the gate: zero counts and table


def test_gate_hand_g4():
    # G=4, K=0.4. Paper: b = 2nd smallest (ceil 1.6 = 2), hard (b = 0) while c <= 2.
    assert gate_zero_counts(4, 0.4).tolist() == [4, 3, 2, 3, 4]
    assert gate_table(4, [0.4]).tolist() == [[0, 1, 1, -1, 0]]
    # Linear: position 0.4 * 3 = 1.2 in 0..0 1..1; c = 2 gives sorted (0, 0, 1, 1) and b = 0.2: both sides move
    assert gate_zero_counts(4, 0.4, "linear").tolist() == [4, 3, 0, 3, 4]
    assert gate_table(4, [0.4], "linear").tolist() == [[0, 1, 2, -1, 0]]


def test_gate_hand_g8():
    # Paper, K=0.4: b = 4th smallest; b = 0 iff 8 - c >= 4 iff c <= 4.
    assert gate_zero_counts(8, 0.4).tolist() == [8, 7, 6, 5, 4, 5, 6, 7, 8]
    # Linear, K=0.4: position 2.8, b = s[2] + 0.8 (s[3] - s[2]); c = 5: s[2] = 0, s[3] = 1, b = 0.8 (+ and -)
    assert gate_zero_counts(8, 0.4, "linear").tolist() == [8, 7, 6, 5, 4, 0, 6, 7, 8]
    # K=0.6: paper b = 5th smallest, hard iff c <= 3; linear position 4.2, c = 3 gives b = 0.2
    want = {
        "paper": [[0, 1, 1, 1, 1, -1, -1, -1, 0], [0, 1, 1, 1, -1, -1, -1, -1, 0]],
        "linear": [[0, 1, 1, 1, 1, 2, -1, -1, 0], [0, 1, 1, 2, -1, -1, -1, -1, 0]],
    }
    for method, rows in want.items():
        assert gate_table(8, [0.4, 0.6], method).tolist() == rows
        assert gate_table(8, torch.tensor([0.4, 0.6]), method).tolist() == rows  # a float32 tensor of K too


@pytest.mark.parametrize("method", ["paper", "linear"])
def test_gate_matches_reference_quantiles(method):
    for g in (2, 3, 5, 8, 13, 16):
        ks = [0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.75, 0.8, 0.95]
        table = gate_table(g, ks, method)
        assert table.shape == (len(ks), g + 1)
        for row, k in zip(table.tolist(), ks):
            zeros = gate_zero_counts(g, k, method).tolist()
            for c in range(g + 1):
                n0, entry = ref_gate(c, g, k, method)
                assert (zeros[c], row[c]) == (n0, entry)
                # the entry says which side keeps A = 0: failures (+1), successes (-1), everyone (0), nobody (2)
                assert n0 == {0: g, 1: g - c, -1: c, 2: 0}[entry]
            if method == "paper":
                hard = [c <= g - math.ceil(round(k * g, 9)) for c in range(g + 1)]
                assert zeros == [g - c if h else c for c, h in zip(range(g + 1), hard)]


def test_gate_bad_input():
    with pytest.raises(ValueError, match="group_size"):
        gate_zero_counts(1, 0.4)
    with pytest.raises(ValueError, match="k"):
        gate_zero_counts(4, 1.0)
    with pytest.raises(ValueError, match="method"):
        gate_zero_counts(4, 0.4, "nearest")
    with pytest.raises(ValueError, match="ks"):
        gate_table(4, [0.4, 0.0])
    with pytest.raises(ValueError, match="ks"):
        gate_table(4, [float("nan")])


def test_gate_table_empty_ks_is_a_value_error():
    with pytest.raises(ValueError, match="ks"):
        gate_table(4, [])


# ---------------------------------------------------------------- expected zero fraction


@pytest.mark.parametrize("method", ["paper", "linear"])
def test_expected_zero_fraction_matches_binomial_sum(method):
    ps = [0.0, 0.01, 0.2, 0.37, 0.5, 0.6, 0.83, 0.99, 1.0]
    for g in (4, 8, 16):
        for k in (0.2, 0.4, 0.6, 0.8):
            got = expected_zero_fraction(T(ps), g, k, method)
            assert got.shape == (len(ps),) and got.dtype == F64
            for p, e in zip(ps, got.tolist()):
                want = sum(
                    math.comb(g, c) * p**c * (1 - p) ** (g - c) * ref_zero_count(c, g, k, method) / g
                    for c in range(g + 1)
                )
                assert e == pytest.approx(want, abs=1e-12)
    assert expected_zero_fraction(T([0.0, 1.0]), 8, 0.4).tolist() == [1.0, 1.0]
    assert expected_zero_fraction(torch.full((2, 3), 0.5), 8, 0.4).shape == (2, 3)
    assert expected_zero_fraction(0.5, 8, 0.4).shape == ()


@pytest.mark.parametrize("method", ["paper", "linear"])
def test_expected_zero_fraction_matches_sampled_groups(method):
    gen = torch.Generator().manual_seed(12)
    g, k, m = 8, 0.4, 20000
    for p in (0.1, 0.35, 0.6, 0.85):
        rewards = (torch.rand(m, g, generator=gen, dtype=F64) < p).double()  # success count ~ Binomial(G, p)
        frac = zero_fraction_per_group(rewards, g, k, method)  # (M,)
        se = frac.std().item() / math.sqrt(m)
        assert abs(frac.mean().item() - expected_zero_fraction(p, g, k, method).item()) <= 4 * se


def test_expected_zero_fraction_beta_uniform_hand():
    # Beta(1, 1): the success count is uniform on 0..G. G=16, K=0.4 (paper): zeros 16-c for c <= 9 (16+...+7 = 115)
    # and c for c >= 10 (10+...+16 = 91): E = 206 / (16 * 17)
    assert expected_zero_fraction_beta(1.0, 1.0, 16, 0.4) == pytest.approx(206 / 272, abs=1e-12)


@pytest.mark.parametrize(
    "a,b,g,k,method",
    [
        (1.0, 1.0, 8, 0.4, "paper"),
        (2.0, 5.0, 16, 0.4, "paper"),
        (3.5, 2.5, 8, 0.6, "linear"),
        (1.0, 2.5, 8, 0.4, "linear"),
    ],
)
def test_expected_zero_fraction_beta_is_binomial_averaged_over_beta(a, b, g, k, method):
    # midpoint rule for int_0^1 E[zero frac | p] Beta(p; a, b) dp. With a, b in {1} or >= 2 the integrand is
    # bounded with a bounded derivative, so the rule's error is O(1/n^2) ~ 1e-9 (a = 1.5 would give O(n^-1.5))
    n = 20000
    p = (torch.arange(n, dtype=F64) + 0.5) / n
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    pdf = torch.exp(log_norm + (a - 1) * torch.log(p) + (b - 1) * torch.log1p(-p))
    want = float((expected_zero_fraction(p, g, k, method) * pdf).sum() / n)
    assert expected_zero_fraction_beta(a, b, g, k, method) == pytest.approx(want, abs=1e-7)


@pytest.mark.parametrize("a,b", [(0.5, 0.5), (2.0, 3.0)])
def test_expected_zero_fraction_beta_matches_sampling(a, b):
    g, k, m = 8, 0.4, 20000
    with torch.random.fork_rng():  # Beta.sample draws from the global generator; keep it untouched
        torch.manual_seed(13)
        p = torch.distributions.Beta(torch.tensor(a, dtype=F64), torch.tensor(b, dtype=F64)).sample((m,))  # (M,)
    gen = torch.Generator().manual_seed(14)
    rewards = (torch.rand(m, g, generator=gen, dtype=F64) < p[:, None]).double()  # (M, G)
    frac = zero_fraction_per_group(rewards, g, k, "paper")
    se = frac.std().item() / math.sqrt(m)
    assert abs(frac.mean().item() - expected_zero_fraction_beta(a, b, g, k)) <= 4 * se


def test_expected_zero_fraction_bad_input():
    for p in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError, match="p"):
            expected_zero_fraction(p, 8, 0.4)
    with pytest.raises(ValueError, match="group_size"):
        expected_zero_fraction(0.5, 1, 0.4)
    with pytest.raises(ValueError, match="k"):
        expected_zero_fraction(0.5, 8, 0.0)
    for bad in ({"a": 0.0}, {"b": -1.0}, {"a": float("nan")}):
        args = {"a": 1.0, "b": 1.0} | bad
        with pytest.raises(ValueError, match=rf"^{next(iter(bad))} "):
            expected_zero_fraction_beta(args["a"], args["b"], 8, 0.4)
    with pytest.raises(ValueError, match="k"):
        expected_zero_fraction_beta(1.0, 1.0, 8, 1.0)


# ---------------------------------------------------------------- input holes


def test_lists_and_bare_numbers():
    # p may be a list; ks must be a sequence: a bare K is refused with a ValueError naming ks
    assert expected_zero_fraction([0.0, 1.0], 4, 0.4).tolist() == [1.0, 1.0]
    assert sampled_zero_fraction([0.0, 1.0], 4, 0.4) == 1.0
    for fn in (lambda ks: gate_table(4, ks), lambda ks: convention_disagreements(4, ks)):
        with pytest.raises(ValueError, match=r"ks must be a sequence of K values in \(0, 1\)"):
            fn(0.4)
        with pytest.raises(ValueError, match="ks must be a sequence"):
            fn(torch.tensor(0.4))
        with pytest.raises(ValueError, match="ks must be a sequence"):
            fn("0.4")
    assert gate_table(4, torch.tensor([0.4])).tolist() == [[0, 1, 1, -1, 0]]


def test_bad_rates_method_and_seed_are_named():
    with pytest.raises(ValueError, match=r"p must hold success rates in \[0, 1\], got 1.5"):
        expected_zero_fraction([0.5, 1.5], 4, 0.4)
    with pytest.raises(ValueError, match=r"p must hold success rates in \[0, 1\], got -0.25"):
        sampled_zero_fraction([-0.25], 4, 0.4)
    with pytest.raises(ValueError, match=r"^method must be one of"):  # the caller's name, not quantile_method
        gate_table(4, [0.4], method="nearest")
    with pytest.raises(ValueError, match=r"^method must be one of"):
        expected_zero_fraction(0.5, 4, 0.4, method="nearest")
    for seed in (2.5, True, "0", -1):
        with pytest.raises(ValueError, match="seed must be an int >= 0"):
            sampled_zero_fraction([0.5], 4, 0.4, seed=seed)
    for g in (1, 0, 8.0, True):
        with pytest.raises(ValueError, match="group_size"):
            sampled_zero_fraction([0.5], g, 0.4)


# ---------------------------------------------------------------- notebook 01's figures as numbers


def test_advantage_extremes_by_hand():
    # G = 4, K = 0.4: c <= 2 is hard (b_K = 0, successes +1), c = 3 easy (b_K = 1, failures -1), all-equal groups 0
    hi, lo = advantage_extremes(4, 0.4, scale="none")
    assert hi.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0] and lo.tolist() == [0.0, 0.0, 0.0, -1.0, 0.0]
    hi, lo = advantage_extremes(4, 0.4, baseline="mean", scale="none")  # mean c/4: success 1 - c/4, failure -c/4
    assert hi.tolist() == [0.0, 0.75, 0.5, 0.25, 0.0] and lo.tolist() == [0.0, -0.25, -0.5, -0.75, 0.0]
    hi, lo = advantage_extremes(4, 0.4, baseline="mean")  # c = 2: std (unbiased) of [1, 1, 0, 0] is sqrt(1/3)
    assert hi[2].item() == pytest.approx(0.5 / math.sqrt(1 / 3), rel=1e-5)


def test_group_advantage_rows_put_correct_responses_first():
    rows = group_advantage_rows(4, 0.4, [3, 1])
    assert [(r["c"], r["baseline"]) for r in rows] == [(3, "mean"), (3, "quantile"), (1, "mean"), (1, "quantile")]
    assert rows[0]["rewards"] == [1.0, 1.0, 1.0, 0.0] and rows[2]["rewards"] == [1.0, 0.0, 0.0, 0.0]
    # c = 3: mean 0.75, unbiased std 0.5 -> (0.25 / 0.5, -0.75 / 0.5); QAE (easy, b_K = 1): only the failure, -1 / 0.5
    assert rows[0]["advantages"] == pytest.approx([0.5, 0.5, 0.5, -1.5], rel=1e-5)
    assert rows[1]["advantages"] == pytest.approx([0.0, 0.0, 0.0, -2.0], rel=1e-5)
    assert rows[3]["advantages"] == pytest.approx([2.0, 0.0, 0.0, 0.0], rel=1e-5)  # c = 1, hard: only the success
    with pytest.raises(ValueError, match="c must be an int"):
        group_advantage_rows(4, 0.4, [5])


def test_sampled_zero_fraction_beta_tracks_the_exact_fraction():
    torch.manual_seed(0)
    ks = [0.2, 0.4, 0.8]
    sampled = sampled_zero_fraction_beta(0.5, 0.5, 16, ks, n_prompts=20000)
    exact = [expected_zero_fraction_beta(0.5, 0.5, 16, k) for k in ks]
    assert sampled == pytest.approx(exact, abs=0.01)  # 320,000 responses: the sampling error is ~0.002
    torch.manual_seed(0)
    assert sampled_zero_fraction_beta(0.5, 0.5, 16, ks, n_prompts=20000) == sampled  # the global seed repeats it
    with pytest.raises(ValueError, match="a must be"):
        sampled_zero_fraction_beta(0.0, 0.5, 16, ks, n_prompts=10)
    with pytest.raises(ValueError, match="n_prompts"):
        sampled_zero_fraction_beta(0.5, 0.5, 16, ks, n_prompts=0)


# ---------------------------------------------------------------- notebook 01's table of zero shares


def _beta_binomial_shares(a: float, b: float, g: int, k: float) -> tuple[float, float]:
    """(all-equal, gate) shares of A = 0 for p ~ Beta(a, b), by a plain loop over c with math.lgamma: a group is
    hard while c <= G - ceil(K G) (its G - c failures get 0), else easy (its c successes get 0)."""

    def log_beta(x, y):
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    rank = math.ceil(round(k * g, 9))
    all_equal = gate = 0.0
    for c in range(g + 1):
        pmf = math.comb(g, c) * math.exp(log_beta(c + a, g - c + b) - log_beta(a, b))
        zeros = g - c if c <= g - rank else c
        if c in (0, g):
            all_equal += pmf * zeros / g
        else:
            gate += pmf * zeros / g
    return all_equal, gate


def test_zero_share_rows_by_hand_and_against_a_loop():
    measured = ZeroSources(0.1, 0.65)
    rows = zero_share_rows(measured, 2000, 16, 0.4)
    assert [r["success rates"] for r in rows] == [
        "uniform on (0, 1), sampled",
        "uniform on (0, 1): Beta(1, 1)",
        "U-shaped: Beta(0.5, 0.5)",
        "centred on 0.5: Beta(4, 4)",
    ]
    assert [r["prompts"] for r in rows] == [2000, None, None, None]
    assert [rows[0]["A = 0 (%)"], rows[0]["all-equal groups (%)"], rows[0]["QAE's gate (%)"]] == pytest.approx(
        [75.0, 10.0, 65.0]
    )
    # p uniform: each c has probability 1/17; zeros 16, 15, ..., 7 for c = 0..9 (hard), 10, ..., 16 for c = 10..16
    assert rows[1]["A = 0 (%)"] == pytest.approx(100 * 206 / 272) and rows[1]["all-equal groups (%)"] == pytest.approx(
        100 * 32 / 272
    )
    for row, (a, b) in zip(rows[1:], ((1.0, 1.0), (0.5, 0.5), (4.0, 4.0))):
        all_equal, gate = _beta_binomial_shares(a, b, 16, 0.4)
        got = [row["all-equal groups (%)"], row["QAE's gate (%)"], row["A = 0 (%)"]]
        assert got == pytest.approx([100 * all_equal, 100 * gate, 100 * (all_equal + gate)], abs=1e-9), row
    for g, k in ((8, 0.6), (5, 0.2)):
        for row, (a, b) in zip(zero_share_rows(measured, 10, g, k)[1:], ((1.0, 1.0), (0.5, 0.5), (4.0, 4.0))):
            assert row["A = 0 (%)"] == pytest.approx(100 * sum(_beta_binomial_shares(a, b, g, k)), abs=1e-9)


def test_zero_share_rows_refuse_bad_input():
    with pytest.raises(ValueError, match="ZeroSources"):
        zero_share_rows((0.1, 0.6), 500, 8, 0.6)
    with pytest.raises(ValueError, match="n_prompts"):
        zero_share_rows(ZeroSources(0.1, 0.6), 0, 8, 0.6)


# ---------------------------------------------------------------- where the zeros come from


@pytest.mark.parametrize("method", ["paper", "linear"])
def test_zero_sources_split_the_expected_fraction(method):
    ps = [0.0, 0.01, 0.3, 0.5, 0.62, 0.99, 1.0]
    for g in (2, 5, 16):
        for k in (0.2, 0.4, 0.8):
            src = zero_sources(T(ps), g, k, method)
            torch.testing.assert_close(src.total, expected_zero_fraction(T(ps), g, k, method), rtol=0, atol=1e-12)
            for p, all_equal, gate in zip(ps, src.all_equal.tolist(), src.gate.tolist()):
                # all-equal: c = 0 or c = G, every response zero; the gate: the zeros of the mixed counts
                assert all_equal == pytest.approx((1 - p) ** g + p**g, abs=1e-12)
                want = sum(
                    math.comb(g, c) * p**c * (1 - p) ** (g - c) * ref_zero_count(c, g, k, method) / g
                    for c in range(1, g)
                )
                assert gate == pytest.approx(want, abs=1e-12)
    # the mean baseline's zeros are the all-equal groups alone: group_advantages(baseline="mean") agrees
    rewards = canonical_groups(4).view(5, 4)
    mean_zeros = (group_advantages(rewards.reshape(-1), 4, baseline="mean").view(5, 4) == 0).all(1)
    assert mean_zeros.tolist() == [True, False, False, False, True]


def test_zero_sources_beta_is_the_average_of_zero_sources():
    for a, b in ((1.0, 1.0), (0.5, 0.5), (2.0, 3.0)):
        src = zero_sources_beta(a, b, 16, 0.4)
        assert src.total == pytest.approx(expected_zero_fraction_beta(a, b, 16, 0.4), abs=1e-12)
        # midpoint rule over the Beta density, as in test_expected_zero_fraction_beta_is_binomial_averaged_over_beta
        n = 20000
        ps = (torch.arange(n, dtype=F64) + 0.5) / n
        w = torch.distributions.Beta(torch.tensor(a, dtype=F64), torch.tensor(b, dtype=F64)).log_prob(ps).exp()
        per = zero_sources(ps, 16, 0.4)
        tol = 2e-3 if min(a, b) < 1 else 1e-6  # an infinite density at 0 and 1 costs the midpoint rule accuracy
        assert src.all_equal == pytest.approx(float((w * per.all_equal).sum() / w.sum()), abs=tol)
        assert src.gate == pytest.approx(float((w * per.gate).sum() / w.sum()), abs=tol)
    # p uniform: every count c has probability 1/(G+1), so 2/(G+1) of the groups are all-equal
    assert zero_sources_beta(1.0, 1.0, 16, 0.4).all_equal == pytest.approx(2 / 17, abs=1e-12)


def test_sampled_zero_sources_count_each_source():
    p = torch.rand(3000, generator=torch.Generator().manual_seed(3), dtype=F64)
    got = sampled_zero_sources(p, 8, 0.4, seed=5)
    assert isinstance(got.all_equal, float) and isinstance(got.gate, float)
    assert got.total == sampled_zero_fraction(p, 8, 0.4, seed=5)  # the same draws
    # by hand with the same generator: a loop over groups
    gen = torch.Generator().manual_seed(5)
    rewards = (torch.rand(3000, 8, generator=gen, dtype=F64) < p[:, None]).double()
    equal = mixed = 0
    for row in rewards.tolist():
        c = int(sum(row))
        if c in (0, 8):
            equal += 8
        else:
            mixed += ref_zero_count(c, 8, 0.4, "paper")
    assert (got.all_equal, got.gate) == (equal / 24000, mixed / 24000)
    exact = zero_sources_beta(1.0, 1.0, 8, 0.4)
    assert got.all_equal == pytest.approx(exact.all_equal, abs=0.02) and got.gate == pytest.approx(exact.gate, abs=0.02)
    with pytest.raises(ValueError, match="p must hold success rates"):
        sampled_zero_sources(T([0.5, 1.5]), 8, 0.4)
