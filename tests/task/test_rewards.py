"""Tests for qae_lab.task.rewards: the strict and lenient 0/1 rewards, format and composite rewards, the
table of training rewards and their success thresholds, TRL's calling convention, fuzzing (never
raise, finite floats) and a speed guard. Reading answers and the verdict: tests/task/test_answers.py."""

from __future__ import annotations

import math
import re

import pytest
from side_by_side import LINEAR_BOUND, growth
from hypothesis import given, settings
from texts import fuzz_text, xml

from qae_lab.task.answers import is_correct, strict_is_correct
from qae_lab.task.rewards import (
    REWARDS,
    SUCCESS_BANDS,
    CompositeWeights,
    composite_breakdown,
    composite_reward,
    correctness_reward,
    count_reasoning_steps,
    make_composite_reward,
    soft_format_reward,
    strict_composite_reward,
    strict_correctness_reward,
    strict_format_reward,
)
from qae_lab.task.verify import available as math_verify_available
from qae_lab.task.verify import math_verify_reward

REWARD_FNS = [
    strict_correctness_reward,
    correctness_reward,
    strict_format_reward,
    soft_format_reward,
    composite_reward,
    strict_composite_reward,
]
GOOD = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
GARBAGE = GOOD + " 1 2 3 blah"  # a correct answer, then more text


def call(fn, completions, gold):
    """Call a reward function the way TRL's GRPOTrainer does (all keywords, extra columns)."""
    n = len(completions)
    return fn(
        prompts=["q"] * n,
        completions=completions,
        completion_ids=[[1]] * n,
        gold=gold,
        question=["q"] * n,
        trainer_state=None,
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
    )


# ---------------------------------------------------------------- the 0/1 rewards


def test_trailing_garbage_after_a_correct_answer_scores_zero_in_the_reward():
    assert strict_correctness_reward([GOOD, GARBAGE, GOOD + "\n\n"], gold=["7", "7", "7"]) == [1.0, 0.0, 1.0]
    assert correctness_reward([GARBAGE], gold=["7"]) == [1.0]  # ... which is why the lenient reward is not used
    conversational = [[{"role": "assistant", "content": GARBAGE}], [{"role": "assistant", "content": GOOD}]]
    assert strict_correctness_reward(conversational, gold=["7", "7"]) == [0.0, 1.0]
    wrong = GOOD.replace("7\n</answer>", "8\n</answer>")  # stopped but wrong
    assert call(strict_correctness_reward, [wrong, GOOD], ["7", "7"]) == [0.0, 1.0]


def test_chat_completions_match_strings():
    texts = [xml("9 * 2 = 18", "18"), "#### 17", "<reasoning>a</reasoning> <answer>5</answer>", "nothing", ""]
    gold = ["18", "18", "5", "1", "0"]
    chats = [[{"role": "assistant", "content": t}] for t in texts]
    for fn in REWARD_FNS:
        assert call(fn, chats, gold) == call(fn, texts, gold)


def test_gold_and_completions_validation():
    for fn in (strict_correctness_reward, correctness_reward, composite_reward, strict_composite_reward):
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
    assert correctness_reward([], gold=[]) == [] and strict_correctness_reward([], gold=[]) == []


# ---------------------------------------------------------------- strict vs soft format

