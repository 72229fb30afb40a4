"""The layers of docs/layers.md, checked on the source: every module placed, no import upwards, at most 8 floors.

A floor is a module's depth in the import graph (1: imports no qae_lab module); only module-level
imports count, not those under ``if TYPE_CHECKING:``. ``python tests/test_layers.py`` prints the floors.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qae_lab"
MAX_FLOORS = 8
# (importer, imported) pairs that cross upwards on purpose, inside a function (docs/layers.md says why)
LAZY_CROSSINGS = {("run", "report")}


def layer_table() -> dict[str, list[str]]:
    """docs/layers.md's table: layer -> modules, lowest layer first."""
    table = {}
    for line in (ROOT / "docs" / "layers.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[1].startswith("`"):
            table[cells[0]] = re.findall(r"`([\w.]+)`", cells[1])
    return table


def module_names() -> list[str]:
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.with_suffix("").relative_to(PACKAGE).parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:
            names.append(name)
    return sorted(names)


def imports(name: str, *, module_level: bool) -> set[str]:
    """The qae_lab modules ``name`` imports (module level only, or anywhere)."""
    path = PACKAGE / (name.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE / name.replace(".", "/") / "__init__.py"
    known, found = set(module_names()), set()
    for top in ast.parse(path.read_text()).body:
        if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test):
            continue
        nodes = [top] if module_level and isinstance(top, (ast.FunctionDef, ast.ClassDef)) else ast.walk(top)
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qae_lab."):
                dep = node.module[len("qae_lab."):]
                found |= {dep} | {f"{dep}.{a.name}" for a in node.names if f"{dep}.{a.name}" in known}
            elif isinstance(node, ast.Import):
                found |= {a.name[len("qae_lab."):] for a in node.names if a.name.startswith("qae_lab.")}
    return (found & known) - {name}


def floors() -> dict[str, int]:
    @functools.cache
    def floor(name: str) -> int:
        return 1 + max((floor(d) for d in imports(name, module_level=True)), default=0)
    return {name: floor(name) for name in module_names()}


def test_every_module_is_placed_once():
    placed = [m for modules in layer_table().values() for m in modules]
    assert len(placed) == len(set(placed)), "a module is listed in two layers of docs/layers.md"
    assert sorted(placed) == module_names(), "docs/layers.md must place every module of qae_lab, and only those"


def test_no_module_imports_a_higher_layer():
    rank = {m: i for i, modules in enumerate(layer_table().values()) for m in modules}
    upwards = [(name, dep) for name in module_names() for dep in imports(name, module_level=False)
               if rank[dep] > rank[name] and (name, dep) not in LAZY_CROSSINGS]
    assert upwards == []
    for name, dep in LAZY_CROSSINGS:  # the allowed crossings stay inside functions
        assert dep not in imports(name, module_level=True)


def test_the_import_graph_has_at_most_8_floors():
    got = floors()
    deepest = max(got, key=got.get)
    assert got[deepest] <= MAX_FLOORS, f"{deepest} sits on floor {got[deepest]}"
    assert got["methods"] == 1  # the vocabulary imports nothing of qae_lab


def test_floor_count_sees_a_deeper_chain():
    # the count is not vacuous: a module importing the command line sits one floor above it
    got = floors()
    fake = {**{n: imports(n, module_level=True) for n in module_names()}, "extra": {"__main__"}}

    @functools.cache
    def floor(name):
        return 1 + max((floor(d) for d in fake.get(name, ())), default=0)
    assert floor("extra") == got["__main__"] + 1


if __name__ == "__main__":
    for name, n in sorted(floors().items(), key=lambda kv: (kv[1], kv[0])):
        print(n, name)
