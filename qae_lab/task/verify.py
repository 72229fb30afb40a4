r"""An independent verifier: math-verify's reading of a completion's answer, as a 0/1 training reward.

:mod:`qae_lab.task.answers` reads answers with its own grammar. Where the optional ``math-verify`` package is
installed (``pip install "qae-lab[verify]"``), :func:`math_verify_is_correct` asks its LaTeX reader for a second
opinion, and :func:`math_verify_reward` is that verdict as the training reward ``"math_verify"``
(``benchmarks/bench_math_verify.py`` compares the two on GSM8K). Importing qae_lab never imports math_verify.
As with ``"strict"``, a completion scores only when it stops right after ``</answer>``; every block is first
checked by :func:`safe_answer` (whitelisted characters, few tokens, shallow braces), which bounds math-verify's work.

Implementer's notes: docs/implementation.md, section ``qae_lab.task.verify``.
"""

from __future__ import annotations

import importlib.util
import logging
import re

from qae_lab.task.answers import completion_text, gold_value

__all__ = [
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_TOKENS",
    "answer_block",
    "available",
    "math_verify_is_correct",
    "math_verify_reward",
    "reading",
    "safe_answer",
    "token_count",
]

MAX_CHARS = 100  # answer blocks longer than this are not handed to math-verify (score 0)
MAX_DEPTH = 3  # brace groups nested deeper than this are not handed to math-verify (score 0)
MAX_TOKENS = 12  # answer blocks of more tokens (token_count) are not handed to math-verify (score 0)
_COMMANDS = r"(?:d|t)?frac|boxed|text|textbf|mathrm|mathbf|times|cdot"  # the LaTeX commands allowed
# how many brace arguments each allowed command takes: the only places a "{" may open
_ARGUMENTS = {"frac": 2, "dfrac": 2, "tfrac": 2, "boxed": 1, "text": 1, "textbf": 1, "mathrm": 1, "mathbf": 1}
_TOKEN = re.compile(r"\{,\}|\\[A-Za-z]++|\\.|[{}]|\s++|[^{}\\\s]")  # "{,}", a command, an escape, a brace, ...
# token_count's tokens: a command or an escape, "{,}", a run of digits, a letter, an operator sign
_COUNTED = re.compile(r"\\[A-Za-z]++|\\.|\{,\}|[0-9]++|[A-Za-z]|[+\-/=%,.]")
# the commands and escapes that add no node (a wrapper math-verify unwraps, a space, a dollar); any other counts
_FREE = {"\\boxed", "\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\$", "\\,", "\\;", "\\!", "\\ "}
_SAFE = re.compile(r"(?:[0-9A-Za-z \t\r\n,.$%+\-/={}]|\\(?:" + _COMMANDS + r")(?![A-Za-z])|\\[$%,;! ])*+")
_OPEN = re.compile(r"<[ \t]*+answer[ \t]*+>", re.IGNORECASE)
_CLOSE_AT_END = re.compile(r"<[ \t]*+/[ \t]*+answer[ \t]*+>\s*+\Z", re.IGNORECASE)
_TIMEOUT_OFF = "Timeout is disabled"  # math-verify's warning when its signal timeouts are off


def available() -> bool:
    """True when the optional ``math-verify`` package can be imported (it is not imported here).

    >>> isinstance(available(), bool)
    True
    """
    return importlib.util.find_spec("math_verify") is not None


