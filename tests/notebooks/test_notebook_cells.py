"""Notebooks drive, the library computes: no notebook cell defines a function or a class.

The one kind of ``def`` a notebook may hold is an exercise's stub (``def my_...`` whose body only
returns None), which the reader fills in. A ``lambda`` may adapt a control's name to a library function (a widget
callback) but computes nothing itself: its body is one call. Analysis lives in ``qae_lab`` with tests;
figures in its lab layer (``figures``, ``widgets``, ``*_figures``).

One exception, by name: notebook 08 is the code a participant takes home (a reward function, a config, a trainer
in plain TRL), so its cells tagged ``take-home`` may define functions. No other notebook has such cells.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))


def _stub(node: ast.FunctionDef) -> bool:
    """An exercise's stub: ``my_*``, its body (comments aside) ``return None``."""
    body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    return (
        node.name.startswith("my_")
        and len(body) == 1
        and isinstance(body[0], ast.Return)
        and (body[0].value is None or (isinstance(body[0].value, ast.Constant) and body[0].value.value is None))
    )


def definitions(source: str) -> list[str]:
    """What a code cell defines that it should not: functions (but exercise stubs) and classes, and lambdas whose
    body is more than one call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not _stub(node):
                found.append(f"def {node.name} (line {node.lineno})")
        elif isinstance(node, ast.ClassDef):
            found.append(f"class {node.name} (line {node.lineno})")
        elif isinstance(node, ast.Lambda) and not isinstance(node.body, ast.Call):
            found.append(f"a lambda that computes (line {node.lineno})")
    return found


def test_the_check_catches_what_it_should():
    assert definitions("def f(x):\n    return x + 1\n") == ["def f (line 1)"]
    assert definitions("def my_answer(x):\n    # YOUR CODE HERE\n    return None\n") == []
    assert definitions("def my_answer(x):\n    return x.sum()\n") == ["def my_answer (line 1)"]  # an answer
    assert definitions("class A:\n    pass\n") == ["class A (line 1)"]
    assert definitions("v = interactive(lambda part: figure(runs, part), {})") == []
    assert definitions("best = max(xs, key=lambda x: x[1])") == ["a lambda that computes (line 1)"]


TAKE_HOME = "take-home"  # the cell tag of notebook 08's own code
TAKE_HOME_NOTEBOOK = "08_write_it_yourself.ipynb"


def _take_home(cell) -> bool:
    return TAKE_HOME in cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_cell_defines_analysis(path):
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    tagged = [i for i, c in enumerate(cells) if _take_home(c)]
    assert not tagged or path.name == TAKE_HOME_NOTEBOOK, f"{path.name}: only {TAKE_HOME_NOTEBOOK} has take-home cells"
    cells = [c for c in cells if not _take_home(c)]
    found = [f"cell {i}: {d}" for i, c in enumerate(cells) for d in definitions(c.source)]
    assert found == [], (
        f"{path.name} computes in its cells (move it into qae_lab, with tests, and call it): " + "; ".join(found)
    )
