r"""The papers' phenomena in miniature: the committed CPU experiments, and the numbers each claim is judged by.

:data:`EXPERIMENTS` names each experiment of notebook 06: its preset, the ``--set`` overrides all
its runs share, the methods it compares and its seeds. ``benchmarks/phenomena_runs.py`` runs
them (``python -m qae_lab train``) and keeps each run's ``config.json``, ``log.jsonl`` and
``summary.json`` under ``data/reference_runs/phenomena/<experiment>/<method>-seed<S>/``;
notebook 06 reads them back with :func:`qae_lab.analysis.compare.load_runs`. The numbers of a run are means over a
window of steps (:func:`window_mean`); the claims are judged on them by :mod:`qae_lab.analysis.evidence`.
"""

from __future__ import annotations

import re
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from qae_lab._checks import check_int
from qae_lab.analysis.committed_data import load_json
from qae_lab.analysis.compare import Run, find_reference_runs, group_by_method, load_runs
from qae_lab.metric_names import (
    DYNAMIC_SAMPLING_GENERATIONS,
    DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL,
    QAE_EASY_FRAC,
)
from qae_lab.analysis.stats import Stat, moving_average, stat, within_spread

__all__ = [
    "EXPERIMENTS",
    "BASE_SETS",
    "SEARCH",
    "SEARCH_SEED",
    "REGIME_SEARCH",
    "REGIME_SETS",
    "SEARCHES",
    "PHENOMENON_SEARCH",
    "PHENOMENON_CHOSEN",
    "PHENOMENON_SETS",
    "PHENOMENA_DIR",
    "load_search",
    "run_names",
    "load_experiment",
    "window_mean",
    "peak",
    "START",
    "ROSE",
    "FELL",
    "entropy_ratio",
    "k_sweep_rows",
    "dynamic_sampling_rows",
    "pass_at_k_table",
    "clipped_fraction",
    "clipped_share",
    "SHARPENING",
    "sharpening_rows",
    "sharpening_line",
    "search_row",
    "search_table",
    "setting_of",
    "choose_setting",
    "search_rows",
]

PHENOMENA_DIR = "phenomena"  # under data/reference_runs/


def _sets(steps: int, lr: str, *middle: str, after: tuple[str, ...] = ()) -> list[str]:
    """``--set`` overrides of cpu-sums: ``max_steps``, ``middle``, a constant learning rate ``lr``, then ``after``."""
    return [f"max_steps={steps}", *middle, f"learning_rate={lr}", "lr_scheduler_type=constant", *after]


def _dapo(steps: int, batch: int, per_generation: int, lr: str, every: int, *after: str) -> list[str]:
    """DAPO's regime: ``per_generation`` optimizer steps per generation, a held-out regime evaluation every ``every``."""
    middle = (f"per_device_train_batch_size={batch}", f"steps_per_generation={per_generation}")
    return _sets(steps, lr, *middle, after=(f"regime_eval_steps={every}", "regime_eval_samples=4", *after))


# What every run of the experiments shares beyond the cpu-sums preset, chosen by the search (SEARCH, search.json):
# 60 generations, each trained on twice (so that the ratio leaves 1 and Clip-Higher's range can matter), lr 5e-5
# held constant, the one setting tried where pass@1 rose (mean+clip_higher 0.436 -> 0.512); at 1e-4 and 3e-4 both
# methods unlearned (the tiny model's arithmetic breaks), and clipping stayed rare everywhere (<= 0.7% of tokens).
BASE_SETS = _sets(120, "5e-5", "num_iterations=2")


def _experiment(what: str, methods: tuple[str, ...], sets=BASE_SETS, seeds=(0, 1, 2), **more) -> dict:
    """One experiment of cpu-sums: what it shows, the ``--set``s its runs share, the methods compared, the seeds."""
    return {"what": what, "preset": "cpu-sums", "sets": list(sets), "methods": methods, "seeds": seeds, **more}


# The seeds are fresh (the search used SEARCH_SEED only). "k_values" (K sweep only): one run per K and seed with
# --set quantile_k=K; "with": another experiment's runs it shares.
EXPERIMENTS: dict[str, dict] = {
    "entropy": _experiment(
        "entropy, its ledger, diversity and pass@k under the mean and the quantile baseline, with and without "
        "Clip-Higher (QAE, sec. 2)",
        ("mean", "qae", "mean+clip_higher", "qae+clip_higher"),
    ),
    "composite": _experiment(
        "SA-AH's composite reward (r_max 7.5): correct answers with a negative advantage, SA-AH's training variance, "
        "length and weights (sec. 3)",
        ("mean", "qae", "sa_ah"),
        [*BASE_SETS, "reward=composite", "success_threshold=5.0"],
    ),
    "k_sweep": _experiment(
        "QAE at K = 0.2 ... 0.8: entropy, regimes, pass@1 and pass@32 (sec. 2); K = 0.4 is the entropy experiment's "
        "qae runs (the same settings)",
        ("qae",),
        k_values=(0.2, 0.6, 0.8),
    )
    | {"with": ("entropy", "qae")},
    "dynamic_sampling": _experiment(
        "QAE with and without DAPO's dynamic sampling (DAPO, sec. 3.2): groups dropped, generations spent, pass@k "
        "and entropy; seeds no other experiment and no search used",
        ("qae", "qae+dynamic_sampling"),
        seeds=(3, 4, 5),
    ),
}

