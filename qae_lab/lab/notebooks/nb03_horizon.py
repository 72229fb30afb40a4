r"""Notebook 03's numbers and figures on rollouts sampled from the sums model: SA-AH's horizon weights on them.

Inputs are a :class:`qae_lab.task.rollouts.Rollouts` (B prompts x G completions; N = B*G rows, each prompt's G
contiguous) and the (N, T) normalised token entropies H~_t of its completions
(:func:`qae_lab.task.rollouts.completion_entropies`); the maths is :mod:`qae_lab.horizon` (w_t = exp(-alpha *
sum_{s<=t} H~_s), on the rollouts with A < 0 only under SA-AH) and :mod:`qae_lab.advantages`.

The group shown (:func:`pick_group`), the batch under AH and SA-AH with either baseline, and the figures the
notebook puts under its sliders. A weight's colour scale is [0, 1] at every alpha >= 0 (white: untouched; red:
discounted), so that two settings compare by colour. Numbers come as table rows for
:func:`qae_lab.analysis.tables.markdown_table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab.methods import DEFAULT_ALPHA, DEFAULT_K
from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.horizon import selective_horizon_weights, weight_stats
from qae_lab.lab.figures import heatmap_figure

# w_t's colour scale at every alpha: dark red at 0 (discounted away), white at 1 (untouched)
WEIGHT_COLOURS = "Reds_r"
WEIGHT_SCALE = {"colorscale": WEIGHT_COLOURS, "zmid": None, "zmin": 0.0, "zmax": 1.0}

__all__ = [
    "group_rows",
    "token_grid",
    "token_texts",
    "both_weights",
    "pick_group",
    "group_weights",
    "weights_rows",
    "weights_table",
    "uncertain_rows",
    "alpha_sweep",
    "batch_rows",
    "discounted",
    "discounted_tokens",
    "discount_rows",
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
    r"""SA-AH's (A < 0 only) and AH's horizon weights at ``alpha``: name -> ((N, T) weights, their weight_stats).

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


