"""Each notebook measured for a workshop: wall time in full mode (and smoke mode, CI's), and what it gives to read.

Both modes of one notebook run back to back in fresh kernels, headless (``QAE_LAB_HEADLESS=1``, as in CI: notebook
04 waits for its background training run, 400 steps and two evaluations in full mode on a CPU). Of the full-mode run
it counts what a participant reads: the words of the markdown cells, of the code cells, and of what the cells print
or display as text (stream output, text/plain and text/markdown results; a figure is counted once, as one), and
the live controls (``widgets.interactive`` and ``lab.start``: each a minute of play in the plans). Usage:

    python benchmarks/bench_notebooks.py [notebooks/01_*.ipynb ...] [--smoke-only] [--write]

``--write`` keeps every notebook's record in ``data/notebook_times.json`` (the notebooks measured now replace their
old entries), which docs/workshop.md's plans and each notebook's opening lines read
(``tools.workshop_minutes.notebook_minutes``; ``python -m tools.readme_results`` rewrites them). Times measured on a
busy machine are not times: ``--write`` refuses while the load average over the last minute exceeds
:data:`MAX_LOAD_PER_CORE` per core, before it starts and after each notebook, and records the load it ran under.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from qae_lab.storage.folder import atomic_write_text

TIMES = Path(__file__).resolve().parents[1] / "data" / "notebook_times.json"
BUDGET_S = 60.0  # CI's budget per notebook in smoke mode on 2 cores
MAX_LOAD_PER_CORE = 1.5  # above this the machine runs other work: the times would not be the notebooks'
_CONTROLS = re.compile(r"\b(?:widgets\.interactive|interactive|lab\.start)\(")


def load_per_core() -> float:
    """The load average over the last minute, per core."""
    return os.getloadavg()[0] / (os.cpu_count() or 1)


def _words(text: str) -> int:
    """Words: the whitespace-separated tokens with a letter or a digit (a table's bars and rules are not read)."""
    return sum(1 for token in text.split() if any(ch.isalnum() for ch in token))


def read_counts(nb) -> dict[str, int]:
    r"""What an executed notebook gives a participant to read: words of its markdown, its code and its text output
    (stream, text/plain and text/markdown; a figure's output is not text), its figures, and its live controls.

    >>> cell = nbformat.v4.new_code_cell("x = widgets.interactive(f, {})", outputs=[
    ...     nbformat.v4.new_output("stream", text="hello world"),
    ...     nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": {}})])
    >>> read_counts(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("one two three"), cell]))
    {'markdown_words': 3, 'code_words': 3, 'output_words': 2, 'figures': 1, 'controls': 1}
    """
    out = {"markdown_words": 0, "code_words": 0, "output_words": 0, "figures": 0, "controls": 0}
    for c in nb.cells:
        if c.cell_type == "markdown":
            out["markdown_words"] += _words(c.source)
        elif c.cell_type == "code":
            out["code_words"] += _words(c.source)
            out["controls"] += len(_CONTROLS.findall(c.source))
            for o in c.get("outputs", []):
                if o.output_type == "stream":
                    out["output_words"] += _words(o.get("text", ""))
                    continue
                data = o.get("data", {})
                if "application/vnd.plotly.v1+json" in data or "image/png" in data:
                    out["figures"] += 1
                elif "text/markdown" in data:
                    out["output_words"] += _words(data["text/markdown"])
                elif "text/plain" in data and "application/vnd.jupyter.widget-view+json" not in data:
                    out["output_words"] += _words(data["text/plain"])
    return out


def run(path: Path, smoke: bool) -> tuple[float, dict]:
    """(wall seconds, the executed notebook) of one headless run."""
    os.environ["QAE_LAB_HEADLESS"] = "1"  # nobody at the notebook: background runs are waited for
    nb = nbformat.read(path, as_version=4)
    old = os.environ.get("QAE_LAB_SMOKE")
    os.environ["QAE_LAB_SMOKE"] = "1" if smoke else "0"  # the kernel inherits it
    try:
        t0 = time.perf_counter()
        NotebookClient(
            nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
        return time.perf_counter() - t0, nb
    finally:
        if old is None:
            os.environ.pop("QAE_LAB_SMOKE")
        else:
            os.environ["QAE_LAB_SMOKE"] = old


def _idle_or_exit(when: str) -> float:
    load = load_per_core()
    if load > MAX_LOAD_PER_CORE:
        sys.exit(
            f"{when}: the load average is {load:.2f} per core, above {MAX_LOAD_PER_CORE}: other work runs on this "
            f"machine and would lengthen every time; nothing written. Run it on an otherwise idle machine."
        )
    return load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--smoke-only", action="store_true")
    p.add_argument("--write", action="store_true", help=f"keep the records in {TIMES.name} (needs full mode)")
    a = p.parse_args()
    if a.write and a.smoke_only:
        p.error("--write keeps full-mode times: leave out --smoke-only")
    loads = [_idle_or_exit("before the first notebook")] if a.write else []
    measured = {}
    paths = a.notebooks or sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
    print(f"{'notebook':<48} {'smoke (s)':>9} {'of budget':>9} {'full (s)':>9} {'words read':>10}")
    for path in paths:
        smoke, _ = run(path, smoke=True)
        full, executed = (None, None) if a.smoke_only else run(path, smoke=False)
        counts = read_counts(executed) if executed is not None else {}
        words = sum(v for k, v in counts.items() if k.endswith("_words"))
        tail = f"{full:9.1f} {words:10d}" if full is not None else f"{'-':>9} {'-':>10}"
        print(f"{path.name:<48} {smoke:9.1f} {smoke / BUDGET_S:8.0%} {tail}", flush=True)
        measured[path.name] = {"smoke_s": round(smoke, 1), "full_s": None if full is None else round(full, 1), **counts}
        if a.write:
            loads.append(_idle_or_exit(f"after {path.name}"))
    if a.write:
        old = json.loads(TIMES.read_text()) if TIMES.is_file() else {"notebooks": {}}
        record = {
            "date": datetime.date.today().isoformat(),
            "cores": os.cpu_count(),
            "max_load_per_core": round(max(loads), 2),  # the busiest the machine was, checked between notebooks
            "notebooks": {**old["notebooks"], **measured},
        }
        atomic_write_text(TIMES, json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"written: {TIMES} (load at most {max(loads):.2f} per core)")


if __name__ == "__main__":
    main()