def answer_block(text: str) -> str | None:
    r"""The stripped content of the final ``<answer>...</answer>`` block when the text stops right after it.

    >>> answer_block("<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>\n")
    '7'
    >>> answer_block("<answer>7</answer> and more") is None, answer_block("7</answer>") is None
    (True, True)
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    close = _CLOSE_AT_END.search(text)
    if close is None:
        return None
    opening = None
    for opening in _OPEN.finditer(text, 0, close.start()):
        pass
    return None if opening is None else text[opening.end() : close.start()].strip()


def _groups_ok(span: str) -> bool:
    r"""True iff every brace group of ``span`` is an argument of an allowed command (``\frac{3}{4}``,
    ``\text{18}``) or the thousands separator ``{,}``, the braces balance, and no group lies more than
    ``MAX_DEPTH`` deep. One pass over at most ``MAX_CHARS`` characters."""
    stack: list[int] = []  # per open group: the brace arguments its command still takes once it closes
    pending = 0  # brace arguments the last command still takes
    for token in _TOKEN.findall(span):
        if token == "{":
            if not pending or len(stack) == MAX_DEPTH:
                return False  # a bare group ("{1}", a set to math-verify), or too deep
            stack.append(pending - 1)
            pending = 0
        elif token == "}":
            if not stack:
                return False  # closes nothing
            pending = stack.pop()
        elif token.startswith("\\"):
            pending = _ARGUMENTS.get(token[1:], 0)
        elif not token.isspace():
            pending = 0  # "\frac12", "\frac 1{2}": an argument without braces ends the command's
    return not stack


def token_count(span: str) -> int:
    r"""How many tokens of ``span`` count toward ``MAX_TOKENS``: each run of digits, each letter (math-verify
    reads a word as a product of one-letter symbols), each operator sign ``+ - / = % , .`` (``{,}`` is one), and
    each command or escape but the wrappers ``\boxed``, ``\text``, ``\textbf``, ``\mathrm``, ``\mathbf`` and
    ``\$ \, \; \! \ ``. Braces, whitespace and ``$`` are free.

    >>> [token_count(s) for s in ("18", "$1,000.50", r"\boxed{\frac{3}{4}}", "x = 5", "18 apples", "2/2/2/2/2")]
    [1, 5, 3, 3, 7, 9]
    """
    return sum(1 for token in _COUNTED.findall(span) if token not in _FREE)


def safe_answer(span: str) -> bool:
    r"""True iff ``span`` may be handed to math-verify: non-blank, at most ``MAX_CHARS`` whitelisted characters and
    ``MAX_TOKENS`` tokens (:func:`token_count`), its braces only arguments of the allowed commands (or ``{,}``),
    balanced and at most ``MAX_DEPTH`` deep.

    >>> [safe_answer(s) for s in ("18", r"\$1,000.50", r"\boxed{\frac{3}{4}}", "x = 5 apples", "50%", "1{,}000")]
    [True, True, True, True, True, True]
    >>> [safe_answer(s) for s in ("2/2/2/2/2/2", "2/2/2/2/2/2/2", "abcdefghijkl", "abcdefghijklm", "7" * MAX_CHARS)]
    [True, False, True, False, True]
    >>> [safe_answer(s) for s in ("__import__('os')", "2^100", "5!", r"\int_0^1 x", "(1)", "", "1" * 101)]
    [False, False, False, False, False, False, False]
    >>> [safe_answer(s) for s in ("{1}", r"\frac{1}{2", r"\text{1}}", r"\frac{\frac{\frac{\frac{1}{2}}{2}}{2}}{2}")]
    [False, False, False, False]
    """
    if not isinstance(span, str):
        raise ValueError(f"span must be a str, got {type(span).__name__}")
    return (
        bool(span.strip())
        and len(span) <= MAX_CHARS
        and _SAFE.fullmatch(span) is not None
        and _groups_ok(span)
        and token_count(span) <= MAX_TOKENS
    )


class _DropTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_TIMEOUT_OFF)


def _math_verify():
    """The math_verify module (the ``verify`` extra), imported on first use, its timeout warning filtered."""
    try:
        import math_verify  # the optional `verify` extra: pip install "qae-lab[verify]"
    except ImportError as err:
        raise ImportError(
            'the "math_verify" verdict needs the math-verify package: pip install "qae-lab[verify]"'
        ) from err
    for name in ("math_verify.parser", "math_verify.grader"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropTimeoutWarning) for f in log.filters):
            log.addFilter(_DropTimeoutWarning())
    return math_verify


def math_verify_is_correct(completion, gold) -> bool:
    r"""True iff the completion stops right after its final ``</answer>`` and math-verify finds that block equal
    to ``gold`` (:func:`qae_lab.task.answers.gold_value`); a block that fails :func:`safe_answer` is False.

    >>> c = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n{}\n</answer>"
    >>> [math_verify_is_correct(c.format(a), "7") for a in ("7", r"\boxed{7}", "7.00", "$7", "8")]
    [True, True, True, True, False]
    >>> math_verify_is_correct(c.format("7") + " and on", "7")
    False
    """
    target = gold_value(gold)
    parsed = reading(completion_text(completion))
    if not parsed:
        return False
    import sympy  # a dependency of torch; imported here, beside math_verify, which needs it

    return _math_verify().verify(sympy.Rational(target.numerator, target.denominator), parsed, timeout_seconds=None)


def reading(text: str) -> list | None:
    r"""What math-verify reads in the final answer block of ``text``: its ``parse`` result (empty where it reads
    nothing), or None where it is not asked: the text does not stop right after ``</answer>``, or the block
    fails :func:`safe_answer`.

    >>> reading("<answer>\n__import__('os')\n</answer>") is None, reading("<answer>7</answer> and on") is None
    (True, True)
    """
    span = answer_block(text)
    if span is None or not safe_answer(span):
        return None
    return _read(span)


def _read(span: str) -> list:
    """math-verify's ``parse`` of an answer span, as :func:`reading` asks it (after :func:`safe_answer`; the
    benchmark ``benchmarks/bench_verify_guard.py`` also times spans the guard refuses)."""
    mv = _math_verify()
    # the LaTeX reader only; no signal timeouts: safe_answer bounds the work
    return mv.parse("\\boxed{" + span + "}", [mv.LatexExtractionConfig()], parsing_timeout=None)


def math_verify_reward(completions, gold, **kwargs) -> list[float]:
    r"""1.0 iff :func:`math_verify_is_correct`, else 0.0: the training reward ``"math_verify"`` (the ``verify``
    extra), with :func:`qae_lab.task.rewards.strict_correctness_reward`'s arguments.

    >>> math_verify_reward(["<answer>\n1,000\n</answer>", "<answer>1000</answer> more", "<answer>999</answer>"],
    ...                    gold=["1000", "1000", "1000"])
    [1.0, 0.0, 0.0]
    """
    if isinstance(completions, (str, bytes)) or not isinstance(completions, (list, tuple)):
        raise ValueError(f"completions must be a list of completions, got {type(completions).__name__}")
    if isinstance(gold, (str, bytes)) or not isinstance(gold, (list, tuple)) or len(gold) != len(completions):
        raise ValueError(f"gold must be a list with one answer per completion ({len(completions)}), got {gold!r:.80}")
    targets = [gold_value(g) for g in gold]  # every gold checked before anything is scored
    return [1.0 if math_verify_is_correct(c, g) else 0.0 for c, g in zip(completions, targets)]
