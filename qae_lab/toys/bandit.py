r"""The toy softmax bandit behind QAE's Prop. 4.2: three models of one update, their entropy change, and training.

QAE (arXiv 2509.22611, sec. 4, Prop. 4.2) reduces a prompt to a bandit: each whole response y is one action of
pi = softmax(z) over A actions, with reward r(y) in {0, 1} and success rate p = E_pi r. A small logit step dz changes
the entropy by (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs")

    dH ~= -Cov_{y~pi}(log pi(y), dz(y))                                            (first order)

Implementer's notes: docs/implementation.md, section ``qae_lab.toys.bandit``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from qae_lab.methods import DEFAULT_BASELINE, DEFAULT_K, DEFAULT_QUANTILE_METHOD, DEFAULT_SCALE
from qae_lab._checks import (
    as_real_tensor,
    check_choice,
    check_finite_scalar,
    check_group_size,
    check_int,
    check_k,
    check_k_list,
    check_positive,
)
from qae_lab.advantages import BASELINES, QUANTILE_METHODS, SCALES, group_advantages, hard_regime, quantile_rank
from qae_lab.toys.sparsity import binomial_pmf

__all__ = [
    "entropy",
    "entropy_change_exact",
    "entropy_change_first_order",
    "first_order_errors",
    "loglog_slope",
    "identity_step",
    "expected_pg_step",
    "baseline_pg_step",
    "STEP_MODELS",
    "entropy_after_step",
    "knob_slope",
    "identity_entropy_change",
    "population_quantile",
    "check_proposition_42",
    "proposition_42_sweep",
    "make_bandits",
    "KnobCurve",
    "knob_curve",
    "sample_group_steps",
    "mc_entropy_change",
    "scale_factor",
    "mean_scale_factor",
    "quantile_scale_factor",
    "StepMoments",
    "sampled_step_moments",
    "sampled_entropy_change",
    "rms_normalised_step",
    "mc_entropy_curve",
    "OPTIMIZERS",
    "simulate_training",
    "entropy_by_start",
]


def _logits(z, name: str = "z") -> torch.Tensor:
    z = as_real_tensor(z, name)
    if z.dim() < 1 or z.shape[-1] < 2:
        raise ValueError(f"{name} must have an action dimension A >= 2 last, got shape {tuple(z.shape)}")
    return z.double()


def _rewards_like(r, z: torch.Tensor) -> torch.Tensor:
    r = as_real_tensor(r, "r").double()
    if r.shape[-1] != z.shape[-1]:
        raise ValueError(f"r must have {z.shape[-1]} actions in its last dimension like z, got shape {tuple(r.shape)}")
    return r


def _cov(pi: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cov_{a~pi}(x_a, y_a) over the last dimension."""
    ex = (pi * x).sum(-1, keepdim=True)
    ey = (pi * y).sum(-1, keepdim=True)
    return (pi * (x - ex) * (y - ey)).sum(-1)


def entropy(z) -> torch.Tensor:
    r"""Shannon entropy H(pi) = -sum_a pi_a log pi_a of pi = softmax(z), in nats; (..., A) -> (...) float64.

    >>> round(entropy(torch.zeros(4)).item(), 6) == round(math.log(4), 6)
    True
    """
    log_pi = torch.log_softmax(_logits(z), -1)
    return -(log_pi.exp() * log_pi).sum(-1)


def _step_like(dz, z: torch.Tensor, name: str = "dz") -> torch.Tensor:
    dz = _logits(dz, name)
    if dz.shape != z.shape:
        raise ValueError(f"{name} must have the shape of z {tuple(z.shape)}, got {tuple(dz.shape)}")
    return dz


def entropy_change_exact(z, dz) -> torch.Tensor:
    r"""The exact entropy change H(softmax(z + dz)) - H(softmax(z)); (..., A) -> (...).

    >>> entropy_change_exact(torch.zeros(3), torch.zeros(3)).item()
    0.0
    """
    z = _logits(z)
    return entropy(z + _step_like(dz, z)) - entropy(z)


def entropy_change_first_order(z, dz) -> torch.Tensor:
    r"""First-order entropy change dH ~= -Cov_{y~pi}(log pi(y), dz(y)) (Cui et al. 2025).

    >>> z = torch.tensor([2.0, 0.0, -1.0]); dz = 1e-4 * torch.tensor([1.0, 0.0, 0.0])
    >>> bool(torch.isclose(entropy_change_first_order(z, dz), entropy_change_exact(z, dz), rtol=1e-3))
    True
    """
    z = _logits(z)
    log_pi = torch.log_softmax(z, -1)
    return -_cov(log_pi.exp(), log_pi, _step_like(dz, z))


