r"""The numbers behind each claim in each setting, read from the committed data, and their verdicts.

:data:`EVIDENCE` maps ``(claim key, setting, variant)`` (:data:`qae_lab.analysis.claims.CLAIMS`,
:data:`~qae_lab.analysis.claims.SETTINGS`) to the function that reads that claim's two sides, one number per
seed, from what the setting committed: ``data/bandit/prop42.json`` (paired by bandit), ``data/seqpolicy/`` (by task
seed), the runs of ``data/reference_runs/phenomena/`` and the cpu-demo runs of ``data/reference_runs/`` (by seed).

A claim about preventing an explosion or a collapse is untestable where the control never explodes (peak below
:data:`ROSE` x its start in every seed) or collapses (final above :data:`FELL` x its start in every seed), and a
claim about Clip-Higher where the clip never acts. :func:`judge_all` gives every verdict
(:func:`qae_lab.analysis.claims.verdict`), the input of :func:`~qae_lab.analysis.claims.scoreboard`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

from qae_lab.analysis.claims import CLAIMS, FOUND, Verdict, verdict
from qae_lab.analysis.committed_data import load_prop42
from qae_lab.analysis.compare import Run, find_reference_runs, load_runs, series
from qae_lab.analysis.phenomena import FELL, ROSE, clipped_fraction, entropy_ratio, load_experiment, window_mean
from qae_lab.analysis.regime_runs import regime_eval_numbers
from qae_lab.analysis.seqpolicy_runs import load_findings, load_regimes, setting_name
from qae_lab.analysis.stats import training_variance
from qae_lab.metric_names import QAE_NEG_CORRECT, QAE_ZERO_ADV_FRAC, SAAH_W_MEAN_NEG

__all__ = ["ROSE", "FELL", "CLIPPED", "Evidence", "EVIDENCE", "judge", "judge_all"]

CLIPPED = 0.001  # Clip-Higher can matter only where PPO's clip acts on at least 0.1% of the tokens


class Evidence(NamedTuple):
    r"""One claim's two sides in one setting: ``measured`` (in words), the sides' labels, one number per seed a side
    (a claim of a size: ``values_b`` empty), ``why`` the setting cannot test it, ``equal_by_construction`` why the
    two sides are one number."""

    measured: str
    a: str
    b: str
    values_a: list
    values_b: list
    paired: bool = True
    why: str | None = None
    digits: int = 3
    equal_by_construction: str | None = None


# ---------------------------------------------------------------- the committed data, read once


_cpu_runs = functools.cache(lambda: load_runs(find_reference_runs()))
_experiment = functools.cache(lambda name: load_experiment(find_reference_runs(), name))
_regimes, _findings, _prop42 = (functools.cache(load) for load in (load_regimes, load_findings, load_prop42))


def _by_seed(runs: Sequence[Run], method: str, k: float | None = None) -> dict[int, Run]:
    return {
        r.seed: r for r in runs if r.method == method and (k is None or float(r.config["trainer"]["quantile_k"]) == k)
    }


def _sides(runs, method_a, method_b, number: Callable[[Run], float | None], k_a=None, k_b=None) -> tuple[list, list]:
    """One number per seed of each method, paired by seed (the seeds both methods ran)."""
    a, b = _by_seed(runs, method_a, k_a), _by_seed(runs, method_b, k_b)
    seeds = sorted(set(a) & set(b))
    return [number(a[s]) for s in seeds], [number(b[s]) for s in seeds]


def _third(metric: str, part: int) -> Callable[[Run], float | None]:
    """The mean of ``metric`` over the first (0) or last (2) third of a run's steps."""

    def number(run: Run) -> float | None:
        n = run.rows[-1]["step"] if run.rows else 0
        return window_mean(run.rows, metric, part * n // 3 + 1, max(1, (part + 1) * n // 3)) if n else None

    return number


def _control(values: Sequence[float | None], explode: bool, where: str = "") -> str | None:
    """Why the mean baseline (its entropy peak/start or final/start per seed, on ``where``'s prompts) cannot serve as
    the control of a claim about preventing an explosion or a collapse: it never exploded, or never collapsed."""
    seen = [v for v in values if v is not None]
    if not seen:
        return "the mean baseline's entropy was not measured"
    if explode and max(seen) < ROSE:
        return f"the mean baseline's entropy{where} never rose to {ROSE:.1f}x its start: no explosion to prevent"
    if not explode and min(seen) > FELL:
        return f"the mean baseline's entropy{where} never fell to {FELL:.1f}x its start: no collapse to prevent"
    return None


def _clip(runs: Sequence[Run]) -> str | None:
    shares = [x for x in (clipped_fraction(r) for r in runs) if x is not None]
    if not shares:
        return "no step reuses a generation, so the clip never acts"
    return None if max(shares) >= CLIPPED else f"the clip acted on under {100 * CLIPPED:.1f}% of the tokens"


# ---------------------------------------------------------------- 02: the bandit


# a constant b drops out of eta E_pi[(r - b) grad log pi] since E_pi[grad log pi] = 0 (notebook 02, section 4)
_CANCELS = "a constant baseline cancels in the exact expected gradient: E_pi[grad log pi] = 0"


def _bandit(regime: str, step: str) -> Evidence:
    data = _prop42()[regime][step]
    exact = step == "expected_step"
    what = "entropy change of the exact expected step" if exact else "expected entropy change of sampled groups"
    sides = ("quantile", "mean", data["quantile"], data["mean"])
    return Evidence(f"{what}, {regime} bandits", *sides, digits=6, equal_by_construction=_CANCELS if exact else None)


# ---------------------------------------------------------------- 07, 09: the sequence policy


def _seqpolicy(group: str, key: str, what: str, optimizer: str = "adam") -> Evidence:
    runs = _regimes()["runs"]
    a, b = (runs[f"{optimizer}/{base}/clip-higher"]["groups"][group][key] for base in ("quantile K=0.4", "mean"))
    why = None
    if key == "peak_ratio" and group == "mixed":
        why = _control(b, True)
    elif key == "final_h" and group == "mixed":
        ratios = [f / h for f, h in zip(b, runs[f"{optimizer}/mean/clip-higher"]["groups"][group]["start_h"])]
        why = _control(ratios, False)
    return Evidence(what, "quantile", "mean", list(a), list(b), why=why)


def _findings_runs(key: str, what: str, a: tuple[str, float], b: tuple[str, float | None]) -> Evidence:
    """The quantile baseline at two K of notebook 09's sweep (peaked start, Clip-Higher, the std), each side a
    (label, K); b's K None: against a claim's stated size."""
    runs = _findings()["runs"]
    names = [None if k is None else setting_name("peaked", "quantile", k, True, True) for _, k in (a, b)]
    return Evidence(what, a[0], b[0], *([] if n is None else list(runs[n][key]) for n in names))


def _update_variance(start: str) -> Evidence:
    per = _findings()["variance"]["per_start"][start]
    values = (list(per[v]["trace_var"]) for v in ("SA-AH, alpha = 0.5", "alpha = 0"))
    return Evidence("trace of the update's covariance (1,000 sampled updates)", "SA-AH", "plain", *values)


# ---------------------------------------------------------------- 06: the sums model; 05: the CPU preset


def _held_out(group: str, key: str, experiment: str = "regimes") -> Evidence:
    runs = _experiment(experiment)
    a, b = _sides(runs, "qae+clip_higher", "mean+clip_higher", lambda r: (regime_eval_numbers(r, group) or {}).get(key))
    which = "hardest" if key == "peak/start" else "easiest"
    why = _control(b, key == "peak/start", f" on the prompts that start {which}")
    return Evidence(f"held-out entropy {key.replace('/', ' / ')}, {which} quarter", "quantile", "mean", a, b, why=why)


def _runs(where: str) -> tuple[list[Run], str]:
    """A setting's runs and the suffix of their methods: the CPU preset's (no partner), or a sums-model experiment's
    (with Clip-Higher)."""
    return (_cpu_runs(), "") if where == "cpu" else (_experiment(where), "+clip_higher")


def _trend(end: str, where: str) -> Evidence:
    """Entropy peak/start (``end`` "peak") or final/start ("final"), quantile against mean, with the control's check:
    on the CPU preset (``where`` "cpu"), or on a sums-model experiment with Clip-Higher (where the clip must act)."""
    runs, clip = _runs(where)
    a, b = _sides(runs, "qae" + clip, "mean" + clip, lambda r: entropy_ratio(series(r, "entropy")[1], end))
    why = _control(b, end == "peak") or (None if where == "cpu" else _clip(runs))
    what = "entropy peak / start (10-step averages)" if end == "peak" else "entropy over the last third / start"
    return Evidence(what, "quantile", "mean", a, b, why=why)


_STATED = "the stated size"


def _share(runs, method: str) -> Evidence:
    """The quantile baseline's share of zero advantages over the last third of each run, against the stated size."""
    values = [_third(QAE_ZERO_ADV_FRAC, 2)(r) for _, r in sorted(_by_seed(runs, method).items())]
    return Evidence("share of responses with zero advantage (last third)", "quantile", _STATED, values, [])


def _two(runs, method_a, method_b, number, what, a, b, digits=3) -> Evidence:
    va, vb = _sides(runs, method_a, method_b, number)
    return Evidence(what, a, b, va, vb, digits=digits)


def _qae(number, what, where: str = "entropy") -> Evidence:
    """Quantile against mean: on the CPU preset (``where`` "cpu"), or on a sums-model experiment with Clip-Higher."""
    runs, clip = _runs(where)
    return _two(runs, "qae" + clip, "mean" + clip, number, what, "quantile", "mean")


def _saah(runs, number, what, digits=3) -> Evidence:
    return _two(runs, "sa_ah", "mean", number, what, "SA-AH", "plain", digits)


def _within(runs, metric: str, what: str, digits: int = 3) -> Evidence:
    """SA-AH's ``metric`` over the last third of each run against the first third of the same run."""
    chosen = sorted(_by_seed(runs, "sa_ah").items())
    last, first = ([_third(metric, p)(r) for _, r in chosen] for p in (2, 0))
    return Evidence(what, "last third", "first third", last, first, digits=digits)


def _after(key: str) -> Callable[[Run], float | None]:
    return lambda run: (run.after or {}).get(key)


def _variance(run: Run) -> float | None:
    return training_variance(run.rows, "reward") if series(run, "reward")[1] else None


def _total(metric: str) -> Callable[[Run], float]:
    return lambda run: sum(series(run, metric)[1])


_HARDEST, _EASIEST = "entropy peak / start, the 4 hardest prompts", "entropy at step 10, the 4 easiest prompts"
_LENGTH, _WEIGHT = "mean completion length (tokens)", "mean horizon weight of failed rollouts"
_VARIANCE, _PASS1 = "training variance of the reward", "pass@1 after training"
_NEG_CORRECT = "correct answers given A < 0, summed over the steps"
EVIDENCE: dict[tuple[str, str, str], Callable[[], Evidence]] = {
    ("hard_prop42", "expected step", ""): lambda: _bandit("hard", "expected_step"),
    ("hard_prop42", "sampled groups", ""): lambda: _bandit("hard", "sampled"),
    ("hard_prop42", "sequence policy", "Adam"): lambda: _seqpolicy("hard", "peak_ratio", _HARDEST),
    ("hard_prop42", "sequence policy", "SGD"): lambda: _seqpolicy("hard", "peak_ratio", _HARDEST, "sgd"),
    ("hard_prop42", "sums model", ""): lambda: _held_out("hard", "peak/start"),
    ("hard_prop42", FOUND, ""): lambda: _held_out("hard", "peak/start", "phenomenon"),
    ("easy_prop42", "expected step", ""): lambda: _bandit("easy", "expected_step"),
    ("easy_prop42", "sampled groups", ""): lambda: _bandit("easy", "sampled"),
    ("easy_prop42", "sequence policy", "Adam"): lambda: _seqpolicy("easy", "early_h", _EASIEST),
    ("easy_prop42", "sequence policy", "SGD"): lambda: _seqpolicy("easy", "early_h", _EASIEST, "sgd"),
    ("easy_prop42", "sums model", ""): lambda: _held_out("easy", "final/start"),
    ("easy_prop42", FOUND, ""): lambda: _held_out("easy", "final/start", "phenomenon"),
    ("explosion", "sequence policy", "Adam"): lambda: _seqpolicy(
        "mixed", "peak_ratio", "entropy peak / start, all prompts"
    ),
    ("explosion", "sums model", ""): lambda: _trend("peak", "entropy"),
    ("explosion", "CPU preset", ""): lambda: _trend("peak", "cpu"),
    ("explosion", FOUND, ""): lambda: _trend("peak", "phenomenon"),
    ("collapse", "sequence policy", "Adam"): lambda: _seqpolicy("mixed", "final_h", "entropy at step 200, all prompts"),
    ("collapse", "sums model", ""): lambda: _trend("final", "entropy"),
    ("collapse", "CPU preset", ""): lambda: _trend("final", "cpu"),
    ("collapse", FOUND, ""): lambda: _trend("final", "phenomenon"),
    ("sparsity", "sequence policy", "SGD"): lambda: _findings_runs(
        "zero_adv_frac", "share of responses with zero advantage", ("quantile", 0.4), (_STATED, None)
    ),
    ("sparsity", "sums model", ""): lambda: _share(_experiment("entropy"), "qae"),
    ("sparsity", "CPU preset", ""): lambda: _share(_cpu_runs(), "qae"),
    ("sparsity", FOUND, ""): lambda: _share(_experiment("phenomenon"), "qae+clip_higher"),
    ("k_entropy", "sequence policy", "SGD"): lambda: _findings_runs(
        "final_entropy", "entropy at the last step", ("K = 0.8", 0.8), ("K = 0.2", 0.2)
    ),
    ("k_entropy", "sums model", ""): lambda: Evidence(
        "entropy over the last third",
        "K = 0.8",
        "K = 0.2",
        *_sides(_experiment("k_sweep"), "qae", "qae", _third("entropy", 2), 0.8, 0.2),
        digits=4,
    ),
    ("qae_pass1", "sums model", ""): lambda: _qae(_after("pass@1"), _PASS1),
    ("qae_pass1", "CPU preset", ""): lambda: _qae(_after("pass@1"), _PASS1, "cpu"),
    ("qae_pass1", FOUND, ""): lambda: _qae(_after("pass@1"), _PASS1, "phenomenon"),
    ("qae_passk", "sums model", ""): lambda: _qae(_after("pass@16"), "pass@16 after training"),
    ("qae_passk", "CPU preset", ""): lambda: _qae(_after("pass@8"), "pass@8 after training", "cpu"),
    ("qae_passk", FOUND, ""): lambda: _qae(_after("pass@8"), "pass@8 after training", "phenomenon"),
    ("saah_update_variance", "sequence policy", "flat start"): lambda: _update_variance("flat"),
    ("saah_update_variance", "sequence policy", "peaked start"): lambda: _update_variance("peaked"),
    ("saah_variance", "sums model", ""): lambda: _saah(_experiment("composite"), _variance, _VARIANCE, 4),
    ("saah_variance", "CPU preset", ""): lambda: _saah(_cpu_runs(), _variance, _VARIANCE, 4),
    ("saah_length", "sums model", ""): lambda: _within(_experiment("composite"), "completions/mean_length", _LENGTH, 1),
    ("saah_length", "CPU preset", ""): lambda: _within(_cpu_runs(), "completions/mean_length", _LENGTH, 1),
    ("saah_curriculum", "sums model", ""): lambda: _within(_experiment("composite"), SAAH_W_MEAN_NEG, _WEIGHT),
    ("saah_curriculum", "CPU preset", ""): lambda: _within(_cpu_runs(), SAAH_W_MEAN_NEG, _WEIGHT),
    ("saah_pass1", "sums model", ""): lambda: _saah(_experiment("composite"), _after("pass@1"), _PASS1),
    ("saah_pass1", "CPU preset", ""): lambda: _saah(_cpu_runs(), _after("pass@1"), _PASS1),
    ("neg_correct", "sums model", ""): lambda: _two(
        _experiment("composite"), "mean", "qae", _total(QAE_NEG_CORRECT), _NEG_CORRECT, "mean", "quantile", 1
    ),
}
"""Each claim in each setting that measures it, by ``(claim, setting, variant)`` (a variant: the same setting
another way, e.g. its optimizer; "" where there is one): the function that reads its evidence."""


def judge(claim: str, setting: str, variant: str = "") -> tuple[Evidence, Verdict]:
    r"""The evidence of ``claim`` in ``setting`` (its ``variant``; :data:`EVIDENCE`) and its verdict.

    >>> evidence, v = judge("hard_prop42", "sequence policy", "Adam")
    >>> evidence.a, evidence.b, v.word, v.n
    ('quantile', 'mean', 'holds', 16)
    """
    if (claim, setting, variant) not in EVIDENCE:
        raise ValueError(
            f"no evidence of claim {claim!r} in setting {setting!r} ({variant!r}); known: {sorted(EVIDENCE)}"
        )
    c = next(c for c in CLAIMS if c.key == claim)
    e = EVIDENCE[claim, setting, variant]()
    v = verdict(
        e.values_a,
        e.values_b,
        c.expect,
        paired=e.paired,
        why=e.why,
        band=c.band,
        equal_by_construction=e.equal_by_construction,
    )
    return e, v


def judge_all(settings: Sequence[str] | None = None) -> dict[tuple[str, str, str], tuple[dict, Verdict]]:
    r"""Every verdict of :data:`EVIDENCE` (in ``settings`` only, when given), as
    :func:`qae_lab.analysis.claims.scoreboard` takes them.

    >>> judged = judge_all(["CPU preset"]); judged["sparsity", "CPU preset", ""][1].word
    'holds'
    """
    return {
        key: (e._asdict(), v) for key in EVIDENCE if settings is None or key[1] in settings for e, v in [judge(*key)]
    }
