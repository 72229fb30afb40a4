"""The workshop notebooks: committed clean, badged, installable, and live.

Every notebook runs once headless, its figures and controls checked (tests/notebooks/test_notebook_runs.py).
Here: outputs are stripped, each opens with a Colab badge and an install cell, smoke mode is
honoured, and notebook 04's "Run all" works with somebody at it (training goes on in the background
past the last cell) where tests/notebooks/test_browser.py cannot show that in a real browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tools.install_cell import MARKER
from qae_lab.lab.notebook import colab_url

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
MAX_CODE_LINE = 100  # characters: what a notebook column shows without scrolling (JupyterLab, Colab)


def test_notebooks_exist_and_are_numbered():
    names = [p.name for p in NOTEBOOKS]
    assert "01_two_regime_gating_and_sparsity.ipynb" in names and "02_softmax_entropy_proofs.ipynb" in names
    assert all(re.match(r"0\d_[a-z0-9_]+\.ipynb$", n) for n in names)


def test_the_readme_lists_every_notebook_with_what_it_shows():
    text = (NB_DIR / "README.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        line = re.search(rf"^{int(path.name[:2])}\. `{re.escape(path.name)}` — (.+)$", text, re.M)
        assert line and len(line.group(1).split()) >= 5, f"notebooks/README.md does not say what {path.name} shows"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name}: strip outputs"
    assert "widgets" not in nb["metadata"], f"{path.name}: widget state stored in metadata"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_column(path):
    # JupyterLab and Colab do not wrap code: a longer line runs off the cell's right edge
    nb = nbformat.read(path, as_version=4)
    long = [
        line
        for cell in nb.cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > MAX_CODE_LINE
    ]
    assert long == [], f"{path.name}: {len(long)} code lines over {MAX_CODE_LINE} characters: {long[:3]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_badge_install_cell_and_smoke_mode(path):
    nb = nbformat.read(path, as_version=4)
    first, install = nb.cells[0], nb.cells[1]
    assert first.cell_type == "markdown" and colab_url(path.name) in first.source
    assert "colab-badge.svg" in first.source
    # its text is tools.install_cell's (tests/tools/test_install_cell.py checks it word for word)
    assert install.cell_type == "code" and install.source.startswith(MARKER) and "find_spec" in install.source
    assert "pip" in install.source
    assert any("pick(" in c.source for c in nb.cells if c.cell_type == "code"), "no smoke-mode setting"
    assert nb.cells[-1].cell_type == "code" and "check_" in nb.cells[-1].source  # ends with a checked exercise


@pytest.fixture
def no_browser_runs_notebook04(request):
    """Skips where this session runs tests/notebooks/test_browser.py's live notebook 04 (Run All in a real browser, K moved
    while it trains, Stop, the log checked): JupyterLab, Chromium and Playwright here, and that test collected."""
    from testkit.notebook_specs import browser_runs

    if any(
        browser_runs(request.session, f"test_notebook04_k_slider_reaches_the_run_log[{plots}]")
        for plots in ("widget", "static")
    ):
        pytest.skip("tests/notebooks/test_browser.py runs notebook 04 live in this session, in a real browser")


@pytest.mark.usefixtures("no_browser_runs_notebook04")
def test_notebook04_run_all_in_a_live_session(tmp_path, monkeypatch):
    # tests/notebooks/test_notebook_runs.py runs it headless (QAE_LAB_HEADLESS=1: the cell after lab.start() waits for the
    # run); here the cells after lab.start() run while training goes on, as after "Run all" in a workshop
    monkeypatch.delenv("QAE_LAB_HEADLESS", raising=False)
    monkeypatch.setenv("QAE_LAB_SMOKE", "1")
    nb = nbformat.read(NB_DIR / "04_lora_grpo_qwen25.ipynb", as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if "lab.start()" in c.source)
    nb.cells.append(
        nbformat.v4.new_code_cell("""
from pathlib import Path
assert not headless()
lab.stop()                                # what the Stop button does; the kernel then shuts down cleanly
outcome = lab.wait(timeout=900)           # a safety net, not a bound
assert outcome.interrupted or outcome.global_step == STEPS, outcome
assert not outcome.interrupted or Path(outcome.checkpoint).is_dir()
assert [r["step"] for r in lab.logged_steps()] == list(range(1, outcome.global_step + 1))
assert any(o.get("text", "").startswith("after") for o in lab.messages.outputs)   # the evaluation after training
""")
    )
    # the kernel works in tmp_path (the run folder is relative); allow_errors: every failing cell is reported below
    NotebookClient(
        nb, timeout=1200, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs]
    errors = [(i, o.ename, o.evalue) for i, o in outputs if o.output_type == "error"]
    assert errors == [], errors
    stderr = [(i, o.text) for i, o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not [t for _, t in stderr if "Traceback" in t], stderr
    # the training thread's warnings go under the dashboard (lab.messages), not into the cells after the start
    assert [t for i, t in stderr if i > start and "Warning" in t] == []
    text = {i: "".join(o.get("text", "") for o in c.outputs) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    log_cell = next(i for i, c in enumerate(nb.cells) if "lab.logged_steps()" in c.source)
    assert re.match(r"\d+ steps logged so far", text[log_cell]), text[log_cell]
    assert "Not attempted yet" in text[len(nb.cells) - 2]  # the exercise, checked against the library
