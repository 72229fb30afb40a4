r"""Verifiable rewards for GSM8K-style tasks: answer checking, format and composite rewards.

Completions are asked for in the format ``<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>``.
QAE (arXiv 2509.22611) assumes a binary verifier R_i in {0, 1}: :func:`correctness_reward`.
SA-AH-GRPO (arXiv 2606.05434, sec. on the setup) trains with a composite reward built from
correctness, XML format compliance, solution-tag presence and reasoning-step density, with
r_max = 7.5: :func:`composite_reward`. Every reward function has TRL's signature
``fn(completions, **kwargs) -> list[float]``; ``GRPOTrainer`` passes each dataset column as a
keyword list (``gold=[...]``) plus ``prompts``, ``completion_ids``, ``trainer_state``, ... which
are accepted and ignored. A completion is a string or, for conversational datasets, a list of
message dicts (the last assistant message's ``content`` is read).

Where this departs from the papers or from common harnesses, and why:

* The composite split is ours: SA-AH-GRPO publishes only r_max = 7.5. Default
  :class:`CompositeWeights`: correct 5.0 + format 1.0 + tags 0.5 + steps 1.0 = 7.5, with
  format = 1 (strict XML), 0.5 (only the soft pattern) or 0; tags = 1/4 for each of
  ``<reasoning>``, ``</reasoning>``, ``<answer>``, ``</answer>`` occurring exactly once;
  steps = min(#calculation lines in the reasoning block, max_steps) / max_steps, a line
  counting when it holds a digit and one of ``= + - * / × ÷ −``. Correctness dominates, so a
  well-formatted wrong answer (at most 2.5) never outscores a correct one (at least 5).
* Numbers are compared exactly, as :class:`fractions.Fraction`, never as floats:
  "18.00" == "18", "3/4" == "0.75". Canonical form (what :func:`extract_answer` returns):
  an integer "1234" / "-3"; else a terminating decimal without trailing zeros "29.5",
  "0.75" (at most ``MAX_DIGITS`` digits, leading zeros not counted); else a reduced
  fraction "1/3", "-2/3". Equal values always give equal strings.
* Commas are thousands separators only when well-formed ("1,234", "1,234,567");
  "0,1", "1,2", "1,,000" or "1,234,56" are not numbers, and a comma-separated list such as
  "0, 1" is no single number: the answer is None rather than a guess ("0,1" -> "01" is a
  known harness bug). "%" is dropped like a unit ("50%" -> "50"): GSM8K states percentages
  as bare numbers. Words ("eighteen") are not read.
* A number is read whole or not at all, never cut to a prefix: exponents and powers ("1e9",
  "2.5e3", "10^3", "10**3", "1.5 × 10^3"), letters, digits or "_" attached ("12abc", "5kg",
  "3rd", "1_000"), "3.4.5", "10:30", mixed numbers ("2 1/2") and space-grouped thousands
  ("1 000", "1\,000") all give None. "1 000" is not read as 1000 on purpose: "3 100-metre
  races" looks the same, and a missed reward costs less than a wrong one.
* Which number is the answer, where harnesses differ (:func:`extract_answer` lists the
  order): the last ``<answer>`` block decides alone (no number in it -> None, even if the
  reasoning has one); inside a block or ``\boxed{}``, the first number after the last ``=``
  ("18 (9 * 2)" and "9 * 2 = 18" both give 18); after ``####`` or "The answer is", the first
  number on that line; a ``####`` not followed by a number is a markdown heading, not a marker.
* Model output is data, never code: regular expressions (linear-time, possessive
  quantifiers) and ``Fraction`` only, no ``eval``/``sympify``; numbers with more than
  ``MAX_DIGITS`` digits are ignored.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction

__all__ = [
    "MAX_DIGITS",
    "parse_number",
    "extract_answer",
    "completion_text",
    "is_correct",
    "count_reasoning_steps",
    "correctness_reward",
    "strict_format_reward",
    "soft_format_reward",
    "CompositeWeights",
    "composite_breakdown",
    "make_composite_reward",
    "composite_reward",
]

MAX_DIGITS = 30  # longer numbers are ignored: bounded work per number, whatever the model writes

# one number token: sign, currency, digits with commas, decimals, an optional /denominator.
# It starts on no letter, digit, "_", "." or "^" ("x2", "H2O", the "9" of "e9" are no numbers), and
# "junk" takes in all that would continue it, so a malformed token is read whole and rejected, never
# cut to a prefix: ".5", ",5", "/4", ":30", "'000" ("3.14.15", "2/3/4", "10:30", "1'000"), letters,
# digits and "_" attached ("12abc", "1e9", "2.5E-3", "5kg", "1_000", "10²"), powers ("10^3",
# "10^{-3}", "10**3") and a "x 10^k" / "\times 10^{k}" scale ("1.5 × 10^3").
_NUMBER = re.compile(
    r"(?<![0-9A-Za-z_.^])(?P<sign>(?<![0-9A-Za-z])[-−+])?+[$€£]?+"
    r"(?:(?P<int>[0-9]++(?:,++[0-9]++)*+)(?:\.(?P<frac>[0-9]++))?+|\.(?P<frac0>[0-9]++))"
    r"(?:/(?P<den>[0-9]++(?:,++[0-9]++)*+))?+"
    r"(?P<junk>(?:[0-9A-Za-z_¹²³⁰-⁹]|[.,/:'](?=[0-9])|(?<=[eE])[-+−]|\^\{?+[-+−]?+|\*\*[-+−]?+(?=[0-9])"
    r"|[ \t]*+(?:[x×·*]|\\times|\\cdot)[ \t]*+10(?=[ \t]*+(?:\^|\*\*)))*+)"
)
# a number next to another across a space is no single number: "1 000" (space-grouped thousands,
# also "1\,000", "1~000"), "2 1/2" (a mixed number), "3 4" (a list)
_SPACE = r"(?:[ \t\u00a0\u2009\u202f~]|\\[,;:! ])"
_SPACED_NEXT = re.compile(_SPACE + r"++[$€£]?+\.?[0-9]")
_SPACED_PREV = re.compile(r"[0-9]" + _SPACE + r"++[-−+]?+[$€£]?+\Z")
_THOUSANDS = re.compile(r"[1-9][0-9]{0,2}(?:,[0-9]{3})++")
_TUPLE_NEXT = re.compile(r"[ \t]*+,[ \t]*+[-−+]?[$€£]?\.?[0-9]")
_TUPLE_PREV = re.compile(r"[0-9][ \t]*+,[ \t]*+\Z")
_FRAC = re.compile(r"\\[dt]?frac[ \t]*+\{[ \t]*+([0-9]{1,30}+)[ \t]*+\}[ \t]*+\{[ \t]*+([0-9]{1,30}+)[ \t]*+\}")
_OPEN = re.compile(r"<[ \t]*+answer[ \t]*+>", re.IGNORECASE)
_CLOSE = re.compile(r"<[ \t]*+/[ \t]*+answer[ \t]*+>", re.IGNORECASE)
# a marker counts only when a number follows it on its line (so "#### Final answer" is a heading)
_NUM_AHEAD = r"(?=[ \t*:]*+(?:\\\(|\$\$?)?[ \t*]*+[-−+]?\\?[$€£]?\.?[0-9])"
_HASH = re.compile(r"####" + _NUM_AHEAD)
_PHRASE = re.compile(  # "The (final) answer is", "Answer:", "answer =", and a case-sensitive "A:"
    r"(?:(?i:\banswer)(?:[ \t]*+[:=]|[ \t]++(?i:is)\b[ \t]*+:?)|(?<![A-Za-z0-9])A[ \t]*+:)" + _NUM_AHEAD
)
_BOXED = ("\\boxed{", "\\fbox{")
_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
_DIGIT = re.compile(r"[0-9]")
_OPERATOR = re.compile(r"[=+\-*/×÷−]")
_SOFT_JOIN = re.compile(r"</reasoning>\s*+<answer>")


def _ungroup(digits: str) -> str | None:
    """'1,234' -> '1234'; None when commas are not well-formed thousands separators."""
    if "," not in digits:
        return digits
    return digits.replace(",", "") if _THOUSANDS.fullmatch(digits) else None


def _token_value(m: re.Match) -> Fraction | None:
    """The exact value of a matched number token, None if malformed or too long."""
    if m["junk"] or (m["den"] is not None and m["frac"] is not None):
        return None  # "3.14.15", "2/3/4", "1.5/3": not one plain number
    whole = _ungroup(m["int"]) if m["int"] is not None else ""
    den = _ungroup(m["den"]) if m["den"] is not None else "1"
    if whole is None or den is None:
        return None
    frac = m["frac"] or m["frac0"] or ""
    whole, den = whole.lstrip("0"), den.lstrip("0")  # leading zeros are free (and never reach int())
    if not den or len(whole) + len(frac) + (len(den) if m["den"] is not None else 0) > MAX_DIGITS:
        return None  # a zero denominator, or too long
    # I.F / D = (I * 10^len(F) + F) / (10^len(F) * D), exact
    value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac) * int(den))
    return -value if m["sign"] in ("-", "−") else value


def _canonical(q: Fraction) -> str:
    """Canonical string of a value: '1234', '29.5', '1/3' (see the module docstring)."""
    if q.denominator == 1:
        return str(q.numerator)
    d, k2, k5 = q.denominator, 0, 0
    while d % 2 == 0:
        d, k2 = d // 2, k2 + 1
    while d % 5 == 0:
        d, k5 = d // 5, k5 + 1
    k = max(k2, k5)  # a terminating decimal has exactly k decimals, the last one non-zero
    significand = str(abs(q.numerator) * 10**k // q.denominator) if d == 1 else ""
    # digits parse_number counts: the integer part's (no leading zeros) plus the k decimals
    if d == 1 and max(len(significand), k) <= MAX_DIGITS:
        digits = significand.rjust(k + 1, "0")
        return ("-" if q < 0 else "") + digits[:-k] + "." + digits[-k:]
    return f"{q.numerator}/{q.denominator}"


def parse_number(text: str) -> Fraction | None:
    r"""The exact value of a string holding one number literal, or None.

    Grammar: optional sign (``-``, unicode ``−``, ``+``), optional currency symbol
    (``$ € £``), digits with optional well-formed thousands commas, optional decimals
    (``.5`` allowed), or an integer fraction ``a/b``; surrounding whitespace is ignored.
    Units, words, ``%`` and trailing periods are not part of it (that is
    :func:`extract_answer`'s job); exponents ("1e9", "10^3"), attached letters ("12abc")
    and space-grouped thousands ("1 000") are no number at all. At most ``MAX_DIGITS``
    digits (leading zeros not counted). Every string :func:`extract_answer` returns parses here.

    Args:
        text: the string.

    Returns:
        a :class:`fractions.Fraction`, or None.

    >>> parse_number("1,000"), parse_number("-3"), parse_number("$29.00"), parse_number("3/4")
    (Fraction(1000, 1), Fraction(-3, 1), Fraction(29, 1), Fraction(3, 4))
    >>> parse_number("0,1") is None and parse_number("1,,000") is None and parse_number(",") is None
    True
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    m = _NUMBER.fullmatch(text.strip())
    return _token_value(m) if m else None


def _pick(span: str, *, last: bool = False) -> str | None:
    """The first (or last) number of a span, canonical; None if it is malformed or in a tuple."""
    m = None
    for m in _NUMBER.finditer(span):
        if not last:
            break
    if m is None:
        return None
    before = span[max(0, m.start() - 40):m.start()]
    if _TUPLE_NEXT.match(span, m.end()) or _TUPLE_PREV.search(before):
        return None  # "0, 1": a list of numbers, no single answer
    if _SPACED_NEXT.match(span, m.end()) or _SPACED_PREV.search(span, 0, m.start()):
        return None  # "1 000", "2 1/2": not one number, and neither part is the answer
    value = _token_value(m)
    return None if value is None else _canonical(value)


def _boxed_span(text: str) -> str | None:
    """Content of the last \\boxed{...} (braces matched; unclosed: to the end), or None."""
    start = max(text.rfind(b) + len(b) if text.rfind(b) >= 0 else -1 for b in _BOXED)
    if start < 0:
        return None
    depth = 1
    for brace in re.finditer(r"[{}]", text[start:]):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start:start + brace.start()]
    return text[start:]


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    """The last match of a pattern in the text (one linear scan), or None."""
    m = None
    for m in pattern.finditer(text):
        pass
    return m


