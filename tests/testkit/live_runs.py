"""A tiny live run for the lab's tests: a trainer of a few steps on the CPU, and a gate that holds it between steps."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from transformers import TrainerCallback

from qae_lab.lab.live import LiveRun
from qae_lab.runs import pipeline, presets

TINY = [
    "max_steps=5",
    "per_device_train_batch_size=8",
    "num_generations=4",
    "max_completion_length=24",
    "n_train=64",
    "n_eval=4",
    "evaluate=false",
    "save_model=false",
    "disable_tqdm=true",
    "levels=2,3",
]


class Gate(TrainerCallback):
    """Holds the training thread at the end of step ``at`` until :meth:`release`."""

    def __init__(self, at: int):
        self.at, self.reached, self.go = at, threading.Event(), threading.Event()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            self.reached.set()
            assert self.go.wait(120), "the test never released the gate"

    def release(self):
        self.go.set()


def tiny_trainer(tmp_path: Path, *sets: str, method: str = "qae", callbacks=(), resume: bool = False):
    run, cfg = presets.build("cpu-demo", [*TINY, *sets], method=method, output_dir=str(tmp_path / "run"))
    trainer, _, _ = pipeline.make_trainer(run, cfg, preset="cpu-demo", callbacks=list(callbacks), resume=resume)
    return trainer


def wait_gate(gate: Gate, live: LiveRun) -> None:
    while not gate.reached.wait(0.5):
        if not live.running:
            live.wait()  # re-raises a failure of the training thread
            pytest.fail("training ended before the gate")


def cells(page: str) -> list[list[str]]:
    """The rows of an HTML table, as lists of cell texts (header included)."""
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", page)]
