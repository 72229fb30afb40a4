r"""Plain GRPO's one update, measured: what notebook 00 prints about a group and about the step (no plotting).

Notebook ``00_plain_grpo.ipynb`` runs one GRPO update on the embedded model in a few lines: a sampled
group (:func:`qae_lab.task.rollouts.sample_groups`), its mean-baseline advantages
(:func:`qae_lab.advantages.group_advantages`), the per-token log-probs
(:func:`qae_lab.task.rollouts.completion_logps`), the loss (:func:`qae_lab.loss.grpo_loss`) and one
optimizer step. This module reads what came out, so that every number the notebook shows is measured:

* :func:`group_lines`: each completion with its extracted answer, its reward and its advantage;
* :func:`advantage_lines`: the group's mean and std and the advantage each reward gets,
  A_i = (R_i - mean_j R_j) / (std_j R_j + eps);
* :func:`sequence_logps`: log pi(y_i) = sum_t log pi(y_t | x, y_<t), one number per completion;
* :func:`update_change` -> :class:`UpdateChange`: each completion's log pi(y_i) before and after the
  step beside its advantage, how many moved which way by advantage sign, and how many tokens PPO's
  clip would stop on a second pass over the same group.

Nothing here assumes which way a completion moves. The step changes shared weights: a completion
with A_i < 0 that shares most of its tokens with rewarded ones can become more likely, and one with
A_i = 0 moves too. The counts say what happened.

Shapes: N completions (G of one prompt, or B*G), T completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qae_lab._checks import as_real_tensor, check_finite_scalar, check_mask
from qae_lab.task.answers import extract_answer
from qae_lab.entropy_controls import ppo_clip_active

__all__ = ["sequence_logps", "group_lines", "advantage_lines", "UpdateChange", "update_change", "SIGNS"]

# the three kinds of completion an update treats differently, by the sign of the advantage
SIGNS = {"A > 0": 1, "A = 0": 0, "A < 0": -1}
_TEXT_CHARS = 72  # a completion's text in a printed line: longer ones end in "…"


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


def group_lines(ro, advantages=None) -> list[str]:
    r"""One line per completion of a :class:`qae_lab.task.rollouts.Rollouts`: label, answer, reward, advantage, text.

    Args:
        ro: the rollouts (``completions``, ``rewards``, ``records``, ``group_size``).
        advantages: (N,) advantages to show beside the rewards, or None.

    >>> from types import SimpleNamespace as NS
    >>> ro = NS(completions=["<answer>\n4\n</answer>", "<answer>\n5\n</answer>"], rewards=torch.tensor([1., 0]),
    ...         records=[{"gold": "4"}], group_size=2)
    >>> for line in group_lines(ro, torch.tensor([0.7071, -0.7071])):
    ...     print(line)
    gold answer 4
    y0 ✓  answer 4      R = 1  A = +0.707  '<answer>\n4\n</answer>'
    y1 ✗  answer 5      R = 0  A = -0.707  '<answer>\n5\n</answer>'
    """
    rewards = as_real_tensor(ro.rewards, "rewards", ndim=1)
    n = len(ro.completions)
    if rewards.numel() != n:
        raise ValueError(f"rewards must hold one reward per completion: {rewards.numel()} for {n}")
    adv = None if advantages is None else as_real_tensor(advantages, "advantages", ndim=1)
    if adv is not None and adv.numel() != n:
        raise ValueError(f"advantages must hold one value per completion: {adv.numel()} for {n}")
    golds = sorted({str(r["gold"]) for r in ro.records})
    lines = [f"gold answer {', '.join(golds)}"]
    for i, (label, text) in enumerate(zip(_labels(rewards), ro.completions)):
        shown = repr(text) if len(repr(text)) <= _TEXT_CHARS else repr(text)[: _TEXT_CHARS - 1] + "…"
        a = "" if adv is None else f"  A = {adv[i].item():+.3f}"
        lines.append(f"{label}  answer {extract_answer(text) or '-':<6} R = {rewards[i].item():g}{a}  {shown}")
    return lines


def advantage_lines(rewards, advantages, eps: float = 1e-6) -> list[str]:
    r"""How one group's rewards became its advantages: the mean, the std, and A for each distinct reward.

    Args:
        rewards: (G,) one group's rewards. advantages: (G,) the advantages computed from them.
        eps: the eps the advantages were computed with (printed, not used).

    >>> for line in advantage_lines(torch.tensor([1., 0, 0, 0]), torch.tensor([1.5, -0.5, -0.5, -0.5])):
    ...     print(line)
    mean R = 0.250, std R = 0.500 (Bessel-corrected, as torch.std), eps = 1e-06
    R = 1: A = (1 - 0.250) / (0.500 + eps) = +1.500   (1 completion)
    R = 0: A = (0 - 0.250) / (0.500 + eps) = -0.500   (3 completions)
    """
    r = as_real_tensor(rewards, "rewards", ndim=1).double()
    a = as_real_tensor(advantages, "advantages", ndim=1).double()
    if r.numel() < 2 or a.shape != r.shape:
        raise ValueError(f"rewards and advantages must be one group of G >= 2 each, got {r.numel()} and {a.numel()}")
    eps = check_finite_scalar(eps, "eps")
    mean, std = r.mean().item(), r.std().item()
    lines = [f"mean R = {mean:.3f}, std R = {std:.3f} (Bessel-corrected, as torch.std), eps = {eps:g}"]
    for value in sorted(set(r.tolist()), reverse=True):
        rows = r == value
        count = int(rows.sum())
        lines.append(
            f"R = {value:g}: A = ({value:g} - {mean:.3f}) / ({std:.3f} + eps) = {a[rows][0].item():+.3f}"
            f"   ({count} completion{'s' if count != 1 else ''})"
        )
    return lines


@dataclass(frozen=True)
class UpdateChange:
    r"""What one update did to each completion of a group: log pi(y_i) before and after, beside A_i.

    Attributes:
        labels: N labels (``y0 ✓``: index, and ✓ where the reward was positive).
        before, after: (N,) float64 log pi(y_i) before and after the step.
        advantages: (N,) float64 A_i the step used.
        clipped_tokens: tokens where PPO's clip would stop the gradient on a second pass over the group
            (ratio pi_new / pi_old past [1 - eps_low, 1 + eps_high] on the side its advantage pushes).
        tokens: real completion tokens in the group.

    >>> c = UpdateChange(["y0 ✓", "y1 ✗", "y2 ✗"], torch.tensor([-1., -2, -3]), torch.tensor([-0.9, -2.5, -2.8]),
    ...                  torch.tensor([1., -0.5, -0.5]), 0, 9)
    >>> c.delta.tolist(), c.moved("A < 0"), c.direction("A < 0"), c.direction("A > 0"), c.direction("A = 0")
    ([0.1..., -0.5, 0.2...], (1, 1, 2), 'mixed', 'up', None)
    """

    labels: list[str]
    before: torch.Tensor
    after: torch.Tensor
    advantages: torch.Tensor
    clipped_tokens: int
    tokens: int

    @property
    def delta(self) -> torch.Tensor:
        r"""(N,) log pi_after(y_i) - log pi_before(y_i): > 0 where the completion became more likely."""
        return self.after - self.before

    def rows(self, sign: str) -> torch.Tensor:
        r"""(N,) bool: the completions whose advantage has ``sign``, a key of :data:`SIGNS`."""
        if sign not in SIGNS:
            raise ValueError(f"sign must be one of {list(SIGNS)}, got {sign!r}")
        return torch.sign(self.advantages) == SIGNS[sign]

    def moved(self, sign: str) -> tuple[int, int, int]:
        r"""(how many became more likely, how many less likely, how many there are) among the ``sign`` rows."""
        d = self.delta[self.rows(sign)]
        return int((d > 0).sum()), int((d < 0).sum()), d.numel()

    def direction(self, sign: str) -> str | None:
        r"""How the ``sign`` rows moved: ``"up"`` or ``"down"`` (all of them), ``"mixed"``, ``"unchanged"``, or
        None where there is no such row."""
        up, down, n = self.moved(sign)
        if n == 0:
            return None
        return "up" if up == n else "down" if down == n else "unchanged" if up == down == 0 else "mixed"

    @property
    def title(self) -> str:
        r"""The figure's title: what is drawn and the counts it shows."""
        (up, _, n_pos), (_, down, n_neg) = self.moved("A > 0"), self.moved("A < 0")
        return (
            f"One GRPO step: change of log π(y_i) per completion · A > 0: {up} of {n_pos} up · "
            f"A < 0: {down} of {n_neg} down"
        )

    def lines(self) -> list[str]:
        r"""One line per completion: label, A_i, log pi(y_i) before -> after, the change and pi's factor."""
        out = []
        for i, label in enumerate(self.labels):
            b, a, d = self.before[i].item(), self.after[i].item(), self.delta[i].item()
            out.append(
                f"{label}  A = {self.advantages[i].item():+.3f}  log π(y) {b:8.3f} -> {a:8.3f}  "
                f"change {d:+.3f}  (π(y) x {torch.tensor(d).exp().item():.3f})"
            )
        return out

    def summary_lines(self) -> list[str]:
        r"""The measured directions by advantage sign, and the clip's count, as sentences."""
        out = []
        for sign, way in (("A > 0", "more"), ("A < 0", "less"), ("A = 0", None)):
            up, down, n = self.moved(sign)
            if n == 0:
                out.append(f"no completion has {sign}")
                continue
            mean = self.delta[self.rows(sign)].mean().item()
            if way == "more":
                head = f"{up} of {n} completions with {sign} became more likely"
            elif way == "less":
                head = f"{down} of {n} completions with {sign} became less likely"
            else:
                head = f"{n} completions with {sign} moved too (shared weights): {up} up, {down} down"
            out.append(f"{head} (mean change of log π(y) {mean:+.3f})")
        out.append(
            f"a second pass over this group would clip {self.clipped_tokens} of its {self.tokens} tokens "
            "(π_new / π_old past 1 ± ε where A pushes)"
        )
        return out


