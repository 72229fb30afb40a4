r"""SA-AH-GRPO as a verl policy loss (``actor_rollout_ref.actor.policy_loss.loss_mode=sa_ah``).

verl's actor calls the policy loss named by ``actor.policy_loss.loss_mode`` (its registry:
``verl.trainer.ppo.core_algos.register_policy_loss``) with ``old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights``, all (N, T), and adds the entropy bonus and the KL loss itself.
:func:`compute_policy_loss_saah` has that signature; :func:`register` adds it under "sa_ah".

The maths is qae_lab's (SA-AH, arXiv 2606.05434; labels of ``docs/equations.md``); how it maps onto verl's loss, and
the departures from the paper: docs/implementation.md, section ``qae_lab.integrations.verl_saah``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from qae_lab._checks import as_real_tensor, check_choice, check_finite_scalar, check_int, check_mask
from qae_lab.methods import DEFAULT_ALPHA
from qae_lab.horizon import normalise_entropy, normaliser_factor, selective_horizon_weights, weight_stats
from qae_lab.metric_names import SAAH_ALPHA, SAAH_EFFECTIVE_TOKENS_FRAC, SAAH_W_MEAN_NEG

__all__ = [
    "LOSS_NAME",
    "DEFAULT_ALPHA",
    "LOSS_AGG_MODES",
    "response_advantages",
    "surprisal_normalised_entropy",
    "saah_advantages",
    "compute_policy_loss_saah",
    "register",
]

LOSS_NAME = "sa_ah"
# verl's aggregations that divide by a token count (S4 replaces it by sum(w)); the second per response
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


def response_advantages(advantages: torch.Tensor, response_mask) -> torch.Tensor:
    r"""A_i, each response's advantage (N,), from verl's token-level (N, T) advantages, constant along each
    response's tokens (an outcome estimator; refused otherwise); 0 for a response without tokens.

    >>> response_advantages(torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    tensor([ 0.5000, -1.0000])
    """
    a = as_real_tensor(advantages, "advantages", ndim=2)
    m = check_mask(response_mask, a.shape, "response_mask").to(a.dtype)  # (N, T)
    n_tok = m.sum(-1)  # (N,)
    a_i = (a * m).sum(-1) / n_tok.clamp(min=1.0)  # (N,)
    spread = ((a - a_i[:, None]).abs() * m).amax(-1) if a.numel() else a_i  # (N,)
    if bool((spread > 1e-5 * (1.0 + a_i.abs())).any()):
        bad = int(spread.argmax())
        raise ValueError(
            f"advantages must be constant along each response (an outcome estimator such as grpo or "
            f"qae; SA-AH weights responses by the sign of A_i); row {bad} varies by {spread[bad]:.3g}"
        )
    return a_i


def surprisal_normalised_entropy(old_log_prob: torch.Tensor, response_mask, vocab_size: int) -> torch.Tensor:
    r"""H~_t estimated by the sampled token's surprisal, -log pi_old(y_t) / log V, clamped to [0, 1]: (N, T).

    SA-AH (arXiv 2606.05434), S1 from one sample: E_{y ~ pi_old}[-log pi_old(y)] is H_t, and S2's cumulative sum is
    -log pi_old(y_<=t); what verl hands a policy loss. ``old_log_prob`` (N, T) at the sampling temperature; V >= 2
    the vocabulary size; detached, 0 on padding.

    >>> lp = torch.log(torch.tensor([[0.5, 0.25, 1.0]]))               # V = 4: log 2 / log 4 = 0.5
    >>> surprisal_normalised_entropy(lp, torch.tensor([[1, 1, 0]]), 4)
    tensor([[0.5000, 1.0000, 0.0000]])
    """
    lp = as_real_tensor(old_log_prob, "old_log_prob", ndim=2)
    m = check_mask(response_mask, lp.shape, "response_mask").bool()  # (N, T)
    # H~_t ~ -log pi_old(y_t) / log V, padding set to 0 before it can reach the sums
    return normalise_entropy((0.0 - lp.detach()).masked_fill(~m, 0.0), vocab_size)  # 0 - x: no -0.0


def saah_advantages(
    advantages: torch.Tensor, response_mask, h_norm: torch.Tensor, alpha: float, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""SA-AH's per-token advantages A_i w_t c for verl's token-normalised losses, and the weights w: (N, T) each.

    SA-AH (arXiv 2606.05434): S2-S3 w_{i,t} = exp(-alpha sum_{s<=t} H~_{i,s}) on responses with
    A_i < 0, 1 on the others; S4 c = sum(m) / sum(w) (``token-mean``) or c_i = sum_t m / sum_t w
    (``seq-mean-token-mean``), so that verl's mean of c w_t l_t is sum(w l) / sum(w). ``h_norm``: H~_t in [0, 1]
    (:func:`surprisal_normalised_entropy`, or exact H_t / log V); ``alpha`` finite (0: plain GRPO); w is detached,
    0 on padding.

    >>> a = torch.tensor([[1.0, 1.0], [-1.0, -1.0]]); m = torch.ones(2, 2)
    >>> a_t, w = saah_advantages(a, m, torch.full((2, 2), 0.5), alpha=2.0)
    >>> w                                          # exp(-2 * 0.5 * [1, 2]) on the negative row
    tensor([[1.0000, 1.0000],
            [0.3679, 0.1353]])
    >>> torch.isclose(-a_t.sum() / 4, -(a * w).sum() / w.sum())    # verl's token mean of -A~ is S4's loss
    tensor(True)
    """
    a_t, w, _ = _saah_advantages(advantages, response_mask, h_norm, alpha, loss_agg_mode)
    return a_t, w


def _saah_advantages(advantages, response_mask, h_norm, alpha, loss_agg_mode):
    """:func:`saah_advantages` and the per-response advantages A_i (N,) it read, for the loss's metrics."""
    check_choice(loss_agg_mode, "loss_agg_mode", LOSS_AGG_MODES)
    a_i = response_advantages(advantages, response_mask)  # (N,)
    m = check_mask(response_mask, advantages.shape, "response_mask")  # (N, T)
    # (S2, S3) w_{i,t} = exp(-alpha sum_{s<=t} H~_{i,s}) if A_i < 0 else 1
    w = selective_horizon_weights(h_norm, m, a_i, alpha, selective=True)  # (N, T)
    # (S4) c = sum(m) / sum(w), or per response: mean_t(c w_t l_t) over the tokens = sum(w l) / sum(w)
    c = normaliser_factor(w, m, per_sequence=loss_agg_mode == "seq-mean-token-mean")  # () or (N, 1)
    return advantages * (w * c).to(advantages.dtype), w, a_i


def compute_policy_loss_saah(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    *,
    alpha: float = DEFAULT_ALPHA,
    vocab_size: int | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""SA-AH-GRPO's policy loss with verl's policy-loss signature: verl's ``vanilla`` loss on A_i w_t c.

    SA-AH (arXiv 2606.05434), S1-S5: H~_t from ``entropy`` (exact H_t in nats) if given, else from the surprisal
    -log pi_old(y_t), then :func:`saah_advantages`, then ``compute_policy_loss_vanilla``. All tensors (N, T);
    :func:`register` binds ``alpha`` and ``vocab_size``. Returns ``vanilla``'s loss and metrics plus the ``saah/*``
    ones; ImportError without verl.

    >>> import sys
    >>> from unittest import mock
    >>> with mock.patch.dict(sys.modules, {"verl.trainer.ppo.core_algos": None}):
    ...     compute_policy_loss_saah(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
    ...                              vocab_size=4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ImportError: qae_lab.integrations.verl_saah needs verl (pip install verl) ...
    """
    if vocab_size is None:
        raise ValueError("vocab_size must be the model's vocabulary size V >= 2 (bind it with register())")
    check_int(vocab_size, "vocab_size", 2)
    alpha = check_finite_scalar(alpha, "alpha")
    m = check_mask(response_mask, as_real_tensor(advantages, "advantages", ndim=2).shape, "response_mask")  # (N, T)
    if entropy is None:
        h_norm = surprisal_normalised_entropy(old_log_prob, m, vocab_size)  # (N, T)
    else:  # exact: H~_t = H_t / log V
        h_norm = normalise_entropy(as_real_tensor(entropy, "entropy", ndim=2).masked_fill(m == 0, 0.0), vocab_size)
    a_t, w, a_i = _saah_advantages(advantages, m, h_norm, alpha, loss_agg_mode)  # (N, T), (N, T), (N,)
    try:
        from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla  # verl: optional, not a dependency
    except ImportError as err:
        raise ImportError(
            "qae_lab.integrations.verl_saah needs verl (pip install verl) for the loss itself; "
            "saah_advantages works without it"
        ) from err
    loss, metrics = compute_policy_loss_vanilla(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=a_t,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
    stats = weight_stats(w, m, a_i)  # (S5) the saah/* metrics
    metrics = {
        **metrics,
        SAAH_ALPHA: alpha,
        SAAH_W_MEAN_NEG: stats["w_mean_neg"],
        SAAH_EFFECTIVE_TOKENS_FRAC: stats["effective_tokens_frac"],
    }
    return loss, metrics


def register(alpha: float = DEFAULT_ALPHA, *, vocab_size: int, name: str = LOSS_NAME):
    r"""Register :func:`compute_policy_loss_saah`, ``alpha`` (0: ``vanilla``; < 0 amplifies, the paper's ablation) and
    ``vocab_size`` (V >= 2) bound, as verl's ``name`` in every process computing the actor's loss; again: replaces the
    settings; a name verl uses for another loss is refused. Returns the registered partial; ImportError without verl.

    >>> import sys
    >>> from unittest import mock
    >>> with mock.patch.dict(sys.modules, {"verl.trainer.ppo.core_algos": None}):
    ...     register(0.5, vocab_size=151936)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ImportError: qae_lab.integrations.verl_saah.register() needs verl (pip install verl); ...
    """
    alpha = check_finite_scalar(alpha, "alpha")
    check_int(vocab_size, "vocab_size", 2)
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    try:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss  # verl: optional
    except ImportError as err:
        raise ImportError(
            "qae_lab.integrations.verl_saah.register() needs verl (pip install verl); saah_advantages works without it"
        ) from err
    try:
        existing = get_policy_loss_fn(name)
    except ValueError:  # verl: not registered yet
        existing = None
    if existing is not None and getattr(existing, "func", None) is not compute_policy_loss_saah:
        raise ValueError(f"name {name!r} is already verl's policy loss {existing!r}; choose another name")
    fn = functools.partial(compute_policy_loss_saah, alpha=alpha, vocab_size=vocab_size)
    register_policy_loss(name)(fn)
    return fn
