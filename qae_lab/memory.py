r"""Peak GPU memory of one LoRA GRPO step, estimated from a Qwen2 architecture and a run's settings.

An **estimate**, written down term by term so that each assumption can be checked against a
measurement (``benchmarks/gpu_check.py`` prints the measured peak beside it on a GPU). It counts
the tensors a step holds, i.e. what ``torch.cuda.max_memory_allocated`` measures; the CUDA context,
cuBLAS workspaces, compiled-graph pools and allocator fragmentation come on top (hence the headroom
asked of a preset: :data:`T4_MEMORY` is the card, not the budget).

Symbols (bytes unless said): ``b`` bytes per weight / activation element (2 for float16 and
bfloat16, 4 for float32); ``h`` hidden size, ``L`` layers, ``d = h / heads`` head size,
``kv = kv_heads * d``, ``I`` MLP width, ``V`` vocabulary, ``r`` LoRA rank; ``N`` completions per
micro-batch (``per_device_train_batch_size``), ``B`` completions generated at once
(``per_device_train_batch_size * steps_per_generation``: TRL generates a whole generation batch in one
call), ``P`` prompt tokens (the longest prompt of the batch: left padding), ``T`` completion tokens,
``S = P + T``.

The step has a generation phase and a training phase; they do not overlap, so

    peak = persistent + max(generation, training)

* persistent: base weights ``P_base * b``; LoRA weights ``P_lora * 4`` (PEFT keeps adapters in float32
  under a float16 / bfloat16 base); AdamW's two moments ``P_lora * 8`` (float32).
* generation: the static KV cache ``B * S * L * 2 * kv * b``; one layer's prefill workspace
  ``B * P * (3 I + 4 h) * b`` (no gradients are kept, so one layer's intermediates at a time); the
  last position's logits and their float32 sampling copy ``B * V * 8``; with ``fast_generation`` the
  snapshot of the adapted layers' base weights that :mod:`qae_lab.generation` restores them from,
  ``P_adapted * b``.
* training: LoRA gradients ``P_lora * 4``; activations (below); the loss forward's logits and their
  gradient, ``2 * rows * cols * 4`` (float32 log-softmax): with TRL's fused LM head (TRL >= 1.16, the
  trainer this project runs) one tile, rows = min(N T, 4096) tokens, cols = min(V, 32768); without
  it the whole ``N T x V`` (only completion positions are scored).
* activations, per token and layer (:func:`layer_activation_bytes`): what autograd keeps of a Qwen2
  decoder layer with LoRA on ``targets`` and scaled-dot-product attention that keeps no ``S x S``
  scores. With activation checkpointing: each layer's input ``L * N * S * h * b``, plus one layer
  recomputed in full ``N * S * a``, plus the final hidden states ``N * S * h * b``; without it,
  ``L * N * S * a``.

Not counted: the CUDA context (some hundreds of MB), autocast's cached half-precision copies of the
LoRA weights (``P_lora * b``), GradScaler state, rotary tables, the tokenizer's and dataloader's
tensors, and what ``torch.compile`` / CUDA graphs reserve for the compiled decode step.

>>> est = lora_grpo_memory(QWEN25["qwen2.5-0.5b"], dtype_bytes=2, lora_r=16, micro_batch=16,
...                        generation_batch=32, prompt_len=320, completion_len=256)
>>> round(est["peak"] / GIB, 2), max(("generation", "training"), key=est.get)
(3.18, 'training')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qae_lab._checks import check_int
from qae_lab.models import LORA_TARGETS

__all__ = ["Arch", "QWEN25", "GIB", "T4_MEMORY", "DTYPE_BYTES", "param_count", "lora_param_count",
           "layer_activation_bytes", "lora_grpo_memory", "run_memory", "run_shape", "PROMPT_TOKENS"]

GIB = 2 ** 30
T4_MEMORY = 15 * GIB
"""What a T4 (16 GB card) offers: ``torch.cuda.get_device_properties(0).total_memory`` is about 15 GiB."""
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
PROMPT_TOKENS = {"gsm8k": 320, "synthetic": 64, "sums": 64}
"""Assumed longest prompt of a batch, in tokens, chat template and the format system prompt included.
GSM8K's longest training prompt is 1,168 characters (99% are under 710), about 300 tokens at Qwen's
~4 characters a token (digits count one token each)."""
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
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), and heads of "
                             f"kv_heads ({self.kv_heads})")

    @property
    def kv(self) -> int:
        """Width of the key (and of the value) projection: kv_heads * head size."""
        return self.kv_heads * (self.hidden // self.heads)

    @classmethod
    def from_config(cls, config: Mapping) -> Arch:
        """From a Qwen2 ``config.json`` mapping (or a ``transformers`` config's ``to_dict()``)."""
        return cls(config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
                   config.get("num_key_value_heads", config["num_attention_heads"]), config["intermediate_size"],
                   config["vocab_size"], bool(config.get("tie_word_embeddings", False)))


# Qwen2.5-*-Instruct's config.json (the Hub's, as of 2025); all three tie the LM head to the embeddings
QWEN25 = {
    "qwen2.5-0.5b": Arch(896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": Arch(1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-3b": Arch(2048, 36, 16, 2, 11008, 151936, True),
}


def _linears(arch: Arch) -> dict[str, tuple[int, int]]:
    """Each decoder layer's projections, ``name: (in_features, out_features)``."""
    h, kv, i = arch.hidden, arch.kv, arch.intermediate
    return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _check_targets(arch: Arch, targets: Sequence[str]) -> list[str]:
    unknown = sorted(set(targets) - set(_linears(arch)))
    if unknown:
        raise ValueError(f"targets must be among {list(_linears(arch))}, got {unknown}")
    return list(dict.fromkeys(targets))


def param_count(arch: Arch) -> int:
    r"""Parameters of a Qwen2 causal LM: embeddings ``V h``; per layer the seven projections (biases on
    q, k, v only) and two RMSNorm weights; the final norm; an LM head ``V h`` unless tied.

    >>> param_count(QWEN25["qwen2.5-0.5b"]), param_count(QWEN25["qwen2.5-1.5b"])
    (494032768, 1543714304)
    """
    h = arch.hidden
    per_layer = sum(i * o for i, o in _linears(arch).values()) + (h + 2 * arch.kv) + 2 * h
    return arch.vocab * h * (1 if arch.tied else 2) + arch.layers * per_layer + h


def lora_param_count(arch: Arch, r: int, targets: Sequence[str] = LORA_TARGETS) -> int:
    r"""LoRA parameters: ``r * (in + out)`` for each adapted projection (A is r x in, B is out x r), every layer.

    >>> lora_param_count(QWEN25["qwen2.5-0.5b"], 16)   # 24 x 16 x (2 x 1792 + 2 x 1024 + 3 x 5760)
    8798208
    """
    check_int(r, "r", 1)
    linears = _linears(arch)
    return arch.layers * sum(r * sum(linears[t]) for t in _check_targets(arch, targets))


def layer_activation_bytes(arch: Arch, dtype_bytes: int, lora_r: int, targets: Sequence[str] = LORA_TARGETS) -> int:
    r"""Bytes autograd keeps per token of one Qwen2 decoder layer (the ``a`` of the module docstring).

    Counted: the two RMSNorms' inputs in float32 (``2 h * 4``) and outputs (``2 h b``); q, k, v
    (``(h + 2 kv) b``) and their rotated q, k (``(h + kv) b``); the attention
    output (``h b``); gate, up, SiLU(gate) and the product (``4 I b``); per adapted projection its
    dropped-out input (``in * b``), the dropout mask (``in`` bytes) and A's output (``r b``).

    >>> layer_activation_bytes(QWEN25["qwen2.5-0.5b"], 2, 16)   # 2 (11 h + 3 kv + 5 I + 7 r) + 14 h + I
    86752
    """
    h, kv, i, b = arch.hidden, arch.kv, arch.intermediate, dtype_bytes
    base = 2 * h * 4 + 2 * h * b + (h + 2 * kv) * b + (h + kv) * b + h * b + 4 * i * b
    linears = _linears(arch)
    lora = sum(linears[t][0] * (b + 1) + lora_r * b for t in _check_targets(arch, targets))
    return base + lora


def lora_grpo_memory(arch: Arch, *, dtype_bytes: int, lora_r: int, micro_batch: int, generation_batch: int,
                     prompt_len: int, completion_len: int, targets: Sequence[str] = LORA_TARGETS,
                     checkpointing: bool = True, fast_generation: bool = True,
                     fused_lm_head: bool = True) -> dict[str, int]:
    r"""Estimated peak GPU memory of one LoRA GRPO step, in bytes, with every term (module docstring).

    Args:
        arch: the model's :class:`Arch` (e.g. ``QWEN25["qwen2.5-0.5b"]``).
        dtype_bytes: bytes per weight and activation element: 2 (float16, bfloat16) or 4 (float32).
        lora_r: LoRA rank r >= 1; ``targets``: the adapted projections (default: all seven).
        micro_batch: N, completions per forward/backward (``per_device_train_batch_size``).
        generation_batch: B, completions generated in one call (``generation_batch_size``).
        prompt_len, completion_len: P and T in tokens.
        checkpointing: activation checkpointing on.
        fast_generation: qae_lab's fast path (a snapshot of the adapted base weights while generating).
        fused_lm_head: TRL's fused LM head (one logits tile) instead of the whole float32 logits.

    Returns:
        ``{term: bytes}``: ``weights``, ``lora``, ``optimizer``, ``kv_cache``, ``prefill``,
        ``sample_logits``, ``snapshot``, ``gradients``, ``activations``, ``loss_logits``, the phase sums
        ``persistent``, ``generation``, ``training``, and ``peak = persistent + max(generation, training)``.

    >>> est = lora_grpo_memory(QWEN25["qwen2.5-0.5b"], dtype_bytes=2, lora_r=16, micro_batch=16,
    ...                        generation_batch=32, prompt_len=320, completion_len=256, fused_lm_head=False)
    >>> est["loss_logits"] == 2 * 16 * 256 * 151936 * 4, round(est["peak"] / GIB, 2)
    (True, 6.82)
    """
    if dtype_bytes not in (2, 4):
        raise ValueError(f"dtype_bytes must be 2 (float16 / bfloat16) or 4 (float32), got {dtype_bytes!r}")
    for name, value in (("micro_batch", micro_batch), ("generation_batch", generation_batch),
                        ("prompt_len", prompt_len), ("completion_len", completion_len)):
        check_int(value, name, 1)
    b, h, L = dtype_bytes, arch.hidden, arch.layers
    n, s = micro_batch, prompt_len + completion_len
    p_lora = lora_param_count(arch, lora_r, targets)
    linears = _linears(arch)
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


def run_memory(run, cfg, *, bf16_gpu: bool = False, prompt_len: int | None = None,
               fused_lm_head: bool = True) -> dict[str, int]:
    r""":func:`lora_grpo_memory` for a built run (``qae_lab.presets.build``'s ``RunArgs`` and ``QAEConfig``).

    The model is ``run.model`` (a key of :data:`QWEN25`); ``run.dtype="auto"`` means bfloat16 where
    ``bf16_gpu`` (a bf16-capable GPU) else float32, as :func:`qae_lab.models.load_policy` decides;
    ``prompt_len`` defaults to :data:`PROMPT_TOKENS` of ``run.task``.

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
    return lora_grpo_memory(
        arch, dtype_bytes=dtype_bytes, lora_r=run.lora_r, micro_batch=cfg.per_device_train_batch_size,
        generation_batch=cfg.generation_batch_size, prompt_len=prompt_len,
        completion_len=cfg.max_completion_length, checkpointing=bool(cfg.gradient_checkpointing),
        fast_generation=bool(getattr(cfg, "fast_generation", False)), fused_lm_head=fused_lm_head)


def run_shape(run, bf16_gpu: bool, prompt_len: int | None = None) -> tuple[Arch, int, int]:
    r"""``(architecture, bytes per weight, prompt tokens)`` of a built run, as the estimates read it: the
    :data:`QWEN25` entry of ``run.model``; ``run.dtype``'s bytes, ``"auto"`` being bfloat16 where ``bf16_gpu``
    else float32 (as :func:`qae_lab.models.load_policy` decides); ``prompt_len``, else :data:`PROMPT_TOKENS` of
    ``run.task``.

    >>> from types import SimpleNamespace as NS
    >>> arch, b, p = run_shape(NS(model="qwen2.5-1.5b", dtype="auto", task="gsm8k"), bf16_gpu=False)
    >>> arch.layers, b, p
    (28, 4, 320)
    """
    if run.model not in QWEN25:
        raise ValueError(f"run.model must be one of {sorted(QWEN25)} (their architectures are stored here), "
                         f"got {run.model!r}")
    dtype_bytes = (2 if bf16_gpu else 4) if run.dtype == "auto" else DTYPE_BYTES[run.dtype]
    return QWEN25[run.model], dtype_bytes, prompt_len or PROMPT_TOKENS.get(run.task, 320)