# The search that chose BASE_SETS, on one seed the reported runs never use: each entry a name, a method and the
# --set overrides of cpu-sums it tried (benchmarks/phenomena_runs.py --search-run; summary: search.json).
SEARCH_SEED = 100
SEARCH: tuple[tuple[str, str, list[str]], ...] = tuple(
    (f"{tag}-{method}", method, sets)
    for tag, sets in (  # 60 generations of 8 prompts x 8 each: two or four passes over each, or four mini-batches
        # lr 3e-4 came first: both methods unlearned (pass@1 0.44 -> 0.23 / 0.17), so the rest try smaller steps
        ("iter2-lr3e-4", _sets(120, "3e-4", "num_iterations=2")),
        ("iter2-lr1e-4", _sets(120, "1e-4", "num_iterations=2")),
        ("iter2-lr5e-5", _sets(120, "5e-5", "num_iterations=2")),
        ("iter4-lr5e-5", _sets(240, "5e-5", "num_iterations=4")),
        ("mini4-lr5e-5", _sets(240, "5e-5", "per_device_train_batch_size=16", "steps_per_generation=4")),
    )
    for method in ("mean+clip_higher", "qae+clip_higher")
)

# The search of the regimes experiment, on SEARCH_SEED too: DAPO's regime, one generation of 8 prompts x 8 feeding
# 8 or 16 optimizer steps (TRL shuffles the generation and slices it into mini-batches), so the ratio leaves 1 and
# Clip-Higher's range can act; a held-out regime evaluation nine times per run (64 prompts x 4 samples); pass@1 from
# 8 samples per problem instead of the preset's 32 (the search's CPU time went to training).
REGIME_SEARCH: tuple[tuple[str, str, list[str]], ...] = tuple(
    (f"{tag}-{method}", method, sets)
    for tag, sets in (
        ("spg8-lr2e-5", _dapo(480, 8, 8, "2e-5", 60, "eval_samples=8")),
        ("spg8-lr5e-5", _dapo(480, 8, 8, "5e-5", 60, "eval_samples=8")),
        # the two above clipped 0.01% and 0.1% of the tokens (mean baseline): sixteen steps per generation next
        ("spg16-lr5e-5", _dapo(960, 4, 16, "5e-5", 120, "eval_samples=8")),
    )
    for method in ("mean+clip_higher", "qae+clip_higher")
)
# What the regimes experiment's runs share, chosen by REGIME_SEARCH (search_regimes.json): of the tries, the one
# that clipped the most tokens while neither method's pass@1 fell below the start model's: 8 steps per generation at
# lr 5e-5 clipped 0.12% (mean) and 0.03% (qae) of the tokens, pass@1 0.440 -> 0.447 and 0.469; 16 steps clipped 0.36%
# and 0.08% but qae fell to 0.395; lr 2e-5 clipped 0.01% and 0.00%. The reported runs evaluate with 32 samples.
REGIME_SETS = _dapo(480, 8, 8, "5e-5", 60)
EXPERIMENTS["regimes"] = _experiment(
    "QAE's Prop. 4.2 by the regime a prompt starts in: a held-out set's hardest and easiest quarter at the start, "
    "their entropy and success under the mean and the quantile baseline, with Clip-Higher in DAPO's regime of several "
    "optimizer steps per generation (sec. 4)",
    ("mean+clip_higher", "qae+clip_higher"),
    REGIME_SETS,
)


def _trains_like_dapo(*more: str, gens: int = 60, per_generation: int = 4, lr: str = "1e-4") -> list[str]:
    """DAPO's way of training (DAPO, sec. 3): token-level loss, ``per_generation`` optimizer steps per generation of
    64 completions, lr held constant, ``gens`` generations; entropy only (no pass@k evaluation), then ``more``."""
    return [
        f"max_steps={gens * per_generation}",
        f"per_device_train_batch_size={64 // per_generation}",
        f"steps_per_generation={per_generation}",
        f"learning_rate={lr}",
        "lr_scheduler_type=constant",
        "loss_type=dapo",
        "evaluate=false",
        *more,
    ]


