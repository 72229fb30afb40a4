"""One decision for a setting, whatever form it arrives in: every settable field of QAEConfig and RunArgs, fed the
same values as a Python object (plain, numpy, torch), a JSON string, ``--set name=value``, ``--name value`` and a
YAML file, is taken with the same value in every form or refused in every form.

Found before: ``model_init_kwargs`` as a JSON string passed the key check that its dict form failed (TRL then read
it into a dict, and a local model folder's Python ran), and ``reward_weights=[np.float32("nan")]`` passed where
``[float("nan")]`` was refused. Planted back (a JSON object string left for TRL to read after the checks, with no
check after TRL's ``__post_init__``; ``plain_value`` left out of ``QAEConfig.__post_init__``), each makes this test
fail.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
import warnings

import numpy as np
import pytest
import torch
import yaml

from qae_lab.runs.presets import RunArgs, fields
from qae_lab.runs.settings import FIELDS, ORDINARY, RUNS_CODE, SENDS_OUT, read_config
from qae_lab.train.config import QAEConfig

_RUN_FIELDS = {f.name for f in dataclasses.fields(RunArgs)}
# settings whose values need more than a CPU and a few milliseconds to decide (a GPU, a file, a process group)
_SKIP = {
    "deepspeed",
    "fsdp",
    "fsdp_config",
    "accelerator_config",
    "parallelism_config",
    "use_cpu",
    "local_rank",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "gsm8k_path",
    "debug",
    "ddp_backend",
}


def _options(hint) -> tuple:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _probes(name: str, hint) -> list[tuple[object, str]]:
    """(a value, the text that says it on the command line) for each probe of the field's type."""
    opts = _options(hint)
    out: list[tuple[object, str]] = []
    if bool in opts:
        out += [(True, "true"), (False, "false")]
    if int in opts:
        out += [(v, str(v)) for v in (0, -1, 3)]
    if float in opts:
        out += [(v, str(v)) for v in (0.25, -1.0, float("nan"), float("inf"))]
    if any(typing.get_origin(o) is list for o in opts):
        item = next(typing.get_args(o)[0] for o in opts if typing.get_origin(o) is list)
        lists = {int: [[3, 4]], float: [[1.0], [float("nan")], [0.5, 2.0]]}.get(item, [["wait", "x"]])
        out += [(v, json.dumps(v).replace("NaN", "NaN")) for v in lists]
    if any(o is dict or typing.get_origin(o) is dict for o in opts):
        for v in ({"dtype": "float32"}, {"trust_remote_code": True}, {"api_key": "abc"}, {"top_k": 5}):
            out.append((v, json.dumps(v)))
    if str in opts and not out:
        out += [("x", "x")]
    return out


def _numeric_variants(value) -> list:
    """The same value as numpy and torch numbers (inside lists too)."""
    if isinstance(value, bool):
        return [np.bool_(value)]
    if isinstance(value, int):
        return [np.int64(value), torch.tensor(value)]
    if isinstance(value, float):
        return [np.float64(value), torch.tensor(value, dtype=torch.float64)]
    if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
        return [[np.float32(v) if math.isnan(v) or v in (0.5, 1.0, 2.0) else v for v in value], np.array(value)]
    return []


def _decide(name: str, value, tmp_path):
    """What the dataclass that holds ``name`` makes of ``value``: ("taken", the value it holds) or ("refused",)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if name in _RUN_FIELDS:
                got = getattr(RunArgs(**{name: value}), name)
            else:
                base = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": []}
                got = getattr(QAEConfig(**{**base, name: value}), name)
        except (ValueError, TypeError, NotImplementedError):
            return ("refused",)
    if isinstance(got, enum.Enum):
        got = got.value
    if isinstance(got, tuple):
        got = list(got)
    return ("taken", got)


def _parsed(route, name: str, value, text: str, tmp_path):
    """The value the route's parser hands on, or ("refused",) where the parser refuses it."""
    try:
        if route == "--set":
            return fields().sets([f"{name}={text}"])[name]
        if route == "--name":
            tokens = [f"--{name}", *(map(str, value) if isinstance(value, list) else [text])]
            return fields().arguments(tokens)[name]
        path = tmp_path / "run.yaml"
        path.write_text(text if route == "yaml (quoted JSON)" else yaml.safe_dump({name: value}))
        loaded, _env = read_config(path)
        return fields().typed(loaded, str(path))[name]
    except ValueError:
        return ("refused",)


