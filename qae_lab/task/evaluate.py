r"""Evaluation of a policy on verifiable problems: greedy pass@1, sampled pass@1 and pass@k.

:func:`evaluate` reports greedy pass@1 (most papers' "accuracy"); sampled pass@1, the mean of c/n over n samples
at temperature T, what RL with verifiable rewards optimises; pass@k by Chen et al. 2021's unbiased estimate
(arXiv 2107.03374, eq. 1), pass@k = E_problems[ 1 - C(n-c, k) / C(n, k) ], which falls towards pass@1 in an
entropy collapse; and the samples' diversity (:func:`qae_lab.task.behaviour.diversity_stats`).

Implementer's notes: docs/implementation.md, section ``qae_lab.task.evaluate``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qae_lab._checks import check_int
from qae_lab.task.answers import extract_answer, strict_is_correct
from qae_lab.task.behaviour import diversity_stats
from qae_lab.task.data import prompt_text
from qae_lab.storage.folder import RunFolderError, atomic_write_text, read_json
from qae_lab.task.sampling import generate, sampling_options

__all__ = ["pass_at_k", "evaluate", "EvalResult", "validate_records"]


# ---------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    r"""The unbiased pass@k = 1 - C(n-c, k) / C(n, k) from n samples of which c are correct (Chen et al. 2021):
    exact integers rounded once, so exactly 1.0 when n - c < k and 0.0 when c = 0.

    >>> pass_at_k(8, 0, 4), pass_at_k(8, 2, 1), pass_at_k(8, 5, 4)
    (0.0, 0.25, 1.0)
    >>> round(pass_at_k(8, 2, 4), 6)     # 1 - C(6,4)/C(8,4) = 1 - 15/70
    0.785714
    """
    n = check_int(n, "n", 1)
    c = check_int(c, "c", 0, n)
    k = check_int(k, "k", 1, n)
    # pass@k = 1 - C(n-c, k) / C(n, k); C(n-c, k) = 0 when n - c < k
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# ---------------------------------------------------------------- evaluation


@dataclass
class EvalResult:
    r"""What :func:`evaluate` measured: the ``summary`` metrics, the same ``by_level`` (GSM8K's None: level 0),
    and one dict per problem (``greedy`` and each of ``samples`` a ``{"completion", "extracted", "correct"}``).

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

        Atomic (:func:`qae_lab.storage.folder.atomic_write_text`): an interrupted write leaves the old file or none."""
        data = {
            "summary": self.summary,
            "by_level": {str(k): v for k, v in self.by_level.items()},
            "problems": self.problems,
        }
        return atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False))

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> EvalResult:
        r"""Read back what :meth:`to_json` wrote (level keys as ints again); a damaged file is named."""
        data = read_json(path, "evaluation")
        if not isinstance(data, dict) or not {"summary", "by_level", "problems"} <= set(data):
            raise RunFolderError(f"evaluation {path} is damaged (needs summary, by_level and problems)")
        return cls(data["summary"], {int(k): v for k, v in data["by_level"].items()}, data["problems"])


def validate_records(records) -> list[dict]:
    r"""Problem records checked (each a dict with at least ``question`` and ``gold``), as a list.

    >>> validate_records(({"question": "2 + 2?", "gold": "4"},))
    [{'question': '2 + 2?', 'gold': '4'}]
    >>> validate_records([{"question": "2 + 2?"}])
    Traceback (most recent call last):
    ValueError: records[0] must be a dict with 'question' and 'gold' keys, got {'question': '2 + 2?'}
    """
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
    out = {
        "completion": completion,
        "extracted": extract_answer(completion),
        "correct": bool(verdict(completion, gold)),
    }
    if lenient is not None:
        out["correct_lenient"] = bool(lenient(completion, gold))
    return out


def _lenient_metrics(problems: list[dict], num_samples: int, greedy: bool) -> dict[str, float]:
    """``lenient_pass@1`` (mean c/n by the lenient verdict) and ``lenient_greedy_pass@1``."""
    out = {
        "lenient_pass@1": sum(sum(s["correct_lenient"] for s in p["samples"]) / num_samples for p in problems)
        / len(problems)
    }
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
    # how many different right texts the n samples of a problem hold, and the share of the most frequent text
    diversity = diversity_stats(
        [s["completion"] for p in problems for s in p["samples"]],
        [s["correct"] for p in problems for s in p["samples"]],
        n,
    )
    out["distinct_correct"], out["top_share"] = diversity["distinct_correct"], diversity["top_share"]
    return out


def evaluate(
    model,
    tokenizer,
    records,
    *,
    num_samples: int = 8,
    ks=(1, 8),
    greedy: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = True,
    verdict: Callable = strict_is_correct,
    lenient: Callable | None = None,
    pace=None,
) -> EvalResult:
    r"""Greedy pass@1, sampled pass@1 and pass@k of ``model`` on ``records``.

    Prompts by :func:`qae_lab.task.data.prompt_text`; ``num_samples`` n per problem; ``ks`` in [1, n] (a bare int
    means (k,)); generation options as :func:`qae_lab.task.sampling.generate` (``batch_size`` counts prompts; one
    ``pace`` times the greedy batches, then the sampled). ``verdict(completion, gold) -> bool`` decides ``correct``
    and every pass@; ``lenient``: a second verdict, summarised as ``lenient_pass@1`` (not per level).

    >>> from qae_lab.task.models import load_policy; from qae_lab.task.data import synthetic_task
    >>> model, tok = load_policy("embedded", device="cpu")
    >>> res = evaluate(model, tok, synthetic_task(2, seed=0), num_samples=4, ks=(1, 4), max_new_tokens=48,
    ...                progress=False)
    >>> sorted(res.summary)
    ['distinct_correct', 'extracted_frac', 'greedy_pass@1', 'n_problems', 'n_samples', 'pass@1', 'pass@4', 'top_share']
    >>> [(p["gold"], p["greedy"]["extracted"]) for p in res.problems]   # 6 + 0 right, 41 + 7 = 49 wrong
    [('6', '6'), ('48', '49')]
    >>> res.summary["greedy_pass@1"]
    0.5
    >>> res.summary["pass@4"] == sum(p["n_correct"] > 0 for p in res.problems) / 2   # k = n: any of the 4 right
    True
    """
    records = validate_records(records)
    num_samples = check_int(num_samples, "num_samples", 1)
    ks = _check_ks(ks, num_samples)
    if not isinstance(greedy, bool):
        raise ValueError(f"greedy must be a bool, got {greedy!r}")
    if not callable(verdict) or not (lenient is None or callable(lenient)):
        raise ValueError(
            f"verdict (and lenient, unless None) must be functions (completion, gold) -> bool, "
            f"got {verdict!r:.60} and {lenient!r:.60}"
        )
    sampling_options(temperature, top_p, max_new_tokens, batch_size)
    check_int(seed, "seed", 0)
    prompts = [prompt_text(rec, tokenizer) for rec in records]
    common = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, progress=progress, pace=pace)
    greedy_out = generate(model, tokenizer, prompts, **common) if greedy else None
    common.update(num_samples=num_samples, do_sample=True, temperature=temperature, top_p=top_p)
    sampled = generate(model, tokenizer, prompts, **common)
    problems = []
    for i, rec in enumerate(records):
        gold = str(rec["gold"])
        samples = [_judged(s, gold, verdict, lenient) for s in sampled[i]]
        c = sum(s["correct"] for s in samples)
        problems.append(
            {
                "id": rec.get("id", i),
                "level": rec.get("level") or 0,
                "question": rec["question"],
                "gold": gold,
                "greedy": _judged(greedy_out[i][0], gold, verdict, lenient) if greedy else None,
                "samples": samples,
                "n_correct": c,
                "success_rate": c / num_samples,
            }
        )
    levels = sorted({p["level"] for p in problems})
    by_level = {lv: _metrics([p for p in problems if p["level"] == lv], ks, greedy) for lv in levels}
    summary = _metrics(problems, ks, greedy)
    if lenient is not None:
        summary.update(_lenient_metrics(problems, num_samples, greedy))
    return EvalResult(summary, by_level, problems)
