"""Speed claims measured side by side, so that a test's verdict does not depend on the machine: the same work on a
small and a large input in one process, whose ratio the machine's speed and load cancel out of."""

from __future__ import annotations

import gc
import time

# t(8n) / t(n) is about 8 for work linear in n and 64 for quadratic work; the bound sits at their geometric middle,
# a factor 2.8 from each, so that a busy machine's noise on either timing (seen up to 2.6 with a 4x ratio) cannot
# cross it
SIZE_RATIO = 8
LINEAR_BOUND = 8 * 8**0.5


def growth(work, prefix: str, unit: str, n: int, suffix: str, repeat: int = 7) -> float:
    r"""How ``work(text)``'s time grows with the text: ``t(prefix + unit * n + suffix)`` over the same with
    ``n // SIZE_RATIO`` units (about 8 for linear work, below :data:`LINEAR_BOUND`; 64 for quadratic, more for
    backtracking). The two are timed in turn, ``repeat`` times each, and the shortest of each kept. Each is timed in
    this thread's own CPU time with the collector paused: a busy machine's other processes take turns on the cores
    without adding to either timing (in wall time, one preemption during a large text read 29.6 beside five busy
    test runs)."""
    large, small = (prefix + unit * k + suffix for k in (n, n // SIZE_RATIO))
    best = {large: float("inf"), small: float("inf")}
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for text in (small, large):
                start = time.thread_time()
                work(text)
                best[text] = min(best[text], time.thread_time() - start)
    finally:
        if collecting:
            gc.enable()
    return best[large] / max(best[small], 1e-6)
