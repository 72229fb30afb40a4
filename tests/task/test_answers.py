"""Tests for qae_lab.task.answers: GSM8K golds, a table of tricky completions, numbers read whole or not at
all, chat messages and golds, the end-of-answer verdict, fuzzing (never raise, outputs round-trip) and
a speed guard."""

from __future__ import annotations

import functools
import json
import os
import sys
import unicodedata
from fractions import Fraction
from pathlib import Path

import pytest
from side_by_side import LINEAR_BOUND, growth
from hypothesis import given, settings
from hypothesis import strategies as st
from texts import fuzz_text, xml

from qae_lab.task.answers import (
    MAX_DIGITS,
    completion_text,
    ends_at_answer,
    extract_answer,
    gold_value,
    is_correct,
    parse_number,
    strict_is_correct,
)


# ---------------------------------------------------------------- GSM8K: every gold parses, the facts hold


def _gsm8k_dir() -> Path:
    env = os.environ.get("QAE_LAB_GSM8K_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "gsm8k"


def _gsm8k(split: str) -> list[dict]:
    path = _gsm8k_dir() / f"{split}.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K not found at {path}; set QAE_LAB_GSM8K_DIR")
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("split, n_rows, n_commas, n_negative", [("train", 7473, 79, 3), ("test", 1319, 14, 2)])
def test_gsm8k_golds(split, n_rows, n_commas, n_negative):
    rows = _gsm8k(split)
    assert len(rows) == n_rows
    golds = [row["answer"].rsplit("#### ", 1)[1].strip() for row in rows]
    values = [parse_number(g) for g in golds]
    assert all(v is not None and v.denominator == 1 for v in values)  # every gold an integer
    assert sum("," in g for g in golds) == n_commas
    assert sum(v < 0 for v in values) == n_negative
    # the reference solution ("... #### 72") is judged correct, row by row
    wrong = [i for i, (row, g) in enumerate(zip(rows, golds)) if not is_correct(row["answer"], g)]
    assert wrong == []


# ---------------------------------------------------------------- the table of tricky completions

CASES = [
    # (completion, gold, extract_answer, is_correct)
    (xml("9 * 2 = 18", "18"), "18", "18", True),
    (xml("line 1\nline 2", "  18  "), "18", "18", True),  # extra spaces
    ("<answer>\nShe pays\n$18\nin total.\n</answer>", "18", "18", True),  # multi-line content
    ("<reasoning>9*2</reasoning>\n<answer>\n18", "18", "18", True),  # missing closing tag at the end
    ("<answer>17</answer> wait, no: <answer>18</answer>", "18", "18", True),  # last block wins
    ("<answer>18</answer> hmm <answer>17</answer>", "18", "17", False),
    (xml("9 * 2 = 18", "eighteen"), "18", None, False),  # number only in the reasoning
    ("<answer></answer> 18", "18", None, False),  # empty answer tag decides
    ("<ANSWER> 18 </ANSWER>", "18", "18", True),  # case and spaces in tags
    ("<answer>9 * 2 = 18</answer>", "18", "18", True),  # after the last '='
    ("<answer>18 (that is 9 * 2)</answer>", "18", "18", True),  # first number, explanation after
    ("<answer>The answer is 42 (6 * 7)</answer>", "42", "42", True),  # marker inside the tag
    ("<answer>#### 42</answer>", "42", "42", True),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72", "72", True),  # GSM8K reference style
    ("#### 1,000", "1,000", "1000", True),
    ("#### -3", "-3", "-3", True),
    ("#### Final answer\nThe answer is 5", "5", "5", True),  # a markdown heading, not a marker
    ("The answer is 7.\n#### 8", "8", "8", True),  # #### outranks the phrase
    (r"So the result is $\boxed{18}$.", "18", "18", True),
    (r"\boxed{17} first, then \boxed{18}", "18", "18", True),  # last box
    (r"\boxed{\frac{3}{4}}", "0.75", "0.75", True),  # LaTeX fraction, nested braces
    (r"\boxed{18 \text{ dollars}}", "18", "18", True),
    (r"\boxed{1{,}000}", "1000", "1000", True),  # LaTeX thousands separator
    ("We add them up. The answer is 72.", "72", "72", True),  # trailing period
    ("the final answer is: 1,234", "1234", "1234", True),
    ("Answer: 5 apples (from 2 + 3)", "5", "5", True),  # first number after the phrase
    ("Q: how many?\nA: 12", "12", "12", True),
    ("The answer is **73**.", "73", "73", True),  # markdown bold
    ("So she has **73** left", "73", "73", True),
    ("The total cost is $1,234.50", "1234.5", "1234.5", True),
    ("It costs $29.00", "29", "29", True),  # "$29.00" vs 29
    ("The answer is 18 dollars", "18", "18", True),  # units
    ("He drives at 60 mph", "60", "60", True),
    ("The discount is 25%", "25", "25", True),  # % dropped
    ("The answer is −3", "-3", "-3", True),  # unicode minus
    ("The answer is -$5", "-5", "-5", True),
    ("18.00", "18", "18", True),
    ("29.50", "29.5", "29.5", True),
    ("<answer>3/4</answer>", "3/4", "0.75", True),  # exact fractions
    ("<answer>6/8</answer>", "0.75", "0.75", True),
    ("<answer>1/3</answer>", "1/3", "1/3", True),
    ("<answer>2/6</answer>", "1/3", "1/3", True),
    ("<answer>0.333</answer>", "1/3", "0.333", False),  # no float fuzz
    ("<answer>0,1</answer>", "1", None, False),  # a tuple is not "01" or 1
    ("<answer>0, 1</answer>", "1", None, False),
    ("The pair is (3, 4)", "4", None, False),
    ("<answer>,</answer>", "1", None, False),  # a bare comma
    ("<answer>1,,000</answer>", "1000", None, False),
    ("<answer>1,234,56</answer>", "123456", None, False),  # malformed grouping
    ("They raised 8,000 dollars", "8,000", "8000", True),  # not split on commas
    ("1,234,567 grains", "1234567", "1234567", True),
    ("18, which is the answer", "18", "18", True),  # a comma as punctuation
    ("The answer is 71", "72", "71", False),  # a wrong answer
    ("I don't know.", "72", None, False),  # no answer at all
    ("", "0", None, False),
    ("First 3 apples, then 5 more, so 8 in total", "8", "8", True),  # fallback: last number
    ("Version 3.14.15", "3", None, False),  # not one number
    ("1/0", "0", None, False),  # zero denominator
    ("<answer>" + "9" * (MAX_DIGITS + 1) + "</answer>", "1", None, False),  # too long: ignored
    ("<answer>007</answer>", "7", "7", True),
    ("x = -3", "-3", "-3", True),
    ("12-3", "3", "3", True),  # a hyphen after a digit is no sign
]


