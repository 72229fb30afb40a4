"""Tests for qae_lab.integrations.verl_saah (SA-AH as a verl policy loss): hand-computed cases and a fake
verl without verl, then (at the end) against verl 0.9.1's real policy-loss registry and actor loss.

The real-verl tests skip where verl is absent (the main environment); ``.ci/verl-registry`` installs
verl and sets ``QAE_LAB_REQUIRE_VERL=1``, which turns a missing verl into a failure there.
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import math
import sys
import types

import pytest
import torch
from verl_setup import block_verl, registry_fixture, stub_verl, verl_file

from qae_lab.integrations import verl_saah
from qae_lab.integrations.verl_saah import (
    compute_policy_loss_saah,
    response_advantages,
    saah_advantages,
    surprisal_normalised_entropy,
)
from qae_lab.loss import reduce_token_loss

V = 4  # vocabulary: a token of probability 1/2 has surprisal log 2 = 0.5 log V, so H~ = 0.5
ALPHA = 2.0  # then w_t = exp(-2 * 0.5 * t) = exp(-t) on a negative response's t-th token
A = (1.0, -1.0, 0.5, -0.25)  # response advantages: rows 1 and 3 are discounted
LENS = (5, 3, 4, 2)  # ragged responses, T = 5


def _batch():
    """verl-shaped (N, T) tensors: old log-probs log(1/2) on real tokens (0 on padding, as verl pads),
    token-level advantages A_i on the real tokens, bool response mask."""
    t = max(LENS)
    mask = torch.arange(t)[None, :] < torch.tensor(LENS)[:, None]  # (N, T) bool
    old = torch.where(mask, math.log(0.5), 0.0)  # (N, T)
    adv = torch.tensor(A)[:, None] * mask  # (N, T)
    return old, adv, mask


def _hand_weights():
    """w_{i,t} by hand: exp(-t) (t = 1, 2, ...) on a negative response's tokens, 1 on a positive one's."""
    rows = [
        [(math.exp(-(t + 1)) if a < 0 else 1.0) if t < n else 0.0 for t in range(max(LENS))] for a, n in zip(A, LENS)
    ]
    return torch.tensor(rows)


def _hand_loss(per_token_loss, mode):
    """S4 by hand, in Python floats: sum_t w l / sum_t w over the batch (token-mean), or per response
    then the mean over responses (seq-mean-token-mean)."""
    w = _hand_weights().tolist()
    losses = per_token_loss.tolist()
    if mode == "token-mean":
        return sum(wi * li for rw, rl in zip(w, losses) for wi, li in zip(rw, rl)) / sum(map(sum, w))
    return sum(sum(wi * li for wi, li in zip(rw, rl)) / sum(rw) for rw, rl in zip(w, losses)) / len(w)


# ---------------------------------------------------------------------------------------------
# The pure core, without verl
# ---------------------------------------------------------------------------------------------


def test_surprisal_is_half_log_v_here():
    old, _, mask = _batch()
    h = surprisal_normalised_entropy(old, mask, V)
    torch.testing.assert_close(h, 0.5 * mask.float())


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_hand_computed_weights_and_loss(mode):
    old, adv, mask = _batch()
    a_t, w = saah_advantages(adv, mask, surprisal_normalised_entropy(old, mask, V), ALPHA, mode)
    torch.testing.assert_close(w, _hand_weights())
    assert torch.all(w[0] == 1) and torch.all(w[2, :4] == 1)  # positive responses keep weight 1
    # on-policy (ratio 1) the surrogate is l_t = -A~_t; verl's reductions are qae_lab's bnpo / grpo ones
    loss = reduce_token_loss(-a_t, mask.float(), {"token-mean": "bnpo", "seq-mean-token-mean": "grpo"}[mode])
    assert loss.item() == pytest.approx(_hand_loss(-adv, mode), rel=1e-6, abs=1e-7)


def test_alpha_zero_changes_nothing():
    old, adv, mask = _batch()
    for mode in verl_saah.LOSS_AGG_MODES:
        a_t, w = saah_advantages(adv, mask, surprisal_normalised_entropy(old, mask, V), 0.0, mode)
        assert torch.equal(a_t, adv) and torch.equal(w, mask.float())


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda o, a, m: saah_advantages(a, m, torch.zeros(4, 5), 1.0, "token-sum"), "loss_agg_mode"),
        (lambda o, a, m: saah_advantages(a, m, torch.zeros(4, 5), float("nan")), "alpha"),
        (lambda o, a, m: saah_advantages(a, m, torch.full((4, 5), 2.0), 1.0), "h_norm"),
        (lambda o, a, m: saah_advantages(a, m[:, :4], torch.zeros(4, 5), 1.0), "response_mask"),
        (lambda o, a, m: response_advantages(a + torch.arange(5.0) * m, m), "constant along each response"),
        (lambda o, a, m: surprisal_normalised_entropy(o, m, 1), "vocab_size"),
        (lambda o, a, m: compute_policy_loss_saah(o, o, a, m), "vocab_size"),
        (lambda o, a, m: compute_policy_loss_saah(o, o, a, m, vocab_size=V, alpha=float("inf")), "alpha"),
        (lambda o, a, m: compute_policy_loss_saah(o, o, a, m, "seq-mean-token-sum", vocab_size=V), "loss_agg_mode"),
    ],
)
def test_bad_input(call, msg):
    old, adv, mask = _batch()
    with pytest.raises(ValueError, match=msg):
        call(old, adv, mask)


def _fake_verl(monkeypatch):
    """A verl-like core_algos: a name -> loss registry that overwrites silently, as verl 0.9.1's does."""
    registry = {}

    def register_policy_loss(name):
        def deco(fn):
            registry[name] = fn
            return fn

        return deco

    def get_policy_loss_fn(name):
        if name not in registry:
            raise ValueError(f"Unsupported loss mode: {name}")
        return registry[name]

    stub_verl(monkeypatch, register_policy_loss=register_policy_loss, get_policy_loss_fn=get_policy_loss_fn)
    return registry


