r"""Notebooks 07 and 09's live numbers and figures on the exact sequence policy.

Live numbers on the exact sequence policy. Notebook 07: one prompt's logit table, prefix by prefix, and its
entropy by the chain rule (:func:`prefix_table`). Notebook 09, its appendix: the tasks in sentences, one update's
ledgers, the sampled ledger against the expected one, training runs under the controls, the comparisons of the
committed sweep and SA-AH's update variance against GRPO's.

The maths is :mod:`qae_lab.toys.seqpolicy` and :mod:`qae_lab.toys.seqpolicy_training`; this module runs it for the
notebook and says what it gives. Nothing here imports plotly or ipywidgets (the figures are
:mod:`qae_lab.lab.nb07_sequence_policy`).

The former ``seqpolicy_figures`` module: the figures of the exact sequence policy (the lab layer). Notebook 07: the prompts' start success rates, hardest
to easiest, and QAE's Proposition 4.2 by regime in training (the committed ``regimes.json``: hard | easy | mixed
prompts, mean vs quantile baseline). Notebook 09, its appendix: one update's ledgers by part, live training runs under
the controls, the committed sweep's comparisons, SA-AH's update against GRPO's.

The numbers come from :mod:`qae_lab.lab.nb07_sequence_policy`, :mod:`qae_lab.analysis.seqpolicy_runs` and
:mod:`qae_lab.toys.seqpolicy_training`; the notebook puts the figures under its controls with
:func:`qae_lab.lab.plots.interactive` (keyword arguments named as the controls).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from qae_lab._checks import as_real_tensor, check_int
from qae_lab.analysis.seqpolicy_runs import (
    CELLS,
    K_VALUES,
    REGIMES,
    findings_curves,
    regime_setting_name,
    run_curves,
    setting_name,
    start_split,
)
from qae_lab.lab.plots import PALETTE, add_band, band_figure, bar_figure, differences_figure, wrap_title
from qae_lab.toys.seqpolicy import (
    prefix_reach,
    sequence_entropy,
    sequence_logprobs,
    space_of,
    state_entropies,
    success_rate,
    task_batch,
)
from qae_lab.toys.seqpolicy_training import UpdateSettings, group_update, simulate, update_variance

__all__ = [
    "LEDGER_KINDS",
    "SHARE_PARTS",
    "CELL_NAMES",
    "SHOW",
    "COMPARISONS",
    "prefix_table",
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
    "start_rates_figure",
    "regimes_figure",
    "PROP42",
    "seed_differences_figure",
]


# ledger name -> the metric prefix of group_update: the exact first-order ledger and three per-token estimates
LEDGER_KINDS = {
    "exact": "sampled",
    "npg (trainer)": "estimator_npg",
    "pg": "estimator_pg",
    "reinforce": "estimator_reinforce",
}
SHARE_PARTS = ["dh", *CELLS]  # the whole change, then the four cells
# the ledger's cells in the live view's legend
CELL_NAMES = {
    "hard, A > 0": "dh_hard_pos",
    "hard, A < 0": "dh_hard_neg",
    "easy, A > 0": "dh_easy_pos",
    "easy, A < 0": "dh_easy_neg",
    "all": "dh",
}
# what the live view shows -> its axis
SHOW = {
    "cumulative ledger, exact": "first-order dH summed over steps (nats)",
    "cumulative ledger, trainer's npg": "npg ledger summed over steps (eta / N_tok units)",
    "entropy": "H(pi) (nats)",
    "success": "success rate",
}
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


def _prefix_names(vocab: int, length: int) -> list[str]:
    """Every prefix's tokens as a string ("" the empty one), in the order of the logit table's rows."""
    names, level = [], [""]
    for _ in range(length):
        names += level
        level = [s + str(a) for s in level for a in range(vocab)]
    return names


def prefix_table(z) -> list[str]:
    r"""One prompt's policy as a table, a row per prefix s (a state): its logits z_s, pi(.|s) = softmax(z_s), its
    reach rho(s) and its entropy H(pi(.|s)); then H(pi) by the chain rule (eq. S2 of :mod:`qae_lab.toys.seqpolicy`,
    sum_s rho(s) H(pi(.|s))) against H(pi) by enumerating the V**L sequences. Tokens are the digits 0..V-1.

    Args:
        z: (n, V) logits of one prompt, V <= 4 and L <= 3 (a table to read, not to scroll).

    >>> for line in prefix_table(torch.tensor([[0.0, math.log(3)], [0.0, 0.0], [0.0, 0.0]])):
    ...     print(line)
    prefix s    logits z_s    pi(.|s)  rho(s)  H(pi(.|s))
    (empty)     +0.0  +1.1  0.25 0.75   1.000       0.562
    0           +0.0  +0.0  0.50 0.50   0.250       0.693
    1           +0.0  +0.0  0.50 0.50   0.750       0.693
    chain rule: sum_s rho(s) H(pi(.|s)) = 1.2555 nats; enumerating the 4 sequences: H(pi) = 1.2555 nats
    """
    z = torch.as_tensor(z, dtype=torch.float64)
    if z.dim() != 2:
        raise ValueError(f"z must be one prompt's logit table (n, V), got shape {tuple(z.shape)}")
    vocab, length = space_of(z)
    if vocab > 4 or length > 3:
        raise ValueError(f"z must have V <= 4 and L <= 3 to be read as a table, got V = {vocab}, L = {length}")
    pi, rho, h = torch.softmax(z, -1), prefix_reach(z), state_entropies(z)  # (n, V), (n,), (n,)
    head = f"{'prefix s':<10}{'logits z_s':>{6 * vocab}}  {'pi(.|s)':>{5 * vocab - 1}}"
    lines = [f"{head}{'rho(s)':>8}{'H(pi(.|s))':>12}"]
    for name, zs, ps, r, hs in zip(_prefix_names(vocab, length), z.tolist(), pi.tolist(), rho.tolist(), h.tolist()):
        logits, probs = "".join(f"{v:+6.1f}" for v in zs), " ".join(f"{v:.2f}" for v in ps)
        lines.append(f"{name or '(empty)':<10}{logits}  {probs}{r:8.3f}{hs:12.3f}")
    lp = sequence_logprobs(z)  # (Y,)
    # H(pi) = sum_s rho(s) H(pi(.|s)) (chain rule) = -sum_y pi(y) log pi(y) (enumeration)
    chain, enumerated = float((rho * h).sum()), float(-(lp.exp() * lp).sum())
    lines.append(
        f"chain rule: sum_s rho(s) H(pi(.|s)) = {chain:.4f} nats; enumerating the {vocab**length} "
        f"sequences: H(pi) = {enumerated:.4f} nats"
    )
    return lines


def task_rows(tasks: Mapping, vocab: int, length: int, hard_below: float = 0.6) -> list[dict]:
    r"""Per start, a table row: the mean sequence entropy against its bound L log V, the chain rule's largest gap to
    it (the states' entropies weighted by how often they are reached), the prompts that are hard (p <= ``hard_below``,
    QAE's 1 - K at K = 0.4) and the lowest and highest success rate.

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
    r"""Every metric of one sampled group update of ``task``'s prompts (:func:`qae_lab.toys.seqpolicy_training.group_update`,
    the groups drawn from ``seed``), as floats.

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
    r"""Each part of one ledger (``kind``: a prefix of :data:`LEDGER_KINDS`) as a share of the ledger's summed |cells|
    (the four cells: every part but the first).

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
    r"""One update's entropy change as table rows: the exact change, its first-order value and that split into the
    states' own entropies and their visitation (nats, mean over prompts), then each per-token estimate summed (every
    kind of ``kinds`` but the first, the exact one; eta / N_tok units).

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
    r"""The expected ledger of one update against the average of ``n_groups`` sampled updates (each a fresh batch of
    groups for the first ``prompts`` prompts), with two standard errors, one row for each of ``parts``.

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
    r"""Training runs of the live view, one per setting of the controls, each made once and kept.

    Every run trains ``seeds`` task batches of ``prompts`` prompts (``vocab``, ``length``) from a ``start`` for
    ``steps`` sampled group updates (:func:`qae_lab.toys.seqpolicy_training.simulate`, seed 0), with G = 8, two passes per
    generation and SGD at ``eta`` or Adam at ``adam_eta``.

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
    r"""The curves of one choice of :data:`SHOW`: legend name -> metric of :func:`qae_lab.toys.seqpolicy_training.simulate`.
    Under Adam the exact ledger has no split by sample, only the step's whole first-order change.

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
    r"""Each variant of :func:`qae_lab.toys.seqpolicy_training.update_variance` against GRPO's (``plain``):
    ``[tr Cov(dz) / GRPO's, |E dz| / GRPO's]``.

    >>> variance_ratios({"alpha = 0": {"trace_var": 2.0, "mean_norm": 4.0},
    ...                  "SA-AH, alpha = 0.5": {"trace_var": 1.0, "mean_norm": 3.0}})
    {'alpha = 0': [1.0, 1.0], 'SA-AH, alpha = 0.5': [0.5, 0.75]}
    """
    base = out[plain]
    return {name: [v["trace_var"] / base["trace_var"], v["mean_norm"] / base["mean_norm"]] for name, v in out.items()}


def ledger_shares_figure(
    metrics: Mapping[str, float], kinds: Mapping[str, str] = LEDGER_KINDS, *, title: str
) -> go.Figure:
    r"""One update's ledgers by part (:data:`qae_lab.lab.nb07_sequence_policy.SHARE_PARTS`), each as a share of its summed
    |cells| (:func:`qae_lab.lab.nb07_sequence_policy.ledger_shares`), grouped bars per ledger of ``kinds``.

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
    r"""One of :data:`qae_lab.lab.nb07_sequence_policy.SHOW` over the steps of the live run with these settings (``live``
    makes it once), mean over seeds +- std; ledgers summed over the steps; about 100 points drawn.

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
    r"""One comparison of the committed sweep (``comparisons[group]``: legend name -> the setting's baseline, K,
    Clip-Higher, std[, optimizer]) from one ``start``: its ``entropy`` or ``success`` curves, mean +- std over seeds.

    >>> from qae_lab.analysis.seqpolicy_findings import load_findings
    >>> from qae_lab.lab.nb07_sequence_policy import COMPARISONS
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
    r"""SA-AH's and AH's update at ``alpha`` against GRPO's (alpha = 0) on the same ``n_draws`` batches of the
    ``start`` task: tr Cov(dz) and |E dz| as ratios to GRPO's (:func:`qae_lab.lab.nb07_sequence_policy.variance_ratios` of
    :func:`qae_lab.toys.seqpolicy_training.update_variance`, mean baseline, G = 8).

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


