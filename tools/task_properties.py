r"""What a task and a policy offer RL before any RL step: diversity, length, entropy, regimes, format, reflection.

The papers' phenomena need a policy with something to lose or gain: several correct solutions per
prompt (sharpening shows as fewer of them), lengths that vary (SA-AH-GRPO reports its responses
shortening, arXiv 2606.05434), real token entropy (QAE's entropy claims, arXiv 2509.22611; SA-AH's
horizon weights act on uncertain tokens), prompts in both of QAE's regimes and some never solved,
imperfect format (so SA-AH's composite reward takes varied values and a group's mean can sit above
some correct answers) and reflective words. :func:`task_properties` measures all of them on G
samples per prompt at the training temperature; :data:`TARGETS` states the bands the sums model
(``embedded-sums``, :mod:`qae_lab.task.sums`) was built to reach, and :func:`property_table` prints both.
``benchmarks/task_properties.py`` writes the table into the model's README.

Token regions (:func:`reasoning_tokens`): a completion token is a *reasoning* token when its text lies
inside the ``<reasoning>`` block's content (up to ``</reasoning>``, or up to ``<answer>`` when the
block is never closed); every other token (tags, the answer block, EOS) is a *format* token.
Entropies are in nats, H(pi(. | x, y_<t)) at temperature T, exact over the whole vocabulary.
"""

from __future__ import annotations

import math
import statistics

import torch

from qae_lab._checks import check_int, check_k
from qae_lab.advantages import advantage_stats, group_advantages, hard_regime
from qae_lab.task.behaviour import diversity_stats, reflection_counts
from qae_lab.task.rewards import strict_composite_reward, strict_format_reward
from qae_lab.task.rollouts import completion_entropies, sample_groups

__all__ = ["TARGETS", "reasoning_tokens", "task_properties", "property_table"]

# property -> (lower bound, upper bound, what it is); None: no bound on that side
TARGETS: dict[str, tuple[float | None, float | None, str]] = {
    "distinct_correct": (4.0, None, "distinct correct completions among G samples of a prompt (mean)"),
    "length_cv": (0.15, None, "within-prompt length std / mean (mean over prompts)"),
    "length_q05": (30.0, None, "completion length, 5th percentile (tokens)"),
    "length_q95": (None, 130.0, "completion length, 95th percentile (tokens)"),
    "entropy_reasoning": (0.15, None, "mean token entropy at T = 1 on reasoning tokens (nats)"),
    "entropy_format": (None, None, "mean token entropy at T = 1 on format tokens (nats)"),
    "hard_frac": (0.25, None, "prompts hard for QAE at K = 0.4 (p <= 0.6)"),
    "easy_frac": (0.25, None, "prompts easy for QAE at K = 0.4 (p > 0.6)"),
    "never_solved_frac": (0.01, None, "prompts with no correct sample"),
    "format_compliance": (0.70, 0.90, "completions in the strict XML format"),
    "neg_correct_group_frac": (
        0.05,
        None,
        "groups where the mean baseline gives a correct answer A < 0 (composite reward)",
    ),
    "reflect_frac": (0.02, None, "completions with a reflective word"),
}


