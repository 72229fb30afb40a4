r"""Group-relative advantages: GRPO's mean baseline and QAE's K-quantile baseline.

Implements, for a batch of B prompts with G responses each (N = B*G, the responses of
one prompt contiguous, shape legend B, G, N as everywhere in qae_lab):

* GRPO / DAPO (Shao et al. 2024; Yu et al. 2025):
  A_i = (R_i - mean_j R_j) / (std_j R_j + eps)
* Dr.GRPO (Liu et al. 2025): the same without the std division.
* QAE, "Quantile Advantage Estimation for Entropy-Safe Reasoning" (arXiv 2509.22611),
  eqs. for the empirical CDF and quantile baseline:
  F_q(x) = (1/G) #{j : R_j <= x},   b_K(q) = inf{x : F_q(x) >= K},
  A_i = (R_i - b_K(q)) / (std_j R_j + eps).

Implementer's notes: docs/implementation.md, section ``qae_lab.advantages``.
"""

from __future__ import annotations

import math

import torch

from qae_lab._checks import (
    as_count_tensor,
    as_real_tensor,
    check_choice,
    check_finite_scalar,
    check_group_size,
    check_k,
    snap_to_integer,
)
from qae_lab.methods import (
    BASELINES,
    DEFAULT_BASELINE,
    DEFAULT_K,
    DEFAULT_QUANTILE_METHOD,
    DEFAULT_SCALE,
    DEFAULT_SUCCESS_THRESHOLD,
    QUANTILE_METHODS,
)

__all__ = [
    "quantile_rank",
    "quantile_baseline",
    "mean_baseline",
    "group_advantages",
    "hard_regime",
    "signal_groups",
    "advantage_stats",
    "QUANTILE_METHODS",
    "BASELINES",
    "SCALES",
]

SCALES = ("group", "batch", "none")


def _grouped(rewards, group_size) -> tuple[torch.Tensor, int]:
    """Validate (N,) rewards and return them as (B, G) with G."""
    rewards = as_real_tensor(rewards, "rewards", ndim=1)
    group_size = check_group_size(group_size, rewards.numel())
    return rewards.view(-1, group_size), group_size  # (B, G)


def _pow2_scale(r: torch.Tensor) -> torch.Tensor:
    """A power of two s per row of (B, G) rewards, max|R| / 2 < s <= max|R| (and s >= 1): (B, 1).

    R / s is then exact and lies in [-2, 2], so sums, squares and differences cannot overflow.
    """
    m = r.abs().amax(dim=1, keepdim=True)  # (B, 1)
    # m = mantissa * 2^e with mantissa in [0.5, 1); s = 2^(e-1) is representable even for m = float max
    e = torch.frexp(m).exponent
    return torch.ldexp(torch.ones_like(m), (e - 1).clamp_min(0))  # (B, 1)


def _row_means(r: torch.Tensor) -> torch.Tensor:
    """The mean of each row of validated (B, G) rewards -> (B,), without overflow for huge rewards."""
    s = _pow2_scale(r)  # (B, 1)
    # mean_j R_j = s * mean_j (R_j / s), exact scaling by a power of two
    return (r / s).mean(dim=1) * s[:, 0]  # (B,)


def quantile_rank(k: float, group_size: int) -> int:
    r"""The rank r = ceil(K * G) in [1, G] (1-based) of the paper's K-quantile in a group of G (K, G checked by the
    caller).

    Paper: arXiv 2509.22611, b_K(q) = inf{x : F_q(x) >= K} is the r-th smallest of the G rewards;
    :func:`quantile_baseline` takes that reward and :func:`hard_regime` gates on it. K * G in binary floating point
    can land a hair above an integer (0.6 * 5 == 3.0000000000000004), where ``math.ceil`` would jump to the next
    rank: a product within 1e-9 (relative) of an integer is taken as that integer.

    >>> quantile_rank(0.6, 5), quantile_rank(0.4, 8), quantile_rank(0.4, 16), quantile_rank(0.01, 4)
    (3, 4, 7, 1)
    """
    # r = ceil(K G), with K G snapped onto an integer it lies within 1e-9 of
    x = snap_to_integer(k * group_size)
    # K > 0 so the infimum is at least the smallest reward (rank 1); K < 1 keeps r <= G.
    return min(max(math.ceil(x), 1), group_size)


