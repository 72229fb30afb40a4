"""Tests for qae_lab.task.models: the embedded model offline, LoRA wrapping, and the Qwen2.5 path (no download)."""

from __future__ import annotations

import pytest
import torch

from qae_lab.task import models
from qae_lab.task.data import prompt_text, synthetic_task
from qae_lab.task.models import LORA_TARGETS, QWEN_MODELS, embedded_dir, load_policy, lora_config, resolve_name


def test_embedded_loads_offline_and_generates():
    model, tok = load_policy("embedded", device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.float32
    assert tok.padding_side == "left" and tok.pad_token is not None and tok.eos_token == "<|im_end|>"
    assert sum(p.numel() for p in model.parameters()) < 3_000_000
    rec = synthetic_task(1, levels=(1,), seed=0)[0]
    batch = tok([prompt_text(rec, tok)], return_tensors="pt", add_special_tokens=False)
    out = model.generate(**batch, max_new_tokens=40, do_sample=False, pad_token_id=tok.pad_token_id)
    text = tok.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.startswith("<reasoning>\n") and "<answer>" in text  # it learned the format


def test_lora_wraps_attention_and_mlp_projections():
    model, _ = load_policy("embedded", lora=True, device="cpu")
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for target in LORA_TARGETS:
        assert any(f"{target}.lora_A" in n for n in trainable), target
    assert model.peft_config["default"].r == 16
    custom = lora_config(r=4, targets=("q_proj", "v_proj"))
    model, _ = load_policy("embedded", lora=custom, device="cpu")
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all(("q_proj" in n or "v_proj" in n) for n in names)
    assert model.peft_config["default"].lora_alpha == 8


def test_qwen_path_asks_for_safetensors_and_no_remote_code(monkeypatch):
    import transformers

    seen = {}

    class FakeModel(torch.nn.Module):
        def to(self, device):
            seen["device"] = device
            return self

    def fake_model(source, **kwargs):
        seen["model"] = (source, kwargs)
        return FakeModel()

    def fake_tok(source, **kwargs):
        seen["tok"] = (source, kwargs)
        return type("Tok", (), {"pad_token": None, "eos_token": "<|im_end|>", "padding_side": "right"})()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_tok)
    # the model's config.json, read first (its attention implementation is checked): Qwen2.5's names none
    monkeypatch.setattr(transformers.PretrainedConfig, "get_config_dict", lambda source, **kw: ({}, kw))
    _, tok = load_policy("qwen2.5-1.5b", dtype="bfloat16", device="cpu")
    source, kwargs = seen["model"]
    assert source == "Qwen/Qwen2.5-1.5B-Instruct"
    assert kwargs["use_safetensors"] is True and kwargs["trust_remote_code"] is False
    assert kwargs["dtype"] == torch.bfloat16 and seen["tok"][1]["trust_remote_code"] is False
    assert tok.pad_token == "<|im_end|>" and tok.padding_side == "left"
    load_policy("Qwen/Qwen2.5-3B-Instruct", device="cpu")
    assert seen["model"][0] == "Qwen/Qwen2.5-3B-Instruct" and seen["model"][1]["dtype"] == torch.float32


def test_names_and_errors(tmp_path, monkeypatch):
    assert set(QWEN_MODELS.values()) == {f"Qwen/Qwen2.5-{s}-Instruct" for s in ("0.5B", "1.5B", "3B")}
    assert resolve_name("QWEN2.5-0.5B") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_name("embedded") == str(embedded_dir())
    assert resolve_name("embedded-sums") == str(embedded_dir("embedded-sums")) != str(embedded_dir())
    with pytest.raises(ValueError, match="name must be one of"):
        embedded_dir("embedded-products")
    for bad in ("", "  ", None, 3):
        with pytest.raises(ValueError, match="name_or_path"):
            resolve_name(bad)
    with pytest.raises(ValueError, match="dtype"):
        load_policy("embedded", dtype="int8", device="cpu")
    for kwargs, name in (({"r": 0}, "r must"), ({"r": 2.0}, "r must"), ({"dropout": 1.0}, "dropout")):
        with pytest.raises(ValueError, match=name):
            lora_config(**kwargs)
    # the env var wins; a folder without the model is skipped, and with no model anywhere the error says how to rebuild
    monkeypatch.setenv(models.EMBEDDED_ENV, str(tmp_path))
    assert embedded_dir() != tmp_path
    monkeypatch.setattr(models, "__file__", str(tmp_path / "pkg" / "models.py"))
    with pytest.raises(FileNotFoundError, match="python -m tools.embedded_models"):
        embedded_dir()
    (tmp_path / "config.json").write_text("{}")
    assert embedded_dir() == tmp_path


def test_the_sums_model_loads_through_the_same_path_and_its_own_variable(tmp_path, monkeypatch):
    model, tok = load_policy("embedded-sums", device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM" and tok.padding_side == "left"
    assert tok.decode(tok("Add 12, 7 and 30.")["input_ids"]) == "Add 12, 7 and 30."
    monkeypatch.setenv(models.EMBEDDED_MODELS["embedded-sums"][2], str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert embedded_dir("embedded-sums") == tmp_path and embedded_dir() != tmp_path  # one variable per model