def start_rates_figure(p0, n: int) -> go.Figure:
    r"""The prompts' start success rates, hardest to easiest: each seed's prompts sorted by p_0, then per rank the mean
    over seeds; the ``n`` hardest and the ``n`` easiest in their own colours, named as :func:`regimes_figure` names its
    panels (the groups of :func:`qae_lab.analysis.seqpolicy_runs.start_split`: "hard" and "easy" here mean these
    groups, the figure's one notion of hard).

    Args:
        p0: (S, P) start success rates (:func:`qae_lab.toys.seqpolicy.success_rate` of S task sets). n: prompts per group.

    >>> fig = start_rates_figure([[0.1, 0.9, 0.5, 0.3], [0.2, 0.6, 0.8, 0.4]], 1)
    >>> [(t.name, list(t.x), [round(v, 2) for v in t.y]) for t in fig.data][::2]
    [('hard: the 1 hardest of 4', ['1'], [0.15]), ('easy: the 1 easiest of 4', ['4'], [0.85])]
    """
    p = as_real_tensor(p0, "p0").double()
    start_split(p, n)  # checks p0's shape and n (the groups drawn are its groups)
    s_count, p_count = p.shape
    mean = p.sort(1).values.mean(0)  # (P,): the mean over seeds of each rank's p_0, hardest first
    ranks = [str(i + 1) for i in range(p_count)]
    meta = {"n_group": n, "n_prompts": p_count}
    groups = {
        _group_name("hard", meta): range(0, n),
        f"the {p_count - 2 * n} in between": range(n, p_count - n),
        _group_name("easy", meta): range(p_count - n, p_count),
    }
    fig = bar_figure(
        ranks,
        {},
        title=f"Start success rate p of the {p_count} prompts of each seed, hardest to "
        f"easiest, mean over {s_count} seed{'s' if s_count != 1 else ''}",
        x_title="prompt, by rank (1 = hardest)",
        y_title="p at the start",
    )
    colours = (PALETTE[4], "#7f7f7f", PALETTE[2])  # not the regimes figure's baseline colours
    for (name, idx), colour in zip(groups.items(), colours):
        if len(idx):
            fig.add_trace(
                go.Bar(x=[ranks[i] for i in idx], y=[float(mean[i]) for i in idx], name=name, marker_color=colour)
            )
    fig.update_layout(barmode="overlay", yaxis_range=[0, 1])
    return fig


