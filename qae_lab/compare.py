r"""Compare training runs: load run folders, average curves over seeds, a before/after table.

A run folder is what ``python -m qae_lab train`` writes (``config.json``, ``log.jsonl``,
``eval_before.json`` / ``eval_after.json``) or a committed reference run under
``data/reference_runs/<method>-seed<S>/`` (``config.json``, ``log.jsonl``, ``summary.json``).
Both load into a :class:`Run`; runs of one method (different seeds) are grouped by
:attr:`Run.method` and reported as mean and spread over seeds.

Training variance. SA-AH-GRPO (arXiv 2606.05434) reports a "training variance" (3B:
0.0885 for GRPO, 0.0246 for SA-AH-GRPO) without a formula. Ours, :func:`training_variance`,
is a decision, not the paper's definition: the population variance over training steps of
the per-step mean reward x_t around its trailing moving average m_t over ``window`` steps,

    m_t = (1/w) * sum_{s=t-w+1..t} x_s,        r_t = x_t - m_t,
    Var_detrended = (1/(n-w+1)) * sum_{t=w-1..n-1} (r_t - mean(r))^2,

so the learning trend itself (reward rising from 0.3 to 0.7) does not count as
instability; ``detrend=False`` gives the plain variance of x_t. Numbers on our tiny task are
not comparable to the paper's (different reward scale, model and batch size).

Where this departs from the usual conventions, and why:

* The spread over seeds is the population standard deviation (ddof = 0, as
  ``benchmarks/reference_runs.py`` prints it) and the seed range [min, max]; with two or
  three seeds neither is a confidence interval, only an honest "how far apart the seeds were".
* :func:`moving_average` averages the first ``window - 1`` steps over the steps so far (a
  shorter window), so a smoothed curve keeps every step; :func:`detrended_variance` uses
  only the full windows.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from qae_lab._checks import check_int
from qae_lab.methods import (
    METHODS,
    QAE_ALL_EQUAL_FRAC,
    QAE_EASY_FRAC,
    QAE_HARD_FRAC,
    QAE_ZERO_ADV_FRAC,
    SAAH_W_MEAN_NEG,
    method_name,
)
from qae_lab.runfolder import read_log, step_rows

__all__ = ["Run", "load_run", "load_runs", "find_up", "find_reference_runs", "series",
           "moving_average", "detrended_variance", "training_variance", "Stat", "stat", "within_spread",
           "Curve", "group_by_method", "metric_curves", "summary_table", "format_table", "versus_baseline"]


# ---------------------------------------------------------------- loading run folders

@dataclass(frozen=True)
class Run:
    r"""One training run read from its folder.

    Attributes:
        name: the folder's name (``qae-seed0``, ``cpu-demo-20260101-120000``).
        method: ``mean`` | ``qae`` | ``sa_ah`` | ``qae_sa_ah`` (:data:`qae_lab.methods.METHODS`),
            or ``<baseline>+<token_weighting>`` for a combination without a name.
        seed: the trainer's seed (None when the config does not say).
        config: ``config.json``: ``{"preset", "run", "trainer", "versions"}``.
        rows: the training-step rows of ``log.jsonl`` (:func:`qae_lab.runfolder.step_rows`).
        before, after: the evaluation summaries (``pass@1``, ``greedy_pass@1``, ``pass@8``, ...)
            before and after training, or None when the run has none (interrupted, or evaluate off).
    """

    name: str
    method: str
    seed: int | None
    config: dict
    rows: list[dict]
    before: dict | None
    after: dict | None


def _is_run(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "log.jsonl").is_file()


def _evals(path: Path) -> tuple[dict | None, dict | None]:
    """(before, after) summaries from summary.json (reference runs) or eval_before/after.json (a train run)."""
    if (path / "summary.json").is_file():
        data = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        return tuple((data.get(when) or {}).get("summary") for when in ("before", "after"))
    out = []
    for when in ("before", "after"):
        f = path / f"eval_{when}.json"
        out.append(json.loads(f.read_text(encoding="utf-8"))["summary"] if f.is_file() else None)
    return tuple(out)


def load_run(path: str | os.PathLike) -> Run:
    r"""Read one run folder into a :class:`Run` (see the module docstring for the two layouts)."""

    path = Path(path)
    if not path.is_dir() or not _is_run(path):
        raise ValueError(f"path {str(path)!r} is not a run folder: it needs config.json and log.jsonl "
                         "(as written by `python -m qae_lab train` or kept in data/reference_runs)")
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    seed = (config.get("trainer") or {}).get("seed")
    before, after = _evals(path)
    return Run(path.name, method_name(config), seed, config, step_rows(read_log(path)), before, after)


def _order(run: Run) -> tuple:
    known = list(METHODS)
    rank = known.index(run.method) if run.method in known else len(known)
    return rank, run.method, -1 if run.seed is None else run.seed, run.name


def load_runs(source: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Run]:
    r"""Runs from a parent folder (every sub-folder that is a run), one run folder, or a list of run folders.

    Sorted by method (in :data:`~qae_lab.methods.METHODS` order, others after), then seed.
    Sub-folders of a parent that are not runs (checkpoints, notes) are skipped; a parent
    with none, or a listed folder that is not a run, raises ``ValueError``.
    """
    if isinstance(source, (str, os.PathLike)):
        root = Path(source)
        if not root.is_dir():
            raise ValueError(f"source {str(root)!r} is not a folder")
        paths = [root] if _is_run(root) else sorted(p for p in root.iterdir() if p.is_dir() and _is_run(p))
        if not paths:
            raise ValueError(f"source {str(root)!r} holds no run folders (sub-folders with config.json and log.jsonl)")
    else:
        paths = [Path(p) for p in source]
        if not paths:
            raise ValueError("source must name at least one run folder, got an empty list")
    return sorted((load_run(p) for p in paths), key=_order)


def find_up(name: str, start: str | os.PathLike | None = None) -> Path | None:
    r"""The first folder ``<dir>/<name>`` for ``dir`` = ``start`` (default: the cwd) and each parent; None if none."""
    here = Path(start if start is not None else os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / name).is_dir():
            return d / name
    return None


def find_reference_runs(start: str | os.PathLike | None = None) -> Path | None:
    r"""The committed ``data/reference_runs`` folder, or None where this copy of qae_lab has none.

    Looked for from ``start`` (default: the cwd, e.g. ``notebooks/``) upwards, then next to
    the imported package (a source checkout or an editable install). A plain
    ``pip install`` carries no data: clone the repository to get the runs.
    """
    found = find_up(os.path.join("data", "reference_runs"), start)
    beside = Path(__file__).resolve().parents[1] / "data" / "reference_runs"
    return found or (beside if beside.is_dir() else None)


# ---------------------------------------------------------------- per-run numbers

def series(run: Run, metric: str) -> tuple[list[int], list[float]]:
    r"""(steps, values) of one logged metric, skipping steps where it is missing or None."""
    pts = [(r["step"], float(r[metric])) for r in run.rows if r.get(metric) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _values(values: Sequence[float], name: str) -> list[float]:
    try:
        xs = [float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of real numbers") from err
    if not xs or not all(math.isfinite(x) for x in xs):
        raise ValueError(f"{name} must be a non-empty sequence of finite numbers, got {len(xs)} values")
    return xs


def moving_average(values: Sequence[float], window: int) -> list[float]:
    r"""Trailing moving average: m_t = mean(x_{max(0, t-w+1)} .. x_t), a shorter window for the first w-1 steps.

    Args:
        values: (n,) the per-step values x_t, finite.
        window: w >= 1 (1: the values themselves).

    Returns:
        (n,) list of floats.

    >>> moving_average([0, 2, 4, 6], 2)
    [0.0, 1.0, 3.0, 5.0]
    """
    xs = _values(values, "values")
    w = check_int(window, "window", 1)
    out, total = [], 0.0
    for t, x in enumerate(xs):
        total += x - (xs[t - w] if t >= w else 0.0)  # running sum of the last w values
        out.append(total / min(t + 1, w))
    return out


def detrended_variance(values: Sequence[float], window: int) -> float:
    r"""Population variance of r_t = x_t - m_t (m: the trailing ``window``-step average) over the full windows.

    Args:
        values: (n,) per-step values x_t, finite, n >= window + 1 (at least two residuals).
        window: w >= 2.

    >>> detrended_variance([0, 2, 0, 2, 0], 2)    # r = 1, -1, 1, -1
    1.0
    >>> detrended_variance([0, 1, 2, 3, 4], 2)    # a steady trend is not variance
    0.0
    """
    xs = _values(values, "values")
    w = check_int(window, "window", 2, max(len(xs) - 1, 2))
    if len(xs) < w + 1:
        raise ValueError(f"values must hold at least window + 1 = {w + 1} steps, got {len(xs)}")
    m = moving_average(xs, w)
    # r_t = x_t - m_t, t = w-1 .. n-1 (full windows only)
    r = [x - mt for x, mt in zip(xs[w - 1:], m[w - 1:])]
    return statistics.pvariance(r)


def training_variance(rows: Sequence[Mapping], metric: str = "reward", window: int = 20, *,
                      detrend: bool = True) -> float:
    r"""Training variance of ``metric`` over the steps of a log (see the module docstring: our definition).

    Args:
        rows: log rows (dicts with ``step`` and metrics); rows without ``metric`` are skipped.
        metric: the logged per-step value, default ``reward`` (the step's mean reward).
        window: the trailing moving average's length w (steps) the values are detrended by.
        detrend: False: the plain population variance of the values (``window`` unused).

    >>> rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 0.5, 0.0, 0.5, 0.0], 1)]
    >>> training_variance(rows, window=2), training_variance(rows, detrend=False)
    (0.0625, 0.06)
    """
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a metric name (str), got {metric!r}")
    xs = [r[metric] for r in rows if r.get(metric) is not None]
    if not xs:
        raise ValueError(f"rows hold no values of metric {metric!r}")
    if not detrend:
        return statistics.pvariance(_values(xs, "rows"))
    return detrended_variance(xs, window)


# ---------------------------------------------------------------- over seeds

class Stat(NamedTuple):
    r"""Mean and spread of one number over a method's seeds: population std and range [lo, hi]."""

    mean: float
    std: float
    lo: float
    hi: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f}±{self.std:.3f}"


