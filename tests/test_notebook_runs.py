"""Every notebook, run once headless from top to bottom: no cell fails, every figure it shows holds
what it must (tests/figures_theory.py, tests/figures_runs.py), its controls re-draw their figures
(each notebook's probe, run in its kernel), and its closing exercise answers a stub.

One execution per notebook serves all three purposes (tests/nbexec.py: a copy in a tmp folder, smoke
mode and headless from conftest.py, every figure shown recorded). Notebook 04 runs unattended here:
the cell after ``lab.start()`` waits for the run and its evaluation; the same notebook with somebody
at it (Run All, controls moved while it trains, Stop) is tests/test_browser.py's, or
tests/test_notebooks.py's where no browser can run.
"""

from __future__ import annotations

import re

import pytest
from figures_runs import NB03, NB04, NB05, NB06
from figures_theory import NB01, NB02, NB07
from nbexec import NB_DIR, execute

from qae_lab.exercises import NOT_ATTEMPTED

NOTEBOOKS = {
    "01_softmax_entropy_proofs.ipynb": NB01,
    "02_two_regime_gating_and_sparsity.ipynb": NB02,
    "03_token_entropy_horizon_weights.ipynb": NB03,
    "04_lora_grpo_qwen25.ipynb": NB04,
    "05_compare_runs.ipynb": NB05,
    "06_phenomena_in_miniature.ipynb": NB06,
    "07_sequence_policy.ipynb": NB07,
}


def test_every_notebook_has_a_spec():
    assert sorted(NOTEBOOKS) == sorted(p.name for p in NB_DIR.glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NOTEBOOKS), ids=lambda n: n[:2])
def test_notebook_runs_and_shows_what_it_says(name, tmp_path):
    spec = NOTEBOOKS[name]
    run = execute(name, tmp_path, probe=spec.probe)

    # every figure shown by the notebook's own cells matches exactly one entry of its spec, and passes its check
    unmatched = [f for f in run.figures if not any(re.fullmatch(s.title, f.title) for s in spec.figures)]
    assert not unmatched, f"{name}: figures without an entry in its spec (add one): {unmatched}"
    for shown in spec.figures:
        figures = [f for f in run.figures if re.fullmatch(shown.title, f.title)]
        if shown.count is None:
            assert figures, f"{name}: no figure titled like {shown.title!r}; shown: {run.figures}"
        else:
            assert len(figures) == shown.count, \
                f"{name}: {len(figures)} figures titled like {shown.title!r}, expected {shown.count}"
        for fig in figures:
            shown.check(fig)

    assert not [text for _, text in run.stderr() if "Traceback" in text], run.stderr()
    last = next(c for c in reversed(run.nb.cells[:-1 - bool(spec.probe)]) if c.cell_type == "code")
    assert "check_" in last.source and NOT_ATTEMPTED in run.outputs(last.source), "the exercise's checker did not run"
