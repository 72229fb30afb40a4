r"""The exact sequence policy's experiments (notebooks 07 and 09): settings, what each run keeps, the committed files.

Notebook 09's sweep: :func:`sweep_settings` names its settings (``benchmarks/seqpolicy_findings.py`` runs them);
:func:`summarise_run` is what ``data/seqpolicy/findings.json`` (:func:`load_findings`) keeps of each run, with
:func:`tracking`: how each per-token entropy-change estimator of :mod:`qae_lab.ledger` tracks the exact first-order
change. Its tables compare two settings over the same seeds (:func:`qae_lab.analysis.claims.comparison_row`);
:func:`run_curves` and :func:`findings_curves` give :class:`qae_lab.analysis.compare.Curve` s for :func:`qae_lab.lab.figures.band_figure`.

Notebook 07's QAE Proposition 4.2 (arXiv 2509.22611) by regime, in training: :func:`regime_settings` names the grid
``benchmarks/seqpolicy_regimes.py`` runs; :func:`start_groups` groups each seed's prompts by their start success
rate (:data:`REGIMES`), :func:`start_group_curves` averages per-prompt curves over each group, and
:func:`summarise_regimes` is what ``data/seqpolicy/regimes.json`` (:func:`load_regimes`) keeps of each run.
Departure: the proposition speaks of one prompt's one-step change in its current regime; a prompt's regime moves as
it trains, so the groups here are fixed by the start (what a prompt was, not what it is at step t).
"""

from __future__ import annotations

import functools
import math
import operator
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from qae_lab.methods import DEFAULT_K
from qae_lab._checks import as_real_tensor, check_int
from qae_lab.analysis.claims import comparison_row
from qae_lab.analysis.committed_data import data_dir, load_json
from qae_lab.analysis.compare import Curve
from qae_lab.ledger import LEDGER_FORMS
from qae_lab.toys.seqpolicy import STARTS
from qae_lab.toys.seqpolicy_training import OPTIMIZERS, UpdateSettings

__all__ = [
    "K_VALUES",
    "CELLS",
    "setting_name",
    "sweep_settings",
    "headline",
    "tracking",
    "summarise_run",
    "seed_curve",
    "run_curves",
    "findings_curves",
    "tracking_table",
    "load_findings",
    "find_regimes",
    "load_regimes",
    "SWEEP",
    "sweep_rows",
    "cell_rows",
    "VARIANCE_QUANTITIES",
    "variance_rows",
    "REGIMES",
    "regime_settings",
    "start_groups",
    "start_group_curves",
    "curve_summary",
    "Move",
    "first_move",
    "summarise_regimes",
    "seqpolicy_regime_curve",
]


K_VALUES = (0.2, 0.4, 0.6, 0.8)
# the ledger's four cells (qae_lab.ledger.LEDGER_PARTS), in words
CELLS = {
    "dh_hard_pos": "hard prompts' successes",
    "dh_hard_neg": "hard prompts' failures",
    "dh_easy_pos": "easy prompts' successes",
    "dh_easy_neg": "easy prompts' failures",
}


def setting_name(
    start: str, baseline: str, k: float, clip_higher: bool, std: bool | None = None, optimizer: str = "sgd"
) -> str:
    r"""The name of one setting: of notebook 09's sweep, e.g. ``"flat/quantile K=0.4/clip-higher/std"`` (Adam:
    ``".../adam"``); of notebook 07's regime grid (``start`` its optimizer, ``std`` None), ``"adam/mean/clip-0.2"``.

    >>> setting_name("peaked", "mean", 0.4, False, True), setting_name("flat", "mean", 0.4, True, True, "adam")
    ('peaked/mean/clip-0.2/std', 'flat/mean/clip-higher/std/adam')
    >>> setting_name("sgd", "mean", 0.4, False), setting_name("adam", "quantile", 0.4, True)
    ('sgd/mean/clip-0.2', 'adam/quantile K=0.4/clip-higher')
    """
    base = f"quantile K={k:g}" if baseline == "quantile" else "mean"
    name = f"{start}/{base}/{'clip-higher' if clip_higher else 'clip-0.2'}"
    name += "" if std is None else f"/{'std' if std else 'no-std'}"
    return name if optimizer == "sgd" else f"{name}/{optimizer}"


