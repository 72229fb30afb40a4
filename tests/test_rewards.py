"""Tests for qae_lab.rewards: GSM8K golds, a table of tricky completions, format and composite
rewards, TRL's calling convention, fuzzing (never raise, outputs round-trip) and a speed guard."""

from __future__ import annotations

import json
import math
import os
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qae_lab.rewards import (
    MAX_DIGITS,
    CompositeWeights,
    completion_text,
    composite_breakdown,
    composite_reward,
    correctness_reward,
    count_reasoning_steps,
    extract_answer,
    is_correct,
    make_composite_reward,
    parse_number,
    soft_format_reward,
    strict_format_reward,
)

REWARD_FNS = [correctness_reward, strict_format_reward, soft_format_reward, composite_reward]


def xml(reasoning: str, answer: str) -> str:
    """A completion in the exact requested format."""
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


def call(fn, completions, gold):
    """Call a reward function the way TRL's GRPOTrainer does (all keywords, extra columns)."""
    n = len(completions)
    return fn(prompts=["q"] * n, completions=completions, completion_ids=[[1]] * n, gold=gold,
              question=["q"] * n, trainer_state=None, log_extra=lambda *a: None, log_metric=lambda *a: None)


# ---------------------------------------------------------------- GSM8K: every gold parses, the facts hold

def _gsm8k_dir() -> Path:
    env = os.environ.get("QAE_LAB_GSM8K_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "gsm8k"


def _gsm8k(split: str) -> list[dict]:
    path = _gsm8k_dir() / f"{split}.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K not found at {path}; set QAE_LAB_GSM8K_DIR")
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("split, n_rows, n_commas, n_negative",
                         [("train", 7473, 79, 3), ("test", 1319, 14, 2)])
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
    assert correctness_reward([row["answer"] for row in rows[:50]], golds[:50]) == [1.0] * 50


# ---------------------------------------------------------------- the table of tricky completions

