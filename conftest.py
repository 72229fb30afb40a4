"""Test-session settings shared by the unit tests, doctests and notebooks (tests/test_notebook_runs.py).

Notebooks run headless in smoke mode (fewer Monte-Carlo samples and steps) unless the
caller set QAE_LAB_SMOKE / QAE_LAB_HEADLESS already; the kernels the tests start inherit this
environment (the browser test starts its JupyterLab without QAE_LAB_HEADLESS).

``python -m pytest`` runs its tests in parallel processes, one per core (pytest-xdist's ``-n auto``,
with work stealing: a worker that runs out takes tests queued on another), unless the command line
says otherwise: ``-n0`` or ``-p no:xdist`` runs them in this process, ``-n 4`` in four.
"""

import os

import pytest

os.environ.setdefault("QAE_LAB_SMOKE", "1")
os.environ.setdefault("QAE_LAB_HEADLESS", "1")  # nobody at the notebook: wait for background runs

# Property tests run torch code whose first call can be slow on a busy 2-core machine:
# no per-example deadline, so a slow example is never mistaken for a failure.
try:
    from hypothesis import settings
except ImportError:  # hypothesis is a dev extra
    pass
else:
    settings.register_profile("qae_lab", deadline=None)
    settings.load_profile("qae_lab")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``-n auto --dist worksteal`` where pytest-xdist is loaded and no ``-n`` was given (not in its workers).

    Set here rather than in pyproject's addopts, which would make ``-p no:xdist`` an error (an unknown ``-n``).
    Runs before xdist's own hook of the same name, which turns ``auto`` into a number of workers.
    """
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and config.getoption("numprocesses", None) is None and not config.getoption("usepdb", False)):
        config.option.numprocesses = "auto"
        if config.getoption("dist", "no") == "no":
            config.option.dist = "worksteal"
