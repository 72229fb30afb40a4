"""The committed phenomena runs of notebook 06: the search that chose their settings, then every experiment.

Every run is ``python -m qae_lab train --preset <preset> --method <method> --set <settings> --set seed=S``
(dense updates, so ``entropy`` covers every response), and keeps the small part of its folder:
``config.json``, ``log.jsonl`` and ``summary.json`` (the before/after evaluation summaries without the
per-problem completions).

    python benchmarks/phenomena_runs.py --search-run /tmp/phen --jobs 2   # 1. qae_lab.analysis.phenomena.SEARCH
    python benchmarks/phenomena_runs.py --search /tmp/phen/search          #    -> phenomena/search.json
    python benchmarks/phenomena_runs.py --search-run /tmp/phen --search-of regimes --jobs 2   # REGIME_SEARCH
    python benchmarks/phenomena_runs.py --search /tmp/phen/search-regimes --search-of regimes  # -> search_regimes.json
    python benchmarks/phenomena_runs.py --search-run /tmp/phen --search-of phenomenon --jobs 2  # PHENOMENON_SEARCH
    python benchmarks/phenomena_runs.py --search /tmp/phen/search-phenomenon --search-of phenomenon
    python benchmarks/phenomena_runs.py --choose                           #    the setting it chose
    python benchmarks/phenomena_runs.py --work /tmp/phen --jobs 2          # 2. every experiment, fresh seeds
    python benchmarks/phenomena_runs.py --work /tmp/phen --only entropy --collect-only

1. ``--search-run DIR`` runs every entry of :data:`qae_lab.analysis.phenomena.SEARCH` (one seed,
   :data:`qae_lab.analysis.phenomena.SEARCH_SEED`, which no reported run uses) into ``DIR/search/``; ``--search DIR``
   writes ``data/reference_runs/phenomena/search.json``: each run's settings, its entropy and reward at the
   start and the end, its clipped fraction and its pass@1 before and after (:func:`qae_lab.analysis.phenomena.search_row`).
   :data:`qae_lab.analysis.phenomena.BASE_SETS` is then set from it, by hand, with the reason in a comment.
   ``--search-of regimes`` does the same for the regimes experiment's search (:data:`qae_lab.analysis.phenomena.REGIME_SEARCH`,
   into ``DIR/search-regimes/`` and ``search_regimes.json``); each
   search is one entry of :data:`qae_lab.analysis.phenomena.SEARCHES`. ``--search-of phenomenon``: the search
   for the papers' entropy phenomenon (:data:`qae_lab.analysis.phenomena.PHENOMENON_SEARCH`, no pass@k evaluation:
   entropy and reward only); ``--choose`` prints its tries and the setting
   :func:`qae_lab.analysis.phenomena.choose_setting`'s rule takes from them
   (:data:`qae_lab.analysis.phenomena.PHENOMENON_CHOSEN`, which the "phenomenon" experiment runs on fresh seeds).
2. ``--work DIR`` runs every experiment of :data:`qae_lab.analysis.phenomena.EXPERIMENTS` (methods x seeds, and K for the
   K sweep) into ``DIR/<experiment>/`` and keeps each under ``data/reference_runs/phenomena/<experiment>/``.

``--jobs 2`` runs two at a time, each on one torch thread (two processes of two threads each on 2 cores run
several times slower than one). A finished run (its ``eval_after.json`` exists; without evaluation, its log's
closing row) is not run again, so a search or an experiment spreads over sittings: run the same command again. An
unfinished one (a sitting ended inside it) is refused by the CLI (a run folder is never overwritten);
``--retry-unfinished`` renames it to ``<name>.unfinished-<n>`` (nothing is deleted) and runs it again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from qae_lab.analysis.compare import load_runs
from qae_lab.analysis.phenomena import (
    EXPERIMENTS,
    PHENOMENON_CHOSEN,
    SEARCH_SEED,
    SEARCHES,
    choose_setting,
    load_search,
    run_names,
    search_row,
    search_rows,
)
from qae_lab.analysis.tables import markdown_table
from qae_lab.storage.folder import REGIME_SPLIT_NAME, atomic_write_text, read_log
from reference_runs import keep_run  # the sibling script: the same small part of each run folder

DEST = Path(__file__).resolve().parents[1] / "data" / "reference_runs" / "phenomena"
_BOOKKEEPING = ["sparse_update=false", "disable_tqdm=true", "save_model=false"]


def finished(out: Path, sets: list[str]) -> bool:
    """Whether the run in ``out`` has finished: its after-training evaluation is written, or, for a run that does
    not evaluate (``evaluate=false``), its log ends with the trainer's closing row (``train_runtime``)."""
    if (out / "eval_after.json").is_file():
        return True
    if "evaluate=false" not in sets or not (out / "log.jsonl").is_file():
        return False
    rows = read_log(out / "log.jsonl")
    return bool(rows) and "train_runtime" in rows[-1]


def _set_aside(out: Path) -> None:
    """Rename an unfinished run folder to ``<name>.unfinished-<n>`` (kept, never deleted): the run can start again."""
    n = 1
    while out.with_name(f"{out.name}.unfinished-{n}").exists():
        n += 1
    out.rename(out.with_name(f"{out.name}.unfinished-{n}"))
    print(f"set aside: {out} -> {out.name}.unfinished-{n}", flush=True)


