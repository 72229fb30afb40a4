"""One headless execution of a notebook, recording every plotly figure it shows.

:func:`execute` runs a copy of ``notebooks/<name>`` in a fresh kernel, in its own folder beside a
link ``data -> <repo>/data`` (as tests/testkit/browser.py does), so that what a notebook writes (notebook
04's ``runs/``) stays out of the repository and two notebooks run at once never share a file. A
first, added cell wraps plotly's two display hooks so that each figure shown (a cell's plain figure,
or one drawn into a view's ``Output``: :class:`qae_lab.lab.widgets.FigureView`) is recorded with the
cell that showed it; a last, added cell writes the records to a JSON file. An optional ``probe``
cell runs before that one, in the notebook's kernel (a slider moved, its figure asserted).
tests/notebooks/test_browser.py records a notebook run in a real browser the same way (:func:`collect`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tools.install_cell import EXTRA_MODULES, notebook_extras

REPO = Path(__file__).resolve().parents[2]
NB_DIR = REPO / "notebooks"
TIMEOUT = 900  # s per cell: a hang guard, never a statement about speed

# the kernel's first cell: every figure shown is recorded (cell = IPython's count of the cell running)
RECORD = """\
import plotly.basedatatypes as _qae_bdt
_qae_shown = []
def _qae_recording(method):
    def show(self, *args, **kwargs):
        _qae_shown.append((get_ipython().execution_count, self.to_dict()))
        return method(self, *args, **kwargs)
    return show
for _qae_name in ("_repr_mimebundle_", "_ipython_display_"):
    setattr(_qae_bdt.BaseFigure, _qae_name, _qae_recording(getattr(_qae_bdt.BaseFigure, _qae_name)))
"""

# a notebook whose install cell installs no [train] extra (tools.install_cell.EXTRAS) runs without it: the first
# cell also makes its modules unimportable, so that a lazy import (a tokenizer loaded) shows here
BLOCK_TRAIN = f"""\
import sys as _qae_sys
_qae_sys.modules.update({{_qae_m: None for _qae_m in {EXTRA_MODULES["train"]!r}}})
"""

# the kernel's last cell: the records, as JSON (numpy arrays and tuples as lists)
DUMP = """\
import json as _qae_json
with open({path!r}, "w") as _qae_file:
    _qae_json.dump(_qae_shown, _qae_file, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
"""


@dataclass
class Figure:
    """One figure as shown: its plotly dict (``data``, ``layout``) and the source of the cell that showed it."""

    raw: dict
    cell: str

    @property
    def layout(self) -> dict:
        return self.raw.get("layout", {})

    @property
    def title(self) -> str:
        """The title's text, a wrapped line break read as a space."""
        return (self.layout.get("title") or {}).get("text", "").replace("<br>", " ")

    def axis_title(self, axis: str) -> str:
        return ((self.layout.get(axis) or {}).get("title") or {}).get("text", "")

    @property
    def traces(self) -> list[dict]:
        return self.raw.get("data", [])

    @property
    def lines(self) -> list[dict]:
        """The traces with a legend entry (bands, drawn as filled shapes without one, left out)."""
        return [t for t in self.traces if t.get("name") is not None and t.get("fill") != "toself"]

    @property
    def bands(self) -> list[dict]:
        return [t for t in self.traces if t.get("fill") == "toself"]

    @property
    def names(self) -> list[str]:
        return [t["name"] for t in self.lines]

    def trace(self, name: str) -> dict:
        found = [t for t in self.lines if t["name"] == name]
        assert len(found) == 1, f"{self.title!r}: {len(found)} traces named {name!r}; names: {self.names}"
        return found[0]

    @property
    def heatmap(self) -> dict:
        found = [t for t in self.traces if t.get("type") == "heatmap"]
        assert len(found) == 1, f"{self.title!r}: {len(found)} heatmaps"
        return found[0]

    def __repr__(self) -> str:
        return f"<figure {self.title!r}: {self.names or [t.get('type') for t in self.traces]}>"


@dataclass
class Executed:
    """An executed notebook: the notebook with its outputs, its folder, the range of its own cells
    (cells added to run it are outside), and the figures shown: by its own cells, and by anything
    else (the probe, a control moved in a browser)."""

    nb: nbformat.NotebookNode
    folder: Path
    own: range
    figures: list[Figure] = field(default_factory=list)
    probe_figures: list[Figure] = field(default_factory=list)

    def own_cells(self) -> list:
        return [self.nb.cells[i] for i in self.own]

    def outputs(self, marker: str) -> str:
        """The text (streams and plain-text results) of the one code cell whose source holds ``marker``."""
        cells = [c for c in self.own_cells() if c.cell_type == "code" and marker in c.source]
        assert len(cells) == 1, f"{len(cells)} code cells hold {marker!r}"
        return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cells[0].outputs)

    def stderr(self) -> list[tuple[str, str]]:
        """(cell source, text) of every stderr stream the notebook's own cells wrote."""
        return [
            (c.source, o.text)
            for c in self.own_cells()
            if c.cell_type == "code"
            for o in c.outputs
            if o.output_type == "stream" and o.name == "stderr"
        ]


