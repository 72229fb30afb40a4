"""The workshop's minutes: one notebook counted by hand, and every plan within its length by the generated count.

Each test was shown to fail with the bug it guards against (docs/testing.md): mathematics read at the prose rate,
a figure or the facilitator not counted, the exercise's text counted as reading, a notebook added to the 90 minutes.
"""

from __future__ import annotations

import json
import math

import pytest

from tools import readme_results, workshop_minutes
from tools.workshop_minutes import (
    DEMO,
    PLANS,
    QUESTIONS_MIN,
    ROOM,
    Plan,
    count_notebook,
    notebook_minutes,
    plan_rows,
    plan_totals,
    workshop_plan_text,
)


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


def _code(text: str) -> dict:
    return {"cell_type": "code", "source": text}


# 16 symbols: A, i, frac, R, i, operatorname, mean, j, R, j, operatorname, std, j, R, j, varepsilon
ADVANTAGE = r"$$A_i = \frac{R_i - \operatorname{mean}_j R_j}{\operatorname{std}_j R_j + \varepsilon}$$"
TINY = [
    _md(" ".join(["word"] * 150)),  # 150 words of prose
    _md(ADVANTAGE),  # one line of mathematics, no prose
    _code("display(plots.line_figure(x))"),  # a figure; 1 word of code
    _md("## Exercise\n\n**Write it.** Return the advantages.\n\n<details><summary>Solution</summary>\n\nx\n</details>"),
    _code("print(check_advantages(my_advantages))"),
]
RECORD = {"output_words": 150, "controls": 1, "full_s": 72.0}  # as benchmarks/bench_notebooks.py measures them


def test_a_tiny_notebook_by_hand():
    m = count_notebook("99", TINY, RECORD)
    assert m["reading"] == pytest.approx((150 + 150) / 150 + 1 / 100)  # prose and output at 150, code at 100
    assert m["maths"] == pytest.approx(16 / 50)  # 16 symbols at 50 a minute
    assert m["figures"] == 1.5 and m["play"] == 1 and m["computing"] == pytest.approx(1.2)
    assert m["facilitator"] == 4 and m["exercise"] == 8  # notebook 99 has no estimate of its own: the default
    # 2.01 + 0.32 + 1.5 + 1 + 1.2 + 4 = 10.03, rounded up; with the maths at the prose rate it would be 9.82 -> 10
    assert m["total"] == 11
    assert m["total_with_exercise"] == 19  # 10.03 + 8
    assert (m["words"], m["symbols"], m["figure_cells"]) == (150 + 150 + 1, 16, 1)


def test_the_overlapping_run_and_an_exercise_of_its_own():
    busy = (150 + 150) / 150 + 1 / 100 + 16 / 50 + 1.5 + 1  # 5.83: the room reads while 04 trains for 10 minutes
    m = count_notebook("04", TINY, {**RECORD, "full_s": 600.0})
    assert m["total"] == math.ceil(max(busy, 10.0) + 4) == 14
    assert count_notebook("07", TINY, RECORD)["exercise"] == 15  # what a room took over 07's exercise
    assert count_notebook("99", TINY[:3], RECORD)["exercise"] == 0  # no exercise, no minutes for one


def test_the_figure_cells_cover_the_figures_measured_in_each_notebook():
    # bench_notebooks counts the static figures a run displayed; an interactive one is a widget it does not count
    times = json.loads((readme_results.ROOT / workshop_minutes.NOTEBOOK_TIMES).read_text(encoding="utf-8"))
    for n, m in notebook_minutes().items():
        assert m["figure_cells"] >= times["notebooks"][m["name"]]["figures"], n


def _generated_totals() -> dict[str, int]:
    """Each plan's total as docs/workshop.md shows it (its "| total |" row, written by python -m tools.readme_results)."""
    text = (readme_results.ROOT / "docs" / "workshop.md").read_text(encoding="utf-8")
    begin, end = readme_results.marker("workshop-plans")
    passage = text.split(begin)[1].split(end)[0]
    out = {}
    for name in PLANS:
        table = passage.split(f"**{name}**")[1]
        row = next(line for line in table.splitlines() if line.startswith("| total |"))
        out[name] = int(row.strip("| ").split("|")[-1])
    return out


def test_every_plan_fits_its_length_by_the_generated_count():
    computed = plan_totals()
    assert _generated_totals() == computed  # what a reader sees is the count (else run python -m tools.readme_results)
    for name, total in computed.items():
        plan = PLANS[name]
        assert total <= plan.budget, (name, total, plan.budget)
        rows = {r["part"]: r["minutes"] for r in plan_rows(plan, notebook_minutes())}
        assert rows["questions"] >= QUESTIONS_MIN * (plan.breaks + 1)  # questions close every stretch
    # the teacher's route: 00 -> 01 -> 07, where QAE's effect shows, 04 as a demo, the exercises as homework
    assert PLANS["90 minutes"].parts == (("00", ROOM), ("01", ROOM), ("04", DEMO), ("07", ROOM))


def test_a_plan_longer_than_its_budget_is_refused_and_what_is_cut_is_said():
    everything = Plan(90, tuple((n, ROOM) for n in notebook_minutes()))
    with pytest.raises(ValueError, match="more than its 90"):
        plan_rows(everything, notebook_minutes())
    text = workshop_plan_text()
    assert "Left out: notebooks 02, 03, 05, 06, 08, 09 are for afterwards; 04 is shown by the facilitator" in text
    assert "the exercises of 00, 01, 07 are homework" in text
