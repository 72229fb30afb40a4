r"""The sums task: add a few numbers, in any order, with free wording; built so that RL has something to show.

A second synthetic task in :func:`qae_lab.task.data.synthetic_task`'s record shape, for notebook 06 (the
arithmetic task has one derivation per prompt, little entropy to lose). A prompt lists 3-5 numbers; a solution may:

* add the terms in any order (3 terms: 3! = 6 orders; 5 terms: 120), one partial sum per line;
* word each line one of several ways ("12 + 7 = 19", "Then 19 + 30 = 49.", "Add 4: 49 + 4 = 53.");
* open with a plan and close with "So the total is 53.";
* add a reflective check line that re-adds the last step ("Wait, let me check: 42 + 7 = 49.").

Implementer's notes: docs/implementation.md, section ``qae_lab.task.sums``.
"""

from __future__ import annotations

import random
from typing import Any

from qae_lab.task.data import cycled_records, xml_completion

__all__ = [
    "SUMS_LEVELS",
    "SUMS_CORRECT_RATE",
    "FORMAT_SLIP_RATE",
    "CHECK_RATE",
    "sums_task",
    "sums_completion",
    "chain_lines",
]

# level: (number of terms, smallest term, largest term)
SUMS_LEVELS = {1: (3, 1, 9), 2: (3, 2, 30), 3: (4, 2, 30), 4: (5, 2, 30), 5: (5, 10, 60)}
SUMS_CORRECT_RATE = {1: 0.96, 2: 0.9, 3: 0.75, 4: 0.6, 5: 0.45}  # P(the supervised chain of sums is right)
FORMAT_SLIP_RATE = 0.2  # P(a supervised solution slips in its format)
CHECK_RATE = 0.3  # P(a supervised solution has a check line)
CATCH_RATE = 0.8  # P(the check line catches an error in the last step and corrects the answer)
WRONG_OFFSETS = (-10, -2, -1, 1, 2, 10)