# The search for the papers' entropy phenomenon in a transformer (the control, the mean baseline, first): a setting in
# which its entropy explodes (peak >= ROSE x start) or collapses (final <= FELL x start). From DAPO's way of
# training (the base: Clip-Higher 0.28, token-level loss, 4 optimizer steps per generation, lr 1e-4, all five
# levels, 8 samples per prompt, temperature 1) one axis at a time; why each could matter (docs/notebook-notes.md, 06):
#   levels     QAE Prop. 4.2: the mean baseline raises entropy on hard prompts (p <= 1-K), lowers it on easy ones
#   lr         each step's entropy change is first order in the step size (QAE sec. 4, Cui et al.'s covariance)
#   eps_high   Clip-Higher lets a rare token's probability grow further (DAPO sec. 3.1): QAE's fig. 1 explodes with it
#   clip 0.2   without Clip-Higher DAPO's entropy collapses (DAPO fig. 2)
#   grpo       sequence-level loss: a long response's tokens weigh less (DAPO sec. 3.3)
#   spg16      16 optimizer steps per generation: the ratio leaves 1 further and the clip acts (DAPO, PPO's reuse)
#   T 1.5      sampling rarer tokens: rewarded ones gain probability (the covariance's low-probability side)
#   G 16       more samples per prompt: a hard prompt's rare success is drawn more often (QAE sec. 4's p)
#   embedded   the other shipped model (synthetic arithmetic, one derivation per prompt: little entropy to lose)
PHENOMENON_SEARCH: tuple[tuple[str, str, list[str]], ...] = (
    ("base", "mean+clip_higher", _trains_like_dapo()),
    ("hard45", "mean+clip_higher", _trains_like_dapo("levels=[4,5]")),
    ("hard5", "mean+clip_higher", _trains_like_dapo("levels=[5]")),
    ("easy12", "mean+clip_higher", _trains_like_dapo("levels=[1,2]")),
    ("lr3e-4", "mean+clip_higher", _trains_like_dapo(lr="3e-4")),
    ("eps-high0.5", "mean+clip_higher", _trains_like_dapo("epsilon_high=0.5")),
    ("clip0.2", "mean", _trains_like_dapo("epsilon=0.2", "epsilon_high=0.2")),
    ("grpo-loss", "mean+clip_higher", _trains_like_dapo("loss_type=grpo")),
    ("spg16", "mean+clip_higher", _trains_like_dapo(per_generation=16)),
    ("temp1.5", "mean+clip_higher", _trains_like_dapo("temperature=1.5")),
    ("group16", "mean+clip_higher", _trains_like_dapo("num_generations=16")),
    (
        "embedded",
        "mean+clip_higher",
        _trains_like_dapo("model=embedded", "task=synthetic", "levels=[2,3,4,5]", "max_completion_length=48"),
    ),
    # the first twelve: only lr 3e-4 rose past 1.1x (peak/start 1.20, from step ~150, as the reward fell to 0);
    # so lr 3e-4 on two more search seeds, and lr 2e-4 (between it and the base) on three
    *(
        (f"lr{lr}{tag}", "mean+clip_higher", _trains_like_dapo(*seed, lr=lr))
        for lr in ("3e-4", "2e-4")
        for tag, seed in (("", ()), ("-seed101", ("seed=101",)), ("-seed102", ("seed=102",)))
        if (lr, tag) != ("3e-4", "")
    ),
)

# each search: its tries and the file under data/reference_runs/phenomena/ that summarises them
SEARCHES: dict[str, tuple[tuple[tuple[str, str, list[str]], ...], str]] = {
    "entropy": (SEARCH, "search.json"),
    "regimes": (REGIME_SEARCH, "search_regimes.json"),
    "phenomenon": (PHENOMENON_SEARCH, "search_phenomenon.json"),
}

# The setting PHENOMENON_SEARCH chose by choose_setting's rule (benchmarks/phenomena_runs.py --choose; the test holds
# the committed search_phenomenon.json to it); its test: mean against quantile baseline on eight seeds no search used,
# with a held-out regime evaluation every 60 steps and pass@1 / pass@8 before and after (8 samples a problem)
PHENOMENON_CHOSEN = "lr3e-4"
PHENOMENON_SETS = [
    *(s for s in {name: sets for name, _, sets in PHENOMENON_SEARCH}[PHENOMENON_CHOSEN] if s != "evaluate=false"),
    "regime_eval_steps=60",
    "regime_eval_samples=4",
    "eval_samples=8",
]
EXPERIMENTS["phenomenon"] = _experiment(
    "the entropy phenomenon the search found (the mean baseline's entropy rising past 1.1x its start, in DAPO's way of "
    "training), mean against quantile baseline, with Clip-Higher: net and held-out entropy by start regime (QAE, "
    "sec. 1 and Prop. 4.2)",
    ("mean+clip_higher", "qae+clip_higher"),
    PHENOMENON_SETS,
    seeds=tuple(range(20, 28)),
)


def load_search(which: str, reference_runs: str | Path | None = None) -> list[dict]:
    r"""The committed summary of search ``which`` (a key of :data:`SEARCHES`): a :func:`search_row` per try.

    >>> len(load_search("entropy")) == len(SEARCH)
    True
    """
    if which not in SEARCHES:
        raise ValueError(f"which must be one of {sorted(SEARCHES)}, got {which!r}")
    root = find_reference_runs() if reference_runs is None else Path(reference_runs)
    return load_json(root / PHENOMENA_DIR / SEARCHES[which][1], "phenomena_runs.py --search <dir> --search-of " + which)


