r"""The entropy-adaptive horizon of SA-AH-GRPO: normalised entropies, horizon weights, the weighted loss.

Paper: "Selective-Advantage Entropy-Adaptive Horizon GRPO: Asymmetric Token-Level Discounting for Efficient RL of
Language Models" (arXiv 2606.05434). Equations:

* normalised entropy   H~_t = H(pi(. | y_<t)) / log V           (top-k estimate, k = 500)
* per-step discount    g_t  = exp(-alpha * H~_t)
* horizon weight       w_t  = prod_{s<=t} g_s = exp(-alpha * sum_{s<=t} H~_s)
* AH-GRPO: every rollout weighted by w_t; SA-AH-GRPO: only rollouts with A_i < 0 (A_i >= 0 keep weight 1)
* loss normalised by the effective token count: L = sum_t w_t l_t / sum_t w_t (:func:`weighted_token_mean`; in
  training, TRL's mask-normalised loss gets there through the factor of :func:`normaliser_factor`)

Each public function checks its input and calls a private core that :func:`qae_lab.loss.grpo_loss` calls directly.
Shapes: N responses, T completion tokens, V vocabulary.
Implementer's notes: docs/implementation.md, section ``qae_lab.horizon``.
"""

from __future__ import annotations

import math

import torch

from qae_lab._checks import as_real_tensor, check_finite_scalar, check_int, check_mask, checking_values, host_floats

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
    r"""Normalised Shannon entropy H~_t = H(softmax(z_t)) / log V of each position: (..., V) -> (...) in [0, 1].

    SA-AH-GRPO (arXiv 2606.05434), eq. S1; with ``top_k`` the paper's estimate H_topk / log V from the k largest
    logits, renormalised (k = 500 in the paper; k >= V: exact). Computed in float32 (float64 kept), ``chunk_rows``
    positions at a time to bound memory for large V; -inf logits (masked vocabulary) are allowed; gradients flow.

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
    _check_entropy_options(top_k, chunk_rows)
    return _finite_entropy(_entropy(logits, top_k, chunk_rows))


def _check_entropy_options(top_k, chunk_rows) -> None:
    if top_k is not None:
        check_int(top_k, "top_k", 1)
    check_int(chunk_rows, "chunk_rows", 1)


def _finite_entropy(h_norm: torch.Tensor) -> torch.Tensor:
    # a value check (a read back): off inside the trainer's step, whose logits come from its own forward
    if h_norm.numel() and checking_values() and not bool(torch.isfinite(h_norm).all()):
        raise ValueError("logits must be finite or -inf (NaN or +inf found)")
    return h_norm


def _entropy(logits: torch.Tensor, top_k: int | None, chunk_rows: int) -> torch.Tensor:
    """:func:`normalised_entropy` of checked (..., V) logits."""
    v = logits.shape[-1]
    out = []
    for z in logits.reshape(-1, v).split(chunk_rows):  # (chunk, V)
        z = z.float() if z.dtype != torch.float64 else z
        if top_k is not None and top_k < v:
            z = z.topk(top_k, dim=-1).values  # (chunk, k): the renormalised top-k estimate
        log_p = torch.log_softmax(z, dim=-1)
        p = log_p.exp()
        # H = -sum_v p_v log p_v, with 0 log 0 = 0 for masked (-inf) logits
        out.append(-(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(-1))
    return torch.cat(out).reshape(logits.shape[:-1]) / math.log(v)  # H~ = H / log V


def head_normalised_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    chunk_rows: int = 256,
) -> torch.Tensor:
    r"""H~_t of the logits z_t = (W h_t + b) / temperature, projected chunk by chunk: (..., H) -> (...), no gradient.

    SA-AH-GRPO (arXiv 2606.05434), eq. S1, for a fused LM head that never materialises the (N, T, V) logits:
    memory stays at (chunk_rows, V). Equals ``normalised_entropy(linear(hidden, weight, bias) / temperature, top_k)``.
    ``weight``: (V, H), ``bias``: (V,) or None, floating (an integer, quantised head is refused: dequantise it);
    ``hidden`` is cast to ``weight``'s dtype.

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
    _check_entropy_options(top_k, chunk_rows)
    b = bias.to(weight.dtype) if bias is not None else None
    with torch.no_grad():  # z_t = (W h_t + b) / temperature, then H~_t, one chunk of positions at a time
        out = [
            _entropy(torch.nn.functional.linear(h.to(weight.dtype), weight, b) / temperature, top_k, chunk_rows)
            for h in hidden.reshape(-1, hidden.shape[-1]).split(chunk_rows)  # (chunk, H)
        ]
    return _finite_entropy(torch.cat(out).reshape(hidden.shape[:-1]))  # split gives one chunk at least


