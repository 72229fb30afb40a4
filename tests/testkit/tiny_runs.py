"""Shared by the tests of whole runs (tests/runs/test_cli.py, tests/runs/test_pipeline_safety.py, tests/runs/test_export.py,
tests/runs/test_pipeline_trackers.py) and the trainer's (tests/train): the tiny run's settings and trainer (the embedded model on the CPU: 2 steps of 2 prompts x 4
completions, 8 evaluation problems x 2 samples), a folder's snapshot, and a guard that fails a test when the
model loads."""

from __future__ import annotations

from pathlib import Path

# the tiny trainer's settings (tests/train/test_callbacks.py, tests/train/test_regime_eval.py): the embedded model on
# the CPU, 4 steps of 2 prompts x 4 completions, nothing saved
TINY_TRAINER = {
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 48,
    "learning_rate": 1e-4,
    "report_to": [],
    "use_cpu": True,
    "bf16": False,
    "beta": 0.0,
    "save_strategy": "no",
    "disable_tqdm": True,
    "loss_type": "bnpo",
    "logging_steps": 1,
    "max_steps": 4,
    "seed": 3,
}


def tiny_trainer(out: Path, callbacks=(), **settings):
    """A ``QAETrainer`` of :data:`TINY_TRAINER` (``settings`` win) writing into ``out``, on 32 synthetic problems,
    with the run log and ``callbacks``."""
    from qae_lab.task.data import synthetic_task, to_grpo_dataset
    from qae_lab.task.models import load_policy
    from qae_lab.task.rewards import correctness_reward
    from qae_lab.train.callbacks import RunLogger
    from qae_lab.train.config import QAEConfig
    from qae_lab.train.trainer import QAETrainer

    model, tok = load_policy("embedded", device="cpu")
    return QAETrainer(
        model=model,
        reward_funcs=[correctness_reward],
        args=QAEConfig(**{"output_dir": str(out), **TINY_TRAINER, **settings}),
        processing_class=tok,
        train_dataset=to_grpo_dataset(synthetic_task(32, levels=(2, 3), seed=5)),
        callbacks=[RunLogger(preset="test"), *callbacks],
    )


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
