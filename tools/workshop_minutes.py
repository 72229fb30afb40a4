r"""How long a room takes over each notebook, and the workshop's plans cut to fit their length.

A minute here is what a room of participants takes, questions included, not what one fast reader takes. A
notebook's count adds up its parts, each at a rate named below with its reason:

* reading: its prose and printed output at :data:`PROSE_WPM`, its code cells at :data:`CODE_WPM`;
* maths: the LaTeX (``$...$``, ``$$...$$``) and fenced code of its markdown, symbol by symbol, at :data:`MATHS_SPM`;
* figures: :data:`FIGURE_MIN` for each code cell that draws one (:data:`FIGURE_CELL`);
* play: :data:`CONTROL_MIN` for each live control, :data:`PREDICTION_MIN` for its prediction;
* computing: its full-mode run time, measured by ``benchmarks/bench_notebooks.py --write`` (:data:`NOTEBOOK_TIMES`);
  where the run trains while the room reads (:data:`OVERLAP`, notebook 04) the longer of the two counts;
* the facilitator: :data:`FACILITATOR_MIN` to introduce the notebook and move the room on;
* its exercise: :data:`EXERCISE_MIN` (or its own estimate in :data:`EXERCISE_ROOM_MIN`) in the room, none as homework.

The answers folded under ``<details>`` (a prediction's why, an exercise's solution) and the exercise's own cells
are not reading: the prediction's and the exercise's minutes hold them. A plan (:data:`PLANS`) runs notebooks in
the room, with their exercise or with it as homework, or shows one as the facilitator's demo (:data:`DEMO_MIN`),
and adds the set-up, its breaks and :data:`QUESTIONS_MIN` of questions for each stretch between breaks;
:func:`plan_rows` refuses a plan longer than its budget, and ``tests/tools/test_workshop_minutes.py`` fails.
``python -m tools.readme_results`` writes the counts into docs/workshop.md, the README and each notebook's opening
lines (:func:`notebook_table_text`, :func:`workshop_plan_text`, :func:`routes_text`, :func:`minutes_text`).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from qae_lab.analysis.tables import markdown_table

__all__ = [
    "NOTEBOOK_TIMES",
    "PLANS",
    "Plan",
    "count_notebook",
    "minutes_text",
    "notebook_minutes",
    "notebook_table_text",
    "plan_rows",
    "plan_totals",
    "routes_text",
    "workshop_plan_text",
]

ROOT = Path(__file__).resolve().parents[1]  # the source checkout the notebooks belong to
NOTEBOOK_TIMES = Path("data") / "notebook_times.json"  # benchmarks/bench_notebooks.py --write
NOTEBOOKS = Path("notebooks")

# ---------------------------------------------------------------- the constants, each with its reason
# Prose and printed output: an adult reads plain prose at about 200-250 words a minute; a participant reading to
# understand a method new to them, and talking it over with a neighbour, reads slower.
PROSE_WPM = 150
# Code cells: read to see what runs and with which settings, not every argument; slower than prose.
CODE_WPM = 100
# Mathematics, in symbols a minute, a third of the prose rate. A symbol is a letter run, a number or a LaTeX command
# ($A_i = \frac{R_i - b}{\sigma}$ is 7: A, i, frac, R, i, b, sigma), about one spoken word each. A formula is decoded,
# not skimmed: each symbol is matched to its definition in the text around it and the eye goes back over it. A
# choice, not a measurement: a room that knows the notation reads it faster, a room that does not, slower.
MATHS_SPM = 50
# A figure: find its axes and legend, find in it what the sentence beside it says (the sentence is counted as reading),
# the facilitator points at it. 90 seconds: a teacher's estimates of whole notebooks lie below this count.
FIGURE_MIN = 1.5
# A live control (a slider, a dropdown) played with.
CONTROL_MIN = 1
# A prediction: write the guess, run the check, read the why.
PREDICTION_MIN = 2
# The facilitator, each notebook: about 3 minutes to say what it adds and where it leads (the room listening, not
# reading), 1 to get every laptop onto it.
FACILITATOR_MIN = 4
# An exercise done in the room: read the task, write a few lines, run the checker, fix once, look at the solution.
# The notebooks' exercises are short functions checked by qae_lab.lab.exercises; those that take longer have their
# own estimate below.
EXERCISE_MIN = 8
EXERCISE_ROOM_MIN = {
    "00": 10,  # the four advantages worked out on paper first, then written as code
    "01": 10,  # the quantile's rank and its floating-point trap (0.28 * 25): most rooms fall in it once
    "05": 12,  # a windowed detrending over a series, its indices included
    "07": 15,  # the chain rule over prefix levels: a room took about 15 minutes (a teacher's count)
    "09": 12,  # a covariance under pi over a batch of states, two centrings
}
# A notebook the facilitator shows instead of the room running it (04 in the 90 minutes): started on the projector
# during the set-up, it trains while the room reads; then 5 minutes to show its dashboard, the knob table of its log
# and pass@1 before and after. Its reading, computing and exercise are not the room's.
DEMO_MIN = 5
# Everyone's first cell, and the facilitator checking that each person sees a figure.
INSTALL_MIN = 10
BREAK_MIN = 10
# Questions close each stretch between breaks (and the 90 minutes), while they are fresh: at least this many.
QUESTIONS_MIN = 10
# Notebooks whose run trains in the background while the room reads and moves its controls (04's live run).
OVERLAP = ("04",)
# A code cell draws a figure where it builds one with the lab's figure functions (qae_lab.lab.figures, run_figures and
# the nbNN modules: every one is named *_figure or *_figures, called or handed to widgets.interactive), or shows 04's
# live dashboard (display(lab)); a cell counts once however many panels it draws.
FIGURE_CELL = re.compile(r"\.\w+_figures?\s*[(,)]|\bdisplay\(lab\)")
_MATHS = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$|```.*?```", re.DOTALL)  # display and inline LaTeX, fenced code
_SYMBOL = re.compile(r"\\[A-Za-z]+|[A-Za-z]+|\d+(?:\.\d+)?")
_FOLDED = re.compile(r"<details>.*?</details>|<!--.*?-->", re.DOTALL)  # answers folded away, comments
_EXERCISE = re.compile(r"^## Exercise", re.MULTILINE)

# How a plan runs a notebook.
ROOM = "room"  # everyone works through it; its exercise is homework
WITH_EXERCISE = "room, exercise"  # ... and does its exercise there
DEMO = "demo"  # the facilitator shows it (DEMO_MIN)


@dataclass(frozen=True)
class Plan:
    """A workshop plan: its length, the notebooks it runs in order and how, its breaks."""

    budget: int
    """the plan's length in minutes"""
    parts: tuple[tuple[str, str], ...]
    """(notebook, how) in order: ROOM, WITH_EXERCISE or DEMO"""
    breaks: int = 0
    """breaks of BREAK_MIN; each ends a stretch, and each stretch ends with QUESTIONS_MIN of questions"""


