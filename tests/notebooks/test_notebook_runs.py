"""Every notebook, run once headless from top to bottom: no cell fails, every figure it shows holds
what it must (tests/testkit/figures_theory.py, tests/testkit/figures_runs.py), its controls re-draw their figures
(each notebook's probe, run in its kernel), every control of every view re-draws the figure and the
table under it together (:data:`VIEWS_AGREE`, run after the probe), what it prints fits the column
(:data:`MAX_PRINTED`), and its closing exercise answers a stub.

One execution per notebook serves all these purposes (tests/testkit/nbexec.py: a copy in a tmp folder, smoke
mode and headless from conftest.py, every figure shown recorded). Notebook 04 runs unattended here:
the cell after ``lab.start()`` waits for the run and its evaluation; the same notebook with somebody
at it (Run All, controls moved while it trains, Stop) is tests/notebooks/test_browser.py's, or
tests/notebooks/test_notebooks.py's where no browser can run. Where tests/notebooks/test_browser.py runs a notebook
in the same session (Run All in JupyterLab, in Chromium), that test records its figures, runs its
probe and makes the same checks (tests/testkit/notebook_specs.py), and the headless run here is skipped:
each notebook runs once per purpose.
"""

from __future__ import annotations

import pytest
from testkit.nbexec import NB_DIR, execute
from testkit.notebook_specs import MAX_PRINTED, NOTEBOOKS, VIEWS_AGREE, browser_runs, check_run, long_printed_lines

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
