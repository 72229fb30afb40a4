r"""QAE as a verl advantage estimator (``algorithm.adv_estimator=qae``).

:func:`compute_qae_outcome_advantage` has the signature verl calls estimators with; :func:`register` adds it to
verl's registry (``verl.trainer.ppo.core_algos.register_adv_est``) under "qae". The maths is
:func:`qae_lab.advantages.group_advantages` (arXiv 2509.22611): A_i = (R_i - b_K(q)) / (std_j R_j + eps), broadcast
over the response's tokens.

Departures from verl's GRPO estimator, and why: docs/implementation.md, section ``qae_lab.integrations.verl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from qae_lab._checks import as_real_tensor, check_finite_scalar, check_k
from qae_lab.advantages import QUANTILE_METHODS, group_advantages
from qae_lab.methods import DEFAULT_K, DEFAULT_QUANTILE_METHOD

__all__ = ["compute_qae_outcome_advantage", "register", "DEFAULT_K", "ESTIMATOR_NAME"]

ESTIMATOR_NAME = "qae"


def _config_value(config: Any, key: str, default: Any) -> Any:
    """Read ``key`` from a dict, an OmegaConf DictConfig or a verl config dataclass."""
    value = config.get(key, None) if hasattr(config, "get") else getattr(config, key, None)  # None: no config
    return default if value is None else value


def _group_ids(index, n: int) -> np.ndarray:
    """Map prompt uids (any hashable values) to integer group ids (N,)."""
    uids = np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index
    if uids.ndim != 1 or uids.shape[0] != n:
        raise ValueError(f"index must be a 1-D array of {n} prompt uids (one per response), got shape {uids.shape}")
    _, gid = np.unique(uids.astype(str), return_inverse=True)
    return gid.reshape(-1)


def compute_qae_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""QAE outcome advantages with verl's estimator signature: ``(advantages, returns)``, the same (bs, T) tensor
    twice, the response's advantage on its tokens and 0 on padding.

    A response's score is the sum of its ``token_level_rewards`` (bs, T); ``index`` (bs,): prompt uids, in any order.
    ``norm_adv_by_std_in_grpo`` (divide by the group std, else Dr.GRPO) None: ``config``'s, else True. ``config``: a
    mapping or verl ``AlgoConfig`` with ``quantile_k`` and ``quantile_method``; other keyword arguments are ignored.

    >>> r = torch.zeros(6, 3); r[[0, 3, 5], 2] = 1.0          # scores 1,0,0,1,0,1
    >>> uid = np.array(["a", "b", "a", "b", "a", "b"])        # interleaved: a = 1,0,0  b = 0,1,1
    >>> adv, _ = compute_qae_outcome_advantage(r, torch.ones(6, 3), uid,
    ...                                        norm_adv_by_std_in_grpo=False, config={"quantile_k": 0.4})
    >>> adv[:, 0]
    tensor([ 1., -1.,  0.,  0.,  0.,  0.])
    """
    rewards = as_real_tensor(token_level_rewards, "token_level_rewards", ndim=2)
    if not isinstance(response_mask, torch.Tensor) or tuple(response_mask.shape) != tuple(rewards.shape):
        raise ValueError(f"response_mask must be a tensor of shape {tuple(rewards.shape)} like token_level_rewards")
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = _config_value(config, "norm_adv_by_std_in_grpo", True)
    if not isinstance(norm_adv_by_std_in_grpo, bool):
        raise ValueError(f"norm_adv_by_std_in_grpo must be a bool, got {norm_adv_by_std_in_grpo!r}")
    eps = check_finite_scalar(epsilon, "epsilon")
    k = check_k(_config_value(config, "quantile_k", DEFAULT_K), "config.quantile_k")
    method = _config_value(config, "quantile_method", DEFAULT_QUANTILE_METHOD)
    if method not in QUANTILE_METHODS:
        raise ValueError(f"config.quantile_method must be one of {QUANTILE_METHODS}, got {method!r}")
    scores = rewards.sum(dim=-1)  # (bs,)
    gid = _group_ids(index, scores.shape[0])  # (bs,)
    sizes = np.bincount(gid)
    if sizes.min() < 2:
        bad = int(np.argmin(sizes))
        raise ValueError(
            f"index: every prompt uid must appear at least twice (group size >= 2); "
            f"uid #{bad} appears {int(sizes[bad])} time(s)"
        )
    scale = "group" if norm_adv_by_std_in_grpo else "none"
    adv = torch.empty_like(scores)  # (bs,)
    # Groups of one size at a time: gather them contiguous, compute, scatter back.
    for g in np.unique(sizes):
        rows = np.flatnonzero(sizes[gid] == g)
        rows = torch.as_tensor(rows[np.argsort(gid[rows], kind="stable")], device=scores.device)
        adv[rows] = group_advantages(
            scores[rows], int(g), baseline="quantile", k=k, quantile_method=method, scale=scale, eps=eps
        )
    advantages = adv[:, None] * response_mask.to(adv.dtype)  # (bs, T)
    return advantages, advantages


def register() -> None:
    r"""Register :func:`compute_qae_outcome_advantage` with verl as "qae" (again: a no-op); ImportError without verl.

    >>> import sys
    >>> from unittest import mock
    >>> with mock.patch.dict(sys.modules, {"verl.trainer.ppo.core_algos": None}):
    ...     register()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ImportError: qae_lab.integrations.verl.register() needs verl (pip install verl); compute_qae_outcome_advantage ...
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est  # verl: optional, not a dependency
    except ImportError as err:
        raise ImportError(
            "qae_lab.integrations.verl.register() needs verl (pip install verl); "
            "compute_qae_outcome_advantage itself works without it"
        ) from err
    register_adv_est(ESTIMATOR_NAME)(compute_qae_outcome_advantage)
