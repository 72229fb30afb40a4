"""Tests for benchmarks/bench_notebooks.py: what it counts of an executed notebook, and that it refuses to record
times on a busy machine."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_notebooks.py")


def test_it_counts_prose_code_printed_text_figures_and_controls(bench):
    v4 = nbformat.v4
    code = v4.new_code_cell(
        "view = plots.interactive(f, {})\nlab.start()",
        outputs=[
            v4.new_output("stream", text="one two\nthree"),
            v4.new_output("display_data", data={"text/markdown": "| a | b |\n| --- | --- |", "text/plain": "x"}),
            v4.new_output("execute_result", data={"text/plain": "four five"}),
            v4.new_output("display_data", data={"application/vnd.plotly.v1+json": {}, "text/plain": "Figure"}),
            v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {}, "text/plain": "W"}),
        ],
    )
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("# Title\n\nSix words of prose here."), code])
    # words are tokens with a letter or digit: markdown "Title", "Six", "words", "of", "prose", "here." = 6; code
    # "view", "plots.interactive(f,", "lab.start()" = 3; printed: 3 (stream) + 2 (the table's "a", "b") + 2 (a
    # result) = 7; a plotly figure; a widget is no text
    assert bench.read_counts(nb) == {
        "markdown_words": 6,
        "code_words": 3,
        "output_words": 7,
        "figures": 1,
        "controls": 2,
    }


def test_no_time_is_recorded_on_a_busy_machine(bench, monkeypatch, tmp_path, capsys):
    times = tmp_path / "notebook_times.json"
    monkeypatch.setattr(bench, "TIMES", times)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (2 * (bench.MAX_LOAD_PER_CORE + 0.1), 0.0, 0.0))
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench, "run", lambda path, smoke: pytest.fail("a notebook ran on a busy machine"))
    monkeypatch.setattr("sys.argv", ["bench_notebooks.py", "--write"])
    with pytest.raises(SystemExit, match=r"load average is 1\.60 per core, above 1\.5"):
        bench.main()
    assert not times.exists()


def test_the_committed_times_were_measured_on_an_idle_machine_and_count_what_is_read():
    record = json.loads((ROOT / "data" / "notebook_times.json").read_text())
    assert record["max_load_per_core"] <= 1.5
    names = {p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert set(record["notebooks"]) == names
    for entry in record["notebooks"].values():
        assert entry["full_s"] > 0 and entry["output_words"] >= 0 and entry["markdown_words"] > 0
