"""Each notebook's spec (tests/figures_theory.py, tests/figures_runs.py) and the check of one execution
against it: used by tests/notebooks/test_notebook_runs.py (headless) and tests/notebooks/test_browser.py (Run All in a
browser), whichever runs the notebook in a session; :func:`browser_runs` says which.
"""

from __future__ import annotations

import importlib.util
import re

from figures_runs import NB00, NB03, NB04, NB05, NB06, NB08
from figures_theory import NB01, NB02, NB07, NB09
from nbexec import Executed

from qae_lab.lab.exercises import NOT_ATTEMPTED

NOTEBOOKS = {
    "00_plain_grpo.ipynb": NB00,
    "01_two_regime_gating_and_sparsity.ipynb": NB01,
    "02_softmax_entropy_proofs.ipynb": NB02,
    "03_token_entropy_horizon_weights.ipynb": NB03,
    "04_lora_grpo_qwen25.ipynb": NB04,
    "05_compare_runs.ipynb": NB05,
    "06_phenomena_in_miniature.ipynb": NB06,
    "07_sequence_policy.ipynb": NB07,
    "08_write_it_yourself.ipynb": NB08,
    "09_appendix_sequence_policy_ledgers.ipynb": NB09,
}


def check_run(name: str, run: Executed) -> None:
    """Every figure the notebook's own cells showed matches exactly one entry of its spec and passes its
    check, every entry was shown (as often as it says), no cell wrote a traceback, and the closing
    exercise's checker ran and answered the stub (the probe, if any, has run: it asserts in the kernel)."""
    spec = NOTEBOOKS[name]
    unmatched = [f for f in run.figures if not any(re.fullmatch(s.title, f.title) for s in spec.figures)]
    assert not unmatched, f"{name}: figures without an entry in its spec (add one): {unmatched}"
    for shown in spec.figures:
        figures = [f for f in run.figures if re.fullmatch(shown.title, f.title)]
        if shown.count is None:
            assert figures, f"{name}: no figure titled like {shown.title!r}; shown: {run.figures}"
        else:
            assert len(figures) == shown.count, (
                f"{name}: {len(figures)} figures titled like {shown.title!r}, expected {shown.count}"
            )
        for fig in figures:
            shown.check(fig)

    assert not [text for _, text in run.stderr() if "Traceback" in text], run.stderr()
    last = next(c for c in reversed(run.own_cells()) if c.cell_type == "code")
    assert "check_" in last.source and NOT_ATTEMPTED in run.outputs(last.source), "the exercise's checker did not run"


def browser_here() -> bool:
    """Whether tests/notebooks/test_browser.py can run here: Chromium, JupyterLab and Playwright installed."""
    from browser import CHROMIUM

    return CHROMIUM is not None and all(importlib.util.find_spec(m) for m in ("jupyterlab", "playwright"))


def browser_runs(session, test: str) -> bool:
    """Whether tests/notebooks/test_browser.py's ``test`` (a test's name with its parameters) runs in this session:
    collected here, where a browser can run."""
    return browser_here() and any(item.name == test for item in session.items)
