"""Tests for qae_lab.task.rollouts: entropies against a per-position loop on a tiny random Qwen2,
sampling against sampling.generate and the strict verdict, hand cases, bad input."""

from __future__ import annotations

import pytest
import torch
import transformers
from testkit.step_setup import tiny_config

from qae_lab.horizon import normalised_entropy
from qae_lab.task import rollouts
from qae_lab.task.answers import strict_is_correct
from qae_lab.task.data import prompt_text, synthetic_task
from qae_lab.task.models import load_policy
from qae_lab.task.rollouts import (
    _completion_mask,
    completion_entropies,
    completion_logits,
    completion_logps,
    sample_groups,
    top_k_errors,
    uncertain_tokens,
)
from qae_lab.task.sampling import generate


@pytest.fixture(scope="module")
def embedded():
    """The embedded policy and its tokenizer (left padding, pad token set)."""
    return load_policy("embedded", device="cpu")


@pytest.fixture(scope="module")
def tiny(embedded):
    """A random 2-layer Qwen2 on the embedded tokenizer's vocabulary (high entropy everywhere)."""
    tok = embedded[1]
    cfg = tiny_config(tok, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).double(), tok


@pytest.fixture(scope="module")
def ragged(tiny):
    """3 records of different prompt lengths (real left padding), G = 2, right-padded ragged completions."""
    _, tok = tiny
    records = synthetic_task(3, levels=(1, 3, 5), seed=7)
    assert len({len(tok(prompt_text(r, tok), add_special_tokens=False)["input_ids"]) for r in records}) == 3
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, len(tok), (6, 7), generator=g)  # (N, T) ordinary tokens
    lengths = torch.tensor([7, 3, 1, 5, 6, 2])
    mask = (torch.arange(7)[None, :] < lengths[:, None]).float()  # (N, T) right-padded
    return records, torch.where(mask.bool(), ids, torch.full_like(ids, tok.pad_token_id)), mask


