r"""Evaluation of a policy on verifiable problems: greedy pass@1, sampled pass@1 and pass@k.

Two ways to score a model on a set of problems, both reported by :func:`evaluate`:

* **Greedy pass@1**: one completion per problem by greedy decoding (argmax at every
  token); the fraction of problems it gets right. Deterministic, cheap, and what most
  papers' "accuracy" means.
* **Sampled pass@1 and pass@k**: n completions per problem sampled at temperature T
  (and nucleus top_p), c of them correct. Sampled pass@1 is the mean of c/n over
  problems, the policy's expected success rate, which RL with verifiable rewards
  optimises. pass@k is the probability that at least one of k samples is right,
  estimated without bias from the n >= k samples by Chen et al. 2021 ("Evaluating Large
  Language Models Trained on Code", the Codex paper, eq. 1):
  pass@k = E_problems[ 1 - C(n-c, k) / C(n, k) ].
  RLVR tends to raise pass@1 more than pass@k (it sharpens what the model can already
  sample); an entropy collapse shows as pass@k falling towards pass@1.

The per-problem success rate p = c/n is also what QAE's regime analysis needs
(arXiv 2509.22611: a prompt is "hard" when p <= 1 - K), see
:meth:`EvalResult.success_rates`.

Completions are judged by :func:`evaluate`'s ``verdict``, by default training's,
:func:`qae_lab.answers.strict_is_correct`; a run also reports the ``lenient`` one
(:func:`qae_lab.answers.is_correct`) beside it. Model output is only ever treated as data: the
answer is extracted with regular expressions (:mod:`qae_lab.answers`), never evaluated or executed.

Where this departs from the references, and why:

* Sampling is pure temperature / nucleus sampling: top_k, min_p, typical_p, repetition
  penalties and the like are switched off explicitly, because ``model.generate`` would
  otherwise take them from the checkpoint's ``generation_config.json`` (Qwen2.5-Instruct
  ships top_k=20 and repetition_penalty=1.05) or from transformers' global default
  (top_k=50), which changes the distribution pass@k is an estimate for.
* ``pass@1`` is computed as the mean of c/n exactly, not through the product form,
  so that it equals the success-rate mean to the last bit.
* GSM8K records have no difficulty level (``level`` None); they are grouped, and
  stored, under level 0, as in :func:`qae_lab.data.to_grpo_dataset`.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from qae_lab._checks import check_int
from qae_lab.answers import extract_answer, strict_is_correct
from qae_lab.data import prompt_text
from qae_lab.runfolder import RunFolderError, atomic_write_text, read_json

__all__ = ["pass_at_k", "generate", "evaluate", "EvalResult",
           # shared with qae_lab.rollouts, which samples the same way
           "generate_ids", "sampling_options", "eos_token_ids", "decoding_kwargs", "validate_records",
           "generation_mode", "model_device"]


# ---------------------------------------------------------------- validation helpers

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
    """The generation options shared by :func:`generate` and :func:`evaluate`, validated."""
    return (_check_real(temperature, "temperature", 0.0, float("inf"), lo_open=True, hi_open=True),
            _check_real(top_p, "top_p", 0.0, 1.0, lo_open=True, hi_open=False),
            check_int(max_new_tokens, "max_new_tokens", 1),
            check_int(batch_size, "batch_size", 1))


# ---------------------------------------------------------------- pass@k

def pass_at_k(n: int, c: int, k: int) -> float:
    r"""The unbiased pass@k estimate from n samples of which c are correct (Chen et al. 2021).

    pass@k = 1 - C(n-c, k) / C(n, k): one minus the probability that k samples drawn
    without replacement from the n are all wrong. The ratio of binomials is computed as
    a product of at most min(k, c) factors, never as huge integers:

    C(n-c, k) / C(n, k) = prod_{i=0}^{k-1} (n-c-i) / (n-i) = prod_{j=n-c+1}^{n} (j-k) / j.

    Args:
        n: samples drawn for the problem, n >= 1.
        c: how many of them are correct, 0 <= c <= n.
        k: the k of pass@k, 1 <= k <= n.

    Returns:
        float in [0, 1]; exactly 1.0 when n - c < k (every k-subset holds a correct
        sample) and exactly 0.0 when c = 0.

    >>> pass_at_k(8, 0, 4), pass_at_k(8, 2, 1), pass_at_k(8, 5, 4)
    (0.0, 0.25, 1.0)
    >>> round(pass_at_k(8, 2, 4), 6)     # 1 - C(6,4)/C(8,4) = 1 - 15/70
    0.785714
    """
    n = check_int(n, "n", 1)
    c = check_int(c, "c", 0, n)
    k = check_int(k, "k", 1, n)
    if n - c < k:  # fewer wrong samples than k: every k-subset contains a correct one
        return 1.0
    if c == 0:
        return 0.0
    if k <= c:
        # C(n-c, k) / C(n, k) = prod_{i=0}^{k-1} (n-c-i) / (n-i)
        all_wrong = 1.0
        for i in range(k):
            all_wrong *= (n - c - i) / (n - i)
    else:
        # the same ratio with c factors: prod_{j=n-c+1}^{n} (1 - k/j)  (the Codex paper's form)
        all_wrong = 1.0
        for j in range(n - c + 1, n + 1):
            all_wrong *= (j - k) / j
    return 1.0 - all_wrong


# ---------------------------------------------------------------- generation

def eos_token_ids(model, tokenizer) -> list[int]:
    """Every end-of-sequence id the tokenizer or the model's generation config names."""
    ids = []
    for src in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        for i in (src if isinstance(src, (list, tuple)) else [src]):
            if int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("tokenizer has no eos_token and the model's generation_config names none")
    return ids


