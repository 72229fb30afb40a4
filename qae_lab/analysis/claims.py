r"""The papers' claims as data, and the one verdict on each in each setting the lab can test it in.

Each claim of QAE (arXiv 2509.22611) and SA-AH-GRPO (arXiv 2606.05434) that the lab can measure is written
once in :data:`CLAIMS`; :data:`SETTINGS` are where the lab measures it, from a softmax bandit's exact expected step
(notebook 02) to the cpu-demo preset (notebook 05). :mod:`qae_lab.analysis.evidence` reads the numbers from the
committed data; :func:`verdict` judges them in the one vocabulary of :data:`VERDICTS`, each word with one meaning,
on a - b's 95% interval over the seeds (Student's t, paired by seed where they are, else Welch's) or, for a claim
of a size, on a's interval against the stated band. A null's half-width is shown beside the paper's effect: an
effect as large as the half-width is found only about half the time, so it is no ceiling.

:func:`scoreboard` gives a row per claim and setting, :func:`matrix` the claims against the settings, and
:func:`claim_card` the rows of :data:`CARD` in plain words for the 90-minute route.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "Claim",
    "CLAIMS",
    "FOUND",
    "SETTINGS",
    "VERDICTS",
    "Verdict",
    "Difference",
    "difference",
    "verdict",
    "comparison_row",
    "t_quantile",
    "scoreboard",
    "COLUMNS",
    "matrix",
    "CardRow",
    "CARD",
    "claim_card",
]


@dataclass(frozen=True)
class Claim:
    r"""One claim: who makes it (``paper``, ``section``), what it says, what is measured (``a`` against ``b``, in
    ``measured``) and the direction the paper predicts of a - b: ``">"``, ``"<"``, or ``">="`` (a not below b); or,
    for a claim of a size, ``"in"``: a lies in ``band`` (lo, hi), chosen for ``band_reason``; ``effect``: the paper's
    effect in the units the lab measures, where the paper states one (shown beside a null's interval)."""

    key: str
    paper: str
    section: str
    statement: str
    a: str
    b: str
    expect: str
    band: tuple[float, float] | None = None
    band_reason: str = ""
    effect: str = ""

    def __post_init__(self):
        if self.expect not in _EXPECT:
            raise ValueError(f"expect must be one of {_EXPECT}, got {self.expect!r}")
        if (self.expect == "in") != (self.band is not None) or (self.band and not self.band_reason):
            raise ValueError(f"claim {self.key!r}: a band (with its reason) goes with expect='in', and only with it")
        if self.band is not None and not self.band[0] < self.band[1]:
            raise ValueError(f"claim {self.key!r}: band must be (lo, hi) with lo < hi, got {self.band}")


_EXPECT = (">", "<", ">=", "in")


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "hard_prop42",
        "QAE",
        "Prop. 4.2 (1)",
        "on a hard prompt (p <= 1-K) the quantile baseline raises entropy less than the mean baseline",
        "quantile",
        "mean",
        "<",
    ),
    Claim(
        "easy_prop42",
        "QAE",
        "Prop. 4.2 (2)",
        "on an easy prompt (p > 1-K) the quantile baseline lowers entropy less than the mean baseline",
        "quantile",
        "mean",
        ">",
    ),
    Claim(
        "explosion",
        "QAE",
        "sec. 1, fig. 1",
        "with the mean baseline (and Clip-Higher) entropy explodes early in training; the quantile baseline's rises less",
        "quantile",
        "mean",
        "<",
    ),
    Claim(
        "collapse",
        "QAE",
        "sec. 1, fig. 1",
        "with the mean baseline entropy collapses later in training; the quantile baseline keeps more",
        "quantile",
        "mean",
        ">",
    ),
    Claim(
        "sparsity",
        "QAE",
        "sec. 5, fig. 5c",
        "about 80% of the sampled responses get exactly zero advantage (quantile baseline)",
        "quantile",
        "the stated size",
        "in",
        # "about 80%": fig. 5c's share for Qwen3-8B with a tuned K is ~0.8; "about" read as a tenth either way
        band=(0.70, 0.90),
        band_reason="the paper's ~80% (fig. 5c, Qwen3-8B, tuned K), give or take 10 points",
    ),
    Claim(
        "k_entropy",
        "QAE",
        "sec. 4",
        "a larger K makes more prompts easy and the updates negative-only, so entropy ends higher",
        "K = 0.8",
        "K = 0.2",
        ">",
    ),
    Claim(
        "qae_pass1",
        "QAE",
        "Table 1",
        "the quantile baseline raises pass@1 (Qwen3-8B, AIME'24: 39.69 -> 48.23)",
        "quantile",
        "mean",
        ">",
        effect="+0.085",  # 0.3969 -> 0.4823
    ),
    Claim("qae_passk", "QAE", "Table 1", "the quantile baseline keeps or improves pass@k", "quantile", "mean", ">="),
    Claim(
        "saah_variance",
        "SA-AH-GRPO",
        "Table 2",
        "SA-AH's training variance is lower than GRPO's (3B: 3.6x lower)",
        "SA-AH",
        "plain",
        "<",
        effect="3.6x lower",
    ),
    Claim(
        "saah_update_variance",
        "the lab",
        "SA-AH-GRPO Table 2",
        "update variance at a fixed policy: SA-AH's weights lower one update's variance (not the training variance)",
        "SA-AH",
        "plain",
        "<",
    ),
    Claim(
        "saah_length",
        "SA-AH-GRPO",
        "sec. 5",
        "the mean response length falls during SA-AH training (3B: 243 -> 171 tokens)",
        "last third",
        "first third",
        "<",
        effect="-72 tokens",  # 243 -> 171
    ),
    Claim(
        "saah_curriculum",
        "SA-AH-GRPO",
        "sec. 5",
        "entropy falls during training, so the horizon weights drift to 1 (an implicit curriculum)",
        "last third",
        "first third",
        ">",
    ),
    Claim(
        "saah_pass1",
        "SA-AH-GRPO",
        "Table 1",
        "SA-AH raises pass@1 over GRPO (1.5B: 0.668 -> 0.686)",
        "SA-AH",
        "plain",
        ">",
        effect="+0.018",  # 0.668 -> 0.686
    ),
    Claim(
        "neg_correct",
        "the lab",
        "QAE sec. 1",
        "under a graded reward the mean baseline gives more correct answers a negative advantage",
        "mean",
        "quantile",
        ">",
    ),
)
"""Every claim the lab measures, once."""

