"""Tests for qae_lab.task.verify: the answer block and the whitelist, math-verify's verdict on hand-computed
cases, the guard that keeps completions away from eval, the guard's bound on math-verify's work (by
structure: token counts and the shape of what math-verify reads, never a clock), the "math_verify"
training reward and its refusal where math-verify is missing. The cases that call math-verify skip
where it is absent (the dev extra installs it, so they run in CI)."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest
from side_by_side import LINEAR_BOUND, growth
import texts
from hypothesis import given, settings
from hypothesis import strategies as st

from qae_lab.task import verify
from qae_lab.task.answers import strict_is_correct
from qae_lab.task.rewards import REWARDS, SUCCESS_BANDS, check_reward
from qae_lab.task.verify import (
    MAX_CHARS,
    MAX_DEPTH,
    MAX_TOKENS,
    answer_block,
    math_verify_is_correct,
    math_verify_reward,
    reading,
    safe_answer,
    token_count,
)

xml = functools.partial(texts.xml, "3 + 4 = 7")  # xml(answer): a completion with that answer


@pytest.fixture
def mv():
    return pytest.importorskip("math_verify")


def test_answer_block_reads_the_final_block_of_a_text_that_stops_there():
    assert answer_block(xml("7")) == "7"
    assert answer_block(xml("7") + "\n  \n") == "7"
    assert answer_block("<answer>1</answer><answer> 2 </answer>") == "2"  # the last block
    assert answer_block("< Answer >5</ANSWER>") == "5"
    assert answer_block(xml("7") + " and more") is None  # runs on: the strict format fails
    assert answer_block("just 7</answer>") is None  # no opening tag
    assert answer_block("<answer></answer>") == ""
    with pytest.raises(ValueError, match="text must be a str"):
        answer_block(7)


def test_safe_answer_whitelist():
    ok = [
        "7",
        "-3",
        "1,000",
        "$18.00",
        r"\$5",
        "50%",
        r"5\%",
        "3/4",
        r"\frac{3}{4}",
        r"\dfrac{1}{2}",
        r"\boxed{12}",
        "x = 18",
        "18 apples",
        r"\text{18 dollars}",
        r"2 \times 9",
        "1\\,000",
        "a" * MAX_TOKENS,
        "1" * MAX_CHARS,
    ]
    bad = [
        "",
        "   ",
        "1" * (MAX_CHARS + 1),
        "a" * (MAX_TOKENS + 1),
        "2^10",
        "5!",
        "(7)",
        "[7]",
        "2*3",
        "'7'",
        '"7"',
        "x_1",
        r"\sqrt{4}",
        r"\int x",
        r"\sum 1",
        r"\frac12^{99}",
        "__import__('os')",
        "7;",
        "a@b",
        "7\u22127",
    ]
    assert [s for s in ok if not safe_answer(s)] == []
    assert [s for s in bad if safe_answer(s)] == []
    with pytest.raises(ValueError, match="span must be a str"):
        safe_answer(None)


@pytest.mark.parametrize(
    "answer, gold, want",
    [
        ("18", "18", True),
        ("1,000", "1000", True),
        ("1000", "1,000", True),
        ("$5", "5", True),
        (r"\$5", "5", True),
        ("5.00", "5", True),
        (r"\boxed{5}", "5", True),
        (r"\frac{3}{4}", "0.75", True),
        ("3/4", "3/4", True),
        ("0.75", "3/4", True),
        ("-3", "-3", True),
        ("x = 18", "18", True),
        ("18 apples", "18", True),
        ("19", "18", False),
        ("-18", "18", False),
        ("0.5", "5", False),
        ("", "18", False),
        # where the two readers differ (benchmarks/bench_math_verify.py): math-verify accepts a decimal within
        # its rounding tolerance, and a percentage as either its number or its hundredths
        ("0.333333", "1/3", True),
        ("50%", "50", True),
        ("50%", "0.5", True),
    ],
)
def test_verdict_hand_cases(mv, answer, gold, want):
    assert math_verify_is_correct(xml(answer), gold) is want
    assert math_verify_is_correct([{"role": "assistant", "content": xml(answer)}], gold) is want


def test_verdict_keeps_the_strict_format(mv):
    assert math_verify_is_correct(xml("7"), "7") and strict_is_correct(xml("7"), "7")
    for text in (xml("7") + " and more", xml("7") + "\n<reasoning>\n1 + 1 = 2", "#### 7", "The answer is 7", "7"):
        assert not math_verify_is_correct(text, "7") and not strict_is_correct(text, "7"), text
    with pytest.raises(ValueError, match="gold"):
        math_verify_is_correct(xml("7"), "seven")


def test_malicious_answers_score_zero_and_run_nothing(mv, tmp_path, monkeypatch):
    flag = tmp_path / "pwned"
    payload = f"__import__('pathlib').Path({str(flag)!r}).touch()"
    handed = []  # every text qae_lab hands to math-verify
    real_parse = mv.parse
    monkeypatch.setattr(mv, "parse", lambda text, *a, **k: handed.append(text) or real_parse(text, *a, **k))
    texts = [
        xml(payload),
        xml(f"\\boxed{{{payload}}}"),
        xml(f"${payload}$"),
        xml(f"2 {payload}"),
        xml(f"2\n#### {payload}"),
        f"<answer>{payload}</answer>",
    ]
    assert math_verify_reward(texts, gold=["2"] * len(texts)) == [0.0] * len(texts)
    assert handed == [] and not flag.exists()  # the guard stopped every one before math-verify


def test_only_number_tokens_reach_sympy_parse_expr(mv, monkeypatch):
    # math-verify's LaTeX reader turns number tokens into sympy numbers with sympy.Number(text), which
    # sympifies (evals) the text: whatever passes the guard, only digits and separators may get there
    from sympy.parsing import sympy_parser

    math_verify_is_correct(xml("import os"), "7")  # loads sympy's units once (their names go through parse_expr)
    mv.parser.parse_latex_cached.cache_clear()  # math-verify's caches: every answer below is read afresh
    mv.parser.extract_latex.cache_clear()
    seen, real = [], sympy_parser.parse_expr
    monkeypatch.setattr(sympy_parser, "parse_expr", lambda s, *a, **k: seen.append(s) or real(s, *a, **k))
    answers = [
        "os.system",
        "import os",
        "eval",
        "exec = 1",
        r"\text{open}",
        "getattr x",
        "9876.54321",
        "1,234,567",
        "31415 apples",
        r"\frac{271828}{3}",
    ]
    for a in answers:
        assert not math_verify_is_correct(xml(a), "7")
    assert seen and all(re.fullmatch(r"[0-9.,]+", s) for s in seen), seen


def test_reward_signature_and_table(mv):
    assert REWARDS["math_verify"] is math_verify_reward and SUCCESS_BANDS["math_verify"] == (0.0, 1.0)
    texts = [xml("7"), xml("7") + " more", xml(r"\boxed{7.0}"), xml("8")]
    assert math_verify_reward(texts, gold=["7"] * 4, prompts=["p"] * 4, completion_ids=[[1]] * 4) == [
        1.0,
        0.0,
        1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="completions must be a list"):
        math_verify_reward(xml("7"), gold=["7"])
    with pytest.raises(ValueError, match="one answer per completion"):
        math_verify_reward([xml("7")], gold=["7", "8"])
    with pytest.raises(ValueError, match="gold"):
        math_verify_reward([xml("7")], gold=["x"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<answer>",
                "</answer>",
                "\n",
                " ",
                "7",
                "1",
                ",",
                ".",
                "$",
                "/",
                "\\boxed{",
                "}",
                "{",
                "\\frac",
                "=",
                "%",
                "x",
                "-",
                "^",
                "(",
                "'",
            ]
        ),
        max_size=20,
    ).map("".join)
)
def test_never_raises(text):
    pytest.importorskip("math_verify")
    assert math_verify_reward([text], gold=["7"]) in ([0.0], [1.0])


@pytest.mark.parametrize(
    "prefix, unit, n, suffix",
    [
        ("", "<answer>", 12_500, "</answer>"),
        ("", "</answer> ", 10_000, ""),
        ("<answer>\n", "1,", 50_000, "\n</answer>"),
        ("<answer>", "{", 50_000, "</answer>"),
        ("</answer>", " ", 100_000, "x"),
        ("", "< answer", 20_000, ""),
    ],
)
def test_no_catastrophic_backtracking(mv, prefix, unit, n, suffix, monkeypatch):
    # none of these reaches math-verify: only the guard's regular expressions read them
    monkeypatch.setattr("qae_lab.task.verify._read", lambda span: pytest.fail(f"math-verify was asked: {span[:40]!r}"))
    assert math_verify_reward([prefix + unit * n + suffix], gold=["1"]) == [0.0]
    assert growth(lambda text: math_verify_reward([text], gold=["1"]), prefix, unit, n, suffix) < LINEAR_BOUND


# ---------------------------------------------------------------- bounded work: the guard's structure


def _nested(depth: int, inner: str = "1") -> str:
    return "{" * depth + inner + "}" * depth


def _nested_frac(depth: int) -> str:
    r"""\frac{\frac{...{1}{2}...}{2}}{2}: ``depth`` groups deep, value 1 / 2**depth."""
    return r"\frac{" * depth + "1" + "}{2}" * depth


@pytest.mark.parametrize("depth", [16, 48])
def test_deep_nesting_is_refused_at_once(mv, depth, monkeypatch):
    # before: each level about doubled math-verify's time (16 levels 62 s, 48 fit in MAX_CHARS), with its
    # timeouts off; now refused by structure, so no clock decides it
    span = _nested(depth)
    assert len(span) <= MAX_CHARS and not safe_answer(span) and reading(xml(span)) is None
    monkeypatch.setattr("qae_lab.task.verify._read", lambda span: pytest.fail("math-verify was asked"))
    assert math_verify_reward([xml(span)], gold=["1"]) == [0.0]  # refused by its structure before math-verify


def test_braces_only_as_command_arguments_balanced_and_shallow():
    ok = [
        r"\boxed{\frac{3}{4}}",
        r"\frac{\frac{1}{2}}{3}",
        r"\boxed{\frac{\frac{1}{2}}{3}}",
        r"\text{18}",
        r"\frac {1} {2}",
        r"\textbf{\text{7}}",
        "1{,}000",
        r"\text{1{,}000}",
        r"\frac{1}{2} + \frac{1}{3}",
        _nested_frac(MAX_DEPTH),
        r"\frac12",
        "{,}",
    ]
    bad = [
        "{1}",
        "{ 1 }",
        "x = {5}",
        r"\frac{1}{2}{3}",
        r"\frac1{2}",
        r"\times{2}",
        r"\text{{1}}",
        "{}",
        r"\frac{1}{2",
        r"\frac{1}}{2}",
        "}{",
        r"\text{1}}",
        "{,",
        _nested_frac(MAX_DEPTH + 1),
        r"\boxed{" * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
        _nested(3),
        _nested(16),
        _nested(48),
    ]
    assert [s for s in ok if not safe_answer(s)] == []
    assert [s for s in bad if safe_answer(s)] == []


@pytest.mark.parametrize(
    "span, gold",
    [
        (_nested_frac(MAX_DEPTH), f"1/{2**MAX_DEPTH}"),
        (r"\boxed{\frac{\frac{3}{2}}{2}}", "0.75"),
        (r"\frac{\frac{1}{2}}{\frac{3}{4}}", "2/3"),
        (r"\boxed{\dfrac{\tfrac{9}{1}}{3}}", "3"),
        ("1{,}000", "1000"),
    ],
)
def test_answers_at_the_depth_limit_still_verify(mv, span, gold):
    assert safe_answer(span)
    assert math_verify_is_correct(xml(span), gold)
    assert not math_verify_is_correct(xml(span), "5")


# ---------------------------------------------------------------- bounded work: the token cap

_OPERATOR_COMMANDS = {"frac", "dfrac", "tfrac", "times", "cdot", "%"}  # the commands and escapes that count


def _tokens(span: str) -> int:
    """token_count written again as a loop over characters: a reference independent of verify's regex."""
    count, i = 0, 0
    while i < len(span):
        if span[i] == "\\":
            j = i + 1
            while j < len(span) and span[j].isascii() and span[j].isalpha():
                j += 1
            name = span[i + 1 : j] or span[i + 1 : i + 2]  # a command, else the escaped character
            count += name in _OPERATOR_COMMANDS
            i = max(j, i + 2)
        elif span[i].isdigit():
            while i < len(span) and span[i].isdigit():
                i += 1
            count += 1  # a run of digits
        else:
            count += span[i].isalpha() or span[i] in "+-/=%,."  # a letter or an operator sign; "{,}" its comma
            i += 1
    return count


