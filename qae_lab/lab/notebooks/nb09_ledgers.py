r"""Notebook 09's numbers and figures (notebook 07's appendix) on the exact sequence policy: the tasks in a table, one
update's entropy ledgers, the sampled ledger against the expected one, training runs under the controls, the committed
sweep's comparisons and SA-AH's update variance against GRPO's.

The maths is :mod:`qae_lab.toys.seqpolicy` and :mod:`qae_lab.toys.seqpolicy_training`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from qae_lab._checks import check_int
from qae_lab.analysis.seqpolicy_runs import CELLS, K_VALUES, findings_curves, run_curves, setting_name
from qae_lab.labels import CELL_NAMES, SHOW
from qae_lab.lab.figures import band_figure, bar_figure
from qae_lab.toys.seqpolicy import prefix_reach, sequence_entropy, state_entropies, success_rate, task_batch
from qae_lab.toys.seqpolicy_training import UpdateSettings, group_update, simulate, update_variance

__all__ = [
    "LEDGER_KINDS",
    "SHARE_PARTS",
    "CELL_NAMES",
    "SHOW",
    "COMPARISONS",
    "task_rows",
    "one_update",
    "ledger_shares",
    "one_update_rows",
    "expected_vs_sampled_rows",
    "LiveRuns",
    "ledger_keys",
    "variance_ratios",
    "ledger_shares_figure",
    "live_figure",
    "findings_figure",
    "variance_figure",
]


LEDGER_KINDS = {
    "exact": "sampled",
    "npg (trainer)": "estimator_npg",
    "pg": "estimator_pg",
    "reinforce": "estimator_reinforce",
}


SHARE_PARTS = ["dh", *CELLS]  # the whole change, then the four cells


# the committed sweep's comparisons: legend name -> (baseline, K, Clip-Higher, std[, optimizer])
COMPARISONS = {
    "mean vs quantile": {"mean": ("mean", 0.4, True, True), "quantile": ("quantile", 0.4, True, True)},
    "K sweep": {f"K = {k:g}": ("quantile", k, True, True) for k in K_VALUES},
    "Clip-Higher": {
        "mean, Clip-Higher": ("mean", 0.4, True, True),
        "mean, clip 0.2": ("mean", 0.4, False, True),
        "quantile, Clip-Higher": ("quantile", 0.4, True, True),
        "quantile, clip 0.2": ("quantile", 0.4, False, True),
    },
    "std scaling": {
        "mean, std": ("mean", 0.4, True, True),
        "mean, no std": ("mean", 0.4, True, False),
        "quantile, std": ("quantile", 0.4, True, True),
        "quantile, no std": ("quantile", 0.4, True, False),
    },
    "optimizer": {
        "mean, SGD": ("mean", 0.4, True, True),
        "mean, Adam": ("mean", 0.4, True, True, "adam"),
        "quantile, SGD": ("quantile", 0.4, True, True),
        "quantile, Adam": ("quantile", 0.4, True, True, "adam"),
    },
}


def task_rows(tasks: Mapping, vocab: int, length: int, hard_below: float = 0.6) -> list[dict]:
    r"""Per start, a table row: the mean sequence entropy against L log V, the chain rule's largest gap to it, the
    hard prompts (p <= ``hard_below``) and the lowest and highest success rate.

    >>> from qae_lab.toys.seqpolicy import make_tasks
    >>> row = task_rows({"flat": make_tasks(4, 2, 3, start="flat", seed=0)}, 2, 3)[0]
    >>> row["start"], round(row["H(pi), mean"], 3), round(row["L log V"], 3)
    ('flat', 2.079, 2.079)
    """
    rows = []
    for start, t in tasks.items():
        h = sequence_entropy(t.logits)  # (P,)
        chain = (prefix_reach(t.logits) * state_entropies(t.logits)).sum(-1)  # (P,)
        p = success_rate(t.logits, t.rewards)  # (P,)
        rows.append(
            {
                "start": start,
                "H(pi), mean": float(h.mean()),
                "L log V": length * math.log(vocab),
                "chain rule's gap": float((h - chain).abs().max()),
                "hard prompts": f"{int((p <= hard_below).sum())} of {p.shape[0]}",
                "p, lowest": float(p.min()),
                "p, highest": float(p.max()),
            }
        )
    return rows


def one_update(task, settings: UpdateSettings, seed: int = 0) -> dict[str, float]:
    r"""Every metric of one sampled group update of ``task``'s prompts (``group_update``), as floats.

    >>> from qae_lab.toys.seqpolicy import make_tasks
    >>> m = one_update(make_tasks(4, 2, 3, start="peaked"), UpdateSettings(group_size=4))
    >>> abs(m["sampled/dh"] - m["dh_first_order"]) < 1e-12
    True
    """
    _, metrics, _ = group_update(
        task.logits[None],
        task.rewards[None],
        settings,
        generator=torch.Generator().manual_seed(check_int(seed, "seed", 0)),
    )
    return {key: float(val[0]) for key, val in metrics.items()}


def ledger_shares(metrics: Mapping[str, float], kind: str, parts: Sequence[str] = SHARE_PARTS) -> list[float]:
    r"""Each part of one ledger (``kind``: a prefix of :data:`LEDGER_KINDS`) as a share of its summed |cells|.

    >>> m = {"sampled/dh": -0.25, "sampled/dh_hard_pos": -0.125, "sampled/dh_hard_neg": 0.125,
    ...      "sampled/dh_easy_pos": -0.25, "sampled/dh_easy_neg": 0.0}
    >>> ledger_shares(m, "sampled")
    [-0.5, -0.25, 0.25, -0.5, 0.0]
    """
    scale = sum(abs(metrics[f"{kind}/{part}"]) for part in parts[1:])
    if scale == 0:
        raise ValueError(f"the {kind} ledger's cells are all 0: no shares")
    return [metrics[f"{kind}/{part}"] / scale for part in parts]


def one_update_rows(metrics: Mapping[str, float], kinds: Mapping[str, str] = LEDGER_KINDS) -> list[dict]:
    r"""One update's entropy change as table rows: exact, first order, its state/visitation split, then each
    per-token estimate summed (every kind of ``kinds`` but the first).

    >>> m = {"dh_exact": -0.01, "dh_first_order": -0.011, "sampled/dh_state": -0.008, "sampled/dh_visit": -0.003,
    ...      "estimator_npg/dh": -0.5}
    >>> one_update_rows(m, {"exact": "sampled", "npg": "estimator_npg"})[-1]
    {'quantity': 'per-token estimate npg, summed (eta / N_tok units)', 'value': -0.5}
    """
    return [
        {"quantity": "exact change H(after) - H(before) (nats)", "value": metrics["dh_exact"]},
        {"quantity": "first-order change (nats)", "value": metrics["dh_first_order"]},
        {"quantity": "  of which the states' own entropies", "value": metrics["sampled/dh_state"]},
        {"quantity": "  of which their visitation", "value": metrics["sampled/dh_visit"]},
        *(
            {"quantity": f"per-token estimate {label}, summed (eta / N_tok units)", "value": metrics[kind + "/dh"]}
            for label, kind in list(kinds.items())[1:]
        ),
    ]


def expected_vs_sampled_rows(
    task,
    settings: UpdateSettings,
    n_groups: int,
    *,
    prompts: int = 4,
    seed: int = 1,
    parts: Sequence[str] = ("dh", "dh_hard_neg", "dh_easy_neg"),
) -> list[dict]:
    r"""The expected ledger of one update against the mean of ``n_groups`` sampled ones, +- 2 s.e., a row per part.

    >>> from qae_lab.toys.seqpolicy import make_tasks
    >>> rows = expected_vs_sampled_rows(make_tasks(4, 2, 3, start="peaked"), UpdateSettings(group_size=4), 50)
    >>> rows[0]["part"], sorted(rows[0])
    ('dh', ['2 s.e.', 'expected', 'part', 'sampled, mean'])
    """
    n_groups = check_int(n_groups, "n_groups", 2)
    logits, rewards = task.logits[:prompts], task.rewards[:prompts]
    many = group_update(
        logits.expand(n_groups, -1, -1, -1),
        rewards.expand(n_groups, -1, -1),
        settings,
        generator=torch.Generator().manual_seed(check_int(seed, "seed", 0)),
    )[1]
    return [
        {
            "part": part,
            "expected": float(many[f"expected/{part}"][0]),
            "sampled, mean": float(many[f"sampled/{part}"].mean()),
            "2 s.e.": 2 * float(many[f"sampled/{part}"].std()) / n_groups**0.5,
        }
        for part in parts
    ]


class LiveRuns:
    r"""Training runs of the live view (``simulate``: G = 8, two passes, SGD at ``eta`` or Adam at ``adam_eta``), one
    per setting of the controls, each made once and kept.

    >>> live = LiveRuns(seeds=1, prompts=2, vocab=2, length=2, steps=3, eta=1.0, adam_eta=0.01)
    >>> out = live("quantile", 0.4, True, True, "flat", 0.0, "sgd")
    >>> out["entropy"].shape, live("quantile", 0.4, True, True, "flat", 0.0, "sgd") is out
    (torch.Size([1, 4]), True)
    """

    def __init__(self, *, seeds: int, prompts: int, vocab: int, length: int, steps: int, eta: float, adam_eta: float):
        self.seeds, self.prompts, self.vocab, self.length = seeds, prompts, vocab, length
        self.steps, self.eta, self.adam_eta = steps, eta, adam_eta
        self._runs: dict[tuple, dict[str, torch.Tensor]] = {}

    def settings(
        self, baseline: str, k: float, clip_higher: bool, std: bool, alpha: float, optimizer: str
    ) -> UpdateSettings:
        r"""The :class:`~qae_lab.toys.seqpolicy_training.UpdateSettings` of one position of the controls.

        >>> LiveRuns(seeds=1, prompts=2, vocab=2, length=2, steps=3, eta=40.0, adam_eta=0.02).settings(
        ...     "mean", 0.4, False, False, 0.5, "adam").eta
        0.02
        """
        return UpdateSettings(
            group_size=8,
            baseline=baseline,
            k=k,
            scale="group" if std else "none",
            eta=self.eta if optimizer == "sgd" else self.adam_eta,
            optimizer=optimizer,
            num_iterations=2,
            epsilon_high=0.28 if clip_higher else 0.2,
            alpha=alpha,
        )

    def __call__(
        self, baseline: str, k: float, clip_higher: bool, std: bool, start: str, alpha: float, optimizer: str
    ) -> dict[str, torch.Tensor]:
        key = (baseline, k, clip_higher, std, start, alpha, optimizer)
        if key not in self._runs:
            batch = task_batch(self.seeds, self.prompts, self.vocab, self.length, start=start, seed=0)
            self._runs[key] = simulate(
                batch.logits,
                batch.rewards,
                self.settings(baseline, k, clip_higher, std, alpha, optimizer),
                steps=self.steps,
                seed=0,
            )
        return self._runs[key]


def ledger_keys(show: str, optimizer: str) -> dict[str, str]:
    r"""The curves of one choice of :data:`SHOW`: legend name -> metric of ``simulate``. Under Adam the exact ledger
    has no split by sample, only the step's whole first-order change.

    >>> ledger_keys("cumulative ledger, exact", "adam"), ledger_keys("entropy", "sgd")
    ({'all (grad H . dz, whole step)': 'dh_first_order'}, {'entropy': 'entropy'})
    """
    if show not in SHOW:
        raise ValueError(f"show must be one of {list(SHOW)}, got {show!r}")
    if show == "cumulative ledger, exact" and optimizer == "sgd":
        return {label: f"sampled/{part}" for label, part in CELL_NAMES.items()}
    if show == "cumulative ledger, exact":
        return {"all (grad H . dz, whole step)": "dh_first_order"}
    if show == "cumulative ledger, trainer's npg":
        return {label: f"estimator_npg/{part}" for label, part in CELL_NAMES.items()}
    return {show: show}


def variance_ratios(out: Mapping[str, Mapping[str, float]], plain: str = "alpha = 0") -> dict[str, list[float]]:
    r"""Each variant of ``update_variance`` against GRPO's: ``[tr Cov(dz) / GRPO's, |E dz| / GRPO's]``.

    >>> variance_ratios({"alpha = 0": {"trace_var": 2.0, "mean_norm": 4.0},
    ...                  "SA-AH, alpha = 0.5": {"trace_var": 1.0, "mean_norm": 3.0}})
    {'alpha = 0': [1.0, 1.0], 'SA-AH, alpha = 0.5': [0.5, 0.75]}
    """
    base = out[plain]
    return {name: [v["trace_var"] / base["trace_var"], v["mean_norm"] / base["mean_norm"]] for name, v in out.items()}


def ledger_shares_figure(
    metrics: Mapping[str, float], kinds: Mapping[str, str] = LEDGER_KINDS, *, title: str
) -> go.Figure:
    r"""One update's :func:`ledger_shares`, grouped bars per ledger of ``kinds``.

    >>> m = {f"sampled/{p}": v for p, v in zip(SHARE_PARTS, [-0.2, -0.1, 0.1, -0.3, 0.1])}
    >>> fig = ledger_shares_figure(m, {"exact": "sampled"}, title="t")
    >>> list(fig.data[0].x), [round(y, 3) for y in fig.data[0].y]
    (['dh', 'dh_hard_pos', 'dh_hard_neg', 'dh_easy_pos', 'dh_easy_neg'], [-0.333, -0.167, 0.167, -0.5, 0.167])
    """
    return bar_figure(
        SHARE_PARTS,
        {label: ledger_shares(metrics, kind) for label, kind in kinds.items()},
        title=title,
        x_title="part of the ledger",
        y_title="share of the ledger's |change|",
    )


def live_figure(
    live: LiveRuns,
    baseline: str,
    K: float,
    clip_higher: bool,
    std: bool,
    start: str,
    alpha: float,
    optimizer: str,
    show: str,
) -> go.Figure:
    r"""One of :data:`SHOW` over the steps of the live run with these settings, mean +- std over seeds.

    >>> live = LiveRuns(seeds=2, prompts=2, vocab=2, length=2, steps=3, eta=1.0, adam_eta=0.01)
    >>> fig = live_figure(live, "mean", 0.4, True, True, "flat", 0.0, "sgd", "success")
    >>> [t.name for t in fig.data if t.name], fig.layout.yaxis.title.text
    (['success (2 runs)'], 'success rate')
    """
    out = live(baseline, K, clip_higher, std, start, alpha, optimizer)
    on = {True: "on", False: "off"}
    title = (
        f"{SHOW[show]}: baseline = {baseline}, K = {K:g}, Clip-Higher {on[bool(clip_higher)]}, std "
        f"{on[bool(std)]}, {start} start, α = {alpha:g}, optimizer {optimizer}"
    )
    curves = run_curves(out, ledger_keys(show, optimizer), cumulative=True, stride=max(1, live.steps // 100))
    return band_figure(curves, title=title, y_title=SHOW[show])


def findings_figure(
    findings: Mapping, comparisons: Mapping[str, Mapping[str, tuple]], start: str, group: str, curve: str
) -> go.Figure:
    r"""One comparison of the committed sweep from one ``start``: its ``curve`` curves, mean +- std over seeds.

    >>> from qae_lab.analysis.seqpolicy_runs import load_findings
    >>> from qae_lab.lab.notebooks.nb09_ledgers import COMPARISONS
    >>> fig = findings_figure(load_findings(), COMPARISONS, "flat", "mean vs quantile", "entropy")
    >>> [t.name.split(" (")[0] for t in fig.data if t.name], fig.layout.yaxis.title.text
    (['mean', 'quantile'], 'H(pi) (nats)')
    """
    names = {label: setting_name(start, *spec) for label, spec in comparisons[group].items()}
    return band_figure(
        findings_curves(findings, names, f"{curve}_curve"),
        title=f"committed runs, {curve}: {group}, {start} start (mean ± std over seeds)",
        y_title="H(pi) (nats)" if curve == "entropy" else "success rate",
    )


def variance_figure(tasks: Mapping, alpha: float, start: str, *, eta: float, n_draws: int) -> go.Figure:
    r"""SA-AH's and AH's update at ``alpha`` against GRPO's on the same ``n_draws`` batches: :func:`variance_ratios`.

    >>> from qae_lab.toys.seqpolicy import make_tasks
    >>> fig = variance_figure({"peaked": make_tasks(2, 2, 2, start="peaked")}, 0.5, "peaked", eta=1.0, n_draws=4)
    >>> [t.name for t in fig.data], list(fig.data[0].y)
    (['alpha = 0', 'SA-AH, alpha = 0.5', 'AH, alpha = 0.5'], [1.0, 1.0])
    """
    t = tasks[start]
    out = update_variance(
        t.logits, t.rewards, UpdateSettings(group_size=8, baseline="mean", eta=eta), alphas=(alpha,), n_draws=n_draws
    )
    return bar_figure(
        ["tr Cov(dz) / GRPO's", "|E dz| / GRPO's"],
        variance_ratios(out),
        title=f"The update against GRPO's (alpha = 0) on the same {n_draws} batches, α = {alpha:g}, {start} start",
        y_title="ratio",
    )
