"""Every GRPOConfig option QAETrainer accepts works as in TRL: those read by the TRL code it replaces (the loss, the
advantages) are listed in qae_lab.train.config.REPLACED_CODE_OPTIONS, each with how it is honoured or why it is
refused and the tests that show it; the list is checked against TRL's source, so an option TRL adds to that code
fails here until it is classified. The rest are read by TRL code that QAETrainer calls unchanged (every override
calls TRL's own). Off-policy parity: with each loss option at a value other than its default, on a policy moved
away from the one that sampled (so that ratios, clipping and the KL term act), QAETrainer's gradient with the mean
baseline is GRPOTrainer's, and differs from the gradient at the default."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from testkit.reference import ref_advantages
from testkit.step_setup import (
    REWARDS,
    assert_same_grads,
    fixed_reward,
    make_trainer,
    rows,
    tiny_config,
    tiny_model,
    trainer_grads,
)
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from qae_lab.methods import can_weight_tokens
from qae_lab.train.config import REPLACED_CODE_OPTIONS, QAEConfig, uses_trl_loss
from qae_lab.train.trainer import QAETrainer

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
# TRL's attribute -> the option it holds, where the names differ (the Trainer keeps the accumulation it is in as
# current_gradient_accumulation_steps, from args.gradient_accumulation_steps)
ATTRIBUTE_OF = {"epsilon_low": "epsilon", "current_gradient_accumulation_steps": "gradient_accumulation_steps"}


def _options_read(source: str) -> set[str]:
    names = set(re.findall(r"self\.(?:args\.)?(\w+)", source))
    return {ATTRIBUTE_OF.get(n, n) for n in names} & FIELDS


def test_the_options_of_the_replaced_code_are_exactly_the_classified_ones():
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    generate = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    advantages = generate[
        generate.index("rewards_per_func = self._calculate_rewards") : generate.index("# Slice to keep only the local")
    ]
    assert _options_read(loss) | _options_read(advantages) == set(REPLACED_CODE_OPTIONS)


@pytest.mark.parametrize("option", sorted(REPLACED_CODE_OPTIONS))
def test_each_classified_option_names_tests_that_exist(option):
    how = REPLACED_CODE_OPTIONS[option]
    named = re.findall(r"(tests/[\w/]+\.py)::(\w+)", how)
    assert named, f"{option}: names no test"
    for path, test in named:
        assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.M), f"{option}: {path}::{test}"


def test_every_override_of_a_trl_method_calls_trls_own():
    # so the options TRL reads there (generation, rewards, logging) stay TRL's; _compute_loss calls it wherever QAE
    # leaves the loss alone and replaces it for token weighting, the covariance penalties and the sparse update (the
    # options of REPLACED_CODE_OPTIONS)
    helpers = ("_generate_round", "_trl_loss_step")  # where the overrides call TRL's own
    names = ("_generate_single_turn", "_calculate_rewards", "_generate_and_score_completions", "_compute_loss")
    for name in (*names, "_get_per_token_logps_and_entropies"):
        source = "".join(inspect.getsource(getattr(QAETrainer, m)) for m in (*helpers, name) if hasattr(QAETrainer, m))
        assert f"super().{name}(" in source, name


# ---------------------------------------------------------------- off-policy parity, option by option

# each option at a value other than its default (with what it needs beside it), one or more values an option
_ADAPTIVE = {"use_adaptive_entropy": True, "entropy_coef": 0.01, "entropy_target": 100.0}  # the bonus applies
OFF_DEFAULT = [
    ("epsilon", {"epsilon": 0.05}),
    ("epsilon_high", {"epsilon_high": 0.6}),
    ("delta", {"delta": 1.05}),
    ("beta", {"beta": 0.3}),
    ("use_bias_correction_kl", {"beta": 0.3, "use_bias_correction_kl": False}),  # TRL's default: True
    ("importance_sampling_level", {"importance_sampling_level": "sequence"}),
    ("top_entropy_quantile", {"top_entropy_quantile": 0.5}),
    ("entropy_coef", {"entropy_coef": 0.05}),
    ("max_completion_length", {"loss_type": "dr_grpo", "max_completion_length": 40}),
    *(("loss_type", {"loss_type": t}) for t in ("grpo", "dr_grpo", "cispo", "sapo", "vespo")),
    # bnpo's token mean is dapo's (the default) when a micro-batch is its generation batch: two steps a generation
    ("loss_type", {"steps_per_generation": 2, "loss_type": "bnpo"}),
    ("loss_type", {"loss_type": "luspo", "importance_sampling_level": "sequence"}),
    ("off_policy_mask_threshold", {"off_policy_mask_threshold": 0.05}),
    ("use_adaptive_entropy", _ADAPTIVE),  # beside it: the same coefficient, fixed
    ("entropy_target", _ADAPTIVE),  # beside it: TRL's target, under which this policy's entropy never falls
    ("entropy_coef_max", {**_ADAPTIVE, "entropy_coef_max": 0.012}),
    ("entropy_coef_delta", {**_ADAPTIVE, "entropy_coef_delta": 0.05}),
    ("entropy_coef_min", {**_ADAPTIVE, "entropy_target": 0.2, "entropy_coef_min": 0.008}),  # acts on the coefficient
    ("sapo_temperature_pos", {"loss_type": "sapo", "sapo_temperature_pos": 3.0}),
    ("sapo_temperature_neg", {"loss_type": "sapo", "sapo_temperature_neg": 3.0}),
    ("vespo_k_pos", {"loss_type": "vespo", "vespo_k_pos": 6.0}),
    ("vespo_k_neg", {"loss_type": "vespo", "vespo_k_neg": 6.0}),
    ("vespo_lambda_pos", {"loss_type": "vespo", "vespo_lambda_pos": 0.5}),
    ("vespo_lambda_neg", {"loss_type": "vespo", "vespo_lambda_neg": 0.5}),
    ("scale_rewards", {"scale_rewards": "batch"}),
    ("scale_rewards", {"scale_rewards": "none"}),
    ("num_generations", {"num_generations": 2}),
    # 3: not a multiple of TRL's generate-every (2 passes x 1 step), so TRL keeps the sampler's log-probs
    ("gradient_accumulation_steps", {"gradient_accumulation_steps": 3}),
    ("steps_per_generation", {"loss_type": "dapo", "steps_per_generation": 2}),
]
# what each trainer's run compares: TRL's metrics of the loss (QAETrainer's own are checked elsewhere)
_TRL_METRICS = ("entropy", "kl", "cispo_clip_ratio", "policy_loss", "entropy_coef", "aux_loss")
_TRL_PREFIXES = ("clip_ratio/", "vespo/")
# the two ways QAETrainer computes a loss: its default (TRL's own loss, or qae_lab's with the sparse update where it
# applies), and qae_lab's loss with every row and SA-AH at alpha = 0 (each weight 1: the normaliser sum(w) is the
# token count), where the loss type can weight tokens and the loss is not TRL's alone
PATHS = {"default": {}, "sa_ah_alpha_0": {"token_weighting": "sa_ah", "alpha": 0.0, "sparse_update": False}}


def _moved_step(tmp_path, tok, trainer_cls, config_cls, **settings):
    """One generation on the tiny policy, then two loss calls after the policy moved away from it (the second sees
    what the first updated: TRL's adaptive entropy coefficient): the second's gradient, and TRL's metrics of both."""
    extra = {"baseline": "mean", "advantage_eps": 1e-4} if trainer_cls is QAETrainer else {}
    model = tiny_model(tok, seed=1)
    if settings.get("beta"):  # TRL loads its reference model from the policy's folder
        model.save_pretrained(tmp_path / "policy")
        model.config._name_or_path = str(tmp_path / "policy")
    trainer = make_trainer(
        tmp_path, tok, model, trainer_cls=trainer_cls, config_cls=config_cls, num_iterations=2, **{**extra, **settings}
    )
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # as the training loop
    batch = trainer._generate_and_score_completions(rows(REWARDS))
    assert batch["old_per_token_logps"] is not None  # two passes per generation: TRL keeps the sampler's log-probs
    with torch.no_grad():  # the same move for every trainer: a second pass's policy
        gen = torch.Generator().manual_seed(3)
        for p in trainer.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)
    trainer._metrics["train"].clear()
    trainer_grads(trainer, batch)
    grads = trainer_grads(trainer, batch)
    metrics = {
        k: list(v) for k, v in trainer._metrics["train"].items() if k in _TRL_METRICS or k.startswith(_TRL_PREFIXES)
    }
    return grads, metrics


