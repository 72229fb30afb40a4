"""Every notebook in a real browser: JupyterLab on 127.0.0.1, headless Chromium driven by Playwright.

For each notebook (a copy, smoke mode): Run All as a person does, in a live session; when it has
ended, no cell (nor any Output widget) shows an error or anything on stderr, and every plotly
figure has a drawn plot area. Then, where it has controls, one control is moved as a person moves it (the
keyboard on a slider, a choice in a dropdown) and the figure under it must change. One screenshot per ``## ``
section goes to ``$QAE_LAB_ARTIFACTS`` (default ``<repo>/.artifacts``), and one on failure.
With plain figures (the default), every figure shown is recorded, the spec's probe runs in the
kernel, and the saved notebook gets tests/notebooks/test_notebook_runs.py's checks (tests/testkit/notebook_specs.py),
which then skips its headless run of the notebook.

Notebook 04 (a live training run) also: the K slider is moved while the model trains, token weighting switched
to SA-AH and the alpha slider (greyed out until then) moved, then Stop is pressed; the run's log must record, at
every step, the knobs that the controls say were in force (a change the kernel received while step ``s`` ran applies
from step ``s + 1``: ``Controls.changes``), and the run must end at a step boundary with a checkpoint. Its dashboard
is read as a person reads it, before the first step (the training thread held at it), after the moves and after the
run: every panel names its lines in plain words in a legend of its own, each metric keeps one colour in every panel
and at every redraw, and the summary's table of knobs by step range matches the log; a screenshot of each of the
three (``<artifacts>/nb04_dashboard_<1-before|2-during|3-after><suffix>.png``). Twice: the dashboard as a plotly
FigureWidget, and re-drawn as a plain figure (the default, Colab's path).

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
import time

import nbformat
import pytest
from testkit.browser import (
    CHROMIUM,
    HANG,
    REPO,
    LabApp,
    LabServer,
    Notebook,
    artifacts_dir,
    chromium,
    slide_to,
    wait_until,
)
from testkit.nbexec import DUMP, RECORD, collect
from testkit.notebook_specs import MAX_PRINTED, NOTEBOOKS, VIEWS_AGREE, check_run, long_printed_lines

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (.ci/run installs Debian's "
    "chromium; locally: apt-get install chromium): browser test skipped",
)

NOTEBOOK04 = "04_lora_grpo_qwen25.ipynb"
K_START, ALPHA_START = 0.4, 0.5  # notebook 04 starts with QAE, K = 0.4, no token weighting (alpha 0.5 when on)
# notebook 04's max_steps: more than any machine runs before the test presses Stop, so that the run
# cannot end on its own first however slow the browser is next to the trainer
LIVE_STEPS = 5000

# per notebook: the cell (a string of its source), the control's label, and the move: a key pressed
# on a slider's handle, or the index of a dropdown option. Each control's value is in its figure's title.
# None: a notebook without controls (Run All, its figures and its spec's checks only).
MOVES = {
    "00_plain_grpo.ipynb": None,
    "01_two_regime_gating_and_sparsity.ipynb": ("zeros = widgets.interactive", "K", "ArrowRight"),
    "02_softmax_entropy_proofs.ipynb": ("mc = widgets.interactive", "K", "ArrowRight"),
    "03_token_entropy_horizon_weights.ipynb": ("weights = widgets.interactive", "α", "ArrowRight"),
    "05_compare_runs.ipynb": ("curves = widgets.interactive", "metric", 1),
    "06_phenomena_in_miniature.ipynb": ("entropy_view = widgets.interactive", "smoothing", "ArrowRight"),
    "07_sequence_policy.ipynb": ("regimes_view = widgets.interactive", "optimizer", 1),
    "08_write_it_yourself.ipynb": None,  # no control: two training runs and their logs
    "09_appendix_sequence_policy_ledgers.ipynb": ("ledger_view = widgets.interactive", "K", "ArrowRight"),
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
            nb.execute(RECORD)  # every figure shown from now on is recorded (as tests/testkit/nbexec.py does)
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
            nb.execute(spec.probe + VIEWS_AGREE)  # the spec's probe, then every control of every view moved
            nb.execute(DUMP.format(path=str(record)))
            nb.save()
            saved = nbformat.read(opened["root"] / notebook, as_version=4)
            run = collect(saved, opened["root"], range(len(saved.cells)), record, in_cells=False)
            check_run(notebook, run)
            assert long_printed_lines(run) == [], f"{notebook}: printed lines over {MAX_PRINTED} columns (wrap them)"


def _log_rows(root) -> list[dict]:
    """The training-step rows logged so far by the notebook's run (a line being written is dropped)."""
    from qae_lab.storage.folder import read_log, step_rows

    logs = sorted(root.glob("runs/*/log.jsonl"))
    return step_rows(read_log(logs[-1])) if logs else []


