r"""DAPO's dynamic sampling inside TRL's generation batch: the prompts a refill draws and the batch it assembles.

DAPO (Yu et al. 2025, arXiv 2503.14476, sec. 3.2) over-samples, drops every group without a learning signal and
refills the batch up to its size, with a cap on the generation rounds; verl's recipe (``dapo/dapo_ray_trainer.py``)
takes each round's prompts from its dataloader, the next ones of the epoch. ``QAETrainer`` does it when
``dynamic_sampling=True``: the first round is TRL's own generation batch; each further round generates for
``ceil(dynamic_sampling_oversample x groups still needed)`` prompts, the next ones of the order TRL's sampler walks
(:func:`epoch_walk`) that the batch does not hold yet (:func:`refill_prompts`); the signal of a group is
:func:`qae_lab.advantages.signal_groups` of the advantages in force; :func:`assemble` takes the first groups with
signal, round by round, into one batch of TRL's size and layout. Where this departs from verl (the refill prompts are
not consumed from the epoch, the first round is not over-sampled, the cap pads instead of raising) and why:
docs/dynamic-sampling.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from fractions import Fraction

import torch

__all__ = ["PADDED_KEYS", "ROW_KEYS", "assemble", "epoch_order", "epoch_walk", "refill_prompts", "refill_size"]

# the generation batch's keys that assemble() knows, each with where it pads and with what; any other key is refused
# (a multimodal batch's pixel values, say): None pads with the tokenizer's pad id
PADDED_KEYS = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 1.0),  # (N, T) per token, or (N, 1) per sequence
}
ROW_KEYS = ("advantages", "prompt_hard")  # (N,) one value per response


def epoch_order(n_rows: int, epoch: int, *, seed: int, shuffle: bool = True) -> list[int]:
    r"""The rows of the training set in the order TRL's ``RepeatSampler`` walks epoch ``epoch`` (from 0) of a run:
    one generator seeded with ``seed``, one ``randperm`` per epoch (``range(n_rows)`` when ``shuffle`` is off).

    >>> epoch_order(4, 0, seed=0, shuffle=False)
    [0, 1, 2, 3]
    >>> sorted(epoch_order(4, 1, seed=0)) == [0, 1, 2, 3] and epoch_order(4, 1, seed=0) == epoch_order(4, 1, seed=0)
    True
    """
    if not shuffle:
        return list(range(n_rows))
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epoch):  # the permutations of the epochs before
        torch.randperm(n_rows, generator=gen)
    return torch.randperm(n_rows, generator=gen).tolist()


def epoch_walk(n_rows: int, batch_size: int, generation: int, *, seed: int, shuffle: bool = True) -> Iterator[int]:
    r"""The rows TRL's sampler hands out after generation batch ``generation`` (from 0, counted over the run): the
    rest of its epoch, then the whole next epoch; each epoch's trailing ``n_rows % batch_size`` rows, which the
    sampler drops, are left out here too. ``batch_size``: B, the prompts of a generation batch; ``seed``,
    ``shuffle``: TRL's sampler's (``args.seed``, ``shuffle_dataset``).

    >>> list(epoch_walk(5, 2, 0, seed=0, shuffle=False))  # batch 0 held rows 0, 1; row 4 is dropped by the sampler
    [2, 3, 0, 1, 2, 3]
    >>> list(epoch_walk(5, 2, 1, seed=0, shuffle=False))  # the last batch of epoch 0: epoch 1 follows
    [0, 1, 2, 3]
    """
    chunks = n_rows // batch_size
    if chunks < 1:
        raise ValueError(
            f"dynamic_sampling needs a training set of at least one batch ({batch_size} rows), got {n_rows}"
        )
    epoch, position = divmod(generation, chunks)
    yield from epoch_order(n_rows, epoch, seed=seed, shuffle=shuffle)[(position + 1) * batch_size : chunks * batch_size]
    yield from epoch_order(n_rows, epoch + 1, seed=seed, shuffle=shuffle)[: chunks * batch_size]


def refill_size(needed: int, oversample: float) -> int:
    r"""Prompts a refill round generates for: ``ceil(oversample x needed)``, in exact arithmetic on the decimal
    ``oversample`` (``1.1 * 10`` is 11.000000000000002 in floats, whose ceiling would be 12).

    >>> refill_size(10, 1.1), refill_size(3, 1.0), refill_size(3, 1.5), refill_size(2, 3)
    (11, 3, 5, 6)
    """
    return math.ceil(Fraction(str(oversample)) * needed)


def refill_prompts(walk: Iterator[int], n: int, taken: set, prompt_of: Callable[[int], Hashable]) -> list[int]:
    r"""The next ``n`` rows of ``walk`` whose prompts are not in ``taken`` (the batch's and earlier rounds'), which it
    extends with theirs; fewer when the walk runs out.

    >>> walk, taken = epoch_walk(6, 2, 0, seed=0, shuffle=False), {"p0", "p1"}  # batch 0 held rows 0, 1
    >>> refill_prompts(walk, 3, taken, lambda i: f"p{i}"), refill_prompts(walk, 3, taken, lambda i: f"p{i}")
    ([2, 3, 4], [5])
    >>> refill_prompts(walk, 3, taken, lambda i: f"p{i}")  # epoch 1 holds no prompt the batch lacks
    []
    """
    rows: list[int] = []
    while len(rows) < n:  # a row is pulled from the walk only when one is still needed
        row = next(walk, None)
        if row is None:
            break
        if prompt_of(row) not in taken:
            taken.add(prompt_of(row))
            rows.append(row)
    return rows


def _pad(t: torch.Tensor, width: int, side: str, value) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    fill = t.new_full((t.shape[0], width - t.shape[1]), value)
    return torch.cat([fill, t] if side == "left" else [t, fill], dim=1)


def assemble(
    rounds: list[dict], signal: list[torch.Tensor], group_size: int, n_groups: int, pad_token_id: int
) -> tuple[dict, int]:
    r"""One generation batch of ``n_groups`` groups from the ``rounds`` TRL generated: the groups with signal
    first (round by round, in order), then, when the rounds hold too few, groups without signal from the
    first round, in order, to keep TRL's batch size. ``rounds`` (QAETrainer's, of G-row groups) may differ in padded
    width; ``signal``: (B_r,) bool per round (:func:`qae_lab.advantages.signal_groups`). Returns the batch (the keys
    of :data:`PADDED_KEYS` and :data:`ROW_KEYS`, padded to the widest round, ``num_items_in_batch`` counted again)
    and how many of its groups carry no signal.

    >>> r = {"prompt_ids": torch.tensor([[5], [5]]), "completion_ids": torch.tensor([[1, 2], [3, 0]]),
    ...      "completion_mask": torch.tensor([[1, 1], [1, 0]]), "advantages": torch.tensor([0., 0.])}
    >>> s = {"prompt_ids": torch.tensor([[6, 7], [6, 7]]), "completion_ids": torch.tensor([[4], [5]]),
    ...      "completion_mask": torch.tensor([[1], [1]]), "advantages": torch.tensor([1., -1.])}
    >>> batch, short = assemble([r, s], [torch.tensor([False]), torch.tensor([True])], 2, 1, pad_token_id=0)
    >>> batch["prompt_ids"].tolist(), batch["completion_ids"].tolist(), short, int(batch["num_items_in_batch"])
    ([[6, 7], [6, 7]], [[4], [5]], 0, 2)
    """
    for i, out in enumerate(rounds):
        unknown = sorted(set(out) - set(PADDED_KEYS) - set(ROW_KEYS) - {"num_items_in_batch"})
        if unknown:
            raise ValueError(
                f"dynamic_sampling cannot assemble a generation batch holding {unknown} (round {i}): it knows "
                f"{sorted(PADDED_KEYS)} and {list(ROW_KEYS)}; set dynamic_sampling=False for this model or task"
            )
    picks = [(r, b) for r, keep in enumerate(signal) for b in keep.nonzero().flatten().tolist()][:n_groups]
    short = n_groups - len(picks)
    if short:  # the cap on rounds came first: groups without signal from the first round keep the batch's size
        picks += [(0, b) for b in (~signal[0]).nonzero().flatten().tolist()[:short]]
    if len(picks) < n_groups:
        raise ValueError(f"dynamic_sampling: the rounds hold {len(picks)} groups, the batch needs {n_groups}")
    rows = {r: [] for r in range(len(rounds))}
    for r, b in picks:
        rows[r] += range(b * group_size, (b + 1) * group_size)
    batch = {}
    for key in [k for k in (*PADDED_KEYS, *ROW_KEYS) if k in rounds[0]]:
        parts = [rounds[r][key][torch.tensor(idx, dtype=torch.long)] for r, idx in rows.items() if idx]
        if key in PADDED_KEYS:
            side, value = PADDED_KEYS[key]
            width = max(p.shape[1] for p in parts)
            parts = [_pad(p, width, side, pad_token_id if value is None else value) for p in parts]
        batch[key] = torch.cat(parts)
    mask = batch["completion_mask"] if "tool_mask" not in batch else batch["completion_mask"] * batch["tool_mask"]
    batch["num_items_in_batch"] = mask.sum()
    return batch, short