def quantile_baseline(rewards, group_size: int, k: float, method: str = DEFAULT_QUANTILE_METHOD) -> torch.Tensor:
    r"""QAE's per-prompt baseline b_K(q), the group K-quantile of the rewards: (N,) -> (B,), N = B*G.

    Paper: arXiv 2509.22611, eq. Q3, b_K(q) = inf{x : F_q(x) >= K} with the group's empirical CDF
    F_q(x) = (1/G) #{j : R_j <= x}. Each prompt's G responses contiguous; bool/int rewards count as float
    (float32, or float64 kept). ``method``: ``"paper"`` (the ceil(K*G)-th smallest reward, :func:`quantile_rank`) or
    ``"linear"`` (interpolation at position K*(G-1), as ``torch.quantile`` in the official code).

    >>> r = torch.tensor([1., 1, 1, 1, 1, 0, 0, 0])      # G=8, 5 of 8 correct
    >>> quantile_baseline(r, 8, 0.4), quantile_baseline(r, 8, 0.4, method="linear")
    (tensor([1.]), tensor([0.8000]))
    >>> quantile_baseline(torch.tensor([3., 1, 2, 0.5, 0.5, 0.5]), 3, 0.5)
    tensor([2.0000, 0.5000])
    """
    r, _ = _grouped(rewards, group_size)  # (B, G)
    return _row_quantiles(r, check_k(k), check_choice(method, "method", QUANTILE_METHODS))


def _row_quantiles(r: torch.Tensor, k: float, method: str) -> torch.Tensor:
    """The K-quantile of each row of validated (B, G) rewards -> (B,)."""
    r_sorted, _ = torch.sort(r, dim=1)  # (B, G)
    if method == "linear":
        # torch.quantile(..., interpolation="linear"): position K*(G-1) between order statistics
        pos = snap_to_integer(k * (r.shape[1] - 1))
        lo = math.floor(pos)
        hi = min(lo + 1, r.shape[1] - 1)
        if pos == lo:
            return r_sorted[:, lo]  # (B,)
        # lerp computes R_hi - R_lo, which overflows for 3e38 and -3e38: interpolate on R / s
        s = _pow2_scale(r)[:, 0]  # (B,)
        return torch.lerp(r_sorted[:, lo] / s, r_sorted[:, hi] / s, pos - lo) * s  # (B,)
    # b_K = inf{x : F(x) >= K} = the ceil(K*G)-th smallest reward of the group
    return r_sorted[:, quantile_rank(k, r.shape[1]) - 1]  # (B,)


def mean_baseline(rewards, group_size: int) -> torch.Tensor:
    r"""GRPO's per-prompt baseline, the group mean of the rewards: (N,) -> (B,).

    >>> mean_baseline(torch.tensor([1., 0, 0, 0, 1, 1]), 3)
    tensor([0.3333, 0.6667])
    """
    r, _ = _grouped(rewards, group_size)  # (B, G)
    return _row_means(r)


def group_advantages(
    rewards,
    group_size: int,
    *,
    baseline: str = DEFAULT_BASELINE,
    k: float = DEFAULT_K,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    scale: str = DEFAULT_SCALE,
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""Response-level advantages A_i = (R_i - b(q)) / (std + eps): (N,) rewards -> (N,), N = B*G.

    GRPO/DAPO: ``baseline="mean", scale="group"``; Dr.GRPO: ``scale="none"``; QAE (arXiv 2509.22611, eq. Q4):
    ``baseline="quantile"`` (b = b_K, default K = 0.4; ``k`` is checked even when unused, so a typo never hides).
    ``scale``: the group's std, the whole batch's (``"batch"``) or none (Dr.GRPO); Bessel-corrected; ``eps`` >= 0
    (with 0 an all-equal group still gets A = 0, not 0/0). A reward equal to its baseline gets exactly 0.

    >>> r = torch.tensor([1., 0, 0, 0,   1, 1, 1, 0])     # a hard and an easy prompt, G=4
    >>> group_advantages(r, 4, baseline="quantile", k=0.4, scale="none")
    tensor([ 1.,  0.,  0.,  0.,  0.,  0.,  0., -1.])
    >>> group_advantages(r, 4, baseline="mean", scale="none")
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500,  0.2500,  0.2500,  0.2500, -0.7500])
    """
    r, _ = _grouped(rewards, group_size)  # (B, G)
    k, eps = _advantage_settings(baseline, k, quantile_method, scale, eps)
    b = _row_means(r) if baseline == "mean" else _row_quantiles(r, k, quantile_method)  # (B,)
    # A_i = (R_i - b(q)) / (std_j R_j + eps); Dr.GRPO (scale="none"): A_i = R_i - b(q)
    adv = _deviation(r, b) if scale == "none" else _scaled_deviation(r, b, scale, eps)  # (B, G)
    # an all-equal group carries no signal: exactly 0, even where the float mean of G equal
    # values is off by rounding (which the std division would blow up)
    adv = adv.masked_fill((r.amax(dim=1) == r.amin(dim=1))[:, None], 0.0)  # (B, G)
    return adv.reshape(-1)  # (N,)


def _advantage_settings(baseline, k, quantile_method, scale, eps) -> tuple[float, float]:
    """:func:`group_advantages`' settings checked, each error naming its argument: (k, eps)."""
    check_choice(baseline, "baseline", BASELINES)
    check_choice(scale, "scale", SCALES)
    check_choice(quantile_method, "quantile_method", QUANTILE_METHODS)
    k = check_k(k)
    eps = check_finite_scalar(eps, "eps")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return k, eps


