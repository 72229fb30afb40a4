"""QAE's Proposition 4.2 on the softmax bandit, one step three ways and in training: data/bandit/prop42.json.

QAE (arXiv 2509.22611, sec. 4, Prop. 4.2) says that on a hard prompt (p <= 1-K) the quantile baseline b_K raises the
entropy no more than any other baseline, the mean included, and on an easy one lowers it no more. The proof takes
Cui et al.'s first-order identity dH ~= -Cov(log pi, dz) with the step model dz = eta pi (r - b). Here, on random
softmax bandits (:func:`qae_lab.toys.bandit.make_bandits`: A responses, half of them correct, p drawn from a hard
and from an easy range), for the mean and the quantile baseline:

* ``identity``: the identity's first-order dH with b = p (mean) and b = b_K (:mod:`qae_lab.toys.bandit`, model (a));
* ``expected_step``: the exact dH after one step of the exact expected policy gradient (model (b)), the same for
  both baselines, since a constant b cancels there;
* ``sampled``: E[dH] of one step of sampled groups of G (model (c)), the group std kept, to second order in eta
  and exact over the groups' success counts (:func:`qae_lab.toys.bandit.sampled_entropy_change`);
* ``scale``: the scale factor E[sampled step] = scale x expected step (:func:`qae_lab.toys.bandit.scale_factor`).

All at a small eta, where first order holds. ``details`` adds, per regime: a Monte-Carlo check of ``sampled`` (the
exact entropy change of ``mc_groups`` sampled steps, mean and standard error; the script stops if any differs from
``sampled`` by more than 4 standard errors), E[dH]'s eta^2 coefficient and its part from the update's spread
(``eta2``, ``eta2_noise``), the first-order dH of the per-logit RMS-normalised expected step (``rms_step``, where
Adam's step tends), and the same without the std (``no_std``). ``training`` trains the notebook's population of
bandits (starting p from 0.05 to 0.95) under each baseline with plain SGD, Adam, and Adam with one second moment per
prompt (it cancels the step's scale, not its spread over the logits), every learning rate of the grid reported (none
was chosen from the results); each replicate is a fresh population of the same starting rates, run side by side (the
bandits do not interact), and its numbers are the prompts that start hard (p <= 0.3): the peak of their mean entropy
over its start; and those that start easy (p >= 0.7): their mean entropy at ``easy_step`` over its start.

    python benchmarks/bandit_prop42.py            # compute and print (about a minute on one core)
    python benchmarks/bandit_prop42.py --write    # ... and write data/bandit/prop42.json
    python benchmarks/bandit_prop42.py --smoke --out /tmp/prop42.json   # tiny settings, a few seconds

Departures from the paper: a bandit, not a language model; G = 8 and K = 0.4 (the paper's default K; it trains with
G = 16); the bandits, step sizes and optimiser settings are this script's choices.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path

import torch

from qae_lab.threads import use_threads
from qae_lab.advantages import BASELINES
from qae_lab.analysis.committed_data import load_prop42
from qae_lab.storage.folder import atomic_write_text
from qae_lab.toys.bandit import (
    entropy_by_start,
    entropy_change_exact,
    entropy_change_first_order,
    expected_pg_step,
    identity_entropy_change,
    make_bandits,
    mc_entropy_change,
    population_quantile,
    rms_normalised_step,
    sampled_entropy_change,
    simulate_training,
)

DEST = Path(__file__).resolve().parents[1] / "data" / "bandit" / "prop42.json"
META = {
    "n_bandits": 16,
    "n_actions": 12,
    "sharpness": 1.5,
    "group_size": 8,
    "k": 0.4,
    "quantile_method": "paper",
    "scale": "group",
    "eta": 0.01,
    "p_range": {"hard": [0.1, 0.2], "easy": [0.8, 0.9]},
    "seed": 0,
    "mc_groups": 100_000,
    "mc_seed": 1,
}
TRAINING = {
    "p0": {"start": 0.05, "end": 0.95, "n": 32},
    "n_replicates": 16,
    "n_actions": 32,
    "sharpness": 1.5,
    "group_size": 8,
    "k": 0.4,
    "scale": "group",
    "steps": 300,
    "hard_max": 0.3,
    "easy_min": 0.7,
    "easy_step": 50,
    "seed": 4,
    "grid": {"sgd": [0.2, 0.5, 1.0], "adam": [0.02, 0.05, 0.1], "adam_scalar": [0.02, 0.05, 0.1]},
}
SMOKE_META = {**META, "n_bandits": 2, "n_actions": 6, "mc_groups": 4000}
SMOKE_TRAINING = {
    **TRAINING,
    "p0": {"start": 0.05, "end": 0.95, "n": 8},
    "n_replicates": 2,
    "n_actions": 8,
    "steps": 12,
    "easy_step": 6,
    "grid": {"sgd": [0.5], "adam": [0.05]},
}
MC_Z = 4.0  # the Monte Carlo must agree with the computed E[dH] within this many standard errors
NAMES = {"mean": "mean", "quantile": "quantile"}  # the JSON's keys, one per baseline of qae_lab.advantages


def bandits(meta: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The bandits of each regime: (p, z, r), p drawn uniformly from the regime's range, in one random stream."""
    gen = torch.Generator().manual_seed(meta["seed"])
    out = {}
    for regime, (lo, hi) in meta["p_range"].items():
        p = lo + (hi - lo) * torch.rand(meta["n_bandits"], generator=gen, dtype=torch.float64)  # (P,)
        z, r = make_bandits(p, meta["n_actions"], meta["sharpness"], gen)  # (P, A)
        out[regime] = (p, z, r)
    return out


