r"""Plain GRPO's one update, measured: what notebook 00 shows about a group and about the step, as table rows.

Notebook ``00_plain_grpo.ipynb`` runs one GRPO update on the embedded model (sampled group, mean-baseline
advantages, per-token log-probs, :func:`qae_lab.loss.grpo_loss`, one optimizer step); this module reads what came
out, so that every number the notebook shows is measured, as rows for :func:`qae_lab.analysis.tables.markdown_table`.

Implementer's notes: docs/implementation.md, section ``qae_lab.lab.notebooks.nb00_plain_grpo``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab._checks import as_real_tensor, check_finite_scalar, check_mask
from qae_lab.entropy_controls import ppo_clip_active
from qae_lab.lab.exercises import SIGNS, UpdateChange
from qae_lab.lab.figures import finish_layout
from qae_lab.loss import LossSettings, grpo_loss
from qae_lab.task.answers import extract_answer
from qae_lab.task.rollouts import completion_logps

__all__ = [
    "sequence_logps",
    "completion_rows",
    "advantage_rows",
    "UpdateChange",
    "update_change",
    "sgd_update",
    "SIGNS",
    "change_figure",
]

_TEXT_CHARS = 60  # a completion's text in a table cell: longer ones end in "…"


def sequence_logps(logps: torch.Tensor, mask) -> torch.Tensor:
    r"""log pi(y_i) = sum_t log pi(y_t | x, y_<t) over each completion's real tokens: (N, T) -> (N,).

    >>> lp = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.25, 1.0, 1.0]]))
    >>> sequence_logps(lp, torch.tensor([[1., 1, 0], [1, 1, 1]])).exp()     # pi(y_i): 0.5 * 0.5, 0.25 * 1 * 1
    tensor([0.2500, 0.2500])
    """
    lp = as_real_tensor(logps.detach() if isinstance(logps, torch.Tensor) else logps, "logps", ndim=2)
    m = check_mask(mask, lp.shape).to(lp)  # (N, T)
    return (lp * m).sum(-1)  # (N,)


def _labels(rewards: torch.Tensor) -> list[str]:
    """y0 ✓, y1 ✗, ...: a completion's index and whether it earned a reward."""
    return [f"y{i} {'✓' if r > 0 else '✗'}" for i, r in enumerate(rewards.tolist())]


def _text_cell(text: str) -> str:
    """A completion as a one-line table cell in a code span (its ``<answer>`` tags show), cut to _TEXT_CHARS."""
    flat = text.replace("\n", "⏎").replace("`", "'")
    return f"`{flat if len(flat) <= _TEXT_CHARS else flat[: _TEXT_CHARS - 1] + '…'}`"


def completion_rows(ro, advantages=None) -> list[dict]:
    r"""One row per completion of a :class:`qae_lab.task.rollouts.Rollouts`: label, answer, R, A (if given), text.

    >>> from types import SimpleNamespace as NS
    >>> ro = NS(completions=["<answer>\n4\n</answer>", "no answer"], rewards=torch.tensor([1., 0]))
    >>> completion_rows(ro, torch.tensor([0.5, -0.5]))[0]
    {'completion': 'y0 ✓', 'answer': '4', 'R': 1.0, 'A': 0.5, 'text': '`<answer>⏎4⏎</answer>`'}
    >>> completion_rows(ro)[1]
    {'completion': 'y1 ✗', 'answer': None, 'R': 0.0, 'text': '`no answer`'}
    """
    rewards = as_real_tensor(ro.rewards, "rewards", ndim=1)
    n = len(ro.completions)
    if rewards.numel() != n:
        raise ValueError(f"rewards must hold one reward per completion: {rewards.numel()} for {n}")
    adv = None if advantages is None else as_real_tensor(advantages, "advantages", ndim=1)
    if adv is not None and adv.numel() != n:
        raise ValueError(f"advantages must hold one value per completion: {adv.numel()} for {n}")
    rows = []
    for i, (label, text) in enumerate(zip(_labels(rewards), ro.completions)):
        row = {"completion": label, "answer": extract_answer(text) or None, "R": rewards[i].item()}
        if adv is not None:
            row["A"] = adv[i].item()
        rows.append({**row, "text": _text_cell(text)})
    return rows


def advantage_rows(rewards, advantages) -> list[dict]:
    r"""How one group's rewards became A_i = (R_i - mean R) / (std R + eps): a row per distinct reward, highest first.

    >>> for row in advantage_rows(torch.tensor([1., 0, 0, 0]), torch.tensor([1.5, -0.5, -0.5, -0.5])):
    ...     print(row)
    {'R': 1.0, 'completions': 1, 'mean R': 0.25, 'std R': 0.5, 'A': 1.5}
    {'R': 0.0, 'completions': 3, 'mean R': 0.25, 'std R': 0.5, 'A': -0.5}
    """
    r = as_real_tensor(rewards, "rewards", ndim=1).double()
    a = as_real_tensor(advantages, "advantages", ndim=1).double()
    if r.numel() < 2 or a.shape != r.shape:
        raise ValueError(f"rewards and advantages must be one group of G >= 2 each, got {r.numel()} and {a.numel()}")
    mean, std = r.mean().item(), r.std().item()
    rows = []
    for value in sorted(set(r.tolist()), reverse=True):
        same = r == value
        rows.append({"R": value, "completions": int(same.sum()), "mean R": mean, "std R": std, "A": a[same][0].item()})
    return rows