def _settable() -> list[str]:
    kinds = (ORDINARY, SENDS_OUT, RUNS_CODE)
    return sorted(n for n in fields().names if FIELDS.get(n) in kinds and n not in _SKIP)


@pytest.mark.slow(seconds=40)
def test_every_field_gets_one_decision_in_every_form(tmp_path):
    parser, disagreements, probed = fields(), [], 0
    for name in _settable():
        for value, text in _probes(name, parser.hints[name]):
            probed += 1
            want = _decide(name, value, tmp_path)
            said = {}
            for variant in _numeric_variants(value):
                said[f"python {type(variant).__module__}"] = _decide(name, variant, tmp_path)
            if isinstance(value, dict):
                said["python JSON string"] = _decide(name, json.dumps(value), tmp_path)
                quoted = yaml.safe_dump({name: json.dumps(value)})
            for route in ("--set", "--name", "yaml") + (("yaml (quoted JSON)",) if isinstance(value, dict) else ()):
                typed = _parsed(route, name, value, quoted if route == "yaml (quoted JSON)" else text, tmp_path)
                said[route] = typed if typed == ("refused",) else _decide(name, typed, tmp_path)
            for route, got in said.items():
                same = got == want or (got[0] == want[0] == "taken" and json.dumps(got[1]) == json.dumps(want[1]))
                if not same:
                    disagreements.append(f"{name}={value!r}: python {want}, {route} {got}")
    assert probed > 400
    assert not disagreements, "\n".join(disagreements[:40]) + f"\n({len(disagreements)} in all)"


@pytest.mark.parametrize(
    "value",
    [
        '{"trust_remote_code": true}',
        '{"trust_remote_code": "true"}',
        ' {"trust_remote_code": true}',
        {"trust_remote_code": "false"},
        {"trust_remote_code": 1},
    ],
)
def test_code_running_model_kwargs_are_refused_in_every_form_of_the_mapping(tmp_path, value):
    with pytest.raises(ValueError, match=r"model_init_kwargs"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], model_init_kwargs=value)
    text = value if isinstance(value, str) else json.dumps(value)
    for route in ("--set", "--name", "yaml (quoted JSON)"):
        source = yaml.safe_dump({"model_init_kwargs": text}) if route.startswith("yaml") else text
        typed = _parsed(route, "model_init_kwargs", text, source, tmp_path)
        assert typed == ("refused",) or _decide("model_init_kwargs", typed, tmp_path) == ("refused",), route


def test_a_config_changed_after_it_was_built_is_checked_again_by_the_trainer(tmp_path):
    from qae_lab.task.models import load_policy
    from qae_lab.train.trainer import QAETrainer
    from qae_lab.task import data, rewards

    cfg = QAEConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
    )
    cfg.model_init_kwargs = {"trust_remote_code": True}  # after __post_init__: a dataclass field is writable
    model, tok = load_policy("embedded", device="cpu")
    with pytest.raises(ValueError, match=r"model_init_kwargs.trust_remote_code=true"):
        QAETrainer(
            model=model,
            reward_funcs=rewards.correctness_reward,
            args=cfg,
            processing_class=tok,
            train_dataset=data.to_grpo_dataset(data.synthetic_task(4)),
        )


