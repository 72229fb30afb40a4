r"""QAE's two regimes through training: token means split by regime, a held-out set split by start difficulty.

QAE (arXiv 2509.22611), Prop. 4.2: on a hard prompt (success rate p <= 1-K) the quantile baseline's
entropy change is at most the mean baseline's (no explosion); on an easy prompt (p > 1-K) at least (no
collapse). In one batch the two halves pull opposite ways, so the net entropy of the two baselines can
look alike; these functions split it: a training step's token means by regime (``entropy/hard``, ``entropy/easy``:
:func:`regime_token_sums`, added across processes as TRL adds ``entropy``, then :func:`regime_token_means`), and a
held-out prompt set by the start model's success rate (:func:`start_split`, :func:`group_means`).

Implementer's notes: docs/implementation.md, section ``qae_lab.regimes``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch

from qae_lab._checks import check_int, check_mask

__all__ = ["regime_token_sums", "regime_token_means", "start_split", "group_means"]


def regime_token_sums(x: torch.Tensor, mask: torch.Tensor, hard_rows: torch.Tensor) -> torch.Tensor:
    r"""``[sum_hard, tokens_hard, sum_easy, tokens_easy]`` of a per-token quantity over a micro-batch: x (B, T) (the
    token entropies H_t), mask (B, T) 0/1, hard_rows (B,) bool (QAE's hard regime, p <= 1-K) -> (4,) in ``x``'s dtype.

    >>> x = torch.tensor([[1.0, 3.0], [2.0, 9.0], [4.0, 4.0]])
    >>> m = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    >>> regime_token_sums(x, m, torch.tensor([True, True, False]))   # hard: 1 + 3 + 2 over 3 tokens
    tensor([6., 3., 8., 2.])
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a floating (B, T) tensor, got {getattr(x, 'shape', type(x).__name__)}")
    m = check_mask(mask, x.shape).to(x.dtype)  # (B, T)
    hard = torch.as_tensor(hard_rows, device=x.device)
    if hard.dtype != torch.bool or tuple(hard.shape) != (x.shape[0],):
        raise ValueError(
            f"hard_rows must be a bool tensor of shape ({x.shape[0]},), got {hard.dtype} {tuple(hard.shape)}"
        )
    m_hard = m * hard[:, None].to(x.dtype)  # (B, T): tokens of hard-prompt responses
    m_easy = m - m_hard  # (B, T): the others
    return torch.stack([(x * m_hard).sum(), m_hard.sum(), (x * m_easy).sum(), m_easy.sum()])


def regime_token_means(sums: torch.Tensor | Sequence[float]) -> tuple[float | None, float | None]:
    r"""(hard mean, easy mean) from :func:`regime_token_sums`' four numbers (summed over processes); a regime
    without tokens gives None (not 0: no response of that regime was seen).

    >>> regime_token_means(torch.tensor([6.0, 3.0, 8.0, 2.0])), regime_token_means([0.0, 0.0, 8.0, 2.0])
    ((2.0, 4.0), (None, 4.0))
    """
    s = [float(v) for v in (sums.tolist() if isinstance(sums, torch.Tensor) else sums)]
    if len(s) != 4:
        raise ValueError(f"sums must hold 4 numbers (sum, count of the hard rows, then of the easy ones), got {len(s)}")
    return tuple(s[i] / s[i + 1] if s[i + 1] > 0 else None for i in (0, 2))


def start_split(success_rates: Sequence[float] | torch.Tensor, frac: float) -> tuple[list[int], list[int]]:
    r"""The hardest and the easiest ``frac`` of a prompt set, by the start model's success rates.

    ``success_rates``: (B,), B >= 2; ``frac`` in (0, 0.5]. Each group holds n = round(frac * B) prompts (at least
    1): the hard group the n lowest rates, the easy group the n highest; ties go to the prompt that comes first, so
    the split is a function of the rates alone. Returns (hard indices, easy indices), each ascending.

    >>> start_split([0.5, 0.0, 1.0, 0.25, 0.0, 0.75, 1.0, 0.5], 0.25)
    ([1, 4], [2, 6])
    """
    p = [float(v) for v in (success_rates.tolist() if isinstance(success_rates, torch.Tensor) else success_rates)]
    if len(p) < 2 or not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in p):
        raise ValueError(f"success_rates must hold at least 2 rates in [0, 1], got {p!r:.80}")
    if isinstance(frac, bool) or not isinstance(frac, numbers.Real) or not 0.0 < float(frac) <= 0.5:
        raise ValueError(f"frac must lie in (0, 0.5], got {frac!r}")
    n = max(1, round(float(frac) * len(p)))
    hard = sorted(range(len(p)), key=lambda i: (p[i], i))[:n]  # lowest p first, then the first prompt
    easy = sorted(range(len(p)), key=lambda i: (-p[i], i))[:n]  # highest p first, then the first prompt
    return sorted(hard), sorted(easy)


def group_means(
    x: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, group_size: int, groups: Mapping[str, Sequence[int]]
) -> dict[str, tuple[float, float]]:
    r"""Per group of prompts: (token-weighted mean of ``x`` over its completions' tokens, mean reward).

    Shapes: x (N, T), N = B*G (each prompt's G completions contiguous), mask (N, T) 0/1 (TRL's completion mask,
    EOS included), rewards (N,) 0/1; ``groups``: name -> indices of its prompts (0 .. B-1), each non-empty.

    >>> x = torch.tensor([[1.0, 1.0], [3.0, 0.0], [2.0, 2.0], [4.0, 4.0]])   # B = 2 prompts, G = 2
    >>> m = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    >>> out = group_means(x, m, torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, {"a": [0], "both": [0, 1]})
    >>> out["a"] == (5 / 3, 0.5), out["both"] == (17 / 7, 0.75)     # (1 + 1 + 3) / 3 tokens; 17 / 7 tokens
    (True, True)
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be an (N, T) tensor, got {getattr(x, 'shape', type(x).__name__)}")
    m = check_mask(mask, x.shape).to(torch.float64)  # (N, T)
    g = check_int(group_size, "group_size", 1)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if tuple(r.shape) != (x.shape[0],) or x.shape[0] % g:
        raise ValueError(
            f"rewards must have shape ({x.shape[0]},) and N = {x.shape[0]} must be a multiple of "
            f"group_size {g}, got {tuple(r.shape)}"
        )
    b = x.shape[0] // g
    token_sum = (x.to(torch.float64) * m).view(b, g, -1).sum((1, 2))  # (B,): each prompt's G completions' tokens
    token_n = m.view(b, g, -1).sum((1, 2))  # (B,)
    successes = r.view(b, g).sum(1)  # (B,)
    out = {}
    for name, idx in groups.items():
        idx = [check_int(i, f"groups[{name!r}]", 0) for i in idx]
        if not idx or max(idx) >= b:
            raise ValueError(f"groups[{name!r}] must name prompts in 0..{b - 1}, got {idx!r:.80}")
        sel = torch.tensor(idx)
        n_tok = float(token_n[sel].sum())
        out[name] = (
            float(token_sum[sel].sum()) / n_tok if n_tok > 0 else math.nan,
            float(successes[sel].sum()) / (len(idx) * g),
        )
    return out
