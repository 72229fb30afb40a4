"""QAETrainer's cost next to plain TRL GRPOTrainer, and sparse vs dense updates, measured side by side.

Two measurements on the embedded model (CPU) with one generation batch shared by all
variants, repeats interleaved so machine noise hits every variant alike:

1. Step time = scoring (rewards + advantages, generation excluded: it is identical TRL code)
   + update (the loss's forward and backward), for plain GRPOTrainer, QAETrainer with QAE,
   and QAETrainer with QAE + SA-AH. Generation, the bulk of a real step, is timed once and
   added to every variant, so the printed ratios are whole-step ratios.
2. Update phase with sparse skipping vs dense, with the gradients checked equal: at the
   generated batch's zero-advantage fraction, and on the same completions with rewards laid
   out for ~80% zero advantages; plus the bare model's floor (kept rows vs all rows). The
   embedded model is so small that its forward and backward cost is mostly fixed overhead,
   not proportional to the rows (32 rows take 70% of the time of 128 on 2 cores); so the
   update phase is also timed on a wider random
   Qwen2 (hidden 512, 6 layers, ~20M parameters, same tokenizer and completions), where
   cost scales with the rows as it does for real models.

    python benchmarks/bench_trainer.py [--prompts 16] [--group 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer

from qae_lab.threads import use_threads
from qae_lab.advantages import advantage_stats, group_advantages
from qae_lab.task.data import synthetic_task, to_grpo_dataset
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ lives at the repository's root
from tools.embedded_models import embedded_config
from qae_lab.task.models import load_policy
from qae_lab.task.rewards import correctness_reward
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer


def _trainer(cls, cfg_cls, model, tok, n, g, **extra):
    common = dict(
        output_dir="/tmp/qae_lab_bench",
        per_device_train_batch_size=n * g,
        num_generations=g,
        max_completion_length=48,
        learning_rate=1e-4,
        report_to=[],
        use_cpu=True,
        bf16=False,
        beta=0.0,
        save_strategy="no",
        disable_tqdm=True,
        loss_type="bnpo",
        logging_steps=1,
        max_steps=1,
    )
    ds = to_grpo_dataset(synthetic_task(n * 4, seed=11))
    trainer = cls(
        model=model,
        reward_funcs=[correctness_reward],
        args=cfg_cls(**common, **extra),
        train_dataset=ds,
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which is not running here
    return trainer


def _update(trainer, model, inputs) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    trainer._compute_loss(model, dict(inputs)).backward()
    dt = time.perf_counter() - t0
    return dt, [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def main() -> None:
    use_threads()  # the lab's thread policy: one CPU thread (qae_lab.threads), both sides alike
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    model, tok = load_policy("embedded", device="cpu")
    model.train()
    plain = _trainer(GRPOTrainer, GRPOConfig, model, tok, a.prompts, a.group)
    qae = _trainer(QAETrainer, QAEConfig, model, tok, a.prompts, a.group, sparse_update=False)
    saah = _trainer(QAETrainer, QAEConfig, model, tok, a.prompts, a.group, sparse_update=False, token_weighting="sa_ah")
    batch = next(iter(plain.get_train_dataloader()))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    gen_out = plain._generate_and_score_completions(batch)  # one real generation, shared by everyone
    t_gen = time.perf_counter() - t0
    completions = plain._logs["completion"]
    rewards = torch.tensor(correctness_reward(list(completions)[-len(batch) :], gold=[x["gold"] for x in batch]))

    # scoring cost without generation: replay the same completions through each trainer's scorer
    def score(trainer):
        t = time.perf_counter()
        if isinstance(trainer, QAETrainer):
            adv = group_advantages(rewards, a.group, k=0.4, eps=1e-4)
            advantage_stats(rewards, adv, a.group, 0.4)
        else:
            r = rewards.view(-1, a.group)
            ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
        return time.perf_counter() - t

    inputs_mean = dict(gen_out)
    inputs_qae = dict(gen_out, advantages=group_advantages(rewards, a.group, k=0.4, eps=1e-4))
    times = {"plain GRPO": [], "QAE": [], "QAE + SA-AH": []}
    for _ in range(a.repeats):
        for name, trainer, inp in (
            ("plain GRPO", plain, inputs_mean),
            ("QAE", qae, inputs_qae),
            ("QAE + SA-AH", saah, inputs_qae),
        ):
            times[name].append(score(trainer) + _update(trainer, model, inp)[0])
    base = statistics.median(times["plain GRPO"]) + t_gen
    print(f"N = {a.prompts} x {a.group} completions, generation {t_gen:.2f} s (shared), median of {a.repeats}")
    print(f"{'variant':<14} {'score+update (s)':>16} {'whole step (s)':>15} {'vs plain':>9}")
    for name, ts in times.items():
        step = statistics.median(ts) + t_gen
        print(f"{name:<14} {statistics.median(ts):16.3f} {step:15.2f} {step / base:8.3f}x")

    # the generated batch's own sparsity, and a batch of the same completions with rewards laid out
    # so that QAE leaves ~80% of responses at exactly zero advantage (the papers' typical figure)
    designed = _rewards_at_80(a.prompts, a.group)
    batches = {
        "generated": inputs_qae,
        "designed": dict(gen_out, advantages=group_advantages(designed, a.group, k=0.4, eps=1e-4)),
    }
    wide = Qwen2ForCausalLM(embedded_config(len(tok), hidden=512, layers=6, heads=8)).train()
    wide_trainer = _trainer(QAETrainer, QAEConfig, wide, tok, a.prompts, a.group)
    lengths = gen_out["completion_mask"].sum(1)
    print(f"\nupdate phase, sparse vs dense (completion lengths {int(lengths.min())}..{int(lengths.max())} tokens):")
    for batch_name, inputs in batches.items():
        zero = float((inputs["advantages"] == 0).float().mean())
        print(f" {batch_name} rewards: {zero:.1%} zero-advantage responses (ideal sparse/dense {1 - zero:.2f}x)")
        for name, trainer, net in (("embedded", qae, model), ("wide random", wide_trainer, wide)):
            dense_t, sparse_t = [], []
            for _ in range(a.repeats):
                trainer.args.sparse_update = False
                t_d, g_d = _update(trainer, net, inputs)
                trainer.args.sparse_update = True
                t_s, g_s = _update(trainer, net, inputs)
                dense_t.append(t_d)
                sparse_t.append(t_s)
            same = all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(g_d, g_s))
            d, sp = statistics.median(dense_t), statistics.median(sparse_t)
            print(f"  {name:<12} dense {d:7.3f} s  sparse {sp:7.3f} s  -> {sp / d:.2f}x; gradients equal: {same}")
    # the floor on this machine: a bare forward+backward of the kept rows' share vs all rows, no trainer
    ids = torch.cat([gen_out["prompt_ids"], gen_out["completion_ids"]], 1)
    n_keep = int((batches["designed"]["advantages"] != 0).sum())
    bare = {n: [] for n in (n_keep, ids.shape[0])}
    for _ in range(a.repeats):
        for n in bare:
            wide.zero_grad(set_to_none=True)
            t = time.perf_counter()
            wide(input_ids=ids[:n]).logits.logsumexp(-1).sum().backward()
            bare[n].append(time.perf_counter() - t)
    floor = statistics.median(bare[n_keep]) / statistics.median(bare[ids.shape[0]])
    print(f"  bare wide model, {n_keep} vs {ids.shape[0]} rows (the machine's floor): {floor:.2f}x")


def _rewards_at_80(prompts: int, group: int) -> torch.Tensor:
    """0/1 rewards whose QAE advantages (K = 0.4) are zero for ~80% of responses: per group, the
    success counts cycle through hard (few successes: only they move), easy (few failures: only
    they move) and all-equal groups (nothing moves)."""
    counts = [
        1,
        1,
        1,
        1,
        group - 1,
        group - 1,
        group - 1,
        group - 1,
        2,
        2,
        group - 2,
        group - 2,
        3,
        group // 2,
        group - 3,
        group,
    ]
    return torch.tensor([float(j < counts[i % len(counts)]) for i in range(prompts) for j in range(group)])


if __name__ == "__main__":
    main()
