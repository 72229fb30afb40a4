r"""Notebook 04's numbers and sentences from a live run's log: where a logged quantity started and ended, its
prediction (did the share of hard prompts move?), and the closing summary of the run (the steps, the K and alpha in
force, pass@1 before and after).

Nothing here imports plotly or ipywidgets.
"""

from __future__ import annotations

import math
import statistics

from collections.abc import Mapping, Sequence

from qae_lab._checks import check_int
from qae_lab.analysis.phenomena import window_mean
from qae_lab.lab.exercises import check_direction
from qae_lab.methods import QAE_HARD_FRAC, QAE_K, QAE_ZERO_ADV_FRAC, SAAH_ALPHA, knob_changes

__all__ = ["GPU_RUN", "HARD_SAME", "first_last", "hard_share_verdict", "logged_mean", "summary_lines"]

GPU_RUN = {"max_steps": 200, "n_eval": 100}
"""Notebook 04's run on a GPU: its training steps and its held-out problems, evaluated before and after (a shorter
set than the presets' 500, so that the evaluations take minutes). docs/workshop.md's T4 time estimate reads them."""


def first_last(rows: Sequence[Mapping], metric: str, share: float = 0.1) -> tuple[float, float] | None:
    r"""The mean of ``metric`` over the first and over the last ``share`` of the logged steps (at least one step
    each): where a run started and where it ended, without one noisy step deciding. None before any step logs it.

    Args:
        rows: training-step log rows in step order (``LiveRun.logged_steps()``).
        metric: a logged metric (``"qae/hard_frac"``, ``"entropy"``, ...).
        share: the fraction of the logged steps in each window, in (0, 0.5].

    >>> rows = [{"step": s, "qae/hard_frac": s / 32} for s in range(1, 21)]
    >>> first_last(rows, "qae/hard_frac")   # steps 1-2 and 19-20
    (0.046875, 0.609375)
    >>> first_last(rows[:1], "qae/hard_frac"), first_last(rows, "entropy")
    ((0.03125, 0.03125), None)
    """
    if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 < share <= 0.5:
        raise ValueError(f"share must lie in (0, 0.5], got {share!r}")
    values = [float(r[metric]) for r in rows if r.get(metric) is not None]
    if not values:
        return None
    n = max(1, math.ceil(share * len(values)))
    return statistics.fmean(values[:n]), statistics.fmean(values[-n:])


HARD_SAME = 0.05
"""How far the share of hard prompts may move and still count as "same" in notebook 04's prediction (absolute): a
tenth of the CPU run's 400 steps averages 40 steps of 8 prompts, and such a mean of a share near one half scatters
by about 0.03 from sampling alone."""


def hard_share_verdict(prediction, rows: Sequence[Mapping]) -> str:
    r"""Notebook 04's prediction checked: did the share of a step's prompts in QAE's hard regime (p <= 1 - K at the K
    in force, logged as ``qae/hard_frac``) go ``"up"``, ``"down"`` or stay the ``"same"`` (within :data:`HARD_SAME`)
    from the first to the last tenth of the logged steps (:func:`first_last`)?

    >>> rows = [{"step": s, "qae/hard_frac": 0.875 if s <= 10 else 0.375} for s in range(1, 21)]
    >>> print(hard_share_verdict("down", rows))
    Right: you predicted "down", and the share of hard prompts went down when training went on
    (measured 0.875 -> 0.375, tolerance 0.05).
    >>> hard_share_verdict("down", [])
    'no step logged yet: run this cell again a little later'
    """
    ends = first_last(rows, QAE_HARD_FRAC)
    if ends is None:
        return "no step logged yet: run this cell again a little later"
    return check_direction(
        prediction, *ends, quantity="the share of hard prompts", change="training went on", tolerance=HARD_SAME
    )


def logged_mean(rows: Sequence[Mapping], metric: str) -> float | None:
    r"""The mean of ``metric`` over the rows that logged it; None where none did.

    >>> logged_mean([{"step": 1, "qae/zero_adv_frac": 0.5}, {"step": 2, "qae/zero_adv_frac": 1.0}, {"step": 3}],
    ...             "qae/zero_adv_frac")
    0.75
    >>> logged_mean([{"step": 1}], "reward") is None
    True
    """
    return window_mean(rows, metric)  # every step's window