@pytest.mark.parametrize("completion, gold, want, correct", CASES)
def test_extract_and_check_table(completion, gold, want, correct):
    assert extract_answer(completion) == want
    assert is_correct(completion, gold) is correct
    if want is not None:
        assert parse_number(want) is not None


def test_canonical_form_is_unique():
    # every way of writing 18 (and 0.75, 1/3, -1000) gives the same string
    for spellings, canon in [
        (["18", "18.0", "18.00", "$18", "**18**", "36/2", "018", "18 dollars", "18."], "18"),
        (["0.75", ".75", "3/4", "6/8", "0.750", r"\frac{3}{4}"], "0.75"),
        (["1/3", "2/6", "3/9"], "1/3"),
        (["-1,000", "−1000", "-1000.00", "-$1,000", "$-1,000"], "-1000"),
    ]:
        assert {extract_answer(f"<answer>{s}</answer>") for s in spellings} == {canon}


def test_parse_number_hand():
    assert parse_number(" 1,000 ") == 1000 and parse_number("-3") == -3 and parse_number("+3") == 3
    assert parse_number("1,234,567.25") == Fraction(4938269, 4)
    assert parse_number("1/3") == Fraction(1, 3) and parse_number("-2/4") == Fraction(-1, 2)
    for bad in [
        "",
        ",",
        "0,1",
        "1,2",
        "1,,000",
        "1,0000",
        "12,34",
        "18.",
        "1e3",
        "1_000",
        "abc",
        "1/0",
        "1.5/3",
        "18 dollars",
        "50%",
        "--3",
        "1 000",
        "9" * (MAX_DIGITS + 1),
    ]:
        assert parse_number(bad) is None, bad
    assert parse_number("9" * MAX_DIGITS) == 10**MAX_DIGITS - 1
    assert parse_number("0" * 1000 + "5") == 5  # leading zeros do not count, and are cheap
    with pytest.raises(ValueError, match="text"):
        parse_number(5)


@given(st.integers(-(10**20), 10**20))
def test_parse_number_thousands_vs_python_formatting(n):
    # reference: Python's own "," grouping
    assert parse_number(f"{n:,}") == n
    assert parse_number(str(n)) == n
    assert extract_answer(f"The answer is {n:,} dollars.") == str(n)


