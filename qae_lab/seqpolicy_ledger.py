r"""The entropy ledger of the exact sequence policy: realised, expected and estimated first-order changes.

For the tabular policy of :mod:`qae_lab.seqpolicy` the sequence entropy H(pi) (eq. S2) is an exact,
differentiable function of the logit tables, so the first-order change of an update dz is known exactly:

    dH ~= grad_z H . dz                                                              (first order, LG1)

with the gradient in closed form, the entropy's own policy gradient (a token's "reward" is -log pi):

    grad_{z_{s,a}} H = rho(s) pi(a|s) (Q(s,a) - F(s)),  Q(s,a) = -log pi(a|s) + F(s a),  F(s) = E_{a~pi}Q(s,a) (LG4)

(F(s): the entropy still to come after prefix s, 0 after L tokens; :func:`snapshot`).

A policy-gradient pass moves the logits by dz = eta/N_tok sum_{i,t} A~_{i,t} grad_z log pi(y_{i,t} | y_{i,<t})
(N_tok tokens of the batch, A~ the advantage each token's gradient carries), a sum over samples, so the change
splits exactly into each sample's share

    grad_z H . grad_z log pi(a | s) = g_{s,a} - sum_b pi(b|s) g_{s,b} =: u_{s,a},   g = grad_z H     (LG2)

and each sample's share is eta/N_tok sum_t A~_{i,t} u_{i,t}: split by the sign of A_i and by QAE's regime of
its prompt (arXiv 2509.22611), this is the ledger of :mod:`qae_lab.ledger` computed exactly (sampled, "(a)").

The expectation over the group, "(b)": given the group's success count c ~ Binomial(G, p), the correct samples
are iid from pi(.|r=1) and the wrong ones from pi(.|r=0), and with 0/1 rewards every group baseline (mean,
K-quantile, with or without the group std) gives advantages A1(c), A0(c) that depend on c alone, so

    E[grad H . dz] = eta/(P G L) sum_c Binom(c; G, p) [c A1(c) h1 + (G - c) A0(c) h0]               (LG3)

with h1 = E_{pi|r=1}[sum_t u_t] = grad H . E_{pi|r=1}[grad log pi(y)], h0 likewise (P prompts, L tokens each).
Each term has the sign of its A and the regime of its c (hard: c <= G - ceil(K G)), so (LG3) splits exactly.

Where the per-token estimators of :func:`qae_lab.ledger.entropy_change_terms` ("(c)") depart from (LG1):
H(pi) = sum_s rho(s) H(s) changes through the states' entropies and through rho, the visitation of the states
(:func:`entropy_gradients` returns both parts); the per-state terms ignore the second. And a sampled token's own
step, A (e_a - pi) on the logits of its state s, changes H(s) by (Cui et al.'s Lemma 1 applied to that step)

    dH(s) ~= -A [pi_a (log pi_a + H(s)) - sum_b pi_b^2 (log pi_b + H(s))]                         (LG5)

which is the library's form "reinforce" (eq. L3); the form "pg" keeps the first term only (it models the step as
pi A, exact in expectation only when E_{a~pi}[A] = 0 at s, which group advantages do not give), and the form "npg",
what the trainer logs, is the one-sample estimate -(log pi_a + H(s)) A of Cui et al.'s covariance for a natural-
gradient-like step dz_{s,b} = A(s, b).
rho(s_t) times (LG5), summed over the batch, is exactly the part of (LG1) through the states' own entropies
(:mod:`qae_lab.seqpolicy_update` computes it so, from the same library call).

Departures: the split by seed is vectorised here (:func:`split_parts`), equal to :func:`qae_lab.ledger.
ledger_parts` row for row (tested), which returns one batch's floats. Shapes: S seeds, P prompts, G group size,
L positions, V vocabulary, n prefixes, Y = V**L sequences.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from qae_lab._checks import as_real_tensor, check_group_size, check_positive
from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.ledger import LEDGER_PARTS
from qae_lab.sparsity import canonical_groups
from qae_lab.seqpolicy import _log_softmax, _logits, _reach_and_paths, path_sum, space_of
from qae_lab.seqpolicy import sequence_entropy  # noqa: F401 (the doctests compare with it)

__all__ = ["Snapshot", "snapshot", "entropy_gradients", "score_dot", "split_parts", "advantage_table",
           "expected_ledger"]


class Snapshot(NamedTuple):
    r"""The exact quantities of a policy that one update's ledgers need.

    Fields: ``lp`` (..., n, V) log pi(.|s); ``log_pi_y`` (..., Y) log pi(y); ``rho`` (..., n) the prefixes'
    reach; ``h`` (...) H(pi); ``g`` (..., n, V) = grad_z H. All detached.

    >>> round(float(snapshot(torch.zeros(3, 2)).h), 4)
    1.3863
    """

    lp: torch.Tensor
    log_pi_y: torch.Tensor
    rho: torch.Tensor
    h: torch.Tensor
    g: torch.Tensor


def snapshot(z) -> Snapshot:
    r"""The :class:`Snapshot` of logits z (..., n, V): H = sum_s rho(s) H(s) (eq. S2) and its exact gradient.

    The gradient is the entropy's own policy gradient (the "reward" of a token is -log pi, eq. LG4):

        grad_{z_{s,a}} H = rho(s) pi(a|s) (Q(s,a) - F(s)),   Q(s,a) = -log pi(a|s) + F(s a),
        F(s) = sum_a pi(a|s) Q(s,a) (the entropy still to come after prefix s; F = 0 after L tokens),

    computed by one backward sweep over the levels; ``tests/test_seqpolicy.py`` checks it against autograd.

    >>> snap = snapshot(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
    >>> bool(torch.allclose(snap.h, sequence_entropy(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))))
    True
    """
    return _snapshot(_logits(z).detach())


def _snapshot(z: torch.Tensor) -> Snapshot:
    """:func:`snapshot` of checked float64 logits."""
    v, l = space_of(z)
    lp = _log_softmax(z)  # (..., n, V)
    pi = lp.exp()
    log_rho, log_pi_y = _reach_and_paths(lp)  # (..., n), (..., Y)
    q = -lp  # (..., n, V): Q(s, a), the children's F added level by level from the deepest
    f_levels = []
    for t in range(l - 1, -1, -1):
        lo = (v ** t - 1) // (v - 1)
        if f_levels:
            q[..., lo:lo + v ** t, :] += f_levels[-1].view(*q.shape[:-2], v ** t, v)
        # F(s) = sum_a pi(a|s) Q(s, a)
        f_levels.append((pi[..., lo:lo + v ** t, :] * q[..., lo:lo + v ** t, :]).sum(-1))  # (..., V**t)
    f = torch.cat(f_levels[::-1], -1)  # (..., n): F(s) of every prefix, root first
    # grad_{z_{s,a}} H = rho(s) pi(a|s) (Q(s,a) - F(s));  H = F(root) = sum_s rho(s) H(s)
    g = log_rho.exp()[..., None] * pi * (q - f[..., None])
    return Snapshot(lp, log_pi_y, log_rho.exp(), f[..., 0], g)


def entropy_gradients(z) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""H(pi), its gradient g = grad_z H, and the part of g through the states' own entropies.

    H = sum_s rho(s) H(s) (eq. S2); g_state = grad_z sum_s rho(s) H(s) with rho held fixed, so
    g - g_state is the part through the visitation rho (which the per-state ledger ignores).

    Args:
        z: (..., n, V) logits.

    Returns:
        (H (...), g (..., n, V), g_state (..., n, V)), float64, detached.

    >>> h, g, g_state = entropy_gradients(torch.zeros(3, 2))      # uniform: H is at its maximum
    >>> round(float(h), 4), float(g.abs().max()) < 1e-12
    (1.3863, True)
    """
    snap = snapshot(z)
    h_state = -(snap.lp.exp() * snap.lp).sum(-1)  # (..., n)
    # rho(s) grad_{z_s} H(s) = -rho(s) pi(a|s) (log pi(a|s) + H(s))
    g_state = -snap.rho[..., None] * snap.lp.exp() * (snap.lp + h_state[..., None])
    return snap.h, snap.g, g_state


