r"""The toy softmax bandit behind QAE's two-sided entropy safety: the exact step models, and sampled groups (step model (c)).

The toy softmax bandit behind QAE's two-sided entropy safety.

QAE (arXiv 2509.22611, sec. 4, Prop. 4.2) reduces a prompt to a bandit: each whole
response y is one action of a softmax policy pi = softmax(z) over A actions, with reward
r(y). Following Cui et al. 2025 ("The Entropy Mechanism of RL for Reasoning LMs"), one
first-order logit step dz changes the entropy by

    dH ~= -Cov_{y~pi}(log pi(y), dz(y))                                   (first order)

and with the identity's step model dz = eta * pi * (r - b)

    dH(b) ~= -eta Cov(log pi, pi r) + b * eta Cov(log pi, pi)             (the linear knob)

which increases in b because Cov_pi(log pi, pi) > 0 for a non-uniform pi. Prop. 4.2: with
b_K = 0 (p <= 1-K) dH(b_K) <= dH(b) for all b in [0, 1]; with b_K = 1 it is >=.

Two step models, computed exactly (shapes: A actions, P policies, M baselines):

(a) :func:`identity_step`, dz = eta pi (r - b): the model behind the identity;
(b) :func:`expected_pg_step`, the exact expected softmax policy gradient
    dz = eta pi (r - E_pi r), in which a constant b cancels; :func:`baseline_pg_step` computes it with
    b written out, and :func:`entropy_after_step` the entropy after a step of either model.

The third, (c) G sampled responses with group advantages, and the training simulation
built on it are in :mod:`qae_lab.toys.bandit`; the sparsity of the gate (zero-advantage
fractions) is in :mod:`qae_lab.toys.sparsity`. :func:`make_bandits` builds the bandits all
three use. Departures: none from the maths; the bandit and the step sizes are the
notebook's choices, not the paper's.

The former ``simulation`` module: step model (c) of the softmax bandit: sampled groups, Monte-Carlo entropy change, training.

QAE (arXiv 2509.22611, sec. 4) states its entropy result, Prop. 4.2, for the identity's step
model (:mod:`qae_lab.toys.bandit`). Training does not take that step: it samples a group of G
responses y_i ~ pi per prompt, scores them, and moves the logits by the REINFORCE step

    dz = (eta/G) sum_i A_i (e_{y_i} - pi)                                  (model (c))

with A_i from :func:`qae_lab.advantages.group_advantages` (mean or K-quantile baseline, with
or without the std). This module measures what that step does to the entropy, by Monte
Carlo over independent groups, next to the exact expected gradient (model (b)) and the
identity's first-order prediction (model (a)), and trains a population of bandits with it.
Shapes: A actions, M independent draws, G group size, P prompts.

Departures: none from the maths; the bandit, the difficulty spread and the step sizes are
the notebook's choices, not the paper's. The gate's exact zero-advantage fractions are in
:mod:`qae_lab.toys.sparsity`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

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
from qae_lab.advantages import BASELINES, QUANTILE_METHODS, SCALES, group_advantages, hard_regime

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
    "mc_entropy_curve",
    "simulate_training",
    "mc_verdicts",
    "mc_comparison_lines",
    "training_summary_lines",
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
    r"""Shannon entropy H(pi) = -sum_a pi_a log pi_a of pi = softmax(z), in nats.

    Args:
        z: (..., A) logits, A >= 2. Returns (...) float64.

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
    r"""|exact - first-order| entropy change for steps dz = eta * direction, one per eta.

    The first-order formula drops O(eta^2) terms, so the error should shrink as eta^2
    (slope 2 on a log-log plot: :func:`loglog_slope`).

    Args:
        z: (A,) logits; direction: (A,) step direction; etas: (E,) positive step sizes.

    Returns:
        (E,) float64 absolute errors.

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
    r"""Step model (a): dz(y) = eta * pi(y) * (r(y) - b), the identity's model of the update.

    Args:
        z: (..., A) logits. r: (..., A) rewards. b: float or tensor broadcastable to (...).
        eta: step size > 0.

    Returns:
        (..., A) float64 logit step.

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
    r"""Step model (b): the exact expected softmax policy gradient dz = eta pi (r - E_pi r).

    Any constant baseline b cancels: E_pi[grad log pi (r - b)] = pi (r - E_pi r).

    >>> expected_pg_step(torch.zeros(2), torch.tensor([1.0, 0.0]), 1.0)
    tensor([ 0.2500, -0.2500], dtype=torch.float64)
    """
    z = _logits(z)
    r = _rewards_like(r, z)
    pi = torch.softmax(z, -1)
    return check_positive(eta, "eta") * pi * (r - (pi * r).sum(-1, keepdim=True))