def _group_name(group: str, meta: Mapping) -> str:
    """A group of prompts by name and size, as both notebook 07 figures call it ("hard: the 4 hardest of 16")."""
    n, n_prompts = meta["n_group"], meta["n_prompts"]
    which = {
        "hard": f"the {n} hardest of {n_prompts}",
        "easy": f"the {n} easiest of {n_prompts}",
        "mixed": f"all {n_prompts} prompts",
    }[group]
    return f"{group}: {which}"


def _group_title(group: str, meta: Mapping, p0: float) -> str:
    """A panel's title: which prompts, how many, their start success rate."""
    return f"{_group_name(group, meta)}<br>(start p {p0:.2f})"


def regimes_figure(regimes: Mapping, optimizer: str = "adam", clip_higher: bool = True) -> go.Figure:
    r"""QAE's Proposition 4.2 by regime in training: three panels side by side, hard | easy | mixed (each seed's
    prompts grouped by their start success rate, :func:`qae_lab.analysis.seqpolicy_runs.start_split`), each the mean entropy
    curve over seeds +- one std under the mean and the quantile baseline, for one ``optimizer`` and Clip-Higher
    setting of the committed runs (:func:`qae_lab.analysis.seqpolicy_findings.load_regimes`). A plain ``go.Figure``.

    >>> from qae_lab.analysis.seqpolicy_findings import load_regimes
    >>> fig = regimes_figure(load_regimes(), "adam", True)
    >>> [t.name for t in fig.data if t.showlegend is not False]
    ['mean baseline (16 seeds)', 'quantile baseline, K = 0.4 (16 seeds)']
    """
    meta, runs = regimes["meta"], regimes["runs"]
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    names = {
        "mean baseline": regime_setting_name(optimizer, "mean", meta["k"], bool(clip_higher)),
        f"quantile baseline, K = {meta['k']:g}": regime_setting_name(
            optimizer, "quantile", meta["k"], bool(clip_higher)
        ),
    }
    groups = {label: runs[name]["groups"] for label, name in names.items()}
    first = next(iter(groups.values()))
    titles = [_group_title(g, meta, sum(first[g]["start_p"]) / len(first[g]["start_p"])) for g in REGIMES]
    fig = make_subplots(rows=1, cols=len(REGIMES), shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.04)
    for i, (label, by_group) in enumerate(groups.items()):
        color = PALETTE[i % len(PALETTE)]
        for col, group in enumerate(REGIMES, start=1):
            c = by_group[group]["entropy_curve"]
            x, mean, std = c["steps"], c["mean"], c["std"]
            add_band(fig, x, mean, std, color, legendgroup=label, row=1, col=col)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=mean,
                    mode="lines",
                    line={"color": color},
                    legendgroup=label,
                    name=f"{label} ({c['n']} seeds)",
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    opt = {
        "adam": f"Adam, learning rate {meta['adam_eta']:g}, {meta['adam_passes']} passes",
        "sgd": f"SGD, learning rate {meta['sgd_eta']:g}, {meta['sgd_passes']} passes",
    }[optimizer]
    n_seeds = first["mixed"]["entropy_curve"]["n"]
    title = (
        f"Entropy H(pi) of the prompts hard / easy at the start, mean vs quantile baseline<br>{opt}, Clip-Higher "
        f"{'on' if clip_higher else 'off'}; mean ± std over {n_seeds} seeds"
    )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="H(pi) (nats)", row=1, col=1)
    # px: the title's lines at the top, the panels' two-line titles under it, "step" and the legend below the panels
    top, bottom, plot_h = 125, 100, 300
    height = top + plot_h + bottom
    fig.update_layout(
        title={"text": wrap_title(title, 100), "font": {"size": 15}, "y": 1 - 12 / height, "yanchor": "top"},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend={"orientation": "h", "yanchor": "top", "y": -60 / plot_h},
    )
    return fig


