r"""Notebook 03's figures of rollouts sampled from the sums model (the lab layer): one group's token entropies,
SA-AH's horizon weights on that group beside AH's, and which rollouts of the batch the horizon weights discount
under QAE's and GRPO's baselines.

The numbers come from :mod:`qae_lab.horizon_lab`; the notebook puts the figures under its sliders with
:func:`qae_lab.plots.interactive` (keyword arguments named as the sliders).
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from qae_lab.horizon_lab import both_weights, discounted, group_rows, group_weights, token_grid, token_texts
from qae_lab.plots import heatmap_figure

__all__ = ["entropy_figure", "weights_figure", "touched_figure"]


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
    fig = heatmap_figure(z, x=list(range(len(z[0]))), y=[f"y{j + 1} {m}" for j, m in enumerate(_marks(ro, rows))],
                         text=shown, colorscale="Viridis", zmid=None, zmin=0.0, zmax=float(h[real].max()),
                         x_title="completion token t", height=420,
                         title=f"H~_t, prompt {prompt}: {rec['question']} (gold {rec['gold']}, "
                               f"{int(ro.success_counts[prompt])}/{ro.group_size} correct)")
    fig.update_traces(customdata=tokens, hovertemplate="%{y}, t = %{x}: '%{customdata}'<br>H~_t = %{z:.3f}"
                                                       "<extra></extra>")
    return fig


def weights_figure(ro, h: torch.Tensor, advantages: torch.Tensor, alpha: float, prompt: int) -> go.Figure:
    r"""SA-AH's (top) and AH's (bottom) horizon weights w_t at ``alpha`` on prompt ``prompt``'s completions, each
    row with its verdict and advantage; the title gives the group's :func:`qae_lab.horizon_lab.group_weights`
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
        labels += [f"{name} · y{j + 1} {m} A={advantages[i]:+.2f}"
                   for j, (i, m) in enumerate(zip(rows, _marks(ro, rows)))]
    sa, ah = stats["SA-AH"], stats["AH"]
    fig = heatmap_figure(z, x=list(range(len(z[0]))), y=labels, colorscale="RdBu", zmid=1.0, height=560,
                         x_title="completion token t",
                         title=f"w_t at α = {alpha:g}, prompt {prompt} (top: SA-AH, bottom: AH) · mean w on its "
                               f"{sa['n_neg']} rollouts with A < 0: {sa['neg']:.2f} · on its {sa['n_pos']} others: "
                               f"SA-AH {sa['pos']:.3g}, AH {ah['pos']:.2f}")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"alpha": alpha, "prompt": prompt, "saah": sa, "ah": ah})
    return fig


def touched_figure(ro, h: torch.Tensor, K: float, baseline: str, alpha: float) -> go.Figure:
    r"""Each rollout's mean horizon weight under ``baseline`` at ``K`` and ``alpha``, one row per prompt (its success
    count and QAE regime), ✓ / ✗ in the cells; ``layout.meta`` lists the discounted rows (``touched``) and those
    in hard groups (``in_hard``) (:func:`qae_lab.horizon_lab.discounted`).

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
    labels = [f"prompt {b}: p={int(c)}/{g} {'hard' if hd else 'easy'}"
              for b, (c, hd) in enumerate(zip(ro.success_counts, d["hard"]))]
    text = [["✓" if r else "✗" for r in row] for row in ro.rewards.view(n_prompts, g).tolist()]
    fig = heatmap_figure(d["w_row"].tolist(), x=[f"y{j + 1}" for j in range(g)], y=labels, text=text,
                         colorscale="RdBu", zmid=1.0, height=260 + 18 * n_prompts,
                         title=f"{baseline} baseline, K = {K:g}, α = {alpha:g}: {len(d['touched'])} of "
                               f"{n_prompts * g} rollouts discounted, {len(d['in_hard'])} of them in hard groups")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"touched": d["touched"], "in_hard": d["in_hard"], "K": K, "baseline": baseline})
    return fig
