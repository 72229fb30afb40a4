"""Every notebook in a real browser: JupyterLab on 127.0.0.1, headless Chromium driven by Playwright.

For each notebook (a copy, smoke mode): Run All as a person does, in a live session; when it has
ended, no cell (nor any Output widget) shows an error or anything on stderr, and every plotly
figure has a drawn plot area. Then, where it has controls, one control is moved as a person moves it (the
keyboard on a slider, a choice in a dropdown) and the figure under it must change. One screenshot per ``## ``
section goes to ``$QAE_LAB_ARTIFACTS`` (default ``<repo>/.artifacts``), and one on failure.
With plain figures (the default), every figure shown is recorded, the spec's probe runs in the
kernel, and the saved notebook gets tests/notebooks/test_notebook_runs.py's checks (tests/notebook_specs.py),
which then skips its headless run of the notebook.

Notebook 04 (a live training run) also: the K slider is moved while the model trains, then Stop
is pressed; the run's log must record, at every step, the K that the controls say was in force
(a change the kernel received while step ``s`` ran applies from step ``s + 1``:
``Controls.changes``), and the run must end at a step boundary with a checkpoint. Twice: the
dashboard as a plotly FigureWidget, and re-drawn as a plain figure (the default, Colab's path).

Each test process starts one JupyterLab server and one Chromium, and loads the app once (the ``lab``
fixture); each test opens its own copy of its notebook in it, with a kernel that has the test's
environment, and closes it (kernel shut down) when it ends. After a failure the app loads afresh.

No assertion here depends on the machine's speed: every wait is a hang guard (minutes), and what
is compared is what the software records, never wall-clock events.

Needs Debian's chromium (``.ci/run`` installs it) and the ``playwright`` package (dev extra),
which drives the system browser: no browser download. Skips with a message where either is missing.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from browser import (
    CHROMIUM,
    HANG,
    REPO,
    LabApp,
    LabServer,
    Notebook,
    chromium,
    wait_until,
)
from nbexec import DUMP, RECORD, collect
from notebook_specs import NOTEBOOKS, check_run

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (.ci/run installs Debian's "
    "chromium; locally: apt-get install chromium): browser test skipped",
)

NOTEBOOK04 = "04_lora_grpo_qwen25.ipynb"
K_START = 0.4  # notebook 04 starts with QAE, K = 0.4
# notebook 04's max_steps: more than any machine runs before the test presses Stop, so that the run
# cannot end on its own first however slow the browser is next to the trainer
LIVE_STEPS = 5000

# per notebook: the cell (a string of its source), the control's label, and the move: a key pressed
# on a slider's handle, or the index of a dropdown option. Each control's value is in its figure's title.
# None: a notebook without controls (Run All, its figures and its spec's checks only).
MOVES = {
    "00_plain_grpo.ipynb": None,
    "01_two_regime_gating_and_sparsity.ipynb": ("zeros = plots.interactive", "K", "ArrowRight"),
    "02_softmax_entropy_proofs.ipynb": ("mc = plots.interactive", "K", "ArrowRight"),
    "03_token_entropy_horizon_weights.ipynb": ("weights = plots.interactive", "α", "ArrowRight"),
    "05_compare_runs.ipynb": ("curves = plots.interactive", "metric", 1),
    "06_phenomena_in_miniature.ipynb": ("entropy_view = plots.interactive", "smoothing", "ArrowRight"),
    "07_sequence_policy.ipynb": ("regimes_view = plots.interactive", "optimizer", 1),
    "08_write_it_yourself.ipynb": None,  # no control: two training runs and their logs
    "09_appendix_sequence_policy_ledgers.ipynb": ("ledger_view = plots.interactive", "K", "ArrowRight"),
}


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """JupyterLab in a headless Chromium, shared by this test process's browser tests: one server, one
    browser, the app loaded once; each test opens its own copy of its notebook in it (:class:`LabApp`)."""
    pytest.importorskip("jupyterlab", reason="jupyterlab not installed (lab extra)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extra)")
    with chromium() as browser:
        server = LabServer(tmp_path_factory.mktemp("browser"))
        app = LabApp(browser, server)
        try:
            yield app
        finally:
            app.close()
            server.close()


def _assert_clean(nb: Notebook, when: str) -> None:
    errors = nb.errors()
    assert not errors, f"{nb.name}, {when}: error or stderr output\n\n" + "\n\n".join(errors)


def _assert_figures_drawn(nb: Notebook) -> list[dict]:
    figures = nb.figures()
    assert figures, f"{nb.name}: no plotly figure on the page"
    empty = [f for f in figures if not (f["width"] > 0 and f["height"] > 0 and f["drawn"] > 0)]
    assert not empty, f"{nb.name}: figures with an empty plot area: {empty}"
    return figures


def _prefix(notebook: str) -> str:
    return f"nb{notebook[:2]}"


def _move_redraws(nb: Notebook, notebook: str, marker: str, label: str, move) -> None:
    """Move the control ``label`` of the cell holding ``marker`` as a person does; the figure under it re-draws."""
    control = nb.control(marker, label)
    before = control.fingerprint()
    assert before, f"{notebook}: no figure under the control {label!r}"
    if isinstance(move, str):
        control.press(move)
    else:
        control.select(move)
    # the figure changes, its title (which shows the control's value) with it; a FigureWidget
    # takes its new data and its new layout in two messages: wait for both
    title = lambda fingerprint: fingerprint.split(":", 2)[2]
    wait_until(
        lambda: (f := control.fingerprint()) and f != before and title(f) != title(before),
        HANG,
        f"new title of the figure under {label!r} after the move",
    )
    figure = control.figure()
    assert figure["drawn"] > 0 and figure["width"] > 0, f"{notebook}: the redrawn figure is empty: {figure}"
    _assert_clean(nb, f"after moving {label!r}")


@pytest.mark.slow(seconds=35)
@pytest.mark.parametrize(
    "notebook,plots",
    [*((name, "static") for name in MOVES), ("01_two_regime_gating_and_sparsity.ipynb", "widget")],
    ids=lambda v: v[:2] if v.endswith(".ipynb") else v,
)
def test_notebook_runs_clean_and_its_controls_redraw(lab, notebook, plots):
    suffix = "" if plots == "static" else f"_{plots}"
    with lab.open(notebook, {"QAE_LAB_SMOKE": "1", "QAE_LAB_PLOTS": plots}, _prefix(notebook) + suffix) as (nb, opened):
        checked = plots == "static"  # tests/notebooks/test_notebook_runs.py's checks, made here on this run
        if checked:
            nb.execute(RECORD)  # every figure shown from now on is recorded (as tests/nbexec.py does)
        nb.run_all()
        _assert_clean(nb, "after Run All")
        _assert_figures_drawn(nb)
        assert nb.page.evaluate(  # every code cell ran (Run All stops at a failing cell)
            "() => window.__nb.content.widgets.every(c => c.model.type !== 'code' || c.model.executionCount)"
        )

        if MOVES[notebook] is not None:
            _move_redraws(nb, notebook, *MOVES[notebook])
        nb.screenshot_sections(_prefix(notebook), suffix)
        if checked:  # the spec's probe in the kernel, then the figures and outputs of the saved notebook
            spec, record = NOTEBOOKS[notebook], opened["root"] / "figures.json"
            if spec.probe:
                nb.execute(spec.probe)
            nb.execute(DUMP.format(path=str(record)))
            nb.save()
            saved = nbformat.read(opened["root"] / notebook, as_version=4)
            check_run(notebook, collect(saved, opened["root"], range(len(saved.cells)), record, in_cells=False))


def _log_rows(root) -> list[dict]:
    """The training-step rows logged so far by the notebook's run (a line being written is dropped)."""
    from qae_lab.storage.folder import read_log, step_rows

    logs = sorted(root.glob("runs/*/log.jsonl"))
    return step_rows(read_log(logs[-1])) if logs else []


