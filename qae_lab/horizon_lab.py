r"""Notebook 03's numbers on sampled rollouts: token entropies laid out per group, where the entropy sits, SA-AH's
and AH's horizon weights of a group, the alpha and K sweeps, the last token's weight, the top-k estimate's error
and which rollouts the horizon weights discount.

Inputs are a :class:`qae_lab.rollouts.Rollouts` (B prompts x G completions; N = B*G rows) and the (N, T)
normalised token entropies H~_t of its completions (:func:`qae_lab.rollouts.completion_entropies`); the maths is
:mod:`qae_lab.horizon` and :mod:`qae_lab.advantages`. Nothing here imports plotly or ipywidgets (the figures are
:mod:`qae_lab.horizon_figures`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import torch

from qae_lab._checks import check_int
from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.horizon import horizon_weights, normalised_entropy, selective_horizon_weights, weight_stats

__all__ = ["PAPER_TOP_K", "PAPER_VOCAB", "group_rows", "token_grid", "token_texts", "entropy_by_position",
           "digit_line", "both_weights", "alpha_sweep", "effective_line", "last_token_weight", "last_weight_lines",
           "paper_share_k", "top_k_lines", "top_k_entropies", "discounted", "discount_sweep", "discount_lines",
           "summary_03"]

PAPER_TOP_K, PAPER_VOCAB = 500, 151_936  # SA-AH's top-k and Qwen2.5's vocabulary


def group_rows(group_size: int, prompt: int) -> list[int]:
    r"""The rows of prompt ``prompt``'s G completions (prompt i's are rows i*G .. i*G + G - 1).

    >>> group_rows(4, 2)
    [8, 9, 10, 11]
    """
    return list(range(prompt * group_size, (prompt + 1) * group_size))


def token_grid(values: torch.Tensor, mask: torch.Tensor, rows: Sequence[int]) -> list[list[float]]:
    r"""``values`` (N, T) of ``rows``, cut at their longest completion, NaN on padding (a heatmap leaves it blank).

    >>> token_grid(torch.tensor([[0.5, 0.25, 0.0], [1.0, 0.0, 0.0]]), torch.tensor([[1., 1, 0], [1, 0, 0]]), [0, 1])
    [[0.5, 0.25], [1.0, nan]]
    """
    real = mask.bool()
    width = int(mask[list(rows)].sum(1).max())
    return [[values[i, t].item() if real[i, t] else float("nan") for t in range(width)] for i in rows]


def token_texts(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor, rows: Sequence[int]) -> list[list[str]]:
    r"""Each token of ``rows`` decoded (a newline shown as ⏎), "" on padding, cut as :func:`token_grid`.

    >>> from types import SimpleNamespace
    >>> tok = SimpleNamespace(decode=lambda ids: "a\nb"[ids[0]])
    >>> token_texts(tok, torch.tensor([[0, 1, 2]]), torch.tensor([[1., 1, 0]]), [0])
    [['a', '⏎']]
    """
    real = mask.bool()
    width = int(mask[list(rows)].sum(1).max())
    return [[tokenizer.decode([completion_ids[i, t].item()]).replace("\n", "⏎") if real[i, t] else ""
             for t in range(width)] for i in rows]


def entropy_by_position(h: torch.Tensor, mask: torch.Tensor) -> list[float]:
    r"""Mean H~_t at each position t over the completions that reach it.

    >>> entropy_by_position(torch.tensor([[0.5, 0.25], [0.25, 0.0]]), torch.tensor([[1., 1], [1, 0]]))
    [0.375, 0.25]
    """
    return (h.sum(0) / mask.sum(0).clamp(min=1)).tolist()


def digit_line(h: torch.Tensor, completion_ids: torch.Tensor, mask: torch.Tensor, tokenizer) -> str:
    r"""The share of the tokens that are digits and their share of the summed entropy.

    >>> from types import SimpleNamespace
    >>> tok = SimpleNamespace(decode=lambda ids: "1a"[ids[0]])
    >>> digit_line(torch.tensor([[0.75, 0.25]]), torch.tensor([[0, 1]]), torch.ones(1, 2), tok)
    'digit tokens are 50% of the tokens and carry 75% of the summed entropy'
    """
    real = mask.bool()
    digit = torch.tensor([[tokenizer.decode([i]).strip().isdigit() for i in row]
                          for row in completion_ids.tolist()]) & real
    return (f"digit tokens are {digit.sum() / real.sum():.0%} of the tokens and carry "
            f"{h[digit].sum() / h[real].sum():.0%} of the summed entropy")


def both_weights(h: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, alpha: float
                 ) -> dict[str, tuple[torch.Tensor, dict[str, float]]]:
    r"""SA-AH's horizon weights (only rollouts with A < 0) and AH's (every rollout) at ``alpha``: name -> ((N, T)
    weights, :func:`qae_lab.horizon.weight_stats`).

    >>> out = both_weights(torch.full((2, 2), 0.5), torch.ones(2, 2), torch.tensor([1.0, -1.0]), 1.0)
    >>> out["SA-AH"][0][0].tolist(), round(out["AH"][1]["effective_tokens_frac"], 4)
    ([1.0, 1.0], 0.4872)
    """
    out = {}
    for name, selective in (("SA-AH", True), ("AH", False)):
        w = selective_horizon_weights(h, mask, advantages, alpha, selective=selective)  # (N, T)
        out[name] = (w, weight_stats(w, mask, advantages))
    return out


def alpha_sweep(h: torch.Tensor, mask: torch.Tensor, adv_mean: torch.Tensor, adv_qae: torch.Tensor,
                alphas: Sequence[float]) -> dict[str, list[float]]:
    r"""Against alpha: the effective token fraction sum(w) / #tokens under AH, SA-AH with the mean baseline and
    SA-AH with QAE's, and SA-AH's mean weight on tokens of rollouts with A < 0 (mean baseline).

    >>> c = alpha_sweep(torch.full((2, 2), 0.5), torch.ones(2, 2), torch.tensor([1.0, -1.0]),
    ...                 torch.tensor([0.0, -1.0]), [0.0, 1.0])
    >>> c["effective tokens: AH"][0], round(c["mean w on A<0 tokens"][1], 4)
    (1.0, 0.4872)
    """
    curves = {}
    for name, adv, selective in (("effective tokens: AH", adv_mean, False),
                                 ("effective tokens: SA-AH, mean baseline", adv_mean, True),
                                 ("effective tokens: SA-AH, QAE K=0.4", adv_qae, True)):
        curves[name] = [weight_stats(selective_horizon_weights(h, mask, adv, a, selective), mask, adv)
                        ["effective_tokens_frac"] for a in alphas]
    curves["mean w on A<0 tokens"] = [weight_stats(selective_horizon_weights(h, mask, adv_mean, a), mask, adv_mean)
                                      ["w_mean_neg"] for a in alphas]
    return curves


def effective_line(curves: Mapping[str, Sequence[float]], alphas: Sequence[float], alpha: float = 0.5) -> str:
    r"""The effective token fractions of :func:`alpha_sweep` at ``alpha`` (one of ``alphas``).

    >>> effective_line({"effective tokens: AH": [1.0, 0.5], "mean w on A<0 tokens": [1.0, 0.3]}, [0.0, 0.5])
    'effective token fraction at α = 0.5: AH 0.500'
    """
    i = list(alphas).index(alpha)
    return (f"effective token fraction at α = {alpha:g}: "
            + ", ".join(f"{name.split(': ')[-1]} {v[i]:.3f}" for name, v in curves.items() if "effective" in name))


def last_token_weight(mean_h: float, n_tokens: int, alpha: float = 0.5) -> float:
    r"""The horizon weight of the last of ``n_tokens`` tokens whose H~ is ``mean_h`` each: exp(-alpha n mean_h).

    >>> round(last_token_weight(0.1, 10, 1.0), 6)
    0.367879
    """
    n = check_int(n_tokens, "n_tokens", 1)
    return horizon_weights(torch.full((1, n), mean_h), torch.ones(1, n), alpha)[0, -1].item()


def last_weight_lines(h: torch.Tensor, mask: torch.Tensor, alpha: float = 0.5) -> list[str]:
    r"""The last token's weight at ``alpha`` for the paper's Qwen2.5-3B early and late in training (mean H~ and
    length from the paper) and for these completions (their mean H~ and mean length).

    >>> last_weight_lines(torch.full((1, 4), 0.25), torch.ones(1, 4))[2]
    "this run (mean H~ 0.2500, 4 tokens): last token's w = 0.607"
    """
    mean_h, mean_len = h[mask.bool()].mean().item(), int(mask.sum(1).mean().round())
    return [f"paper, Qwen2.5-3B early (mean H~ 0.029, 243 tokens): last token's w = "
            f"{last_token_weight(0.029, 243, alpha):.3f}",
            f"paper, Qwen2.5-3B late  (mean H~ 0.009, 171 tokens): last token's w = "
            f"{last_token_weight(0.009, 171, alpha):.3f}",
            f"this run (mean H~ {mean_h:.4f}, {mean_len} tokens): last token's w = "
            f"{last_token_weight(mean_h, mean_len, alpha):.3f}"]


def paper_share_k(vocab: int) -> int:
    r"""The k that keeps the share of a ``vocab``-token vocabulary the paper's k = 500 keeps of Qwen2.5's 151,936.

    >>> paper_share_k(151_936), paper_share_k(300), paper_share_k(100)
    (500, 1, 1)
    """
    return max(1, round(PAPER_TOP_K / PAPER_VOCAB * check_int(vocab, "vocab", 1)))


def top_k_lines(err: Mapping[str, Sequence[float]], vocab: int) -> list[str]:
    r"""What :func:`qae_lab.rollouts.top_k_errors` (``err``) says at the k of those tried nearest the paper's share
    of the vocabulary (:func:`paper_share_k`), and at k = 500 when it was tried (exact where 500 >= ``vocab``).

    >>> err = {"k": [1, 500], "mean_abs": [0.1, 0.0], "max_abs": [0.5, 0.0], "mean_signed": [-0.1, 0.0],
    ...        "tail_mass": [0.2, 0.0]}
    >>> print(top_k_lines(err, 300)[0])  # doctest: +NORMALIZE_WHITESPACE
    k = 500 of V = 151,936 keeps 0.33% of Qwen2.5's vocabulary; the same share of ours is k = 1: mean error 0.1000
    (the estimate lies below the exact value on average), max 0.500, dropped mass 0.2000
    """
    ks = list(err["k"])
    k_same = paper_share_k(vocab)
    i = min(range(len(ks)), key=lambda j: abs(ks[j] - k_same))
    bias = "below" if err["mean_signed"][i] < 0 else "above"
    lines = [f"k = {PAPER_TOP_K} of V = {PAPER_VOCAB:,} keeps {PAPER_TOP_K / PAPER_VOCAB:.2%} of Qwen2.5's "
             f"vocabulary; the same share of ours is k = {ks[i]}: mean error {err['mean_abs'][i]:.4f} (the estimate "
             f"lies {bias} the exact value on average), max {err['max_abs'][i]:.3f}, dropped mass "
             f"{err['tail_mass'][i]:.4f}"]
    if PAPER_TOP_K in ks:
        lines.append(f"k = {PAPER_TOP_K} >= V = {vocab}: error {err['mean_abs'][ks.index(PAPER_TOP_K)]:.1e} (exact)")
    return lines


def top_k_entropies(logits: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""(exact H~_t, its top-k estimate) over the real tokens: two (n_tokens,) tensors.

    >>> exact, est = top_k_entropies(torch.log(torch.tensor([[[0.5, 0.25, 0.25]]])), torch.ones(1, 1), 1)
    >>> round(exact.item(), 4), abs(est.item())  # top-1 keeps one token: no entropy left
    (0.9464, 0.0)
    """
    real = mask.bool()
    return normalised_entropy(logits)[real], normalised_entropy(logits, top_k=k)[real]


