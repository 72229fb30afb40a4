r"""Every notebook's first two cells, written from one place: the Colab badge and the install cell.

``python -m tools.install_cell`` rewrites them in every ``notebooks/[0-9][0-9]_*.ipynb`` from the
repository's address (``[project.urls] Repository`` in pyproject.toml, :data:`qae_lab.lab.notebook.REPOSITORY_URL`)
and the extras each notebook needs (:data:`EXTRAS`); ``--check`` only lists the notebooks that disagree
(``tests/tools/test_install_cell.py`` fails on any). Nothing else in a notebook is touched.

The install cell (:func:`install_cell`) runs on a bare Python, before anything is installed: standard library
only, no function definitions (``tests/notebooks/test_notebook_cells.py``). It does nothing where every module the
notebook needs imports; otherwise it pip-installs ``qae-lab`` with the notebook's extras from the first of

1. ``$QAE_LAB_INSTALL`` (:data:`INSTALL_ENV`): any pip target without extras: a folder, a wheel file, or a URL
   (``git+file:///path/to/clone``). The extras go after a path (``/path[train]``, ``x.whl[train]``) and on the
   package's name before a URL (``qae-lab[train] @ git+file://...``);
2. the newest ``qae_lab-*.whl`` in the working directory (beside the notebook), by version;
3. ``git+<REPOSITORY_URL>``.

No notebook installs the ``lab`` extra: JupyterLab is what runs the notebook, never what it imports.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qae_lab.lab.notebook import REPOSITORY_URL, colab_url

__all__ = [
    "INSTALL_ENV",
    "EXTRAS",
    "EXTRA_MODULES",
    "MARKER",
    "notebook_extras",
    "install_cell",
    "badge",
    "with_first_cells",
    "sync",
    "main",
]

INSTALL_ENV = "QAE_LAB_INSTALL"
# extras a notebook needs beyond the core package, by its number, and why; a notebook not listed needs none
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "00": (("train",), "it samples from the embedded model: transformers >= 5 loads its tokenizer"),
    "03": (("train",), "it samples from the sums model: transformers >= 5 loads its tokenizer"),
    "04": (("train",), "it trains with TRL's GRPOTrainer, PEFT's LoRA and transformers"),
    "08": (("train",), "it trains with TRL's GRPOTrainer and qae_lab's QAETrainer"),
}
# the top-level modules each extra provides (pyproject's [project.optional-dependencies], by import name)
EXTRA_MODULES = {"train": ("transformers", "trl", "peft", "accelerate", "datasets")}
MARKER = "# Install qae_lab"  # how an install cell starts: the sync finds it by this
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"


def notebook_extras(notebook: str) -> tuple[str, ...]:
    r"""The extras notebook ``notebook`` (a file name, ``03_...ipynb``) installs: :data:`EXTRAS` by its number.

    >>> notebook_extras("03_token_entropy_horizon_weights.ipynb"), notebook_extras("02_softmax_entropy_proofs.ipynb")
    (('train',), ())
    """
    return EXTRAS.get(Path(notebook).name[:2], ((), ""))[0]


def install_cell(extras: tuple[str, ...] = (), url: str = REPOSITORY_URL, why: str = "") -> str:
    r"""The install cell's source: installs ``qae-lab[extras]`` where a module it needs is missing.

    Args:
        extras: names of pyproject's extras, each a key of :data:`EXTRA_MODULES`.
        url: the repository's address, installed with ``git+`` where neither ``$QAE_LAB_INSTALL`` nor a wheel
            says otherwise.
        why: why the notebook needs the extras (a comment in the cell).

    >>> cell = install_cell(("train",), "https://github.com/o/r", why="it trains")
    >>> print(cell.splitlines()[0])
    # Install qae_lab[train] where a module this notebook needs is missing (Colab, a fresh kernel);
    >>> '"git+https://github.com/o/r"' in cell, max(map(len, cell.splitlines())) <= 100
    (True, True)
    >>> install_cell(("lab",))
    Traceback (most recent call last):
    ...
    ValueError: extras must be among ['train'], got ('lab',)
    """
    if not set(extras) <= set(EXTRA_MODULES):
        raise ValueError(f"extras must be among {sorted(EXTRA_MODULES)}, got {tuple(extras)!r}")
    tag = f"[{','.join(extras)}]" if extras else ""
    needed = ["qae_lab", *(m for extra in extras for m in EXTRA_MODULES[extra])]
    why = why or ("" if extras else "the core package is all this notebook imports")
    extras_line = f"EXTRAS = {json.dumps(tag)}" + (f"  # {why}" if why else "")
    return "\n".join(
        [
            f"{MARKER}{tag} where a module this notebook needs is missing (Colab, a fresh kernel);",
            "# a no-op where all import. From $QAE_LAB_INSTALL (a folder, a wheel or a pip URL), else the",
            "# newest qae_lab-*.whl beside the notebook, else GitHub. `python -m tools.install_cell` writes it.",
            "import glob, importlib.util, os, re, subprocess, sys",
            f"NEEDED = {json.dumps(needed)}",
            extras_line,
            "if any(importlib.util.find_spec(m) is None for m in NEEDED):",
            '    wheels = sorted((tuple(map(int, re.findall(r"\\d+", w.split("-")[1]))), w)',
            '                    for w in glob.glob("qae_lab-*.whl"))  # (version, file), newest last',
            f'    source = (os.environ.get({json.dumps(INSTALL_ENV)}) or (wheels[-1][1] if wheels else "")',
            f'              or "git+{url}")',
            "    # a URL takes the extras on the package's name, a folder or a wheel file after its path",
            '    target = f"qae-lab{EXTRAS} @ {source}" if "://" in source else source + EXTRAS',
            '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", target], check=True)',
            "    importlib.invalidate_caches()",
            '    print(f"installed qae_lab{EXTRAS} from {source}")',
        ]
    )


def badge(notebook: str) -> str:
    r"""The Colab badge line that opens ``notebooks/<notebook>`` (:func:`qae_lab.lab.notebook.colab_url`).

    >>> badge("01_a.ipynb")[:40]
    '[![Open In Colab](https://colab.research'
    """
    return f"[![Open In Colab]({_BADGE_SVG})]({colab_url(Path(notebook).name)})"


def _lines(text: str) -> list[str]:
    """A cell's source as the .ipynb file stores it: lines, each but the last ending in a newline."""
    return text.splitlines(keepends=True)


