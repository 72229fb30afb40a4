r"""Notebook 02's figures and tables: the linear knob, one sampled step against the identity, and bandit training.

The numbers come from :mod:`qae_lab.toys.bandit` (QAE, arXiv 2509.22611, sec. 4, Prop. 4.2; Cui et al.'s entropy
identity) and the committed ``data/bandit/prop42.json``; this module lays them out as figures and table rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab.analysis.claims import Verdict, verdict
from qae_lab.lab.figures import line_figure
from qae_lab.labels import BASELINE_SHORT, OPTIMIZER_NAMES
from qae_lab.toys.bandit import (
    entropy_by_start,
    entropy_change_exact,
    expected_pg_step,
    identity_entropy_change,
    knob_curve,
    mc_entropy_curve,
    population_quantile,
    sampled_entropy_change,
)

__all__ = ["knob_figure", "mc_figure", "step_rows", "prop42_rows", "training_rows", "training_figures"]


def knob_figure(eta: float, sharpness: float, p: float, K: float) -> go.Figure:
    r"""The linear knob of one bandit (:func:`qae_lab.toys.bandit.knob_curve`): first-order dH against the baseline b,
    with the mean baseline b = p and QAE's b_K marked.

    >>> fig = knob_figure(0.5, 1.5, 0.3, 0.4)
    >>> fig.layout.title.text.endswith("b_K = 0 (hard prompt)"), [s.x0 for s in fig.layout.shapes]
    (True, [0.3, 0.0])
    """
    c = knob_curve(p, K, eta, sharpness)
    fig = line_figure(
        c.b.tolist(),
        {"dH(b), first order": c.dh.tolist()},
        x_title="baseline b",
        y_title="dH",
        title=f"slope eta*Cov(log pi, pi) = {c.slope:.2e};  b_K = {c.b_k:.0f} ({'hard' if c.hard else 'easy'} prompt)",
    )
    fig.add_vline(x=p, line_dash="dot", annotation_text="mean b = p")
    fig.add_vline(x=c.b_k, line_color="red", annotation_text="QAE b_K")
    return fig


MC_LINES = {
    "sampled, mean baseline (c)": "mean",
    "sampled, QAE baseline (c)": "quantile",
    "computed, mean baseline": "computed_mean",
    "computed, QAE baseline": "computed_quantile",
    "identity, b = p (a)": "identity_mean",
    "identity, b = b_K (a)": "identity_quantile",
}


def mc_figure(
    K: float, G: int, eta: float, sharpness: float, *, n_groups: int, ps: Sequence[float] | None = None
) -> go.Figure:
    r"""E[dH] after one step against the success rate (:func:`qae_lab.toys.bandit.mc_entropy_curve`, seed 3): sampled
    groups by Monte Carlo (+- 2 s.e.), the same computed (dashed, in its Monte Carlo's colour), and the identity's.

    >>> fig = mc_figure(0.4, 8, 0.5, 1.5, n_groups=20, ps=[0.3, 0.7])
    >>> [t.name for t in fig.data if t.name][:3], fig.layout.title.text
    (['sampled, mean baseline (c)', 'sampled, QAE baseline (c)', 'computed, mean baseline'], 'E[dH] after one step, K = 0.4, G = 8')
    """
    ps = torch.linspace(0.05, 0.95, 13) if ps is None else torch.tensor(list(ps))
    out = mc_entropy_curve(ps, group_size=G, n_groups=n_groups, k=K, eta=eta, sharpness=sharpness, seed=3)
    fig = line_figure(
        ps.tolist(),
        {name: out[key] for name, key in MC_LINES.items()},
        bands={
            "sampled, mean baseline (c)": [2 * s for s in out["mean_stderr"]],
            "sampled, QAE baseline (c)": [2 * s for s in out["quantile_stderr"]],
        },
        title=f"E[dH] after one step, K = {K:g}, G = {G}",
        x_title="success rate p",
        y_title="entropy change",
        markers=True,
    )
    colours = {t.name: t.line.color for t in fig.data if t.name}
    for t in fig.data:
        if t.name and t.name.startswith("computed, "):
            t.update(
                mode="lines", line={"dash": "dash", "color": colours[t.name.replace("computed", "sampled") + " (c)"]}
            )
    return fig


def step_rows(z, r, *, group_size: int, k: float, eta: float) -> list[dict]:
    r"""One bandit's one step (``z``, ``r``: (A,) logits and 0/1 rewards), a row per baseline: the scale factor and
    dH under the identity (a), the exact expected step (b) and sampled groups in expectation (c).

    >>> rows = step_rows(torch.tensor([2.0, 0.0, -1.0, 0.5]), torch.tensor([0.0, 1.0, 0.0, 0.0]),
    ...                  group_size=8, k=0.4, eta=0.5)
    >>> [row["baseline"] for row in rows], rows[0]["exact step (b)"] == rows[1]["exact step (b)"]
    (['mean', 'QAE'], True)
    """
    p = (torch.softmax(z.double(), -1) * r).sum()
    b = {"mean": p, "quantile": population_quantile(z, r, k)}
    rows = []
    for baseline, name in BASELINE_SHORT.items():
        sampled = sampled_entropy_change(z, r, group_size, eta, baseline=baseline, k=k)
        rows.append(
            {
                "baseline": name,
                "scale factor": sampled["scale"],
                "identity (a)": float(identity_entropy_change(z, r, b[baseline], eta)),
                "exact step (b)": float(entropy_change_exact(z, expected_pg_step(z, r, eta))),
                "sampled (c)": sampled["total"],
            }
        )
    return rows


def _lower_in(a: Sequence[float], b: Sequence[float]) -> str | None:
    """ "n of N": the pairs with a below b; None where the lists are equal (the same step for both)."""
    return None if list(a) == list(b) else f"{sum(x < y for x, y in zip(a, b))} of {len(a)}"


PROP42_STEPS = {  # row label -> (where in the file, a per-bandit value from a dict of lists)
    "identity (a)": ("", "identity"),
    "exact step (b)": ("", "expected_step"),
    "sampled (c)": ("", "sampled"),
    "sampled (c), no std": ("no_std", "sampled"),
    "scale factor": ("", "scale"),
    "scale factor, no std": ("no_std", "scale"),
}


def prop42_rows(data: Mapping) -> list[dict]:
    r"""The committed one-step table: per step model, each baseline's mean dH / eta (or scale factor) on the hard and
    the easy bandits, and in how many QAE's is below the mean's.

    >>> rows = prop42_rows(_TINY)
    >>> rows[0]
    {'': 'identity (a)', 'hard: mean': 4.0, 'hard: QAE': 1.0, 'hard: QAE lower in': '2 of 2', 'easy: mean': -4.0, 'easy: QAE': -1.0, 'easy: QAE lower in': '0 of 2'}
    """
    eta = data["meta"]["eta"]
    rows = []
    for label, (part, key) in PROP42_STEPS.items():
        row: dict = {"": label}
        per_unit = 1.0 if key == "scale" else 1 / eta  # entropy changes per unit eta; scale factors as they are
        for regime in ("hard", "easy"):
            src = (data["details"][regime][part] if part else data[regime])[key]
            for baseline, name in BASELINE_SHORT.items():
                row[f"{regime}: {name}"] = statistics.fmean(src[baseline]) * per_unit
            row[f"{regime}: QAE lower in"] = _lower_in(src["quantile"], src["mean"])
        rows.append(row)
    return rows


def _judged(regime: str, v: Verdict) -> dict[str, str]:
    """A training row's interval and verdict columns for one regime (Prop. 4.2's half on its prompts)."""
    return {f"{regime}: QAE - mean [95%]": f"{v.diff:+.3f} [{v.lo:+.3f}, {v.hi:+.3f}]", f"{regime}: verdict": v.word}


def training_rows(data: Mapping) -> list[dict]:
    r"""The committed training table: per optimiser and learning rate, the hard prompts' peak entropy and the easy
    ones' late entropy (over their start) under each baseline, how many replicates go Prop. 4.2's way, and QAE - mean
    with its 95% interval and :func:`qae_lab.analysis.claims.verdict`'s word.

    >>> training_rows(_TINY)[0]["hard: QAE lower in"], training_rows(_TINY)[0]["easy H(2) / H(0), QAE"]
    ('0 of 2', 0.4)
    """
    runs = {(run["optimizer"], run["lr"], run["baseline"]): run for run in data["training"]["runs"]}
    easy = f"easy H({data['training']['settings']['easy_step']}) / H(0)"
    rows = []
    for opt, lr, _ in [key for key in runs if key[2] == "mean"]:
        m, q = runs[(opt, lr, "mean")], runs[(opt, lr, "quantile")]
        n = len(m["hard_peak"])
        rows.append(
            {
                "optimiser": OPTIMIZER_NAMES[opt],
                "lr": lr,
                "hard peak / start, mean": statistics.fmean(m["hard_peak"]),
                "hard peak / start, QAE": statistics.fmean(q["hard_peak"]),
                "hard: QAE lower in": f"{sum(a < b for a, b in zip(q['hard_peak'], m['hard_peak']))} of {n}",
                **_judged("hard", verdict(q["hard_peak"], m["hard_peak"], "<")),
                f"{easy}, mean": statistics.fmean(m["easy_h"]),
                f"{easy}, QAE": statistics.fmean(q["easy_h"]),
                "easy: QAE higher in": f"{sum(a > b for a, b in zip(q['easy_h'], m['easy_h']))} of {n}",
                **_judged("easy", verdict(q["easy_h"], m["easy_h"], ">")),
            }
        )
    return rows


def training_figures(
    p0, runs: Mapping[str, Mapping[str, list]], *, hard_max: float = 0.3, easy_min: float = 0.7
) -> list[go.Figure]:
    r"""The mean entropy H / log A of the prompts that start hard, then easy, a line per ``simulate_training`` run.

    >>> from qae_lab.toys.bandit import simulate_training
    >>> p0 = torch.tensor([0.1, 0.5, 0.9])
    >>> runs = {"mean, SGD": simulate_training(p0, steps=2, group_size=4, baseline="mean")}
    >>> [f.layout.title.text for f in training_figures(p0, runs)]
    ['Entropy of the prompts that start hard (p ≤ 0.3), H / log A', 'Entropy of the prompts that start easy (p ≥ 0.7), H / log A']
    """
    curves = {
        name: entropy_by_start(o["prompt_entropy"], p0, hard_max=hard_max, easy_min=easy_min)
        for name, o in runs.items()
    }
    figures = []
    for regime, bound in (("hard", f"p ≤ {hard_max:g}"), ("easy", f"p ≥ {easy_min:g}")):
        series = {name: c[regime].tolist() for name, c in curves.items()}
        steps = list(range(len(next(iter(series.values())))))
        figures.append(
            line_figure(
                steps,
                series,
                title=f"Entropy of the prompts that start {regime} ({bound}), H / log A",
                x_title="step",
                y_title="H / log A",
            )
        )
    return figures


# a file of the committed shape, two bandits and one training setting, for the examples above
_TINY = {
    "meta": {"eta": 0.5},
    "hard": {
        "identity": {"mean": [2.0, 2.0], "quantile": [0.5, 0.5]},
        "expected_step": {"mean": [2.0, 2.0], "quantile": [2.0, 2.0]},
        "sampled": {"mean": [1.5, 1.5], "quantile": [2.0, 2.0]},
        "scale": {"mean": [0.75, 0.75], "quantile": [1.0, 1.0]},
    },
    "easy": {
        "identity": {"mean": [-2.0, -2.0], "quantile": [-0.5, -0.5]},
        "expected_step": {"mean": [-2.0, -2.0], "quantile": [-2.0, -2.0]},
        "sampled": {"mean": [-1.5, -1.5], "quantile": [-2.0, -2.0]},
        "scale": {"mean": [0.75, 0.75], "quantile": [1.0, 1.0]},
    },
    "details": {
        regime: {
            "no_std": {
                "sampled": {"mean": [0.0, 0.0], "quantile": [0.0, 0.0]},
                "scale": {"mean": [0.75] * 2, "quantile": [1.0] * 2},
            }
        }
        for regime in ("hard", "easy")
    },
    "training": {
        "settings": {"easy_step": 2},
        "runs": [
            {"optimizer": "sgd", "lr": 0.5, "baseline": "mean", "hard_peak": [1.1, 1.1], "easy_h": [0.5, 0.5]},
            {"optimizer": "sgd", "lr": 0.5, "baseline": "quantile", "hard_peak": [1.2, 1.2], "easy_h": [0.4, 0.4]},
        ],
    },
}