def test_register_with_a_verl_like_registry(monkeypatch):
    registry = _fake_verl(monkeypatch)
    registry["vanilla"] = lambda *args, **kwargs: None
    fn = verl_saah.register(0.25, vocab_size=V)
    assert registry["sa_ah"] is fn and fn.func is compute_policy_loss_saah
    assert fn.keywords == {"alpha": 0.25, "vocab_size": V}
    assert verl_saah.register(0.5, vocab_size=V).keywords["alpha"] == 0.5  # again: the settings replaced
    with pytest.raises(ValueError, match="already verl's policy loss"):
        verl_saah.register(0.5, vocab_size=V, name="vanilla")  # verl would overwrite its own silently
    for kwargs, msg in (({"vocab_size": 1}, "vocab_size"), ({"vocab_size": V, "name": ""}, "name")):
        with pytest.raises(ValueError, match=msg):
            verl_saah.register(0.5, **kwargs)


def test_register_without_verl_raises_clear_import_error(monkeypatch):
    block_verl(monkeypatch)
    with pytest.raises(ImportError, match="needs verl"):
        verl_saah.register(0.5, vocab_size=V)


# ---------------------------------------------------------------------------------------------
# Against verl's real policy-loss registry and actor loss (verl 0.9.1, installed by .ci/verl-registry)
# ---------------------------------------------------------------------------------------------

# verl's core_algos, its policy-loss registry without "sa_ah" for the test and restored afterwards (skips without
# verl, unless QAE_LAB_REQUIRE_VERL=1)
core_algos = registry_fixture("POLICY_LOSS_REGISTRY", verl_saah.LOSS_NAME)


def _actor_config(**kwargs):
    """verl's own ActorConfig (the ``config`` its actor passes a policy loss), Clip-Higher's range."""
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=2, clip_ratio_low=0.2, clip_ratio_high=0.28, **kwargs
    )


def _off_policy_batch(seed=0):
    """The hand batch with log_prob != old_log_prob: ratios from 0.3 to 3.5, so that PPO's clip and
    dual clip are active on some tokens of both signs."""
    old, adv, mask = _batch()
    g = torch.Generator().manual_seed(seed)
    log_prob = (old + torch.empty(old.shape).uniform_(-1.2, 1.25, generator=g)).requires_grad_()
    return old, log_prob, adv, mask


def _loss_and_grad(fn, old, log_prob, adv, mask, mode, config, **kwargs):
    log_prob.grad = None
    loss, metrics = fn(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=None,
        **kwargs,
    )
    loss.backward()
    return loss.detach(), log_prob.grad.clone(), metrics


def test_real_registry_finds_sa_ah_by_name(core_algos):
    with pytest.raises(ValueError):
        core_algos.get_policy_loss_fn("sa_ah")  # not there before register()
    fn = verl_saah.register(0.5, vocab_size=151936)
    assert core_algos.get_policy_loss_fn("sa_ah") is fn and fn.func is compute_policy_loss_saah
    assert core_algos.get_policy_loss_fn("vanilla") is core_algos.compute_policy_loss_vanilla  # untouched
    with pytest.raises(ValueError, match="vanilla"):
        verl_saah.register(0.5, vocab_size=151936, name="vanilla")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("global_info", [False, True])
