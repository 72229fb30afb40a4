r"""The entropy-adaptive horizon of SA-AH-GRPO: normalised entropies, horizon weights, the weighted loss.

Paper: "Selective-Advantage Entropy-Adaptive Horizon GRPO: Asymmetric Token-Level
Discounting for Efficient RL of Language Models" (arXiv 2606.05434). Equations:

* normalised entropy   H~_t = H(pi(. | y_<t)) / log V           (top-k estimate, k = 500)
* per-step discount    g_t  = exp(-alpha * H~_t)
* horizon weight       w_t  = prod_{s<=t} g_s = exp(-alpha * sum_{s<=t} H~_s)
* AH-GRPO: every rollout weighted by w_t; SA-AH-GRPO: only rollouts with A_i < 0
  (A_i >= 0 keep weight 1)
* loss normalised by the effective token count: L = sum_t w_t l_t / sum_t w_t
  (:func:`weighted_token_mean`; in training, TRL's mask-normalised loss gets there through
  the rescaling factor of :func:`normaliser_factor`)

Implementer's notes: docs/implementation.md, section ``qae_lab.horizon``.
"""

from __future__ import annotations

import math

import torch

from qae_lab._checks import host_floats, as_real_tensor, check_finite_scalar, check_int, check_mask, checking_values

__all__ = [
    "normalised_entropy",
    "head_normalised_entropy",
    "normalise_entropy",
    "horizon_weights",
    "selective_horizon_weights",
    "weighted_token_mean",
    "normaliser_factor",
    "weight_stats",
]

_H_TOL = 1e-4  # float32 rounding slack on H~ in [0, 1]


