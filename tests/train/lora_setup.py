"""The generation tests' shared set-up (tests/train/test_generation.py, tests/train/test_vllm.py): the embedded model with a
LoRA adapter that merges to something, and a QAETrainer on it for short CPU runs on synthetic problems."""

from __future__ import annotations

import torch
from peft import get_peft_model

from qae_lab.train.config import QAEConfig
from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.task.models import load_policy, lora_config
from qae_lab.task.rewards import correctness_reward
from qae_lab.train.trainer import QAETrainer

# one step of 2 prompts x 4 completions on the CPU, no KL
SETTINGS = dict(
    use_cpu=True,
    bf16=False,
    report_to=[],
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=12,
    max_steps=1,
    learning_rate=1e-2,
    logging_steps=1,
    save_strategy="no",
    seed=0,
    beta=0.0,
)


def lora_policy(dropout: float = 0.0, dtype=torch.float32, seed: int = 0):
    """The embedded model with LoRA (r = 16 on all seven projections) and random, non-zero B matrices
    (a fresh adapter is the identity: a merge would change nothing), in train mode, and its tokenizer."""
    model, tok = load_policy("embedded", device="cpu")
    torch.manual_seed(seed)  # LoRA's A matrices are drawn from the global generator
    model = get_peft_model(model.to(dtype), lora_config(dropout=dropout))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.train(), tok


def lora_args(tmp_path, **settings) -> QAEConfig:
    """The trainer's config: output in ``tmp_path``, :data:`SETTINGS`, then ``settings`` (later values win)."""
    return QAEConfig(**{"output_dir": str(tmp_path), **SETTINGS, **settings})


def lora_trainer(model, tok, args: QAEConfig, *, reward_funcs=correctness_reward, n_train: int = 8) -> QAETrainer:
    """A QAETrainer of ``model`` on ``n_train`` synthetic problems (seed 0), rewarded by ``reward_funcs``."""
    return QAETrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        processing_class=tok,
        train_dataset=to_grpo_dataset(synthetic_task(n_train, seed=0)),
    )
