r"""torch's CPU threads beside a live run: where a notebook's own torch work runs (:func:`in_fresh_thread`) and how many
threads the training thread uses (:class:`ThreadTuner`), so that notebook 04's steps take as long as the command
line's (``benchmarks/bench_live_cpu.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback

__all__ = ["ThreadTuner", "in_fresh_thread"]


def in_fresh_thread(fn: Callable, /, *args, **kwargs):
    r"""``fn(*args, **kwargs)`` run in a new thread that ends with it: its result, or its error re-raised here.

    For torch work done in a notebook beside a :class:`LiveRun` (notebook 04's evaluation before training). On a
    CPU, torch parallelises with OpenMP, which keeps a pool of worker threads for every thread that has run
    parallel work, for as long as that thread lives. Work in the kernel's main thread leaves its pool behind, so
    the training thread's pool doubles the threads on the cores and OpenMP's workers sleep instead of spinning
    between operations: a ``cpu-demo`` step in a kernel took 0.85 s instead of 0.61 s on an idle 2-core machine
    after an evaluation in the main thread. A thread that ends takes its pool with it.

    >>> in_fresh_thread(sum, [1, 2, 3])
    6
    >>> in_fresh_thread(int, "x")
    Traceback (most recent call last):
    ...
    ValueError: invalid literal for int() with base 10: 'x'
    """
    out: dict = {}

    def call():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            out["error"] = err

    thread = threading.Thread(target=call, name="qae_lab-fresh-thread", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class ThreadTuner(TrainerCallback):
    r"""Picks torch's thread count for the training thread on a CPU from the steps' own times: a probe times up to
    ``probe`` steps at each of ``counts`` (interleaved, so a change of load falls on all of them) and keeps the count
    with the shortest median step until the next probe.

    Why: torch's CPU operations split their work over OpenMP threads that wait for one another at the end of each
    operation. On an idle 2-core machine two threads are faster (a ``cpu-demo`` step: 0.64 s against 1.04 s with
    one); beside other busy processes (a browser, another notebook: a load of 3) the waits stretch, and one
    thread is faster (2.4 s against 6.5 s). Which holds changes while a workshop runs; the step times say which.

    A probe costs steps at the slower count, so it is kept short: a count whose fastest step took more than
    ``clear`` times the other's slowest is dropped at once, and the wait until the next probe (``period`` steps)
    doubles, up to ``max_period``, each time a probe keeps the count in force.

    Args:
        counts: the thread counts to try; default 1 and ``torch.get_num_threads()`` (nothing to tune on 1 core).
        probe: steps timed at each count per probe, at most.
        period, max_period: steps from the end of a probe to the next, at first and at most.
        clear: the ratio of step times that ends a probe early.

    ``chosen`` lists ``(step, count)``: the count kept from that step on (one entry per probe); ``times``: count ->
    the seconds of the current probe's steps at that count. The count in force before training is put back at its
    end.

    >>> import types
    >>> tuner, clock = ThreadTuner(counts=(1, 2), probe=2, period=2, max_period=4), [0.0]
    >>> tuner._clock = lambda: clock[0]          # a fake clock
    >>> def step(n, seconds):                    # seconds(thread count) -> the step's time
    ...     tuner.on_step_begin(None, types.SimpleNamespace(global_step=n), None)
    ...     clock[0] += seconds(tuner.count)
    ...     tuner.on_step_end(None, None, None)
    >>> for n in range(13):                      # idle: two threads are a little faster
    ...     step(n, lambda count: 0.6 if count == 2 else 0.8)
    >>> tuner.chosen                             # probes at steps 0-3 and 8-11 (the wait doubled, to 4)
    [(4, 2), (12, 2)]
    >>> for n in range(13, 19):                  # under load one thread is much faster
    ...     step(n, lambda count: 6.5 if count == 2 else 2.4)
    >>> tuner.chosen[2:], tuner.count            # the probe at step 16 ended after one step at each count
    ([(18, 1)], 1)
    >>> tuner.on_train_end(None, None, None)    # the count in force before is put back
    """

    def __init__(
        self,
        counts: tuple[int, ...] | None = None,
        *,
        probe: int = 3,
        period: int = 25,
        max_period: int = 200,
        clear: float = 1.5,
    ):
        n = torch.get_num_threads()
        self.counts = tuple(sorted({int(c) for c in counts})) if counts else tuple(sorted({1, n}))
        if not self.counts or min(self.counts) < 1:
            raise ValueError(f"counts must be thread counts >= 1, got {counts!r}")
        if probe < 1 or not 0 <= period <= max_period or clear <= 1:
            raise ValueError(
                f"need probe >= 1, 0 <= period <= max_period and clear > 1, got probe={probe}, period={period}, "
                f"max_period={max_period}, clear={clear}"
            )
        self.probe, self.period, self.max_period, self.clear = int(probe), int(period), int(max_period), float(clear)
        self.count, self.best = n, max(self.counts)
        self.chosen: list[tuple[int, int]] = []
        self.times: dict[int, list[float]] = {c: [] for c in self.counts}
        self._plan: list[int] = []  # the counts of the probe's coming steps
        self._next_probe, self._wait = 0, self.period
        self._before, self._t0, self._clock = n, None, time.perf_counter

    def on_train_begin(self, args, state, control, **kwargs):
        self._before = torch.get_num_threads()

    def on_step_begin(self, args, state, control, **kwargs):
        if len(self.counts) < 2:
            return
        step = state.global_step
        if not self._plan and any(self.times.values()):  # a probe has ended: keep the fastest
            median = {c: sorted(t)[len(t) // 2] for c, t in self.times.items() if t}
            best = min(median, key=median.get)
            self._wait = min(2 * self._wait, self.max_period) if best == self.best else self.period
            self.best, self._next_probe = best, step + self._wait
            self.chosen.append((step, best))
            self.times = {c: [] for c in self.counts}
        elif not self._plan and step >= self._next_probe:  # a probe begins: the count in force first
            order = sorted(self.counts, key=lambda c: c != self.best)
            self._plan = order * self.probe
        probing = bool(self._plan)
        self.count = self._plan.pop(0) if probing else self.best
        if torch.get_num_threads() != self.count:
            torch.set_num_threads(self.count)
        self._t0 = self._clock() if probing else None

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is None:
            return
        self.times[self.count].append(self._clock() - self._t0)
        timed = {c: t for c, t in self.times.items() if t}
        if len(timed) == len(self.counts):  # a count far slower than another is not timed again in this probe
            fastest = min(max(t) for t in timed.values())
            slow = {c for c, t in timed.items() if min(t) > self.clear * fastest}
            if len(self.counts) - len(slow) < 2:  # one count left: the probe has its answer
                self._plan = []
            else:
                self._plan = [c for c in self._plan if c not in slow]

    def on_train_end(self, args, state, control, **kwargs):
        if torch.get_num_threads() != self._before:
            torch.set_num_threads(self._before)