def test_an_unusable_path_is_refused_by_name_in_every_form(tmp_path, capsys):
    # a NUL byte reached os calls as "embedded null byte" (no name), or was printed back raw
    from qae_lab.runs.cli import main

    nul = "a\x00b"
    for argv, named in (
        (["train", "--output-dir", nul], "--output-dir"),
        (["train", "--set", f"output_dir={nul}"], "output_dir"),
        (["train", "--config", nul], "--config"),
        (["train", "--resume", nul], "--resume"),
        (["train", "--set", f"gsm8k_path={nul}"], "gsm8k_path"),
        (["train", "--set", f"model={nul}"], "model"),
        (["train", "--set", f"output_dir={'x' * 300}"], "output_dir"),
        (["export", str(tmp_path), nul], "out"),
    ):
        assert main([*argv, "--dry-run"] if argv[0] == "train" else argv) == 2
        err = capsys.readouterr().err
        assert f"{named} holds a NUL byte" in err or f"{named} is too long" in err, err
        assert "\x00" not in err
    with pytest.raises(ValueError, match="output_dir holds a NUL byte"):
        QAEConfig(output_dir=nul, use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match="gsm8k_path holds a NUL byte"):
        RunArgs(gsm8k_path=nul)


# ---------------------------------------------------------------- a third pass, by other routes (each found, then closed)

SECRET = "s3cretValue9"


