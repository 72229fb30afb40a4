"""Notebook 04's CPU path against the command line with the same settings, measured side by side on one machine.

Runs notebook 04 headless in full mode (nbclient, as ``benchmarks/bench_notebooks.py`` does: ``QAE_LAB_HEADLESS=1``,
so its cell waits for the live run and the evaluation after it), then ``python -m qae_lab train`` with the settings
the notebook builds on a CPU (``--preset cpu-demo --method qae`` with ``max_steps``, no checkpoints, no saved model,
dense updates, 200 held-out problems x 8 samples), each in a folder of its own, and prints per path: the wall time,
the seconds from the start to the first logged step (for the notebook: its first dashboard point, from Run All),
and the seconds per training step (from the run logs' own clocks), with the notebook's ratios to the command line.

    python benchmarks/bench_live_cpu.py                 # 400 steps, as a workshop runs it
    python benchmarks/bench_live_cpu.py --steps 60      # quicker
    python benchmarks/bench_live_cpu.py --load 3        # with 3 busy processes beside both (a laptop with a browser)

``--load N`` starts N processes that spin on the CPU for the whole measurement, so that both paths meet the same
competition. The ratios are what to read: the machine's own speed cancels out of them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from qae_lab.runs import presets
from qae_lab.storage.folder import read_log, step_rows

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_lora_grpo_qwen25.ipynb"


def _spin() -> None:
    while True:
        pass


def _rows(log: Path) -> list[dict]:
    return step_rows(read_log(log))


def _per_step(rows: list[dict]) -> float:
    """Seconds per training step between the first and the last logged step (the runs' own clocks)."""
    return (rows[-1]["time"] - rows[0]["time"]) / max(rows[-1]["step"] - rows[0]["step"], 1)


def notebook(steps: int, work: Path) -> dict:
    """Notebook 04 run headless in full mode with ``steps`` live steps, from a copy in ``work``."""
    env = {"QAE_LAB_HEADLESS": "1", "QAE_LAB_SMOKE": "0", "QAE_LAB_LIVE_STEPS": str(steps)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them
    nb = nbformat.read(NOTEBOOK, as_version=4)
    t0 = time.time()
    try:
        NotebookClient(nb, timeout=3600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    wall = time.time() - t0
    [log] = sorted((work / "runs").glob("live-cpu-demo-*/log.jsonl"))
    rows = _rows(log)
    return {"wall_s": wall, "first_point_s": rows[0]["time"] - t0, "per_step_s": _per_step(rows), "steps": len(rows)}


def command_line(steps: int, work: Path) -> dict:
    """``python -m qae_lab train`` with the settings notebook 04 builds on a CPU."""
    out = work / "cli-run"
    sets = [
        f"max_steps={steps}",
        "save_strategy=no",
        "save_model=false",
        "sparse_update=false",
        "n_eval=200",
        "eval_samples=8",
    ]
    # presets.command_line's words, run by this Python
    cmd = [sys.executable, *shlex.split(presets.command_line("cpu-demo", sets, "qae"))[1:], "--output-dir", str(out)]
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.time() - t0
    rows = _rows(out / "log.jsonl")
    return {"wall_s": wall, "first_point_s": rows[0]["time"] - t0, "per_step_s": _per_step(rows), "steps": len(rows)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="training steps of both runs (notebook 04's: 400)")
    p.add_argument("--load", type=int, default=0, help="busy processes beside both runs")
    a = p.parse_args(argv)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.load)]
    for s in spinners:
        s.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            results = {"notebook 04": notebook(a.steps, work), "command line": command_line(a.steps, work)}
    finally:
        for s in spinners:
            s.terminate()
    nb, cli = results["notebook 04"], results["command line"]
    print(f"{a.steps} steps, {a.load} busy processes beside, {os.cpu_count()} cores")
    print(f"{'path':<14} {'wall (s)':>9} {'first point (s)':>16} {'s / step':>9}")
    for name, r in results.items():
        print(f"{name:<14} {r['wall_s']:9.1f} {r['first_point_s']:16.1f} {r['per_step_s']:9.3f}")
    print(
        f"notebook / command line: wall {nb['wall_s'] / cli['wall_s']:.2f}x, "
        f"per step {nb['per_step_s'] / cli['per_step_s']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