FOUND = "sums model, lr 3e-4"
"""The setting where the entropy search found the mean baseline's entropy exploding (notebook 06;
:data:`qae_lab.analysis.phenomena.PHENOMENON_CHOSEN`)."""

SETTINGS: dict[str, str] = {
    "expected step": "02: one step of the exact expected softmax policy gradient, over random bandits",
    "sampled groups": "02: the expected step of sampled groups of 8 responses, over random bandits",
    "sequence policy": "07, 09: an exact softmax sequence policy trained by GRPO, 16 task seeds (variance: 8)",
    "sums model": "06: the embedded sums model trained on the CPU, 3 seeds",
    FOUND: "06: the sums model where the entropy search found the mean baseline's entropy rising "
    "(DAPO's way of training, lr 3e-4), 8 fresh seeds",
    "CPU preset": "05: the cpu-demo preset (the embedded model, 400 steps), 3 seeds",
}
"""Where the lab measures the claims, with the notebooks that show each."""

VERDICTS: dict[str, str] = {
    "holds": "a - b has the predicted sign and its 95% interval over the seeds excludes zero (a claim of a size: "
    "the 95% interval of a lies inside the stated band)",
    "reversed": "a - b has the other sign and its 95% interval over the seeds excludes zero",
    "outside the stated size": "a claim of a size: the 95% interval of a lies wholly outside the stated band",
    "no difference": "tested, but the 95% interval of a - b includes zero: these seeds cannot tell a and b apart; "
    "± its half-width (an effect that large is found only about half the time: no ceiling)",
    "at the band's edge": "a claim of a size: the 95% interval of a reaches across an edge of the stated band: these "
    "seeds cannot tell whether it lies inside",
    "equal by construction": "a and b are one number by construction (the reason is given): nothing was tested",
    "cannot be tested here": "the setting lacks what the claim is about (the reason is given)",
}
"""The one vocabulary of verdicts, each word with its one meaning."""

# two-sided 95% quantiles of Student's t with 1..30 degrees of freedom
_T975 = tuple(
    float(t)
    for t in """12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160
    2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042""".split()
)