def one_bandit(z: torch.Tensor, r: torch.Tensor, meta: dict, scale: str, mc_seed: int) -> dict[str, dict]:
    """Every number of one bandit, per baseline, under ``scale`` ("group" or "none")."""
    eta, g = meta["eta"], meta["group_size"]
    out = {}
    for baseline in BASELINES:
        opts = {"baseline": baseline, "k": meta["k"], "quantile_method": meta["quantile_method"], "scale": scale}
        computed = sampled_entropy_change(z, r, g, eta, **opts)
        gen = torch.Generator().manual_seed(mc_seed)
        mc = mc_entropy_change(z, r, g, meta["mc_groups"], eta=eta, generator=gen, **opts)
        # the identity's b: the mean baseline's expectation p, or the K-quantile of the reward under pi
        b = (torch.softmax(z, -1) * r).sum() if baseline == "mean" else population_quantile(z, r, meta["k"])
        out[NAMES[baseline]] = {
            "identity": float(identity_entropy_change(z, r, b, eta)),
            "expected_step": float(entropy_change_exact(z, expected_pg_step(z, r, eta))),
            "sampled": computed["total"],
            "scale": computed["scale"],
            "sampled_mc": mc["mean"],
            "sampled_mc_stderr": mc["stderr"],
            "eta2": computed["second"] / eta**2,
            "eta2_noise": computed["noise"] / eta**2,
            "rms_step": float(entropy_change_first_order(z, rms_normalised_step(z, r, g, eta, **opts))),
        }
    return out