def pick_group(ro, h: torch.Tensor, alpha: float = DEFAULT_ALPHA, clear_k: float = 0.6) -> int:
    r"""A typical hard group: of the mixed groups hard even at K = ``clear_k`` (never one answer from 1 - K), the
    one whose failures' mean SA-AH weight at ``alpha`` (mean baseline) is the (lower) median.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]), group_size=4,
    ...                      mask=torch.ones(16, 2), success_counts=torch.tensor([1., 3, 0, 1]))
    >>> h = torch.tensor([[0.5] * 2] * 4 + [[0.1] * 2] * 4 + [[0.0] * 2] * 4 + [[0.2] * 2] * 4)
    >>> pick_group(ro, h)  # hard and mixed at K = 0.6: prompts 0 and 3 (prompt 1 is easy, 2 all wrong)
    0
    """
    g = ro.group_size
    adv = group_advantages(ro.rewards, g, baseline="mean")  # (N,)
    w = selective_horizon_weights(h, ro.mask, adv, alpha)  # (N, T)
    hard = hard_regime(ro.success_counts, g, clear_k).tolist()  # (B,)
    mixed = [b for b, c in enumerate(ro.success_counts.tolist()) if 0 < c < g and hard[b]]
    if not mixed:
        raise ValueError(
            f"no group has both successes and failures and is hard at K = {clear_k:g}: sample more prompts or "
            "another seed"
        )
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
    r"""SA-AH's and AH's weights at ``alpha`` on one group's ``rows``: name -> mean w on A < 0 (``neg``) and A >= 0
    (``pos``) tokens, the rollout counts ``n_neg``, ``n_pos``, and ``last_neg``, the mean last-token w on A < 0.

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


def weights_rows(stats: Mapping[str, Mapping[str, float]]) -> list[dict]:
    r""":func:`group_weights` as table rows, one per weighting.

    >>> stats = {"SA-AH": {"neg": 0.58, "pos": 1.0, "n_neg": 5, "n_pos": 3, "last_neg": 0.31},
    ...          "AH": {"neg": 0.58, "pos": 0.74, "n_neg": 5, "n_pos": 3, "last_neg": 0.31}}
    >>> weights_rows(stats)[1]  # doctest: +NORMALIZE_WHITESPACE
    {'weights': 'AH', 'rollouts A < 0': 5, 'mean w': 0.58, 'last token w': 0.31, 'rollouts A ≥ 0': 3,
     'their mean w': 0.74}
    """
    return [
        {
            "weights": name,
            "rollouts A < 0": int(s["n_neg"]),
            "mean w": s["neg"],
            "last token w": s["last_neg"],
            "rollouts A ≥ 0": int(s["n_pos"]),
            "their mean w": s["pos"],
        }
        for name, s in stats.items()
    ]


def weights_table(ro, h: torch.Tensor, advantages: torch.Tensor, alpha: float, prompt: int) -> list[dict]:
    r"""The table under :func:`weights_figure` (same arguments): its :func:`weights_rows`, each led by its ``α``.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.ones(2, 2), group_size=2)
    >>> row = weights_table(ro, torch.full((2, 2), 0.5), torch.tensor([1.0, -1.0]), 1.0, 0)[0]
    >>> row["α"], row["weights"], round(row["mean w"], 2)
    (1.0, 'SA-AH', 0.49)
    """
    stats = group_weights(h, ro.mask, advantages, alpha, group_rows(ro.group_size, prompt))
    return [{"α": alpha, **row} for row in weights_rows(stats)]


def uncertain_rows(tokens: Sequence[tuple[str, float, int]]) -> list[dict]:
    r""":func:`qae_lab.task.rollouts.uncertain_tokens` as table rows (a token in a code span, a newline as ⏎).

    >>> uncertain_rows([("First", 0.2764, 13), ("\n", 0.01, 90)])[1]
    {'token': '`⏎`', 'mean H~_t': 0.01, 'times drawn': 90}
    """
    return [
        {"token": "`" + text.replace("\n", "⏎").replace("`", "'") + "`", "mean H~_t": float(h), "times drawn": int(n)}
        for text, h, n in tokens
    ]


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


def batch_rows(ro, h: torch.Tensor, alpha: float = DEFAULT_ALPHA, k: float = DEFAULT_K) -> list[dict]:
    r"""The batch at ``alpha`` under AH and SA-AH with the mean baseline, and SA-AH with QAE's at ``k``: the rollouts
    and tokens discounted (w_t < 1) and the effective token fraction sum(w) / #tokens.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0, 0, 0, 1, 1, 1, 0]), mask=torch.ones(8, 2), group_size=4)
    >>> rows = batch_rows(ro, torch.full((8, 2), 0.5))
    >>> [(row["weights"], row["baseline"], row["rollouts discounted"], row["tokens discounted"]) for row in rows]
    [('AH', 'mean', 8, 16), ('SA-AH', 'mean', 4, 8), ('SA-AH', 'QAE, K = 0.4', 1, 2)]
    """
    g, real = ro.group_size, ro.mask.bool()
    rows = []
    for weights, baseline, selective in (("AH", "mean", False), ("SA-AH", "mean", True), ("SA-AH", "quantile", True)):
        adv = group_advantages(ro.rewards, g, baseline=baseline, k=k)  # (N,)
        w = selective_horizon_weights(h, ro.mask, adv, alpha, selective)  # (N, T)
        below = (w < 1) & real  # (N, T) the discounted tokens
        rows.append(
            {
                "weights": weights,
                "baseline": "mean" if baseline == "mean" else f"QAE, K = {k:g}",
                "rollouts discounted": int(below.any(1).sum()),
                "tokens discounted": int(below.sum()),
                "effective token fraction": weight_stats(w, ro.mask, adv)["effective_tokens_frac"],
            }
        )
    return rows


def discounted(ro, h: torch.Tensor, k: float, baseline: str, alpha: float) -> dict:
    r"""Which rollouts SA-AH discounts under ``baseline``: ``w_row`` (B, G) mean weights, ``hard`` (B,) regimes,
    ``touched`` the rows with A < 0 and ``in_hard`` those in hard groups.

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


