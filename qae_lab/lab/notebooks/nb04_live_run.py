r"""Notebook 04's numbers and tables from a live run's log: where a logged quantity started and ended, its prediction
(did the share of hard prompts move?), the closing summary, and the completions before and after training.

The knobs are read from the log (what each step used, not where the sliders were); their tables are
:mod:`qae_lab.lab.live`'s, the dashboard's.
"""

from __future__ import annotations

import html
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence

from qae_lab._checks import check_int
from qae_lab.analysis.phenomena import window_mean
from qae_lab.lab.exercises import check_direction
from qae_lab.lab.live import KNOB_COLUMNS, knob_changes_table, knob_number, knob_ranges, knob_title, knobs_row
from qae_lab.runs.pipeline import eval_line, evaluate_run
from qae_lab.metric_names import (
    QAE_HARD_FRAC,
    QAE_K,
    QAE_QUANTILE_BASELINE,
    QAE_ZERO_ADV_FRAC,
    SAAH_ALPHA,
    TOKEN_WEIGHTING,
)

__all__ = [
    "HARD_SAME",
    "KNOB_COLUMNS",
    "completions_html",
    "evaluate_after",
    "first_last",
    "hard_share_verdict",
    "knob_changes_table",
    "knob_number",
    "knob_ranges",
    "knob_title",
    "knobs_row",
    "summary_rows",
]


