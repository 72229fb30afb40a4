"""Tests for qae_lab.integrations.verl, with verl-shaped inputs and without verl installed."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from reference import ref_advantages

from qae_lab.advantages import group_advantages
from qae_lab.integrations import verl as qae_verl
from qae_lab.integrations.verl import compute_qae_outcome_advantage


def _verl_batch(scores, t=5, seed=0):
    """Outcome rewards on the last real token, verl-style, with ragged response lengths."""
    g = torch.Generator().manual_seed(seed)
    bs = len(scores)
    lengths = torch.randint(1, t + 1, (bs,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()  # (bs, T)
    rewards = torch.zeros(bs, t)
    rewards[torch.arange(bs), lengths - 1] = torch.as_tensor(scores, dtype=torch.float32)
    return rewards, mask


def test_interleaved_uids_match_contiguous_groups():
    rng = np.random.default_rng(0)
    b, g = 6, 8
    scores = (rng.random(b * g) < 0.5).astype(np.float32)
    uids = np.repeat([f"prompt-{i}" for i in range(b)], g)
    perm = rng.permutation(b * g)
    rewards, mask = _verl_batch(scores[perm])
    adv, ret = compute_qae_outcome_advantage(rewards, mask, uids[perm], config={"quantile_k": 0.4})
    want = group_advantages(torch.as_tensor(scores), g, k=0.4)[perm]  # (bs,)
    torch.testing.assert_close(adv, want[:, None] * mask)
    assert ret is adv or torch.equal(ret, adv)
    assert torch.all(adv[mask == 0] == 0)


def test_ragged_groups_each_use_their_own_size():
    scores = [1.0, 0, 0, 1, 1, 0, 0.5, 0.25]
    uids = np.array(["a", "a", "a", "b", "b", "b", "b", "b"])  # sizes 3 and 5
    rewards, mask = _verl_batch(scores)
    adv, _ = compute_qae_outcome_advantage(rewards, mask, uids, epsilon=1e-6, config={"quantile_k": 0.6})
    want = ref_advantages(scores[:3], 3, "quantile", 0.6, "paper", "group", 1e-6) + \
        ref_advantages(scores[3:], 5, "quantile", 0.6, "paper", "group", 1e-6)
    torch.testing.assert_close((adv * mask).sum(1) / mask.sum(1), torch.tensor(want), rtol=1e-5, atol=1e-6)


def test_std_switch_and_methods_and_config_kinds():
    scores = [1.0, 1, 1, 1, 1, 0, 0, 0]  # G=8, 5 of 8: the conventions disagree at K=0.4
    uids = np.array(["q"] * 8)
    rewards, mask = _verl_batch(scores)
    paper, _ = compute_qae_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=False)  # default K=0.4
    assert ((paper * mask).sum(1) / mask.sum(1)).tolist() == [0, 0, 0, 0, 0, -1, -1, -1]

    @dataclass
    class AlgoConfig:  # a verl-like config dataclass
        quantile_k: float = 0.4
        quantile_method: str = "linear"

    class DictConfigLike:  # OmegaConf's DictConfig answers .get
        def __init__(self, d):
            self._d = d

        def get(self, key, default=None):
            return self._d.get(key, default)

    for cfg in (AlgoConfig(), DictConfigLike({"quantile_k": 0.4, "quantile_method": "linear"}),
                {"quantile_k": 0.4, "quantile_method": "linear"}):
        lin, _ = compute_qae_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=False, config=cfg)
        assert ((lin * mask).sum(1) / mask.sum(1)).tolist() == pytest.approx([0.2] * 5 + [-0.8] * 3)
    # extra keyword arguments that verl passes to every estimator are accepted
    compute_qae_outcome_advantage(rewards, mask, uids, config=None, gamma=1.0, lam=1.0)


@pytest.mark.parametrize("kwargs,msg", [
    ({"index": np.array(["a", "a", "b"] + ["c"] * 3)}, "at least twice"),
    ({"index": np.array(["a"] * 5)}, "index must be a 1-D array of 6"),
    ({"config": {"quantile_k": 1.2}}, "quantile_k"),
    ({"config": {"quantile_k": 0.0}}, "quantile_k"),
    ({"config": {"quantile_method": "nearest"}}, "quantile_method"),
    ({"epsilon": float("nan")}, "epsilon"),
    ({"norm_adv_by_std_in_grpo": "yes"}, "norm_adv_by_std_in_grpo"),
    ({"response_mask": torch.ones(6, 4)}, "response_mask"),
    ({"token_level_rewards": torch.full((6, 5), float("nan"))}, "token_level_rewards must be finite"),
])
def test_bad_input(kwargs, msg):
    rewards, mask = _verl_batch([1.0, 0, 0, 1, 1, 0])
    args = {"token_level_rewards": rewards, "response_mask": mask, "index": np.array(["a", "b"] * 3)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        compute_qae_outcome_advantage(**args)


def test_register_without_verl_raises_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)  # import verl -> ImportError, even if installed
    with pytest.raises(ImportError, match="needs verl"):
        qae_verl.register()


def test_register_with_a_verl_like_registry(monkeypatch):
    registry = {}

    def register_adv_est(name):
        def deco(fn):
            if name in registry and registry[name] is not fn:
                raise ValueError("already registered")
            registry[name] = fn
            return fn
        return deco

    core = types.ModuleType("verl.trainer.ppo.core_algos")
    core.register_adv_est = register_adv_est
    for name in ("verl", "verl.trainer", "verl.trainer.ppo"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core)
    qae_verl.register()
    qae_verl.register()  # idempotent
    assert registry["qae"] is compute_qae_outcome_advantage
