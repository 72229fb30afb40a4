r"""Notebook 03's numbers and figures on sampled rollouts of the sums model: the group it shows, its token entropies, SA-AH's and AH's weights.

Notebook 03's numbers on sampled rollouts of the sums model: the group it shows, that group's token entropies
and SA-AH's and AH's horizon weights on it, the effective token fraction as alpha moves, which rollouts and tokens
the horizon weights discount under QAE's and GRPO's baselines, and the sentences that state what was measured.

Inputs are a :class:`qae_lab.task.rollouts.Rollouts` (B prompts x G completions; N = B*G rows, each prompt's G
contiguous) and the (N, T) normalised token entropies H~_t of its completions
(:func:`qae_lab.task.rollouts.completion_entropies`); the maths is :mod:`qae_lab.horizon` and :mod:`qae_lab.advantages`.
Nothing here imports plotly or ipywidgets (the figures are :mod:`qae_lab.lab.nb03_horizon`).

The former ``horizon_figures`` module: notebook 03's figures of rollouts sampled from the sums model (the lab layer): one group's token entropies,
SA-AH's horizon weights on that group beside AH's, and which rollouts of the batch the horizon weights discount
under QAE's and GRPO's baselines.

The numbers come from :mod:`qae_lab.lab.nb03_horizon`; the notebook puts the figures under its sliders with
:func:`qae_lab.lab.plots.interactive` (keyword arguments named as the sliders).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.horizon import selective_horizon_weights, weight_stats
from qae_lab.lab.plots import heatmap_figure

__all__ = [
    "group_rows",
    "token_grid",
    "token_texts",
    "both_weights",
    "pick_group",
    "group_weights",
    "weights_line",
    "uncertain_line",
    "alpha_sweep",
    "effective_line",
    "discounted",
    "discounted_tokens",
    "baseline_line",
    "summary_03",
    "entropy_figure",
    "weights_figure",
    "touched_figure",
]


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
    return [
        [tokenizer.decode([completion_ids[i, t].item()]).replace("\n", "⏎") if real[i, t] else "" for t in range(width)]
        for i in rows
    ]


def both_weights(
    h: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, alpha: float
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


def _mean_weight(w: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> float:
    """Mean of ``w`` over the real tokens of the rows flagged in ``rows`` (N,); 1.0 where there are none."""
    m = mask * rows.to(mask.dtype)[:, None]  # (N, T)
    return (w * m).sum().item() / m.sum().item() if m.sum() > 0 else 1.0


def pick_group(ro, h: torch.Tensor, alpha: float = 0.5) -> int:
    r"""The prompt notebook 03 shows: of the groups with both successes and failures, the one whose failures'
    mean SA-AH horizon weight at ``alpha`` (GRPO's mean-baseline advantages) is the median, the lower one of an
    even count: a typical mixed group, neither the most nor the least discounted.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 1, 1, 1, 0, 0, 0, 1, 0]), group_size=2,
    ...                      mask=torch.ones(10, 2), success_counts=torch.tensor([1., 2, 1, 0, 1]))
    >>> h = torch.tensor([[0.5] * 2, [0.5] * 2, [0] * 2, [0] * 2, [0.1] * 2, [0.1] * 2, [0] * 2, [0] * 2,
    ...                   [0.9] * 2, [0.9] * 2])
    >>> pick_group(ro, h)  # mixed: prompts 0, 2 and 4, failures' weights 0.69, 0.93 and 0.52
    0
    """
    g = ro.group_size
    adv = group_advantages(ro.rewards, g, baseline="mean")  # (N,)
    w = selective_horizon_weights(h, ro.mask, adv, alpha)  # (N, T)
    mixed = [b for b, c in enumerate(ro.success_counts.tolist()) if 0 < c < g]
    if not mixed:
        raise ValueError("no group has both successes and failures: sample more prompts or another seed")
    rows = torch.zeros(len(ro.rewards), dtype=torch.bool)
    failures = ro.rewards == 0
    by_weight = []
    for b in mixed:
        rows.zero_()
        rows[b * g : (b + 1) * g] = True
        by_weight.append((_mean_weight(w, ro.mask, rows & failures), b))
    return sorted(by_weight)[(len(by_weight) - 1) // 2][1]


def group_weights(
    h: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, alpha: float, rows: Sequence[int]
) -> dict[str, dict[str, float]]:
    r"""SA-AH's and AH's horizon weights at ``alpha`` on ``rows`` (one group): name -> ``neg`` (mean w over the
    real tokens of its rollouts with A < 0), ``pos`` (the same for A >= 0), ``n_neg`` and ``n_pos`` (rollouts),
    and ``last_neg`` (the mean weight of the last token of its rollouts with A < 0; 1.0 where there are none).

    >>> out = group_weights(torch.full((2, 2), 0.5), torch.ones(2, 2), torch.tensor([1.0, -1.0]), 1.0, [0, 1])
    >>> out["SA-AH"]["pos"], round(out["AH"]["pos"], 4), out["AH"]["n_neg"], round(out["SA-AH"]["last_neg"], 4)
    (1.0, 0.4872, 1, 0.3679)
    """
    idx = list(rows)
    h_g, m_g, a_g = h[idx], mask[idx], advantages[idx]  # (G, T), (G, T), (G,)
    neg = a_g < 0  # (G,)
    last = (m_g.sum(1).long() - 1).clamp(min=0)  # (G,) index of each rollout's last real token
    out = {}
    for name, (w, _) in both_weights(h_g, m_g, a_g, alpha).items():
        w_last = w.gather(1, last[:, None]).squeeze(1)  # (G,)
        out[name] = {
            "neg": _mean_weight(w, m_g, neg),
            "pos": _mean_weight(w, m_g, ~neg),
            "n_neg": int(neg.sum()),
            "n_pos": int((~neg).sum()),
            "last_neg": w_last[neg].mean().item() if neg.any() else 1.0,
        }
    return out


def weights_line(stats: Mapping[str, Mapping[str, float]], prompt: int, alpha: float) -> str:
    r"""What :func:`group_weights` (``stats``) found on prompt ``prompt``, in words.

    >>> stats = {"SA-AH": {"neg": 0.58, "pos": 1.0, "n_neg": 5, "n_pos": 3, "last_neg": 0.31},
    ...          "AH": {"neg": 0.58, "pos": 0.74, "n_neg": 5, "n_pos": 3, "last_neg": 0.31}}
    >>> print(weights_line(stats, 2, 0.5))  # doctest: +NORMALIZE_WHITESPACE
    At α = 0.5, SA-AH's mean weight on the tokens of prompt 2's 5 rollouts with A < 0 is 0.58 (their last tokens
    0.31); its 3 others keep 1, where AH gives them 0.74.
    """
    sa, ah = stats["SA-AH"], stats["AH"]
    return (
        f"At α = {alpha:g}, SA-AH's mean weight on the tokens of prompt {prompt}'s {sa['n_neg']} rollouts with "
        f"A < 0 is {sa['neg']:.2f} (their last tokens {sa['last_neg']:.2f}); its {sa['n_pos']} others keep "
        f"{sa['pos']:.3g}, where AH gives them {ah['pos']:.2f}."
    )


def uncertain_line(tokens: Sequence[tuple[str, float, int]]) -> str:
    r"""One line from :func:`qae_lab.task.rollouts.uncertain_tokens`: the tokens drawn where the model was least sure.

    >>> uncertain_line([("First", 0.2764, 13), ("⏎", 0.01, 90)])
    "most uncertain steps (mean H~_t of the step that drew the token, times drawn): 'First' 0.28 x13, '⏎' 0.01 x90"
    """
    return "most uncertain steps (mean H~_t of the step that drew the token, times drawn): " + ", ".join(
        f"{text!r} {h:.2f} x{n}" for text, h, n in tokens
    )


def alpha_sweep(
    h: torch.Tensor, mask: torch.Tensor, adv_mean: torch.Tensor, adv_qae: torch.Tensor, alphas: Sequence[float]
) -> dict[str, list[float]]:
    r"""Against alpha: the effective token fraction sum(w) / #tokens under AH, SA-AH with the mean baseline and
    SA-AH with QAE's, and SA-AH's mean weight on tokens of rollouts with A < 0 (mean baseline).

    >>> c = alpha_sweep(torch.full((2, 2), 0.5), torch.ones(2, 2), torch.tensor([1.0, -1.0]),
    ...                 torch.tensor([0.0, -1.0]), [0.0, 1.0])
    >>> c["effective tokens: AH"][0], round(c["mean w on A<0 tokens"][1], 4)
    (1.0, 0.4872)
    """
    curves = {}
    for name, adv, selective in (
        ("effective tokens: AH", adv_mean, False),
        ("effective tokens: SA-AH, mean baseline", adv_mean, True),
        ("effective tokens: SA-AH, QAE K=0.4", adv_qae, True),
    ):
        curves[name] = [
            weight_stats(selective_horizon_weights(h, mask, adv, a, selective), mask, adv)["effective_tokens_frac"]
            for a in alphas
        ]
    curves["mean w on A<0 tokens"] = [
        weight_stats(selective_horizon_weights(h, mask, adv_mean, a), mask, adv_mean)["w_mean_neg"] for a in alphas
    ]
    return curves


def effective_line(curves: Mapping[str, Sequence[float]], alphas: Sequence[float], alpha: float = 0.5) -> str:
    r"""The effective token fractions of :func:`alpha_sweep` at ``alpha`` (one of ``alphas``).

    >>> effective_line({"effective tokens: AH": [1.0, 0.5], "mean w on A<0 tokens": [1.0, 0.3]}, [0.0, 0.5])
    'effective token fraction at α = 0.5: AH 0.500'
    """
    i = list(alphas).index(alpha)
    return f"effective token fraction at α = {alpha:g}: " + ", ".join(
        f"{name.split(': ')[-1]} {v[i]:.3f}" for name, v in curves.items() if "effective" in name
    )


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
    return {
        "w_row": (w.sum(1) / ro.lengths).view(-1, g),
        "hard": hard,
        "touched": touched,
        "in_hard": [i for i in touched if hard[i // g]],
    }


def discounted_tokens(ro, h: torch.Tensor, alpha: float = 0.5, k: float = 0.4) -> dict[str, list]:
    r"""Per prompt, how many real tokens SA-AH discounts (horizon weight < 1) at ``alpha`` under GRPO's mean
    baseline (``mean``) and under QAE's K-quantile (``quantile``), each prompt's ``correct`` count and whether it
    is ``hard`` at K = ``k`` (p <= 1 - K): lists of B; and ``k``.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]), mask=torch.ones(8, 2), group_size=4,
    ...                      success_counts=torch.tensor([1., 3.]))
    >>> discounted_tokens(ro, torch.full((8, 2), 0.5))
    {'mean': [6, 2], 'quantile': [0, 2], 'correct': [1, 3], 'hard': [True, False], 'k': 0.4}
    """
    g, real = ro.group_size, ro.mask.bool()
    out: dict[str, list] = {}
    for baseline in ("mean", "quantile"):
        adv = group_advantages(ro.rewards, g, baseline=baseline, k=k)  # (N,)
        w = selective_horizon_weights(h, ro.mask, adv, alpha)  # (N, T)
        out[baseline] = ((w < 1) & real).sum(1).view(-1, g).sum(1).tolist()  # (N,) -> (B, G) -> (B,)
    out["correct"] = [int(c) for c in ro.success_counts.tolist()]
    out["hard"] = hard_regime(ro.success_counts, g, k).tolist()
    out["k"] = k
    return out


def baseline_line(counts: Mapping, prompt: int, group_size: int) -> str:
    r"""Why :func:`discounted_tokens` (``counts``) came out as it did on prompt ``prompt``, and how it comes out on
    the batch's other groups with both successes and failures: fewer tokens under QAE on the hard ones, the same on
    the easy ones.

    >>> counts = {"mean": [6, 2, 0], "quantile": [0, 2, 0], "correct": [1, 3, 4], "hard": [True, False, False],
    ...           "k": 0.4}
    >>> print(baseline_line(counts, 0, 4))  # doctest: +NORMALIZE_WHITESPACE
    Prompt 0 has 1/4 correct: hard at K = 0.4, so QAE gives its failures A = 0 and discounts 0 of its tokens, the
    mean baseline 6. Of this batch's 2 groups with both successes and failures, QAE discounted fewer tokens on 1
    (hard) and the same on 1 (easy): the answer depends on the group.
    """
    c, hard, k = counts["correct"][prompt], counts["hard"][prompt], counts["k"]
    why = (
        "hard at K = {k:g}, so QAE gives its failures A = 0"
        if hard
        else "easy at K = {k:g}, so QAE, like the mean, gives every failure A < 0"
    ).format(k=k)
    mixed = [b for b, n in enumerate(counts["correct"]) if 0 < n < group_size]
    fewer = [b for b in mixed if counts["quantile"][b] < counts["mean"][b]]
    same = [b for b in mixed if counts["quantile"][b] == counts["mean"][b]]
    # the regime, named where every group of the kind has it (with 0/1 rewards: fewer on hard, same on easy)
    fewer_tag = " (hard)" if fewer and all(counts["hard"][b] for b in fewer) else ""
    same_tag = " (easy)" if same and not any(counts["hard"][b] for b in same) else ""
    depends = (
        "the answer depends on the group"
        if fewer and same
        else f"on this batch the answer is the same for every such group, but a{'n easy' if fewer else ' hard'} "
        f"group would give the other"
    )
    return (
        f"Prompt {prompt} has {c}/{group_size} correct: {why} and discounts {counts['quantile'][prompt]:,} of "
        f"its tokens, the mean baseline {counts['mean'][prompt]:,}. Of this batch's {len(mixed)} groups with "
        f"both successes and failures, QAE discounted fewer tokens on {len(fewer)}{fewer_tag} and the same on "
        f"{len(same)}{same_tag}: {depends}."
    )


def summary_03(
    ro,
    h: torch.Tensor,
    prompt: int,
    stats: Mapping[str, Mapping[str, float]],
    curves: Mapping[str, Sequence[float]],
    alphas: Sequence[float],
    counts: Mapping,
    alpha: float = 0.5,
) -> str:
    r"""The summary of notebook 03, from the values its cells computed: the batch's entropy, :func:`group_weights`
    (``stats``) on the group shown, :func:`alpha_sweep`'s effective token fractions at ``alpha`` and
    :func:`discounted_tokens`'s counts (``counts``) on the batch.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.ones(2, 2), group_size=2)
    >>> stats = {"SA-AH": {"neg": 0.58, "pos": 1.0, "n_neg": 1, "n_pos": 1, "last_neg": 0.31},
    ...          "AH": {"neg": 0.58, "pos": 0.74, "n_neg": 1, "n_pos": 1, "last_neg": 0.31}}
    >>> curves = {"effective tokens: AH": [1.0, 0.5], "mean w on A<0 tokens": [1.0, 0.3]}
    >>> counts = {"mean": [2], "quantile": [0], "correct": [1], "hard": [True], "k": 0.4}
    >>> print(summary_03(ro, torch.full((2, 2), 0.25), 0, stats, curves, [0.0, 0.5], counts))
    * 1 x 2 completions, success rate 0.50; mean H~_t 0.250 over 4 tokens, largest 0.250.
    * Prompt 0 at α = 0.5: SA-AH's mean weight on its 1 rollouts with A < 0 is 0.58 (last tokens 0.31); its 1
      others keep 1 (AH: 0.74).
    * The batch's effective token fraction at α = 0.5: AH 0.500.
    * Tokens discounted in the batch: mean baseline 2, QAE K = 0.4 0.
    """
    real = ro.mask.bool()
    sa, ah = stats["SA-AH"], stats["AH"]
    i = list(alphas).index(alpha)
    share = ", ".join(f"{name.split(': ')[-1]} {v[i]:.3f}" for name, v in curves.items() if "effective" in name)
    return "\n".join(
        textwrap.fill(line, 110, subsequent_indent="  ")
        for line in [
            f"* {ro.rewards.numel() // ro.group_size} x {ro.group_size} completions, success rate "
            f"{ro.rewards.float().mean():.2f}; mean H~_t {h[real].mean():.3f} over {int(real.sum()):,} tokens, largest "
            f"{h[real].max():.3f}.",
            f"* Prompt {prompt} at α = {alpha:g}: SA-AH's mean weight on its {sa['n_neg']} rollouts with A < 0 is "
            f"{sa['neg']:.2f} (last tokens {sa['last_neg']:.2f}); its {sa['n_pos']} others keep {sa['pos']:.3g} "
            f"(AH: {ah['pos']:.2f}).",
            f"* The batch's effective token fraction at α = {alpha:g}: {share}.",
            f"* Tokens discounted in the batch: mean baseline {sum(counts['mean']):,}, QAE K = {counts['k']:g} "
            f"{sum(counts['quantile']):,}.",
        ]
    )


def _marks(ro, rows) -> list[str]:
    return ["✓" if ro.rewards[i] else "✗" for i in rows]


def entropy_figure(ro, h: torch.Tensor, tokenizer, prompt: int, label_above: float = 0.1) -> go.Figure:
    r"""H~_t of each token of prompt ``prompt``'s G completions (rows y1..yG, ✓ correct); the tokens drawn at a step
    with H~_t >= ``label_above`` are written in their cells (all of them would overlap on a long completion), every
    token is in its cell's hover text; the colour scale runs from 0 to the largest H~_t of all the rollouts.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.tensor([[1., 1], [1, 0]]), group_size=2,
    ...                      completion_ids=torch.tensor([[0, 1], [1, 0]]), success_counts=torch.tensor([1.]),
    ...                      records=[{"question": "1 + 1?", "gold": "2"}])
    >>> tok = SimpleNamespace(decode=lambda ids: "ab"[ids[0]])
    >>> fig = entropy_figure(ro, torch.tensor([[0.5, 0.05], [0.75, 0.0]]), tok, 0)
    >>> list(fig.data[0].y), [list(r) for r in fig.data[0].text], [list(r) for r in fig.data[0].customdata]
    (['y1 ✓', 'y2 ✗'], [['a', ''], ['b', '']], [['a', 'b'], ['b', '']])
    >>> fig.layout.title.text
    'H~_t, prompt 0: 1 + 1? (gold 2, 1/2 correct)'
    """
    rows, real = group_rows(ro.group_size, prompt), ro.mask.bool()
    z = token_grid(h, ro.mask, rows)
    tokens = token_texts(tokenizer, ro.completion_ids, ro.mask, rows)
    shown = [[text if v >= label_above else "" for text, v in zip(r, zr)] for r, zr in zip(tokens, z)]  # NaN: ""
    rec = ro.records[prompt]
    fig = heatmap_figure(
        z,
        x=list(range(len(z[0]))),
        y=[f"y{j + 1} {m}" for j, m in enumerate(_marks(ro, rows))],
        text=shown,
        colorscale="Viridis",
        zmid=None,
        zmin=0.0,
        zmax=float(h[real].max()),
        x_title="completion token t",
        height=420,
        title=f"H~_t, prompt {prompt}: {rec['question']} (gold {rec['gold']}, "
        f"{int(ro.success_counts[prompt])}/{ro.group_size} correct)",
    )
    fig.update_traces(
        customdata=tokens, hovertemplate="%{y}, t = %{x}: '%{customdata}'<br>H~_t = %{z:.3f}<extra></extra>"
    )
    return fig


def weights_figure(ro, h: torch.Tensor, advantages: torch.Tensor, alpha: float, prompt: int) -> go.Figure:
    r"""SA-AH's (top) and AH's (bottom) horizon weights w_t at ``alpha`` on prompt ``prompt``'s completions, each
    row with its verdict and advantage; the title gives the group's :func:`qae_lab.lab.nb03_horizon.group_weights`
    (the mean weight on its rollouts with A < 0, the same under both, and on the others under each), which
    ``layout.meta`` holds too (``alpha``, ``prompt``, ``saah``, ``ah``).

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.ones(2, 2), group_size=2)
    >>> fig = weights_figure(ro, torch.full((2, 2), 0.5), torch.tensor([1.0, -1.0]), 1.0, 0)
    >>> list(fig.data[0].y)
    ['SA-AH · y1 ✓ A=+1.00', 'SA-AH · y2 ✗ A=-1.00', 'AH · y1 ✓ A=+1.00', 'AH · y2 ✗ A=-1.00']
    >>> print(fig.layout.title.text.replace("<br>", " "))  # doctest: +NORMALIZE_WHITESPACE
    w_t at α = 1, prompt 0 (top: SA-AH, bottom: AH) · mean w on its 1 rollouts with A < 0: 0.49 · on its 1 others:
    SA-AH 1, AH 0.49
    """
    rows = group_rows(ro.group_size, prompt)
    stats = group_weights(h, ro.mask, advantages, alpha, rows)
    z, labels = [], []
    for name, (w, _) in both_weights(h, ro.mask, advantages, alpha).items():
        z += token_grid(w, ro.mask, rows)
        labels += [
            f"{name} · y{j + 1} {m} A={advantages[i]:+.2f}" for j, (i, m) in enumerate(zip(rows, _marks(ro, rows)))
        ]
    sa, ah = stats["SA-AH"], stats["AH"]
    fig = heatmap_figure(
        z,
        x=list(range(len(z[0]))),
        y=labels,
        colorscale="RdBu",
        zmid=1.0,
        height=560,
        x_title="completion token t",
        title=f"w_t at α = {alpha:g}, prompt {prompt} (top: SA-AH, bottom: AH) · mean w on its "
        f"{sa['n_neg']} rollouts with A < 0: {sa['neg']:.2f} · on its {sa['n_pos']} others: "
        f"SA-AH {sa['pos']:.3g}, AH {ah['pos']:.2f}",
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"alpha": alpha, "prompt": prompt, "saah": sa, "ah": ah})
    return fig


def touched_figure(ro, h: torch.Tensor, K: float, baseline: str, alpha: float) -> go.Figure:
    r"""Each rollout's mean horizon weight under ``baseline`` at ``K`` and ``alpha``, one row per prompt (its success
    count and QAE regime), ✓ / ✗ in the cells; ``layout.meta`` lists the discounted rows (``touched``) and those
    in hard groups (``in_hard``) (:func:`qae_lab.lab.nb03_horizon.discounted`).

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]), mask=torch.ones(8, 2), group_size=4,
    ...                      lengths=torch.full((8,), 2.0), success_counts=torch.tensor([1., 3.]))
    >>> fig = touched_figure(ro, torch.full((8, 2), 0.5), 0.4, "quantile", 1.0)
    >>> list(fig.data[0].y), fig.layout.meta["touched"]
    (['prompt 0: p=1/4 hard', 'prompt 1: p=3/4 easy'], [7])
    """
    g, n_prompts = ro.group_size, ro.success_counts.numel()
    d = discounted(ro, h, K, baseline, alpha)
    # one row per prompt: a label of its own (rows that shared "p=5/8 easy" would merge into one)
    labels = [
        f"prompt {b}: p={int(c)}/{g} {'hard' if hd else 'easy'}"
        for b, (c, hd) in enumerate(zip(ro.success_counts, d["hard"]))
    ]
    text = [["✓" if r else "✗" for r in row] for row in ro.rewards.view(n_prompts, g).tolist()]
    fig = heatmap_figure(
        d["w_row"].tolist(),
        x=[f"y{j + 1}" for j in range(g)],
        y=labels,
        text=text,
        colorscale="RdBu",
        zmid=1.0,
        height=260 + 18 * n_prompts,
        title=f"{baseline} baseline, K = {K:g}, α = {alpha:g}: {len(d['touched'])} of "
        f"{n_prompts * g} rollouts discounted, {len(d['in_hard'])} of them in hard groups",
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"touched": d["touched"], "in_hard": d["in_hard"], "K": K, "baseline": baseline})
    return fig