# Prop. 4.2's two halves as notebook 07 measures them (qae_lab.analysis.evidence): the claim, and its row label
PROP42 = {"hard_prop42": "hard prompts: entropy peak / start", "easy_prop42": "easy prompts: entropy at step 10"}


def seed_differences_figure(judged: Mapping) -> go.Figure:
    r"""What carries notebook 07's verdicts: each seed's quantile - mean for both halves of Prop. 4.2 (:data:`PROP42`),
    under each optimizer of the committed runs, with the 95% interval of :func:`qae_lab.analysis.claims.verdict`
    (:func:`qae_lab.lab.plots.differences_figure`). ``judged``: :func:`qae_lab.analysis.evidence.judge_all`'s.

    >>> from qae_lab.analysis.evidence import judge_all
    >>> fig = seed_differences_figure(judge_all(["sequence policy"]))
    >>> list(fig.layout.yaxis.ticktext)[:2], len(fig.data[0].x)
    (['hard prompts: entropy peak / start, Adam', 'hard prompts: entropy peak / start, SGD'], 16)
    """
    rows = [
        (f"{label}, {variant}", [x - y for x, y in zip(e["values_a"], e["values_b"])], v.word, v.lo, v.hi)
        for key, label in PROP42.items()
        for (claim, setting, variant), (e, v) in judged.items()
        if claim == key and setting == "sequence policy"
    ]
    if not rows:
        raise ValueError("judged holds no sequence-policy evidence of Prop. 4.2 (qae_lab.analysis.evidence.judge_all)")
    return differences_figure(
        rows,
        title="Each seed's quantile minus mean baseline (same tasks, same start), with the 95% interval",
        x_title="quantile - mean",
    )
