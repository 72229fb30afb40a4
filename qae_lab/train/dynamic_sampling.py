r"""DAPO's dynamic sampling inside TRL's generation batch: the prompts a refill draws and the batch it assembles.

DAPO (Yu et al. 2025, arXiv 2503.14476, sec. 3.2) over-samples, drops every group without a learning
signal and refills the batch up to its size, with a cap on the generation rounds. ``QAETrainer`` does it
when ``dynamic_sampling=True``: the first round is TRL's own generation batch; each further round
generates for as many prompts again, drawn by :func:`refill_prompts`; the signal of a group is
:func:`qae_lab.advantages.signal_groups` of the advantages in force; :func:`assemble` takes the first
groups with signal, round by round, into one batch of TRL's size and layout. The decisions (what "no
signal" means under QAE, what happens at the cap) are in docs/dynamic-sampling.md.
"""

from __future__ import annotations

import torch

__all__ = ["refill_prompts", "assemble", "ROW_KEYS", "PADDED_KEYS"]

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


def refill_prompts(n_rows: int, n: int, *, seed: int, step: int, round_: int) -> list[int]:
    r"""The dataset rows a refill round generates for: ``n`` of ``range(n_rows)``, without repeats while
    ``n <= n_rows``, drawn by a generator seeded from the run's ``seed``, the ``step`` and the ``round_``,
    so a resumed run draws what the uninterrupted one would.

    >>> refill_prompts(10, 4, seed=0, step=3, round_=1) == refill_prompts(10, 4, seed=0, step=3, round_=1)
    True
    >>> sorted(refill_prompts(3, 3, seed=0, step=0, round_=1))
    [0, 1, 2]
    """
    if n_rows < 1:
        raise ValueError(f"dynamic_sampling needs a training set with at least one row, got {n_rows}")
    gen = torch.Generator().manual_seed(hash((seed, step, round_)) & (2**63 - 1))
    rows: list[int] = []
    while len(rows) < n:
        rows += torch.randperm(n_rows, generator=gen)[: n - len(rows)].tolist()
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
    first round, in order, to keep TRL's batch size.

    Args:
        rounds: TRL's generation batches (QAETrainer's, with ``advantages`` and ``prompt_hard``), each of
            G-row groups; their padded widths may differ.
        signal: (B_r,) bool per round, :func:`qae_lab.advantages.signal_groups` of its advantages.
        group_size: G.
        n_groups: groups in the batch (TRL's generation batch size / G).
        pad_token_id: the tokenizer's pad id (prompt and completion ids).

    Returns:
        The batch (the keys of :data:`PADDED_KEYS` and :data:`ROW_KEYS` it holds, padded to the widest
        round; ``num_items_in_batch`` counted again over it) and how many of its groups carry no signal.

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