def normalise_entropy(entropies: torch.Tensor, vocab_size: int) -> torch.Tensor:
    r"""H~_t = H_t / log V from entropies already computed (e.g. by TRL's fused LM head), clamped to [0, 1].

    SA-AH-GRPO (arXiv 2606.05434), eq. S1 when a forward returned H_t rather than the logits. Detached; keeps the
    dtype and shape.

    >>> normalise_entropy(torch.tensor([[0.0, 0.5 * math.log(4.0), 2.0]]), 4)   # 2 nats > log 4: clamped
    tensor([[0.0000, 0.5000, 1.0000]])
    """
    check_int(vocab_size, "vocab_size", 2)
    return (entropies.detach() / math.log(vocab_size)).clamp(0.0, 1.0)


def horizon_weights(h_norm, mask, alpha: float) -> torch.Tensor:
    r"""AH-GRPO's cumulative horizon weight w_t = exp(-alpha * sum_{s<=t} H~_s): (N, T) -> (N, T), detached.

    SA-AH-GRPO (arXiv 2606.05434), eq. S2, w_t = prod_{s<=t} exp(-alpha H~_s); the sum runs over the real tokens
    (mask 1) up to t included; padding gets weight 0. ``alpha`` = 0: plain GRPO; > 0 discounts (w in (0, 1], never
    increasing along t); < 0 amplifies.

    >>> h = torch.tensor([[0.5, 0.0, 0.5, 0.3]]); m = torch.tensor([[1, 1, 1, 0]])
    >>> horizon_weights(h, m, 2.0)                       # exp(-2 * [0.5, 0.5, 1.0]), then pad
    tensor([[0.3679, 0.3679, 0.1353, 0.0000]])
    """
    h, m, alpha = _horizon_inputs(h_norm, mask, alpha)
    return _no_overflow(_horizon_weights(h, m, alpha), alpha)


def _horizon_inputs(h_norm, mask, alpha) -> tuple[torch.Tensor, torch.Tensor, float]:
    h = check_normalised_entropy(h_norm)
    return h, check_mask(mask, h.shape).to(h.dtype), check_finite_scalar(alpha, "alpha")


def check_normalised_entropy(h_norm, shape=None) -> torch.Tensor:
    """``h_norm`` as a detached (N, T) real tensor (of ``shape`` if given), refused outside [0, 1] (its values
    checked where :func:`qae_lab._checks.checking_values`)."""
    h = as_real_tensor(h_norm, "h_norm", ndim=2, shape=shape).detach()
    if h.numel() and checking_values() and not bool(((h >= -_H_TOL) & (h <= 1 + _H_TOL)).all()):
        raise ValueError("h_norm must hold normalised entropies in [0, 1] (divide by log V)")
    return h


def _horizon_weights(h: torch.Tensor, m: torch.Tensor, alpha: float) -> torch.Tensor:
    # w_t = exp(-alpha * sum_{s<=t} H~_s), padding excluded from the sum
    return torch.exp(-alpha * torch.cumsum(h * m, dim=-1)) * m  # (N, T)


