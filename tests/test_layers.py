"""The layers, checked on the source: each folder of qae_lab imports only the layers below it.

The maths sits at the top level of the package; ``storage/`` (run folders on disk) sits just above it, since the
evaluation, the trainer and its callbacks all write into a run folder; ``task/``, ``toys/`` and ``integrations/``
import the maths (the task also storage); ``train/`` imports the task; ``runs/`` imports training; ``analysis/``
imports runs and toys; ``lab/`` (the shared floor of plotting, widgets and the live run) imports any of them;
``lab/notebooks/`` (one module per notebook) stands above the lab, and each of its modules is imported by its own
notebook and its own tests alone (docs/architecture.md). A layer may import every layer below its own, and its own
folder; the three layers of one floor do not import one another. Every layer below the lab
loads no plotting or widget module. Only imports at a module's top level count for the floors;
an import inside a function crosses upwards only where :data:`LAZY_CROSSINGS` names it. The command line loads no
plotting or widget module. ``python tests/test_layers.py`` prints each module's layer and floor.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qae_lab"
# each layer, the floor it stands on; the maths is every module at the package's top level
FLOOR = {
    "maths": 0,
    "storage": 1,
    "task": 2,
    "toys": 2,
    "integrations": 2,
    "train": 3,
    "runs": 4,
    "analysis": 5,
    "lab": 6,
    "notebooks": 7,  # qae_lab.lab.notebooks: one module per notebook
    "program": 8,  # qae_lab.__main__: the command line with the lab's report page
}
# (importer, imported) that cross upwards on purpose, inside a function: none (a run's report page is drawn by the
# function the program, qae_lab.__main__, hands the run)
LAZY_CROSSINGS: set[tuple[str, str]] = set()
# the import graph's longest chain of module-level imports, in modules (a module importing no qae_lab module: 1)
MAX_CHAIN = 9


def module_names() -> list[str]:
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.with_suffix("").relative_to(PACKAGE).parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:
            names.append(name)
    return sorted(names)


def layer(name: str) -> str:
    """The layer of a module: its folder, or "maths" for the package's top level (``__main__``: the program)."""
    if name == "__main__":
        return "program"
    if name.startswith("lab.notebooks"):
        return "notebooks"
    return name.split(".")[0] if "." in name or name in FLOOR else "maths"


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
                dep = node.module[len("qae_lab.") :]
                found |= {dep} | {f"{dep}.{a.name}" for a in node.names if f"{dep}.{a.name}" in known}
            elif isinstance(node, ast.ImportFrom) and node.module == "qae_lab":
                found |= {a.name for a in node.names if a.name in known}
            elif isinstance(node, ast.Import):
                found |= {a.name[len("qae_lab.") :] for a in node.names if a.name.startswith("qae_lab.")}
    return (found & known) - {name}


def allowed(importer: str, dep: str) -> bool:
    a, b = layer(importer), layer(dep)
    if b in (a, "maths"):
        return True
    if FLOOR[a] == FLOOR[b]:
        return False  # task, toys and integrations stand side by side
    return FLOOR[b] < FLOOR[a]


def test_every_module_has_a_layer():
    unknown = [m for m in module_names() if layer(m) not in FLOOR]
    assert unknown == [], f"modules outside the layers' folders: {unknown}"
    assert {layer(m) for m in module_names()} == set(FLOOR)  # every layer holds modules


def test_no_module_imports_a_higher_layer():
    wrong = [
        (name, dep)
        for name in module_names()
        if name != "__init__"
        for dep in sorted(imports(name, module_level=False))
        if dep != "__init__" and not allowed(name, dep) and (name, dep) not in LAZY_CROSSINGS
    ]
    assert wrong == [], "imports that go upwards or sideways:\n" + "\n".join(f"  {a} -> {b}" for a, b in wrong)
    for name, dep in LAZY_CROSSINGS:  # the allowed crossings stay inside functions
        assert dep not in imports(name, module_level=True), (name, dep)


def test_the_package_imports_only_the_maths_eagerly():
    assert {layer(d) for d in imports("__init__", module_level=True)} <= {"maths"}