@pytest.mark.slow(seconds=45)
@pytest.mark.parametrize("plots", ["widget", "static"])
def test_notebook04_k_slider_reaches_the_run_log(lab, plots):
    env = {"QAE_LAB_PLOTS": plots, "QAE_LAB_SMOKE": "1", "QAE_LAB_LIVE_STEPS": str(LIVE_STEPS)}
    suffix = "" if plots == "static" else f"_{plots}"
    with lab.open(NOTEBOOK04, env, "nb04" + suffix) as (nb, opened):
        page = nb.page
        nb.run_all()  # the run goes on in its thread; the cells below it have run
        _assert_clean(nb, "after Run All")
        assert "steps logged so far" in nb.cell_text("rows = lab.logged_steps()")  # "What the log recorded"
        assert nb.kernel_json("lab.running"), "the live run is not running after Run All"

        nb.scroll_to("lab = LiveRun(trainer)")  # up to the controls and the dashboard
        slider = page.locator(".widget-slider", has_text="K (QAE)")
        slider.wait_for(timeout=HANG * 1000)
        wait_until(lambda: _log_rows(opened["root"]), HANG, "first logged step")
        # a person's move: focus the slider's handle and press the right arrow 4 times (step 0.05)
        slider.locator(".noUi-handle").focus()
        for _ in range(4):
            page.keyboard.press("ArrowRight")
        wait_until(lambda: "0.60" in slider.locator(".widget-readout").inner_text(), HANG, "readout 0.60")
        wait_until(
            lambda: any(r["qae/k"] == pytest.approx(0.6) for r in _log_rows(opened["root"])),
            HANG,
            "logged step with K = 0.6",
        )
        # the dashboard (a FigureWidget, or a plain figure re-drawn from the training thread) shows it
        page.get_by_text(re.compile(r"step \d+ / \d+: K = 0\.60")).first.wait_for(timeout=HANG * 1000)
        _assert_figures_drawn(nb)

        # the button's name begins with its icon (a font glyph): match the word
        page.get_by_role("button", name=re.compile(r"\bStop$")).click()
        page.get_by_text("stopped after step").wait_for(timeout=HANG * 1000)
        page.get_by_role("button", name=re.compile(r"\bStopped$")).wait_for(timeout=HANG * 1000)
        wait_until(lambda: not nb.kernel_json("lab.running"), HANG, "end of the run's follow-ups (evaluation)", poll=2)

        # what the controls received, and when (the step whose knobs were fixed), against the log
        changes = nb.kernel_json("lab.controls.changes")
        rows = nb.kernel_json("lab.logged_steps()")
        ks = [(stamp, value) for stamp, knob, value in changes if knob == "quantile_k"]
        assert ks and ks[-1][1] == pytest.approx(0.6), changes
        assert [s for s, _ in ks] == sorted(s for s, _ in ks), changes  # stamped in the order received
        assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)), rows  # every step up to the stop
        for row in rows:  # K at step n: the last change stamped before n (received before step n began)
            in_force = [v for s, v in ks if s < row["step"]]
            expected = in_force[-1] if in_force else K_START
            assert row["qae/k"] == pytest.approx(expected), (row["step"], row["qae/k"], ks)
        assert rows[-1]["step"] > ks[-1][0], (rows[-1], ks)  # the last move reached the log
        assert len(rows) < LIVE_STEPS  # Stop ended the run, not max_steps
        ckpt = next(opened["root"].glob("runs/*")) / f"checkpoint-{rows[-1]['step']}"
        assert (ckpt / "trainer_state.json").is_file()

        # "What the log recorded", run again by hand after the run: every step, no error
        nb.run_cell("rows = lab.logged_steps()")
        assert f"{len(rows)} steps logged so far" in nb.cell_text("rows = lab.logged_steps()")
        # "Save and export": during the run it only said so; run again after Stop, it exports the stopped run
        export_cell = 'EXPORT = OUT / "export"'
        assert "training goes on" in nb.cell_text(export_cell)
        nb.run_cell(export_cell)
        assert "exported to" in nb.cell_text(export_cell), nb.cell_text(export_cell)
        assert (next(opened["root"].glob("runs/*")) / "export" / "model.safetensors").is_file()
        # "Before and after, side by side": during the run it only said so; run again, the table of completions
        table_cell = "display(completions_table("
        assert "training goes on" in nb.cell_text(table_cell)
        nb.run_cell(table_cell)
        tables = [f for f in nb.figures() if "held-out problems" in f["title"]]
        assert len(tables) == 1 and tables[0]["drawn"] > 0 and "correct" in tables[0]["title"], nb.figures()
        _assert_clean(nb, "after Stop")  # the training thread's warnings included, wherever they went
        _assert_figures_drawn(nb)
        nb.screenshot_sections("nb04", suffix)


def test_the_moves_cover_every_notebook_but_04():
    names = sorted(p.name for p in (REPO / "notebooks").glob("0*.ipynb"))
    assert sorted([*MOVES, NOTEBOOK04]) == names