def _no_overflow(w: torch.Tensor, alpha: float) -> torch.Tensor:
    if checking_values() and not bool(torch.isfinite(w).all()):
        raise ValueError(f"alpha={alpha} makes exp(-alpha * cumulative entropy) overflow; use a smaller |alpha|")
    return w


def selective_horizon_weights(h_norm, mask, advantages, alpha: float, selective: bool = True) -> torch.Tensor:
    r"""Horizon weights by advantage sign: (N, T) H~, (N, T) mask, (N,) A_i -> (N, T) weights, detached.

    SA-AH-GRPO (arXiv 2606.05434), eq. S3: w_{i,t} = w_t if A_i < 0 else 1 (on real tokens; padding 0);
    AH-GRPO (``selective=False``): w_t for every rollout.

    >>> h = torch.full((2, 3), 0.5); m = torch.ones(2, 3)
    >>> selective_horizon_weights(h, m, torch.tensor([1.0, -1.0]), 2.0)
    tensor([[1.0000, 1.0000, 1.0000],
            [0.3679, 0.1353, 0.0498]])
    """
    if not isinstance(selective, bool):
        raise ValueError(f"selective must be True (SA-AH-GRPO) or False (AH-GRPO), got {selective!r}")
    h, m, alpha = _horizon_inputs(h_norm, mask, alpha)
    w = _no_overflow(_horizon_weights(h, m, alpha), alpha)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if a.shape[0] != w.shape[0]:
        raise ValueError(f"advantages must have shape ({w.shape[0]},), one per row of h_norm, got {tuple(a.shape)}")
    return _select(w, m, a) if selective else w