def baseline_pg_step(z, r, b, eta: float) -> torch.Tensor:
    r"""Step model (b) with its baseline written out: the exact expected softmax policy gradient with baseline b,
    dz = eta E_{y~pi}[(r(y) - b) grad_z log pi(y)] = eta sum_y pi(y) (r(y) - b) (e_y - pi).

    b stays in the sum, so that its cancellation is computed, not assumed: its term is
    eta b E_pi[grad_z log pi] = eta b (pi - pi) = 0, and the step is :func:`expected_pg_step` for every constant
    b, up to float64 rounding.

    Args:
        z: (..., A) logits. r: (..., A) rewards. b: float or tensor broadcastable to (...). eta: step size > 0.

    Returns:
        (..., A) float64 logit step.

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
    r"""H(softmax(z + dz)), the entropy after one step with baseline b: step model (a) ``"identity"``
    (:func:`identity_step`) or (b) ``"expected"`` (:func:`baseline_pg_step`).

    Args:
        z: (..., A) logits. r: (..., A) rewards. b: float or tensor broadcastable to (...). eta: step size > 0.
        model: one of :data:`STEP_MODELS`.

    Returns:
        (...) float64 entropies, in nats.

    Under (b) the baseline cancels; under (a) a higher b leaves a higher entropy (the linear knob):

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
    r"""First-order dH(b) under step model (a): dH(0) + b * eta * Cov_pi(log pi, pi).

    Args:
        z: (A,) logits; r: (A,) rewards; b: float or (M,) baselines; eta > 0.

    Returns:
        () or (M,): -Cov_pi(log pi, eta pi (r - b)) for each b.

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
    r"""Check QAE's Prop. 4.2 for one non-uniform policy with binary rewards.

    Compares dH at b_K with dH at ``n_b`` baselines b evenly spread over [0, 1], both to
    first order (the identity) and exactly (H after the step of model (a)).

    Returns:
        dict with ``p`` (E_pi r), ``regime`` ("hard" if p <= 1-K else "easy"), ``b_k``,
        ``slope`` (eta Cov(log pi, pi)), ``holds_first_order`` and ``holds_exact``
        (dH(b_K) <= dH(b) for all b if hard, >= if easy, up to 1e-15).

    pi = (0.1, 0.2, 0.3, 0.4) and K = 0.4: one correct response of mass 0.1 is hard (p <= 0.6,
    b_K = 0); three of mass 0.9 are easy (P(r <= 0) = 0.1 < K, so b_K = 1):

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
    r"""Check Prop. 4.2 on ``n_policies`` random bandits for every success rate in ``ps`` and K in ``ks``.

    Returns:
        counts: ``checked``, ``hard``, ``easy``, ``violations_first_order``,
        ``violations_exact`` and ``uniform`` (policies with slope <= 1e-15, where the
        proposition holds only with equality).

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
    p,
    n_actions: int,
    sharpness: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Softmax bandits with exact success rates: z (P, A) logits and r (P, A) 0/1 rewards.

    Half the actions (at least one) are correct; logits are ``sharpness * N(0, 1)``, then the
    correct ones are shifted together so that E_pi[r] = p exactly. ``sharpness`` 0 gives a
    policy uniform within each class; larger values concentrate pi on few responses.

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
    r"""The linear knob of one bandit: first-order dH against the baseline b, and QAE's b_K on it.

    Attributes:
        b: (M,) baselines from 0 to 1; dh: (M,) first-order dH(b) of step model (a).
        b_k: the K-quantile baseline; slope: eta * Cov_pi(log pi, pi), dH's slope in b;
        hard: whether the prompt is hard for this K (p <= 1 - K, so b_K = 0).

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
    r"""The linear knob (:func:`identity_entropy_change`) of one bandit with success rate ``p``
    (:func:`make_bandits` from ``seed``) at ``n_baselines`` baselines from 0 to 1, with b_K
    (:func:`population_quantile`) and the slope (:func:`knob_slope`): notebook 02's knob figure.

    >>> c = knob_curve(0.3, 0.4, 0.5, 1.5)
    >>> c.b_k, c.hard, c.slope > 0, bool(torch.isclose(c.dh[-1] - c.dh[0], torch.tensor(c.slope, dtype=c.dh.dtype)))
    (0.0, True, True, True)
    """
    check_int(n_baselines, "n_baselines", 2)
    z, r = make_bandits(
        torch.tensor([p], dtype=torch.float64),
        n_actions,
        sharpness,
        torch.Generator().manual_seed(check_int(seed, "seed", 0)),
    )
    b = torch.linspace(0, 1, n_baselines, dtype=torch.float64)  # (M,)
    return KnobCurve(
        b,
        identity_entropy_change(z[0], r[0], b, eta),
        float(population_quantile(z[0], r[0], k)),
        float(knob_slope(z[0], eta)),
        p <= 1 - check_k(k),
    )