# The 90 minutes, as a teacher advised: 00 -> 01 -> 07, where QAE's effect shows, with 04's live run started during the
# set-up and shown as a demo, every exercise as homework. The half day runs 04 in the room (the participants' own
# run, its sliders in their hands), adds SA-AH's weights (03) and the sums model's scoreboard (06), and does one
# exercise in the room, 01's: writing QAE's baseline, the one line QAE changes. What does not fit (02's theory, 05,
# 08's code to take home, 09, the other exercises) is said in the plan as work for afterwards.
PLANS = {
    "90 minutes": Plan(90, (("00", ROOM), ("01", ROOM), ("04", DEMO), ("07", ROOM))),
    # 3 hours 45, not 3.5: measured on 2026-12-06 the count came to 213 minutes (notebooks 02, 06 and 07 had grown by
    # some 500 words since the last measurement): the plan asks for the slot it needs rather than cut a notebook
    "half a day (3 hours 45)": Plan(
        225, (("00", ROOM), ("01", WITH_EXERCISE), ("03", ROOM), ("04", ROOM), ("06", ROOM), ("07", ROOM)), breaks=2
    ),
}


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _words(text: str) -> int:
    """Words as ``benchmarks/bench_notebooks.py`` counts them: tokens with a letter or a digit."""
    return sum(1 for token in text.split() if any(ch.isalnum() for ch in token))


