"""The lab's CPU thread policy (qae_lab.threads) against fixed thread counts, idle and beside busy processes.

Each row is run under the policy and at each fixed count (1 and torch's default, ``$QAE_LAB_TORCH_THREADS``), on an
idle machine and beside 1 and 2 processes that spin on the CPU, started and stopped here, so every figure of one
load meets the same competition:

* ``command line``: ``python -m qae_lab train`` with the settings notebook 04 builds on a CPU (``--preset cpu-demo
  --method qae``, ``max_steps=--steps``, dense updates, no checkpoints, no saved model, 200 held-out problems x 8
  samples before and after);
* ``notebook 04``: its CPU path run headless in full mode with ``--steps`` live steps (``QAE_LAB_LIVE_STEPS``), the
  same settings; its first dashboard point is the first logged step, from the start of Run All;
* ``notebook 08``: full mode (two trainers, 20 steps each).

It prints seconds, each row's policy / fastest fixed count at each load, and notebook 04 / the command line. The
ratios are what to read: the machine's own speed cancels out of them. ``--main-job`` also runs the README's main job
(``python -m qae_lab train --preset cpu-demo``, as it stands) under the policy, idle and beside two busy processes;
``--full``, notebook 04's whole CPU path (400 steps) and the command line with its settings, the same way.

    python benchmarks/bench_threads.py                       # every row, loads 0, 1, 2 (~40 min on 2 cores)
    python benchmarks/bench_threads.py --loads 0 --rows cli  # a quick look
    python benchmarks/bench_threads.py --main-job --write    # the table and the main job, kept in data/
    python benchmarks/bench_threads.py --loads --full --write  # notebook 04's 400 steps against the command line

``--write`` keeps the record in ``data/thread_policy.json``, merged after each load and part (what was measured
replaces its old entries; README's and docs/workshop.md's CPU times are read from it by ``python -m
tools.readme_results``); it refuses to start on a machine already busier than a load of 0.5 per core, since "idle"
would then not be idle.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
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
from nbclient.exceptions import CellTimeoutError

from qae_lab.runs import presets
from qae_lab.storage.folder import atomic_write_text, read_log, step_rows
from qae_lab.threads import THREADS_ENV, TORCH_DEFAULT

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools/ lives at the repository's root
from tools.readme_results import THREAD_JOBS as ROWS, thread_ratios  # noqa: E402

RECORD = ROOT / "data" / "thread_policy.json"
NOTEBOOKS = {"nb04": "04_lora_grpo_qwen25.ipynb", "nb08": "08_write_it_yourself.ipynb"}
POLICY = "policy"
MAX_IDLE_LOAD = 0.5  # per core, before --write starts
# notebook 04's CPU settings (its first cell), so that both paths train and evaluate the same run
NB04_SETS = ["save_strategy=no", "save_model=false", "sparse_update=false", "n_eval=200", "eval_samples=8"]


def _spin() -> None:
    # a session of its own, as another program's: Linux's autogroup scheduler shares the cores between sessions first,
    # so spinners left in this script's session would crowd the command line (a child of it) more than a notebook's
    # kernel (which jupyter_client starts in a session of its own)
    if hasattr(os, "setsid"):
        os.setsid()
    while True:
        pass


def settings() -> list[str]:
    """The columns: the policy, then each fixed count (one thread, and torch's default where it is more)."""
    return [POLICY, *(str(n) for n in sorted({1, TORCH_DEFAULT}))]


def _env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != THREADS_ENV}
    return env if setting == POLICY else {**env, THREADS_ENV: setting}


def _timings(log: Path, t0: float) -> dict:
    """Seconds from ``t0`` to the first logged step, and per step between the first and the last (the log's clocks)."""
    rows = step_rows(read_log(log))
    per_step = (rows[-1]["time"] - rows[0]["time"]) / max(rows[-1]["step"] - rows[0]["step"], 1)
    return {"first_point_s": round(rows[0]["time"] - t0, 1), "per_step_s": round(per_step, 3), "steps": len(rows)}


