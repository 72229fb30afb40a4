"""Tests for qae_lab.runs.settings and the YAML presets: every value typed by TRL's parser, from a file, from
``--name value`` and from ``--set name=value`` alike; unknown or ill-typed keys fail with the file (or
flag) and the key named; the presets are the files in qae_lab/runs/configs/; ``--config run.yaml`` on the
command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from qae_lab.runs.cli import main
from qae_lab.train.config import QAEConfig
from qae_lab.runs.presets import PRESET_DIR, PRESETS, _checkpointing_field, build, command_line, fields, resolve
from qae_lab.runs.settings import read_config


def typed_values(values, source):
    return fields().typed(values, source)


def set_values(sets):
    return fields().sets(sets)


def argument_values(tokens):
    return fields().arguments(tokens)


# ---------------------------------------------------------------- one value, three forms, one parser

@pytest.mark.parametrize("name,in_file,on_line,expected", [
    ("quantile_k", 0.6, ["0.6"], 0.6),
    ("max_steps", 20, ["20"], 20),
    ("learning_rate", 1.0e-5, ["1e-5"], 1e-5),
    ("lora", True, ["true"], True),
    ("evaluate", False, ["false"], False),
    ("levels", [3, 4], ["3", "4"], [3, 4]),
    ("reflection_words", ["wait", "check"], ["wait", "check"], ["wait", "check"]),
    ("lr_scheduler_type", "cosine", ["cosine"], "cosine"),   # an enum field: kept as its plain string
    ("eval_max_new_tokens", None, ["none"], None),
    ("token_weighting", "sa_ah", ["sa_ah"], "sa_ah"),
])
def test_a_value_means_the_same_in_a_file_on_the_line_and_in_set(name, in_file, on_line, expected):
    assert typed_values({name: in_file}, "run.yaml") == {name: expected}
    assert argument_values([f"--{name}", *on_line]) == {name: expected}
    assert argument_values([f"--{name.replace('_', '-')}", *on_line]) == {name: expected}
    assert set_values([f"{name}={','.join(on_line)}"]) == {name: expected}


def test_strings_in_a_file_are_typed_as_on_the_command_line():
    # YAML reads 5e-6 (no dot) as a string; the parser makes it the field's float, as the command line would
    assert typed_values({"learning_rate": "5e-6", "n_train": "64", "lora": "yes"}, "f") == \
        {"learning_rate": 5e-6, "n_train": 64, "lora": True}


def test_a_list_field_that_also_takes_a_string():
    assert typed_values({"report_to": ["tensorboard", "wandb"]}, "f") == {"report_to": ["tensorboard", "wandb"]}
    assert typed_values({"report_to": "tensorboard"}, "f") == {"report_to": "tensorboard"}
    assert set_values(['report_to=["tensorboard"]']) == {"report_to": ["tensorboard"]}
    assert argument_values(["--report_to", "tensorboard"]) == {"report_to": "tensorboard"}
    assert set_values(["report_to=none"]) == {"report_to": "none"}  # no tracker: TRL's own word, not None


def test_a_boolean_flag_alone_is_true_and_other_flags_need_a_value():
    assert argument_values(["--lora", "--use_cpu"]) == {"lora": True, "use_cpu": True}
    # a boolean that defaults to true: true stays true (the parser's --no_NAME action shares its name)
    for default_true in ("evaluate", "save_model"):
        assert set_values([f"{default_true}=true"]) == {default_true: True}
        assert typed_values({default_true: True}, "f") == {default_true: True}
        assert argument_values([f"--{default_true}"]) == {default_true: True}
        assert argument_values([f"--{default_true}", "false"]) == {default_true: False}
        assert argument_values([f"--no_{default_true}"]) == argument_values([f"--no-{default_true}"]) == \
            {default_true: False}
    run, _ = build("cpu-demo", ["evaluate=true", "save_model=true"], output_dir="unused")
    assert run.evaluate is True and run.save_model is True
    with pytest.raises(ValueError, match="command line: --n_train needs a value"):
        argument_values(["--n_train"])
    with pytest.raises(ValueError, match="'0.6' is not a --name of a field"):
        argument_values(["0.6"])


@pytest.mark.parametrize("values,message", [
    ({"quantile_kk": 0.6}, r"run.yaml: unknown field 'quantile_kk' \(did you mean 'quantile_k'\?\)"),
    ({"n_train": 2.5}, r"run.yaml: n_train: invalid int value: '2.5'"),
    ({"n_train": True}, r"run.yaml: n_train: invalid int value: 'true'"),
    ({"quantile_k": "high"}, r"run.yaml: quantile_k: invalid float value: 'high'"),
    ({"lora": "maybe"}, r"run.yaml: lora: Truthy value expected"),
    ({"lr_scheduler_type": "wobbly"}, r"run.yaml: lr_scheduler_type: invalid choice"),
    ({"n_train": None}, r"run.yaml: n_train may not be None"),
    ({"n_train": [1, 2]}, r"run.yaml: n_train takes one value, not a list"),
    ({"levels": {"a": 1}}, r"run.yaml: levels takes no mapping"),
])
def test_unknown_or_ill_typed_keys_name_the_file_and_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        typed_values(values, "run.yaml")


def test_every_field_of_both_dataclasses_is_settable_and_data_seed_is_the_runs():
    assert {"model", "levels", "reward", "quantile_k", "alpha", "learning_rate", "report_to"} <= fields().names
    # RunArgs.data_seed (the problem draws) shadows TrainingArguments.data_seed, as build always did
    run, cfg = build("cpu-demo", ["data_seed=7"], output_dir="unused")
    assert run.data_seed == 7 and cfg.data_seed is None


# ---------------------------------------------------------------- the presets are YAML files

def test_the_presets_are_the_files_and_a_preset_may_start_from_another():
    assert set(PRESETS) == {p.stem for p in PRESET_DIR.glob("*.yaml")}
    assert {"cpu-demo", "cpu-sums", "qwen2.5-1.5b-gsm8k-live"} <= set(PRESETS)
    live, _ = read_config(PRESET_DIR / "qwen2.5-1.5b-gsm8k-live.yaml")
    assert live["preset"] == "qwen2.5-1.5b-gsm8k"  # its file holds only what differs
    assert PRESETS["qwen2.5-1.5b-gsm8k-live"]["max_completion_length"] == 256
    assert PRESETS["qwen2.5-1.5b-gsm8k-live"]["learning_rate"] == PRESETS["qwen2.5-0.5b-gsm8k"]["learning_rate"]
    for name in PRESETS:  # every file's every key is typed without error
        typed_values(PRESETS[name], name)


def test_a_preset_file_names_the_checkpointing_field_the_installed_transformers_has():
    assert "activation_checkpointing" in (PRESET_DIR / "cpu-demo.yaml").read_text()
    assert _checkpointing_field() in PRESETS["cpu-demo"]


# ---------------------------------------------------------------- --config run.yaml

def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_config_file_layers_between_the_preset_and_the_command_line(tmp_path):
    cfg_file = _write(tmp_path / "run.yaml", "preset: cpu-demo\nquantile_k: 0.6\nalpha: 0.3\nmax_steps: 9\n"
                      "levels: [3, 4]\ntoken_weighting: sa_ah\n")
    run, cfg = build(None, ["max_steps=3"], config=str(cfg_file), args=["--alpha", "0.2"], output_dir="unused")
    assert (cfg.quantile_k, cfg.alpha, cfg.max_steps, run.levels, cfg.token_weighting) == (0.6, 0.2, 3, (3, 4), "sa_ah")
    assert cfg.per_device_train_batch_size == 64  # the rest is the preset's
    # the method sits above the file, the command line above the method
    _, cfg = build(None, method="qae", config=str(cfg_file), output_dir="unused")
    assert cfg.token_weighting == "none"
    _, cfg = build(None, method="qae", config=str(cfg_file), args=["--token_weighting", "ah"], output_dir="unused")
    assert cfg.token_weighting == "ah"


def test_the_config_file_and_the_command_line_must_agree_on_the_preset(tmp_path):
    cfg_file = _write(tmp_path / "run.yaml", "preset: cpu-sums\n")
    assert resolve(None, config=str(cfg_file))[0] == "cpu-sums"
    assert resolve("cpu-sums", config=str(cfg_file))[0] == "cpu-sums"
    with pytest.raises(ValueError, match="names preset 'cpu-sums' and the command line 'cpu-demo'"):
        resolve("cpu-demo", config=str(cfg_file))
    assert resolve(None, config=str(_write(tmp_path / "bare.yaml", "alpha: 0.1\n")))[0] == "cpu-demo"


@pytest.mark.parametrize("text,message", [
    ("quantile_kk: 0.6\n", r"config file .*bad.yaml: unknown field 'quantile_kk' \(did you mean 'quantile_k'\?\)"),
    ("max_steps: ten\n", r"config file .*bad.yaml: max_steps: invalid int value: 'ten'"),
    ("quantile_k: 1.5\n", r"preset 'cpu-demo', config file .*bad.yaml: quantile_k must lie in the open interval"),
    ("- a\n- b\n", r"config file .*bad.yaml: must hold a mapping"),
    ("a: [1,\n", r"config file .*bad.yaml: not valid YAML"),
    ("env: 3\n", r"config file .*bad.yaml: env must be a mapping"),
    ("1: 2\n", r"config file .*bad.yaml: every key must be a field name \(a string\), got 1 \(int\)"),  # issue 31
    ("? [a, b]\n: 1\n", r"config file .*bad.yaml: not valid YAML|every key must be a field name"),
    ("preset: gpu-please\n", r"unknown preset 'gpu-please'"),
])
def test_a_bad_config_file_is_refused_naming_the_file_and_key(text, message, tmp_path, capsys):
    bad = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(ValueError, match=message):
        build(None, config=str(bad), output_dir="unused")
    assert main(["train", "--config", str(bad), "--dry-run"]) == 2
    assert "qae-lab: error:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cannot be read"):
        read_config(tmp_path / "missing.yaml")


def test_the_command_line_takes_a_config_file_and_typed_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    cfg_file = _write(tmp_path / "run.yaml", "preset: cpu-demo\nquantile_k: 0.6\nenv:\n  WANDB_PROJECT: hello\n")
    out_dir = tmp_path / "run"
    argv = ["train", "--config", str(cfg_file), "--alpha", "0.3", "--levels", "3", "4", "--lora",
            "--output-dir", str(out_dir), "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err
    said = json.loads(capsys.readouterr().out)
    assert said["command"] == (f"python -m qae_lab train --preset cpu-demo --config {cfg_file} --alpha 0.3 "
                               f"--levels 3 4 --lora")
    assert said["trainer"]["quantile_k"] == 0.6 and said["trainer"]["alpha"] == 0.3
    assert said["run"]["levels"] == [3, 4] and said["run"]["lora"] is True
    assert not out_dir.exists()  # a dry run writes nothing
    assert said["env"] == {"WANDB_PROJECT": "hello"}  # the file's env:, as in TRL's scripts (an allowed variable)
    import os
    assert os.environ.get("WANDB_PROJECT") == "hello"  # set for the dry run's checks too
    assert main(["train", "--quantile_k", "2", "--dry-run"]) == 2
    assert "quantile_k must lie in the open interval (0, 1)" in capsys.readouterr().err
    assert main(["train", "--quantile_kk", "0.5", "--dry-run"]) == 2
    assert "did you mean 'quantile_k'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a field flag belongs to train only
        main(["presets", "--alpha", "0.3"])


def test_a_preset_written_out_as_a_config_file_builds_the_same_run(tmp_path):
    # the form of the shipped presets is the form a user's file takes
    for name in ("cpu-demo", "qwen2.5-1.5b-gsm8k-live"):
        copy = _write(tmp_path / f"{name}.yaml", (PRESET_DIR / f"{name}.yaml").read_text())
        run_a, cfg_a = build(name, output_dir="unused")
        run_b, cfg_b = build(None, config=str(copy), output_dir="unused")
        assert run_a == run_b and cfg_a.to_dict() == cfg_b.to_dict()
    assert yaml.safe_load(command_line("cpu-demo", config="x.yaml").split("--config ")[1]) == "x.yaml"


def test_a_config_mapping_is_what_a_run_records(tmp_path):
    # a run records the file's values (not its path, which may change): they rebuild the same settings
    cfg_file = _write(tmp_path / "run.yaml", "quantile_k: 0.55\nlevels: [2]\n")
    recorded, _ = read_config(cfg_file)
    a = build("cpu-demo", config=str(cfg_file), output_dir="unused")
    b = build("cpu-demo", config=recorded, output_dir="unused")
    assert a[0] == b[0] and a[1].to_dict() == b[1].to_dict() and isinstance(a[1], QAEConfig)


def test_the_docs_config_file_example_builds(tmp_path):
    page = (Path(__file__).resolve().parents[2] / "docs" / "command-line.md").read_text()
    block = page.split("```yaml\n# my_run.yaml\n", 1)[1].split("```", 1)[0]
    run, cfg = build(None, config=str(_write(tmp_path / "my_run.yaml", block)), output_dir="unused")
    assert (cfg.quantile_k, cfg.token_weighting, cfg.alpha, run.levels, cfg.max_steps) == (0.6, "sa_ah", 0.3,
                                                                                           (3, 4, 5), 200)
    assert cfg.report_to == ["tensorboard"] and run.model == "embedded"


def test_the_preset_files_are_installed_with_the_package():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "configs/*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["qae_lab.runs"]
    assert PRESET_DIR == Path(__file__).resolve().parents[2] / "qae_lab" / "runs" / "configs"
    assert any(d.startswith("pyyaml") for d in pyproject["project"]["dependencies"])  # read at import of presets