def _path_applies(path: str, settings: dict) -> bool:
    cfg = QAEConfig(output_dir="unused", use_cpu=True, **{**settings, "token_weighting": "none"})
    return path == "default" or (can_weight_tokens(cfg.loss_type) and not uses_trl_loss(cfg))


CASES = [(o, s, path) for path in sorted(PATHS) for o, s in OFF_DEFAULT if _path_applies(path, s)]


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize(
    "option, settings, path", CASES, ids=[f"{o}={list(s.values())[-1]}-{path}" for o, s, path in CASES]
)
def test_each_loss_option_off_default_is_trls_and_changes_the_step(tmp_path, tok, option, settings, path):
    # parity: QAETrainer (mean baseline) computes GRPOTrainer's gradient and TRL's metrics with the option set, on the
    # path named; it acts: the step at the option's default differs. Planted bugs: an option dropped from
    # qae_lab.loss.LossSettings, the sparse update's metrics over the kept rows -> the parity asserts fail.
    ours, logged = _moved_step(tmp_path / "qae", tok, QAETrainer, QAEConfig, **settings, **PATHS[path])
    theirs, trl_logged = _moved_step(tmp_path / "trl", tok, GRPOTrainer, GRPOConfig, **settings)
    assert_same_grads(ours, theirs)
    assert logged.keys() == trl_logged.keys() and logged == {
        k: pytest.approx(v, rel=1e-5, abs=1e-7, nan_ok=True) for k, v in trl_logged.items()
    }
    beside = {name: value for name, value in settings.items() if name != option}  # what the option needs with it
    if option == "use_adaptive_entropy":
        beside["entropy_target"] = 0.2  # a fixed coefficient takes no target
    default, at_default = _moved_step(tmp_path / "default", tok, QAETrainer, QAEConfig, **beside, **PATHS[path])
    moved = any(not torch.allclose(ours[n], default[n], rtol=1e-4, atol=1e-8) for n in ours)
    assert moved or logged != at_default, option


