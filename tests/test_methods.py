"""Tests for qae_lab.methods: the method table and its names, the token-weighting / loss-type rule, the partners."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from qae_lab import advantages, methods
from qae_lab.analysis import compare
from qae_lab.train import config, trainer
from qae_lab.lab import exercises, live
from qae_lab.runs import presets, pipeline
from qae_lab.knobs import Knobs, knob_changes
from qae_lab.lab.live import Controls
from qae_lab.methods import (
    BASELINES,
    METHODS,
    PARTNERS,
    QUANTILE_METHODS,
    TOKEN_WEIGHTINGS,
    WEIGHTED_LOSS_TYPES,
    method_settings,
    can_weight_tokens,
    check_weighting_loss_type,
    method_name,
    method_of,
)

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the vocabulary, in one home


def test_vocabulary_values():
    assert (BASELINES, QUANTILE_METHODS) == (("mean", "quantile"), ("paper", "linear"))
    assert BASELINES is advantages.BASELINES and QUANTILE_METHODS is advantages.QUANTILE_METHODS  # re-exported
    assert TOKEN_WEIGHTINGS == ("none", "ah", "sa_ah")
    assert WEIGHTED_LOSS_TYPES == ("bnpo", "dapo", "grpo")


def test_no_second_home():
    # the modules that used to define the vocabulary import it and no longer export it
    assert presets.method_settings is method_settings
    for module, names in (
        (presets, ("METHODS", "method_of")),
        (compare, ("method_name",)),
        (pipeline, ("method_name",)),
        (trainer, ("TOKEN_WEIGHTINGS", "WEIGHTED_LOSS_TYPES", "validate_knobs", "Knobs")),
        (config, ("BASELINES", "QUANTILE_METHODS", "TOKEN_WEIGHTINGS", "check_weighting_loss_type")),
    ):
        assert not set(names) & set(module.__all__), module.__name__
    assert not hasattr(presets, "method_of")
    # the knob metrics and their change points: here, not in the live lab; the exercise checks against this one
    assert not {"KNOB_METRICS", "knob_changes", "Knobs"} & set(live.__all__)
    assert not hasattr(live, "knob_changes") and exercises.knob_changes is knob_changes
    assert set(methods.__all__) <= set(vars(methods))


def test_methods_module_is_pure():
    # no TRL / transformers / torch import of its own; it imports with the trainer stack absent
    src = (ROOT / "qae_lab/methods.py").read_text()
    imported = re.findall(r"^\s*(?:from|import) ([\w.]+)", src, re.M)
    assert not [m for m in imported if m.split(".")[0] in ("trl", "transformers", "torch", "peft")]
    # the maths modules whose vocabulary it re-exports (baselines; the ledger's parts)
    assert {m for m in imported if m.startswith("qae_lab")} <= {
        "qae_lab._checks",
        "qae_lab.advantages",
        "qae_lab.ledger",
    }
    code = (
        "import sys; sys.modules.update({m: None for m in ('trl', 'transformers', 'peft')}); "
        "from qae_lab.methods import METHODS; assert len(METHODS) == 4"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- method names


def test_method_of_round_trip_for_every_method():
    assert list(METHODS) == ["mean", "qae", "sa_ah", "qae_sa_ah"]
    for name, knobs in METHODS.items():
        assert set(knobs) == {"baseline", "token_weighting"}
        assert method_of(**knobs) == name
        assert METHODS[method_of(knobs["baseline"], knobs["token_weighting"])] == knobs


def test_method_of_every_combination():
    want = {
        ("mean", "none"): "mean",
        ("mean", "ah"): "mean+ah",
        ("mean", "sa_ah"): "sa_ah",
        ("quantile", "none"): "qae",
        ("quantile", "ah"): "quantile+ah",
        ("quantile", "sa_ah"): "qae_sa_ah",
    }
    assert {(b, w): method_of(b, w) for b in BASELINES for w in TOKEN_WEIGHTINGS} == want


def test_method_name_of_configs_and_mappings(tmp_path):
    # an object: a QAEConfig or anything with the two fields
    assert method_name(SimpleNamespace(baseline="quantile", token_weighting="none")) == "qae"
    assert (
        method_name(
            config.QAEConfig(
                output_dir=str(tmp_path), baseline="mean", token_weighting="sa_ah", loss_type="bnpo", use_cpu=True
            )
        )
        == "sa_ah"
    )
    # a config.json mapping: pipeline.method wins, else the trainer's two fields
    assert method_name({"run": {"method": "sa_ah"}, "trainer": {}}) == "sa_ah"
    assert method_name({"run": {"method": "sa_ah"}, "trainer": METHODS["mean"]}) == "sa_ah"
    for name, knobs in METHODS.items():
        assert method_name({"run": {}, "trainer": knobs}) == name
        assert method_name({"run": {"method": None}, "trainer": knobs}) == name
    assert method_name({"trainer": {"baseline": "mean", "token_weighting": "ah"}}) == "mean+ah"
    with pytest.raises(ValueError, match="config must hold run.method"):
        method_name({"run": {}})
    with pytest.raises(ValueError, match="trainer.token_weighting"):
        method_name({"trainer": {"baseline": "mean"}})
    with pytest.raises(TypeError, match="config must be a config.json mapping.*got str"):
        method_name("qae")


def test_run_record_and_loaded_run_agree(tmp_path):
    # the name a run records and the name a comparison reads back come from the same function
    _, cfg = presets.build("cpu-demo", method="qae_sa_ah", output_dir=str(tmp_path))
    assert pipeline.run_record(presets.RunArgs(n_train=8), cfg)["method"] == "qae_sa_ah"
    assert method_name({"trainer": {"baseline": cfg.baseline, "token_weighting": cfg.token_weighting}}) == "qae_sa_ah"


# ---------------------------------------------------------------- the token-weighting / loss-type rule


def test_loss_type_rule():
    assert [can_weight_tokens(t) for t in ("bnpo", "dapo", "grpo", "dr_grpo", "sapo", "cispo")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    for loss_type in ("bnpo", "dr_grpo", "anything"):  # no weighting: every loss type
        assert check_weighting_loss_type("none", loss_type) == "none"
    for weighting in ("ah", "sa_ah"):
        for loss_type in WEIGHTED_LOSS_TYPES:
            assert check_weighting_loss_type(weighting, loss_type) == weighting
        with pytest.raises(ValueError) as err:
            check_weighting_loss_type(weighting, "dr_grpo")
        assert str(err.value) == (
            f"token_weighting={weighting!r} needs loss_type in ('bnpo', 'dapo', 'grpo'), got 'dr_grpo'"
        )


def test_config_and_live_controls_apply_the_same_rule(tmp_path):
    with pytest.raises(ValueError, match=r"token_weighting='sa_ah' needs loss_type in .*got 'dr_grpo'"):
        config.QAEConfig(output_dir=str(tmp_path), token_weighting="sa_ah", loss_type="dr_grpo", use_cpu=True)
    for loss_type, locked in (("dapo", False), ("dr_grpo", True)):
        fake = SimpleNamespace(loss_type=loss_type, knobs=Knobs())
        assert Controls.for_trainer(fake).token_weighting.disabled is locked


# ---------------------------------------------------------------- methods with partners


def test_method_settings_compose_a_method_and_its_partners():
    assert method_settings("qae") == METHODS["qae"]
    assert method_settings("mean+clip_higher") == {
        "baseline": "mean",
        "token_weighting": "none",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
    }
    gspo = method_settings("qae_sa_ah+gspo")
    assert gspo["importance_sampling_level"] == "sequence" and gspo["token_weighting"] == "sa_ah"
    assert method_settings("qae+clip_higher+kl_cov+neg_mask")["advantage_mask"] == "neg"
    for partner in PARTNERS:  # every partner builds a valid trainer configuration with every method
        for base in METHODS:
            cfg = config.QAEConfig(
                output_dir="/tmp/x",
                use_cpu=True,
                report_to=[],
                **{k: v for k, v in method_settings(f"{base}+{partner}").items()},
            )
            assert methods.method_name(cfg) == f"{base}+{partner}"


@pytest.mark.parametrize(
    "name, match",
    [
        ("grpo", r"unknown method 'grpo' in 'grpo'"),
        ("qae+clip", r"unknown partner 'clip' in method 'qae\+clip'; partners: \['clip_cov'"),
        ("qae+kl_cov+kl_cov", r"names 'kl_cov' twice"),
        ("qae+gspo+clip_higher", r"gspo and clip_higher both set epsilon; use one"),
        ("qae+clip_cov+kl_cov", r"clip_cov and kl_cov both set cov_penalty"),
        (3, r"method must be a string"),
    ],
)
def test_method_settings_refuse_unknown_and_clashing_partners(name, match):
    with pytest.raises(ValueError, match=match):
        method_settings(name)


def test_presets_and_cli_take_a_method_with_partners(capsys):
    run_args, cfg = presets.build("cpu-demo", ["num_iterations=2"], method="mean+clip_higher", output_dir="/tmp/x")
    assert (cfg.baseline, cfg.epsilon, cfg.epsilon_high) == ("mean", 0.2, 0.28)
    _, cfg = presets.build(
        "cpu-demo", ["epsilon_high=0.3", "num_iterations=2"], method="qae+clip_higher", output_dir="/tmp/x"
    )
    assert cfg.epsilon_high == 0.3  # --set still wins
    from qae_lab.__main__ import main

    with pytest.raises(SystemExit):
        main(["train", "--method", "qae+nope", "--dry-run"])
    assert "unknown partner 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("partner", ["clip_higher", "gspo"])
def test_ratio_partners_are_refused_where_every_ratio_is_one(partner):
    """On a generation's single on-policy pass the ratio is 1: Clip-Higher and GSPO would change nothing."""
    with pytest.raises(ValueError, match=rf"{partner} acts only through the importance ratio.*num_iterations=1"):
        presets.build("cpu-demo", [], method=f"qae+{partner}", output_dir="/tmp/x")
    presets.build("cpu-demo", ["num_iterations=2"], method=f"qae+{partner}", output_dir="/tmp/x")  # two passes
    # a generation split over two optimizer steps: the second one is off-policy too
    presets.build(
        "cpu-demo",
        ["per_device_train_batch_size=32", "steps_per_generation=2"],
        method=f"qae+{partner}",
        output_dir="/tmp/x",
    )
    presets.build("cpu-demo", [], method="qae+kl_cov", output_dir="/tmp/x")  # not a ratio partner: no refusal
