r"""How long the rewards take on the worst answers that pass :func:`qae_lab.task.verify.safe_answer`.

    python benchmarks/bench_reward_time.py                 # every family, 300 fuzzed answers
    python benchmarks/bench_reward_time.py --fuzz 1000 --seed 1 --show 20

The ``"math_verify"`` reward runs with math-verify's timeouts off (they need the main thread), so the
guard alone must keep every answer it lets through cheap. This script builds answer-block contents
that pass the guard and are built to be slow: brace groups nested to ``MAX_DEPTH`` (every allowed
command, mixed, with long contents), many sibling groups, long digit runs, many commands, letters and
words, and random answers from a small grammar of everything the whitelist allows. Each is timed
through :func:`qae_lab.task.verify.math_verify_is_correct` and through the strict reward
(:func:`qae_lab.task.rewards.strict_correctness_reward`), and the slowest are listed with their ratio to an
ordinary answer (``\boxed{\frac{3}{4}}``) measured the same way in the same run. It also counts
candidates the guard refused (deeper nesting, bare ``{...}`` groups), which the rewards score 0 at
once, and times one to show it. Since the token cap (``MAX_TOKENS``) most of these candidates are refused;
the worst answer of each construct that the guard still admits is timed by ``benchmarks/bench_verify_guard.py``.

Two timings per answer, because math-verify's parser (ANTLR, in ``latex2sympy2_extended``) caches
what it learns about the grammar in class-level tables, and a slow input is slow while it learns:

* ``warm``: the tables emptied, then filled by five ordinary answers, and math-verify's own
  result caches cleared: an answer of a new shape met by a training process that has seen ordinary
  ones (the case the guard is for);
* ``cold``: the tables emptied and nothing else run first: a fresh process's first answer.

Emptying the tables resets ``PSParser.decisionsToDFA`` / ``sharedContextCache`` and
``PSLexer.decisionsToDFA`` of ``latex2sympy2_extended``'s generated parser (tested with 1.11); where
they are missing, both timings are only math-verify's caches cleared, and the script says so. Times
are the best of ``--repeat`` runs (a shared machine only adds time). Needs the ``verify`` extra.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from qae_lab.task.rewards import strict_correctness_reward
from qae_lab.task.verify import MAX_CHARS, MAX_DEPTH, available, math_verify_is_correct, safe_answer

ORDINARY = r"\boxed{\frac{3}{4}}"  # the reference answer of the ratios
WARM_UP = ["18", r"\boxed{\frac{3}{4}}", r"\$1,000.50", "x = 5 apples", r"\text{18}"]
OPENERS = {  # a command whose argument nests: (text before the inner part, text after it)
    "frac-num": (r"\frac{", "}{2}"),
    "frac-den": (r"\frac{1}{", "}"),
    "dfrac": (r"\dfrac{", "}{3}"),
    "tfrac": (r"\tfrac{7}{", "}"),
    "boxed": (r"\boxed{", "}"),
    "text": (r"\text{", "}"),
    "textbf": (r"\textbf{", "}"),
    "mathrm": (r"\mathrm{", "}"),
    "mathbf": (r"\mathbf{", "}"),
}
INNER = ["1", "a", "x = 5", "1,000.5", "a b c d e f g h", "9" * 30, "apples and pears"]


def _completion(span: str) -> str:
    return f"<reasoning>\n...\n</reasoning>\n<answer>\n{span}\n</answer>"


def nested(depth: int, openers: list[str], inner: str) -> str:
    """``inner`` inside ``depth`` groups, the openers cycled from the outside in."""
    span = inner
    for level in reversed(range(depth)):
        before, after = OPENERS[openers[level % len(openers)]]
        span = before + span + after
    return span


def fill(unit: str, *, head: str = "", tail: str = "") -> str:
    """``head``, then as many ``unit`` as fit in ``MAX_CHARS`` with ``tail``, then ``tail``."""
    n = max(0, (MAX_CHARS - len(head) - len(tail)) // len(unit))
    return head + unit * n + tail


def families() -> dict[str, str]:
    """Named answer spans built to be slow (some of them beyond the guard, to count its refusals)."""
    cases: dict[str, str] = {}
    names = list(OPENERS)
    for depth in range(1, MAX_DEPTH + 2):  # one level beyond the limit: refused
        for name in names:
            for inner in INNER:
                cases[f"nest{depth}-{name}-{inner[:6]}"] = nested(depth, [name], inner)
        for shift in range(len(names)):
            cases[f"nest{depth}-mixed{shift}"] = nested(depth, names[shift:] + names[:shift], "1")
    for depth in range(1, MAX_DEPTH + 1):  # the deepest nest, its innermost group filled to the length limit
        for name in ("frac-num", "frac-den", "text", "boxed"):
            shell = nested(depth, [name], "#")
            for unit in ("a", "a ", "1", "1,", "1.", "x=", "a+"):
                inner = unit * ((MAX_CHARS - len(shell) + 1) // len(unit))
                cases[f"nest{depth}-{name}-filled-{unit!r}"] = shell.replace("#", inner)
    tree = r"\frac{\frac{\frac{1}{2}}{\frac{3}{4}}}{\frac{\frac{5}{6}}{\frac{7}{8}}}"  # a full binary tree, depth 3
    cases |= {
        "frac-tree-3": tree,
        "frac-tree-3-letters": tree.translate(str.maketrans("12345678", "abcdefgh")),
        "siblings-frac": fill(r"\frac{1}{2}"),
        "siblings-frac-sum": fill(r"\frac{1}{2}+"),
        "siblings-frac2": fill(r"\frac{\frac{1}{2}}{3}"),
        "siblings-text": fill(r"\text{1}"),
        "siblings-boxed": fill(r"\boxed{1}"),
        "siblings-mathbf": fill(r"\mathbf{a}"),
        "siblings-thousands": fill("1{,}"),
        "siblings-frac-letters": fill(r"\frac{a}{b}"),
        "digits": "1" * MAX_CHARS,
        "digits-commas": fill("1,", tail="1"),
        "digits-dots": fill("1."),
        "decimal": "0." + "1" * (MAX_CHARS - 2),
        "big-fraction": "9" * 50 + "/" + "9" * 49,
        "slashes": fill("1/"),
        "slashes-2": fill("2/"),  # 2/2/.../2: each / about doubles math-verify's time (1/1 collapses at once)
        "spaced-digits": fill("1 "),
        "percents": fill("1%"),
        "signs": "-" * MAX_CHARS,
        "sums": fill("1+"),
        "differences": fill("1-"),
        "equations": fill("1="),
        "dollars": fill("$1"),
        "commands-times": fill(r"\times"),
        "products": fill(r"1\times"),
        "dots": fill(r"1\cdot"),
        "escapes-dollar": fill(r"\$"),
        "escapes-percent": fill(r"\%"),
        "thin-spaces": fill(r"\,"),
        "neg-spaces": fill(r"1\!"),
        "letters": "a" * MAX_CHARS,
        "letters-spaced": fill("a "),
        "letters-e": "e" * MAX_CHARS,
        "letters-pi": fill("pi"),
        "letters-I": "I" * MAX_CHARS,
        "words": fill("apples "),
        "variables": fill("x = "),
        "letter-sums": fill("ab+"),
        "letter-fractions": fill("a/b"),
        "assignments": fill("x=1,"),
        "mixed": fill(r"x = \frac{1}{2} \cdot 3 \times \$4,000.5 \% "),
        # refused by the guard: bare groups (sets to math-verify), unbalanced braces, the freeze of old
        "bare-1": "{1}",
        "bare-3": "{{{1}}}",
        "bare-16": "{" * 16 + "1" + "}" * 16,
        "bare-48": "{" * 48 + "1" + "}" * 48,
        "bare-siblings": fill("{1}"),
        "unbalanced": r"\frac{1}{2",
        "unbalanced-close": r"\text{1}}",
    }
    return cases


_ATOMS = [
    "1",
    "7",
    "18",
    "1,000",
    "0.5",
    "3.25",
    "12345",
    "a",
    "x",
    "y",
    "n",
    "e",
    "apples",
    "dollars",
    "$5",
    r"\$5",
    "50%",
    r"5\%",
    "-3",
    "+2",
    "1{,}000",
]
_BINARY = [" + ", " - ", "/", " = ", " ", ", ", r" \times ", r" \cdot ", r"\,", r"\!", r"\;"]


def grammar(rng: random.Random, depth: int = 0) -> str:
    """A random answer from everything the whitelist allows, braces only as command arguments."""
    roll = rng.random()
    if depth >= MAX_DEPTH or roll < 0.35:
        return rng.choice(_ATOMS)
    if roll < 0.6:
        return grammar(rng, depth) + rng.choice(_BINARY) + grammar(rng, depth)
    if roll < 0.85:
        command = rng.choice([r"\frac", r"\dfrac", r"\tfrac"])
        return f"{command}{{{grammar(rng, depth + 1)}}}{{{grammar(rng, depth + 1)}}}"
    command = rng.choice([r"\boxed", r"\text", r"\textbf", r"\mathrm", r"\mathbf"])
    return f"{command}{{{grammar(rng, depth + 1)}}}"


def fuzzed(n: int, seed: int) -> dict[str, str]:
    """``n`` random answers that pass the guard, each as long as it can grow within ``MAX_CHARS``."""
    rng, out, tries = random.Random(seed), {}, 0
    while len(out) < n and tries < 1000 * n:
        tries += 1
        span = grammar(rng)
        while len(span) < MAX_CHARS // 2:
            span += rng.choice(_BINARY) + grammar(rng)
        if safe_answer(span) and span not in out.values():
            out[f"fuzz-{len(out)}"] = span
    return out


class Clock:
    """Times one answer warm or cold (module docstring); knows whether it can empty the parser's tables."""

    def __init__(self):
        import math_verify  # the `verify` extra

        self.mv = math_verify
        try:
            from antlr4.dfa.DFA import DFA
            from antlr4.PredictionContext import PredictionContextCache
            from latex2sympy2_extended.gen.antlr4_13_2.PSLexer import PSLexer
            from latex2sympy2_extended.gen.antlr4_13_2.PSParser import PSParser
        except ImportError:
            self.tables = None
        else:
            self.tables = (DFA, PredictionContextCache, PSLexer, PSParser)
        math_verify_is_correct(_completion("7"), "7")  # imports sympy and math-verify's units once

    def empty(self) -> None:
        if self.tables is not None:
            DFA, PredictionContextCache, PSLexer, PSParser = self.tables
            PSParser.decisionsToDFA = [DFA(s, i) for i, s in enumerate(PSParser.atn.decisionToState)]
            PSParser.sharedContextCache = PredictionContextCache()
            PSLexer.decisionsToDFA = [DFA(s, i) for i, s in enumerate(PSLexer.atn.decisionToState)]
        self.mv.parser.parse_latex_cached.cache_clear()
        self.mv.parser.extract_latex.cache_clear()

    def time(self, span: str, *, warm: bool, repeat: int) -> float:
        """Best of ``repeat`` runs of math_verify_is_correct on the span, in seconds."""
        best = float("inf")
        for _ in range(repeat):
            self.empty()
            if warm:
                for answer in WARM_UP:
                    math_verify_is_correct(_completion(answer), "18")
                self.mv.parser.parse_latex_cached.cache_clear()
                self.mv.parser.extract_latex.cache_clear()
            start = time.perf_counter()
            math_verify_is_correct(_completion(span), "1")
            best = min(best, time.perf_counter() - start)
        return best


