r"""The committed data the notebooks read, found wherever qae_lab runs: a checkout, an editable or a plain install.

The repository keeps it under ``data/``: ``data/reference_runs/`` (the runs notebooks 05 and 06 compare),
``data/seqpolicy/`` (the runs notebooks 07 and 09 state) and ``data/bandit/`` (notebook 02's measurements of QAE's
Prop. 4.2 on the softmax bandit, :func:`load_prop42`). A wheel or ``pip install git+...`` carries a copy inside
the package, as ``qae_lab/<folder>`` (:data:`DATA_FOLDERS`; pyproject.toml's package-dir mapping, the same way
as the embedded models). :func:`data_dir` looks, in this order, for

1. ``data/<name>`` in the working directory or a folder above it (the checkout you work in: a notebook runs in
   ``notebooks/``, one floor down), so that runs you add to your checkout are the ones read;
2. ``data/<name>`` beside the imported package (the checkout of an editable install, from anywhere);
3. the package's own copy (a plain install, e.g. in Colab).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["DATA_FOLDERS", "find_up", "data_dir", "load_json", "load_prop42"]

# data/<name> -> the folder it installs as inside the package (pyproject's [tool.setuptools.package-dir])
DATA_FOLDERS = {"reference_runs": "reference_runs", "seqpolicy": "seqpolicy_data", "bandit": "bandit_data"}
_PACKAGE = Path(__file__).resolve().parents[1]


def find_up(name: str, start: str | os.PathLike | None = None) -> Path | None:
    r"""The first folder ``<dir>/<name>`` for ``dir`` = ``start`` (default: the cwd) and each parent; None if none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as top:
    ...     os.makedirs(os.path.join(top, "data", "a", "b"))
    ...     print(find_up("data", os.path.join(top, "data", "a", "b")).relative_to(Path(top).resolve()))
    data
    """
    here = Path(start if start is not None else os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / name).is_dir():
            return d / name
    return None


def data_dir(name: str, start: str | os.PathLike | None = None, *, package: str | os.PathLike | None = None) -> Path:
    r"""The folder of committed data ``name`` (a key of :data:`DATA_FOLDERS`), in the order of the module's docstring.

    ``package``: the ``qae_lab`` folder whose checkout and installed copy are looked at (default: this one); none
    holding it raises ``FileNotFoundError`` naming every place looked at.

    >>> data_dir("reference_runs").name in ("reference_runs",)
    True
    >>> data_dir("runs")
    Traceback (most recent call last):
    ...
    ValueError: name must be one of ['bandit', 'reference_runs', 'seqpolicy'], got 'runs'
    """
    if name not in DATA_FOLDERS:
        raise ValueError(f"name must be one of {sorted(DATA_FOLDERS)}, got {name!r}")
    package = Path(package) if package is not None else _PACKAGE
    found = find_up(os.path.join("data", name), start)
    candidates = [found] if found else []
    candidates += [package.parent / "data" / name, package / DATA_FOLDERS[name]]
    for path in candidates:
        if path.is_dir():
            return path
    where = Path(start if start is not None else os.getcwd()).resolve()
    raise FileNotFoundError(
        f"no data/{name} above {where}, nor in {', '.join(map(str, candidates))}: "
        f"reinstall qae_lab (its package carries data/{name}) or open a checkout"
    )


def load_prop42(path: str | os.PathLike | None = None) -> dict:
    r"""QAE's Prop. 4.2 on random softmax bandits, one step three ways (``benchmarks/bandit_prop42.py``): ``data/bandit/
    prop42.json`` as a dict, found by :func:`data_dir` (``path`` None) or read from ``path``.

    ``hard`` and ``easy`` each hold ``p`` and, for ``"mean"`` and ``"quantile"``, the entropy change of one step
    under the identity's model (``identity``), of the exact expected gradient (``expected_step``) and of sampled
    groups in expectation (``sampled``), and ``scale`` = E[sampled step] / exact step: one number per bandit, in one
    order in every list. ``details`` and ``training``: docs/notebook-notes.md, section 02.

    >>> data = load_prop42()
    >>> sorted(data["hard"]), sorted(data["hard"]["sampled"])
    (['expected_step', 'identity', 'p', 'sampled', 'scale'], ['mean', 'quantile'])
    """
    return load_json(data_dir("bandit") / "prop42.json" if path is None else path, "bandit_prop42.py --write")


def load_json(path: str | os.PathLike, script: str) -> dict:
    """A committed JSON file, or ``ValueError`` naming ``path`` and the benchmark ``script`` that makes it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"path must be a {path.name} file; none found (make it with python benchmarks/{script}), got {path}"
        )
    return json.loads(path.read_text(encoding="utf-8"))
