"""One GPU check of the Qwen2.5 presets: step time, decode speed, memory, update ratios, gradients.

    python benchmarks/gpu_check.py                 # one GPU, at most ~5 minutes, no hub needed
    python benchmarks/gpu_check.py --smoke         # the same code on the CPU with tiny dimensions (the test suite)

Where Qwen2.5-*-Instruct weights are not in the local Hugging Face cache, the architecture is
built from its config with random weights (saved to a temporary folder with the embedded
model's tokenizer beside it) and the script says so: time and memory do not need trained
weights. Random weights rarely sample EOS, so completions run to their length limit: the step
times are upper bounds. GSM8K prompts come from --gsm8k DIR (or $QAE_LAB_GSM8K_DIR, or
../shared/data/gsm8k); without them the synthetic task's shorter prompts are used, and the
script says so.

It prints, in order of importance (later sections are skipped when --budget-s runs out):

1. step time and peak memory of the 1.5B preset as the CLI runs it (bf16 where supported);
2. decode milliseconds per step at 64 sequences: bare ``generate`` (no LoRA) vs in-loop
   (``QAETrainer``'s generation seam) with TRL's default path, with ``fast_generation``, and
   with ``fast_generation`` + static cache + compiled decoding, and the aten ops per decode step;
3. update-phase ratios on one generated batch: QAE / TRL, QAE+SA-AH / TRL, sparse / dense at
   ~80% zero advantages, with the bare model's floor (kept rows vs all rows);
4. a gradient check with LoRA dropout 0: sparse vs dense must agree as closely as dense vs dense;
5. the live preset's first and later step times (notebook 04 waits for the first), peak memory
   (and step time) of the 1.5B preset in float32 and float16, then the 0.5B and 3B presets' step
   time and peak, and the 0.5B T4 preset's (float16) with its estimated peak (qae_lab.runs.costs) and step time at
   the card's datasheet peaks (qae_lab.runs.costs) beside it: their ratio is the fraction of the peaks reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from trl import GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import _rewards_at_80  # noqa: E402  (the same ~80%-zero reward layout as the CPU benchmark)
from host_costs import OpCount  # noqa: E402  (counts aten ops, as the host-cost benchmark does)

from qae_lab.runs import presets  # noqa: E402
from qae_lab.runs import pipeline as pipeline  # noqa: E402
from qae_lab.advantages import group_advantages  # noqa: E402
from qae_lab.task.models import QWEN_MODELS, embedded_dir, load_policy  # noqa: E402
from qae_lab.runs.costs import gpu_named, run_time  # noqa: E402
from qae_lab.runs.costs import run_memory  # noqa: E402

# Qwen2.5-*-Instruct architectures (their config.json), for random weights when none are cached
ARCH = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16),
}
# 28 layers as Qwen2.5-1.5B: ops per decode step depend on the layer count and the LoRA targets, not the width
SMOKE_ARCH = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=28, num_attention_heads=4)
CUDA = torch.cuda.is_available()


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# ---------------------------------------------------------------- model and data


def cached_weights(repo: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(
        isinstance(try_to_load_from_cache(repo, f), str) for f in ("model.safetensors", "model.safetensors.index.json")
    )


def model_source(name: str, smoke: bool, workdir: Path) -> tuple[str, str]:
    """(folder or Hub id, how it was obtained) for a preset's model."""
    if not smoke and cached_weights(QWEN_MODELS[name]):
        return QWEN_MODELS[name], "trained weights from the local cache"
    folder = workdir / f"{name}{'-smoke' if smoke else ''}-random"
    if not (folder / "config.json").exists():
        arch = SMOKE_ARCH if smoke else ARCH[name]
        cfg = Qwen2Config(
            vocab_size=1024 if smoke else 151936,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            max_position_embeddings=32768,
            rope_theta=1e6,
            rms_norm_eps=1e-6,
            **arch,
        )
        with torch.device("cuda" if CUDA else "cpu"):
            torch.manual_seed(0)
            model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
        model.save_pretrained(folder)
        del model
        for f in embedded_dir().iterdir():  # the embedded tokenizer beside it; unknown ids decode to nothing
            if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
                shutil.copy(f, folder / f.name)
    what = "tiny random Qwen2 (smoke)" if smoke else f"random weights: {QWEN_MODELS[name]} not in the local cache"
    return str(folder), what


