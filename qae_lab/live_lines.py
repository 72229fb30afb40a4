r"""Notebook 04's numbers and sentences from a live run's log: the zero-advantage fraction QAE's gate would
give the logged steps at another K, and the closing summary of the run.

The gate's count is :func:`qae_lab.sparsity.expected_zero_fraction` (QAE, arXiv 2509.22611, sec. 4-5): with
0/1 rewards a group of G with c successes has G - c zero advantages when it is hard (c <= G - ceil(K G)) and c
when it is easy, and for a success count drawn Binomial(G, p)

    E[zero fraction | p] = sum_c C(G, c) p^c (1 - p)^(G - c) zeros(c) / G

Departure: the log holds each step's success rate ``qae/success_rate``, not every group's count, so every
prompt of a step is taken to succeed at that rate (notebook 02's Binomial model). Prompts of unequal
difficulty give more all-right and all-wrong groups than that, so the logged ``qae/zero_adv_frac`` is
printed beside it. Nothing here imports plotly or ipywidgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qae_lab._checks import check_group_size, check_int, check_k
from qae_lab.knobs import knob_changes
from qae_lab.methods import QAE_K, QAE_SUCCESS_RATE, QAE_ZERO_ADV_FRAC, SAAH_ALPHA
from qae_lab.phenomena import window_mean
from qae_lab.sparsity import expected_zero_fraction

__all__ = ["GPU_RUN", "gate_zero_fraction", "logged_mean", "summary_lines"]

GPU_RUN = {"max_steps": 200, "n_eval": 100}
"""Notebook 04's run on a GPU: its training steps and its held-out problems, evaluated before and after (a shorter
set than the presets' 500, so that the evaluations take minutes). docs/workshop.md's T4 time estimate reads them."""


def gate_zero_fraction(rows: Sequence[Mapping], k: float, group_size: int) -> float:
    r"""Mean over the logged steps of the zero-advantage fraction QAE's gate gives at quantile ``k`` to groups
    of ``group_size`` whose success count is Binomial(G, p_t), p_t the step's logged ``qae/success_rate``.

    Args:
        rows: training-step log rows (:func:`qae_lab.runfolder.step_rows`); rows without a success rate
            are left out.
        k: the quantile level, in (0, 1); group_size: G, completions per prompt (>= 2).

    Raises:
        ValueError: ``k`` or ``group_size`` out of range, or no row with ``qae/success_rate``.

    >>> rows = [{"step": 1, "qae/success_rate": 0.5}, {"step": 2, "qae/success_rate": 0.5}]
    >>> round(gate_zero_fraction(rows, 0.4, 16), 4)   # sparsity.expected_zero_fraction(0.5, 16, 0.4)
    0.5764
    >>> gate_zero_fraction([{"step": 1, "qae/success_rate": 1.0}], 0.8, 8)   # all right: every advantage 0
    1.0
    """
    k = check_k(k, "k")
    g = check_group_size(group_size, group_size)  # an int >= 2
    p = [float(r[QAE_SUCCESS_RATE]) for r in rows if r.get(QAE_SUCCESS_RATE) is not None]
    if not p:
        raise ValueError(f"rows must hold at least one step with {QAE_SUCCESS_RATE!r}, got {len(rows)} row(s)")
    return float(expected_zero_fraction(p, g, k).mean())


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


def summary_lines(rows: Sequence[Mapping], before: Mapping, after: Mapping | None = None, *, steps: int,
                  running: bool = False) -> list[str]:
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
    lines = [f"steps trained: {len(rows)} of {steps}"
             + (" so far (training goes on: run this cell again once the run and its evaluation have ended)"
                if running else "")]
    lines += [line for line in (_knob_line(rows, QAE_K, "K"), _knob_line(rows, SAAH_ALPHA, "alpha")) if line]
    zero = logged_mean(rows, QAE_ZERO_ADV_FRAC)
    if zero is not None:
        lines.append(f"zero-advantage fraction (logged), mean over the {len(rows)} steps: {zero:.3f}")
    if after is None:
        lines.append("pass@1 after training: not measured yet, the evaluation follows the run" if running
                     else "pass@1 after training: no evaluation after training (the run failed or was cut short)")
        return lines
    n = int(before["n_problems"])
    for name, key in (("sampled pass@1", "pass@1"), ("greedy pass@1", "greedy_pass@1")):
        if before.get(key) is not None and after.get(key) is not None:
            b, a = float(before[key]), float(after[key])
            lines.append(f"{name} on {n} held-out problems: {b:.3f} before -> {a:.3f} after training "
                         f"({_direction(b, a)})")
    return lines
