"""Tests for qae_lab.task.sums: the problems, and the supervised solutions' orders, errors, checks and slips."""

from __future__ import annotations

import collections
import random
import re

import pytest

from qae_lab.task.answers import extract_answer, strict_is_correct
from qae_lab.task.behaviour import reflection_counts
from qae_lab.task.rewards import soft_format_reward, strict_format_reward
from qae_lab.task.sums import (
    CATCH_RATE,
    CHECK_RATE,
    FORMAT_SLIP_RATE,
    SUMS_CORRECT_RATE,
    SUMS_LEVELS,
    WRONG_OFFSETS,
    chain_lines,
    sums_completion,
    sums_task,
)

_LINE = re.compile(r"(\d+) \+ (\d+) = (\d+)")


def _within(hits: list[bool], q: float) -> bool:
    """The hit rate lies within 4 standard errors of q."""
    n = len(hits)
    return abs(sum(hits) / n - q) < 4 * (q * (1 - q) / n) ** 0.5


def test_problems_are_deterministic_and_cycle_the_levels():
    a, b = sums_task(10, seed=4), sums_task(10, seed=4)
    assert a == b and sums_task(10, seed=5) != a
    assert [r["level"] for r in a] == [1, 2, 3, 4, 5] * 2
    for r in a:
        count, lo, hi = SUMS_LEVELS[r["level"]]
        assert len(r["terms"]) == count and all(lo <= t <= hi for t in r["terms"])
        assert r["gold"] == str(sum(r["terms"])) and r["answer"].endswith(f"#### {r['gold']}")
        assert all(str(t) in r["question"] for t in r["terms"])
    assert {r["question"].split()[0] for r in sums_task(200, seed=1)} >= {"Add", "What", "Find"}  # several phrasings


@pytest.mark.parametrize(
    "kwargs, match",
    [({"n": 0}, "n must be"), ({"n": 2, "levels": (0,)}, "levels must be"), ({"n": 2, "levels": ()}, "levels must be")],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sums_task(**kwargs)


def test_chain_carries_an_error_on():
    assert chain_lines([5, 6, 7]) == ["5 + 6 = 11", "11 + 7 = 18"]
    assert chain_lines([5, 6, 7], error_at=0, offset=-2) == ["5 + 6 = 9", "9 + 7 = 16"]


def test_solutions_add_every_term_once_in_varied_orders_and_agree_with_their_answer():
    rng = random.Random(0)
    orders = collections.defaultdict(set)
    for rec in sums_task(600, seed=3):
        text = sums_completion(rec, rng, slip_rate=0.0)
        body = text.split("</reasoning>")[0]
        chain = [tuple(map(int, m)) for m in _LINE.findall(body) if "check" not in m]
        lines = [ln for ln in body.splitlines() if _LINE.search(ln) and "check" not in ln.lower()]
        steps = [tuple(map(int, _LINE.search(ln).groups())) for ln in lines]
        added = [steps[0][0]] + [b for _, b, _ in steps]
        assert sorted(added) == sorted(rec["terms"]), text  # each term once
        assert all(steps[j][0] == steps[j - 1][2] for j in range(1, len(steps)))  # the running total carries on
        orders[tuple(rec["terms"])].add(tuple(added))
        answer = int(extract_answer(text))
        caught = "Wait, the total is" in text
        assert answer == (sum(rec["terms"]) if caught else steps[-1][2]), text
        assert chain  # at least one line
    assert sum(len(o) > 1 for o in orders.values()) > 0  # terms come in more than one order


def test_error_check_and_slip_rates():
    rng = random.Random(1)
    right = collections.defaultdict(list)
    checked, slipped, reflective = [], [], []
    for rec in sums_task(5000, seed=2):
        text = sums_completion(rec, rng)
        chain_right = all(
            a + b == c
            for a, b, c in (
                map(int, m)
                for m in _LINE.findall("\n".join(ln for ln in text.splitlines() if "check" not in ln.lower()))
            )
        )
        right[rec["level"]].append(chain_right)
        checked.append("check:" in text.lower())
        slipped.append(strict_format_reward([text])[0] == 0.0)
        reflective.append(int(reflection_counts([text])[0]) > 0)
        assert extract_answer(text) is not None and strict_is_correct(text, rec["gold"]) in (True, False)
        if slipped[-1] and "</reasoning>" in text:
            assert soft_format_reward([text])[0] == 1.0  # the one-line answer and the blank line keep the soft format
    for level, hits in right.items():
        assert _within(hits, SUMS_CORRECT_RATE[level]), level
    assert _within(checked, CHECK_RATE) and _within(slipped, FORMAT_SLIP_RATE)
    assert reflective == checked  # every check line says "check", nothing else is reflective
    assert list(SUMS_CORRECT_RATE.values()) == sorted(SUMS_CORRECT_RATE.values(), reverse=True)


def test_a_check_re_adds_the_last_step_and_catches_an_error_there_at_its_rate():
    rng = random.Random(2)
    rec = {"terms": [11, 22, 33, 44], "level": 1}
    caught, last_wrong = [], []
    for _ in range(6000):
        text = sums_completion(rec, rng, {1: 0.0}, slip_rate=0.0, check_rate=1.0)  # always wrong, always checked
        chain = [tuple(map(int, m)) for m in _LINE.findall(text.split("heck:")[0])]
        check = tuple(map(int, _LINE.search(text.split("heck:")[1]).groups()))
        assert check[:2] == chain[-1][:2]  # the check re-adds the chain's last step
        last_wrong.append(chain[-1][0] + chain[-1][1] != chain[-1][2])
        caught.append("Wait, the total is 110" in text)
        offset = int(extract_answer(text)) - 110
        assert offset == 0 if caught[-1] else offset in WRONG_OFFSETS
        assert not caught[-1] or last_wrong[-1]  # only an error in the last step can be caught
    assert _within([c for c, w in zip(caught, last_wrong) if w], CATCH_RATE)
    assert _within(last_wrong, 1 / 3)  # the error sits in one of the 3 steps
