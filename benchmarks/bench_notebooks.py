"""Wall time of each notebook, executed headless in smoke mode (CI) and in full mode (workshop).

Both modes of one notebook run back to back in fresh kernels, so the printed full/smoke
ratio is measured side by side. The CI budget is 60 s per notebook in smoke mode on
2 cores. ``QAE_LAB_HEADLESS=1`` is set, as in CI, so notebook 04 waits for its background
training run (400 steps and two evaluations in full mode on a CPU). Usage:

    python benchmarks/bench_notebooks.py [notebooks/01_*.ipynb ...] [--smoke-only] [--write]

``--write`` keeps every notebook's two times in ``data/notebook_times.json`` (the notebooks measured now replace
their old entries; the others are kept), which docs/workshop.md's plans read
(``tools.readme_results.notebook_minutes``; ``python -m tools.readme_results`` rewrites the plans).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from qae_lab.storage.folder import atomic_write_text

TIMES = Path(__file__).resolve().parents[1] / "data" / "notebook_times.json"

BUDGET_S = 60.0


def run(path: Path, smoke: bool) -> float:
    os.environ["QAE_LAB_HEADLESS"] = "1"  # nobody at the notebook: background runs are waited for
    nb = nbformat.read(path, as_version=4)
    old = os.environ.get("QAE_LAB_SMOKE")
    os.environ["QAE_LAB_SMOKE"] = "1" if smoke else "0"  # the kernel inherits it
    try:
        t0 = time.perf_counter()
        NotebookClient(
            nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
        return time.perf_counter() - t0
    finally:
        if old is None:
            os.environ.pop("QAE_LAB_SMOKE")
        else:
            os.environ["QAE_LAB_SMOKE"] = old


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--smoke-only", action="store_true")
    p.add_argument("--write", action="store_true", help=f"keep the times in {TIMES.name} (needs full mode)")
    a = p.parse_args()
    if a.write and a.smoke_only:
        p.error("--write keeps full-mode times: leave out --smoke-only")
    measured = {}
    paths = a.notebooks or sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
    print(f"{'notebook':<48} {'smoke (s)':>9} {'of budget':>9} {'full (s)':>9} {'full/smoke':>10}")
    for path in paths:
        smoke = run(path, smoke=True)
        full = None if a.smoke_only else run(path, smoke=False)
        tail = f"{full:9.1f} {full / smoke:9.1f}x" if full is not None else f"{'-':>9} {'-':>10}"
        print(f"{path.name:<48} {smoke:9.1f} {smoke / BUDGET_S:8.0%} {tail}", flush=True)
        measured[path.name] = {"smoke_s": round(smoke, 1), "full_s": None if full is None else round(full, 1)}
    if a.write:
        old = json.loads(TIMES.read_text()) if TIMES.is_file() else {"notebooks": {}}
        # the machine's load while this ran: other work on the same cores makes every time longer
        record = {
            "date": datetime.date.today().isoformat(),
            "cores": os.cpu_count(),
            "load_average": [round(x, 1) for x in os.getloadavg()],
            "notebooks": {**old["notebooks"], **measured},
        }
        atomic_write_text(TIMES, json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"written: {TIMES}")


if __name__ == "__main__":
    main()
