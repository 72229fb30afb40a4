r"""torch's CPU thread count: the lab's one policy, for the command line, every notebook that computes, and the
benchmarks (docs/processes.md, "CPU threads", gives the measurements that chose it).

On a CPU, unless a setting names a count (``torch_threads``, else ``$QAE_LAB_TORCH_THREADS``), repeated work (training
steps, evaluation batches) runs on the count a :class:`ThreadProbe` times fastest, 1 or torch's default, among those the
machine has free cores for (:class:`CpuRoom`); everything else on one thread (:func:`use_threads`); a GPU's untouched.
Why: the lab's tiny models make OpenMP's waits most of the gain or loss, and the load changes while a workshop runs.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable

import torch

__all__ = [
    "MAX_THREADS",
    "THREADS_ENV",
    "TORCH_DEFAULT",
    "named_threads",
    "policy_threads",
    "use_threads",
    "thread_probe",
    "in_fresh_thread",
    "ThreadProbe",
    "CpuRoom",
]

MAX_THREADS = 1024
"""The most CPU threads a setting may name: more than the hardware threads of one machine."""
THREADS_ENV = "QAE_LAB_TORCH_THREADS"
"""A session's fixed count, where no ``torch_threads`` setting names one (a benchmark's, a teacher's machine)."""
TORCH_DEFAULT = torch.get_num_threads()
"""torch's own count, read when qae_lab.threads is first imported (its default unless changed before)."""


def named_threads(torch_threads: int | None = None, *, environ=os.environ) -> int | None:
    r"""The count a setting names: ``torch_threads`` when given, else ``$QAE_LAB_TORCH_THREADS`` when set, else None.

    >>> named_threads(environ={}), named_threads(3), named_threads(environ={"QAE_LAB_TORCH_THREADS": " 2 "})
    (None, 3, 2)
    >>> named_threads(environ={"QAE_LAB_TORCH_THREADS": "two"})
    Traceback (most recent call last):
    ...
    ValueError: QAE_LAB_TORCH_THREADS must be a whole number of threads in [1, 1024], got 'two'
    >>> named_threads(0)
    Traceback (most recent call last):
    ...
    ValueError: torch_threads must be an int in [1, 1024] or None, got 0
    """
    if torch_threads is None:
        raw = environ.get(THREADS_ENV, "").strip()
        if not raw:
            return None
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_THREADS):
            raise ValueError(f"{THREADS_ENV} must be a whole number of threads in [1, {MAX_THREADS}], got {raw!r}")
        return int(raw)
    if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or not 1 <= torch_threads <= MAX_THREADS:
        raise ValueError(f"torch_threads must be an int in [1, {MAX_THREADS}] or None, got {torch_threads!r}")
    return torch_threads


def policy_threads(torch_threads: int | None = None, *, device: str | torch.device = "cpu", environ=os.environ):
    r"""The thread count for one-off work: the count a setting names, else one on a CPU and None (left) elsewhere.

    >>> policy_threads(environ={}), policy_threads(device="cuda", environ={}), policy_threads(3, device="cuda")
    (1, None, 3)
    >>> policy_threads(environ={"QAE_LAB_TORCH_THREADS": "2"})
    2
    """
    named = named_threads(torch_threads, environ=environ)
    if named is not None:
        return named
    return 1 if torch.device(device).type == "cpu" else None


def use_threads(torch_threads: int | None = None, *, device: str | torch.device = "cpu", environ=os.environ) -> int:
    r"""Set torch's thread count as :func:`policy_threads` says; returns the count now in force.

    >>> before = torch.get_num_threads()
    >>> use_threads(device="cpu", environ={}), use_threads(2, device="cpu")
    (1, 2)
    >>> _ = use_threads(before)
    """
    count = policy_threads(torch_threads, device=device, environ=environ)
    if count is not None and torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return torch.get_num_threads()


