"""Shared setup of the sequence-policy tests: float64, and a small task batch that starts peaked."""

from __future__ import annotations

import torch

from qae_lab.toys.seqpolicy import task_batch

F64 = torch.float64


def peaked(n_seeds=2, n_prompts=4, vocab=2, length=3, seed=0):
    return task_batch(n_seeds, n_prompts, vocab, length, start="peaked", seed=seed, sharpness=1.5)
