r"""The token-level entropy controls QAE is combined with: Clip-Cov, KL-Cov, and the POS-MASK / NEG-MASK ablations.

QAE (arXiv 2509.22611) changes the response-level baseline and is combined in that paper with token-level entropy
controls, here as pure tensor functions (the other partners, Clip-Higher and GSPO, act on the ratio through TRL's
settings: :data:`qae_lab.methods.PARTNERS`). Shapes: N responses, T completion tokens.

Token covariance, Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(arXiv 2505.22617): the first-order entropy change of a softmax policy is driven by Cov(log pi(y_t), A(y_t)); per
token of a batch it is estimated by the centred product Cov_t (eq. P1), which Clip-Cov (P2) and KL-Cov (P3) select
tokens by.

Each public function checks its input and calls a private core that :func:`qae_lab.loss.grpo_loss` calls directly.
Implementer's notes: docs/implementation.md, section ``qae_lab.entropy_controls``.
"""

from __future__ import annotations

import torch

from qae_lab._checks import as_real_tensor, check_choice, check_finite_scalar, check_mask

__all__ = [
    "ADVANTAGE_MASKS",
    "COV_PENALTIES",
    "check_ratio",
    "token_covariance",
    "ppo_clip_active",
    "clip_cov_select",
    "kl_cov_select",
    "kl_cov_penalty",
    "sign_masked_advantages",
]

ADVANTAGE_MASKS = ("none", "pos", "neg")
COV_PENALTIES = ("none", "clip_cov", "kl_cov")


def _token_advantages(advantages, shape, name: str = "advantages") -> torch.Tensor:
    """(N,) response-level or (N, T) token-level advantages as (N, T), detached."""
    a = as_real_tensor(advantages.detach() if isinstance(advantages, torch.Tensor) else advantages, name)
    if a.dim() == 1 and a.shape[0] == shape[0]:
        return a[:, None].expand(shape)
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape ({shape[0]},) or {tuple(shape)}, got {tuple(a.shape)}")
    return a


def _detached(x, name: str) -> torch.Tensor:
    return as_real_tensor(x.detach() if isinstance(x, torch.Tensor) else x, name, ndim=2)


def check_ratio(ratio, name: str = "ratio") -> float:
    r"""A token fraction of Clip-Cov / KL-Cov, checked: finite and in (0, 1].

    >>> check_ratio(2e-4), check_ratio(1.0, "kl_cov_ratio")
    (0.0002, 1.0)
    """
    r = check_finite_scalar(ratio, name)
    if not 0 < r <= 1:
        raise ValueError(f"{name} must lie in (0, 1], got {ratio}")
    return r


def token_covariance(logps, advantages, mask) -> torch.Tensor:
    r"""Per-token centred product Cov_t = (log pi_t - mean log pi) (A_t - mean A) over a batch's valid tokens.

    Cui et al. 2025 (arXiv 2505.22617), the covariance term of the entropy dynamics (eq. P1). (N, T) log-probs,
    (N,) or (N, T) advantages, (N, T) 0/1 mask -> (N, T), detached, 0 off the mask (everywhere when no token is).

    >>> lp = torch.tensor([[-1.0, -3.0], [-4.0, -2.0]])
    >>> token_covariance(lp, torch.tensor([1.0, -1.0]), torch.tensor([[1, 1], [1, 0]]))
    tensor([[ 1.1111, -0.2222],
            [ 1.7778,  0.0000]])
    """
    lp = _detached(logps, "logps")
    m = check_mask(mask, lp.shape).to(lp.device)
    return _token_covariance(lp, _token_advantages(advantages, lp.shape).to(lp), m)