def first_order_errors(z, direction, etas) -> torch.Tensor:
    r"""|exact - first-order| entropy change for steps dz = eta * direction: (A,), (A,), (E,) -> (E,); O(eta^2).

    >>> err = first_order_errors(torch.tensor([1.0, 0, -1]), torch.tensor([0.3, -0.2, 0.5]), [1e-2, 1e-3])
    >>> round(loglog_slope([1e-2, 1e-3], err), 1)
    2.0
    """
    z = _logits(z)
    d = _step_like(direction, z, "direction")
    etas = as_real_tensor(etas, "etas", ndim=1).double()
    if not bool((etas > 0).all()):
        raise ValueError("etas must all be > 0")
    dz = etas[:, None] * d  # (E, A)
    zz = z.expand_as(dz)
    return (entropy_change_exact(zz, dz) - entropy_change_first_order(zz, dz)).abs()


def loglog_slope(x, y) -> float:
    r"""Least-squares slope of log y against log x (x, y > 0), e.g. an error's order in eta.

    >>> loglog_slope([1.0, 10.0, 100.0], [3.0, 300.0, 30000.0])
    2.0
    """
    lx = torch.log(as_real_tensor(x, "x", ndim=1).double())
    ly = torch.log(as_real_tensor(y, "y", ndim=1).double())
    if lx.shape != ly.shape or lx.numel() < 2 or not bool(torch.isfinite(lx).all() & torch.isfinite(ly).all()):
        raise ValueError("x and y must be positive, of the same length >= 2")
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return round(float((lx * ly).sum() / (lx * lx).sum()), 12)


def identity_step(z, r, b, eta: float) -> torch.Tensor:
    r"""Step model (a): dz(y) = eta * pi(y) * (r(y) - b), the identity's model; b broadcasts to z's (...).

    >>> identity_step(torch.zeros(2), torch.tensor([1.0, 0.0]), 0.0, 1.0)
    tensor([0.5000, 0.0000], dtype=torch.float64)
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    b = as_real_tensor(b, "b").double()
    eta = check_positive(eta, "eta")
    # dz = eta * pi * (r - b)
    return eta * torch.softmax(z, -1) * (r - b[..., None] if b.dim() else r - b)


def expected_pg_step(z, r, eta: float) -> torch.Tensor:
    r"""Step model (b): the exact expected softmax policy gradient dz = eta pi (r - E_pi r); a constant b cancels.

    >>> expected_pg_step(torch.zeros(2), torch.tensor([1.0, 0.0]), 1.0)
    tensor([ 0.2500, -0.2500], dtype=torch.float64)
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    pi = torch.softmax(z, -1)
    return check_positive(eta, "eta") * pi * (r - (pi * r).sum(-1, keepdim=True))


def baseline_pg_step(z, r, b, eta: float) -> torch.Tensor:
    r"""Step model (b) with its baseline b written out, dz = eta sum_y pi(y) (r(y) - b) (e_y - pi): b's term
    eta b (pi - pi) = 0 is computed, not assumed.

    >>> z, r = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 1.0, 1.0])
    >>> bool(torch.allclose(baseline_pg_step(z, r, 0.0, 0.5), baseline_pg_step(z, r, 1.0, 0.5)))
    True
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    b = as_real_tensor(b, "b").double()
    eta = check_positive(eta, "eta")
    pi = torch.softmax(z, -1)
    # w(y) = pi(y) (r(y) - b)
    w = pi * (r - b[..., None] if b.dim() else r - b)  # (..., A)
    # dz = eta sum_y w(y) (e_y - pi) = eta (w - pi sum_y w(y))
    return eta * (w - pi * w.sum(-1, keepdim=True))


STEP_MODELS = ("identity", "expected")  # step model (a) and (b)


def entropy_after_step(z, r, b, eta: float, *, model: str) -> torch.Tensor:
    r"""H(softmax(z + dz)) after one step with baseline b of model (a) ``"identity"`` (a higher b, a higher
    entropy: the linear knob) or (b) ``"expected"`` (b cancels).

    >>> z, r = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 1.0, 1.0])
    >>> [round(entropy_after_step(z, r, b, 0.5, model="expected").item(), 6) for b in (0.0, 1.0)]
    [0.87687, 0.87687]
    >>> [round(entropy_after_step(z, r, b, 0.5, model="identity").item(), 6) for b in (0.0, 1.0)]
    [0.854993, 0.917806]
    """
    check_choice(model, "model", STEP_MODELS)
    step = identity_step if model == "identity" else baseline_pg_step
    z = _logits(z)
    return entropy(z + step(z, r, b, eta))


def knob_slope(z, eta: float) -> torch.Tensor:
    r"""Slope of the linear knob, d(dH)/db = eta * Cov_pi(log pi, pi) >= 0 (0 iff pi uniform).

    >>> knob_slope(torch.zeros(3), 1.0).abs().item() < 1e-15, knob_slope(torch.tensor([1.0, 0, 0]), 1.0).item() > 0
    (True, True)
    """
    z = _logits(z)
    log_pi = torch.log_softmax(z, -1)
    return check_positive(eta, "eta") * _cov(log_pi.exp(), log_pi, log_pi.exp())


def identity_entropy_change(z, r, b, eta: float) -> torch.Tensor:
    r"""First-order dH(b) of step model (a), dH(0) + b * eta * Cov_pi(log pi, pi), for b () or (M,) -> b's shape.

    >>> z, r = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 1.0, 0.0])
    >>> d = identity_entropy_change(z, r, torch.tensor([0.0, 1.0]), 0.1)
    >>> bool(torch.isclose(d[1] - d[0], knob_slope(z, 0.1)))
    True
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    b = as_real_tensor(b, "b").double()
    bb = b.reshape(-1)  # (M,)
    dz = identity_step(z.expand(bb.shape[0], -1), r.expand(bb.shape[0], -1), bb, eta)  # (M, A)
    return entropy_change_first_order(z.expand_as(dz), dz).reshape(b.shape)


