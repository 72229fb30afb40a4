r"""Verifiable rewards for GSM8K-style tasks, with TRL's signature: correctness, format and composite.

How a completion's answer is read and judged is :mod:`qae_lab.task.answers`. QAE (arXiv 2509.22611) assumes a
binary verifier R_i in {0, 1}: :func:`strict_correctness_reward`. SA-AH-GRPO (arXiv 2606.05434, sec. on the setup)
trains with a composite of correctness, XML format, solution tags and reasoning-step density, r_max = 7.5:
:func:`strict_composite_reward`. Every reward has TRL's signature ``fn(completions, **kwargs) -> list[float]``:
``GRPOTrainer`` passes each dataset column as a keyword list (``gold=[...]``) and more, which is ignored. A run
names its training reward (``RunArgs.reward``) in :data:`REWARDS`.

Implementer's notes: docs/implementation.md, section ``qae_lab.task.rewards``.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction

from qae_lab.task.answers import completion_text, gold_value, is_correct, strict_is_correct
from qae_lab.task.verify import available as math_verify_available
from qae_lab.task.verify import math_verify_reward

__all__ = [
    "count_reasoning_steps",
    "strict_correctness_reward",
    "correctness_reward",
    "strict_format_reward",
    "soft_format_reward",
    "CompositeWeights",
    "composite_breakdown",
    "make_composite_reward",
    "composite_reward",
    "strict_composite_reward",
    "REWARDS",
    "SUCCESS_BANDS",
    "check_reward",
]

_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
_DIGIT = re.compile(r"[0-9]")
_OPERATOR = re.compile(r"[=+\-*/×÷−]")
_SOFT_JOIN = re.compile(r"</reasoning>\s*+<answer>")


def count_reasoning_steps(text: str) -> int:
    r"""Number of calculation lines in the first ``<reasoning>...</reasoning>`` block.

    A line counts when it holds a digit and one of ``= + - * / × ÷ −``. No closed block: 0.

    >>> count_reasoning_steps("<reasoning>\n48/2 = 24\nSo May is 24.\n48+24 = 72\n</reasoning>")
    2
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    start = text.find("<reasoning>")
    end = text.find("</reasoning>", start + 1) if start >= 0 else -1
    if end < 0:
        return 0
    block = text[start + len("<reasoning>") : end]
    return sum(1 for line in block.splitlines() if _DIGIT.search(line) and _OPERATOR.search(line))


def _strict_ok(text: str) -> bool:
    """Whole text == '<reasoning>\\nR\\n</reasoning>\\n<answer>\\nA\\n</answer>', R, A non-blank."""
    t = text.strip()
    head, tail = "<reasoning>\n", "\n</answer>"
    if not (t.startswith(head) and t.endswith(tail)) or any(t.count(tag) != 1 for tag in _TAGS):
        return False
    reasoning, sep, answer = t[len(head) : -len(tail)].partition("\n</reasoning>\n<answer>\n")
    return bool(sep) and bool(reasoning.strip()) and bool(answer.strip())


def _soft_ok(text: str) -> bool:
    """'<reasoning>...</reasoning>' then only whitespace, then '<answer>...</answer>', anywhere."""
    start = text.find("<reasoning>")
    if start < 0:
        return False
    join = _SOFT_JOIN.search(text, start + len("<reasoning>"))  # the first join ends earliest
    return join is not None and text.find("</answer>", join.end()) >= 0


def _texts(completions) -> list[str]:
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
        raise ValueError(f"completions must be a list of completions, got {type(completions).__name__}")
    return [completion_text(c) for c in completions]


def _binary(completions, gold, judge: Callable) -> list[float]:
    texts = _texts(completions)
    return [1.0 if judge(t, g) else 0.0 for t, g in zip(texts, _golds(gold, len(texts)))]


def _golds(gold, n: int) -> list[Fraction]:
    if isinstance(gold, (str, bytes)) or not isinstance(gold, Sequence):
        raise ValueError(f"gold must be a list with one answer per completion, got {type(gold).__name__}")
    if len(gold) != n:
        raise ValueError(f"gold must have one answer per completion: {len(gold)} golds for {n} completions")
    return [gold_value(g) for g in gold]


def strict_correctness_reward(completions, gold, **kwargs) -> list[float]:
    r"""Binary verifier reward, 1.0 iff :func:`qae_lab.task.answers.strict_is_correct` (QAE's R_i in {0, 1}).

    The training reward ``"strict"``: correct AND stopped right after ``</answer>``. ``gold``: one per completion.

    >>> strict_correctness_reward(["<answer>5</answer>", "<answer>5</answer> and more", "<answer>6</answer>"],
    ...                           gold=["5", "5", "5"])
    [1.0, 0.0, 0.0]
    """
    return _binary(completions, gold, strict_is_correct)