def _rest_of_line(text: str, pos: int) -> str:
    end = text.find("\n", pos)
    return text[pos:] if end < 0 else text[pos:end]


def _marked_answer(text: str) -> tuple[bool, str | None]:
    """(found, answer) from the last '#### n', else the last \\boxed{}, else the last 'answer is n'."""
    marker = _last(_HASH, text)
    if marker is not None:
        return True, _pick(_rest_of_line(text, marker.end()))
    box = _boxed_span(text)
    if box is not None:
        return True, _delimited_answer(box)
    marker = _last(_PHRASE, text)
    if marker is not None:
        return True, _pick(_rest_of_line(text, marker.end()))
    return False, None


def _frac_slash(m: re.Match) -> str:
    r"""'\frac{a}{b}' -> 'a/b'; after a digit ('2\frac{1}{2}', a mixed number) -> ' a/b', not '21/2'."""
    return (" " if m.start() and m.string[m.start() - 1] in "0123456789" else "") + f"{m[1]}/{m[2]}"


def _delimited_answer(span: str) -> str | None:
    """The number of a span that is all answer: after its last '=', the first number."""
    return _pick(span[span.rfind("=") + 1:])


def extract_answer(text: str) -> str | None:
    r"""The canonical final answer of a completion, or None when it has none.

    Where the answer is looked for, first hit wins:

    1. the content of the last ``<answer>...</answer>`` (a missing closing tag at the end is
       tolerated). Its content decides: inside it, a ``#### n`` / ``\boxed{n}`` / "answer is n"
       if present, else the first number after its last ``=``; no number there -> None,
       even if the reasoning holds one.
    2. the last ``#### n`` (followed by a number on its line), first number after it;
    3. the last ``\boxed{...}``, read like an answer tag's content;
    4. the last "The (final) answer is n" / "Answer: n" / "A: n", first number after it;
    5. otherwise the last number of the text.

    The chosen number is returned in canonical form (module docstring): ``$``, ``€``, ``£``,
    ``%``, bold ``**``, units and trailing words or periods around it are ignored,
    ``\frac{a}{b}`` reads as a/b; a malformed number ("0,1", "1,,000"), one in a
    comma-separated list, and one that goes on as a number ("1e9", "10^3", "12abc",
    "3.4.5", "1 000", "2 1/2") give None: never the prefix "1", "10", "12", "3", "1", "2".

    Args:
        text: the completion text.

    Returns:
        a string that :func:`parse_number` parses, or None.

    >>> extract_answer("<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n$18.00 dollars\n</answer>")
    '18'
    >>> extract_answer("#### 1,234"), extract_answer(r"so \boxed{\frac{6}{8}}"), extract_answer("The answer is 1/3.")
    ('1234', '0.75', '1/3')
    >>> extract_answer("<answer>0,1</answer>") is None
    True
    >>> [extract_answer(f"<answer>{s}</answer>") for s in ("1e9", "10^3", "12abc", "1 000", "1.5 × 10^3")]
    [None, None, None, None, None]
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    text = _FRAC.sub(_frac_slash, text.replace("{,}", ","))  # LaTeX: \frac{3}{4} -> 3/4, 1{,}000 -> 1,000
    tag = _last(_OPEN, text)
    if tag is not None:
        close = _CLOSE.search(text, tag.end())
        span = text[tag.end():close.start() if close else len(text)]
        found, answer = _marked_answer(span)
        return answer if found else _delimited_answer(span)
    found, answer = _marked_answer(text)
    return answer if found else _pick(text, last=True)


def _content(message) -> str:
    """Text of a message's content: a str, or the text parts of a list of content blocks."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def completion_text(completion) -> str:
    r"""The text of one completion: a str as is, a message dict's ``content``, or for a list
    of messages (TRL's conversational format) the last assistant message's content.

    Messages without a ``role`` count as assistant messages; no assistant message gives "".

    >>> completion_text([{"role": "assistant", "content": "#### 4"}]), completion_text({"content": "x"})
    ('#### 4', 'x')
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion)
    if isinstance(completion, (list, tuple)) and all(isinstance(m, dict) for m in completion):
        for message in reversed(completion):
            if message.get("role", "assistant") == "assistant":
                return _content(message)
        return ""
    raise ValueError(f"completion must be a str, a message dict or a list of message dicts, got {completion!r:.80}")


def _gold_value(gold) -> Fraction:
    """Parse a gold answer (str, int or Fraction) or raise ValueError naming ``gold``."""
    if isinstance(gold, Fraction) or (isinstance(gold, numbers.Integral) and not isinstance(gold, bool)):
        return Fraction(gold)
    value = parse_number(gold) if isinstance(gold, str) else None
    if value is None:
        raise ValueError(f"gold must be a number such as '1,000', '-3' or '3/4', got {gold!r:.80}")
    return value


def is_correct(completion, gold) -> bool:
    r"""True iff the completion's final answer equals ``gold`` exactly (as Fractions).

    Args:
        completion: a str, a message dict, or a list of message dicts (see :func:`completion_text`).
        gold: the reference answer: a str in :func:`parse_number`'s grammar ("1,000", "-3",
            "72", "0.75", "3/4"), an int or a Fraction. Unparseable -> ValueError.

    Returns:
        bool.

    >>> is_correct("She pays $29.00.\n#### 29", "29"), is_correct("The answer is 8,000", "8,000")
    (True, True)
    >>> is_correct([{"role": "assistant", "content": "<answer>3/4</answer>"}], "0.75")
    True
    """
    target = _gold_value(gold)
    answer = extract_answer(completion_text(completion))
    return answer is not None and parse_number(answer) == target


def count_reasoning_steps(text: str) -> int:
    r"""Number of calculation lines in the first ``<reasoning>...</reasoning>`` block.

    A line counts when it holds a digit and one of ``= + - * / × ÷ −``. No closed
    reasoning block: 0.

    >>> count_reasoning_steps("<reasoning>\n48/2 = 24\nSo May is 24.\n48+24 = 72\n</reasoning>")
    2
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    start = text.find("<reasoning>")
    end = text.find("</reasoning>", start + 1) if start >= 0 else -1
    if end < 0:
        return 0
    block = text[start + len("<reasoning>"):end]
    return sum(1 for line in block.splitlines() if _DIGIT.search(line) and _OPERATOR.search(line))


