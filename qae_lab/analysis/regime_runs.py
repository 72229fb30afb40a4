r"""QAE's Prop. 4.2 in committed runs: the held-out groups' entropy under the mean and the quantile baseline.

The runs log ``regime_eval/*`` (:mod:`qae_lab.train.regime_eval`): a fixed held-out prompt set, grouped once by the
start model's success rate into its hardest and easiest quarter, measured before step 1 and every few steps. QAE
(arXiv 2509.22611), Prop. 4.2, for one softmax step on one prompt: on a hard prompt (p <= 1-K) the quantile
baseline's entropy change is at most the mean baseline's (no explosion), on an easy one (p > 1-K) at least (no
collapse). Here, per run and group:

* :func:`regime_curve`: the measurements against the number of updates before each (row S: S - 1 updates);
* :func:`regime_curves`: those over seeds, per method (the figure's lines);
* :func:`regime_numbers`: the start value, the peak, the final value and their ratios to the start;
* :func:`regime_table`: those over seeds, per method and group (mean, population std, range:
  :class:`qae_lab.analysis.stats.Stat`);
* :func:`seeds_agreeing`: in how many seeds one method's number lies below the other's, run against run of the
  same seed (the same split and start values: :mod:`qae_lab.train.regime_eval` seeds both);
* :func:`regime_sentences`: the sentences that state what shows and what does not, generated from the runs.

What the proposition predicts is a direction per group: on hard prompts the quantile baseline's entropy change at
most the mean's (its no-explosion side: judged on the peak/start ratio when the mean baseline explodes, its peak at
least :data:`ROSE` x its start in some seed, as the claims scoreboard's ``rose`` check asks; and on the final/start
ratio, the net change, always); on easy prompts at least the mean's (no collapse: final/start). A sentence says
"holds" when every seed pairs strictly that way, "reversed" when every seed pairs strictly the other way, "not
shown" otherwise (the seeds split, or tie), and "not tested here" when there was no explosion (hard) or no fall
(easy) to prevent, with the difference of the means in units of the pooled seed spread (Cohen's d,
:func:`qae_lab.analysis.phenomena.effect`). Three seeds are no significance test.

Pure Python on :class:`qae_lab.analysis.compare.Run` objects: no torch, no plotting (the figure:
:func:`qae_lab.lab.run_figures.regime_figure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from qae_lab.analysis.compare import Curve, Run, group_by_method, series
from qae_lab.methods import ENTROPY_EASY, ENTROPY_HARD, REGIME_GROUPS, regime_eval_metric
from qae_lab.analysis.phenomena import clipped_fraction, effect, window_mean
from qae_lab.analysis.stats import Stat, stat

__all__ = [
    "GROUP_WORDS",
    "regime_curve",
    "regime_curves",
    "regime_numbers",
    "regime_table",
    "Agreement",
    "seeds_agreeing",
    "training_split",
    "regime_sentences",
    "format_regime_table",
]

ROSE = 1.1  # an explosion: a peak at least 1.1x the start in some seed (the claims scoreboard's rose check: the same)
# a group's name in the sentences and the figure: the held-out set's "all" is the mixed one
GROUP_WORDS = {"hard": "hard", "easy": "easy", "all": "mixed"}
_NUMBERS = ("start", "peak/start", "final", "final/start")


def regime_curve(run: Run, group: str, quantity: str = "entropy") -> tuple[list[int], list[float]]:
    r"""(updates, values) of a run's held-out ``group`` (one of :data:`qae_lab.methods.REGIME_GROUPS`):
    ``regime_eval/<quantity>_<group>`` against the number of updates the measured policy had (row S: S - 1).

    >>> run = Run("r", "qae", 0, {}, [{"step": 1, "regime_eval/entropy_hard": 0.2}, {"step": 2},
    ...                               {"step": 11, "regime_eval/entropy_hard": 0.3}], None, None)
    >>> regime_curve(run, "hard")
    ([0, 10], [0.2, 0.3])
    """
    steps, values = series(run, regime_eval_metric(quantity, group))
    return [s - 1 for s in steps], values


def regime_curves(runs: Sequence[Run], group: str, quantity: str = "entropy") -> dict[str, Curve]:
    r"""Per method, the held-out ``group``'s measurements over seeds: a :class:`qae_lab.analysis.compare.Curve` against the
    number of updates (mean, population std and range at each measurement every run of the method made).

    >>> runs = [Run(f"r{s}", "qae", s, {}, [{"step": 1, "regime_eval/entropy_all": 0.2 + 0.1 * s}], None, None)
    ...         for s in (0, 1)]
    >>> c = regime_curves(runs, "all")["qae"]; c.steps, [round(v, 3) for v in c.mean + c.std], c.n_runs
    ([0], [0.25, 0.05], 2)
    """
    out = {}
    for method, group_runs in group_by_method(runs).items():
        points = [dict(zip(*regime_curve(r, group, quantity))) for r in group_runs]
        points = [p for p in points if p]
        common = sorted(set.intersection(*(set(p) for p in points))) if points else []
        if common:
            stats = [stat(p[x] for p in points) for x in common]
            out[method] = Curve(
                common,
                [s.mean for s in stats],
                [s.std for s in stats],
                [s.lo for s in stats],
                [s.hi for s in stats],
                len(points),
            )
    return out


def regime_numbers(run: Run, group: str, quantity: str = "entropy") -> dict[str, float | None] | None:
    r"""A run's held-out ``group``: ``start`` (the measurement before any update), ``peak`` (the largest),
    ``final`` (the last), ``peak/start`` and ``final/start`` (None when the start is 0); None when the run has
    no measurement before its first update.

    >>> run = Run("r", "qae", 0, {}, [{"step": s, "regime_eval/entropy_easy": v} for s, v in ((1, 0.2), (5, 0.3),
    ...                                                                                     (9, 0.1))], None, None)
    >>> {k: round(v, 3) for k, v in regime_numbers(run, "easy").items()}
    {'start': 0.2, 'peak': 0.3, 'final': 0.1, 'peak/start': 1.5, 'final/start': 0.5}
    """
    x, y = regime_curve(run, group, quantity)
    if not x or x[0] != 0:
        return None
    start, peak, final = y[0], max(y), y[-1]
    return {
        "start": start,
        "peak": peak,
        "final": final,
        "peak/start": peak / start if start else None,
        "final/start": final / start if start else None,
    }


def regime_table(runs: Sequence[Run], quantity: str = "entropy") -> list[dict]:
    r"""Per method (in the order they first appear) and group (hard, easy, mixed): ``seeds`` and a
    :class:`~qae_lab.analysis.stats.Stat` over seeds of each of start, peak/start, final and final/start.

    >>> runs = [Run(f"r{s}", "mean", s, {}, [{"step": 1, "regime_eval/entropy_hard": 0.2},
    ...                                      {"step": 3, "regime_eval/entropy_hard": 0.2 + 0.1 * s}], None, None)
    ...         for s in (1, 2)]
    >>> row = regime_table(runs)[0]
    >>> row["method"], row["group"], row["seeds"], round(row["peak/start"].mean, 3), round(row["final"].std, 3)
    ('mean', 'hard', 2, 1.75, 0.05)
    """
    rows = []
    for method, group_runs in group_by_method(runs).items():
        for group in REGIME_GROUPS:
            numbers = [n for n in (regime_numbers(r, group, quantity) for r in group_runs) if n is not None]
            if numbers:
                rows.append(
                    {
                        "method": method,
                        "group": GROUP_WORDS[group],
                        "seeds": len(numbers),
                        **{key: stat(n[key] for n in numbers) for key in _NUMBERS},
                    }
                )
    return rows


def _by_seed(runs: Sequence[Run], method: str) -> dict[int, Run]:
    return {r.seed: r for r in runs if r.method == method}


class Agreement(NamedTuple):
    r"""Seed by seed, method A's number against method B's (same seed): ``below`` seeds where A's is lower,
    ``above`` where it is higher, of ``n`` seeds both ran (the rest are ties)."""

    below: int
    above: int
    n: int


def seeds_agreeing(runs: Sequence[Run], a: str, b: str, group: str, key: str, quantity: str = "entropy") -> Agreement:
    r"""In how many seeds method ``a``'s ``key`` (of :func:`regime_numbers`) lies below / above method ``b``'s, run
    against run of the same seed (the same split and start values); ties count in neither.

    >>> mk = lambda m, s, v: Run(f"{m}{s}", m, s, {}, [{"step": 1, "regime_eval/entropy_all": 1.0},
    ...                                                {"step": 9, "regime_eval/entropy_all": v}], None, None)
    >>> runs = [mk("qae", 0, 1.1), mk("mean", 0, 1.2), mk("qae", 1, 1.3), mk("mean", 1, 1.2), mk("qae", 2, 1.0)]
    >>> seeds_agreeing(runs, "qae", "mean", "all", "peak/start")
    Agreement(below=1, above=1, n=2)
    """
    by_a, by_b = _by_seed(runs, a), _by_seed(runs, b)
    pairs = [
        (regime_numbers(by_a[s], group, quantity), regime_numbers(by_b[s], group, quantity))
        for s in sorted(by_a.keys() & by_b.keys())
    ]
    pairs = [
        (x[key], y[key])
        for x, y in pairs
        if x is not None and y is not None and x[key] is not None and y[key] is not None
    ]
    return Agreement(sum(x < y for x, y in pairs), sum(x > y for x, y in pairs), len(pairs))


def training_split(run: Run, last: float = 0.2) -> dict[str, float | None]:
    r"""The training batches' own regime split: ``entropy/hard`` and ``entropy/easy`` (each response's regime at
    the K in force) averaged over the first and the last ``last`` share of the steps.

    >>> rows = [{"step": s, "entropy/hard": 0.1 * s, "entropy/easy": 0.2} for s in range(1, 11)]
    >>> {k: round(v, 3) for k, v in training_split(Run("r", "qae", 0, {}, rows, None, None)).items()}
    {'hard_first': 0.15, 'hard_last': 0.95, 'easy_first': 0.2, 'easy_last': 0.2}
    """
    if not 0.0 < last <= 1.0:
        raise ValueError(f"last must lie in (0, 1], got {last}")
    steps = [r["step"] for r in run.rows]
    if not steps:
        return {f"{g}_{w}": None for g in ("hard", "easy") for w in ("first", "last")}
    n = max(1, round(last * (steps[-1] - steps[0] + 1)))
    out = {}
    for group, metric in (("hard", ENTROPY_HARD), ("easy", ENTROPY_EASY)):
        out[f"{group}_first"] = window_mean(run.rows, metric, steps[0], steps[0] + n - 1)
        out[f"{group}_last"] = window_mean(run.rows, metric, steps[-1] - n + 1)
    return out


def _pm(s: Stat | None) -> str:
    return "—" if s is None else f"{s.mean:.3f} ± {s.std:.3f}"


def _verdict(agree: Agreement) -> str:
    """The seeds' verdict on a predicted direction (``below``: as predicted): holds (every seed), reversed (every seed
    the other way), not shown (the seeds split, or tie)."""
    if agree.n == 0:
        return "not measured"
    return "holds" if agree.below == agree.n else "reversed" if agree.above == agree.n else "not shown"


def _seeds(agree: Agreement, word: str) -> str:
    ties = agree.n - agree.below - agree.above
    return f"{word} in {agree.below} of {agree.n} seeds" + (f", equal in {ties}" if ties else "")


def _spread_units(a: Sequence[float | None], b: Sequence[float | None]) -> str:
    e = effect(a, b)
    if e is None or e.d is None:
        return "no seed spread to measure it in"
    return f"{abs(e.d):.1f} seed spreads apart" if e.apart else f"{abs(e.d):.1f} seed spreads, the seed ranges overlap"


def _numbers(runs: Sequence[Run], method: str, group: str, key: str, quantity: str = "entropy") -> list[float | None]:
    return [(regime_numbers(r, group, quantity) or {}).get(key) for r in runs if r.method == method]


def _start_success(runs: Sequence[Run], group: str) -> Stat | None:
    return stat((regime_numbers(r, group, "success") or {}).get("start") for r in runs)


def regime_sentences(runs: Sequence[Run], mean_method: str, quantile_method: str) -> list[str]:
    r"""Five sentences on what the held-out groups show under the two methods, every number from ``runs``.

    1. hard group: peak/start entropy (Prop. 4.2: no explosion, when the mean baseline explodes) and final/start
       (the net change), lower under the quantile baseline in k of n seeds;
    2. easy group: final/start entropy, higher under the quantile baseline in k of n seeds (Prop. 4.2: no collapse);
    3. the mixed (whole) set: peak/start and final/start, and how far apart the two methods are;
    4. the training batches' own split (``entropy/hard``, ``entropy/easy`` over the last fifth of the steps);
    5. success on the hard and easy groups, start and final, and Clip-Higher's clipped share of tokens.

    Args:
        runs: runs of both methods (others are ignored), one per seed, logging ``regime_eval/*``.
        mean_method, quantile_method: the two methods' names (e.g. ``"mean+clip_higher"``, ``"qae+clip_higher"``).
    """
    runs = [r for r in runs if r.method in (mean_method, quantile_method)]
    if not any(r.method == mean_method for r in runs) or not any(r.method == quantile_method for r in runs):
        raise ValueError(f"runs must hold both {mean_method!r} and {quantile_method!r}")
    m, q = mean_method, quantile_method

    def side(group: str, key: str) -> tuple[str, list, list]:
        a, b = _numbers(runs, m, group, key), _numbers(runs, q, group, key)
        return f"mean baseline ({m}) {_pm(stat(a))}, quantile ({q}) {_pm(stat(b))}", a, b

    def start_words(group: str) -> str:
        return f"start success {_pm(_start_success(runs, group))}"

    said, a, b = side("hard", "peak/start")
    rose = max((x for x in a if x is not None), default=1.0)
    if rose >= ROSE:  # a control that explodes: the no-explosion side can be judged on the peaks
        agree = seeds_agreeing(runs, q, m, "hard", "peak/start")  # below: the quantile's peak lower, as predicted
        peak_words = (
            f"{_seeds(agree, 'lower under the quantile baseline')} ({_spread_units(b, a)}): "
            f"Prop. 4.2's no-explosion side {_verdict(agree)} here"
        )
    else:
        peak_words = (
            f"the mean baseline's entropy rose at most {rose:.3f}x its start in any seed, below the {ROSE}x "
            f"of an explosion: there was no explosion to prevent, so Prop. 4.2's no-explosion side is not "
            f"tested here"
        )
    said_final, a, b = side("hard", "final/start")
    agree = seeds_agreeing(runs, q, m, "hard", "final/start")  # below: the quantile's change lower, as predicted
    hard = (
        f"Hard prompts (the hardest quarter at the start, {start_words('hard')}): entropy peak/start {said}; "
        f"{peak_words}. Their entropy final/start {said_final}: "
        f"{_seeds(agree, 'lower under the quantile baseline')} ({_spread_units(b, a)}): Prop. 4.2's direction on "
        f"hard prompts (an entropy change at most the mean baseline's) {_verdict(agree)} here."
    )
    said, a, b = side("easy", "final/start")
    agree = seeds_agreeing(runs, m, q, "easy", "final/start")  # below: the mean's final lower, the quantile's higher
    verdict = f"Prop. 4.2's no-collapse side {_verdict(agree)} here"
    if all(x is not None and x >= 1.0 for x in a):
        verdict = (
            "the mean baseline's entropy never fell below its start in any seed, so there was no collapse to "
            "prevent: Prop. 4.2's no-collapse side is not tested here"
        )
    easy = (
        f"Easy prompts (the easiest quarter at the start, {start_words('easy')}): entropy final/start {said}; "
        f"{_seeds(agree, 'higher under the quantile baseline')} ({_spread_units(b, a)}): {verdict}."
    )
    said_peak, a, b = side("all", "peak/start")
    said_final, a2, b2 = side("all", "final/start")
    agree = seeds_agreeing(runs, q, m, "all", "final/start")
    mixed = (
        f"All held-out prompts mixed: entropy peak/start {said_peak}; final/start {said_final} "
        f"({_seeds(agree, 'lower under the quantile baseline')}, {_spread_units(b2, a2)})."
    )
    split = {meth: [training_split(r) for r in runs if r.method == meth] for meth in (m, q)}
    parts = [
        f"{'mean baseline' if meth == m else 'quantile'} hard {_pm(stat(s['hard_last'] for s in rows))}, "
        f"easy {_pm(stat(s['easy_last'] for s in rows))}"
        for meth, rows in split.items()
    ]
    training = (
        "In the training batches, each response split by its regime at the K in force that step, the last "
        f"fifth of the steps' token entropy: {'; '.join(parts)}."
    )
    success = {
        meth: {
            g: stat((regime_numbers(r, g, "success") or {}).get("final") for r in runs if r.method == meth)
            for g in ("hard", "easy")
        }
        for meth in (m, q)
    }
    clipped = {
        meth: [stat(clipped_fraction(r, side) for r in runs if r.method == meth) for side in ("region", "high")]
        for meth in (m, q)
    }
    clip_words = ", ".join(
        f"{meth} {_percent(clipped[meth][0])} (at the upper end, Clip-Higher's, {_percent(clipped[meth][1])})"
        for meth in (m, q)
    )
    outcome = (
        f"Success rate, start -> final: hard group {_pm(_start_success(runs, 'hard'))} -> mean baseline "
        f"{_pm(success[m]['hard'])}, quantile {_pm(success[q]['hard'])}; easy group "
        f"{_pm(_start_success(runs, 'easy'))} -> {_pm(success[m]['easy'])} and {_pm(success[q]['easy'])}. "
        f"PPO's clip stopped {clip_words} of the tokens on the steps that reuse a generation."
    )
    return [hard, easy, mixed, training, outcome]


def _percent(s: Stat | None) -> str:
    return "—" if s is None else f"{100 * s.mean:.2f}% ± {100 * s.std:.2f}%"


def format_regime_table(rows: Sequence[Mapping]) -> str:
    r"""A text table of :func:`regime_table` rows: method, group, seeds, then each number as mean ± std.

    >>> print(format_regime_table([{"method": "qae", "group": "hard", "seeds": 3, "start": stat([0.2]),
    ...                             "peak/start": stat([1.1]), "final": stat([0.21]), "final/start": stat([1.05])}]))
    method  group  seeds          start     peak/start          final    final/start
    qae     hard       3  0.200 ± 0.000  1.100 ± 0.000  0.210 ± 0.000  1.050 ± 0.000
    """
    head = ["method", "group", "seeds", *_NUMBERS]
    cells = [[str(r["method"]), str(r["group"]), str(r["seeds"]), *(_pm(r[k]) for k in _NUMBERS)] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head)]
    lines = []
    for row in [head, *cells]:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(line.rstrip() for line in lines)