def _deviation(r: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """R_i - b(q) for (B, G) rewards and (B,) baselines, refused where it overflows the dtype (scale="none")."""
    adv = r - b[:, None]  # (B, G)
    if not bool(torch.isfinite(adv).all()):
        raise ValueError(
            f"rewards span more than {r.dtype} can hold: R_i - b(q) overflows with scale='none' "
            f"(max |R| = {r.abs().max().item():.3g}); rescale the rewards, pass float64 ones, "
            "or use scale='group' or 'batch'"
        )
    return adv


def _scaled_deviation(r: torch.Tensor, b: torch.Tensor, scale: str, eps: float) -> torch.Tensor:
    """(R_i - b(q)) / (std + eps) for (B, G) rewards, the std the group's or the batch's, without overflow.

    Computed as (R_i/s - b/s) / (std(R/s) + eps/s), s a power of two per group (scale="group") or for the batch
    ("batch"), so nothing overflows for rewards near the dtype's largest value (docs/implementation.md)."""
    s = _pow2_scale(r) if scale == "group" else _pow2_scale(r.reshape(1, -1))  # (B, 1) or (1, 1)
    r_s = r / s  # (B, G)
    adv = r_s - b[:, None] / s  # (B, G)
    std = r_s.std(dim=1, keepdim=True) if scale == "group" else r_s.std()  # (B, 1) or ()
    denom = std + eps / s  # (B, 1) or (1, 1)
    # std = 0 means the group is all equal, so R_i - b = 0 too: keep 0 rather than 0/0 when eps = 0
    return torch.where(denom > 0, adv / denom.clamp_min(torch.finfo(r.dtype).tiny), torch.zeros_like(adv))


def hard_regime(success_count, group_size: int, k: float) -> torch.Tensor:
    r"""QAE's two-regime gate: is the prompt "hard" (p <= 1 - K) given its success count?

    With binary rewards, b_K = 0 exactly when at least ceil(K*G) of the G rewards are 0,
    i.e. when #correct <= G - ceil(K*G), which is p <= 1 - K for p = #correct / G.
    Integer arithmetic here avoids the floating-point edge of comparing p with 1 - K.
    Hard prompts reinforce only their successes; the others ("easy") penalise only
    their failures (arXiv 2509.22611, eq. Q5). ``success_count``: any shape (tensor, list or number) of whole
    numbers in [0, G] (2.5, -1, G + 1, NaN or a bool tensor raise ``ValueError``) -> bool of that shape.

    >>> hard_regime(torch.arange(9), 8, 0.4)    # G=8, K=0.4: hard while #correct <= 4
    tensor([ True,  True,  True,  True,  True, False, False, False, False])
    """
    k = check_k(k)
    g = check_group_size(group_size, group_size)
    c = as_count_tensor(success_count, "success_count", g, f"group_size={g}")
    # hard <=> b_K = 0 <=> c <= G - ceil(K*G)
    return c <= g - quantile_rank(k, g)


def signal_groups(advantages, group_size: int) -> torch.Tensor:
    r"""DAPO's dynamic-sampling filter, of the advantages in force: does each group carry a learning signal?

    DAPO (Yu et al. 2025, arXiv 2503.14476, sec. 3.2) keeps a prompt only when 0 < #correct < G: a group
    whose rewards are all equal has A_i = 0 for every response and moves nothing. Here a group carries
    signal when some A_i != 0, which is that rule for the mean baseline and for QAE's K-quantile alike
    (a group not all equal has a reward away from any baseline it can have, for every K), and which
    also drops what a sign mask (POS-MASK, NEG-MASK) leaves without a response to train. (N,) -> (B,) bool.

    >>> signal_groups(torch.tensor([1., 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, -1.]), 4)
    tensor([ True, False,  True])
    """
    a, _ = _grouped(advantages, group_size)  # (B, G)
    return (a != 0).any(dim=1)  # (B,)


def advantage_stats(
    rewards,
    advantages,
    group_size: int,
    k: float,
    *,
    success_threshold: float = DEFAULT_SUCCESS_THRESHOLD,
    success=None,
) -> dict[str, float]:
    r"""Per-batch sparsity and regime statistics of (N,) rewards and their advantages (the ``qae/*`` metrics, eq. Q6).

    A response is a success when its reward is >= ``success_threshold`` (0.5 for 0/1 rewards; the correctness bonus
    for composite ones), or where ``success`` ((N,) bool: the trainer's, the correctness reward's own verdict) says.
    Python floats: ``zero_adv_frac``, ``pos_frac``, ``neg_frac`` (responses with A = 0, > 0, < 0), ``hard_frac`` and
    ``easy_frac`` (prompts with p <= 1-K and p > 1-K), ``all_equal_frac`` (prompts whose rewards are all equal),
    ``success_rate`` (mean p), ``neg_correct`` (successes given A < 0: with non-binary rewards a competent answer
    below an outlier-inflated mean is punished, QAE paper sec. 1) and ``neg_correct_frac`` (over the successes).

    >>> r = torch.tensor([1., 0, 0, 0,   1, 1, 1, 0])
    >>> a = group_advantages(r, 4, k=0.4)
    >>> s = advantage_stats(r, a, 4, 0.4)
    >>> s["zero_adv_frac"], s["hard_frac"], s["success_rate"]
    (0.75, 0.5, 0.5)
    >>> r = torch.tensor([7.5, 7.5, 5.5, 5.5])  # composite rewards: four correct answers (>= 5)
    >>> [advantage_stats(r, group_advantages(r, 4, baseline=b, k=0.4), 4, 0.4, success_threshold=5.0)["neg_correct"]
    ...  for b in ("mean", "quantile")]
    [2.0, 0.0]
    """
    r, g = _grouped(rewards, group_size)  # (B, G)
    a = as_real_tensor(advantages, "advantages", ndim=1)
    if a.shape[0] != r.numel():
        raise ValueError(f"advantages must have shape ({r.numel()},) like rewards, got {tuple(a.shape)}")
    k = check_k(k)
    if success is None:
        ok = r >= check_finite_scalar(success_threshold, "success_threshold")  # (B, G)
    else:
        ok = torch.as_tensor(success, device=r.device)
        if ok.dtype != torch.bool or ok.shape != (r.numel(),):
            raise ValueError(f"success must be a bool tensor of shape ({r.numel()},), got {ok.dtype} {tuple(ok.shape)}")
        ok = ok.view(-1, g)  # (B, G)
    n_success = ok.sum(dim=1)  # (B,)
    hard = hard_regime(n_success, g, k)  # (B,)
    neg_correct = (ok.flatten() & (a < 0)).sum().item()
    return {
        "zero_adv_frac": (a == 0).float().mean().item(),
        "pos_frac": (a > 0).float().mean().item(),
        "neg_frac": (a < 0).float().mean().item(),
        "hard_frac": hard.float().mean().item(),
        "easy_frac": (~hard).float().mean().item(),
        "all_equal_frac": (r.amax(dim=1) == r.amin(dim=1)).float().mean().item(),
        "success_rate": (n_success.float() / g).mean().item(),
        "neg_correct": float(neg_correct),
        "neg_correct_frac": neg_correct / max(int(n_success.sum()), 1),
    }
