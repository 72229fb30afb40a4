r"""One QAE + SA-AH-GRPO update as a pure function: a micro-batch's tensors in, the loss and its metrics out.

:func:`grpo_loss` is the whole policy-gradient loss of one micro-batch, top to bottom, each step
under the equation it computes (labels: ``docs/equations.md``). It needs no model and no TRL:
:class:`qae_lab.train.trainer.QAETrainer._compute_loss` runs the model's forward, hands the tensors
here and logs what comes back. The response-level advantages (QAE, eq. Q1-Q5) were computed at
generation time (:func:`qae_lab.advantages.group_advantages`); this function applies them.

Shapes: B responses in the micro-batch, T completion tokens (right-padded).

Papers: **QAE** (arXiv 2509.22611), **SA-AH** (arXiv 2606.05434); the PPO/GRPO clipped surrogate
as TRL's ``GRPOTrainer`` computes it (loss types ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``; token-
or sequence-level ratios, GSPO); Clip-Cov / KL-Cov from Cui et al. (arXiv 2505.22617).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from qae_lab._checks import as_real_tensor, check_choice, check_finite_scalar, check_int, check_mask, checking_values
from qae_lab._checks import host_floats
from qae_lab.entropy_controls import (
    COV_PENALTIES,
    _clip_active,
    _clip_cov_select,
    _kl_cov_select,
    _token_covariance,
    check_ratio,
)
from qae_lab.horizon import _horizon_weights, _normaliser_factor, _select, _weight_stats, check_normalised_entropy
from qae_lab.ledger import _batch_ledger
from qae_lab import methods
from qae_lab.methods import LOSS_TYPES, TOKEN_WEIGHTINGS
from qae_lab.metric_names import (
    COV_SELECTED_FRAC,
    COV_TOKEN_COV,
    LEDGER_PREFIX,
    SAAH_ALPHA,
    SAAH_EFFECTIVE_TOKENS_FRAC,
    SAAH_W_MEAN_NEG,
)

__all__ = ["LOSS_TYPES", "LossSettings", "LossScale", "LossOutput", "grpo_loss", "reduce_token_loss"]


@dataclasses.dataclass(frozen=True)
class LossSettings:
    r"""Everything that decides the loss of a micro-batch besides its tensors; frozen, validated. The trainer builds
    it from its config and the live knobs (``alpha``, ``token_weighting``); a change is a new object, never an edit.

    >>> LossSettings(loss_type="bnpo", token_weighting="sa_ah").alpha
    0.5
    >>> LossSettings(loss_type="sapo")
    Traceback (most recent call last):
    ValueError: loss_type must be one of ('grpo', 'bnpo', 'dr_grpo', 'dapo'), got 'sapo'
    """

    loss_type: str = "bnpo"  # how per-token losses are reduced (reduce_token_loss)
    epsilon_low: float = 0.2  # the PPO clip range [1 - eps_low, 1 + eps_high] (Clip-Higher: 0.2, 0.28)
    epsilon_high: float = 0.2
    delta: float | None = None  # an upper bound on the unclipped ratio (two-sided clipping), or None
    sequence_ratio: bool = False  # GSPO's one ratio per response, exp(mean_t log-ratio), instead of one per token
    beta: float = 0.0  # weight of the KL penalty to the reference policy (k3 estimator)
    kl_ratio_correction: bool = True  # the KL estimate times the importance ratio (TRL's use_bias_correction_kl)
    token_weighting: str = methods.DEFAULT_TOKEN_WEIGHTING  # "sa_ah": horizon weights on A < 0 only; "ah": on all
    alpha: float = methods.DEFAULT_ALPHA  # the horizon weights' strength, >= 0 (SA-AH paper: 0.5)
    entropy_coef: float = 0.0  # an entropy bonus: loss - coef * mean entropy
    cov_penalty: str = methods.DEFAULT_COV_PENALTY  # "clip_cov" or "kl_cov" (Cui et al.), with the fields below
    clip_cov_ratio: float = methods.DEFAULT_CLIP_COV_RATIO
    clip_cov_lb: float = methods.DEFAULT_CLIP_COV_LB
    clip_cov_ub: float = methods.DEFAULT_CLIP_COV_UB
    kl_cov_ratio: float = methods.DEFAULT_KL_COV_RATIO
    kl_cov_coef: float = methods.DEFAULT_KL_COV_COEF
    max_completion_length: int | None = None  # dr_grpo's constant token normaliser

    def __post_init__(self):
        check_choice(self.loss_type, "loss_type", LOSS_TYPES)
        check_choice(self.token_weighting, "token_weighting", TOKEN_WEIGHTINGS)
        check_choice(self.cov_penalty, "cov_penalty", COV_PENALTIES)
        for name in ("epsilon_low", "epsilon_high", "beta", "alpha", "entropy_coef", "kl_cov_coef"):
            if not check_finite_scalar(getattr(self, name), name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.delta is not None and not check_finite_scalar(self.delta, "delta") > 1:
            raise ValueError(f"delta must be > 1 (an upper bound on the ratio), got {self.delta}")
        check_ratio(self.clip_cov_ratio, "clip_cov_ratio")
        check_ratio(self.kl_cov_ratio, "kl_cov_ratio")
        if self.loss_type == "dr_grpo":
            check_int(self.max_completion_length, "max_completion_length", 1)
        if self.token_weighting != "none" and self.loss_type == "dr_grpo":
            raise ValueError("token_weighting needs loss_type in ('bnpo', 'dapo', 'grpo'), got 'dr_grpo'")


@dataclasses.dataclass(frozen=True)
class LossScale:
    r"""What normalises this micro-batch's loss from outside it; the rows a sparse update left out of the forward
    (A = 0: weight 1, loss 0 on each token) still count."""

    accumulation: int = 1  # gradient-accumulation steps the loss is split over (1 in evaluation)
    num_items: float | None = None  # dapo: the generation batch's token count (over every process)
    num_processes: int = 1  # processes sharing num_items
    steps_per_generation: int = 1  # micro-batch steps per generation
    rows: int | None = None  # the whole micro-batch's responses when sparse updates left some out; None: all here
    skipped_tokens: float = 0.0  # the left-out rows' real tokens, in bnpo's and the horizon weights' normalisers


class LossOutput(NamedTuple):
    """``loss``: 0-dim, differentiable; ``metrics``: this micro-batch's ``saah/*``, ``cov/*`` and ``ledger/*``
    (floats); ``token_stats``: the tensors of the metrics that reduce across processes (per token:
    ``entropy``, ``kl``, ``clip_low``, ``clip_high``, ``clip_region``, None where not computed;
    ``policy_loss``: 0-dim, the policy term before the accumulation split)."""

    loss: torch.Tensor
    metrics: dict
    token_stats: dict


def reduce_token_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    scale: LossScale = LossScale(),
    *,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    r"""A (B, T) per-token loss reduced to the micro-batch's loss, as TRL's ``GRPOTrainer`` reduces its own.

    ``grpo``: each response's token mean, then the mean over responses; ``bnpo``: the token mean;
    ``dr_grpo``: the token sum over B * max_completion_length; each divided by the accumulation
    steps. ``dapo``: the token sum over the generation batch's token count per process and
    accumulation window. Rows and tokens left out by sparse updates (:class:`LossScale`) stay in
    the denominators, so the result equals the full micro-batch's.

    >>> x, m = torch.tensor([[1.0, 3.0], [2.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    >>> [reduce_token_loss(x, m, t, LossScale(num_items=3), max_completion_length=2).item()
    ...  for t in ("grpo", "bnpo", "dapo", "dr_grpo")]
    [2.0, 2.0, 2.0, 1.5]
    >>> reduce_token_loss(x, m, "grpo", LossScale(rows=4)).item()     # two more rows, all-zero advantage
    1.0
    """
    summed = per_token * mask  # (B, T)
    rows = per_token.shape[0] if scale.rows is None else scale.rows
    if loss_type == "grpo":
        return (summed.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / rows / scale.accumulation
    if loss_type == "bnpo":
        return summed.sum() / (mask.sum() + scale.skipped_tokens).clamp(min=1.0) / scale.accumulation
    if loss_type == "dr_grpo":
        return summed.sum() / (rows * max_completion_length) / scale.accumulation
    if scale.num_items is None:
        raise ValueError("LossScale.num_items (the generation batch's token count) is needed for loss_type='dapo'")
    items = torch.as_tensor(scale.num_items, dtype=per_token.dtype, device=per_token.device).clamp(min=1.0)
    return summed.sum() / (items / scale.num_processes * scale.accumulation / scale.steps_per_generation)


def grpo_loss(
    logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    scale: LossScale = LossScale(),
    *,
    old_logps: torch.Tensor | None = None,
    entropies: torch.Tensor | None = None,
    h_norm: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    entropy_mask: torch.Tensor | None = None,
    sampling_ratio: torch.Tensor | None = None,
    hard_rows: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> LossOutput:
    r"""The loss of one micro-batch: QAE's advantages, SA-AH's horizon weights, PPO's clip, the entropy controls.

    Every input is checked here, once (:func:`_checked_inputs`); the steps below trust them. Shapes:

    * ``logps``: (B, T) log pi_theta(y_t | y_<t) of the sampled tokens, differentiable; ``mask``: (B, T) 0/1, the
      completion tokens the loss counts; ``advantages``: (B,) A_i (QAE: (R_i - b_K) / std, eq. Q1-Q5);
    * ``old_logps``: (B, T) at sampling time (None: the first pass over the batch, ratio 1); ``ref_logps``: (B, T)
      of the reference policy (needed with ``beta`` > 0); ``entropies``: (B, T) H_t (metrics, the ledger, the
      entropy bonus: needed with ``entropy_coef`` > 0); ``h_norm``: (B, T) H~_t in [0, 1] (needed with token
      weighting); ``entropy_mask``: (B, T) 0/1, the forking tokens that alone get gradient (None: all);
      ``sampling_ratio``: (B, T) or (B, 1), the sampler's (vLLM's) importance ratio; ``hard_rows``: (B,) bool, each
      response's QAE regime (the ledger's split); ``generator``: Clip-Cov's random draw.

    >>> lp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]])).requires_grad_()
    >>> out = grpo_loss(lp, torch.tensor([1.0, -0.5]), torch.ones(2, 2), LossSettings(loss_type="bnpo"))
    >>> out.loss.item()                 # -(1 + 1 - 0.5 - 0.5) / 4: on-policy, every ratio is 1
    -0.25
    >>> out.loss.backward(); lp.grad    # d/dlogp_t of -A_i r_t / N_tok
    tensor([[-0.2500, -0.2500],
            [ 0.1250,  0.1250]])
    >>> grpo_loss(lp, torch.tensor([1.0]), torch.ones(2, 2), LossSettings())
    Traceback (most recent call last):
    ValueError: advantages must have shape (2,), got (1,)
    """
    s = settings
    x = _checked_inputs(
        logps, advantages, mask, s, old_logps, entropies, h_norm, ref_logps, entropy_mask, sampling_ratio, hard_rows
    )
    m, a, lp = x["mask"], x["advantages"], x["lp"]  # (B, T), (B,), (B, T) detached
    old = lp if old_logps is None else x["old_logps"]  # (B, T)
    metrics: dict = {}
    a_t = a[:, None]  # (B, 1): A_i on every token
    if s.token_weighting != "none":  # SA-AH (S2-S4): A_i w_t c
        a_t = _horizon_advantages(a, x["h_norm"], m, s, scale.skipped_tokens, metrics)  # (B, T)
    cov_penalty = None
    if s.cov_penalty != "none":  # Clip-Cov / KL-Cov (P1-P3)
        a_t, cov_penalty = _cov_control(logps, lp, old, a, a_t, m, s, generator, metrics)
    # P5 / P6: the importance ratio and PPO's clipped surrogate, per token (B, T) or per response (B, 1)
    per_token, ratio, bounded = _clipped_surrogate(logps, old, a_t, m, s)
    if entropy_mask is not None:  # forking tokens only
        per_token = per_token * entropy_mask
    if sampling_ratio is not None:  # the sampler's (vLLM's) importance correction
        per_token = per_token * sampling_ratio
    kl = None
    if s.beta != 0.0:  # KL to the reference policy, k3 estimator: exp(ref - logp) - (ref - logp) - 1
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1  # (B, T)
        kl = kl * ratio if s.kl_ratio_correction else kl
        per_token = per_token + s.beta * kl
    # reduced as the loss type reduces tokens; rows / tokens left out by sparse updates stay in the denominators
    loss = reduce_token_loss(per_token, m, s.loss_type, scale, max_completion_length=s.max_completion_length)
    policy_loss = loss.detach() * (1 if s.loss_type == "dapo" else scale.accumulation)  # per micro-batch, unsplit
    if cov_penalty is not None:
        loss = loss + reduce_token_loss(cov_penalty, m, s.loss_type, scale)
    on = m if entropy_mask is None else m * entropy_mask  # the tokens the policy term acts on
    if s.entropy_coef:  # the bonus is a plain mean entropy over them, whatever the loss type
        loss = loss - s.entropy_coef * (entropies * on).sum() / on.sum().clamp(min=1.0) / scale.accumulation
    # the entropy ledger (L1, L4, L5): each token's first-order entropy change, by sign x regime
    if entropies is not None:
        a_upd = a_t.detach().expand(m.shape).to(lp)
        skipped_rows = 0 if scale.rows is None else scale.rows - lp.shape[0]
        ledger = _batch_ledger(
            *(lp, x["entropies"], a_upd, on.to(lp), x["hard_rows"], x.get("old_logps"), s.sequence_ratio),
            *(s.epsilon_low, s.epsilon_high, s.loss_type == "grpo", scale.skipped_tokens, skipped_rows),
        )
        metrics.update({LEDGER_PREFIX + k: v for k, v in ledger.items()})
    # the clip's metrics by the sign of A_i (w_t c > 0): one per response with GSPO's ratio, as TRL counts them
    clip_low = (bounded < 1 - s.epsilon_low) & (a[:, None] < 0)
    clip_high = (bounded > 1 + s.epsilon_high) & (a[:, None] > 0)
    stats = {"entropy": entropies, "kl": kl, "clip_low": clip_low, "clip_high": clip_high}
    return LossOutput(loss, metrics, {**stats, "clip_region": clip_low | clip_high, "policy_loss": policy_loss})


def _checked_inputs(logps, advantages, mask, s, old_logps, entropies, h_norm, ref, entropy_mask, ratio, hard_rows):
    """:func:`grpo_loss`'s tensors checked, each error naming its argument, shape and range (values: where
    :func:`qae_lab._checks.checking_values`): the mask in logps' dtype but never below float32 (a bfloat16 mask would
    round its token counts, 257 -> 256), the others as given, and their detached, at-least-float32 copies."""
    if not isinstance(logps, torch.Tensor) or not logps.is_floating_point() or logps.dim() != 2:
        raise ValueError("logps must be a 2-dimensional floating-point tensor (B, T)")
    (b, t), lp = logps.shape, _upcast(logps.detach())
    given = {"advantages": advantages, "old_logps": old_logps, "entropies": entropies, "ref_logps": ref}
    out = {"mask": check_mask(mask, (b, t)).to(torch.promote_types(logps.dtype, torch.float32)), "lp": lp}
    needed = {  # name: (given, needed, by which setting)
        "entropies": (entropies, s.entropy_coef != 0, "entropy_coef > 0"),
        "ref_logps": (ref, s.beta != 0, "beta != 0"),
        "h_norm": (h_norm, s.token_weighting != "none", "token_weighting != 'none'"),
    }
    for name, (x, wanted, by) in needed.items():
        if x is None and wanted:
            raise ValueError(f"{name} (a (B, T) tensor) is needed with these settings: {by}")
    for name, x in given.items():
        if x is not None:
            checked = as_real_tensor(x, name, shape=(b,) if name == "advantages" else (b, t))
            out[name] = x if isinstance(x, torch.Tensor) and x.is_floating_point() else checked
    if entropies is not None:
        out["entropies"] = out["entropies"].detach().to(lp)
        if checking_values() and bool((out["entropies"] < 0).any()):
            raise ValueError("entropies must be >= 0 (nats)")
    if old_logps is not None:
        out["old_logps"] = out["old_logps"].detach().to(lp)
    if s.token_weighting != "none":
        out["h_norm"] = check_normalised_entropy(h_norm, (b, t))
    if ratio is not None:
        as_real_tensor(ratio, "sampling_ratio", shape=(b, None))
    if entropy_mask is not None:
        check_mask(entropy_mask, (b, t), "entropy_mask")
    out["hard_rows"] = None if hard_rows is None else check_mask(hard_rows, (b,), "hard_rows").to(lp.device) > 0
    return out


def _horizon_advantages(a, h, m, s: LossSettings, skipped_tokens: float, metrics: dict) -> torch.Tensor:
    r"""A_i w_t c, (B,) -> (B, T): SA-AH-GRPO (arXiv 2606.05434) eq. S2-S3, w_t = exp(-alpha sum_{s<=t} H~_s) on
    responses with A_i < 0 (AH: on every response), else 1; eq. S4, L = sum_t w_t l_t / sum_t w_t as the loss type's
    token mean of c w_t l_t (c: :func:`qae_lab.horizon.normaliser_factor`); the ``saah/*`` metrics (eq. S5)."""
    mh = m.to(h.dtype)
    w = _horizon_weights(h, mh, s.alpha)  # (B, T)
    w = _select(w, mh, a) if s.token_weighting == "sa_ah" else w
    per_sequence = s.loss_type == "grpo"
    c = _normaliser_factor(w, mh, per_sequence, 0.0 if per_sequence else float(skipped_tokens))  # () or (B, 1)
    stats = _weight_stats(w, mh, a)
    metrics.update({SAAH_ALPHA: s.alpha, SAAH_W_MEAN_NEG: stats["w_mean_neg"]})
    metrics[SAAH_EFFECTIVE_TOKENS_FRAC] = stats["effective_tokens_frac"]
    return a[:, None] * (w * c).to(a.dtype)  # (B, T)


def _cov_control(logps, lp, old, a, a_t, m, s: LossSettings, generator, metrics: dict):
    r"""Clip-Cov / KL-Cov (Cui et al., arXiv 2505.22617; eq. P1-P3): Cov_t = (log pi_t - mean log pi)(A_i - mean A)
    over the micro-batch's (B, T) tokens; Clip-Cov zeroes A~_t on a random draw of band tokens not already clipped,
    KL-Cov adds coef |log pi_theta - log pi_old| on the top-covariance ones. Returns (A~_t, the penalty or None)."""
    mb = m > 0
    cov = _token_covariance(lp, a[:, None].to(lp), m.to(lp))  # (B, T)
    penalty = None
    if s.cov_penalty == "clip_cov":
        clipped = _clip_active(_upcast(logps.detach() - old), a[:, None].to(lp), s.epsilon_low, s.epsilon_high)
        chosen = _clip_cov_select(cov, mb, s.clip_cov_ratio, s.clip_cov_lb, s.clip_cov_ub, clipped, generator)
        a_t = a_t.expand(m.shape).masked_fill(chosen, 0.0)
    else:
        chosen = _kl_cov_select(cov, mb, s.kl_cov_ratio)
        penalty = s.kl_cov_coef * (logps - old.to(logps)).abs() * chosen.to(logps)  # (B, T)
    n = m.sum().clamp(min=1)
    metrics[COV_SELECTED_FRAC], metrics[COV_TOKEN_COV] = host_floats([chosen.sum() / n, cov.sum() / n])
    return a_t, penalty


def _upcast(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _clipped_surrogate(logps, old, a_t, m, s: LossSettings):
    r"""PPO's clipped surrogate l_t = -min(r_t A~_t, clip(r_t, 1 - eps_low, 1 + eps_high) A~_t) (eq. P5: Clip-Higher
    widens eps_high), r_t = pi_theta / pi_old per token or GSPO's s_i = exp(mean_t log(pi_theta / pi_old)) (eq. P6),
    bounded above by ``delta`` (two-sided clipping). Returns (l_t, r_t, the bounded r_t), (B, T) or (B, 1)."""
    log_ratio = logps - old  # (B, T)
    if s.sequence_ratio:
        log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]  # (B, 1)
    ratio = torch.exp(log_ratio)
    bounded = ratio if s.delta is None else ratio.clamp(max=s.delta)
    return -torch.min(bounded * a_t, ratio.clamp(1 - s.epsilon_low, 1 + s.epsilon_high) * a_t), ratio, bounded