def test_real_alpha_zero_is_verls_vanilla(core_algos, mode, global_info):
    old, log_prob, adv, mask = _off_policy_batch()
    config = _actor_config(loss_agg_mode=mode)
    if global_info:  # as verl's ppo_loss fills it: the mini-batch's token count and size over dp ranks
        config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()) + 7, global_batch_size=6)
    sa_ah = verl_saah.register(0.0, vocab_size=V)
    want, want_grad, want_metrics = _loss_and_grad(
        core_algos.compute_policy_loss_vanilla, old, log_prob, adv, mask, mode, config
    )
    got, got_grad, metrics = _loss_and_grad(
        core_algos.get_policy_loss_fn("sa_ah"), old, log_prob, adv, mask, mode, config
    )
    assert sa_ah.keywords["alpha"] == 0.0
    assert (got - want).abs().item() == 0.0 and (got_grad - want_grad).abs().max().item() == 0.0  # bit for bit
    assert want_grad.abs().sum() > 0 and metrics["actor/pg_clipfrac"] == want_metrics["actor/pg_clipfrac"] > 0
    assert metrics["saah/w_mean_neg"] == 1.0 and metrics["saah/effective_tokens_frac"] == 1.0


def _check_alpha_positive(core_algos, fn, mode):
    """fn (a registered SA-AH loss, alpha = ALPHA, V = V) against the hand-computed weights:
    on-policy, its loss is the hand S4 loss; off-policy (clips active), its gradient is vanilla's
    times w_t c token by token, w by hand, c = sum(m) / sum(w) (per response in seq-mean-token-mean)."""
    config = _actor_config(loss_agg_mode=mode)
    old, adv, mask = _batch()
    on_policy = old.clone().requires_grad_()
    loss, _, metrics = _loss_and_grad(fn, old, on_policy, adv, mask, mode, config)
    assert loss.item() == pytest.approx(_hand_loss(-adv, mode), rel=1e-6, abs=1e-7)
    w = _hand_weights()
    n_neg = sum(n for a, n in zip(A, LENS) if a < 0)
    assert metrics["saah/w_mean_neg"] == pytest.approx(float(w[torch.tensor(A) < 0].sum()) / n_neg, rel=1e-6)
    old, log_prob, adv, mask = _off_policy_batch(seed=1)
    _, van_grad, _ = _loss_and_grad(core_algos.compute_policy_loss_vanilla, old, log_prob, adv, mask, mode, config)
    _, grad, _ = _loss_and_grad(fn, old, log_prob, adv, mask, mode, config)
    m = mask.float()
    c = m.sum() / w.sum() if mode == "token-mean" else m.sum(-1, keepdim=True) / w.sum(-1, keepdim=True)
    torch.testing.assert_close(grad, van_grad * w * c, rtol=1e-5, atol=1e-8)
    assert (van_grad[torch.tensor(A) < 0] != 0).sum() >= 3  # the comparison is not one of zeros


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_real_alpha_positive_differs_as_the_hand_weights_say(core_algos, mode):
    verl_saah.register(ALPHA, vocab_size=V)
    _check_alpha_positive(core_algos, core_algos.get_policy_loss_fn("sa_ah"), mode)


@pytest.mark.parametrize("mutant", ["weights on positive rows", "weights on every row (AH)", "no sum(w) normaliser"])
def test_real_hand_check_catches_wrong_weightings(core_algos, monkeypatch, mutant):
    # the check above must fail for an SA-AH that discounts the wrong rows or forgets S4
    real_weights, real_factor = verl_saah.selective_horizon_weights, verl_saah.normaliser_factor
    if mutant == "weights on positive rows":
        monkeypatch.setattr(
            verl_saah,
            "selective_horizon_weights",
            lambda h, m, a, alpha, selective=True: real_weights(h, m, -a, alpha, selective=selective),
        )
    elif mutant == "weights on every row (AH)":
        monkeypatch.setattr(
            verl_saah,
            "selective_horizon_weights",
            lambda h, m, a, alpha, selective=True: real_weights(h, m, a, alpha, selective=False),
        )
    else:
        monkeypatch.setattr(
            verl_saah,
            "normaliser_factor",
            lambda w, m, per_sequence=False: torch.ones_like(real_factor(w, m, per_sequence=per_sequence)),
        )
    verl_saah.register(ALPHA, vocab_size=V)
    with pytest.raises(AssertionError):
        _check_alpha_positive(core_algos, core_algos.get_policy_loss_fn("sa_ah"), "token-mean")