def decoding_kwargs(do_sample: bool, temperature: float, top_p: float) -> dict[str, Any]:
    """Explicit decoding options, so that none leak in from the checkpoint's generation_config."""
    neutral = {"num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}
    if not do_sample:
        return {"do_sample": False, **neutral}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0, "min_p": 0.0,
            "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, **neutral}


@contextlib.contextmanager
def generation_mode(model, tokenizer):
    """Eval mode and left padding for the block; the previous state afterwards, even on error."""
    was_training, old_side = model.training, tokenizer.padding_side
    try:
        model.eval()
        tokenizer.padding_side = "left"
        yield
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)


def model_device(model) -> torch.device:
    """The device a model's inputs go to."""
    return getattr(model, "device", None) or next(model.parameters()).device


def generate(model, tokenizer, prompts: list[str], *, num_samples: int = 1, do_sample: bool = False,
             temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 256, batch_size: int = 16,
             seed: int = 0, progress: bool = True) -> list[list[str]]:
    r"""Batched ``model.generate``: ``num_samples`` decoded completions for each prompt.

    The token ids come from :func:`generate_ids`, the one sampling loop (also
    :func:`qae_lab.rollouts.sample_groups`'s). Prompts are left-padded (``tokenizer.padding_side`` is set to ``"left"`` for the call
    and restored afterwards) and tokenized without extra special tokens, since a chat
    template already writes them. Generation stops at the tokenizer's or the model's EOS
    ids. Only the new tokens are decoded, special tokens skipped. The model runs in eval
    mode under ``torch.inference_mode`` and is put back in training mode afterwards if it
    was in it.

    Determinism: batch i is sampled after ``torch.manual_seed(seed + i)``, inside
    ``torch.random.fork_rng`` so that the caller's random state is left as it was. The
    same seed, batch_size, device and library versions give the same completions.

    Args:
        model: a causal LM with ``.generate`` (any ``transformers`` ``*ForCausalLM``).
        tokenizer: its tokenizer; it needs a ``pad_token``.
        prompts: list of B prompt strings (already through the chat template).
        num_samples: completions per prompt, >= 1; must be 1 when ``do_sample=False``.
        do_sample: sample (True) or decode greedily (False).
        temperature: softmax temperature T > 0 (used when sampling).
        top_p: nucleus mass in (0, 1]; 1 disables it (used when sampling).
        max_new_tokens: the most tokens generated per completion, >= 1.
        batch_size: prompts per ``model.generate`` call, >= 1; one call generates
            batch_size * num_samples sequences.
        seed: base seed (int).
        progress: show a ``tqdm`` progress bar over the batches.

    Returns:
        list of B lists of ``num_samples`` strings, in the order of ``prompts``.

    >>> from transformers import AutoModelForCausalLM, AutoTokenizer    # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
    >>> model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
    >>> out = generate(model, tok, ["<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"],
    ...                num_samples=4, do_sample=True, temperature=0.7, max_new_tokens=16)  # doctest: +SKIP
    >>> len(out), len(out[0])                                           # doctest: +SKIP
    (1, 4)
    """
    chunks = generate_ids(model, tokenizer, prompts, num_samples=num_samples, do_sample=do_sample,
                          temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size,
                          seed=seed, progress=progress)
    out: list[list[str]] = []
    for ids in chunks:  # (b * num_samples, T_b)
        texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
        # num_return_sequences keeps each prompt's samples contiguous
        out.extend(texts[j:j + num_samples] for j in range(0, len(texts), num_samples))
    return out