def discounted(ro, h: torch.Tensor, k: float, baseline: str, alpha: float) -> dict:
    r"""Which rollouts SA-AH discounts under ``baseline`` (at K = ``k``): ``w_row`` (B, G) each rollout's mean
    horizon weight, ``hard`` (B,) each prompt's QAE regime, ``touched`` the rows with A < 0 and ``in_hard`` those
    in hard groups.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]), mask=torch.ones(8, 2), group_size=4,
    ...                      lengths=torch.full((8,), 2.0), success_counts=torch.tensor([1., 3.]))
    >>> d = discounted(ro, torch.full((8, 2), 0.5), 0.4, "quantile", 1.0)
    >>> d["touched"], d["in_hard"], d["hard"].tolist()
    ([7], [], [True, False])
    """
    g = ro.group_size
    adv = group_advantages(ro.rewards, g, baseline=baseline, k=k)  # (N,)
    w = selective_horizon_weights(h, ro.mask, adv, alpha)  # (N, T)
    hard = hard_regime(ro.success_counts, g, k)  # (B,)
    touched = (adv < 0).nonzero().flatten().tolist()
    return {"w_row": (w.sum(1) / ro.lengths).view(-1, g), "hard": hard, "touched": touched,
            "in_hard": [i for i in touched if hard[i // g]]}


def discount_sweep(ro, ks: Sequence[float]) -> dict[str, list[int]]:
    r"""Against K: how many rollouts QAE gives A < 0 (so SA-AH discounts them), how many are failures of easy groups,
    how many of the discounted lie in hard groups; and the mean baseline's count, the same at every K.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]), group_size=4,
    ...                      success_counts=torch.tensor([1., 3.]))
    >>> discount_sweep(ro, [0.4])  # doctest: +NORMALIZE_WHITESPACE
    {'QAE: discounted': [1], 'QAE: easy-group failures': [1], 'QAE: discounted in hard groups': [0],
     'mean baseline: discounted': [4]}
    """
    g = ro.group_size
    failures = ro.rewards == 0
    n_mean = int((group_advantages(ro.rewards, g, baseline="mean") < 0).sum())
    sweep: dict[str, list[int]] = {"QAE: discounted": [], "QAE: easy-group failures": [],
                                   "QAE: discounted in hard groups": []}
    for k in ks:
        adv = group_advantages(ro.rewards, g, baseline="quantile", k=k)  # (N,)
        easy = ~hard_regime(ro.success_counts, g, k).repeat_interleave(g)  # (N,) the rollout's group is easy
        sweep["QAE: discounted"].append(int((adv < 0).sum()))
        sweep["QAE: easy-group failures"].append(int((failures & easy).sum()))
        sweep["QAE: discounted in hard groups"].append(int(((adv < 0) & ~easy).sum()))
    sweep["mean baseline: discounted"] = [n_mean] * len(ks)
    return sweep


def discount_lines(ro, sweep: Mapping[str, Sequence[int]]) -> list[str]:
    r"""What :func:`discount_sweep` found: the failures, the mean baseline's count, and whether QAE discounts exactly
    the easy groups' failures at every K (and how many in hard groups at most).

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]))
    >>> sweep = {"QAE: discounted": [1], "QAE: easy-group failures": [1], "QAE: discounted in hard groups": [0],
    ...          "mean baseline: discounted": [4]}
    >>> discount_lines(ro, sweep)[1]
    'QAE discounts exactly the easy-group failures at every K of the sweep: True; in hard groups: max 0'
    """
    return [f"{int((ro.rewards == 0).sum())} failures of {ro.rewards.numel()} rollouts; the mean baseline "
            f"discounts {sweep['mean baseline: discounted'][0]}",
            f"QAE discounts exactly the easy-group failures at every K of the sweep: "
            f"{sweep['QAE: discounted'] == sweep['QAE: easy-group failures']}; "
            f"in hard groups: max {max(sweep['QAE: discounted in hard groups'])}"]


def summary_03(h: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, curves: Mapping[str, Sequence[float]],
               alphas: Sequence[float], sweep: Mapping[str, Sequence[int]], ks: Sequence[float],
               alpha: float = 0.5) -> str:
    r"""The summary of notebook 03, from the values its cells computed: the sampled completions' entropy,
    :func:`alpha_sweep`'s effective token fractions at ``alpha`` and at the largest of ``alphas``, and
    :func:`discount_sweep`'s counts over ``ks``.

    Args:
        h, mask: (N, T) normalised token entropies and completion mask; rewards: (N,) 0/1 rewards.

    >>> curves = {"effective tokens: AH": [1.0, 0.5, 0.2], "mean w on A<0 tokens": [1.0, 0.3, 0.1]}
    >>> sweep = {"QAE: discounted": [1, 3], "QAE: discounted in hard groups": [0, 0],
    ...          "mean baseline: discounted": [4, 4]}
    >>> print(summary_03(torch.full((2, 2), 0.25), torch.ones(2, 2), torch.tensor([1.0, 0.0]), curves,
    ...                  [0.0, 0.5, 2.0], sweep, [0.2, 0.8]))
    * 2 completions, success rate 0.50; mean H~_t 0.2500 over 4 real tokens, largest 0.250.
    * effective token fraction at α = 0.5: AH 0.500; at α = 2: AH 0.200.
    * QAE discounted 1 to 3 rollouts over K = 0.2 .. 0.8 (the mean baseline 4), 0 of them in hard groups.
    """
    real = mask.bool()
    if not real.any():
        raise ValueError("mask must mark at least one real token")
    qae = sweep["QAE: discounted"]
    top = effective_line(curves, alphas, max(alphas)).split(": ", 1)[1]
    return "\n".join(textwrap.fill(line, 110, subsequent_indent="  ") for line in [
        f"* {rewards.numel()} completions, success rate {rewards.float().mean():.2f}; mean H~_t "
        f"{h[real].mean():.4f} over {int(real.sum())} real tokens, largest {h[real].max():.3f}.",
        f"* {effective_line(curves, alphas, alpha)}; at α = {max(alphas):g}: {top}.",
        f"* QAE discounted {min(qae)} to {max(qae)} rollouts over K = {ks[0]:g} .. {ks[-1]:g} (the mean baseline "
        f"{sweep['mean baseline: discounted'][0]}), {max(sweep['QAE: discounted in hard groups'])} of them in "
        f"hard groups.",
    ])
