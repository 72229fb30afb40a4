"""Every notebook exercise has a solution, the solution passes the exercise's own checker, and the stub gives
nothing of it away.

An exercise is the last code cell of a notebook (tests/notebooks/test_notebooks.py): a stub ``def my_...`` and
``print(check_...(my_...))``. Its solution is the ``<details><summary>Solution</summary>`` block of the markdown
cell before it: one ```python block that defines the same ``my_*`` function(s). Here each solution is run, on its
own (with ``torch`` and ``math``, which every notebook imports), and handed to the checker the stub cell names:
it must answer "Correct". The stub must carry no line of the solution's code, not even as a comment.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch


NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
_SOLUTION = re.compile(r"<summary>\s*Solutions?\s*</summary>(.*?)</details>", re.S | re.I)
_PYTHON = re.compile(r"```python\n(.*?)```", re.S)


def exercise(path: Path) -> tuple[str, str]:
    """(solution code, stub cell source) of a notebook's closing exercise."""
    cells = nbformat.read(path, as_version=4).cells
    stub = cells[-1]
    before = [c for c in cells[:-1] if c.cell_type == "markdown" and _SOLUTION.search(c.source)]
    assert before, f"{path.name}: no <details><summary>Solution</summary> block before its exercise"
    blocks = _PYTHON.findall(_SOLUTION.search(before[-1].source).group(1))
    assert len(blocks) == 1, f"{path.name}: the solution should be one ```python block, found {len(blocks)}"
    return blocks[0], stub.source


def calls(stub: str) -> list[tuple[str, str]]:
    """``(checker, function)`` of every ``check_x(my_y)`` or ``module.check_x(my_y)`` the stub cell makes."""
    out = []
    for node in ast.walk(ast.parse(stub)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name.rsplit(".", 1)[-1].startswith("check_"):
            assert len(node.args) == 1 and isinstance(node.args[0], ast.Name), ast.unparse(node)
            out.append((name, node.args[0].id))
    return out


def checker(path: Path, name: str):
    """The object ``name`` (``check_x`` or ``module.check_x``) names in notebook ``path``: its ``qae_lab`` imports
    run in a fresh namespace, then the dotted name looked up attribute by attribute."""
    space: dict = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a cell with IPython magics holds no qae_lab import
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qae_lab"):
                for alias in node.names:
                    module = importlib.import_module(node.module)
                    space[alias.asname or alias.name] = (
                        getattr(module, alias.name)
                        if hasattr(module, alias.name)
                        else importlib.import_module(f"{node.module}.{alias.name}")
                    )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("qae_lab") and alias.asname:
                        space[alias.asname] = importlib.import_module(alias.name)
    head, *rest = name.split(".")
    assert head in space, f"{path.name}: {name} is not imported from qae_lab in the notebook"
    obj = space[head]
    for part in rest:
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_solution_passes_the_exercise_checker(path):
    solution, stub = exercise(path)
    checks = calls(stub)
    assert checks, f"{path.name}: the last cell calls no check_*"
    space: dict = {"torch": torch, "math": math}
    exec(compile(solution, f"{path.name}: solution", "exec"), space)  # the notebook's own text, not model output
    for check, name in checks:
        assert name in space, f"{path.name}: the solution does not define {name}"
        verdict = checker(path, check)(space[name])
        assert verdict.startswith("Correct"), f"{path.name}: {check}({name}) -> {verdict}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_stub_gives_nothing_away(path):
    solution, stub = exercise(path)
    # each line of the solution's code (a returned expression without its "return"), found anywhere in the stub
    code = [re.sub(r"^return\s+", "", line.strip()) for line in solution.splitlines()]
    code = [c for c in code if len(c) >= 12 and not c.startswith(("def ", "import ", "from ", "#"))]
    carried = [c for c in code if c in stub]
    assert not carried, f"{path.name}: the stub carries the solution's {carried}"
    # the methods and functions the solution calls (".std(", "torch.exp("), named in the stub's comments
    names = {m for line in code for m in re.findall(r"\.(\w{3,})\(", line)}
    comments = "\n".join(line for line in stub.splitlines() if line.strip().startswith("#"))
    named = sorted(n for n in names if re.search(rf"\.{n}\b|\b{n}\(", comments))
    assert not named, f"{path.name}: the stub's comment names the solution's calls {named}"


def test_the_checks_catch_a_stub_that_gives_the_answer_away(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from qae_lab.lab.exercises import check_mean_advantages"),
        nbformat.v4.new_markdown_cell(
            "<details><summary>Solution</summary>\n\n```python\ndef my_f(r):\n"
            "    return (r - r.mean()) / (r.std() + 1e-6)\n```\n</details>"
        ),
        nbformat.v4.new_code_cell(
            "def my_f(r):\n    # YOUR CODE HERE: (r - r.mean()) / (r.std() + 1e-6)\n"
            "    return None\n\n\nprint(check_mean_advantages(my_f))"
        ),
    ]
    path = tmp_path / "99_x.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(AssertionError, match="carries the solution"):
        test_the_stub_gives_nothing_away(path)
    nb.cells[2].source = (
        "def my_f(r):\n    # YOUR CODE HERE: use torch.std\n    return None\n\nprint(check_mean_advantages(my_f))"
    )
    nbformat.write(nb, path)
    with pytest.raises(AssertionError, match="names the solution's calls"):
        test_the_stub_gives_nothing_away(path)
    test_the_solution_passes_the_exercise_checker(path)  # the solution itself is right
    nb.cells[1].source = nb.cells[1].source.replace("r.std()", "r.std(unbiased=False)")
    nbformat.write(nb, path)
    with pytest.raises(AssertionError):
        test_the_solution_passes_the_exercise_checker(path)  # a wrong solution fails its checker