@pytest.mark.parametrize(
    "sets",
    [
        ["hf_token=" + SECRET],  # a mistyped credential field: unknown, and its value not repeated
        ['lr_scheduler_kwargs={"api_key": "' + SECRET + '"}'],  # a credential key inside a mapping
        ['chat_template_kwargs={"url": "https://u:' + SECRET + '@h"}'],
        ['generation_kwargs={"stop": ["https://u:' + SECRET + '@h"]}'],
        ["vllm_server_host=user:" + SECRET + "@myhost"],  # a host without a scheme (TRL adds http://)
        ["vllm_server_host=" + SECRET + "@myhost:8000"],
        ["vllm_server_base_url=http://h:8000/?accessToken=" + SECRET],  # camelCase
        ["hub_model_id=https://h/m?privatekey=" + SECRET],
        ["vllm_server_base_url=http://h:8000/v1;token=" + SECRET],  # a path parameter
        ["vllm_server_base_url=http://h:8000/?pw=" + SECRET],
    ],
)
def test_a_credential_anywhere_is_refused_and_never_repeated(sets, capsys):
    from qae_lab.runs.cli import main

    assert main(["train", *[a for s in sets for a in ("--set", s)], "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert SECRET not in captured.err + captured.out and "error" in captured.err


def test_an_env_address_with_a_credential_or_a_nul_byte_is_refused_by_name(tmp_path, capsys):
    from qae_lab.runs.cli import main

    for value, said in (
        (f"https://tracking.example/?accessToken={SECRET}", "MLFLOW_TRACKING_URI is an address with the query key"),
        ("/tmp/a\x00b", "env: QAE_LAB_GSM8K_DIR holds a NUL byte"),
    ):
        name = "MLFLOW_TRACKING_URI" if "tracking" in value else "QAE_LAB_GSM8K_DIR"
        (tmp_path / "run.yaml").write_text(yaml.safe_dump({"env": {name: value}}))
        assert main(["train", "--config", str(tmp_path / "run.yaml"), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert said in err and SECRET not in err and "\x00" not in err, err


def test_files_transformers_reads_must_be_regular_files_and_a_pipe_never_blocks(tmp_path, capsys):
    # found: a named pipe as --config or accelerator_config blocked the dry run forever; a missing fsdp_config and a
    # deepspeed file without the deepspeed package passed it, or failed with a traceback
    import os

    from qae_lab.runs.cli import main

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv, said in (
        (["--config", str(fifo)], f"config file {fifo} is a named pipe, not a regular file"),
        (["--set", f"accelerator_config={fifo}"], f"accelerator_config {fifo} is a named pipe"),
        (["--set", f"fsdp_config={tmp_path / 'none.json'}"], f"fsdp_config {tmp_path / 'none.json'} cannot be read"),
        (["--set", f"fsdp_config={tmp_path}"], f"fsdp_config {tmp_path} is a folder"),
    ):
        assert main(["train", *argv, "--dry-run"]) == 2
        assert said in capsys.readouterr().err
    (tmp_path / "ds.json").write_text("{}")
    with pytest.raises(ValueError, match="deepspeed needs the deepspeed package"):
        QAEConfig(output_dir=str(tmp_path / "run"), use_cpu=True, report_to=[], deepspeed=str(tmp_path / "ds.json"))


@pytest.mark.parametrize(
    "kwargs, said",
    [
        ({"run_name": "a\x00b"}, "run_name holds a NUL byte"),
        ({"hub_model_id": "me/a\x00b"}, "hub_model_id holds a NUL byte"),
        ({"lr_scheduler_kwargs": {"x": "a\x00b"}}, r"lr_scheduler_kwargs.x holds a NUL byte"),
        ({"log_level": "loud"}, r"log_level must be one of \["),
        ({"generation_kwargs": {"max_new_tokens": 10**9}}, r"generation_kwargs.max_new_tokens must be a whole number"),
        (
            {"generation_kwargs": {"num_beams": 10**6}},
            r"generation_kwargs.num_beams must be a whole number in \[1, 64\]",
        ),
        ({"generation_kwargs": {"num_return_sequences": 4}}, "generation_kwargs.num_return_sequences must be 1"),
        ({"reflection_words": [f"w{i}" for i in range(1001)]}, "words must hold at most 1000 entries"),
        ({"model_init_kwargs": {"attn_implementation": "flash_attention_2"}}, "needs the flash_attn package"),
        ({"model_init_kwargs": {"attn_implementation": "paged|flash_attention_3"}}, "needs the flash_attn_interface"),
    ],
)
def test_values_that_cannot_be_used_or_would_fetch_code_are_refused_by_the_config(tmp_path, kwargs, said):
    # flash attention without its package: transformers (5.25, with its kernels dependency) fetches a Hub kernel
    pytest.importorskip("transformers")
    if "flash" in said:
        import importlib.util

        if importlib.util.find_spec("flash_attn") or importlib.util.find_spec("flash_attn_interface"):
            pytest.skip("flash attention is installed here: it runs no code from elsewhere")
    with pytest.raises(ValueError, match=said):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kwargs)


def test_a_model_folder_naming_a_hub_kernel_is_refused_before_anything_loads(tmp_path, capsys):
    # found: a model folder's config.json with attn_implementation "kernels-community/..." made transformers fetch and
    # run that kernel when the model loaded; and QAETrainer ran a folder's remote code before refusing its args
    import json
    import shutil

    from qae_lab.runs.cli import main
    from qae_lab.task.models import embedded_dir, load_policy
    from qae_lab.train.trainer import QAETrainer

    evil = tmp_path / "model"
    shutil.copytree(embedded_dir(), evil)
    config = json.loads((evil / "config.json").read_text())
    (evil / "config.json").write_text(json.dumps({**config, "attn_implementation": "kernels-community/flash-attn2"}))
    with pytest.raises(ValueError, match=r"config.json .*attn_implementation must be one of transformers' own"):
        load_policy(str(evil), device="cpu")
    assert main(["train", "--set", f"model={evil}", "--dry-run"]) == 2
    assert "attn_implementation must be one of" in capsys.readouterr().err
    from trl import GRPOConfig

    marker = tmp_path / "ran"
    # a GRPOConfig (converted, as GRPOTrainer takes it) or none (TRL's default: on a CPU its bf16 is refused first):
    # either way refused before the folder's model loads
    rewards = [lambda completions, **kw: [0.0] * len(completions)]
    grpo = GRPOConfig(output_dir=str(tmp_path / "o"), report_to=[], use_cpu=True)
    with pytest.warns(UserWarning, match="got a GRPOConfig"), pytest.raises(ValueError, match="attn_implementation"):
        QAETrainer(model=str(evil), reward_funcs=rewards, args=grpo)
    with pytest.raises(ValueError, match=r"attn_implementation must be one of|bf16"):
        QAETrainer(model=str(evil), reward_funcs=rewards, args=None)
    assert not marker.exists()
    cfg = QAEConfig(output_dir=str(tmp_path / "o"), report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=r"attn_implementation must be one of"):
        QAETrainer(model=str(evil), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=cfg)


def test_settings_that_pair_are_checked_together_before_anything_loads(capsys):
    from qae_lab.runs.cli import main

    for sets, said in (
        (["success_reward=nope"], "success_reward must name one of the run's reward functions"),
        (["levels=[2,2,3]"], "each level once"),
    ):
        assert main(["train", *[a for s in sets for a in ("--set", s)], "--dry-run"]) == 2
        assert said in capsys.readouterr().err


# ---------------------------------------------------------------- a fourth pass, by yet other routes


def _folder_with_config(tmp_path, **extra):
    import json
    import shutil

    from qae_lab.task.models import embedded_dir

    folder = tmp_path / "model"
    shutil.copytree(embedded_dir(), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **extra}))
    return folder


def test_a_reward_model_or_an_experts_implementation_naming_a_kernel_is_refused(tmp_path):
    # found: a reward model given by name, and a config.json's experts_implementation (deepgemm, sonicmoe), were
    # loaded as named: transformers fetches those kernels from the Hub
    from qae_lab.task.models import check_model_files
    from qae_lab.train.trainer import QAETrainer

    reward_model = _folder_with_config(tmp_path, attn_implementation="kernels-community/flash-attn2")
    cfg = QAEConfig(output_dir=str(tmp_path / "o"), report_to=[], use_cpu=True)
    from qae_lab.task.models import embedded_dir

    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        QAETrainer(model=str(embedded_dir()), reward_funcs=[str(reward_model)], args=cfg)
    experts = _folder_with_config(tmp_path / "e", experts_implementation="deepgemm")
    with pytest.raises(ValueError, match=r"experts_implementation must be one of transformers' own"):
        check_model_files(str(experts))
    check_model_files(str(_folder_with_config(tmp_path / "g", experts_implementation="grouped_mm")))


@pytest.mark.parametrize(
    "build_it",
    [
        lambda: QAEConfig(output_dir="o", use_cpu=True, report_to=[], max_steps="https://u:" + SECRET + "@h"),
        lambda: QAEConfig(
            output_dir="o",
            use_cpu=True,
            report_to=[],
            generation_kwargs={"max_new_tokens": "https://u:" + SECRET + "@h"},
        ),
        lambda: QAEConfig(output_dir="o", use_cpu=True, report_to=[], chat_template_kwargs={"auth": SECRET}),
        lambda: QAEConfig(output_dir="o", use_cpu=True, report_to=[], chat_template_kwargs={"api-key": SECRET}),
        lambda: QAEConfig(output_dir="o", use_cpu=True, report_to=[], chat_template_kwargs={"access-token": SECRET}),
        lambda: QAEConfig(
            output_dir="o", use_cpu=True, report_to=[], chat_template_kwargs={"https://u:" + SECRET + "@h": 1}
        ),
        lambda: RunArgs(task="https://u:" + SECRET + "@h"),
        lambda: RunArgs(dtype="https://u:" + SECRET + "@h"),
        lambda: RunArgs(model="https://u:" + SECRET + "@h/x"),
    ],
)
def test_no_message_in_python_repeats_a_credential(build_it):
    with pytest.raises(ValueError) as err:
        build_it()
    assert SECRET not in str(err.value) and "credential" in str(err.value) or "address" in str(err.value)
    assert SECRET not in str(err.value)


def test_what_a_config_holds_as_python_values_means_what_the_command_line_means():
    # found: RunArgs took lora="false" (true in Python), torch_threads=2.5 and levels=(2.0, 3.0), which a resume then
    # refused; a whole Decimal was a float
    from decimal import Decimal

    for kwargs, said in (
        ({"lora": "false"}, "lora must be true or false"),
        ({"evaluate": "no"}, "evaluate must be true or false"),
        ({"torch_threads": 2.5}, r"torch_threads must be an int \[1, 1024\]"),
        ({"eval_max_new_tokens": 3.5}, "eval_max_new_tokens must be an int"),
        ({"levels": (2.0, 3.0)}, r"levels must be an int \[1, 5\]"),
    ):
        with pytest.raises(ValueError, match=said):
            RunArgs(**kwargs)
    assert RunArgs(n_train=Decimal(10)).n_train == 10
    assert QAEConfig(output_dir="o", use_cpu=True, report_to=[], max_steps=Decimal(10)).max_steps == 10


def test_sizes_hidden_in_generation_kwargs_and_epochs_are_bounded(capsys):
    from qae_lab.runs.cli import main

    for preset, sets, said in (
        ("cpu-demo", ['generation_kwargs={"max_cache_len": 1000000000000}'], "generation_kwargs.max_cache_len"),
        (  # the disk bound counts the epochs' steps too
            "qwen2.5-3b-gsm8k",
            [
                "lora=false",
                "save_strategy=steps",
                "save_steps=1",
                "save_total_limit=none",
                "max_steps=-1",
                "num_train_epochs=40",
            ],
            "the run would keep 4000 checkpoints",
        ),
    ):
        assert main(["train", "--preset", preset, *[a for s in sets for a in ("--set", s)], "--dry-run"]) == 2
        assert said in capsys.readouterr().err


def test_beams_count_in_the_memory_estimate():
    from qae_lab.runs import limits
    from qae_lab.runs.presets import build

    regime = {"regime_batch": 16, "regime_draws": 4}
    one = limits.run_peak(*build("qwen2.5-1.5b-gsm8k", output_dir="unused"), **regime)["step"]
    beams = build("qwen2.5-1.5b-gsm8k", ['generation_kwargs={"num_beams": 8}'], output_dir="unused")
    assert limits.run_peak(*beams, **regime)["step"] > one


def test_tensorboard_sent_into_the_run_folder_by_the_environment_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "run" / "tb"))
    with pytest.raises(ValueError, match="TENSORBOARD_LOGGING_DIR .* lies in the run folder outside its runs/"):
        QAEConfig(output_dir=str(tmp_path / "run"), use_cpu=True, report_to=[])
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "run" / "runs" / "x"))
    QAEConfig(output_dir=str(tmp_path / "run"), use_cpu=True, report_to=[])


