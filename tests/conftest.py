"""Fixtures shared by every test module."""

from __future__ import annotations

import os

import pytest
import torch

from qae_lab.threads import THREADS_ENV

# one thread for every run the tests start, in this process and the ones it starts (the command line, notebook kernels):
# the thread policy's own override (qae_lab.threads), unless the session names another count
os.environ.setdefault(THREADS_ENV, "1")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test may reach a model hub: any attempt fails loudly instead of hanging."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run far faster on one thread than on a busy 2-core machine's two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_qwen2():
    """A byte-level BPE tokenizer with a Qwen-style chat template and a random 2-layer Qwen2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from qae_lab.task.data import SYSTEM_PROMPT, synthetic_task
    from tools.embedded_models import CHAT_TEMPLATE

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([SYSTEM_PROMPT] + [r["question"] for r in synthetic_task(20)], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="right"
    )  # right: generate must switch to left and back
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen2ForCausalLM(cfg)
    return model, tok


@pytest.fixture(scope="session")
def tok():
    """The embedded model's tokenizer (left padding, pad token set): the trainer tests' vocabulary."""
    from qae_lab.task.models import load_policy

    return load_policy("embedded", device="cpu")[1]


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory):
    """A finished 4-step tiny run of the command line with a checkpoint every 2 steps (checkpoint-2, checkpoint-4),
    made once per test process; tests copy it before they change anything in it."""
    from testkit.tiny_runs import tiny_sets

    from qae_lab.__main__ import main

    out = tmp_path_factory.mktemp("saved") / "run"
    assert (
        main(["train", "--output-dir", str(out), *tiny_sets(["max_steps=4", "save_strategy=steps", "save_steps=2"])])
        == 0
    )
    return out
