"""The committed reference runs: cpu-demo with mean, QAE, SA-AH and QAE+SA-AH, three seeds each.

Runs ``python -m qae_lab train --preset cpu-demo --method M --set seed=S`` for every method
and seed (dense updates, so ``entropy`` covers every response), then keeps the small part
of each run folder under ``data/reference_runs/<method>-seed<S>/``: ``config.json``,
``log.jsonl`` and ``summary.json`` (the before/after evaluation summaries without the
per-problem completions). Finally prints the before/after table, mean and spread over seeds.
The comparison notebook (05) reads these folders.

    python benchmarks/reference_runs.py --work /tmp/ref           # ~12 x 3 minutes on 2 cores
    python benchmarks/reference_runs.py --work /tmp/ref --collect-only
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from qae_lab.methods import METHODS
from qae_lab.storage.folder import atomic_write_text

SEEDS = (0, 1, 2)
DEST = Path(__file__).resolve().parents[1] / "data" / "reference_runs"


def run(work: Path) -> None:
    for seed in SEEDS:
        for method in METHODS:
            out = work / f"{method}-seed{seed}"
            if (out / "eval_after.json").is_file():
                continue
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "qae_lab",
                    "train",
                    "--preset",
                    "cpu-demo",
                    "--method",
                    method,
                    "--set",
                    f"seed={seed}",
                    "--set",
                    "sparse_update=false",
                    "--set",
                    "disable_tqdm=true",
                    "--set",
                    "save_model=false",
                    "--output-dir",
                    str(out),
                ],
                check=True,
            )


def _summary(path: Path) -> dict:
    data = json.loads(path.read_text())
    return {
        "summary": data["summary"],
        "by_level": data["by_level"],
        "success_rates": [p["success_rate"] for p in data["problems"]],
    }


def keep_run(src: Path, dst: Path, extra: tuple[str, ...] = ()) -> dict:
    """Copy the small part of run folder ``src`` to ``dst``: config.json, log.jsonl and summary.json (the
    before/after evaluation summaries without per-problem completions), and each of ``extra`` the run has
    (e.g. regime_split.json). Returns the summary."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "log.jsonl", *(e for e in extra if (src / e).is_file())):
        shutil.copy(src / name, dst / name)
    summary = {"before": _summary(src / "eval_before.json"), "after": _summary(src / "eval_after.json")}
    atomic_write_text(dst / "summary.json", json.dumps(summary, indent=1))
    return summary


def collect(work: Path) -> list[dict]:
    rows = []
    for seed in SEEDS:
        for method in METHODS:
            src, dst = work / f"{method}-seed{seed}", DEST / f"{method}-seed{seed}"
            if not (src / "eval_after.json").is_file():
                print(f"missing: {src}")
                continue
            summary = keep_run(src, dst)
            log = [json.loads(line) for line in (src / "log.jsonl").read_text().splitlines() if line.strip()]
            rows.append(
                {
                    "method": method,
                    "seed": seed,
                    "before": summary["before"]["summary"],
                    "after": summary["after"]["summary"],
                    "wall_s": max((r.get("elapsed_s") or 0) for r in log),
                }
            )
    return rows


def report(rows: list[dict]) -> None:
    print(
        f"{'method':<10} {'seeds':>5} {'sampled pass@1 before -> after':>32} {'greedy before -> after':>24} "
        f"{'train s':>8}"
    )
    for method in METHODS:
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue

        def ms(key, when):
            xs = [r[when][key] for r in rs]
            return f"{statistics.mean(xs):.3f}±{statistics.pstdev(xs):.3f}"

        print(
            f"{method:<10} {len(rs):>5} {ms('pass@1', 'before'):>15} -> {ms('pass@1', 'after'):<13} "
            f"{ms('greedy_pass@1', 'before'):>11} -> {ms('greedy_pass@1', 'after'):<11} "
            f"{statistics.mean(r['wall_s'] for r in rs):8.0f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="folder for the full run folders")
    p.add_argument("--collect-only", action="store_true")
    a = p.parse_args()
    if not a.collect_only:
        run(a.work)
    report(collect(a.work))


if __name__ == "__main__":
    main()
