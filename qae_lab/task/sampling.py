r"""Sampling completions from a policy: the one batched, seeded ``model.generate`` loop.

:func:`generate_ids` is the loop; :func:`generate` decodes its token ids. Evaluation
(:func:`qae_lab.task.evaluate.evaluate`) and the notebooks' rollouts (:func:`qae_lab.task.rollouts.sample_groups`)
both sample through it, so that a pass@k and a rollout group come from the same distribution.

Implementer's notes: docs/implementation.md, section ``qae_lab.task.sampling``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any

import torch

from qae_lab._checks import check_int

__all__ = [
    "generate",
    "generate_ids",
    "sampling_options",
    "eos_token_ids",
    "decoding_kwargs",
    "generation_mode",
    "model_device",
]


def _check_real(x, name: str, lo: float, hi: float, *, lo_open: bool, hi_open: bool) -> float:
    """``x`` as a float in the interval between lo and hi, open or closed at each end."""
    interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a real number in {interval}, got {x!r}")
    x = float(x)
    below = x <= lo if lo_open else x < lo
    above = x >= hi if hi_open else x > hi
    if math.isnan(x) or below or above:
        raise ValueError(f"{name} must lie in {interval}, got {x}")
    return x


def sampling_options(temperature, top_p, max_new_tokens, batch_size) -> tuple[float, float, int, int]:
    r"""The generation options shared by :func:`generate` and :func:`qae_lab.task.evaluate.evaluate`, validated:
    temperature in (0, inf), top_p in (0, 1], max_new_tokens and batch_size >= 1.

    >>> sampling_options(1, 0.9, 48, 8)
    (1.0, 0.9, 48, 8)
    >>> sampling_options(0.0, 1.0, 48, 8)
    Traceback (most recent call last):
    ValueError: temperature must lie in (0.0, inf), got 0.0
    """
    return (
        _check_real(temperature, "temperature", 0.0, float("inf"), lo_open=True, hi_open=True),
        _check_real(top_p, "top_p", 0.0, 1.0, lo_open=True, hi_open=False),
        check_int(max_new_tokens, "max_new_tokens", 1),
        check_int(batch_size, "batch_size", 1),
    )


def eos_token_ids(model, tokenizer) -> list[int]:
    r"""Every end-of-sequence id the tokenizer or the model's generation config names, tokenizer's first.

    >>> from types import SimpleNamespace as NS
    >>> eos_token_ids(NS(generation_config=NS(eos_token_id=[151645, 151643])), NS(eos_token_id=151645))
    [151645, 151643]
    """
    ids = []
    for src in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        for i in src if isinstance(src, (list, tuple)) else [src]:
            if int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("tokenizer has no eos_token and the model's generation_config names none")
    return ids


def decoding_kwargs(do_sample: bool, temperature: float, top_p: float) -> dict[str, Any]:
    r"""Explicit decoding options, so that none leak in from the checkpoint's generation_config.

    >>> decoding_kwargs(False, 1.0, 1.0)
    {'do_sample': False, 'num_beams': 1, 'repetition_penalty': 1.0, 'no_repeat_ngram_size': 0}
    >>> kw = decoding_kwargs(True, 0.7, 0.9)
    >>> kw["temperature"], kw["top_p"], kw["top_k"], kw["min_p"]    # top_k 0 and min_p 0: off
    (0.7, 0.9, 0, 0.0)
    """
    neutral = {"num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}
    if not do_sample:
        return {"do_sample": False, **neutral}
    return {
        "do_sample": True,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": 0,
        "min_p": 0.0,
        "typical_p": 1.0,
        "epsilon_cutoff": 0.0,
        "eta_cutoff": 0.0,
        **neutral,
    }


@contextlib.contextmanager
def generation_mode(model, tokenizer):
    r"""Eval mode and left padding for the block; the previous state afterwards, even on error.

    >>> from types import SimpleNamespace
    >>> model, tok = torch.nn.Linear(2, 2), SimpleNamespace(padding_side="right")
    >>> with generation_mode(model, tok):
    ...     print(model.training, tok.padding_side)
    False left
    >>> model.training, tok.padding_side
    (True, 'right')
    """
    was_training, old_side = model.training, tokenizer.padding_side
    try:
        model.eval()
        tokenizer.padding_side = "left"
        yield
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)


def model_device(model) -> torch.device:
    r"""The device a model's inputs go to: its ``device`` attribute, else its first parameter's.

    >>> model_device(torch.nn.Linear(2, 2))
    device(type='cpu')
    """
    return getattr(model, "device", None) or next(model.parameters()).device


def generate(model, tokenizer, prompts: list[str], *, num_samples: int = 1, **options) -> list[list[str]]:
    r"""Batched ``model.generate``: ``num_samples`` decoded completions for each prompt (new tokens only, special
    tokens skipped); ``options`` as :func:`generate_ids`.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import prompt_text, synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> recs = synthetic_task(2, seed=0)
    >>> for r in recs:
    ...     print(r["question"])
    Nia has 6 coins and gets 0 more. How many coins does Nia have now?
    Eli has 41 stickers. A friend gives Eli 7 more. How many stickers does Eli have?
    >>> prompts = [prompt_text(r, tok) for r in recs]
    >>> for [text] in generate(model, tok, prompts, max_new_tokens=48, progress=False):  # greedy: 6 right, 49 wrong
    ...     print(repr(text))
    '<reasoning>\n6 + 0 = 6\n</reasoning>\n<answer>\n6\n</answer>'
    '<reasoning>\n41 + 7 = 49\n</reasoning>\n<answer>\n49\n</answer>'
    >>> out = generate(model, tok, prompts, num_samples=3, do_sample=True, max_new_tokens=48, progress=False)
    >>> len(out), [len(s) for s in out]
    (2, [3, 3])
    """
    chunks = generate_ids(model, tokenizer, prompts, num_samples=num_samples, **options)
    out: list[list[str]] = []
    for ids in chunks:  # (b * num_samples, T_b)
        texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
        # num_return_sequences keeps each prompt's samples contiguous
        out.extend(texts[j : j + num_samples] for j in range(0, len(texts), num_samples))
    return out


def generate_ids(
    model,
    tokenizer,
    prompts: list[str],
    *,
    num_samples: int = 1,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = True,
    pace=None,
) -> list[torch.Tensor]:
    r"""The token ids of :func:`generate` before decoding: one (b * num_samples, T_b) CPU tensor of new tokens per
    call of b prompts (EOS, then pad ids), each prompt's samples contiguous.

    Prompts (through the chat template already) are left-padded and tokenized without extra special tokens;
    generation stops at the tokenizer's or the model's EOS ids; the model runs in eval mode under
    ``torch.inference_mode``, its mode restored afterwards. Batch i (``batch_size`` prompts) is sampled after
    ``torch.manual_seed(seed + i)`` inside ``torch.random.fork_rng``: the same seed, batch_size, device and library
    versions give the same completions, and the caller's random state is left alone. ``pace``: a
    :class:`qae_lab.threads.ThreadProbe` that sets torch's thread count batch by batch, or None.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import prompt_text, synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> prompts = [prompt_text(r, tok) for r in synthetic_task(3, seed=0)]
    >>> chunks = generate_ids(model, tok, prompts, num_samples=2, do_sample=True, max_new_tokens=4,
    ...                       batch_size=2, progress=False)     # calls of 2 prompts, then 1
    >>> [tuple(c.shape) for c in chunks]                        # (b * num_samples, T_b)
    [(4, 4), (2, 4)]
    >>> tok.decode(chunks[0][0])                                # every completion starts the same way
    '<reasoning>\n'
    """
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"prompts must be a non-empty list of str, got {type(prompts).__name__} {prompts!r:.80}")
    num_samples = check_int(num_samples, "num_samples", 1)
    if not isinstance(do_sample, bool):
        raise ValueError(f"do_sample must be a bool, got {do_sample!r}")
    if not do_sample and num_samples != 1:
        raise ValueError(f"num_samples must be 1 for greedy decoding (do_sample=False), got {num_samples}")
    temperature, top_p, max_new_tokens, batch_size = sampling_options(temperature, top_p, max_new_tokens, batch_size)
    seed = check_int(seed, "seed", 0)
    if tokenizer.pad_token_id is None:
        raise ValueError("tokenizer has no pad_token; set one first, e.g. tokenizer.pad_token = tokenizer.eos_token")
    from tqdm.auto import tqdm  # comes with the train extra (transformers), which generation needs anyway

    device = model_device(model)
    gen_kwargs = decoding_kwargs(do_sample, temperature, top_p)
    gen_kwargs.update(
        max_new_tokens=max_new_tokens,
        num_return_sequences=num_samples,
        eos_token_id=eos_token_ids(model, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
    )
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    starts = range(0, len(prompts), batch_size)
    chunks = []
    with generation_mode(model, tokenizer), torch.inference_mode(), torch.random.fork_rng(devices=cuda):
        desc = f"sampling x{num_samples}" if do_sample else "greedy"
        for i, start in enumerate(tqdm(starts, desc=desc, unit="batch", disable=not progress)):
            if pace is not None:
                pace.begin()  # this batch's thread count
            batch = tokenizer(
                list(prompts[start : start + batch_size]), return_tensors="pt", padding=True, add_special_tokens=False
            ).to(device)
            torch.manual_seed(seed + i)
            seqs = model.generate(**batch, **gen_kwargs)  # (b * num_samples, T_prompt + T_new)
            # left padding: every prompt ends at column T_prompt, the new tokens follow
            chunks.append(seqs[:, batch["input_ids"].shape[1] :].cpu())  # (b * num_samples, T_new)
            if pace is not None:
                pace.end()
    return chunks