def in_fresh_thread(fn: Callable, /, *args, **kwargs):
    r"""``fn(*args, **kwargs)`` run in a new thread that ends with it: its result, or its error re-raised here.

    For torch work in a notebook beside a live run: OpenMP keeps a worker pool for each thread that ran parallel work,
    and one left in the kernel's main thread doubles the threads on the cores; a thread that ends takes its pool along.

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

    # a daemon thread, joined (not a pool, whose exit waits for fn even after an interrupt)
    thread = threading.Thread(target=call, name="qae_lab-fresh-thread", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def thread_probe(torch_threads: int | None = None, *, device="cpu", environ=os.environ) -> ThreadProbe | None:
    r"""The :class:`ThreadProbe` for repeated work on ``device``: one fixed count where a setting names it
    (:func:`named_threads`), else probing 1 and :data:`TORCH_DEFAULT` on a CPU within the cores other processes leave
    free (:class:`CpuRoom`); None (torch's count left as it is) on another device with no count named.

    >>> thread_probe(device="cuda", environ={}), thread_probe(3, device="cuda").counts
    (None, (3,))
    >>> thread_probe(device="cpu", environ={}).counts == tuple(sorted({1, TORCH_DEFAULT}))
    True
    """
    named = named_threads(torch_threads, environ=environ)
    if named is not None:
        return ThreadProbe(counts=(named,))
    return ThreadProbe(room=CpuRoom()) if torch.device(device).type == "cpu" else None


class ThreadProbe:
    r"""Picks torch's thread count for repeated units of work from their own times: a probe times up to ``probe`` units
    at each of ``counts`` (interleaved) and keeps the shortest median until the next probe; :meth:`start`, then
    :meth:`begin` and :meth:`end` around each unit, :meth:`stop` after. A count whose fastest unit took over ``clear``
    times another's slowest is dropped at once; the wait to the next probe (``period`` units) doubles, up to
    ``max_period``, while probes keep the count. ``room`` (:class:`CpuRoom`) drops the counts with no cores free.
    ``chosen``: ``(unit, count)`` per probe.

    >>> tuner, clock = ThreadProbe(counts=(1, 2), probe=2, period=2, max_period=4), [0.0]
    >>> tuner._clock = lambda: clock[0]          # a fake clock
    >>> tuner.start()
    >>> def unit(seconds):                       # seconds(thread count) -> the unit's time
    ...     tuner.begin()
    ...     clock[0] += seconds(tuner.count)
    ...     tuner.end()
    >>> for _ in range(13):                      # idle: two threads are a little faster
    ...     unit(lambda count: 0.6 if count == 2 else 0.8)
    >>> tuner.chosen                             # probes at units 0-3 and 8-11 (the wait doubled, to 4)
    [(4, 2), (12, 2)]
    >>> for _ in range(6):                       # under load one thread is much faster
    ...     unit(lambda count: 6.5 if count == 2 else 2.4)
    >>> tuner.chosen[2:], tuner.count            # the probe at unit 16 ended after one unit at each count
    ([(18, 1)], 1)
    >>> tuner.stop()                             # the count in force at start is put back
    """

    def __init__(
        self,
        counts: tuple[int, ...] | None = None,
        *,
        probe: int = 3,
        period: int = 25,
        max_period: int = 200,
        clear: float = 1.5,
        room: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None,
    ):
        self.counts = tuple(sorted({int(c) for c in counts})) if counts else tuple(sorted({1, TORCH_DEFAULT}))
        if not self.counts or not 1 <= min(self.counts) <= max(self.counts) <= MAX_THREADS:
            raise ValueError(f"counts must be thread counts in [1, {MAX_THREADS}], got {counts!r}")
        if probe < 1 or not 0 <= period <= max_period or clear <= 1:
            raise ValueError(
                f"need probe >= 1, 0 <= period <= max_period and clear > 1, got probe={probe}, period={period}, "
                f"max_period={max_period}, clear={clear}"
            )
        self.probe, self.period, self.max_period, self.clear = int(probe), int(period), int(max_period), float(clear)
        self.room = room
        self.count = self.best = max(self.counts)
        self.chosen: list[tuple[int, int]] = []
        self.times: dict[int, list[float]] = {c: [] for c in self.counts}
        self._plan: list[int] = []  # the counts of the probe's coming steps
        self._next_probe, self._wait, self._units = 0, self.period, 0
        self._before, self._t0, self._clock = torch.get_num_threads(), None, time.perf_counter

    def start(self) -> None:
        """Before the work: note the count in force; with one count, set it."""
        self._before = torch.get_num_threads()
        if len(self.counts) == 1 and self._before != self.count:
            torch.set_num_threads(self.count)

    def begin(self) -> None:
        """Before a unit: set its count (a probe's next, or the one kept) and start its clock while probing."""
        unit, self._units = self._units, self._units + 1
        if len(self.counts) < 2:
            return
        fits = sorted({min(self.counts), *(self.room(self.counts) if self.room else self.counts)} & set(self.counts))
        self._plan = [c for c in self._plan if c in fits]  # a count the machine has no room for now: not timed
        if not self._plan and any(self.times.values()):  # a probe has ended: keep the fastest
            median = {c: sorted(t)[len(t) // 2] for c, t in self.times.items() if t}
            best = min(median, key=median.get)
            self._wait = min(2 * self._wait, self.max_period) if best == self.best else self.period
            self.best, self._next_probe = best, unit + self._wait
            self.chosen.append((unit, best))
            self.times = {c: [] for c in self.counts}
        elif not self._plan and unit >= self._next_probe and len(fits) > 1:  # a probe begins: the count in force first
            self._plan = sorted(fits, key=lambda c: c != self.best) * self.probe
        probing = bool(self._plan)
        self.count = self._plan.pop(0) if probing else max(c for c in fits if c <= self.best)
        if torch.get_num_threads() != self.count:
            torch.set_num_threads(self.count)
        self._t0 = self._clock() if probing else None

    def end(self) -> None:
        """After a unit: its time, while probing; a count far slower than another is dropped from this probe."""
        if self._t0 is None:
            return
        self.times[self.count].append(self._clock() - self._t0)
        self._t0 = None
        timed = {c: t for c, t in self.times.items() if t}
        if len(timed) == len(self.counts):
            fastest = min(max(t) for t in timed.values())
            slow = {c for c, t in timed.items() if min(t) > self.clear * fastest}
            if len(self.counts) - len(slow) < 2:  # one count left: the probe has its answer
                self._plan = []
            else:
                self._plan = [c for c in self._plan if c not in slow]

    def stop(self) -> None:
        """After the work: the count in force at :meth:`start` again."""
        if torch.get_num_threads() != self._before:
            torch.set_num_threads(self._before)


def _cpu_lines() -> str:
    # /proc/stat's "cpu" lines, the whole machine's then each core's: read up to the first other line (the interrupt
    # counts after them run to kilobytes), so a machine of any size is read whole and quickly
    with open("/proc/stat", encoding="ascii") as stat:
        return "".join(itertools.takewhile(lambda line: line.startswith("cpu"), stat))


class CpuRoom:
    r"""The thread counts the machine has cores for now: at most the cores other processes left free over the last
    ``window`` seconds (``/proc/stat``'s busy time less :func:`time.process_time`), plus ``spare``; the smallest always
    fits, and every count without ``/proc/stat`` (macOS, Windows). Looks closer than ``window`` repeat the last answer.

    >>> ticks, own, clock = [1000], [0.0], [0.0]            # a fake 2-core machine at 100 ticks a second
    >>> room = CpuRoom(window=1.0, read=lambda: f"cpu  {ticks[0]} 0 0 0 0\ncpu0 0\ncpu1 0\n", tick=100,
    ...                own=lambda: own[0], clock=lambda: clock[0], sleep=lambda s: None)
    >>> room.cores
    2
    >>> def seconds(busy, mine, wall=1.0):                  # the machine busy for ``busy`` core-seconds, ``mine`` ours
    ...     ticks[0] += int(100 * busy); own[0] += mine; clock[0] += wall
    >>> seconds(2.0, 2.0); room((1, 2))                     # only this process busy: two free cores
    (1, 2)
    >>> seconds(2.0, 1.0); room((1, 2))                     # another process kept a core busy
    (1,)
    >>> seconds(1.3, 1.0); room((1, 2))                     # a browser at a third of a core: within the spare half
    (1, 2)
    """

    def __init__(
        self,
        *,
        window: float = 0.3,
        spare: float = 0.5,
        read: Callable[[], str] | None = None,
        tick: int | None = None,
        own: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.window, self.spare, self._own, self._clock, self._sleep = window, spare, own, clock, sleep
        self._read = read or _cpu_lines
        try:
            self.tick = tick or os.sysconf("SC_CLK_TCK")
            busy, self.cores = self._busy()
        except (OSError, ValueError, AttributeError, IndexError):
            self.cores = None  # not Linux, or a /proc/stat not like Linux's: every count fits
            return
        self._mark, self._free = (self._clock(), busy, self._own()), None  # free: cores left free, plus the spare

    def _busy(self) -> tuple[float, int]:
        # (busy core-seconds since boot, cores): the first line sums every core's ticks by state; idle and iowait
        # are the 4th and 5th
        text = self._read()
        head = [int(v) for v in text.split("\n", 1)[0].split()[1:]]
        cores = sum(1 for line in text.splitlines() if line.startswith("cpu") and line[3:4].isdigit())
        return (sum(head) - head[3] - head[4]) / self.tick, cores

    def __call__(self, counts: tuple[int, ...]) -> tuple[int, ...]:
        if self.cores is None:
            return counts
        waited = self._clock() - self._mark[0]
        if waited < self.window and self._free is None:
            self._sleep(self.window - waited)  # the first look: wait for a measure
        if waited >= self.window or self._free is None:  # else the last answer, the measure running on
            (then, busy_then, own_then), (busy, _), mine = self._mark, self._busy(), self._own()
            now = self._clock()
            others = max(0.0, (busy - busy_then) - (mine - own_then)) / max(now - then, 1e-9)
            self._mark, self._free = (now, busy, mine), self.cores - others + self.spare
        return tuple(c for c in counts if c == min(counts) or c <= self._free)