def t_quantile(df: float) -> float:
    r"""The 0.975 quantile of Student's t with ``df`` degrees of freedom: the table for df <= 30 (a fractional df
    rounded down: the wider interval), beyond it Cornish-Fisher, z + (z^3 + z) / (4 df) + (5 z^5 + 16 z^3 + 3 z) /
    (96 df^2), within 0.001.

    >>> t_quantile(2), t_quantile(2.7), round(t_quantile(60), 3)
    (4.303, 4.303, 2.0)
    """
    if not df >= 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= 30:
        return _T975[int(df) - 1]
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


class Verdict(NamedTuple):
    r"""A verdict and its numbers: ``word`` (:data:`VERDICTS`), the sides' means, ``diff`` = mean(a) - mean(b) with
    its 95% interval [``lo``, ``hi``] (a size: ``b``, ``diff`` None, the interval a's), ``n`` seeds (pairs, or the
    smaller side), ``agree`` the paired seeds with the predicted sign (None unpaired), ``why`` the reason."""

    word: str
    a: float | None
    b: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    n: int
    agree: int | None
    why: str = ""

    @property
    def half(self) -> float | None:
        """The 95% interval's half-width (None: no interval)."""
        return None if self.lo is None else (self.hi - self.lo) / 2


def _mean_sd(x: Sequence[float]) -> tuple[float, float]:
    m = sum(x) / len(x)
    return m, math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


class Difference(NamedTuple):
    r"""a - b over seeds: the sides' means, ``diff`` and its 95% interval [``lo``, ``hi``] (Student's t over the
    per-seed differences when paired, else Welch's), ``n`` seeds and ``higher`` the paired seeds with a > b."""

    a: float
    b: float
    diff: float
    lo: float
    hi: float
    n: int
    higher: int | None


def _sides(a, b, paired: bool) -> tuple[list[float], list[float]]:
    """The numbers of both sides (None dropped: a pair with a None on either side, when paired), checked."""
    if paired and len(a) != len(b):
        raise ValueError(f"paired sides must hold one number per seed each, got {len(a)} and {len(b)}")
    if paired:
        pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
        xa, xb = [x for x, _ in pairs], [y for _, y in pairs]
    else:
        xa, xb = [x for x in a if x is not None], [y for y in b if y is not None]
    for name, side in (("a", xa), ("b", xb)):
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in side):
            raise ValueError(f"{name} must hold finite numbers (or None), got {side!r}")
    return xa, xb


_ROUNDING = 1e-12  # relative: a float64 difference of sides that agree but for rounding lies within it


def difference(a: Sequence[float | None], b: Sequence[float | None], *, paired: bool = True) -> Difference:
    r"""a - b over seeds with its 95% interval (:class:`Difference`); at least two seeds on each side.

    >>> d = difference([0.61, 0.72, 0.55], [0.50, 0.60, 0.45]); round(d.diff, 3), round(d.lo, 3), d.higher
    (0.11, 0.085, 3)
    """
    xa, xb = _sides(a, b, paired)
    n = min(len(xa), len(xb))
    if n < 2:
        raise ValueError(f"a and b need at least two seeds each with a number, got {len(xa)} and {len(xb)}")
    ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
    if paired:
        d = [x - y for x, y in zip(xa, xb)]
        diff, sd = _mean_sd(d)
        half = t_quantile(n - 1) * sd / math.sqrt(n)
        higher = sum(v > 0 for v in d)
        # no narrower than the numbers' float rounding: sides equal but for rounding are no difference
        half = max(half, _ROUNDING * max(abs(v) for v in xa + xb))
    else:
        (_, sa), (_, sb) = _mean_sd(xa), _mean_sd(xb)
        va, vb = sa**2 / len(xa), sb**2 / len(xb)
        diff, se = ma - mb, math.sqrt(va + vb)
        # Welch-Satterthwaite degrees of freedom (both sides without spread: the interval is the point)
        df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1)) if se > 0 else 1.0
        half, higher = t_quantile(max(df, 1.0)) * se, None
    return Difference(ma, mb, diff, diff - half, diff + half, n, higher)


