r"""The papers' claims about training, each judged in a sentence generated from the committed runs.

:data:`CLAIMS` lists what notebook 06 checks on the runs of :data:`qae_lab.analysis.phenomena.EXPERIMENTS`: who
makes the claim (QAE, arXiv 2509.22611; SA-AH-GRPO, arXiv 2606.05434; or nobody: a measurement the lab
adds, said so), the claim in the words of ``SPEC.md``, and how it is measured: two sides, each a method
and a :class:`Measure` (one number per run), and the direction the claim expects. :func:`judge` computes
the :class:`~qae_lab.analysis.phenomena.Effect` over seeds and says, in one sentence, whether the claim
**holds** (the expected direction, every seed of one side beyond every seed of the other), is
**reversed** (the other direction, every seed apart), shows **no difference** (tested, and the seed ranges
overlap) or **cannot be tested here** (the runs lack what the claim is about: a control that never exploded
cannot show an explosion prevented, a clip that acted on 0.03% of the tokens cannot show what widening it
does), with the effect in seed-spread units (the difference over the pooled seed std, Cohen's d) and the seed
counts. A claim of the "not lower" kind (``">="``: QAE keeps pass@16) holds unless reversed. Which runs can test a
claim is decided by its checks (:func:`rose`, :func:`fell`, :func:`clip_acted`), each saying why not in plain
words. :func:`scoreboard` puts every verdict in one table. The sentences are computed, never typed, so they stay
true when the runs are regenerated.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from qae_lab.analysis.compare import Run, group_by_method, series
from qae_lab.methods import LEDGER_PREFIX, QAE_NEG_CORRECT, QAE_SUCCESS_RATE, QAE_ZERO_ADV_FRAC, SAAH_W_MEAN_NEG
from qae_lab.task.models import embedded_dir
from qae_lab.analysis.phenomena import Effect, clipped_fraction, effect, per_method, window_mean
from qae_lab.analysis.regime_runs import regime_numbers
from qae_lab.analysis.stats import Stat, moving_average, stat, training_variance

__all__ = [
    "Measure",
    "window",
    "evaluation",
    "variance",
    "total",
    "held_out",
    "Check",
    "rose",
    "fell",
    "clip_acted",
    "regime_rose",
    "regime_fell",
    "Claim",
    "CLAIMS",
    "VERDICTS",
    "Judgement",
    "judge",
    "verdict_list",
    "scoreboard",
    "scoreboard_markdown",
    "Direction",
    "direction",
    "summary_lines",
    "clip_sentence",
    "sharpening_sentences",
    "punished_correct_sentence",
    "clipped_share",
    "model_properties",
]


@dataclass(frozen=True)
class Measure:
    r"""One number per run, and what it is in words.

    >>> m = window("entropy", "first"); m.what
    'mean entropy over the first third of the steps'
    """

    what: str
    number: Callable[[Run], float | None]
    label: str = ""  # a short name for the window, where both sides are one method's ("first third")


_THIRDS = {"first": (0, 1), "middle": (1, 2), "last": (2, 3), "all": (0, 3)}


def window(metric: str, part: str = "all") -> Measure:
    r"""The mean of ``metric`` over a third of the run's steps (``first``, ``middle``, ``last``) or ``all``.

    >>> from qae_lab.analysis.compare import Run
    >>> run = Run("r", "mean", 0, {}, [{"step": s, "entropy": float(s)} for s in range(1, 10)], None, None)
    >>> window("entropy", "last").number(run), window("entropy").number(run)
    (8.0, 5.0)
    """
    if part not in _THIRDS:
        raise ValueError(f"part must be one of {sorted(_THIRDS)}, got {part!r}")
    lo, hi = _THIRDS[part]

    def number(run: Run) -> float | None:
        if not run.rows:
            return None
        n = run.rows[-1]["step"]
        return window_mean(run.rows, metric, max(1, lo * n // 3 + 1), max(1, hi * n // 3))

    span = "all the steps" if part == "all" else f"the {part} third of the steps"
    return Measure(f"mean {metric} over {span}", number, "all steps" if part == "all" else f"{part} third")


def evaluation(when: str, key: str) -> Measure:
    r"""An evaluation figure (``pass@1``, ``pass@32``, ...) ``before`` or ``after`` training.

    >>> from qae_lab.analysis.compare import Run
    >>> evaluation("after", "pass@1").number(Run("r", "qae", 0, {}, [], None, {"pass@1": 0.5}))
    0.5
    """
    if when not in ("before", "after"):
        raise ValueError(f"when must be 'before' or 'after', got {when!r}")
    return Measure(f"{key} {when} training", lambda run: (getattr(run, when) or {}).get(key))


def variance(metric: str = "reward", width: int = 20) -> Measure:
    r"""Training variance of ``metric``: around its trailing ``width``-step average (:func:`qae_lab.analysis.stats.training_variance`)."""
    return Measure(
        f"training variance of the {metric} (detrended, window {width})",
        lambda run: training_variance(run.rows, metric, width) if series(run, metric)[1] else None,
    )


def total(metric: str) -> Measure:
    r"""``metric`` summed over the run's steps (a count per step, e.g. ``qae/neg_correct``)."""
    return Measure(f"{metric} summed over the steps", lambda run: sum(series(run, metric)[1]) if run.rows else None)


