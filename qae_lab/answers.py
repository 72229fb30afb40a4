r"""The verdict: whether a completion answered correctly, one rule for the training reward and for evaluation.

The end-of-answer rule: one verdict for the reward and for evaluation. A completion is
correct only when :func:`qae_lab.rewards.is_correct` accepts it AND it stops right after
its closing ``</answer>`` tag, whitespace aside (:func:`strict_is_correct`). The training
reward (:func:`qae_lab.rewards.strict_correctness_reward`, 0/1) and every pass@1 this module prints or
writes (:func:`strict_eval` re-judges :func:`qae_lab.evaluate.evaluate`'s completions) call
that one function. Why: ``is_correct`` reads the last ``<answer>`` block wherever it sits,
so a completion that answers and then runs on (more text, more tags, to the length limit)
still scores; a tiny model rewarded that way can stop emitting EOS while its training
reward holds and exact-match evaluation falls to zero. With the rule, "answer, then stop"
is the only way to earn reward. The check reads the decoded text (TRL and
:func:`qae_lab.evaluate.generate` strip special tokens such as EOS), so a completion cut
by the length limit exactly after ``</answer>`` would pass; in the cpu-demo completions
are ~31 tokens against a 48-token limit. Evaluation also keeps the lenient verdict
(``lenient_pass@1``, ``lenient_greedy_pass@1``), so any gap between the two stays visible.
"""

from __future__ import annotations

import re

from qae_lab.rewards import completion_text, is_correct

__all__ = ["ends_at_answer", "strict_is_correct", "strict_correctness_reward"]

_ENDS_AT_ANSWER = re.compile(r"<[ \t]*/[ \t]*answer[ \t]*>\s*\Z", re.IGNORECASE)


def ends_at_answer(text: str) -> bool:
    r"""True iff the text stops right after a closing ``</answer>`` tag (whitespace may follow).

    >>> ends_at_answer("<answer>\n7\n</answer>\n"), ends_at_answer("<answer>7</answer> Now another: <answer>")
    (True, False)
    """
    return _ENDS_AT_ANSWER.search(text) is not None


def strict_is_correct(completion, gold) -> bool:
    r"""The one verdict of training and evaluation: :func:`qae_lab.rewards.is_correct` and :func:`ends_at_answer`.

    >>> c = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
    >>> strict_is_correct(c, "7"), strict_is_correct(c + "\n<reasoning>\n1 + 1 = 2", "7"), is_correct(c + "xx", "7")
    (True, False, True)
    """
    return ends_at_answer(completion_text(completion)) and is_correct(completion, gold)


def strict_correctness_reward(completions, gold, **kwargs) -> list[float]:
    r"""TRL reward: 1.0 iff :func:`strict_is_correct`, else 0.0 (QAE's binary R_i).

    >>> strict_correctness_reward(["<answer>5</answer>", "<answer>5</answer> and more", "<answer>6</answer>"],
    ...                           gold=["5", "5", "5"])
    [1.0, 0.0, 0.0]
    """
    return [1.0 if strict_is_correct(c, g) else 0.0 for c, g in zip(completions, gold, strict=True)]
