"""Tests for the live lab (qae_lab.lab.live with its controls and qae_lab.lab.live.LiveKnobs), headless: the
controls' thread-safe values, sliders showing exactly the knobs the trainer gets, controls that do nothing disabled
with the reason, knob changes reaching the next step (checked in the run's log.jsonl), the knobs in force by step
range as the dashboard and notebook 04's summary report them (checked against the log of a run whose K, alpha,
baseline and token weighting move mid-way), Stop at a step boundary with a resumable checkpoint, the dashboard
receiving every step, the steps logged so far, and errors and warnings of the training thread surfacing under the
status line.

Runs train the embedded model on a few tiny steps of the synthetic task (no download). A gate
callback holds the training thread at the end of a chosen step while the test moves a control,
so "the next step" is exact rather than a race.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from traitlets import TraitError
from transformers import TrainerCallback

from qae_lab.runs import pipeline as pipeline
from qae_lab.lab.live import LiveKnobs
from qae_lab.lab.live import Controls, KnobSlider
from qae_lab.lab.live import LIVE_PANELS, Dashboard, LiveRun, auto_preset, inactive_knobs, knobs_html, panel_notes
from qae_lab.lab import live
from qae_lab.train.callbacks import ThreadTuner
from qae_lab.lab.live import KNOB_COLUMNS, knob_changes_table, knob_number, knob_ranges, knob_title, knobs_row
from qae_lab.knobs import Knobs
from qae_lab.storage.folder import read_log, step_rows
from testkit.live_runs import Gate, cells, tiny_trainer, wait_gate


class FailAt(TrainerCallback):
    def __init__(self, at: int):
        self.at = at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.at:
            raise ValueError("boom: a failure inside the training thread")


class WarnAt(TrainerCallback):
    def __init__(self, at: int):
        self.at = at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.at:
            warnings.warn("qae_lab test: a warning from the training thread", FutureWarning)


class KnobRecorder:
    """Stands in for a QAETrainer where only its knobs matter: ``knobs`` and ``set_knobs`` (recorded)."""

    loss_type = "dapo"

    def __init__(self, **knobs):
        self.knobs, self.received = Knobs(**knobs), []

    def set_knobs(self, knobs):
        assert isinstance(knobs, Knobs)  # one frozen value, never a dict to share
        self.received.append(knobs.as_dict())


# ---------------------------------------------------------------- controls (no training)


def test_controls_start_values_snapshot_and_validation():
    c = Controls(quantile_k=0.6, alpha=0.25, baseline="mean", token_weighting="sa_ah")
    assert c.snapshot().as_dict() == {"quantile_k": 0.6, "alpha": 0.25, "baseline": "mean", "token_weighting": "sa_ah"}
    c.k.value, c.alpha.value = 0.30000000000000004, 1.5  # a browser's float step noise is rounded off
    c.baseline.value, c.token_weighting.value = "quantile", "ah"
    assert c.snapshot().as_dict() == {"quantile_k": 0.3, "alpha": 1.5, "baseline": "quantile", "token_weighting": "ah"}
    for kwargs, name in (
        ({"quantile_k": 1.0}, "quantile_k"),
        ({"alpha": float("nan")}, "alpha"),
        ({"baseline": "median"}, "baseline"),
        ({"token_weighting": "sa-ah"}, "token_weighting"),
    ):
        with pytest.raises(ValueError, match=name):
            Controls(**kwargs)
    with pytest.raises(ValueError, match=r"quantile_k must be in \[0.05, 0.95\]"):
        c.set(quantile_k=0.99, alpha=0.75)  # outside the slider's range: refused, nothing moved
    assert c.snapshot().alpha == 1.5
    with pytest.raises(ValueError, match="unknown knob"):
        c.set(beta=0.1)


def shown(slider: KnobSlider) -> float:
    """The number a browser shows: the frontend snaps the handle and readout to min + n * step, then
    formats it with readout_format."""
    n = round((slider.value - slider.min) / slider.step)
    return float(format(slider.min + n * slider.step, slider.readout_format))


@pytest.mark.parametrize("k, alpha", [(0.99, 3.0), (0.4, 0.5), (0.123, 0.123), (0.01, -1.25)])
def test_sliders_show_the_knobs_the_trainer_gets(k, alpha):
    trainer = KnobRecorder(quantile_k=k, alpha=alpha, baseline="quantile", token_weighting="sa_ah")
    c = Controls.for_trainer(trainer)
    knobs = LiveKnobs(c, trainer)
    knobs.on_step_begin(None, SimpleNamespace(global_step=0), None)
    c.baseline.value = "mean"  # moving another control keeps K and alpha as shown
    knobs.on_step_begin(None, SimpleNamespace(global_step=1), None)
    for slider, name, want in ((c.k, "quantile_k", k), (c.alpha, "alpha", alpha)):
        assert slider.value == shown(slider) == getattr(c.snapshot(), name) == want
        assert [got[name] for got in trainer.received] == [want, want]
    assert trainer.received[-1]["baseline"] == "mean"


def test_slider_refuses_what_it_cannot_show():
    c = Controls(quantile_k=0.99, alpha=3.0)
    before = c.snapshot()
    for slider, bad, match in (
        (c.k, 1.5, r"quantile_k must be in \[0.05, 0.99\] \(the range of the slider 'K "),
        (c.k, 0.01, r"quantile_k must be in \[0.05, 0.99\]"),
        (c.alpha, 3.5, r"alpha must be in \[-0.5, 3.0\]"),
        (c.alpha, float("nan"), "alpha must be in"),
    ):
        with pytest.raises(TraitError, match=match):
            slider.value = bad  # ipywidgets would clamp it silently
        assert (c.k.value, c.alpha.value) == (0.99, 3.0) and c.snapshot() == before
    with pytest.raises(TraitError, match="min 0.995 would move the value 0.99"):
        c.k.min = 0.995
    with pytest.raises(TraitError, match="max 2.0 would move the value 3.0"):
        c.alpha.max = 2.0
    c.k.max = 1.5  # a range beyond the knob's validity: the knob's own check still refuses
    with pytest.raises(TraitError, match=r"quantile_k must lie in the open interval \(0, 1\)"):
        c.k.value = 1.2
    assert (c.k.value, c.k.min, c.alpha.max) == (0.99, 0.05, 3.0) and c.snapshot() == before
    c.k.value = 0.4567  # off the 0.01 grid: the step follows, so the browser shows 0.4567 too
    assert shown(c.k) == c.k.value == c.snapshot().quantile_k == 0.4567 and c.k.readout_format == ".4f"


def test_controls_for_a_trainer_with_knobs_beyond_the_default_ranges(tmp_path):
    trainer = tiny_trainer(tmp_path, "quantile_k=0.99", "alpha=3.0", "token_weighting=sa_ah")
    c = Controls.for_trainer(trainer)
    LiveKnobs(c, trainer).on_step_begin(None, SimpleNamespace(global_step=0), None)
    assert (shown(c.k), shown(c.alpha)) == (c.k.value, c.alpha.value) == (0.99, 3.0)
    assert (trainer.knobs.quantile_k, trainer.knobs.alpha) == (0.99, 3.0)


def test_controls_stop_button_and_no_torn_reads():
    c = Controls()
    torn, done = [], threading.Event()

    def reader():  # the training thread's side: K and alpha must always come from the same set() call
        while not done.is_set():
            s = c.snapshot()
            if s.quantile_k != s.alpha:
                torn.append(s)

    c.set(quantile_k=0.2, alpha=0.2)
    t = threading.Thread(target=reader)
    t.start()
    for i in range(2000):
        v = 0.2 if i % 2 else 0.8
        c.set(quantile_k=v, alpha=v)
    done.set()
    t.join()
    assert torn == []
    assert not c.stop_requested
    c.stop_button.click()
    assert c.stop_requested and c.stop_button.disabled and c.stop_button.description == "Stopping..."
    # every move is recorded with the step it arrived in (no step begun: 0), in the order received
    assert len(c.changes) == 2 * 2001 and {step for step, _, _ in c.changes} == {0}
    assert c.changes[-2:] == [(0, "quantile_k", 0.2), (0, "alpha", 0.2)]


def _tip(widget):
    """A widget's hover text: ``tooltip`` in ipywidgets 8, ``description_tooltip`` in 7.7 (Colab's)."""
    return widget.tooltip if widget.has_trait("tooltip") else widget.description_tooltip


def test_controls_disable_what_does_nothing_and_say_why():
    c = Controls(baseline="quantile", token_weighting="none")
    alpha_why = "alpha does nothing while token weighting is none: choose AH or SA-AH to use it"
    assert c.alpha.disabled and _tip(c.alpha) == alpha_why == c.note.value and not c.k.disabled
    c.token_weighting.value = "sa_ah"  # a person's click
    assert not c.alpha.disabled and _tip(c.alpha) is None and c.note.value == ""
    c.baseline.value = "mean"
    assert c.k.disabled and c.note.value == (
        "K does not change the update while the baseline is the mean (GRPO): choose K-quantile (QAE) to use it"
    )
    c.set(baseline="quantile", token_weighting="none", quantile_k=0.3)  # code still moves a disabled control
    assert not c.k.disabled and c.alpha.disabled and c.snapshot().quantile_k == 0.3
    assert inactive_knobs(Knobs(baseline="mean", token_weighting="ah")) == {
        "quantile_k": "K does not change the update while the baseline is the mean (GRPO): choose K-quantile (QAE) to use it"
    }
    c.finish()  # nothing reaches a run any more
    assert all(w.disabled for w in (c.k, c.alpha, c.baseline, c.token_weighting, c.stop_button))
    assert c.note.value == "training has ended: the controls no longer reach a run"
    # a trainer whose loss type cannot weight tokens: token weighting locked, for the whole run
    trainer = KnobRecorder()
    trainer.loss_type = "dr_grpo"
    c = Controls.for_trainer(trainer)
    assert c.token_weighting.disabled and "loss type 'dr_grpo' cannot weight tokens" in _tip(c.token_weighting)
    c.baseline.value = "mean"
    assert c.token_weighting.disabled and c.alpha.disabled and c.k.disabled


def test_knob_table_shows_the_logged_ranges_then_the_next_setting():
    qae = {"K": "0.40", "baseline": "K-quantile (QAE)", "token weighting": "none", "α": "—"}
    ranges = [{"steps": "1-8", **qae}, {"steps": "9-12", **qae, "K": "0.60"}]
    assert cells(knobs_html(ranges, (13, knobs_row(Knobs(quantile_k=0.6, token_weighting="sa_ah", alpha=1.25))))) == [
        ["steps", "K", "baseline", "token weighting", "α"],
        ["1-8", "0.40", "K-quantile (QAE)", "none", "—"],
        ["9-12", "0.60", "K-quantile (QAE)", "none", "—"],
        ["from step 13 (set; not in the log yet)", "0.60", "K-quantile (QAE)", "SA-AH", "1.25"],
    ]
    assert len(cells(knobs_html(ranges, (13, knobs_row(Knobs(quantile_k=0.6)))))) == 3  # in force already: no row
    page = knobs_html([{"steps": str(s), **qae} for s in range(1, 7)], last=4)
    assert [r[0] for r in cells(page)[1:]] == ["3", "4", "5", "6"] and "(2 earlier settings not shown)" in page
    assert cells(knobs_html([], (1, knobs_row(Knobs()))))[1][0] == "from step 1 (set; not in the log yet)"  # the start
    assert panel_notes([]) == dict.fromkeys(LIVE_PANELS, "waiting for the first step...")


def test_dashboard_waits_then_shows_a_move_at_once_and_in_force_from_the_next_step():
    d = Dashboard(max_steps=40, mode="static", min_interval_s=3600.0)
    assert d.view.figure.layout.title.text == "waiting for the first step... (40 steps to train)"
    notes = [a.text for a in d.view.figure.layout.annotations if a.text not in LIVE_PANELS]
    assert notes == ["waiting for the first step..."] * len(LIVE_PANELS)  # not "not logged"
    d.show_next(1, Knobs())
    assert cells(d.knob_table.value)[1][0] == "from step 1 (set; not in the log yet)"
    d.add({"step": 1, "reward": 0.5, "qae/k": 0.4, "qae/quantile_baseline": 1.0, "knobs/token_weighting": "none"})
    d.refresh()
    assert [r[0] for r in cells(d.knob_table.value)[1:]] == ["1"]  # used: no longer pending
    d.show_next(1, Knobs(quantile_k=0.6))  # a move received before step 1 ended applies from step 2 at the earliest
    assert [r[:2] for r in cells(d.knob_table.value)[1:]] == [
        ["1", "0.40"],
        ["from step 2 (set; not in the log yet)", "0.60"],
    ]
    d.show_next(0, None)  # the run has ended
    assert len(cells(d.knob_table.value)) == 2


def test_redraws_wait_in_proportion_to_what_the_last_one_cost(monkeypatch):
    """On a fake clock (binary fractions, so no rounding): steps every 0.5 s, a redraw that costs 0.25 s, at most
    1/8 of the time for redraws: a redraw every 2 s at the most (0.25 * 8), whatever min_interval_s says; the end
    of the run draws the last step."""
    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    d = Dashboard(max_steps=40, mode="static", min_interval_s=0.5, max_draw_share=0.125)
    drawn = []

    def update(figure):  # a redraw that takes 0.25 s of the fake clock
        clock[0] += 0.25
        drawn.append(len(d.rows))

    monkeypatch.setattr(d.view, "update", update)
    monkeypatch.setattr(d, "_figure", lambda rows, ranges=None: None)  # the figure itself is not under test here
    for step in range(1, 41):
        clock[0] += 0.5
        d.add({"step": step, "reward": 0.5})
    d.refresh()
    assert drawn[0] == 1  # the first step at once
    gaps = [b - a for a, b in zip(drawn[:-1], drawn[1:-1])]  # in steps of 0.5 s, the last (forced) redraw aside
    assert gaps and all(g == 4 for g in gaps)  # 0.25 s * 8 = 2 s = 4 steps
    assert drawn[-1] == 40 and len(drawn) == 1 + 39 // 4 + 1
    d.max_draw_share = 1.0  # redraws may take all the time: min_interval_s rules
    drawn.clear()
    for step in range(41, 45):
        clock[0] += 0.5
        d.add({"step": step, "reward": 0.5})
    assert drawn == [41, 42, 43, 44]
    with pytest.raises(ValueError, match=r"max_draw_share must be in \(0, 1\], got 2"):
        Dashboard(max_steps=4, mode="static", max_draw_share=2)


def test_dashboard_keeps_every_row_and_draws_the_panels():
    d = Dashboard(max_steps=10, mode="static", min_interval_s=3600.0)  # no automatic redraw after the first
    for step in range(1, 8):
        d.add(
            {
                "step": step,
                "reward": step / 10,
                "qae/k": 0.4 if step < 4 else 0.7,
                "qae/zero_adv_frac": 0.8,
                "ledger/dh": -0.01,
                "ledger/dh_pos": -0.02,
                "ledger/dh_neg": 0.01,
            }
        )
    assert [r["step"] for r in d.rows] == list(range(1, 8)) and d.progress.value == 7
    d.refresh()
    k = next(t for t in d.view.figure.data if t.meta == "qae/k")
    assert list(k.x) == list(range(1, 8)) and list(k.y) == [0.4] * 3 + [0.7] * 4
    assert d.view.figure.layout.title.text.split("<br>") == [
        "step 7 of 10 · knobs in force:",
        "steps 1-3: K 0.40 · — baseline · no token weighting",  # rows without qae/quantile_baseline: unknown
        "steps 4-7: K 0.70 · — baseline · no token weighting",
    ]
    titles = [a.text for a in d.view.figure.layout.annotations]
    assert all(panel in titles for panel in LIVE_PANELS)
    assert {"ledger/dh", "ledger/dh_pos", "ledger/dh_neg"} <= {t.meta for t in d.view.figure.data}  # the ledger
    assert "SA-AH off: token weighting is none" in titles  # why the weights' panel is empty


def test_auto_preset_without_gpu():
    import torch

    preset, why = auto_preset()
    assert preset == ("qwen2.5-1.5b-gsm8k" if torch.cuda.is_available() else "cpu-demo") and why


# ---------------------------------------------------------------- live runs


def test_slider_moves_reach_the_next_step(tmp_path):
    gate = Gate(at=2)
    trainer = tiny_trainer(tmp_path, callbacks=[gate])
    live, threads_before = LiveRun(trainer), torch.get_num_threads()
    kinds = [type(cb).__name__ for cb in trainer.callback_handler.callbacks]
    assert not any("Progress" in k or "Printer" in k for k in kinds), kinds  # the dashboard replaces them
    assert live.start() is live and live.running  # start() returns while training goes on
    wait_gate(gate, live)
    # between steps 2 and 3: what a teacher's slider moves do
    live.controls.k.value = 0.7
    live.controls.token_weighting.value = "sa_ah"
    live.controls.alpha.value = 1.25
    gate.release()
    outcome = live.wait(300)
    assert not outcome.interrupted and outcome.global_step == 5
    rows = step_rows(read_log(trainer.args.output_dir))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["qae/k"] for r in rows] == [0.4, 0.4, 0.7, 0.7, 0.7]
    assert [r.get("saah/alpha") for r in rows] == [None, None, 1.25, 1.25, 1.25]  # logged once weighting is on
    assert [step for step, _ in live.knobs.applied] == [1, 2, 3, 4, 5]
    # the kernel received the moves while step 2's knobs were fixed: stamped 2, in force from step 3
    assert live.controls.changes == [(2, "quantile_k", 0.7), (2, "token_weighting", "sa_ah"), (2, "alpha", 1.25)]
    assert live.controls.stop_button.description == "Finished" and live.controls.stop_button.disabled
    live.stop()  # Stop after the end (a Run All cell, a late click): nothing to stop, the button says so
    assert live.controls.stop_button.description == "Finished" and not live.controls.stop_requested
    # the dashboard received every step, and its last drawing shows them all
    assert [r["step"] for r in live.dashboard.rows] == [1, 2, 3, 4, 5]
    k = next(t for t in live.dashboard.view.figure.data if t.meta == "qae/k")
    assert list(k.y) == [0.4, 0.4, 0.7, 0.7, 0.7]
    assert "finished" in live.dashboard.status.value
    # the pipeline's trainer carries the thread policy's tuner (a fixed count here: the tests' one thread); the
    # count in force before training is put back after
    [tuner] = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, ThreadTuner)]
    assert torch.get_num_threads() == threads_before
    probe = tuner.probe
    if len(probe.counts) > 1:  # probing: the first steps were a probe that has either ended or goes on
        assert probe.chosen or all(probe.times.values()), (probe.chosen, probe.times)


def test_stop_ends_at_a_step_boundary_with_log_and_checkpoint(tmp_path):
    gate = Gate(at=2)
    trainer = tiny_trainer(tmp_path, "max_steps=50", callbacks=[gate])
    live = LiveRun(trainer).then(lambda run: f"after-hook saw step {run.trainer.state.global_step}").start()
    wait_gate(gate, live)
    live.controls.stop_button.click()  # pressed while step 2 is finishing
    gate.release()
    outcome = live.wait(300)
    assert outcome.interrupted and outcome.global_step == 2
    ckpt = Path(outcome.checkpoint)
    assert ckpt == Path(trainer.args.output_dir) / "checkpoint-2" and (ckpt / "trainer_state.json").is_file()
    rows = step_rows(read_log(trainer.args.output_dir))
    assert [r["step"] for r in rows] == [1, 2]  # complete up to the stop, nothing after
    assert "stopped after 2 of 50 steps (not finished)" in live.dashboard.status.value
    assert live.controls.stop_button.description == "Stopped"  # no longer "Stopping..."
    assert any("after-hook saw step 2" in o.get("text", "") for o in live.messages.outputs)
    with pytest.raises(RuntimeError, match="already started"):
        live.start()
    # the checkpoint resumes: a new trainer in the same folder continues to its max_steps, one log
    resumed = LiveRun(tiny_trainer(tmp_path, "max_steps=4", resume=True), resume_from_checkpoint=str(ckpt)).start()
    assert resumed.wait(300).global_step == 4
    assert [r["step"] for r in step_rows(read_log(trainer.args.output_dir))] == [1, 2, 3, 4]


def test_errors_in_the_training_thread_are_shown_and_reraised(tmp_path):
    live = LiveRun(tiny_trainer(tmp_path, callbacks=[FailAt(2)])).start()
    with pytest.raises(RuntimeError, match="failed in the background thread") as info:
        live.wait(300)
    assert isinstance(info.value.__cause__, ValueError)
    assert "failed: ValueError: boom" in live.dashboard.status.value
    assert any("boom" in o.get("text", "") and o.get("name") == "stderr" for o in live.messages.outputs)
    assert [r["step"] for r in live.dashboard.rows] == [1]
    assert live.controls.stop_button.description == "Failed" and live.controls.stop_button.disabled


def test_logged_steps_and_the_training_threads_warnings(tmp_path, recwarn):
    gate = Gate(at=1)
    trainer = tiny_trainer(tmp_path, "max_steps=2", callbacks=[gate, WarnAt(1)])
    live = LiveRun(trainer)
    assert live.logged_steps() == []  # no log.jsonl yet
    live.start()
    wait_gate(gate, live)
    assert live.logged_steps() == []  # step 1 ends before its log line is written
    warnings.warn("qae_lab test: a warning from the test's thread", FutureWarning)
    gate.release()
    live.wait(300)
    assert [r["step"] for r in live.logged_steps()] == [1, 2]
    assert [r["step"] for r in live.logged_steps()] == [r["step"] for r in step_rows(read_log(trainer.args.output_dir))]
    # the training thread's warning is shown under the dashboard, the test thread's where it went before
    errs = "".join(o["text"] for o in live.messages.outputs if o.get("name") == "stderr")
    # (the exact layout is warnings.formatwarning's, which some installs re-format: check the parts)
    assert "FutureWarning" in errs and "qae_lab test: a warning from the training thread" in errs
    recorded = [str(w.message) for w in recwarn]
    assert "qae_lab test: a warning from the test's thread" in recorded
    assert not any("training thread" in m for m in recorded)
    assert "test's thread" not in errs


def test_the_dashboard_says_how_many_prompts_a_share_counts_and_draws_one_line_for_a_01_reward():
    # one prompt a step: the shares are 0 or 1 and the title says so; a 0/1 reward's mean is its pass rate: one line
    d = Dashboard(max_steps=10, mode="static", min_interval_s=3600.0, prompts_per_step=1)
    for step, (reward, hard) in enumerate([(0.25, 1.0), (0.75, 0.0)], 1):
        d.add({"step": step, "reward": reward, "qae/success_rate": reward, "qae/hard_frac": hard, "qae/k": 0.4})
    d.refresh()
    titles = [a.text for a in d.view.figure.layout.annotations]
    assert "easy and hard prompts (QAE): 1 prompt a step, so each share is 0 or 1" in titles, titles
    assert "mean reward = pass rate (a 0/1 reward)" in titles and "reward and pass rate" not in titles, titles
    assert [t.meta for t in d.view.figure.data].count("reward") == 1
    assert "qae/success_rate" not in {t.meta for t in d.view.figure.data}  # not the same line drawn twice
    # a graded reward differs from the pass rate: both lines, the plain title; 8 prompts a step: the plain title
    d = Dashboard(max_steps=10, mode="static", min_interval_s=3600.0, prompts_per_step=8)
    d.add({"step": 1, "reward": 5.5, "qae/success_rate": 0.5, "qae/k": 0.4})
    d.refresh()
    titles = [a.text for a in d.view.figure.layout.annotations]
    assert "reward and pass rate" in titles and "easy and hard prompts (QAE)" in titles, titles
    assert {"reward", "qae/success_rate"} <= {t.meta for t in d.view.figure.data}


# ---------------------------------------------------------------- the knobs in force, read from the log


def _row(step, k=0.4, quantile=1.0, alpha=None):
    row = {"step": step, "qae/k": k, "qae/quantile_baseline": quantile}
    return row if alpha is None else {**row, "saah/alpha": alpha}


QAE, GRPO = "K-quantile (QAE)", "mean (GRPO)"


def test_knob_ranges_report_every_knob_including_the_switches():
    # what the tester saw: SA-AH off for steps 1-8, then alpha 0.7 (the old summary said "0.70 at every logged step")
    rows = [_row(s) for s in range(1, 9)] + [_row(s, k=0.6, alpha=0.7) for s in range(9, 13)]
    rows += [_row(s, k=0.6, quantile=0.0, alpha=0.7) for s in (13, 14)]
    weightings = {s: "none" if s < 9 else "sa_ah" for s in range(1, 15)}
    assert knob_ranges(rows, weightings) == [
        {"steps": "1-8", "K": "0.40", "baseline": QAE, "token weighting": "none", "α": "—"},
        {"steps": "9-12", "K": "0.60", "baseline": QAE, "token weighting": "SA-AH", "α": "0.70"},
        {"steps": "13-14", "K": "0.60", "baseline": GRPO, "token weighting": "SA-AH", "α": "0.70"},
    ]
    assert list(knob_ranges(rows)[0]) == list(KNOB_COLUMNS)
    # a log written before knobs/token_weighting existed cannot say which
    assert knob_ranges(rows)[1]["token weighting"] == "AH or SA-AH"
    assert knob_changes_table(rows, weightings) == [
        {"step": 9, "knob": "K", "before": "0.40", "after": "0.60"},
        {"step": 9, "knob": "token weighting", "before": "none", "after": "SA-AH"},
        {"step": 9, "knob": "α", "before": "—", "after": "0.70"},
        {"step": 13, "knob": "baseline", "before": QAE, "after": GRPO},
    ]


def test_knob_ranges_name_the_weighting_each_log_row_names():
    # a resumed run: steps 1-4 trained in an earlier session, whose controls nobody here recorded; the rows say
    # which weighting each step used (the old tables wrote "AH or SA-AH" for them)
    rows = [{**_row(s, alpha=0.7), "knobs/token_weighting": "sa_ah"} for s in (1, 2)]
    rows += [{**_row(s, alpha=0.7), "knobs/token_weighting": "ah"} for s in (3, 4)]
    rows += [{**_row(5, alpha=0.7), "knobs/token_weighting": "none+sa_ah"}]  # a change inside a logging window
    assert [(r["steps"], r["token weighting"]) for r in knob_ranges(rows)] == [
        ("1-2", "SA-AH"),
        ("3-4", "AH"),
        ("5", "none + SA-AH"),
    ]
    assert knob_ranges(rows, {1: "ah", 2: "ah"})[0]["token weighting"] == "SA-AH"  # the log wins over any record
    assert [(c["step"], c["after"]) for c in knob_changes_table(rows) if c["knob"] == "token weighting"] == [
        (3, "AH"),
        (5, "none + SA-AH"),
    ]


def test_knob_ranges_edge_cases():
    assert knob_ranges([]) == [] and knob_changes_table([]) == []
    # a gap in the steps (a resumed run that lost a step) starts a new range, but no change
    rows = [_row(1), _row(2), _row(4), _row(5, alpha=1.0), _row(6)]
    assert [r["steps"] for r in knob_ranges(rows, {5: "ah"})] == ["1-2", "4", "5", "6"]
    assert [(c["step"], c["knob"], c["after"]) for c in knob_changes_table(rows, {5: "ah"})] == [
        (5, "token weighting", "AH"),
        (5, "α", "1.00"),
        (6, "token weighting", "none"),
        (6, "α", "—"),
    ]
    # a weighting named "none" for a step whose log shows weighting on: the log wins, unnamed
    assert knob_ranges([_row(1, alpha=0.5)], {1: "none"})[0]["token weighting"] == "AH or SA-AH"
    assert knob_ranges([{"step": 1}])[0] == {
        "steps": "1",
        "K": "—",
        "baseline": "—",
        "token weighting": "none",
        "α": "—",
    }
    with pytest.raises(ValueError, match="rows must be log rows with a 'step'"):
        knob_ranges([{"event": "resume"}])


def test_knob_number_and_the_controls_setting_as_a_row():
    assert [knob_number(x) for x in (0.4, 0.123, 0.4567, 1.25, -0.5, 2.0, 0.1 + 0.2, None)] == [
        "0.40", "0.123", "0.4567", "1.25", "-0.50", "2.00", "0.30", "—",
    ]  # fmt: skip
    assert knobs_row(Knobs(quantile_k=0.7, alpha=1.5, baseline="mean")) == {
        "K": "0.70",
        "baseline": GRPO,
        "token weighting": "none",
        "α": "—",  # alpha does nothing without a weighting: not shown as in force
    }
    # a setting reads as a logged step with the same knobs reads
    logged = knob_ranges([_row(3, k=0.7, quantile=0.0, alpha=1.5)], {3: "ah"})[0]
    assert knobs_row(Knobs(quantile_k=0.7, alpha=1.5, baseline="mean", token_weighting="ah")) == {
        k: v for k, v in logged.items() if k != "steps"
    }


def test_knob_title_names_every_knob_of_the_last_ranges():
    ranges = [{"steps": f"{s}", "K": f"0.{s}0", "baseline": QAE, "token weighting": "none", "α": "—"} for s in (1, 2)]
    ranges += [{"steps": "3-9", "K": "0.30", "baseline": GRPO, "token weighting": "AH", "α": "1.00"}]
    lines = knob_title(ranges, 9, 40).split("<br>")
    assert lines == [
        "step 9 of 40 · knobs in force:",
        "step 1: K 0.10 · K-quantile (QAE) baseline · no token weighting",
        "step 2: K 0.20 · K-quantile (QAE) baseline · no token weighting",
        "steps 3-9: K 0.30 · mean (GRPO) baseline · AH, α 1.00",
    ]
    short = knob_title(ranges, 9, 40, last=1).split("<br>")
    assert short == ["step 9 of 40 · knobs in force, the last 1 of 3 settings:", lines[-1]]
    assert knob_title([], 0, 40) == "waiting for the first step... (40 steps to train)"