def gsm8k_dir(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("QAE_LAB_GSM8K_DIR"), Path(__file__).resolve().parents[2] / "shared/data/gsm8k"):
        if cand and (Path(cand) / "train.jsonl").exists() and (Path(cand) / "test.jsonl").exists():
            return str(cand)
    return None


def build_trainer(
    name: str, source: str, data: str | None, out: Path, smoke: bool, sets=(), method="qae", preset: str | None = None
):
    """The preset's QAETrainer as `python -m qae_lab train --preset <name>-gsm8k` builds it."""
    preset = preset or f"{name}-gsm8k"
    overrides = [
        f"model={source}",
        "evaluate=false",
        "save_model=false",
        "save_strategy=no",
        "report_to=[]",
        "disable_tqdm=true",
    ]
    overrides += [f"gsm8k_path={data}"] if data else ["task=synthetic", "n_eval=8"]
    if smoke:
        overrides += [
            "use_cpu=true",
            "bf16=false",
            "per_device_train_batch_size=8",
            "gradient_accumulation_steps=1",
            "max_completion_length=8",
            "n_train=16",
            "n_eval=8",
        ]
    run, cfg = presets.build(preset, [*overrides, *sets], method=method, output_dir=str(out))
    trainer, tok, _ = pipeline.make_trainer(run, cfg, preset=preset)
    return trainer, tok, run


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._t = [], 0.0

    def on_step_begin(self, args, state, control, **kw):
        sync()
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        sync()
        self.times.append(time.perf_counter() - self._t)


def reset_peak() -> None:
    if CUDA:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak() -> str:
    if not CUDA:
        return "n/a (CPU)"
    return f"{gib(torch.cuda.max_memory_allocated())} allocated, {gib(torch.cuda.max_memory_reserved())} reserved"


def step_section(
    label: str, name: str, source: str, data, out: Path, smoke: bool, steps: int, sets=(), preset: str | None = None
) -> dict:
    """Train `steps` steps of a preset; per-step wall times and the peak memory."""
    reset_peak()
    trainer, tok, run = build_trainer(name, source, data, out, smoke, [f"max_steps={steps}", *sets], preset=preset)
    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.train()
    t = timer.times
    steady = statistics.median(t[1:]) if len(t) > 1 else t[0]
    cfg = trainer.args
    row = {
        "what": label,
        "first_step_s": round(t[0], 2),
        "steady_step_s": round(steady, 2),
        "peak": peak(),
        "completions": f"{cfg.generation_batch_size} x {cfg.max_completion_length} tokens",
    }
    print(
        f"  {label:<34} first step {t[0]:7.2f} s, then {steady:7.2f} s/step ({row['completions']}); peak {row['peak']}",
        flush=True,
    )
    # the run as measured, named by its architecture (its model is the folder the weights were loaded from)
    return {"row": row, "trainer": trainer, "tok": tok, "run": dataclasses.replace(run, model=name)}


def estimates(row: dict, run, cfg, device_name: str, bf16: bool) -> list[str]:
    """Adds the preset's estimated peak memory and, on a GPU of qae_lab.runs.costs.GPUS, its estimated step time at
    the datasheet peaks to a measured ``row``; the measured/estimated ratio is the fraction of the peaks reached
    (compilation aside: the steady steps). Returns the lines to print."""
    est = run_memory(run, cfg, bf16_gpu=bf16)
    row["estimated_peak"] = gib(est["peak"])
    lines = [f"estimated peak {gib(est['peak'])} (qae_lab.runs.costs.run_memory)"]
    card = gpu_named(device_name)
    if card is None:
        return lines + [f"no datasheet figures for {device_name!r} in qae_lab.runs.costs.GPUS: no time estimate"]
    floor = run_time(run, cfg, card)["step"]  # compiled decoding: the card's terms only
    row["estimated_step_s"], row["peak_fraction"] = round(floor, 3), round(floor / row["steady_step_s"], 3)
    return lines + [
        f"estimated step {floor:.2f} s at the {card.name}'s datasheet peaks (qae_lab.runs.costs.run_time): "
        f"the measured steady step reaches {floor / row['steady_step_s']:.0%} of them"
    ]


# ---------------------------------------------------------------- decode speed


def decode_ms(fn, new_tokens: int, repeats: int) -> float:
    fn()  # warm-up (and compilation)
    ts = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) / new_tokens * 1e3