def test_a_run_folder_leaves_room_for_what_a_run_writes_inside_it(tmp_path):
    # found: a 4,060-byte output_dir passed the checks and the run failed at its first checkpoint
    # (".staging/checkpoint-1/generation_config.json" past 4,096 bytes)
    deep = tmp_path.joinpath(*["d" * 200] * ((4060 - len(str(tmp_path))) // 201))
    with pytest.raises(ValueError, match=r"output_dir is too long .*room kept"):
        QAEConfig(output_dir=str(deep), use_cpu=True, report_to=[])


# ---------------------------------------------------------------- the parser itself: each test below was seen to fail
# with the changes it names planted in qae_lab/runs/settings.py (mutation testing's survivors)


def _fresh_parser(**without):
    # built here, not fields()'s parser: that one is built once per process, so a change to FieldParser.__init__
    # shows only in a parser built after it
    from qae_lab.runs.settings import FieldParser

    return FieldParser([QAEConfig, RunArgs], {k: v for k, v in FIELDS.items() if k not in without})


def test_a_new_parser_types_values_refuses_bad_ones_with_an_error_and_has_no_help_field():
    # a bad value is a ValueError naming the source and the field, never argparse's exit; --help is no field.
    # Planted: exit_on_error=True (or left out) -> SystemExit; `option_strings or dest != "help"` (or "XXhelpXX",
    # "HELP") -> "help" a settable name; hints for the names `not in self.actions` -> KeyError; each -> fails
    parser = _fresh_parser()
    assert parser.typed({"max_steps": "3", "lora": "false"}, "run.yaml") == {"max_steps": 3, "lora": False}
    with pytest.raises(ValueError, match=r"^run\.yaml: max_steps: invalid int value: 'abc'$"):
        parser.typed({"max_steps": "abc"}, "run.yaml")
    assert "help" not in parser.names and "max_steps" in parser.names
    with pytest.raises(ValueError, match=r"^command line: unknown field 'help'"):
        parser.arguments(["--help"])


def test_a_list_item_the_parser_would_read_as_an_option_is_refused_not_dropped():
    # found: argparse reads '-1e-05' (a number its negative-number rule misses), '-b' and '--lea' as options, and
    # parse_known_args left them out silently: reward_weights=[1.0, -1e-05] became [1.0]. Now refused by name.
    # Planted: allow_abbrev=True (or left out) -> '--lea' read as --learning_rate ("expected one argument") -> fails
    parser = _fresh_parser()
    assert parser.typed({"reward_weights": [1.0, -0.5]}, "run.yaml") == {"reward_weights": [1.0, -0.5]}
    with pytest.raises(ValueError, match=r"^run\.yaml: reward_weights: '-1e-05' cannot be read as one of its values"):
        parser.typed({"reward_weights": [1.0, -1e-05]}, "run.yaml")
    with pytest.raises(ValueError, match=r"^run\.yaml: label_names: '--lea' cannot be read as one of its values"):
        parser.typed({"label_names": ["a", "--lea"]}, "run.yaml")
    with pytest.raises(ValueError, match=r"^--set label_names=a,-b: label_names: '-b' cannot be read"):
        parser.sets(["label_names=a,-b"])


_PW = "https://u:pw@h"


@pytest.mark.parametrize(
    "call, message",
    [
        # no close name: no hint. Planted: `if close or True` -> IndexError; the empty hint "XXXX" -> fails
        (lambda p: p.arguments(["--zzzzqqqq", "1"]), r"^command line: unknown field 'zzzzqqqq': a RunArgs or QAE"),
        # Planted: _unknown(name, None / "XXcommand lineXX" / "COMMAND LINE") in arguments -> fails
        (lambda p: p.arguments(["--quantile_kk", "1"]), r"^command line: unknown field 'quantile_kk' \(did you mean "),
        # Planted: _unknown(name, None) in sets -> fails
        (lambda p: p.sets(["quantile_kk=1"]), r"^--set quantile_kk: unknown field 'quantile_kk' \(did you mean "),
        # a one-letter flag is a flag. Planted: `len(token) > 3` -> "'--q' is not a --name" -> fails
        (lambda p: p.arguments(["--q"]), r"^command line: unknown field 'q': "),
        # a bare "--" is no flag. Planted: `len(token) >= 2` -> "unknown field ''" -> fails
        (lambda p: p.arguments(["--"]), r"^command line: '--' is not a --name of a field \(nor the value of one\)$"),
        # only --no_NAME (no "=") of a boolean NAME means false. Planted: `... and not sep or self._boolean(...)` ->
        # --xyzlora and --no_lora=true set lora false; `startswith("no_") or ...` -> --no_levels sets levels false
        (lambda p: p.arguments(["--xyzlora"]), r"^command line: unknown field 'xyzlora' \(did you mean 'lora'\?\)"),
        (lambda p: p.arguments(["--no_lora=true"]), r"^command line: unknown field 'no_lora' "),
        (lambda p: p.arguments(["--no_levels"]), r"^command line: unknown field 'no_levels' "),
        # Planted: admit(name[3:], None / "XXcommand lineXX" / "COMMAND LINE") for --no_NAME -> fails
        (
            lambda p: _fresh_parser(lora=1).arguments(["--no_lora"]),
            r"^command line: lora is a field qae_lab has not classified yet",
        ),
        # Planted: `not sep and not name` -> "=5" reaches _unknown, "max_steps" a value "" -> fails
        (lambda p: p.sets(["=5"]), r"^--set needs name=value, got '=5'$"),
        (lambda p: p.sets(["max_steps"]), r"^--set needs name=value, got 'max_steps'$"),
        # Planted: value(..., None) in sets; self.value(..., None / "XXcommand lineXX" / "COMMAND LINE") -> fails
        (lambda p: p.sets(["max_steps=abc"]), r"^--set max_steps=abc: max_steps: invalid int value: 'abc'$"),
        (lambda p: p.arguments(["--max_steps", "abc"]), r"^command line: max_steps: invalid int value: 'abc'$"),
        # Planted: admit(name, None) in sets and in value -> fails
        (lambda p: p.sets(["hub_token=x"]), r"^--set hub_token: hub_token carries a credential"),
        (lambda p: p.typed({"hub_token": "x"}, "run.yaml"), r"^run\.yaml: hub_token carries a credential"),
        # Planted: _refuse_credential(raw, None, ...) / (raw, name, None) in sets, (value, None / name, None) in
        # value -> "None is an address" / "None: ..." -> fails
        (
            lambda p: p.sets([f"vllm_server_base_url={_PW}"]),
            r"^--set vllm_server_base_url: vllm_server_base_url is an address with a password",
        ),
        (
            lambda p: p.typed({"vllm_server_base_url": _PW}, "run.yaml"),
            r"^run\.yaml: vllm_server_base_url is an address with a password",
        ),
        # a JSON object in --set is read, then its keys checked. Planted: startswith(("[", "XX{XX")) -> the string
        # passes the check and value() reads it unchecked; the second check's (value, None) / source None -> fails
        (
            lambda p: p.sets(['lr_scheduler_kwargs={"api_key": "x"}']),
            r"^--set lr_scheduler_kwargs: lr_scheduler_kwargs\.api_key carries a credential",
        ),
        # the raw text is checked before JSON reads it. Planted: the first refusal None, or of None -> "not valid
        # JSON" -> fails
        (
            lambda p: p.sets(["chat_template_kwargs={user:pw@host"]),
            r"^--set chat_template_kwargs: chat_template_kwargs is an address with a password",
        ),
        # Planted: json_mapping(value, None) -> "None: not valid JSON" -> fails
        (
            lambda p: p.typed({"lr_scheduler_kwargs": "{bad"}, "run.yaml"),
            r"^run\.yaml: lr_scheduler_kwargs: not valid JSON",
        ),
        # a field taking None but no list, no mapping. Planted: _allows(hint, None) for list -> ['1', '2'];
        # `not _allows(hint, None)` for dict -> the mapping kept -> fails
        (
            lambda p: p.typed({"eval_steps": [1, 2]}, "run.yaml"),
            r"^run\.yaml: eval_steps takes one value, not a list \(got \[1, 2\]\)$",
        ),
        (
            lambda p: p.typed({"eval_steps": {"a": 1}}, "run.yaml"),
            r"^run\.yaml: eval_steps takes no mapping \(got \{'a': 1\}\)$",
        ),
    ],
)
def test_a_bad_setting_is_refused_naming_its_form_and_field(call, message):
    with pytest.raises(ValueError, match=message) as err:
        call(fields())
    assert "pw@" not in str(err.value)  # the credential never repeated


def test_every_form_reads_its_own_spellings():
    # --set takes name-with-dashes, --name=value is a value, --no_NAME is false, a bare boolean flag true; "none" and
    # "null" are None where the field takes None; a string starting with "{" stays a string where no mapping is taken.
    # Planted: replace("XX-XX", "_") / ("-", "XX_XX"); `[rest] if sep and False`; .upper() in _NONE_WORDS;
    # _allows(None, None); _allows(hint, None) for the "{" reading -> each fails
    parser = fields()
    assert parser.sets(["max-steps=5", "quantile_k=0.6"]) == {"max_steps": 5, "quantile_k": 0.6}
    assert parser.arguments(["--max_steps=5", "--no_lora", "--use_cpu"]) == {
        "max_steps": 5,
        "lora": False,
        "use_cpu": True,
    }
    said = {"eval_steps": "None", "hub_model_id": " null ", "run_name": '{"a": 1}', "lr_scheduler_kwargs": '{"b": 2}'}
    assert parser.typed(said, "run.yaml") == {
        "eval_steps": None,
        "hub_model_id": None,
        "run_name": '{"a": 1}',
        "lr_scheduler_kwargs": {"b": 2},
    }


@pytest.mark.parametrize(
    "available, supported, expected",
    [(True, True, True), (True, False, False), (False, None, False)],
)
def test_bf16_auto_is_true_where_cuda_has_bf16_and_asks_cuda_only_when_there(
    monkeypatch, available, supported, expected
):
    # Planted: bool(None) -> (True, True) false; `is_available() or is_bf16_supported()` -> asks without CUDA -> fails
    def bf16_supported():
        if supported is None:
            raise AssertionError("is_bf16_supported asked without CUDA")
        return supported

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", bf16_supported)
    assert fields().typed({"bf16": " Auto"}, "run.yaml") == {"bf16": expected}