_LETTERS = "abcdfghjklmnpqrsuvwxyz" * 5  # letters math-verify reads as symbols (e is Euler's number; o, t units)

# name -> n -> the construct with n operators; benchmarks/bench_verify_guard.py times each
_CONSTRUCTS = {
    "/": lambda n: "/".join(["2"] * (n + 1)),
    "/-": lambda n: "2" + "/-2" * n,
    "/ decimals": lambda n: "/".join(["2.5"] * (n + 1)),
    "/ percents": lambda n: "/".join(["2%"] * (n + 1)),
    "/ letters": lambda n: "/".join(_LETTERS[: n + 1]),
    "+": lambda n: "+".join(["2"] * (n + 1)),
    "-": lambda n: "-".join(["2"] * (n + 1)),
    "unary -": lambda n: "-" * n + "2",
    "=": lambda n: "=".join(["2"] * (n + 1)),
    "%": lambda n: "%".join(["2"] * (n + 1)),
    r"\%": lambda n: r"\%".join(["2"] * (n + 1)),
    "$": lambda n: "$2" * n,
    r"\frac nested": lambda n: (
        r"\frac{" * min(n, MAX_DEPTH) + "2" + "}{3}" * min(n, MAX_DEPTH) + "/3" * (n - MAX_DEPTH)
    ),
    r"\frac siblings": lambda n: r"\frac{2}{3}" * n,
    r"\frac unbraced": lambda n: r"\frac23" * n,
    r"\times": lambda n: r"\times ".join(["2"] * (n + 1)),
    r"\cdot": lambda n: r"\cdot ".join(["2"] * (n + 1)),
    r"\text": lambda n: "/".join([r"\text{2}"] * (n + 1)),
    "{,}": lambda n: "{,}".join(["2"] * (n + 1)),
    ",": lambda n: ",".join(["2"] * (n + 1)),
    ", letters": lambda n: ",".join(_LETTERS[: n + 1]),
    ".": lambda n: ".".join(["1"] * (n + 1)),
    "letters": lambda n: " ".join(_LETTERS[:n]),
    "word": lambda n: _LETTERS[:n],
    "or": lambda n: " or ".join(["2"] * (n + 1)),
    "sqrt": lambda n: "2" + " sqrt 3" * n,
    "juxtaposed": lambda n: " ".join(["2"] * (n + 1)),
    "mixed": lambda n: "".join((r"\frac{2}{3}", "/3", r"\times 5", "+7", "=x")[i % 5] for i in range(n)),
}


