r"""Rollouts of a real policy for the notebooks: sampled groups, their rewards, their token entropies.

What SA-AH-GRPO (arXiv 2606.05434) needs from a policy on data it sampled: G completions per prompt with binary
rewards (:func:`sample_groups`), each token's normalised entropy H~_t = H(pi(. | x, y_<t)) / log V, exact or
top-k (:func:`completion_entropies`, :func:`top_k_errors`), and the differentiable log pi_theta(y_t | x, y_<t)
(:func:`completion_logps`).

Implementer's notes: docs/implementation.md, section ``qae_lab.task.rollouts``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from qae_lab._checks import check_finite_scalar, check_int, check_mask
from qae_lab.task.answers import strict_is_correct
from qae_lab.task.data import prompt_text
from qae_lab.task.evaluate import validate_records
from qae_lab.horizon import normalised_entropy
from qae_lab.task.sampling import eos_token_ids, generate_ids, generation_mode, model_device

__all__ = [
    "Rollouts",
    "sample_groups",
    "completion_logits",
    "completion_entropies",
    "completion_logps",
    "top_k_errors",
    "uncertain_tokens",
]


@dataclass
class Rollouts:
    r"""G sampled completions for each of B prompts: N = B*G decoded ``completions`` (prompt i's at rows
    i*G .. i*G + G - 1), (N, T) ``completion_ids`` padded after each end, (N, T) 0/1 ``mask`` (EOS included) and
    (N,) 0/1 ``rewards`` (:func:`qae_lab.task.answers.strict_is_correct`).

    >>> recs = [{"question": "1 + 1?", "gold": "2"}, {"question": "2 + 2?", "gold": "4"}]
    >>> ids = torch.tensor([[5, 2, 0], [5, 6, 2], [7, 2, 0], [2, 0, 0]])  # (N, T), N = B*G = 2*2, pad 0, EOS 2
    >>> mask = torch.tensor([[1., 1, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
    >>> ro = Rollouts(recs, ["1 + 1?", "2 + 2?"], 2, ["2", "3", "4", "4"], ids, mask, torch.tensor([1., 0, 1, 1]))
    >>> ro.success_counts, ro.lengths   # c per prompt; tokens per completion, EOS included
    (tensor([1., 2.]), tensor([2., 3., 2., 1.]))
    """

    records: list[dict]
    prompts: list[str]
    group_size: int
    completions: list[str]
    completion_ids: torch.Tensor = field(repr=False)
    mask: torch.Tensor = field(repr=False)
    rewards: torch.Tensor

    @property
    def success_counts(self) -> torch.Tensor:
        r"""(B,) correct completions per prompt, c = sum_j R_j."""
        return self.rewards.view(-1, self.group_size).sum(1)  # (B, G) -> (B,)

    @property
    def lengths(self) -> torch.Tensor:
        r"""(N,) completion lengths in tokens (EOS included)."""
        return self.mask.sum(1)


def _completion_mask(new_ids: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """(n, T) 0/1 mask: 1 up to and including the first EOS of each row (every token if none)."""
    is_eos = torch.isin(new_ids, torch.tensor(eos_ids, device=new_ids.device)).long()  # (n, T)
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before position t
    return (eos_before == 0).float()


def sample_groups(
    model,
    tokenizer,
    records,
    group_size: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 48,
    batch_size: int = 8,
    seed: int = 0,
) -> Rollouts:
    r"""Sample G completions per record and judge them: the rollouts of one GRPO step, seeded as
    :func:`qae_lab.task.sampling.generate_ids`.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> ro = sample_groups(model, tok, synthetic_task(2, seed=0), 4, max_new_tokens=8)
    >>> len(ro.completions), tuple(ro.mask.shape) == tuple(ro.completion_ids.shape), ro.rewards.shape
    (8, True, torch.Size([8]))
    """
    records = validate_records(records)
    group_size = check_int(group_size, "group_size", 2)
    prompts = [prompt_text(r, tokenizer) for r in records]
    options = dict(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size)
    # one (b*G, T_b) per batch, each prompt's G contiguous
    chunks = generate_ids(
        model, tokenizer, prompts, num_samples=group_size, do_sample=True, seed=seed, progress=False, **options
    )
    eos_ids, pad_id = eos_token_ids(model, tokenizer), tokenizer.pad_token_id
    width = max(c.shape[1] for c in chunks)
    ids = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad_id) for c in chunks])  # (N, T)
    mask = _completion_mask(ids, eos_ids)  # (N, T)
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad_id))
    completions = [tokenizer.decode(row[m.bool()], skip_special_tokens=True) for row, m in zip(ids, mask)]
    golds = [r["gold"] for r in records for _ in range(group_size)]
    rewards = torch.tensor([float(strict_is_correct(c, g)) for c, g in zip(completions, golds)])  # (N,)
    return Rollouts(records, prompts, group_size, completions, ids, mask, rewards)


def _check_completions(completion_ids, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate (N, T) ids and a right-padded 0/1 mask of the same shape."""
    ids = completion_ids
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
        got = f"dtype {ids.dtype}, shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"completion_ids must be an integer tensor of shape (N, T), got {got}")
    if 0 in ids.shape:
        raise ValueError(f"completion_ids must hold at least one token of one row, got shape {tuple(ids.shape)}")
    m = check_mask(mask, ids.shape)  # (N, T)
    if bool((m[:, 1:] > m[:, :-1]).any()):
        raise ValueError("mask must be right-padded: each row 1 on its completion tokens, then 0 (no gaps)")
    return ids.long(), m


def _prompt_per_row(prompts, tokenizer, n: int) -> list[str]:
    """B prompt strings (or records) -> N = B*G prompt strings, each repeated G = N / B times."""
    if isinstance(prompts, (str, dict)) or not isinstance(prompts, Sequence) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of str or records, got {type(prompts).__name__}")
    if n % len(prompts):
        raise ValueError(
            f"prompts has {len(prompts)} entries, which does not divide the {n} completion rows "
            f"(give B prompts for N = B*G rows, each prompt's G rows contiguous)"
        )
    texts = [prompt_text(p, tokenizer) if isinstance(p, dict) else p for p in prompts]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("prompts must hold only str or record dicts")
    return [t for t in texts for _ in range(n // len(prompts))]


def _forward_inputs(model, tokenizer, prompts, completion_ids, mask, temperature) -> tuple:
    """Validated (ids (N, T), mask (N, T), N prompt strings, temperature) for a forward of prompt + completion."""
    ids, m = _check_completions(completion_ids, mask)
    texts = _prompt_per_row(prompts, tokenizer, ids.shape[0])
    temperature = check_finite_scalar(temperature, "temperature")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n_vocab = model.get_input_embeddings().num_embeddings
    real_ids = ids[m.bool()]
    if real_ids.numel() and (int(real_ids.min()) < 0 or int(real_ids.max()) >= n_vocab):
        raise ValueError(f"completion_ids must lie in [0, {n_vocab}) (the model's vocabulary) where mask is 1")
    return ids, m, texts, temperature


def _forward_logits(model, tokenizer, texts: list[str], c_ids: torch.Tensor, c_m: torch.Tensor) -> torch.Tensor:
    """(n, T, V) float32 logits from which each of the n completions' T tokens was sampled, on the model's
    device, with whatever grad mode the caller set; the tokenizer pads on the left (:func:`generation_mode`)."""
    device, t = model_device(model), c_ids.shape[1]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)  # left-padded (n, P)
    input_ids = torch.cat([enc["input_ids"], c_ids], 1).to(device)  # (n, P + T)
    attn = torch.cat([enc["attention_mask"], c_m.long()], 1).to(device)  # (n, P + T)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens count from 0
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=positions, logits_to_keep=t + 1)
    # logits at position p predict token p + 1: the last prompt token predicts completion token 0
    return out.logits[:, :-1].float()  # (n, T, V)


def _logit_chunks(
    model, tokenizer, prompts, completion_ids, mask, temperature: float, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ((n, T, V) float32 logits / temperature, (n, T) mask) for successive rows, no grad."""
    ids, m, texts, temperature = _forward_inputs(model, tokenizer, prompts, completion_ids, mask, temperature)
    batch_size = check_int(batch_size, "batch_size", 1)
    with generation_mode(model, tokenizer), torch.no_grad():
        for start in range(0, ids.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            z = _forward_logits(model, tokenizer, texts[rows], ids[rows], m[rows]) / temperature  # (n, T, V)
            yield z.cpu(), m[rows]


def completion_logits(
    model, tokenizer, prompts, completion_ids, mask, *, temperature: float = 1.0, batch_size: int = 16
) -> torch.Tensor:
    r"""The logits z_t / T from which each completion token was sampled, (N, T, V): for a small vocabulary (Qwen2.5's
    151,936: :func:`completion_entropies`). ``prompts``: B strings or records, N / B contiguous completions each;
    ``mask``: right-padded 0/1 (N, T); masked rows are finite but meaningless.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> ids = tok("<reasoning>\n6 + 0 = 6", return_tensors="pt", add_special_tokens=False)["input_ids"]  # (1, T)
    >>> z = completion_logits(model, tok, synthetic_task(1, seed=0), ids, torch.ones_like(ids))
    >>> tuple(z.shape) == (1, ids.shape[1], len(tok)), z.dtype           # (N, T, V)
    (True, torch.float32)
    >>> torch.equal(z[0].argmax(-1), ids[0])    # this is the model's greedy completion: argmax z_t = y_t
    True
    """
    return torch.cat(
        [z for z, _ in _logit_chunks(model, tokenizer, prompts, completion_ids, mask, temperature, batch_size)]
    )


def completion_entropies(
    model,
    tokenizer,
    prompts,
    completion_ids,
    mask,
    *,
    top_k: int | None = None,
    temperature: float = 1.0,
    batch_size: int = 16,
    nats: bool = False,
) -> torch.Tensor:
    r"""H~_t = H(pi(. | x, y_<t)) / log V for every completion token, from one no-grad forward.

    SA-AH-GRPO (arXiv 2606.05434), eq. for H~_t: exact (``top_k=None``) or the paper's estimate H_topk / log V
    (k = 500 there). ``nats``: H_t itself, what TRL logs as ``entropy``. (N, T) float32, 0 where ``mask`` is 0.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> recs = synthetic_task(1, seed=0)
    >>> ids = tok("<reasoning>\n3 + 3 = 6", return_tensors="pt", add_special_tokens=False)["input_ids"]
    >>> h = completion_entropies(model, tok, recs, ids, torch.ones_like(ids))
    >>> h.shape == ids.shape, bool(((h >= 0) & (h <= 1)).all())
    (True, True)
    >>> torch.allclose(completion_entropies(model, tok, recs, ids, torch.ones_like(ids), nats=True),
    ...                h * math.log(len(tok)))                   # H_t = H~_t log V
    True
    """
    if top_k is not None:
        check_int(top_k, "top_k", 1)
    if not isinstance(nats, bool):
        raise ValueError(f"nats must be a bool, got {nats!r}")
    # H~_t = H(softmax(z_t / T)) / log V, exact or from the top-k logits; 0 on padding; with nats, H_t = H~_t log V
    return torch.cat(
        [
            normalised_entropy(z, top_k) * m * (math.log(z.shape[-1]) if nats else 1.0)
            for z, m in _logit_chunks(model, tokenizer, prompts, completion_ids, mask, temperature, batch_size)
        ]
    )


def completion_logps(model, tokenizer, prompts, completion_ids, mask, *, temperature: float = 1.0) -> torch.Tensor:
    r"""log pi_theta(y_t | x, y_<t) = log softmax(z_t / T)[y_t] of every completion token, as TRL computes it, for
    :func:`qae_lab.loss.grpo_loss`: one forward with gradient, in eval mode (no dropout: the function measured
    before and after an update). (N, T) float32 on the model's device, 0 where ``mask`` is 0.

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> ids = tok("<reasoning>\n6 + 0 = 6", return_tensors="pt", add_special_tokens=False)["input_ids"]  # (1, T)
    >>> recs, m = synthetic_task(1, seed=0), torch.ones_like(ids)
    >>> lp = completion_logps(model, tok, recs, ids, m)
    >>> lp.shape == ids.shape, lp.requires_grad, bool((lp <= 0).all())
    (True, True, True)
    >>> z = completion_logits(model, tok, recs, ids, m)                   # (1, T, V), no grad
    >>> torch.allclose(lp.detach(), z.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1))
    True
    """
    ids, m, texts, temperature = _forward_inputs(model, tokenizer, prompts, completion_ids, mask, temperature)
    with generation_mode(model, tokenizer):
        z = _forward_logits(model, tokenizer, texts, ids, m) / temperature  # (N, T, V)
    y = ids.to(z.device)[..., None]  # (N, T, 1)
    # log pi(y_t | x, y_<t) = log softmax(z_t / T)[y_t], 0 on padding
    return torch.log_softmax(z, dim=-1).gather(-1, y).squeeze(-1) * m.to(z.device)  # (N, T)


def top_k_errors(logits: torch.Tensor, mask, ks: Sequence[int]) -> dict[str, list[float]]:
    r"""How far SA-AH's top-k entropy estimate, never above the exact H~_t (the renormalised top-k distribution
    majorises p), is from it over real tokens: per k, ``mean_abs``, ``max_abs``, ``mean_signed``, ``tail_mass``.

    >>> z = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    >>> top_k_errors(z, torch.ones(1, 1), [1, 3])["tail_mass"]
    [0.5, 0.0]
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (N, T, V)")
    real = check_mask(mask, logits.shape[:2]).bool()  # (N, T)
    if not bool(real.any()):
        raise ValueError("mask must mark at least one real token")
    ks = [check_int(k, "ks", 1) for k in ks] if isinstance(ks, Sequence) and len(ks) else None
    if ks is None:
        raise ValueError("ks must be a non-empty sequence of ints >= 1")
    z = logits[real].float()  # (n_tokens, V)
    h_exact = normalised_entropy(z)  # (n_tokens,)
    p = torch.softmax(z, dim=-1)  # (n_tokens, V)
    out: dict[str, list[float]] = {"k": [], "mean_abs": [], "max_abs": [], "mean_signed": [], "tail_mass": []}
    for k in ks:
        diff = normalised_entropy(z, top_k=k) - h_exact  # (n_tokens,)
        out["k"].append(k)
        out["mean_abs"].append(diff.abs().mean().item())
        out["max_abs"].append(diff.abs().max().item())
        out["mean_signed"].append(diff.mean().item())
        # tail mass 1 - sum of the k largest probabilities
        out["tail_mass"].append((1 - p.topk(min(k, p.shape[-1]), dim=-1).values.sum(-1)).clamp(min=0).mean().item())
    return out


def uncertain_tokens(h_norm, completion_ids, mask, tokenizer, n: int = 10, min_count: int = 3) -> list[tuple]:
    r"""The ``n`` sampled tokens (sampled ``min_count`` times or more) whose predicting distribution had the
    highest mean H~: (token text, mean H~ before it, count), most uncertain first.

    >>> from types import SimpleNamespace
    >>> tok = SimpleNamespace(decode=lambda ids: "abc"[ids[0]])      # token id i is the letter "abc"[i]
    >>> ids, h = torch.tensor([[0, 1, 0, 2]]), torch.tensor([[0.25, 0.875, 0.75, 0.125]])
    >>> uncertain_tokens(h, ids, torch.ones(1, 4), tok, n=2, min_count=1)   # "a": (0.25 + 0.75) / 2
    [('b', 0.875, 1), ('a', 0.5, 2)]
    >>> uncertain_tokens(h, ids, torch.ones(1, 4), tok, min_count=2)
    [('a', 0.5, 2)]
    """
    ids, m = _check_completions(completion_ids, mask)
    h = torch.as_tensor(h_norm, dtype=torch.float64)
    if tuple(h.shape) != tuple(ids.shape):
        raise ValueError(f"h_norm must have the shape of completion_ids {tuple(ids.shape)}, got {tuple(h.shape)}")
    n, min_count = check_int(n, "n", 1), check_int(min_count, "min_count", 1)
    real = m.bool()
    tok_ids, h_real = ids[real], h[real]  # (n_tokens,)
    sums = torch.zeros(int(tok_ids.max()) + 1, dtype=torch.float64).index_add_(0, tok_ids, h_real)
    counts = torch.bincount(tok_ids, minlength=sums.numel())
    rows = [
        (tokenizer.decode([i]), (sums[i] / counts[i]).item(), int(counts[i]))
        for i in counts.nonzero().flatten().tolist()
        if counts[i] >= min_count
    ]
    return sorted(rows, key=lambda r: -r[1])[:n]