def update_change(
    ro, advantages, before, after, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2
) -> UpdateChange:
    r"""Measure one update: each completion's log pi(y_i) before and after, next to its advantage.

    Args:
        ro: the :class:`qae_lab.task.rollouts.Rollouts` the step was computed on (its ``rewards``, ``mask``).
        advantages: (N,) the advantages the step used.
        before, after: (N, T) per-token log-probs of the same completions before and after the step
            (:func:`qae_lab.task.rollouts.completion_logps`); detached here.
        epsilon_low, epsilon_high: PPO's clip range, for :attr:`UpdateChange.clipped_tokens`.

    Returns:
        :class:`UpdateChange`.

    >>> from types import SimpleNamespace as NS
    >>> ro = NS(rewards=torch.tensor([1., 0]), mask=torch.tensor([[1., 1], [1, 0]]))
    >>> before = torch.log(torch.tensor([[0.5, 0.5], [0.5, 1.0]]))
    >>> after = torch.log(torch.tensor([[0.7, 0.5], [0.3, 1.0]]))     # token ratios 1.4, 1 and 0.6 (padding)
    >>> c = update_change(ro, torch.tensor([0.7, -0.7]), before, after)
    >>> c.labels, c.direction("A > 0"), c.direction("A < 0"), c.clipped_tokens, c.tokens
    (['y0 ✓', 'y1 ✗'], 'up', 'down', 2, 3)
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
        int(clipped.sum()),
        int(m.sum()),
    )