def update_change(
    ro, advantages, before, after, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2
) -> UpdateChange:
    r"""Measure one update from (N, T) per-token log-probs ``before`` and ``after``; ``epsilon_*``: PPO's clip range.

    >>> from types import SimpleNamespace as NS
    >>> ro = NS(rewards=torch.tensor([1., 0]), mask=torch.tensor([[1., 1], [1, 0]]))
    >>> before = torch.log(torch.tensor([[0.5, 0.5], [0.5, 1.0]]))
    >>> after = torch.log(torch.tensor([[0.7, 0.5], [0.3, 1.0]]))     # token ratios 1.4, 1 and 0.6 (padding)
    >>> c = update_change(ro, torch.tensor([0.7, -0.7]), before, after)
    >>> c.labels, c.direction("A > 0"), c.direction("A < 0"), c.clipped.tolist(), c.lengths.tolist()
    (['y0 ✓', 'y1 ✗'], 'up', 'down', [1, 1], [2, 1])
    """
    rewards = as_real_tensor(ro.rewards, "rewards", ndim=1)
    a = as_real_tensor(advantages, "advantages", ndim=1).double()
    b = as_real_tensor(before.detach() if isinstance(before, torch.Tensor) else before, "before", ndim=2).double()
    af = as_real_tensor(after.detach() if isinstance(after, torch.Tensor) else after, "after", ndim=2).double()
    if af.shape != b.shape:
        raise ValueError(f"after must have the shape of before {tuple(b.shape)}, got {tuple(af.shape)}")
    if not (a.numel() == rewards.numel() == b.shape[0]):
        raise ValueError(
            f"advantages ({a.numel()}), rewards ({rewards.numel()}) and the rows of before "
            f"({b.shape[0]}) must count the same completions"
        )
    m = check_mask(ro.mask, b.shape).double().to(b.device)  # (N, T)
    a = a.to(b.device)
    # PPO's clip on a second pass: -A clip(r_t) > -A r_t, with r_t = pi_after / pi_before
    clipped = ppo_clip_active(af - b, a, epsilon_low, epsilon_high) & m.bool()  # (N, T)
    return UpdateChange(
        _labels(rewards),
        sequence_logps(b, m).cpu(),
        sequence_logps(af, m).cpu(),
        a.cpu(),
        clipped.sum(-1).cpu(),  # (N,)
        m.sum(-1).long().cpu(),  # (N,)
    )


def sgd_update(model, tokenizer, start: Mapping, ro, advantages, lr: float, settings: LossSettings) -> UpdateChange:
    r"""Notebook 00's update, run again: from the ``state_dict`` ``start``, one SGD step of ``lr`` on
    :func:`qae_lab.loss.grpo_loss`, measured (:func:`update_change`). The model keeps the stepped weights."""
    lr = check_finite_scalar(lr, "lr")
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    model.load_state_dict(start)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    logps = completion_logps(model, tokenizer, ro.prompts, ro.completion_ids, ro.mask)  # (N, T), with its graph
    loss = grpo_loss(logps, advantages, ro.mask, settings).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # theta <- theta - lr * dL / dtheta
    with torch.no_grad():
        after = completion_logps(model, tokenizer, ro.prompts, ro.completion_ids, ro.mask)
    return update_change(
        ro, advantages, logps, after, epsilon_low=settings.epsilon_low, epsilon_high=settings.epsilon_high
    )


# the sign of an advantage -> legend name and colour: rewarded green, punished red, untouched grey
ADVANTAGE_SIGNS = ((1, "A > 0", "#2ca02c"), (0, "A = 0", "#7f7f7f"), (-1, "A < 0", "#d62728"))


def change_figure(
    labels: Sequence[str],
    before: Sequence[float],
    after: Sequence[float],
    advantages: Sequence[float],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    height: int = 380,
) -> go.Figure:
    r"""One bar per item: its change ``after - before``, a trace per sign of its advantage. Labels must be unique.

    >>> fig = change_figure(["y0", "y1", "y2"], [-1, -2, -3], [-0.5, -2.5, -3], [1, -1, 0])
    >>> [(t.name, list(t.x), list(t.y)) for t in fig.data]
    [('A > 0', ['y0'], [0.5]), ('A = 0', ['y2'], [0.0]), ('A < 0', ['y1'], [-0.5])]
    """
    labels = [str(x) for x in labels]
    cols = [[float(v) for v in col] for col in (before, after, advantages)]
    if len(set(labels)) != len(labels) or any(len(col) != len(labels) for col in cols):
        raise ValueError(
            f"labels must be unique and before, after, advantages hold one value per label: "
            f"{len(set(labels))} unique of {len(labels)} labels, lengths {[len(c) for c in cols]}"
        )
    b, a, adv = cols
    fig = go.Figure()
    for sign, name, color in ADVANTAGE_SIGNS:
        rows = [i for i, v in enumerate(adv) if (v > 0) - (v < 0) == sign]
        if rows:
            fig.add_trace(
                go.Bar(
                    x=[labels[i] for i in rows],
                    y=[a[i] - b[i] for i in rows],
                    name=name,
                    marker_color=color,
                    customdata=[[b[i], a[i], adv[i]] for i in rows],
                    hovertemplate="%{x}: %{customdata[0]:.3f} -> %{customdata[1]:.3f}"
                    "<br>A = %{customdata[2]:+.3f}<extra></extra>",
                )
            )
    fig.update_xaxes(categoryorder="array", categoryarray=labels)
    return finish_layout(fig, title, x_title, y_title, height)
