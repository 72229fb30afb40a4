"""Tests for qae_lab.integrations.verl: with verl-shaped inputs and a fake verl, and (at the end)
against verl's real advantage-estimator registry.

The real-verl tests skip where verl is absent (the main environment). ``.ci/verl-registry``
installs verl 0.9.1 in its own environment and sets ``QAE_LAB_REQUIRE_VERL=1``, which turns a
missing verl into a failure there, so that job cannot pass by skipping them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from testkit.reference import ref_advantages
from verl_setup import block_verl, registry_fixture, stub_verl, verl_file

from qae_lab.advantages import group_advantages, quantile_baseline
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
    want = ref_advantages(scores[:3], 3, "quantile", 0.6, "paper", "group", 1e-6) + ref_advantages(
        scores[3:], 5, "quantile", 0.6, "paper", "group", 1e-6
    )
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

    for cfg in (
        AlgoConfig(),
        DictConfigLike({"quantile_k": 0.4, "quantile_method": "linear"}),
        {"quantile_k": 0.4, "quantile_method": "linear"},
    ):
        lin, _ = compute_qae_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=False, config=cfg)
        assert ((lin * mask).sum(1) / mask.sum(1)).tolist() == pytest.approx([0.2] * 5 + [-0.8] * 3)
    # extra keyword arguments that verl passes to every estimator are accepted
    compute_qae_outcome_advantage(rewards, mask, uids, config=None, gamma=1.0, lam=1.0)


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"index": np.array(["a", "a", "b"] + ["c"] * 3)}, "at least twice"),
        ({"index": np.array(["a"] * 5)}, "index must be a 1-D array of 6"),
        ({"config": {"quantile_k": 1.2}}, "quantile_k"),
        ({"config": {"quantile_k": 0.0}}, "quantile_k"),
        ({"config": {"quantile_method": "nearest"}}, "quantile_method"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"norm_adv_by_std_in_grpo": "yes"}, "norm_adv_by_std_in_grpo"),
        ({"response_mask": torch.ones(6, 4)}, "response_mask"),
        ({"token_level_rewards": torch.full((6, 5), float("nan"))}, "token_level_rewards must be finite"),
    ],
)
def test_bad_input(kwargs, msg):
    rewards, mask = _verl_batch([1.0, 0, 0, 1, 1, 0])
    args = {"token_level_rewards": rewards, "response_mask": mask, "index": np.array(["a", "b"] * 3)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        compute_qae_outcome_advantage(**args)


def test_register_without_verl_raises_clear_import_error(monkeypatch):
    # import verl -> ImportError, even where verl is installed and already imported
    block_verl(monkeypatch)
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

    stub_verl(monkeypatch, register_adv_est=register_adv_est)
    qae_verl.register()
    qae_verl.register()  # idempotent
    assert registry["qae"] is compute_qae_outcome_advantage


# ---------------------------------------------------------------------------------------------
# Against verl's real registry (verl 0.9.1, installed by .ci/verl-registry)
# ---------------------------------------------------------------------------------------------

# verl's core_algos, its estimator registry without "qae" for the test and restored afterwards (skips without verl,
# unless QAE_LAB_REQUIRE_VERL=1)
core_algos = registry_fixture("ADV_ESTIMATOR_REGISTRY", qae_verl.ESTIMATOR_NAME)


def _call_like_verl(fn, rewards, mask, uids, config):
    """How verl's ``compute_advantage`` calls a registered estimator: exactly these keywords
    (pinned by test_real_verl_calls_registered_estimators_with_these_keywords)."""
    return fn(token_level_rewards=rewards, response_mask=mask, config=config, index=uids)


def _verl_algorithm_config(**extra):
    """verl's own ``algorithm`` config (trainer/config/ppo_trainer.yaml), in struct mode as Hydra
    hands it to the trainer, with ``adv_estimator=qae`` and ``extra`` set as
    ``+algorithm.key=value`` on the command line would."""
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.load(verl_file("verl.trainer.config", "ppo_trainer.yaml")).algorithm
    OmegaConf.set_struct(cfg, True)
    assert cfg.get("quantile_k") is None  # not a verl key: a struct config answers .get with None
    with open_dict(cfg):
        cfg.adv_estimator = qae_verl.ESTIMATOR_NAME
        for key, value in extra.items():
            cfg[key] = value
    return cfg


def _interleaved_batch(sizes, t=7, seed=0):
    """A verl batch of len(sizes) prompts with sizes[i] responses each, rows shuffled (a prompt's
    responses scattered), ragged response lengths, outcome rewards in {0, 0.25, 0.5, 1}, uids as
    verl keeps them (a dtype=object array of strings). One prompt is all 1 and one all 0.

    Returns rewards (bs, T), mask (bs, T), uids (bs,), scores (bs,) and, per prompt, its rows.
    """
    rng = np.random.default_rng(seed)
    scores = [rng.choice([0.0, 0.25, 0.5, 1.0], size=g) for g in sizes]
    scores[0][:], scores[1][:] = 1.0, 0.0  # std 0: both conventions must give exactly 0 there
    uids = np.concatenate([[f"uid-{i:03d}-{rng.integers(1 << 30):x}"] * g for i, g in enumerate(sizes)])
    perm = rng.permutation(len(uids))
    scores = torch.as_tensor(np.concatenate(scores)[perm], dtype=torch.float32)
    uids = np.array(uids[perm].tolist(), dtype=object)
    rewards, mask = _verl_batch(scores.tolist(), t=t, seed=seed)
    rows = [np.flatnonzero(uids == u) for u in dict.fromkeys(uids.tolist())]
    return rewards, mask, uids, scores, rows


def _per_group(scores, rows, **kwargs):
    """qae_lab's group_advantages, prompt by prompt (groups may differ in size) -> (bs,)."""
    out = torch.full_like(scores, float("nan"))
    for r in rows:
        out[r] = group_advantages(scores[r], len(r), eps=1e-6, **kwargs)
    return out


