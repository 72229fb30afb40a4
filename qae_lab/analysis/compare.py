r"""Compare training runs: load run folders, average curves over seeds, a before/after table.

A run folder is what ``python -m qae_lab train`` writes (``config.json``, ``log.jsonl``,
``eval_before.json`` / ``eval_after.json``) or a committed reference run under
``data/reference_runs/<method>-seed<S>/`` (``config.json``, ``log.jsonl``, ``summary.json``); both load into a
:class:`Run`. Curves and tables average over the runs of one :class:`~qae_lab.analysis.grouping.Group` (one method,
the same settings and length, each seed once); :func:`versus_baseline` judges a difference only between comparable
groups. The numbers themselves are :mod:`qae_lab.analysis.stats`.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from qae_lab._checks import check_int
from qae_lab.analysis.committed_data import data_dir, find_up
from qae_lab.analysis.claims import difference
from qae_lab.analysis.grouping import Group, differences, format_differences, group_runs
from qae_lab.methods import METHODS, method_name
from qae_lab.metric_names import QAE_ALL_EQUAL_FRAC, QAE_EASY_FRAC, QAE_HARD_FRAC, QAE_ZERO_ADV_FRAC, SAAH_W_MEAN_NEG
from qae_lab.storage.folder import read_log, step_rows
from qae_lab.analysis.stats import moving_average, stat, training_variance

__all__ = [
    "Run",
    "load_run",
    "load_runs",
    "find_up",
    "find_reference_runs",
    "series",
    "Curve",
    "group_by_method",
    "metric_curves",
    "summary_table",
    "versus_baseline",
]


# ---------------------------------------------------------------- loading run folders and their series


@dataclass(frozen=True)
class Run:
    r"""One training run read from its folder: ``seed`` None when the config does not say, ``rows`` the
    :func:`qae_lab.storage.folder.step_rows` of ``log.jsonl``, ``before`` and ``after`` the evaluation summaries
    (``pass@1``, ``pass@8``, ...; None when the run has none).

    >>> run = Run("qae-seed0", "qae", 0, {}, [{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}], None, None)
    >>> run.method, len(run.rows), run.after
    ('qae', 2, None)
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
    files = (path / f"eval_{when}.json" for when in ("before", "after"))
    return tuple(json.loads(f.read_text(encoding="utf-8"))["summary"] if f.is_file() else None for f in files)


def load_run(path: str | os.PathLike) -> Run:
    r"""Read one run folder into a :class:`Run` (see the module docstring for the two layouts).

    >>> run = load_run(find_reference_runs() / "qae-seed0")
    >>> run.name, run.method, run.seed, run.rows[0]["step"], "pass@1" in run.after
    ('qae-seed0', 'qae', 0, 1, True)
    """
    path = Path(path)
    if not path.is_dir() or not _is_run(path):
        raise ValueError(
            f"path {str(path)!r} is not a run folder: it needs config.json and log.jsonl "
            "(as written by `python -m qae_lab train` or kept in data/reference_runs)"
        )
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    seed = (config.get("trainer") or {}).get("seed")
    return Run(path.name, method_name(config), seed, config, step_rows(read_log(path)), *_evals(path))


def _order(run: Run) -> tuple:
    known = list(METHODS)
    rank = known.index(run.method) if run.method in known else len(known)
    return rank, run.method, -1 if run.seed is None else run.seed, run.name


def load_runs(source: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Run]:
    r"""Runs from a parent folder (its sub-folders that are runs), one run folder, or a list of run folders, sorted
    by method (in :data:`~qae_lab.methods.METHODS` order, others after), then seed.

    >>> [run.name for run in load_runs(find_reference_runs())][:4]
    ['mean-seed0', 'mean-seed1', 'mean-seed2', 'qae-seed0']
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


def find_reference_runs(start: str | os.PathLike | None = None) -> Path:
    r"""The committed ``data/reference_runs``: :func:`qae_lab.analysis.committed_data.data_dir` ``("reference_runs", start)``.

    >>> find_reference_runs().name
    'reference_runs'
    """
    return data_dir("reference_runs", start)


def series(run: Run, metric: str) -> tuple[list[int], list[float]]:
    r"""(steps, values) of one logged metric, skipping steps where it is missing or None.

    >>> series(Run("r", "qae", 0, {}, [{"step": 1, "reward": 0.5}, {"step": 2}], None, None), "reward")
    ([1], [0.5])
    """
    pts = [(r["step"], float(r[metric])) for r in run.rows if r.get(metric) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


# ---------------------------------------------------------------- over seeds


def group_by_method(runs: Iterable[Run]) -> dict[str, list[Run]]:
    r"""Runs grouped by :attr:`Run.method` only, in the order the methods first appear (to average or compare:
    :func:`~qae_lab.analysis.grouping.group_runs`).

    >>> groups = group_by_method(load_runs(find_reference_runs()))
    >>> {method: [run.seed for run in group] for method, group in groups.items()}
    {'mean': [0, 1, 2], 'qae': [0, 1, 2], 'sa_ah': [0, 1, 2], 'qae_sa_ah': [0, 1, 2]}
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.method, []).append(run)
    return groups


