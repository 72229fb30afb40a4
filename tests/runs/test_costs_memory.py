"""qae_lab.runs.costs (a LoRA GRPO step's estimated peak memory), the T4 preset it sizes, and notebook 04's choice
of preset on a T4, an A100 and no GPU (qae_lab.runs.presets.device_preset behind qae_lab.lab.live.auto_preset)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from qae_lab.lab.live import auto_preset
from qae_lab.runs.costs import (
    GIB,
    QWEN25,
    T4_MEMORY,
    Arch,
    layer_activation_bytes,
    lora_grpo_memory,
    lora_param_count,
    param_count,
    run_memory,
)
from qae_lab.task.models import embedded_dir
from qae_lab.runs.presets import build

Q05, Q15 = QWEN25["qwen2.5-0.5b"], QWEN25["qwen2.5-1.5b"]


# ---------------------------------------------------------------- parameter counts


def test_parameter_counts_are_qwen25s_published_ones():
    # Qwen2.5-0.5B: 0.49B parameters, 1.5B: 1.54B (their model cards)
    assert round(param_count(Q05) / 1e6) == 494 and round(param_count(Q15) / 1e7) == 154
    # by hand, 0.5B: embeddings 151936 x 896; per layer q 896x896+896, k and v 896x128+128 each, o 896x896,
    # MLP 3 x 896 x 4864, two norms 2 x 896; 24 layers; the final norm 896
    per_layer = 896 * 896 + 896 + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert param_count(Q05) == 151936 * 896 + 24 * per_layer + 896
    untied = Arch(896, 24, 14, 2, 4864, 151936, tied=False)
    assert param_count(untied) - param_count(Q05) == 151936 * 896  # an LM head of its own


def test_the_embedded_models_count_matches_its_weights():
    import json

    from qae_lab.task.models import load_policy

    arch = Arch.from_config(json.loads((embedded_dir() / "config.json").read_text()))
    model, _ = load_policy("embedded", device="cpu")
    assert param_count(arch) == sum(p.numel() for p in model.parameters())
    peft_model, _ = load_policy("embedded", lora=True, device="cpu")
    assert lora_param_count(arch, 16) == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


def test_lora_counts_by_hand():
    # r (in + out) per adapted projection: q only, 24 layers of 16 x (896 + 896)
    assert lora_param_count(Q05, 16, ["q_proj"]) == 24 * 16 * 1792
    assert lora_param_count(Q05, 8) * 2 == lora_param_count(Q05, 16)
    with pytest.raises(ValueError, match="targets must be among"):
        lora_param_count(Q05, 16, ["qkv"])


# ---------------------------------------------------------------- the estimate's terms


def _small(**kw):
    # a toy architecture whose terms are easy to compute by hand: h 8, 2 layers, 2 heads of 4, 1 KV head, I 16, V 32
    args = dict(
        dtype_bytes=2, lora_r=1, micro_batch=2, generation_batch=4, prompt_len=3, completion_len=5, targets=["q_proj"]
    )
    return lora_grpo_memory(Arch(8, 2, 2, 1, 16, 32), **{**args, **kw})


def test_terms_by_hand():
    est = _small(fused_lm_head=False)
    p_lora = 2 * 1 * (8 + 8)  # q only: r (in + out), 2 layers
    assert (est["lora"], est["optimizer"], est["gradients"]) == (4 * p_lora, 8 * p_lora, 4 * p_lora)
    assert est["kv_cache"] == 4 * (3 + 5) * 2 * 2 * 4 * 2  # B S L (K and V) kv b
    assert est["prefill"] == 4 * 3 * (3 * 16 + 4 * 8) * 2  # B P (3 I + 4 h) b
    assert est["sample_logits"] == 4 * 32 * 8
    assert est["snapshot"] == 2 * 8 * 8 * 2  # the q weights of 2 layers, b bytes each
    assert est["loss_logits"] == 2 * (2 * 5) * 32 * 4  # value and gradient of N T x V float32 logits
    # per token and layer: norms 2h*4 + 2hb, q k v (h+2kv)b, rotated (h+kv)b, attention hb, MLP 4Ib;
    # LoRA on q: its dropped input hb, the mask h bytes, A's output rb
    a = 2 * 8 * 4 + 2 * 8 * 2 + (8 + 8) * 2 + (8 + 4) * 2 + 8 * 2 + 4 * 16 * 2 + (8 * 3 + 2)
    assert layer_activation_bytes(Arch(8, 2, 2, 1, 16, 32), 2, 1, ["q_proj"]) == a
    s = 8
    assert est["activations"] == 2 * 2 * s * 8 * 2 + 2 * s * a + 2 * s * 8 * 2  # inputs, one layer, final
    assert _small(checkpointing=False)["activations"] == 2 * 2 * s * a
    assert est["peak"] == est["persistent"] + max(est["generation"], est["training"])
    assert _small(fast_generation=False)["snapshot"] == 0


def test_the_fused_head_keeps_one_tile():
    big = dict(micro_batch=16, generation_batch=32, prompt_len=320, completion_len=256, lora_r=16, dtype_bytes=2)
    fused, full = (lora_grpo_memory(Q05, **big, fused_lm_head=f)["loss_logits"] for f in (True, False))
    assert fused == 2 * 4096 * 32768 * 4 and full == 2 * 16 * 256 * 151936 * 4


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"dtype_bytes": 1}, "dtype_bytes must be 2"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"completion_len": -1}, "completion_len"),
    ],
)
def test_bad_input_names_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        _small(**bad)


def test_arch_checks_its_shape():
    with pytest.raises(ValueError, match="multiple of heads"):
        Arch(10, 2, 3, 1, 16, 32)


# ---------------------------------------------------------------- the presets on a T4


def test_the_t4_preset_fits_a_t4_and_the_15b_presets_do_not(tmp_path):
    run, cfg = build("qwen2.5-0.5b-gsm8k-t4", output_dir=str(tmp_path))
    assert (run.model, run.dtype, cfg.fp16, cfg.bf16) == ("qwen2.5-0.5b", "float16", True, False)
    assert (cfg.num_generations, cfg.generation_batch_size, cfg.max_completion_length) == (8, 32, 256)
    est = run_memory(run, cfg)
    assert est["peak"] < 0.5 * T4_MEMORY, est["peak"] / GIB  # TRL's fused LM head: a quarter of the card
    assert run_memory(run, cfg, fused_lm_head=False)["peak"] < 0.5 * T4_MEMORY  # even with the whole logits
    # the 1.5B preset on a T4: dtype "auto" is float32 there (no bf16)
    run15, cfg15 = build("qwen2.5-1.5b-gsm8k", output_dir=str(tmp_path))
    assert run_memory(run15, cfg15, bf16_gpu=False)["peak"] > T4_MEMORY
    live, live_cfg = build("qwen2.5-1.5b-gsm8k-live", output_dir=str(tmp_path))
    assert run_memory(live, live_cfg, bf16_gpu=False)["peak"] > 0.9 * T4_MEMORY  # no headroom left


def test_run_memory_refuses_what_it_cannot_estimate(tmp_path):
    run, cfg = build("qwen2.5-0.5b-gsm8k-t4", output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="run.model must be one of"):
        run_memory(SimpleNamespace(**{**vars(run), "model": "embedded"}), cfg)
    with pytest.raises(ValueError, match="run.lora must be True"):
        run_memory(SimpleNamespace(**{**vars(run), "lora": False}), cfg)


# ---------------------------------------------------------------- notebook 04's choice


def _gpu(monkeypatch, name, gib, bf16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: name is not None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=int(gib * GIB), name=name)
    )
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


@pytest.mark.parametrize(
    "name,gib,bf16,expected",
    [
        ("Tesla T4", 14.7, False, "qwen2.5-0.5b-gsm8k-t4"),
        ("Tesla V100-SXM2-16GB", 15.8, False, "qwen2.5-0.5b-gsm8k-t4"),  # the same limits, not the name, decide
        ("Tesla V100-SXM2-32GB", 31.7, False, "qwen2.5-1.5b-gsm8k-live"),
        ("NVIDIA A100-SXM4-40GB", 39.4, True, "qwen2.5-1.5b-gsm8k-live"),
        ("NVIDIA L4", 22.0, True, "qwen2.5-1.5b-gsm8k-live"),
        (None, 0, False, "cpu-demo"),
    ],
)
def test_auto_preset_picks_by_the_device(monkeypatch, name, gib, bf16, expected):
    _gpu(monkeypatch, name, gib, bf16)
    preset, why = auto_preset("qwen2.5-1.5b-gsm8k-live")
    assert preset == expected, why
    if name:
        assert name in why and expected in why
    if expected.endswith("-t4"):
        assert "float16" in why and "qwen2.5-1.5b-gsm8k-live" in why  # says what it chose instead of what
