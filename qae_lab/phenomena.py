r"""The papers' phenomena in miniature: the committed CPU experiments, and the numbers each claim is judged by.

:data:`EXPERIMENTS` names each experiment of notebook 06: its preset, the ``--set`` overrides all
its runs share, the methods it compares and its seeds. ``benchmarks/phenomena_runs.py`` runs
them (``python -m qae_lab train``) and keeps each run's ``config.json``, ``log.jsonl`` and
``summary.json`` under ``data/reference_runs/phenomena/<experiment>/<method>-seed<S>/``;
notebook 06 reads them back with :func:`qae_lab.compare.load_runs`.

A claim is judged by one number per run (:func:`window_mean`: a metric averaged over a window of
steps), compared between two methods over their seeds by :func:`effect`: the difference of the
seed means, each side's spread (population std, as :mod:`qae_lab.runstats`), a standardised
effect (Cohen's d with the pooled population std) and whether the seed ranges are apart. With
three seeds a side none of this is a significance test; the notebook says "apart" only when every
seed of one method lies beyond every seed of the other.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from pathlib import Path

from qae_lab._checks import check_int
from qae_lab.compare import Run, group_by_method, load_runs
from qae_lab.runstats import Stat, moving_average, stat

__all__ = ["EXPERIMENTS", "PHENOMENA_DIR", "run_names", "load_experiment", "per_method", "window_mean", "peak", "Effect",
           "effect", "describe_effect", "verdict", "k_sweep_rows", "search_row"]

PHENOMENA_DIR = "phenomena"  # under data/reference_runs/

# Each experiment: what it shows, the settings every run shares, the methods compared, the seeds.
# "k_values" (K sweep only): one run per K and seed with --set quantile_k=K.
_STEPS = "max_steps=150"  # 150 steps (lr 1e-4 decaying linearly to 0 over them): ~4-5 minutes on 1 core
EXPERIMENTS: dict[str, dict] = {
    "entropy": {
        "what": "entropy under the mean and the quantile baseline, both with Clip-Higher (sec. 2)",
        # chosen by the search (search.json): hard levels only, a constant lr 4e-4 and two passes over each
        # generation (num_iterations=2, so the ratio leaves 1 and Clip-Higher's range matters)
        "preset": "cpu-demo", "sets": ["max_steps=120", "levels=[4,5]", "learning_rate=4e-4",
                                       "lr_scheduler_type=constant", "num_iterations=2"],
        "methods": ("mean+clip_higher", "qae+clip_higher"), "seeds": (0, 1, 2),
    },
    "composite": {
        "what": "SA-AH's composite reward (r_max 7.5): correct answers with a negative advantage (sec. 3)",
        "preset": "cpu-demo", "sets": ["max_steps=100", "reward=composite", "success_threshold=5.0"],
        "methods": ("mean", "qae"), "seeds": (0, 1, 2),
    },
    "k_sweep": {
        "what": "QAE at K = 0.2 ... 0.8: final entropy, pass@1, pass@8 (sec. 6)",
        "preset": "cpu-demo", "sets": [_STEPS], "methods": ("qae",), "k_values": (0.2, 0.4, 0.6, 0.8), "seeds": (0, 1),
    },
}


def run_names(experiment: str) -> list[tuple[str, str, list[str]]]:
    r"""``(folder, method, sets)`` of every run of an experiment: its folder name, ``--method`` and own ``--set``s.

    >>> run_names("k_sweep")[:2]
    [('qae-k0.2-seed0', 'qae', ['quantile_k=0.2', 'seed=0']), ('qae-k0.4-seed0', 'qae', ['quantile_k=0.4', 'seed=0'])]
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}")
    exp = EXPERIMENTS[experiment]
    out = []
    for seed in exp["seeds"]:
        for method in exp["methods"]:
            for k in exp.get("k_values", (None,)):
                if k is None:
                    out.append((f"{method}-seed{seed}", method, [f"seed={seed}"]))
                else:
                    out.append((f"{method}-k{k}-seed{seed}", method, [f"quantile_k={k}", f"seed={seed}"]))
    return out


