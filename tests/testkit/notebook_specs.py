"""Each notebook's spec (tests/testkit/figures_theory.py, tests/testkit/figures_runs.py) and the check of one execution
against it: used by tests/notebooks/test_notebook_runs.py (headless) and tests/notebooks/test_browser.py (Run All in a
browser), whichever runs the notebook in a session; :func:`browser_runs` says which.
"""

from __future__ import annotations

import importlib.util
import re

from testkit.figures_runs import NB00, NB03, NB04, NB05, NB06, NB08
from testkit.figures_theory import NB01, NB02, NB07, NB09
from testkit.nbexec import Executed

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


# Run in a notebook's kernel after its probe: every view of qae_lab.lab.widgets.interactive in the notebook, each of its
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
_qae_made = sum(cell.count("widgets.interactive(") for cell in In[:-1])  # the views the notebook's cells made
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
    from testkit.browser import CHROMIUM

    return CHROMIUM is not None and all(importlib.util.find_spec(m) for m in ("jupyterlab", "playwright"))


def browser_runs(session, test: str) -> bool:
    """Whether tests/notebooks/test_browser.py's ``test`` (a test's name with its parameters) runs in this session:
    collected here, where a browser can run."""
    return browser_here() and any(item.name == test for item in session.items)