def population_quantile(z, r, k: float) -> torch.Tensor:
    r"""b_K = inf{x : P_{y~pi}(r(y) <= x) >= K}, the K-quantile of the reward under pi.

    >>> population_quantile(torch.zeros(4), torch.tensor([1.0, 1, 1, 0]), 0.4).item()  # p = 0.75 > 0.6
    1.0
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    k = check_k(k)
    pi = torch.softmax(z, -1)
    r_sorted, order = torch.sort(r, -1)
    cdf = torch.cumsum(pi.gather(-1, order), -1)  # F(r_(j)) for the sorted rewards
    idx = (cdf < k - 1e-12).sum(-1, keepdim=True).clamp(max=r.shape[-1] - 1)  # first j with F >= K
    return r_sorted.gather(-1, idx).squeeze(-1)


def check_proposition_42(z, r, k: float, eta: float, n_b: int = 101) -> dict[str, float | bool | str]:
    r"""Check QAE's Prop. 4.2 (sec. 4) for one policy (A,), binary rewards, model (a): ``holds_*``, dH(b_K) <= dH(b)
    for ``n_b`` baselines b in [0, 1] if hard (p <= 1-K), >= if easy, to first order and exactly, up to 1e-15.

    >>> z = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    >>> out = check_proposition_42(z, torch.tensor([1.0, 0, 0, 0]), 0.4, 0.1)
    >>> round(out["p"], 6), out["regime"], out["b_k"], out["holds_first_order"], out["holds_exact"]
    (0.1, 'hard', 0.0, True, True)
    >>> out = check_proposition_42(z, torch.tensor([0.0, 1, 1, 1]), 0.4, 0.1)
    >>> round(out["p"], 6), out["regime"], out["b_k"], out["holds_first_order"], out["holds_exact"]
    (0.9, 'easy', 1.0, True, True)
    """
    z, r = _logits(z), _rewards_like(r, _logits(z))
    check_int(n_b, "n_b", 2)
    if z.dim() != 1 or not bool(((r == 0) | (r == 1)).all()):
        raise ValueError("check_proposition_42 needs one policy z of shape (A,) and binary rewards r in {0, 1}")
    b_k = population_quantile(z, r, k)
    b = torch.cat([b_k.reshape(1), torch.linspace(0, 1, n_b, dtype=torch.float64)])  # (1 + n_b,)
    first = identity_entropy_change(z, r, b, eta)
    steps = identity_step(z.expand(b.shape[0], -1), r.expand(b.shape[0], -1), b, eta)
    exact = entropy_change_exact(z.expand_as(steps), steps)
    p = float((torch.softmax(z, -1) * r).sum())
    hard = p <= 1 - check_k(k) + 1e-12
    sign = 1.0 if hard else -1.0  # hard: dH(b_K) is the minimum; easy: the maximum
    return {
        "p": p,
        "regime": "hard" if hard else "easy",
        "b_k": float(b_k),
        "slope": float(knob_slope(z, eta)),
        "holds_first_order": bool((sign * (first[1:] - first[0]) >= -1e-15).all()),
        "holds_exact": bool((sign * (exact[1:] - exact[0]) >= -1e-15).all()),
    }


def proposition_42_sweep(
    ps, ks, *, n_policies: int, n_actions: int = 16, sharpness: float = 1.5, eta: float = 1e-3, seed: int = 0
) -> dict[str, int]:
    r"""Check Prop. 4.2 on ``n_policies`` random bandits per p in ``ps`` and K in ``ks``; counts of each outcome
    (``uniform``: slope <= 1e-15, where it holds only with equality).

    >>> proposition_42_sweep([0.2, 0.8], [0.4], n_policies=3)["violations_first_order"]
    0
    """
    gen = torch.Generator().manual_seed(seed)
    counts = dict.fromkeys(("checked", "hard", "easy", "violations_first_order", "violations_exact", "uniform"), 0)
    ps = as_real_tensor(ps, "ps", ndim=1).double()
    for p in ps.repeat_interleave(n_policies):
        z, r = make_bandits(p.reshape(1), n_actions, sharpness, gen)
        for k in check_k_list(ks):
            out = check_proposition_42(z[0], r[0], k, eta)
            counts["checked"] += 1
            counts[out["regime"]] += 1
            counts["violations_first_order"] += not out["holds_first_order"]
            counts["violations_exact"] += not out["holds_exact"]
            counts["uniform"] += out["slope"] <= 1e-15
    return counts


def make_bandits(
    p, n_actions: int, sharpness: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Softmax bandits with exact success rates: z (P, A) logits ``sharpness * N(0, 1)``, r (P, A) 0/1 rewards,
    half the actions (at least one) correct, their logits shifted together so that E_pi[r] = p exactly.

    >>> z, r = make_bandits(torch.tensor([0.1, 0.9]), 6, 1.0, torch.Generator().manual_seed(0))
    >>> (torch.softmax(z, -1) * r).sum(-1)
    tensor([0.1000, 0.9000], dtype=torch.float64)
    """
    p = as_real_tensor(p, "p", ndim=1).double()
    if not bool(((p > 0) & (p < 1)).all()):
        raise ValueError("p must lie in the open interval (0, 1) for every bandit")
    check_int(n_actions, "n_actions", 2)
    sharpness = check_finite_scalar(sharpness, "sharpness")
    if sharpness < 0:
        raise ValueError(f"sharpness must be >= 0, got {sharpness}")
    n = p.shape[0]
    z = sharpness * torch.randn(n, n_actions, generator=generator, dtype=torch.float64)  # (P, A)
    order = torch.rand(n, n_actions, generator=generator).argsort(-1)
    r = (order < max(1, n_actions // 2)).double()  # (P, A), a random half correct
    log_s1 = torch.logsumexp(z.masked_fill(r == 0, -math.inf), -1)
    log_s0 = torch.logsumexp(z.masked_fill(r == 1, -math.inf), -1)
    # shift c on correct logits: S1 e^c / (S1 e^c + S0) = p
    c = torch.log(p) - torch.log1p(-p) + log_s0 - log_s1  # (P,)
    return z + c[:, None] * r, r


class KnobCurve(NamedTuple):
    r"""One bandit's linear knob: (M,) baselines ``b`` in [0, 1], first-order ``dh`` of model (a), ``b_k``,
    ``slope`` (eta Cov_pi(log pi, pi)) and ``hard`` (p <= 1 - K).

    >>> KnobCurve(torch.zeros(2), torch.zeros(2), 0.0, 0.0, True).hard
    True
    """

    b: torch.Tensor
    dh: torch.Tensor
    b_k: float
    slope: float
    hard: bool


def knob_curve(
    p: float, k: float, eta: float, sharpness: float, *, n_actions: int = 12, n_baselines: int = 51, seed: int = 1
) -> KnobCurve:
    r"""The linear knob of one bandit with success rate ``p`` at ``n_baselines`` baselines: notebook 02's figure.

    >>> c = knob_curve(0.3, 0.4, 0.5, 1.5)
    >>> c.b_k, c.hard, c.slope > 0, bool(torch.isclose(c.dh[-1] - c.dh[0], torch.tensor(c.slope, dtype=c.dh.dtype)))
    (0.0, True, True, True)
    """
    check_int(n_baselines, "n_baselines", 2)
    gen = torch.Generator().manual_seed(check_int(seed, "seed", 0))
    z, r = make_bandits(torch.tensor([p], dtype=torch.float64), n_actions, sharpness, gen)
    b = torch.linspace(0, 1, n_baselines, dtype=torch.float64)  # (M,)
    return KnobCurve(
        b,
        identity_entropy_change(z[0], r[0], b, eta),
        float(population_quantile(z[0], r[0], k)),
        float(knob_slope(z[0], eta)),
        p <= 1 - check_k(k),
    )


def _group_steps(pi: torch.Tensor, r: torch.Tensor, g: int, eta: float, generator, opts: dict) -> tuple:
    """G responses y_i ~ pi per row of (M, A) pi and rewards r: (M, A) dz = (eta/G) sum_i A_i (e_{y_i} - pi), (M, G)
    rewards and advantages."""
    actions = torch.multinomial(pi, g, replacement=True, generator=generator)  # (M, G)
    rewards = r.gather(1, actions)  # (M, G)
    adv = group_advantages(rewards.reshape(-1), g, **opts).view(-1, g)
    dz = torch.zeros_like(pi).scatter_add_(1, actions, adv)  # (M, A): sum_i A_i e_{y_i}
    return eta / g * (dz - pi * adv.sum(1, keepdim=True)), rewards, adv


def sample_group_steps(
    z,
    r,
    group_size: int,
    n_groups: int,
    *,
    baseline: str = DEFAULT_BASELINE,
    k: float = DEFAULT_K,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    scale: str = DEFAULT_SCALE,
    eta: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Step model (c): M sampled-group REINFORCE steps dz = (eta/G) sum_i A_i (e_{y_i} - pi), y_i ~ pi, from one
    z (A,), advantages by :func:`qae_lab.advantages.group_advantages`: (M, A) steps and (M, G) rewards.

    >>> dz, rw = sample_group_steps(torch.zeros(3), torch.tensor([1.0, 0, 0]), 4, 5,
    ...                             generator=torch.Generator().manual_seed(0))
    >>> dz.shape, rw.shape
    (torch.Size([5, 3]), torch.Size([5, 4]))
    """
    z = _logits(z)
    if z.dim() != 1:
        raise ValueError(f"z must be a single policy of shape (A,), got {tuple(z.shape)}")
    r = _rewards_like(r, z)
    check_int(n_groups, "n_groups", 1)
    check_group_size(group_size, group_size)
    pi, eta = torch.softmax(z, -1).expand(n_groups, -1), check_positive(eta, "eta")
    opts = {"baseline": baseline, "k": k, "quantile_method": quantile_method, "scale": scale}
    return _group_steps(pi, r.expand(n_groups, -1), group_size, eta, generator, opts)[:2]


def mc_entropy_change(
    z, r, group_size: int, n_groups: int, *, eta: float = 1.0, generator: torch.Generator | None = None, **opts
) -> dict[str, float]:
    r"""Monte-Carlo E[dH] (mean, std, stderr of the exact change) over sampled-group steps (c) from one policy,
    the share of zero advantages, and model (b)'s exact dH (``expected_pg``); ``opts``: as :func:`sample_group_steps`.

    >>> out = mc_entropy_change(torch.tensor([1.0, 0, 0, -1]), torch.tensor([1.0, 0, 1, 0]), 8, 200,
    ...                         eta=0.5, generator=torch.Generator().manual_seed(0))
    >>> sorted(out)
    ['expected_pg', 'mean', 'std', 'stderr', 'zero_adv_frac']
    """
    dz, rewards = sample_group_steps(z, r, group_size, n_groups, eta=eta, generator=generator, **opts)
    z = _logits(z)
    dh = entropy_change_exact(z.expand_as(dz), dz)  # (M,)
    adv = group_advantages(rewards.reshape(-1), group_size, **opts)
    std = float(dh.std()) if n_groups > 1 else 0.0
    return {
        "mean": float(dh.mean()),
        "std": std,
        "stderr": std / math.sqrt(n_groups),
        "zero_adv_frac": float((adv == 0).double().mean()),
        "expected_pg": float(entropy_change_exact(z, expected_pg_step(z, r, eta))),
    }


# ---------------------------------------------------------------- step model (c) in expectation


def _group_opts(baseline: str, k: float, quantile_method: str, scale: str) -> dict:
    """The advantage settings of one prompt's group; "batch" ties a prompt's advantages to the others and is refused."""
    if check_choice(scale, "scale", SCALES) == "batch":
        raise ValueError("scale must be 'group' or 'none' here: 'batch' ties a prompt to the other prompts")
    return {"baseline": baseline, "k": k, "quantile_method": quantile_method, "scale": scale}


def _fixed_group_advantages(lead: torch.Tensor, g: int, opts: dict) -> torch.Tensor:
    """Advantages of the groups that open with the rewards ``lead`` (..., L), then hold S ones and G-L-S zeros, for
    S = 0..G-L: (..., G-L+1, G)."""
    n_lead = lead.shape[-1]
    s = torch.arange(g - n_lead + 1)  # S, the successes among the others
    others = (torch.arange(g - n_lead)[None, :] < s[:, None]).double()  # (G-L+1, G-L)
    lead = lead[..., None, :].expand(*lead.shape[:-1], s.shape[0], n_lead)  # (..., G-L+1, L)
    groups = torch.cat([lead, others.expand(*lead.shape[:-1], g - n_lead)], -1)  # (..., G-L+1, G)
    return group_advantages(groups.reshape(-1), g, **opts).view(groups.shape)


def _rates(p) -> torch.Tensor:
    p = as_real_tensor(p, "p").double()
    if not bool(((p >= 0) & (p <= 1)).all()):
        raise ValueError("p must lie in [0, 1]")
    return p


_BIT = torch.tensor([0.0, 1.0], dtype=torch.float64)  # a response's reward x


def scale_factor(
    p,
    group_size: int,
    *,
    baseline=DEFAULT_BASELINE,
    k=DEFAULT_K,
    quantile_method=DEFAULT_QUANTILE_METHOD,
    scale=DEFAULT_SCALE,
):
    r"""E[dz of step (c)] = scale * step (b): E[A_1 (e_{y_1} - pi)] = (h(1) - h(0)) pi (r - p), h(x) = E_S[A(x, S)]
    the mean advantage of reward x when S ~ Binomial(G - 1, p) others succeed. p: any shape in [0, 1].

    Without the std: (G-1)/G for the mean, about 1 for QAE on a hard prompt:

    >>> [round(scale_factor(0.1, 8, baseline=b, scale="none").item(), 4) for b in ("mean", "quantile")]
    [0.875, 0.9974]
    """
    p, g = _rates(p), check_group_size(group_size, group_size)
    a = _fixed_group_advantages(_BIT[:, None], g, _group_opts(baseline, k, quantile_method, scale))[..., 0]  # (2, G)
    # scale = h(1) - h(0),  h(x) = sum_S P(S) A(x, S),  S ~ Binomial(G - 1, p)
    return binomial_pmf(p, g - 1) @ (a[1] - a[0])


def mean_scale_factor(group_size: int) -> float:
    r"""The mean baseline's :func:`scale_factor` without the std, 1 - 1/G whatever p (p_hat holds r_i with weight 1/G).

    >>> mean_scale_factor(8)
    0.875
    """
    g = check_group_size(group_size, group_size)
    # scale = 1 - 1/G
    return (g - 1) / g


def quantile_scale_factor(p, group_size: int, k: float) -> torch.Tensor:
    r"""QAE's :func:`scale_factor` without the std, the paper's quantile: 1 - P(S = G - ceil(K G)),
    S ~ Binomial(G - 1, p), the only S at which a response's own reward moves b_K. p: any shape, in [0, 1].

    >>> round(quantile_scale_factor(0.1, 8, 0.4).item(), 6)  # 1 - C(7, 4) 0.1^4 0.9^3
    0.997448
    """
    p, g = _rates(p), check_group_size(group_size, group_size)
    m = quantile_rank(check_k(k), g)  # b_K is the m-th smallest reward
    # scale = 1 - P(S = G - m)
    return 1 - binomial_pmf(p, g - 1)[..., g - m]


class StepMoments(NamedTuple):
    r"""Step (c)'s moments per unit step: ``scale``, ``mean`` (A,) E[dz] / eta, ``second`` (A, A) E[dz dz^T] / eta^2.

    >>> StepMoments(1.0, torch.zeros(2), torch.zeros(2, 2)).scale
    1.0
    """

    scale: float
    mean: torch.Tensor
    second: torch.Tensor


def sampled_step_moments(
    z,
    r,
    group_size: int,
    *,
    baseline=DEFAULT_BASELINE,
    k=DEFAULT_K,
    quantile_method=DEFAULT_QUANTILE_METHOD,
    scale=DEFAULT_SCALE,
):
    r"""E[dz] and E[dz dz^T] of step (c), dz = (eta/G) sum_i A_i u_i with u_i = e_{y_i} - pi: a :class:`StepMoments`.

    The responses are exchangeable and A_i depends on y_i only through r(y_i), so, with v = pi (r - p),

        E[dz dz^T] / eta^2 = (1/G) sum_y pi(y) q(r(y)) u_y u_y^T + (G-1)/G (m11 - m10 - m01 + m00) v v^T

    with q(x) = E_S[A(x, S)^2], S ~ Binomial(G-1, p), and m(x, x') = E[A_1 A_2 | r_1 = x, r_2 = x'] over the other
    G - 2. Exact over the success counts; z (A,), r (A,) in {0, 1}.

    >>> z, r = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([1.0, 0.0, 0.0])
    >>> mom = sampled_step_moments(z, r, 4, baseline="mean", scale="none")
    >>> bool(torch.allclose(mom.mean, 0.75 * expected_pg_step(z, r, 1.0))), tuple(mom.second.shape)
    (True, (3, 3))
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    if z.dim() != 1 or not bool(((r == 0) | (r == 1)).all()):
        raise ValueError("z must be one policy of shape (A,) and r its binary rewards in {0, 1}")
    g, opts = check_group_size(group_size, group_size), _group_opts(baseline, k, quantile_method, scale)
    pi = torch.softmax(z, -1)
    p = (pi * r).sum()
    a = _fixed_group_advantages(_BIT[:, None], g, opts)[..., 0]  # (2, G): A(x, S)
    w = binomial_pmf(p, g - 1)  # (G,)
    c, v = float(w @ (a[1] - a[0])), pi * (r - p)  # the scale factor; (A,)
    u = torch.eye(z.shape[0], dtype=torch.float64) - pi  # (A, A): row y is e_y - pi
    own = u.T @ ((pi * ((a**2) @ w)[r.long()])[:, None] * u)  # sum_y pi(y) q(r(y)) u_y u_y^T
    pairs = _fixed_group_advantages(torch.cartesian_prod(_BIT, _BIT).view(2, 2, 2), g, opts)  # (2, 2, G-1, G)
    m = (pairs[..., 0] * pairs[..., 1]) @ binomial_pmf(p, g - 2)  # (2, 2)
    # E[dz dz^T] / eta^2 = (1/G) E[A_1^2 u_1 u_1^T] + (G-1)/G E[A_1 A_2 u_1 u_2^T]
    second = (own + (g - 1) * (m[1, 1] - m[1, 0] - m[0, 1] + m[0, 0]) * torch.outer(v, v)) / g
    return StepMoments(c, c * v, second)


def sampled_entropy_change(z, r, group_size: int, eta: float, **kw) -> dict[str, float]:
    r"""E[dH] of one sampled-group step (c) to second order in eta, exact over the success counts:

        E[dH] = grad H . E[dz] + 1/2 tr(hess H E[dz dz^T]) + O(eta^3)

    ``first`` = ``scale`` * step (b)'s first-order dH; ``noise``: Cov(dz)'s part of ``second``.

    >>> z, r = torch.tensor([2.0, 0.0, -1.0, 0.5]), torch.tensor([0.0, 1.0, 0.0, 0.0])
    >>> out = sampled_entropy_change(z, r, 8, 0.01, baseline="mean", scale="none")
    >>> b = entropy_change_first_order(z, expected_pg_step(z, r, 0.01)).item()
    >>> round(out["first"] / b, 6), abs(out["second"]) < 1e-3 * abs(out["first"])
    (0.875, True)
    """
    mom = sampled_step_moments(z, r, group_size, **kw)
    z, eta = _logits(z), check_positive(eta, "eta")
    hess = torch.autograd.functional.hessian(lambda x: -(x.softmax(-1) * x.log_softmax(-1)).sum(), z)  # (A, A)
    first = float(entropy_change_first_order(z, eta * mom.mean))
    # E[dH]'s second-order term: eta^2/2 tr(hess E[dz dz^T] / eta^2)
    second = eta**2 / 2 * float((hess * mom.second).sum())
    noise = eta**2 / 2 * float((hess * (mom.second - torch.outer(mom.mean, mom.mean))).sum())
    return {"scale": mom.scale, "first": first, "second": second, "noise": noise, "total": first + second}


def rms_normalised_step(z, r, group_size: int, eta: float, **kw) -> torch.Tensor:
    r"""dz_a = eta E[g_a] / sqrt(E[g_a^2]), g = dz / eta of step (c): Adam's step once m -> E[g], v -> E[g^2] (its
    momentum's noise left out; the scale factor cancels). (A,); 0 where g_a is always 0.

    On a hard prompt QAE's zero-advantage side, the wrong responses, moves together; the mean moves them by pi:

    >>> z, r = torch.log(torch.tensor([0.7, 0.1, 0.05, 0.15])), torch.tensor([0.0, 1.0, 0.0, 0.0])
    >>> [[round(v, 2) for v in rms_normalised_step(z, r, 8, 1.0, baseline=b, scale="none").tolist()]
    ...  for b in ("mean", "quantile")]
    [[-0.7, 0.72, -0.37, -0.53], [-0.69, 0.69, -0.68, -0.69]]
    """
    mom = sampled_step_moments(z, r, group_size, **kw)
    rms = mom.second.diagonal().sqrt()  # (A,): sqrt(E[g_a^2])
    # dz_a = eta E[g_a] / sqrt(E[g_a^2])
    step = torch.where(rms > 0, mom.mean / rms.clamp_min(torch.finfo(rms.dtype).tiny), torch.zeros_like(rms))
    return check_positive(eta, "eta") * step


def mc_entropy_curve(
    ps,
    *,
    group_size: int,
    n_groups: int,
    k: float = DEFAULT_K,
    scale: str = DEFAULT_SCALE,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    n_actions: int = 16,
    sharpness: float = 1.5,
    eta: float = 0.5,
    seed: int = 0,
) -> dict[str, list[float]]:
    r"""Monte-Carlo E[dH] of one sampled-group step, mean vs quantile baseline, per p in ``ps`` (same base logits),
    beside model (b)'s exact dH, model (a)'s at b = p and b_K, and :func:`sampled_entropy_change` (NaN for "batch").

    >>> out = mc_entropy_curve([0.3, 0.7], group_size=8, n_groups=50)
    >>> len(out["mean"]), len(out["identity_quantile"])
    (2, 2)
    """
    ps = as_real_tensor(ps, "ps", ndim=1).double()
    # the same base logits for every p (one seed), so the curve varies p and nothing else
    bandits = [make_bandits(p.reshape(1), n_actions, sharpness, torch.Generator().manual_seed(seed)) for p in ps]
    z, r = torch.cat([b[0] for b in bandits]), torch.cat([b[1] for b in bandits])
    keys = ("mean", "mean_stderr", "quantile", "quantile_stderr", "mean_zero_frac", "quantile_zero_frac")
    keys += ("expected_pg", "identity_mean", "identity_quantile", "computed_mean", "computed_quantile")
    out: dict[str, list[float]] = {key: [] for key in keys}
    for i in range(ps.shape[0]):
        for baseline in BASELINES:
            opts = {"baseline": baseline, "k": k, "quantile_method": quantile_method, "scale": scale}
            gen = torch.Generator().manual_seed(seed + 1 + i)
            mc = mc_entropy_change(z[i], r[i], group_size, n_groups, eta=eta, generator=gen, **opts)
            out[baseline].append(mc["mean"])
            out[f"{baseline}_stderr"].append(mc["stderr"])
            out[f"{baseline}_zero_frac"].append(mc["zero_adv_frac"])
            # step (c)'s E[dH] to eta^2, computed; "batch" ties a prompt to the others, which it does not model
            computed = (
                sampled_entropy_change(z[i], r[i], group_size, eta, **opts)["total"] if scale != "batch" else math.nan
            )
            out[f"computed_{baseline}"].append(computed)
        out["expected_pg"].append(mc["expected_pg"])
        b = torch.stack([ps[i], population_quantile(z[i], r[i], k)])
        ident = identity_entropy_change(z[i], r[i], b, eta)
        out["identity_mean"].append(float(ident[0]))
        out["identity_quantile"].append(float(ident[1]))
    return out


OPTIMIZERS = ("sgd", "adam", "adam_scalar")  # simulate_training's update rules


def _adam_ascent(
    z: torch.Tensor, grad: torch.Tensor, state: dict, *, eta: float, scalar: bool
) -> tuple[torch.Tensor, dict]:
    """One Adam step up ``grad`` (P, A), betas (0.9, 0.999), eps 1e-8 (torch's defaults); ``scalar``: one second
    moment per prompt, the mean of grad^2 over its A logits, instead of one per logit."""
    t = state.get("t", 0) + 1
    m = 0.9 * state.get("m", torch.zeros_like(grad)) + 0.1 * grad  # (P, A)
    sq = (grad**2).mean(-1, keepdim=True) if scalar else grad**2  # (P, 1) or (P, A)
    v = 0.999 * state.get("v", torch.zeros_like(sq)) + 0.001 * sq
    # z <- z + eta m_hat / (sqrt(v_hat) + eps),  m_hat = m / (1 - 0.9^t),  v_hat = v / (1 - 0.999^t)
    z = z + eta * (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
    return z, {"t": t, "m": m, "v": v}


def simulate_training(
    p0,
    *,
    steps: int,
    group_size: int,
    n_actions: int = 32,
    sharpness: float = 1.0,
    baseline: str = DEFAULT_BASELINE,
    k: float = DEFAULT_K,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    scale: str = DEFAULT_SCALE,
    eta: float = 1.0,
    optimizer: str = "sgd",
    seed: int = 0,
) -> dict[str, list]:
    r"""Train a softmax bandit per success rate in ``p0`` by sampled-group steps up g = (1/G) sum_i A_i (e_y_i - pi):
    ``"sgd"`` z + eta g, ``"adam"``, or ``"adam_scalar"`` (one second moment per prompt). The same seed pairs runs
    up. Per step 0..steps: ``entropy`` (mean H / log A), ``success``, ``prompt_entropy`` (P); per step 1..steps:
    ``zero_adv_frac``, ``hard_frac``.

    >>> out = simulate_training(torch.tensor([0.2, 0.8]), steps=3, group_size=4, n_actions=8, optimizer="adam")
    >>> len(out["entropy"]), len(out["zero_adv_frac"]), len(out["prompt_entropy"][0])
    (4, 3, 2)
    """
    check_int(steps, "steps", 0)
    check_choice(baseline, "baseline", BASELINES)
    check_choice(scale, "scale", SCALES)
    check_choice(quantile_method, "quantile_method", QUANTILE_METHODS)
    check_choice(optimizer, "optimizer", OPTIMIZERS)
    k = check_k(k)
    g = check_group_size(group_size, group_size)
    eta = check_positive(eta, "eta")
    gen = torch.Generator().manual_seed(seed)
    z, r = make_bandits(p0, n_actions, sharpness, gen)  # (P, A)
    log_a, state = math.log(n_actions), {}
    opts = {"baseline": baseline, "k": k, "quantile_method": quantile_method, "scale": scale}
    out: dict[str, list] = {"entropy": [], "success": [], "prompt_entropy": [], "zero_adv_frac": [], "hard_frac": []}
    for step in range(steps + 1):
        pi = torch.softmax(z, -1)
        h = entropy(z) / log_a  # (P,)
        out["entropy"].append(float(h.mean()))
        out["prompt_entropy"].append(h.tolist())
        out["success"].append(float((pi * r).sum(-1).mean()))
        if step == steps:
            break
        grad, rewards, adv = _group_steps(pi, r, g, 1.0, gen, opts)  # (P, A), (P, G), (P, G)
        out["zero_adv_frac"].append(float((adv == 0).double().mean()))
        out["hard_frac"].append(float(hard_regime(rewards.sum(1), g, k).double().mean()))
        if optimizer == "sgd":
            z = z + eta * grad
        else:
            z, state = _adam_ascent(z, grad, state, eta=eta, scalar=optimizer == "adam_scalar")
    return out


def entropy_by_start(prompt_entropy, p0, *, hard_max: float = 0.3, easy_min: float = 0.7) -> dict[str, torch.Tensor]:
    r"""Mean entropy per step of the prompts that start hard (p0 <= ``hard_max``) and easy (p0 >= ``easy_min``):
    (T+1, ..., P) -> (T+1, ...) each.

    >>> out = entropy_by_start([[0.9, 0.5, 0.7], [0.8, 0.6, 0.7]], [0.1, 0.9, 0.5])
    >>> out["hard"].tolist(), out["easy"].tolist()
    ([0.9, 0.8], [0.5, 0.6])
    """
    h = as_real_tensor(prompt_entropy, "prompt_entropy").double()
    p0 = as_real_tensor(p0, "p0", ndim=1).double()
    if h.dim() < 2 or h.shape[-1] != p0.shape[0]:
        raise ValueError(f"prompt_entropy must be (T+1, ..., P) with P = {p0.shape[0]} prompts, got {tuple(h.shape)}")
    hard, easy = p0 <= hard_max, p0 >= easy_min
    if not bool(hard.any()) or not bool(easy.any()):
        raise ValueError(f"p0 must hold a prompt with p0 <= hard_max ({hard_max}) and one with p0 >= easy_min")
    return {"hard": h[..., hard].mean(-1), "easy": h[..., easy].mean(-1)}