def load_experiment(reference_runs: str | Path, experiment: str) -> list[Run]:
    r"""The committed runs of one experiment, from ``<reference_runs>/phenomena/<experiment>/``.

    Args:
        reference_runs: the ``data/reference_runs`` folder (:func:`qae_lab.compare.find_reference_runs`).
        experiment: a name of :data:`EXPERIMENTS`.

    Raises:
        ValueError: an unknown experiment, or a folder without runs (with the command that makes them).

    >>> from qae_lab.compare import find_reference_runs
    >>> sorted({r.method for r in load_experiment(find_reference_runs(), "composite")})
    ['mean', 'qae']
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}")
    folder = Path(reference_runs) / PHENOMENA_DIR / experiment
    if not folder.is_dir():
        raise ValueError(f"{folder} does not exist: make it with python benchmarks/phenomena_runs.py --work <dir> "
                         f"--only {experiment}")
    return load_runs(folder)


def per_method(runs: Sequence[Run], number) -> dict[str, list[float | None]]:
    r"""``{method: [number(run) for each of its runs]}``, methods in the order they first appear.

    >>> from qae_lab.compare import Run
    >>> runs = [Run("a", "qae", 0, {}, [], None, None), Run("b", "qae", 1, {}, [{}], None, None)]
    >>> per_method(runs, lambda r: len(r.rows))
    {'qae': [0, 1]}
    """
    return {method: [number(r) for r in group] for method, group in group_by_method(runs).items()}


def window_mean(rows: Sequence[Mapping], metric: str, start: int = 1, stop: int | None = None) -> float | None:
    r"""Mean of ``metric`` over the log rows with ``start <= step <= stop`` that hold it; None when none does.

    Args:
        rows: training-step rows (:func:`qae_lab.runfolder.step_rows`), each with a ``step``.
        metric: a logged metric (``"entropy"``, ``"qae/neg_correct"``, ...).
        start, stop: the window of steps, inclusive (``stop=None``: to the last step); start >= 1.

    >>> rows = [{"step": s, "entropy": 0.1 * s} for s in range(1, 6)]
    >>> round(window_mean(rows, "entropy", 2, 3), 6), window_mean(rows, "reward")
    (0.25, None)
    """
    start = check_int(start, "start", 1)
    if stop is not None:
        stop = check_int(stop, "stop", start)
    values = [float(r[metric]) for r in rows if r.get(metric) is not None
              and start <= r["step"] and (stop is None or r["step"] <= stop)]
    return statistics.fmean(values) if values else None


def peak(values: Sequence[float], window: int) -> float | None:
    r"""The largest trailing ``window``-value average over the full windows (all values' mean when fewer); None if empty.

    A single noisy value, or the first steps' shorter windows, cannot make the peak.

    >>> peak([0.9, 0.1, 0.1, 0.5, 0.5], 2), peak([0.2, 0.4], 5), peak([], 3)
    (0.5, 0.30000000000000004, None)
    """
    window = check_int(window, "window", 1)
    if not values:
        return None
    averages = moving_average(list(values), window)
    return max(averages[window - 1:]) if len(values) >= window else statistics.fmean(values)


class Effect(NamedTuple):
    r"""Method A against method B over seeds: ``diff`` = mean(A) - mean(B), Cohen's ``d``, and whether apart.

    ``d`` is diff over the pooled population std sqrt((std_A^2 + std_B^2) / 2) (None when both are
    0); ``apart`` is True when every seed of one side lies beyond every seed of the other, None
    with fewer than two seeds on a side.

    >>> e = Effect(stat([0.3, 0.4]), stat([0.1, 0.2]), 0.2, 4.0, True); round(e.diff, 3), e.apart
    (0.2, True)
    """

    a: Stat
    b: Stat
    diff: float
    d: float | None
    apart: bool | None


def effect(a: Sequence[float | None], b: Sequence[float | None]) -> Effect | None:
    r"""The :class:`Effect` of per-seed numbers ``a`` against ``b`` (None entries skipped); None if a side is empty.

    Args:
        a, b: one number per seed of each method (e.g. :func:`window_mean` of each run).

    >>> e = effect([0.30, 0.32, 0.34], [0.20, 0.21, 0.22])
    >>> round(e.diff, 3), round(e.d, 1), e.apart
    (0.11, 8.5, True)
    """
    sa, sb = stat(a), stat(b)
    if sa is None or sb is None:
        return None
    diff = sa.mean - sb.mean
    pooled = math.sqrt((sa.std ** 2 + sb.std ** 2) / 2)
    d = diff / pooled if pooled > 0 else None
    apart = None if sa.n < 2 or sb.n < 2 else (sa.lo > sb.hi or sb.lo > sa.hi)
    return Effect(sa, sb, diff, d, apart)


def describe_effect(name_a: str, name_b: str, what: str, e: Effect | None, digits: int = 3) -> str:
    r"""One sentence for a claim: both sides as mean ± seed std, the difference, d, and whether the seeds are apart.

    >>> print(describe_effect("mean+clip_higher", "qae+clip_higher", "entropy", effect([0.3, 0.32], [0.2, 0.21])))
    entropy: mean+clip_higher 0.310±0.010 vs qae+clip_higher 0.205±0.005 (2 and 2 seeds): difference +0.105, d = 13.3; every seed apart
    """
    if e is None:
        return f"{what}: no runs to compare"
    fmt = f"{{:.{digits}f}}"
    d = "d undefined (no spread)" if e.d is None else f"d = {e.d:.1f}"
    apart = {True: "every seed apart", False: "the seed ranges overlap", None: "too few seeds to say"}[e.apart]
    return (f"{what}: {name_a} {fmt.format(e.a.mean)}±{fmt.format(e.a.std)} vs {name_b} {fmt.format(e.b.mean)}±"
            f"{fmt.format(e.b.std)} ({e.a.n} and {e.b.n} seeds): difference {e.diff:+.{digits}f}, {d}; {apart}")


def verdict(e: Effect | None, claim: str) -> str:
    r"""Whether an :class:`Effect` of A against B bears out the claim "A > B" in plain words.

    "holds" when mean(A) > mean(B) and every seed is apart; "contradicted" when mean(A) < mean(B)
    and every seed is apart; otherwise "not shown" (the seed ranges overlap, or too few seeds).

    >>> verdict(effect([0.3, 0.32], [0.2, 0.21]), "mean's entropy above QAE's")
    "mean's entropy above QAE's: holds (every seed apart)"
    >>> verdict(effect([0.1, 0.12], [0.2, 0.21]), "mean's entropy above QAE's")
    "mean's entropy above QAE's: contradicted (the other way round, every seed apart)"
    """
    if e is None or e.apart is None:
        return f"{claim}: not shown (too few seeds to say)"
    if not e.apart:
        return f"{claim}: not shown (the seed ranges overlap)"
    return f"{claim}: " + ("holds (every seed apart)" if e.diff > 0 else
                           "contradicted (the other way round, every seed apart)")


def k_sweep_rows(runs: Sequence[Run], last: int = 20) -> list[dict]:
    r"""One row per K of a K sweep: ``k``, ``seeds`` and a :class:`~qae_lab.runstats.Stat` over seeds of the
    final entropy (mean of the last ``last`` steps) and of sampled pass@1 and pass@8 after training.

    Args:
        runs: runs that differ in ``quantile_k`` (their ``config.json``'s trainer settings).
        last: steps averaged for the final entropy, >= 1.

    >>> from qae_lab.compare import Run
    >>> run = lambda k, e: Run("r", "qae", 0, {"trainer": {"quantile_k": k}}, [{"step": 1, "entropy": e}], None,
    ...                        {"pass@1": 0.5, "pass@8": 0.9})
    >>> rows = k_sweep_rows([run(0.6, 0.02), run(0.2, 0.01)])
    >>> [(r["k"], round(r["final entropy"].mean, 3), r["pass@8"].mean) for r in rows]
    [(0.2, 0.01, 0.9), (0.6, 0.02, 0.9)]
    """
    last = check_int(last, "last", 1)
    by_k: dict[float, list[Run]] = {}
    for r in runs:
        by_k.setdefault(float(r.config["trainer"]["quantile_k"]), []).append(r)
    rows = []
    for k in sorted(by_k):
        group = by_k[k]
        final = [window_mean(r.rows, "entropy", max(1, r.rows[-1]["step"] - last + 1)) if r.rows else None
                 for r in group]
        rows.append({"k": k, "seeds": len(group), "final entropy": stat(final),
                     "pass@1": stat((r.after or {}).get("pass@1") for r in group),
                     "pass@8": stat((r.after or {}).get("pass@8") for r in group)})
    return rows


_SEARCH_HIDDEN = ("sparse_update=false", "disable_tqdm=true", "save_model=false", "evaluate=false", "torch_threads=1")


def search_row(run: Run) -> dict:
    r"""What notebook 06's "settings tried" table keeps of an exploratory run: its settings and entropy/reward figures.

    ``sets`` are the run's ``--method`` and ``--set`` overrides (from ``config.json``'s ``run.build``),
    without the bookkeeping ones; entropy and reward are means over the first and last 20% of the
    steps that log them, and the peak of a 10-row trailing average of the entropy (:func:`peak`).

    >>> from qae_lab.compare import Run
    >>> rows = [{"step": s, "entropy": 0.1 if s < 6 else 0.3, "reward": 0.5} for s in range(1, 11)]
    >>> r = search_row(Run("x", "mean", 0, {"run": {"build": {"method": None, "sets": ["learning_rate=1e-3"]}}},
    ...                    rows, None, None))
    >>> r["sets"], round(r["entropy_first"], 3), round(r["entropy_last"], 3), round(r["entropy_peak"], 3)
    (['learning_rate=1e-3'], 0.1, 0.3, 0.2)
    """
    build = (run.config.get("run") or {}).get("build") or {}
    sets = ([f"--method {build['method']}"] if build.get("method") else []) + [
        s for s in build.get("sets", []) if s not in _SEARCH_HIDDEN]

    def ends(metric: str) -> tuple[float | None, float | None, list[float]]:
        xs = [float(r[metric]) for r in run.rows if r.get(metric) is not None]
        q = max(len(xs) // 5, 1)
        return (statistics.fmean(xs[:q]) if xs else None, statistics.fmean(xs[-q:]) if xs else None, xs)

    e_first, e_last, e = ends("entropy")
    r_first, r_last, _ = ends("reward")
    return {"name": run.name, "sets": sets, "steps": run.rows[-1]["step"] if run.rows else 0,
            "entropy_first": e_first, "entropy_last": e_last, "entropy_peak": peak(e, 10),
            "reward_first": r_first, "reward_last": r_last}