def _reinforce_step(pi: torch.Tensor, actions: torch.Tensor, adv: torch.Tensor, eta: float) -> torch.Tensor:
    """dz = (eta/G) sum_i A_i (e_{y_i} - pi) for (M, A) pi, (M, G) actions and advantages."""
    g = actions.shape[1]
    dz = torch.zeros_like(pi).scatter_add_(1, actions, adv)  # (M, A): sum_i A_i e_{y_i}
    return eta / g * (dz - pi * adv.sum(1, keepdim=True))  # (M, A)


def sample_group_steps(
    z,
    r,
    group_size: int,
    n_groups: int,
    *,
    baseline: str = "quantile",
    k: float = 0.4,
    quantile_method: str = "paper",
    scale: str = "group",
    eta: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Step model (c): ``n_groups`` independent sampled-group REINFORCE steps from one z.

    Each draws G responses y_i ~ pi, scores r(y_i), takes advantages from
    :func:`qae_lab.advantages.group_advantages` and returns dz = (eta/G) sum_i A_i (e_{y_i} - pi).

    Args:
        z: (A,) logits; r: (A,) rewards. group_size: G >= 2. n_groups: M >= 1.
        baseline, k, quantile_method, scale: as in ``group_advantages``.

    Returns:
        (dz, rewards): (M, A) float64 steps and the (M, G) sampled rewards.

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
    pi = torch.softmax(z, -1)
    actions = torch.multinomial(pi.expand(n_groups, -1), group_size, replacement=True, generator=generator)  # (M, G)
    rewards = r[actions]  # (M, G)
    adv = group_advantages(
        rewards.reshape(-1), group_size, baseline=baseline, k=k, quantile_method=quantile_method, scale=scale
    ).view(n_groups, group_size)
    return _reinforce_step(pi.expand(n_groups, -1), actions, adv, check_positive(eta, "eta")), rewards


def mc_entropy_change(
    z,
    r,
    group_size: int,
    n_groups: int,
    *,
    baseline: str = "quantile",
    k: float = 0.4,
    quantile_method: str = "paper",
    scale: str = "group",
    eta: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    r"""Monte-Carlo E[dH] and its spread over sampled-group steps (model (c)) from one policy.

    Returns:
        dict with ``mean``, ``std`` and ``stderr`` of the exact entropy change over the
        ``n_groups`` draws, ``zero_adv_frac`` (responses with A = 0) and, for comparison,
        ``expected_pg`` (the exact entropy change of model (b), the same step size).

    >>> out = mc_entropy_change(torch.tensor([1.0, 0, 0, -1]), torch.tensor([1.0, 0, 1, 0]), 8, 200,
    ...                         eta=0.5, generator=torch.Generator().manual_seed(0))
    >>> sorted(out)
    ['expected_pg', 'mean', 'std', 'stderr', 'zero_adv_frac']
    """
    dz, rewards = sample_group_steps(
        z,
        r,
        group_size,
        n_groups,
        baseline=baseline,
        k=k,
        quantile_method=quantile_method,
        scale=scale,
        eta=eta,
        generator=generator,
    )
    z = _logits(z)
    dh = entropy_change_exact(z.expand_as(dz), dz)  # (M,)
    adv = group_advantages(
        rewards.reshape(-1), group_size, baseline=baseline, k=k, quantile_method=quantile_method, scale=scale
    )
    std = float(dh.std()) if n_groups > 1 else 0.0
    return {
        "mean": float(dh.mean()),
        "std": std,
        "stderr": std / math.sqrt(n_groups),
        "zero_adv_frac": float((adv == 0).double().mean()),
        "expected_pg": float(entropy_change_exact(z, expected_pg_step(z, r, eta))),
    }


def mc_entropy_curve(
    ps,
    *,
    group_size: int,
    n_groups: int,
    k: float = 0.4,
    scale: str = "group",
    quantile_method: str = "paper",
    n_actions: int = 16,
    sharpness: float = 1.5,
    eta: float = 0.5,
    seed: int = 0,
) -> dict[str, list[float]]:
    r"""Monte-Carlo E[dH] of one sampled-group step, mean vs quantile baseline, for each p in ``ps``.

    One bandit per p, all built from the same base logits (:func:`make_bandits` with
    ``seed``) and shifted to their success rate; both baselines see the same bandit and the
    same random stream. Alongside: the exact entropy change of the expected
    gradient (model (b)) and the identity's first-order predictions (model (a)) with
    b = p (mean) and b = b_K (quantile).

    Returns:
        dict of lists over ``ps``: ``mean``, ``mean_stderr``, ``quantile``,
        ``quantile_stderr``, ``mean_zero_frac``, ``quantile_zero_frac``, ``expected_pg``,
        ``identity_mean``, ``identity_quantile``.

    >>> out = mc_entropy_curve([0.3, 0.7], group_size=8, n_groups=50)
    >>> len(out["mean"]), len(out["identity_quantile"])
    (2, 2)
    """
    ps = as_real_tensor(ps, "ps", ndim=1).double()
    # the same base logits for every p (one seed), so the curve varies p and nothing else
    bandits = [make_bandits(p.reshape(1), n_actions, sharpness, torch.Generator().manual_seed(seed)) for p in ps]
    z, r = torch.cat([b[0] for b in bandits]), torch.cat([b[1] for b in bandits])
    out: dict[str, list[float]] = {
        key: []
        for key in (
            "mean",
            "mean_stderr",
            "quantile",
            "quantile_stderr",
            "mean_zero_frac",
            "quantile_zero_frac",
            "expected_pg",
            "identity_mean",
            "identity_quantile",
        )
    }
    for i in range(ps.shape[0]):
        for baseline in BASELINES:
            mc = mc_entropy_change(
                z[i],
                r[i],
                group_size,
                n_groups,
                baseline=baseline,
                k=k,
                scale=scale,
                quantile_method=quantile_method,
                eta=eta,
                generator=torch.Generator().manual_seed(seed + 1 + i),
            )
            out[baseline].append(mc["mean"])
            out[f"{baseline}_stderr"].append(mc["stderr"])
            out[f"{baseline}_zero_frac"].append(mc["zero_adv_frac"])
        out["expected_pg"].append(mc["expected_pg"])
        b = torch.stack([ps[i], population_quantile(z[i], r[i], k)])
        ident = identity_entropy_change(z[i], r[i], b, eta)
        out["identity_mean"].append(float(ident[0]))
        out["identity_quantile"].append(float(ident[1]))
    return out


def simulate_training(
    p0,
    *,
    steps: int,
    group_size: int,
    n_actions: int = 32,
    sharpness: float = 1.0,
    baseline: str = "quantile",
    k: float = 0.4,
    quantile_method: str = "paper",
    scale: str = "group",
    eta: float = 1.0,
    seed: int = 0,
) -> dict[str, list[float]]:
    r"""Train a population of softmax bandits by sampled-group steps; track entropy and success.

    One bandit per initial success rate in ``p0`` (built by :func:`make_bandits` from
    ``seed``). Each step samples a group of G responses per prompt, takes advantages
    from :func:`qae_lab.advantages.group_advantages` over the whole batch, and applies the
    REINFORCE step to every prompt. The same seed gives the same bandits and, step by
    step, the same random stream for every baseline, so runs pair up.

    Returns:
        dict of lists, one entry per step 0..steps: ``entropy`` (mean H / log A),
        ``success`` (mean E_pi r), and per step 1..steps ``zero_adv_frac`` and ``hard_frac``.

    >>> out = simulate_training(torch.tensor([0.2, 0.8]), steps=3, group_size=4, n_actions=8)
    >>> len(out["entropy"]), len(out["zero_adv_frac"])
    (4, 3)
    """
    check_int(steps, "steps", 0)
    check_choice(baseline, "baseline", BASELINES)
    check_choice(scale, "scale", SCALES)
    check_choice(quantile_method, "quantile_method", QUANTILE_METHODS)
    k = check_k(k)
    g = check_group_size(group_size, group_size)
    eta = check_positive(eta, "eta")
    gen = torch.Generator().manual_seed(seed)
    z, r = make_bandits(p0, n_actions, sharpness, gen)  # (P, A)
    n = z.shape[0]
    log_a = math.log(n_actions)
    out: dict[str, list[float]] = {"entropy": [], "success": [], "zero_adv_frac": [], "hard_frac": []}
    for step in range(steps + 1):
        pi = torch.softmax(z, -1)
        out["entropy"].append(float(entropy(z).mean()) / log_a)
        out["success"].append(float((pi * r).sum(-1).mean()))
        if step == steps:
            break
        actions = torch.multinomial(pi, g, replacement=True, generator=gen)  # (P, G)
        rewards = r.gather(1, actions)  # (P, G)
        adv = group_advantages(
            rewards.reshape(-1), g, baseline=baseline, k=k, quantile_method=quantile_method, scale=scale
        ).view(n, g)
        out["zero_adv_frac"].append(float((adv == 0).double().mean()))
        out["hard_frac"].append(float(hard_regime(rewards.sum(1), g, k).double().mean()))
        z = z + _reinforce_step(pi, actions, adv, eta)
    return out


def mc_verdicts(out: Mapping[str, Sequence[float]]) -> list[str]:
    r"""Per success rate of :func:`mc_entropy_curve`'s output: "lower", "higher" or "same",
    QAE's E[dH] against the mean baseline's, "same" unless the difference is beyond two standard errors.

    >>> mc_verdicts({"mean": [0.01, 0.01], "mean_stderr": [0.001] * 2, "quantile": [0.002, 0.011],
    ...              "quantile_stderr": [0.001] * 2})
    ['lower', 'same']
    """
    verdicts = []
    for m, m_se, q, q_se in zip(out["mean"], out["mean_stderr"], out["quantile"], out["quantile_stderr"]):
        margin = 2 * (m_se**2 + q_se**2) ** 0.5  # two standard errors of the difference
        verdicts.append("lower" if q - m < -margin else "higher" if q - m > margin else "same")
    return verdicts


def mc_comparison_lines(ps, out: dict[str, list[float]]) -> list[str]:
    r"""One line per success rate of :func:`mc_entropy_curve`'s output: E[dH] under the mean and the QAE baseline,
    their difference with a two-standard-error margin, a verdict (QAE lower / higher only beyond that margin) and
    QAE's zero-advantage share.

    Args:
        ps: the success rates ``out`` was computed at; out: :func:`mc_entropy_curve` of them.

    >>> out = {"mean": [0.010], "mean_stderr": [0.001], "quantile": [0.002], "quantile_stderr": [0.001],
    ...        "quantile_zero_frac": [0.75]}
    >>> mc_comparison_lines([0.3], out)[0]
    'p = 0.3:  E[dH] mean +0.0100, QAE +0.0020 (diff -0.0080 ± 0.0028: QAE lower);  zero-advantage share QAE 0.75'
    """
    words = {"lower": "QAE lower", "higher": "QAE higher", "same": "no clear difference"}
    verdicts, lines = mc_verdicts(out), []
    for i, p in enumerate(ps):
        diff = out["quantile"][i] - out["mean"][i]
        se = (out["quantile_stderr"][i] ** 2 + out["mean_stderr"][i] ** 2) ** 0.5
        verdict = words[verdicts[i]]
        lines.append(
            f"p = {float(p):.1f}:  E[dH] mean {out['mean'][i]:+.4f}, QAE {out['quantile'][i]:+.4f} "
            f"(diff {diff:+.4f} ± {2 * se:.4f}: {verdict});  zero-advantage share QAE "
            f"{out['quantile_zero_frac'][i]:.2f}"
        )
    return lines


def training_summary_lines(runs: dict[str, dict[str, list[float]]]) -> list[str]:
    r"""Per run of :func:`simulate_training` (``{name: its output}``): entropy and success at the first and the last
    step and the mean zero-advantage share; then which run keeps the highest and the lowest final entropy.

    >>> runs = {"mean": {"entropy": [0.9, 0.5], "success": [0.5, 0.7], "zero_adv_frac": [0.25]},
    ...         "QAE": {"entropy": [0.9, 0.7], "success": [0.5, 0.6], "zero_adv_frac": [0.75]}}
    >>> print("\n".join(training_summary_lines(runs)))
          mean: entropy 0.900 -> 0.500,  success 0.500 -> 0.700,  mean zero-advantage share 0.25
           QAE: entropy 0.900 -> 0.700,  success 0.500 -> 0.600,  mean zero-advantage share 0.75
    After 1 steps the highest entropy is kept by 'QAE', the lowest by 'mean'.
    """
    if not runs:
        raise ValueError("runs must hold at least one simulated run")
    lines = []
    for name, o in runs.items():
        zero = sum(o["zero_adv_frac"]) / len(o["zero_adv_frac"])
        lines.append(
            f"{name:>10}: entropy {o['entropy'][0]:.3f} -> {o['entropy'][-1]:.3f},  success "
            f"{o['success'][0]:.3f} -> {o['success'][-1]:.3f},  mean zero-advantage share {zero:.2f}"
        )
    lo = min(runs, key=lambda n: runs[n]["entropy"][-1])
    hi = max(runs, key=lambda n: runs[n]["entropy"][-1])
    steps = len(next(iter(runs.values()))["entropy"]) - 1
    lines.append(f"After {steps} steps the highest entropy is kept by '{hi}', the lowest by '{lo}'.")
    return lines