def sweep_settings(*, eta: float, adam_eta: float, group_size: int = 8) -> dict[str, tuple[str, UpdateSettings]]:
    r"""The sweep: name -> (start, :class:`~qae_lab.toys.seqpolicy_training.UpdateSettings`), two passes each; per
    start, under SGD (step ``eta``) mean and quantile (K = 0.4) with and without Clip-Higher (eps_high 0.28 against
    0.2) and the group std, the quantile also at the other K; under Adam (``adam_eta``) mean and quantile, K = 0.4.

    >>> names = list(sweep_settings(eta=40.0, adam_eta=0.02)); len(names), names[0], names[-1]
    (26, 'flat/mean/clip-higher/std', 'peaked/quantile K=0.4/clip-higher/std/adam')
    """
    out = {}
    for start in STARTS:
        grid = [(b, 0.4, c, s, "sgd") for b in ("mean", "quantile") for c in (True, False) for s in (True, False)]
        grid += [("quantile", k, True, True, "sgd") for k in K_VALUES if k != 0.4]
        grid += [(b, 0.4, True, True, "adam") for b in ("mean", "quantile")]
        for baseline, k, clip_higher, std, opt in grid:
            settings = _update(baseline, k, clip_higher, opt, adam_eta if opt == "adam" else eta, 2, group_size, std)
            out[setting_name(start, baseline, k, clip_higher, std, opt)] = (start, settings)
    return out


def _update(baseline, k, clip_higher, optimizer, eta, passes, group_size, std=True) -> UpdateSettings:
    """One setting of either grid: Clip-Higher is eps_high 0.28 (else 0.2), the group std scale "group"."""
    return UpdateSettings(
        group_size=group_size,
        baseline=baseline,
        k=k,
        scale="group" if std else "none",
        num_iterations=passes,
        eta=eta,
        optimizer=optimizer,
        epsilon_high=0.28 if clip_higher else 0.2,
    )


def _round(x: float, digits: int = 4) -> float | None:
    """A float rounded to ``digits`` significant digits for a small JSON file; NaN -> None."""
    return None if not math.isfinite(x) else float(f"{x:.{digits}g}")


def _seeds(t: torch.Tensor) -> list[float | None]:
    return [_round(float(v)) for v in t]


