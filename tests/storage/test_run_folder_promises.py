"""docs/run-folders.md cites a test for each promise it makes about a run folder: each cited test reaches the code
the promise names, and each promise cites at least one test that calls that code itself.

A promise is a section of the document ("What the trackers write, and where", and each bold paragraph of "The
guarantees"); its mechanisms are the ``qae_lab.storage.*`` names it gives (and ``_open_regular``). A test reaches a
mechanism when a name the test uses (its body, the helpers and fixtures of its module and of tests/conftest.py it
uses, the code it hands a subprocess as text) is the mechanism, or is a function of qae_lab whose body, followed
through qae_lab's own functions by name, uses it. The second rule keeps a promise from resting on end-to-end runs
alone: one of its tests calls the mechanism by name.

Read by name, not by running the tests: an over-approximation (two functions of the same name are one node), so it
catches a test cited for the wrong promise or one that never reaches the code, not every weak test.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "run-folders.md"
_TEST = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")
_MECHANISM = re.compile(r"`qae_lab\.storage\.\w+\.(\w+)`|`(_open_regular)`")
_WORD = re.compile(r"[A-Za-z_]\w*")


def promises(text: str) -> dict[str, str]:
    """``{title: its text}``: the trackers' section and each bold paragraph under "## The guarantees"."""
    out, title, lines = {}, None, []
    for line in text.splitlines():
        heading = line.startswith("#")
        bold = re.match(r"\*\*(.+?)\*\*", line)
        if heading or bold:
            if title:
                out[title] = "\n".join(lines)
            title, lines = None, []
            if bold:
                title = bold.group(1)
            elif line.startswith("### What the trackers write"):
                title = line.lstrip("# ")
        if title:
            lines.append(line)
    if title:
        out[title] = "\n".join(lines)
    return out


def _uses(node: ast.AST, text: bool = True) -> set[str]:
    """Every name ``node`` uses: variables, attributes, and with ``text`` the words of its string constants (a test's
    code run as text in a subprocess; not the package's docstrings and messages)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
        elif isinstance(n, ast.arg):
            found.add(n.arg)  # a fixture, by its parameter's name
        elif text and isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.update(_WORD.findall(n.value))
    return found


@cache
def _parsed(path: Path) -> list[ast.stmt]:
    return ast.parse(path.read_text(encoding="utf-8")).body  # each file once, whatever cites it


def _definitions(paths) -> dict[str, list[ast.AST]]:
    """``{name: its module-level function and class definitions}`` in ``paths`` (a class with its methods)."""
    out: dict[str, list[ast.AST]] = {}
    for path in paths:
        for n in _parsed(path):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.setdefault(n.name, []).append(n)
    return out


@cache
def _package_graph() -> dict[str, set[str]]:
    """qae_lab's functions and classes by name, each with the names its body uses."""
    defs = _definitions(sorted((ROOT / "qae_lab").rglob("*.py")))
    return {name: set().union(*(_uses(d, text=False) for d in nodes)) for name, nodes in defs.items()}


def reaches(start: set[str], targets: set[str]) -> bool:
    """Whether a name in ``start``, followed through qae_lab's functions by name, uses one of ``targets``."""
    graph, seen, todo = _package_graph(), set(), list(start)
    while todo:
        name = todo.pop()
        if name in targets:
            return True
        if name in seen:
            continue
        seen.add(name)
        todo.extend(graph.get(name, ()))
    return False


def uses_of(path: Path, test: str | None) -> set[str]:
    """The names ``test`` (every test of ``path`` when None) uses, with its module's and tests/conftest.py's helpers
    and fixtures it uses, followed by name."""
    local = _definitions([path, ROOT / "tests" / "conftest.py"])
    heads = [test] if test else [n for n in local if n.startswith("test_")]
    assert all(h in local for h in heads), f"{path.name} defines no {test}"
    found, todo, seen = set(), list(heads), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in local:
            continue
        seen.add(name)
        for d in local[name]:
            names = _uses(d)
            found |= names
            todo.extend(names)
    return found


def cited() -> list[tuple[str, str, str | None, set[str]]]:
    """``(promise, test file, test or None, the promise's mechanisms)`` for every test the document cites."""
    out = []
    for title, text in promises(DOC.read_text(encoding="utf-8")).items():
        mechanisms = {a or b for a, b in _MECHANISM.findall(text)}
        for path, test in _TEST.findall(text):
            out.append((title, path, test or None, mechanisms))
    return out


def test_the_document_has_its_promises_each_with_a_mechanism_and_a_test():
    found = promises(DOC.read_text(encoding="utf-8"))
    assert len(found) == 8, list(found)  # the trackers, and the seven guarantees
    for title, text in found.items():
        assert _MECHANISM.search(text) and _TEST.search(text), title


@pytest.mark.parametrize("promise, path, test, mechanisms", cited(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_cited_test_reaches_the_code_its_promise_names(promise, path, test, mechanisms):
    # Planted: the lock's paragraph citing tests/runs/test_export.py::test_a_model_folder_with_links_is_named (an
    # export test that never takes a lock) -> fails naming it
    uses = uses_of(ROOT / path, test)
    assert uses & mechanisms or reaches(uses, mechanisms), (
        f"{path}::{test or '*'} is cited for '{promise}' but reaches none of {sorted(mechanisms)}"
    )


@pytest.mark.parametrize("promise", sorted(promises(DOC.read_text(encoding="utf-8"))))
def test_each_promise_cites_a_test_that_calls_its_code_by_name(promise):
    # Planted: "A new run never writes over another" left with its command-line and resume-plan tests only (its two
    # tests of tests/storage/test_folder.py removed) -> fails
    rows = [(p, t, m) for title, p, t, m in cited() if title == promise]
    assert any(uses_of(ROOT / p, t) & m for p, t, m in rows), f"'{promise}': no cited test uses {rows[0][2]}"


def test_the_check_refuses_a_test_that_does_not_reach_the_mechanism():
    # the reader itself: an export test reaches no lock; the command line's main reaches the resume plan
    export = uses_of(ROOT / "tests/runs/test_export.py", "test_a_model_folder_with_links_is_named")
    assert not reaches(export, {"RunLock"}) and not export & {"RunLock"}
    assert reaches({"main"}, {"plan_run"}) and not reaches({"atomic_write_text"}, {"plan_run"})