def test_the_rule_itself():
    assert allowed("train.trainer", "task.rewards") and allowed("runs.cli", "train.config")
    assert allowed("task.evaluate", "storage.folder") and not allowed("storage.folder", "task.data")
    assert allowed("analysis.claims", "toys.bandit") and allowed("lab.live", "runs.pipeline")
    assert not allowed("task.rewards", "train.trainer") and not allowed("toys.bandit", "task.data")
    assert not allowed("advantages", "task.answers") and not allowed("runs.folder", "analysis.compare")
    assert allowed("lab.notebooks.nb04_live_run", "lab.live") and not allowed("lab.live", "lab.notebooks.nb04_live_run")


def _imported_notebook_modules(text: str) -> set[str]:
    """The qae_lab.lab.notebooks modules a text's import lines name (a module's source, a notebook's cells)."""
    found = set()
    for m in re.finditer(
        r"^\s*(?:from|import)\s+qae_lab\.lab\.notebooks\b(\.\w+)?(?:\s+import\s+\(?([\w\s,]+))?", text, re.M
    ):
        found |= {m.group(1)[1:]} if m.group(1) else {n.split()[0] for n in (m.group(2) or "").split(",") if n.strip()}
    return found


def test_each_notebook_module_is_imported_by_its_notebook_and_its_tests_alone():
    own = {m.removeprefix("lab.notebooks.") for m in module_names() if m.startswith("lab.notebooks.")}
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):  # no qae_lab module, nor one notebook module another
        wrong += [(path.name, m) for m in _imported_notebook_modules(path.read_text()) if m != path.stem]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        wrong += [(path.name, m) for m in _imported_notebook_modules(code) if m[2:4] != path.name[:2]]
    for path in sorted([*(ROOT / "tools").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):  # nor a script
        wrong += [(str(path.relative_to(ROOT)), m) for m in _imported_notebook_modules(path.read_text())]
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if ROOT / "tests" / "lab" / "notebooks" not in path.parents:
            wrong += [(str(path.relative_to(ROOT)), m) for m in _imported_notebook_modules(path.read_text())]
    assert wrong == [], f"notebook modules imported outside their notebook and tests/lab/notebooks/: {wrong}"
    assert {"nb00_plain_grpo", "nb04_live_run"} <= own
    assert _imported_notebook_modules("from qae_lab.lab.notebooks import nb04_live_run as nb\n") == {"nb04_live_run"}


def _loaded_drawing(modules: list[str]) -> str:
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'plotly', 'ipywidgets', 'IPython'}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()


def test_no_layer_below_the_lab_nor_the_command_line_loads_plotting_or_widgets():
    # one fresh interpreter for all of them (the command line, the run, the trainer, the run folder, the evaluation):
    # the lab's report page is drawn only when a run ends (qae_lab.__main__.draw_report imports it then)
    below = ["qae_lab." + m for m in module_names() if layer(m) not in ("lab", "notebooks") and m != "__init__"]
    assert "qae_lab.__main__" in below and "qae_lab.runs.cli" in below and "qae_lab.train.trainer" in below
    assert _loaded_drawing(below) == "[]"
    assert _loaded_drawing(["qae_lab.lab.figures"]) != "[]"  # the check sees a module that draws


def chains() -> dict[str, int]:
    @functools.cache
    def chain(name: str) -> int:
        return 1 + max((chain(d) for d in imports(name, module_level=True)), default=0)

    return {name: chain(name) for name in module_names()}


def test_the_import_graph_stays_shallow():
    got = chains()
    deepest = max(got, key=got.get)
    assert got[deepest] <= MAX_CHAIN, f"{deepest}: a chain of {got[deepest]} module-level imports"
    assert got["methods"] <= 2  # the vocabulary imports only the argument checks


def test_the_architecture_page_lists_every_module_once():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## The modules") :]
    listed = re.findall(r"^\| `(qae_lab/[\w/]+\.py)` \|", table, re.M)
    files = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py"))
    assert sorted(listed) == files, (sorted(set(files) - set(listed)), sorted(set(listed) - set(files)))


if __name__ == "__main__":  # each floor, lowest first, with its modules
    by_floor: dict[int, list[str]] = {}
    for name in module_names():
        by_floor.setdefault(FLOOR[layer(name)], []).append(name)
    for floor, names in sorted(by_floor.items()):
        layers = sorted({layer(n) for n in names}, key=list(FLOOR).index)
        print(f"{floor} {' + '.join(layers)}: {', '.join(n.split('.')[-1] for n in names)}")