def verdict(
    a: Sequence[float | None],
    b: Sequence[float | None] | None,
    expect: str,
    *,
    paired: bool = True,
    why: str | None = None,
    band: tuple[float, float] | None = None,
    equal_by_construction: str | None = None,
) -> Verdict:
    r"""The verdict on a claim that expects ``a - b`` ``expect`` (``">"``, ``"<"``, ``">="``), or a in ``band``
    (``expect="in"``, ``b`` unused), from one number per seed a side (None: none). ``paired``: the i-th numbers come
    from one seed (:func:`difference`); ``why``: why the setting cannot test the claim; ``equal_by_construction``:
    why a and b are one number (checked to float rounding, seed by seed).

    >>> verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], ">").word      # the seeds disagree: no difference
    'no difference'
    >>> v = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">"); v.word, round(v.diff, 3), v.agree, v.n
    ('holds', 0.11, 3, 3)
    >>> verdict([0.5, 0.6], [0.7, 0.8], ">", paired=False).word
    'no difference'
    >>> verdict([1.0], [0.5], ">").why
    'fewer than two seeds with a number on both sides'
    >>> verdict([0.97, 0.98, 0.99], None, "in", band=(0.7, 0.9)).word   # "about 80%" measured at 0.98
    'outside the stated size'
    >>> verdict([0.3, 0.3], [0.3, 0.3], "<", equal_by_construction="b cancels").word
    'equal by construction'
    """
    if expect not in _EXPECT:
        raise ValueError(f"expect must be one of {_EXPECT}, got {expect!r}")
    if (expect == "in") != (band is not None):
        raise ValueError("a band goes with expect='in', and only with it")
    if band is not None:
        return _size_verdict(a, band, why)
    xa, xb = _sides(a, b, paired)
    n = min(len(xa), len(xb))
    if why is None and n < 2:
        why = "fewer than two seeds with a number on both sides"
    if why:
        means = (sum(xa) / len(xa) if xa else None, sum(xb) / len(xb) if xb else None)
        diff = means[0] - means[1] if None not in means else None
        return Verdict("cannot be tested here", *means, diff, None, None, n, None, why)
    d = difference(xa, xb, paired=paired)
    if equal_by_construction:
        gaps = [abs(x - y) for x, y in zip(xa, xb)] if paired else [abs(d.diff)]
        if not paired or max(gaps) > _ROUNDING * max(abs(v) for v in xa + xb):
            raise ValueError(
                f"a and b differ by up to {max(gaps):.3g} (paired: {paired}): not equal by construction as "
                f"{equal_by_construction!r} says"
            )
        return Verdict("equal by construction", d.a, d.b, d.diff, d.lo, d.hi, n, None, equal_by_construction)
    sign = -1 if expect == "<" else 1
    if d.lo > 0 or d.hi < 0:
        word = "holds" if (d.lo > 0) == (sign > 0) else "reversed"
    else:
        word = "no difference"
    agree = None if d.higher is None else (d.higher if sign > 0 else sum(x < y for x, y in zip(xa, xb)))
    return Verdict(word, d.a, d.b, d.diff, d.lo, d.hi, n, agree)


def _size_verdict(a: Sequence[float | None], band: tuple[float, float], why: str | None) -> Verdict:
    """A claim of a size: the 95% interval of a's mean (Student's t over the seeds) against ``band``."""
    lo_band, hi_band = band
    if not lo_band < hi_band:
        raise ValueError(f"band must be (lo, hi) with lo < hi, got {band}")
    xa, _ = _sides(a, [], False)
    if why is None and len(xa) < 2:
        why = "fewer than two seeds with a number"
    if why:
        return Verdict(
            "cannot be tested here", sum(xa) / len(xa) if xa else None, None, None, None, None, len(xa), None, why
        )
    m, sd = _mean_sd(xa)
    # no narrower than the numbers' float rounding, as in difference()
    half = max(t_quantile(len(xa) - 1) * sd / math.sqrt(len(xa)), _ROUNDING * max(abs(v) for v in xa))
    lo, hi = m - half, m + half
    if lo_band <= lo and hi <= hi_band:
        word = "holds"
    elif hi < lo_band or lo > hi_band:
        word = "outside the stated size"
    else:
        word = "at the band's edge"
    return Verdict(word, m, None, None, lo, hi, len(xa), None)