def strict_time(span: str, repeat: int) -> float:
    """Best of ``repeat`` runs of the strict reward on one completion, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        strict_correctness_reward([_completion(span)], gold=["1"])
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fuzz", type=int, default=300, help="random answers from the whitelist's grammar")
    ap.add_argument("--seed", type=int, default=0, help="the fuzzer's seed")
    ap.add_argument("--repeat", type=int, default=2, help="runs per answer and timing; the best counts")
    ap.add_argument("--show", type=int, default=15, help="slowest answers listed")
    args = ap.parse_args()
    if not available():
        print('math-verify is not installed (pip install "qae-lab[verify]"): nothing to time')
        return
    clock = Clock()
    if clock.tables is None:
        print("latex2sympy2_extended's parser tables not found: warm and cold are both math-verify's caches cleared")
    candidates = families() | fuzzed(args.fuzz, args.seed)
    passed = {name: span for name, span in candidates.items() if safe_answer(span)}
    refused = [name for name in candidates if name not in passed]
    base_warm = clock.time(ORDINARY, warm=True, repeat=3)
    base_cold = clock.time(ORDINARY, warm=False, repeat=3)
    base_strict = strict_time(ORDINARY, 3)
    print(
        f"guard: MAX_CHARS = {MAX_CHARS}, MAX_DEPTH = {MAX_DEPTH}; {len(candidates)} candidates, "
        f"{len(passed)} pass the guard, {len(refused)} refused (score 0 without math-verify)"
    )
    print(
        f"ordinary answer {ORDINARY!r}: warm {base_warm * 1e3:.1f} ms, cold {base_cold * 1e3:.1f} ms, "
        f"strict {base_strict * 1e6:.0f} us"
    )
    t0 = time.perf_counter()
    rows = []
    for name, span in passed.items():
        rows.append(
            (
                clock.time(span, warm=True, repeat=args.repeat),
                clock.time(span, warm=False, repeat=args.repeat),
                strict_time(span, args.repeat),
                name,
                span,
            )
        )
    wall = time.perf_counter() - t0
    for key, label in ((0, "warm"), (1, "cold")):
        rows.sort(key=lambda r: -r[key])
        print(f"\nslowest {args.show} by {label} time (of {len(rows)}, timed in {wall:.0f} s):")
        print(f"{'warm ms':>9}{'x ord':>7}{'cold ms':>9}{'x ord':>7}{'strict us':>11}  name: span")
        for warm, cold, strict, name, span in rows[: args.show]:
            print(
                f"{warm * 1e3:>9.1f}{warm / base_warm:>7.1f}{cold * 1e3:>9.1f}{cold / base_cold:>7.1f}"
                f"{strict * 1e6:>11.0f}  {name}: {span[:70]!r}"
            )
    warms, colds, stricts = ([r[i] for r in rows] for i in range(3))
    print(
        f"\nwarm: median {statistics.median(warms) * 1e3:.1f} ms, worst {max(warms) * 1e3:.1f} ms "
        f"({max(warms) / base_warm:.1f}x ordinary); cold: median {statistics.median(colds) * 1e3:.1f} ms, "
        f"worst {max(colds) * 1e3:.1f} ms ({max(colds) / base_cold:.1f}x ordinary); "
        f"strict reward worst {max(stricts) * 1e6:.0f} us"
    )
    start = time.perf_counter()
    scores = [math_verify_is_correct(_completion(candidates[name]), "1") for name in refused]
    print(
        f"the {len(refused)} refused candidates (bare-48 among them: the freeze of before) scored "
        f"{sum(scores)} in {(time.perf_counter() - start) * 1e3:.1f} ms together"
    )


if __name__ == "__main__":
    main()