def _strict_ok(text: str) -> bool:
    """Whole text == '<reasoning>\\nR\\n</reasoning>\\n<answer>\\nA\\n</answer>', R, A non-blank."""
    t = text.strip()
    head, tail = "<reasoning>\n", "\n</answer>"
    if not (t.startswith(head) and t.endswith(tail)) or any(t.count(tag) != 1 for tag in _TAGS):
        return False
    reasoning, sep, answer = t[len(head):-len(tail)].partition("\n</reasoning>\n<answer>\n")
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


def _golds(gold, n: int) -> list[Fraction]:
    if isinstance(gold, (str, bytes)) or not isinstance(gold, Sequence):
        raise ValueError(f"gold must be a list with one answer per completion, got {type(gold).__name__}")
    if len(gold) != n:
        raise ValueError(f"gold must have one answer per completion: {len(gold)} golds for {n} completions")
    return [_gold_value(g) for g in gold]


def correctness_reward(completions, gold, **kwargs) -> list[float]:
    r"""Binary verifier reward, 1.0 if :func:`is_correct` else 0.0 (QAE's R_i in {0, 1}).

    Args:
        completions: list of str, or of message lists (TRL conversational format).
        gold: list of reference answers, one per completion (the dataset's ``gold`` column).
        **kwargs: whatever else TRL passes (``prompts``, ``completion_ids``, ...); ignored.

    Returns:
        list of floats, one per completion.

    >>> correctness_reward(["#### 72", "<answer>71</answer>", "no idea"], gold=["72", "72", "72"])
    [1.0, 0.0, 0.0]
    """
    texts = _texts(completions)
    targets = _golds(gold, len(texts))
    return [1.0 if is_correct(t, g) else 0.0 for t, g in zip(texts, targets)]


