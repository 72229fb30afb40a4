r"""Sparsity of QAE's two-regime gate: who gets a zero advantage, and how often.

QAE (arXiv 2509.22611, sec. 4-5): with binary rewards the K-quantile baseline of a group
with c successes out of G is b_K = 0 while c <= G - ceil(K G) (hard prompt: only the
successes get A != 0) and b_K = 1 otherwise (easy prompt: only the failures). So
zeros(c) = G - c for a hard group and c for an easy one, and

    E[zero fraction | p] = sum_c C(G, c) p^c (1 - p)^(G - c) zeros(c) / G        (Binomial)
    E[zero fraction]     = sum_c C(G, c) B(c + a, G - c + b) / B(a, b) zeros(c) / G
                           for per-prompt success rates p ~ Beta(a, b)          (Beta-Binomial)

The zeros have two sources (:class:`ZeroSources`): groups whose rewards are all equal, zero under
any baseline (GRPO's mean too), and the side of a mixed group that the gate leaves at 0.

Every count is computed by :func:`qae_lab.advantages.group_advantages` on the canonical groups, so the official
code's ``"linear"`` quantile is served too. The Beta spread of difficulties is the notebook's assumption.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from qae_lab.methods import DEFAULT_BASELINE, DEFAULT_QUANTILE_METHOD, DEFAULT_SCALE
from qae_lab._checks import as_real_tensor, check_choice, check_group_size, check_int, check_k_list, check_positive
from qae_lab.advantages import QUANTILE_METHODS, group_advantages, quantile_baseline

__all__ = [
    "binomial_pmf",
    "canonical_groups",
    "convention_disagreements",
    "gate_zero_counts",
    "gate_table",
    "expected_zero_fraction",
    "expected_zero_fraction_beta",
    "sampled_zero_fraction",
    "sampled_zero_fraction_beta",
    "advantage_extremes",
    "group_advantage_rows",
    "ZeroSources",
    "SPREADS",
    "zero_sources",
    "zero_sources_beta",
    "sampled_zero_sources",
    "zero_share_rows",
]


def canonical_groups(group_size: int) -> torch.Tensor:
    r"""All binary groups of size G up to order, group c = c ones then G - c zeros: ((G+1)*G,) float64 rewards.

    >>> canonical_groups(2)
    tensor([0., 0., 1., 0., 1., 1.], dtype=torch.float64)
    """
    g = check_group_size(group_size, group_size)
    c = torch.arange(g + 1)
    return (torch.arange(g)[None, :] < c[:, None]).double().reshape(-1)  # (G+1)*G


def convention_disagreements(group_size: int, ks) -> torch.Tensor:
    r"""Where the ``"paper"`` and ``"linear"`` (official code) K-quantiles of a group with c of G correct differ:
    (len(ks), G+1) bool.

    >>> convention_disagreements(8, [0.4])[0].nonzero().flatten().tolist()    # only c = 5 of 8
    [5]
    >>> bool(convention_disagreements(16, [0.2, 0.4, 0.6, 0.8]).any())
    False
    """
    g = check_group_size(group_size, group_size)
    groups = canonical_groups(g)
    return torch.stack(
        [quantile_baseline(groups, g, k) != quantile_baseline(groups, g, k, method="linear") for k in check_k_list(ks)]
    )


def gate_zero_counts(group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD) -> torch.Tensor:
    r"""How many of G binary responses get A = 0 under QAE per success count c = 0..G: G - c if hard, else c.

    >>> gate_zero_counts(4, 0.4)       # hard while c <= 2: failures get 0; easy: successes get 0
    tensor([4, 3, 2, 3, 4])
    """
    g = check_group_size(group_size, group_size)
    check_choice(method, "method", QUANTILE_METHODS)
    adv = group_advantages(canonical_groups(g), g, baseline="quantile", k=k, quantile_method=method, scale="none")
    return (adv.view(g + 1, g) == 0).sum(1)


def gate_table(group_size: int, ks, method: str = DEFAULT_QUANTILE_METHOD) -> torch.Tensor:
    r"""Which responses QAE moves, per K (rows) and success count c = 0..G (columns): +1 only successes (hard), -1
    only failures (easy), 0 nobody (all equal), 2 both (a linear-convention baseline strictly inside (0, 1)).

    >>> gate_table(4, [0.4, 0.8])
    tensor([[ 0,  1,  1, -1,  0],
            [ 0, -1, -1, -1,  0]])
    """
    g = check_group_size(group_size, group_size)
    check_choice(method, "method", QUANTILE_METHODS)
    groups = canonical_groups(g)
    rows = []
    for k in check_k_list(ks):
        adv = group_advantages(groups, g, baseline="quantile", k=k, quantile_method=method, scale="none").view(g + 1, g)
        pos, neg = (adv > 0).any(1), (adv < 0).any(1)
        rows.append(torch.where(pos & neg, 2, torch.where(pos, 1, torch.where(neg, -1, 0))))
    return torch.stack(rows)  # (len(ks), G+1)


def _zero_share(pmf: torch.Tensor, zeros: torch.Tensor, drop_all_equal: bool) -> torch.Tensor:
    """sum_c P(c) zeros(c), optionally conditioned on 0 < c < G (DAPO's dynamic sampling)."""
    if not isinstance(drop_all_equal, bool):
        raise ValueError(f"drop_all_equal must be a bool, got {drop_all_equal!r}")
    if not drop_all_equal:
        return (pmf * zeros).sum(-1)
    pmf = pmf[..., 1:-1]
    return (pmf * zeros[1:-1]).sum(-1) / pmf.sum(-1)  # NaN where no group can be mixed (p in {0, 1})


def binomial_pmf(p, n: int) -> torch.Tensor:
    r"""P(c) = C(n, c) p^c (1 - p)^(n - c), c = 0..n, for rates p (...) in [0, 1]: (..., n + 1) float64, with
    0^0 = 1 (exact at p = 0 and 1); gradients flow through p.

    >>> binomial_pmf(torch.tensor([0.0, 0.5, 1.0]), 2).tolist()
    [[1.0, 0.0, 0.0], [0.25, 0.5, 0.25], [0.0, 0.0, 1.0]]
    """
    n = check_int(n, "n", 0)
    p = p.double() if isinstance(p, torch.Tensor) else torch.as_tensor(p, dtype=torch.float64)
    c = torch.arange(n + 1, dtype=p.dtype)
    comb = torch.tensor([math.comb(n, j) for j in range(n + 1)], dtype=p.dtype)
    q = p[..., None]  # (..., 1)
    return comb * torch.where(c == 0, 1.0, q**c) * torch.where(c == n, 1.0, (1 - q) ** (n - c))  # (..., n + 1)


def _beta_binomial_pmf(a: float, b: float, g: int) -> torch.Tensor:
    """(G+1,) P(c) = C(G, c) B(c + a, G - c + b) / B(a, b): the success count when p ~ Beta(a, b)."""
    c = torch.arange(g + 1, dtype=torch.float64)
    log_comb = math.lgamma(g + 1) - torch.lgamma(c + 1) - torch.lgamma(g - c + 1)
    log_beta = torch.lgamma(c + a) + torch.lgamma(g - c + b) - math.lgamma(g + a + b)  # log B(c + a, G - c + b)
    return torch.exp(log_comb + log_beta - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)))