def _longest(build) -> str | None:
    """The longest instance of a construct, up to the old guard's 100 characters, that safe_answer admits."""
    n, best = 1, None
    while len(build(n)) <= 100:
        best = build(n) if safe_answer(build(n)) else best
        n += 1
    return best


@pytest.mark.parametrize("twos", [7, 18, 20, 22, 50])
def test_division_chains_are_refused(twos):
    # 18 twos took 5 s in math-verify, 22 (43 characters) 60 s, and the old guard's 100 characters admitted
    # 50: each "/" about doubled the time
    span = "/".join(["2"] * twos)
    assert token_count(span) == 2 * twos - 1 > MAX_TOKENS
    assert not safe_answer(span) and reading(xml(span)) is None
    assert safe_answer("/".join(["2"] * ((MAX_TOKENS + 1) // 2)))  # the longest chain admitted: 6 twos


@pytest.mark.parametrize("name", list(_CONSTRUCTS))
def test_the_worst_of_each_construct_is_refused_or_within_the_cap(name, monkeypatch):
    build = _CONSTRUCTS[name]
    new = _longest(build)
    with monkeypatch.context() as m:
        m.setattr(verify, "MAX_TOKENS", 10**6)  # the guard as it was: alphabet, braces, 100 characters
        old = _longest(build)
    assert new is not None and _tokens(new) <= MAX_TOKENS  # the worst admitted instance is within the cap
    assert old is not None and _tokens(old) > MAX_TOKENS and not safe_answer(old)  # the old guard's worst: refused


def test_runs_without_operators_stay_admitted_at_full_length():
    # a run of digits is one token (its length costs math-verify nothing that grows fast); spaces, "$",
    # wrappers and spacing commands are free; every letter counts (a word is a product of symbols)
    for span in ("9" * MAX_CHARS, "0." + "3" * (MAX_CHARS - 2), "$" * (MAX_CHARS - 1) + "7", r"\,\," * 24 + "7"):
        assert safe_answer(span) and token_count(span) <= 3, span  # "0.333...": 0, ".", 333
    assert [token_count(s) for s in (r"\boxed{\text{7}}", r"\mathrm{x}", r"\$7", "7 \\! 0")] == [1, 1, 1, 2]
    assert not safe_answer("x" * (MAX_TOKENS + 1)) and not safe_answer("x " * MAX_TOKENS + "x")


@pytest.mark.parametrize(
    "span",
    [
        "18",
        "1,000",
        "1,000,000",
        "$18",
        r"\$18.00",
        r"\$1,234,567.89",
        "18 dollars",
        "18 apples",
        "x = 18 students",
        r"\text{18 dollars}",
        r"18 \text{ dollars}",
        r"\boxed{18}",
        r"\boxed{1{,}000}",
        r"\frac{3}{4}",
        r"\dfrac{36}{2}",
        "36/2",
        "7.50",
        "50%",
        r"5\%",
        "x = 5",
        "-3",
        "18 or 19",
        "2 \\times 9 = 18",
        "16 - 3 - 4 = 9",
        r"\frac{1}{2} + \frac{1}{3}",
        r"\boxed{\frac{\frac{1}{2}}{3}}",
    ],
)
def test_gsm8k_style_answers_pass_the_guard(span):
    assert safe_answer(span) and token_count(span) == _tokens(span) <= MAX_TOKENS


_PIECES = [
    *"0123456789",
    "987654321",
    *"axeIT",
    "apples",
    "or",
    "sqrt",
    "percent",
    *" +-/=%,.$",
    "{,}",
    r"\$",
    r"\%",
    r"\,",
    r"\;",
    r"\!",
    "\\ ",
    r"\times ",
    r"\cdot ",
    r"\frac{2}{3}",
    r"\dfrac{x}{1.5}",
    r"\tfrac12",
    r"\frac",
    r"\boxed{7}",
    r"\boxed{",
    r"\text{18 dollars}",
    r"\textbf{",
    r"\mathrm{x}",
    r"\mathbf{",
    "}",
    "{",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
def test_every_admitted_answer_respects_the_token_cap(span):
    # the property the module docstring's bound rests on, with the count written twice; and the cap is the
    # only change: the guard admits exactly what the old guard admitted within the cap
    if safe_answer(span):
        assert token_count(span) == _tokens(span) <= MAX_TOKENS and len(span) <= MAX_CHARS
    with pytest.MonkeyPatch.context() as m:
        m.setattr(verify, "MAX_TOKENS", 10**6)
        old = safe_answer(span)
    assert safe_answer(span) == (old and _tokens(span) <= MAX_TOKENS)


def _shape(expr) -> tuple[int, int]:
    """(nodes, depth) of a sympy expression tree."""
    shapes = [_shape(arg) for arg in expr.args]
    return 1 + sum(n for n, _ in shapes), 1 + max((d for _, d in shapes), default=0)


@pytest.mark.parametrize("name", list(_CONSTRUCTS))
def test_math_verify_reads_the_worst_admitted_answers_as_small_shallow_expressions(mv, name):
    # the module docstring's bound: at most 3 MAX_TOKENS nodes, at most MAX_TOKENS deep (sympy's evalf
    # doubles its work with each level of an unevaluated product, so depth is what must stay small)
    import sympy

    span = _longest(_CONSTRUCTS[name])
    expressions = [e for e in reading(xml(span)) if isinstance(e, sympy.Basic)]  # besides, the text it read
    for nodes, depth in map(_shape, expressions):
        assert nodes <= 3 * MAX_TOKENS and depth <= MAX_TOKENS, (span, nodes, depth)


def test_the_old_worst_division_chain_is_what_the_cap_bounds(mv):
    # what made the old guard's worst answer slow is the depth math-verify reads, not its length
    import sympy

    (chain,) = [e for e in verify._read("/".join(["2"] * 50)) if isinstance(e, sympy.Basic)]  # the guard bypassed
    assert _shape(chain)[1] > 4 * MAX_TOKENS


def test_refused_where_math_verify_is_missing(monkeypatch):
    from qae_lab.runs.presets import RunArgs
    from qae_lab.task import rewards

    monkeypatch.setattr(rewards, "math_verify_available", lambda: False)
    with pytest.raises(ValueError, match=re.escape('pip install "qae-lab[verify]"')):
        RunArgs(reward="math_verify")
    check_reward("strict")  # the others need nothing
    with pytest.raises(ValueError, match="reward must be one of"):
        check_reward("exact")


def test_importing_qae_lab_does_not_import_math_verify():
    code = (
        "import sys, qae_lab, qae_lab.task.rewards, qae_lab.task.verify, qae_lab.runs.presets; "
        "assert 'math_verify' not in sys.modules, 'math_verify imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