def _token_covariance(lp: torch.Tensor, a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Cov_t of checked (N, T) log-probs, (N, T) or (N, 1) advantages and (N, T) mask."""
    n = m.sum()
    if n == 0:
        return torch.zeros_like(lp)
    lp_c = lp - (lp * m).sum() / n
    a_c = a - (a * m).sum() / n
    return torch.where(m > 0, lp_c * a_c, torch.zeros_like(lp))  # Cov_t, 0 off the mask


def ppo_clip_active(log_ratio, advantages, epsilon_low: float, epsilon_high: float) -> torch.Tensor:
    r"""Where PPO's clipped objective already stops the gradient: -A clip(r) > -A r, r = exp(log_ratio): (N, T) bool.

    PPO (Schulman et al. 2017) with DAPO's asymmetric range [1 - eps_low, 1 + eps_high] (eq. P5); Clip-Cov draws
    its tokens among the others. ``log_ratio``: (N, T); ``advantages``: (N,) or (N, T).

    >>> ppo_clip_active(torch.tensor([[0.0, 0.5, -0.5]]), torch.tensor([1.0]), 0.2, 0.28)
    tensor([[False,  True, False]])
    """
    lr = _detached(log_ratio, "log_ratio")
    lo, hi = check_finite_scalar(epsilon_low, "epsilon_low"), check_finite_scalar(epsilon_high, "epsilon_high")
    if lo < 0 or hi < 0:
        raise ValueError(f"epsilon_low and epsilon_high must be >= 0, got {epsilon_low}, {epsilon_high}")
    return _clip_active(lr, _token_advantages(advantages, lr.shape).to(lr), lo, hi)


def _clip_active(lr: torch.Tensor, a: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    r = lr.exp()
    return -a * r.clamp(1 - lo, 1 + hi) > -a * r


def clip_cov_select(
    cov,
    mask,
    ratio: float = 2e-4,
    lb: float = 1.0,
    ub: float = 5.0,
    *,
    exclude=None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Clip-Cov's tokens: a random draw of max(1, floor(ratio * #valid)) valid tokens with lb < Cov_t < ub.

    Cui et al. 2025 (arXiv 2505.22617), Clip-Cov (eq. P2; paper: ratio 2e-4, lb 1, ub 5): the drawn tokens'
    loss terms are zeroed. Drawn without replacement among the candidates (all of them when fewer), leaving out
    ``exclude`` ((N, T) bool: the PPO-clipped tokens, :func:`ppo_clip_active`). ``cov``: (N, T)
    (:func:`token_covariance`); ``mask``: (N, T) 0/1 -> (N, T) bool.

    >>> cov = torch.tensor([[0.5, 2.0, 3.0], [6.0, 1.5, 0.0]])
    >>> clip_cov_select(cov, torch.ones(2, 3), ratio=0.5).sum().item()  # 3 of the 3 candidates in (1, 5)
    3
    >>> pick = clip_cov_select(cov, torch.ones(2, 3), ratio=0.2, generator=torch.Generator().manual_seed(0))
    >>> pick.sum().item(), cov[pick].item() in (2.0, 3.0, 1.5)  # floor(0.2 * 6) = 1 of the 3 candidates
    (1, True)
    """
    c = as_real_tensor(cov, "cov", ndim=2)
    m = check_mask(mask, c.shape).to(c.device).bool()
    r = check_ratio(ratio, "ratio")
    lb, ub = check_finite_scalar(lb, "lb"), check_finite_scalar(ub, "ub")
    if not lb < ub:
        raise ValueError(f"lb must be < ub, got lb={lb}, ub={ub}")
    out = None if exclude is None else check_mask(exclude, c.shape).to(c.device).bool()
    return _clip_cov_select(c, m, r, lb, ub, out, generator)


def _clip_cov_select(c, m, r, lb, ub, exclude, generator) -> torch.Tensor:
    """:func:`clip_cov_select` of a checked (N, T) ``c``, bool ``m`` and ``exclude`` (or None)."""
    cand = m & (c > lb) & (c < ub)
    if exclude is not None:
        cand &= ~exclude
    out = torch.zeros_like(m)
    n_valid = int(m.sum())
    idx = cand.flatten().nonzero().flatten()
    if n_valid == 0 or idx.numel() == 0:
        return out
    pick = idx[torch.randperm(idx.numel(), generator=generator)[: max(int(r * n_valid), 1)].to(idx.device)]
    out.view(-1)[pick] = True
    return out


def kl_cov_select(cov, mask, ratio: float = 2e-4) -> torch.Tensor:
    r"""KL-Cov's tokens: the max(1, floor(ratio * #valid)) valid tokens of largest covariance, (N, T) bool.

    Cui et al. 2025 (arXiv 2505.22617), KL-Cov (eq. P3; paper: ratio 2e-4 to 2e-3): the KL penalty acts on these
    tokens only. Ties broken by position, as ``torch.topk``.

    >>> kl_cov_select(torch.tensor([[0.5, 2.0, 3.0], [6.0, 1.5, 9.0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]), 0.4)
    tensor([[False, False,  True],
            [ True, False, False]])
    """
    c = as_real_tensor(cov, "cov", ndim=2)
    m = check_mask(mask, c.shape).to(c.device).bool()
    return _kl_cov_select(c, m, check_ratio(ratio, "ratio"))


def _kl_cov_select(c: torch.Tensor, m: torch.Tensor, r: float) -> torch.Tensor:
    out = torch.zeros_like(m)
    n_valid = int(m.sum())
    if n_valid == 0:
        return out
    scores = torch.where(m, c, torch.full_like(c, -torch.inf)).flatten()
    out.view(-1)[torch.topk(scores, max(int(r * n_valid), 1)).indices] = True
    return out


def kl_cov_penalty(logps: torch.Tensor, old_logps, selected, coef: float = 1.0) -> torch.Tensor:
    r"""KL-Cov's per-token penalty coef * |log pi_theta(y_t) - log pi_old(y_t)| on the selected tokens, (N, T).

    Cui et al. 2025 (arXiv 2505.22617), KL-Cov (eq. P3; paper: coef 1); gradients flow through ``logps`` (the
    policy being trained), not through ``old_logps``; 0 off ``selected`` (:func:`kl_cov_select`).

    >>> kl_cov_penalty(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]), torch.tensor([[True, False]]), 2.0)
    tensor([[1., 0.]])
    """
    if not isinstance(logps, torch.Tensor) or not logps.is_floating_point() or logps.dim() != 2:
        raise ValueError("logps must be a 2-dimensional floating-point tensor (N, T)")
    old = as_real_tensor(old_logps, "old_logps", ndim=2).detach().to(logps)
    if old.shape != logps.shape:
        raise ValueError(f"old_logps must have the shape of logps {tuple(logps.shape)}, got {tuple(old.shape)}")
    sel = check_mask(selected, logps.shape).to(logps)
    c = check_finite_scalar(coef, "coef")
    if c < 0:
        raise ValueError(f"coef must be >= 0, got {coef}")
    return c * (logps - old).abs() * sel


def sign_masked_advantages(advantages, keep: str) -> torch.Tensor:
    r"""POS-MASK / NEG-MASK: keep only the positive (``"pos"``) or negative (``"neg"``) (N,) advantages.

    The sign ablations of the QAE paper's analysis (arXiv 2509.22611; eq. P4): the update from one side of the
    baseline alone. The other side's advantages become exactly 0, so those responses add nothing to the loss (and
    sparse updates skip them); ``"none"`` returns them unchanged, in the input's dtype.

    >>> a = torch.tensor([1.5, -0.5, 0.0])
    >>> sign_masked_advantages(a, "pos"), sign_masked_advantages(a, "neg")
    (tensor([1.5000, 0.0000, 0.0000]), tensor([ 0.0000, -0.5000,  0.0000]))
    """
    keep = check_choice(keep, "advantage_mask", ADVANTAGE_MASKS)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if keep == "none":
        return a
    return torch.where(a > 0 if keep == "pos" else a < 0, a, torch.zeros_like(a))
