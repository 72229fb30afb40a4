"""The committed findings of notebook 09 (the appendix of 07): where the baselines' entropy dynamics differ in an exact sequence policy.

Runs :func:`qae_lab.analysis.seqpolicy_runs.sweep_settings` (mean vs K-quantile baseline, with and without Clip-Higher,
with and without the group std, K = 0.2 ... 0.8, flat and peaked starts, plain SGD; mean and quantile under Adam
too; two passes per batch so that the clip acts) with :func:`qae_lab.toys.seqpolicy_training.simulate`, and SA-AH's effect
on the update's variance with :func:`qae_lab.toys.seqpolicy_training.update_variance`; keeps
:func:`qae_lab.analysis.seqpolicy_runs.summarise_run` of each run (for the headline settings with
:func:`qae_lab.analysis.seqpolicy_runs.tracking`: how the per-token entropy-change estimators of :mod:`qae_lab.ledger` track the
exact change; ``settings``: the fields that differ from :class:`~qae_lab.toys.seqpolicy_training.UpdateSettings`' defaults)
in ``data/seqpolicy/findings.json`` (merged: ``--only`` replaces just its part) and prints its tables
(:func:`qae_lab.analysis.seqpolicy_runs.sweep_rows`, ``cell_rows``, ``variance_rows``).

    python benchmarks/seqpolicy_findings.py --timing          # simulate's speed: 2000 steps x 8 seeds x 16 prompts
    python benchmarks/seqpolicy_findings.py --only flat       # the flat-start runs (~5-7 minutes on one core)
    python benchmarks/seqpolicy_findings.py --only peaked
    python benchmarks/seqpolicy_findings.py --only variance   # SA-AH's update variance (~1 minute)
    python benchmarks/seqpolicy_findings.py --show       # print the tables of the committed file

How the settings were chosen (exploration, not committed as runs): task seeds 100-103, 4 seeds, 600-1000 steps,
eta in {10, 20, 40}; at eta = 40 the flat start's entropy falls from 6.93 to about 1.2 nats within 1000 steps and
PPO's clip acts on about 0.1% of the tokens of the second pass (at eta <= 20 on none, so Clip-Higher could not
matter). Adam's learning rate (same task seeds 100-103, 4 seeds, 1000 steps, mean baseline, lr in {0.01, 0.02,
0.05, 0.1}) was chosen as the one whose entropy fell like SGD's at eta = 40, judged by the entropy alone: at 0.02 the
flat start ends at 1.36 nats (SGD: 1.22) and the peaked one at 0.59 (SGD: 0.57); 0.01 falls slower, 0.05 and 0.1
faster. The reported runs use fresh seeds: tasks 1000-1007 (one task set per seed), sampling seed 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from qae_lab.threads import use_threads
from qae_lab.storage.folder import atomic_write_text
from qae_lab.toys.seqpolicy import STARTS, task_batch
from qae_lab.analysis.seqpolicy_runs import headline, summarise_run, sweep_settings
from qae_lab.analysis.seqpolicy_runs import cell_rows, sweep_rows, variance_rows
from qae_lab.analysis.tables import markdown_table
from qae_lab.toys.seqpolicy_training import UpdateSettings, simulate, update_variance

DEST = Path(__file__).resolve().parents[1] / "data" / "seqpolicy" / "findings.json"
DEFAULTS = UpdateSettings()  # a run's "settings" keep the fields that differ from these
META = {
    "vocab": 4,
    "length": 5,
    "n_prompts": 16,
    "group_size": 8,
    "eta": 40.0,
    "adam_eta": 0.02,
    "steps": 1000,
    "n_seeds": 8,
    "task_seed": 1000,
    "sample_seed": 1,
    "every": 100,
    "early_step": 100,
    "sharpness": 3.0,
    "variance": {"alphas": [0.5], "n_draws": 1000, "baseline": "mean"},
}


def timing() -> None:
    """simulate's wall time for 2000 steps x 8 seeds x 16 prompts, V = 4, L = 5, G = 8, on one thread."""
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads)
    tasks = task_batch(8, 16, 4, 5, start="peaked", seed=META["task_seed"])
    t0 = time.perf_counter()
    simulate(tasks.logits, tasks.rewards, UpdateSettings(group_size=8, eta=META["eta"]), steps=2000, seed=1)
    sec = time.perf_counter() - t0
    print(
        f"simulate: 2000 steps x 8 seeds x 16 prompts (V=4, L=5, G=8, one pass, all ledgers), one thread: "
        f"{sec:.1f} s ({sec / 2000 * 1000:.1f} ms per step)",
        flush=True,
    )