def _pair(tmp_path, tok, model_of, **settings):
    """QAETrainer (mean baseline) and GRPOTrainer on the same fixed completions, each with its own copy of the model."""
    qae = make_trainer(
        tmp_path / "qae", tok, model_of(), baseline="mean", advantage_eps=1e-4, sparse_update=False, **settings
    )
    trl = make_trainer(tmp_path / "trl", tok, model_of(), trainer_cls=GRPOTrainer, config_cls=GRPOConfig, **settings)
    return qae, trl


def test_reward_weights_weigh_the_rewards_as_trl(tmp_path, tok):
    def length_reward(completions, **kwargs):  # a second reward function: something else than the first
        return [float(len(str(c))) / 100 for c in completions]

    funcs = [fixed_reward, length_reward]
    qae, trl = _pair(tmp_path, tok, lambda: tiny_model(tok, seed=1), reward_funcs=funcs, reward_weights=[1.0, -0.5])
    qae.args.success_reward = "fixed_reward"
    ours, theirs = (t._generate_and_score_completions(rows(REWARDS)) for t in (qae, trl))
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-6, atol=1e-6)
    plain = make_trainer(tmp_path / "plain", tok, tiny_model(tok, seed=1), reward_funcs=funcs, baseline="mean")
    assert not torch.allclose(plain._generate_and_score_completions(rows(REWARDS))["advantages"], ours["advantages"])
    assert_same_grads(trainer_grads(qae, ours), trainer_grads(trl, theirs))


def test_several_micro_batches_per_generation_step_as_trl(tmp_path, tok):
    # a generation batch of 16 in two micro-batches of 8: dapo's normaliser counts the generation batch's tokens
    settings = {"loss_type": "dapo", "per_device_train_batch_size": 8, "steps_per_generation": 2}
    qae, trl = _pair(tmp_path, tok, lambda: tiny_model(tok, seed=1), gradient_accumulation_steps=2, **settings)
    for t in (qae, trl):
        t.current_gradient_accumulation_steps = 2
    ours, theirs = (split_tensor_dict(t._generate_and_score_completions(rows(REWARDS)), 2) for t in (qae, trl))
    for a, b in zip(ours, theirs):
        assert_same_grads(trainer_grads(qae, a), trainer_grads(trl, b))


def _moe(tok):
    cfg = tiny_config(
        tok,
        transformers.Qwen2MoeConfig,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
        router_aux_loss_coef=0.5,
    )
    torch.manual_seed(2)
    return transformers.Qwen2MoeForCausalLM(cfg).train()  # float32: the experts' grouped matmul takes no float64


def test_a_routers_balance_loss_is_trls(tmp_path, tok):
    qae, trl = _pair(tmp_path, tok, lambda: _moe(tok), router_aux_loss_coef=0.5)
    assert qae.aux_loss_enabled and trl.aux_loss_enabled
    ours, theirs = (t._generate_and_score_completions(rows(REWARDS)) for t in (qae, trl))
    grads = trainer_grads(qae, ours)
    # float32, the loss summed in another order: agreement to float32 rounding of each gradient's scale
    scale = max(float(g.abs().max()) for g in grads.values())
    assert_same_grads(grads, trainer_grads(trl, theirs), rtol=1e-4, atol=1e-5 * scale)
    # coefficient 0 turns TRL's balance loss off (output_router_logits alone does not)
    without = make_trainer(
        tmp_path / "off", tok, _moe(tok), baseline="mean", sparse_update=False, router_aux_loss_coef=0.0
    )
    assert not without.aux_loss_enabled
    plain = trainer_grads(without, without._generate_and_score_completions(rows(REWARDS)))
    assert any(not torch.allclose(grads[n], plain[n]) for n in grads if "gate" in n)  # the balance loss moved them


