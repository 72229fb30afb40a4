"""Completions in the requested format, for the tests of reading answers (tests/task/test_answers.py,
tests/task/test_rewards.py, tests/task/test_verify.py)."""

from __future__ import annotations

from qae_lab.task.data import xml_completion


def xml(reasoning: str, answer: str) -> str:
    """A completion in the exact requested format, ``reasoning`` its one step (the same text as
    ``f"<reasoning>\\n{reasoning}\\n</reasoning>\\n<answer>\\n{answer}\\n</answer>"``)."""
    return xml_completion({"steps": [reasoning]}, answer)