FORMAT_CASES = [
    # (completion, strict, soft)
    (xml("one line", "7"), 1.0, 1.0),
    (xml("step 1\nstep 2\n\nstep 3", "7"), 1.0, 1.0),  # multi-line reasoning
    (xml("step 1", "7 boxes\nof 3"), 1.0, 1.0),  # multi-line answer (the DOTALL bug)
    ("\n  " + xml("r", "7") + "\n\n", 1.0, 1.0),  # surrounding whitespace
    (xml("  ", "7"), 0.0, 1.0),  # blank reasoning
    (xml("r", ""), 0.0, 1.0),  # empty answer
    ("<reasoning>r</reasoning><answer>7</answer>", 0.0, 1.0),  # no newlines
    ("<reasoning>\nr\n</reasoning>\n\n<answer>\n7\n</answer>", 0.0, 1.0),  # extra blank line between
    (xml("r", "7") + " extra", 0.0, 1.0),  # trailing text
    ("Sure! " + xml("r", "7"), 0.0, 1.0),  # leading text
    (xml("r", "7") + "\n" + xml("r", "8"), 0.0, 1.0),  # tags twice
    (xml("mentions <answer> inside", "7"), 0.0, 1.0),
    ("<reasoning>\nr\n</reasoning>\nso\n<answer>\n7\n</answer>", 0.0, 0.0),  # text between the blocks
    ("<answer>\n7\n</answer>\n<reasoning>\nr\n</reasoning>", 0.0, 0.0),  # wrong order
    ("<reasoning>\nr\n</reasoning>\n<answer>\n7", 0.0, 0.0),  # unclosed answer
    ("<reasoning>\nr\n<answer>\n7\n</answer>", 0.0, 0.0),  # no </reasoning>
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
    assert composite_breakdown(soft, "6") == {"correct": 1.0, "format": 0.5, "tags": 1.0, "steps": 0.25, "total": 6.25}
    # bare "#### 6": correct only
    assert composite_reward(["#### 6"], gold=["6"]) == [5.0]
    # two answer blocks: <answer>, </answer> appear twice -> tags 2/4; format strict 0, soft 1 -> 0.5
    twice = xml("1+1=2", "5") + "\n<answer>\n6\n</answer>"
    assert composite_breakdown(twice, "6") == {
        "correct": 1.0,
        "format": 0.5,
        "tags": 0.5,
        "steps": 0.25,
        "total": 5 + 0.5 + 0.25 + 0.25,
    }
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


@pytest.mark.parametrize(
    "field, value",
    [
        ("correct", -1.0),
        ("format", math.nan),
        ("tags", math.inf),
        ("steps", -0.1),
        ("correct", "5"),
        ("format", True),
        ("max_steps", 0),
        ("max_steps", 2.5),
        ("max_steps", True),
    ],
)
def test_composite_weights_validation(field, value):
    with pytest.raises(ValueError, match=field):
        CompositeWeights(**{field: value})


def test_composite_weights_frozen():
    with pytest.raises(AttributeError):
        CompositeWeights().correct = 1.0


# ---------------------------------------------------------------- the strict composite and the table of rewards


def test_strict_composite_reward_judges_correctness_by_the_verdict():
    steps4 = "1+1=2\n2+2=4\n4+4=8\n8+8=16"
    perfect = xml(steps4, "16")
    ran_on = perfect + "\n<reasoning>\nAnd another one: 2+2=4"  # correct, then runs on
    # "#### 16" does not stop at </answer>: no correctness, and no format either
    assert strict_composite_reward([perfect, "#### 16"], gold=["16", "16"]) == [7.5, 0.0]
    assert composite_reward(["#### 16"], gold=["16"]) == [5.0]
    lenient, strict = composite_breakdown(ran_on, "16"), composite_breakdown(ran_on, "16", verdict=strict_is_correct)
    assert lenient["correct"] == 1.0 and strict["correct"] == 0.0
    assert {k: v for k, v in lenient.items() if k not in ("correct", "total")} == {
        k: v for k, v in strict.items() if k not in ("correct", "total")
    }  # only the correctness term differs
    assert strict_composite_reward([ran_on], gold=["16"]) == [strict["total"]] == [lenient["total"] - 5.0]
    assert strict_composite_reward.__name__ == "strict_composite_reward"  # what TRL logs it as
    with pytest.raises(ValueError, match="verdict"):
        make_composite_reward(verdict="strict")
    with pytest.raises(ValueError, match="verdict"):
        composite_breakdown(perfect, "16", verdict=None)


def test_rewards_table_and_success_bands():
    assert REWARDS == {
        "strict": strict_correctness_reward,
        "composite": strict_composite_reward,
        "lenient": correctness_reward,
        "lenient_composite": composite_reward,
        "math_verify": math_verify_reward,
    }
    assert SUCCESS_BANDS == {
        "strict": (0.0, 1.0),
        "composite": (2.5, 5.0),
        "lenient": (0.0, 1.0),
        "lenient_composite": (2.5, 5.0),
        "math_verify": (0.0, 1.0),
    }
    # every completion of a mixed bag: wrong ones score <= lo, correct ones >= hi, by each reward's verdict
    texts = [
        GOOD,
        GARBAGE,
        xml("3+4=7\n1+1=2\n2+2=4\n4+4=8", "7"),
        xml("3+4=7\n1+1=2\n2+2=4\n4+4=8", "8"),
        "<reasoning>3+4=7</reasoning><answer>7</answer>",
        "<answer>7</answer>",
        "#### 7",
        "",
        "7",
    ]
    for name, fn in REWARDS.items():
        if name == "math_verify" and not math_verify_available():
            continue  # the optional verify extra (tests/task/test_verify.py)
        lo, hi = SUCCESS_BANDS[name]
        verdict = is_correct if name.startswith("lenient") else strict_is_correct
        for t, r in zip(texts, fn(texts, gold=["7"] * len(texts))):
            assert (r >= hi) if verdict(t, "7") else (r <= lo), (name, t, r)
    # the ablations differ from the run's rewards exactly on answers that run on
    assert REWARDS["lenient"]([GARBAGE], gold=["7"]) == [1.0] and REWARDS["strict"]([GARBAGE], gold=["7"]) == [0.0]


# ---------------------------------------------------------------- fuzzing: never raise, finite floats


@settings(max_examples=300)
@given(fuzz_text)
def test_never_raises_and_stays_in_range(text):
    for fn in REWARD_FNS:
        r = call(fn, [text, [{"role": "assistant", "content": text}]], ["42", "1/3"])
        assert all(type(x) is float and math.isfinite(x) for x in r)
    total = composite_breakdown(text, "42")["total"]
    assert 0.0 <= total <= 7.5
    assert strict_correctness_reward([text], gold=["42"]) == [float(strict_is_correct(text, "42"))]
    assert correctness_reward([text], gold=["42"]) == [float(is_correct(text, "42"))]
    assert strict_composite_reward([text], gold=["42"])[0] <= composite_reward([text], gold=["42"])[0]


# ---------------------------------------------------------------- performance guard


@pytest.mark.parametrize(
    "prefix, unit, n, suffix",
    [
        ("<reasoning>\n", "x\n</reasoning>\n<answer>\n", 4_000, ""),
        ("", "</reasoning> ", 8_000, ""),
        ("", "<reasoning>", 9_000, ""),
        ("<reasoning>\n", "1 + 1\n", 16_000, "</reasoning>"),
        ("</reasoning>", " ", 100_000, "x"),
        ("", "<answer>", 12_500, ""),
        ("", "1,", 50_000, ""),
        ("", "#### ", 20_000, ""),
        ("", "1e", 50_000, ""),
        ("", "1\\,", 33_000, ""),
    ],
)
def test_no_catastrophic_backtracking(prefix, unit, n, suffix):
    def work(text):
        for fn in REWARD_FNS:
            fn([text], gold=["1"])
        count_reasoning_steps(text)

    assert growth(work, prefix, unit, n, suffix) < LINEAR_BOUND  # linear in the text, measured side by side
