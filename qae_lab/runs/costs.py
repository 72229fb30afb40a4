r"""What a LoRA GRPO run costs on a GPU, estimated term by term from the architecture (so that every assumption can be
checked): the peak memory of a step, the time of a step and of a run; ``benchmarks/gpu_check.py`` measures a step.

Implementer's notes: docs/implementation.md, section ``qae_lab.runs.costs``.

>>> est = lora_grpo_memory(QWEN25["qwen2.5-0.5b"], dtype_bytes=2, lora_r=16, micro_batch=16,
...                        generation_batch=32, prompt_len=320, completion_len=256)
>>> round(est["peak"] / GIB, 2), max(("generation", "training"), key=est.get)
(3.18, 'training')

>>> t4 = GPUS["t4"]
>>> est = lora_grpo_step_time(QWEN25["qwen2.5-0.5b"], t4, dtype_bytes=2, lora_r=16, micro_batch=16,
...                           generation_batch=32, prompt_len=320, completion_len=256)
>>> {k: round(v, 2) for k, v in est.items()}
{'generation': 1.04, 'training': 0.73, 'step': 1.77}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qae_lab._checks import check_int
from qae_lab.task.models import LORA_TARGETS

__all__ = [
    "Arch",
    "QWEN25",
    "GIB",
    "T4_MEMORY",
    "DTYPE_BYTES",
    "projections",
    "param_count",
    "lora_param_count",
    "layer_activation_bytes",
    "lora_grpo_memory",
    "run_memory",
    "run_shape",
    "PROMPT_TOKENS",
    "GPU",
    "GPUS",
    "gpu_named",
    "decoder_weights",
    "prefill_flops",
    "decode_flops",
    "training_flops",
    "generation_time",
    "training_time",
    "lora_grpo_step_time",
    "run_time",
]


GIB = 2**30
T4_MEMORY = 15 * GIB
"""What a T4 (16 GB card) offers: ``torch.cuda.get_device_properties(0).total_memory`` is about 15 GiB."""
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
PROMPT_TOKENS = {"gsm8k": 320, "synthetic": 64, "sums": 64}
"""Assumed longest prompt of a batch, in tokens, chat template and system prompt included: GSM8K's longest training
prompt is 1,168 characters (99% under 710), about 300 tokens at Qwen's ~4 characters a token."""
# the tiles of TRL 1.16's fused LM head (trl.kernels.chunked_logprob): tokens x vocabulary columns
_FUSED_ROWS, _FUSED_COLS = 4096, 32768