def _groups(runs: Iterable[Run] | Iterable[Group]) -> list[Group]:
    """Groups as given, or runs grouped by :func:`~qae_lab.analysis.grouping.group_runs` (all as reference runs)."""
    items = list(runs)
    if items and all(isinstance(x, Group) for x in items):
        return items
    if any(isinstance(x, Group) for x in items):
        raise ValueError("runs must be all Runs or all Groups (qae_lab.analysis.grouping.group_runs), not a mix")
    return group_runs(items)


@dataclass
class Curve:
    r"""A group's curve over seeds: per step every run of the group logged, the mean, population std and range.

    >>> curve = metric_curves(load_runs(find_reference_runs()), "reward", window=10)["qae"]
    >>> curve.n_runs, curve.steps[:3], len(curve.mean) == len(curve.steps)
    (3, [1, 2, 3], True)
    """

    steps: list[int]
    mean: list[float]
    std: list[float]
    lo: list[float]
    hi: list[float]
    n_runs: int

    @classmethod
    def over(cls, per_run: Sequence[Mapping[int, float]]) -> Curve:
        """The curve of runs given as {step: value}, at the steps every run has."""
        steps = sorted(set.intersection(*(set(d) for d in per_run)))
        stats = [stat([d[s] for d in per_run]) for s in steps]
        return cls(steps, *([getattr(x, k) for x in stats] for k in ("mean", "std", "lo", "hi")), len(per_run))


def metric_curves(runs: Iterable[Run] | Iterable[Group], metric: str, window: int = 1) -> dict[str, Curve]:
    r"""Per group's label, ``metric`` smoothed per run (trailing average over ``window`` steps), then mean/spread
    over runs; ``runs``: :class:`~qae_lab.analysis.grouping.Group` s, or runs grouped here. Groups that never logged
    ``metric`` are left out.

    >>> runs = [Run(f"qae-seed{i}", "qae", i, {}, [{"step": 1, "reward": x}, {"step": 2, "reward": 2 * x}], None, None)
    ...         for i, x in enumerate([0.25, 0.5])]
    >>> curve = metric_curves(runs, "reward")["qae"]
    >>> curve.steps, curve.mean, curve.std, curve.lo, curve.hi
    ([1, 2], [0.375, 0.75], [0.125, 0.25], [0.25, 0.5], [0.5, 1.0])
    """
    check_int(window, "window", 1)
    out = {}
    for group in _groups(runs):
        per_run = []
        for run in group.runs:
            steps, xs = series(run, metric)
            if xs:
                per_run.append(dict(zip(steps, moving_average(xs, window))))
        if per_run:
            out[group.label] = Curve.over(per_run)
    return out


def _mean_of(run: Run, metric: str, last: int | None = None) -> float | None:
    xs = series(run, metric)[1][-last if last else None :]
    return statistics.fmean(xs) if xs else None


def summary_table(runs: Iterable[Run] | Iterable[Group], window: int = 20) -> list[dict]:
    r"""One row per group (``runs``: groups, or runs grouped here): ``method`` (the group's label), ``seeds``, a
    ``Stat`` (or None) over seeds a column, and ``group`` (for :func:`versus_baseline`). The fractions are means over
    steps; ``final entropy`` over the last ``window``; ``train var``:
    :func:`~qae_lab.analysis.stats.training_variance` of the reward.

    >>> row = summary_table(load_runs(find_reference_runs()))[1]
    >>> row["method"], row["seeds"], row["pass@1 after"].n, row["pass@1 after"].mean > row["pass@1 before"].mean
    ('qae', 3, 3, True)
    """
    check_int(window, "window", 2)
    table = []
    for g in _groups(runs):
        group = g.runs
        row = {"method": g.label, "seeds": len(group)}
        for label, key in (("pass@1", "pass@1"), ("greedy pass@1", "greedy_pass@1"), ("pass@8", "pass@8")):
            for when in ("before", "after"):
                row[f"{label} {when}"] = stat((getattr(r, when) or {}).get(key) for r in group)
        for label, key in (
            ("zero-adv frac", QAE_ZERO_ADV_FRAC),
            ("all-equal frac", QAE_ALL_EQUAL_FRAC),
            ("hard frac", QAE_HARD_FRAC),
            ("easy frac", QAE_EASY_FRAC),
            ("w_mean_neg", SAAH_W_MEAN_NEG),
        ):
            row[label] = stat(_mean_of(r, key) for r in group)
        row["final entropy"] = stat(_mean_of(r, "entropy", window) for r in group)
        row["train var"] = stat(
            training_variance(r.rows, "reward", window) for r in group if len(series(r, "reward")[1]) > window
        )
        row["group"] = g
        table.append(row)
    return table


