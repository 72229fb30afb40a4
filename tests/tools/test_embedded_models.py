"""Tests for tools.embedded_models: noisy targets, the tokenizer, the config, a tiny rebuild, the committed model."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from qae_lab.task.data import synthetic_task
from tools.embedded_models import (
    CORRECT_RATE,
    TASKS,
    _batch,
    _buckets,
    SPECIAL_TOKENS,
    WRONG_OFFSETS,
    build_tokenizer,
    embedded_config,
    noisy_example,
    train_embedded,
)

_XML = re.compile(r"^<reasoning>\n(.+)\n</reasoning>\n<answer>\n(-?\d+)\n</answer>$", re.S)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_noisy_targets_hit_their_rate_and_stay_consistent():
    rng = random.Random(0)
    recs = synthetic_task(5000, seed=1)
    right = {lv: [] for lv in CORRECT_RATE}
    for rec in recs:
        text = noisy_example(rec, rng)
        steps, answer = _XML.match(text).groups()
        last = steps.splitlines()[-1]
        assert last.rsplit("= ", 1)[1] == answer  # reasoning and answer agree, right or wrong
        assert steps.splitlines()[:-1] == rec["steps"][:-1]  # only the last step is changed
        offset = int(answer) - int(rec["gold"])
        assert offset == 0 or offset in WRONG_OFFSETS
        right[rec["level"]].append(offset == 0)
    for level, hits in right.items():
        q, n = CORRECT_RATE[level], len(hits)
        assert abs(sum(hits) / n - q) < 4 * (q * (1 - q) / n) ** 0.5, level  # within 4 standard errors
    assert list(CORRECT_RATE.values()) == sorted(CORRECT_RATE.values(), reverse=True)  # harder -> noisier


def test_tokenizer_digits_special_tokens_and_round_trip(tokenizer):
    ids = tokenizer("Ava has 1234 pens.", add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert [t.lstrip("Ġ") for t in tokens if t.lstrip("Ġ").isdigit()] == ["1", "2", "3", "4"]
    for s in SPECIAL_TOKENS:
        assert len(tokenizer(s, add_special_tokens=False)["input_ids"]) == 1
    text = "Ünïcode and GSM8K: $1,234.50 — fine\n<answer>\n7\n</answer>"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    msgs = [{"role": "user", "content": "hi"}]
    assert (
        tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_config_is_a_small_qwen2():
    cfg = embedded_config(500)
    assert cfg.model_type == "qwen2" and cfg.vocab_size == 500 and cfg.tie_word_embeddings
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0


def test_a_tiny_rebuild_saves_a_loadable_model(tmp_path, monkeypatch):
    from qae_lab.task.models import EMBEDDED_ENV, load_policy

    out = train_embedded(tmp_path / "emb", steps=2, batch_size=4, log_every=1)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(out.glob("*.bin")) and not list(out.glob("*.pt"))  # safetensors only
    monkeypatch.setenv(EMBEDDED_ENV, str(out))
    model, tok = load_policy("embedded", device="cpu")
    assert model.config.eos_token_id == tok.eos_token_id and model.generation_config.pad_token_id == tok.pad_token_id


def test_the_sums_task_builds_its_own_tokenizer_and_model(tmp_path, monkeypatch):
    from qae_lab.task.models import EMBEDDED_MODELS, load_policy

    tok = build_tokenizer(task="sums")
    assert tok.decode(tok("Wait, let me check: 42 + 7 = 49.")["input_ids"]) == "Wait, let me check: 42 + 7 = 49."
    assert len(tok("Wait, let me check:")["input_ids"]) < len(build_tokenizer()("Wait, let me check:")["input_ids"])
    out = train_embedded(tmp_path / "sums", task="sums", steps=2, batch_size=4, log_every=1)
    monkeypatch.setenv(EMBEDDED_MODELS["embedded-sums"][2], str(out))
    model, _ = load_policy("embedded-sums", device="cpu")
    assert model.config.vocab_size == len(tok)
    with pytest.raises(ValueError, match="task must be one of"):
        train_embedded(tmp_path / "x", task="products", steps=1)


def test_length_buckets_give_the_batch_gradient():
    """Cutting a batch by length into micro-batches changes the padding, not the gradient of the mean loss."""
    import torch
    from transformers import Qwen2ForCausalLM

    tok = build_tokenizer(task="sums")
    batch = _batch(tok, random.Random(3), 8, TASKS["sums"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(embedded_config(len(tok), hidden=32, layers=1, heads=2)).double()
    model(**batch).loss.backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    parts = _buckets(batch, 4)
    assert sum(share for _, share in parts) == pytest.approx(1.0) and len(parts) == 4
    assert sum(part["input_ids"].numel() for part, _ in parts) < batch["input_ids"].numel()  # less padding
    for part, share in parts:
        (model(**part).loss * share).backward()
    # float64: equal up to the summation order of differently shaped batches
    assert all(torch.allclose(a, p.grad, rtol=1e-6, atol=1e-8) for a, p in zip(whole, model.parameters()))


def test_command_line_help(capsys):
    """``python -m tools.embedded_models`` is its ``main`` (the module's last line): its help, and a refused --steps."""
    from tools import embedded_models
    from tools.embedded_models import main

    assert Path(embedded_models.__file__).read_text().rstrip().splitlines()[-2:] == [
        'if __name__ == "__main__":',
        "    main()",
    ]
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "--steps" in out and "--out" in out and "--task" in out
    with pytest.raises(SystemExit) as bad:
        main(["--steps", "0"])
    assert bad.value.code != 0 and "--steps" in capsys.readouterr().err


@pytest.mark.slow(seconds=7)
def test_committed_model_lands_in_its_measured_band():
    """The committed model, evaluated offline on CPU: the band measured at build time (data/embedded/README.md:
    sampled pass@1 0.38, pass@8 0.89, greedy 0.76 on 500 problems) with room for sampling noise on 100."""
    from qae_lab.task.evaluate import evaluate
    from qae_lab.task.models import load_policy

    model, tok = load_policy("embedded", device="cpu")
    result = evaluate(
        model,
        tok,
        synthetic_task(100, seed=1000),
        num_samples=8,
        ks=(1, 8),
        max_new_tokens=48,
        batch_size=25,
        seed=0,
        progress=False,
    )
    s = result.summary
    assert 0.28 <= s["pass@1"] <= 0.50, s
    assert s["pass@8"] >= 0.80 and 0.65 <= s["greedy_pass@1"] <= 0.90, s
    assert s["extracted_frac"] >= 0.95, s  # it answers in the format
    assert result.by_level[1]["pass@1"] > result.by_level[5]["pass@1"]  # harder levels are harder
    rates = result.success_rates()
    assert sum(p <= 0.6 for p in rates) >= 15 and sum(p > 0.6 for p in rates) >= 15  # both QAE regimes (K = 0.4)