def with_first_cells(nb: dict, notebook: str) -> dict:
    r"""``nb`` (an .ipynb file's JSON) with its badge and install cell as :func:`badge` and
    :func:`install_cell` write them; other cells as they were. A first markdown cell gets the badge as its first
    line (replacing an old badge); a missing badge or install cell is inserted as cell 0 or 1.

    >>> nb = {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# 09 · x"]}]}
    >>> cells = with_first_cells(nb, "09_x.ipynb")["cells"]
    >>> [c["cell_type"] for c in cells], cells[0]["source"][0].startswith("[![Open In Colab]")
    (['markdown', 'code'], True)
    >>> with_first_cells(with_first_cells(nb, "09_x.ipynb"), "09_x.ipynb") == with_first_cells(nb, "09_x.ipynb")
    True
    """
    cells = [dict(c) for c in nb.get("cells", [])]
    if not cells or cells[0]["cell_type"] != "markdown":
        cells.insert(0, {"cell_type": "markdown", "id": "colab-badge", "metadata": {}, "source": []})
    first, _, rest = "".join(cells[0]["source"]).partition("\n")
    body = rest.lstrip("\n") if "colab-badge.svg" in first else "".join(cells[0]["source"])
    cells[0]["source"] = _lines(badge(notebook) + ("\n\n" + body if body else ""))
    extras, why = EXTRAS.get(Path(notebook).name[:2], ((), ""))
    source = _lines(install_cell(extras, why=why))
    if len(cells) > 1 and cells[1]["cell_type"] == "code" and "".join(cells[1]["source"]).startswith(MARKER):
        cells[1]["source"] = source
    else:
        cells.insert(
            1,
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "install-qae-lab",
                "metadata": {},
                "outputs": [],
                "source": source,
            },
        )
    return {**nb, "cells": cells}


def _dump(nb: dict) -> str:
    """An .ipynb file's text as Jupyter writes it: one-space indent, UTF-8 kept, a final newline."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def sync(notebook_dir: str | Path, *, write: bool = True) -> list[Path]:
    r"""Rewrite the badge and install cell of every ``[0-9][0-9]_*.ipynb`` in ``notebook_dir`` that disagrees
    with :func:`with_first_cells`; returns those notebooks. ``write=False`` only lists them.

    Each file is read right before it is written, and written whole, so that a concurrent edit of another
    cell is kept unless it lands in between.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "09_x.ipynb").write_text('{"cells": [], "metadata": {}}')
    ...     [p.name for p in sync(d, write=False)], [p.name for p in sync(d)], sync(d)
    (['09_x.ipynb'], ['09_x.ipynb'], [])
    """
    folder = Path(notebook_dir)
    if not folder.is_dir():
        raise ValueError(f"notebook_dir must be a folder of notebooks, got {str(folder)!r}")
    changed = []
    for path in sorted(folder.glob(NOTEBOOK_GLOB)):
        text = path.read_text(encoding="utf-8")
        new = _dump(with_first_cells(json.loads(text), path.name))
        if new != text:
            changed.append(path)
            if write:
                path.write_text(new, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    r"""``python -m tools.install_cell [--check] [--notebooks DIR]``; exit status 1 when ``--check`` finds
    notebooks to rewrite.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     main(["--check", "--notebooks", d])
    all notebooks in ... agree
    0
    """
    p = argparse.ArgumentParser(prog="python -m tools.install_cell", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="only list the notebooks whose first cells disagree")
    p.add_argument(
        "--notebooks",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "notebooks",
        help="the folder of notebooks (default: the checkout's notebooks/)",
    )
    args = p.parse_args(argv)
    changed = sync(args.notebooks, write=not args.check)
    verb = "out of date" if args.check else "rewritten"
    print("\n".join(f"{verb}: {path}" for path in changed) or f"all notebooks in {args.notebooks} agree")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