def by_key(per_bandit: list[dict], keys: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """{key: {baseline: [one number per bandit]}} from a list of :func:`one_bandit` results."""
    return {key: {name: [b[name][key] for b in per_bandit] for name in NAMES.values()} for key in keys}


def one_step(meta: dict) -> dict:
    """The file's ``hard``, ``easy`` and ``details``."""
    out, details = {}, {}
    for regime, (p, z, r) in bandits(meta).items():
        group = [one_bandit(z[i], r[i], meta, "group", meta["mc_seed"] + i) for i in range(z.shape[0])]
        plain = [one_bandit(z[i], r[i], meta, "none", meta["mc_seed"] + i) for i in range(z.shape[0])]
        out[regime] = {"p": p.tolist(), **by_key(group, ("identity", "expected_step", "sampled", "scale"))}
        extra = ("sampled_mc", "sampled_mc_stderr", "eta2", "eta2_noise", "rms_step")
        details[regime] = {**by_key(group, extra), "no_std": by_key(plain, ("sampled", "scale", *extra))}
        for part in (group, plain):
            worst = max(abs(b[n]["sampled_mc"] - b[n]["sampled"]) / b[n]["sampled_mc_stderr"] for b in part for n in b)
            if worst > MC_Z:
                raise RuntimeError(f"{regime}: the Monte Carlo is {worst:.1f} standard errors from the computed E[dH]")
    return {**out, "details": details}


def training(t: dict) -> dict:
    """The file's ``training``: per (optimiser, learning rate, baseline), each replicate's hard peak/start and easy
    H(easy_step)/H(0), and the final mean success."""
    p0 = torch.linspace(t["p0"]["start"], t["p0"]["end"], t["p0"]["n"], dtype=torch.float64)  # (P,)
    runs = []
    for optimizer, lrs in t["grid"].items():
        for lr in lrs:
            for baseline in BASELINES:
                out = simulate_training(
                    p0.repeat(t["n_replicates"]),  # (R * P,): R populations of the same starting rates
                    steps=t["steps"],
                    group_size=t["group_size"],
                    n_actions=t["n_actions"],
                    sharpness=t["sharpness"],
                    baseline=baseline,
                    k=t["k"],
                    scale=t["scale"],
                    eta=lr,
                    optimizer=optimizer,
                    seed=t["seed"],
                )
                h = torch.tensor(out["prompt_entropy"]).view(t["steps"] + 1, t["n_replicates"], -1)  # (T+1, R, P)
                groups = entropy_by_start(h, p0, hard_max=t["hard_max"], easy_min=t["easy_min"])  # (T+1, R) each
                runs.append(
                    {
                        "optimizer": optimizer,
                        "lr": lr,
                        "baseline": NAMES[baseline],
                        # the peak of the hard prompts' mean entropy over its start, per replicate
                        "hard_peak": (groups["hard"].max(0).values / groups["hard"][0]).tolist(),
                        # the easy prompts' mean entropy at easy_step over its start, per replicate
                        "easy_h": (groups["easy"][t["easy_step"]] / groups["easy"][0]).tolist(),
                        "success_end": out["success"][-1],
                    }
                )
    return {"settings": t, "runs": runs}


def _rounded(x):
    """Floats to 10 significant digits, recursively: enough for every comparison the tests make, a readable file."""
    if isinstance(x, float):
        return float(f"{x:.10g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def dump(x, indent: int = 0) -> str:
    """``x`` as indented JSON, each list of numbers on one line (a changed number is a changed line in a diff)."""
    nested = isinstance(x, dict) or (isinstance(x, list) and any(isinstance(v, (dict, list)) for v in x))
    if not nested:
        return json.dumps(_rounded(x))
    pad = " " * (indent + 1)
    items = (
        [f"{pad}{json.dumps(k)}: {dump(v, indent + 1)}" for k, v in x.items()]
        if isinstance(x, dict)
        else [pad + dump(v, indent + 1) for v in x]
    )
    ends = "{}" if isinstance(x, dict) else "[]"
    return ends[0] + "\n" + ",\n".join(items) + "\n" + " " * indent + ends[1]


def summary(data: dict) -> list[str]:
    """A few lines for the terminal: means over the bandits and the replicates."""
    mean = lambda xs: sum(xs) / len(xs)
    lines = []
    for regime in ("hard", "easy"):
        d = data[regime]
        for key in ("identity", "expected_step", "sampled", "scale"):
            m, q = mean(d[key]["mean"]), mean(d[key]["quantile"])
            below = sum(a < b for a, b in zip(d[key]["quantile"], d[key]["mean"]))
            lines.append(f"{regime:>4} {key:>13}: mean {m:+.6f}  quantile {q:+.6f}  (quantile below in {below})")
    for run in data["training"]["runs"]:
        lines.append(
            f"{run['optimizer']:>11} lr {run['lr']:<5} {run['baseline']:>8}: hard peak/start {mean(run['hard_peak']):.3f}"
            f", easy H ratio {mean(run['easy_h']):.3f}, success {run['success_end']:.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {DEST}")
    parser.add_argument("--out", type=Path, default=None, help="write here instead")
    parser.add_argument("--smoke", action="store_true", help="tiny settings, a few seconds (needs --out)")
    args = parser.parse_args(argv)
    if args.smoke and args.out is None:
        parser.error("--smoke computes tiny settings: name where to write them with --out")
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads)
    meta, train = (SMOKE_META, SMOKE_TRAINING) if args.smoke else (META, TRAINING)
    t0 = time.perf_counter()
    data = {
        "meta": {
            **meta,
            "date": datetime.date.today().isoformat(),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "qae_lab": importlib.metadata.version("qae_lab"),
            },
        },
        **one_step(meta),
        "training": training(train),
    }
    data["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    print("\n".join(summary(data)))
    dest = args.out or (DEST if args.write else None)
    if dest is not None:
        atomic_write_text(dest, dump(data) + "\n")
        assert load_prop42(dest)["hard"]["p"] == _rounded(data["hard"]["p"])  # the file reads back
        print(f"wrote {dest} ({data['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
