"""How many times one loss computation enters qae_lab._checks: inputs should be checked once, where they enter.

Counts the calls into a function of ``qae_lab/_checks.py`` made from outside it (a check calling another check is
not a new entry), by the calling module, during

* (a) one call of the public :func:`qae_lab.loss.grpo_loss` on a small batch (SA-AH weighting, QAE's quantile
  advantages, Clip-Cov, the ledger, old log-probs: every room of the loss);
* (b) one ``QAETrainer.compute_loss`` of the embedded tiny model on a generated batch (SA-AH, top-k entropy), with
  the generation replaced by fixed completions, as the trainer tests do; a step after the first.

Measured on this repository's CPU: (a) 50 entries from 4 modules (horizon, entropy_controls, ledger, loss) before the
inputs were checked once, 11 after (8 in grpo_loss's own check, 3 read-backs of metrics, host_floats);
(b) 55 before, 18 after.

    python benchmarks/check_entries.py
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path

import torch

import qae_lab._checks
from qae_lab.advantages import group_advantages
from qae_lab.loss import LossSettings, grpo_loss

CHECKS_FILE = qae_lab._checks.__file__


def count_entries(fn) -> collections.Counter:
    """Calls into qae_lab._checks from outside it while ``fn()`` runs, by (calling module, calling function, check)."""
    counts: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == CHECKS_FILE:
            caller = frame.f_back
            if caller is not None and caller.f_code.co_filename != CHECKS_FILE:
                counts[(Path(caller.f_code.co_filename).stem, caller.f_code.co_name, frame.f_code.co_name)] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def loss_inputs(seed: int = 0) -> dict:
    """A micro-batch of 8 responses (2 prompts, G = 4) of up to 6 tokens, QAE's advantages on binary rewards."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    logps = -torch.rand(8, 6, generator=g, dtype=torch.float64) * 3
    mask = torch.ones(8, 6)
    mask[::3, 4:] = 0  # ragged completions
    return {
        "logps": logps.requires_grad_(),
        "advantages": group_advantages(rewards, 4, baseline="quantile", k=0.4),
        "mask": mask,
        "settings": LossSettings(loss_type="bnpo", token_weighting="sa_ah", cov_penalty="clip_cov", clip_cov_lb=0.0),
        "old_logps": logps.detach() + 0.05 * torch.randn(8, 6, generator=g, dtype=torch.float64),
        "entropies": torch.rand(8, 6, generator=g, dtype=torch.float64) * 2,
        "h_norm": torch.rand(8, 6, generator=g, dtype=torch.float64),
        "hard_rows": torch.tensor([True] * 4 + [False] * 4),
        "generator": torch.Generator().manual_seed(1),
    }


def public_loss_entries() -> collections.Counter:
    """(a): one public grpo_loss call."""
    inputs = loss_inputs()
    return count_entries(lambda: grpo_loss(**inputs))


def trainer_loss_entries(tmp: str) -> collections.Counter:
    """(b): one QAETrainer.compute_loss step of the embedded model on a generated batch of 8 responses (the second)."""
    from datasets import Dataset

    from qae_lab.task.models import load_policy
    from qae_lab.train.config import QAEConfig
    from qae_lab.train.trainer import QAETrainer

    model, tok = load_policy("embedded", device="cpu", dtype=torch.float32)
    args = QAEConfig(
        output_dir=tmp,
        use_cpu=True,
        report_to=[],
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        steps_per_generation=1,
        token_weighting="sa_ah",
        entropy_top_k=20,
        save_strategy="no",
    )
    rows = [{"prompt": p, "reward": r} for p, r in zip(["What is 2 + 3?"] * 4 + ["Hi"] * 4, [1, 0, 0, 0, 1, 1, 1, 0])]
    trainer = QAETrainer(
        model=model,
        reward_funcs=lambda completions, reward, **kw: [float(r) for r in reward],
        args=args,
        processing_class=tok,
        train_dataset=Dataset.from_list(rows),
    )
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; the loss reads it
    fixed = [[20 + i, 30 + i, 40 + i, 50 + (i % 3)][: 2 + i % 3] for i in range(8)]
    trainer._generate_single_turn = lambda prompt_ids, *a, **k: ([list(c) for c in fixed], None)
    batch = trainer._generate_and_score_completions(rows)
    trainer.compute_loss(trainer.model, batch)  # the first step makes the LossSettings of the config, once
    return count_entries(lambda: trainer.compute_loss(trainer.model, batch))


def report(name: str, counts: collections.Counter) -> None:
    print(f"{name}: {sum(counts.values())} entries into qae_lab._checks")
    for (module, caller, check), n in sorted(counts.items()):
        print(f"    {module + '.' + caller:>40} -> {check}: {n}")


if __name__ == "__main__":
    report("(a) grpo_loss, one call", public_loss_entries())
    with tempfile.TemporaryDirectory() as tmp:
        report("(b) QAETrainer.compute_loss, one micro-batch", trainer_loss_entries(tmp))
