"""Side-by-side speed of qae_lab's vectorised estimators vs plain per-group Python loops.

Both run in the same process, interleaved, on the same inputs, so the printed ratios hold
on a noisy machine even when absolute times do not. Usage:

    python benchmarks/bench_estimators.py [--prompts 64] [--group 16] [--repeats 20]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from qae_lab.threads import use_threads
from qae_lab.advantages import group_advantages
from qae_lab.horizon import selective_horizon_weights


def loop_qae(rewards: list[float], g: int, k: float) -> list[float]:
    """QAE advantages one group at a time, as a straightforward implementation would."""
    out = []
    for s in range(0, len(rewards), g):
        grp = rewards[s : s + g]
        b = sorted(grp)[math.ceil(k * g) - 1]
        sd = statistics.stdev(grp)
        out += [(r - b) / (sd + 1e-6) for r in grp]
    return out


def loop_sa_ah(h: list[list[float]], adv: list[float], alpha: float) -> list[list[float]]:
    out = []
    for row, a in zip(h, adv):
        cum, w = 0.0, []
        for x in row:
            cum += x
            w.append(math.exp(-alpha * cum) if a < 0 else 1.0)
        out.append(w)
    return out


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads), both sides alike
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    torch.manual_seed(0)
    n = a.prompts * a.group
    r = (torch.rand(n) < 0.4).float()
    r_list = r.tolist()
    h = torch.rand(n, a.tokens) * 0.05
    adv = group_advantages(r, a.group)
    h_list, adv_list = h.tolist(), adv.tolist()
    mask = torch.ones(n, a.tokens)

    rows = [
        ("QAE advantages", lambda: group_advantages(r, a.group, k=0.4), lambda: loop_qae(r_list, a.group, 0.4)),
        (
            "horizon weights",
            lambda: selective_horizon_weights(h, mask, adv, 0.5),
            lambda: loop_sa_ah(h_list, adv_list, 0.5),
        ),
    ]
    print(
        f"N = {a.prompts} x {a.group} responses, T = {a.tokens}, best of {a.repeats}, torch threads = "
        f"{torch.get_num_threads()}"
    )
    print(f"{'what':<16} {'qae_lab (ms)':>13} {'loop (ms)':>11} {'speed-up':>9}")
    for name, vec, loop in rows:
        tv, tl = [], []
        for _ in range(a.repeats):  # interleaved, so drift hits both alike
            tv.append(best_of(vec, 1))
            tl.append(best_of(loop, 1))
        print(f"{name:<16} {min(tv) * 1e3:13.3f} {min(tl) * 1e3:11.3f} {min(tl) / min(tv):8.1f}x")


if __name__ == "__main__":
    main()