def _corr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pearson correlation over the last dimension: (S, T), (S, T) -> (S,)."""
    a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
    return (a * b).sum(-1) / ((a * a).sum(-1) * (b * b).sum(-1)).sqrt().clamp_min(1e-300)


def tracking(out: Mapping[str, torch.Tensor]) -> dict:
    r"""How each per-token estimator's per-step total tracks the exact first-order change of the step, per seed.

    Per form of :data:`qae_lab.ledger.LEDGER_FORMS`, ``estimator_<form>/dh`` against ``dh_first_order`` (grad H .
    dz): ``corr`` (Pearson, over steps), ``sign_agree`` (share of steps), ``ratio`` (summed over summed).
    ``visit_share``: sum |visit| / (sum |state| + sum |visit|) of the first passes, what the per-state terms cannot
    see (None under Adam, where the change does not split by sample).

    >>> x = lambda *v: torch.tensor([v])
    >>> out = {"dh_first_order": x(2.0, 4.0, 7.0), "sampled/dh_state": x(1.0, 3.0, 5.0),
    ...        "sampled/dh_visit": x(1.0, 1.0, 2.0), "estimator_npg/dh": x(1.0, 2.0, 3.0),
    ...        "estimator_pg/dh": x(1.0, -2.0, 3.0), "estimator_reinforce/dh": x(2.0, 4.0, 8.0)}
    >>> t = tracking(out); t["npg"], t["reinforce"]["ratio"], t["visit_share"]
    ({'corr': [0.9934], 'sign_agree': [1.0], 'ratio': [0.4615]}, [1.077], [0.3077])
    """
    exact = out["dh_first_order"].double()  # (S, T)
    res = {}
    for form in LEDGER_FORMS:
        est = out[f"estimator_{form}/dh"].double()
        agree, ratio = (est.sign() == exact.sign()).double().mean(-1), est.sum(-1) / exact.sum(-1)
        res[form] = {"corr": _seeds(_corr(est, exact)), "sign_agree": _seeds(agree), "ratio": _seeds(ratio)}
    state, visit = out["sampled/dh_state"].double().abs().sum(-1), out["sampled/dh_visit"].double().abs().sum(-1)
    res["visit_share"] = _seeds(visit / (state + visit))
    return res


def headline(settings: UpdateSettings) -> bool:
    r"""Whether a sweep setting is a headline one (K = 0.4, Clip-Higher, the group std), whose summary keeps the
    per-token estimators.

    >>> headline(UpdateSettings(epsilon_high=0.28)), headline(UpdateSettings(epsilon_high=0.28, k=0.6))
    (True, False)
    """
    return settings.k == 0.4 and settings.epsilon_high == 0.28 and settings.scale == "group"


def _curve(x: torch.Tensor, steps: list[int]) -> dict:
    """A (S, T) curve at ``steps`` as its mean, std and range over seeds, rounded (a :class:`Curve`'s fields)."""
    c = seed_curve(x[:, steps].tolist(), steps)
    return {
        "steps": steps,
        **{k: [_round(v) for v in getattr(c, k)] for k in ("mean", "std", "lo", "hi")},
        "n": c.n_runs,
    }


def summarise_run(
    out: Mapping[str, torch.Tensor], *, every: int = 100, early: int = 100, estimators: bool = True
) -> dict:
    r"""What the findings keep of one :func:`~qae_lab.toys.seqpolicy_training.simulate` run, per seed (JSON-ready).

    Curves every ``every`` steps as mean, std and range over seeds; ``early_*`` at step ``early``; ``ledger``: the
    ledgers summed over training (``sampled``, the first passes; with ``estimators`` the per-token forms, every
    pass; a NaN ledger, as ``sampled`` under Adam, left out); ``*_hard0`` / ``*_easy0``: means over the prompts hard
    (p <= 0.6, K = 0.4) / easy at the start; with ``estimators``, :func:`tracking`.

    >>> from qae_lab.toys.seqpolicy import task_batch
    >>> from qae_lab.toys.seqpolicy_training import simulate
    >>> t = task_batch(2, 3, 2, 3, start="peaked")
    >>> s = summarise_run(simulate(t.logits, t.rewards, UpdateSettings(group_size=4), steps=4), every=2)
    >>> s["entropy_curve"]["steps"], len(s["ledger"]["sampled"]["dh_hard_neg"]), sorted(s["ledger"])
    ([0, 2, 4], 2, ['estimator_npg', 'estimator_pg', 'estimator_reinforce', 'sampled'])
    """
    every, early = check_int(every, "every", 1), check_int(early, "early", 0)
    entropy, success = out["entropy"], out["success"]
    steps = list(range(0, entropy.shape[1], every))
    keep = {
        "final_entropy": _seeds(entropy[:, -1]),
        "final_success": _seeds(success[:, -1]),
        "early_entropy": _seeds(entropy[:, min(early, entropy.shape[1] - 1)]),
        "entropy_curve": _curve(entropy, steps),
        "success_curve": _curve(success, steps),
    }
    keep["ledger"] = {}
    for kind in ("sampled", *(f"estimator_{form}" for form in LEDGER_FORMS if estimators)):
        parts = ("dh", *CELLS, "dh_state") if kind == "sampled" else ("dh", *CELLS)
        sums = {part: _seeds(out[f"{kind}/{part}"].sum(-1)) for part in parts}
        if any(v is not None for v in sums["dh"]):
            keep["ledger"][kind] = sums
    keep.update({k: _seeds(out[k].sum(-1)) for k in ("dh_exact", "dh_first_order")})
    keep.update({k: _seeds(out[k].mean(-1)) for k in ("clip_frac", "hard_frac", "zero_adv_frac")})
    keep["early_clip_frac"] = _seeds(out["clip_frac"][:, : max(early, 1)].mean(-1))
    hard0 = out["success_per_prompt"][..., 0] <= 1 - 0.4  # (S, P): hard at the start for K = 0.4
    for key in ("entropy", "success"):
        final = out[f"{key}_per_prompt"][..., 1]  # (S, P)
        for name, rows in (("hard0", hard0), ("easy0", ~hard0)):
            keep[f"final_{key}_{name}"] = _seeds((final * rows).sum(-1) / rows.sum(-1))
    if estimators:
        keep["tracking"] = tracking(out)
    return keep


def seed_curve(per_seed: Sequence[Sequence[float]], steps: Sequence[int]) -> Curve:
    r"""A :class:`~qae_lab.analysis.compare.Curve` from one row of values per seed (population std over seeds).

    >>> c = seed_curve([[1.0, 2.0], [3.0, 2.0]], [0, 10]); c.mean, c.std, c.n_runs
    ([2.0, 2.0], [1.0, 0.0], 2)
    """
    x = torch.as_tensor([list(map(float, row)) for row in per_seed], dtype=torch.float64)  # (S, T)
    if x.dim() != 2 or x.shape[1] != len(steps):
        raise ValueError(
            f"per_seed must hold one row of {len(steps)} values (one per step) per seed, got shape {tuple(x.shape)}"
        )
    spread = (x.mean(0), x.std(0, correction=0), x.amin(0), x.amax(0))
    return Curve(list(steps), *(t.tolist() for t in spread), x.shape[0])


def run_curves(
    out: Mapping[str, torch.Tensor], keys: Mapping[str, str], *, cumulative: bool = False, stride: int = 1
) -> dict[str, Curve]:
    r"""Curves over seeds of a simulate output: legend name -> key; ``cumulative`` sums per-step metrics over steps
    (they start at step 1, ``entropy`` and ``success`` at 0); every ``stride``-th step is kept.

    >>> out = {"entropy": torch.tensor([[3.0, 2.0, 1.0]]), "sampled/dh": torch.tensor([[-1.0, -1.0]])}
    >>> c = run_curves(out, {"H": "entropy", "dH": "sampled/dh"}, cumulative=True)
    >>> c["H"].steps, c["H"].mean, c["dH"].steps, c["dH"].mean
    ([0, 1, 2], [3.0, 2.0, 1.0], [1, 2], [-1.0, -2.0])
    """
    curves = {}
    for name, key in keys.items():
        x = out[key].double()  # (S, T)
        first = 0 if key in ("entropy", "success") else 1
        if cumulative and first:
            x = x.cumsum(-1)
        idx = list(range(0, x.shape[1], stride))
        curves[name] = seed_curve(x[:, idx].tolist(), [first + i for i in idx])
    return curves


def findings_curves(findings: Mapping, names: Mapping[str, str], key: str = "entropy_curve") -> dict[str, Curve]:
    r"""Curves over seeds of committed runs: legend name -> setting name; ``key``: ``entropy_curve`` or
    ``success_curve`` (as :func:`summarise_run` keeps them).

    >>> c = {"steps": [0, 25], "mean": [2.0, 1.25], "std": [0.0, 0.25], "lo": [2.0, 1.0], "hi": [2.0, 1.5], "n": 2}
    >>> findings_curves({"runs": {"a": {"entropy_curve": c}}}, {"mean": "a"})["mean"].std
    [0.0, 0.25]
    """
    curves = {label: findings["runs"][name][key] for label, name in names.items()}
    return {label: Curve(c["steps"], c["mean"], c["std"], c["lo"], c["hi"], c["n"]) for label, c in curves.items()}


def tracking_table(findings: Mapping, metric: str = "corr") -> tuple[list[str], list[str], list[list[float]]]:
    r"""The headline runs' :func:`tracking` for a heatmap: row labels (start, optimizer, baseline), the forms, and
    per row the mean over seeds of ``metric`` of each form.

    >>> t = {f: {"corr": [0.5, 0.7]} for f in LEDGER_FORMS}
    >>> f = {"runs": {setting_name(s, b, 0.4, True, True, o): {"tracking": t} for s in STARTS for o in OPTIMIZERS
    ...               for b in ("mean", "quantile")}}
    >>> rows, forms, z = tracking_table(f); rows[:2], forms, z[0]
    (['flat, sgd, mean', 'flat, sgd, quantile'], ['npg', 'pg', 'reinforce'], [0.6, 0.6, 0.6])
    """
    labels, z = [], []
    for start in STARTS:
        for opt in OPTIMIZERS:
            for b in ("mean", "quantile"):
                t = findings["runs"][_headline(start, b, opt)]["tracking"]
                labels.append(f"{start}, {opt}, {b}")
                z.append([statistics.fmean(v for v in t[f][metric] if v is not None) for f in LEDGER_FORMS])
    return labels, list(LEDGER_FORMS), z


# ---------------------------------------------------------------- the committed files, notebook 09's tables


def find_regimes(start: str | os.PathLike | None = None) -> Path:
    r"""The committed ``regimes.json``: :func:`qae_lab.analysis.committed_data.data_dir` ``("seqpolicy", start)``.

    >>> find_regimes().name
    'regimes.json'
    """
    return data_dir("seqpolicy", start) / "regimes.json"


def load_findings(path: str | os.PathLike | None = None) -> dict:
    r"""The findings as a dict; ``path`` None: the committed one.

    >>> sorted(load_findings())
    ['meta', 'runs', 'variance']
    """
    return load_json(data_dir("seqpolicy") / "findings.json" if path is None else path, "seqpolicy_findings.py")


def load_regimes(path: str | os.PathLike | None = None) -> dict:
    r"""QAE's Proposition 4.2 by regime in training as a dict: ``search`` the tries that chose the settings, ``runs``
    setting name -> ``groups`` -> :func:`summarise_regimes`, ``runner_up`` the search's runner-up on the same seeds;
    ``path`` None: :func:`find_regimes`.

    >>> sorted(load_regimes())
    ['meta', 'runner_up', 'runs', 'search', 'timing']
    """
    return load_json(find_regimes() if path is None else path, "seqpolicy_regimes.py")


# quantile (K = 0.4) against mean, both with Clip-Higher and the std, SGD unless said: (quantity, what, digits); the
# headlines first (what notebook 09 shows by default), then the rest of the sweep
SWEEP = (
    ("final_entropy", "final entropy (nats)", 2),
    ("early_entropy", "entropy after {early_step} steps (nats)", 2),
    ("final_success", "final success rate", 3),
    ("ledger.sampled.dh", "summed first-order entropy change, all samples (nats)", 3),
    *((f"ledger.sampled.{c}", f"summed first-order entropy change, {w} ({c})", 3) for c, w in CELLS.items()),
    ("final_entropy_hard0", "final entropy, prompts hard at the start (nats)", 2),
    ("final_entropy_easy0", "final entropy, prompts easy at the start (nats)", 2),
    ("hard_frac", "share of hard prompts", 3),
    ("zero_adv_frac", "share of zero advantages", 3),
    ("clip_frac", "share of clipped tokens", 4),
    ("ledger.estimator_npg.dh", "the trainer's per-token ledger (npg), summed", 3),
    ("dh_first_order", "the exact first-order change, summed (nats)", 3),
)


def _value(run: Mapping, quantity: str) -> list:
    """A per-seed list from a run's summary by a dotted path (``"ledger.sampled.dh_easy_neg"``)."""
    return functools.reduce(operator.getitem, quantity.split("."), run)


def _headline(start: str, baseline: str, optimizer: str = "sgd", k: float = DEFAULT_K) -> str:
    """A setting of the sweep with Clip-Higher and the group std."""
    return setting_name(start, baseline, k, True, True, optimizer)


def sweep_rows(findings: Mapping, *, every: bool = False) -> list[dict]:
    r"""The committed sweep as :func:`~qae_lab.analysis.claims.comparison_row` s, quantile (K = 0.4) against mean:
    per start and optimizer the final entropy; ``every``: each quantity of :data:`SWEEP` under SGD, the other K
    against the mean, and Clip-Higher against the plain clip.

    >>> rows = sweep_rows(load_findings())
    >>> [(r["start"], r["setting"]) for r in rows]
    [('flat', 'SGD'), ('flat', 'Adam'), ('peaked', 'SGD'), ('peaked', 'Adam')]
    """
    meta, runs, out = findings["meta"], findings["runs"], []

    def row(start, setting, a, b, quantity="final_entropy", what=SWEEP[0][1], labels=("quantile", "mean"), digits=2):
        values = (_value(runs[a], quantity), _value(runs[b], quantity))
        compared = comparison_row(what.format(**meta), labels[0], values[0], labels[1], values[1], digits)
        out.append({"start": start, "setting": setting, **compared})

    for start in STARTS:
        quantile, mean = _headline(start, "quantile"), _headline(start, "mean")
        for opt in OPTIMIZERS:
            row(start, {"sgd": "SGD", "adam": "Adam"}[opt], *(_headline(start, b, opt) for b in ("quantile", "mean")))
        if not every:
            continue
        for quantity, what, digits in SWEEP[1:]:
            row(start, "SGD", quantile, mean, quantity, what, digits=digits)
        for k in (k for k in K_VALUES if k != 0.4):
            row(start, "SGD", _headline(start, "quantile", k=k), mean, labels=(f"K = {k:g}", "mean"))
        for base in ("mean", "quantile"):
            a, b = (setting_name(start, base, 0.4, c, True) for c in (True, False))
            row(start, f"SGD, {base}", a, b, labels=("Clip-Higher", "clip 0.2"))
    return out


def cell_rows(findings: Mapping) -> list[dict]:
    r"""Under SGD, per start and baseline: the exact ledger's total and its four cells (first passes, summed over
    training, mean over seeds): which samples moved the entropy.

    >>> rows = cell_rows(load_findings()); [(r["start"], r["baseline"]) for r in rows][:2], sorted(rows[0])[:2]
    ([('flat', 'mean'), ('flat', 'quantile')], ['baseline', 'dh'])
    """
    return [
        {
            "start": start,
            "baseline": base,
            **{
                part: statistics.fmean(findings["runs"][_headline(start, base)]["ledger"]["sampled"][part])
                for part in ("dh", *CELLS)
            },
        }
        for start in STARTS
        for base in ("mean", "quantile")
    ]


# SA-AH's update against GRPO's on the same groups: quantity -> what, digits
VARIANCE_QUANTITIES = {
    "trace_var": ("tr Cov(dz), the update's variance", 3),
    "noise_to_signal": ("noise to signal, tr Cov(dz) / |E dz|^2", 1),
    "cos_success": ("cos(E dz, grad p), alignment with the success gradient", 3),
}


def variance_rows(findings: Mapping) -> list[dict]:
    r"""SA-AH's and AH's update (alpha = 0.5) against GRPO's (alpha = 0) on the same sampled groups, per start and
    quantity of :data:`VARIANCE_QUANTITIES`, over the paired task seeds.

    >>> rows = variance_rows(load_findings()); rows[0]["start"], rows[0]["a"].split()[0], rows[0]["quantity"][:8]
    ('flat', 'SA-AH,', 'tr Cov(d')
    """
    out = []
    for start, variants in findings["variance"]["per_start"].items():
        plain = variants["alpha = 0"]
        for name, v in variants.items():
            if name == "alpha = 0":
                continue
            for key, (what, digits) in VARIANCE_QUANTITIES.items():
                out.append({"start": start, **comparison_row(what, name, v[key], "alpha = 0", plain[key], digits)})
    return out


# ---------------------------------------------------------------- Proposition 4.2 by regime, in training

REGIMES = ("hard", "easy", "mixed")  # the n hardest prompts at the start, the n easiest, all of them


def regime_settings(
    *, adam_eta: float, adam_passes: int, sgd_eta: float, sgd_passes: int, k: float = DEFAULT_K, group_size: int = 8
) -> dict[str, UpdateSettings]:
    r"""The regime grid: name -> :class:`~qae_lab.toys.seqpolicy_training.UpdateSettings`, {mean, quantile at ``k``} x
    {Adam, SGD (each its step and passes)} x {Clip-Higher (eps_high 0.28), clip 0.2}, with the group std.

    >>> g = regime_settings(adam_eta=0.05, adam_passes=4, sgd_eta=40.0, sgd_passes=2)
    >>> len(g), g["adam/quantile K=0.4/clip-higher"].num_iterations, g["sgd/mean/clip-0.2"].epsilon_high
    (8, 4, 0.2)
    """
    out = {}
    for opt, eta, passes in (("adam", adam_eta, adam_passes), ("sgd", sgd_eta, sgd_passes)):
        for baseline in ("mean", "quantile"):
            for clip_higher in (True, False):
                out[setting_name(opt, baseline, k, clip_higher)] = _update(
                    baseline, k, clip_higher, opt, eta, passes, group_size
                )
    return out


def start_groups(p0, n: int) -> dict[str, torch.Tensor]:
    r"""Per seed, the ``n`` hardest and the ``n`` easiest prompts by their start success rate p_0, as masks that never
    overlap (unlike :func:`qae_lab.regimes.start_split`, whose held-out groups share a prompt when every rate ties).

    QAE's Proposition 4.2 (arXiv 2509.22611): under the quantile baseline hard prompts (p <= 1-K) change their
    entropy by at most the mean baseline's, easy ones (p > 1-K) by at least. Each seed's prompts are sorted by p_0 (a
    stable sort: of equal p_0 the lower index counts as harder); "mixed" is every prompt.

    Shapes: p0 (S, P), P >= 2, n in [1, P // 2] -> :data:`REGIMES` -> (S, P) bool, n (mixed: P) True per seed.

    >>> m = start_groups(torch.tensor([[0.5, 0.1, 0.9, 0.1]]), 1)   # two prompts at 0.1: prompt 1 counts as harder
    >>> m["hard"].tolist(), m["easy"].tolist(), m["mixed"].sum().item()
    ([[False, True, False, False]], [[False, False, True, False]], 4)
    """
    p0 = as_real_tensor(p0, "p0")
    if p0.dim() != 2 or p0.shape[1] < 2:
        raise ValueError(f"p0 must have shape (S, P) with P >= 2 prompts, got {tuple(p0.shape)}")
    n = check_int(n, "n", 1, p0.shape[1] // 2)
    order = torch.sort(p0, dim=1, stable=True).indices  # (S, P): hardest first
    masks = {}
    for group, idx in (("hard", order[:, :n]), ("easy", order[:, -n:])):
        masks[group] = torch.zeros(p0.shape, dtype=torch.bool).scatter(1, idx, True)  # (S, P)
    masks["mixed"] = torch.ones(p0.shape, dtype=torch.bool)
    return masks


def start_group_curves(curves, p0, n: int) -> dict[str, torch.Tensor]:
    r"""Per-prompt curves averaged over each group of :func:`start_groups`: x_g(t) = mean_{q in g} x_q(t).

    Shapes: curves (S, P, T) (e.g. simulate's ``entropy_curves``), p0 (S, P) -> :data:`REGIMES` -> (S, T) float64.

    >>> x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 9.0], [7.0, 1.0]]])      # S = 1, P = 4, T = 2
    >>> {g: c.tolist() for g, c in start_group_curves(x, torch.tensor([[0.2, 0.9, 0.1, 0.5]]), 1).items()}
    {'hard': [[5.0, 9.0]], 'easy': [[3.0, 4.0]], 'mixed': [[4.0, 4.0]]}
    """
    x = as_real_tensor(curves, "curves").double()
    masks = start_groups(p0, n)
    if x.dim() != 3 or x.shape[:2] != masks["mixed"].shape:
        raise ValueError(
            f"curves must have shape (S, P, T) = {tuple(masks['mixed'].shape)} + (T,) to match p0, got {tuple(x.shape)}"
        )
    out = {}
    for group, m in masks.items():
        w = m.double()[..., None]  # (S, P, 1)
        # x_g(t) = sum_q m_q x_q(t) / sum_q m_q
        out[group] = (w * x).sum(1) / w.sum(1)  # (S, T)
    return out


def curve_summary(curve, early: int) -> dict[str, torch.Tensor]:
    r"""What a curve over steps did, per seed: ``start`` x_0, ``peak_ratio`` max_t x_t / x_0 (1 when it never rises
    above its start), ``early`` x at step ``early``, ``final`` x at the last step.

    Shapes: curve (S, T) from step 0, ``early`` in [0, T - 1] -> dict of (S,) float64.

    >>> s = curve_summary(torch.tensor([[2.0, 3.0, 1.0], [1.0, 0.5, 0.25]]), 1)
    >>> {k: v.tolist() for k, v in s.items()}
    {'start': [2.0, 1.0], 'peak_ratio': [1.5, 1.0], 'early': [3.0, 0.5], 'final': [1.0, 0.25]}
    """
    x = as_real_tensor(curve, "curve").double()
    if x.dim() != 2 or x.shape[1] < 1:
        raise ValueError(f"curve must have shape (S, T) with T >= 1 steps, got {tuple(x.shape)}")
    early = check_int(early, "early", 0, x.shape[1] - 1)
    # peak / start = max_t x_t / x_0
    return {"start": x[:, 0], "peak_ratio": x.amax(1) / x[:, 0], "early": x[:, early], "final": x[:, -1]}


class Move(NamedTuple):
    r"""A curve's first move away from its start: ``start`` x_0, ``extreme`` the peak of a first rise or the trough of
    a first fall, and the ``step`` where it was reached."""

    start: float
    extreme: float
    step: int


def first_move(values: Sequence[float], steps: Sequence[int]) -> Move:
    r"""Which way a curve goes first: the first value unlike x_0 sets the direction; the move lasts while the curve
    stays on that side of x_0 (a curve that never leaves x_0: ``extreme = start`` at the first step).

    >>> first_move([1.0, 1.3, 1.6, 1.2, 0.9, 1.7], [0, 5, 10, 15, 20, 25])   # up first: the peak before it falls back
    Move(start=1.0, extreme=1.6, step=10)
    >>> first_move([1.0, 1.0, 0.8, 0.7, 0.75], [0, 1, 2, 3, 4])
    Move(start=1.0, extreme=0.7, step=3)
    """
    x = [float(v) for v in values]
    if not x or len(x) != len(steps) or not all(math.isfinite(v) for v in x):
        raise ValueError(
            f"values must be finite numbers, one per step and at least one, got {len(x)} values for {len(steps)} steps"
        )
    start = x[0]
    first = next((i for i, v in enumerate(x) if v != start), None)
    if first is None:
        return Move(start, start, int(steps[0]))
    up = x[first] > start
    best = first
    for i in range(first, len(x)):
        if (x[i] > start) != up or x[i] == start:  # back at or across the start: the first move is over
            break
        if (x[i] > x[best]) == up and x[i] != x[best]:
            best = i
    return Move(start, x[best], int(steps[best]))


def summarise_regimes(out: Mapping[str, torch.Tensor], n: int, *, early: int, every: int) -> dict:
    r"""What ``data/seqpolicy/regimes.json`` keeps of one :func:`~qae_lab.toys.seqpolicy_training.simulate` run:
    per group of :func:`start_groups`, per seed, the group's mean success rate at the start and the end, its mean
    entropy curve's :func:`curve_summary`, and that curve every ``every`` steps as mean, std and range over seeds.

    >>> from qae_lab.toys.seqpolicy import task_batch
    >>> from qae_lab.toys.seqpolicy_training import simulate
    >>> t = task_batch(2, 4, 2, 3, start="peaked")
    >>> s = summarise_regimes(simulate(t.logits, t.rewards, UpdateSettings(group_size=4), steps=4), 1, early=2,
    ...                       every=2)
    >>> sorted(s), s["easy"]["entropy_curve"]["steps"], len(s["hard"]["peak_ratio"])
    (['easy', 'hard', 'mixed'], [0, 2, 4], 2)
    >>> sorted(s["hard"])
    ['early_h', 'entropy_curve', 'final_h', 'final_p', 'peak_ratio', 'start_h', 'start_p']
    """
    every = check_int(every, "every", 1)
    p0 = out["success_curves"][..., 0]  # (S, P)
    h, p = start_group_curves(out["entropy_curves"], p0, n), start_group_curves(out["success_curves"], p0, n)
    keep = {}
    for group in REGIMES:
        sh = curve_summary(h[group], early)
        keep[group] = {
            "start_p": _seeds(p[group][:, 0]),
            "final_p": _seeds(p[group][:, -1]),
            "start_h": _seeds(sh["start"]),
            "peak_ratio": _seeds(sh["peak_ratio"]),
            "early_h": _seeds(sh["early"]),
            "final_h": _seeds(sh["final"]),
            "entropy_curve": _curve(h[group], list(range(0, h[group].shape[1], every))),
        }
    return keep


def seqpolicy_regime_curve(
    regimes: Mapping, group: str, baseline: str, optimizer: str = "adam", clip_higher: bool = True
) -> dict:
    r"""One committed entropy curve of :func:`load_regimes`: ``group`` (:data:`REGIMES`) under ``baseline`` (mean,
    quantile), ``optimizer`` and Clip-Higher.

    >>> c = seqpolicy_regime_curve(load_regimes(), "hard", "mean"); c["steps"][:3], c["n"]
    ([0, 5, 10], 16)
    """
    if baseline not in ("mean", "quantile"):
        raise ValueError(f"baseline must be 'mean' or 'quantile', got {baseline!r}")
    if group not in REGIMES:
        raise ValueError(f"group must be one of {list(REGIMES)}, got {group!r}")
    name = setting_name(optimizer, baseline, regimes["meta"]["k"], bool(clip_higher))
    if name not in regimes["runs"]:
        raise ValueError(f"no committed run {name!r}; runs: {sorted(regimes['runs'])}")
    return regimes["runs"][name]["groups"][group]["entropy_curve"]