def _base_row(row: Mapping, bases: Sequence[Mapping], baseline: str) -> Mapping | None:
    """The baseline row ``row`` is compared with (see :func:`versus_baseline`), or None (it is the baseline)."""
    if "group" not in row:  # a hand-written row: matched by method
        return None if row["method"] == baseline else next(iter(bases), None)
    default = next((b for b in bases if "group" in b and not b["group"].mine), next(iter(bases), None))
    if row is default:
        return None
    comparable = (b for b in bases if b is not row and "group" in b and not differences(row["group"], b["group"]))
    return next(comparable, default)


def seed_difference(row: Mapping, base: Mapping, column: str):
    r"""``column``'s a - b between two rows of :func:`summary_table` with its 95% interval
    (:func:`qae_lab.analysis.claims.difference`): paired where both groups have a value for the same known seeds.

    >>> from qae_lab.analysis.grouping import group_runs
    >>> runs = [Run(f"{m}{s}", m, s, {}, [{"step": 4}], None, None) for m in ("mean", "qae") for s in (0, 1, 2)]
    >>> g = {x.method: x for x in group_runs([], runs)}
    >>> a = {"group": g["qae"], "x": stat([0.62, 0.66, 0.7])}; b = {"group": g["mean"], "x": stat([0.5, 0.55, 0.6])}
    >>> d = seed_difference(a, b, "x"); round(d.diff, 3), round(d.hi - d.lo, 3)  # paired: seed by seed
    (0.11, 0.05)
    """
    a, b = row[column], base[column]
    seeds = row["group"].seeds if "group" in row else None
    paired = (
        seeds is not None
        and "group" in base
        and None not in seeds
        and list(seeds) == list(base["group"].seeds)
        and a.n == b.n == len(seeds)
    )
    return difference(a.values, b.values, paired=paired)


def versus_baseline(table: Sequence[Mapping], column: str, baseline: str = "mean", digits: int = 3) -> list[dict]:
    r"""Per row of :func:`summary_table`, ``column`` and ``- <baseline>``: a - b with its 95% interval
    (:func:`seed_difference`) where one is honest, else why not (the baseline itself, not comparable, one seed).

    A row's baseline is the first row of method ``baseline`` comparable with it (no
    :func:`~qae_lab.analysis.grouping.differences`), else the first reference one; rows without a ``group`` (written
    by hand) are matched by ``method``.

    >>> t = [{"method": "mean", "x": stat([0.5, 0.55, 0.6])}, {"method": "qae", "x": stat([0.62, 0.66, 0.7])}]
    >>> [r["- mean"] for r in versus_baseline(t, "x")]
    ['—', '+0.110 [-0.008, +0.228]']
    """
    check_int(digits, "digits", 0, 12)
    if not isinstance(column, str) or not isinstance(baseline, str):
        raise ValueError(
            f"column and baseline must be a column name and a method name (str), got {column!r}, {baseline!r}"
        )
    bases = [
        row
        for row in table
        if row.get(column) is not None and (row["group"].method if "group" in row else row["method"]) == baseline
    ]
    rows = []
    for row in table:
        s, said = row.get(column), "—"
        base = _base_row(row, bases, baseline) if s is not None else None
        if base is not None:
            b = base[column]
            diffs = differences(row["group"], base["group"]) if "group" in row and "group" in base else []
            if diffs:
                said = f"not compared: {format_differences(diffs, limit=2)}"
            elif min(s.n, b.n) < 2:
                said = "not compared: fewer than two seeds"
            else:
                d = seed_difference(row, base, column)
                said = f"{d.diff:+.{digits}f} [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}]"
        rows.append({"group": row["method"], column: s, "seeds": None if s is None else s.n, f"- {baseline}": said})
    return rows
