r"""Answers: a completion's final answer, and the one verdict that training and evaluation share.

Completions are asked for in the format ``<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>``.
:func:`extract_answer` finds the final answer and :func:`is_correct` compares it with the gold one as an exact
number. The verdict of training rewards and of every pass@1, :func:`strict_is_correct`, also asks that the
completion stop right after its closing ``</answer>`` tag, whitespace aside (:func:`ends_at_answer`).

Why: rewarded by ``is_correct`` alone (the last ``<answer>`` block wherever it sits), a tiny model learns to run on
to the length limit without EOS. The check reads the decoded text, so a completion cut exactly after
``</answer>`` passes; evaluation keeps the lenient verdict (``lenient_pass@1``) so any gap stays visible.

Implementer's notes: docs/implementation.md, section ``qae_lab.task.answers``.
"""

from __future__ import annotations

import numbers
import re
import unicodedata
from fractions import Fraction

__all__ = [
    "MAX_DIGITS",
    "parse_number",
    "canonical",
    "extract_answer",
    "completion_text",
    "gold_value",
    "is_correct",
    "ends_at_answer",
    "strict_is_correct",
]

MAX_DIGITS = 30  # longer numbers are ignored: bounded work per number, whatever the model writes


# What may not touch a number: Unicode's letters and numbers of every script (\w, which is exactly
# categories L* and N* plus "_") and its combining marks (M*, which \w leaves out; `re` has no \p{M}, so
# the class is built from unicodedata: every mark lies in planes 0, 1 and 14, the others hold CJK
# ideographs, private use or nothing, and test_answers sweeps all of Unicode to check it).
def _class_of_marks() -> str:
    """The code points of categories Mn, Mc, Me as character-class ranges ("\\U00000300-\\U0000036f...")."""
    ranges: list[list[int]] = []
    for plane in (0, 1, 14):
        for c in range(plane << 16, (plane + 1) << 16):
            if unicodedata.category(chr(c))[0] == "M":
                if ranges and ranges[-1][1] == c - 1:
                    ranges[-1][1] = c
                else:
                    ranges.append([c, c])
    return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_WORD = r"\w" + _class_of_marks()  # inside [...]: a letter, number, mark or "_" of any script
_SUPERSCRIPT = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻"  # a power written raised: "10³", "10⁻³", "5 × 10³"
# one number token: sign, currency, digits 0-9 with commas, decimals, an optional /denominator.
# It starts on no letter, number, mark, "_", "." or "^" of any script ("x2", "H2O", "٣5", the "9" of "e9"
# are no numbers), and "junk" takes in all that would continue it, so a malformed token is read whole and
# rejected, never cut to a prefix: ".5", ",5", "/4", ":30", "'000" ("3.14.15", "2/3/4", "10:30", "1'000"),
# letters, numbers, marks and "_" attached ("12abc", "1e9", "2.5E-3", "5kg", "5кг", "5٣", "3½", "1_000",
# "10²", "10₂"), powers ("10^3", "10^{-3}", "10**3", "10⁻³") and a "x 10^k" / "\times 10^{k}" / "× 10³"
# scale ("1.5 × 10^3"). Every quantifier is possessive, every class fixed: linear time.
_NUMBER = re.compile(
    rf"(?<![{_WORD}.^])(?P<sign>(?<![{_WORD}])[-−+])?+[$€£]?+"
    r"(?:(?P<int>[0-9]++(?:,++[0-9]++)*+)(?:\.(?P<frac>[0-9]++))?+|\.(?P<frac0>[0-9]++))"
    r"(?:/(?P<den>[0-9]++(?:,++[0-9]++)*+))?+"
    rf"(?P<junk>(?:[{_WORD}{_SUPERSCRIPT}]|[.,/:'](?=\d)|(?<=[eE])[-+−]|\^\{{?+[-+−]?+|\*\*[-+−]?+(?=[0-9])"
    rf"|[ \t]*+(?:[x×·*]|\\times|\\cdot)[ \t]*+10(?=[ \t]*+(?:\^|\*\*|[{_SUPERSCRIPT}])))*+)"
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


def canonical(q: Fraction) -> str:
    r"""The canonical string of a value: what :func:`extract_answer` returns for it.

    An integer; else a terminating decimal without trailing zeros (at most ``MAX_DIGITS`` digits); else a reduced
    fraction. :func:`parse_number` reads it back to the same value; equal values give equal strings.

    >>> canonical(Fraction(1000)), canonical(Fraction(59, 2)), canonical(Fraction(-2, 6))
    ('1000', '29.5', '-1/3')
    """
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
    r"""The exact value (a Fraction) of a string holding one number literal, or None.

    Grammar: optional sign (``-``, ``−``, ``+``), optional ``$ € £``, digits with well-formed thousands commas,
    optional decimals (``.5`` allowed), or an integer fraction ``a/b``; whitespace around is ignored. Units, words,
    ``%``, exponents ("1e9", "10^3"), attached letters and space-grouped thousands ("1 000") are no number. At most
    ``MAX_DIGITS`` digits (leading zeros not counted). Every string :func:`extract_answer` returns parses here.

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
    m = _last(_NUMBER, span) if last else _NUMBER.search(span)
    if m is None:
        return None
    before = span[max(0, m.start() - 40) : m.start()]
    if _TUPLE_NEXT.match(span, m.end()) or _TUPLE_PREV.search(before):
        return None  # "0, 1": a list of numbers, no single answer
    if _SPACED_NEXT.match(span, m.end()) or _SPACED_PREV.search(span, 0, m.start()):
        return None  # "1 000", "2 1/2": not one number, and neither part is the answer
    value = _token_value(m)
    return None if value is None else canonical(value)


def _boxed_span(text: str) -> str | None:
    """Content of the last \\boxed{...} (braces matched; unclosed: to the end), or None."""
    start = max(text.rfind(b) + len(b) if text.rfind(b) >= 0 else -1 for b in _BOXED)
    if start < 0:
        return None
    depth = 1
    for brace in re.finditer(r"[{}]", text[start:]):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start : start + brace.start()]
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
    return _pick(span[span.rfind("=") + 1 :])


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

    The number comes back as :func:`canonical` gives it: currency, ``%``, bold, units and words around it are
    ignored, ``\frac{a}{b}`` reads as a/b; a malformed number ("0,1"), one in a list, and one that goes on as a
    number ("1e9", "10^3", "12abc", "5кг", "3.4.5", "1 000", "2 1/2") give None, never a prefix.

    >>> extract_answer("<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n$18.00 dollars\n</answer>")
    '18'
    >>> extract_answer("#### 1,234"), extract_answer(r"so \boxed{\frac{6}{8}}"), extract_answer("The answer is 1/3.")
    ('1234', '0.75', '1/3')
    >>> extract_answer("<answer>0,1</answer>") is None
    True
    >>> [extract_answer(f"<answer>{s}</answer>") for s in ("1e9", "10^3", "12abc", "1 000", "1.5 × 10^3")]
    [None, None, None, None, None]
    >>> [extract_answer(f"<answer>{s}</answer>") for s in ("5кг", "5٣", "٣5", "3½", "10₂", "5 × 10³")]
    [None, None, None, None, None, None]
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    text = _FRAC.sub(_frac_slash, text.replace("{,}", ","))  # LaTeX: \frac{3}{4} -> 3/4, 1{,}000 -> 1,000
    tag = _last(_OPEN, text)
    if tag is not None:
        close = _CLOSE.search(text, tag.end())
        span = text[tag.end() : close.start() if close else len(text)]
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
    r"""The text of one completion: a str as is, a message dict's ``content``, or for a list of messages (TRL's
    conversational format) the last assistant message's (a message without ``role`` counts; none gives "").

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