def correctness_reward(completions, gold, **kwargs) -> list[float]:
    r"""Lenient binary reward, 1.0 if :func:`qae_lab.task.answers.is_correct` else 0.0: the answer may be
    followed by anything. Arguments as :func:`strict_correctness_reward`.

    >>> correctness_reward(["#### 72", "<answer>71</answer>", "no idea"], gold=["72", "72", "72"])
    [1.0, 0.0, 0.0]
    """
    return _binary(completions, gold, is_correct)


def strict_format_reward(completions, **kwargs) -> list[float]:
    r"""1.0 iff the stripped completion is exactly ``<reasoning>\nR\n</reasoning>\n<answer>\nA\n</answer>``,
    R and A non-blank (multi-line allowed, each tag once), else 0.0.

    >>> strict_format_reward(["<reasoning>\nstep 1\nstep 2\n</reasoning>\n<answer>\n7\nboxes\n</answer>",
    ...                       "<reasoning>x</reasoning><answer>7</answer>"])
    [1.0, 0.0]
    """
    return [1.0 if _strict_ok(t) else 0.0 for t in _texts(completions)]


def soft_format_reward(completions, **kwargs) -> list[float]:
    r"""1.0 iff a ``<reasoning>...</reasoning>`` block is followed, after nothing but whitespace, by an
    ``<answer>...</answer>`` block, anywhere in the completion, else 0.0.

    >>> soft_format_reward(["Sure! <reasoning>a\nb</reasoning>\n\n<answer> 7 </answer> bye",
    ...                     "<answer>7</answer><reasoning>a</reasoning>"])
    [1.0, 0.0]
    """
    return [1.0 if _soft_ok(t) else 0.0 for t in _texts(completions)]


@dataclass(frozen=True)
class CompositeWeights:
    r"""Weights of SA-AH-GRPO's composite reward; the defaults sum to r_max = 7.5.

    >>> CompositeWeights().r_max, CompositeWeights(correct=1.0, format=0, tags=0, steps=0).r_max
    (7.5, 1.0)
    """

    correct: float = 5.0  # a correct final answer (the verdict)
    format: float = 1.0  # XML format: full weight for the strict format, half for only the soft one
    tags: float = 0.5  # a quarter for each of the four solution tags occurring exactly once
    steps: float = 1.0  # reasoning-step density: min(#calculation lines, max_steps) / max_steps
    max_steps: int = 4  # the calculation lines in the reasoning block that earn the full ``steps`` weight

    def __post_init__(self):
        for name in ("correct", "format", "tags", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, numbers.Integral) or self.max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {self.max_steps!r}")

    @property
    def r_max(self) -> float:
        """The largest reward: correct + format + tags + steps."""
        return float(self.correct + self.format + self.tags + self.steps)


def _check_verdict(verdict) -> Callable:
    if not callable(verdict):
        raise ValueError(
            f"verdict must be a function (completion, gold) -> bool such as "
            f"qae_lab.task.answers.strict_is_correct, got {verdict!r:.80}"
        )
    return verdict


def composite_breakdown(
    completion, gold, weights: CompositeWeights | None = None, *, verdict: Callable = is_correct
) -> dict[str, float]:
    r"""The composite reward of one completion and its four scores, each in [0, 1].

    ``verdict(completion, gold) -> bool`` gives the ``correct`` score: :func:`qae_lab.task.answers.is_correct`
    (lenient, the default) or ``strict_is_correct`` (a run's). ``total`` = sum of weight * score.

    >>> c = "<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n18\n</answer>"
    >>> composite_breakdown(c, "18")
    {'correct': 1.0, 'format': 1.0, 'tags': 1.0, 'steps': 0.25, 'total': 6.75}
    >>> ran_on = c + " and more"   # the strict verdict takes the correctness score away
    >>> [composite_breakdown(ran_on, "18", verdict=v)["total"] for v in (is_correct, strict_is_correct)]
    [6.25, 1.25]
    """
    w = CompositeWeights() if weights is None else weights
    text = completion_text(completion)
    scores = {
        "correct": 1.0 if _check_verdict(verdict)(text, gold) else 0.0,
        "format": strict_format_reward([text])[0] or 0.5 * soft_format_reward([text])[0],  # 1, 0.5 or 0
        "tags": sum(0.25 for tag in _TAGS if text.count(tag) == 1),
        "steps": min(count_reasoning_steps(text), w.max_steps) / w.max_steps,
    }
    scores["total"] = float(sum(getattr(w, name) * score for name, score in scores.items()))
    return scores


