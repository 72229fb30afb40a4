"""Every name a document gives resolves: the README, docs/*.md and the notebooks cite only what exists.

What is checked, in README.md, docs/*.md and the markdown and code cells of notebooks/*.ipynb:

* ``qae_lab.X``, ``qae_lab.X.Y``, ...: the longest prefix that is a module is imported and the rest is looked
  up as attributes (a dataclass field without a class default counts), so a module, a submodule, a function,
  a class or a class's method all resolve;
* ``python -m qae_lab.X``: X is a module (a function of that name is not enough);
* ``from qae_lab.X import a, b``: each of a and b;
* a cited test, ``tests/test_x.py`` or ``tests/test_x.py::test_y``: the file exists and defines that test;
* a local link, ``[text](path)`` or ``[text](path#heading)``: the file exists, and the heading too.

The glossary's "former names" column lists names that are gone on purpose; it is not checked.
A failure lists every unresolved name with the file that gives it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]

# qae_lab.X[.Y...], not inside a path or a longer name; group 1: "python -m " when it is run as a module
_NAME = re.compile(r"(?<![\w/.-])(python3? -m )?(qae_lab(?:\.\w+)+)")
_FROM = re.compile(r"from\s+(qae_lab(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#;]+)")
_TEST = re.compile(r"(?<![\w/.-])tests/(\w+\.py)(?:::(\w+))?")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents(root: Path = ROOT) -> dict[str, str]:
    """``{path relative to root: its text}``: README.md, docs/*.md, and each notebook's markdown and code cells."""
    out = {}
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        out[str(path.relative_to(root))] = path.read_text(encoding="utf-8")
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        out[str(path.relative_to(root))] = "\n\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] in ("markdown", "code")
        )
    return out


def without_former_names(text: str) -> str:
    """``text`` with the cells of any table column headed "former names ..." blanked (names gone on purpose)."""
    out, column = [], None
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|") if line.lstrip().startswith("|") else None
        if cells is None:
            column = None
        elif column is None:
            heads = [c.strip().lower() for c in cells]
            column = next((i for i, h in enumerate(heads) if h.startswith("former names")), None)
        elif column < len(cells):
            cells[column] = " "
            line = "|" + "|".join(cells) + "|"
        out.append(line)
    return "\n".join(out)


def names(text: str) -> set[tuple[str, bool]]:
    """The ``qae_lab`` names ``text`` gives, as ``(dotted name, must be a module)``."""
    found = {(m.group(2), bool(m.group(1))) for m in _NAME.finditer(text)}
    for m in _FROM.finditer(text):
        for part in m.group(2).strip("()").split(","):
            name = part.split(" as ")[0].strip()
            if name and name != "*":
                found.add((f"{m.group(1)}.{name}", False))
    return found


def _module_prefix(parts: list[str]) -> int:
    """How many leading parts of ``parts`` name a module (1: just ``qae_lab``)."""
    cut = 1
    for i in range(2, len(parts) + 1):
        try:
            if importlib.util.find_spec(".".join(parts[:i])) is None:
                break
        except ModuleNotFoundError:  # the parent is a plain module, not a package
            break
        cut = i
    return cut


def resolves(dotted: str, module: bool = False) -> bool:
    """Whether ``dotted`` (``qae_lab.X.Y``) names a module, or (unless ``module``) an attribute of one."""
    parts = dotted.split(".")
    cut = _module_prefix(parts)
    if module or cut == len(parts):
        return cut == len(parts)
    obj = importlib.import_module(".".join(parts[:cut]))
    for attr in parts[cut:]:
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            obj = None  # a field with no class-level default: it exists, with nothing further to look up
        else:
            return False
    return True


def _slug(heading: str) -> str:
    """A markdown heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def missing(docs: dict[str, str], root: Path = ROOT) -> list[str]:
    """``"file: what"`` for each name, test or link in ``docs`` (``{file: text}``, files relative to ``root``)
    that does not resolve."""
    bad = []
    for doc, text in docs.items():
        text = without_former_names(text)
        for dotted, module in sorted(names(text)):
            if not resolves(dotted, module):
                bad.append(f"{doc}: {'python -m ' if module else ''}{dotted}")
        for file, test in sorted(set(_TEST.findall(text))):
            path = root / "tests" / file
            if not path.is_file():
                bad.append(f"{doc}: tests/{file}")
            elif test and not re.search(rf"^def {test}\(", path.read_text(encoding="utf-8"), re.M):
                bad.append(f"{doc}: tests/{file}::{test}")
        for target in sorted(set(_LINK.findall(text))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a local file
                continue
            file, _, anchor = target.partition("#")
            path = (root / doc).parent / file
            if file and not path.exists():
                bad.append(f"{doc}: link {target}")
            elif (
                anchor
                and (not file or path.suffix == ".md")
                and anchor not in _anchors(path.read_text(encoding="utf-8") if file else text)
            ):
                bad.append(f"{doc}: link {target} (no such heading)")
    return bad


@pytest.mark.slow(seconds=15)  # imports every module a document names, the trainer's TRL stack included
def test_every_reference_in_the_docs_and_notebooks_resolves():
    docs = documents()
    assert "README.md" in docs and "docs/architecture.md" in docs and len(docs) >= 20
    assert sum(len(names(without_former_names(t))) for t in docs.values()) >= 100  # the check has work to do
    bad = missing(docs)
    assert not bad, "names, tests or links that do not resolve (file: name):\n" + "\n".join(bad)


def test_the_checker_catches_made_up_names():
    good = """`qae_lab.advantages`, `qae_lab.advantages.group_advantages`, `qae_lab.train.trainer.QAETrainer._score`,
`qae_lab.integrations.verl_saah`, `qae_lab.train.config.QAEConfig.quantile_k`, `python -m tools.readme_results`,
from qae_lab.knobs import Knobs, knob_changes
`tests/test_knobs.py`, [a page](docs/testing.md), [its part](docs/architecture.md#the-layers), [up](#a-doc)
[Colab](https://colab.research.google.com/x.ipynb)
# A doc
| name | means | former names, removed |
| --- | --- | --- |
| knob changes | ... | `qae_lab.knobs.knob_changes` |
"""
    assert missing({"doc.md": good}) == []
    made_up = """`qae_lab.methods.no_such_name` and `qae_lab.no_such_module.f`;
run `python -m qae_lab.advantages.group_advantages`
from qae_lab.methods import knob_changes_of
from qae_lab.knobs import Knobs
`tests/test_knobs.py::test_no_such_test`, `tests/test_no_such_file.py`, [gone](docs/gone.md), [x](docs/architecture.md#nope)
[down](#no-heading-here)
"""
    assert sorted(missing({"doc.md": made_up})) == sorted(
        [
            "doc.md: qae_lab.methods.knob_changes_of",
            "doc.md: qae_lab.methods.no_such_name",
            "doc.md: qae_lab.no_such_module.f",
            "doc.md: python -m qae_lab.advantages.group_advantages",
            "doc.md: tests/test_knobs.py::test_no_such_test",
            "doc.md: tests/test_no_such_file.py",
            "doc.md: link docs/gone.md",
            "doc.md: link docs/architecture.md#nope (no such heading)",
            "doc.md: link #no-heading-here (no such heading)",
        ]
    )


def test_the_readmes_picture_is_the_tools_figure_of_notebook_07():
    # tools/readme_figure.py draws it; the PNG is committed (drawing it needs kaleido or a Chromium)
    tool = load_script("tools/readme_figure.py")
    fig = tool.figure()
    assert len([a for a in fig.layout if a.startswith("xaxis")]) == 3  # hard | easy | mixed
    assert (fig.layout.width, fig.layout.height) == (tool.WIDTH, tool.HEIGHT)
    png = tool.OUT.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # the IHDR chunk
    assert (width, height) == (tool.WIDTH * tool.SCALE, tool.HEIGHT * tool.SCALE)
    assert f"]({tool.OUT.relative_to(ROOT)})" in (ROOT / "README.md").read_text(encoding="utf-8")