def command_line(sets: list[str], setting: str, work: Path, limit: float | None = None) -> dict:
    """``python -m qae_lab train --preset cpu-demo --method qae`` with ``sets``, as presets.command_line writes it;
    stopped after ``limit`` seconds (``{"over_s": ...}``: it would have taken longer)."""
    out = work / "cli-run"
    cmd = [sys.executable, *shlex.split(presets.command_line("cpu-demo", sets, "qae"))[1:], "--output-dir", str(out)]
    t0 = time.time()
    try:
        subprocess.run(
            cmd,
            check=True,
            cwd=ROOT,
            env=_env(setting),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        return {"over_s": round(time.time() - t0, 1)}
    return {"wall_s": round(time.time() - t0, 1), **_timings(out / "log.jsonl", t0)}


def notebook(key: str, steps: int, setting: str, work: Path, limit: float | None = None) -> dict:
    """A notebook run headless in full mode from ``work`` (its run folders land there); a cell still running after
    ``limit`` seconds stops it (``{"over_s": ...}``)."""
    env = {**_env(setting), "QAE_LAB_HEADLESS": "1", "QAE_LAB_SMOKE": "0", "QAE_LAB_LIVE_STEPS": str(steps)}
    nb = nbformat.read(ROOT / "notebooks" / NOTEBOOKS[key], as_version=4)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits the environment it is started with
    try:
        t0 = time.time()
        client = NotebookClient(
            nb, timeout=int(limit or 3600), kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        try:
            client.execute()
        except CellTimeoutError:
            return {"over_s": round(time.time() - t0, 1)}
        wall = time.time() - t0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    out = {"wall_s": round(wall, 1)}
    if key == "nb04":
        [log] = sorted(work.glob("runs/live-cpu-demo-*/log.jsonl"))
        out |= _timings(log, t0)
    return out


def measure(row: str, steps: int, setting: str, limit: float | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        if row == "cli":
            return command_line([f"max_steps={steps}", *NB04_SETS], setting, Path(tmp), limit)
        return notebook(row, steps, setting, Path(tmp), limit)


class Load:
    """``n`` processes spinning on the CPU for the life of the block."""

    def __init__(self, n: int):
        self.procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]

    def __enter__(self):
        for p in self.procs:
            p.start()
        time.sleep(2 if self.procs else 0)  # running before the first measurement starts
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join()


def merged(old: dict, new: dict) -> dict:
    r"""The record ``--write`` keeps: ``old`` with what ``new`` measured in place of its entries (a job at a load, the
    main job or the 400-step runs at a load, replace that entry alone). Refused where the two come from different
    machines or step counts.

    >>> old = {"cores": 2, "torch_default": 2, "steps": 24, "rows": {"cli": {"0": "a", "1": "b"}},
    ...        "main_job": {"0": "m"}, "full": {"0": "f", "2": "g"}}
    >>> new = {"cores": 2, "torch_default": 2, "steps": 24, "rows": {"cli": {"0": "A"}, "nb08": {"0": "C"}},
    ...        "full": {"2": "G"}}
    >>> out = merged(old, new)
    >>> out["rows"], out["main_job"], out["full"]
    ({'cli': {'0': 'A', '1': 'b'}, 'nb08': {'0': 'C'}}, {'0': 'm'}, {'0': 'f', '2': 'G'})
    >>> merged(old, {**new, "steps": 30})
    Traceback (most recent call last):
    ...
    SystemExit: data/thread_policy.json holds steps=24, this run measured steps=30: move it aside to start afresh
    """
    for key in ("cores", "torch_default", "steps"):
        if key in old and key in new and old[key] != new[key]:
            raise SystemExit(
                f"data/thread_policy.json holds {key}={old[key]}, this run measured {key}={new[key]}: move it aside "
                f"to start afresh"
            )
    out = old | {k: v for k, v in new.items() if k not in ("rows", "main_job", "full")}
    for key in ("main_job", "full"):  # load -> a run
        if key in new:
            out[key] = {**old.get(key, {}), **new[key]}
    if "rows" in new:
        out["rows"] = dict(old.get("rows", {}))
        for job, by_load in new["rows"].items():
            out["rows"][job] = {**out["rows"].get(job, {}), **by_load}
    return out


def keep(write: bool, record: dict) -> None:
    """Merge what ``record`` measured into the committed record (``--write``), atomically."""
    if write:
        old = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
        atomic_write_text(RECORD, json.dumps(merged(old, record), indent=1) + "\n")


def full_path(record: dict, loads=(0, 2)) -> None:
    """Notebook 04's whole CPU path (400 steps, as a workshop runs it) and the command line with its settings, under the
    policy, idle and beside two busy processes: ``record["full"][load] = {"cli": ..., "nb04": ...}``."""
    record["full"] = {}
    for load in loads:
        with Load(load), tempfile.TemporaryDirectory() as tmp:
            got = {
                "cli": command_line(["max_steps=400", *NB04_SETS], POLICY, Path(tmp)),
                "nb04": notebook("nb04", 400, POLICY, Path(tmp)),
            }
        record["full"][str(load)] = got
        print(f"400 steps, busy beside {load}: {got}", flush=True)


def main_job(record: dict) -> None:
    """The README's main job as it stands, under the policy, idle and beside two busy processes."""
    record["main_job"] = {}
    for load in (0, 2):
        with Load(load), tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "qae_lab", "train", "--preset", "cpu-demo", "--output-dir", str(out)]
            t0 = time.time()
            subprocess.run(cmd, check=True, cwd=ROOT, env=_env(POLICY), stdout=subprocess.DEVNULL)
            got = {"wall_s": round(time.time() - t0, 1), **_timings(out / "log.jsonl", t0)}
        record["main_job"][str(load)] = got
        print(f"README's main job, busy beside {load}: {got}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24, help="training steps of the command line and notebook 04")
    p.add_argument("--loads", type=int, nargs="*", default=[0, 1, 2], help="busy processes beside, per round")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--repeats", type=int, default=1, help="runs of each cell, interleaved; the fastest is kept")
    p.add_argument("--cap", type=float, help="stop a fixed count's run after CAP times the policy's time")
    p.add_argument("--main-job", action="store_true", help="also the README's main job, idle and beside two")
    p.add_argument("--full", action="store_true", help="also notebook 04's 400 steps against the command line's")
    p.add_argument("--full-loads", type=int, nargs="+", default=[0, 2], help="the loads of --full")
    p.add_argument("--write", action="store_true", help=f"keep the record in {RECORD.relative_to(ROOT)}")
    a = p.parse_args(argv)
    load_now = os.getloadavg()[0] / (os.cpu_count() or 1)
    if a.write and load_now > MAX_IDLE_LOAD:
        sys.exit(f"the load is {load_now:.2f} per core, above {MAX_IDLE_LOAD}: not idle; nothing measured")
    record = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(), "torch_default": TORCH_DEFAULT}
    t_start = time.time()
    if a.loads:
        record |= {"steps": a.steps, "repeats": a.repeats, "rows": {}}
    for load in a.loads:
        with Load(load):
            for row in a.rows:
                for _ in range(a.repeats):  # interleaved: a change of speed falls on every column
                    for setting in settings():
                        cols = record["rows"].setdefault(row, {}).setdefault(str(load), {})
                        # a fixed count is stopped once it has taken --cap times the policy's time
                        limit = a.cap * cols[POLICY]["wall_s"] if a.cap and POLICY in cols else None
                        got = measure(row, a.steps, setting, limit)
                        if setting not in cols or got.get("wall_s", math.inf) < cols[setting].get("wall_s", math.inf):
                            cols[setting] = got  # the fastest of the repeats: the least disturbed
                        print(f"{ROWS[row]:<13} busy beside {load}  {setting:<7} {got}", flush=True)
        keep(a.write, record)  # after each load and part: an interrupted measurement keeps what it measured
    if a.main_job:
        main_job(record)
        keep(a.write, record)
    if a.full:
        full_path(record, a.full_loads)
        keep(a.write, record)
    print(f"\n{os.cpu_count()} cores, {round((time.time() - t_start) / 60, 1)} minutes; seconds of wall time")
    if "rows" in record:
        table = thread_ratios(record)
        columns = list(dict.fromkeys(k for line in table for k in line))
        print(" | ".join(columns))
        for line in table:
            print(" | ".join(str(line.get(c, "")) for c in columns))
    if "main_job" in record:
        m = record["main_job"]
        print(
            f"README's main job: idle {m['0']['wall_s']} s, beside two busy {m['2']['wall_s']} s: "
            f"{m['2']['wall_s'] / m['0']['wall_s']:.2f}x"
        )
    for load, got in record.get("full", {}).items():
        print(
            f"400 steps beside {load}: notebook 04 / command line {got['nb04']['wall_s'] / got['cli']['wall_s']:.2f}x"
        )
    if a.write:
        print(f"written: {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
