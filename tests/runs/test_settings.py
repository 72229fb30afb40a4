"""Tests for qae_lab.runs.settings and the YAML presets: every value typed by TRL's parser, from a file, from
``--name value`` and from ``--set name=value`` alike; unknown or ill-typed keys fail with the file (or
flag) and the key named; the presets are the files in qae_lab/runs/configs/; ``--config run.yaml`` on the
command line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tracemalloc
import types
from pathlib import Path

import pytest
import yaml

from qae_lab._checks import credential_name
from qae_lab.runs import settings
from qae_lab.__main__ import main
from qae_lab.runs.presets import (
    PRESET_DIR,
    PRESETS,
    RunArgs,
    _checkpointing_field,
    build,
    command_line,
    field_types,
    fields,
    resolve,
)
from qae_lab.runs.settings import read_config
from qae_lab.train.config import QAEConfig


def typed_values(values, source):
    return fields().typed(values, source)


def set_values(sets):
    return fields().sets(sets)


def argument_values(tokens):
    return fields().arguments(tokens)


# ---------------------------------------------------------------- one value, three forms, one parser


@pytest.mark.parametrize(
    "name,in_file,on_line,expected",
    [
        ("quantile_k", 0.6, ["0.6"], 0.6),
        ("max_steps", 20, ["20"], 20),
        ("learning_rate", 1.0e-5, ["1e-5"], 1e-5),
        ("lora", True, ["true"], True),
        ("evaluate", False, ["false"], False),
        ("levels", [3, 4], ["3", "4"], [3, 4]),
        ("reflection_words", ["wait", "check"], ["wait", "check"], ["wait", "check"]),
        ("lr_scheduler_type", "cosine", ["cosine"], "cosine"),  # an enum field: kept as its plain string
        ("eval_max_new_tokens", None, ["none"], None),
        ("token_weighting", "sa_ah", ["sa_ah"], "sa_ah"),
    ],
)
def test_a_value_means_the_same_in_a_file_on_the_line_and_in_set(name, in_file, on_line, expected):
    assert typed_values({name: in_file}, "run.yaml") == {name: expected}
    assert argument_values([f"--{name}", *on_line]) == {name: expected}
    assert argument_values([f"--{name.replace('_', '-')}", *on_line]) == {name: expected}
    assert set_values([f"{name}={','.join(on_line)}"]) == {name: expected}


def test_strings_in_a_file_are_typed_as_on_the_command_line():
    # YAML reads 5e-6 (no dot) as a string; the parser makes it the field's float, as the command line would
    assert typed_values({"learning_rate": "5e-6", "n_train": "64", "lora": "yes"}, "f") == {
        "learning_rate": 5e-6,
        "n_train": 64,
        "lora": True,
    }


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
        assert (
            argument_values([f"--no_{default_true}"])
            == argument_values([f"--no-{default_true}"])
            == {default_true: False}
        )
    run, _ = build("cpu-demo", ["evaluate=true", "save_model=true"], output_dir="unused")
    assert run.evaluate is True and run.save_model is True
    with pytest.raises(ValueError, match="command line: --n_train needs a value"):
        argument_values(["--n_train"])
    with pytest.raises(ValueError, match="'0.6' is not a --name of a field"):
        argument_values(["0.6"])


@pytest.mark.parametrize(
    "values,message",
    [
        ({"quantile_kk": 0.6}, r"run.yaml: unknown field 'quantile_kk' \(did you mean 'quantile_k'\?\)"),
        ({"n_train": 2.5}, r"run.yaml: n_train: invalid int value: '2.5'"),
        ({"n_train": True}, r"run.yaml: n_train: invalid int value: 'true'"),
        ({"quantile_k": "high"}, r"run.yaml: quantile_k: invalid float value: 'high'"),
        ({"lora": "maybe"}, r"run.yaml: lora: Truthy value expected"),
        ({"lr_scheduler_type": "wobbly"}, r"run.yaml: lr_scheduler_type: invalid choice"),
        ({"n_train": None}, r"run.yaml: n_train may not be None"),
        ({"n_train": [1, 2]}, r"run.yaml: n_train takes one value, not a list"),
        ({"levels": {"a": 1}}, r"run.yaml: levels takes no mapping"),
    ],
)
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
    cfg_file = _write(
        tmp_path / "run.yaml",
        "preset: cpu-demo\nquantile_k: 0.6\nalpha: 0.3\nmax_steps: 9\nlevels: [3, 4]\ntoken_weighting: sa_ah\n",
    )
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


@pytest.mark.parametrize(
    "text,message",
    [
        ("quantile_kk: 0.6\n", r"config file .*bad.yaml: unknown field 'quantile_kk' \(did you mean 'quantile_k'\?\)"),
        ("max_steps: ten\n", r"config file .*bad.yaml: max_steps: invalid int value: 'ten'"),
        ("quantile_k: 1.5\n", r"preset 'cpu-demo', config file .*bad.yaml: quantile_k must lie in the open interval"),
        ("- a\n- b\n", r"config file .*bad.yaml: must hold a mapping"),
        ("a: [1,\n", r"config file .*bad.yaml: not valid YAML"),
        ("env: 3\n", r"config file .*bad.yaml: env must be a mapping"),
        ("1: 2\n", r"config file .*bad.yaml: every key must be a field name \(a string\), got 1 \(int\)"),
        ("? [a, b]\n: 1\n", r"config file .*bad.yaml: not valid YAML|every key must be a field name"),
        ("preset: gpu-please\n", r"unknown preset 'gpu-please'"),
    ],
)
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
    argv = [
        "train",
        "--config",
        str(cfg_file),
        "--alpha",
        "0.3",
        "--levels",
        "3",
        "4",
        "--lora",
        "--output-dir",
        str(out_dir),
        "--dry-run",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    said = json.loads(capsys.readouterr().out)
    assert said["command"] == (
        f"python -m qae_lab train --preset cpu-demo --config {cfg_file} --alpha 0.3 --levels 3 4 --lora"
    )
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
    assert (cfg.quantile_k, cfg.token_weighting, cfg.alpha, run.levels, cfg.max_steps) == (
        0.6,
        "sa_ah",
        0.3,
        (3, 4, 5),
        200,
    )
    assert cfg.report_to == ["tensorboard"] and run.model == "embedded"


def test_the_preset_files_are_installed_with_the_package():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "configs/*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["qae_lab.runs"]
    assert PRESET_DIR == Path(__file__).resolve().parents[2] / "qae_lab" / "runs" / "configs"
    assert any(d.startswith("pyyaml") for d in pyproject["project"]["dependencies"])  # read at import of presets


# ---------------------------------------------------------------- one classified table of settable fields


def test_every_field_a_run_can_be_given_is_classified_once():
    installed = set(field_types(QAEConfig)) | set(field_types(RunArgs))
    assert installed - set(settings.FIELDS) == set()  # a new TRL / transformers field fails here until classified
    assert set(settings.FIELDS.values()) == {
        settings.ORDINARY,
        settings.SENDS_OUT,
        settings.RUNS_CODE,
        settings.CREDENTIAL,
        settings.COMMAND_LINE,
    }
    named = [name for names in settings._CLASSES.values() for name in names.split()]
    assert len(named) == len(set(named))  # each field in one class only
    # every field named like a credential, by TrainingArguments' own rule and the key / secret / password names, is one
    assert {f for f in installed if credential_name(f)} <= {
        f for f, c in settings.FIELDS.items() if c == settings.CREDENTIAL
    }


def test_a_field_not_in_the_table_is_refused_by_name_until_it_is_classified():
    parser = settings.FieldParser(
        [QAEConfig, RunArgs], {k: v for k, v in settings.FIELDS.items() if k != "log_unique_prompts"}
    )
    message = (
        r"log_unique_prompts is a field qae_lab has not classified yet .* refused until qae_lab.runs.settings.FIELDS"
    )
    for call in (
        lambda: parser.typed({"log_unique_prompts": True}, "run.yaml"),
        lambda: parser.sets(["log_unique_prompts=true"]),
        lambda: parser.arguments(["--log_unique_prompts"]),
        lambda: parser.arguments(["--no_log_unique_prompts"]),
    ):
        with pytest.raises(ValueError, match=message):
            call()


SECRET = "hf_plantedSecret0123456789"


def test_a_credential_is_refused_in_every_form_and_never_repeated(tmp_path, capsys):
    # found: --hub_token hf_... was taken like any setting and written to config.json, the marker, report.html
    for call in (
        lambda: typed_values({"hub_token": SECRET}, "run.yaml"),
        lambda: set_values([f"hub_token={SECRET}"]),
        lambda: set_values(['hub_token={"x": "' + SECRET + '"}']),
        lambda: argument_values(["--hub_token", SECRET]),
        lambda: argument_values([f"--hub-token={SECRET}"]),
    ):
        with pytest.raises(ValueError, match=r"hub_token carries a credential, .*hf auth login.*HF_TOKEN") as err:
            call()
        assert SECRET not in str(err.value)
    cfg_file = _write(tmp_path / "run.yaml", f"hub_token: {SECRET}\n")
    out = tmp_path / "run"
    for argv in (["--hub_token", SECRET], ["--set", f"hub_token={SECRET}"], ["--config", str(cfg_file)]):
        for extra in (["--dry-run"], []):
            assert main(["train", *argv, "--output-dir", str(out), *extra]) == 2
            said = capsys.readouterr()
            assert "hub_token carries a credential" in said.err and SECRET not in said.out + said.err
    assert not out.exists()  # refused before the folder is touched


def test_the_command_lines_own_fields_are_refused_with_the_flag_that_does_it():
    # resume_from_checkpoint is TrainingArguments' field for scripts; Trainer.train never reads it, so a run given it
    # would start afresh and say nothing
    with pytest.raises(ValueError, match=r"command line: resume_from_checkpoint is what `train --resume RUN_DIR` does"):
        argument_values(["--resume_from_checkpoint", "runs/x"])


@pytest.mark.parametrize(
    "sets, said",
    [
        (["push_to_hub=true", "hub_model_id=me/run"], "push_to_hub=True, hub_model_id='me/run'"),
        (["report_to=wandb"], "report_to=['wandb']"),
        (
            ["log_completions=true", "log_completions_hub_repo=me/completions"],
            "log_completions_hub_repo='me/completions'",
        ),
        (
            ["use_vllm=true", "vllm_mode=server", "vllm_server_host=10.0.0.5"],
            "vllm_mode='server (prompts to 10.0.0.5:8000)'",
        ),
    ],
)
def test_each_setting_that_sends_data_out_is_said_before_the_run_starts(sets, said):
    _, cfg = build("cpu-demo", sets, output_dir="unused")
    assert settings.outgoing_lines(cfg) == [f"sends data out: {said}"]
    _, quiet = build("cpu-demo", ["report_to=tensorboard", "use_vllm=true"], output_dir="unused")
    assert settings.outgoing(quiet) == {}  # local files, a colocated vLLM: nothing leaves


def test_every_field_that_sends_data_out_is_a_switch_or_says_where_one_sends():
    switches = {"push_to_hub", "report_to", "log_completions_hub_repo", "vllm_mode"}
    destinations = {
        "hub_model_id",
        "hub_strategy",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "vllm_server_base_url",
        "vllm_server_host",
        "vllm_server_port",
        "vllm_group_port",
    }
    assert {f for f, c in settings.FIELDS.items() if c == settings.SENDS_OUT} == (switches | destinations) - {
        "vllm_mode"
    }
    from qae_lab.runs import run_plan

    assert (
        set(run_plan._SENDS_NOTHING) == switches
    )  # each switch has a value that sends nothing, named on a refused resume


# ---------------------------------------------------------------- env: by exact name


@pytest.mark.parametrize(
    "name, message",
    [
        ("WANDB__EXECUTABLE", "is not among the variables a file may set"),  # wandb's override of the program it starts
        ("WANDB_API_KEY", "carries a credential"),
        ("HF_TOKEN", "carries a credential"),
        ("COMET_API_KEY", "carries a credential"),
        ("MLFLOW_TRACKING_PASSWORD", "carries a credential"),
        ("WANDB_LOG_MODEL", "is not among the variables a file may set"),  # uploads the model: the shell's choice
        ("HF_ENDPOINT", "is not among the variables a file may set"),
        ("LD_PRELOAD", "is not among the variables a file may set"),
        ("PYTHONPATH", "is not among the variables a file may set"),
    ],
)
def test_env_takes_the_names_the_lab_needs_not_prefixes(name, message):
    # found: the allow-list admitted every WANDB_* name, WANDB__EXECUTABLE included
    with pytest.raises(ValueError, match=rf"run.yaml: env: {name} {message}") as err:
        settings.check_env({name: "planted-value"}, "run.yaml")
    assert "planted-value" not in str(err.value)


def test_the_env_allow_list_is_names_and_none_of_them_a_credential(monkeypatch):
    for table in (settings.ENV_ALLOWED, settings.ENV_SHELL_ONLY):
        assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and not credential_name(name) for name in table)
    assert settings.check_env({"WANDB_PROJECT": "qae", "MLFLOW_TRACKING_URI": "file:./mlruns"}) == {
        "WANDB_PROJECT": "qae",
        "MLFLOW_TRACKING_URI": "file:./mlruns",
    }
    monkeypatch.setenv("HF_HOME", "/data/hf")
    assert settings.check_env({"HF_HOME": "/data/hf"}) == {"HF_HOME": "/data/hf"}  # what the shell set already
    with pytest.raises(ValueError, match="HF_HOME is read by .* set it in the shell"):
        settings.check_env({"HF_HOME": "/elsewhere"})


@pytest.mark.parametrize(
    "name",
    [
        "WANDB_PROJECT_X",  # an allowed name, then more
        "WANDB_PROJECTX",
        "TOKENIZERS_PARALLELISM_",
        "MLFLOW_TRACKING_URI2",
        "HF_HOME_OLD",  # a shell-only name, then more: not a name the shell-only rule knows either
    ],
)
def test_an_env_name_that_only_starts_like_an_allowed_one_is_refused(name, tmp_path):
    # Planted bug: check_env tested `not any(name.startswith(a) for a in (*ENV_ALLOWED, *ENV_SHELL_ONLY))` instead of
    # exact membership -> "DID NOT RAISE ValueError" for every name here
    assert any(name.startswith(a) and name != a for a in (*settings.ENV_ALLOWED, *settings.ENV_SHELL_ONLY))
    with pytest.raises(ValueError, match=rf"run.yaml: env: {name} is not among the variables a file may set"):
        settings.check_env({name: "hello"}, "run.yaml")
    cfg = _write(tmp_path / "run.yaml", f"preset: cpu-demo\nenv:\n  {name}: hello\n")
    with pytest.raises(ValueError, match=rf"config file .*run.yaml: env: {name} is not among the variables"):
        read_config(cfg)


# ---------------------------------------------------------------- a config file is read as what it claims to be

BILLION_LAUGHS = "".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)]
    + ["model_init_kwargs: {x: *a8}\n"]
)


def test_a_config_file_with_aliases_is_refused_before_anything_expands(tmp_path, capsys):
    # found: ~540 bytes passed --dry-run, then expanded to ~10^8 items when printed or saved
    bomb = _write(tmp_path / "bomb.yaml", BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 1000
    with pytest.raises(ValueError, match=r"bomb.yaml: line 2, column 10: an alias \(\*name\) repeats another value"):
        read_config(bomb)
    assert main(["train", "--config", str(bomb), "--dry-run"]) == 2
    said = capsys.readouterr()
    assert "an alias (*name) repeats another value" in said.err and len(said.out + said.err) < 2000


def test_a_config_file_that_is_not_utf8_or_too_large_is_refused_naming_it(tmp_path):
    # found: a Latin-1 byte gave "'utf-8' codec can't decode byte 0xe9", no file name
    latin1 = tmp_path / "run.yaml"
    latin1.write_bytes("quantile_k: 0.6\nrun_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"config file .*run.yaml: line 2, column 14: byte 0xe9 is not UTF-8"):
        read_config(latin1)
    big = _write(tmp_path / "big.yaml", "# " + "x" * settings.MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ValueError, match=r"big.yaml: larger than a settings file may be"):
        read_config(big)
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfquantile_k: 0.6\n")  # a UTF-8 file some editors mark: read as it is
    assert read_config(bom)[0] == {"quantile_k": 0.6}


def test_a_config_file_of_exactly_1_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    # Planted bugs: `if len(data) >= MAX_CONFIG_BYTES` in _config_text -> the 1 MiB file is refused and the first
    # read_config fails; `f.read(MAX_CONFIG_BYTES)` (no + 1) -> the 1 MiB + 1 file is read cut short, no ValueError
    assert settings.MAX_CONFIG_BYTES == 1048576  # 1 MiB, as documented
    head = "quantile_k: 0.6\n# "
    at_limit = tmp_path / "at_limit.yaml"
    at_limit.write_bytes((head + "x" * (settings.MAX_CONFIG_BYTES - len(head) - 1) + "\n").encode("ascii"))
    assert at_limit.stat().st_size == 1048576
    assert read_config(at_limit) == ({"quantile_k": 0.6}, {})
    over = tmp_path / "over.yaml"
    over.write_bytes((head + "x" * (settings.MAX_CONFIG_BYTES - len(head)) + "\n").encode("ascii"))
    assert over.stat().st_size == 1048577
    with pytest.raises(ValueError, match=r"over.yaml: larger than a settings file may be \(1048576 bytes\)"):
        read_config(over)


def test_a_set_value_nested_too_deep_is_refused_by_name():
    with pytest.raises(ValueError, match="--set model_init_kwargs: nested too deep to read"):
        set_values(["model_init_kwargs=" + "[" * 100_000])


@pytest.mark.parametrize(
    "address, part",
    [
        ("https://alice:s3cretPass@tracking.example:5000", "a password"),
        ("https://s3cretPass@tracking.example", "a user part"),  # a token as the user part
        ("http://10.0.0.5:8000/v1?api_key=s3cretPass", "the query key 'api_key'"),
        ("https://tracking.example/?run=3&token=s3cretPass", "the query key 'token'"),
        ("https://bucket.example/x?X-Amz-Signature=s3cretPass", "the query key 'X-Amz-Signature'"),
        ("https://tracking.example/#access_token=s3cretPass", "the fragment key 'access_token'"),
    ],
)
def test_an_address_with_a_credential_anywhere_in_it_is_refused_where_a_run_would_record_it(address, part):
    with pytest.raises(ValueError, match=rf"env: MLFLOW_TRACKING_URI is an address with {part}") as err:
        settings.check_env({"MLFLOW_TRACKING_URI": address}, "run.yaml")
    assert "s3cretPass" not in str(err.value)
    for call in (
        lambda: set_values([f"vllm_server_base_url={address}"]),
        lambda: argument_values(["--vllm_server_base_url", address]),
        lambda: typed_values({"vllm_server_base_url": address}, "run.yaml"),
        lambda: set_values([f'report_to=["{address}"]']),  # inside a list, of any field
        lambda: QAEConfig(output_dir="unused", use_cpu=True, report_to=[], vllm_server_base_url=address),
        lambda: QAEConfig(output_dir="unused", use_cpu=True, report_to=[], lr_scheduler_kwargs={"url": address}),
    ):
        with pytest.raises(ValueError, match=rf"is an address with {part}") as err:
            call()
        assert "s3cretPass" not in str(err.value)


def test_an_address_without_a_credential_is_taken():
    assert settings.check_env({"MLFLOW_TRACKING_URI": "https://tracking.example:5000"})  # without one: taken
    assert settings.check_env({"MLFLOW_TRACKING_URI": "https://tracking.example/?experiment=3&keyword=x"})
    assert set_values(["vllm_server_base_url=http://10.0.0.5:8000"]) == {"vllm_server_base_url": "http://10.0.0.5:8000"}


# ---------------------------------------------------------------- what mutation testing found unheld (settings)


@pytest.mark.parametrize(
    "text, message",
    [
        ("preset: cpu-demo\nalpha: 0.1\nquantile_k: 0.6\nalpha: 0.3\n", "'alpha' is set twice, on line 2 and line 4"),
        (
            "quantile_k: 0.6\nenv:\n  WANDB_PROJECT: a\n  WANDB_MODE: offline\n  WANDB_PROJECT: b\n",
            "'WANDB_PROJECT' is set twice, on line 3 and line 5",
        ),
    ],
)
def test_a_key_set_twice_in_a_config_file_is_refused_naming_both_lines(text, message, tmp_path):
    # a repeated key would let the last silently win: refused, at the top level and inside env:, with both lines.
    # Planted: `key = None` / `... if (isinstance(key_node, yaml.ScalarNode)) and False else None` /
    # `if key is None and key in lines` / `lines.setdefault(None, line)` / `lines.setdefault(line)` -> DID NOT RAISE;
    # `line = None` / `line = ... - 1` / `line = ... + 2` / `lines.setdefault(key, None)` / `lines.setdefault(key, )`
    # -> the lines named are wrong (None, 1 and 3, 3 and 5) -> fails
    cfg = _write(tmp_path / "run.yaml", text)
    with pytest.raises(ValueError, match=rf"^config file {re.escape(str(cfg))}: {message}: set it once$"):
        read_config(cfg)


def test_a_key_holding_a_credential_set_twice_is_refused_without_repeating_it(tmp_path, capsys):
    # a repeated key is named in its refusal, unless it is an address holding a credential: then the part is said,
    # never the key. Planted: `repr(key)` for key_words(key) in either refusal -> the secret is in the message
    secret = "https://u:s3cret@h"
    cfg = _write(tmp_path / "run.yaml", f'model_init_kwargs:\n  "{secret}": 1\n  "{secret}": 2\n')
    with pytest.raises(
        ValueError,
        match=r"a key with a password \(scheme://user:password@host\) in it is set twice, on line 2 and line 3",
    ) as err:
        read_config(cfg)
    assert secret not in str(err.value)
    as_json = json.dumps({"a": 1}).replace('"a": 1', f'"{secret}": 1, "{secret}": 2')
    assert main(["train", "--dry-run", "--set", f"model_init_kwargs={as_json}"]) == 2
    said = capsys.readouterr()
    assert "a key with a password (scheme://user:password@host) in it is set twice" in said.err
    assert "s3cret" not in said.out + said.err


@pytest.mark.parametrize(
    "text, message",
    [
        ("? !!seq a\n: 1\n", "expected a sequence node, but found scalar"),  # a key tagged as a list
        ("? !!map a\n: 1\n", "expected a mapping node, but found scalar"),  # a key tagged as a mapping
        ("x: !!set a\n", "expected a mapping node, but found scalar"),
        ("x: !!map [a, b]\n", "expected a mapping node, but found sequence"),
    ],
)
def test_a_value_tagged_as_another_kind_is_refused_as_yaml_naming_the_file(text, message, tmp_path, capsys):
    # found: `x: !!set a` gave "qae-lab: error: not enough values to unpack (expected 2, got 1)" (no file named) and
    # `x: !!map [a, b]` a TypeError: _PlainLoader.construct_mapping read node.value as key/value pairs before YAML's
    # own check that the node is a mapping. Planted (in _PlainLoader.construct_mapping, the key read with
    # `construct_object(key_node, deep=False)` / `deep=None` / no deep) -> the tagged keys give an empty list or
    # mapping as key, and `key in lines` raises TypeError: unhashable -> fails
    cfg = _write(tmp_path / "run.yaml", text)
    with pytest.raises(ValueError, match=rf"^config file {re.escape(str(cfg))}: not valid YAML \({message}"):
        read_config(cfg)
    assert main(["train", "--config", str(cfg), "--dry-run"]) == 2
    assert f"qae-lab: error: config file {cfg}: not valid YAML" in capsys.readouterr().err


def _stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_a_deeply_nested_config_file_is_built_without_recursing_per_level():
    # YAML's constructor builds nested mappings through generators, one level at a time: only the composer's depth
    # limits a file (a few hundred levels; deeper is refused as "nested too deep to read"). Planted:
    # `def construct_mapping(self, node, deep=True)` in _PlainLoader -> every level built inside the one above,
    # ~5 frames a level, RecursionError under 50 frames of headroom -> fails
    depth = 150
    loader = settings._PlainLoader("x: " + "{a: " * depth + "1" + "}" * depth + "\n")
    try:
        node = loader.get_single_node()  # composed under the usual limit
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(_stack_depth() + 50)
        try:
            built = loader.construct_document(node)
        finally:
            sys.setrecursionlimit(limit)
    finally:
        loader.dispose()
    inner, levels = built["x"], 0
    while isinstance(inner, dict):
        inner, levels = inner["a"], levels + 1
    assert (levels, inner) == (depth, 1)


@pytest.mark.parametrize(
    "data, line, column",
    [
        (b"\xe9", 1, 1),
        (b"\n\xe9\n", 2, 1),  # the only newline before the byte is the file's first
        (b"quantile_k: 0.6\nalpha: 0.3\nrun_name: caf\xe9\n", 3, 14),  # counted from the last newline, not the first
    ],
)
def test_a_byte_that_is_not_utf8_is_placed_by_line_and_column(data, line, column, tmp_path):
    # Planted: `data.find(b"\n", 0, err.start)` -> column 25 for line 3; `data.rfind(b"\n", 1, err.start)` -> column 2
    # for line 2 -> fails
    bad = tmp_path / "run.yaml"
    bad.write_bytes(data)
    with pytest.raises(
        ValueError,
        match=rf"^config file {re.escape(str(bad))}: line {line}, column {column}: byte 0xe9 is not UTF-8 "
        r"\(save the file as UTF-8\)$",
    ):
        read_config(bad)


def test_a_config_file_far_over_the_limit_is_refused_without_being_read_whole(tmp_path):
    # "a larger one is refused unread": at most MAX_CONFIG_BYTES + 1 bytes are read, whatever the file's size.
    # Planted: `data = f.read(None)` -> the 64 MiB (sparse) file is read whole, a 64 MiB peak -> fails
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(64 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"huge.yaml: larger than a settings file may be \(1048576 bytes\)$"):
            read_config(huge)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * settings.MAX_CONFIG_BYTES  # one read of 1 MiB + 1, not 64 MiB


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n- b\n", "must hold a mapping of field names to values, got list"),
        ("just words\n", "must hold a mapping of field names to values, got str"),
        ("env: 3\n", "env must be a mapping of variable names to values, got int"),
        ("env: [A, B]\n", "env must be a mapping of variable names to values, got list"),
    ],
)
def test_a_config_file_of_the_wrong_shape_says_what_it_holds(text, message, tmp_path):
    # Planted: `got {type(None).__name__}` for the file or for env: -> "got NoneType" / "got a NoneType" -> fails
    cfg = _write(tmp_path / "run.yaml", text)
    with pytest.raises(ValueError, match=rf"^config file {re.escape(str(cfg))}: {message}$"):
        read_config(cfg)


def test_env_values_are_the_strings_a_shell_would_hold():
    # YAML's true / false / numbers become what one writes in a shell. Planted: each of `"XXtrueXX"`, `"TRUE"`,
    # `"XXfalseXX"`, `"FALSE"`, `value is False` for `value is True` (and back), `(value is True) and False`,
    # `(value is False) and False` in check_env's text -> "True" / "False" / the wrong word -> fails
    assert settings.check_env(
        {"TOKENIZERS_PARALLELISM": False, "MLFLOW_NESTED_RUN": True, "WANDB_TAGS": 3, "WANDB_NOTES": 0.5}
    ) == {"TOKENIZERS_PARALLELISM": "false", "MLFLOW_NESTED_RUN": "true", "WANDB_TAGS": "3", "WANDB_NOTES": "0.5"}


@pytest.mark.parametrize("value", [None, ["a", "b"], ("a",), {"a": 1}])
def test_an_env_value_that_is_not_one_plain_value_is_refused(value):
    # `WANDB_TAGS:` left empty reads as None; a list or mapping has no one string. Planted: `isinstance(value, (dict,
    # list, tuple)) and value is None` -> None becomes "None", a list "['a', 'b']" -> DID NOT RAISE
    with pytest.raises(
        ValueError, match=r"^run.yaml: env: WANDB_TAGS needs one plain value \(a string, number or true/false\)$"
    ):
        settings.check_env({"WANDB_TAGS": value}, "run.yaml")


@pytest.mark.parametrize("name", ["MY-VAR", "1ABC", "", "WANDB PROJECT", 3])
def test_an_env_key_that_is_no_variable_name_is_refused_as_such(name):
    # Planted: `not isinstance(name, str) and not _ENV_NAME.fullmatch(name)` -> a string that is no name goes on to
    # "is not among the variables ..." and the number 3 to a TypeError -> fails
    with pytest.raises(
        ValueError, match=rf"^run.yaml: env: {re.escape(repr(name))} is not an environment variable's name$"
    ):
        settings.check_env({name: "x"}, "run.yaml")


def test_an_env_refusal_without_a_source_says_env_and_lists_the_allowed_names():
    # without a source the message starts "env: " once (it read "env: env: " when the default source was "env");
    # the allowed names are listed comma-separated. Planted: `where = "XXenvXX"` or a default source "env" -> "^env:
    # LD_PRELOAD" fails; `'XX, XX'.join(ENV_ALLOWED)` -> the list's separators fail
    with pytest.raises(ValueError) as err:
        settings.check_env({"LD_PRELOAD": "/tmp/x.so"})
    message = str(err.value)
    assert message.startswith(
        "env: LD_PRELOAD is not among the variables a file may set (TOKENIZERS_PARALLELISM, QAE_LAB_GSM8K_DIR, "
        "PYTORCH_CUDA_ALLOC_CONF, "
    )
    assert message.endswith(", CLEARML_TASK, NEPTUNE_PROJECT); set others in the shell")
    assert all(name in message for name in settings.ENV_ALLOWED) and "/tmp/x.so" not in message
    with pytest.raises(ValueError, match=r"^env: WANDB_TAGS needs one plain value"):
        settings.apply_env({"WANDB_TAGS": None})  # apply_env checks with the same default


def test_apply_env_sets_each_variable_and_says_what_reads_it(monkeypatch):
    # Planted: `lines.append(None)` in apply_env -> [None, None, None] -> fails
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")  # monkeypatch restores each after the test
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("HF_HOME", "/data/hf")  # shell-only: taken when the shell set that very value
    lines = settings.apply_env({"TOKENIZERS_PARALLELISM": False, "WANDB_MODE": "offline", "HF_HOME": "/data/hf"})
    assert lines == [
        "TOKENIZERS_PARALLELISM=false (read by the tokenizers library, when it first encodes in parallel)",
        "WANDB_MODE=offline (read by Weights & Biases, when training starts: online, offline or disabled)",
        "HF_HOME=/data/hf (read by huggingface_hub and transformers, when they are imported)",
    ]
    assert (os.environ["TOKENIZERS_PARALLELISM"], os.environ["WANDB_MODE"]) == ("false", "offline")


def test_outgoing_names_a_vllm_server_as_a_resume_names_it_and_says_nothing_when_nothing_leaves():
    # outgoing() gives the settings in the form `--set` names them again on a resume (vllm_mode=server), and a run
    # that sends nothing prints no note. Planted: `out["vllm_mode"] = None` / `"XXserverXX"` / `"SERVER"` -> fails;
    # `if (sent) or True` in outgoing_lines -> ["sends data out: "] for the quiet run -> fails;
    # `getattr(cfg, "log_completions_hub_repo", )` -> AttributeError for a config that lacks the field -> fails
    _, cfg = build("cpu-demo", ["use_vllm=true", "vllm_mode=server"], output_dir="unused")
    assert settings.outgoing(cfg) == {"vllm_mode": "server"}
    _, quiet = build("cpu-demo", ["report_to=tensorboard", "use_vllm=true"], output_dir="unused")
    assert settings.outgoing_lines(quiet) == []
    without = types.SimpleNamespace(push_to_hub=False, report_to=["wandb"], use_vllm=False, vllm_mode="server")
    assert settings.outgoing(without) == {"report_to": ["wandb"]}  # a config with no log_completions_hub_repo


@dataclasses.dataclass
class _Demo:
    options: dict[str, int] = dataclasses.field(default_factory=dict)
    tags: list[str] = dataclasses.field(default_factory=list)
    title: str = ""


def test_a_parser_of_any_dataclass_takes_a_mapping_field_and_says_values_as_the_command_line_does():
    # FieldParser reads any dataclass (its docstring's Demo): a field typed dict takes a mapping; YAML's false / true
    # are the words false / true, a mapping inside a list its JSON. Planted: `_allows` taking typing.get_args of every
    # hint (`... in (typing.Union, types.UnionType)) or True`) -> dict[str, int] admits no dict, "takes no mapping";
    # in _tokens: `(v is False) and False` / `v is True` for `v is False` -> "False"; `"FALSE"` -> "FALSE";
    # `(isinstance(v, dict)) and False` -> "{'k': 1}"; `json.dumps(None)` -> "null" -> fails
    parser = settings.FieldParser([_Demo], dict.fromkeys(("options", "tags", "title"), settings.ORDINARY))
    assert parser.typed({"options": {"a": 1}}, "demo.yaml") == {"options": {"a": 1}}
    assert parser.typed({"title": False, "tags": ["a", {"k": 1}, False, True]}, "demo.yaml") == {
        "title": "false",
        "tags": ["a", '{"k": 1}', "false", "true"],
    }