def test_real_exact_entropy_keyword_replaces_the_surprisal(core_algos):
    old, log_prob, adv, mask = _off_policy_batch()
    config = _actor_config()
    fn = verl_saah.register(ALPHA, vocab_size=V)
    surprisal, _, _ = _loss_and_grad(fn, old, log_prob, adv, mask, "token-mean", config)
    # exact H_t = 0.5 log V on every token: the same H~ as the surprisal here, so the same loss
    same, _, _ = _loss_and_grad(
        fn, old, log_prob, adv, mask, "token-mean", config, entropy=torch.full(old.shape, 0.5 * math.log(V))
    )
    zero, _, _ = _loss_and_grad(fn, old, log_prob, adv, mask, "token-mean", config, entropy=torch.zeros(old.shape))
    vanilla, _, _ = _loss_and_grad(
        core_algos.compute_policy_loss_vanilla, old, log_prob, adv, mask, "token-mean", config
    )
    torch.testing.assert_close(same, surprisal)
    torch.testing.assert_close(zero, vanilla)  # H = 0: every weight 1
    assert not torch.isclose(surprisal, vanilla)


def test_real_actor_passes_a_policy_loss_no_entropy(core_algos):
    # verl's ppo_loss (verl/workers/utils/losses.py) calls the registered loss with exactly these keywords:
    # the entropy it holds (model_output["entropy"]) goes to the entropy bonus only
    tree = ast.parse(verl_file("verl.workers.utils", "losses.py").read_text())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "ppo_loss")
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "policy_loss_fn"]
    assert len(calls) == 1 and not calls[0].args
    assert {kw.arg for kw in calls[0].keywords} == {
        "old_log_prob",
        "log_prob",
        "advantages",
        "response_mask",
        "loss_agg_mode",
        "config",
        "rollout_is_weights",
    }
    assert "config.policy_loss.get('loss_mode', 'vanilla')" in ast.unparse(func)  # the loss_mode key


@pytest.fixture
def ppo_loss(core_algos, monkeypatch):
    """verl's actor loss, ``verl.workers.utils.losses.ppo_loss``. Its module imports verl's dataset
    package for one enum, and that package imports ``datasets`` (not installed by .ci/verl-registry):
    then a stand-in module with the enum is put in its place for the test."""
    if importlib.util.find_spec("datasets") is None:
        stub = types.ModuleType("verl.utils.dataset.dataset_utils")
        stub.DatasetPadMode = enum.Enum("DatasetPadMode", {"NO_PADDING": "no_padding"})
        monkeypatch.setitem(sys.modules, "verl.utils.dataset", types.ModuleType("verl.utils.dataset"))
        monkeypatch.setitem(sys.modules, "verl.utils.dataset.dataset_utils", stub)
        monkeypatch.delitem(sys.modules, "verl.workers.utils.losses", raising=False)
    return importlib.import_module("verl.workers.utils.losses").ppo_loss


def _actor_call(ppo_loss, loss_mode, entropy_scale):
    """verl's ppo_loss on the off-policy batch, as its actor calls it: model output unpadded (prompt of
    3 tokens, then the response), batch fields padded; entropy in the model output, entropy_coeff 0."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import PolicyLossConfig

    old, lp, adv, mask = _off_policy_batch()
    p = 3
    seqs = []
    for row, n in zip(lp.detach(), LENS):  # verl reads a response's log-probs one position to the left
        seqs.append(torch.cat([torch.zeros(p - 1), row[:n], torch.zeros(1)]))
    log_probs = torch.cat(seqs).requires_grad_()
    n, t = mask.shape
    data = TensorDict(
        {
            "prompts": torch.ones(n, p, dtype=torch.long),
            "responses": torch.ones(n, t, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(n, p), mask.float()], 1).long(),
            "response_mask": mask.long(),
            "old_log_probs": old,
            "advantages": adv,
        },
        batch_size=[n],
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    config = _actor_config(policy_loss=PolicyLossConfig(loss_mode=loss_mode), entropy_coeff=0.0)
    entropy = torch.full(log_probs.shape, entropy_scale * math.log(V))
    loss, metrics = ppo_loss(config, {"log_probs": log_probs, "entropy": entropy}, data)
    loss.backward()
    return loss.detach(), log_probs.grad, metrics


def test_real_actor_loss_selects_sa_ah_by_loss_mode(core_algos, ppo_loss):
    verl_saah.register(0.0, vocab_size=V)
    van, van_grad, _ = _actor_call(ppo_loss, "vanilla", 0.5)
    got, grad, metrics = _actor_call(ppo_loss, "sa_ah", 0.5)
    assert "saah/w_mean_neg" in metrics and "saah/w_mean_neg" not in _actor_call(ppo_loss, "vanilla", 0.5)[2]
    assert torch.equal(got, van) and torch.equal(grad, van_grad)  # alpha = 0, through verl's own actor loss
    verl_saah.register(ALPHA, vocab_size=V)
    low, _, _ = _actor_call(ppo_loss, "sa_ah", 0.0)
    high, _, _ = _actor_call(ppo_loss, "sa_ah", 1.0)
    assert not torch.isclose(low, van)  # alpha > 0 reweights...
    assert torch.equal(low, high)  # ...but from the surprisal: the actor's entropy never reaches the loss
