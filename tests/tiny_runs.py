"""Shared by the tests of whole runs (tests/runs/test_cli.py, tests/runs/test_pipeline_safety.py, tests/runs/test_export.py,
tests/runs/test_pipeline_trackers.py): the tiny run's settings (the embedded model on the CPU: 2 steps of 2 prompts x 4
completions, 8 evaluation problems x 2 samples), a folder's snapshot, and a guard that fails a test when the
model loads."""

from __future__ import annotations

from pathlib import Path

TINY = [
    "max_steps=2",
    "per_device_train_batch_size=8",
    "num_generations=4",
    "n_train=16",
    "n_eval=8",
    "eval_samples=2",
    "disable_tqdm=true",
    "torch_threads=1",
]


def tiny_sets(extra=()) -> list[str]:
    """``--set`` arguments of :data:`TINY` and then ``extra`` (later values win)."""
    return [a for s in [*TINY, *extra] for a in ("--set", s)]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def no_loading(monkeypatch) -> None:
    """Checks must come before anything loads: loading the model fails the test (where the run loads it too)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr("qae_lab.task.models.load_policy", refuse)
    monkeypatch.setattr("qae_lab.runs.pipeline.load_policy", refuse)
