r"""Small helpers the notebooks share: smoke mode, Colab detection, the repository's address, a table shown.

``QAE_LAB_SMOKE=1`` shrinks every notebook's samples and steps through :func:`pick` (CI, quick checks);
``QAE_LAB_HEADLESS=1`` says nobody is at the notebook: cells wait for a background training run
(:func:`headless`). The repository's address is ``Repository`` under ``[project.urls]`` in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import sys

from qae_lab._project import REPOSITORY_URL, github_repo, repository_url
from qae_lab.analysis.tables import markdown_table

__all__ = [
    "SMOKE_ENV",
    "HEADLESS_ENV",
    "COLAB_PYTHON",
    "REPOSITORY_URL",
    "REPO",
    "repository_url",
    "github_repo",
    "smoke_mode",
    "headless",
    "pick",
    "in_colab",
    "colab_url",
    "show_table",
]

SMOKE_ENV = "QAE_LAB_SMOKE"
HEADLESS_ENV = "QAE_LAB_HEADLESS"
# The Python that Google Colab runs (3.13 since 2026-08): environment.yml pins it and the fresh-Colab CI job
# (.ci/fresh-colab) builds its venv with it; tests/tools/test_install_cell.py checks environment.yml against it.
COLAB_PYTHON = "3.13"
REPO = github_repo(REPOSITORY_URL)  # GitHub owner/name used by the Colab badges and the install cell


def _flag(name: str, environ=None) -> bool:
    value = (os.environ if environ is None else environ).get(name, "").strip().lower()
    if value not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"{name} must be 1/0, true/false or yes/no, got {value!r}")
    return value in ("1", "true", "yes")


def smoke_mode(environ=None) -> bool:
    r"""True when ``QAE_LAB_SMOKE`` is 1/true/yes (any case) in ``environ`` (default ``os.environ``).

    >>> smoke_mode({SMOKE_ENV: "1"}), smoke_mode({SMOKE_ENV: "0"}), smoke_mode({})
    (True, False, False)
    """
    return _flag(SMOKE_ENV, environ)


def headless(environ=None) -> bool:
    r"""True when ``QAE_LAB_HEADLESS`` is 1/true/yes: the notebook runs unattended (CI).

    >>> headless({HEADLESS_ENV: "1"}), headless({})
    (True, False)
    """
    return _flag(HEADLESS_ENV, environ)


def pick(full, smoke, environ=None):
    r"""``smoke`` in smoke mode, ``full`` otherwise (e.g. ``n_groups = pick(4000, 200)``).

    >>> pick(4000, 200, {SMOKE_ENV: "1"}), pick(4000, 200, {})
    (200, 4000)
    """
    return smoke if smoke_mode(environ) else full


def in_colab() -> bool:
    r"""True inside Google Colab (its ``google.colab`` module is imported).

    >>> from unittest import mock
    >>> with mock.patch.dict(sys.modules, {"google.colab": mock.MagicMock()}):
    ...     in_colab()
    True
    >>> in_colab()
    False
    """
    return "google.colab" in sys.modules


def colab_url(notebook: str) -> str:
    r"""The Colab address that opens ``notebooks/<notebook>`` from the repository's main branch.

    >>> colab_url("02_softmax_entropy_proofs.ipynb")
    'https://colab.research.google.com/github/qae-lab/qae_lab/blob/main/notebooks/02_softmax_entropy_proofs.ipynb'
    """
    return f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/{notebook}"


def show_table(rows, columns=None, *, digits=3) -> None:
    r"""Show ``rows`` in the notebook as a Markdown table (:func:`qae_lab.analysis.tables.markdown_table`).

    >>> show_table([{"method": "qae", "pass@1": 0.5791}])
    <IPython.core.display.Markdown object>
    """
    from IPython.display import Markdown, display  # ipykernel's, installed with ipywidgets

    display(Markdown(markdown_table(rows, columns, digits=digits)))