def collect(nb: nbformat.NotebookNode, folder: Path, own: range, record: Path, in_cells: bool = True) -> Executed:
    """The figures recorded by :data:`RECORD` (dumped by :data:`DUMP` to ``record``), each given the cell that
    showed it: the cell with its execution count when that is one of the notebook's own, else a probe's.
    ``in_cells``: every figure must come from a cell (in a browser, a control moved by hand re-draws
    figures outside any cell: they count as the probe's)."""
    by_count = {c.execution_count: i for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    run = Executed(nb, folder, own)
    for count, raw in json.loads(record.read_text()):
        i = by_count.get(count)
        assert i is not None or not in_cells, f"{folder}: a figure shown outside any cell (execution count {count})"
        fig = Figure(raw, nb.cells[i].source if i is not None else "")
        (run.figures if i in own else run.probe_figures).append(fig)
    return run


def execute(name: str, tmp_path: Path, probe: str = "") -> Executed:
    """Run a copy of ``notebooks/<name>`` top to bottom in ``<tmp_path>/lab`` (then ``probe``, if given).

    A failing cell raises nbclient's ``CellExecutionError`` (its source and traceback in the message).
    The kernel inherits this process's environment: smoke mode and headless (conftest.py).
    """
    folder = tmp_path / "lab"
    folder.mkdir()
    shutil.copy(NB_DIR / name, folder / name)
    (folder / "data").symlink_to(REPO / "data", target_is_directory=True)
    return execute_at(
        folder / name, tmp_path / "figures.json", probe, prelude="" if "train" in notebook_extras(name) else BLOCK_TRAIN
    )


def execute_at(path: Path, record: Path, probe: str = "", prelude: str = "") -> Executed:
    """Run the notebook at ``path`` top to bottom in its own folder, figures recorded to ``record`` (``prelude``
    and :data:`RECORD` first, then ``probe``, if given); the notebook file itself is not changed."""
    nb = nbformat.read(path, as_version=4)
    own = range(1, len(nb.cells) + 1)
    nb.cells.insert(0, nbformat.v4.new_code_cell(RECORD + prelude))
    extra = [probe] if probe else []
    nb.cells += [nbformat.v4.new_code_cell(code) for code in [*extra, DUMP.format(path=str(record))]]
    # one OpenMP thread in the kernel, as the browser test's JupyterLab has: beside the other test worker a tiny
    # model's two threads wait on each other (a notebook's run several times slower on 2 busy cores)
    threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the kernel takes this process's environment when it starts
    try:
        NotebookClient(
            nb, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
    finally:
        if threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = threads
    return collect(nb, path.parent, own, record)