def decode_section(trainer, tok, source: str, n_seq: int, new_tokens: int, repeats: int) -> list[dict]:
    rows = trainer.train_dataset.select(range(min(n_seq, len(trainer.train_dataset))))
    prompts = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False) for r in rows
    ]
    prompts = (prompts * n_seq)[:n_seq]
    gen_cfg = trainer.generation_config
    saved = {
        k: getattr(gen_cfg, k) for k in ("max_new_tokens", "min_new_tokens", "cache_implementation", "disable_compile")
    }
    saved_fast = trainer.args.fast_generation
    policy = trainer.accelerator.unwrap_model(trainer.model)
    bare, _ = load_policy(source, device=str(policy.device))  # the same weights, no LoRA, no trainer
    bare.eval()
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts], device=bare.device)
    mask = (
        torch.arange(width, device=bare.device)[None]
        >= torch.tensor([width - len(p) for p in prompts], device=bare.device)[:, None]
    ).long()
    out = []

    def variant(label, fn, count=True):
        ms = decode_ms(fn, new_tokens, repeats)
        ops = None
        if count:
            gen_cfg.max_new_tokens = gen_cfg.min_new_tokens = 4
            counter = OpCount()
            with counter:
                fn()
            # ops of 4 new tokens minus ops of 2, per token: the decode steps alone, no prefill
            gen_cfg.max_new_tokens = gen_cfg.min_new_tokens = 2
            counter2 = OpCount()
            with counter2:
                fn()
            ops = (counter.n - counter2.n) / 2
            gen_cfg.max_new_tokens = gen_cfg.min_new_tokens = new_tokens
        out.append({"what": label, "ms_per_decode_step": round(ms, 2), "aten_ops_per_decode_step": ops})
        print(f"  {label:<48} {ms:8.2f} ms/step" + (f"  {ops:6.0f} aten ops/step" if ops else ""), flush=True)

    try:
        gen_cfg.max_new_tokens = gen_cfg.min_new_tokens = new_tokens
        gen_cfg.cache_implementation, gen_cfg.disable_compile = None, True
        with torch.no_grad():
            variant(
                "bare generate (no LoRA, eval, dynamic cache)",
                lambda: bare.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg),
            )
        for fast, label in (
            (False, "in-loop, TRL default (LoRA unmerged, train mode)"),
            (True, "in-loop, fast_generation (eval, LoRA merged)"),
        ):
            trainer.args.fast_generation = fast
            variant(label, lambda: trainer._generate_single_turn(prompts, None, {}, 1))
        if CUDA:
            gen_cfg.cache_implementation, gen_cfg.disable_compile = "static", False
            with torch.no_grad():
                variant(
                    "bare generate, static cache, compiled",
                    lambda: bare.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg),
                    count=False,
                )
            trainer.args.fast_generation = True
            variant(
                "in-loop, fast_generation + static + compiled",
                lambda: trainer._generate_single_turn(prompts, None, {}, 1),
                count=False,
            )
    finally:
        for k, v in saved.items():
            setattr(gen_cfg, k, v)
        trainer.args.fast_generation = saved_fast
        reset_peak()
    return out


# ---------------------------------------------------------------- update phase and gradients


def grads_of(trainer, model, inputs) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    sync()
    t = time.perf_counter()
    trainer._compute_loss(model, dict(inputs)).backward()
    sync()
    dt = time.perf_counter() - t
    flat = torch.cat([p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None])
    return dt, flat