def score_dot(g, z) -> torch.Tensor:
    r"""u_{s,a} = g . grad_z log pi(a|s) = g_{s,a} - sum_b pi(b|s) g_{s,b} for every (state, token) (eq. LG2).

    Args:
        g: (..., n, V) a gradient (e.g. of H). z: (..., n, V) logits.

    Returns:
        (..., n, V) float64.

    >>> score_dot(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2))     # V = 2, L = 1
    tensor([[ 0.5000, -0.5000]], dtype=torch.float64)
    """
    z = _logits(z)
    g = as_real_tensor(g, "g").to(z)
    if g.shape != z.shape:
        raise ValueError(f"g must have the shape of z {tuple(z.shape)}, got {tuple(g.shape)}")
    return _score_dot(g, _log_softmax(z))


def _score_dot(g: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """u = g - sum_b pi_b g_b per state, for checked g and log pi (..., n, V)."""
    return g - ((lp.exp() * g) @ torch.ones(g.shape[-1], 1, dtype=g.dtype))


def split_parts(shares, advantages, hard) -> dict[str, torch.Tensor]:
    r"""The ledger's parts (:data:`qae_lab.ledger.LEDGER_PARTS`) of per-sample shares, summed per leading row.

    Like :func:`qae_lab.ledger.ledger_parts` with weight 1 and normaliser 1, for many batches at once:
    ``dh`` sums every share, ``dh_pos`` / ``dh_neg`` those with A > 0 / A < 0, ``dh_hard`` / ``dh_easy``
    those of hard / easy prompts, and the four cells.

    Args:
        shares: (S, N) each sample's share of the change. advantages: (S, N) their A (the sign splits).
        hard: (S, N) bool, the sample's prompt is hard for QAE.

    Returns:
        dict of (S,) tensors.

    >>> parts = split_parts(torch.tensor([[-0.4, 1.5, 0.2]]), torch.tensor([[1.0, -1.0, -1.0]]),
    ...                     torch.tensor([[True, True, False]]))
    >>> [round(float(parts[k][0]), 4) for k in ("dh", "dh_pos", "dh_neg", "dh_easy", "dh_hard_neg")]
    [1.3, -0.4, 1.7, 0.2, 1.5]
    """
    d = as_real_tensor(shares, "shares", ndim=2)
    a = as_real_tensor(advantages, "advantages", ndim=2).to(d)
    hard = torch.as_tensor(hard, device=d.device)
    if a.shape != d.shape or hard.shape != d.shape or hard.dtype != torch.bool:
        raise ValueError(f"advantages and hard (bool) must have the shape of shares {tuple(d.shape)}, "
                         f"got {tuple(a.shape)} and {tuple(hard.shape)} ({hard.dtype})")
    out = {}
    for sign, sel in (("pos", a > 0), ("neg", a < 0)):
        for regime, rows in (("hard", hard), ("easy", ~hard)):
            out[f"dh_{regime}_{sign}"] = (d * (sel & rows)).sum(-1)
        out[f"dh_{sign}"] = out[f"dh_hard_{sign}"] + out[f"dh_easy_{sign}"]
    out["dh"] = out["dh_pos"] + out["dh_neg"]  # A = 0 contributes nothing
    out["dh_hard"] = out["dh_hard_pos"] + out["dh_hard_neg"]
    out["dh_easy"] = out["dh_easy_pos"] + out["dh_easy_neg"]
    return {k: out[k] for k in LEDGER_PARTS}


def advantage_table(group_size: int, *, baseline: str = "quantile", k: float = 0.4, quantile_method: str = "paper",
                    scale: str = "group") -> tuple[torch.Tensor, torch.Tensor]:
    r"""A1(c), A0(c): the advantage of a correct and of a wrong response in a group with c of G correct.

    From :func:`qae_lab.advantages.group_advantages` on the G + 1 groups (1,..,1, 0,..,0); 0 where the
    group has no such response. ``scale="batch"`` is refused: its std mixes the other prompts' groups.

    Returns:
        two (G + 1,) float64 tensors.

    >>> a1, a0 = advantage_table(4, baseline="quantile", k=0.4, scale="none")
    >>> a1.tolist(), a0.tolist()                  # G = 4, K = 0.4: hard while c <= 2
    ([0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0, 0.0])
    """
    if scale == "batch":
        raise ValueError("scale must be 'group' or 'none' for the expected ledger: with 'batch' the advantages "
                         "depend on the other prompts' groups, not on c alone")
    a1, a0 = _advantage_table(check_group_size(group_size, group_size), baseline, k, quantile_method, scale)
    return a1.clone(), a0.clone()


@functools.lru_cache(maxsize=64)
def _advantage_table(g: int, baseline: str, k: float, quantile_method: str, scale: str):
    """:func:`advantage_table`, computed once per setting (a training run asks at every step)."""
    c = torch.arange(g + 1)
    adv = group_advantages(canonical_groups(g), g, baseline=baseline, k=k, quantile_method=quantile_method,
                           scale=scale).view(g + 1, g)
    a1 = torch.where(c > 0, adv[:, 0], torch.zeros(g + 1, dtype=adv.dtype))
    a0 = torch.where(c < g, adv[:, -1], torch.zeros(g + 1, dtype=adv.dtype))
    return a1, a0


def expected_ledger(z, rewards, *, group_size: int, eta: float, baseline: str = "quantile", k: float = 0.4,
                    quantile_method: str = "paper", scale: str = "group", snap: Snapshot | None = None
                    ) -> dict[str, torch.Tensor]:
    r"""The exact expected first-order entropy change of one on-policy group update, split (eq. LG3).

    One plain-SGD pass of the token-level (``bnpo``) loss without horizon weights: dz = eta/(P G L)
    sum_i A_i grad log pi(y_i) for each prompt; the expectation is over the G sampled responses.

    Args:
        z: (..., P, n, V) logits of a batch of P prompts. rewards: (..., P, Y) 0/1 rewards.
        group_size: G >= 2. eta: the step size. baseline, k, quantile_method, scale: as
            :func:`qae_lab.advantages.group_advantages` (not ``scale="batch"``, :func:`advantage_table`).
        snap: optional :func:`snapshot` of z, to save recomputing it.

    Returns:
        dict over :data:`qae_lab.ledger.LEDGER_PARTS` of (..., P) tensors: each prompt's expected change.

    >>> z, r = torch.zeros(1, 3, 2), torch.tensor([[1.0, 0.0, 0.0, 0.0]])   # uniform: H is at its maximum
    >>> abs(float(expected_ledger(z, r, group_size=4, eta=1.0)["dh"][0])) < 1e-12
    True
    """
    z = _logits(z)
    v, l = space_of(z)
    if z.dim() < 3:
        raise ValueError(f"z must have shape (..., P, n, V) with a prompt dimension, got {tuple(z.shape)}")
    r = as_real_tensor(rewards, "rewards").to(z)
    if r.shape != z.shape[:-2] + (v ** l,) or not bool(((r == 0) | (r == 1)).all()):
        raise ValueError(f"rewards must be 0/1 of shape {tuple(z.shape[:-2]) + (v ** l,)}, got {tuple(r.shape)}")
    snap = _snapshot(z) if snap is None else snap
    return _expected(snap, r, advantage_table(group_size, baseline=baseline, k=k, quantile_method=quantile_method,
                                              scale=scale), k, check_positive(eta, "eta"))


def _expected(snap: Snapshot, r: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor], k: float, eta: float
              ) -> dict[str, torch.Tensor]:
    """eq. LG3 for a checked snapshot, rewards (..., P, Y) and advantage table (A1, A0)."""
    a1, a0 = table
    big_g, l = a1.shape[0] - 1, space_of(snap.lp)[1]
    pi = snap.log_pi_y.exp()  # (..., P, Y)
    u_seq = path_sum(_score_dot(snap.g, snap.lp))  # (..., P, Y): grad H . grad log pi(y)
    p = (pi * r).sum(-1)  # (..., P)
    # h1 = E_{pi|r=1}[grad H . grad log pi(y)], h0 = E_{pi|r=0}[...]
    h1 = (pi * r * u_seq).sum(-1) / p.clamp_min(1e-300)
    h0 = (pi * (1 - r) * u_seq).sum(-1) / (1 - p).clamp_min(1e-300)
    c = torch.arange(big_g + 1, dtype=pi.dtype)
    pmf = _binomial_pmf(p, big_g)  # (..., P, G+1)
    unit = eta / (snap.lp.shape[-3] * big_g * l)  # the loss's token count P G L
    # E[grad H . dz] = eta/(P G L) sum_c Binom(c) [c A1(c) h1 + (G - c) A0(c) h0]
    pos_term = unit * pmf * c * a1 * h1[..., None]  # (..., P, G+1): the correct samples' share
    neg_term = unit * pmf * (big_g - c) * a0 * h0[..., None]  # the wrong samples' share
    hard = hard_regime(torch.arange(big_g + 1), big_g, k)  # (G+1,)
    out = {}
    for sign, sel in (("pos", 1), ("neg", -1)):
        both = pos_term * (torch.sign(a1) == sel) + neg_term * (torch.sign(a0) == sel)  # (..., P, G+1)
        out[f"dh_hard_{sign}"] = (both * hard).sum(-1)
        out[f"dh_easy_{sign}"] = (both * ~hard).sum(-1)
        out[f"dh_{sign}"] = out[f"dh_hard_{sign}"] + out[f"dh_easy_{sign}"]
    out["dh"] = out["dh_pos"] + out["dh_neg"]
    out["dh_hard"] = out["dh_hard_pos"] + out["dh_hard_neg"]
    out["dh_easy"] = out["dh_easy_pos"] + out["dh_easy_neg"]
    return {key: out[key] for key in LEDGER_PARTS}


def _binomial_pmf(p: torch.Tensor, n: int) -> torch.Tensor:
    """Binom(c; n, p) for c = 0..n: (...) -> (..., n + 1), exact at p = 0 and p = 1."""
    c = torch.arange(n + 1, dtype=p.dtype)
    log_binom = torch.lgamma(c.new_tensor(n + 1.0)) - torch.lgamma(c + 1) - torch.lgamma(n - c + 1)
    pq = p[..., None]
    pmf = torch.exp(log_binom + c * torch.log(pq.clamp_min(1e-300)) + (n - c) * torch.log1p(-pq.clamp_max(1 - 1e-16)))
    return torch.where(pq >= 1, (c == n).to(p), torch.where(pq <= 0, (c == 0).to(p), pmf))