def _check_rates(p: torch.Tensor) -> None:
    """Success rates must lie in [0, 1]; name the first one that does not."""
    bad = (p < 0) | (p > 1)
    if bool(bad.any()):
        raise ValueError(f"p must hold success rates in [0, 1], got {p[bad].flatten()[0].item()}")


def expected_zero_fraction(
    p, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD, *, drop_all_equal: bool = False
) -> torch.Tensor:
    r"""Exact E[fraction of a group with A = 0] when the success count is Binomial(G, p); p's shape.
    ``drop_all_equal``: condition on mixed groups, as after DAPO's dynamic sampling (NaN for p in {0, 1}).

    >>> expected_zero_fraction(torch.tensor([0.0, 0.5, 1.0]), 16, 0.4)
    tensor([1.0000, 0.5764, 1.0000], dtype=torch.float64)
    """
    p = as_real_tensor(p, "p").double()
    _check_rates(p)
    g = check_group_size(group_size, group_size)
    zeros = gate_zero_counts(g, k, method).double() / g  # (G+1,)
    return _zero_share(binomial_pmf(p, g), zeros, drop_all_equal)


def expected_zero_fraction_beta(
    a: float,
    b: float,
    group_size: int,
    k: float,
    method: str = DEFAULT_QUANTILE_METHOD,
    *,
    drop_all_equal: bool = False,
) -> float:
    r"""E[zero-advantage fraction] when per-prompt success rates follow Beta(a, b), exact: the success count is
    Beta-Binomial(G, a, b). ``drop_all_equal``: as in :func:`expected_zero_fraction`.

    >>> round(expected_zero_fraction_beta(1.0, 1.0, 16, 0.4), 4)   # p uniform: 206 / (16 * 17)
    0.7574
    """
    a, b = check_positive(a, "a"), check_positive(b, "b")
    g = check_group_size(group_size, group_size)
    zeros = gate_zero_counts(g, k, method).double() / g
    return float(_zero_share(_beta_binomial_pmf(a, b, g), zeros, drop_all_equal))


