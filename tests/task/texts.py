"""Texts for the tests of reading answers (tests/task/test_answers.py, tests/task/test_rewards.py,
tests/task/test_verify.py): completions in the requested format, and the fragments their fuzzing glues together."""

from __future__ import annotations

from hypothesis import strategies as st

from qae_lab.task.data import xml_completion

# pieces of answers and of the format around them, glued at random by the fuzz tests (never raise, stay in range)
FRAGMENTS = [
    "<answer>",
    "</answer>",
    "<reasoning>",
    "</reasoning>",
    "\n",
    " ",
    "0",
    "1",
    "7",
    "42",
    ",",
    "$",
    "####",
    "\\boxed{",
    "}",
    "{",
    "/",
    "-",
    "−",
    ".",
    "**",
    "%",
    "=",
    "The answer is ",
    "A:",
    "\\frac{",
    "{,}",
    "dollars",
    "e",
    "+",
    "×",
]
fuzz_text = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))


def xml(reasoning: str, answer: str) -> str:
    """A completion in the exact requested format, ``reasoning`` its one step (the same text as
    ``f"<reasoning>\\n{reasoning}\\n</reasoning>\\n<answer>\\n{answer}\\n</answer>"``)."""
    return xml_completion({"steps": [reasoning]}, answer)