def run_names(experiment: str) -> list[tuple[str, str, list[str]]]:
    r"""``(folder, method, sets)`` of every run of an experiment (its own ``--set``s).

    >>> run_names("k_sweep")[:2]
    [('qae-k0.2-seed0', 'qae', ['quantile_k=0.2', 'seed=0']), ('qae-k0.6-seed0', 'qae', ['quantile_k=0.6', 'seed=0'])]
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}")
    exp = EXPERIMENTS[experiment]
    out = []
    for seed in exp["seeds"]:
        for method in exp["methods"]:
            for k in exp.get("k_values", (None,)):
                tag, sets = ("", []) if k is None else (f"-k{k}", [f"quantile_k={k}"])
                out.append((f"{method}{tag}-seed{seed}", method, [*sets, f"seed={seed}"]))
    return out


def load_experiment(reference_runs: str | Path, experiment: str) -> list[Run]:
    r"""The committed runs of one experiment, with those it shares with another (``"with"``).

    >>> from qae_lab.analysis.compare import find_reference_runs
    >>> sorted({r.method for r in load_experiment(find_reference_runs(), "composite")})
    ['mean', 'qae', 'sa_ah']
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}")
    folder = Path(reference_runs) / PHENOMENA_DIR / experiment
    if not folder.is_dir():
        raise ValueError(
            f"{folder} does not exist: make it with python benchmarks/phenomena_runs.py --work <dir> "
            f"--only {experiment}"
        )
    runs = load_runs(folder)
    if "with" in EXPERIMENTS[experiment]:  # runs of another experiment with the same settings (K sweep: K = 0.4)
        other, method = EXPERIMENTS[experiment]["with"]
        runs += [r for r in load_experiment(reference_runs, other) if r.method == method]
    return runs


def window_mean(rows: Sequence[Mapping], metric: str, start: int = 1, stop: int | None = None) -> float | None:
    r"""Mean of ``metric`` over the log rows with ``start <= step <= stop`` that hold it; None when none does.

    >>> rows = [{"step": s, "entropy": 0.1 * s} for s in range(1, 6)]
    >>> round(window_mean(rows, "entropy", 2, 3), 6), window_mean(rows, "reward")
    (0.25, None)
    """
    start = check_int(start, "start", 1)
    if stop is not None:
        stop = check_int(stop, "stop", start)
    values = [
        float(r[metric])
        for r in rows
        if r.get(metric) is not None and start <= r["step"] and (stop is None or r["step"] <= stop)
    ]
    return statistics.fmean(values) if values else None


def peak(values: Sequence[float], window: int) -> float | None:
    r"""The largest trailing ``window``-value average over the full windows (all values' mean when fewer; None if
    empty): a single noisy value, or the first steps' shorter windows, cannot make the peak.

    >>> peak([0.9, 0.1, 0.1, 0.5, 0.5], 2), peak([0.2, 0.4], 5), peak([], 3)
    (0.5, 0.30000000000000004, None)
    """
    window = check_int(window, "window", 1)
    if not values:
        return None
    averages = moving_average(list(values), window)
    return max(averages[window - 1 :]) if len(values) >= window else statistics.fmean(values)


ROSE = 1.1  # an explosion: the control's entropy peaks at least 1.1x its start (entropy_ratio "peak")
FELL = 0.5  # a collapse: the control's entropy ends at most half its start (entropy_ratio "final")
START = 10  # logged entropies averaged for a run's start, and the trailing window of its peak


def entropy_ratio(values: Sequence[float], end: str) -> float | None:
    r"""A run's entropy against its start (the mean of its first :data:`START` logged values): ``end="peak"``, its
    :func:`peak` (the highest trailing :data:`START`-value average); ``"final"``, the mean of its last third. The
    numbers an explosion (peak >= 1.1x start) and a collapse (final <= 0.5x) are read from; None under
    2 x :data:`START` values.

    >>> values = [0.2] * 10 + [0.3] * 10 + [0.1] * 10
    >>> round(entropy_ratio(values, "peak"), 6), round(entropy_ratio(values, "final"), 6), entropy_ratio([0.2], "peak")
    (1.5, 0.5, None)
    """
    if end not in ("peak", "final"):
        raise ValueError(f"end must be 'peak' or 'final', got {end!r}")
    if len(values) < 2 * START:
        return None
    third = len(values) // 3
    top = peak(values, START) if end == "peak" else statistics.fmean(values[-third:])
    return top / statistics.fmean(values[:START])


def k_sweep_rows(runs: Sequence[Run], last: int = 20) -> list[dict]:
    r"""One row per K of a K sweep: a :class:`~qae_lab.analysis.stats.Stat` over seeds of the final entropy and easy
    fraction (means of the last ``last`` steps) and of pass@1 and pass@32 after training.

    >>> from qae_lab.analysis.compare import Run
    >>> run = lambda k, e: Run("r", "qae", 0, {"trainer": {"quantile_k": k}}, [{"step": 1, "entropy": e}], None,
    ...                        {"pass@1": 0.5, "pass@32": 0.9})
    >>> rows = k_sweep_rows([run(0.6, 0.02), run(0.2, 0.01)])
    >>> [(r["k"], round(r["final entropy"].mean, 3), r["pass@32"].mean) for r in rows]
    [(0.2, 0.01, 0.9), (0.6, 0.02, 0.9)]
    """
    last = check_int(last, "last", 1)
    by_k: dict[float, list[Run]] = {}
    for r in runs:
        by_k.setdefault(float(r.config["trainer"]["quantile_k"]), []).append(r)

    return [
        {
            "k": k,
            "seeds": len(by_k[k]),
            "final entropy": stat(_final(r, "entropy", last) for r in by_k[k]),
            "final easy fraction": stat(_final(r, QAE_EASY_FRAC, last) for r in by_k[k]),
            **{key: stat((r.after or {}).get(key) for r in by_k[k]) for key in ("pass@1", "pass@32")},
        }
        for k in sorted(by_k)
    ]