_NAMES = ("Ava", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jade")
_ITEMS = ("apples", "pens", "cards", "stamps", "books", "shells", "coins", "marbles")
_DAYS = {3: "three", 4: "four", 5: "five", 6: "six"}


def _listed(terms: list[int]) -> str:
    """'12, 7, 30 and 4'."""
    return ", ".join(map(str, terms[:-1])) + f" and {terms[-1]}"


def _question(terms: list[int], rng: random.Random) -> str:
    """One of four phrasings of the same sum."""
    form = rng.randrange(4)
    if form == 0:
        return f"Add {_listed(terms)}."
    if form == 1:
        return "What is " + " + ".join(map(str, terms)) + "?"
    if form == 2:
        return f"Find the sum of {_listed(terms)}."
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    return f"{name} collects {_listed(terms)} {item} on {_DAYS[len(terms)]} days. How many {item} in all?"


def sums_task(n: int, *, levels=tuple(SUMS_LEVELS), seed: int = 0) -> list[dict[str, Any]]:
    r"""``n`` sums problems in :mod:`qae_lab.task.data`'s record shape, deterministic by ``seed``, levels
    (:data:`SUMS_LEVELS`) cycled; ``steps``: the chain left to right; ``terms``: the numbers.

    >>> r = sums_task(2, levels=(1, 5), seed=3)
    >>> [len(x["terms"]) for x in r], r[0]["gold"] == str(sum(r[0]["terms"])), r[1]["source"]
    ([3, 5], True, 'sums')
    """
    return cycled_records(n, levels, tuple(SUMS_LEVELS), seed, "sums", _problem)


def _problem(level: int, rng: random.Random) -> tuple[str, list[str], int, dict]:
    """One sums problem of a level: (question, one correct chain, the total, {"terms": ...})."""
    count, lo, hi = SUMS_LEVELS[level]
    terms = [rng.randint(lo, hi) for _ in range(count)]
    return _question(terms, rng), chain_lines(terms), sum(terms), {"terms": terms}


def chain_lines(terms: list[int], error_at: int | None = None, offset: int = 0) -> list[str]:
    r"""The plain chain of partial sums of ``terms`` in their order; ``error_at``: that line's sum is off
    by ``offset`` and the later lines carry the wrong total on.

    >>> chain_lines([12, 7, 30]), chain_lines([12, 7, 30], error_at=0, offset=1)
    (['12 + 7 = 19', '19 + 30 = 49'], ['12 + 7 = 20', '20 + 30 = 50'])
    """
    lines, total = [], terms[0]
    for j, t in enumerate(terms[1:]):
        new = total + t + (offset if j == error_at else 0)
        lines.append(f"{total} + {t} = {new}")
        total = new
    return lines


def _worded(line: str, j: int, rng: random.Random) -> str:
    """Line j of a chain ("a + b = c") in one of three wordings."""
    a, rest = line.split(" + ", 1)
    b = rest.split(" = ")[0]
    form = rng.randrange(3)
    if form == 0:
        return line
    if form == 1:
        return ("First, " if j == 0 else "Then ") + line + "."
    return (f"Start with {a} and add {b}: " if j == 0 else f"Add {b}: ") + line + "."


def _check_line(line: str, value: int, rng: random.Random) -> str:
    """A reflective line that re-adds the chain's last step ("a + b") and states ``value``."""
    a_plus_b = line.split(" = ")[0]
    opening = rng.choice(("Wait, let me check:", "Let me check:", "Check:"))
    return f"{opening} {a_plus_b} = {value}."


def _slipped(text: str, rng: random.Random) -> str:
    """One format slip that keeps the answer readable: one-line answer, blank line, or no ``</reasoning>``."""
    kind = rng.randrange(3)
    if kind == 0:  # the answer on one line: soft format only
        head, _, answer = text.rpartition("<answer>\n")
        return head + "<answer>" + answer.replace("\n</answer>", "</answer>")
    if kind == 1:  # a blank line between the blocks: soft format only
        return text.replace("</reasoning>\n<answer>", "</reasoning>\n\n<answer>")
    return text.replace("\n</reasoning>", "")  # the reasoning block never closed: no format, no step score


def sums_completion(
    record: dict,
    rng: random.Random,
    correct_rate: dict[int, float] = SUMS_CORRECT_RATE,
    *,
    slip_rate: float = FORMAT_SLIP_RATE,
    check_rate: float = CHECK_RATE,
) -> str:
    r"""One supervised solution of a sums record: a random order and wording, sometimes wrong, checked or slipped.

    The chain is right with probability ``correct_rate[level]``; otherwise one partial sum is off by one of
    :data:`WRONG_OFFSETS` (made positive where the total would go below 0), carried to the answer. With probability
    ``check_rate`` a check line re-adds the last step (within a tiny model's reach), catching an error made there
    with probability :data:`CATCH_RATE` ("Wait, the total is 53, not 51."). With ``slip_rate`` the format slips.

    >>> rec = {"terms": [12, 7, 30], "level": 1}   # two right solutions of one prompt
    >>> for seed in (0, 4):
    ...     print(sums_completion(rec, random.Random(seed), {1: 1.0}, slip_rate=0.0, check_rate=0.0))
    <reasoning>
    Start with 7 and add 30: 7 + 30 = 37.
    Then 37 + 12 = 49.
    So the total is 49.
    </reasoning>
    <answer>
    49
    </answer>
    <reasoning>
    We add the numbers one at a time.
    First, 12 + 7 = 19.
    19 + 30 = 49
    </reasoning>
    <answer>
    49
    </answer>
    """
    terms = rng.sample(record["terms"], len(record["terms"]))
    truth = sum(terms)
    wrong = rng.random() >= correct_rate[record["level"]]
    offset = rng.choice(WRONG_OFFSETS) if wrong else 0
    error_at = rng.randrange(len(terms) - 1) if wrong else None
    if wrong and sum(terms[: error_at + 2]) + offset < 0:
        offset = -offset  # a running total never goes below 0
    plain = chain_lines(terms, error_at, offset)
    lines = [_worded(line, j, rng) for j, line in enumerate(plain)]
    answer = truth + offset
    if rng.random() < 0.25:
        lines.insert(0, rng.choice(("We add the numbers one at a time.", "Add them in any order.")))
    if rng.random() < check_rate:
        # the check re-adds the last step: it finds an error made there (and only there) at CATCH_RATE
        caught = wrong and error_at == len(terms) - 2 and rng.random() < CATCH_RATE
        lines.append(_check_line(plain[-1], truth if caught else answer, rng))
        if caught:
            lines.append(f"Wait, the total is {truth}, not {answer}.")
            answer = truth
    if rng.random() < 0.4:
        lines.append(f"So the total is {answer}.")
    text = xml_completion({"steps": lines, "gold": str(answer)})
    return _slipped(text, rng) if rng.random() < slip_rate else text