def first_last(rows: Sequence[Mapping], metric: str, share: float = 0.1) -> tuple[float, float] | None:
    r"""The mean of ``metric`` over the first and the last ``share`` (in (0, 0.5]) of the logged steps, at least one
    each; None before any step logs it.

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
"""How far the share of hard prompts may move and still count as "same": a mean over 40 steps of 8 prompts scatters
by about 0.03 from sampling alone."""


def hard_share_verdict(prediction, rows: Sequence[Mapping]) -> str:
    r"""Notebook 04's prediction checked: did ``qae/hard_frac`` go up, down or stay the same (:data:`HARD_SAME`) from
    the first to the last tenth of the logged steps?

    >>> rows = [{"step": s, "qae/hard_frac": 0.875 if s <= 10 else 0.375} for s in range(1, 21)]
    >>> print(hard_share_verdict("down", rows))
    Right: you predicted "down", and the share of hard prompts went down when training went on
    (measured 0.875 -> 0.375, tolerance 0.05).
    >>> hard_share_verdict("down", [])
    'no step logged yet: run this cell again a little later'

    Moving K moves the share by itself, so only the steps at the first step's K are judged, and the answer says so:

    >>> rows += [{"step": s, "qae/k": 0.8, "qae/hard_frac": 0.0} for s in range(21, 31)]
    >>> print(hard_share_verdict("down", [{**r, "qae/k": r.get("qae/k", 0.4)} for r in rows]))
    Right: you predicted "down", and the share of hard prompts went down when training went on
    (measured 0.875 -> 0.375, tolerance 0.05).
    (Judged on steps 1-20, trained at K = 0.40; steps at another K (0.80) count hard at another threshold 1 - K.)
    """
    k0 = rows[0].get(QAE_K) if rows else None
    same_k = [r for r in rows if r.get(QAE_K) == k0]  # the steps at the first step's K (all of them if K never moved)
    ends = first_last(same_k, QAE_HARD_FRAC)
    if ends is None:
        return "no step logged yet: run this cell again a little later"
    verdict = check_direction(
        prediction, *ends, quantity="the share of hard prompts", change="training went on", tolerance=HARD_SAME
    )
    if len(same_k) == len(rows):
        return verdict
    others = sorted({float(r[QAE_K]) for r in rows if r.get(QAE_K) is not None and r.get(QAE_K) != k0})
    return (
        f"{verdict}\n(Judged on steps {same_k[0]['step']}-{same_k[-1]['step']}, trained at K = {knob_number(k0)}; "
        f"steps at another K ({', '.join(knob_number(k) for k in others)}) count hard at another threshold 1 - K.)"
    )


def _direction(before: float, after: float) -> str:
    return "rose" if after > before else "fell" if after < before else "unchanged"


def summary_rows(
    rows: Sequence[Mapping], before: Mapping, after: Mapping | None = None, *, steps: int, running: bool = False
) -> list[dict]:
    r"""Notebook 04's closing numbers as table rows: steps trained, the zero-advantage share and pass@1 before and
    after (``EvalResult.summary`` s; ``after`` None until it ran).

    >>> rows = [{"step": 1, "qae/zero_adv_frac": 0.75}, {"step": 2, "qae/zero_adv_frac": 0.5}]
    >>> b = {"pass@1": 0.25, "greedy_pass@1": 0.5, "n_problems": 8}
    >>> a = {"pass@1": 0.375, "greedy_pass@1": 0.5, "n_problems": 8}
    >>> for r in summary_rows(rows, b, a, steps=2):
    ...     print(r["measure"], "|", r["value"])
    steps trained | 2 of 2
    zero-advantage share, mean over the 2 steps | 0.625
    sampled pass@1, 8 held-out problems | 0.250 before → 0.375 after (rose)
    greedy pass@1, 8 held-out problems | 0.500 before → 0.500 after (unchanged)
    """
    steps = check_int(steps, "steps", 1)
    if not rows:
        return [{"measure": "steps trained", "value": "none logged yet: run this cell again a little later"}]
    goes_on = " so far (training goes on: run this cell again once the run and its evaluation have ended)"
    table = [{"measure": "steps trained", "value": f"{len(rows)} of {steps}" + (goes_on if running else "")}]
    zero = window_mean(rows, QAE_ZERO_ADV_FRAC)
    if zero is not None:
        table.append({"measure": f"zero-advantage share, mean over the {len(rows)} steps", "value": f"{zero:.3f}"})
    if after is None:
        why = (
            "not measured yet: the evaluation follows the run"
            if running
            else "no evaluation (the run failed or was cut short)"
        )
        return [*table, {"measure": "pass@1 after training", "value": why}]
    n = int(before["n_problems"])
    for name, key in (("sampled pass@1", "pass@1"), ("greedy pass@1", "greedy_pass@1")):
        if before.get(key) is not None and after.get(key) is not None:
            b, a = float(before[key]), float(after[key])
            value = f"{b:.3f} before → {a:.3f} after ({_direction(b, a)})"
            table.append({"measure": f"{name}, {n} held-out problems", "value": value})
    return table


_CELL = (
    "text-align:left;vertical-align:top;white-space:pre-wrap;overflow-wrap:break-word;"
    "padding:6px 8px;border:1px solid #ddd;font-size:12px;line-height:1.35"
)
_FILLS = {True: "#e6f4ea", False: "#fdecea"}


def completions_html(pairs: Sequence[Mapping], kind: str = "Greedy completions") -> str:
    r""":func:`qae_lab.lab.run_figures.paired_completions` as an HTML table whose text wraps (nothing is cut), each
    completion under its verdict, shaded, under a caption that counts them.

    >>> pair = {"question": "1 + 1?", "gold": "2", "before": "<answer>3</answer>", "before_correct": False,
    ...         "after": "<answer>2</answer>", "after_correct": True}
    >>> page = completions_html([pair])
    >>> "0/1 → 1/1 correct" in page, "&lt;answer&gt;2&lt;/answer&gt;" in page, page.count("<tr>")
    (True, True, 2)
    """
    rows = list(pairs)
    counts = {when: sum(r[f"{when}_correct"] for r in rows) for when in ("before", "after")}
    head = ["#", "question", *(f"{when} training ({counts[when]}/{len(rows)} ✓)" for when in ("before", "after"))]
    widths = ("4%", "26%", "35%", "35%")
    lines = [
        "<table class='qae-completions' style='table-layout:fixed;width:100%;border-collapse:collapse'>",
        (
            f"<caption style='text-align:left;font-weight:bold;padding:4px 0'>{html.escape(kind)} before and after "
            f"training, the first {len(rows)} held-out problems: {counts['before']}/{len(rows)} → "
            f"{counts['after']}/{len(rows)} correct</caption>"
        ),
        "<tr>" + "".join(f"<th style='{_CELL};width:{w}'>{h}</th>" for h, w in zip(head, widths)) + "</tr>",
    ]
    for i, r in enumerate(rows, 1):
        cells = [f"<td style='{_CELL}'>{i}</td>"]
        cells.append(f"<td style='{_CELL}'>{html.escape(r['question'])}\n<b>gold {html.escape(r['gold'])}</b></td>")
        for when in ("before", "after"):
            ok = r[f"{when}_correct"]
            mark = "✓" if ok else "✗"
            cells.append(f"<td style='{_CELL};background:{_FILLS[ok]}'><b>{mark}</b>\n{html.escape(r[when])}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join([*lines, "</table>"])


def evaluate_after(live, tok, records, run, cfg, out, keep: dict | None = None) -> str:
    r"""For ``LiveRun.then``: the evaluation after training as a line, kept in ``keep["result"]``; saved to
    ``out/eval_after.json`` only when the run finished (as :func:`qae_lab.runs.pipeline.train` does)."""
    done, step = live.outcome.finished, live.outcome.global_step
    if step == 0:
        return "no step trained: nothing to evaluate after training"
    res = evaluate_run(
        live.trainer.model, tok, records, run, cfg, out / "eval_after.json" if done else None, progress=False
    )
    if keep is not None:
        keep["result"] = res
    return eval_line("after" if done else f"after step {step}, not finished", res)