def comparison_row(what: str, label_a: str, a: Sequence, label_b: str, b: Sequence, digits: int = 3) -> dict:
    r"""A table row comparing two sides no claim predicts a direction for: mean ± std a side, a - b with its 95%
    interval (:func:`difference`, paired by seed) and the seeds with a > b.

    >>> comparison_row("final entropy", "quantile", [0.29, 0.27, 0.31], "mean", [0.34, 0.33, 0.36], 2)
    {'quantity': 'final entropy', 'a': 'quantile 0.29±0.02', 'b': 'mean 0.34±0.02', 'a - b': '-0.05 [-0.07, -0.04]', 'seeds a > b': '0/3'}
    """
    d = difference(a, b)
    sd = lambda xs: _mean_sd([x for x in xs if x is not None])[1]  # noqa: E731 -- the sample std over seeds
    f = lambda x: f"{x:.{digits}f}"  # noqa: E731
    return {
        "quantity": what,
        "a": f"{label_a} {f(d.a)}±{f(sd(a))}",
        "b": f"{label_b} {f(d.b)}±{f(sd(b))}",
        "a - b": f"{d.diff:+.{digits}f} [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}]",
        "seeds a > b": f"{d.higher}/{d.n}",
    }


COLUMNS = ("claim", "setting", "measured", "a", "b", "a - b", "verdict", "why")
"""The columns of :func:`scoreboard` a notebook shows (the paper and section are in the README's table)."""


def scoreboard(
    judged: Mapping[tuple[str, str, str], tuple[Mapping, Verdict]], settings: Sequence[str] | None = None
) -> list[dict]:
    r"""One row per claim, setting and variant, in :data:`CLAIMS`'s and :data:`SETTINGS`' order, from ``judged``:
    ``{(claim key, setting, variant): (evidence, Verdict)}`` (:func:`qae_lab.analysis.evidence.judge_all`).
    ``settings``: only those (default: all). A claim of a size shows its band as b and a's own interval as a - b;
    ``seeds`` is agreeing / all where paired; ``why`` the reason, a null's half-width beside the paper's effect, or
    the band's reason.

    >>> v = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">")
    >>> row = scoreboard({("qae_pass1", "CPU preset", ""): ({"measured": "pass@1", "a": "qae", "b": "mean"}, v)})[0]
    >>> row["claim"][:35], row["verdict"], row["seeds"], row["a - b"]
    ('the quantile baseline raises pass@1', 'holds', '3/3', '+0.110 [+0.085, +0.135]')
    """
    rows = []
    for claim in CLAIMS:
        for setting in settings if settings is not None else SETTINGS:
            for (key, where, variant), (evidence, v) in judged.items():
                if key != claim.key or where != setting:
                    continue
                d = evidence.get("digits", 3)
                num = lambda x: "—" if x is None else f"{x:.{d}f}"  # noqa: E731 -- a number as the table shows it
                interval = "" if v.lo is None else f" [{v.lo:+.{d}f}, {v.hi:+.{d}f}]"
                if claim.band is not None:  # a size: a's own interval against the band
                    b = f"{evidence['b']} [{claim.band[0]:.2f}, {claim.band[1]:.2f}]"
                    shown = "—" if v.a is None else num(v.a) + ("" if v.lo is None else f" [{num(v.lo)}, {num(v.hi)}]")
                else:
                    b = f"{evidence['b']} {num(v.b)}"
                    shown = "—" if v.diff is None else f"{v.diff:+.{d}f}{interval}"
                rows.append(
                    {
                        "claim": claim.statement,
                        "paper": claim.paper,
                        "section": claim.section,
                        "setting": setting + (f", {variant}" if variant else ""),
                        "measured": evidence["measured"],
                        "a": f"{evidence['a']} {num(v.a)}",
                        "b": b,
                        "a - b": shown,
                        "seeds": f"{v.agree}/{v.n}" if v.agree is not None else str(v.n),
                        "verdict": v.word,
                        "why": _why(claim, v),
                    }
                )
    return rows


def _null(claim: Claim, v: Verdict) -> str:
    """A null's 95% interval, beside the paper's effect (not as what the seeds "could miss": no ceiling)."""
    return f"95% interval ±{v.half:.2g} ({v.n} seeds)" + (f", paper's effect {claim.effect}" if claim.effect else "")


def _why(claim: Claim, v: Verdict) -> str:
    if v.word == "no difference":
        return _null(claim, v)
    if v.word == "at the band's edge":
        return f"95% interval {v.lo:.2f}-{v.hi:.2f} reaches across the band's edge; band: {claim.band_reason}"
    if claim.band is not None and v.word in ("holds", "outside the stated size"):
        return f"band: {claim.band_reason}"
    return v.why