def _knob_line(rows: Sequence[Mapping], metric: str, name: str) -> str | None:
    """How the knob ``metric`` in force moved over the logged steps; None where it was never logged."""
    moves = []
    for change in knob_changes(rows):
        if not moves or change[metric] != moves[-1][1]:
            moves.append((change["step"], change[metric]))
    moves = [(step, value) for step, value in moves if value is not None]
    if not moves:
        return None
    if len(moves) == 1:
        return f"{name} in force: {moves[0][1]:.2f} at every logged step"
    path = " -> ".join(f"{value:.2f} (from step {step})" for step, value in moves)
    return f"{name} in force: {path}, {len(moves) - 1} change(s)"


def _direction(before: float, after: float) -> str:
    return "rose" if after > before else "fell" if after < before else "unchanged"


def summary_lines(
    rows: Sequence[Mapping], before: Mapping, after: Mapping | None = None, *, steps: int, running: bool = False
) -> list[str]:
    r"""Notebook 04's closing summary: the steps trained, the K and alpha in force, the logged zero-advantage
    fraction and, once the evaluation after training has run, pass@1 before and after.

    Args:
        rows: the run's training-step log rows so far (``LiveRun.logged_steps()``), in step order.
        before: the evaluation before training (``EvalResult.summary``: ``pass@1``, ``greedy_pass@1``,
            ``n_problems``); after: the one after training, None while it has not run.
        steps: the run's ``max_steps`` (>= 1); running: whether training (or its evaluation) goes on.

    >>> rows = [{"step": 1, "qae/k": 0.4, "qae/zero_adv_frac": 0.75},
    ...         {"step": 2, "qae/k": 0.6, "qae/zero_adv_frac": 0.5}]
    >>> b = {"pass@1": 0.25, "greedy_pass@1": 0.5, "n_problems": 8}
    >>> a = {"pass@1": 0.375, "greedy_pass@1": 0.5, "n_problems": 8}
    >>> for line in summary_lines(rows, b, a, steps=2):
    ...     print(line)
    steps trained: 2 of 2
    K in force: 0.40 (from step 1) -> 0.60 (from step 2), 1 change(s)
    zero-advantage fraction (logged), mean over the 2 steps: 0.625
    sampled pass@1 on 8 held-out problems: 0.250 before -> 0.375 after training (rose)
    greedy pass@1 on 8 held-out problems: 0.500 before -> 0.500 after training (unchanged)
    >>> summary_lines([], b, steps=4, running=True)[0]
    'no training step logged yet: run this cell again a little later'
    """
    steps = check_int(steps, "steps", 1)
    if not rows:
        return ["no training step logged yet: run this cell again a little later"]
    lines = [
        f"steps trained: {len(rows)} of {steps}"
        + (
            " so far (training goes on: run this cell again once the run and its evaluation have ended)"
            if running
            else ""
        )
    ]
    lines += [line for line in (_knob_line(rows, QAE_K, "K"), _knob_line(rows, SAAH_ALPHA, "alpha")) if line]
    zero = logged_mean(rows, QAE_ZERO_ADV_FRAC)
    if zero is not None:
        lines.append(f"zero-advantage fraction (logged), mean over the {len(rows)} steps: {zero:.3f}")
    if after is None:
        lines.append(
            "pass@1 after training: not measured yet, the evaluation follows the run"
            if running
            else "pass@1 after training: no evaluation after training (the run failed or was cut short)"
        )
        return lines
    n = int(before["n_problems"])
    for name, key in (("sampled pass@1", "pass@1"), ("greedy pass@1", "greedy_pass@1")):
        if before.get(key) is not None and after.get(key) is not None:
            b, a = float(before[key]), float(after[key])
            lines.append(
                f"{name} on {n} held-out problems: {b:.3f} before -> {a:.3f} after training ({_direction(b, a)})"
            )
    return lines