def strict_format_reward(completions, **kwargs) -> list[float]:
    r"""1.0 iff the stripped completion is exactly
    ``<reasoning>\nR\n</reasoning>\n<answer>\nA\n</answer>`` with R, A non-blank (multi-line
    allowed, each tag once), else 0.0.

    >>> strict_format_reward(["<reasoning>\nstep 1\nstep 2\n</reasoning>\n<answer>\n7\nboxes\n</answer>",
    ...                       "<reasoning>x</reasoning><answer>7</answer>"])
    [1.0, 0.0]
    """
    return [1.0 if _strict_ok(t) else 0.0 for t in _texts(completions)]


def soft_format_reward(completions, **kwargs) -> list[float]:
    r"""1.0 iff a ``<reasoning>...</reasoning>`` block is followed, after nothing but
    whitespace, by an ``<answer>...</answer>`` block, anywhere in the completion (multi-line
    content allowed), else 0.0.

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

    correct: float = 5.0
    """reward for a correct final answer (:func:`is_correct`)"""
    format: float = 1.0
    """XML format compliance: full weight for the strict format, half for only the soft one"""
    tags: float = 0.5
    """solution-tag presence: a quarter for each of the four tags occurring exactly once"""
    steps: float = 1.0
    """reasoning-step density: min(#calculation lines, max_steps) / max_steps"""
    max_steps: int = 4
    """number of calculation lines in the reasoning block that earns the full ``steps`` weight"""

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


def composite_breakdown(completion, gold, weights: CompositeWeights | None = None) -> dict[str, float]:
    r"""The composite reward of one completion and its four scores, each in [0, 1].

    Returns:
        dict with ``correct``, ``format``, ``tags``, ``steps`` (the scores) and ``total`` =
        sum of weight * score.

    >>> c = "<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n18\n</answer>"
    >>> composite_breakdown(c, "18")
    {'correct': 1.0, 'format': 1.0, 'tags': 1.0, 'steps': 0.25, 'total': 6.75}
    """
    w = CompositeWeights() if weights is None else weights
    text = completion_text(completion)
    scores = {
        "correct": 1.0 if is_correct(text, gold) else 0.0,
        "format": 1.0 if _strict_ok(text) else 0.5 if _soft_ok(text) else 0.0,
        "tags": sum(0.25 for tag in _TAGS if text.count(tag) == 1),
        "steps": min(count_reasoning_steps(text), w.max_steps) / w.max_steps,
    }
    scores["total"] = float(sum(getattr(w, name) * score for name, score in scores.items()))
    return scores


def make_composite_reward(weights: CompositeWeights | dict | None = None):
    r"""A TRL reward function ``fn(completions, gold, **kwargs) -> list[float]`` for the
    composite reward with these weights (a :class:`CompositeWeights` or a dict of its fields).
    Its ``__name__`` is ``"composite_reward"``, the name TRL logs it under.

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

    def reward(completions, gold, **kwargs) -> list[float]:
        texts = _texts(completions)
        targets = _golds(gold, len(texts))  # validates the length and every gold before scoring
        return [composite_breakdown(t, g, weights)["total"] for t, g in zip(texts, targets)]

    reward.__name__ = reward.__qualname__ = "composite_reward"
    reward.__doc__ = f"Composite reward with {asdict(weights)} (r_max = {weights.r_max})."
    return reward


_DEFAULT_COMPOSITE = make_composite_reward(CompositeWeights())


def composite_reward(completions, gold, **kwargs) -> list[float]:
    r"""SA-AH-GRPO's composite reward with the default :class:`CompositeWeights` (r_max = 7.5):
    5 * correct + 1 * format + 0.5 * tags + 1 * steps, each score in [0, 1]
    (see :func:`composite_breakdown`). Other weights: :func:`make_composite_reward`.

    >>> perfect = "<reasoning>\n1+1=2\n2+2=4\n4+4=8\n8+8=16\n</reasoning>\n<answer>\n16\n</answer>"
    >>> composite_reward([perfect, "16", "blah"], gold=["16", "16", "16"])
    [7.5, 5.0, 0.0]
    """
    return _DEFAULT_COMPOSITE(completions, gold, **kwargs)
