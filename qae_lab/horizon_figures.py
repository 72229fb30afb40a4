r"""Notebook 03's figures of sampled rollouts (the lab layer): a group's token entropies, SA-AH's and AH's horizon
weights, the top-k estimate against the exact entropy, and which rollouts the horizon weights discount.

The numbers come from :mod:`qae_lab.horizon_lab`; the notebook puts the figures under its sliders with
:func:`qae_lab.plots.interactive` (keyword arguments named as the sliders).
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from qae_lab.horizon_lab import both_weights, discounted, group_rows, token_grid, token_texts, top_k_entropies
from qae_lab.plots import heatmap_figure, line_figure

__all__ = ["entropy_figure", "weights_figure", "topk_figure", "touched_figure"]


def _marks(ro, rows) -> list[str]:
    return ["✓" if ro.rewards[i] else "✗" for i in rows]


def entropy_figure(ro, h: torch.Tensor, tokenizer, prompt: int) -> go.Figure:
    r"""H~_t of each token of prompt ``prompt``'s G completions (rows y1..yG, ✓ correct), each token written in
    its cell; the colour scale runs from 0 to the largest H~_t of all the rollouts.

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.tensor([[1., 1], [1, 0]]), group_size=2,
    ...                      completion_ids=torch.tensor([[0, 1], [1, 0]]), success_counts=torch.tensor([1.]),
    ...                      records=[{"question": "1 + 1?", "gold": "2"}])
    >>> tok = SimpleNamespace(decode=lambda ids: "ab"[ids[0]])
    >>> fig = entropy_figure(ro, torch.tensor([[0.5, 0.25], [0.75, 0.0]]), tok, 0)
    >>> list(fig.data[0].y), list(fig.data[0].text[1]), fig.layout.title.text
    (['y1 ✓', 'y2 ✗'], ['b', ''], 'H~_t, prompt 0: 1 + 1? (gold 2, 1/2 correct)')
    """
    rows, real = group_rows(ro.group_size, prompt), ro.mask.bool()
    z = token_grid(h, ro.mask, rows)
    rec = ro.records[prompt]
    return heatmap_figure(z, x=list(range(len(z[0]))), y=[f"y{j + 1} {m}" for j, m in enumerate(_marks(ro, rows))],
                          text=token_texts(tokenizer, ro.completion_ids, ro.mask, rows), colorscale="Viridis",
                          zmid=None, zmin=0.0, zmax=float(h[real].max()), x_title="completion token t", height=420,
                          title=f"H~_t, prompt {prompt}: {rec['question']} (gold {rec['gold']}, "
                                f"{int(ro.success_counts[prompt])}/{ro.group_size} correct)")


def weights_figure(ro, h: torch.Tensor, advantages: torch.Tensor, alpha: float, prompt: int) -> go.Figure:
    r"""SA-AH's (top) and AH's (bottom) horizon weights w_t at ``alpha`` on prompt ``prompt``'s completions, each
    row with its verdict and advantage; the title and ``layout.meta`` give the whole batch's
    :func:`qae_lab.horizon.weight_stats` (``meta``: ``alpha``, ``saah``, ``ah``).

    >>> from types import SimpleNamespace
    >>> ro = SimpleNamespace(rewards=torch.tensor([1., 0]), mask=torch.ones(2, 2), group_size=2)
    >>> fig = weights_figure(ro, torch.full((2, 2), 0.5), torch.tensor([1.0, -1.0]), 1.0, 0)
    >>> list(fig.data[0].y)
    ['SA-AH · y1 ✓ A=+1.00', 'SA-AH · y2 ✗ A=-1.00', 'AH · y1 ✓ A=+1.00', 'AH · y2 ✗ A=-1.00']
    >>> fig.layout.meta["saah"]["w_mean_neg"] == fig.layout.meta["ah"]["w_mean_neg"] < 1
    True
    """
    rows = group_rows(ro.group_size, prompt)
    weights = both_weights(h, ro.mask, advantages, alpha)
    z, labels = [], []
    for name, (w, _) in weights.items():
        z += token_grid(w, ro.mask, rows)
        labels += [f"{name} · y{j + 1} {m} A={advantages[i]:+.2f}"
                   for j, (i, m) in enumerate(zip(rows, _marks(ro, rows)))]
    s_sa, s_ah = weights["SA-AH"][1], weights["AH"][1]
    fig = heatmap_figure(z, x=list(range(len(z[0]))), y=labels, colorscale="RdBu", zmid=1.0, height=560,
                         x_title="completion token t",
                         title=f"w_t at α = {alpha:g}, prompt {prompt} (top: SA-AH, bottom: AH) · batch: mean w on "
                               f"A<0 tokens {s_sa['w_mean_neg']:.3f}, effective tokens SA-AH "
                               f"{s_sa['effective_tokens_frac']:.3f}, AH {s_ah['effective_tokens_frac']:.3f}")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(meta={"alpha": alpha, "saah": s_sa, "ah": s_ah})
    return fig


def topk_figure(logits: torch.Tensor, mask: torch.Tensor, k: int) -> go.Figure:
    r"""The top-``k`` estimate of H~_t against the exact value, one point per real token, with the diagonal.

    >>> z = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]]]))
    >>> fig = topk_figure(z, torch.ones(1, 2), 3)
    >>> [t.name for t in fig.data], fig.layout.title.text
    (['top-3 estimate', 'exact'], 'Top-3 vs exact, 2 tokens (mean |error| 0.00e+00)')
    """
    h_exact, h_k = top_k_entropies(logits, mask, k)
    top = float(h_exact.max())
    fig = line_figure(h_exact.tolist(), {f"top-{k} estimate": h_k.tolist()}, x_title="exact H~_t",
                      y_title="top-k H~_t", title=f"Top-{k} vs exact, {int(mask.bool().sum())} tokens "
                                                  f"(mean |error| {(h_k - h_exact).abs().mean():.2e})")
    fig.update_traces(mode="markers", marker={"size": 4})
    fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="exact", line={"dash": "dot", "color": "grey"})
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