def runs(start: str) -> dict:
    """The sweep's runs of one start, summarised."""
    m = META
    tasks = task_batch(
        m["n_seeds"],
        m["n_prompts"],
        m["vocab"],
        m["length"],
        start=start,
        seed=m["task_seed"],
        sharpness=m["sharpness"],
    )
    out = {}
    for name, (s_start, settings) in sweep_settings(
        eta=m["eta"], adam_eta=m["adam_eta"], group_size=m["group_size"]
    ).items():
        if s_start != start:
            continue
        t0 = time.perf_counter()
        run = simulate(tasks.logits, tasks.rewards, settings, steps=m["steps"], seed=m["sample_seed"])
        changed = {k: v for k, v in dataclasses.asdict(settings).items() if v != getattr(DEFAULTS, k)}
        out[name] = {
            "settings": changed,
            "start": start,
            **summarise_run(run, every=m["every"], early=m["early_step"], estimators=headline(settings)),
        }
        print(
            f"{name}: {time.perf_counter() - t0:.0f} s, final entropy "
            f"{[round(x, 3) for x in out[name]['final_entropy']]}",
            flush=True,
        )
    return out


def variance() -> dict:
    """SA-AH's and AH's update against GRPO's at each seed's initial policy, per start."""
    m, v = META, META["variance"]
    settings = UpdateSettings(group_size=m["group_size"], baseline=v["baseline"], eta=m["eta"])
    per_start = {}
    for start in STARTS:
        tasks = task_batch(
            m["n_seeds"],
            m["n_prompts"],
            m["vocab"],
            m["length"],
            start=start,
            seed=m["task_seed"],
            sharpness=m["sharpness"],
        )
        per_seed = [
            update_variance(z, r, settings, alphas=v["alphas"], n_draws=v["n_draws"], chunk=200, seed=i)
            for i, (z, r) in enumerate(zip(tasks.logits, tasks.rewards))
        ]
        per_start[start] = {
            name: {key: [float(f"{d[name][key]:.4g}") for d in per_seed] for key in per_seed[0][name]}
            for name in per_seed[0]
        }
        print(f"variance, {start}: done", flush=True)
    return {**v, "per_start": per_start}


def dump(findings: dict) -> str:
    """The findings as JSON with one line per run (small, and a changed run is a changed line in a diff)."""
    line = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    runs = ",\n".join(f"  {line(name)}: {line(run)}" for name, run in sorted(findings["runs"].items()))
    return (
        f'{{\n "meta": {line(findings["meta"])},\n "runs": {{\n{runs}\n }},\n'
        f' "variance": {line(findings["variance"])}\n}}\n'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only", choices=[*STARTS, "variance"], action="append", help="run only this part (repeatable); default: all"
    )
    parser.add_argument("--timing", action="store_true", help="only measure simulate's speed")
    parser.add_argument("--show", action="store_true", help="only print the committed findings' tables")
    args = parser.parse_args()
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads)
    if args.timing:
        return timing()
    if not args.show:
        findings = json.loads(DEST.read_text()) if DEST.is_file() else {"meta": META, "runs": {}, "variance": {}}
        if findings["meta"] != META:  # other settings: the old runs no longer belong with the new ones
            findings = {"meta": META, "runs": {}, "variance": {}}
        for part in args.only or [*STARTS, "variance"]:
            if part == "variance":
                findings["variance"] = variance()
            else:
                findings["runs"].update(runs(part))
        DEST.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(DEST, dump(findings))
    findings = json.loads(DEST.read_text())
    complete = len(findings["runs"]) == len(sweep_settings(eta=META["eta"], adam_eta=META["adam_eta"]))
    if complete and findings["variance"]:
        for rows in (sweep_rows(findings, every=True), cell_rows(findings), variance_rows(findings)):
            print("\n" + markdown_table(rows))


if __name__ == "__main__":
    main()