SIZES = (8, 4, 8, 5, 8, 3, 8, 2)  # mostly G = 8, some ragged groups


def test_real_registry_register_twice_and_conflict(core_algos):
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    with pytest.raises(ValueError):
        core_algos.get_adv_estimator_fn("qae")  # not there before register()
    assert "grpo" in registry  # verl's own estimators are listed in the same registry
    qae_verl.register()
    assert "qae" in registry
    assert core_algos.get_adv_estimator_fn("qae") is compute_qae_outcome_advantage
    qae_verl.register()  # documented: calling it again is a no-op
    assert core_algos.get_adv_estimator_fn("qae") is compute_qae_outcome_advantage
    # documented: another function already under "qae" makes verl raise ValueError
    registry["qae"] = core_algos.compute_grpo_outcome_advantage
    with pytest.raises(ValueError, match="qae"):
        qae_verl.register()
    assert registry["qae"] is core_algos.compute_grpo_outcome_advantage


def test_real_verl_calls_registered_estimators_with_these_keywords(core_algos):
    # verl's ray_trainer (which compute_advantage lives in) imports datasets, pandas, torchdata...:
    # read its source instead of importing it, and pin the keywords it passes a registered estimator
    tree = ast.parse(verl_file("verl.trainer.ppo", "ray_trainer.py").read_text())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "compute_advantage")
    always, optional, splatted = set(), set(), False
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "adv_kwargs" and isinstance(node.value, ast.Dict):
                always |= {k.value for k in node.value.keys}
            elif isinstance(target, ast.Subscript) and getattr(target.value, "id", None) == "adv_kwargs":
                optional.add(target.slice.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "adv_estimator_fn":
            splatted = [kw.arg for kw in node.keywords] == [None] and node.keywords[0].value.id == "adv_kwargs"
    assert splatted  # adv_estimator_fn(**adv_kwargs)
    assert always == {"token_level_rewards", "response_mask", "config"}
    assert "index" in optional
    # neither of these reaches a registered estimator: it must read the std switch from config
    assert not {"epsilon", "norm_adv_by_std_in_grpo"} & (always | optional)


@pytest.mark.parametrize(
    "kind,settings,k,method,scale",
    [
        ("verl-yaml", {"quantile_k": 0.4}, 0.4, "paper", "group"),
        (
            "verl-yaml",
            {"quantile_k": 0.7, "quantile_method": "linear", "norm_adv_by_std_in_grpo": False},
            0.7,
            "linear",
            "none",
        ),
        ("verl-yaml", {}, qae_verl.DEFAULT_K, "paper", "group"),
        ("omegaconf", {"quantile_k": 0.25, "norm_adv_by_std_in_grpo": True}, 0.25, "paper", "group"),
        ("algo-config", {"quantile_k": 0.6, "norm_adv_by_std_in_grpo": False}, 0.6, "paper", "none"),
    ],
)
def test_real_registry_qae_matches_group_advantages(core_algos, kind, settings, k, method, scale):
    from omegaconf import DictConfig, OmegaConf

    if kind == "verl-yaml":
        config = _verl_algorithm_config(**{key: v for key, v in settings.items() if key != "norm_adv_by_std_in_grpo"})
        if "norm_adv_by_std_in_grpo" in settings:  # verl's own key: algorithm.norm_adv_by_std_in_grpo=...
            config.norm_adv_by_std_in_grpo = settings["norm_adv_by_std_in_grpo"]
        assert isinstance(config, DictConfig)
    elif kind == "omegaconf":
        config = OmegaConf.create(settings)
    else:  # verl's AlgoConfig dataclass; it takes extra attributes after construction
        from verl.trainer.config import AlgoConfig

        config = AlgoConfig(norm_adv_by_std_in_grpo=settings["norm_adv_by_std_in_grpo"])
        config.quantile_k = settings["quantile_k"]
    rewards, mask, uids, scores, rows = _interleaved_batch(SIZES, seed=len(settings))
    qae_verl.register()
    adv, ret = _call_like_verl(core_algos.get_adv_estimator_fn("qae"), rewards, mask, uids, config)
    want = _per_group(scores, rows, baseline="quantile", k=k, quantile_method=method, scale=scale)  # (bs,)
    torch.testing.assert_close(adv, want[:, None] * mask)
    torch.testing.assert_close(ret, adv)
    assert torch.all(adv[mask == 0] == 0)


@pytest.mark.parametrize("norm", [True, False])
def test_real_grpo_is_group_advantages_with_the_mean_baseline(core_algos, norm):
    # verl's GRPO: (R_i - mean) / (torch.std(R) + epsilon), torch.std Bessel-corrected, epsilon=1e-6:
    # the same convention as group_advantages(baseline="mean", scale="group", eps=1e-6), so they
    # compare directly. (They part only on a prompt with one response, where verl uses mean 0 and
    # std 1 and qae_lab refuses; the batch has none.)
    rewards, mask, uids, scores, rows = _interleaved_batch(SIZES, seed=3)
    grpo = core_algos.get_adv_estimator_fn("grpo")
    assert grpo is core_algos.compute_grpo_outcome_advantage
    # as compute_advantage calls it (its GRPO branch): these four keywords, epsilon left at 1e-6
    adv, _ = grpo(token_level_rewards=rewards, response_mask=mask, index=uids, norm_adv_by_std_in_grpo=norm)
    want = _per_group(scores, rows, baseline="mean", scale="group" if norm else "none")
    torch.testing.assert_close(adv, want[:, None] * mask)


def test_real_qae_minus_grpo_is_the_baseline_shift(core_algos):
    # Same std scale, different baseline: on every response of a prompt, QAE - GRPO is the same
    # number, (mean - b_K) / (std + eps); b_K from quantile_baseline, not from group_advantages.
    rewards, mask, uids, scores, rows = _interleaved_batch(SIZES, seed=5)
    qae_verl.register()
    cfg = _verl_algorithm_config(quantile_k=0.4)
    qae, _ = _call_like_verl(core_algos.get_adv_estimator_fn("qae"), rewards, mask, uids, cfg)
    grpo, _ = core_algos.get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=uids)
    diff = (qae - grpo)[:, 0]  # every response has its first token
    assert torch.all(mask[:, 0] == 1)
    for r in rows:
        s = scores[r]
        shift = (s.mean() - quantile_baseline(s, len(r), 0.4)[0]) / (s.std() + 1e-6)
        torch.testing.assert_close(diff[r], shift.expand(len(r)), rtol=1e-5, atol=1e-5)
    assert (diff != 0).any()  # the baselines do differ on this batch
