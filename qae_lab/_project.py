r"""The project's own address: ``Repository`` under ``[project.urls]`` in pyproject.toml, read once.

Publishing qae_lab elsewhere is a one-line change there, then ``python -m tools.install_cell``. The Colab badges
(:data:`qae_lab.lab.notebook.REPO`) and an exported model's card (:mod:`qae_lab.runs.export`) use
:data:`REPOSITORY_URL`.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

__all__ = ["REPOSITORY_URL", "repository_url", "github_repo"]

_DIST = "qae-lab"
_CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def repository_url(pyproject: str | os.PathLike | None = _CHECKOUT_PYPROJECT, dist: str = _DIST) -> str:
    r"""The ``Repository`` address of ``[project.urls]``: from ``pyproject`` where it is qae-lab's (a checkout, whose
    editable install's metadata goes stale when the file changes), else from the installed distribution's metadata.

    >>> repository_url()
    'https://github.com/qae-lab/qae_lab'
    """
    path = Path(pyproject) if pyproject is not None else None
    if path is not None and path.is_file():
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == dist:
            url = project.get("urls", {}).get("Repository")
            if not url:
                raise ValueError(f"{path}: [project.urls] has no Repository address")
            return url
    try:
        entries = importlib.metadata.metadata(dist).get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        entries = []
    urls = dict(entry.split(", ", 1) for entry in entries if ", " in entry)
    if "Repository" not in urls:
        raise LookupError(
            f"no Repository address: neither {path} nor the installed {dist!r} metadata "
            "([project.urls] in pyproject.toml) names one"
        )
    return urls["Repository"]


def github_repo(url: str) -> str:
    r"""``owner/name`` of a GitHub address (what Colab's badge needs); a clear error for any other host.

    >>> github_repo("https://github.com/qae-lab/qae_lab"), github_repo("https://github.com/a/b.git/")
    ('qae-lab/qae_lab', 'a/b')
    """
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", url)
    if match is None:
        raise ValueError(
            f"[project.urls] Repository must be https://github.com/<owner>/<name> (Colab opens "
            f"notebooks from GitHub only), got {url!r}"
        )
    return f"{match[1]}/{match[2]}"


REPOSITORY_URL = repository_url()