def _split_exercise(cells: list[dict]) -> tuple[list[dict], bool]:
    """(the cells before the exercise, the markdown cell holding its heading cut at it; whether there is one)."""
    for i, cell in enumerate(cells):
        found = _EXERCISE.search(_source(cell)) if cell["cell_type"] == "markdown" else None
        if found:
            return cells[:i] + [{"cell_type": "markdown", "source": _source(cell)[: found.start()]}], True
    return cells, False


def count_notebook(number: str, cells: list[dict], record: dict) -> dict:
    r"""One notebook's minutes in a room, part by part (the module's docstring says how each is counted).

    Args:
        number: the notebook's number ("07"): its exercise estimate and whether its run overlaps the reading.
        cells: its cells as the ``.ipynb`` holds them (``cell_type``, ``source``).
        record: its measurement in :data:`NOTEBOOK_TIMES`: ``output_words``, ``controls`` and ``full_s``.

    Returns:
        ``reading``, ``maths``, ``figures``, ``play``, ``computing``, ``facilitator``, ``exercise`` in minutes;
        ``total`` (exercise as homework) and ``total_with_exercise``, rounded up; ``words``, ``symbols`` and
        ``figure_cells``, the counts behind them.

    >>> md = {"cell_type": "markdown", "source": "Three plain words $x + y$"}
    >>> m = count_notebook("99", [md], {"output_words": 0, "controls": 0, "full_s": 0})
    >>> (m["words"], m["symbols"], m["total"], m["total_with_exercise"])
    (3, 2, 5, 5)
    """
    body, has_exercise = _split_exercise(cells)
    markdown = "\n".join(_FOLDED.sub("", _source(c)) for c in body if c["cell_type"] == "markdown")
    code = [_source(c) for c in body if c["cell_type"] == "code"]
    words = _words(_MATHS.sub(" ", markdown))
    symbols = sum(len(_SYMBOL.findall(span)) for span in _MATHS.findall(markdown))
    figure_cells = sum(1 for text in code if FIGURE_CELL.search(text))
    predicts = any(text.startswith("PREDICTION = ") for text in code)
    reading = (words + record["output_words"]) / PROSE_WPM + sum(map(_words, code)) / CODE_WPM
    maths = symbols / MATHS_SPM
    figures = FIGURE_MIN * figure_cells
    play = CONTROL_MIN * record["controls"] + PREDICTION_MIN * predicts
    computing = record["full_s"] / 60
    busy = reading + maths + figures + play
    # 04's run trains while the room reads and plays: the longer counts, not the sum
    busy = max(busy, computing) if number in OVERLAP else busy + computing
    exercise = EXERCISE_ROOM_MIN.get(number, EXERCISE_MIN) if has_exercise else 0
    return {
        "reading": reading,
        "maths": maths,
        "figures": figures,
        "play": play,
        "computing": computing,
        "facilitator": FACILITATOR_MIN,
        "exercise": exercise,
        "total": math.ceil(busy + FACILITATOR_MIN),
        "total_with_exercise": math.ceil(busy + FACILITATOR_MIN + exercise),
        "words": words + record["output_words"] + sum(map(_words, code)),
        "symbols": symbols,
        "figure_cells": figure_cells,
    }


def notebook_minutes(root: str | Path = ROOT) -> dict[str, dict]:
    r"""``{number: count_notebook(...)}`` of every notebook under ``root``: the words of its markdown and code as it
    is now, its output's words, controls and run time as :data:`NOTEBOOK_TIMES` measured them.

    Raises:
        ValueError: a notebook :data:`NOTEBOOK_TIMES` has not measured.

    >>> m = notebook_minutes()["07"]; m["total_with_exercise"] - m["total"] in (15, 16)
    True
    """
    root = Path(root)
    times = json.loads((root / NOTEBOOK_TIMES).read_text(encoding="utf-8"))
    out = {}
    for path in sorted((root / NOTEBOOKS).glob("[0-9][0-9]_*.ipynb")):
        record = times["notebooks"].get(path.name)
        if record is None or "output_words" not in record:
            raise ValueError(
                f"{root / NOTEBOOK_TIMES} has no measurement of {path.name}: run benchmarks/bench_notebooks.py --write"
            )
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        out[path.name[:2]] = {"name": path.name, **count_notebook(path.name[:2], cells, record)}
    return out