def held_out(group: str, key: str) -> Measure:
    r"""A held-out group's entropy number (:func:`qae_lab.analysis.regime_runs.regime_numbers`: ``peak/start``, ``final/start``
    ...): the prompts that start hard or easy, measured every few steps by the run's regime evaluation.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "regime_eval/entropy_hard": 0.25}, {"step": 9, "regime_eval/entropy_hard": 0.5}]
    >>> held_out("hard", "peak/start").number(Run("r", "mean", 0, {}, rows, None, None))
    2.0
    """
    words = {"hard": "the prompts that start hardest", "easy": "the prompts that start easiest", "all": "all prompts"}

    def number(run: Run) -> float | None:
        got = regime_numbers(run, group)
        return None if got is None else got[key]

    return Measure(f"entropy {key} of {words[group]}", number, f"{group} {key}")


Check = Callable[[Sequence[Run]], "str | None"]
"""Whether an experiment's runs can test a claim: None if they can, else why not, in plain words."""

_START = 10  # steps averaged for a run's start value, and the trailing window of its peak


def _start_peak_end(run: Run, metric: str) -> tuple[float, float, float] | None:
    """A run's ``metric`` over its first steps, its highest trailing average, and over its last third."""
    values = series(run, metric)[1]
    if len(values) < 2 * _START:
        return None
    smooth = moving_average(values, _START)[_START - 1 :]
    return (sum(values[:_START]) / _START, max(smooth), sum(values[-len(values) // 3 :]) / (len(values) // 3))


def _control(runs: Sequence[Run], method: str, metric: str) -> list[tuple[float, float, float]]:
    return [v for v in (_start_peak_end(r, metric) for r in runs if r.method == method) if v is not None]


def rose(method: str, metric: str = "entropy", factor: float = 1.1) -> Check:
    r"""A claim that a baseline *prevents an explosion* needs a control that explodes: ``method``'s ``metric`` must
    rise to ``factor`` times its start (the mean of its first 10 steps; the peak is its highest 10-step trailing
    average) in at least one run.

    >>> from qae_lab.analysis.compare import Run
    >>> flat = Run("m", "mean", 0, {}, [{"step": t, "entropy": 0.17} for t in range(1, 31)], None, None)
    >>> print(rose("mean")([flat]))
    mean's entropy never rose above 1.00x its start (0.170 at the start, peak 0.170): there was no explosion to prevent
    >>> up = Run("m", "mean", 0, {}, [{"step": t, "entropy": 0.1 * t} for t in range(1, 31)], None, None)
    >>> rose("mean")([up]) is None
    True
    """

    def check(runs: Sequence[Run]) -> str | None:
        found = _control(runs, method, metric)
        if not found:
            return f"no run of {method} logs {metric} for 20 steps or more"
        ratio = max(peak / start for start, peak, _ in found)
        if ratio >= factor:
            return None
        start, peak = (sum(v[i] for v in found) / len(found) for i in (0, 1))
        return (
            f"{method}'s {metric} never rose above {ratio:.2f}x its start ({start:.3f} at the start, peak "
            f"{peak:.3f}): there was no explosion to prevent"
        )

    return check


def fell(method: str, metric: str = "entropy", to: float = 0.5) -> Check:
    r"""A claim that a baseline *prevents a collapse* needs a control that collapses: ``method``'s ``metric`` over
    its last third must fall to ``to`` times its start (the mean of its first 10 steps) in at least one run.

    >>> from qae_lab.analysis.compare import Run
    >>> slow = Run("m", "mean", 0, {}, [{"step": t, "entropy": 0.2 - 0.001 * t} for t in range(1, 31)], None, None)
    >>> print(fell("mean")([slow]))
    mean's entropy fell only from 0.195 to 0.175 (0.90x; a collapse loses half): there was no collapse to prevent
    """

    def check(runs: Sequence[Run]) -> str | None:
        found = _control(runs, method, metric)
        if not found:
            return f"no run of {method} logs {metric} for 20 steps or more"
        ratio = min(end / start for start, _, end in found)
        if ratio <= to:
            return None
        start, end = (sum(v[i] for v in found) / len(found) for i in (0, 2))
        return (
            f"{method}'s {metric} fell only from {start:.3f} to {end:.3f} ({ratio:.2f}x; a collapse loses "
            f"{'half' if to == 0.5 else f'{1 - to:.0%}'}): there was no collapse to prevent"
        )

    return check


def clip_acted(min_share: float = 0.001) -> Check:
    r"""A claim about Clip-Higher needs a clip that acts: on the passes that reuse a generation, PPO's clip must
    stop at least ``min_share`` of the tokens in some run (:func:`qae_lab.analysis.phenomena.clipped_fraction`).

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "reward": 0.5}, {"step": 2, "clip_ratio/region_mean": 0.0003}]
    >>> print(clip_acted()([Run("r", "mean+clip_higher", 0, {}, rows, None, None)]))
    the clip acted on at most 0.03% of the tokens: widening it (Clip-Higher) could not matter
    """

    def check(runs: Sequence[Run]) -> str | None:
        shares = [x for x in (clipped_fraction(r) for r in runs) if x is not None]
        if not shares:
            return "no run reuses a generation, so the clip never acts"
        if max(shares) >= min_share:
            return None
        return f"the clip acted on at most {100 * max(shares):.2f}% of the tokens: widening it (Clip-Higher) could not matter"

    return check


def _held_out(runs: Sequence[Run], method: str, group: str, key: str) -> list[float]:
    return [x for x in (held_out(group, key).number(r) for r in runs if r.method == method) if x is not None]


def regime_rose(method: str, group: str = "hard", factor: float = 1.1) -> Check:
    r""":func:`rose` on a held-out group: ``method``'s entropy on the prompts that start in ``group`` must rise to
    ``factor`` times its start in at least one run, or there is no explosion to prevent.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "regime_eval/entropy_hard": 0.2}, {"step": 9, "regime_eval/entropy_hard": 0.201}]
    >>> print(regime_rose("mean")([Run("r", "mean", 0, {}, rows, None, None)]))
    mean's entropy on the prompts that start hardest never rose above 1.00x its start: there was no explosion to prevent
    """

    def check(runs: Sequence[Run]) -> str | None:
        ratios = _held_out(runs, method, group, "peak/start")
        if not ratios:
            return f"no run of {method} measured its held-out {group} prompts"
        if max(ratios) >= factor:
            return None
        words = "hardest" if group == "hard" else "easiest"
        return (
            f"{method}'s entropy on the prompts that start {words} never rose above {max(ratios):.2f}x its start: "
            "there was no explosion to prevent"
        )

    return check


def regime_fell(method: str, group: str = "easy", to: float = 0.5) -> Check:
    r""":func:`fell` on a held-out group: ``method``'s final entropy on the prompts that start in ``group`` must fall
    to ``to`` times its start in at least one run, or there is no collapse to prevent.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "regime_eval/entropy_easy": 0.2}, {"step": 9, "regime_eval/entropy_easy": 0.18}]
    >>> print(regime_fell("mean")([Run("r", "mean", 0, {}, rows, None, None)]))
    mean's entropy on the prompts that start easiest fell only to 0.90x its start (a collapse loses half): there was no collapse to prevent
    """

    def check(runs: Sequence[Run]) -> str | None:
        ratios = _held_out(runs, method, group, "final/start")
        if not ratios:
            return f"no run of {method} measured its held-out {group} prompts"
        if min(ratios) <= to:
            return None
        words = "hardest" if group == "hard" else "easiest"
        return (
            f"{method}'s entropy on the prompts that start {words} fell only to {min(ratios):.2f}x its start (a "
            f"collapse loses {'half' if to == 0.5 else f'{1 - to:.0%}'}): there was no collapse to prevent"
        )

    return check


@dataclass(frozen=True)
class Claim:
    r"""A claim and how the runs judge it: side ``a`` against side ``b``, each ``(method, Measure)``.

    ``expect``: ``">"`` (a above b), ``"<"`` (a below b) or ``">="`` (a not below b: holds unless reversed).
    ``checks``: what the runs must show for the claim to be testable at all (:data:`Check`); ``short``: the claim
    in a few plain words, for :func:`scoreboard`.
    """

    key: str
    source: str
    statement: str
    experiment: str
    a: tuple[str, Measure]
    b: tuple[str, Measure]
    expect: str = ">"
    digits: int = 3
    short: str = ""
    checks: tuple[Check, ...] = ()


_QAE, _SAAH, _NONE = ("QAE (arXiv 2509.22611)", "SA-AH-GRPO (arXiv 2606.05434)", "no paper: a measurement of the lab")

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "explosion",
        _QAE,
        "with the mean baseline and Clip-Higher, entropy explodes early in training",
        "entropy",
        ("mean+clip_higher", window("entropy", "first")),
        ("qae+clip_higher", window("entropy", "first")),
        ">",
        4,
        "the mean baseline's entropy explodes early; QAE's does not",
        (rose("mean+clip_higher"), clip_acted()),
    ),
    Claim(
        "collapse",
        _QAE,
        "with the mean baseline, entropy collapses later in training; the quantile baseline keeps it in a band",
        "entropy",
        ("mean+clip_higher", window("entropy", "last")),
        ("qae+clip_higher", window("entropy", "last")),
        "<",
        4,
        "the mean baseline's entropy collapses later; QAE's does not",
        (fell("mean+clip_higher"), clip_acted()),
    ),
    Claim(
        "hard_gate",
        _QAE,
        "on hard prompts (p <= 1-K) the quantile baseline's first-order entropy change is at "
        "most the mean baseline's (Prop. 4.2, explosion-proof)",
        "entropy",
        ("mean", window(LEDGER_PREFIX + "dh_hard")),
        ("qae", window(LEDGER_PREFIX + "dh_hard")),
        ">",
        5,
        "on hard prompts QAE's update raises entropy less (first order)",
    ),
    Claim(
        "easy_gate",
        _QAE,
        "on easy prompts (p > 1-K) the quantile baseline's first-order entropy change is at "
        "least the mean baseline's (Prop. 4.2, collapse-proof)",
        "entropy",
        ("mean", window(LEDGER_PREFIX + "dh_easy")),
        ("qae", window(LEDGER_PREFIX + "dh_easy")),
        "<",
        5,
        "on easy prompts QAE's update lowers entropy less (first order)",
    ),
    Claim(
        "hard_regime",
        _QAE,
        "on hard prompts (p <= 1-K) the quantile baseline's entropy rises at most as much as "
        "the mean baseline's (Prop. 4.2, explosion-proof), measured on the prompts that start hardest",
        "regimes",
        ("mean+clip_higher", held_out("hard", "peak/start")),
        ("qae+clip_higher", held_out("hard", "peak/start")),
        ">",
        3,
        "on the prompts that start hard, QAE's entropy rises less",
        (regime_rose("mean+clip_higher"),),
    ),
    Claim(
        "easy_regime",
        _QAE,
        "on easy prompts (p > 1-K) the quantile baseline's entropy falls at most as much as "
        "the mean baseline's (Prop. 4.2, collapse-proof), measured on the prompts that start easiest",
        "regimes",
        ("mean+clip_higher", held_out("easy", "final/start")),
        ("qae+clip_higher", held_out("easy", "final/start")),
        "<",
        3,
        "on the prompts that start easy, QAE keeps more entropy",
        (regime_fell("mean+clip_higher"),),
    ),
    Claim(
        "sparsity",
        _QAE,
        "about 80% of sampled responses get exactly zero advantage (tuned K)",
        "entropy",
        ("qae", window(QAE_ZERO_ADV_FRAC)),
        ("mean", window(QAE_ZERO_ADV_FRAC)),
        ">",
        3,
        "most responses get exactly zero advantage under QAE",
    ),
    Claim(
        "pass1",
        _QAE,
        "QAE raises pass@1 over the mean baseline",
        "entropy",
        ("qae+clip_higher", evaluation("after", "pass@1")),
        ("mean+clip_higher", evaluation("after", "pass@1")),
        ">",
        3,
        "QAE ends with a higher pass@1",
    ),
    Claim(
        "pass16",
        _QAE,
        "QAE keeps or improves pass@16",
        "entropy",
        ("qae+clip_higher", evaluation("after", "pass@16")),
        ("mean+clip_higher", evaluation("after", "pass@16")),
        ">=",
        3,
        "QAE's pass@16 is no lower",
    ),
    Claim(
        "k_entropy",
        _QAE,
        "a larger K makes more prompts easy and updates negative-only, so entropy rises; a smaller K lowers it",
        "k_sweep",
        ("qae@0.8", window("entropy", "last")),
        ("qae@0.2", window("entropy", "last")),
        ">",
        4,
        "a larger K ends with more entropy",
    ),
    Claim(
        "variance",
        _SAAH,
        "SA-AH-GRPO's training variance is lower than GRPO's (3B: 3.6x lower)",
        "composite",
        ("mean", variance()),
        ("sa_ah", variance()),
        ">",
        4,
        "SA-AH trains with a lower reward variance",
    ),
    Claim(
        "length",
        _SAAH,
        "mean response length falls during SA-AH-GRPO training (3B: 243 -> 171 tokens)",
        "composite",
        ("sa_ah", window("completions/mean_length", "first")),
        ("sa_ah", window("completions/mean_length", "last")),
        ">",
        1,
        "responses get shorter under SA-AH",
    ),
    Claim(
        "curriculum",
        _SAAH,
        "entropy falls during training, so the weights drift to 1 (an implicit curriculum)",
        "composite",
        ("sa_ah", window(SAAH_W_MEAN_NEG, "last")),
        ("sa_ah", window(SAAH_W_MEAN_NEG, "first")),
        ">",
        3,
        "SA-AH's weights drift towards 1",
    ),
    Claim(
        "saah_pass1",
        _SAAH,
        "SA-AH-GRPO's pass@1 beats GRPO's (1.5B: +4.9 points at the peak)",
        "composite",
        ("sa_ah", evaluation("after", "pass@1")),
        ("mean", evaluation("after", "pass@1")),
        ">",
        3,
        "SA-AH ends with a higher pass@1",
    ),
    Claim(
        "neg_correct",
        _NONE,
        "under SA-AH's composite reward the mean baseline gives correct answers a negative "
        "advantage more often than the quantile baseline",
        "composite",
        ("mean", total(QAE_NEG_CORRECT)),
        ("qae", total(QAE_NEG_CORRECT)),
        ">",
        1,
        "the mean baseline punishes more correct answers",
    ),
)


VERDICTS = ("holds", "reversed", "no difference", "cannot be tested here", "not shown")
"""The kinds of verdict, in the scoreboard's order: tested and decided (holds, reversed), tested and undecided (no
difference: the seed ranges overlap), not testable on these runs (with the reason), too few runs to say (not shown)."""


@dataclass(frozen=True)
class Judgement:
    r"""A claim, the :class:`~qae_lab.analysis.phenomena.Effect` of side a against side b, the verdict, its sentence, and why
    in plain words (:func:`scoreboard`'s column)."""

    claim: Claim
    effect: Effect | None
    verdict: str
    sentence: str
    why: str = ""

    @property
    def kind(self) -> str:
        """The verdict without its reason: one of :data:`VERDICTS`."""
        return self.verdict.split(" (")[0]


def _verdict(e: Effect | None, expect: str) -> str:
    if e is None or e.apart is None:
        return "not shown (too few seeds)"
    sign = 1 if expect in (">", ">=") else -1
    if e.apart and e.diff * sign > 0:
        return "holds"
    if e.apart and e.diff * sign < 0:
        return "reversed"
    return "holds (no lower: within the seed spread)" if expect == ">=" else "no difference (the seed ranges overlap)"


def _side(runs: Sequence[Run], method: str, measure: Measure) -> list[float | None]:
    """One number per run of ``method`` (``"qae@0.8"``: the qae runs with quantile_k 0.8)."""
    name, _, k = method.partition("@")
    chosen = [r for r in runs if r.method == name and (not k or float(r.config["trainer"]["quantile_k"]) == float(k))]
    return [measure.number(r) for r in chosen]


def _why(kind: str, e: Effect, a: tuple[str, Measure], b: tuple[str, Measure], f: str) -> str:
    """The verdict's reason in plain words, from the numbers."""
    (ma, measure_a), (mb, measure_b) = a, b
    sides = (
        f"{ma} {f.format(e.a.mean)} vs {mb} {f.format(e.b.mean)}"
        if ma != mb
        else f"{ma}, {measure_a.label or 'a'} {f.format(e.a.mean)} vs {measure_b.label or 'b'} {f.format(e.b.mean)}"
    )
    if kind in ("holds", "reversed") and e.apart:
        return f"{sides}: every one of the {e.a.n} + {e.b.n} seeds apart" + (
            ", the other way round" if kind == "reversed" else ""
        )
    if kind == "holds":
        return f"{sides}: within the seed spread, so not lower"
    spread = "" if e.d is None else f", {abs(e.d):.1f} seed spreads"
    return f"{sides}: the seeds overlap{spread}"


def judge(claim: Claim, runs: Mapping[str, Sequence[Run]]) -> Judgement:
    r"""Judge one claim on the runs of its experiment (``runs[claim.experiment]``) and say it in a sentence.

    A claim whose checks fail on these runs (:data:`Check`: a control that never exploded, a clip that never acted)
    cannot be tested here, whatever the numbers; the sentence still gives them.

    >>> from qae_lab.analysis.compare import Run
    >>> mk = lambda m, s, e: Run(f"{m}-{s}", m, s, {}, [{"step": t, "entropy": e} for t in range(1, 4)], None, None)
    >>> runs = {"entropy": [mk("mean+clip_higher", s, 0.30 + 0.01 * s) for s in range(3)]
    ...                    + [mk("qae+clip_higher", s, 0.20 + 0.01 * s) for s in range(3)]}
    >>> j = judge(next(c for c in CLAIMS if c.key == "pass1"), runs); j.verdict  # no evaluations in these runs
    'not shown (no runs)'
    >>> j = judge(CLAIMS[0], runs); j.kind, j.why  # three steps: too short to show a rise
    ('cannot be tested here', 'no run of mean+clip_higher logs entropy for 20 steps or more; no run reuses a generation, so the clip never acts')
    >>> print(j.sentence)  # doctest: +NORMALIZE_WHITESPACE
    QAE (arXiv 2509.22611): "with the mean baseline and Clip-Higher, entropy explodes early in training".
    Measured as mean entropy over the first third of the steps: mean+clip_higher 0.3100±0.0082 vs
    qae+clip_higher 0.2100±0.0082 (3 and 3 seeds), difference +0.1000 = 12.2 seed spreads, every seed apart;
    expected >: cannot be tested here: no run of mean+clip_higher logs entropy for 20 steps or more; no run reuses a
    generation, so the clip never acts.
    """
    if claim.experiment not in runs:
        raise ValueError(
            f"runs hold no experiment {claim.experiment!r} (claim {claim.key!r}); experiments: {sorted(runs)}"
        )
    exp = runs[claim.experiment]
    (ma, measure_a), (mb, measure_b) = claim.a, claim.b
    e = effect(_side(exp, ma, measure_a), _side(exp, mb, measure_b))
    what = measure_a.what if measure_a.what == measure_b.what else f"{measure_a.what} against {measure_b.what}"
    head = f'{claim.source}: "{claim.statement}".\nMeasured as {what}: '
    if e is None:
        return Judgement(
            claim, None, "not shown (no runs)", head + f"no runs of {ma} or {mb}.", f"no runs of {ma} or {mb}"
        )
    verdict = _verdict(e, claim.expect)
    reasons = [r for r in (check(exp) for check in claim.checks) if r]
    f = f"{{:.{claim.digits}f}}"
    spread = "no seed spread" if e.d is None else f"{e.d:.1f} seed spreads"
    apart = {True: "every seed apart", False: "the seed ranges overlap", None: "too few seeds"}[e.apart]
    if reasons:
        verdict = why = "; ".join(reasons)
        verdict = f"cannot be tested here ({why})"
    elif e.apart is None:
        why = "too few seeds to compare"
    else:
        why = _why(verdict.split(" (")[0], e, claim.a, claim.b, f)
    return Judgement(
        claim,
        e,
        verdict,
        head
        + (
            f"{ma} {f.format(e.a.mean)}±{f.format(e.a.std)} vs {mb} {f.format(e.b.mean)}±{f.format(e.b.std)} "
            f"({e.a.n} and {e.b.n} seeds), difference {e.diff:+.{claim.digits}f} = {spread}, {apart}; "
            f"expected {claim.expect}: {verdict.split(' (')[0]}" + (f": {why}." if reasons else ".")
        ),
        why,
    )


def verdict_list(judgements) -> str:
    r"""One line per judged claim: its verdict, who claims it, and the claim.

    >>> print(verdict_list([judge(CLAIMS[0], {"entropy": []})]))
                not shown  QAE: with the mean baseline and Clip-Higher, entropy explodes early in training
    """
    return "\n".join(f"{j.kind:>21}  {j.claim.source.split(' (')[0]}: {j.claim.statement}" for j in judgements)


_LABELS = {"no difference": "tested, no difference"}  # the scoreboard's words for a verdict kind, where they differ


def scoreboard(judgements: Iterable[Judgement]) -> list[dict[str, str]]:
    r"""One row per judged claim: the claim in a few words, the paper that makes it, the verdict and why, in plain
    words (rows for :func:`scoreboard_markdown` or :func:`qae_lab.analysis.compare.format_table`).

    >>> rows = scoreboard([judge(CLAIMS[0], {"entropy": []})])
    >>> rows[0]["claim"], rows[0]["paper"], rows[0]["verdict"], rows[0]["why"]
    ("the mean baseline's entropy explodes early; QAE's does not", 'QAE', 'not shown', 'no runs of mean+clip_higher or qae+clip_higher')
    """
    rows = []
    for j in judgements:
        if not isinstance(j, Judgement):
            raise ValueError(
                "judgements must be qae_lab.analysis.claims.Judgement values (qae_lab.analysis.claims.judge's)"
            )
        paper = j.claim.source.split(" (")[0].split(":")[0]
        rows.append(
            {
                "claim": j.claim.short or j.claim.statement,
                "paper": "the lab" if paper == "no paper" else paper,
                "verdict": _LABELS.get(j.kind, j.kind),
                "why": j.why,
            }
        )
    return rows


def scoreboard_markdown(rows: Sequence[Mapping[str, str]]) -> str:
    r""":func:`scoreboard`'s rows as a Markdown table (``IPython.display.Markdown`` shows it in a notebook).

    >>> print(scoreboard_markdown([{"claim": "a | b", "paper": "QAE", "verdict": "holds", "why": "x"}]))
    | claim | paper | verdict | why |
    | --- | --- | --- | --- |
    | a \| b | QAE | **holds** | x |
    """
    cols = ("claim", "paper", "verdict", "why")
    cell = lambda r, c: str(r[c]).replace("|", "\\|")  # noqa: E731 - a cell's text, its bars escaped
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for r in rows:
        lines.append(f"| {cell(r, 'claim')} | {cell(r, 'paper')} | **{cell(r, 'verdict')}** | {cell(r, 'why')} |")
    return "\n".join(lines)


class Direction(NamedTuple):
    r"""A judged claim as a move from side a to side b, for :func:`qae_lab.lab.exercises.check_direction`: ``before`` and
    ``after`` the two sides' means over seeds, ``tolerance`` their pooled seed std sqrt((std_a^2 + std_b^2) / 2) (a
    move within it counts as "same"), and what moved (``quantity``) when what changed (``change``), in words."""

    before: float
    after: float
    tolerance: float
    quantity: str
    change: str


def direction(judgement: Judgement) -> Direction:
    r"""Side a -> side b of a judged claim as a :class:`Direction` (a predict-then-run exercise's measurement).

    >>> from qae_lab.analysis.compare import Run
    >>> mk = lambda m, s, e: Run(f"{m}-{s}", m, s, {}, [{"step": t, "entropy": e} for t in range(1, 4)], None, None)
    >>> runs = {"entropy": [mk("mean+clip_higher", s, 0.30 + 0.01 * s) for s in range(3)]
    ...                    + [mk("qae+clip_higher", s, 0.20 + 0.01 * s) for s in range(3)]}
    >>> d = direction(judge(CLAIMS[1], runs)); round(d.before, 4), round(d.after, 4), round(d.tolerance, 4)
    (0.31, 0.21, 0.0082)
    >>> d.quantity, d.change
    ('the mean entropy over the last third of the steps', 'the method changed from mean+clip_higher to qae+clip_higher')
    """
    if not isinstance(judgement, Judgement):
        raise ValueError(f"judgement must be a qae_lab.analysis.claims.Judgement, got {type(judgement).__name__}")
    e = judgement.effect
    if e is None:
        raise ValueError(f"claim {judgement.claim.key!r} has no runs on a side: nothing measured to compare")
    (ma, measure_a), (mb, measure_b) = judgement.claim.a, judgement.claim.b
    quantity = "the " + (
        measure_a.what if measure_a.what == measure_b.what else f"{measure_a.what} against {measure_b.what}"
    )
    change = f"the method changed from {ma} to {mb}" if ma != mb else f"{ma}'s {measure_a.what} became {measure_b.what}"
    return Direction(e.a.mean, e.b.mean, math.sqrt((e.a.std**2 + e.b.std**2) / 2), quantity, change)


def summary_lines(judgements: Iterable[Judgement]) -> list[str]:
    r"""The closing summary of judged claims: how many there are of each verdict, per paper and in all; then each
    claim that holds or is reversed with its two sides' means and its effect in seed spreads.

    >>> from qae_lab.analysis.compare import Run
    >>> mk = lambda m, s, x: Run(f"{m}-{s}", m, s, {}, [{"step": t, "ledger/dh_hard": x, "ledger/dh_easy": x}
    ...                                                 for t in range(1, 4)], None, None)
    >>> runs = {"entropy": [mk("mean", s, 0.3 + 0.01 * s) for s in range(3)]
    ...                    + [mk("qae", s, 0.2 + 0.01 * s) for s in range(3)]}
    >>> for line in summary_lines([judge(c, runs) for c in CLAIMS[2:4]]):
    ...     print(line)
    2 claims judged: 1 holds, 1 reversed, 0 no difference, 0 cannot be tested here, 0 not shown.
      QAE: 2 claims: 1 holds, 1 reversed, 0 no difference, 0 cannot be tested here, 0 not shown.
    holds: hard_gate: mean 0.31000 vs qae 0.21000 (+12.2 seed spreads).
    reversed: easy_gate: mean 0.31000 vs qae 0.21000 (+12.2 seed spreads).
    """
    judged = list(judgements)
    if not all(isinstance(j, Judgement) for j in judged):
        raise ValueError(
            "judgements must be qae_lab.analysis.claims.Judgement values (qae_lab.analysis.claims.judge's)"
        )
    kind = [j.kind for j in judged]
    paper = [j.claim.source.split(" (")[0].split(":")[0] for j in judged]  # QAE | SA-AH-GRPO | no paper

    def counts(chosen: list[int]) -> str:
        n = Counter(kind[i] for i in chosen)
        return (
            f"{len(chosen)} claim{'s' * (len(chosen) != 1)}: {n['holds']} hold{'s' * (n['holds'] == 1)}, "
            + ", ".join(f"{n[v]} {v}" for v in VERDICTS[1:])
            + "."
        )

    lines = [counts(list(range(len(judged)))).replace(":", " judged:", 1)]
    lines += [f"  {src}: " + counts([i for i, p in enumerate(paper) if p == src]) for src in dict.fromkeys(paper)]
    for j, verdict in zip(judged, kind):
        if verdict in ("holds", "reversed") and j.effect is not None:
            (ma, _), (mb, _), f = j.claim.a, j.claim.b, f"{{:.{j.claim.digits}f}}"
            spread = "no seed spread" if j.effect.d is None else f"{j.effect.d:+.1f} seed spreads"
            lines.append(
                f"{verdict}: {j.claim.key}: {ma} {f.format(j.effect.a.mean)} vs {mb} "
                f"{f.format(j.effect.b.mean)} ({spread})."
            )
    return lines


def _per_method(runs: Sequence[Run], number: Callable[[Run], float | None]) -> dict[str, Stat | None]:
    return {m: stat(v) for m, v in per_method(runs, number).items()}


def clipped_share(runs: Sequence[Run]) -> float | None:
    r"""The share of tokens PPO's clip stopped on the passes that reuse a generation, averaged over the runs that
    log it (:func:`qae_lab.analysis.phenomena.clipped_fraction`); None where none does.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = lambda x: [{"step": 1, "reward": 0.5}, {"step": 2, "clip_ratio/region_mean": x}]
    >>> round(clipped_share([Run("a", "mean", 0, {}, rows(0.001), None, None), Run("b", "qae", 0, {}, rows(0.003),
    ...                      None, None)]), 6)
    0.002
    """
    shares = [x for x in (clipped_fraction(r) for r in runs) if x is not None]
    return sum(shares) / len(shares) if shares else None


def clip_sentence(runs: Sequence[Run]) -> str:
    r"""How much PPO's clip acted: per method, the mean share of clipped tokens on the passes that reuse a generation.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "reward": 0.5}, {"step": 2, "clip_ratio/region_mean": 0.002}]
    >>> print(clip_sentence([Run(f"r{s}", "mean", s, {}, rows, None, None) for s in range(2)]))
    Tokens clipped on the passes that reuse a generation (the first pass clips nothing): mean 0.20%±0.00% (2 seeds).
    """
    parts = [
        f"{m} {100 * st.mean:.2f}%±{100 * st.std:.2f}% ({st.n} seeds)"
        for m, st in _per_method(runs, clipped_fraction).items()
        if st is not None
    ]
    return (
        "Tokens clipped on the passes that reuse a generation (the first pass clips nothing): "
        + ("; ".join(parts) if parts else "none logged")
        + "."
    )


def sharpening_sentences(runs: Sequence[Run]) -> list[str]:
    r"""Per method: pass@1, pass@32 and distinct correct texts (of 32 samples) before and after training, and
    whether that is sharpening (pass@1 up while pass@32 does not rise and the distinct correct texts become fewer:
    RLVR turning pass@k into pass@1 by narrowing what the policy samples).

    >>> from qae_lab.analysis.compare import Run
    >>> ev = lambda p1, p32, d: {"pass@1": p1, "pass@32": p32, "distinct_correct": d}
    >>> runs = [Run(f"r{s}", "qae", s, {}, [], ev(0.4, 0.98, 12), ev(0.5, 0.97, 8)) for s in range(2)]
    >>> print(sharpening_sentences(runs)[0])
    qae (2 seeds): pass@1 0.400 -> 0.500, pass@32 0.980 -> 0.970, distinct correct texts of 32 samples 12.0 -> 8.0: sharpened: pass@1 up, pass@32 not, fewer distinct correct texts.
    """
    out = []
    for method, group in group_by_method(runs).items():
        pick = {
            (when, key): stat((getattr(r, when) or {}).get(key) for r in group)
            for when in ("before", "after")
            for key in ("pass@1", "pass@32", "distinct_correct")
        }
        if any(v is None for v in pick.values()):
            continue
        up1 = pick["after", "pass@1"].mean > pick["before", "pass@1"].mean
        up32 = pick["after", "pass@32"].mean > pick["before", "pass@32"].mean
        fewer = pick["after", "distinct_correct"].mean < pick["before", "distinct_correct"].mean
        ceiling = pick["before", "pass@32"].mean >= 0.9995  # 1.000 to the three digits shown
        word = (
            "pass@1 fell: unlearned"
            if not up1
            else "pass@32 was already 1.000 before training and could not rise, so only the distinct correct "
            + (
                "texts can show sharpening: fewer of them, sharpened"
                if fewer
                else "texts can show sharpening: no fewer of them, no sign of it"
            )
            if ceiling
            else "pass@1 and pass@32 both rose"
            if up32
            else "sharpened: pass@1 up, pass@32 not, fewer distinct correct texts"
            if fewer
            else "pass@1 up with pass@32 not up but no fewer distinct correct texts: no sign of sharpening"
        )
        out.append(
            f"{method} ({len(group)} seeds): pass@1 {pick['before', 'pass@1'].mean:.3f} -> "
            f"{pick['after', 'pass@1'].mean:.3f}, pass@32 {pick['before', 'pass@32'].mean:.3f} -> "
            f"{pick['after', 'pass@32'].mean:.3f}, distinct correct texts of 32 samples "
            f"{pick['before', 'distinct_correct'].mean:.1f} -> {pick['after', 'distinct_correct'].mean:.1f}: "
            f"{word}."
        )
    return out


def punished_correct_sentence(runs: Sequence[Run], method: str = "qae") -> str:
    r"""Where the quantile baseline punishes correct answers too: under a graded reward an easy group's K-quantile can
    be the top score (b_K = 7.5), and then every correct answer scoring below it gets A < 0.

    Counts, over ``method``'s runs, the correct answers given a negative advantage (``qae/neg_correct`` summed over
    the steps) against all correct answers sampled (``qae/success_rate`` times the step's responses).

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "reward": 6.0, "qae/neg_correct": 3.0, "qae/success_rate": 0.5}]
    >>> cfg = {"trainer": {"generation_batch_size": 64}}
    >>> print(punished_correct_sentence([Run("r", "qae", 0, cfg, rows, None, None)]))  # doctest: +ELLIPSIS
    Under the composite reward the quantile baseline also punishes correct answers: qae gave 3.0±0.0 correct answers a negative advantage per run (1 seeds), 9.38% of the 32 correct answers it sampled. ...
    """

    def counts(r: Run) -> tuple[float, float]:
        n = r.config["trainer"]["generation_batch_size"]
        return sum(series(r, QAE_NEG_CORRECT)[1]), sum(x * n for x in series(r, QAE_SUCCESS_RATE)[1])

    chosen = [counts(r) for r in runs if r.method == method]
    if not chosen:
        return f"no {method} runs"
    punished, correct = stat(c[0] for c in chosen), stat(c[1] for c in chosen)
    share = sum(c[0] for c in chosen) / max(sum(c[1] for c in chosen), 1.0)
    return (
        f"Under the composite reward the quantile baseline also punishes correct answers: {method} gave "
        f"{punished.mean:.1f}±{punished.std:.1f} correct answers a negative advantage per run ({punished.n} seeds), "
        f"{100 * share:.2f}% of the {correct.mean:.0f} correct answers it sampled. It happens in easy groups "
        f"whose K-quantile is the top score: with K = 0.4 and G = 8 the baseline is the 4th smallest reward, so "
        f"once 5 of the 8 answers share the top score (up to 7.5: a correct answer in the strict format with 4 "
        f"calculation lines), every correct answer scoring less (a slipped format costs 0.5 or more, each "
        f"missing calculation line 0.25) gets A < 0, as under a mean that high scores lift."
    )


def model_properties(name: str = "embedded-sums") -> str:
    r"""The measured section of an embedded model's README (``benchmarks/task_properties.py`` wrote it).

    >>> "distinct correct completions" in model_properties()
    True
    """
    text = (embedded_dir(name) / "README.md").read_text(encoding="utf-8")
    start, end = text.find("<!-- measured -->"), text.find("<!-- /measured -->")
    if start < 0 or end < 0:
        raise ValueError(f"{embedded_dir(name) / 'README.md'} has no measured section")
    return text[start + len("<!-- measured -->") : end].strip()