def generate_ids(model, tokenizer, prompts: list[str], *, num_samples: int = 1, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 256, batch_size: int = 16,
                 seed: int = 0, progress: bool = True) -> list[torch.Tensor]:
    r"""The token ids of :func:`generate` (same arguments, padding, seeding), before decoding.

    Returns one (b * num_samples, T_b) long tensor on the CPU per ``model.generate`` call of b
    prompts: the new tokens (EOS, then pad ids), each prompt's samples contiguous.
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
    from tqdm.auto import tqdm

    device = model_device(model)
    gen_kwargs = decoding_kwargs(do_sample, temperature, top_p)
    gen_kwargs.update(max_new_tokens=max_new_tokens, num_return_sequences=num_samples,
                      eos_token_id=eos_token_ids(model, tokenizer), pad_token_id=tokenizer.pad_token_id)
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    starts = range(0, len(prompts), batch_size)
    chunks = []
    with generation_mode(model, tokenizer), torch.inference_mode(), torch.random.fork_rng(devices=cuda):
        desc = f"sampling x{num_samples}" if do_sample else "greedy"
        for i, start in enumerate(tqdm(starts, desc=desc, unit="batch", disable=not progress)):
            batch = tokenizer(list(prompts[start:start + batch_size]), return_tensors="pt", padding=True,
                              add_special_tokens=False).to(device)
            torch.manual_seed(seed + i)
            seqs = model.generate(**batch, **gen_kwargs)  # (b * num_samples, T_prompt + T_new)
            # left padding: every prompt ends at column T_prompt, the new tokens follow
            chunks.append(seqs[:, batch["input_ids"].shape[1]:].cpu())  # (b * num_samples, T_new)
    return chunks


# ---------------------------------------------------------------- evaluation

@dataclass
class EvalResult:
    r"""What :func:`evaluate` measured.

    Attributes:
        summary: metrics over all problems: ``n_problems``, ``n_samples`` (n per problem),
            ``greedy_pass@1`` (when greedy decoding ran), ``pass@1`` (mean c/n),
            ``pass@k`` for each k asked for, ``extracted_frac`` (the fraction of sampled
            completions with an extractable answer: a format check).
        by_level: the same metrics per difficulty level (GSM8K, level None: level 0).
        problems: one dict per problem: ``id``, ``level``, ``question``, ``gold``,
            ``greedy`` (``{"completion", "extracted", "correct"}``, or None),
            ``samples`` (a list of such dicts), ``n_correct`` (c), ``success_rate`` (c/n).

    >>> r = EvalResult({"pass@1": 0.5}, {0: {"pass@1": 0.5}},
    ...                [{"id": "a", "success_rate": 0.25}, {"id": "b", "success_rate": 0.75}])
    >>> r.success_rates()
    [0.25, 0.75]
    """

    summary: dict[str, float]
    by_level: dict[int, dict[str, float]]
    problems: list[dict] = field(repr=False)

    def success_rates(self) -> list[float]:
        r"""Per-problem sampled success rates p = c/n, in the order of the records."""
        return [p["success_rate"] for p in self.problems]

    def to_json(self, path: str | os.PathLike) -> Path:
        r"""Write summary, by_level and problems to ``path`` as JSON (level keys become strings); return the path.

        Atomic (:func:`qae_lab.runfolder.atomic_write_text`): an interrupted write leaves the old file or none."""
        data = {"summary": self.summary, "by_level": {str(k): v for k, v in self.by_level.items()},
                "problems": self.problems}
        return atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False))

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> EvalResult:
        r"""Read back what :meth:`to_json` wrote (level keys as ints again); a damaged file is named."""
        data = read_json(path, "evaluation")
        if not isinstance(data, dict) or not {"summary", "by_level", "problems"} <= set(data):
            raise RunFolderError(f"evaluation {path} is damaged (needs summary, by_level and problems)")
        return cls(data["summary"], {int(k): v for k, v in data["by_level"].items()}, data["problems"])


def validate_records(records) -> list[dict]:
    """Problem records (dicts with prompt, gold, level) checked, as a list."""
    if not isinstance(records, (list, tuple)) or not records:
        raise ValueError(f"records must be a non-empty list of dicts, got {type(records).__name__}")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or "gold" not in rec or "question" not in rec:
            raise ValueError(f"records[{i}] must be a dict with 'question' and 'gold' keys, got {rec!r:.80}")
    return list(records)


def _check_ks(ks, num_samples: int) -> list[int]:
    ks = [ks] if isinstance(ks, numbers.Integral) else ks
    try:
        ks = list(ks)
    except TypeError:
        raise ValueError(f"ks must be a sequence of ints in [1, num_samples={num_samples}], got {ks!r}") from None
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= num_samples:
            raise ValueError(f"ks must hold ints in [1, num_samples={num_samples}], got {k!r} in {ks!r}")
    return sorted({int(k) for k in ks})


def _judged(completion: str, gold: str, verdict: Callable, lenient: Callable | None) -> dict[str, Any]:
    """One completion with its extracted answer and verdict(s) (the completion is only ever parsed)."""
    out = {"completion": completion, "extracted": extract_answer(completion),
           "correct": bool(verdict(completion, gold))}
    if lenient is not None:
        out["correct_lenient"] = bool(lenient(completion, gold))
    return out


def _lenient_metrics(problems: list[dict], num_samples: int, greedy: bool) -> dict[str, float]:
    """``lenient_pass@1`` (mean c/n by the lenient verdict) and ``lenient_greedy_pass@1``."""
    out = {"lenient_pass@1": sum(sum(s["correct_lenient"] for s in p["samples"]) / num_samples
                                 for p in problems) / len(problems)}
    if greedy:
        out["lenient_greedy_pass@1"] = sum(p["greedy"]["correct_lenient"] for p in problems) / len(problems)
    return out


def _metrics(problems: list[dict], ks: list[int], greedy: bool) -> dict[str, float]:
    """Summary metrics of a list of judged problems (all with the same n)."""
    n = len(problems[0]["samples"])
    out: dict[str, float] = {"n_problems": len(problems), "n_samples": n}
    if greedy:
        out["greedy_pass@1"] = sum(p["greedy"]["correct"] for p in problems) / len(problems)
    # sampled pass@1 = mean_q c_q / n
    out["pass@1"] = sum(p["success_rate"] for p in problems) / len(problems)
    for k in ks:
        if k != 1:
            # pass@k = mean_q [1 - C(n - c_q, k) / C(n, k)]
            out[f"pass@{k}"] = sum(pass_at_k(n, p["n_correct"], k) for p in problems) / len(problems)
    n_extracted = sum(s["extracted"] is not None for p in problems for s in p["samples"])
    out["extracted_frac"] = n_extracted / (n * len(problems))
    return out


def evaluate(model, tokenizer, records, *, num_samples: int = 8, ks=(1, 8), greedy: bool = True,
             temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 256, batch_size: int = 16,
             seed: int = 0, progress: bool = True, verdict: Callable = strict_is_correct,
             lenient: Callable | None = None) -> EvalResult:
    r"""Greedy pass@1, sampled pass@1 and pass@k of ``model`` on ``records``.

    Each record's prompt is :func:`qae_lab.data.prompt_text` (the format system prompt and
    the question through the tokenizer's chat template). Completions are judged by
    ``verdict`` against the record's ``gold``.

    Args:
        model, tokenizer: a causal LM and its tokenizer (with a chat template and a pad token).
        records: non-empty list of records (dicts with ``question`` and ``gold``, see
            :mod:`qae_lab.data`).
        num_samples: n, sampled completions per problem, >= 1.
        ks: the k of each pass@k to report, ints in [1, num_samples] (a bare int means (k,)).
        greedy: also decode one greedy completion per problem (``greedy_pass@1``).
        temperature: sampling temperature T > 0.
        top_p: nucleus mass in (0, 1].
        max_new_tokens, batch_size, seed, progress: as in :func:`generate` (batch_size
            counts prompts; the sampled pass runs batch_size * num_samples sequences at once).
        verdict: ``verdict(completion, gold) -> bool``, what ``correct`` and every pass@ count:
            :func:`qae_lab.answers.strict_is_correct` (default), or e.g. :func:`qae_lab.answers.is_correct`.
        lenient: None, or a second verdict recorded per completion as ``correct_lenient`` and
            summarised as ``lenient_pass@1`` (and ``lenient_greedy_pass@1``); not per level.

    Returns:
        :class:`EvalResult` with ``summary``, ``by_level`` and per-problem ``problems``.

    >>> from qae_lab.embedded import DEFAULT_DIR                         # doctest: +SKIP
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer     # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained(DEFAULT_DIR)                 # doctest: +SKIP
    >>> model = AutoModelForCausalLM.from_pretrained(DEFAULT_DIR)        # doctest: +SKIP
    >>> from qae_lab.data import synthetic_task                          # doctest: +SKIP
    >>> res = evaluate(model, tok, synthetic_task(50), num_samples=8, ks=(1, 4, 8))  # doctest: +SKIP
    >>> sorted(res.summary)                                              # doctest: +SKIP
    ['extracted_frac', 'greedy_pass@1', 'n_problems', 'n_samples', 'pass@1', 'pass@4', 'pass@8']
    """
    records = validate_records(records)
    num_samples = check_int(num_samples, "num_samples", 1)
    ks = _check_ks(ks, num_samples)
    if not isinstance(greedy, bool):
        raise ValueError(f"greedy must be a bool, got {greedy!r}")
    if not callable(verdict) or not (lenient is None or callable(lenient)):
        raise ValueError(f"verdict (and lenient, unless None) must be functions (completion, gold) -> bool, "
                         f"got {verdict!r:.60} and {lenient!r:.60}")
    sampling_options(temperature, top_p, max_new_tokens, batch_size)
    check_int(seed, "seed", 0)
    prompts = [prompt_text(rec, tokenizer) for rec in records]
    common = {"max_new_tokens": max_new_tokens, "batch_size": batch_size, "seed": seed, "progress": progress}
    greedy_out = generate(model, tokenizer, prompts, **common) if greedy else None
    sampled = generate(model, tokenizer, prompts, num_samples=num_samples, do_sample=True, temperature=temperature,
                       top_p=top_p, **common)
    problems = []
    for i, rec in enumerate(records):
        gold = str(rec["gold"])
        samples = [_judged(s, gold, verdict, lenient) for s in sampled[i]]
        c = sum(s["correct"] for s in samples)
        problems.append({"id": rec.get("id", i), "level": rec.get("level") or 0, "question": rec["question"],
                         "gold": gold, "greedy": _judged(greedy_out[i][0], gold, verdict, lenient) if greedy else None,
                         "samples": samples, "n_correct": c, "success_rate": c / num_samples})
    levels = sorted({p["level"] for p in problems})
    by_level = {lv: _metrics([p for p in problems if p["level"] == lv], ks, greedy) for lv in levels}
    summary = _metrics(problems, ks, greedy)
    if lenient is not None:
        summary.update(_lenient_metrics(problems, num_samples, greedy))
    return EvalResult(summary, by_level, problems)