# run in the kernel before Run All: the training thread waits at the start of step 1 until the test has read the
# dashboard before the first step (so that it is read then however fast the machine trains), then never again
HOLD_FIRST_STEP = """
import threading
from qae_lab.lab import live as _live
_first_step = threading.Event()
_on_step_begin = _live.LiveKnobs.on_step_begin
_live.LiveKnobs.on_step_begin = lambda self, *a, **k: (_first_step.wait(900), _on_step_begin(self, *a, **k))[1]
"""

# the live dashboard (the figure in the cell that displays the LiveRun) as drawn: its title, each trace's metric,
# name, legend and colour, the names each legend shows, the panels' notes, and where the knobs' table sits
_JS_DASHBOARD = """(m) => {
    const cell = window.__qaeCell(m), el = cell.node.querySelector('.js-plotly-plot');
    if (!el || !el._fullLayout) return null;
    const legends = {};
    el._fullData.forEach(t => { (legends[t.legend] = legends[t.legend] || []).push(t.name); });
    const drawn = [...el.querySelectorAll('g')].filter(g => /^legend\\d*$/.test(g.getAttribute('class') || ''));
    // (each legend's entries: text.legendtext, text.legend2text, ...)
    const out = cell.node.querySelector('.jp-Cell-outputArea').getBoundingClientRect();
    const table = [...cell.node.querySelectorAll('table')].find(t => t.textContent.includes('Knobs in force'));
    return {title: el.layout.title.text, traces: el._fullData.map(t => ({metric: t.meta, name: t.name,
                legend: t.legend, color: t.line.color, points: (t.x || []).filter(x => x !== null).length})),
            legends, shown: drawn.map(g => [...g.querySelectorAll('.traces > text')].map(e => e.textContent)),
            notes: [...el.querySelectorAll('.annotation-text')].map(e => e.textContent),
            knobs: table ? [...table.rows].map(r => [...r.cells].map(c => c.textContent)) : null,
            knobsBottom: table ? table.getBoundingClientRect().bottom - out.top : null};
}"""

# the rows of the tables a cell's outputs show, as their cells' texts
_JS_TABLES = """(m) => [...window.__qaeCell(m).node.querySelectorAll('.jp-OutputArea-output table')].map(
    t => [...t.rows].map(r => [...r.cells].map(c => c.textContent.trim())))"""

LIVE_CELL = "lab = LiveRun(trainer)"
SUMMARY_CELL = "nb04_live_run.knob_ranges("


def _read_dashboard(nb: Notebook, colours: dict, when: str) -> dict:
    """The dashboard as drawn, checked as a person reads it: every panel has a legend naming its lines in plain
    words (not metric keys), each metric has one colour, kept from every earlier reading (``colours``)."""
    board = nb.page.evaluate(_JS_DASHBOARD, LIVE_CELL)
    assert board, f"{when}: no dashboard drawn"
    assert len(board["legends"]) == 8 and len(board["shown"]) == 8, (when, board["legends"], board["shown"])
    for names in board["shown"]:  # what each legend shows
        assert names and all(n and "/" not in n and "_" not in n for n in names), (when, board["shown"])
    assert sorted(n for names in board["shown"] for n in names) == sorted(t["name"] for t in board["traces"])
    for t in board["traces"]:
        assert colours.setdefault(t["metric"], t["color"]) == t["color"], (when, t, colours)
    panel = {t["metric"]: t["legend"] for t in board["traces"]}
    for legend in board["legends"]:  # different metrics in one panel: different colours
        mine = [colours[m] for m, lg in panel.items() if lg == legend]
        assert len(set(mine)) == len(mine), (when, legend, mine)
    assert board["knobs"] and board["knobsBottom"] < 600, (when, board["knobsBottom"])  # on the first screen
    return board


def _screenshot(nb: Notebook, name: str) -> None:
    """The live cell's outputs at the top of the window, as a person sees them, to ``<artifacts>/<name>.png``."""
    nb.scroll_to(LIVE_CELL)
    time.sleep(0.25)  # plotly re-lays out a figure scrolled into view (not a wait for the run)
    nb.page.screenshot(path=str(artifacts_dir() / f"{name}.png"))