def gold_value(gold) -> Fraction:
    r"""The exact value of a gold answer: a str in :func:`parse_number`'s grammar, an int (not a bool) or a Fraction.

    >>> gold_value("1,000"), gold_value(-3), gold_value(Fraction(3, 4))
    (Fraction(1000, 1), Fraction(-3, 1), Fraction(3, 4))
    """
    if isinstance(gold, Fraction) or (isinstance(gold, numbers.Integral) and not isinstance(gold, bool)):
        return Fraction(gold)
    value = parse_number(gold) if isinstance(gold, str) else None
    if value is None:
        raise ValueError(f"gold must be a number such as '1,000', '-3' or '3/4', got {gold!r:.80}")
    return value


def is_correct(completion, gold) -> bool:
    r"""True iff the completion's (:func:`completion_text`) final answer equals ``gold`` (:func:`gold_value`) exactly.

    >>> is_correct("She pays $29.00.\n#### 29", "29"), is_correct("The answer is 8,000", "8,000")
    (True, True)
    >>> is_correct([{"role": "assistant", "content": "<answer>3/4</answer>"}], "0.75")
    True
    """
    target = gold_value(gold)
    answer = extract_answer(completion_text(completion))
    return answer is not None and parse_number(answer) == target


# ---------------------------------------------------------------- the verdict

_ENDS_AT_ANSWER = re.compile(r"<[ \t]*/[ \t]*answer[ \t]*>\s*\Z", re.IGNORECASE)


def ends_at_answer(text: str) -> bool:
    r"""True iff the text stops right after a closing ``</answer>`` tag (whitespace may follow).

    >>> ends_at_answer("<answer>\n7\n</answer>\n"), ends_at_answer("<answer>7</answer> Now another: <answer>")
    (True, False)
    """
    return _ENDS_AT_ANSWER.search(text) is not None


def strict_is_correct(completion, gold) -> bool:
    r"""The one verdict of training and evaluation: :func:`is_correct` and :func:`ends_at_answer`.

    >>> c = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
    >>> strict_is_correct(c, "7"), strict_is_correct(c + "\n<reasoning>\n1 + 1 = 2", "7"), is_correct(c + "xx", "7")
    (True, False, True)
    """
    return ends_at_answer(completion_text(completion)) and is_correct(completion, gold)
