r"""Behaviour metrics of one training step, from the step's N completions.

* Reflective "aha" words ("wait", "verify", "check", ...), which QAE (arXiv 2509.22611) tracks growing with
  accuracy. The papers give no word list or matching rule: words match case-insensitively and whole ("checked" is
  not "check"), the longest entry at a position ("re-check" counts once); a hyphen separates words.
* Response length, whose mean SA-AH-GRPO (arXiv 2606.05434) reports falling 243 -> 171 tokens.
* Diversity within a group (:func:`diversity_stats`): RLVR's sharpening (pass@1 up, pass@k at large k flat or
  down; QAE reports pass@16 kept) shows first as fewer distinct correct texts.

An undefined correlation (N < 2, or a constant vector) is left out of :func:`behaviour_stats`, not logged as NaN.
"""

from __future__ import annotations

import math
import re
import statistics

import torch

from qae_lab._checks import as_real_tensor, check_finite_scalar, check_int, check_mask

__all__ = [
    "REFLECTION_WORDS",
    "reflection_pattern",
    "reflection_counts",
    "length_stats",
    "pearson",
    "behaviour_stats",
    "diversity_stats",
]

REFLECTION_WORDS: tuple[str, ...] = (
    "wait",
    "verify",
    "check",
    "recheck",
    "let me",
    "double-check",
    "re-check",
    "however",
    "hmm",
    "mistake",
    "actually",
)  # QAE's "aha" words and kin


def _str_list(x, name: str, what: str) -> list[str]:
    """``x`` as a list of str, or raise naming ``name`` (a bare string is refused, not split)."""
    if not isinstance(x, (list, tuple)):
        raise ValueError(f"{name} must be a list or tuple of {what} strings, got {type(x).__name__}")
    for i, s in enumerate(x):
        if not isinstance(s, str):
            raise ValueError(f"{name} must hold only strings, got {type(s).__name__} at index {i}")
    return list(x)


MAX_WORDS, MAX_WORD_CHARS = 1_000, 100
"""The most reflection words, and characters a word: the default list holds 11."""


def reflection_pattern(words=REFLECTION_WORDS) -> re.Pattern:
    r"""One compiled, case-insensitive regex matching any of ``words`` (escaped) as a whole word, longest first; a
    multi-word entry matches across any run of whitespace.

    >>> [m.group() for m in reflection_pattern().finditer("Wait... LET  me re-check; checked.")]
    ['Wait', 'LET  me', 're-check']
    """
    words = _str_list(words, "words", "non-blank")
    if not words:
        raise ValueError("words must hold at least one word, got an empty sequence")
    if len(words) > MAX_WORDS or max(map(len, words)) > MAX_WORD_CHARS:
        raise ValueError(
            f"words must hold at most {MAX_WORDS} entries of at most {MAX_WORD_CHARS} characters (a regex of more "
            f"is slow to build and to scan every completion with), got {len(words)}, the longest "
            f"{max(map(len, words))}"
        )
    for i, w in enumerate(words):
        if not w.split():
            raise ValueError(f"words must hold non-blank strings, got {w!r} at index {i}")
    # longest first: alternation takes the first entry that matches at a position
    ordered = sorted({tuple(w.split()) for w in words}, key=lambda parts: (-len(" ".join(parts)), parts))
    body = "|".join(r"\s+".join(re.escape(p) for p in parts) for parts in ordered)
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)


def reflection_counts(texts, words=REFLECTION_WORDS) -> torch.Tensor:
    r"""The number of reflective-word matches in each of N texts (QAE, arXiv 2509.22611): (N,) float64.

    >>> reflection_counts(["Wait, let me check.", "checked", "re-check", "LET   ME"])
    tensor([3., 0., 1., 1.], dtype=torch.float64)
    """
    texts = _str_list(texts, "texts", "completion")
    pat = reflection_pattern(words)
    return torch.tensor([float(sum(1 for _ in pat.finditer(t))) for t in texts], dtype=torch.float64)


def length_stats(lengths, quantiles=(0.1, 0.5, 0.9)) -> dict[str, float]:
    r"""Mean and ``torch.quantile`` (linear) quantiles of completion lengths, keys ``length_q{round(100 * q)}``.

    >>> length_stats([10, 20, 30, 40, 100])
    {'length_mean': 40.0, 'length_q10': 14.0, 'length_q50': 30.0, 'length_q90': 76.0}
    """
    x = as_real_tensor(lengths, "lengths", ndim=1).double()
    if not x.numel():
        raise ValueError("lengths must hold at least one length, got an empty tensor")
    if not bool((x >= 0).all()):
        raise ValueError(f"lengths must be >= 0 (token counts), got {x[x < 0][0].item()}")
    if not isinstance(quantiles, (list, tuple)):
        raise ValueError(f"quantiles must be a list or tuple of levels in [0, 1], got {quantiles!r}")
    out = {"length_mean": x.mean().item()}
    for q in quantiles:
        if not 0.0 <= (q := check_finite_scalar(q, "quantiles")) <= 1.0:
            raise ValueError(f"quantiles must lie in [0, 1], got {q}")
        key = f"length_q{round(100 * q)}"
        if key in out:
            raise ValueError(f"quantiles must give distinct keys, got two levels named {key}")
        out[key] = torch.quantile(x, q, interpolation="linear").item()
    return out


