r"""How often math-verify agrees with qae_lab's own verdict on GSM8K's test answers, and where not.

    python benchmarks/bench_math_verify.py                     # ../shared/data/gsm8k, every test problem
    python benchmarks/bench_math_verify.py --data path/to/gsm8k --limit 200 --show 3

For each problem of ``test.jsonl`` it writes completions in the task's format
(:func:`qae_lab.task.data.xml_completion`: the problem's worked steps, then the answer block) whose answer
block holds the gold answer as GSM8K writes it, and variants of it ("1,000", "$18", "18.00",
"\boxed{18}", "\frac{36}{2}", "x = 18", "18 dollars", "18%", "The answer is 18.", "1 000", a near miss
such as "18.0000001", "18 or 19", a wrong answer, an answer that runs on). Each completion is judged twice: by
:func:`qae_lab.task.answers.strict_is_correct` (:func:`~qae_lab.task.answers.extract_answer`'s reading) and by
:func:`qae_lab.task.verify.math_verify_is_correct` (math-verify's, behind the same strict format and the
same guard). It prints the agreement overall and per variant, then each disagreement kind with a
few examples and what each reader made of the answer. Needs the ``verify`` extra; without it, or
without the data, it says so and exits.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

from qae_lab.task.answers import extract_answer, gold_value, strict_is_correct
from qae_lab.task.data import load_gsm8k, xml_completion
from qae_lab.task.verify import answer_block, available, math_verify_is_correct, reading

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"


def variants(g: Fraction) -> dict[str, str]:
    """Answer-block contents for an integer gold ``g``: correct ones in other notations, then wrong ones."""
    n = int(g)
    out = {
        "gold": str(n),
        "dollar": f"${n}",
        "decimals": f"{n}.00",
        "boxed": f"\\boxed{{{n}}}",
        "latex_frac": f"\\frac{{{2 * n}}}{{2}}",
        "slash_frac": f"{2 * n}/2",
        "equation": f"x = {n}",
        "units": f"{n} dollars",
        "count_noun": f"{n} apples",
        "percent": f"{n}%",
        "sentence": f"The answer is {n}.",
        "two_numbers": f"{n} or {n + 1}",
    }
    if abs(n) >= 1000:
        out |= {"commas": f"{n:,}", "spaced_thousands": f"{n:,}".replace(",", " ")}
    out |= {"near_miss": f"{n}.0000001", "off_by_one": str(n + 1)}
    return out


def mv_reading(text: str) -> str:
    """What math-verify read in the answer block (for the listing), or why it was not asked."""
    parsed = reading(text)
    if parsed is None:
        return "(not asked: strict format or guard)"
    return str(parsed[0]) if parsed else "(nothing)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder holding GSM8K's test.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="only the first N problems")
    ap.add_argument("--show", type=int, default=3, help="examples listed per disagreement kind")
    args = ap.parse_args()
    if not available():
        print('math-verify is not installed (pip install "qae-lab[verify]"): nothing to compare')
        return
    if not (Path(args.data) / "test.jsonl").is_file():
        print(f"no GSM8K test.jsonl in {args.data} (--data): nothing to compare")
        return
    records = load_gsm8k("test", path=args.data)[: args.limit]
    counts = defaultdict(lambda: [0, 0])  # variant -> [agreements, completions]
    kinds = defaultdict(list)  # (variant, ours, theirs) -> completions
    t0 = time.perf_counter()
    for r in records:
        g = gold_value(r["gold"])
        texts = {name: xml_completion(r, a) for name, a in variants(g).items()}
        texts["ran_on"] = xml_completion(r) + "\nNext question: <answer>"
        for name, text in texts.items():
            ours, theirs = strict_is_correct(text, g), math_verify_is_correct(text, g)
            counts[name][0] += ours == theirs
            counts[name][1] += 1
            if ours != theirs:
                kinds[(name, ours, theirs)].append((r["gold"], text))
    wall = time.perf_counter() - t0
    agree, total = sum(a for a, _ in counts.values()), sum(n for _, n in counts.values())
    print(
        f"{len(records)} GSM8K test problems, {total} completions, {wall:.1f} s: "
        f"math-verify agrees with strict_is_correct on {agree}/{total} = {agree / total:.2%}"
    )
    print(f"{'variant':<18}{'agree':>8}{'of':>7}{'rate':>9}")
    for name, (a, n) in counts.items():
        print(f"{name:<18}{a:>8}{n:>7}{a / n:>9.2%}")
    if not kinds:
        print("no disagreements")
    for (name, ours, theirs), cases in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{name}: {len(cases)} disagreements, strict_is_correct {ours}, math-verify {theirs}")
        for gold, text in cases[: args.show]:
            span = answer_block(text)
            print(
                f"  gold {gold!r}, answer {span!r}: extract_answer {extract_answer(text)!r}, "
                f"math-verify {mv_reading(text)}"
            )


if __name__ == "__main__":
    main()