def stat(values: Iterable[float | None]) -> Stat | None:
    r"""The :class:`Stat` of the values that are not None; None when there are none.

    >>> s = stat([0.5, 0.7, None]); (round(s.mean, 9), round(s.std, 9), s.lo, s.hi, s.n)
    (0.6, 0.1, 0.5, 0.7, 2)
    """
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return Stat(statistics.fmean(xs), statistics.pstdev(xs), min(xs), max(xs), len(xs))


def within_spread(a: Stat, b: Stat) -> bool | None:
    r"""Whether two methods' seed ranges overlap (their difference is within seed spread); None with < 2 seeds.

    >>> within_spread(stat([0.58, 0.59]), stat([0.585, 0.60])), within_spread(stat([0.5]), stat([0.6]))
    (True, None)
    """
    if a.n < 2 or b.n < 2:
        return None
    return a.lo <= b.hi and b.lo <= a.hi


def group_by_method(runs: Iterable[Run]) -> dict[str, list[Run]]:
    r"""Runs grouped by :attr:`Run.method`, in the order the methods first appear."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.method, []).append(run)
    return groups


@dataclass
class Curve:
    r"""A method's curve over seeds: per step the mean, population std and range over its runs.

    All lists have one entry per step in ``steps`` (the steps every run of the method logged).
    """

    steps: list[int]
    mean: list[float]
    std: list[float]
    lo: list[float]
    hi: list[float]
    n_runs: int


def metric_curves(runs: Iterable[Run], metric: str, window: int = 1) -> dict[str, Curve]:
    r"""Per method, ``metric`` smoothed per run (trailing average over ``window`` steps), then mean/spread over runs.

    Methods whose runs never logged ``metric`` (``saah/*`` without token weighting) are left out.
    """
    check_int(window, "window", 1)
    out = {}
    for method, group in group_by_method(runs).items():
        per_run = []
        for run in group:
            steps, xs = series(run, metric)
            if xs:
                per_run.append(dict(zip(steps, moving_average(xs, window))))
        if not per_run:
            continue
        steps = sorted(set.intersection(*(set(d) for d in per_run)))
        stats = [stat([d[s] for d in per_run]) for s in steps]
        out[method] = Curve(steps, [s.mean for s in stats], [s.std for s in stats], [s.lo for s in stats],
                            [s.hi for s in stats], len(per_run))
    return out


def _mean_of(run: Run, metric: str, last: int | None = None) -> float | None:
    xs = series(run, metric)[1][-last if last else None:]
    return statistics.fmean(xs) if xs else None


def _eval(run: Run, when: str, key: str) -> float | None:
    summary = getattr(run, when)
    return None if summary is None else summary.get(key)


def summary_table(runs: Iterable[Run], window: int = 20) -> list[dict]:
    r"""One row per method: ``method``, ``seeds`` and a :class:`Stat` (or None) over seeds for each column.

    Columns: sampled ``pass@1``, ``greedy pass@1`` and ``pass@8`` before and after
    training; the mean over steps of ``zero-adv frac``, ``all-equal frac`` (prompts whose
    rewards are all equal), ``hard frac``, ``easy frac`` and
    ``w_mean_neg`` (SA-AH's mean weight on negative tokens); ``final entropy`` (mean of the
    last ``window`` steps); ``train var`` (:func:`training_variance` of the reward, ``window``).
    """
    check_int(window, "window", 2)
    table = []
    for method, group in group_by_method(runs).items():
        row = {"method": method, "seeds": len(group)}
        for label, key in (("pass@1", "pass@1"), ("greedy pass@1", "greedy_pass@1"), ("pass@8", "pass@8")):
            for when in ("before", "after"):
                row[f"{label} {when}"] = stat(_eval(r, when, key) for r in group)
        for label, key in (("zero-adv frac", QAE_ZERO_ADV_FRAC), ("all-equal frac", QAE_ALL_EQUAL_FRAC),
                           ("hard frac", QAE_HARD_FRAC),
                           ("easy frac", QAE_EASY_FRAC), ("w_mean_neg", SAAH_W_MEAN_NEG)):
            row[label] = stat(_mean_of(r, key) for r in group)
        row["final entropy"] = stat(_mean_of(r, "entropy", window) for r in group)
        row["train var"] = stat(training_variance(r.rows, "reward", window)
                                for r in group if len(series(r, "reward")[1]) > window)
        table.append(row)
    return table


def format_table(table: Sequence[Mapping], columns: Sequence[str] | None = None, digits: int = 3) -> str:
    r"""A fixed-width text table of :func:`summary_table` rows (a Stat as mean±std, None as a dash).

    >>> print(format_table([{"method": "qae", "seeds": 2, "pass@1 after": stat([0.5, 0.7])}]))
    method  seeds  pass@1 after
    qae         2   0.600±0.100
    """
    check_int(digits, "digits", 0, 12)
    columns = list(columns or (table[0] if table else []))

    def cell(v) -> str:
        if isinstance(v, Stat):
            return f"{v.mean:.{digits}f}±{v.std:.{digits}f}"
        if isinstance(v, float):
            return f"{v:.{digits}f}"
        return "—" if v is None else str(v)

    cells = [[cell(row.get(c)) for c in columns] for row in table]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(columns, widths)))]
    lines += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
              for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def versus_baseline(table: Sequence[Mapping], column: str, baseline: str = "mean", digits: int = 3) -> str:
    r"""Per method, one line for ``column`` of :func:`summary_table`, compared with the ``baseline`` method.

    Each line: mean±std over seeds, the seed range, and the difference from ``baseline``'s
    mean with whether it lies within the seed spread (:func:`within_spread`).

    >>> t = [{"method": "mean", "x": stat([0.5, 0.6])}, {"method": "qae", "x": stat([0.58, 0.7])}]
    >>> print(versus_baseline(t, "x"))
    mean  0.550±0.050  seeds [0.500, 0.600]
    qae   0.640±0.060  seeds [0.580, 0.700]  +0.090 vs mean: within the seed spread (the seed ranges overlap)
    """
    check_int(digits, "digits", 0, 12)
    base = next((row.get(column) for row in table if row["method"] == baseline), None)
    width = max((len(row["method"]) for row in table), default=0)
    verdicts = {True: "within the seed spread (the seed ranges overlap)",
                False: "outside the seed spread (the ranges of {} and {} seeds do not overlap)",
                None: "too few seeds to judge (one run)"}
    lines = []
    for row in table:
        s, f = row.get(column), f".{digits}f"
        if s is None:
            lines.append(f"{row['method']:<{width}}  —")
            continue
        line = f"{row['method']:<{width}}  {s.mean:{f}}±{s.std:{f}}  seeds [{s.lo:{f}}, {s.hi:{f}}]"
        if base is not None and row["method"] != baseline:
            verdict = verdicts[within_spread(s, base)].format(s.n, base.n)
            line += f"  {s.mean - base.mean:+{f}} vs {baseline}: {verdict}"
        lines.append(line)
    return "\n".join(lines)
