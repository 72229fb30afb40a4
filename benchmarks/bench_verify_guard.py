r"""The worst answer of each construct that :func:`qae_lab.task.verify.safe_answer` admits, timed in
math-verify, beside the same construct at the limit of the old guard (before ``MAX_TOKENS``).

    python benchmarks/bench_verify_guard.py                    # every construct, 300 fuzzed answers
    python benchmarks/bench_verify_guard.py --budget 5 --fuzz 0

The ``"math_verify"`` reward runs with math-verify's timeouts off, so the guard alone must bound its
cost. The old guard (the alphabet, braces only as command arguments at most ``MAX_DEPTH`` deep, at
most 100 characters) admitted ``2/2/.../2`` with 50 twos, and math-verify's time on a division chain
about doubles with each ``/`` (18 twos 5 s, 22 twos 60 s). Each construct of ``CONSTRUCTS`` (a chain
of one operator, a run of digits or letters, long operands, a mix) grows with n (its operators, or the
characters of a run, or the digits or letters of each operand) up to 100 characters; the table gives,
for each guard, the largest n it admits, that instance's tokens (:func:`qae_lab.task.verify.token_count`)
and characters, and math-verify's time on it: the span read as :func:`qae_lab.task.verify.reading`
reads it, then ``math_verify.verify`` against a wrong integer gold (a wrong answer tries every
comparison; a right one may stop at the first). Old and new are timed side by side in one run. An old
instance that runs past ``--budget`` seconds is stopped (``>budget``); the line below it gives the
largest n that finished within the budget. Then ``--fuzz`` random answers that the new guard admits,
grown from every kind of token until one more would be refused, and the slowest of them.

Each answer is timed in a child process forked from one that has read a few ordinary answers
(sympy, math-verify and its parser warmed up, as in a training process), so no answer sees another's
caches, and a child past the budget is killed. Times are the best of ``--repeat`` runs for answers
under a second. Needs the ``verify`` extra.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time
from collections.abc import Callable

from qae_lab.task.verify import (
    _SAFE,
    MAX_CHARS,
    MAX_DEPTH,
    MAX_TOKENS,
    _groups_ok,
    _math_verify,
    _read,
    available,
    math_verify_is_correct,
    safe_answer,
    token_count,
)

OLD_MAX_CHARS = 100  # the old guard's length limit
GOLD = 7  # a wrong answer for every construct below
WARM_UP = ["18", r"\boxed{\frac{3}{4}}", r"\$1,000.50", "x = 5 apples", "1/2/2", "a b", "1,2", "0.5", "50%"]
LETTERS = "abcdfghjklmnpqrsuvwxyz"  # letters math-verify reads as symbols (e is Euler's number; o, t units)


def _letters(n: int) -> str:
    return (LETTERS * (n // len(LETTERS) + 1))[:n]


def _digits(n: int) -> str:
    return ("987654321" * (n // 9 + 1))[:n]


def _chain(op: str, operand: str = "2") -> Callable[[int], str]:
    """n -> ``operand op operand ... op operand`` with n operators."""
    return lambda n: op.join([operand] * (n + 1))


# name -> n -> the construct with n operators (n characters for a run, n letters or digits per operand)
CONSTRUCTS: dict[str, Callable[[int], str]] = {
    "/ 2/2/.../2": _chain("/"),
    "/ 3/7/3/7": lambda n: "/".join("37"[i % 2] for i in range(n + 1)),
    "/- 2/-2/-2": lambda n: "2" + "/-2" * n,
    "/ letters a/b/c": lambda n: "/".join(_letters(n + 1)),
    "/ mixed 2/x/2/x": lambda n: "/".join("2x"[i % 2] for i in range(n + 1)),
    "/ decimals 2.5/2.5": _chain("/", "2.5"),
    "/ percents 2%/2%": _chain("/", "2%"),
    "/ long numbers (n digits)": lambda n: "/".join([_digits(n)] * 5),
    "/ long decimals (n digits)": lambda n: "/".join(["0." + _digits(n)] * 3),
    "/ long words (n letters)": lambda n: "/".join([_letters(n)] * 5),
    "+ 2+2+2": _chain("+"),
    "+ fractions 1/2+1/3": lambda n: "+".join(f"1/{k + 2}" for k in range(n + 1)),
    "- 2-2-2": _chain("-"),
    "- unary ---2": lambda n: "-" * n + "2",
    "= 2=2=2": _chain("="),
    "= letters a=b=c": lambda n: "=".join(_letters(n + 1)),
    "% 2%2%2": _chain("%"),
    r"\% 2\%2\%2": _chain(r"\%"),
    "$ $2$2$2": lambda n: "$2" * n,
    "$ $$$2": lambda n: "$" * n + "2",
    r"\frac nested, then /3": lambda n: (
        r"\frac{" * min(n, MAX_DEPTH) + "2" + "}{3}" * min(n, MAX_DEPTH) + "/3" * max(0, n - MAX_DEPTH)
    ),
    r"\frac siblings": lambda n: "".join(rf"\frac{{{k + 2}}}{{{k + 3}}}" for k in range(n)),
    r"\frac unbraced \frac23\frac23": lambda n: r"\frac23" * n,
    r"\frac of chains": lambda n: rf"\frac{{{'/'.join(['2'] * (n + 1))}}}{{{'/'.join(['3'] * (n + 1))}}}",
    r"\times 2\times2": _chain(r"\times "),
    r"\cdot 2\cdot2": _chain(r"\cdot "),
    r"\times and / 2/2\times2/2": lambda n: "2" + "".join(("/2", r"\times 2")[i % 2] for i in range(n)),
    r"\text \text{2}/\text{2}": lambda n: "/".join([r"\text{2}"] * (n + 1)),
    r"\text a chain \text{2/2/2}": lambda n: r"\text{" + "/".join(["2"] * (n + 1)) + "}",
    r"wrappers \boxed{}\boxed{}2": lambda n: r"\boxed{}" * n + "2",
    r"wrappers \mathbf{2}\mathbf{2}": lambda n: r"\mathbf{2}" * n,
    r"spacing \,\,\,2": lambda n: r"\," * n + "2",
    r"spacing 2\!2\!2": lambda n: "2" + r"\!2" * n,
    "{,} 2{,}2{,}2": _chain("{,}"),
    "{,} 1{,}000{,}000": lambda n: "1" + "{,}000" * n,
    ", sets 2,3,4": lambda n: ",".join(str(k + 2) for k in range(n + 1)),
    ", sets a,b,c": lambda n: ",".join(_letters(n + 1)),
    ", sets of words (n letters)": lambda n: ",".join([_letters(n)] * 5),
    ", 1,000,000": lambda n: "1" + ",000" * n,
    ". 1.1.1.1": _chain("."),
    "digits 987...": _digits,
    "decimal 0.333...": lambda n: "0." + "3" * n,
    "letters x y z": lambda n: " ".join(_letters(n)),
    "word abcd...": _letters,
    "words: 2 or 3 or 4": lambda n: " or ".join(str(k + 2) for k in range(n + 1)),
    "words: 2 sqrt 3 sqrt 5": lambda n: "2" + "".join(f" sqrt {k + 3}" for k in range(n)),
    "juxtaposed 2 3 4": lambda n: " ".join(str(k + 2) for k in range(n + 1)),
    "mix x = 2/3+4/5+...": lambda n: "x = " + "+".join(f"{k + 2}/{k + 3}" for k in range(n + 1)),
    r"mix \frac / \times +": lambda n: "".join((r"\frac{2}{3}", "/3", r"\times 5", "+7")[i % 4] for i in range(n)),
}


def old_safe(span: str) -> bool:
    """The guard before MAX_TOKENS: its alphabet, its brace rule, OLD_MAX_CHARS characters."""
    return bool(span.strip()) and len(span) <= OLD_MAX_CHARS and _SAFE.fullmatch(span) is not None and _groups_ok(span)


def limit(build: Callable[[int], str], admits: Callable[[str], bool]) -> int | None:
    """The largest n whose construct the guard admits (None if none): n grows until the construct
    outgrows the old length limit."""
    best, n = None, 0
    while len(build(n)) <= OLD_MAX_CHARS:
        if admits(build(n)):
            best = n
        n += 1
    return best


def _read_and_compare(span: str) -> None:
    """What the reward runs on an admitted span, without the guard (so old limits can be timed)."""
    import sympy  # a dependency of torch

    parsed = _read(span)
    if parsed:  # as math_verify_is_correct compares
        _math_verify().verify(sympy.Rational(GOLD), parsed, timeout_seconds=None)


def _child(span: str, send) -> None:
    start = time.perf_counter()
    _read_and_compare(span)
    send.send(time.perf_counter() - start)


def timed(span: str, budget: float, repeat: int) -> float | None:
    """Best of ``repeat`` runs (one if it takes a second or more), each in a forked child; None past ``budget``."""
    fork = multiprocessing.get_context("fork")
    best = None
    for _ in range(repeat):
        receive, send = fork.Pipe(duplex=False)
        child = fork.Process(target=_child, args=(span, send))
        child.start()
        send.close()  # the child's end: a child that dies closes the pipe
        try:
            seconds = receive.recv() if receive.poll(budget) else None
        except EOFError:
            raise RuntimeError(f"math-verify failed on {span!r} (its traceback is above)") from None
        if seconds is None:
            child.kill()
        child.join()
        if seconds is None:
            return None
        best = seconds if best is None else min(best, seconds)
        if best >= 1.0:
            break
    return best


def _fmt(seconds: float | None, budget: float) -> str:
    if seconds is None:
        return f">{budget:.0f} s"
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def compare_constructs(budget: float, repeat: int) -> float:
    """Print one row per construct: its longest new-guard instance and old-guard instance, timed; the worst new time."""
    print(
        f"{'construct':<34}{'new n':>6}{'tok':>5}{'chars':>6}{'new time':>10}{'old n':>7}{'chars':>6}{'old time':>10}"
    )
    worst = 0.0
    for name, build in CONSTRUCTS.items():
        n_new, n_old = limit(build, safe_answer), limit(build, old_safe)
        new = timed(build(n_new), budget, repeat) if n_new is not None else None
        old = timed(build(n_old), budget, repeat) if n_old is not None else None
        worst = max(worst, budget if new is None and n_new is not None else new or 0.0)
        span_new = build(n_new) if n_new is not None else ""
        print(
            f"{name:<34}{n_new!s:>6}{token_count(span_new):>5}{len(span_new):>6}{_fmt(new, budget):>10}"
            f"{n_old!s:>7}{len(build(n_old)) if n_old is not None else 0:>6}{_fmt(old, budget):>10}"
        )
        if old is None and n_old is not None:  # how far the old guard's construct gets within the budget
            n, seconds = n_new or 0, new
            while n < n_old and (longer := timed(build(n + 1), budget, 1)) is not None:
                n, seconds = n + 1, longer
            print(
                f"{'':<6}old guard: n = {n} ({len(build(n))} characters) takes {_fmt(seconds, budget)}, "
                f"n = {n + 1} more than {budget:.0f} s: {build(n + 1)!r}"
            )
    return worst


_PIECES = ["2", "7", "18", "987654321", "0.5", "x", "ab", "apples", "e", "I", "or", "sqrt", "percent", "inf"]
_WRAPPERS = [r"\boxed", r"\text", r"\mathrm"]
_JOINS = ["/", "+", "-", "=", "%", ",", ".", " ", "{,}", r"\times ", r"\cdot ", r"\%", r"\,", "$"]


def _fuzz_one(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth < MAX_DEPTH and roll < 0.25:
        return rf"\frac{{{_fuzz_one(rng, depth + 1)}}}{{{_fuzz_one(rng, depth + 1)}}}"
    if depth < MAX_DEPTH and roll < 0.35:
        return rng.choice(_WRAPPERS) + "{" + _fuzz_one(rng, depth + 1) + "}"
    span = rng.choice(["", "-"]) + rng.choice(_PIECES)
    while rng.random() < 0.7:
        span += rng.choice(_JOINS) + rng.choice(_PIECES)
    return span


def fuzz(n: int, seed: int, budget: float, repeat: int, show: int) -> float:
    """Time ``n`` random answers that the new guard admits, grown until one more piece would be refused."""
    rng, spans = random.Random(seed), set()
    while len(spans) < n:
        span = _fuzz_one(rng)
        while safe_answer(span):
            grown = span + rng.choice(_JOINS) + rng.choice(_PIECES)
            if not safe_answer(grown):
                break
            span = grown
        if safe_answer(span):
            spans.add(span)
    rows = sorted(((timed(s, budget, repeat), s) for s in spans), key=lambda r: -(r[0] or budget))
    print(f"\n{n} random admitted answers (seed {seed}), the {show} slowest:")
    for seconds, span in rows[:show]:
        print(f"{_fmt(seconds, budget):>10}  tok {token_count(span):>2}  {span!r}")
    return (rows[0][0] or budget) if rows else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=20.0, help="seconds after which one timing is stopped")
    ap.add_argument("--repeat", type=int, default=3, help="runs per answer under a second; the best counts")
    ap.add_argument("--fuzz", type=int, default=300, help="random admitted answers timed")
    ap.add_argument("--seed", type=int, default=0, help="the fuzzer's seed")
    ap.add_argument("--show", type=int, default=10, help="slowest fuzzed answers listed")
    args = ap.parse_args()
    if not available():
        print('math-verify is not installed (pip install "qae-lab[verify]"): nothing to time')
        return
    for answer in WARM_UP:  # imports sympy's and math-verify's modules before any child is forked
        math_verify_is_correct(f"<answer>{answer}</answer>", "18")
        _read_and_compare(answer)
    base = timed("18", args.budget, args.repeat)
    print(
        f"new guard: MAX_TOKENS = {MAX_TOKENS}, MAX_CHARS = {MAX_CHARS}, MAX_DEPTH = {MAX_DEPTH}; old guard: "
        f"{OLD_MAX_CHARS} characters, MAX_DEPTH = {MAX_DEPTH}; gold {GOLD}; the answer '18' takes {_fmt(base, 1)}"
    )
    worst = compare_constructs(args.budget, args.repeat)
    if args.fuzz:
        worst = max(worst, fuzz(args.fuzz, args.seed, args.budget, args.repeat, args.show))
    print(f"\nworst admitted answer under the new guard: {_fmt(worst, args.budget)}")


if __name__ == "__main__":
    main()