def make_composite_reward(weights: CompositeWeights | dict | None = None, *, verdict: Callable = is_correct):
    r"""A TRL reward function for the composite with these weights (a :class:`CompositeWeights` or a dict of its
    fields) and ``verdict`` (:func:`composite_breakdown`), named ``"composite_reward"`` as TRL logs it.

    >>> fn = make_composite_reward(CompositeWeights(correct=1.0, format=0.0, tags=0.0, steps=0.0))
    >>> fn(["#### 5", "#### 6"], gold=["5", "5"]), fn.__name__
    ([1.0, 0.0], 'composite_reward')
    """
    if isinstance(weights, dict):
        unknown = set(weights) - {f.name for f in fields(CompositeWeights)}
        if unknown:
            raise ValueError(f"weights has unknown fields {sorted(unknown)}")
        weights = CompositeWeights(**weights)
    weights = CompositeWeights() if weights is None else weights
    if not isinstance(weights, CompositeWeights):
        raise ValueError(f"weights must be a CompositeWeights or a dict, got {type(weights).__name__}")
    verdict = _check_verdict(verdict)

    def reward(completions, gold, **kwargs) -> list[float]:
        texts = _texts(completions)
        targets = _golds(gold, len(texts))  # validates the length and every gold before scoring
        return [composite_breakdown(t, g, weights, verdict=verdict)["total"] for t, g in zip(texts, targets)]

    reward.__name__ = reward.__qualname__ = "composite_reward"
    reward.__doc__ = (
        f"Composite reward with {asdict(weights)} (r_max = {weights.r_max}), correctness by "
        f"{getattr(verdict, '__name__', verdict)}."
    )
    return reward


_DEFAULT_COMPOSITE = make_composite_reward(CompositeWeights())
_STRICT_COMPOSITE = make_composite_reward(CompositeWeights(), verdict=strict_is_correct)


def composite_reward(completions, gold, **kwargs) -> list[float]:
    r"""SA-AH-GRPO's composite reward, 5 * correct + 1 * format + 0.5 * tags + 1 * steps (r_max = 7.5).

    >>> perfect = "<reasoning>\n1+1=2\n2+2=4\n4+4=8\n8+8=16\n</reasoning>\n<answer>\n16\n</answer>"
    >>> composite_reward([perfect, "16", "blah"], gold=["16", "16", "16"])
    [7.5, 5.0, 0.0]
    """
    return _DEFAULT_COMPOSITE(completions, gold, **kwargs)


def strict_composite_reward(completions, gold, **kwargs) -> list[float]:
    r"""The training reward ``"composite"``: :func:`composite_reward` with correctness by
    :func:`qae_lab.task.answers.strict_is_correct` (the 5 only when the completion stops after ``</answer>``).

    >>> good = "<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n18\n</answer>"
    >>> strict_composite_reward([good, good + " and on"], gold=["18", "18"])
    [6.75, 1.25]
    """
    return _STRICT_COMPOSITE(completions, gold, **kwargs)


# the training rewards a run can name (RunArgs.reward): strict and composite judge correctness by
# strict_is_correct, math_verify by the same end-of-answer rule and math-verify's reading (qae_lab.task.verify)
REWARDS: dict[str, Callable] = {
    "strict": strict_correctness_reward,  # QAE's binary R_i in {0, 1}
    "composite": strict_composite_reward,  # SA-AH-GRPO's composite, r_max = 7.5
    "lenient": correctness_reward,  # ablation: pays an answer that runs on (see the module docstring)
    "lenient_composite": composite_reward,  # the same ablation of the composite
    "math_verify": math_verify_reward,  # 0/1 by math-verify's reading, strict format; the `verify` extra
}
# (lo, hi) per reward: wrong completions score at most lo, correct ones at least hi, so a
# success_threshold t with lo < t <= hi counts exactly the correct responses as successes
SUCCESS_BANDS: dict[str, tuple[float, float]] = {
    "strict": (0.0, 1.0),
    "composite": (CompositeWeights().r_max - CompositeWeights().correct, float(CompositeWeights().correct)),
    "lenient": (0.0, 1.0),
    "lenient_composite": (CompositeWeights().r_max - CompositeWeights().correct, float(CompositeWeights().correct)),
    "math_verify": (0.0, 1.0),
}


def check_reward(name: str) -> None:
    r"""Raise ValueError unless ``name`` is a training reward of :data:`REWARDS` that can run here:
    ``"math_verify"`` needs the optional math-verify package (``pip install "qae-lab[verify]"``).

    >>> check_reward("strict")
    >>> check_reward("exact")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: reward must be one of ['composite', ..., 'strict'], got 'exact'
    """
    if name not in REWARDS:
        raise ValueError(f"reward must be one of {sorted(REWARDS)}, got {name!r}")
    if name == "math_verify" and not math_verify_available():
        raise ValueError(
            'reward "math_verify" needs the math-verify package, which is not installed: pip install "qae-lab[verify]"'
        )