def _final(r: Run, metric: str, last: int) -> float | None:
    """The mean of ``metric`` over a run's last ``last`` steps."""
    return window_mean(r.rows, metric, max(1, r.rows[-1]["step"] - last + 1)) if r.rows else None


_APART = {True: "no", False: "yes", None: None}  # within_spread (the seed ranges overlap) -> "seed ranges apart"


def dynamic_sampling_rows(runs: Sequence[Run], last: int = 20) -> list[dict]:
    r"""The dynamic-sampling comparison: per method a :class:`~qae_lab.analysis.stats.Stat` over seeds a column, then
    for each ``M+dynamic_sampling`` beside its ``M`` the difference of the means and whether their seed ranges lie
    apart (``"no"``: they overlap, a difference within the seed spread).

    The share of groups without signal is given among those generated (TRL's ``frac_reward_zero_std``) and among
    those trained (without dynamic sampling, all that were generated).

    >>> from qae_lab.analysis.compare import Run
    >>> cfg = {"trainer": {"generation_batch_size": 8, "num_generations": 4}}
    >>> row = lambda ds: {"step": 1, "entropy": 0.5, "frac_reward_zero_std": 0.5, "elapsed_s": 10.0,
    ...                   **({"dynamic_sampling/generations": 16.0, "dynamic_sampling/groups_without_signal": 0.0}
    ...                      if ds else {})}
    >>> runs = [Run("a", "qae", 0, cfg, [row(False)], {"pass@1": 0.2}, {"pass@1": 0.4, "pass@32": 0.9}),
    ...         Run("b", "qae+dynamic_sampling", 0, cfg, [row(True)], {"pass@1": 0.2}, {"pass@1": 0.5, "pass@32": 0.9})]
    >>> rows = dynamic_sampling_rows(runs)
    >>> [(r["method"], r["no-signal share trained"].mean, r["completions per batch"].mean) for r in rows[:2]]
    [('qae', 0.5, 8.0), ('qae+dynamic_sampling', 0.0, 16.0)]
    >>> rows[2]["method"], round(rows[2]["pass@1 after"], 3), rows[3]["pass@1 after"]  # one seed a side: no ranges
    ('qae+dynamic_sampling - qae', 0.1, None)
    """
    last = check_int(last, "last", 1)

    def trained(r: Run) -> float | None:
        if r.method.endswith("+dynamic_sampling"):
            groups = r.config["trainer"]["generation_batch_size"] / r.config["trainer"]["num_generations"]
            share = window_mean(r.rows, DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL)
            return None if share is None else share / groups
        return window_mean(r.rows, "frac_reward_zero_std")

    def generated(r: Run) -> float | None:
        if r.method.endswith("+dynamic_sampling"):
            return window_mean(r.rows, DYNAMIC_SAMPLING_GENERATIONS)
        return float(r.config["trainer"]["generation_batch_size"])

    columns = {
        "pass@1 before": lambda r: (r.before or {}).get("pass@1"),
        "pass@1 after": lambda r: (r.after or {}).get("pass@1"),
        "pass@32 after": lambda r: (r.after or {}).get("pass@32"),
        "final entropy": lambda r: _final(r, "entropy", last),
        "no-signal share generated": lambda r: window_mean(r.rows, "frac_reward_zero_std"),
        "no-signal share trained": trained,
        "completions per batch": generated,
        "train s": lambda r: max((row.get("elapsed_s") or 0.0 for row in r.rows), default=None),
    }
    groups = group_by_method(runs)
    rows = [
        {"method": m, "seeds": len(g), **{c: stat(number(r) for r in g) for c, number in columns.items()}}
        for m, g in groups.items()
    ]
    by_method = {row["method"]: row for row in rows}
    for m in groups:
        base = by_method.get(m.removesuffix("+dynamic_sampling"))
        if m.endswith("+dynamic_sampling") and base is not None:
            with_ = by_method[m]
            both = [c for c in columns if with_[c] is not None and base[c] is not None]
            diff = {c: with_[c].mean - base[c].mean for c in both}
            apart = {c: _APART[within_spread(with_[c], base[c])] for c in both}
            for name, got in ((f"{m} - {base['method']}", diff), ("seed ranges apart", apart)):
                rows.append({"method": name, "seeds": None, **{c: got.get(c) for c in columns}})
    return rows


def pass_at_k_table(runs: Sequence[Run]) -> dict[str, dict[str, dict[int, Stat]]]:
    r"""``{method: {"before" | "after": {k: Stat over seeds of pass@k}}}`` for every k the evaluations hold.

    >>> from qae_lab.analysis.compare import Run
    >>> runs = [Run(f"r{s}", "qae", s, {}, [], {"pass@1": 0.4, "pass@2": 0.6}, {"pass@1": 0.5 + s / 10, "pass@2": 0.6})
    ...         for s in range(2)]
    >>> t = pass_at_k_table(runs)["qae"]
    >>> sorted(t["after"]), round(t["after"][1].mean, 2), t["before"][2].mean
    ([1, 2], 0.55, 0.6)
    """
    out: dict[str, dict[str, dict[int, Stat]]] = {}
    for method, group in group_by_method(runs).items():
        out[method] = {}
        for when in ("before", "after"):
            ks = sorted({int(key[5:]) for r in group for key in (getattr(r, when) or {}) if key.startswith("pass@")})
            out[method][when] = {k: stat((getattr(r, when) or {}).get(f"pass@{k}") for r in group) for k in ks}
    return out


