"""qae_lab.lab.notebooks.nb04_live_run: notebook 04's start-and-end reading of a logged quantity, its prediction
checked on the committed CPU runs, knobs switched mid-run as the log and the closing summary report them, and the
table of completions (the knob tables themselves: tests/lab/test_live.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from qae_lab.lab.notebooks.nb04_live_run import (
    HARD_SAME,
    completions_html,
    first_last,
    hard_share_verdict,
    summary_rows,
)
from qae_lab.lab.live import LiveRun, knob_changes_table, knob_ranges, knob_title
from qae_lab.storage.folder import read_log, step_rows
from testkit.live_runs import Gate, cells, tiny_trainer, wait_gate

ROOT = Path(__file__).resolve().parents[3]

BEFORE = {"pass@1": 0.25, "greedy_pass@1": 0.5, "n_problems": 8}
AFTER = {"pass@1": 0.5, "greedy_pass@1": 0.375, "n_problems": 8}


def _first_last_by_hand(values, share):
    """An independent reading: n = ceil(share * len) values at each end (at least one)."""
    n = max(1, -(-len(values) * share // 1))
    n = int(n)
    return sum(values[:n]) / n, sum(values[-n:]) / n


@pytest.mark.parametrize("n, share", [(1, 0.1), (4, 0.1), (10, 0.1), (11, 0.1), (400, 0.1), (7, 0.5), (9, 0.25)])
def test_first_last_reads_both_ends_of_the_logged_steps(n, share):
    values = [float((7 * s) % 11) for s in range(n)]
    rows = [{"step": s + 1, "completions/mean_length": v} for s, v in enumerate(values)] + [{"step": n + 1}]
    assert first_last(rows, "completions/mean_length", share) == pytest.approx(
        _first_last_by_hand(values, share), abs=1e-12
    )


def test_first_last_hand_values_and_bad_input():
    rows = [{"step": 1, "x": 10.0}, {"step": 2}, {"step": 3, "x": 20.0}, {"step": 4, "x": 40.0}]
    assert first_last(rows, "x", 0.5) == (15.0, 30.0)  # rows without the metric are left out
    assert first_last(rows, "y") is None and first_last([], "x") is None
    for bad in (0, 0.6, -0.1, True, "0.1"):
        with pytest.raises(ValueError, match="share must lie in"):
            first_last(rows, "x", bad)


def _log(run: str) -> list[dict]:
    path = ROOT / "data" / "reference_runs" / run / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_prediction_moves_in_the_committed_cpu_runs(seed):
    # notebook 04's CPU run is the cpu-demo preset these runs committed: its question must have an answer there
    rows = _log(f"qae-seed{seed}")
    first, last = first_last(rows, "qae/hard_frac")
    by_hand = [r["qae/hard_frac"] for r in rows if "qae/hard_frac" in r]
    assert (first, last) == pytest.approx((sum(by_hand[:40]) / 40, sum(by_hand[-40:]) / 40))  # 400 steps, a tenth
    assert last < first - 4 * HARD_SAME, (first, last)  # a move far past "same"
    assert 0.4 < last / first < 0.6, (first, last)  # the Why: about half the hard prompts they start with
    assert hard_share_verdict("down", rows).startswith("Right")
    assert hard_share_verdict("same", rows).startswith("Wrong") and hard_share_verdict("up", rows).startswith("Wrong")


def test_the_notebook_asks_what_this_module_checks():
    cells = nbformat.read(ROOT / "notebooks" / "04_lora_grpo_qwen25.ipynb", as_version=4).cells
    code = [c.source for c in cells if c.cell_type == "code"]
    assert any("hard_share_verdict(PREDICTION, lab.logged_steps())" in c for c in code)
    assert not any("completions/mean_length" in c for c in code)  # a length the tiny model cannot move


def test_hard_share_verdict_by_hand():
    rows = [{"step": s, "qae/hard_frac": 0.5 + (0.04 if s > 10 else 0.0)} for s in range(1, 21)] + [{"step": 21}]
    assert hard_share_verdict("same", rows).startswith("Right")  # 0.5 -> 0.54: within 0.05
    assert hard_share_verdict("up", rows).startswith("Wrong")
    assert hard_share_verdict(None, rows).startswith("No prediction yet")
    assert hard_share_verdict("down", [{"step": 1}]) == "no step logged yet: run this cell again a little later"


def test_the_summary_mean_is_the_whole_runs_window_mean():
    from qae_lab.analysis.phenomena import window_mean

    assert window_mean([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 0.0}, {"step": 3}], "reward") == 0.5
    assert window_mean([], "reward") is None


def test_summary_of_a_finished_run_states_the_numbers():
    rows = [{"step": t, "qae/k": 0.4, "saah/alpha": 0.5, "qae/zero_adv_frac": z} for t, z in enumerate([0.5, 0.75], 1)]
    assert summary_rows(rows, BEFORE, AFTER, steps=2) == [
        {"measure": "steps trained", "value": "2 of 2"},
        {"measure": "zero-advantage share, mean over the 2 steps", "value": "0.625"},
        {"measure": "sampled pass@1, 8 held-out problems", "value": "0.250 before → 0.500 after (rose)"},
        {"measure": "greedy pass@1, 8 held-out problems", "value": "0.500 before → 0.375 after (fell)"},
    ]


def test_summary_while_the_run_goes_on_or_after_it_failed():
    rows = [{"step": 1, "qae/k": 0.4}]
    running = summary_rows(rows, BEFORE, None, steps=400, running=True)
    assert running[0]["value"].startswith("1 of 400 so far (training goes on: run this cell again")
    assert running[-1] == {
        "measure": "pass@1 after training",
        "value": "not measured yet: the evaluation follows the run",
    }
    assert not any("before" in r["value"] for r in running)
    failed = summary_rows(rows, BEFORE, None, steps=400)
    assert failed[-1]["value"].startswith("no evaluation (the run failed")
    assert summary_rows([], BEFORE, None, steps=400, running=True) == [
        {"measure": "steps trained", "value": "none logged yet: run this cell again a little later"}
    ]


def test_summary_rejects_bad_steps():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        summary_rows([{"step": 1}], BEFORE, AFTER, steps=0)


# ---------------------------------------------------------------- the completions before and after


def _pairs(before, after, completions):
    """What :func:`qae_lab.lab.run_figures.paired_completions` pairs: per problem, the question, gold answer, and each
    completion with its verdict."""
    return [
        {"question": f"Cleo has {10 + i} cookies. A friend gives Cleo 5 more cookies. How many now?",
         "gold": str(15 + i), "before": completions[0], "before_correct": b, "after": completions[1], "after_correct": a}
        for i, (b, a) in enumerate(zip(before, after))
    ]  # fmt: skip


def test_completions_html_keeps_every_word_and_escapes_the_text():
    long = "First, 10 + 5 = 15. " * 30 + "<answer>15</answer>"  # longer than any cell: wrapped, never cut
    page = completions_html(_pairs([False, True], [True, True], ["<answer>7 & 8</answer>", long]))
    assert "<caption" in page and "Greedy completions before and after training" in page
    assert "the first 2 held-out problems: 1/2 → 2/2 correct" in page
    assert page.count("<tr>") == 3 and page.count("Cleo has 10 cookies. A friend gives Cleo 5 more cookies.") == 1
    assert page.count("First, 10 + 5 = 15.") == 2 * 30 and "&lt;answer&gt;7 &amp; 8&lt;/answer&gt;" in page
    assert "white-space:pre-wrap" in page and "overflow-wrap:break-word" in page  # wraps at spaces in its column
    assert not re.search(r"(?<![-\w])(max-)?height", page)  # as tall as its text: no fixed height to leave blank
    assert page.count("background:#fdecea") == 1 and page.count("background:#e6f4ea") == 3  # ✗ red, ✓ green
    assert "Sampled completions (sample 0) before" in completions_html(
        _pairs([True], [True], "ab"), "Sampled completions (sample 0)"
    )


QAE, GRPO = "K-quantile (QAE)", "mean (GRPO)"


def test_knobs_switched_mid_run_are_reported_as_the_log_records_them(tmp_path):
    gates = [Gate(at=2), Gate(at=4)]
    trainer = tiny_trainer(tmp_path, "max_steps=6", callbacks=gates)
    live = LiveRun(trainer)
    children = (live.controls.widget, live.dashboard.header, live.messages, live.dashboard.view.widget)
    assert live.widget.children == children  # controls, knobs in force and messages above the curves
    assert live.controls.alpha.disabled  # no token weighting at the start: alpha does nothing
    live.start()
    wait_gate(gates[0], live)  # between steps 2 and 3
    live.controls.set(quantile_k=0.6, token_weighting="sa_ah")
    live.controls.alpha.value = 1.25
    assert "from step 3 (set; not in the log yet)" in live.dashboard.knob_table.value
    gates[0].release()
    wait_gate(gates[1], live)  # between steps 4 and 5
    live.controls.set(baseline="mean", token_weighting="ah", alpha=0.75)
    gates[1].release()
    live.wait(300)
    rows = step_rows(read_log(trainer.args.output_dir))
    # the log, read by hand: K, the baseline (1: the K-quantile), alpha (logged only while a weighting is on), and
    # which token weighting each step trained with
    assert [(r["qae/k"], r["qae/quantile_baseline"], r.get("saah/alpha"), r["knobs/token_weighting"]) for r in rows] == [
        (0.4, 1.0, None, "none"), (0.4, 1.0, None, "none"), (0.6, 1.0, 1.25, "sa_ah"), (0.6, 1.0, 1.25, "sa_ah"),
        (0.6, 0.0, 0.75, "ah"), (0.6, 0.0, 0.75, "ah"),
    ]  # fmt: skip
    assert live.token_weightings() == {1: "none", 2: "none", 3: "sa_ah", 4: "sa_ah", 5: "ah", 6: "ah"}
    ranges = knob_ranges(rows)  # from the log alone
    assert ranges == [
        {"steps": "1-2", "K": "0.40", "baseline": QAE, "token weighting": "none", "α": "—"},
        {"steps": "3-4", "K": "0.60", "baseline": QAE, "token weighting": "SA-AH", "α": "1.25"},
        {"steps": "5-6", "K": "0.60", "baseline": GRPO, "token weighting": "AH", "α": "0.75"},
    ]
    assert knob_changes_table(rows) == [
        {"step": 3, "knob": "K", "before": "0.40", "after": "0.60"},
        {"step": 3, "knob": "token weighting", "before": "none", "after": "SA-AH"},
        {"step": 3, "knob": "α", "before": "—", "after": "1.25"},
        {"step": 5, "knob": "baseline", "before": QAE, "after": GRPO},
        {"step": 5, "knob": "token weighting", "before": "SA-AH", "after": "AH"},
        {"step": 5, "knob": "α", "before": "1.25", "after": "0.75"},
    ]
    # the dashboard says the same, from the steps it received: its title, its table of knobs (nothing pending)
    assert live.dashboard.view.figure.layout.title.text == knob_title(ranges, 6, 6)
    assert [r[0] for r in cells(live.dashboard.knob_table.value)[1:]] == ["1-2", "3-4", "5-6"]
    assert summary_rows(rows, {"n_problems": 4}, None, steps=6)[0] == {"measure": "steps trained", "value": "6 of 6"}
    assert all(w.disabled for w in live.controls._boxes().values())  # the run has ended