def update_section(trainer, tok, repeats: int) -> dict:
    model = trainer.model
    cfg = trainer.args
    trainer.current_gradient_accumulation_steps = 1
    batch = next(iter(trainer.get_train_dataloader()))
    gen = trainer._generate_and_score_completions(batch)
    g = cfg.num_generations
    rewards = _rewards_at_80(gen["completion_ids"].shape[0] // g, g).to(gen["advantages"].device)
    adv = group_advantages(rewards, g, k=cfg.quantile_k, eps=cfg.advantage_eps).to(gen["advantages"].dtype)
    inputs = dict(gen, advantages=adv)
    plain = GRPOTrainer(
        model=model,
        reward_funcs=trainer.reward_funcs,
        args=cfg,
        processing_class=tok,
        train_dataset=trainer.train_dataset,
    )
    plain.current_gradient_accumulation_steps = 1
    model.train()
    times = {"TRL GRPOTrainer": [], "QAE": [], "QAE + SA-AH": [], "QAE sparse": []}
    cfg.sparse_update = False
    for _ in range(repeats):
        times["TRL GRPOTrainer"].append(grads_of(plain, model, inputs)[0])
        trainer.set_knobs(token_weighting="none")
        times["QAE"].append(grads_of(trainer, model, inputs)[0])
        trainer.set_knobs(token_weighting="sa_ah")
        times["QAE + SA-AH"].append(grads_of(trainer, model, inputs)[0])
        trainer.set_knobs(token_weighting="none")
        cfg.sparse_update = True
        times["QAE sparse"].append(grads_of(trainer, model, inputs)[0])
        cfg.sparse_update = False
    med = {k: statistics.median(v) for k, v in times.items()}
    keep = adv != 0
    ids = torch.cat([gen["prompt_ids"], gen["completion_ids"]], 1)
    floor_t = {True: [], False: []}
    for _ in range(repeats):
        for kept in (True, False):
            rows = ids[keep] if kept else ids
            model.zero_grad(set_to_none=True)
            sync()
            t = time.perf_counter()
            model(input_ids=rows).logits[:, -1].float().logsumexp(-1).sum().backward()
            sync()
            floor_t[kept].append(time.perf_counter() - t)
    floor = statistics.median(floor_t[True]) / statistics.median(floor_t[False])
    zero = float((~keep).float().mean())
    res = {
        "update_s_TRL": round(med["TRL GRPOTrainer"], 3),
        "QAE/TRL": round(med["QAE"] / med["TRL GRPOTrainer"], 3),
        "QAE+SA-AH/TRL": round(med["QAE + SA-AH"] / med["TRL GRPOTrainer"], 3),
        "sparse/dense": round(med["QAE sparse"] / med["QAE"], 3),
        "zero_adv_frac": round(zero, 3),
        "floor_kept/all": round(floor, 3),
        "rows": int(ids.shape[0]),
        "tokens_per_row": int(ids.shape[1]),
    }
    print(
        f"  update phase of {res['rows']} rows x {res['tokens_per_row']} tokens: TRL {res['update_s_TRL']} s; "
        f"QAE / TRL {res['QAE/TRL']}x, QAE+SA-AH / TRL {res['QAE+SA-AH/TRL']}x; sparse / dense "
        f"{res['sparse/dense']}x at {zero:.1%} zero-advantage rows (floor, kept / all rows: {floor:.3f})",
        flush=True,
    )

    # gradient check: LoRA dropout off, so two dense passes are the same computation
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    saved_p = [m.p for m in dropouts]
    for m in dropouts:
        m.p = 0.0
    try:
        _, d1 = grads_of(trainer, model, inputs)
        _, d2 = grads_of(trainer, model, inputs)
        cfg.sparse_update = True
        _, s = grads_of(trainer, model, inputs)
    finally:
        cfg.sparse_update = False
        for m, p in zip(dropouts, saved_p):
            m.p = p
        model.zero_grad(set_to_none=True)
    norm = float(d1.norm())
    dd, sd = float((d1 - d2).norm()) / norm, float((s - d1).norm()) / norm
    # different row sets change the matmul shapes, so rounding differs at the dtype's level; agreement means
    # sparse-vs-dense within the dense-vs-dense spread or within that rounding level
    dtype = next(p for p in model.parameters()).dtype
    level = {torch.bfloat16: 2e-2, torch.float16: 5e-3}.get(dtype, 1e-4)
    ok = sd <= max(2 * dd, level)
    res.update({"grad_rel_diff_dense_vs_dense": dd, "grad_rel_diff_sparse_vs_dense": sd, "grad_check_ok": ok})
    print(
        f"  gradients, LoRA dropout 0 ({dtype}): dense vs dense {dd:.2e}, sparse vs dense {sd:.2e} "
        f"(relative L2) -> {'agree' if ok else 'DISAGREE'} (bound max(2 x dense spread, {level:g}))",
        flush=True,
    )
    return res


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny dimensions on the CPU (the test suite)")
    p.add_argument("--gsm8k", help="folder with GSM8K train.jsonl / test.jsonl")
    p.add_argument("--budget-s", type=float, default=290.0, help="skip later sections past this wall time")
    p.add_argument("--workdir", help="where random-weight models are saved (default: a temporary folder)")
    p.add_argument("--json", help="also write the figures to this file")
    a = p.parse_args(argv)
    if not a.smoke and not CUDA:
        print("gpu_check: no CUDA device; use --smoke on a CPU", file=sys.stderr)
        return 2
    budget = Budget(a.budget_s)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="qae_gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    smoke = a.smoke
    data = gsm8k_dir(a.gsm8k) if a.gsm8k or not smoke else None  # smoke: short synthetic prompts unless asked
    n_seq, new_tokens, repeats, steps = (4, 8, 1, 2) if smoke else (64, 256, 2, 3)
    report = {"date": time.strftime("%Y-%m-%d"), "smoke": smoke, "versions": versions(), "sections": {}}
    dev = torch.cuda.get_device_name() if CUDA else "CPU"
    print(f"gpu_check on {dev}; {', '.join(f'{k} {v}' for k, v in report['versions'].items())}")
    print(f"data: {'GSM8K from ' + data if data else 'synthetic task (no GSM8K folder found): shorter prompts'}")
    source, how = model_source("qwen2.5-1.5b", smoke, work)
    print(f"model qwen2.5-1.5b: {how}", flush=True)

    print("\n1. the qwen2.5-1.5b-gsm8k preset as the CLI runs it")
    # run folders: new, under a folder of this invocation's own, so a reused --workdir keeps earlier runs intact
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=work))
    main_run = step_section("1.5B, preset precision", "qwen2.5-1.5b", source, data, runs / "1.5b", smoke, steps)
    report["sections"]["step_1.5b"] = main_run["row"]
    trainer, tok = main_run["trainer"], main_run["tok"]

    print(f"\n2. decode, {n_seq} sequences x {new_tokens} new tokens (ms per decode step, prefill included)")
    report["sections"]["decode"] = decode_section(trainer, tok, source, n_seq, new_tokens, repeats)

    print("\n3-4. update phase and gradients on one generated batch")
    report["sections"]["update"] = update_section(trainer, tok, repeats if smoke else 3)
    del trainer, main_run
    reset_peak()

    print("\n5. other precisions and sizes (each: a fresh model, the preset's settings)")
    # the live preset's first step is what notebook 04 waits for after lab.start() (compilation included)
    extra = [
        ("1.5B live preset (notebook 04)", "qwen2.5-1.5b", [], "qwen2.5-1.5b-gsm8k-live"),
        ("1.5B, float32", "qwen2.5-1.5b", ["bf16=false", "fp16=false", "dtype=float32"], None),
        ("1.5B, float16 (T4-style)", "qwen2.5-1.5b", ["bf16=false", "fp16=true", "dtype=float16"], None),
        ("0.5B T4 preset (float16)", "qwen2.5-0.5b", [], "qwen2.5-0.5b-gsm8k-t4"),
        ("0.5B, preset precision", "qwen2.5-0.5b", [], None),
        ("3B, preset precision", "qwen2.5-3b", [], None),
    ]
    report["sections"]["more"] = []
    for label, name, sets, preset in extra[:2] if smoke else extra:  # smoke: each code path once
        if budget.left() < (20 if smoke else 60):
            print(f"  {label:<34} skipped: --budget-s spent")
            continue
        if smoke and "fp16=true" in sets:
            sets = [s for s in sets if s != "fp16=true"]  # no fp16 mixed precision on a CPU
        src, how = model_source(name, smoke, work)
        folder = runs / f"more-{len(report['sections']['more'])}"
        run = step_section(label, name, src, data, folder, smoke, 3 if preset else 2, sets, preset)
        if preset and not smoke:  # the estimates (memory and time, qae_lab.runs.costs) beside the measured row
            for line in estimates(
                run["row"],
                run["run"],
                run["trainer"].args,
                torch.cuda.get_device_name(),
                torch.cuda.is_bf16_supported(),
            ):
                print(f"  {'':<34} {line}", flush=True)
        report["sections"]["more"].append({**run["row"], "model": how})
        del run
        reset_peak()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, default=str))
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print("\ngpu_check: done" + (" (smoke)" if smoke else ""))
    return 0 if report["sections"]["update"]["grad_check_ok"] else 1


def versions() -> dict:
    import peft
    import transformers
    import trl

    out = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "peft": peft.__version__,
    }
    if CUDA:
        out["cuda"] = torch.version.cuda
    return out


if __name__ == "__main__":
    sys.exit(main())