def clipped_fraction(run: Run, side: str = "region") -> float | None:
    r"""Mean share of tokens PPO's clip stopped over the steps that reuse a generation (no ``reward`` logged: on a
    generation's first pass the ratio is 1). ``side="high"``: the end Clip-Higher widens; ``"low"``: the other.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "reward": 0.5, "clip_ratio/region_mean": 0.0}, {"step": 2, "clip_ratio/region_mean": 0.02}]
    >>> clipped_fraction(Run("r", "mean", 0, {}, rows, None, None))
    0.02
    """
    if side not in ("region", "high", "low"):
        raise ValueError(f"side must be 'region', 'high' or 'low', got {side!r}")
    key = f"clip_ratio/{side}_mean"
    xs = [float(r[key]) for r in run.rows if r.get("reward") is None and r.get(key) is not None]
    return statistics.fmean(xs) if xs else None


def clipped_share(runs: Sequence[Run]) -> float | None:
    r""":func:`clipped_fraction` averaged over the runs that log it; None where none does.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = lambda x: [{"step": 1, "reward": 0.5}, {"step": 2, "clip_ratio/region_mean": x}]
    >>> round(clipped_share([Run("a", "mean", 0, {}, rows(0.001), None, None), Run("b", "qae", 0, {}, rows(0.003),
    ...                      None, None)]), 6)
    0.002
    """
    shares = [x for x in (clipped_fraction(r) for r in runs) if x is not None]
    return statistics.fmean(shares) if shares else None


SHARPENING = ("pass@1", "pass@32", "distinct_correct")  # what RL sharpening moves: pass@1 up, pass@32 not, fewer texts


def sharpening_rows(runs: Sequence[Run]) -> list[dict]:
    r"""Per method, before and after training: the :class:`~qae_lab.analysis.stats.Stat` over seeds of each of
    :data:`SHARPENING` (the distinct correct texts among 32 samples).

    >>> from qae_lab.analysis.compare import Run
    >>> ev = lambda p1, d: {"pass@1": p1, "pass@32": 0.98, "distinct_correct": d}
    >>> rows = sharpening_rows([Run(f"r{s}", "qae", s, {}, [], ev(0.4, 12), ev(0.5, 8)) for s in range(2)])
    >>> [(r["method"], r["when"], r["pass@1"].mean, r["distinct_correct"].mean) for r in rows]
    [('qae', 'before', 0.4, 12.0), ('qae', 'after', 0.5, 8.0)]
    """
    return [
        {
            "method": method,
            "when": when,
            **{key: stat((getattr(r, when) or {}).get(key) for r in group) for key in SHARPENING},
        }
        for method, group in group_by_method(runs).items()
        for when in ("before", "after")
    ]


def sharpening_line(rows: Sequence[dict]) -> str:
    r"""Notebook 06's sentence on :func:`sharpening_rows`: which way each quantity's mean over seeds went in every
    method ("rose or stayed" where some stayed equal, "moved both ways" where methods disagree).

    >>> from qae_lab.analysis.stats import stat
    >>> row = lambda m, w, p1, d: {"method": m, "when": w, "pass@1": stat([p1]), "pass@32": stat([1.0]),
    ...                            "distinct_correct": stat([d])}
    >>> print(sharpening_line([row("qae", "before", 0.4, 12), row("qae", "after", 0.5, 14)]))
    Here pass@1 rose (0.400→0.500), pass@32 stayed (1.000→1.000) and the distinct correct texts rose
    (12.0→14.0): no sharpening in that sense, the correct answers grew more varied, not fewer.
    """
    before = {r["method"]: r for r in rows if r["when"] == "before"}
    after = {r["method"]: r for r in rows if r["when"] == "after"}
    methods = [m for m in before if m in after]
    if not methods:
        raise ValueError("rows must hold a 'before' and an 'after' row of at least one method")

    def went(key: str, digits: int) -> str:
        moves = [after[m][key].mean - before[m][key].mean for m in methods]
        up, down = any(d > 0 for d in moves), any(d < 0 for d in moves)
        flat = any(d == 0 for d in moves)
        word = "moved both ways" if up and down else "rose" if up else "fell" if down else "stayed"
        word += " or stayed" if flat and word in ("rose", "fell") else ""
        lo = min(before[m][key].mean for m in methods)
        new = sorted(after[m][key].mean for m in methods)
        span = f"{new[0]:.{digits}f}" if new[0] == new[-1] else f"{new[0]:.{digits}f}..{new[-1]:.{digits}f}"
        return f"{word} ({lo:.{digits}f}→{span})", word

    p1, _ = went("pass@1", 3)
    pk, _ = went("pass@32", 3)
    distinct, word = went("distinct_correct", 1)
    reading = {
        "fell": "sharpening in that sense: fewer distinct correct answers",
        "rose": "no sharpening in that sense, the correct answers grew more varied, not fewer",
    }.get(word, "no clear sharpening: the distinct correct answers did not fall in every method")
    return textwrap.fill(f"Here pass@1 {p1}, pass@32 {pk} and the distinct correct texts {distinct}: {reading}.", 100)


