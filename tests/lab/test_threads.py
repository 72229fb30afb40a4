"""qae_lab.lab.threads: a notebook's own torch work in a thread that ends; the thread tuner's choices are its doctest's
(a fake clock) and a real live run's (tests/lab/test_live.py)."""

from __future__ import annotations

import threading

import pytest

from qae_lab.lab.threads import in_fresh_thread


def test_in_fresh_thread_runs_in_a_thread_that_ends_and_passes_errors_back():
    seen = []
    assert in_fresh_thread(lambda x, *, y: seen.append(threading.current_thread()) or x + y, 1, y=2) == 3
    assert seen[0] is not threading.main_thread() and not seen[0].is_alive()
    with pytest.raises(KeyError, match="nope"):
        in_fresh_thread({}.__getitem__, "nope")