def _select(w: torch.Tensor, m: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    # A_i >= 0: weight 1 on every real token; A_i < 0: the horizon weight
    return torch.where(a.to(w.device)[:, None] < 0, w, m)  # (N, T)


def weighted_token_mean(per_token_loss: torch.Tensor, weights) -> torch.Tensor:
    r"""Loss normalised by the effective token count, sum(w l) / sum(w) over (N, T): a 0-dim tensor (0 if all w = 0).

    SA-AH-GRPO (arXiv 2606.05434), eq. S4; with 0/1 weights, DAPO's token mean. Weights (non-negative, finite) are
    detached; gradients flow through ``per_token_loss``.

    >>> weighted_token_mean(torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([[1., 0.], [0.5, 0.5]]))
    tensor(2.2500)
    """
    if not isinstance(per_token_loss, torch.Tensor) or not per_token_loss.is_floating_point():
        raise ValueError("per_token_loss must be a floating-point tensor")
    w = _weights(weights, None, shape=per_token_loss.shape, of="per_token_loss").to(per_token_loss.dtype)
    denom = w.sum()
    # L = sum_t w_t l_t / sum_t w_t
    return (w * per_token_loss).sum() / torch.where(denom > 0, denom, torch.ones_like(denom))


def _weights(weights, ndim, *, shape=None, of=None) -> torch.Tensor:
    """Non-negative finite weights, detached; ``of``: the argument whose ``shape`` they must have."""
    w = as_real_tensor(weights, "weights", ndim=ndim).detach()
    if shape is not None and tuple(w.shape) != tuple(shape):
        raise ValueError(f"weights must have the shape of {of} {tuple(shape)}, got {tuple(w.shape)}")
    if w.numel() and checking_values() and not bool((w >= 0).all()):
        raise ValueError("weights must be >= 0")
    return w


def normaliser_factor(weights, mask, *, per_sequence: bool = False, skipped_tokens: float = 0.0) -> torch.Tensor:
    r"""The factor c that turns a mask-normalised loss of weighted tokens into SA-AH's sum(w) one.

    SA-AH-GRPO (arXiv 2606.05434), eq. S4, L = sum_t w_t l_t / sum_t w_t: a loss that divides by the token count
    sum_t m_t (TRL's ``bnpo``, ``dapo``) reaches it with per-token advantages A_i w_t c, where

        c = (sum_{i,t} m_{i,t} + S) / (sum_{i,t} w_{i,t} + S)        (token level: a () tensor), or
        c_i = sum_t m_{i,t} / sum_t w_{i,t}                           (``per_sequence``, TRL's ``grpo``: (N, 1)),

    since sum(w c l) / sum(m) = sum(w l) / sum(w). S (token level only) counts the real tokens of rows a sparse
    update left out: A_i = 0, so weight 1 and loss 0, in both counts. Only positions with mask 1 count; the
    denominators are clamped at 1e-12 (a row without real tokens gets a finite c, multiplied by weights 0).

    >>> w = torch.tensor([[1.0, 0.5, 0.0], [0.25, 0.25, 0.0]]); m = torch.tensor([[1, 1, 0], [1, 1, 0]])
    >>> normaliser_factor(w, m), normaliser_factor(w, m, per_sequence=True)
    (tensor(2.), tensor([[1.3333],
            [4.0000]]))
    >>> normaliser_factor(w, m, skipped_tokens=2.0)      # (4 + 2) / (2 + 2)
    tensor(1.5000)
    """
    w = _weights(weights, 2)
    m = check_mask(mask, w.shape).to(w.dtype)
    skipped = check_finite_scalar(skipped_tokens, "skipped_tokens")
    if skipped < 0:
        raise ValueError(f"skipped_tokens must be >= 0, got {skipped}")
    if not isinstance(per_sequence, bool):
        raise ValueError(f"per_sequence must be True or False, got {per_sequence!r}")
    if per_sequence and skipped:
        raise ValueError("skipped_tokens must be 0 with per_sequence=True (each row is normalised by its own tokens)")
    return _normaliser_factor(w, m, per_sequence, skipped)


def _normaliser_factor(w: torch.Tensor, m: torch.Tensor, per_sequence: bool, skipped: float) -> torch.Tensor:
    w = w * m  # (N, T): padding never counts towards sum(w)
    if per_sequence:  # c_i = sum_t m_{i,t} / sum_t w_{i,t}
        return m.sum(-1, keepdim=True) / w.sum(-1, keepdim=True).clamp_min(1e-12)  # (N, 1)
    return (m.sum() + skipped) / (w.sum() + skipped).clamp_min(1e-12)  # (): c = (sum m + S) / (sum w + S)


def weight_stats(weights, mask, advantages) -> dict[str, float]:
    r"""The ``saah/*`` metrics of (N, T) horizon weights: ``w_mean_neg``, their mean over the real tokens of the
    rollouts with A_i < 0 (1.0 when there are none: no weight falls below 1), and ``effective_tokens_frac``,
    sum(w) / the number of real tokens (SA-AH-GRPO, arXiv 2606.05434, eq. S5).

    >>> w = torch.tensor([[1., 1.], [0.5, 0.25]])
    >>> weight_stats(w, torch.ones(2, 2), torch.tensor([1.0, -1.0]))["w_mean_neg"]
    0.375
    """
    w = as_real_tensor(weights, "weights", ndim=2)
    m = check_mask(mask, w.shape).to(w.dtype)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if a.shape[0] != w.shape[0]:
        raise ValueError(f"advantages must have shape ({w.shape[0]},), got {tuple(a.shape)}")
    return _weight_stats(w, m, a)


def _weight_stats(w: torch.Tensor, m: torch.Tensor, a: torch.Tensor) -> dict[str, float]:
    neg = m * (a < 0).to(w.dtype)[:, None]  # (N, T)
    n_tok, n_neg, w_neg, w_tok = host_floats([m.sum(), neg.sum(), (w * neg).sum(), (w * m).sum()])  # one transfer
    return {
        "w_mean_neg": w_neg / n_neg if n_neg else 1.0,
        "effective_tokens_frac": w_tok / n_tok if n_tok else 1.0,
    }