@given(st.fractions(max_denominator=10**6).filter(lambda q: abs(q) < 10**12))
def test_canonical_round_trip_vs_fraction(q):
    # reference: fractions.Fraction parses "a/b" itself
    out = extract_answer(f"<answer>{q.numerator}/{q.denominator}</answer>")
    assert out is not None and parse_number(out) == q and Fraction(out) == q
    if q.denominator == 1:
        assert out == str(q.numerator)
    assert extract_answer(f"<answer>{out}</answer>") == out  # canonical is a fixed point


@given(st.decimals(min_value=-(10**9), max_value=10**9, places=4, allow_nan=False, allow_infinity=False))
def test_decimals_vs_fraction(d):
    s = f"{d:f}"
    assert parse_number(s) == Fraction(s)
    assert parse_number(extract_answer(s)) == Fraction(s)


# ---------------------------------------------------------------- a number is read whole, never as a prefix

PREFIX_CASES = [
    # (completion, the prefix/suffix an earlier version read, what is read now)
    ("<answer>1e9</answer>", "1", None),  # exponents are not read
    ("<answer>1e-9</answer>", "1", None),
    ("#### 2.5E3", "2.5", None),
    ("The answer is 10^3.", "10", None),  # powers
    (r"<answer>10^{3}</answer>", "10", None),
    ("<answer>10**3</answer>", "10", None),
    ("<answer>10²</answer>", "10", None),
    ("<answer>10⁻³</answer>", "10", None),
    ("<answer>10₂</answer>", "10", None),  # a subscript: "10 in base 2"
    ("<answer>5 × 10³</answer>", "5", None),  # a scale with a raised exponent
    ("<answer>5·10³</answer>", "5", None),
    ("<answer>1.5 × 10^3</answer>", "1.5", None),  # scientific notation
    (r"\boxed{1.5 \times 10^{3}}", "1.5", None),
    ("<answer>12abc</answer>", "12", None),  # letters attached
    ("<answer>5kg</answer>", "5", None),
    ("<answer>5кг</answer>", "5", None),  # other scripts: Cyrillic, Arabic-Indic, fractions
    ("<answer>1Е9</answer>", "1", None),  # a Cyrillic Е, not a Latin E
    ("<answer>5٣</answer>", "5", None),
    ("<answer>٣5</answer>", "5", None),
    ("<answer>3½</answer>", "3", None),
    ("<answer>5\u0301</answer>", "5", None),  # a combining mark attached
    ("<answer>3.٤</answer>", "3", None),
    ("The total is 5кг.", "5", None),
    ("<answer>0x1F</answer>", "0", None),
    ("<answer>1_000</answer>", "1", None),
    ("<answer>3.4.5</answer>", "3.4", None),
    ("<answer>10:30</answer>", "10", None),  # a time or a ratio
    ("<answer>1'000</answer>", "1", None),
    ("<answer>1 000</answer>", "1", None),  # space-grouped thousands: None, not 1000
    ("The answer is 1 000 dollars.", "1", None),
    ("<answer>1\u202f000</answer>", "1", None),  # narrow no-break space
    (r"<answer>1\,000</answer>", "1", None),  # LaTeX thin space
    ("<answer>2 1/2</answer>", "2", None),  # mixed numbers are not read
    (r"<answer>2\frac{1}{2}</answer>", "21/2", None),  # was glued into 21/2
    ("so it is 1e9", "9", None),  # fallback (last number): no suffix either
    ("in total 2.5e3", "3", None),
    ("we meet at 10:30", "30", None),
    ("she ate 2 1/2", "0.5", None),
    ("about 1 000", "0", None),
    # still read
    ("<answer>18.</answer>", "1", "18"),
    ("<answer>$1,234.50.</answer>", "1", "1234.5"),
    ("<answer>5 kg</answer>", "0", "5"),
    ("<answer>6 ft 2 in</answer>", "0", "6"),
    ("<answer>5'</answer>", "0", "5"),
    ("<answer>**73**.</answer>", "0", "73"),
    ("<answer>18 (9 * 2)</answer>", "9", "18"),
    ("<answer>x = -3</answer>", "3", "-3"),
    ("<answer>50%</answer>", "5", "50"),
    (r"<answer>-\frac{3}{4}</answer>", "3/4", "-0.75"),
    ("First 3 apples, then 5 more, so 8 in total", "5", "8"),
]


@pytest.mark.parametrize("completion, prefix, want", PREFIX_CASES)
def test_no_prefix_read(completion, prefix, want):
    assert extract_answer(completion) == want
    assert is_correct(completion, prefix) is False
    if want is not None:
        assert is_correct(completion, want)