def discounted_tokens(ro, h: torch.Tensor, alpha: float = DEFAULT_ALPHA, k: float = DEFAULT_K) -> dict[str, list]:
    r"""Per prompt (lists of B): the tokens SA-AH discounts under the ``mean`` and ``quantile`` baselines, its
    ``correct`` count and whether it is ``hard`` at ``k``.

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


def discount_rows(counts: Mapping, group_size: int) -> list[dict]:
    r""":func:`discounted_tokens` as table rows, one per group with both successes and failures.

    >>> counts = {"mean": [6, 2, 0], "quantile": [0, 2, 0], "correct": [1, 3, 4], "hard": [True, False, False],
    ...           "k": 0.4}
    >>> for row in discount_rows(counts, 4):
    ...     print(row)
    {'prompt': 0, 'correct': 1, 'regime at K = 0.4': 'hard', 'discounted, mean': 6, 'discounted, QAE': 0}
    {'prompt': 1, 'correct': 3, 'regime at K = 0.4': 'easy', 'discounted, mean': 2, 'discounted, QAE': 2}
    """
    regime = f"regime at K = {counts['k']:g}"
    return [
        {
            "prompt": b,
            "correct": c,
            regime: "hard" if counts["hard"][b] else "easy",
            "discounted, mean": counts["mean"][b],
            "discounted, QAE": counts["quantile"][b],
        }
        for b, c in enumerate(counts["correct"])
        if 0 < c < group_size
    ]


def _marks(ro, rows) -> list[str]:
    return ["✓" if ro.rewards[i] else "✗" for i in rows]


def entropy_figure(
    ro, h: torch.Tensor, tokenizer, prompt: int, label_above: float = 0.1, first_tokens: int = 24
) -> go.Figure:
    r"""H~_t of each token of prompt ``prompt``'s G completions, the tokens with H~_t >= ``label_above`` written in
    their cells (all would overlap), every token in the hover; the x axis opens on ``first_tokens`` tokens.

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
        colorbar_title="H~_t",
        x_title="completion token t",
        height=460,
        text_size=10,
        shown_cols=first_tokens,
        title=f"H~_t, prompt {prompt}: {rec['question']} (gold {rec['gold']}, "
        f"{int(ro.success_counts[prompt])}/{ro.group_size} correct)",
    )
    fig.update_traces(
        customdata=tokens,
        hovertemplate="%{y}, t = %{x}: '%{customdata}'<br>H~_t = %{z:.3f}<extra></extra>",
        selector={"type": "heatmap"},
    )
    return fig


def weights_figure(ro, h: torch.Tensor, advantages: torch.Tensor, alpha: float, prompt: int) -> go.Figure:
    r"""SA-AH's (top) and AH's (bottom) w_t at ``alpha`` on prompt ``prompt``'s completions, each row with its verdict
    and advantage; the title and ``layout.meta`` give the group's :func:`group_weights`.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.ones(2, 2), group_size=2)
    >>> fig = weights_figure(ro, torch.full((2, 2), 0.5), torch.tensor([1.0, -1.0]), 1.0, 0)
    >>> list(fig.data[0].y)
    ['SA-AH · y1 ✓ A=+1.00', 'SA-AH · y2 ✗ A=-1.00', 'AH · y1 ✓ A=+1.00', 'AH · y2 ✗ A=-1.00']
    >>> print(fig.layout.title.text.replace("<br>", " "))  # doctest: +NORMALIZE_WHITESPACE
    w_t at α = 1, prompt 0 (top: SA-AH, bottom: AH) · mean w on its 1 rollouts with A < 0: 0.49 · on its 1 others:
    SA-AH 1, AH 0.49
    """
    if not alpha >= 0:  # alpha < 0 amplifies (w_t > 1), off the [0, 1] scale: alpha_sweep draws it
        raise ValueError(f"alpha must be >= 0 for weights on the colour scale [0, 1], got {alpha}")
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
        **WEIGHT_SCALE,
        colorbar_title="w_t",
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
    r"""Each rollout's mean horizon weight under ``baseline`` at ``K`` and ``alpha``, a row per prompt; ``layout.meta``
    holds :func:`discounted`'s ``touched`` and ``in_hard``.

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
        **WEIGHT_SCALE,
        colorbar_title="mean w_t",
        height=260 + 18 * n_prompts,
        title=f"{baseline} baseline, K = {K:g}, α = {alpha:g}: {len(d['touched'])} of "
        f"{n_prompts * g} rollouts discounted, {len(d['in_hard'])} of them in hard groups",
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"touched": d["touched"], "in_hard": d["in_hard"], "K": K, "baseline": baseline})
    return fig
