"""Test-session settings shared by the unit tests, doctests and notebooks (tests/notebooks/test_notebook_runs.py).

Notebooks run headless in smoke mode (fewer Monte-Carlo samples and steps) unless the
caller set QAE_LAB_SMOKE / QAE_LAB_HEADLESS already; the kernels the tests start inherit this
environment (the browser test starts its JupyterLab without QAE_LAB_HEADLESS).

``python -m pytest`` runs its tests in parallel processes, one per core (pytest-xdist's ``-n auto``,
from one queue, the slow tests first), unless the command line says otherwise: ``-n0`` or
``-p no:xdist`` runs them in this process, ``-n 4`` in four.
"""

import os

import pytest

os.environ.setdefault("QAE_LAB_SMOKE", "1")
os.environ.setdefault("QAE_LAB_HEADLESS", "1")  # nobody at the notebook: wait for background runs
# the processes the tests start (the command line, kernels, a fresh interpreter) on one OpenMP thread, as the tests'
# own process runs torch (tests/conftest.py): beside the other test worker on 2 cores, a tiny model's two threads
# wait on each other. A test that starts one with other threads says so in its own environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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
    """``-n auto --dist load --maxschedchunk 1`` where pytest-xdist is loaded and no ``-n`` was given
    (not in its workers).

    Set here rather than in pyproject's addopts, which would make ``-p no:xdist`` an error (an unknown ``-n``).
    Runs before xdist's own hook of the same name, which turns ``auto`` into a number of workers.
    """
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and config.getoption("numprocesses", None) is None and not config.getoption("usepdb", False)):
        config.option.numprocesses = "auto"
        if config.getoption("dist", "no") == "no":  # one queue, one test at a time: the longest first
            config.option.dist = "load"
            config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    """The slow tests first, the longest of them first; the rest in collection order.

    With one shared queue (``--dist load --maxschedchunk 1``) this is the longest-first schedule:
    each worker takes the next test when it is free, so the long tests overlap one another and
    the many short ones fill in at the end, and no worker is left running a long test alone.
    A slow test's ``seconds`` (``@pytest.mark.slow(seconds=40)``: about how long it takes on a
    busy 2-core machine) orders the slow ones; it decides nothing else. Every worker collects
    and sorts alike, as pytest-xdist requires. (Tests that share a costly module fixture are
    better written as one test: the queue may hand them to different workers, each building it.)
    """
    def cost(item) -> float:
        mark = item.get_closest_marker("slow")
        return 0.0 if mark is None else float(mark.kwargs.get("seconds", 5))

    items.sort(key=cost, reverse=True)  # stable: equal costs keep the collection order