def sampled_zero_fraction(
    p, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD, *, seed: int = 0
) -> float:
    r"""The share of QAE advantages exactly 0 in one sampled group of G per success rate in ``p``.

    >>> sampled_zero_fraction(torch.full((2000,), 0.5), 16, 0.4) - 0.5764 < 0.02
    True
    """
    return sampled_zero_sources(p, group_size, k, method, seed=seed).total


def sampled_zero_fraction_beta(
    a: float, b: float, group_size: int, ks, method: str = DEFAULT_QUANTILE_METHOD, *, n_prompts: int
) -> list[float]:
    r"""Sampled :func:`expected_zero_fraction_beta` at each K of ``ks``: ``n_prompts`` rates from Beta(a, b) (torch's
    global generator: seed it), then :func:`sampled_zero_fraction` at the i-th K with ``seed=i``.

    >>> _ = torch.manual_seed(0)
    >>> [round(x, 1) for x in sampled_zero_fraction_beta(0.5, 0.5, 16, [0.4], n_prompts=4000)]
    [0.8]
    """
    a, b = check_positive(a, "a"), check_positive(b, "b")
    p = torch.distributions.Beta(a, b).sample((check_int(n_prompts, "n_prompts", 1),)).double()  # (P,)
    return [sampled_zero_fraction(p, group_size, k, method, seed=i) for i, k in enumerate(check_k_list(ks))]


class ZeroSources(NamedTuple):
    r"""Where zero advantages come from, as shares of all responses: ``all_equal`` groups (A = 0 under any
    baseline) and the ``gate`` (the failures of a hard mixed group, the successes of an easy one).

    >>> ZeroSources(0.1, 0.6).total
    0.7
    """

    all_equal: float | torch.Tensor
    gate: float | torch.Tensor

    @property
    def total(self) -> float | torch.Tensor:
        r"""The whole share of responses with A = 0: ``all_equal + gate``."""
        return self.all_equal + self.gate


def _sources(pmf: torch.Tensor, zeros: torch.Tensor) -> ZeroSources:
    """Split sum_c P(c) zeros(c) into the all-equal counts c in {0, G} and the mixed ones."""
    all_equal = pmf[..., 0] * zeros[0] + pmf[..., -1] * zeros[-1]
    return ZeroSources(all_equal, (pmf[..., 1:-1] * zeros[1:-1]).sum(-1))


def zero_sources(p, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD) -> ZeroSources:
    r""":func:`expected_zero_fraction` split into its two sources (:class:`ZeroSources`), each of p's shape.

    >>> src = zero_sources(torch.tensor([0.0, 0.5]), 2, 0.4)  # G = 2, K = 0.4: c = 1 is hard, its failure gets 0
    >>> src.all_equal.tolist(), src.gate.tolist(), src.total.tolist()
    ([1.0, 0.5], [0.0, 0.25], [1.0, 0.75])
    """
    p = as_real_tensor(p, "p").double()
    _check_rates(p)
    g = check_group_size(group_size, group_size)
    return _sources(binomial_pmf(p, g), gate_zero_counts(g, k, method).double() / g)


def zero_sources_beta(
    a: float, b: float, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD
) -> ZeroSources:
    r""":func:`zero_sources` averaged over success rates p ~ Beta(a, b), exact (Beta-Binomial), as floats; their
    total is :func:`expected_zero_fraction_beta`.

    >>> src = zero_sources_beta(1.0, 1.0, 16, 0.4)   # p uniform: a count c has probability 1/17
    >>> round(src.all_equal, 4), round(src.total, 4)  # 2/17 of the groups are all-equal; 206 / (16 * 17) in all
    (0.1176, 0.7574)
    """
    a, b = check_positive(a, "a"), check_positive(b, "b")
    g = check_group_size(group_size, group_size)
    src = _sources(_beta_binomial_pmf(a, b, g), gate_zero_counts(g, k, method).double() / g)
    return ZeroSources(float(src.all_equal), float(src.gate))