_SEARCH_HIDDEN = ("sparse_update=false", "disable_tqdm=true", "save_model=false", "evaluate=false", "torch_threads=1")


def search_row(run: Run) -> dict:
    r"""What notebook 06's "settings tried" table keeps of an exploratory run: its ``--method`` and ``--set``s less
    the bookkeeping ones; entropy and reward over the first and last 20% of the steps, the entropy's 10-row
    :func:`peak` and its :func:`entropy_ratio`\ s, :func:`clipped_fraction` and pass@k before and after.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": s, "entropy": 0.1 if s < 6 else 0.3, "reward": 0.5} for s in range(1, 11)]
    >>> r = search_row(Run("x", "mean", 0, {"run": {"build": {"method": None, "sets": ["learning_rate=1e-3"]}}},
    ...                    rows, None, {"pass@1": 0.4}))
    >>> r["sets"], round(r["entropy_first"], 3), round(r["entropy_last"], 3), round(r["entropy_peak"], 3)
    (['learning_rate=1e-3'], 0.1, 0.3, 0.2)
    >>> r["pass@1_after"], r["pass@1_before"], r["clipped"]
    (0.4, None, None)
    """
    build = (run.config.get("run") or {}).get("build") or {}
    sets = ([f"--method {build['method']}"] if build.get("method") else []) + [
        s for s in build.get("sets", []) if s not in _SEARCH_HIDDEN
    ]

    def ends(metric: str) -> tuple[float | None, float | None, list[float]]:
        xs = [float(r[metric]) for r in run.rows if r.get(metric) is not None]
        q = max(len(xs) // 5, 1)
        return (statistics.fmean(xs[:q]) if xs else None, statistics.fmean(xs[-q:]) if xs else None, xs)

    e_first, e_last, e = ends("entropy")
    r_first, r_last, _ = ends("reward")
    evals = {f"{k}_{w}": (getattr(run, w) or {}).get(k) for k in ("pass@1", "pass@32") for w in ("before", "after")}
    return {
        "name": run.name,
        "method": build.get("method") or run.method,  # as asked (a changed epsilon_high reads back as another name)
        "seed": run.seed,
        "sets": sets,
        "steps": run.rows[-1]["step"] if run.rows else 0,
        "entropy_first": e_first,
        "entropy_last": e_last,
        "entropy_peak": peak(e, 10),
        "peak/start": entropy_ratio(e, "peak"),
        "final/start": entropy_ratio(e, "final"),
        "reward_first": r_first,
        "reward_last": r_last,
        "train_s": max((r.get("elapsed_s") or 0.0 for r in run.rows), default=None),
        "length": window_mean(run.rows, "completions/mean_length"),  # tokens, over the run
        "truncated": max(
            (r["completions/clipped_ratio"] for r in run.rows if "completions/clipped_ratio" in r), default=None
        ),
        "clipped": clipped_fraction(run),
        "clipped_high": clipped_fraction(run, "high"),
        **evals,
    }


def search_table(rows: Sequence[Mapping]) -> str:
    r"""A text table of :func:`search_row` rows, each run's settings below its numbers.

    >>> print(search_table([{"name": "a", "sets": ["lr=1"], "steps": 9, "entropy_first": 0.2, "entropy_last": 0.1,
    ...                      "reward_first": 0.4, "reward_last": 0.5, "clipped": None, "pass@1_before": 0.4,
    ...                      "pass@1_after": 0.45}]))
    run  entropy first -> last  reward first -> last  pass@1 before -> after  clipped
    a           0.200 -> 0.100        0.400 -> 0.500          0.400 -> 0.450        —
         lr=1, 9 steps
    """

    def pair(a, b) -> str:
        return " -> ".join("—" if x is None else f"{x:.3f}" for x in (a, b))

    heads = ("entropy first -> last", "reward first -> last", "pass@1 before -> after", "clipped")
    width = max([3, *(len(r["name"]) for r in rows)])
    out = ["  ".join([f"{'run':<{width}}", *heads])]
    for r in rows:
        cells = (
            pair(r["entropy_first"], r["entropy_last"]),
            pair(r["reward_first"], r["reward_last"]),
            pair(r.get("pass@1_before"), r.get("pass@1_after")),
            "—" if r.get("clipped") is None else f"{r['clipped']:.2%}",
        )
        out.append("  ".join([f"{r['name']:<{width}}", *(c.rjust(len(h)) for c, h in zip(cells, heads))]))
        out.append(f"{'':<{width}}  {', '.join(r['sets'])}, {r['steps']} steps")
    return "\n".join(line.rstrip() for line in out)


def setting_of(name: str) -> str:
    """A search try's setting: its name less a ``-seed<S>`` suffix (a further seed of the same setting).

    >>> setting_of("lr3e-4-seed101"), setting_of("lr3e-4")
    ('lr3e-4', 'lr3e-4')
    """
    return re.sub(r"-seed\d+$", "", name)


def choose_setting(rows: Sequence[Mapping], seeds: int = 3) -> dict:
    r"""The setting a search for the entropy phenomenon chose, by the rule written before its runs: a setting (a try's
    name less its ``-seed<S>``) shows the phenomenon where the mean baseline's entropy explodes (``peak/start`` >=
    :data:`ROSE`) or collapses (``final/start`` <= :data:`FELL`) in more than half of its seeds, at least ``seeds``
    of them. Of those, an explosion before a collapse (QAE's fig. 1 leads with it), then the largest median
    peak/start (the smallest median final/start). ``candidates``: settings that showed it in more than half of
    fewer seeds (run more seeds of them); ``extent``: what the search tried and the farthest each ratio went.
    Rows: :func:`search_row`'s; those of other baselines than the mean are not the control and are skipped.

    >>> row = lambda name, p, f: {"name": name, "method": "mean+clip_higher", "peak/start": p, "final/start": f}
    >>> rows = [row("a", 1.02, 0.9), row("b", 1.3, 0.9), row("b-seed101", 1.2, 0.8), row("b-seed102", 1.05, 0.9)]
    >>> c = choose_setting(rows); c["chosen"], c["phenomenon"], c["showed"], c["extent"]["largest peak/start"]
    ('b', 'explosion', '2/3', [1.3, 'b'])
    >>> c = choose_setting(rows[:2]); c["chosen"], c["candidates"]
    (None, ['b'])
    """
    seeds = check_int(seeds, "seeds", 1)
    control = [r for r in rows if str(r.get("method", "")).startswith("mean")]
    by: dict[str, list[Mapping]] = {}
    for r in control:
        by.setdefault(setting_of(r["name"]), []).append(r)

    def shows(group: Sequence[Mapping], what: str) -> int:
        key, hit = ("peak/start", lambda v: v >= ROSE) if what == "explosion" else ("final/start", lambda v: v <= FELL)
        return sum(r.get(key) is not None and hit(r[key]) for r in group)

    found, candidates = [], []
    for name, group in by.items():
        for what in ("explosion", "collapse"):
            if 2 * shows(group, what) > len(group):
                (found if len(group) >= seeds else candidates).append((what, name))
    candidates = sorted({name for _, name in candidates} - {name for _, name in found})

    def order(pick: tuple[str, str]):
        what, name = pick
        key = "peak/start" if what == "explosion" else "final/start"
        middle = statistics.median(r[key] for r in by[name] if r.get(key) is not None)
        return (what != "explosion", -middle if what == "explosion" else middle)

    best = min(found, key=order) if found else None
    peaks = [(r["peak/start"], r["name"]) for r in control if r.get("peak/start") is not None]
    finals = [(r["final/start"], r["name"]) for r in control if r.get("final/start") is not None]
    return {
        "chosen": best and best[1],
        "phenomenon": best and best[0],
        "showed": best and f"{shows(by[best[1]], best[0])}/{len(by[best[1]])}",
        "candidates": candidates,
        "extent": {
            "tries": len(control),
            "settings": len(by),
            "largest peak/start": list(max(peaks)) if peaks else None,
            "smallest final/start": list(min(finals)) if finals else None,
        },
    }


def search_rows(rows: Sequence[Mapping], base: str = "base") -> list[dict]:
    r"""A table of a search's tries for the docs: what each changed from the try named ``base`` (its method and
    ``--set``\ s, the search seed left out), the mean baseline's entropy peak / start and final / start
    (:func:`entropy_ratio`), the reward over its first and last fifth, the clipped share of tokens, the mean
    completion length and the largest share of a step's completions cut at the length limit, and its time.

    >>> row = lambda name, sets, p: {"name": name, "seed": 100, "sets": ["--method mean", "seed=100", *sets],
    ...     "peak/start": p, "final/start": 0.9, "reward_first": 0.4, "reward_last": 0.5, "clipped": 0.001,
    ...     "train_s": 60.0}
    >>> [(r["try"], r["changed"], r["peak / start"]) for r in search_rows([row("base", ["lr=1"], 1.0),
    ...                                                                    row("fast", ["lr=3"], 1.2)])]
    [('base', '—', '1.000'), ('fast', 'lr=3', '1.200')]
    """
    by = {r["name"]: r for r in rows}
    if base not in by:
        raise ValueError(f"base must name one of the rows, {sorted(by)}, got {base!r}")
    first = set(by[base]["sets"])
    num = lambda x, d=3: "—" if x is None else f"{x:.{d}f}"  # noqa: E731 -- a number as the table shows it
    return [
        {
            "try": r["name"],
            "changed": ", ".join(x for x in r["sets"] if x not in first and not x.startswith("seed="))
            + (f" (seed {r['seed']})" if r["seed"] != by[base]["seed"] else "")
            or "—",
            "peak / start": num(r.get("peak/start")),
            "final / start": num(r.get("final/start")),
            "reward first → last": f"{num(r.get('reward_first'), 2)} → {num(r.get('reward_last'), 2)}",
            "clipped": "—" if r.get("clipped") is None else f"{r['clipped']:.2%}",
            "length": num(r.get("length"), 0),
            "truncated": "—" if r.get("truncated") is None else f"{r['truncated']:.1%}",
            "train s": num(r.get("train_s"), 0),
        }
        for r in rows
    ]