def matrix(judged: Mapping[tuple[str, str, str], tuple[Mapping, Verdict]]) -> list[dict]:
    r"""The claims against the settings, one verdict a cell (a dash where unmeasured; each variant's where several):
    a row per claim some setting measures. A null carries its half-width, a size its measured value.

    >>> v = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">")
    >>> row = matrix({("qae_pass1", "CPU preset", ""): ({}, v), ("qae_pass1", "sums model", "SGD"): ({}, v)})[0]
    >>> row["claim"], row["CPU preset"], row["sums model"], row["sequence policy"]
    ("the quantile baseline raises pass@1 (Qwen3-8B, AIME'24: 39.69 -> 48.23) (QAE, Table 1)", 'holds', 'holds (SGD)', '—')
    """
    rows = []
    for claim in CLAIMS:
        cells = {
            s: "; ".join(
                _cell(claim, v) + (f" ({variant})" if variant else "")
                for (key, where, variant), (_, v) in judged.items()
                if key == claim.key and where == s
            )
            for s in SETTINGS
        }
        if any(cells.values()):
            rows.append(
                {
                    "claim": f"{claim.statement} ({claim.paper}, {claim.section})",
                    **{s: c or "—" for s, c in cells.items()},
                }
            )
    return rows


def _cell(claim: Claim, v: Verdict) -> str:
    """A verdict as a matrix cell: the word, with a null's half-width or a size's measured value."""
    if claim.band is not None and v.a is not None:
        return f"{v.word} ({v.a:.2f}" + (f" ±{v.half:.2g}" if v.word == "at the band's edge" else "") + ")"
    if v.word == "no difference":
        return f"{v.word} ±{v.half:.2g}"
    return v.word


class CardRow(NamedTuple):
    r"""One row of the claim card: a verdict of :func:`matrix` (``key``, ``setting``, ``variant``) and its claim and
    setting in plain words."""

    key: str
    setting: str
    variant: str
    says: str
    where: str


CARD: tuple[CardRow, ...] = (
    CardRow("hard_prop42", "sequence policy", "Adam", "QAE: hard prompts' entropy rises less", "exact policy, Adam"),
    CardRow("easy_prop42", "sequence policy", "Adam", "QAE: easy prompts' entropy falls less", "exact policy, Adam"),
    CardRow(
        "explosion", FOUND, "", "QAE: entropy rises less where the mean's explodes", "sums model, where it explodes"
    ),
    CardRow("sparsity", "CPU preset", "", "QAE: about 80% of responses get zero advantage", "CPU demo model"),
    CardRow("qae_pass1", "CPU preset", "", "QAE raises pass@1", "CPU demo model"),
    CardRow("saah_variance", "CPU preset", "", "SA-AH lowers the training variance", "CPU demo model"),
)
"""The claim card of the 90-minute route: six verdicts of the full matrix, in plain words."""


def _how_sure(claim: Claim, v: Verdict) -> str:
    if v.word == "cannot be tested here":
        return v.why
    if claim.band is not None:
        return f"measured {v.a:.2f} (95%: {v.lo:.2f}-{v.hi:.2f}), paper ~{sum(claim.band) / 2:.2f}"
    if v.word == "no difference":
        return _null(claim, v)
    if v.agree is not None:
        return f"{v.agree} of {v.n} seeds agree"
    return f"{v.n} seeds"


def claim_card(
    judged: Mapping[tuple[str, str, str], tuple[Mapping, Verdict]], rows: Sequence[CardRow] = CARD
) -> list[dict]:
    r"""The claim card: for each of ``rows`` (at most six), what the paper says, where the lab measured it, the verdict
    and how sure, in plain words, from ``judged`` (:func:`qae_lab.analysis.evidence.judge_all`).

    >>> v = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">")
    >>> claim_card({("qae_pass1", "CPU preset", ""): ({}, v)}, [CARD[4]])
    [{'the paper says': 'QAE raises pass@1', 'measured on': 'CPU demo model', 'verdict': 'holds', 'how sure': '3 of 3 seeds agree'}]
    """
    if len(rows) > 6:
        raise ValueError(f"a claim card holds at most six rows, got {len(rows)}")
    claims = {c.key: c for c in CLAIMS}
    out = []
    for row in rows:
        if (row.key, row.setting, row.variant) not in judged:
            raise ValueError(f"no verdict of {row.key!r} in {row.setting!r} ({row.variant!r}) among those judged")
        v = judged[row.key, row.setting, row.variant][1]
        out.append(
            {
                "the paper says": row.says,
                "measured on": row.where,
                "verdict": v.word,
                "how sure": _how_sure(claims[row.key], v),
            }
        )
    return out
