"""Tests for qae_lab.task.sampling: the one generation loop on a tiny random Qwen2 (tests/conftest.py's
``tiny_qwen2``): shapes, left padding, seeding, decoding options that must not leak in from the
checkpoint, EOS ids, state restored on error, the progress bar, bad input."""

from __future__ import annotations

import pytest
import torch

from qae_lab.task.data import prompt_text, synthetic_task
from qae_lab.task.sampling import generate, generate_ids


@pytest.fixture(scope="session")
def prompts(tiny_qwen2):
    _, tok = tiny_qwen2
    # levels 1, 3, 5 have questions of different lengths: the batch needs real left padding
    ps = [prompt_text(r, tok) for r in synthetic_task(3, levels=(1, 3, 5), seed=7)]
    assert len({len(tok(p, add_special_tokens=False)["input_ids"]) for p in ps}) == 3
    return ps


def test_generate_shapes_and_padding_side_restored(tiny_qwen2, prompts):
    model, tok = tiny_qwen2
    out = generate(model, tok, prompts, num_samples=3, do_sample=True, max_new_tokens=6, batch_size=2, progress=False)
    assert len(out) == len(prompts) and all(len(s) == 3 for s in out)
    assert all(isinstance(x, str) for s in out for x in s)
    assert not any(x.startswith("<|im_start|>") or "Solve the problem" in x for s in out for x in s)  # no echo
    assert tok.padding_side == "right"
    # one new token: each completion is the decoding of a single vocabulary entry, not of the prompt
    one = generate(model, tok, prompts, num_samples=2, do_sample=True, max_new_tokens=1, progress=False)
    vocab = {tok.decode([i], skip_special_tokens=True) for i in range(len(tok))}
    assert all(x in vocab for s in one for x in s)
    greedy = generate(model, tok, prompts, max_new_tokens=6, progress=False)
    assert len(greedy) == 3 and all(len(s) == 1 for s in greedy)
    assert tok.padding_side == "right"


def test_generate_decodes_the_one_sampling_loop(tiny_qwen2, prompts):
    # generate_ids (also qae_lab.task.rollouts.sample_groups's loop) gives the ids that generate decodes
    model, tok = tiny_qwen2
    kw = {"num_samples": 2, "do_sample": True, "max_new_tokens": 5, "batch_size": 2, "seed": 4, "progress": False}
    chunks = generate_ids(model, tok, prompts, **kw)
    assert [c.shape[0] for c in chunks] == [4, 2] and all(c.shape[1] <= 5 and c.device.type == "cpu" for c in chunks)
    texts = [t for c in chunks for t in tok.batch_decode(c, skip_special_tokens=True)]
    assert [x for s in generate(model, tok, prompts, **kw) for x in s] == texts
    assert tok.padding_side == "right"


def test_left_padding_does_not_change_greedy(tiny_qwen2, prompts):
    model, tok = tiny_qwen2
    batched = generate(model, tok, prompts, max_new_tokens=8, batch_size=3, progress=False)
    single = [generate(model, tok, [p], max_new_tokens=8, batch_size=1, progress=False)[0] for p in prompts]
    assert batched == single
    assert generate(model, tok, prompts, max_new_tokens=8, batch_size=3, progress=False) == batched  # repeatable


def test_sampling_deterministic_by_seed_and_leaves_rng_alone(tiny_qwen2, prompts):
    model, tok = tiny_qwen2
    kw = {"num_samples": 2, "do_sample": True, "max_new_tokens": 6, "batch_size": 2, "progress": False}
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = generate(model, tok, prompts, seed=5, **kw)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random stream is untouched
    assert generate(model, tok, prompts, seed=5, **kw) == a
    assert generate(model, tok, prompts, seed=6, **kw) != a
    assert len({x for s in a for x in s}) == 6  # distinct samples (a random model spreads its mass)


