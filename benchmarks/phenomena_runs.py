"""The committed phenomena runs of notebook 06: every experiment of qae_lab.phenomena.EXPERIMENTS.

For each experiment, method, seed (and K, for the K sweep) this runs
``python -m qae_lab train --preset <preset> --method <method> --set <the experiment's sets> --set seed=S``
(dense updates, so ``entropy`` covers every response), one run at a time (``--threads 1``: two scripts, one per
experiment, share 2 cores best), then keeps the
small part of each run folder under ``data/reference_runs/phenomena/<experiment>/<run>/``:
``config.json``, ``log.jsonl`` and ``summary.json`` (the before/after evaluation summaries without
the per-problem completions), and prints each run's wall time.

    python benchmarks/phenomena_runs.py --work /tmp/phen                 # all experiments
    python benchmarks/phenomena_runs.py --work /tmp/phen --only entropy  # one of them
    python benchmarks/phenomena_runs.py --work /tmp/phen --collect-only
    python benchmarks/phenomena_runs.py --search /tmp/explore/runs    # summarise exploratory runs

``--search DIR`` writes ``data/reference_runs/phenomena/search.json``: for every run folder in DIR
(the exploratory runs made while choosing the experiments' settings) its settings and entropy and
reward figures (:func:`qae_lab.phenomena.search_row`); notebook 06 prints it.

A finished run (its ``eval_after.json`` exists) is not run again; an unfinished one is refused by
the CLI (a run folder is never overwritten): delete it yourself to run it again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from qae_lab.compare import load_runs
from qae_lab.phenomena import EXPERIMENTS, run_names, search_row
from qae_lab.runfolder import atomic_write_text, read_log
from reference_runs import keep_run  # the sibling script: the same small part of each run folder

DEST = Path(__file__).resolve().parents[1] / "data" / "reference_runs" / "phenomena"


def run(work: Path, only: list[str], threads: int | None) -> None:
    for name in only:
        exp = EXPERIMENTS[name]
        for folder, method, sets in run_names(name):
            out = work / name / folder
            if (out / "eval_after.json").is_file():
                continue
            cmd = [sys.executable, "-m", "qae_lab", "train", "--preset", exp["preset"], "--method", method,
                   "--output-dir", str(out)]
            extra = [f"torch_threads={threads}"] if threads else []
            for s in [*exp["sets"], *sets, "sparse_update=false", "disable_tqdm=true", "save_model=false", *extra]:
                cmd += ["--set", s]
            print(" ".join(cmd), flush=True)
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None
            subprocess.run(cmd, check=True, env=env)


def collect(work: Path, only: list[str]) -> None:
    for name in only:
        for folder, _, _ in run_names(name):
            src, dst = work / name / folder, DEST / name / folder
            if not (src / "eval_after.json").is_file():
                print(f"missing: {src}")
                continue
            summary = keep_run(src, dst)
            wall = max((r.get("elapsed_s") or 0) for r in read_log(src / "log.jsonl"))
            print(f"{name:<10} {folder:<28} pass@1 {summary['before']['summary']['pass@1']:.3f} -> "
                  f"{summary['after']['summary']['pass@1']:.3f}   {wall:6.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="folder for the full run folders")
    p.add_argument("--search", type=Path, help="summarise the exploratory runs in this folder into search.json")
    p.add_argument("--only", nargs="*", choices=sorted(EXPERIMENTS), default=sorted(EXPERIMENTS))
    p.add_argument("--collect-only", action="store_true")
    p.add_argument("--threads", type=int, help="torch threads per run: 1 lets two of these scripts share 2 cores "
                   "(two processes of 2 threads each on 2 cores run several times slower than one)")
    args = p.parse_args()
    if args.search:
        rows = [search_row(r) for r in sorted(load_runs(args.search), key=lambda r: r.name)]
        DEST.mkdir(parents=True, exist_ok=True)
        atomic_write_text(DEST / "search.json", json.dumps(rows, indent=1) + "\n")
        print(f"{len(rows)} runs -> {DEST / 'search.json'}")
        return
    if args.work is None:
        p.error("--work is required (unless --search)")
    if not args.collect_only:
        run(args.work, args.only, args.threads)
    collect(args.work, args.only)


if __name__ == "__main__":
    main()
