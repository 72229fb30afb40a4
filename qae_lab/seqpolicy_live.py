r"""Live numbers on the exact sequence policy. Notebook 07: one prompt's logit table, prefix by prefix, and its
entropy by the chain rule (:func:`prefix_table`). Notebook 09, its appendix: the tasks in sentences, one update's
ledgers, the sampled ledger against the expected one, training runs under the controls, the comparisons of the
committed sweep and SA-AH's update variance against GRPO's.

The maths is :mod:`qae_lab.seqpolicy` and :mod:`qae_lab.seqpolicy_update`; this module runs it for the
notebook and says what it gives. Nothing here imports plotly or ipywidgets (the figures are
:mod:`qae_lab.seqpolicy_figures`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from qae_lab._checks import check_int
from qae_lab.seqpolicy import (
    prefix_reach,
    sequence_entropy,
    sequence_logprobs,
    space_of,
    state_entropies,
    success_rate,
    task_batch,
)
from qae_lab.seqpolicy_lab import CELLS, K_VALUES
from qae_lab.seqpolicy_update import UpdateSettings, group_update, simulate

__all__ = ["LEDGER_KINDS", "SHARE_PARTS", "CELL_NAMES", "SHOW", "COMPARISONS", "prefix_table", "task_lines",
           "one_update", "ledger_shares", "one_update_lines", "expected_vs_sampled_lines", "LiveRuns", "ledger_keys",
           "variance_ratios"]

# ledger name -> the metric prefix of group_update: the exact first-order ledger and three per-token estimates
LEDGER_KINDS = {"exact": "sampled", "npg (trainer)": "estimator_npg", "pg": "estimator_pg",
                "reinforce": "estimator_reinforce"}
SHARE_PARTS = ["dh", *CELLS]  # the whole change, then the four cells
# the ledger's cells in the live view's legend
CELL_NAMES = {"hard, A > 0": "dh_hard_pos", "hard, A < 0": "dh_hard_neg", "easy, A > 0": "dh_easy_pos",
              "easy, A < 0": "dh_easy_neg", "all": "dh"}
# what the live view shows -> its axis
SHOW = {"cumulative ledger, exact": "first-order dH summed over steps (nats)",
        "cumulative ledger, trainer's npg": "npg ledger summed over steps (eta / N_tok units)",
        "entropy": "H(pi) (nats)", "success": "success rate"}
# the committed sweep's comparisons: legend name -> (baseline, K, Clip-Higher, std[, optimizer])
COMPARISONS = {
    "mean vs quantile": {"mean": ("mean", 0.4, True, True), "quantile": ("quantile", 0.4, True, True)},
    "K sweep": {f"K = {k:g}": ("quantile", k, True, True) for k in K_VALUES},
    "Clip-Higher": {"mean, Clip-Higher": ("mean", 0.4, True, True), "mean, clip 0.2": ("mean", 0.4, False, True),
                    "quantile, Clip-Higher": ("quantile", 0.4, True, True),
                    "quantile, clip 0.2": ("quantile", 0.4, False, True)},
    "std scaling": {"mean, std": ("mean", 0.4, True, True), "mean, no std": ("mean", 0.4, True, False),
                    "quantile, std": ("quantile", 0.4, True, True), "quantile, no std": ("quantile", 0.4, True, False)},
    "optimizer": {"mean, SGD": ("mean", 0.4, True, True), "mean, Adam": ("mean", 0.4, True, True, "adam"),
                  "quantile, SGD": ("quantile", 0.4, True, True),
                  "quantile, Adam": ("quantile", 0.4, True, True, "adam")},
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
    reach rho(s) and its entropy H(pi(.|s)); then H(pi) by the chain rule (eq. S2 of :mod:`qae_lab.seqpolicy`,
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
    lines.append(f"chain rule: sum_s rho(s) H(pi(.|s)) = {chain:.4f} nats; enumerating the {vocab ** length} "
                 f"sequences: H(pi) = {enumerated:.4f} nats")
    return lines


def task_lines(tasks: Mapping, vocab: int, length: int, hard_below: float = 0.6) -> list[str]:
    r"""Per start, one line: the mean sequence entropy against its bound L log V, how closely the entropy chain rule
    (the states' entropies weighted by how often they are reached) agrees with it, how many prompts are hard
    (p <= ``hard_below``, QAE's 1 - K at K = 0.4) and the range of success rates.

    >>> from qae_lab.seqpolicy import make_tasks
    >>> task_lines({"flat": make_tasks(4, 2, 3, start="flat", seed=0)}, 2, 3)[0][:61]
    '  flat: H(pi) 2.079 nats on average (at most L log V = 2.079)'
    """
    lines = []
    for start, t in tasks.items():
        h = sequence_entropy(t.logits)  # (P,)
        chain = (prefix_reach(t.logits) * state_entropies(t.logits)).sum(-1)  # (P,)
        p = success_rate(t.logits, t.rewards)  # (P,)
        lines.append(f"{start:>6}: H(pi) {h.mean():.3f} nats on average (at most L log V = "
                     f"{length * math.log(vocab):.3f}); the chain rule agrees to {(h - chain).abs().max():.0e}; "
                     f"hard prompts {int((p <= hard_below).sum())} of {p.shape[0]}, success rates "
                     f"{p.min():.2f}..{p.max():.2f}")
    return lines


def one_update(task, settings: UpdateSettings, seed: int = 0) -> dict[str, float]:
    r"""Every metric of one sampled group update of ``task``'s prompts (:func:`qae_lab.seqpolicy_update.group_update`,
    the groups drawn from ``seed``), as floats.

    >>> from qae_lab.seqpolicy import make_tasks
    >>> m = one_update(make_tasks(4, 2, 3, start="peaked"), UpdateSettings(group_size=4))
    >>> abs(m["sampled/dh"] - m["dh_first_order"]) < 1e-12
    True
    """
    _, metrics, _ = group_update(task.logits[None], task.rewards[None], settings,
                                 generator=torch.Generator().manual_seed(check_int(seed, "seed", 0)))
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


def one_update_lines(metrics: Mapping[str, float], kinds: Mapping[str, str] = LEDGER_KINDS) -> list[str]:
    r"""One update's exact entropy change against its first-order value, that split into the states' own entropies and
    their visitation, and the per-token estimates (every kind of ``kinds`` but the first, the exact one).

    >>> m = {"dh_exact": -0.01, "dh_first_order": -0.011, "sampled/dh_state": -0.008, "sampled/dh_visit": -0.003,
    ...      "estimator_npg/dh": -0.5}
    >>> print(one_update_lines(m, {"exact": "sampled", "npg": "estimator_npg"})[1])
    per-token estimates, summed (eta / N_tok units): npg -0.50000
    """
    return [f"exact change H(after) - H(before) {metrics['dh_exact']:+.5f}, first order "
            f"{metrics['dh_first_order']:+.5f} = the states' own entropies {metrics['sampled/dh_state']:+.5f} + "
            f"their visitation {metrics['sampled/dh_visit']:+.5f} (nats, mean over prompts)",
            "per-token estimates, summed (eta / N_tok units): "
            + ", ".join(f"{label} {metrics[kind + '/dh']:+.5f}" for label, kind in list(kinds.items())[1:])]


def expected_vs_sampled_lines(task, settings: UpdateSettings, n_groups: int, *, prompts: int = 4, seed: int = 1,
                              parts: Sequence[str] = ("dh", "dh_hard_neg", "dh_easy_neg")) -> list[str]:
    r"""The expected ledger of one update against the average of ``n_groups`` sampled updates (each a fresh batch of
    groups for the first ``prompts`` prompts), with two standard errors, for each of ``parts``.

    >>> from qae_lab.seqpolicy import make_tasks
    >>> lines = expected_vs_sampled_lines(make_tasks(4, 2, 3, start="peaked"), UpdateSettings(group_size=4), 50)
    >>> lines[0].split(":")[0], len(lines)
    ('          dh', 3)
    """
    n_groups = check_int(n_groups, "n_groups", 2)
    logits, rewards = task.logits[:prompts], task.rewards[:prompts]
    many = group_update(logits.expand(n_groups, -1, -1, -1), rewards.expand(n_groups, -1, -1), settings,
                        generator=torch.Generator().manual_seed(check_int(seed, "seed", 0)))[1]
    lines = []
    for part in parts:
        mc, exact = many[f"sampled/{part}"], float(many[f"expected/{part}"][0])
        lines.append(f"{part:>12}: expected {exact:+.6f}, average of {n_groups} sampled updates "
                     f"{float(mc.mean()):+.6f} ± {2 * float(mc.std()) / n_groups ** 0.5:.6f} (2 s.e.)")
    return lines


class LiveRuns:
    r"""Training runs of the live view, one per setting of the controls, each made once and kept.

    Every run trains ``seeds`` task batches of ``prompts`` prompts (``vocab``, ``length``) from a ``start`` for
    ``steps`` sampled group updates (:func:`qae_lab.seqpolicy_update.simulate`, seed 0), with G = 8, two passes per
    generation and SGD at ``eta`` or Adam at ``adam_eta``.

    >>> live = LiveRuns(seeds=1, prompts=2, vocab=2, length=2, steps=3, eta=1.0, adam_eta=0.01)
    >>> out = live("quantile", 0.4, True, True, "flat", 0.0, "sgd")
    >>> out["entropy"].shape, live("quantile", 0.4, True, True, "flat", 0.0, "sgd") is out
    (torch.Size([1, 4]), True)
    """

    def __init__(self, *, seeds: int, prompts: int, vocab: int, length: int, steps: int, eta: float,
                 adam_eta: float):
        self.seeds, self.prompts, self.vocab, self.length = seeds, prompts, vocab, length
        self.steps, self.eta, self.adam_eta = steps, eta, adam_eta
        self._runs: dict[tuple, dict[str, torch.Tensor]] = {}

    def settings(self, baseline: str, k: float, clip_higher: bool, std: bool, alpha: float,
                 optimizer: str) -> UpdateSettings:
        r"""The :class:`~qae_lab.seqpolicy_update.UpdateSettings` of one position of the controls.

        >>> LiveRuns(seeds=1, prompts=2, vocab=2, length=2, steps=3, eta=40.0, adam_eta=0.02).settings(
        ...     "mean", 0.4, False, False, 0.5, "adam").eta
        0.02
        """
        return UpdateSettings(group_size=8, baseline=baseline, k=k, scale="group" if std else "none",
                              eta=self.eta if optimizer == "sgd" else self.adam_eta, optimizer=optimizer,
                              num_iterations=2, epsilon_high=0.28 if clip_higher else 0.2, alpha=alpha)

    def __call__(self, baseline: str, k: float, clip_higher: bool, std: bool, start: str, alpha: float,
                 optimizer: str) -> dict[str, torch.Tensor]:
        key = (baseline, k, clip_higher, std, start, alpha, optimizer)
        if key not in self._runs:
            batch = task_batch(self.seeds, self.prompts, self.vocab, self.length, start=start, seed=0)
            self._runs[key] = simulate(batch.logits, batch.rewards,
                                       self.settings(baseline, k, clip_higher, std, alpha, optimizer),
                                       steps=self.steps, seed=0)
        return self._runs[key]


def ledger_keys(show: str, optimizer: str) -> dict[str, str]:
    r"""The curves of one choice of :data:`SHOW`: legend name -> metric of :func:`qae_lab.seqpolicy_update.simulate`.
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
    r"""Each variant of :func:`qae_lab.seqpolicy_update.update_variance` against GRPO's (``plain``):
    ``[tr Cov(dz) / GRPO's, |E dz| / GRPO's]``.

    >>> variance_ratios({"alpha = 0": {"trace_var": 2.0, "mean_norm": 4.0},
    ...                  "SA-AH, alpha = 0.5": {"trace_var": 1.0, "mean_norm": 3.0}})
    {'alpha = 0': [1.0, 1.0], 'SA-AH, alpha = 0.5': [0.5, 0.75]}
    """
    base = out[plain]
    return {name: [v["trace_var"] / base["trace_var"], v["mean_norm"] / base["mean_norm"]] for name, v in out.items()}
