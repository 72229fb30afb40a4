"""What TRL's `entropy` costs under QAETrainer's sparse update, against what the sparse update saves, side by side.

The sparse update leaves the rows with A_i = 0 out of the forward and backward; TRL's `entropy` covers every
completion token, so QAETrainer runs one forward without a graph over the rows left out, for their entropies only.
Three update variants on one generated batch (the embedded model, CPU), repeats interleaved so machine noise hits
each alike, with the rewards laid out for ~80% zero advantages (the papers' typical figure; benchmarks/bench_trainer.py):

1. dense: every row through forward and backward;
2. sparse without the entropy pass (the pass replaced by zeros: what the update cost before `entropy` was kept);
3. sparse with it (what QAETrainer does).

Each is timed as the update phase (loss forward + backward) and as a whole step (generation, timed once and shared,
added). The embedded model's cost is mostly fixed overhead, so the update phase is also timed on a wider random Qwen2
(hidden 512, 6 layers), where cost scales with the rows as it does for real models.

    python benchmarks/bench_sparse_entropy.py [--prompts 16] [--group 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from transformers import Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ and benchmarks/ live at the repository's root
from benchmarks.bench_trainer import _rewards_at_80, _trainer, _update
from qae_lab.threads import use_threads
from qae_lab.advantages import group_advantages
from qae_lab.task.models import load_policy
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer
from tools.embedded_models import embedded_config


def _variants(trainer, net, inputs, repeats: int) -> dict[str, float]:
    """Median update time of each variant, interleaved; checks that the three give one gradient."""
    times: dict[str, list[float]] = {"dense": [], "sparse, no entropy pass": [], "sparse + entropy pass": []}
    no_pass = mock.patch.object(trainer, "_left_out_entropy_sums", lambda *a, **k: torch.zeros(8))
    for _ in range(repeats):
        trainer.args.sparse_update = False
        t, g_dense = _update(trainer, net, inputs)
        times["dense"].append(t)
        trainer.args.sparse_update = True
        with no_pass:
            t, _ = _update(trainer, net, inputs)
        times["sparse, no entropy pass"].append(t)
        t, g_sparse = _update(trainer, net, inputs)
        times["sparse + entropy pass"].append(t)
    same = all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(g_dense, g_sparse))
    assert same, "sparse and dense gradients differ"
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads), both sides alike
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    model, tok = load_policy("embedded", device="cpu")
    model.train()
    qae = _trainer(QAETrainer, QAEConfig, model, tok, a.prompts, a.group)
    batch = next(iter(qae.get_train_dataloader()))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    gen_out = qae._generate_and_score_completions(batch)  # one real generation, shared by every variant
    t_gen = time.perf_counter() - t0
    rewards = _rewards_at_80(a.prompts, a.group)
    inputs = dict(gen_out, advantages=group_advantages(rewards, a.group, k=0.4, eps=1e-4))
    zero = float((inputs["advantages"] == 0).float().mean())
    lengths = gen_out["completion_mask"].sum(1)
    print(
        f"N = {a.prompts} x {a.group} completions ({int(lengths.min())}..{int(lengths.max())} tokens), "
        f"{zero:.1%} zero-advantage; generation {t_gen:.2f} s (shared); median of {a.repeats}; gradients equal"
    )
    wide = Qwen2ForCausalLM(embedded_config(len(tok), hidden=512, layers=6, heads=8)).train()
    wide_trainer = _trainer(QAETrainer, QAEConfig, wide, tok, a.prompts, a.group)
    for name, trainer, net in (("embedded", qae, model), ("wide random", wide_trainer, wide)):
        med = _variants(trainer, net, inputs, a.repeats)
        dense, bare, kept = med["dense"], med["sparse, no entropy pass"], med["sparse + entropy pass"]
        print(f"\n{name} model: update phase (s), and vs dense")
        for variant, t in med.items():
            step = (
                f"  whole step {t + t_gen:6.2f} s ({(t + t_gen) / (dense + t_gen):.3f}x)" if name == "embedded" else ""
            )
            print(f"  {variant:<24} {t:7.3f} s  {t / dense:.2f}x{step}")
        saved = dense - bare
        print(
            f"  the entropy pass costs {kept - bare:.3f} s = {(kept - bare) / saved:.0%} of the {saved:.3f} s "
            "the sparse update saves"
            if saved > 0
            else "  the sparse update saves nothing here"
        )


if __name__ == "__main__":
    main()