def pearson(x, y) -> float | None:
    r"""Pearson correlation r = sum dx dy / sqrt(sum dx^2 sum dy^2), d = deviation from the mean, of x / max|x| and
    y / max|y| (no overflow); None when undefined: N < 2, or x or y constant.

    >>> round(pearson([1, 2, 3], [1, 2, 4]), 4), pearson([1, 2, 3], [5, 5, 5]), pearson([1], [2])
    (0.982, None, None)
    """
    a, b = as_real_tensor(x, "x", ndim=1).double(), as_real_tensor(y, "y", ndim=1).double()
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.numel() < 2 or a.amax() == a.amin() or b.amax() == b.amin():
        return None
    a, b = a / a.abs().amax(), b / b.abs().amax()  # in [-1, 1]: no overflow or underflow below
    da, db = a - a.mean(), b - b.mean()
    r = ((da * db).sum() / (da.square().sum().sqrt() * db.square().sum().sqrt())).item()
    return min(1.0, max(-1.0, r)) if math.isfinite(r) else None


def behaviour_stats(lengths, texts, success, words=REFLECTION_WORDS) -> dict[str, float]:
    r"""The ``behaviour/*`` metrics of one step: length (SA-AH-GRPO, arXiv 2606.05434) and reflective words (QAE,
    arXiv 2509.22611): :func:`length_stats`, ``reflect_per_response``, ``reflect_frac`` (responses with a match),
    ``reflect_corr`` (:func:`pearson` of counts and 0/1 ``success``) and ``reflect_rate_correct`` /
    ``reflect_rate_wrong``; each of the last three absent when undefined.

    >>> s = behaviour_stats([12, 30, 8], ["Wait, check it.", "so 4", "hmm 5"], [1, 0, 0])
    >>> s["reflect_per_response"], s["reflect_frac"], s["reflect_rate_correct"], s["reflect_rate_wrong"]
    (1.0, 0.6666666666666666, 2.0, 0.5)
    """
    texts = _str_list(texts, "texts", "completion")
    n = len(texts)
    x, s = as_real_tensor(lengths, "lengths", ndim=1), as_real_tensor(success, "success", ndim=1)
    for name, t in (("lengths", x), ("success", s)):
        if t.shape[0] != n:
            raise ValueError(f"{name} must have shape ({n},), one per text (len(texts) = {n}), got {tuple(t.shape)}")
    ok = check_mask(s, (n,), "success") > 0  # (N,) bool
    counts = reflection_counts(texts, words)  # (N,)
    out = {
        **length_stats(x),
        "reflect_per_response": counts.mean().item(),
        "reflect_frac": (counts > 0).double().mean().item(),
    }
    if (r := pearson(counts, ok.double())) is not None:  # undefined (N < 2 or a constant vector): not logged
        out["reflect_corr"] = r
    for key, group in (("reflect_rate_correct", ok), ("reflect_rate_wrong", ~ok)):
        if bool(group.any()):  # an empty group has no rate: not logged
            out[key] = counts[group].mean().item()
    return out


def diversity_stats(texts, success, group_size: int) -> dict[str, float]:
    r"""Diversity of each prompt's group of G contiguous completions, averaged over the groups: ``distinct_correct``
    (different correct texts, equal after stripping whitespace), ``distinct_frac`` and ``top_share`` (the share of
    the most frequent text: 1/G when all differ).

    >>> diversity_stats(["a", "a", "b", "c", "x", "x", "x", "x"], [1, 1, 1, 0, 0, 0, 0, 0], 4)
    {'distinct_correct': 1.0, 'distinct_frac': 0.5, 'top_share': 0.75}
    """
    texts = _str_list(texts, "texts", "completion")
    n = len(texts)
    g = check_int(group_size, "group_size", 1)
    if n % g:
        raise ValueError(f"group_size must divide the number of texts ({n}), got {g}")
    ok = check_mask(as_real_tensor(success, "success", ndim=1), (n,), "success") > 0  # (N,)
    correct, distinct, top = [], [], []
    for start in range(0, n, g):  # (B groups of G)
        group = [t.strip() for t in texts[start : start + g]]
        correct.append(len({t for t, right in zip(group, ok[start : start + g].tolist()) if right}))
        distinct.append(len(set(group)) / g)
        top.append(max(map(group.count, set(group))) / g)
    return {
        "distinct_correct": statistics.fmean(correct),
        "distinct_frac": statistics.fmean(distinct),
        "top_share": statistics.fmean(top),
    }
