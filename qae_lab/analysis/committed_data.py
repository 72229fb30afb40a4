r"""The committed data the notebooks read, found wherever qae_lab runs: a checkout, an editable or a plain install.

The repository keeps it under ``data/``: ``data/reference_runs/`` (the runs notebooks 05 and 06 compare) and
``data/seqpolicy/`` (the runs notebooks 07 and 09 state). A wheel or ``pip install git+...`` carries a copy inside
the package, as ``qae_lab/<folder>`` (:data:`DATA_FOLDERS`; pyproject.toml's package-dir mapping, the same way
as the embedded models). :func:`data_dir` looks, in this order, for

1. ``data/<name>`` in the working directory or a folder above it (the checkout you work in: a notebook runs in
   ``notebooks/``, one floor down), so that runs you add to your checkout are the ones read;
2. ``data/<name>`` beside the imported package (the checkout of an editable install, from anywhere);
3. the package's own copy (a plain install, e.g. in Colab).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_FOLDERS", "find_up", "data_dir"]

# data/<name> -> the folder it installs as inside the package (pyproject's [tool.setuptools.package-dir])
DATA_FOLDERS = {"reference_runs": "reference_runs", "seqpolicy": "seqpolicy_data"}
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

    Args:
        name: ``"reference_runs"`` or ``"seqpolicy"``.
        start: where the upward search begins (default: the working directory).
        package: the ``qae_lab`` package folder whose checkout and installed copy are looked at (default: this one).

    Raises:
        FileNotFoundError: naming every place looked at, where none holds it.

    >>> data_dir("reference_runs").name in ("reference_runs",)
    True
    >>> data_dir("runs")
    Traceback (most recent call last):
    ...
    ValueError: name must be one of ['reference_runs', 'seqpolicy'], got 'runs'
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
