r"""The sequence-policy results: finding and reading the committed files, and the tables notebooks 07 and 09 show.

``benchmarks/seqpolicy_findings.py`` runs :func:`qae_lab.analysis.seqpolicy_runs.sweep_settings` with
:func:`qae_lab.toys.seqpolicy_training.simulate` and :func:`qae_lab.toys.seqpolicy_training.update_variance` and keeps
:func:`qae_lab.analysis.seqpolicy_runs.summarise_run` of each run in ``data/seqpolicy/findings.json``
(:func:`load_findings`); ``benchmarks/seqpolicy_regimes.py`` keeps QAE's Proposition 4.2 by regime in training in
``data/seqpolicy/regimes.json`` (:func:`load_regimes`; the claims judged on it: :mod:`qae_lab.analysis.evidence`).

Notebook 09 shows the sweep as table rows (:func:`sweep_rows`, :func:`cell_rows`, :func:`variance_rows`): each a
comparison of two settings over the same seeds (the same tasks and random stream), each side's mean ± std and
a - b with its 95% interval over the paired seeds (:func:`qae_lab.analysis.claims.comparison_row`).
:func:`regime_curve` reads one committed curve of the regimes file (notebook 07's prediction is checked on it).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Mapping
from pathlib import Path

from qae_lab.methods import DEFAULT_K
from qae_lab.analysis.claims import comparison_row
from qae_lab.analysis.committed_data import data_dir
from qae_lab.analysis.seqpolicy_runs import CELLS, K_VALUES, REGIMES, regime_setting_name, setting_name
from qae_lab.toys.seqpolicy import STARTS
from qae_lab.toys.seqpolicy_training import OPTIMIZERS

__all__ = [
    "find_findings",
    "load_findings",
    "find_regimes",
    "load_regimes",
    "SWEEP",
    "sweep_rows",
    "cell_rows",
    "VARIANCE_QUANTITIES",
    "variance_rows",
    "regime_curve",
]


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
    node = run
    for key in quantity.split("."):
        node = node[key]
    return node


def _headline(start: str, baseline: str, optimizer: str = "sgd", k: float = DEFAULT_K) -> str:
    """A setting of the sweep with Clip-Higher and the group std."""
    return setting_name(start, baseline, k, True, True, optimizer)


def sweep_rows(findings: Mapping, *, every: bool = False) -> list[dict]:
    r"""The committed sweep as table rows, quantile (K = 0.4) against mean over the paired seeds: per start and
    optimizer the final entropy (the headlines); ``every``: each quantity of :data:`SWEEP` under SGD, the other K
    against the mean, and Clip-Higher against the plain clip. Columns: start, setting, quantity, a, b, a - b
    (its 95% interval), seeds a > b.

    >>> rows = sweep_rows(load_findings())
    >>> [(r["start"], r["setting"]) for r in rows]
    [('flat', 'SGD'), ('flat', 'Adam'), ('peaked', 'SGD'), ('peaked', 'Adam')]
    """
    meta, runs, out = findings["meta"], findings["runs"], []

    def row(start: str, setting: str, a: str, b: str, quantity: str, what: str, labels=("quantile", "mean"), digits=2):
        values = (_value(runs[a], quantity), _value(runs[b], quantity))
        compared = comparison_row(what.format(**meta), labels[0], values[0], labels[1], values[1], digits)
        out.append({"start": start, "setting": setting, **compared})

    for start in STARTS:
        for opt in OPTIMIZERS:
            name = {"sgd": "SGD", "adam": "Adam"}[opt]
            row(
                start,
                name,
                _headline(start, "quantile", opt),
                _headline(start, "mean", opt),
                "final_entropy",
                SWEEP[0][1],
            )
        if not every:
            continue
        for quantity, what, digits in SWEEP[1:]:
            row(start, "SGD", _headline(start, "quantile"), _headline(start, "mean"), quantity, what, digits=digits)
        for k in (k for k in K_VALUES if k != 0.4):
            a = _headline(start, "quantile", k=k)
            row(start, "SGD", a, _headline(start, "mean"), "final_entropy", SWEEP[0][1], (f"K = {k:g}", "mean"))
        for base in ("mean", "quantile"):
            a, b = (setting_name(start, base, 0.4, c, True) for c in (True, False))
            row(start, f"SGD, {base}", a, b, "final_entropy", SWEEP[0][1], ("Clip-Higher", "clip 0.2"))
    return out


def cell_rows(findings: Mapping) -> list[dict]:
    r"""Under SGD, per start and baseline: the exact ledger's total and its four cells (first passes summed over
    training, nats, mean over seeds): which samples moved the entropy.

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


# ---------------------------------------------------------------- notebook 07's prediction


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