def loop_entropies(model, tok, records, ids, mask, top_k=None, temperature=1.0) -> torch.Tensor:
    """Reference: one unpadded forward per (row, position) over prompt + completion[:t]."""
    group = ids.shape[0] // len(records)
    out = torch.zeros(ids.shape, dtype=torch.float64)
    for i in range(ids.shape[0]):
        prompt = tok(prompt_text(records[i // group], tok), add_special_tokens=False)["input_ids"]
        for t in range(int(mask[i].sum())):
            seq = torch.tensor([prompt + ids[i, :t].tolist()])
            with torch.no_grad():
                z = model(seq).logits[0, -1] / temperature  # (V,) the distribution of token t
            out[i, t] = normalised_entropy(z, top_k)
    return out


# ---------------------------------------------------------------- entropies


def test_entropies_match_per_position_loop(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    h = completion_entropies(model, tok, records, ids, mask, batch_size=4)  # batches straddle prompts
    ref = loop_entropies(model, tok, records, ids, mask)
    assert h.shape == ids.shape and torch.allclose(h.double(), ref, atol=1e-6)
    assert bool((h[mask == 0] == 0).all()) and bool((h[mask == 1] > 0.5).all())  # random model: high entropy
    h5 = completion_entropies(model, tok, [prompt_text(r, tok) for r in records], ids, mask, top_k=5)
    assert torch.allclose(h5.double(), loop_entropies(model, tok, records, ids, mask, top_k=5), atol=1e-6)


def test_top_k_at_least_vocab_is_exact_and_top_1_is_zero(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    exact = completion_entropies(model, tok, records, ids, mask)
    assert torch.equal(completion_entropies(model, tok, records, ids, mask, top_k=len(tok)), exact)
    assert torch.equal(completion_entropies(model, tok, records, ids, mask, top_k=10 * len(tok)), exact)
    assert bool((completion_entropies(model, tok, records, ids, mask, top_k=1) == 0).all())  # one token: H = 0


def test_logits_and_temperature(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    z = completion_logits(model, tok, records, ids, mask)
    assert z.shape == (*ids.shape, len(tok)) and z.dtype == torch.float32
    hot = completion_entropies(model, tok, records, ids, mask, temperature=2.0)
    assert torch.allclose(hot, normalised_entropy(z / 2.0) * mask, atol=1e-6)
    # per-row prompts (N of them) give the same as B prompts repeated G times
    per_row = [prompt_text(r, tok) for r in records for _ in range(2)]
    assert torch.allclose(completion_logits(model, tok, per_row, ids, mask), z)


def test_completion_mask_hand():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 0, 0, 0], [5, 9, 2, 2]])  # EOS = 2, pad = 0
    assert _completion_mask(ids, [2]).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]]
    assert _completion_mask(ids, [2, 9])[3].tolist() == [1, 1, 0, 0]  # a second EOS id stops earlier


# ---------------------------------------------------------------- sampling


def test_sample_groups_on_the_embedded_model(embedded):
    model, tok = embedded
    records = synthetic_task(3, seed=0)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    ro = sample_groups(model, tok, records, 4, max_new_tokens=40, batch_size=2, seed=3)
    assert torch.equal(torch.get_rng_state(), state) and tok.padding_side == "left"
    n, t = ro.completion_ids.shape
    assert n == 12 and len(ro.completions) == 12 and ro.mask.shape == (n, t) and ro.rewards.shape == (12,)
    assert bool((ro.mask[:, 1:] <= ro.mask[:, :-1]).all()) and bool((ro.mask[:, 0] == 1).all())  # right-padded
    ended = ro.lengths < t  # stopped before the budget: the last real token is the EOS
    last = ro.completion_ids[torch.arange(n), ro.lengths.long() - 1]
    assert bool((last[ended] == tok.eos_token_id).all())
    assert bool((ro.completion_ids[ro.mask == 0] == tok.pad_token_id).all())
    # the same completions as sampling.generate with the same options and seeding
    same = generate(
        model, tok, ro.prompts, num_samples=4, do_sample=True, max_new_tokens=40, batch_size=2, seed=3, progress=False
    )
    assert [c for group in same for c in group] == ro.completions
    golds = [r["gold"] for r in records for _ in range(4)]
    assert ro.rewards.tolist() == [float(strict_is_correct(c, g)) for c, g in zip(ro.completions, golds)]
    assert 0 < ro.rewards.sum() < 12  # the embedded model solves some, not all
    assert ro.success_counts.tolist() == ro.rewards.view(3, 4).sum(1).tolist()
    again = sample_groups(model, tok, records, 4, max_new_tokens=40, batch_size=2, seed=3)
    assert again.completions == ro.completions and torch.equal(again.completion_ids, ro.completion_ids)
    assert sample_groups(model, tok, records, 4, max_new_tokens=40, batch_size=2, seed=4).completions != ro.completions
    h = completion_entropies(model, tok, ro.prompts, ro.completion_ids, ro.mask)
    assert h.shape == (n, t) and bool(((h >= 0) & (h <= 1)).all())


def test_sample_groups_rewards_only_answers_that_end_the_completion(embedded, monkeypatch):
    # the reward is the strict verdict: a right answer that runs on past </answer> scores 0
    model, tok = embedded
    record = synthetic_task(1, seed=0)[0]
    gold = record["gold"]
    done = f"<reasoning>\n{gold} = {gold}\n</reasoning>\n<answer>\n{gold}\n</answer>"
    texts = [done, done + "\n<reasoning>\n1 + 1 = 2", done.replace(f"\n{gold}\n</answer>", "\n-1\n</answer>"), done]
    rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, rows))
    chunk = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])  # (G, T)
    monkeypatch.setattr(rollouts, "generate_ids", lambda *a, **k: [chunk])
    ro = sample_groups(model, tok, [record], 4, max_new_tokens=width)
    assert ro.completions == texts
    assert ro.rewards.tolist() == [1.0, 0.0, 0.0, 1.0]


# ---------------------------------------------------------------- top-k errors and uncertain tokens


def test_top_k_errors_hand():
    z = torch.log(torch.tensor([[[0.5, 0.25, 0.25, 0.0], [0.25, 0.25, 0.25, 0.25]]]))  # V = 4, -inf allowed
    out = top_k_errors(z, torch.tensor([[1, 0]]), [1, 2, 4])  # the uniform row is padding
    assert out["k"] == [1, 2, 4]
    # exact H = 1.5 log 2 = 0.75 log 4; top-1: 0; top-2 renormalised {2/3, 1/3}
    h_top2 = -(2 / 3 * torch.log(torch.tensor(2 / 3)) + 1 / 3 * torch.log(torch.tensor(1 / 3))) / torch.log(
        torch.tensor(4.0)
    )
    assert out["mean_abs"] == pytest.approx([0.75, 0.75 - h_top2.item(), 0.0], abs=1e-6)
    assert out["mean_signed"] == pytest.approx([-0.75, h_top2.item() - 0.75, 0.0], abs=1e-6)
    assert out["tail_mass"] == pytest.approx([0.5, 0.25, 0.0], abs=1e-6)
    # random logits: the estimate never lies above the exact entropy, and its error shrinks to 0 at k = V
    z = 3.0 * torch.randn(4, 5, 50, generator=torch.Generator().manual_seed(0))
    out = top_k_errors(z, torch.ones(4, 5), [1, 5, 20, 49, 50])
    assert all(s <= 1e-7 for s in out["mean_signed"]) and out["mean_abs"][-1] == 0.0
    assert out["mean_abs"] == sorted(out["mean_abs"], reverse=True)


