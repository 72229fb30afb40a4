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

from qae_lab._checks import check_choice, check_finite_scalar, check_int, check_mask
from qae_lab.entropy_controls import (
    COV_PENALTIES,
    check_ratio,
    clip_cov_select,
    kl_cov_penalty,
    kl_cov_select,
    ppo_clip_active,
    token_covariance,
)
from qae_lab.horizon import normaliser_factor, selective_horizon_weights, weight_stats
from qae_lab.ledger import batch_ledger
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
    r"""Everything that decides the loss of a micro-batch besides its tensors; frozen, validated.

    Built once per step by the trainer from its config and the live knobs (``alpha``,
    ``token_weighting``); a change is a new object (:func:`dataclasses.replace`), never an edit.

    Attributes:
        loss_type: how per-token losses are reduced (:func:`reduce_token_loss`): one of :data:`LOSS_TYPES`.
        epsilon_low, epsilon_high: the PPO clip range [1 - eps_low, 1 + eps_high] (Clip-Higher: 0.2, 0.28).
        delta: an upper bound on the unclipped ratio (two-sided clipping), or None.
        sequence_ratio: GSPO's one ratio per response, exp(mean_t log-ratio), instead of one per token.
        beta: weight of the KL penalty to the reference policy (k3 estimator); 0 for none.
        kl_ratio_correction: multiply the KL estimate by the importance ratio (TRL's ``use_bias_correction_kl``, on by default).
        token_weighting: ``"none"``, ``"sa_ah"`` (horizon weights on A < 0 only) or ``"ah"`` (every response).
        alpha: the horizon weights' strength, >= 0 (SA-AH paper: 0.5).
        entropy_coef: an entropy bonus, loss - coef * mean entropy; 0 for none.
        cov_penalty: ``"none"``, ``"clip_cov"`` or ``"kl_cov"`` (Cui et al.), with their ratios, band and coefficient.
        max_completion_length: ``dr_grpo``'s constant token normaliser.

    >>> LossSettings(loss_type="bnpo", token_weighting="sa_ah").alpha
    0.5
    >>> LossSettings(loss_type="sapo")
    Traceback (most recent call last):
    ValueError: loss_type must be one of ('grpo', 'bnpo', 'dr_grpo', 'dapo'), got 'sapo'
    """

    loss_type: str = "bnpo"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: float | None = None
    sequence_ratio: bool = False
    beta: float = 0.0
    kl_ratio_correction: bool = True
    token_weighting: str = methods.DEFAULT_TOKEN_WEIGHTING
    alpha: float = methods.DEFAULT_ALPHA
    entropy_coef: float = 0.0
    cov_penalty: str = methods.DEFAULT_COV_PENALTY
    clip_cov_ratio: float = methods.DEFAULT_CLIP_COV_RATIO
    clip_cov_lb: float = methods.DEFAULT_CLIP_COV_LB
    clip_cov_ub: float = methods.DEFAULT_CLIP_COV_UB
    kl_cov_ratio: float = methods.DEFAULT_KL_COV_RATIO
    kl_cov_coef: float = methods.DEFAULT_KL_COV_COEF
    max_completion_length: int | None = None

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
    r"""What normalises this micro-batch's loss from outside it.

    Attributes:
        accumulation: gradient-accumulation steps the loss is split over (1 in evaluation).
        num_items: ``dapo``: the generation batch's token count (over every process).
        num_processes: processes sharing ``num_items``; steps_per_generation: micro-batch steps per generation.
        rows: responses of the whole micro-batch when sparse updates left some out of the forward
            (their A = 0); None when every row is here.
        skipped_tokens: the left-out rows' real tokens (weight 1 each, loss 0): they still count in
            ``bnpo``'s and the horizon weights' token normalisers.
    """

    accumulation: int = 1
    num_items: float | None = None
    num_processes: int = 1
    steps_per_generation: int = 1
    rows: int | None = None
    skipped_tokens: float = 0.0


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

    Args:
        logps: (B, T) log pi_theta(y_t | y_<t) of the sampled tokens, differentiable.
        advantages: (B,) response-level advantages A_i (QAE: R_i - b_K, over the group's std).
        mask: (B, T) 1 on the completion tokens the loss counts.
        settings: :class:`LossSettings`; scale: :class:`LossScale`.
        old_logps: (B, T) log-probs at sampling time; None: the first pass over this batch (ratio 1).
        entropies: (B, T) token entropies H_t (metrics, the ledger, the entropy bonus); needed
            with ``entropy_coef`` > 0. h_norm: (B, T) H~_t in [0, 1], needed with token weighting.
        ref_logps: (B, T) reference-policy log-probs, needed with ``beta`` > 0.
        entropy_mask: (B, T) bool, the high-entropy (forking) tokens alone get gradient; None: all.
        sampling_ratio: (B, T) or (B, 1) importance ratio of the sampler (vLLM), or None.
        hard_rows: (B,) bool, each response's QAE regime (the ledger's split), or None.
        generator: Clip-Cov's random draw.

    >>> lp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]])).requires_grad_()
    >>> out = grpo_loss(lp, torch.tensor([1.0, -0.5]), torch.ones(2, 2), LossSettings(loss_type="bnpo"))
    >>> out.loss.item()                 # -(1 + 1 - 0.5 - 0.5) / 4: on-policy, every ratio is 1
    -0.25
    >>> out.loss.backward(); lp.grad    # d/dlogp_t of -A_i r_t / N_tok
    tensor([[-0.2500, -0.2500],
            [ 0.1250,  0.1250]])
    """
    s = settings
    # (B, T), in logps' dtype but never below float32: a bfloat16 / float16 mask would round its token counts (257 -> 256)
    m = check_mask(mask, logps.shape).to(torch.promote_types(logps.dtype, torch.float32))
    a = advantages  # (B,), kept in its own dtype, as TRL applies it
    old = logps.detach() if old_logps is None else old_logps  # (B, T)
    metrics: dict = {}

    # SA-AH (S2, S3): w_t = exp(-alpha sum_{s<=t} H~_s) on responses with A_i < 0 (AH: every response), else 1;
    # (S4) L = sum_t w_t l_t / sum_t w_t, as the loss type's token mean of c w_t l_t (c: normaliser_factor)
    if s.token_weighting == "none":
        a_t = a[:, None]  # (B, 1)
    else:
        metrics[SAAH_ALPHA] = s.alpha
        w = selective_horizon_weights(h_norm, m, a, s.alpha, selective=s.token_weighting == "sa_ah")  # (B, T)
        per_sequence = s.loss_type == "grpo"
        c = normaliser_factor(
            w, m, per_sequence=per_sequence, skipped_tokens=0.0 if per_sequence else scale.skipped_tokens
        )  # () or (B, 1)
        stats = weight_stats(w, m, a)
        metrics[SAAH_W_MEAN_NEG], metrics[SAAH_EFFECTIVE_TOKENS_FRAC] = (
            stats["w_mean_neg"],
            stats["effective_tokens_frac"],
        )
        a_t = a[:, None] * (w * c).to(a.dtype)  # (B, T): A_i w_t c

    # Clip-Cov / KL-Cov (P1-P3): Cov_t = (log pi_t - mean log pi)(A_i - mean A) over the micro-batch's tokens
    cov_penalty = None
    if s.cov_penalty != "none":
        cov = token_covariance(logps, a, m)  # (B, T)
        if s.cov_penalty == "clip_cov":  # a random draw of band tokens not already clipped: no gradient through them
            clipped = ppo_clip_active(logps.detach() - old, a, s.epsilon_low, s.epsilon_high)
            chosen = clip_cov_select(
                cov, m, s.clip_cov_ratio, s.clip_cov_lb, s.clip_cov_ub, exclude=clipped, generator=generator
            )
            a_t = a_t.expand(m.shape).masked_fill(chosen, 0.0)
        else:  # the top-covariance tokens: + coef |log pi_theta - log pi_old|
            chosen = kl_cov_select(cov, m, s.kl_cov_ratio)
            cov_penalty = kl_cov_penalty(logps, old, chosen, s.kl_cov_coef)  # (B, T)
        n = m.sum().clamp(min=1)
        metrics[COV_SELECTED_FRAC], metrics[COV_TOKEN_COV] = (chosen.sum() / n).item(), (cov.sum() / n).item()

    # importance ratio r_t = pi_theta / pi_old, per token, or GSPO's (P6) s_i = exp(mean_t log(pi_theta / pi_old))
    log_ratio = logps - old  # (B, T)
    if s.sequence_ratio:
        log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]  # (B, 1)
    ratio = torch.exp(log_ratio)

    # PPO's clipped surrogate (P5: Clip-Higher widens eps_high): l_t = -min(r_t A~_t, clip(r_t, 1-eps_lo, 1+eps_hi) A~_t)
    clipped_ratio = ratio.clamp(1 - s.epsilon_low, 1 + s.epsilon_high)
    bounded = ratio if s.delta is None else ratio.clamp(max=s.delta)  # two-sided clipping bounds r_t from above
    per_token = -torch.min(bounded * a_t, clipped_ratio * a_t)  # (B, T) or (B, 1)
    if entropy_mask is not None:  # forking tokens only
        per_token = per_token * entropy_mask
    if sampling_ratio is not None:  # the sampler's (vLLM's) importance correction
        per_token = per_token * sampling_ratio

    # KL to the reference policy, k3 estimator: exp(ref - logp) - (ref - logp) - 1
    kl = None
    if s.beta != 0.0:
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1  # (B, T)
        if s.kl_ratio_correction:
            kl = kl * ratio
        per_token = per_token + s.beta * kl

    # reduced as the loss type reduces tokens; rows / tokens left out by sparse updates stay in the denominators
    loss = reduce_token_loss(per_token, m, s.loss_type, scale, max_completion_length=s.max_completion_length)
    policy_loss = loss.detach() * (1 if s.loss_type == "dapo" else scale.accumulation)  # per micro-batch, unsplit
    if cov_penalty is not None:
        loss = loss + reduce_token_loss(cov_penalty, m, s.loss_type, scale)
    on = m if entropy_mask is None else m * entropy_mask  # the tokens the policy term acts on
    if s.entropy_coef:  # the bonus is a plain mean entropy over them, whatever the loss type
        loss = loss - s.entropy_coef * (entropies * on).sum() / on.sum().clamp(min=1.0) / scale.accumulation

    # the entropy ledger (L1, L4, L5): each token's first-order entropy change under this update, by sign x regime
    if entropies is not None:
        ledger = batch_ledger(
            logps,
            entropies,
            a_t.expand(m.shape),
            on,
            hard_rows,
            old_logps=old_logps,
            epsilon_low=s.epsilon_low,
            epsilon_high=s.epsilon_high,
            sequence_level=s.sequence_ratio,
            per_sequence=s.loss_type == "grpo",
            skipped_tokens=scale.skipped_tokens,
            skipped_rows=0 if scale.rows is None else scale.rows - logps.shape[0],
        )
        metrics.update({LEDGER_PREFIX + k: v for k, v in ledger.items()})

    # the clip's metrics by the sign of A_i (w_t c > 0): one per response with GSPO's ratio, as TRL counts them
    clip_low = (bounded < 1 - s.epsilon_low) & (a[:, None] < 0)
    clip_high = (bounded > 1 + s.epsilon_high) & (a[:, None] > 0)
    token_stats = {
        "entropy": entropies,
        "kl": kl,
        "clip_low": clip_low,
        "clip_high": clip_high,
        "clip_region": clip_low | clip_high,
        "policy_loss": policy_loss,
    }
    return LossOutput(loss, metrics, token_stats)
