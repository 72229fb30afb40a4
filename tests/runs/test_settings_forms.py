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