def normalised_entropy(logits: torch.Tensor, top_k: int | None = None, *, chunk_rows: int = 256) -> torch.Tensor:
    r"""Normalised Shannon entropy H~_t = H(softmax(z_t)) / log V of each position.

    SA-AH-GRPO (arXiv 2606.05434), eq. for H~_t; with ``top_k`` the paper's estimate
    H_topk / log V from the k largest logits (renormalised), k = 500 in the paper.

    Args:
        logits: (N, T, V) floating tensor (any leading dims: (..., V) -> (...)). Computed
            in float32 (float64 kept), in chunks of ``chunk_rows`` positions to bound
            memory for large V. -inf logits (masked vocabulary) are allowed.
        top_k: None for the exact entropy, or an int >= 1; values >= V give the exact one.
        chunk_rows: positions per chunk, >= 1.

    Returns:
        (N, T) tensor in [0, 1]. Gradients flow if ``logits`` requires them; wrap the
        call in ``torch.no_grad()`` when only weights are wanted.

    >>> normalised_entropy(torch.zeros(1, 2, 8)).round(decimals=4)     # uniform -> 1
    tensor([[1., 1.]])
    >>> z = torch.tensor([[[0.0, 0.0, -1e9, -1e9]]])      # two equal tokens of V = 4
    >>> normalised_entropy(z), normalised_entropy(z, top_k=2)
    (tensor([[0.5000]]), tensor([[0.5000]]))
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError(
            f"logits must be a floating-point tensor of shape (N, T, V), got {type(logits).__name__}"
            + (f" of dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else "")
        )
    if logits.dim() < 1 or logits.shape[-1] < 2:
        raise ValueError(f"logits must have a vocabulary dimension V >= 2 last, got shape {tuple(logits.shape)}")
    if top_k is not None:
        check_int(top_k, "top_k", 1)
    check_int(chunk_rows, "chunk_rows", 1)
    v = logits.shape[-1]
    flat = logits.reshape(-1, v)  # (N*T, V)
    out = []
    for z in flat.split(chunk_rows):  # (chunk, V)
        z = z.float() if z.dtype != torch.float64 else z
        if top_k is not None and top_k < v:
            z = z.topk(top_k, dim=-1).values  # (chunk, k): the renormalised top-k estimate
        log_p = torch.log_softmax(z, dim=-1)
        p = log_p.exp()
        # H = -sum_v p_v log p_v, with 0 log 0 = 0 for masked (-inf) logits
        out.append(-(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(-1))
    # H~ = H / log V
    h_norm = torch.cat(out).reshape(logits.shape[:-1]) / math.log(v)  # (N, T)
    # a value check (a read back to the host): off inside the trainer's step, whose logits come from its own forward
    if h_norm.numel() and checking_values() and not bool(torch.isfinite(h_norm).all()):
        raise ValueError("logits must be finite or -inf (NaN or +inf found)")
    return h_norm


def head_normalised_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    chunk_rows: int = 256,
) -> torch.Tensor:
    r"""H~_t of the logits z_t = (W h_t + b) / temperature, projected chunk by chunk.

    SA-AH-GRPO (arXiv 2606.05434), eq. for H~_t (exact, or the top-k estimate H_topk / log V),
    for when only the final hidden states are at hand, as in a fused LM head that never
    materialises the (N, T, V) logits: at most ``chunk_rows`` positions are projected at a
    time, so memory stays at (chunk_rows, V). Same result as
    ``normalised_entropy(torch.nn.functional.linear(hidden, weight, bias) / temperature, top_k)``.

    Args:
        hidden: (N, T, H) floating tensor (any leading dims); cast to ``weight``'s dtype.
        weight: (V, H) floating LM-head weight; ``bias``: (V,) floating tensor or None.
            Integer (quantised) weights are refused: dequantise them first.
        temperature: finite, > 0 (the sampling temperature the logits are divided by).
        top_k, chunk_rows: as in :func:`normalised_entropy`.

    Returns:
        (N, T) tensor in [0, 1], computed without gradient.

    >>> w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])      # V = 4, H = 2
    >>> head_normalised_entropy(torch.zeros(1, 1, 2), w)                      # uniform -> 1
    tensor([[1.]])
    >>> h = torch.tensor([[[30.0, 30.0]]])      # two tokens share the mass: H = log 2 = log V / 2
    >>> head_normalised_entropy(h, w).round(decimals=4), head_normalised_entropy(h, w, top_k=2)
    (tensor([[0.5000]]), tensor([[0.5000]]))
    """
    tensors = {"hidden": hidden, "weight": weight, **({"bias": bias} if bias is not None else {})}
    for name, x in tensors.items():
        # an integer weight would be a quantised head without its scales: refuse, do not promote
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise ValueError(
                f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64; dequantise "
                f"integer weights first), got {type(x).__name__}"
                + (f" of dtype {x.dtype}" if isinstance(x, torch.Tensor) else "")
            )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"weight must be a (V, H) tensor with H = {hidden.shape[-1]} (hidden's last dim), "
            f"got shape {tuple(weight.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must be None or a ({weight.shape[0]},) tensor, got shape {tuple(bias.shape)}")
    if not check_finite_scalar(temperature, "temperature") > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k is not None:
        check_int(top_k, "top_k", 1)
    check_int(chunk_rows, "chunk_rows", 1)
    flat = hidden.reshape(-1, hidden.shape[-1])  # (N*T, H)
    with torch.no_grad():
        # z_t = (W h_t + b) / temperature, then H~_t, one chunk of positions at a time
        b = bias.to(weight.dtype) if bias is not None else None
        out = [
            normalised_entropy(
                torch.nn.functional.linear(h.to(weight.dtype), weight, b) / temperature, top_k, chunk_rows=chunk_rows
            )
            for h in flat.split(chunk_rows)
        ]
    return torch.cat(out).reshape(hidden.shape[:-1])  # split gives one chunk, empty or not: out is never empty


def normalise_entropy(entropies: torch.Tensor, vocab_size: int) -> torch.Tensor:
    r"""H~_t = H_t / log V from entropies already computed (e.g. by TRL's fused LM head), clamped to [0, 1].

    SA-AH-GRPO (arXiv 2606.05434), eq. S1 when a forward returned H_t rather than the logits
    (:func:`normalised_entropy` takes the logits). Detached; keeps the dtype and shape.

    >>> normalise_entropy(torch.tensor([[0.0, 0.5 * math.log(4.0), 2.0]]), 4)   # 2 nats > log 4: clamped
    tensor([[0.0000, 0.5000, 1.0000]])
    """
    check_int(vocab_size, "vocab_size", 2)
    return (entropies.detach() / math.log(vocab_size)).clamp(0.0, 1.0)


def horizon_weights(h_norm, mask, alpha: float) -> torch.Tensor:
    r"""AH-GRPO's cumulative horizon weight w_t = exp(-alpha * sum_{s<=t} H~_s).

    SA-AH-GRPO (arXiv 2606.05434), eq. w_t = prod_{s<=t} exp(-alpha H~_s). The sum runs
    over real tokens only (mask 1) and includes position t itself.

    Args:
        h_norm: (N, T) normalised entropies in [0, 1] (from :func:`normalised_entropy`).
        mask: (N, T) 0/1 or bool, 1 on completion tokens, 0 on padding.
        alpha: finite real. 0 gives plain GRPO (w = 1), > 0 discounts, < 0 amplifies.

    Returns:
        (N, T) detached weights, 0 where ``mask`` is 0. For alpha >= 0 they lie in
        (0, 1] on real tokens and never increase along t.

    >>> h = torch.tensor([[0.5, 0.0, 0.5, 0.3]]); m = torch.tensor([[1, 1, 1, 0]])
    >>> horizon_weights(h, m, 2.0)                       # exp(-2 * [0.5, 0.5, 1.0]), then pad
    tensor([[0.3679, 0.3679, 0.1353, 0.0000]])
    """
    h = as_real_tensor(h_norm, "h_norm", ndim=2).detach()
    if h.numel() and checking_values() and not bool(((h >= -_H_TOL) & (h <= 1 + _H_TOL)).all()):
        raise ValueError("h_norm must hold normalised entropies in [0, 1] (divide by log V)")
    m = check_mask(mask, h.shape).to(h.dtype)
    alpha = check_finite_scalar(alpha, "alpha")
    # w_t = exp(-alpha * sum_{s<=t} H~_s), padding excluded from the sum
    w = torch.exp(-alpha * torch.cumsum(h * m, dim=-1)) * m  # (N, T)
    if checking_values() and not bool(torch.isfinite(w).all()):
        raise ValueError(f"alpha={alpha} makes exp(-alpha * cumulative entropy) overflow; use a smaller |alpha|")
    return w


def selective_horizon_weights(h_norm, mask, advantages, alpha: float, selective: bool = True) -> torch.Tensor:
    r"""Horizon weights by advantage sign: SA-AH-GRPO's selective rule, or AH-GRPO's every rollout.

    SA-AH-GRPO (arXiv 2606.05434): w_{i,t} = w_t if A_i < 0 else 1 (selective); AH-GRPO
    (``selective=False``) uses w_t for every rollout.

    Args:
        h_norm: (N, T) normalised entropies in [0, 1].
        mask: (N, T) 0/1 or bool completion mask.
        advantages: (N,) response-level advantages.
        alpha: finite real entropy coefficient of the horizon weight (paper: 0.5).
        selective: True for SA-AH-GRPO, False for AH-GRPO.

    Returns:
        (N, T) detached weights; 0 on masked positions, 1 on every real token of a
        rollout with A_i >= 0 when selective.

    >>> h = torch.full((2, 3), 0.5); m = torch.ones(2, 3)
    >>> selective_horizon_weights(h, m, torch.tensor([1.0, -1.0]), 2.0)
    tensor([[1.0000, 1.0000, 1.0000],
            [0.3679, 0.1353, 0.0498]])
    """
    if not isinstance(selective, bool):
        raise ValueError(f"selective must be True (SA-AH-GRPO) or False (AH-GRPO), got {selective!r}")
    w = horizon_weights(h_norm, mask, alpha)  # (N, T)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if a.shape[0] != w.shape[0]:
        raise ValueError(f"advantages must have shape ({w.shape[0]},), one per row of h_norm, got {tuple(a.shape)}")
    if not selective:
        return w
    m = check_mask(mask, w.shape).to(w.dtype)
    # A_i >= 0: weight 1 on every real token; A_i < 0: the horizon weight
    return torch.where(a.to(w.device)[:, None] < 0, w, m)  # (N, T)


def weighted_token_mean(per_token_loss: torch.Tensor, weights) -> torch.Tensor:
    r"""Loss normalised by the effective token count: sum(w * l) / sum(w).

    SA-AH-GRPO (arXiv 2606.05434), the weighted token-level normalisation. With 0/1
    weights this is the masked token mean of DAPO's token-level loss.

    Args:
        per_token_loss: (N, T) floating tensor (gradients flow through it).
        weights: (N, T) non-negative finite weights; detached here.

    Returns:
        0-dim tensor. If every weight is 0 the result is 0 (no token contributes).

    >>> weighted_token_mean(torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([[1., 0.], [0.5, 0.5]]))
    tensor(2.2500)
    """
    if not isinstance(per_token_loss, torch.Tensor) or not per_token_loss.is_floating_point():
        raise ValueError("per_token_loss must be a floating-point tensor")
    w = as_real_tensor(weights, "weights").detach()
    if tuple(w.shape) != tuple(per_token_loss.shape):
        raise ValueError(
            f"weights must have the shape of per_token_loss {tuple(per_token_loss.shape)}, got {tuple(w.shape)}"
        )
    if w.numel() and checking_values() and not bool((w >= 0).all()):
        raise ValueError("weights must be >= 0")
    w = w.to(per_token_loss.dtype)
    denom = w.sum()
    # L = sum_t w_t l_t / sum_t w_t
    return (w * per_token_loss).sum() / torch.where(denom > 0, denom, torch.ones_like(denom))


def normaliser_factor(weights, mask, *, per_sequence: bool = False, skipped_tokens: float = 0.0) -> torch.Tensor:
    r"""The factor c that turns a mask-normalised loss of weighted tokens into SA-AH's sum(w) one.

    SA-AH-GRPO (arXiv 2606.05434) normalises the loss by the effective token count,
    L = sum_t w_t l_t / sum_t w_t (:func:`weighted_token_mean`). A trainer whose loss divides
    by the token count sum_t m_t (TRL's ``bnpo``, ``dapo``) reaches it with per-token
    advantages A_i w_t c, where

        c = (sum_{i,t} m_{i,t} + S) / (sum_{i,t} w_{i,t} + S)        (token level), or
        c_i = sum_t m_{i,t} / sum_t w_{i,t}                           (``per_sequence``, TRL's ``grpo``),

    since sum(w c l) / sum(m) = sum(w l) / sum(w). S counts the tokens of rows left out of the
    loss (sparse updates): they have A_i = 0, so weight 1 and loss 0, and still belong in
    both counts. Denominators are clamped at 1e-12 (a row without real tokens gets a finite c,
    multiplied by weights 0).

    Args:
        weights: (N, T) non-negative finite horizon weights (e.g. :func:`selective_horizon_weights`); only
            the positions with mask 1 count. Detached.
        mask: (N, T) 0/1 or bool, 1 on the tokens the loss counts.
        per_sequence: False for one factor over the micro-batch, True for one per row.
        skipped_tokens: S >= 0, real tokens of rows left out (token level only; must be 0
            with ``per_sequence``, where a left-out row is a left-out term of the row mean).

    Returns:
        () tensor (token level) or (N, 1) tensor (``per_sequence``), in ``weights``' dtype.

    >>> w = torch.tensor([[1.0, 0.5, 0.0], [0.25, 0.25, 0.0]]); m = torch.tensor([[1, 1, 0], [1, 1, 0]])
    >>> normaliser_factor(w, m), normaliser_factor(w, m, per_sequence=True)
    (tensor(2.), tensor([[1.3333],
            [4.0000]]))
    >>> normaliser_factor(w, m, skipped_tokens=2.0)      # (4 + 2) / (2 + 2)
    tensor(1.5000)
    """
    w, m, skipped = _normaliser_inputs(weights, mask, per_sequence, skipped_tokens)  # (N, T), (N, T), S
    w = w * m  # (N, T): padding never counts towards sum(w)
    if per_sequence:
        # c_i = sum_t m_{i,t} / sum_t w_{i,t}
        return m.sum(-1, keepdim=True) / w.sum(-1, keepdim=True).clamp_min(1e-12)  # (N, 1)
    # c = (sum m + S) / (sum w + S)
    return (m.sum() + skipped) / (w.sum() + skipped).clamp_min(1e-12)  # ()


def _normaliser_inputs(weights, mask, per_sequence, skipped_tokens) -> tuple[torch.Tensor, torch.Tensor, float]:
    """:func:`normaliser_factor`'s inputs checked, each error naming its argument: (weights, mask as weights' dtype,
    S)."""
    w = as_real_tensor(weights, "weights", ndim=2).detach()
    if w.numel() and checking_values() and not bool((w >= 0).all()):
        raise ValueError("weights must be >= 0")
    m = check_mask(mask, w.shape).to(w.dtype)
    skipped = check_finite_scalar(skipped_tokens, "skipped_tokens")
    if skipped < 0:
        raise ValueError(f"skipped_tokens must be >= 0, got {skipped}")
    if not isinstance(per_sequence, bool):
        raise ValueError(f"per_sequence must be True or False, got {per_sequence!r}")
    if per_sequence and skipped:
        raise ValueError("skipped_tokens must be 0 with per_sequence=True (each row is normalised by its own tokens)")
    return w, m, skipped


def weight_stats(weights, mask, advantages) -> dict[str, float]:
    r"""Summaries of horizon weights for logging (the ``saah/*`` metrics).

    Args:
        weights: (N, T) horizon weights (e.g. from :func:`selective_horizon_weights`).
        mask: (N, T) 0/1 completion mask.
        advantages: (N,) response-level advantages.

    Returns:
        dict with ``w_mean_neg`` (mean horizon weight over real tokens of rollouts with A < 0;
        1.0 when there are none, since no weight then falls below 1) and
        ``effective_tokens_frac`` (sum(w) over real tokens / their number).

    >>> w = torch.tensor([[1., 1.], [0.5, 0.25]])
    >>> weight_stats(w, torch.ones(2, 2), torch.tensor([1.0, -1.0]))["w_mean_neg"]
    0.375
    """
    w = as_real_tensor(weights, "weights", ndim=2)
    m = check_mask(mask, w.shape).to(w.dtype)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if a.shape[0] != w.shape[0]:
        raise ValueError(f"advantages must have shape ({w.shape[0]},), got {tuple(a.shape)}")
    neg = m * (a < 0).to(w.dtype)[:, None]  # (N, T)
    n_tok, n_neg, w_neg, w_tok = host_floats([m.sum(), neg.sum(), (w * neg).sum(), (w * m).sum()])  # one transfer
    return {
        "w_mean_neg": w_neg / n_neg if n_neg else 1.0,
        "effective_tokens_frac": w_tok / n_tok if n_tok else 1.0,
    }
