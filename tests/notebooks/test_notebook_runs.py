"""Every notebook, run once headless from top to bottom: no cell fails, every figure it shows holds
what it must (tests/figures_theory.py, tests/figures_runs.py), its controls re-draw their figures
(each notebook's probe, run in its kernel), every control of every view re-draws the figure and the
table under it together (:data:`VIEWS_AGREE`, run after the probe), what it prints fits the column
(:data:`MAX_PRINTED`), and its closing exercise answers a stub.

One execution per notebook serves all these purposes (tests/nbexec.py: a copy in a tmp folder, smoke
mode and headless from conftest.py, every figure shown recorded). Notebook 04 runs unattended here:
the cell after ``lab.start()`` waits for the run and its evaluation; the same notebook with somebody
at it (Run All, controls moved while it trains, Stop) is tests/notebooks/test_browser.py's, or
tests/notebooks/test_notebooks.py's where no browser can run. Where tests/notebooks/test_browser.py runs a notebook
in the same session (Run All in JupyterLab, in Chromium), that test records its figures, runs its
probe and makes the same checks (tests/notebook_specs.py), and the headless run here is skipped:
each notebook runs once per purpose.
"""

from __future__ import annotations

import pytest
from nbexec import NB_DIR, execute
from notebook_specs import NOTEBOOKS, browser_runs, check_run

# Run in a notebook's kernel after its probe: every view of qae_lab.lab.plots.interactive in the notebook, each of its
# controls moved one step as a person moves it (the next option, the box ticked or not, a slider one step on) and
# back. After each move the figure shown and the table under it must both be what the view's functions make from the
# controls' values at that moment (``make``): a figure redrawn while its table kept an older setting fails here.
VIEWS_AGREE = """
import math as _qae_math
import ipywidgets as _qae_W

def _qae_step(c):
    if isinstance(c, _qae_W.Checkbox):
        return not c.value
    if hasattr(c, "options"):
        return None  # a dropdown: moved by index
    if isinstance(c, _qae_W.FloatLogSlider):
        e = _qae_math.log(c.value, c.base)
        return c.base ** (e + c.step if e + c.step <= c.max + 1e-9 else e - c.step)
    v = c.value + c.step if c.value + c.step <= c.max else c.value - c.step
    return v if isinstance(c, _qae_W.IntSlider) else round(v, 10)

def _qae_move(c):
    if hasattr(c, "options") and not isinstance(c, _qae_W.Checkbox):
        c.index = (c.index + 1) % len(c.options)
    else:
        c.value = _qae_step(c)

_qae_views = {n: v for n, v in list(globals().items())
              if isinstance(v, _qae_W.VBox) and hasattr(v, "make") and hasattr(v, "view")}
_qae_made = sum(cell.count("plots.interactive(") for cell in In[:-1])  # the views the notebook's cells made
assert len(_qae_views) >= _qae_made, f"{_qae_made} views made, {sorted(_qae_views)} found"
for _qae_name, _qae_box in _qae_views.items():
    for _qae_control, _qae_c in _qae_box.controls.items():
        _qae_before, _qae_old = _qae_box.view.figure, _qae_c.value
        _qae_move(_qae_c)
        _qae_values = {n: c.value for n, c in _qae_box.controls.items()}
        _qae_fig, _qae_text = _qae_box.make(_qae_values)
        _qae_where = f"{_qae_name}: {_qae_control} moved from {_qae_old!r} to {_qae_c.value!r}"
        assert _qae_box.view.figure is not _qae_before, f"{_qae_where}: the figure was not redrawn"
        assert _qae_box.values == _qae_values, f"{_qae_where}: figure and table made from {_qae_box.values}"
        assert _qae_box.view.figure.to_json() == _qae_fig.to_json(), f"{_qae_where}: the figure is not the controls'"
        assert _qae_box.text == _qae_text, f"{_qae_where}: the table under the figure is not the controls'"
        _qae_c.value = _qae_old
"""


# columns: a printed line longer than a notebook's column is wrapped by the browser anywhere, mid-word ("wher|e")
MAX_PRINTED = 100


def long_printed_lines(run) -> list[str]:
    """The lines the notebook's own cells printed (stdout) that are longer than :data:`MAX_PRINTED`, the folder it ran
    in written "." (the test's temporary folder is longer than a participant's)."""
    return [
        line
        for c in run.own_cells()
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stdout"
        for line in o.text.replace(str(run.folder), ".").splitlines()
        if len(line) > MAX_PRINTED
    ]


def test_every_notebook_has_a_spec():
    assert sorted(NOTEBOOKS) == sorted(p.name for p in NB_DIR.glob("*.ipynb"))


@pytest.mark.slow(seconds=15)
@pytest.mark.parametrize("name", sorted(NOTEBOOKS), ids=lambda n: n[:2])
def test_notebook_runs_and_shows_what_it_says(name, tmp_path, request):
    if browser_runs(request.session, f"test_notebook_runs_clean_and_its_controls_redraw[{name[:2]}-static]"):
        pytest.skip(
            "tests/notebooks/test_browser.py runs this notebook in this session (Run All in a real browser) "
            "and checks the same"
        )
    run = execute(name, tmp_path, probe=NOTEBOOKS[name].probe + VIEWS_AGREE)
    check_run(name, run)
    assert long_printed_lines(run) == [], f"{name}: printed lines over {MAX_PRINTED} columns (wrap them)"