def test_num_generations_eval_sets_the_evaluation_group_size(tmp_path, tok):
    # in evaluation the group is num_generations_eval responses (here 2), not num_generations (4): QAE's quantile
    # baseline over pairs, and TRL's mean over the same pairs. Planted bug: the training group size in evaluation ->
    # the advantages are those of groups of 4 (the last assert's premise shows they differ).
    ours = make_trainer(tmp_path / "qae", tok, tiny_model(tok, seed=1), num_generations_eval=2)
    ours.model.eval()
    got = ours._generate_and_score_completions(rows(REWARDS))["advantages"].tolist()
    want = ref_advantages([float(r) for r in REWARDS], 2, "quantile", 0.4, "paper", "group", 1e-4)
    assert got == pytest.approx(want, abs=1e-6)
    assert want != pytest.approx(
        ref_advantages([float(r) for r in REWARDS], 4, "quantile", 0.4, "paper", "group", 1e-4)
    )
    qae, trl = _pair(tmp_path, tok, lambda: tiny_model(tok, seed=1), num_generations_eval=2)
    for t in (qae, trl):
        t.model.eval()
    mean, theirs = (t._generate_and_score_completions(rows(REWARDS))["advantages"] for t in (qae, trl))
    torch.testing.assert_close(mean, theirs, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- each row's test sets its option

_UNSET = object()


def _settings_in(test, seen=None) -> dict[str, list]:
    """Every value the test's source gives a setting, and that of the helpers of its own module it calls:
    ``name=value`` in a call, ``"name": value`` in a mapping, ``("name", value)`` in a tuple; a value that is not a
    literal is ``_UNSET`` (set, to something computed)."""
    found: dict[str, list] = {}
    seen = set() if seen is None else seen
    seen.add(test)
    helpers = vars(inspect.getmodule(test))

    def value(node):
        try:
            return ast.literal_eval(node)
        except ValueError:
            return _UNSET

    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(test)))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helper = helpers.get(node.func.id)
            if inspect.isfunction(helper) and helper.__module__ == test.__module__ and helper not in seen:
                for name, values in _settings_in(helper, seen).items():
                    found.setdefault(name, []).extend(values)
        pairs = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 2 and isinstance(node.elts[0], ast.Constant):
            pairs = [(node.elts[0].value, node.elts[1])]
        for name, v in pairs:
            found.setdefault(name, []).append(value(v))
    return found


def _sets(option: str, path: str, test: str) -> bool:
    """Whether the cited test gives ``option`` a value other than QAEConfig's default."""
    default = getattr(QAEConfig(output_dir="unused", use_cpu=True), option)
    if test == "test_each_loss_option_off_default_is_trls_and_changes_the_step":  # its cases are OFF_DEFAULT's
        return any(o == option and s[option] != default for o, s in OFF_DEFAULT)
    module = importlib.import_module(path.removesuffix(".py").replace("/", ".").removeprefix("tests."))
    return any(v is _UNSET or v != default for v in _settings_in(getattr(module, test)).get(option, []))


@pytest.mark.parametrize("option", sorted(REPLACED_CODE_OPTIONS))
def test_each_option_cites_a_test_that_sets_it_off_its_default(option):
    # a row citing a test that never sets its option proves nothing about it. Planted: num_generations_eval citing
    # test_evaluate_scores_every_completion_it_generated (which never sets it), as it did -> this fails for that row
    cited = re.findall(r"tests/([\w/]+\.py)::(\w+)", REPLACED_CODE_OPTIONS[option])
    assert any(_sets(option, path, test) for path, test in cited), f"{option}: no cited test sets it ({cited})"


def test_the_setting_finder_sees_what_a_test_sets():
    def sample():
        make_trainer(loss_type="bnpo", beta=0.0)
        settings = {"steps_per_generation": 2, "reward_weights": weights}  # noqa: F821 (never run)
        return [("epsilon", 0.05)], settings

    found = _settings_in(sample)
    assert found["loss_type"] == ["bnpo"] and found["beta"] == [0.0] and found["steps_per_generation"] == [2]
    assert found["reward_weights"] == [_UNSET] and found["epsilon"] == [0.05]
    assert not _sets(
        "num_generations_eval",
        "tests/train/test_trainer_drop_in.py",
        "test_evaluate_scores_every_completion_it_generated",
    )  # the row this test was written for