@functools.cache
def _attached_characters() -> list[str]:
    """Every code point of Unicode's letters, numbers and marks (categories L*, N*, M*), and "_"."""
    return [c for c in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(c)[0] in "LNM"] + ["_"]


@pytest.mark.parametrize("context", ["<answer>{}</answer>", "The total is {}."])
@pytest.mark.parametrize("token", ["5{}", "{}5"])
def test_no_prefix_read_in_any_script(context, token):
    # Every letter, number and mark of every script, attached after the 5 (the token goes on: None) or
    # before it (the 5 is part of a longer token: not read). Only the ASCII digits make a longer number,
    # read whole ("53", "35"; "05" is 5). About 1 s per case for 136,000 code points.
    texts = [context.format(token.format(c)) for c in _attached_characters() if c not in "0123456789"]
    assert len(texts) > 130_000
    assert [t for t, answer in zip(texts, map(extract_answer, texts)) if answer is not None] == []
    digits = "0123456789"
    assert [extract_answer(context.format(token.format(d))) for d in digits] == [
        str(int(token.format(d))) for d in digits
    ]


def test_parse_number_reads_whole_or_nothing():
    for bad in [
        "1e9",
        "2.5e3",
        "10^3",
        "10**3",
        "12abc",
        "3.4.5",
        "10:30",
        "1 000",
        "2 1/2",
        "5kg",
        "5кг",
        "5٣",
        "٣5",
        "1Е9",
        "3½",
        "10³",
        "10₂",
        "5 × 10³",
        "5\u0301",
    ]:
        assert parse_number(bad) is None, bad


_literal = st.one_of(
    st.integers(0, 10**9).map(str),
    st.integers(1000, 10**9).map(lambda n: f"{n:,}"),
    st.decimals(0, 10**6, places=2, allow_nan=False, allow_infinity=False).map(lambda d: f"{d:f}"),
    st.tuples(st.integers(1, 999), st.integers(1, 999)).map(lambda t: f"{t[0]}/{t[1]}"),
)
_continuation = st.one_of(
    st.from_regex(r"[eE][-+]?[0-9]{1,3}", fullmatch=True),  # exponent
    st.from_regex(r"\^\{?-?[0-9]{1,3}\}?", fullmatch=True),  # power
    st.from_regex(r"\*\*[0-9]{1,2}", fullmatch=True),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True),  # letters attached
    st.from_regex(r"[.:][0-9]{1,3}[.:][0-9]{1,3}", fullmatch=True),  # "3.4.5", "10:30:00"
    st.from_regex(r" [0-9]{3}", fullmatch=True),  # "1 000"
    st.from_regex(r" [1-9]/[1-9]", fullmatch=True),  # "2 1/2"
)
_CONTEXTS = ["<answer>{}</answer>", "#### {}", "The answer is {}.", "\\boxed{{{}}}", "So it is {}", "{}"]


@given(st.sampled_from(["", "-", "$", "-$"]), _literal, _continuation)
def test_number_then_continuation_is_never_the_prefix(sign, literal, continuation):
    prefix = sign + literal
    for context in _CONTEXTS:
        text = context.format(prefix + continuation)
        assert extract_answer(text) is None, text
        assert not is_correct(text, prefix), text
    assert parse_number(prefix + continuation) is None


# ---------------------------------------------------------------- chat messages, gold handling


def test_completion_text_of_chat_messages():
    texts = [xml("9 * 2 = 18", "18"), "#### 17", "<reasoning>a</reasoning> <answer>5</answer>", "nothing", ""]
    gold = ["18", "18", "5", "1", "0"]
    chats = [[{"role": "assistant", "content": t}] for t in texts]
    assert [is_correct(c, g) for c, g in zip(chats, gold)] == [is_correct(t, g) for t, g in zip(texts, gold)]
    # last assistant message wins; content blocks; a bare dict
    multi = [
        {"role": "assistant", "content": "#### 1"},
        {"role": "tool", "content": "#### 2"},
        {"role": "assistant", "content": [{"type": "text", "text": "#### 3"}]},
    ]
    assert completion_text(multi) == "#### 3" and is_correct(multi, "3")
    assert is_correct({"role": "assistant", "content": "#### 4"}, "4")
    assert completion_text([{"role": "user", "content": "#### 4"}]) == ""
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    with pytest.raises(ValueError, match="completion"):
        is_correct(42, "42")


