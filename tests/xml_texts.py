"""Completions in the requested format, for the tests of reading answers (tests/test_answers.py,
tests/test_rewards.py, tests/test_verify.py)."""

from __future__ import annotations

from qae_lab.data import xml_completion


def xml(reasoning: str, answer: str) -> str:
    """A completion in the exact requested format, ``reasoning`` its one step (the same text as
    ``f"<reasoning>\\n{reasoning}\\n</reasoning>\\n<answer>\\n{answer}\\n</answer>"``)."""
    return xml_completion({"steps": [reasoning]}, answer)
