"""Speed claims measured side by side, so that a test's verdict does not depend on the machine: the same work on a
small and a large input in one process, whose ratio the machine's speed and load cancel out of."""

from __future__ import annotations

import time

# t(4n) / t(n) is about 4 for work linear in n and 16 for quadratic work; between them, a margin for noise
LINEAR_BOUND = 10.0


def best_time(call, repeat: int = 3) -> float:
    """The shortest of ``repeat`` wall times of ``call()`` (the least disturbed by other work)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def growth(work, prefix: str, unit: str, n: int, suffix: str) -> float:
    r"""How ``work(text)``'s time grows with the text: ``t(prefix + unit * n + suffix)`` over the same with ``n // 4``
    units (below :data:`LINEAR_BOUND` for linear work, 16 for quadratic, more for backtracking)."""
    large, small = (prefix + unit * k + suffix for k in (n, n // 4))
    return best_time(lambda: work(large)) / max(best_time(lambda: work(small)), 1e-6)