def test_gold_forms_and_validation():
    assert is_correct("#### 1000", "1,000") and is_correct("#### 1000", 1000) and is_correct("#### 0.5", Fraction(1, 2))
    assert gold_value("1,000") == gold_value(1000) == Fraction(1000) and gold_value(Fraction(1, 2)) == Fraction(1, 2)
    for bad in ["", "abc", "1,2", None, 1.5, True, ["1"]]:
        with pytest.raises(ValueError, match="gold"):
            is_correct("#### 1", bad)
        with pytest.raises(ValueError, match="gold"):
            gold_value(bad)


# ---------------------------------------------------------------- the verdict: answer, then stop

GOOD = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
RAN_ON = GOOD + "\n<reasoning>\n7 + 1 = 8\n</reasoning>\n<answer>\n8 and so on"  # answered, then kept going
GARBAGE = GOOD + " 1 2 3 blah"


def test_trailing_garbage_after_a_correct_answer_fails_the_verdict():
    assert is_correct(GARBAGE, "7") and is_correct(RAN_ON, "8")  # the lenient check still finds an answer ...
    assert not strict_is_correct(GARBAGE, "7") and not strict_is_correct(RAN_ON, "8")  # ... the verdict does not
    assert strict_is_correct(GOOD, "7") and strict_is_correct(GOOD + "\n\n", "7")
    assert not strict_is_correct([{"role": "assistant", "content": GARBAGE}], "7")
    assert strict_is_correct([{"role": "assistant", "content": GOOD}], "7")
    assert not strict_is_correct(GOOD.replace("7\n</answer>", "8\n</answer>"), "7")  # stopped but wrong


def test_ends_at_answer():
    assert ends_at_answer(GOOD) and ends_at_answer(GOOD + " \n") and ends_at_answer("<answer>7</ANSWER >")
    assert not ends_at_answer(RAN_ON) and not ends_at_answer(GARBAGE) and not ends_at_answer("7")


# ---------------------------------------------------------------- fuzzing: never raise, round-trip


@settings(max_examples=300)
@given(fuzz_text)
def test_never_raises_and_round_trips(text):
    out = extract_answer(text)
    if out is not None:
        value = parse_number(out)
        assert value is not None
        assert extract_answer(out) == out  # canonical is a fixed point
        assert is_correct(text, out)
    assert isinstance(is_correct(text, "42"), bool) and isinstance(strict_is_correct(text, "42"), bool)
    assert strict_is_correct(text, "42") <= is_correct(text, "42")  # the verdict is the stricter one
    assert is_correct([{"role": "assistant", "content": text}], "1/3") == is_correct(text, "1/3")


@given(st.text())
def test_parse_number_never_raises(text):
    value = parse_number(text)
    assert value is None or isinstance(value, Fraction)


# ---------------------------------------------------------------- performance guard


@pytest.mark.parametrize(
    "prefix, unit, n, suffix",
    [
        ("", "1,", 50_000, ""),
        ("", "<answer>", 12_500, ""),
        ("", "<answer>1", 11_000, ""),
        ("", "#### ", 20_000, ""),
        ("", "\\boxed{", 14_000, ""),
        ("", "the answer is ", 7_200, ""),
        ("", "A:", 50_000, ""),
        ("", "1", 100_000, ""),
        ("", "1/", 50_000, ""),
        ("", "- 1", 33_000, ""),
        ("", " ,1", 33_000, ""),
        ("<reasoning>\n", "x\n</reasoning>\n<answer>\n", 4_000, ""),
        ("", "</reasoning> ", 8_000, ""),
        ("", "1 + 1\n", 16_000, ""),
        ("answer", " ", 100_000, ""),
        ("####", " \t", 50_000, "x"),
        ("", "1e", 50_000, ""),
        ("", "1 ", 50_000, ""),
        ("", "10^", 33_000, ""),
        ("", "1 x 10", 16_000, ""),
        ("", "1 \\times 10^", 7_000, ""),
        ("1", " ", 100_000, "x"),
        ("", "1\\,", 33_000, ""),
        ("", "\\frac{1}{2}", 8_000, ""),
        ("5", "\u0301", 100_000, ""),
        ("", "5٣", 50_000, ""),
        ("", "\u0301 5", 33_000, ""),
        ("", "10³", 33_000, ""),
        ("", "1 × 10", 16_000, "³"),
    ],
)
def test_no_catastrophic_backtracking(prefix, unit, n, suffix):
    def work(text):
        extract_answer(text)
        is_correct(text, "1")
        strict_is_correct(text, "1")

    assert growth(work, prefix, unit, n, suffix) < LINEAR_BOUND  # linear in the text, measured side by side