def test_uncertain_tokens_hand():
    class Tok:
        def decode(self, ids):
            return "abcdefgh"[ids[0]]

    ids = torch.tensor([[1, 2, 1, 3], [2, 2, 1, 0]])
    h = torch.tensor([[0.2, 0.5, 0.4, 0.9], [0.1, 0.3, 0.0, 0.7]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    assert uncertain_tokens(h, ids, mask, Tok(), min_count=1) == [
        ("d", pytest.approx(0.9), 1),
        ("c", pytest.approx(0.3), 3),
        ("b", pytest.approx(0.2), 3),
    ]
    assert [r[0] for r in uncertain_tokens(h, ids, mask, Tok(), n=1, min_count=2)] == ["c"]


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"group_size": 1}, "group_size"),
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"records": []}, "records"),
    ],
)
def test_sample_groups_bad_input(embedded, kwargs, match):
    model, tok = embedded
    args = {"records": synthetic_task(1), "group_size": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        sample_groups(model, tok, args.pop("records"), args.pop("group_size"), **args)


def test_entropies_bad_input(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    holes = mask.clone()
    holes[0, 2] = 0
    cases = [
        ((records, ids.float(), mask), {}, "completion_ids"),
        ((records, ids, mask[:, :3]), {}, "mask"),
        ((records, ids, holes), {}, "right-padded"),
        ((records + records[:1], ids, mask), {}, "divide"),
        (("a prompt", ids, mask), {}, "prompts"),
        ((records, ids, mask), {"top_k": 0}, "top_k"),
        ((records, ids, mask), {"temperature": -1.0}, "temperature"),
        ((records, ids + len(tok), mask), {}, "vocabulary"),
        ((records, ids, mask), {"batch_size": 0}, "batch"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            completion_entropies(model, tok, *args, **kwargs)
    with pytest.raises(ValueError, match="ks"):
        top_k_errors(torch.zeros(1, 1, 4), torch.ones(1, 1), [])
    with pytest.raises(ValueError, match="at least one real token"):
        top_k_errors(torch.zeros(1, 1, 4), torch.zeros(1, 1), [1])


# ---------------------------------------------------------------- log-probabilities, with gradient


def loop_logps(model, tok, records, ids, mask) -> torch.Tensor:
    """Reference: log pi(y_t | x, y_<t) from one unpadded forward per row."""
    group = ids.shape[0] // len(records)
    out = torch.zeros(ids.shape, dtype=torch.float64)
    for i in range(ids.shape[0]):
        prompt = tok(prompt_text(records[i // group], tok), add_special_tokens=False)["input_ids"]
        n = int(mask[i].sum())
        with torch.no_grad():
            z = model(torch.tensor([prompt + ids[i, :n].tolist()])).logits[0, len(prompt) - 1 : -1]  # (n, V)
        out[i, :n] = torch.log_softmax(z.double(), -1).gather(-1, ids[i, :n, None]).squeeze(-1)
    return out


def test_logps_match_a_per_row_loop_and_carry_the_gradient(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    model.train()
    tok.padding_side = "right"  # set to left for the forward, restored after
    lp = completion_logps(model, tok, records, ids, mask)  # (N, T), left padding of 3 prompt lengths
    assert lp.shape == ids.shape and lp.requires_grad and model.training and tok.padding_side == "right"
    tok.padding_side = "left"
    assert torch.allclose(lp.detach().double(), loop_logps(model, tok, records, ids, mask), atol=1e-5)
    assert bool((lp[mask == 0] == 0).all())
    model.zero_grad()
    lp[0, 2].backward()  # one token's log-prob: the weights get a gradient
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
    z = completion_logits(model, tok, records, ids, mask, temperature=2.0)
    want = torch.log_softmax(z, -1).gather(-1, ids[..., None]).squeeze(-1) * mask
    assert torch.allclose(
        completion_logps(model, tok, records, ids, mask, temperature=2.0).detach().float(), want, atol=1e-5
    )


def test_logps_bad_input(tiny, ragged):
    model, tok = tiny
    records, ids, mask = ragged
    for args, kwargs, match in [
        ((records, ids.float(), mask), {}, "completion_ids"),
        ((records, ids, mask[:, :3]), {}, "mask"),
        ((records, ids, mask), {"temperature": 0.0}, "temperature"),
        ((records, ids + len(tok), mask), {}, "vocabulary"),
    ]:
        with pytest.raises(ValueError, match=match):
            completion_logps(model, tok, *args, **kwargs)