def sampled_zero_sources(
    p, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD, *, seed: int = 0
) -> ZeroSources:
    r""":func:`sampled_zero_fraction` split into its two sources (:class:`ZeroSources`, floats).

    >>> src = sampled_zero_sources(torch.rand(4000, generator=torch.Generator().manual_seed(0)), 16, 0.4)
    >>> abs(src.total - zero_sources_beta(1.0, 1.0, 16, 0.4).total) < 0.02
    True
    """
    p = as_real_tensor(p, "p", ndim=1).double()
    _check_rates(p)
    g = check_group_size(group_size, group_size)
    gen = torch.Generator().manual_seed(check_int(seed, "seed", 0))
    rewards = (torch.rand(p.shape[0], g, generator=gen, dtype=torch.float64) < p[:, None]).double()  # (P, G)
    adv = group_advantages(rewards.reshape(-1), g, baseline="quantile", k=k, quantile_method=method, scale="none")
    zero = (adv.view(-1, g) == 0).double()  # (P, G)
    equal = (rewards.amax(1) == rewards.amin(1))[:, None]  # (P, 1): an all-right or all-wrong group
    n = max(zero.numel(), 1)
    return ZeroSources(float((zero * equal).sum()) / n, float((zero * ~equal).sum()) / n)


def advantage_extremes(
    group_size: int, k: float, *, baseline: str = DEFAULT_BASELINE, scale: str = DEFAULT_SCALE
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The largest and the smallest advantage in a binary group with c correct, for c = 0..G: two (G+1,) tensors.

    >>> hi, lo = advantage_extremes(4, 0.4, scale="none")  # QAE: b_K = 0 for c <= 2, 1 above
    >>> hi.tolist(), lo.tolist()
    ([0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0, 0.0])
    """
    g = check_group_size(group_size, group_size)
    adv = group_advantages(canonical_groups(g), g, baseline=baseline, k=k, scale=scale).view(g + 1, g)
    return adv.amax(1), adv.amin(1)


def group_advantage_rows(group_size: int, k: float, counts, baselines=("mean", "quantile")) -> list[dict]:
    r"""Rewards and advantages (GRPO's std scaling) in a binary group with c correct, correct first: one dict
    ``c``, ``baseline``, ``rewards``, ``advantages`` per c of ``counts`` and baseline.

    >>> [(row["baseline"], row["rewards"], [round(a, 4) for a in row["advantages"]])
    ...  for row in group_advantage_rows(2, 0.4, [1])]
    [('mean', [1.0, 0.0], [0.7071, -0.7071]), ('quantile', [1.0, 0.0], [1.4142, 0.0])]
    """
    g = check_group_size(group_size, group_size)
    groups = canonical_groups(g).view(g + 1, g)  # row c: c ones first
    rows = []
    for c in counts:
        r = groups[check_int(c, "c", 0, g)]
        rows += [
            {
                "c": c,
                "baseline": b,
                "rewards": r.tolist(),
                "advantages": group_advantages(r, g, baseline=b, k=k).tolist(),
            }
            for b in baselines
        ]
    return rows


SPREADS = {
    "uniform on (0, 1): Beta(1, 1)": (1.0, 1.0),
    "U-shaped: Beta(0.5, 0.5)": (0.5, 0.5),
    "centred on 0.5: Beta(4, 4)": (4.0, 4.0),
}  # spreads of difficulty across a batch's prompts, by name: the rows of zero_share_rows


def zero_share_rows(measured: ZeroSources, n_prompts: int, group_size: int, k: float) -> list[dict]:
    r"""The share of responses with A = 0 in percent, by source, as table rows: notebook 01's ``measured`` batch
    (uniform success rates), then the exact share for each spread of :data:`SPREADS` (``prompts`` None).

    >>> rows = zero_share_rows(ZeroSources(0.118, 0.638), 20000, 16, 0.4)
    >>> [row["success rates"] for row in rows][1:]
    ['uniform on (0, 1): Beta(1, 1)', 'U-shaped: Beta(0.5, 0.5)', 'centred on 0.5: Beta(4, 4)']
    >>> [round(row["A = 0 (%)"], 1) for row in rows], rows[0]["prompts"], rows[1]["prompts"]
    ([75.6, 75.7, 82.3, 65.3], 20000, None)
    """
    if not isinstance(measured, ZeroSources):
        raise ValueError(f"measured must be a ZeroSources (sampled_zero_sources), got {type(measured).__name__}")
    n_prompts, g = check_int(n_prompts, "n_prompts", 1), check_group_size(group_size, group_size)
    batches = [("uniform on (0, 1), sampled", n_prompts, measured)]
    batches += [(name, None, zero_sources_beta(a, b, g, k)) for name, (a, b) in SPREADS.items()]
    return [
        {
            "success rates": name,
            "prompts": n,
            "A = 0 (%)": 100 * float(src.total),
            "all-equal groups (%)": 100 * float(src.all_equal),
            "QAE's gate (%)": 100 * float(src.gate),
        }
        for name, n, src in batches
    ]