def plan_rows(plan: Plan, minutes: dict[str, dict]) -> list[dict]:
    r"""A plan's rows (part, what, minutes): the set-up, each notebook as the plan runs it, its breaks, the questions
    of its stretches, and its ``total``, the sum of the rows above it.

    Raises:
        ValueError: the total is more than the plan's budget.

    >>> rows = plan_rows(PLANS["90 minutes"], notebook_minutes())
    >>> rows[-1]["part"], rows[-1]["minutes"] == sum(r["minutes"] for r in rows[:-1]) <= 90
    ('total', True)
    """
    rows = [{"part": "set-up", "what": "everyone runs notebook 00's first cell", "minutes": INSTALL_MIN}]
    for number, how in plan.parts:
        m = minutes[number]
        if how == DEMO:
            rows.append(
                {"part": number, "what": "the facilitator's demo (started during the set-up)", "minutes": DEMO_MIN}
            )
        elif how == WITH_EXERCISE:
            rows.append({"part": number, "what": "in the room, with its exercise", "minutes": m["total_with_exercise"]})
        elif how == ROOM:
            rows.append({"part": number, "what": "in the room, its exercise as homework", "minutes": m["total"]})
        else:
            raise ValueError(f"notebook {number}: how {how!r} is not one of {ROOM!r}, {WITH_EXERCISE!r}, {DEMO!r}")
    if plan.breaks:
        rows.append({"part": "breaks", "what": f"{plan.breaks} of {BREAK_MIN}", "minutes": BREAK_MIN * plan.breaks})
    # each stretch between breaks, and the plan, ends with questions
    asked = f"{QUESTIONS_MIN} before each break and at the end" if plan.breaks else "at the end"
    rows.append({"part": "questions", "what": asked, "minutes": QUESTIONS_MIN * (plan.breaks + 1)})
    total = sum(r["minutes"] for r in rows)
    if total > plan.budget:
        raise ValueError(f"the plan takes {total} min by the count, more than its {plan.budget}")
    return rows + [{"part": "total", "what": f"of the plan's {plan.budget}", "minutes": total}]


def plan_totals(root: str | Path = ROOT) -> dict[str, int]:
    r"""``{plan: its total in minutes}``, questions and the facilitator included (:func:`plan_rows`).

    >>> all(total <= PLANS[name].budget for name, total in plan_totals().items())
    True
    """
    minutes = notebook_minutes(root)
    return {name: plan_rows(plan, minutes)[-1]["minutes"] for name, plan in PLANS.items()}


def _left_out(plan: Plan, minutes: dict[str, dict]) -> str:
    """What a plan leaves for afterwards: the notebooks it does not run, and the exercises it sets as homework."""
    run = {n for n, _ in plan.parts}
    shown = [n for n, how in plan.parts if how == DEMO]
    homework = [n for n, how in plan.parts if how == ROOM]
    out = [f"notebooks {', '.join(n for n in minutes if n not in run)} are for afterwards"]
    if shown:
        out.append(f"{', '.join(shown)} is shown by the facilitator, not run by the room")
    if homework:
        out.append(f"the exercises of {', '.join(homework)} are homework")
    return "; ".join(out)


def minutes_text(number: str, root: str | Path = ROOT) -> str:
    r"""A notebook's time as its opening lines state it, from :func:`notebook_minutes`.

    >>> minutes_text("00").startswith("About ") and "with its exercise" in minutes_text("00")
    True
    """
    m = notebook_minutes(root)[number]
    head = f"About {m['total']} minutes in a workshop, {m['total_with_exercise']} with its exercise"
    if number in OVERLAP:
        return f"{head}: its {m['computing']:.0f} minutes of training on a CPU run while you read and move the controls"
    secs = 60 * m["computing"]
    computing = f"{secs:.0f} s" if secs < 60 else f"{secs / 60:.1f} min"
    return f"{head} ({computing} of computing on a CPU)"


