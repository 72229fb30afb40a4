r"""The sequence-policy findings: finding and reading the committed file, and the sentences stated from it.

``benchmarks/seqpolicy_findings.py`` runs :func:`qae_lab.analysis.seqpolicy_runs.sweep_settings` with
:func:`qae_lab.toys.seqpolicy_training.simulate` and :func:`qae_lab.toys.seqpolicy_training.update_variance` and keeps
:func:`qae_lab.analysis.seqpolicy_runs.summarise_run` of each run in ``data/seqpolicy/findings.json``; notebook 09 (07's
appendix) states every result with :func:`findings_sentences` (the trainer's ledger in plain words:
:func:`trainer_ledger_sentences`; the ledger's cells: :func:`cell_sentences`; the headlines:
:func:`summary_sentences`), so that each sentence is generated from the committed data and stays true when the runs
change.

How a comparison is worded (:func:`compare_sentence`): setting A against setting B over the same seeds (the same
tasks and the same random stream, so seeds pair up): both sides as mean ± std over seeds, the difference in
seed-spread units (d = difference / pooled population std), and how many paired seeds go the same way. "lower" /
"higher" only when every paired seed agrees (with 8 seeds a sign test's p = 2/256); otherwise "no clear
difference". With few seeds this is a description, not a significance test.

QAE's Proposition 4.2 by regime in training (``benchmarks/seqpolicy_regimes.py``, ``data/seqpolicy/regimes.json``,
:func:`load_regimes`) is stated by :func:`regime_sentences`, with the same paired comparison, and judged claim by claim
in notebook 07's scoreboard (:func:`regime_scoreboard`, :func:`scoreboard_markdown`): "holds" where every paired seed
goes the claimed way, "reversed" where every seed goes the other way, "tested, no difference" where the seeds
disagree, and "cannot be tested here" for a claim this toy cannot reach. :func:`regime_curve` reads one committed
curve (the notebook's prediction is checked against it).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from qae_lab.analysis.committed_data import data_dir
from qae_lab.ledger import LEDGER_FORMS
from qae_lab.analysis.stats import Stat, stat
from qae_lab.toys.seqpolicy import STARTS
from qae_lab.analysis.seqpolicy_runs import CELLS, K_VALUES, REGIMES, regime_setting_name, setting_name
from qae_lab.toys.seqpolicy_training import OPTIMIZERS

__all__ = [
    "FORMS",
    "find_findings",
    "load_findings",
    "find_regimes",
    "load_regimes",
    "Paired",
    "paired",
    "compare_sentence",
    "findings_sentences",
    "tracking_sentences",
    "trainer_ledger_sentences",
    "cell_sentences",
    "VARIANCE_QUANTITIES",
    "variance_sentences",
    "summary_sentences",
    "regime_sentences",
    "regime_curve",
    "ScoreRow",
    "VERDICTS",
    "regime_scoreboard",
    "scoreboard_markdown",
]

# the per-token estimators of qae_lab.ledger.entropy_change_terms, as the sentences name them
FORMS = {"npg": "npg (the trainer's ledger/*)", "pg": "pg", "reinforce": "reinforce"}
OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam"}


def find_findings(start: str | os.PathLike | None = None) -> Path:
    r"""The committed ``findings.json`` of ``data/seqpolicy``: :func:`qae_lab.analysis.committed_data.data_dir` ``("seqpolicy",
    start)`` (a checkout's ``data/`` from ``start``, default the cwd, upwards; else the copy the package carries).

    >>> find_findings().name
    'findings.json'
    """
    return data_dir("seqpolicy", start) / "findings.json"


def _load(path: Path, script: str) -> dict:
    """A committed JSON file of ``data/seqpolicy``, or ``ValueError`` naming ``path`` and the script that makes it."""
    if not path.is_file():
        raise ValueError(
            f"path must be a {path.name} file; none found (make it with python benchmarks/{script}), got {path}"
        )
    return json.loads(path.read_text())


def load_findings(path: str | os.PathLike | None = None) -> dict:
    r"""The findings as a dict (``meta``, ``runs``, ``variance``); ``path`` None: :func:`find_findings`.

    >>> sorted(load_findings())
    ['meta', 'runs', 'variance']
    """
    return _load(find_findings() if path is None else Path(path), "seqpolicy_findings.py")


def find_regimes(start: str | os.PathLike | None = None) -> Path:
    r"""The committed ``regimes.json`` of ``data/seqpolicy``, looked up as :func:`find_findings` looks.

    >>> find_regimes().name
    'regimes.json'
    """
    return data_dir("seqpolicy", start) / "regimes.json"


def load_regimes(path: str | os.PathLike | None = None) -> dict:
    r"""QAE's Proposition 4.2 by regime in training (``benchmarks/seqpolicy_regimes.py``) as a dict: ``meta``,
    ``timing``, ``search`` (the tries that chose the settings), ``runs`` (setting name -> ``settings``, ``seconds``,
    ``groups`` -> :func:`qae_lab.analysis.seqpolicy_runs.summarise_regimes`), ``runner_up`` (the search's runner-up's
    ``settings`` and its Adam ``runs`` on the same seeds); ``path`` None: :func:`find_regimes`.

    >>> sorted(load_regimes())
    ['meta', 'runner_up', 'runs', 'search', 'timing']
    """
    return _load(find_regimes() if path is None else Path(path), "seqpolicy_regimes.py")


class Paired(NamedTuple):
    r"""Setting A against B over paired seeds: each side's :class:`~qae_lab.analysis.stats.Stat`, ``diff`` = mean(A) -
    mean(B), ``d`` in seed spreads (None without spread), ``n_lower`` seeds where A < B, ``n_higher``, ``n``.

    >>> paired([1.0, 2.0], [2.0, 2.5]).n_lower
    2
    """

    a: Stat
    b: Stat
    diff: float
    d: float | None
    n_lower: int
    n_higher: int
    n: int


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> Paired:
    r"""The :class:`Paired` comparison of per-seed numbers (the i-th of each from the same seed; None pairs skipped).

    >>> p = paired([0.29, 0.27, 0.31], [0.34, 0.33, 0.36]); round(p.diff, 3), round(p.d, 1), p.n_lower
    (-0.053, -3.7, 3)
    """
    if len(a) != len(b):
        raise ValueError(f"a and b must hold one number per seed each, got {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if not pairs:
        raise ValueError("a and b must share at least one seed with numbers on both sides")
    sa, sb = stat(x for x, _ in pairs), stat(y for _, y in pairs)
    pooled = math.sqrt((sa.std**2 + sb.std**2) / 2)
    diff = sa.mean - sb.mean
    return Paired(
        sa,
        sb,
        diff,
        diff / pooled if pooled > 0 else None,
        sum(x < y for x, y in pairs),
        sum(x > y for x, y in pairs),
        len(pairs),
    )


def _value(run: Mapping, quantity: str) -> list:
    """A per-seed list from a run's summary by a dotted path (``"ledger.sampled.dh_easy_neg"``)."""
    node = run
    for key in quantity.split("."):
        node = node[key]
    return node


def compare_sentence(
    findings: Mapping,
    a: str,
    b: str,
    quantity: str,
    what: str,
    *,
    unit: str = "nats",
    digits: int = 2,
    label_a: str | None = None,
    label_b: str | None = None,
) -> str:
    r"""One sentence comparing a quantity between two settings of the findings over their paired seeds.

    Args:
        findings: :func:`load_findings`. a, b: setting names (keys of ``findings["runs"]``).
        quantity: a dotted path into a run's summary (:func:`qae_lab.analysis.seqpolicy_runs.summarise_run`), e.g.
            ``"ledger.sampled.dh"``.
        what: what is compared, the sentence's start. unit, digits: how the numbers are written.
        label_a, label_b: names for the settings (default: their keys).

    >>> f = {"runs": {"x": {"final_entropy": [0.29, 0.27, 0.31]}, "y": {"final_entropy": [0.34, 0.33, 0.36]}}}
    >>> compare_sentence(f, "x", "y", "final_entropy", "final entropy, flat start")
    'final entropy, flat start, x vs y: 0.29±0.02 vs 0.34±0.01 nats over 3 seeds: lower, 3.7 seed-spreads apart (3 of 3 paired seeds lower)'
    """
    return _sentence(
        what,
        label_a or a,
        label_b or b,
        _value(findings["runs"][a], quantity),
        _value(findings["runs"][b], quantity),
        unit,
        digits,
    )


def _direction(p: Paired) -> tuple[str, str, int]:
    """The comparison's word ("lower" / "higher" only when every paired seed agrees, else "no clear difference") and
    the more frequent direction with its number of seeds."""
    word = "lower" if p.n_lower == p.n else "higher" if p.n_higher == p.n else "no clear difference"
    most = ("lower", p.n_lower) if p.n_lower >= p.n_higher else ("higher", p.n_higher)
    return word, *most


def _sentence(what: str, label_a: str, label_b: str, a: Sequence, b: Sequence, unit: str, digits: int) -> str:
    """:func:`compare_sentence` of two per-seed lists."""
    p = paired(a, b)
    word, *most = _direction(p)
    spread = "no seed spread" if p.d is None else f"{abs(p.d):.1f} seed-spreads apart"
    fmt = lambda s: f"{s.mean:.{digits}f}±{s.std:.{digits}f}"  # noqa: E731
    unit = f" {unit}" if unit else ""
    return (
        f"{what}, {label_a} vs {label_b}: {fmt(p.a)} vs {fmt(p.b)}{unit} over {p.n} seeds: {word}, "
        f"{spread} ({most[1]} of {p.n} paired seeds {most[0]})"
    )


def _opts(clip_higher: bool, std: bool) -> str:
    return f"{'Clip-Higher' if clip_higher else 'clip 0.2'}, {'std scaling' if std else 'no std scaling'}"


def _ms(values: Sequence, fmt: str) -> str:
    """mean±std over seeds in ``fmt`` (e.g. ``"+.2f"``), or "n/a" where no seed has a number."""
    s = stat(values)
    if s is None:
        return "n/a"
    return f"{format(s.mean, fmt)}±{format(s.std, fmt.lstrip('+'))}"


def _mean(values: Sequence) -> float:
    """The mean over seeds (NaN where no seed has a number)."""
    st = stat(values)
    return math.nan if st is None else st.mean


def _tracking_sentence(run: Mapping, label: str, adam: bool) -> str:
    """How the three per-token estimators tracked the exact change in one setting, over its seeds."""
    t = run["tracking"]
    forms = "; ".join(
        f"{FORMS[f]} correlates {_ms(t[f]['corr'], '+.2f')}, has its sign on "
        f"{_ms(t[f]['sign_agree'], '.0%')} of steps and sums to {_ms(t[f]['ratio'], '+.3g')} times it"
        for f in LEDGER_FORMS
    )
    best = max(LEDGER_FORMS, key=lambda f: _mean(t[f]["corr"]))
    tail = (
        " (under Adam the sums' scale is nominal: Adam rescales every logit's step)"
        if adam
        else f"; the states' visitation, which per-state terms cannot see, is {_ms(t['visit_share'], '.0%')} of the "
        "exact change"
    )
    return (
        f"{label}: per step, against the exact first-order change of the whole step (grad H . dz), {forms}; "
        f"the {best} form tracks it best{tail}"
    )


def _headline(start: str, baseline: str, optimizer: str = "sgd") -> str:
    """The setting name of the headline comparison: K = 0.4, Clip-Higher and the group std."""
    return setting_name(start, baseline, 0.4, True, True, optimizer)


def tracking_sentences(findings: Mapping) -> list[str]:
    r"""How each per-token estimator tracked the exact first-order change of each step, per start, optimizer and
    baseline (K = 0.4, Clip-Higher, std), and the trainer's form (npg) compared between the baselines and between
    the optimizers over paired seeds.

    >>> len(tracking_sentences(load_findings()))
    16
    """
    out = []
    corr = lambda start, b, opt: findings["runs"][_headline(start, b, opt)]["tracking"]["npg"]["corr"]  # noqa: E731
    what = "per-step correlation of the trainer's ledger (npg) with the exact change"
    for start in STARTS:
        for opt in OPTIMIZERS:
            for b in ("mean", "quantile"):
                out.append(
                    _tracking_sentence(
                        findings["runs"][_headline(start, b, opt)],
                        f"{start} start, {OPTIMIZER_NAMES[opt]}, {b}",
                        opt == "adam",
                    )
                )
            out.append(
                _sentence(
                    f"{what}, {OPTIMIZER_NAMES[opt]}, {start} start",
                    "quantile",
                    "mean",
                    corr(start, "quantile", opt),
                    corr(start, "mean", opt),
                    "",
                    2,
                )
            )
        for b in ("mean", "quantile"):
            out.append(
                _sentence(
                    f"{what}, {b}, {start} start", "Adam", "SGD", corr(start, b, "adam"), corr(start, b, "sgd"), "", 2
                )
            )
    return out


def trainer_ledger_sentences(findings: Mapping) -> list[str]:
    r"""In plain words: which form the trainer logs; how each form tracked the exact change under each optimizer over
    the four headline settings (flat / peaked start x mean / quantile baseline); the trainer's form under Adam against
    SGD, and under the quantile baseline against the mean. From the findings' seed means.

    >>> trainer_ledger_sentences(load_findings())[0][:40]
    'QAETrainer logs the form npg as ledger/*'
    """
    n = findings["meta"]["n_seeds"]
    out = [
        "QAETrainer logs the form npg as ledger/*: d_t = -(log pi_t + H_t) A_t, Cui et al.'s covariance "
        "Cov(log pi, A) with the state's exact centring"
    ]
    rng = lambda xs, fmt: f"{format(min(xs), fmt)} to {format(max(xs), fmt)}"  # noqa: E731
    avg = lambda xs: sum(xs) / len(xs)  # noqa: E731
    npg = {}  # (optimizer, baseline) -> the trainer's form's (corr, sign_agree) seed means, one per start
    for opt in OPTIMIZERS:
        runs = {
            (start, b): findings["runs"][_headline(start, b, opt)]["tracking"]
            for start in STARTS
            for b in ("mean", "quantile")
        }
        corr = {f: [_mean(t[f]["corr"]) for t in runs.values()] for f in LEDGER_FORMS}
        sign = {f: [_mean(t[f]["sign_agree"]) for t in runs.values()] for f in LEDGER_FORMS}
        for (start, b), t in runs.items():
            npg.setdefault((opt, b), []).append((_mean(t["npg"]["corr"]), _mean(t["npg"]["sign_agree"])))
        forms = "; ".join(
            f"the {f} form {rng(corr[f], '+.2f')} (sign right on {rng(sign[f], '.0%')} of steps)" for f in LEDGER_FORMS
        )
        best = max(LEDGER_FORMS, key=lambda f: sum(corr[f]))
        out.append(
            f"Under {OPTIMIZER_NAMES[opt]}, the per-step total's correlation with the exact first-order "
            f"change, over the four settings' seed means ({n} seeds each): {forms}. Best on average: {best}"
        )
    pairs = {opt: [x for b in ("mean", "quantile") for x in npg[opt, b]] for opt in OPTIMIZERS}
    higher = sum(a[0] > s[0] for a, s in zip(pairs["adam"], pairs["sgd"]))
    out.append(
        f"The trainer's form (npg) tracked the exact change better under Adam than under SGD in {higher} of "
        f"{len(pairs['sgd'])} settings (mean correlation {avg([c for c, _ in pairs['adam']]):+.2f} against "
        f"{avg([c for c, _ in pairs['sgd']]):+.2f}; its sign right on {avg([g for _, g in pairs['adam']]):.0%} "
        f"against {avg([g for _, g in pairs['sgd']]):.0%} of steps)"
    )
    by_base = {b: [x for opt in OPTIMIZERS for x in npg[opt, b]] for b in ("mean", "quantile")}
    lower = sum(q[0] < m[0] for q, m in zip(by_base["quantile"], by_base["mean"]))
    out.append(
        f"Under the quantile baseline the trainer's form correlated less with the exact change than under the "
        f"mean in {lower} of {len(by_base['mean'])} (start, optimizer) settings (mean correlation "
        f"{avg([c for c, _ in by_base['quantile']]):+.2f} against {avg([c for c, _ in by_base['mean']]):+.2f})"
    )
    return out


def cell_sentences(findings: Mapping) -> list[str]:
    r"""Under SGD, per start and baseline: the ledger cell that moved the entropy most (first passes summed over
    training), and the cell each per-token form makes largest (every pass, in its own units).

    >>> len(cell_sentences(load_findings()))
    4
    """
    out = []
    top = lambda sums: max(CELLS, key=lambda c: abs(_mean(sums[c])))  # noqa: E731
    for start in STARTS:
        for b in ("mean", "quantile"):
            ledger = findings["runs"][_headline(start, b)]["ledger"]
            exact = top(ledger["sampled"])
            named = {f: top(ledger[f"estimator_{f}"]) for f in LEDGER_FORMS}
            forms = ", ".join(f"{f} {'the same' if c == exact else CELLS[c]}" for f, c in named.items())
            out.append(
                f"{start} start, {b}: the ledger cell that moved the entropy most is {CELLS[exact]} ({exact}, "
                f"{_ms(ledger['sampled'][exact], '+.3f')} of the total {_ms(ledger['sampled']['dh'], '+.3f')} "
                f"nats, first passes summed over training); the per-token forms' largest cell: {forms}"
            )
    return out


# quantile (K = 0.4) against mean, both with Clip-Higher and the std: (topic, quantity, what, unit, digits)
_VERSUS_MEAN = (
    ("entropy", "early_entropy", "entropy after {early_step} steps", "nats", 2),
    ("ledger", "ledger.sampled.dh", "summed entropy change from all samples (dh)", "nats", 3),
    *(("ledger", f"ledger.sampled.{c}", f"summed entropy change from {w} ({c})", "nats", 3) for c, w in CELLS.items()),
    ("regimes", "final_entropy_hard0", "final entropy of the prompts hard at the start", "nats", 2),
    ("regimes", "final_entropy_easy0", "final entropy of the prompts easy at the start", "nats", 2),
    ("regimes", "hard_frac", "share of hard prompts", "", 3),
    ("regimes", "zero_adv_frac", "share of zero advantages", "", 3),
    ("regimes", "final_success", "final success rate", "", 3),
    ("regimes", "final_success_hard0", "final success rate of the prompts hard at the start", "", 3),
    ("estimator", "ledger.estimator_npg.dh", "the trainer's per-token ledger (npg), summed", "nats", 3),
    ("estimator", "dh_first_order", "the exact first-order change, summed", "nats", 3),
)


def findings_sentences(findings: Mapping) -> dict[str, list[str]]:
    r"""Every result of the findings as sentences, by topic: ``entropy``, ``ledger``, ``regimes``, ``estimator``,
    ``clipping``, ``adam``. Quantile means K = 0.4 unless a K is named, the optimizer SGD unless Adam is named;
    ledger numbers are first-order entropy changes summed over training (nats; ``sampled``: the first of the two
    passes of each step; the estimators and ``dh_first_order``: both).

    >>> sorted(findings_sentences(load_findings()))
    ['adam', 'clipping', 'entropy', 'estimator', 'ledger', 'regimes']
    """
    out: dict[str, list[str]] = {k: [] for k in ("entropy", "ledger", "regimes", "estimator", "clipping", "adam")}
    q = lambda start, k=0.4, c=True, s=True: setting_name(start, "quantile", k, c, s)  # noqa: E731
    m = lambda start, c=True, s=True: setting_name(start, "mean", 0.4, c, s)  # noqa: E731
    versus = lambda start, a, b, key, what, **kw: compare_sentence(  # noqa: E731
        findings, a, b, key, f"{what}, {start} start", **kw
    )
    qm = {"label_a": "quantile", "label_b": "mean"}
    for start in STARTS:
        for c, s in ((True, True), (True, False), (False, True), (False, False)):
            out["entropy"].append(
                versus(
                    start, q(start, c=c, s=s), m(start, c, s), "final_entropy", f"final entropy, {_opts(c, s)}", **qm
                )
            )
        for k in (k for k in K_VALUES if k != 0.4):
            out["entropy"].append(
                versus(
                    start,
                    q(start, k),
                    m(start),
                    "final_entropy",
                    f"final entropy, {_opts(True, True)}",
                    label_a=f"quantile K={k:g}",
                    label_b="mean",
                )
            )
        for topic, key, what, unit, digits in _VERSUS_MEAN:
            out[topic].append(
                versus(start, q(start), m(start), key, what.format(**findings["meta"]), unit=unit, digits=digits, **qm)
            )
        for base, name in (("mean", m), ("quantile", q)):
            for key, what, unit, digits in (
                ("final_entropy", "final entropy", "nats", 2),
                (
                    "early_clip_frac",
                    f"share of clipped tokens over the first {findings['meta']['early_step']} steps",
                    "",
                    4,
                ),
                ("clip_frac", "share of clipped tokens over all steps", "", 4),
            ):
                out["clipping"].append(
                    versus(
                        start,
                        name(start),
                        name(start, c=False),
                        key,
                        f"{what}, {base}",
                        unit=unit,
                        digits=digits,
                        label_a="Clip-Higher",
                        label_b="clip 0.2",
                    )
                )
        for key, what, unit, digits in (
            ("early_entropy", f"entropy after {findings['meta']['early_step']} steps", "nats", 2),
            ("final_entropy", "final entropy", "nats", 2),
            ("final_success", "final success rate", "", 3),
        ):
            out["adam"].append(
                versus(
                    start,
                    _headline(start, "quantile", "adam"),
                    _headline(start, "mean", "adam"),
                    key,
                    f"{what}, Adam",
                    unit=unit,
                    digits=digits,
                    **qm,
                )
            )
    out["estimator"] += tracking_sentences(findings)
    return out


VARIANCE_QUANTITIES = ("trace_var", "noise_to_signal", "cos_success", "dh_mean", "cos_plain")


def variance_sentences(findings: Mapping, quantities: Sequence[str] = VARIANCE_QUANTITIES) -> list[str]:
    r"""SA-AH's and AH's update against GRPO's (alpha = 0) on the same sampled groups, per start, over task seeds: one
    sentence per quantity of ``quantities`` (default all of :data:`VARIANCE_QUANTITIES`; ``cos_plain``: the mean
    update's alignment with GRPO's).

    >>> len(variance_sentences(load_findings())) > 0, len(variance_sentences(load_findings(), ("trace_var",)))
    (True, 4)
    """
    unknown = sorted(set(quantities) - set(VARIANCE_QUANTITIES))
    if unknown:
        raise ValueError(f"quantities must be among {list(VARIANCE_QUANTITIES)}, got {unknown}")
    out = []
    var = findings["variance"]
    for start, variants in var["per_start"].items():
        plain = variants["alpha = 0"]
        for name, v in variants.items():
            if name == "alpha = 0":
                continue
            for key, what, digits in (
                ("trace_var", "tr Cov(dz), the update's variance", 3),
                ("noise_to_signal", "noise to signal tr Cov(dz) / |E dz|^2", 2),
                ("cos_success", "cos(E dz, grad p), alignment with the success gradient", 3),
                ("dh_mean", "E[grad H . dz], the update's expected first-order dH", 5),
            ):
                if key in quantities:
                    out.append(_sentence(f"{what}, {start} start", name, "alpha = 0", v[key], plain[key], "", digits))
            if "cos_plain" in quantities:
                c = stat(v["cos_plain"])
                out.append(
                    f"{start} start, {name} vs alpha = 0: cos(E dz, GRPO's E dz) = {c.mean:.3f}±{c.std:.3f} "
                    f"over {c.n} task seeds"
                )
    return out


def summary_sentences(findings: Mapping) -> list[str]:
    r"""The committed sweep's headlines for notebook 09, all from the findings: final entropy, quantile vs mean, under
    SGD and Adam, per start; then the ledger cell that moved the entropy most (:func:`cell_sentences`). The trainer's
    ledger (:func:`trainer_ledger_sentences`) and SA-AH's update variance (:func:`variance_sentences`) have their own.

    >>> len(summary_sentences(load_findings()))
    8
    """
    out = []
    for start in STARTS:
        for opt in OPTIMIZERS:
            out.append(
                compare_sentence(
                    findings,
                    _headline(start, "quantile", opt),
                    _headline(start, "mean", opt),
                    "final_entropy",
                    f"final entropy, {start} start, {OPTIMIZER_NAMES[opt]}, {_opts(True, True)}",
                    label_a="quantile",
                    label_b="mean",
                )
            )
    return out + cell_sentences(findings)


# ---------------------------------------------------------------- Proposition 4.2 by regime, in training


def _verdict(a: Sequence, b: Sequence, label_a: str) -> str:
    """A against B over paired seeds in words: "lower under <label_a> in 16 of 16 seeds, 1.2 seed-spreads", or "no
    clear difference: lower under <label_a> in 3, higher in 13 of 16 seeds"."""
    p = paired(a, b)
    word, _, count = _direction(p)
    if word != "no clear difference":
        return f"{word} under {label_a} in {p.n} of {p.n} seeds" + (
            "" if p.d is None else f", {abs(p.d):.1f} seed-spreads"
        )
    if count == 0:
        return "no difference: equal in every seed"
    return f"no clear difference: lower under {label_a} in {p.n_lower}, higher in {p.n_higher} of {p.n} seeds"


def _optimizer_words(meta: Mapping, optimizer: str) -> str:
    """e.g. "Adam (lr 0.02, 4 passes)" or "plain SGD (step 40, 2 passes)"."""
    eta, passes = (
        (meta["adam_eta"], meta["adam_passes"]) if optimizer == "adam" else (meta["sgd_eta"], meta["sgd_passes"])
    )
    name, what = ("Adam", "lr") if optimizer == "adam" else ("plain SGD", "step")
    return f"{name} ({what} {eta:g}, {passes} pass{'es' if passes != 1 else ''})"


def _pair(runs: Mapping, meta: Mapping, optimizer: str, clip_higher: bool, group: str, key: str):
    """(quantile's per-seed list, mean's) of one summary of one group."""
    q, m = (
        runs[regime_setting_name(optimizer, b, meta["k"], clip_higher)]["groups"][group][key]
        for b in ("quantile", "mean")
    )
    return q, m


def _both(runs: Mapping, meta: Mapping, optimizer: str, group: str, key: str, suffix: str = "", unit: str = "") -> str:
    """ "mean 1.34x vs quantile 1.19x its start (lower under the quantile in 16 of 16 seeds, 1.0 seed-spreads)"."""
    q, m = _pair(runs, meta, optimizer, True, group, key)
    p = paired(q, m)
    return f"mean {p.b.mean:.2f}{suffix} vs quantile {p.a.mean:.2f}{suffix}{unit} ({_verdict(q, m, 'the quantile')})"


def regime_sentences(regimes: Mapping, optimizer: str = "adam") -> list[str]:
    r"""QAE's Proposition 4.2 (arXiv 2509.22611) by regime in training, in six sentences generated from
    :func:`load_regimes`: under ``optimizer`` with Clip-Higher, the hard prompts' entropy peak (explosion), the easy
    prompts' entropy early and at the end (collapse), all prompts together; then the other optimizer, what
    Clip-Higher itself changes, and the search's runner-up on the same seeds. Numbers are means over seeds, mean
    baseline first; "lower" / "higher" only when every paired seed agrees (:func:`paired`).

    Args:
        regimes: :func:`load_regimes`. optimizer: ``"adam"`` or ``"sgd"``, the one the first three sentences use.

    >>> [s.split(" (")[0] for s in regime_sentences(load_regimes())][:3]
    ['Hard prompts', 'Easy prompts', 'All 16 prompts together']
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    meta, runs = regimes["meta"], regimes["runs"]
    other = next(o for o in OPTIMIZERS if o != optimizer)
    n, n_prompts, steps, early = meta["n_group"], meta["n_prompts"], meta["steps"], meta["early_step"]
    start = lambda group, key: _mean(_pair(runs, meta, optimizer, True, group, key)[1])  # noqa: E731
    both = lambda opt, group, key, *a: _both(runs, meta, opt, group, key, *a)  # noqa: E731
    out = [
        f"Hard prompts (each seed's {n} hardest of {n_prompts} at the start: p {start('hard', 'start_p'):.2f}, "
        f"H {start('hard', 'start_h'):.2f} nats), {_optimizer_words(meta, optimizer)}, Clip-Higher, K = "
        f"{meta['k']:g}: entropy peak " + both(optimizer, "hard", "peak_ratio", "x", " its start") + ".",
        f"Easy prompts (the {n} easiest: p {start('easy', 'start_p'):.2f}, H {start('easy', 'start_h'):.2f} "
        f"nats): H at step {early} "
        + both(optimizer, "easy", "early_h", "", " nats")
        + f"; at step {steps} "
        + both(optimizer, "easy", "final_h", "", " nats")
        + ".",
        f"All {n_prompts} prompts together (p {start('mixed', 'start_p'):.2f}, H {start('mixed', 'start_h'):.2f} "
        "nats): entropy peak "
        + both(optimizer, "mixed", "peak_ratio", "x", " its start")
        + f"; H at step {steps} "
        + both(optimizer, "mixed", "final_h", "", " nats")
        + ".",
        f"Under {_optimizer_words(meta, other)}: hard prompts' peak "
        + both(other, "hard", "peak_ratio", "x")
        + f"; easy prompts' H at step {steps} "
        + both(other, "easy", "final_h", "", " nats")
        + ".",
        _clip_higher_sentence(runs, meta),
    ]
    check = regimes.get("runner_up") or {}
    if check.get("runs"):
        c_meta = {**meta, **check["settings"]}
        c_both = lambda group, key, *a: _both(check["runs"], c_meta, "adam", group, key, *a)  # noqa: E731
        out.append(
            f"The search's runner-up, {_optimizer_words(c_meta, 'adam')} at sharpness "
            f"{c_meta['sharpness']:g}, on the same seeds: hard prompts' peak "
            + c_both("hard", "peak_ratio", "x")
            + f"; easy prompts' H at step {steps} "
            + c_both("easy", "final_h", "", " nats")
            + "."
        )
    return out


def _clip_higher_sentence(runs: Mapping, meta: Mapping) -> str:
    """How far Clip-Higher (eps_high 0.28 against 0.2) moves the hard prompts' peak and the easy prompts' final H,
    over both optimizers and baselines, and in how many of those comparisons every paired seed moved one way."""
    moved, agree, cases = {"peak_ratio": 0.0, "final_h": 0.0}, 0, 0
    for opt in OPTIMIZERS:
        for b in ("mean", "quantile"):
            on, off = (runs[regime_setting_name(opt, b, meta["k"], c)]["groups"] for c in (True, False))
            for group, key in (("hard", "peak_ratio"), ("easy", "final_h")):
                p = paired(on[group][key], off[group][key])
                moved[key] = max(moved[key], abs(p.diff))
                agree += _direction(p)[0] != "no clear difference"
                cases += 1
    return (
        f"Clip-Higher (eps_high 0.28 against 0.2) moves the hard prompts' peak by at most "
        f"{moved['peak_ratio']:.3f}x and the easy prompts' H at step {meta['steps']} by at most "
        f"{moved['final_h']:.3f} nats (seed means, either optimizer and baseline); every seed moved the same way "
        f"in {agree} of these {cases} comparisons."
    )


# ---------------------------------------------------------------- notebook 07's scoreboard and its prediction


def regime_curve(
    regimes: Mapping, group: str, baseline: str, optimizer: str = "adam", clip_higher: bool = True
) -> dict:
    r"""One committed entropy curve of :func:`load_regimes`: ``group`` (hard, easy, mixed) under ``baseline`` (mean,
    quantile), ``optimizer`` and Clip-Higher: ``steps``, ``mean``, ``std``, ``lo``, ``hi`` over seeds, ``n`` seeds.

    >>> c = regime_curve(load_regimes(), "hard", "mean"); c["steps"][:3], c["n"]
    ([0, 5, 10], 16)
    """
    if baseline not in ("mean", "quantile"):
        raise ValueError(f"baseline must be 'mean' or 'quantile', got {baseline!r}")
    if group not in REGIMES:
        raise ValueError(f"group must be one of {list(REGIMES)}, got {group!r}")
    name = regime_setting_name(optimizer, baseline, regimes["meta"]["k"], bool(clip_higher))
    if name not in regimes["runs"]:
        raise ValueError(f"no committed run {name!r}; runs: {sorted(regimes['runs'])}")
    return regimes["runs"][name]["groups"][group]["entropy_curve"]


class ScoreRow(NamedTuple):
    r"""One row of a scoreboard: the claim, who makes it, the verdict (one of :data:`VERDICTS`), why in plain words."""

    claim: str
    paper: str
    verdict: str
    why: str


VERDICTS = ("holds", "reversed", "tested, no difference", "cannot be tested here")
_QAE_42, _QAE, _DAPO = "QAE, Prop. 4.2", "QAE", "DAPO"
# the claims judged on the committed runs, quantile baseline against mean, Clip-Higher on:
# (claim, paper, optimizer, group, summary key, the direction the claim expects of the quantile)
_BASELINE_CLAIMS = (
    (
        "Prompts that start hard: entropy rises less under the quantile baseline (no explosion)",
        _QAE_42,
        "adam",
        "hard",
        "peak_ratio",
        "lower",
    ),
    (
        "Prompts that start easy: the quantile baseline keeps more entropy (no collapse), at step {early_step}",
        _QAE_42,
        "adam",
        "easy",
        "early_h",
        "higher",
    ),
    ("The same, at step {steps}", _QAE_42, "adam", "easy", "final_h", "higher"),
    (
        "All prompts in one batch: entropy rises less under the quantile baseline",
        _QAE,
        "adam",
        "mixed",
        "peak_ratio",
        "lower",
    ),
    ("Prompts that start hard, under plain SGD instead of Adam", _QAE_42, "sgd", "hard", "peak_ratio", "lower"),
)
# claims this toy cannot reach, and why
_OUT_OF_REACH = (
    (
        "The quantile baseline raises pass@1 on math benchmarks",
        _QAE,
        "a toy policy with a checksum reward: no language model, no benchmark",
    ),
)


def _seed_words(p: Paired, expect: str) -> tuple[str, str]:
    """The verdict of a paired comparison that claims ``expect`` ("lower" / "higher" for side a), and its seeds in
    words: "lower in all 16 seeds", or "the seeds disagree: lower in 10, higher in 6 of 16"."""
    other = "higher" if expect == "lower" else "lower"
    agree, against = (p.n_lower, p.n_higher) if expect == "lower" else (p.n_higher, p.n_lower)
    if agree == p.n:
        return "holds", f"{expect} in all {p.n} seeds"
    if against == p.n:
        return "reversed", f"{other} in all {p.n} seeds"
    equal = p.n - agree - against
    return "tested, no difference", (
        f"the seeds disagree: {expect} in {agree}, {other} in {against}"
        + (f", equal in {equal}" if equal else "")
        + f" of {p.n}"
    )


def _numbers(key: str, q: float, m: float, meta: Mapping) -> str:
    """The two seed means of a summary key in words, quantile first."""
    if key == "peak_ratio":
        return f"peak {q:.2f}x its start under the quantile, {m:.2f}x under the mean"
    step = meta["early_step"] if key == "early_h" else meta["steps"]
    return f"at step {step}: {q:.2f} nats under the quantile, {m:.2f} under the mean"


def regime_scoreboard(regimes: Mapping) -> list[ScoreRow]:
    r"""Notebook 07's scoreboard from :func:`load_regimes`: QAE's Proposition 4.2 by regime (quantile against mean,
    Clip-Higher on), the whole batch, plain SGD, DAPO's Clip-Higher (on against off, mean baseline, Adam, all prompts'
    entropy at the last step), then what cannot be tested here. Verdicts by :func:`paired` seeds: "holds" where every
    seed goes the claimed way, "reversed" where every seed goes the other way, else "tested, no difference".

    >>> [(r.claim[:22], r.verdict) for r in regime_scoreboard(load_regimes())][:2]
    [('Prompts that start har', 'holds'), ('Prompts that start eas', 'holds')]
    """
    meta, runs = regimes["meta"], regimes["runs"]
    rows = []
    for claim, paper, opt, group, key, expect in _BASELINE_CLAIMS:
        q, m = _pair(runs, meta, opt, True, group, key)
        p = paired(q, m)
        verdict, seeds = _seed_words(p, expect)
        rows.append(
            ScoreRow(claim.format(**meta), paper, verdict, f"{_numbers(key, p.a.mean, p.b.mean, meta)}; {seeds}")
        )
    on, off = (
        runs[regime_setting_name("adam", "mean", meta["k"], c)]["groups"]["mixed"]["final_h"] for c in (True, False)
    )
    p = paired(on, off)
    verdict, seeds = _seed_words(p, "higher")
    rows.append(
        ScoreRow(
            "Clip-Higher keeps entropy from collapsing",
            _DAPO,
            verdict,
            f"all prompts at step {meta['steps']}, mean baseline, Adam: {p.a.mean:.3f} nats with it, "
            f"{p.b.mean:.3f} without; {seeds}",
        )
    )
    rows += [ScoreRow(claim, paper, "cannot be tested here", why) for claim, paper, why in _OUT_OF_REACH]
    return rows


def scoreboard_markdown(rows: Sequence[ScoreRow]) -> str:
    r"""A scoreboard as a Markdown table: claim, paper, verdict (in bold), why.

    >>> print(scoreboard_markdown([ScoreRow("x rises", "QAE", "holds", "up in all 3 seeds")]))
    | claim | paper | verdict | why |
    | --- | --- | --- | --- |
    | x rises | QAE | **holds** | up in all 3 seeds |
    """
    bad = [r.verdict for r in rows if r.verdict not in VERDICTS]
    if bad:
        raise ValueError(f"verdicts must be among {VERDICTS}, got {bad}")
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    return "\n".join(
        [
            "| claim | paper | verdict | why |",
            "| --- | --- | --- | --- |",
            *(f"| {cell(r.claim)} | {cell(r.paper)} | **{r.verdict}** | {cell(r.why)} |" for r in rows),
        ]
    )
