"""Trackers: ``report_to`` is the user's choice, none by default; a tiny run with ``report_to=tensorboard``
writes the trainer's ``qae/*`` and ``saah/*`` metrics into TensorBoard event files inside its run folder."""

from __future__ import annotations

import contextlib
import io

import pytest
from testkit.tiny_runs import TINY

from qae_lab.runs.presets import PRESETS, build
from qae_lab.runs.pipeline import train
from qae_lab.storage.folder import read_log, step_rows


def test_no_tracker_by_default(tmp_path):
    for preset in PRESETS:
        assert build(preset, output_dir=str(tmp_path / preset))[1].report_to == [], preset


@pytest.mark.slow(seconds=10)
def test_tensorboard_receives_the_qae_and_saah_metrics(tmp_path, monkeypatch):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # transformers' override of the folder
    out = tmp_path / "run"
    run, cfg = build(
        "cpu-demo",
        [*TINY, "evaluate=false", "save_model=false", "report_to=tensorboard"],
        method="qae_sa_ah",
        output_dir=str(out),
    )
    assert cfg.report_to == ["tensorboard"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train(run, cfg, preset="cpu-demo")

    (events,) = out.rglob("events.out.tfevents.*")  # one writer, inside the run folder
    acc = event_accumulator.EventAccumulator(str(events.parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # transformers' TensorBoard callback files the trainer's logs under train/
    assert {
        "train/qae/k",
        "train/qae/zero_adv_frac",
        "train/qae/hard_frac",
        "train/saah/alpha",
        "train/saah/w_mean_neg",
    } <= tags, sorted(tags)
    # the same numbers as the run folder's log, step by step
    rows = step_rows(read_log(out))
    for tag in ("qae/k", "qae/zero_adv_frac", "saah/alpha"):
        scalars = acc.Scalars(f"train/{tag}")
        assert [s.step for s in scalars] == [r["step"] for r in rows] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([r[tag] for r in rows], rel=1e-6)
