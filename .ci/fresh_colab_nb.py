"""What .ci/fresh-colab runs in its fresh environment, one notebook at a time, in a kernel of that environment
whose working directory is the notebook's own folder (a folder outside any checkout, as Colab's /content):

    python .ci/fresh_colab_nb.py first-cell NOTEBOOK ROUTE
        the notebook's own first code cell, as committed, alone in a fresh kernel; then qae_lab must be
        importable, installed by ROUTE ("git+file" or "wheel": what pip recorded in its direct_url.json).
    python .ci/fresh_colab_nb.py run NOTEBOOK
        every cell top to bottom (smoke mode and headless: the caller's environment), every figure recorded
        and its probe run as tests/testkit/nbexec.py does, then tests/testkit/notebook_specs.py's checks of that execution.
    python .ci/fresh_colab_nb.py junit-times JUNIT_XML
        "NN SECONDS" for each notebook run of tests/notebooks/test_notebook_runs.py in a pytest JUnit report.

Run it with the environment's python from anywhere: its own folder (.ci/), not the working directory, goes
on sys.path, so ``import qae_lab`` finds the installed package and never a checkout's source.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TESTS = Path(__file__).resolve().parents[1] / "tests"
TIMEOUT = 900  # s per cell, as tests/testkit/nbexec.py: a hang guard

# how pip installed qae-lab, from the direct_url.json it wrote (PEP 610); "" where qae-lab is not installed
ROUTE = """\
import importlib.metadata, json
try:
    dist = importlib.metadata.distribution("qae-lab")
except importlib.metadata.PackageNotFoundError:
    print("")
else:
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if "vcs_info" in url:
        print(url["vcs_info"]["vcs"] + "+" + url["url"].split(":", 1)[0])
    elif "archive_info" in url:
        print("wheel" if url["url"].endswith(".whl") else "archive")
    elif "dir_info" in url:
        print("editable" if url["dir_info"].get("editable") else "path")
    else:
        print("index")
"""


def route() -> str:
    """How qae-lab is installed in this environment (asked in a new process: nothing cached)."""
    return subprocess.run(
        [sys.executable, "-c", ROUTE], check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()
    ).stdout.strip()


def client(nb: nbformat.NotebookNode, folder: Path) -> NotebookClient:
    return NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(folder)}})


def first_cell(path: Path, expect: str) -> None:
    before = route()
    assert before == "", f"qae-lab is installed already ({before}): the first cell would have nothing to do"
    nb = nbformat.read(path, as_version=4)
    nb.cells = [next(c for c in nb.cells if c.cell_type == "code")]
    try:
        client(nb, path.parent).execute()
    finally:
        for out in nb.cells[0].outputs:
            text = out.get("text") or "\n".join(out.get("traceback", [])) or out.get("data", {}).get("text/plain", "")
            if text.strip():
                print(f"{path.name} first cell [{out.get('name', out.output_type)}]: {text.rstrip()}")
    got = route()
    assert got == expect, f"{path.name}: its first cell installed qae-lab by {got or 'nothing'!r}, not {expect!r}"


def run(path: Path) -> None:
    sys.path.insert(0, str(TESTS))
    # tools/ (nbexec reads the install cells' extras from tools.install_cell): the checkout goes last on the path,
    # after site-packages, so that qae_lab stays the installed package
    sys.path.append(str(TESTS.parent))
    import qae_lab

    if Path(qae_lab.__file__).resolve().is_relative_to(TESTS.parent / "qae_lab"):
        raise SystemExit(f"fresh_colab_nb.py: qae_lab came from the checkout ({qae_lab.__file__}), not the install")
    from testkit.nbexec import execute_at
    from testkit.notebook_specs import NOTEBOOKS, check_run

    with tempfile.TemporaryDirectory() as tmp:  # a failing cell raises CellExecutionError (source and traceback)
        executed = execute_at(path, Path(tmp) / "figures.json", NOTEBOOKS[path.name].probe)
    check_run(path.name, executed)
    print(f"{path.name}: every cell ran; {len(executed.figures)} figures checked against its spec")


def junit_times(report: Path) -> None:
    for case in ET.parse(report).getroot().iter("testcase"):
        found = re.fullmatch(r"test_notebook_runs_and_shows_what_it_says\[(\d\d)\]", case.get("name", ""))
        if found:
            print(found[1], round(float(case.get("time", 0))))


if __name__ == "__main__":
    command, target, *rest = sys.argv[1:]
    {
        "first-cell": lambda: first_cell(Path(target).resolve(), *rest),
        "run": lambda: run(Path(target).resolve()),
        "junit-times": lambda: junit_times(Path(target)),
    }[command]()
