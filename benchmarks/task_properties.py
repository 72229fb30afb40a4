"""Measure what the sums model offers RL before any RL step, and write it into its README.

    python benchmarks/task_properties.py                       # data/embedded_sums, 200 prompts x 16 samples
    python benchmarks/task_properties.py --prompts 50 --no-write

Loads ``load_policy("embedded-sums")`` (or ``--model``), samples ``--samples`` completions at temperature 1
for each of ``--prompts`` fresh problems of the sums task (``sums_task(n, seed=2024)``: seeds the model's
training never drew in this order), and measures, with ``tools.task_properties.task_properties``,
the property table (distinct correct completions, length spread, token entropy on
reasoning and format tokens, QAE's regimes at K = 0.4, never-solved prompts, format compliance, punished
correct answers under the composite reward, reflective words), then greedy / sampled pass@1 and pass@k
per level with ``qae_lab.task.evaluate.evaluate``. With ``--write`` (the default) the tables replace the
section between the ``<!-- measured -->`` markers of the model's README.
"""

from __future__ import annotations

import argparse
import re
import time

import torch

from qae_lab.threads import use_threads
from qae_lab.task.evaluate import evaluate
from qae_lab.task.models import EMBEDDED_MODELS, embedded_dir, load_policy
from qae_lab.storage.folder import atomic_write_text
from qae_lab.task.sums import sums_task
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ lives at the repository's root
from tools.task_properties import property_table, task_properties

START, END = "<!-- measured -->", "<!-- /measured -->"


def level_table(result, ks) -> str:
    rows = [
        "| level | greedy pass@1 | sampled pass@1 | " + " | ".join(f"pass@{k}" for k in ks[1:]) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in ks[1:]) + " |",
    ]
    for name, s in [*((str(lv), m) for lv, m in result.by_level.items()), ("all", result.summary)]:
        rows.append(
            f"| {name} | {s['greedy_pass@1']:.2f} | {s['pass@1']:.2f} | "
            + " | ".join(f"{s[f'pass@{k}']:.2f}" for k in ks[1:])
            + " |"
        )
    return "\n".join(rows)


def main() -> None:
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads), both sides alike
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded-sums")
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--seed", type=int, default=2024, help="seed of the problems (the sampling seed is 0)")
    p.add_argument("--no-write", dest="write", action="store_false", help="print only; leave the README alone")
    args = p.parse_args()
    torch.manual_seed(0)
    model, tok = load_policy(args.model, device="cpu")
    records = sums_task(args.prompts, seed=args.seed)
    t0 = time.time()
    props = task_properties(model, tok, records, group_size=args.samples, max_new_tokens=args.max_new_tokens)
    t1 = time.time()
    ks = [k for k in (1, 4, 16, 32) if k <= args.samples]
    result = evaluate(
        model,
        tok,
        records,
        num_samples=args.samples,
        ks=ks,
        max_new_tokens=args.max_new_tokens,
        batch_size=16,
        seed=1,
        progress=False,
    )
    t2 = time.time()
    extra = ", ".join(
        f"{k} {props[k]:.2f}"
        for k in (
            "pass@1",
            "length_mean",
            "length_min",
            "length_max",
            "top_share",
            "composite_correct_values",
            "always_solved_frac",
        )
    )
    text = (
        f"Measured by `python benchmarks/task_properties.py` on {args.prompts} problems of "
        f"`sums_task({args.prompts}, seed={args.seed})`, {args.samples} samples each at temperature 1 "
        f"(at most {args.max_new_tokens} new tokens), before any RL:\n\n{property_table(props)}\n\n"
        f"Also: {extra}.\n\nPer level (`qae_lab.task.evaluate.evaluate`, {args.samples} samples, strict verdict):\n\n"
        f"{level_table(result, ks)}\n"
    )
    print(text)
    print(f"(properties {t1 - t0:.0f} s, evaluation {t2 - t1:.0f} s)")
    if args.write:
        readme = embedded_dir(args.model) / "README.md" if args.model in EMBEDDED_MODELS else None
        if readme is None or not readme.is_file():
            raise SystemExit(f"no README to write into ({readme}); use --no-write")
        old = readme.read_text()
        if START not in old or END not in old:
            raise SystemExit(f"{readme} has no {START} ... {END} section to replace")
        new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: f"{START}\n{text}{END}", old, flags=re.S)
        atomic_write_text(readme, new)  # an interrupted run leaves the old README, never half of one
        print(f"written into {readme}")


if __name__ == "__main__":
    main()