def test_each_batch_has_its_own_seed(tiny_qwen2, prompts):
    # batch i is sampled after manual_seed(seed + i): pinned prompt by prompt with one prompt per batch
    model, tok = tiny_qwen2
    kw = {"num_samples": 2, "do_sample": True, "max_new_tokens": 6, "batch_size": 1, "progress": False}
    batched = generate(model, tok, prompts, seed=5, **kw)
    assert batched == [generate(model, tok, [p], seed=5 + i, **kw)[0] for i, p in enumerate(prompts)]
    # the same prompt in two batches is not sampled alike
    twice = generate(model, tok, [prompts[0], prompts[0]], seed=5, **kw)
    assert twice[0] == batched[0] and twice[1] != twice[0]


def test_checkpoint_sampling_defaults_do_not_leak(tiny_qwen2, prompts, monkeypatch):
    # a checkpoint shipping top_k=1 would make every sample the greedy one; we sample from the full softmax
    model, tok = tiny_qwen2
    monkeypatch.setattr(model.generation_config, "top_k", 1)
    monkeypatch.setattr(model.generation_config, "repetition_penalty", 5.0)
    out = generate(model, tok, prompts[:1], num_samples=4, do_sample=True, max_new_tokens=6, progress=False)
    assert len(set(out[0])) == 4


def test_model_eos_ids_stop_generation(tiny_qwen2, prompts, monkeypatch):
    model, tok = tiny_qwen2
    with torch.no_grad():  # the greedy first token, by a plain forward pass
        t0 = int(model(**tok(prompts[0], return_tensors="pt", add_special_tokens=False)).logits[0, -1].argmax())
    first = tok.decode([t0], skip_special_tokens=True)
    assert generate(model, tok, prompts[:1], max_new_tokens=8, progress=False) != [[first]]
    # the model's generation_config names an extra EOS id (as Qwen2.5-Instruct's does): generation stops there
    monkeypatch.setattr(model.generation_config, "eos_token_id", [tok.eos_token_id, t0])
    assert generate(model, tok, prompts[:1], max_new_tokens=8, progress=False) == [[first]]


def test_generate_restores_state_on_error(tiny_qwen2, prompts, monkeypatch):
    model, tok = tiny_qwen2
    model.train()

    def boom(*args, **kwargs):
        assert not model.training and tok.padding_side == "left" and not torch.is_grad_enabled()
        raise RuntimeError("boom")

    monkeypatch.setattr(model, "generate", boom)
    with pytest.raises(RuntimeError, match="boom"):
        generate(model, tok, prompts, progress=False)
    assert model.training and tok.padding_side == "right"
    model.eval()


def test_generate_progress_bar(tiny_qwen2, prompts, capsys):
    model, tok = tiny_qwen2
    generate(model, tok, prompts[:1], max_new_tokens=1, progress=True)
    assert "greedy" in capsys.readouterr().err
    generate(model, tok, prompts[:1], num_samples=2, do_sample=True, max_new_tokens=1, progress=True)
    assert "sampling x2" in capsys.readouterr().err


def test_generate_bad_input(tiny_qwen2, prompts):
    model, tok = tiny_qwen2
    for kwargs, name in [
        ({"num_samples": 2}, "num_samples"),
        ({"num_samples": 0, "do_sample": True}, "num_samples"),
        ({"do_sample": "yes"}, "do_sample"),
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"seed": 1.5}, "seed"),
    ]:
        with pytest.raises(ValueError, match=rf"^{name} must"):
            generate(model, tok, prompts, progress=False, **kwargs)
    for bad in ([], "a prompt", [1, 2]):
        with pytest.raises(ValueError, match="prompts"):
            generate(model, tok, bad, progress=False)
    pad = tok.pad_token
    tok.pad_token = None
    try:
        with pytest.raises(ValueError, match="pad_token"):
            generate(model, tok, prompts, progress=False)
    finally:
        tok.pad_token = pad
    assert tok.padding_side == "right"
