"""Host time of one eager decode step of a Qwen2.5-0.5B-shaped model, the part of a GPU's step time a GPU cannot hide.

    python benchmarks/host_costs.py            # writes data/gpu_time/host_costs.json (about a minute)
    python benchmarks/host_costs.py --smoke    # a short run that writes nothing (the test suite)

Decoding a 0.5B model for a few dozen sequences without CUDA graphs is bound by the host: Python, PyTorch's
dispatcher and the kernel launches of ~2,000-4,000 small ops per decode step, not by the card's arithmetic.
That cost depends on the number of ops (the layer count and the LoRA layout), not on the width, so it is
measured here with Qwen2.5-0.5B's layout (24 layers, 14 query and 2 key/value heads, LoRA r = 16 on all seven
projections) at a tiny width (hidden 56, MLP 64, vocabulary 512), where each op's own arithmetic is negligible,
on one CPU thread. A GPU host pays this and each kernel's launch on top, so the figure is a lower bound of the
host's share. ``qae_lab.runs.costs`` uses it for the decoding that runs eagerly: the evaluations (``model.generate``
on the PEFT model, adapters unmerged) and in-loop generation with ``compile_generation: false`` (adapters merged,
``qae_lab.train.generation.generation_policy``). With compiled decoding (CUDA graphs) the host's share is not counted.

Each figure: (time to generate N tokens - time to generate 1) / (N - 1), the median of repeats, at batch 1 (the
host's figure: the ops' own arithmetic as small as it gets) and at batch 32 (for reference: there the CPU also
does arithmetic a GPU would do on the card). "unmerged": the PEFT model in eval mode, as the evaluations decode;
"merged": inside ``generation_policy``, as in-loop generation with ``fast_generation`` decodes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from qae_lab.threads import use_threads
from qae_lab.train.generation import generation_policy
from qae_lab.task.models import lora_config

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "gpu_time" / "host_costs.json"
# Qwen2.5-0.5B's layout (qae_lab.runs.costs.QWEN25["qwen2.5-0.5b"]) at a width where the ops cost nothing
TINY_05B = dict(
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    hidden_size=56,
    intermediate_size=64,
    vocab_size=512,
    tie_word_embeddings=True,
    max_position_embeddings=1024,
)


class OpCount(TorchDispatchMode):
    """Counts aten ops (each at least one kernel launch on a GPU)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def tiny_policy():
    from peft import get_peft_model  # the train extra, as in the project's loader

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY_05B)).eval()
    return get_peft_model(model, lora_config(16)).eval()


def generate(model, batch: int, new_tokens: int) -> None:
    ids = torch.randint(3, TINY_05B["vocab_size"], (batch, 16))
    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
            eos_token_id=None,
        )


def per_step_ms(model, batch: int, new_tokens: int, repeats: int) -> float:
    """Milliseconds per decode step, prefill and set-up removed (the difference of two generations)."""
    generate(model, batch, 2)  # warm-up
    diffs = []
    for _ in range(repeats):
        t = time.perf_counter()
        generate(model, batch, 1)
        one = time.perf_counter() - t
        t = time.perf_counter()
        generate(model, batch, new_tokens)
        diffs.append((time.perf_counter() - t - one) / (new_tokens - 1))
    return statistics.median(diffs) * 1e3


def ops_per_step(model, batch: int) -> int:
    counts = []
    for n in (1, 5):
        with OpCount() as c:
            generate(model, batch, n)
        counts.append(c.n)
    return (counts[1] - counts[0]) // 4


def measure(new_tokens: int, repeats: int) -> dict:
    """``{path: {"ms_per_decode_step", "ms_per_decode_step_b32", "aten_ops_per_decode_step"}}``.

    The host's figure is the one at batch 1, where the ops' own arithmetic is as small as it gets; at batch 32
    the CPU also does the (tiny) arithmetic that a GPU would do on the card, kept for reference.
    """
    use_threads(1)  # one host thread launches a GPU's kernels
    model = tiny_policy()
    rows = {}
    for path in ("unmerged", "merged"):
        row = {}
        for batch in (1, 32):
            with generation_policy(model) if path == "merged" else contextlib.nullcontext():
                ms = per_step_ms(model, batch, new_tokens, repeats)
                ops = ops_per_step(model, batch)
            row["ms_per_decode_step" if batch == 1 else f"ms_per_decode_step_b{batch}"] = round(ms, 3)
            row["aten_ops_per_decode_step"] = ops
            print(f"  {path:<9} batch {batch:>2}: {ms:6.2f} ms per decode step, {ops} aten ops", flush=True)
        rows[path] = row
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="a few tokens, one repeat, nothing written")
    p.add_argument("--out", default=str(OUT), help=f"where the figures go (default {OUT.relative_to(ROOT)})")
    a = p.parse_args(argv)
    new_tokens, repeats = (3, 1) if a.smoke else (48, 5)
    out = Path(a.out)
    if out.exists() and not a.smoke:  # a measurement is data: never overwritten
        print(f"{out} exists: the earlier measurement is kept; move it aside first", file=sys.stderr)
        return 1
    print(f"host cost of an eager decode step, Qwen2.5-0.5B layout at tiny width, torch {torch.__version__}")
    rows = measure(new_tokens, repeats)
    if a.smoke:
        return 0
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "what": "host milliseconds per eager decode step (module docstring)",
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": 1,
        "torch": torch.__version__,
        "layout": TINY_05B,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"-> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
