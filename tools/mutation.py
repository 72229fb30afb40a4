"""Mutation testing of the modules where a silent bug does most harm: mutmut (>= 3.3) on one module or all.

    python -m tools.mutation advantages          # one module (names: MODULES below)
    python -m tools.mutation all                 # every one, in turn (hours on 2 cores)
    python -m tools.mutation --list              # the modules and the tests that judge them

Each module runs in its own scratch copy of the tracked files (``.mutation/<name>/``, ignored by git), where a
``[tool.mutmut]`` table names the module to mutate and the tests that judge it, so the checkout is never touched and
one module's results never mix with another's. mutmut mutates each function and runs the tests that reach it (found in
one traced run); a mutant is killed when a test fails. Printed at the end: a markdown row per module (killed /
judged, the score, the surviving mutants' names), the row docs/testing.md records; ``mutmut show NAME`` inside the
scratch copy prints a survivor's change. Not in CI: too slow.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation"

# module -> (the source file mutated, the tests that judge it)
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "advantages": ("qae_lab/advantages.py", ("tests/test_advantages.py",)),
    "horizon": ("qae_lab/horizon.py", ("tests/test_horizon.py",)),
    "loss": ("qae_lab/loss.py", ("tests/test_loss.py",)),
    "regimes": ("qae_lab/regimes.py", ("tests/test_regimes.py",)),
    "entropy_controls": ("qae_lab/entropy_controls.py", ("tests/test_entropy_controls.py",)),
    "dynamic_sampling": ("qae_lab/train/dynamic_sampling.py", ("tests/train/test_dynamic_sampling.py",)),
    "trainer": (
        "qae_lab/train/trainer.py",
        (
            "tests/train/test_trainer.py",
            "tests/train/test_trainer_regimes.py",
            "tests/train/test_trainer_knobs.py",
            "tests/train/test_trainer_processes.py",
        ),
    ),
    "settings": ("qae_lab/runs/settings.py", ("tests/runs/test_settings.py", "tests/runs/test_settings_forms.py")),
    "storage_folder": (
        "qae_lab/storage/folder.py",
        ("tests/storage/test_folder.py", "tests/storage/test_folder_lock.py", "tests/storage/test_openers.py"),
    ),
    "storage_resume": (
        "qae_lab/storage/resume.py",
        ("tests/storage/test_resume.py", "tests/storage/test_resume_checkpoints.py"),
    ),
    "claims": ("qae_lab/analysis/claims.py", ("tests/analysis/test_claims.py",)),
    "evidence": ("qae_lab/analysis/evidence.py", ("tests/analysis/test_evidence.py",)),
    "exercises": ("qae_lab/lab/exercises.py", ("tests/lab/test_exercises.py",)),
}
# modules where only some functions are mutated (mutmut's mutant-name patterns): the trainer's advantage path
NAMES = {"trainer": ("*QAETrainer*_score__mutmut_*", "*QAETrainer*_generate_round__mutmut_*")}
# tests that read the module's source rather than run it: mutmut's copy holds every mutant's text beside the original
SOURCE_READERS = {
    "storage_folder": ("tests/storage/test_openers.py::test_every_file_call_goes_through_the_opener",),
}
# the status of each mutmut exit code that counts in the score (others: no test reached it, skipped, timed out)
KILLED, SURVIVED = {1, 3}, {0}


def _config(source: str, tests: tuple[str, ...], deselect: tuple[str, ...] = ()) -> str:
    options = ["-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]
    for test in deselect:
        options += ["--deselect", test]
    lines = [
        "[tool.mutmut]",
        'source_paths = ["qae_lab/"]',
        f"only_mutate = [{json.dumps(source)}]",
        'also_copy = ["conftest.py", "tools/", "benchmarks/", "data/", "docs/", "notebooks/", "README.md"]',
        f"pytest_add_cli_args_test_selection = {json.dumps(list(tests))}",
        # one process (mutmut forks per mutant), no doctest collection of the copied package, no cache
        f"pytest_add_cli_args = {json.dumps(options)}",
        "mutate_only_covered_lines = true",
    ]
    return "\n".join(lines) + "\n"


def _scratch(name: str) -> Path:
    """A copy of the tracked files (the working tree's versions) with the module's mutmut table, without mutmut's
    results of an earlier run: after a change mutmut reruns only the changed functions and its record of the module
    holds only those, so a score read from it would count part of the module."""
    work = SCRATCH / name
    shutil.rmtree(work / "mutants", ignore_errors=True)
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for rel in filter(None, files):
        src, dst = ROOT / rel, work / rel
        if src.is_file() and not src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    pyproject = (work / "pyproject.toml").read_text()
    source, tests = MODULES[name]
    (work / "pyproject.toml").write_text(pyproject + "\n" + _config(source, tests, SOURCE_READERS.get(name, ())))
    return work


def score(work: Path, source: str, patterns: tuple[str, ...] = ()) -> dict:
    """Killed, survived and the rest from mutmut's record of ``source`` (``mutants/<source>.meta``), of the mutants
    whose names match ``patterns`` (none: every mutant)."""
    meta = work / "mutants" / (source + ".meta")
    codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    if patterns:
        codes = {k: c for k, c in codes.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    killed = sorted(k for k, c in codes.items() if c in KILLED)
    survived = sorted(k for k, c in codes.items() if c in SURVIVED)
    other = sorted(k for k, c in codes.items() if c not in KILLED | SURVIVED)
    return {"killed": killed, "survived": survived, "other": other}


def run(name: str, jobs: int) -> dict:
    source, _ = MODULES[name]
    work = _scratch(name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *NAMES.get(name, ())]
    subprocess.run(command, cwd=work, env=env, check=False)
    return score(work, source, NAMES.get(name, ()))


def row(name: str, result: dict) -> str:
    k, s = len(result["killed"]), len(result["survived"])
    pct = f"{100 * k / (k + s):.0f}%" if k + s else "-"
    today = datetime.date.today().isoformat()
    return f"| `{MODULES[name][0]}` | {k} / {k + s} | {pct} | {len(result['other'])} | {today} |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("module", nargs="?", help=f"one of {', '.join(MODULES)}, or all")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants tested at once")
    p.add_argument("--list", action="store_true", help="the modules and their tests")
    a = p.parse_args(argv)
    if a.list or not a.module:
        for name, (source, tests) in MODULES.items():
            only = f" (only {', '.join(NAMES[name])})" if name in NAMES else ""
            print(f"{name:<18} {source:<38} {' '.join(tests)}{only}")
        return 0
    names = list(MODULES) if a.module == "all" else [a.module]
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        p.error(f"module must be one of {', '.join(MODULES)} or all, got {unknown[0]!r}")
    results = {name: run(name, a.jobs) for name in names}
    print("\n| module | killed / judged | score | not judged (no test, timeout) | date |")
    print("| --- | --- | --- | --- | --- |")
    for name, result in results.items():
        print(row(name, result))
    for name, result in results.items():
        if result["survived"]:
            print(f"\n{name}: survivors (mutmut show NAME in {SCRATCH / name}):")
            print("\n".join(f"  {m}" for m in result["survived"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