@dataclass(frozen=True)
class Arch:
    r"""The numbers of a Qwen2 architecture that memory depends on (its ``config.json`` fields).

    >>> Arch.from_config({"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    ...     "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    ...     "tie_word_embeddings": True}) == QWEN25["qwen2.5-0.5b"]
    True
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = True

    def __post_init__(self):
        for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
            check_int(getattr(self, name), name, 1)
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(
                f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), and heads of "
                f"kv_heads ({self.kv_heads})"
            )

    @property
    def kv(self) -> int:
        """Width of the key (and of the value) projection: kv_heads * head size."""
        return self.kv_heads * (self.hidden // self.heads)

    @classmethod
    def from_config(cls, config: Mapping) -> Arch:
        """From a Qwen2 ``config.json`` mapping (or a ``transformers`` config's ``to_dict()``)."""
        return cls(
            config["hidden_size"],
            config["num_hidden_layers"],
            config["num_attention_heads"],
            config.get("num_key_value_heads", config["num_attention_heads"]),
            config["intermediate_size"],
            config["vocab_size"],
            bool(config.get("tie_word_embeddings", False)),
        )


# Qwen2.5-*-Instruct's config.json (the Hub's, as of 2025); all three tie the LM head to the embeddings
QWEN25 = {
    "qwen2.5-0.5b": Arch(896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": Arch(1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-3b": Arch(2048, 36, 16, 2, 11008, 151936, True),
}


def projections(arch: Arch) -> dict[str, tuple[int, int]]:
    r"""Each decoder layer's projections, ``name: (in_features, out_features)``.

    >>> projections(QWEN25["qwen2.5-0.5b"])["k_proj"]
    (896, 128)
    """
    h, kv, i = arch.hidden, arch.kv, arch.intermediate
    attention = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h)}
    return {**attention, "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _check_targets(arch: Arch, targets: Sequence[str]) -> list[str]:
    unknown = sorted(set(targets) - set(projections(arch)))
    if unknown:
        raise ValueError(f"targets must be among {list(projections(arch))}, got {unknown}")
    return list(dict.fromkeys(targets))


def param_count(arch: Arch) -> int:
    r"""Parameters of a Qwen2 causal LM: embeddings ``V h``; per layer the seven projections (biases on q, k, v) and two
    RMSNorm weights; the final norm; an LM head ``V h`` unless tied.

    >>> param_count(QWEN25["qwen2.5-0.5b"]), param_count(QWEN25["qwen2.5-1.5b"])
    (494032768, 1543714304)
    """
    h = arch.hidden
    per_layer = sum(i * o for i, o in projections(arch).values()) + (h + 2 * arch.kv) + 2 * h
    return arch.vocab * h * (1 if arch.tied else 2) + arch.layers * per_layer + h


def lora_param_count(arch: Arch, r: int, targets: Sequence[str] = LORA_TARGETS) -> int:
    r"""LoRA parameters: ``r * (in + out)`` for each adapted projection (A is r x in, B is out x r), every layer.

    >>> lora_param_count(QWEN25["qwen2.5-0.5b"], 16)   # 24 x 16 x (2 x 1792 + 2 x 1024 + 3 x 5760)
    8798208
    """
    check_int(r, "r", 1)
    linears = projections(arch)
    return arch.layers * sum(r * sum(linears[t]) for t in _check_targets(arch, targets))


def layer_activation_bytes(arch: Arch, dtype_bytes: int, lora_r: int, targets: Sequence[str] = LORA_TARGETS) -> int:
    r"""Bytes autograd keeps per token of one Qwen2 decoder layer: the two RMSNorms' inputs in float32 (``2 h * 4``) and
    outputs (``2 h b``); q, k, v (``(h + 2 kv) b``) and the rotated q, k (``(h + kv) b``); the attention output (``h
    b``); gate, up, SiLU(gate) and their product (``4 I b``); per adapted projection its dropped-out input (``in * b``),
    the dropout mask (``in`` bytes) and A's output (``r b``).

    >>> layer_activation_bytes(QWEN25["qwen2.5-0.5b"], 2, 16)   # 2 (11 h + 3 kv + 5 I + 7 r) + 14 h + I
    86752
    """
    h, kv, i, b = arch.hidden, arch.kv, arch.intermediate, dtype_bytes
    base = 2 * h * 4 + 2 * h * b + (h + 2 * kv) * b + (h + kv) * b + h * b + 4 * i * b
    linears = projections(arch)
    lora = sum(linears[t][0] * (b + 1) + lora_r * b for t in _check_targets(arch, targets))
    return base + lora


def lora_grpo_memory(
    arch: Arch,
    *,
    dtype_bytes: int,
    lora_r: int,
    micro_batch: int,
    generation_batch: int,
    prompt_len: int,
    completion_len: int,
    targets: Sequence[str] = LORA_TARGETS,
    checkpointing: bool = True,
    fast_generation: bool = True,
    fused_lm_head: bool = True,
) -> dict[str, int]:
    r"""Estimated peak GPU memory of one LoRA GRPO step, in bytes, term by term.

    ``micro_batch`` completions per forward/backward, ``generation_batch`` per generate call. ``fast_generation``:
    qae_lab's snapshot of the adapted base weights while generating; ``fused_lm_head``: TRL's one logits tile instead of
    all float32 logits. Each term, the sums ``persistent``, ``generation``, ``training``, and ``peak = persistent +
    max(generation, training)``.

    >>> est = lora_grpo_memory(QWEN25["qwen2.5-0.5b"], dtype_bytes=2, lora_r=16, micro_batch=16,
    ...                        generation_batch=32, prompt_len=320, completion_len=256, fused_lm_head=False)
    >>> est["loss_logits"] == 2 * 16 * 256 * 151936 * 4, round(est["peak"] / GIB, 2)
    (True, 6.82)
    """
    check_int(micro_batch, "micro_batch", 1), check_int(generation_batch, "generation_batch", 1)
    check_int(prompt_len, "prompt_len", 1), check_int(completion_len, "completion_len", 1)
    b, h, L = _dtype_bytes(dtype_bytes), arch.hidden, arch.layers
    n, s = micro_batch, prompt_len + completion_len
    p_lora = lora_param_count(arch, lora_r, targets)
    linears = projections(arch)
    p_adapted = L * sum(i * o for t, (i, o) in linears.items() if t in targets)
    t = {"weights": param_count(arch) * b, "lora": p_lora * 4, "optimizer": p_lora * 8}
    # generation: K and V of every layer for B sequences of S positions
    t["kv_cache"] = generation_batch * s * L * 2 * arch.kv * b
    t["prefill"] = generation_batch * prompt_len * (3 * arch.intermediate + 4 * h) * b
    t["sample_logits"] = generation_batch * arch.vocab * 8
    t["snapshot"] = p_adapted * b if fast_generation else 0
    # training: gradients of the adapters, activations, the loss forward's logits and their gradient
    t["gradients"] = p_lora * 4
    a = layer_activation_bytes(arch, b, lora_r, targets)
    if checkpointing:
        t["activations"] = L * n * s * h * b + n * s * a + n * s * h * b
    else:
        t["activations"] = L * n * s * a
    rows, cols = n * completion_len, arch.vocab
    if fused_lm_head:
        rows, cols = min(rows, _FUSED_ROWS), min(cols, _FUSED_COLS)
    t["loss_logits"] = 2 * rows * cols * 4
    t["persistent"] = t["weights"] + t["lora"] + t["optimizer"]
    t["generation"] = t["kv_cache"] + t["prefill"] + t["sample_logits"] + t["snapshot"]
    t["training"] = t["gradients"] + t["activations"] + t["loss_logits"]
    t["peak"] = t["persistent"] + max(t["generation"], t["training"])
    return t


def run_memory(
    run, cfg, *, bf16_gpu: bool = False, prompt_len: int | None = None, fused_lm_head: bool = True
) -> dict[str, int]:
    r""":func:`lora_grpo_memory` for a built run (``RunArgs`` and ``QAEConfig``), as :func:`run_shape` reads it.

    >>> from types import SimpleNamespace as NS
    >>> run = NS(model="qwen2.5-0.5b", dtype="float16", lora=True, lora_r=16, task="gsm8k")
    >>> cfg = NS(per_device_train_batch_size=16, generation_batch_size=32, max_completion_length=256,
    ...          gradient_checkpointing=True, fast_generation=True)
    >>> round(run_memory(run, cfg)["peak"] / GIB, 2)
    3.18
    """
    if not run.lora:
        raise ValueError("run.lora must be True: the estimate is of a LoRA run (optimizer state for the adapters only)")
    arch, dtype_bytes, prompt_len = run_shape(run, bf16_gpu, prompt_len)
    fast = bool(getattr(cfg, "fast_generation", False))
    sizes = {"prompt_len": prompt_len, "fused_lm_head": fused_lm_head, "fast_generation": fast}
    return lora_grpo_memory(arch, dtype_bytes=dtype_bytes, **sizes, **_batches(run, cfg, run.lora_r))


def run_shape(run, bf16_gpu: bool, prompt_len: int | None = None) -> tuple[Arch, int, int]:
    r"""``(architecture, bytes per weight, prompt tokens)`` of a built run: ``"auto"`` is bfloat16 where ``bf16_gpu``
    else float32 (as :func:`qae_lab.task.models.load_policy` decides); ``prompt_len``, else ``run.task``'s.

    >>> from types import SimpleNamespace as NS
    >>> arch, b, p = run_shape(NS(model="qwen2.5-1.5b", dtype="auto", task="gsm8k"), bf16_gpu=False)
    >>> arch.layers, b, p
    (28, 4, 320)
    """
    if run.model not in QWEN25:
        raise ValueError(
            f"run.model must be one of {sorted(QWEN25)} (their architectures are stored here), got {run.model!r}"
        )
    dtype_bytes = (2 if bf16_gpu else 4) if run.dtype == "auto" else DTYPE_BYTES[run.dtype]
    return QWEN25[run.model], dtype_bytes, prompt_len or PROMPT_TOKENS.get(run.task, 320)


@dataclass(frozen=True)
class GPU:
    r"""A card's datasheet figures: dense half-precision tensor TFLOP/s (float32 accumulation) and bandwidth in GB/s.

    >>> GPUS["t4"].tflops, GPUS["t4"].bandwidth
    (65.0, 320.0)
    """

    name: str
    tflops: float
    bandwidth: float
    bf16: bool = True

    def __post_init__(self):
        for field in ("tflops", "bandwidth"):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{field} must be a finite number > 0, got {value!r}")


# NVIDIA's datasheets (dense figures: the sparsity-doubled ones halved)
GPUS = {
    "t4": GPU("NVIDIA T4", 65.0, 320.0, bf16=False),  # a free Colab GPU: mixed-precision FP16/FP32, GDDR6
    "l4": GPU("NVIDIA L4", 121.0, 300.0),
    "a100-40gb": GPU("NVIDIA A100 40GB", 312.0, 1555.0),
    "a100": GPU("NVIDIA A100 80GB", 312.0, 2039.0),
    "h100": GPU("NVIDIA H100 SXM", 989.0, 3350.0),
    "h200": GPU("NVIDIA H200", 989.0, 4800.0),
}


def gpu_named(device_name: str) -> GPU | None:
    r"""The :data:`GPUS` entry for a CUDA device name (``torch.cuda.get_device_name()``), None if not listed.

    >>> gpu_named("Tesla T4").name, gpu_named("NVIDIA A100-SXM4-40GB").name, gpu_named("NVIDIA GeForce RTX 4090")
    ('NVIDIA T4', 'NVIDIA A100 40GB', None)
    """
    words = device_name.lower().replace("-", " ").split()
    if "a100" in words or any(w.startswith("a100") for w in words):
        return GPUS["a100-40gb" if any("40gb" in w for w in words) else "a100"]
    return next((GPUS[key] for key in GPUS if key in words), None)


def decoder_weights(arch: Arch) -> int:
    r"""``W``: the weights of the decoder layers' seven projections, the matmuls a token goes through.

    >>> decoder_weights(QWEN25["qwen2.5-0.5b"])   # 24 x (2 x 896^2 + 2 x 896 x 128 + 3 x 896 x 4864)
    357826560
    """
    h, kv, i = arch.hidden, arch.kv, arch.intermediate
    return arch.layers * (2 * h * h + 2 * h * kv + 3 * h * i)


def _batches(run, cfg, lora_r: int) -> dict:
    """The step's sizes in a built run, as :func:`lora_grpo_memory` and :func:`lora_grpo_step_time` name them."""
    return {
        "lora_r": lora_r,
        "micro_batch": cfg.per_device_train_batch_size,
        "generation_batch": cfg.generation_batch_size,
        "completion_len": cfg.max_completion_length,
        "checkpointing": bool(cfg.gradient_checkpointing),
    }


def _card(flops: float, n_bytes: float, gpu: GPU, sustained: float) -> float:
    return max(flops / (gpu.tflops * 1e12 * sustained), n_bytes / (gpu.bandwidth * 1e9 * sustained))


def _dtype_bytes(dtype_bytes: int) -> int:
    if dtype_bytes not in (2, 4):
        raise ValueError(f"dtype_bytes must be 2 (float16 / bfloat16) or 4 (float32), got {dtype_bytes!r}")
    return dtype_bytes


def _check_sustained(sustained: float) -> None:
    if not (isinstance(sustained, (int, float)) and 0 < sustained <= 1):
        raise ValueError(
            f"sustained (the fraction of the datasheet peaks kernels reach) must lie in (0, 1], got {sustained!r}"
        )


def _lora(arch: Arch, lora_r: int, targets: Sequence[str]) -> int:
    check_int(lora_r, "lora_r", 0)
    return lora_param_count(arch, lora_r, targets) if lora_r else 0


def prefill_flops(
    arch: Arch, *, batch: int, prompt_len: int, lora_r: int = 0, targets: Sequence[str] = LORA_TARGETS
) -> dict[str, int]:
    r"""FLOPs of a prefill of ``batch`` prompts of ``P`` tokens: ``matmul`` ``2 (W + R) B P`` in the layers and ``2 H
    B`` for the LM head at the last position; ``attention`` ``2 h L B P (P + 1)`` (causal: ``4 h`` FLOPs per attended
    position per layer, for QK^T and the weighted sum of V).

    >>> prefill_flops(Arch(4, 1, 1, 1, 8, 10), batch=1, prompt_len=2)   # W = 2x16 + 2x16 + 3x32; H = 40
    {'matmul': 720, 'attention': 48}
    """
    check_int(batch, "batch", 1), check_int(prompt_len, "prompt_len", 1)
    w, r, head = decoder_weights(arch), _lora(arch, lora_r, targets), arch.vocab * arch.hidden
    return {
        "matmul": 2 * (w + r) * batch * prompt_len + 2 * head * batch,
        "attention": 2 * arch.hidden * arch.layers * batch * prompt_len * (prompt_len + 1),
    }


def decode_flops(
    arch: Arch, *, batch: int, context: int, lora_r: int = 0, targets: Sequence[str] = LORA_TARGETS
) -> dict[str, int]:
    r"""FLOPs of one decode step of ``batch`` sequences attending to ``context`` positions: ``matmul`` ``2 (W + R + H)
    B``, ``attention`` ``4 h L B c``.

    >>> decode_flops(Arch(4, 1, 1, 1, 8, 10), batch=1, context=3)
    {'matmul': 400, 'attention': 48}
    """
    check_int(batch, "batch", 1), check_int(context, "context", 1)
    w, r, head = decoder_weights(arch), _lora(arch, lora_r, targets), arch.vocab * arch.hidden
    return {"matmul": 2 * (w + r + head) * batch, "attention": 4 * arch.hidden * arch.layers * batch * context}


def training_flops(
    arch: Arch,
    *,
    sequences: int,
    prompt_len: int,
    completion_len: int,
    lora_r: int,
    targets: Sequence[str] = LORA_TARGETS,
    checkpointing: bool = True,
) -> dict[str, int]:
    r"""FLOPs of the update phase over ``sequences`` sequences of ``S = prompt_len + completion_len`` tokens, logits at
    the completion positions only (TRL's ``logits_to_keep``). With ``k = 3`` passes under activation checkpointing (else
    2): ``matmul`` ``2 W k`` per token (frozen base: input gradients only), ``2 R (k + 1)`` (LoRA's weight gradients
    too), ``4 H`` per completion token; ``attention`` ``2 h L S (S + 1) (k + 1)`` per sequence.

    >>> training_flops(Arch(4, 1, 1, 1, 8, 10), sequences=1, prompt_len=1, completion_len=1, lora_r=0)
    {'matmul': 2080, 'attention': 192}
    """
    for name, value in (("sequences", sequences), ("prompt_len", prompt_len), ("completion_len", completion_len)):
        check_int(value, name, 1)
    w, r, head = decoder_weights(arch), _lora(arch, lora_r, targets), arch.vocab * arch.hidden
    k, s = (3 if checkpointing else 2), prompt_len + completion_len
    tokens = sequences * s
    return {
        "matmul": 2 * w * k * tokens + 2 * r * (k + 1) * tokens + 4 * head * sequences * completion_len,
        "attention": 2 * arch.hidden * arch.layers * s * (s + 1) * (k + 1) * sequences,
    }


def generation_time(
    arch: Arch,
    gpu: GPU,
    *,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    dtype_bytes: int,
    lora_r: int = 0,
    targets: Sequence[str] = LORA_TARGETS,
    sustained: float = 1.0,
    host_s: float = 0.0,
) -> float:
    r"""Seconds for one ``generate`` call: a prefill (the weights read once), then ``new_tokens - 1`` decode steps (the
    weights and the KV cache ``B c L 2 kv b`` read), each ``max(card, host_s)``; every sequence runs to the limit.
    ``lora_r = 0``: adapters merged (or none); else unmerged, their float32 weights read too.

    >>> q = QWEN25["qwen2.5-0.5b"]
    >>> round(generation_time(q, GPUS["t4"], batch=32, prompt_len=320, new_tokens=256, dtype_bytes=2), 3)
    1.043
    >>> round(generation_time(q, GPUS["t4"], batch=32, prompt_len=320, new_tokens=256, dtype_bytes=2,
    ...                       host_s=0.02), 3)   # every decode step waits for the host: 0.115 s prefill + 255 x 0.02
    5.215
    """
    check_int(new_tokens, "new_tokens", 1)
    _check_sustained(sustained)
    if not (isinstance(host_s, (int, float)) and math.isfinite(host_s) and host_s >= 0):
        raise ValueError(f"host_s must be a finite number of seconds >= 0, got {host_s!r}")
    b = _dtype_bytes(dtype_bytes)
    weight_bytes = param_count(arch) * b + _lora(arch, lora_r, targets) * 4
    total = _card(
        sum(prefill_flops(arch, batch=batch, prompt_len=prompt_len, lora_r=lora_r, targets=targets).values()),
        weight_bytes,
        gpu,
        sustained,
    )
    step = decode_flops(arch, batch=batch, context=1, lora_r=lora_r, targets=targets)  # attention grows with c
    for c in range(prompt_len + 1, prompt_len + new_tokens):
        card = _card(
            step["matmul"] + step["attention"] * c,
            weight_bytes + batch * c * arch.layers * 2 * arch.kv * b,
            gpu,
            sustained,
        )
        total += max(card, host_s)
    return total


def training_time(
    arch: Arch,
    gpu: GPU,
    *,
    sequences: int,
    prompt_len: int,
    completion_len: int,
    micro_batch: int,
    dtype_bytes: int,
    lora_r: int,
    targets: Sequence[str] = LORA_TARGETS,
    checkpointing: bool = True,
    sustained: float = 1.0,
) -> float:
    r"""Seconds for the update phase of one step: :func:`training_flops`, the weights read once a pass a micro-batch.


    >>> round(training_time(QWEN25["qwen2.5-0.5b"], GPUS["t4"], sequences=32, prompt_len=320, completion_len=256,
    ...                     micro_batch=16, dtype_bytes=2, lora_r=16), 3)
    0.726
    """
    check_int(micro_batch, "micro_batch", 1)
    _check_sustained(sustained)
    shape = {"prompt_len": prompt_len, "completion_len": completion_len, "lora_r": lora_r, "targets": targets}
    flops = sum(training_flops(arch, sequences=sequences, checkpointing=checkpointing, **shape).values())
    weights = param_count(arch) * _dtype_bytes(dtype_bytes) + _lora(arch, lora_r, targets) * 4
    return _card(flops, math.ceil(sequences / micro_batch) * (3 if checkpointing else 2) * weights, gpu, sustained)


def lora_grpo_step_time(
    arch: Arch,
    gpu: GPU,
    *,
    dtype_bytes: int,
    lora_r: int,
    micro_batch: int,
    generation_batch: int,
    prompt_len: int,
    completion_len: int,
    targets: Sequence[str] = LORA_TARGETS,
    checkpointing: bool = True,
    merged_generation: bool = True,
    sustained: float = 1.0,
    host_s: float = 0.0,
) -> dict[str, float]:
    r"""Seconds of one LoRA GRPO step: ``generation`` (:func:`generation_time`), ``training`` (:func:`training_time`)
    and their sum ``step``. ``host_s``: host seconds per decode step (0 for compiled decoding).

    >>> est = lora_grpo_step_time(QWEN25["qwen2.5-0.5b"], GPUS["t4"], dtype_bytes=2, lora_r=16, micro_batch=16,
    ...                           generation_batch=32, prompt_len=320, completion_len=256, sustained=0.5)
    >>> {k: round(v, 2) for k, v in est.items()}   # half the datasheet peaks: every card term doubles
    {'generation': 2.09, 'training': 1.45, 'step': 3.54}
    """
    same = {"prompt_len": prompt_len, "dtype_bytes": dtype_bytes, "targets": targets, "sustained": sustained}
    gen_r = 0 if merged_generation else lora_r
    gen = generation_time(
        arch, gpu, batch=generation_batch, new_tokens=completion_len, lora_r=gen_r, host_s=host_s, **same
    )
    sizes = {"completion_len": completion_len, "lora_r": lora_r, "checkpointing": checkpointing}
    train = training_time(arch, gpu, sequences=generation_batch, micro_batch=micro_batch, **sizes, **same)
    return {"generation": gen, "training": train, "step": gen + train}


def run_time(
    run,
    cfg,
    gpu: GPU,
    *,
    host: Mapping[str, float] | None = None,
    sustained: float = 1.0,
    prompt_len: int | None = None,
) -> dict[str, float]:
    r"""Seconds of a built run on ``gpu``: ``step``, ``steps`` (``max_steps`` of them), ``evaluation`` (one),
    ``evaluations`` (before and after, when ``run.evaluate``) and ``total``.

    A decode step costs the card's time, and at least ``host["merged"]`` seconds eager merged (``fast_generation``),
    ``host["unmerged"]`` on TRL's own path and in evaluations (``benchmarks/host_costs.py``; None: the card's only). An
    evaluation decodes ``n_eval`` prompts greedily and ``eval_samples`` times sampled.

    >>> from types import SimpleNamespace as NS
    >>> run = NS(model="qwen2.5-0.5b", dtype="float16", lora=True, lora_r=16, task="gsm8k", evaluate=True,
    ...          n_eval=100, eval_samples=4, eval_batch_size=32, eval_max_new_tokens=None)
    >>> cfg = NS(max_steps=200, per_device_train_batch_size=16, generation_batch_size=32, max_completion_length=256,
    ...          gradient_checkpointing=True, fast_generation=True, compile_generation=True, use_vllm=False)
    >>> est = run_time(run, cfg, GPUS["t4"], host={"merged": 0.012, "unmerged": 0.017})
    >>> round(est["steps"] / 60, 1), round(est["evaluations"] / 60, 1)
    (5.9, 1.2)
    """
    if getattr(cfg, "use_vllm", False):
        raise ValueError("cfg.use_vllm must be False: vLLM's generation is not estimated here")
    arch, b, p = run_shape(run, gpu.bf16, prompt_len)
    host = dict(host or {"merged": 0.0, "unmerged": 0.0})
    missing = {"merged", "unmerged"} - set(host)
    if missing:
        raise ValueError(
            f"host must give seconds per decode step for 'merged' and 'unmerged', missing {sorted(missing)}"
        )
    lora_r = run.lora_r if run.lora else 0
    fast = bool(getattr(cfg, "fast_generation", False))
    compiled = fast and bool(getattr(cfg, "compile_generation", False))
    host_s = 0.0 if compiled else host["merged" if fast else "unmerged"]
    shape = {"dtype_bytes": b, "prompt_len": p, "sustained": sustained}
    step = lora_grpo_step_time(arch, gpu, merged_generation=fast, host_s=host_s, **shape, **_batches(run, cfg, lora_r))
    step = step["step"]
    new = run.eval_max_new_tokens or cfg.max_completion_length
    calls = [min(run.eval_batch_size, run.n_eval - i) for i in range(0, run.n_eval, run.eval_batch_size)]
    evaluation = sum(
        generation_time(arch, gpu, batch=n * samples, new_tokens=new, lora_r=lora_r, host_s=host["unmerged"], **shape)
        for n in calls
        for samples in (1, run.eval_samples)
    )
    evaluations = 2 * evaluation if getattr(run, "evaluate", True) else 0.0
    steps = step * cfg.max_steps
    total = steps + evaluations
    return {"step": step, "steps": steps, "evaluation": evaluation, "evaluations": evaluations, "total": total}