CASES = [
    # (completion, gold, extract_answer, is_correct)
    (xml("9 * 2 = 18", "18"), "18", "18", True),
    (xml("line 1\nline 2", "  18  "), "18", "18", True),                       # extra spaces
    ("<answer>\nShe pays\n$18\nin total.\n</answer>", "18", "18", True),         # multi-line content
    ("<reasoning>9*2</reasoning>\n<answer>\n18", "18", "18", True),             # missing closing tag at the end
    ("<answer>17</answer> wait, no: <answer>18</answer>", "18", "18", True),    # last block wins
    ("<answer>18</answer> hmm <answer>17</answer>", "18", "17", False),
    (xml("9 * 2 = 18", "eighteen"), "18", None, False),                         # number only in the reasoning
    ("<answer></answer> 18", "18", None, False),                                # empty answer tag decides
    ("<ANSWER> 18 </ANSWER>", "18", "18", True),                                # case and spaces in tags
    ("<answer>9 * 2 = 18</answer>", "18", "18", True),                          # after the last '='
    ("<answer>18 (that is 9 * 2)</answer>", "18", "18", True),                  # first number, explanation after
    ("<answer>The answer is 42 (6 * 7)</answer>", "42", "42", True),            # marker inside the tag
    ("<answer>#### 42</answer>", "42", "42", True),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72", "72", True),  # GSM8K reference style
    ("#### 1,000", "1,000", "1000", True),
    ("#### -3", "-3", "-3", True),
    ("#### Final answer\nThe answer is 5", "5", "5", True),                     # a markdown heading, not a marker
    ("The answer is 7.\n#### 8", "8", "8", True),                               # #### outranks the phrase
    (r"So the result is $\boxed{18}$.", "18", "18", True),
    (r"\boxed{17} first, then \boxed{18}", "18", "18", True),                   # last box
    (r"\boxed{\frac{3}{4}}", "0.75", "0.75", True),                             # LaTeX fraction, nested braces
    (r"\boxed{18 \text{ dollars}}", "18", "18", True),
    (r"\boxed{1{,}000}", "1000", "1000", True),                                 # LaTeX thousands separator
    ("We add them up. The answer is 72.", "72", "72", True),                    # trailing period
    ("the final answer is: 1,234", "1234", "1234", True),
    ("Answer: 5 apples (from 2 + 3)", "5", "5", True),                         # first number after the phrase
    ("Q: how many?\nA: 12", "12", "12", True),
    ("The answer is **73**.", "73", "73", True),                                # markdown bold
    ("So she has **73** left", "73", "73", True),
    ("The total cost is $1,234.50", "1234.5", "1234.5", True),
    ("It costs $29.00", "29", "29", True),                                      # "$29.00" vs 29
    ("The answer is 18 dollars", "18", "18", True),                             # units
    ("He drives at 60 mph", "60", "60", True),
    ("The discount is 25%", "25", "25", True),                                  # % dropped
    ("The answer is −3", "-3", "-3", True),                                     # unicode minus
    ("The answer is -$5", "-5", "-5", True),
    ("18.00", "18", "18", True),
    ("29.50", "29.5", "29.5", True),
    ("<answer>3/4</answer>", "3/4", "0.75", True),                              # exact fractions
    ("<answer>6/8</answer>", "0.75", "0.75", True),
    ("<answer>1/3</answer>", "1/3", "1/3", True),
    ("<answer>2/6</answer>", "1/3", "1/3", True),
    ("<answer>0.333</answer>", "1/3", "0.333", False),                          # no float fuzz
    ("<answer>0,1</answer>", "1", None, False),                                 # a tuple is not "01" or 1
    ("<answer>0, 1</answer>", "1", None, False),
    ("The pair is (3, 4)", "4", None, False),
    ("<answer>,</answer>", "1", None, False),                                   # a bare comma
    ("<answer>1,,000</answer>", "1000", None, False),
    ("<answer>1,234,56</answer>", "123456", None, False),                       # malformed grouping
    ("They raised 8,000 dollars", "8,000", "8000", True),                       # not split on commas
    ("1,234,567 grains", "1234567", "1234567", True),
    ("18, which is the answer", "18", "18", True),                              # a comma as punctuation
    ("The answer is 71", "72", "71", False),                                    # a wrong answer
    ("I don't know.", "72", None, False),                                       # no answer at all
    ("", "0", None, False),
    ("First 3 apples, then 5 more, so 8 in total", "8", "8", True),             # fallback: last number
    ("Version 3.14.15", "3", None, False),                                      # not one number
    ("1/0", "0", None, False),                                                  # zero denominator
    ("<answer>" + "9" * (MAX_DIGITS + 1) + "</answer>", "1", None, False),      # too long: ignored
    ("<answer>007</answer>", "7", "7", True),
    ("x = -3", "-3", "-3", True),
    ("12-3", "3", "3", True),                                                   # a hyphen after a digit is no sign
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
    for bad in ["", ",", "0,1", "1,2", "1,,000", "1,0000", "12,34", "18.", "1e3", "1_000", "abc", "1/0",
                "1.5/3", "18 dollars", "50%", "--3", "1 000", "9" * (MAX_DIGITS + 1)]:
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
    ("<answer>1e9</answer>", "1", None),                     # exponents are not read
    ("<answer>1e-9</answer>", "1", None),
    ("#### 2.5E3", "2.5", None),
    ("The answer is 10^3.", "10", None),                     # powers
    (r"<answer>10^{3}</answer>", "10", None),
    ("<answer>10**3</answer>", "10", None),
    ("<answer>10²</answer>", "10", None),
    ("<answer>1.5 × 10^3</answer>", "1.5", None),            # scientific notation
    (r"\boxed{1.5 \times 10^{3}}", "1.5", None),
    ("<answer>12abc</answer>", "12", None),                  # letters attached
    ("<answer>5kg</answer>", "5", None),
    ("<answer>0x1F</answer>", "0", None),
    ("<answer>1_000</answer>", "1", None),
    ("<answer>3.4.5</answer>", "3.4", None),
    ("<answer>10:30</answer>", "10", None),                  # a time or a ratio
    ("<answer>1'000</answer>", "1", None),
    ("<answer>1 000</answer>", "1", None),                   # space-grouped thousands: None, not 1000
    ("The answer is 1 000 dollars.", "1", None),
    ("<answer>1\u202f000</answer>", "1", None),               # narrow no-break space
    (r"<answer>1\,000</answer>", "1", None),                 # LaTeX thin space
    ("<answer>2 1/2</answer>", "2", None),                   # mixed numbers are not read
    (r"<answer>2\frac{1}{2}</answer>", "21/2", None),        # was glued into 21/2
    ("so it is 1e9", "9", None),                             # fallback (last number): no suffix either
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


def test_parse_number_reads_whole_or_nothing():
    for bad in ["1e9", "2.5e3", "10^3", "10**3", "12abc", "3.4.5", "10:30", "1 000", "2 1/2", "5kg"]:
        assert parse_number(bad) is None, bad


_literal = st.one_of(
    st.integers(0, 10**9).map(str),
    st.integers(1000, 10**9).map(lambda n: f"{n:,}"),
    st.decimals(0, 10**6, places=2, allow_nan=False, allow_infinity=False).map(lambda d: f"{d:f}"),
    st.tuples(st.integers(1, 999), st.integers(1, 999)).map(lambda t: f"{t[0]}/{t[1]}"),
)
_continuation = st.one_of(
    st.from_regex(r"[eE][-+]?[0-9]{1,3}", fullmatch=True),            # exponent
    st.from_regex(r"\^\{?-?[0-9]{1,3}\}?", fullmatch=True),           # power
    st.from_regex(r"\*\*[0-9]{1,2}", fullmatch=True),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True),      # letters attached
    st.from_regex(r"[.:][0-9]{1,3}[.:][0-9]{1,3}", fullmatch=True),    # "3.4.5", "10:30:00"
    st.from_regex(r" [0-9]{3}", fullmatch=True),                      # "1 000"
    st.from_regex(r" [1-9]/[1-9]", fullmatch=True),                   # "2 1/2"
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

def test_chat_completions_match_strings():
    texts = [xml("9 * 2 = 18", "18"), "#### 17", "<reasoning>a</reasoning> <answer>5</answer>", "nothing", ""]
    gold = ["18", "18", "5", "1", "0"]
    chats = [[{"role": "assistant", "content": t}] for t in texts]
    for fn in REWARD_FNS:
        assert call(fn, chats, gold) == call(fn, texts, gold)
    # last assistant message wins; content blocks; a bare dict
    multi = [{"role": "assistant", "content": "#### 1"}, {"role": "tool", "content": "#### 2"},
             {"role": "assistant", "content": [{"type": "text", "text": "#### 3"}]}]
    assert completion_text(multi) == "#### 3" and is_correct(multi, "3")
    assert is_correct({"role": "assistant", "content": "#### 4"}, "4")
    assert completion_text([{"role": "user", "content": "#### 4"}]) == ""
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    with pytest.raises(ValueError, match="completion"):
        is_correct(42, "42")


def test_gold_forms_and_validation():
    assert is_correct("#### 1000", "1,000") and is_correct("#### 1000", 1000) and is_correct("#### 0.5", Fraction(1, 2))
    for bad in ["", "abc", "1,2", None, 1.5, True, ["1"]]:
        with pytest.raises(ValueError, match="gold"):
            is_correct("#### 1", bad)
    for fn in (correctness_reward, composite_reward):
        with pytest.raises(ValueError, match="gold"):
            fn(["#### 1", "#### 2"], gold=["1"])  # one short
        with pytest.raises(ValueError, match="gold"):
            fn(["#### 1"], gold="1")  # a bare string is not a list
        with pytest.raises(ValueError, match="gold"):
            fn(["#### 1"], gold=["one"])
    for fn in REWARD_FNS:
        with pytest.raises(ValueError, match="completions"):
            fn("#### 1", gold=["1"])


def test_rewards_are_python_floats():
    comps = [xml("1 + 1 = 2", "2"), "junk"]
    for fn in REWARD_FNS:
        out = call(fn, comps, ["2", "2"])
        assert len(out) == 2 and all(type(r) is float for r in out)
    assert call(correctness_reward, comps, ["2", "2"]) == [1.0, 0.0]
    assert correctness_reward([], gold=[]) == []


# ---------------------------------------------------------------- strict vs soft format

FORMAT_CASES = [
    # (completion, strict, soft)
    (xml("one line", "7"), 1.0, 1.0),
    (xml("step 1\nstep 2\n\nstep 3", "7"), 1.0, 1.0),                     # multi-line reasoning
    (xml("step 1", "7 boxes\nof 3"), 1.0, 1.0),                            # multi-line answer (the DOTALL bug)
    ("\n  " + xml("r", "7") + "\n\n", 1.0, 1.0),                            # surrounding whitespace
    (xml("  ", "7"), 0.0, 1.0),                                            # blank reasoning
    (xml("r", ""), 0.0, 1.0),                                              # empty answer
    ("<reasoning>r</reasoning><answer>7</answer>", 0.0, 1.0),              # no newlines
    ("<reasoning>\nr\n</reasoning>\n\n<answer>\n7\n</answer>", 0.0, 1.0),  # extra blank line between
    (xml("r", "7") + " extra", 0.0, 1.0),                                  # trailing text
    ("Sure! " + xml("r", "7"), 0.0, 1.0),                                  # leading text
    (xml("r", "7") + "\n" + xml("r", "8"), 0.0, 1.0),                      # tags twice
    (xml("mentions <answer> inside", "7"), 0.0, 1.0),
    ("<reasoning>\nr\n</reasoning>\nso\n<answer>\n7\n</answer>", 0.0, 0.0),  # text between the blocks
    ("<answer>\n7\n</answer>\n<reasoning>\nr\n</reasoning>", 0.0, 0.0),    # wrong order
    ("<reasoning>\nr\n</reasoning>\n<answer>\n7", 0.0, 0.0),               # unclosed answer
    ("<reasoning>\nr\n<answer>\n7\n</answer>", 0.0, 0.0),                  # no </reasoning>
    ("#### 7", 0.0, 0.0),
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize("completion, strict, soft", FORMAT_CASES)
def test_strict_and_soft_format(completion, strict, soft):
    assert strict_format_reward([completion]) == [strict]
    assert soft_format_reward([completion]) == [soft]
    assert strict <= soft  # strict implies soft


def test_notebook_regex_bug_is_fixed():
    # the popular pattern r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$" without re.DOTALL
    import re
    c = xml("a\nb", "7\nboxes")
    assert re.match(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>$", c) is None
    assert strict_format_reward([c]) == [1.0]


# ---------------------------------------------------------------- composite reward

def test_count_reasoning_steps_hand():
    block = "<reasoning>\n48/2 = 24\nSo May had 24.\n48 + 24 = 72\n\n2 × 3\nno digits = here\n</reasoning>"
    assert count_reasoning_steps(block) == 3
    assert count_reasoning_steps("1 + 1 = 2 outside any block") == 0
    assert count_reasoning_steps("<reasoning>\n1+1=2\n") == 0  # unclosed
    assert count_reasoning_steps("<reasoning>3 − 1 = 2</reasoning>") == 1  # one line, unicode minus


def test_composite_hand_values():
    steps4 = "1+1=2\n2+2=4\n4+4=8\n8+8=16"
    perfect = xml(steps4, "16")
    assert composite_breakdown(perfect, "16")["total"] == 7.5 == CompositeWeights().r_max
    assert composite_reward([perfect], gold=["16"]) == [7.5]
    assert composite_reward([xml(steps4 + "\n16+16=32\n1+2=3", "16")], gold=["16"]) == [7.5]  # capped at max_steps
    # wrong answer, perfect form: 1 + 0.5 + 1 = 2.5
    assert composite_reward([perfect], gold=["17"]) == [2.5]
    # soft only (no newlines), 1 of 4 steps, correct: 5 + 0.5 + 0.5 + 0.25 = 6.25
    soft = "<reasoning>2*3=6</reasoning><answer>6</answer>"
    assert composite_breakdown(soft, "6") == {"correct": 1.0, "format": 0.5, "tags": 1.0, "steps": 0.25,
                                              "total": 6.25}
    # bare "#### 6": correct only
    assert composite_reward(["#### 6"], gold=["6"]) == [5.0]
    # two answer blocks: <answer>, </answer> appear twice -> tags 2/4; format strict 0, soft 1 -> 0.5
    twice = xml("1+1=2", "5") + "\n<answer>\n6\n</answer>"
    assert composite_breakdown(twice, "6") == {"correct": 1.0, "format": 0.5, "tags": 0.5, "steps": 0.25,
                                               "total": 5 + 0.5 + 0.25 + 0.25}
    # garbage gets 0; a lone tag earns its quarter of the tags weight only
    assert composite_reward(["", "blah 7", "</reasoning>" * 2, "\x00<<>>"], gold=["1"] * 4) == [0.0] * 4
    assert composite_reward(["<answer>"], gold=["1"]) == [0.5 / 4]


def test_composite_configurable():
    w = CompositeWeights(correct=2.0, format=0.0, tags=1.0, steps=3, max_steps=2)
    fn = make_composite_reward(w)
    assert fn.__name__ == "composite_reward" and w.r_max == 6.0
    c = xml("1+1=2", "2")  # correct, strict, all tags, 1 of 2 steps
    assert fn([c], gold=["2"]) == [2.0 + 1.0 + 1.5]
    assert make_composite_reward({"correct": 1.0, "format": 0, "tags": 0, "steps": 0})([c], gold=["2"]) == [1.0]
    assert make_composite_reward(None)([c], gold=["2"]) == composite_reward([c], gold=["2"])
    assert call(fn, [c, [{"role": "assistant", "content": c}]], ["2", "2"]) == [4.5, 4.5]
    with pytest.raises(ValueError, match="weights"):
        make_composite_reward({"correctness": 1.0})
    with pytest.raises(ValueError, match="weights"):
        make_composite_reward([5, 1, 0.5, 1])


@pytest.mark.parametrize("field, value", [
    ("correct", -1.0), ("format", math.nan), ("tags", math.inf), ("steps", -0.1), ("correct", "5"),
    ("format", True), ("max_steps", 0), ("max_steps", 2.5), ("max_steps", True),
])
def test_composite_weights_validation(field, value):
    with pytest.raises(ValueError, match=field):
        CompositeWeights(**{field: value})


def test_composite_weights_frozen():
    with pytest.raises(AttributeError):
        CompositeWeights().correct = 1.0


# ---------------------------------------------------------------- fuzzing: never raise, round-trip

FRAGMENTS = ["<answer>", "</answer>", "<reasoning>", "</reasoning>", "\n", " ", "0", "1", "7", "42", ",", "$",
             "####", "\\boxed{", "}", "{", "/", "-", "−", ".", "**", "%", "=", "The answer is ", "A:",
             "\\frac{", "{,}", "dollars", "e"]
fuzz_text = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))


@settings(max_examples=300)
@given(fuzz_text)
def test_never_raises_and_round_trips(text):
    out = extract_answer(text)
    if out is not None:
        value = parse_number(out)
        assert value is not None
        assert extract_answer(out) == out  # canonical is a fixed point
        assert is_correct(text, out)
    assert isinstance(is_correct(text, "42"), bool)
    for fn in REWARD_FNS:
        r = call(fn, [text, [{"role": "assistant", "content": text}]], ["42", "1/3"])
        assert all(type(x) is float and math.isfinite(x) for x in r)
    total = composite_breakdown(text, "42")["total"]
    assert 0.0 <= total <= 7.5


@given(st.text())
def test_parse_number_never_raises(text):
    value = parse_number(text)
    assert value is None or isinstance(value, Fraction)


# ---------------------------------------------------------------- performance guard

@pytest.mark.parametrize("adversarial", [
    "1," * 50_000, "<answer>" * 12_500, "<answer>1" * 11_000, "#### " * 20_000, "\\boxed{" * 14_000,
    "the answer is " * 7_200, "A:" * 50_000, "1" * 100_000, "1/" * 50_000, "- 1" * 33_000, " ,1" * 33_000,
    "<reasoning>\n" + "x\n</reasoning>\n<answer>\n" * 4_000, "</reasoning> " * 8_000, "1 + 1\n" * 16_000,
    "answer" + " " * 100_000, "####" + " \t" * 50_000 + "x",
    "1e" * 50_000, "1 " * 50_000, "10^" * 33_000, "1 x 10" * 16_000, "1 \\times 10^" * 7_000, "1" + " " * 100_000 + "x",
    "1\\," * 33_000, "\\frac{1}{2}" * 8_000,
])
def test_no_catastrophic_backtracking(adversarial):
    start = time.perf_counter()
    extract_answer(adversarial)
    is_correct(adversarial, "1")
    for fn in REWARD_FNS:
        fn([adversarial], gold=["1"])
    assert time.perf_counter() - start < 2.0