def _wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, 100, break_long_words=False, break_on_hyphens=False)


def notebook_table_text(root: str | Path = ROOT) -> str:
    r"""docs/workshop.md's count per notebook: how it is counted, then one row a notebook, its parts in minutes.

    >>> "| 07 |" in notebook_table_text()
    True
    """
    root = Path(root)
    times = json.loads((root / NOTEBOOK_TIMES).read_text(encoding="utf-8"))
    spelled = ", ".join(f"{n} {m}" for n, m in sorted(EXERCISE_ROOM_MIN.items()))
    rows = [
        {
            "notebook": n,
            "reading": f"{m['reading']:.1f}",
            "maths": f"{m['maths']:.1f}",
            "figures": f"{m['figures']:.1f}",
            "controls, prediction": f"{m['play']}",
            "computing": f"{m['computing']:.1f}" + (" (overlaps)" if n in OVERLAP else ""),
            "facilitator": f"{m['facilitator']}",
            "total": f"{m['total']}",
            "exercise": f"{m['exercise']}",
            "total with exercise": f"{m['total_with_exercise']}",
        }
        for n, m in notebook_minutes(root).items()
    ]
    about = (
        f"Minutes a room takes, counted by `tools/workshop_minutes.py` (each rate's reason is there): prose and printed "
        f"output read at {PROSE_WPM} words a minute, code at {CODE_WPM}, mathematics (LaTeX and code in the text) at "
        f"{MATHS_SPM} symbols a minute, {FIGURE_MIN:g} minutes for each figure, {CONTROL_MIN} for each live control, "
        f"{PREDICTION_MIN} for the prediction, {FACILITATOR_MIN} for the facilitator to introduce the notebook and "
        f"move the room on, and the run time on {times['cores']} CPU cores at a load of at most "
        f"{times['max_load_per_core']} per core (measured {times['date']} by `benchmarks/bench_notebooks.py`; beside "
        f'busy programs: "What runs where"); notebook 04 trains while the room reads, so the longer of the two counts. '
        f"An exercise in the room takes {EXERCISE_MIN} minutes ({spelled}); the total without it is the notebook "
        f"with its exercise as homework. Totals are rounded up."
    )
    return "\n".join(["", _wrap(about), "", markdown_table(rows), ""])


def workshop_plan_text(root: str | Path = ROOT) -> str:
    r"""docs/workshop.md's plans: each one's rows (:func:`plan_rows`) and what it leaves for afterwards.

    >>> "| total | of the plan's 90 |" in workshop_plan_text()
    True
    """
    minutes = notebook_minutes(root)
    lines = [
        "",
        _wrap(
            f"Each plan adds {INSTALL_MIN} minutes of set-up, breaks of {BREAK_MIN} and at least {QUESTIONS_MIN} "
            f"minutes of questions to close each stretch between breaks; a notebook shown as a demo counts "
            f"{DEMO_MIN} minutes."
        ),
        "",
    ]
    for name, plan in PLANS.items():
        lines += [f"**{name}**", "", markdown_table(plan_rows(plan, minutes)), ""]
        lines += [_wrap(f"Left out: {_left_out(plan, minutes)}."), ""]
    return "\n".join(lines)


def routes_text(root: str | Path = ROOT) -> str:
    r"""The README's words on the plans: each plan's notebooks, how its exercises are done, its total by the count.

    >>> routes_text().startswith("90 minutes: 00 → 01 → 04 shown as a demo → 07, exercises as homework, ")
    True
    """
    totals = plan_totals(root)
    said = []
    for name, plan in PLANS.items():
        route = " → ".join(n + (" shown as a demo" if how == DEMO else "") for n, how in plan.parts)
        in_room = [n for n, how in plan.parts if how == WITH_EXERCISE]
        exercises = (
            f"{', '.join(in_room)}'s exercise in the room, the others as homework"
            if in_room
            else "exercises as homework"
        )
        said.append(f"{name}: {route}, {exercises}, {totals[name]} minutes by the count, questions included")
    return "; ".join(said)