def reasoning_tokens(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""(N, T) bool: True on completion tokens whose text lies inside the ``<reasoning>`` block's content.

    Each token's text is decoded alone and the texts are laid end to end (byte-level BPE: that is the
    completion's text); a token counts when it starts at or after the end of ``<reasoning>`` and ends at or
    before the start of ``</reasoning>`` (or of ``<answer>`` when the block is not closed).

    >>> from transformers import AutoTokenizer
    >>> from qae_lab.task.models import embedded_dir
    >>> tok = AutoTokenizer.from_pretrained(embedded_dir("embedded-sums"))
    >>> ids = tok("<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>", return_tensors="pt")["input_ids"]
    >>> inside = reasoning_tokens(tok, ids, torch.ones_like(ids))
    >>> tok.decode(ids[0][inside[0]])  # the content's own newlines are reasoning text too
    '\n3 + 4 = 7\n'
    """
    out = torch.zeros(completion_ids.shape, dtype=torch.bool)
    for i, (row, m) in enumerate(zip(completion_ids.tolist(), mask.bool().tolist())):
        pieces = [tokenizer.decode([t]) if keep else "" for t, keep in zip(row, m)]
        text = "".join(pieces)
        start = text.find("<reasoning>")
        if start < 0:
            continue
        start += len("<reasoning>")
        end = text.find("</reasoning>", start)
        end = text.find("<answer>", start) if end < 0 else end
        end = len(text) if end < 0 else end
        pos = 0
        for j, piece in enumerate(pieces):
            out[i, j] = bool(piece) and pos >= start and pos + len(piece) <= end
            pos += len(piece)
    return out


def _region_entropy(h_nats: torch.Tensor, region: torch.Tensor) -> float:
    n = int(region.sum())
    return float(h_nats[region].sum()) / n if n else float("nan")


def task_properties(
    model,
    tokenizer,
    records,
    *,
    group_size: int = 16,
    max_new_tokens: int = 160,
    temperature: float = 1.0,
    k: float = 0.4,
    seed: int = 0,
    batch_size: int = 8,
) -> dict[str, float]:
    r"""Measure :data:`TARGETS`' properties (and a few more) of a policy on ``records``, G samples each.

    Args:
        model, tokenizer: the policy (e.g. :func:`qae_lab.task.models.load_policy`).
        records: the prompts (:mod:`qae_lab.task.data`'s record shape, with ``gold``).
        group_size: G samples per prompt (>= 2); max_new_tokens, temperature, seed, batch_size: sampling
            (:func:`qae_lab.task.rollouts.sample_groups`).
        k: QAE's K for the regime split.

    Returns:
        dict of floats: every key of :data:`TARGETS`, plus ``pass@1`` (mean p), ``always_solved_frac``,
        ``length_mean``, ``length_min``, ``length_max``, ``top_share``, ``composite_correct_values``
        (mean number of different composite scores among a group's correct answers) and ``n_prompts``.

    >>> from qae_lab.task.models import load_policy
    >>> from qae_lab.task.sums import sums_task
    >>> model, tok = load_policy("embedded-sums", device="cpu")
    >>> props = task_properties(model, tok, sums_task(2, seed=9), group_size=4, max_new_tokens=32)
    >>> sorted(props)[:4], props["n_prompts"]
    (['always_solved_frac', 'composite_correct_values', 'distinct_correct', 'easy_frac'], 2.0)
    """
    check_int(group_size, "group_size", 2)
    k = check_k(k)
    ro = sample_groups(
        model,
        tokenizer,
        records,
        group_size,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
    )
    g, b = group_size, len(ro.records)
    vocab = model.get_output_embeddings().weight.shape[0]
    h = completion_entropies(model, tokenizer, ro.prompts, ro.completion_ids, ro.mask, temperature=temperature)
    h_nats = h * math.log(vocab)  # (N, T): H~_t * log V
    inside = reasoning_tokens(tokenizer, ro.completion_ids, ro.mask)  # (N, T)
    lengths = ro.lengths.view(b, g)  # (B, G)
    p = ro.success_counts / g  # (B,)
    golds = [r["gold"] for r in ro.records for _ in range(g)]
    composite = torch.tensor(strict_composite_reward(ro.completions, gold=golds), dtype=torch.float64)  # (N,)
    neg_correct = [
        advantage_stats(
            composite[i * g : (i + 1) * g],
            group_advantages(composite[i * g : (i + 1) * g], g, baseline="mean"),
            g,
            k,
            success_threshold=5.0,
        )["neg_correct"]
        > 0
        for i in range(b)
    ]
    correct_values = [
        len({v for v, r in zip(composite[i * g : (i + 1) * g].tolist(), ro.rewards[i * g : (i + 1) * g]) if r > 0})
        for i in range(b)
    ]
    diversity = diversity_stats(ro.completions, ro.rewards.tolist(), g)
    flat = ro.lengths.tolist()
    q = statistics.quantiles(flat, n=20) if len(flat) > 1 else flat * 19
    hard = hard_regime(ro.success_counts, g, k)
    return {
        "n_prompts": float(b),
        "pass@1": float(p.mean()),
        "distinct_correct": diversity["distinct_correct"],
        "top_share": diversity["top_share"],
        "length_mean": float(ro.lengths.mean()),
        "length_min": min(flat),
        "length_max": max(flat),
        "length_q05": q[0],
        "length_q95": q[-1],
        "length_cv": float((lengths.std(1) / lengths.mean(1)).mean()),
        "entropy_reasoning": _region_entropy(h_nats, inside),
        "entropy_format": _region_entropy(h_nats, ro.mask.bool() & ~inside),
        "hard_frac": float(hard.double().mean()),
        "easy_frac": float((~hard).double().mean()),
        "never_solved_frac": float((p == 0).double().mean()),
        "always_solved_frac": float((p == 1).double().mean()),
        "format_compliance": statistics.fmean(strict_format_reward(ro.completions)),
        "neg_correct_group_frac": statistics.fmean(map(float, neg_correct)),
        "composite_correct_values": statistics.fmean(correct_values),
        "reflect_frac": float((reflection_counts(ro.completions) > 0).double().mean()),
    }


def property_table(props: dict[str, float]) -> str:
    r"""A markdown table of :data:`TARGETS`: each property's value, its band and whether it is met.

    >>> print(property_table({"distinct_correct": 5.2, "format_compliance": 0.95}).splitlines()[2])
    | distinct correct completions among G samples of a prompt (mean) | `distinct_correct` | 5.20 | >= 4 | yes |
    """
    lines = ["| property | key | measured | target | met |", "| --- | --- | --- | --- | --- |"]
    for key, (lo, hi, what) in TARGETS.items():
        if key not in props:
            continue
        value = props[key]
        band = (
            " and ".join(
                x for x in (f">= {lo:g}" if lo is not None else "", f"<= {hi:g}" if hi is not None else "") if x
            )
            or "(reported)"
        )
        met = (lo is None or value >= lo) and (hi is None or value <= hi)
        verdict = "—" if lo is None and hi is None else "yes" if met else "NO"
        lines.append(f"| {what} | `{key}` | {value:.2f} | {band} | {verdict} |")
    return "\n".join(lines)
