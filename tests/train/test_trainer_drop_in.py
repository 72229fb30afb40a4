"""QAETrainer where it stands in for TRL's GRPOTrainer: ``evaluate()`` with QAE's ``qae/*`` and the ``behaviour/*``
metrics for an evaluation batch smaller than, equal to and larger than the generation batch (a larger one once
crashed: the behaviour metrics read the texts from TRL's completion log, a deque as long as the generation batch), and
completions no reward function can score. The embedded model on the CPU."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from testkit.tiny_runs import tiny_trainer

from qae_lab.task import rewards
from qae_lab.task.answers import completion_text
from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.train import trainer as trainer_module

HELD_OUT = to_grpo_dataset(synthetic_task(8, levels=(2, 3), seed=13))  # 8 problems x 4 completions = 32


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("eval_batch", [4, 8, 16], ids=["smaller", "equal", "larger"])  # generation batch: 8
def test_evaluate_scores_every_completion_it_generated(tmp_path, monkeypatch, eval_batch):
    seen, measured = [], []  # what the reward saw, what the behaviour metrics measured: one entry per generation

    def reward(completions, **kwargs):
        seen.append([completion_text(c) for c in completions])
        return correctness(completions, **kwargs)

    def behaviour(lengths, texts, success, **kwargs):
        measured.append(list(texts))
        return behaviour_stats(lengths, texts, success, **kwargs)

    correctness, behaviour_stats = rewards.correctness_reward, trainer_module.behaviour_stats
    reward.__name__ = "correctness_reward"
    monkeypatch.setattr(rewards, "correctness_reward", reward)
    monkeypatch.setattr(trainer_module, "behaviour_stats", behaviour)
    trainer = tiny_trainer(tmp_path, per_device_eval_batch_size=eval_batch, max_completion_length=16)
    assert trainer.args.generation_batch_size == 8
    metrics = trainer.evaluate(eval_dataset=HELD_OUT)
    assert measured == seen and sum(map(len, seen)) == 32  # every completion, each measured in its own batch
    assert {len(texts) for texts in seen} == {eval_batch}  # one generation per evaluation batch
    assert 0.0 <= metrics["eval_reward"] <= 1.0 and 0.0 <= metrics["eval_qae/zero_adv_frac"] <= 1.0
    assert metrics["eval_behaviour/length_mean"] == pytest.approx(metrics["eval_completions/mean_length"])


@pytest.mark.slow(seconds=10)
def test_a_completion_no_reward_function_scores_is_refused_saying_why(tmp_path, monkeypatch):
    def unscorable(completions, **kwargs):
        return [None] * len(completions)

    unscorable.__name__ = "correctness_reward"
    monkeypatch.setattr(rewards, "correctness_reward", unscorable)
    trainer = tiny_trainer(tmp_path, max_steps=1, max_completion_length=8)
    with pytest.raises(
        ValueError, match=r"every one returned None\): TRL leaves such a completion out .* \(0 where one cannot"
    ):
        trainer.train()


def test_a_private_member_trl_no_longer_has_is_named_when_the_trainer_is_made(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")  # as a TRL release that renamed it would
    with pytest.raises(
        ImportError, match=r"trl 1\.\d+\.\d+ with transformers .* lacks: _calculate_rewards \(overridden"
    ):
        tiny_trainer(tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_every_private_member_of_trl_or_transformers_the_trainer_touches_is_listed(tmp_path):
    from trl import GRPOTrainer

    trainer = tiny_trainer(tmp_path)
    assert trainer_module.missing_private_members(trainer) == []
    from qae_lab.train import staged  # the checkpoint overrides in QAETrainer's bases

    source = Path(trainer_module.__file__).read_text() + Path(staged.__file__).read_text()
    used = set(re.findall(r"(?:self|super\(\))\.(_[a-z]\w*)", source))
    defs = set(re.findall(r"def (_[a-z]\w*)", source))
    ours = (defs - set(dir(GRPOTrainer))) | set(re.findall(r"self\.(_[a-z]\w*)(?:, self\.\w+)* = ", source))
    ours |= set(re.findall(r"^    (_[a-z]\w*) = ", source, flags=re.M))  # class attributes
    touched = {n for n in (used | defs) - ours if hasattr(trainer, n)}
    # _rotate_checkpoints: used only where it exists (transformers < 5), else the public function
    assert touched - {"_rotate_checkpoints"} == set(trainer_module.PRIVATE_MEMBERS)


class _HostSyncs(TorchDispatchMode):
    """Counts the reads of a tensor's value back to the host, each a synchronisation on a GPU, with the qae_lab file
    it came from: ``.item()``, ``bool(t)``, ``int(t)`` (``aten._local_scalar_dense``) and ``.tolist()`` (one copy of
    the whole tensor; on a CPU it dispatches no op, so it is counted where it is called)."""

    def __init__(self):
        super().__init__()
        self.files: list[str] = []

    def _count(self) -> None:
        ours = [f for f in traceback.extract_stack() if "/qae_lab/" in f.filename]
        name = Path(ours[-1].filename).name if ours else "trl or transformers"
        self.files.append("host_floats" if ours and ours[-1].name == "host_floats" else name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self._count()
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        tolist, counter = torch.Tensor.tolist, self

        def counted(t):
            counter._count()
            return tolist(t)

        self._tolist, torch.Tensor.tolist = tolist, counted
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)


# sparse: qae_lab's loss (rows with A = 0 left out); dense and unweighted: TRL's own loss and the ledger beside it
@pytest.mark.parametrize(
    "weighting, top_k, sparse", [("none", None, True), ("none", None, False), ("sa_ah", None, True), ("sa_ah", 8, True)]
)
def test_the_loss_step_reads_values_back_only_for_its_metrics(tmp_path, monkeypatch, weighting, top_k, sparse):
    from testkit.step_setup import REWARDS, make_trainer, rows, tiny_model
    from trl import GRPOConfig, GRPOTrainer

    from qae_lab.task.models import load_policy

    _, tok = load_policy("embedded", device="cpu")
    ours = make_trainer(
        tmp_path / "qae",
        tok,
        tiny_model(tok, seed=1),
        loss_type="bnpo",
        token_weighting=weighting,
        entropy_top_k=top_k,
        sparse_update=sparse,
    )
    theirs = make_trainer(
        tmp_path / "trl", tok, tiny_model(tok, seed=1), trainer_cls=GRPOTrainer, config_cls=GRPOConfig, loss_type="bnpo"
    )

    def syncs(trainer) -> list[str]:
        batch = trainer._generate_and_score_completions(rows(REWARDS))  # where the batch is built and checked
        with _HostSyncs() as counted:
            trainer._compute_loss(trainer.model, batch)
        return counted.files

    quiet, trl = syncs(ours), syncs(theirs)
    # within TRL's own reads + 2 a micro-batch: the metrics (TRL's, the ledger's, the weights') read back in one
    # transfer each (qae_lab._checks.host_floats), the sparse update's kept rows and their width once
    assert len(quiet) <= len(trl) + 2, (quiet, trl)
    assert "_checks.py" not in quiet  # no input check inside the step: the batch was checked where it was built
    assert quiet.count("host_floats") <= 4  # the kept rows, the ledger, TRL's metrics, the weights: one read each
    monkeypatch.setenv("QAE_LAB_CHECK_VALUES", "1")  # the debug switch brings the value checks back
    checked = syncs(ours)
    assert len(checked) >= len(quiet) + 3
    # what is left: TRL's own forward, and the metrics (the entropy ledger, the weights' statistics, global means)
    assert set(quiet) <= {"trl or transformers", "host_floats", "trainer.py"}, quiet
    print(
        f"host syncs per micro-batch ({weighting}, sparse={sparse}): qae_lab {len(quiet)}, with checks {len(checked)}, TRL {len(trl)}"
    )