def _knobs_by_hand(rows: list[dict], changes: list) -> list[list[str]]:
    """The table of knobs by step range, written here from the log: K, the baseline, the token weighting and alpha as
    the log records them; the weighting checked against the controls' changes (in force from the step after the
    change was received)."""
    table = []
    for row in rows:
        named = [v for s, knob, v in changes if knob == "token_weighting" and s < row["step"]]
        alpha, weighting = row.get("saah/alpha"), row["knobs/token_weighting"]
        assert not named or weighting == named[-1], (row, changes)  # the log names what the controls set
        knobs = [
            f"{row['qae/k']:.2f}",
            "K-quantile (QAE)" if row["qae/quantile_baseline"] == 1.0 else "mean (GRPO)",
            {"none": "none", "ah": "AH", "sa_ah": "SA-AH"}[weighting],
            "—" if alpha is None else f"{alpha:.2f}",
        ]
        if table and table[-1][1:] == knobs:
            table[-1][0] = f"{table[-1][0].split('-')[0]}-{row['step']}"
        else:
            table.append([str(row["step"]), *knobs])
    return table


@pytest.mark.slow(seconds=50)
@pytest.mark.parametrize("plots", ["widget", "static"])
def test_notebook04_k_slider_reaches_the_run_log(lab, plots):
    env = {"QAE_LAB_PLOTS": plots, "QAE_LAB_SMOKE": "1", "QAE_LAB_LIVE_STEPS": str(LIVE_STEPS)}
    suffix = "" if plots == "static" else f"_{plots}"
    with lab.open(NOTEBOOK04, env, "nb04" + suffix) as (nb, opened):
        page, colours = nb.page, {}
        nb.execute(HOLD_FIRST_STEP)
        nb.run_all()  # the run waits at step 1; the cells below it have run
        _assert_clean(nb, "after Run All")
        assert "0 steps logged so far" in nb.cell_text("rows = lab.logged_steps()")  # "What the log recorded"
        assert nb.kernel_json("lab.running"), "the live run is not running after Run All"

        # before the first step: every panel waits (not "not logged"), the knobs that step 1 will use on top
        nb.scroll_to(LIVE_CELL)  # up to the controls and the dashboard
        wait_until(lambda: nb.page.evaluate(_JS_DASHBOARD, LIVE_CELL), HANG, "the dashboard drawn")
        board = _read_dashboard(nb, colours, "before the first step")
        assert board["title"].startswith("waiting for the first step...")
        assert not any(t["points"] for t in board["traces"]) and "not logged in this run" not in board["notes"]
        assert board["notes"].count("waiting for the first step...") == 8
        assert board["knobs"][1] == ["from step 1 (set; not in the log yet)", "0.40", "K-quantile (QAE)", "none", "—"]
        alpha = page.locator(".widget-slider", has_text="alpha (SA-AH)")
        assert alpha.locator("[disabled]").count() == 1  # alpha does nothing while token weighting is none
        assert page.get_by_text("alpha does nothing while token weighting is none").first.is_visible()  # and why
        _screenshot(nb, f"nb04_dashboard_1-before{suffix}")
        nb.execute("_first_step.set()")

        slider = page.locator(".widget-slider", has_text="K (QAE)")
        slider.wait_for(timeout=HANG * 1000)
        wait_until(lambda: _log_rows(opened["root"]), HANG, "first logged step")
        # a person's moves: the K slider's handle up with the arrow key to 0.60 (4 steps of 0.05); token weighting
        # switched to SA-AH, which makes the alpha slider live; then alpha up to 0.75 (5 steps)
        slide_to(page, slider, "0.60", HANG)
        page.locator(".widget-toggle-button", has_text=re.compile(r"^\s*SA-AH\s*$")).click()
        wait_until(lambda: alpha.locator("[disabled]").count() == 0, HANG, "the alpha slider enabled")
        slide_to(page, alpha, "0.75", HANG)
        moved = [("qae/k", 0.6), ("saah/alpha", 0.75)]
        wait_until(
            lambda: any(all(r.get(m) == pytest.approx(v) for m, v in moved) for r in _log_rows(opened["root"])),
            HANG,
            "logged step with K 0.6, alpha 0.75",
        )
        # the dashboard (a FigureWidget, or a plain figure re-drawn from the training thread) shows it
        in_force = re.compile(r"K 0\.60 · K-quantile \(QAE\) baseline · SA-AH, α 0\.75$")
        wait_until(
            lambda: in_force.search((nb.page.evaluate(_JS_DASHBOARD, LIVE_CELL) or {}).get("title", "")),
            HANG,
            "dashboard title with K 0.60 and SA-AH, alpha 0.75",
        )
        board = _read_dashboard(nb, colours, "after the moves")
        weights = [t for t in board["traces"] if t["metric"] == "saah/w_mean_neg"]
        assert weights and weights[0]["points"] > 0  # the weights' panel fills once SA-AH is on
        _assert_figures_drawn(nb)
        _screenshot(nb, f"nb04_dashboard_2-during{suffix}")

        # the button's name begins with its icon (a font glyph): match the word
        page.get_by_role("button", name=re.compile(r"\bStop$")).click()
        page.get_by_text("stopped after step").wait_for(timeout=HANG * 1000)
        page.get_by_role("button", name=re.compile(r"\bStopped$")).wait_for(timeout=HANG * 1000)
        wait_until(lambda: not nb.kernel_json("lab.running"), HANG, "end of the run's follow-ups (evaluation)", poll=2)

        # what the controls received, and when (the step whose knobs were fixed), against the log
        changes = nb.kernel_json("lab.controls.changes")
        rows = nb.kernel_json("lab.logged_steps()")
        for knob, start, metric in (("quantile_k", K_START, "qae/k"), ("alpha", ALPHA_START, "saah/alpha")):
            moves = [(stamp, value) for stamp, name, value in changes if name == knob]
            assert moves and [s for s, _ in moves] == sorted(s for s, _ in moves), changes  # in the order received
            weighted = [s for s, name, v in changes if name == "token_weighting"]
            for row in rows:  # the knob at step n: the last change stamped before n (received before step n began)
                in_force = [v for s, v in moves if s < row["step"]]
                on = knob != "alpha" or any(s < row["step"] for s in weighted)
                expected = (in_force[-1] if in_force else start) if on else None
                assert row.get(metric) == pytest.approx(expected), (row["step"], knob, row.get(metric), moves)
            assert rows[-1]["step"] > moves[-1][0], (rows[-1], moves)  # the last move reached the log
        assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)), rows  # every step up to the stop
        assert len(rows) < LIVE_STEPS  # Stop ended the run, not max_steps
        ckpt = next(opened["root"].glob("runs/*")) / f"checkpoint-{rows[-1]['step']}"
        assert (ckpt / "trainer_state.json").is_file()

        # "What the log recorded" and the closing summary, run again by hand after the run: the knobs by step range
        # as the log has them, every step, no error
        nb.run_cell("rows = lab.logged_steps()")
        assert f"{len(rows)} steps logged so far" in nb.cell_text("rows = lab.logged_steps()")
        nb.run_cell(SUMMARY_CELL)
        knobs, numbers = page.evaluate(_JS_TABLES, SUMMARY_CELL)
        assert knobs[0] == ["steps", "K", "baseline", "token weighting", "α"]
        assert knobs[1:] == _knobs_by_hand(rows, changes), (knobs, rows)
        assert numbers[1] == ["steps trained", f"{len(rows)} of {LIVE_STEPS}"], numbers
        # "Save and export": during the run it only said so; run again after Stop, it exports the stopped run
        export_cell = 'EXPORT = OUT / "export"'
        assert "training goes on" in nb.cell_text(export_cell)
        nb.run_cell(export_cell)
        assert "exported to" in nb.cell_text(export_cell), nb.cell_text(export_cell)
        assert (next(opened["root"].glob("runs/*")) / "export" / "model.safetensors").is_file()
        # the completions before and after: during the run it only said so; run again, a table whose text wraps
        table_cell = "completions_html("
        assert "training goes on" in nb.cell_text(table_cell)
        nb.run_cell(table_cell)
        shown = page.evaluate(_JS_COMPLETIONS, table_cell)
        assert shown["caption"].startswith("Greedy completions before and after training") and shown["rows"] == 5
        assert shown["cut"] == 0 and shown["blank"] < 40, shown  # nothing cut at a cell's edge, no blank under it
        _assert_clean(nb, "after Stop")  # the training thread's warnings included, wherever they went
        _assert_figures_drawn(nb)
        _read_dashboard(nb, colours, "after the run")
        _screenshot(nb, f"nb04_dashboard_3-after{suffix}")
        nb.screenshot_sections("nb04", suffix)


# the completions table as drawn: its caption, rows, how far any cell's text runs past its edge, and the blank
# between the table's bottom and its output area's
_JS_COMPLETIONS = """(m) => {
    const cell = window.__qaeCell(m), t = cell.node.querySelector('table.qae-completions');
    const out = t.closest('.jp-OutputArea-output').getBoundingClientRect();
    return {caption: t.caption.textContent, rows: t.rows.length,
            cut: Math.max(...[...t.querySelectorAll('td, th')].map(c => c.scrollWidth - c.clientWidth)),
            blank: out.bottom - t.getBoundingClientRect().bottom};
}"""


def test_the_moves_cover_every_notebook_but_04():
    names = sorted(p.name for p in (REPO / "notebooks").glob("0*.ipynb"))
    assert sorted([*MOVES, NOTEBOOK04]) == names
