"""qae_lab.lab.nb04_live_run: notebook 04's start-and-end reading of a logged quantity, its prediction checked on the
committed CPU runs, and its closing summary."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from qae_lab.lab.nb04_live_run import HARD_SAME, first_last, hard_share_verdict, logged_mean, summary_lines

ROOT = Path(__file__).resolve().parents[2]

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


def test_logged_mean():
    assert logged_mean([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 0.0}, {"step": 3}], "reward") == 0.5
    assert logged_mean([], "reward") is None


def test_summary_of_a_finished_run_states_the_numbers():
    rows = [{"step": t, "qae/k": 0.4, "saah/alpha": 0.5, "qae/zero_adv_frac": z} for t, z in enumerate([0.5, 0.75], 1)]
    assert summary_lines(rows, BEFORE, AFTER, steps=2) == [
        "steps trained: 2 of 2",
        "K in force: 0.40 at every logged step",
        "alpha in force: 0.50 at every logged step",
        "zero-advantage fraction (logged), mean over the 2 steps: 0.625",
        "sampled pass@1 on 8 held-out problems: 0.250 before -> 0.500 after training (rose)",
        "greedy pass@1 on 8 held-out problems: 0.500 before -> 0.375 after training (fell)",
    ]


def test_summary_follows_k_moved_and_back():
    rows = [{"step": 1, "qae/k": 0.4}, {"step": 2, "qae/k": 0.6}, {"step": 3, "qae/k": 0.6}, {"step": 4, "qae/k": 0.4}]
    lines = summary_lines(rows, BEFORE, AFTER, steps=4)
    assert lines[1] == "K in force: 0.40 (from step 1) -> 0.60 (from step 2) -> 0.40 (from step 4), 2 change(s)"
    assert not any(line.startswith("alpha") for line in lines)  # never logged: no line


def test_summary_while_the_run_goes_on_or_after_it_failed():
    rows = [{"step": 1, "qae/k": 0.4}]
    running = summary_lines(rows, BEFORE, None, steps=400, running=True)
    assert running[0].startswith("steps trained: 1 of 400 so far (training goes on: run this cell again")
    assert running[-1] == "pass@1 after training: not measured yet, the evaluation follows the run"
    assert not any("before ->" in line for line in running)
    failed = summary_lines(rows, BEFORE, None, steps=400)
    assert failed[-1].startswith("pass@1 after training: no evaluation after training")
    assert summary_lines([], BEFORE, None, steps=400, running=True) == [
        "no training step logged yet: run this cell again a little later"
    ]


def test_summary_rejects_bad_steps():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        summary_lines([{"step": 1}], BEFORE, AFTER, steps=0)
