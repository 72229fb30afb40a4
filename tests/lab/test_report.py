"""Tests for qae_lab.lab.report: the run's report page, one self-contained file; drawing it is the only
plotting of a command-line run (that the training and run-folder path imports none: tests/test_layers.py)."""

from __future__ import annotations

from qae_lab.lab.report import write_report


def test_report_is_one_self_contained_file(tmp_path):
    rows = [
        {
            "step": s,
            "reward": 0.1 * s,
            "qae/k": 0.4,
            "qae/zero_adv_frac": 0.8,
            "qae/hard_frac": 0.7,
            "qae/easy_frac": 0.3,
            "completions/mean_length": 30.0,
        }
        for s in (1, 2, 3)
    ]
    evals = {
        "before": {"overall": {"greedy_pass@1": 0.7, "pass@1": 0.3}, "levels": {2: {"pass@1": 0.4}}},
        "after": {"overall": {"greedy_pass@1": 0.72, "pass@1": 0.55}, "levels": {2: {"pass@1": 0.7}}},
    }
    path = write_report(tmp_path, title="t <run>", rows=rows, summary={"preset": "cpu-demo"}, evals=evals)
    html = path.read_text()
    assert "t &lt;run&gt;" in html and "0.550" in html and "level 2" in html
    assert "zero-advantage fraction" in html and "qae\\u002fzero_adv_frac" in html  # plotly escapes "/"
    assert "not logged in this run" in html  # the saah/* panels: no token weighting here
    assert "<script" in html and 'src="http' not in html  # plotly.js inlined: opens offline