def _job(
    preset: str, method: str, sets: list[str], out: Path, threads: int | None, retry: bool = False
) -> list[str] | None:
    """The command of one run, or None when it has finished already; an unfinished folder is set aside when
    ``retry`` (else the CLI refuses it: a run folder is never overwritten)."""
    if finished(out, sets):
        return None
    if retry and out.exists():
        _set_aside(out)
    cmd = [sys.executable, "-m", "qae_lab", "train", "--preset", preset, "--method", method, "--output-dir", str(out)]
    for s in [*sets, *_BOOKKEEPING, *([f"torch_threads={threads}"] if threads else [])]:
        cmd += ["--set", s]
    return cmd


def _run_all(cmds: list[list[str]], jobs: int) -> None:
    threads = 1 if jobs > 1 else None
    env = {**os.environ, "OMP_NUM_THREADS": "1"} if threads else None

    def one(cmd: list[str]) -> None:
        print(" ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL if jobs > 1 else None)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, cmds))


def run(work: Path, only: list[str], jobs: int, retry: bool = False) -> None:
    threads = 1 if jobs > 1 else None
    cmds = [
        _job(
            EXPERIMENTS[name]["preset"],
            method,
            [*EXPERIMENTS[name]["sets"], *sets],
            work / name / folder,
            threads,
            retry,
        )
        for name in only
        for folder, method, sets in run_names(name)
    ]
    _run_all([c for c in cmds if c], jobs)


def search_folder(which: str) -> str:
    """The sub-folder of a search's runs: ``search`` (the entropy experiment's, as it always was), else ``search-<which>``."""
    return "search" if which == "entropy" else f"search-{which}"


def search_run(work: Path, jobs: int, which: str = "entropy", retry: bool = False) -> None:
    threads = 1 if jobs > 1 else None
    tries, _ = SEARCHES[which]
    cmds = [  # the search seed first: a try that names its own seed (a second seed of a setting) keeps it
        _job("cpu-sums", method, [f"seed={SEARCH_SEED}", *sets], work / search_folder(which) / name, threads, retry)
        for name, method, sets in tries
    ]
    _run_all([c for c in cmds if c], jobs)


def collect(work: Path, only: list[str]) -> None:
    for name in only:
        for folder, _, _ in run_names(name):
            src, dst = work / name / folder, DEST / name / folder
            if not (src / "eval_after.json").is_file():
                print(f"missing: {src}")
                continue
            summary = keep_run(src, dst, extra=(REGIME_SPLIT_NAME,))
            wall = max((r.get("elapsed_s") or 0) for r in read_log(src / "log.jsonl"))
            print(
                f"{name:<10} {folder:<28} pass@1 {summary['before']['summary']['pass@1']:.3f} -> "
                f"{summary['after']['summary']['pass@1']:.3f}   {wall:6.0f} s"
            )


def choose(which: str = "phenomenon") -> dict:
    """Print the committed phenomenon search, a row per try (:func:`qae_lab.analysis.phenomena.search_rows`: what it
    changed, the mean baseline's entropy peak / start and final / start, reward, clipped share, length, time), and the
    setting its rule chooses."""
    rows = load_search(which, DEST.parent)
    print(markdown_table(search_rows(rows)))
    choice = choose_setting(rows)
    hours = sum(r["train_s"] for r in rows) / 3600
    print(json.dumps(choice, indent=1))
    print(f"{len(rows)} runs, {hours:.2f} h of training (one torch thread each); declared: {PHENOMENON_CHOSEN}")
    return choice


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="folder for the experiments' full run folders")
    p.add_argument("--search-run", type=Path, help="run qae_lab.analysis.phenomena.SEARCH into this folder's search/")
    p.add_argument("--search", type=Path, help="summarise the search runs in this folder into search.json")
    p.add_argument(
        "--search-of",
        choices=sorted(SEARCHES),
        default="entropy",
        help="which search --search-run runs and --search summarises (qae_lab.analysis.phenomena.SEARCHES)",
    )
    p.add_argument("--only", nargs="*", choices=sorted(EXPERIMENTS), default=sorted(EXPERIMENTS))
    p.add_argument("--collect-only", action="store_true")
    p.add_argument("--choose", action="store_true", help="print the phenomenon search and the setting it chooses")
    p.add_argument(
        "--retry-unfinished",
        action="store_true",
        help="set an unfinished run folder aside (<name>.unfinished-<n>, kept) and run it again (a later sitting)",
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (each on one torch thread when > 1)")
    args = p.parse_args()
    if args.choose:
        choose()
        return
    if args.search_run:
        search_run(args.search_run, args.jobs, args.search_of, args.retry_unfinished)
        return
    if args.search:
        rows = [search_row(r) for r in sorted(load_runs(args.search), key=lambda r: r.name)]
        name = SEARCHES[args.search_of][1]
        DEST.mkdir(parents=True, exist_ok=True)
        atomic_write_text(DEST / name, json.dumps(rows, indent=1) + "\n")
        print(f"{len(rows)} runs -> {DEST / name}")
        return
    if args.work is None:
        p.error("--work is required (unless --search-run or --search)")
    if not args.collect_only:
        run(args.work, args.only, args.jobs, args.retry_unfinished)
    collect(args.work, args.only)


if __name__ == "__main__":
    main()
