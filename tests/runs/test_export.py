"""Tests for qae_lab.runs.export: a tiny run of the embedded model (2 steps on the CPU), exported and loaded back.

The round trip: the exported folder, loaded with ``AutoModelForCausalLM`` alone, gives the same greedy
completions (and logits within float32 rounding) as the trained policy loaded the project's way
(:func:`qae_lab.runs.export.load_trained`: for LoRA, the base model with the run's adapter, unmerged). The
LoRA run trains with a learning rate large enough that its adapter changes every completion, so a
merge that dropped the adapter would fail the test. Also: the model card's numbers against the run's
files, ``--adapter-only``, checkpoints, and the refusals (a non-empty OUT, no ``model/``, an
interrupted export leaves no OUT). The Hub upload is never run: only its arguments are checked.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import types
from pathlib import Path

import pytest
import torch
from testkit.tiny_runs import TINY
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

import qae_lab.runs.export as export
from qae_lab.__main__ import main
from qae_lab.task.data import prompt_text, synthetic_task
from qae_lab.runs.export import export_run, find_source, load_trained, save_model
from qae_lab.task.models import load_policy
from qae_lab.runs.presets import build
from qae_lab.runs.pipeline import train
from qae_lab.storage.folder import RunFolderError

PROMPTS = synthetic_task(6, levels=(2, 3, 4, 5), seed=7)  # held out from the runs' training problems (seed 0)


def _run(folder: Path, extra: list[str]) -> Path:
    run, cfg = build("cpu-demo", [*TINY, *extra], output_dir=str(folder))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train(run, cfg, preset="cpu-demo")
    return folder


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> Path:
    """The full model trained 2 steps, evaluated before and after (4 problems x 2 samples)."""
    return _run(tmp_path_factory.mktemp("full") / "run", ["n_eval=4", "eval_samples=2"])  # cpu-demo evaluates


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """LoRA trained 2 steps at lr 0.02 (every greedy completion changes), a checkpoint at step 2, no evaluation."""
    return _run(
        tmp_path_factory.mktemp("lora") / "run",
        ["lora=true", "learning_rate=0.02", "evaluate=false", "save_strategy=steps", "save_steps=2"],
    )


def _greedy(model, tok) -> tuple[list[str], torch.Tensor]:
    """Greedy completions of PROMPTS and the prompts' logits (N, T, V)."""
    enc = tok([prompt_text(r, tok) for r in PROMPTS], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=48, pad_token_id=tok.pad_token_id)
        logits = model(**enc).logits.float()
    return tok.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True), logits


def _dtypes(folder: Path) -> set[str]:
    """The tensor dtypes in a folder's model.safetensors, read from its header."""
    with (folder / "model.safetensors").open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def _cli(*argv: str) -> tuple[int, str, str]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["export", *map(str, argv)])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow(seconds=6)
def test_lora_run_exports_merged_and_as_adapter(lora_run, tmp_path):
    trained, tok = load_trained(lora_run)
    assert type(trained).__name__ == "PeftModelForCausalLM"
    want, want_logits = _greedy(trained, tok)
    base, base_tok = load_policy("embedded", device="cpu")
    untrained, base_logits = _greedy(base.eval(), base_tok)
    assert all(a != b for a, b in zip(want, untrained)), "the adapter must change the completions for this test"
    assert (want_logits - base_logits).abs().max() > 1.0

    # merged, through the command line; float32, so that completions can be compared exactly
    code, out, err = _cli(lora_run, tmp_path / "merged", "--dtype", "float32")
    assert code == 0, err
    assert "exported" in out and "model.safetensors" in out
    folder = tmp_path / "merged"
    assert not (folder / "adapter_config.json").exists() and _dtypes(folder) == {"F32"}
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert not any("lora" in name for name, _ in model.named_parameters())
    got, got_logits = _greedy(model, AutoTokenizer.from_pretrained(folder, padding_side="left"))
    assert got == want
    assert (got_logits - want_logits).abs().max() < 1e-3  # merged W + s B A against x W + s x B A: rounding only
    assert json.loads((folder / "qae_lab_run.json").read_text())["run"]["lora"] is True

    # the adapter alone, which PEFT loads over the base model
    from peft import PeftModel

    assert export_run(lora_run, tmp_path / "adapter", adapter_only=True) == tmp_path / "adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= {
        p.name for p in (tmp_path / "adapter").iterdir()
    }
    assert "library_name: peft" in (tmp_path / "adapter" / "README.md").read_text()
    reloaded = PeftModel.from_pretrained(load_policy("embedded", device="cpu")[0], tmp_path / "adapter").eval()
    assert _greedy(reloaded, tok)[0] == want
    with pytest.raises(ValueError, match="dtype='float16' applies to a merged model"):
        export_run(lora_run, tmp_path / "x", adapter_only=True, dtype="float16")


@pytest.mark.slow(seconds=5)
def test_a_checkpoint_exports_when_the_run_has_no_model(lora_run, tmp_path):
    # an interrupted run: its folder without model/ (a copy: the run folder itself is never changed)
    cut = tmp_path / "cut"
    shutil.copytree(lora_run, cut, ignore=shutil.ignore_patterns("model"))
    code, _, err = _cli(cut, tmp_path / "out")
    assert code == 2 and "has no model/" in err and "checkpoint-2: export that with --checkpoint latest" in err
    assert not (tmp_path / "out").exists()

    assert export_run(cut, tmp_path / "latest", checkpoint="latest", dtype="float32").is_dir()
    assert export_run(cut / "checkpoint-2", tmp_path / "by-folder", dtype="float32").is_dir()  # the folder as RUN_DIR
    card = (tmp_path / "latest" / "README.md").read_text()
    assert "| steps | 2 of max_steps 2 |" in card and "from checkpoint-2/" in card
    assert "Not evaluated" in card  # the run had evaluate=false
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "latest").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "by-folder").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(RunFolderError, match=r"checkpoint 7: .* has no checkpoint-7/ \(its checkpoints: 2\)"):
        find_source(cut, 7)


@pytest.mark.slow(seconds=5)
def test_full_run_exports_bf16_with_its_numbers_in_the_card(full_run, tmp_path, monkeypatch):
    pushed = []
    monkeypatch.setattr(
        export,
        "push",
        lambda folder, repo, private=False: pushed.append(
            (sorted(p.name for p in Path(folder).iterdir()), repo, private)
        ),
    )
    out = export_run(full_run, tmp_path / "export", push_to_hub="someone/tiny-qae", private=True)
    assert _dtypes(out) == {"BF16"}  # the default: 16-bit
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.bfloat16 and json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert (out / "generation_config.json").is_file() and (out / "tokenizer.json").is_file()
    assert not (out / "training_args.bin").exists()  # no pickle leaves the run folder
    assert pushed == [(sorted(p.name for p in out.iterdir()), "someone/tiny-qae", True)]  # after the folder is whole

    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n") and "- qae-lab\n- grpo\n" in card
    assert "base_model:" not in card  # the embedded model is no Hub id
    config = json.loads((full_run / "config.json").read_text())
    before, after = (json.loads((full_run / f"eval_{w}.json").read_text())["summary"] for w in ("before", "after"))
    for key, label in (("greedy_pass@1", "greedy pass@1"), ("pass@1", "sampled pass@1")):
        assert f"| {label} | {before[key]:.3f} | {after[key]:.3f} |" in card
    assert f"| K (quantile_k) | {config['trainer']['quantile_k']:g} |" in card
    assert f"| alpha | {config['trainer']['alpha']:g} (not used" in card
    assert f"| steps | 2 of max_steps {config['trainer']['max_steps']} |" in card
    assert f"| method | {config['run']['method']} (baseline quantile" in card
    assert f"{int(after['n_problems'])} problems" in card and f"n = {int(after['n_samples'])} completions" in card
    with pytest.raises(ValueError, match="adapter_only: .*/model/ holds a full model"):
        export_run(full_run, tmp_path / "x", adapter_only=True)


@pytest.mark.slow(seconds=5)
def test_an_export_never_writes_over_anything(full_run, tmp_path, monkeypatch):
    snapshot = {p: p.stat().st_mtime_ns for p in full_run.rglob("*")}
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    code, _, err = _cli(full_run, taken)
    assert code == 2 and "is not empty (notes.txt)" in err and "--overwrite" in err
    for out in (full_run, full_run / "model", full_run / "model" / "sub", full_run.parent, full_run / "checkpoint-9"):
        code, _, err = _cli(full_run, out, "--overwrite")  # the run's own files: refused even with --overwrite
        assert code == 2 and "out " in err, (out, err)
    assert {p: p.stat().st_mtime_ns for p in full_run.rglob("*")} == snapshot

    # killed while writing: no OUT, no half-written folder beside it
    def dies(self, folder, **kwargs):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(PreTrainedModel, "save_pretrained", dies)
        code, _, err = _cli(full_run, tmp_path / "cut")
    assert code == 130 and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]

    # --overwrite: the old folder is renamed aside, not deleted; an empty OUT is simply used
    assert _cli(full_run, taken, "--overwrite")[0] == 0
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".replaced-taken-")]
    assert len(aside) == 1 and (aside[0] / "notes.txt").read_text() == "mine" and (taken / "README.md").is_file()
    (tmp_path / "empty").mkdir()
    assert _cli(full_run, tmp_path / "empty")[0] == 0 and (tmp_path / "empty" / "model.safetensors").is_file()
    assert {p: p.stat().st_mtime_ns for p in full_run.rglob("*")} == snapshot


def test_an_export_never_takes_a_name_a_run_folder_uses(full_run, tmp_path):
    other = tmp_path / "other"  # another run: its model/ must not be renamed aside and replaced, even with --overwrite
    (other / "model").mkdir(parents=True)
    (other / "model" / "weights.bin").write_text("theirs")
    (other / "log.jsonl").write_text('{"step": 1}\n')
    for out in (
        other / "model",
        other / "checkpoint-3",
        other / ".staging",
        full_run / "finished-step2",
        full_run / "eval_after.json",
    ):
        code, _, err = _cli(full_run, out, "--overwrite")
        assert code == 2 and "is a name the run folder uses" in err, (out, err)
    assert (other / "model" / "weights.bin").read_text() == "theirs" and not (full_run / "finished-step2").exists()
    # "model" as an ancestor, in a folder that holds no run, is fine (as OUT's own name it is refused everywhere)
    assert _cli(full_run, tmp_path / "plain" / "model" / "export")[0] == 0


def test_an_export_into_a_link_or_from_damaged_weights_gets_a_named_error(full_run, tmp_path):
    # a symlink to an empty folder as OUT, and a damaged model/*.safetensors, gave tracebacks
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    code, _, err = _cli(full_run, tmp_path / "link")
    assert code == 2 and "is a symbolic link" in err and err.count("\n") == 1
    assert (tmp_path / "link").is_symlink() and not any(target.iterdir())
    damaged = Path(shutil.copytree(full_run, tmp_path / "damaged"))
    weights = damaged / "model" / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])
    code, _, err = _cli(damaged, tmp_path / "out")
    assert code == 2 and "model/ is damaged: model.safetensors is cut short" in err and not (tmp_path / "out").exists()
    weights.write_bytes(whole)
    (damaged / "config.json").write_text("[1, 2]")  # valid JSON, not a run's config
    code, _, err = _cli(damaged, tmp_path / "out")
    assert code == 2 and "is damaged (a JSON dict is needed, it holds a list)" in err


def test_a_link_planted_at_the_exports_staging_name_is_never_written_through(full_run, tmp_path):
    # found: the staging folder's name (.OUT.export-<pid>) held a planted link; rmtree(ignore_errors) left it, the
    # whole model was written where it pointed, and OUT became a link to it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f".out.export-{os.getpid()}").symlink_to(elsewhere)
    assert export_run(full_run, tmp_path / "out") == tmp_path / "out"
    assert not any(elsewhere.iterdir()) and not (tmp_path / "out").is_symlink()
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_run_without_weights_is_refused_naming_what_is_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"run": {"model": "embedded"}, "trainer": {}}))
    with pytest.raises(
        RunFolderError,
        match=r"has no model/ \(the run was interrupted, or trained with "
        r"save_model=false\) and no complete checkpoint: nothing to export",
    ):
        find_source(tmp_path)
    (tmp_path / "model").mkdir()
    with pytest.raises(RunFolderError, match=r"model/ holds no safetensors weights"):
        find_source(tmp_path)
    with pytest.raises(RunFolderError, match="has no complete checkpoint"):
        find_source(tmp_path, "latest")
    with pytest.raises(RunFolderError, match="is not a folder"):
        find_source(tmp_path / "nowhere")


def test_the_command_line_arguments(monkeypatch, tmp_path):
    calls, pushed = [], []
    monkeypatch.setattr(export, "export_run", lambda run_dir, out, **kw: calls.append((run_dir, out, kw)) or tmp_path)
    monkeypatch.setattr(export, "push", lambda folder, repo, private: pushed.append((folder, repo, private)) or "url")
    code, out, _ = _cli("runs/a", "out", "--checkpoint", "40", "--push-to-hub", "me/model", "--private")
    assert code == 0 and "pushed: url" in out
    assert calls[-1] == ("runs/a", "out", {"checkpoint": 40, "adapter_only": False, "dtype": None, "overwrite": False})
    assert pushed == [(tmp_path, "me/model", True)]  # after the export
    assert _cli("runs/a", "out", "--checkpoint", "latest", "--adapter-only")[0] == 0
    assert calls[-1][2]["checkpoint"] == "latest" and calls[-1][2]["adapter_only"] is True and len(pushed) == 1

    def offline(folder, repo, private):
        raise ConnectionError("no network")

    monkeypatch.setattr(export, "push", offline)
    code, _, err = _cli("runs/a", "out", "--push-to-hub", "me/model")
    assert code == 1 and "upload to me/model failed (ConnectionError: no network)" in err and "is complete" in err
    n = len(calls)
    code, _, err = _cli("runs/a", "out", "--push-to-hub", "no-owner")
    assert code == 2 and "--push-to-hub must be a Hub repository id 'owner/name', got 'no-owner'" in err
    assert len(calls) == n  # checked before anything is exported
    for bad, named in ((["--dtype", "int8"], "invalid choice: 'int8'"), (["--checkpoint", "last"], "'latest'")):
        with pytest.raises(SystemExit) as exit_, contextlib.redirect_stderr(io.StringIO()) as err:
            main(["export", "runs/a", "out", *bad])
        assert exit_.value.code == 2 and named in err.getvalue()
    monkeypatch.undo()
    with pytest.raises(ValueError, match="push_to_hub must be a Hub repository id 'owner/name', got 'no-owner'"):
        export_run(tmp_path, tmp_path / "out", push_to_hub="no-owner")
    with pytest.raises(ValueError, match=r"dtype must be one of \('bfloat16', 'float16', 'float32'\), got 'fp8'"):
        export_run(tmp_path, tmp_path / "out", dtype="fp8")


def test_save_model_publishes_model_once(tmp_path):
    class Trainer:  # what save_model uses of a trainer: one process, the main one
        accelerator = types.SimpleNamespace(wait_for_everyone=lambda: None)

        def is_world_process_zero(self):
            return True

        def save_model(self, folder):
            Path(folder).mkdir(parents=True, exist_ok=True)  # as transformers' Trainer.save_model
            (Path(folder) / "model.safetensors").write_bytes(b"weights")

    assert save_model(Trainer(), tmp_path) == tmp_path / "model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging folder left
    with pytest.raises(RunFolderError, match="model/ exists already"):
        save_model(Trainer(), tmp_path)
    assert (tmp_path / "model" / "model.safetensors").read_bytes() == b"weights"


def _hand_made_run(folder: Path) -> Path:
    """A run folder as far as find_source reads one (no training): config.json and a whole model/."""
    from safetensors.torch import save_file

    (folder / "model").mkdir(parents=True)
    save_file({"w": torch.zeros(4)}, str(folder / "model" / "model.safetensors"))
    (folder / "model" / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "config.json").write_text(json.dumps({"run": {"model": "embedded"}, "trainer": {}}))
    (folder / "log.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    return folder


def test_an_export_folder_under_a_file_or_inside_a_runs_own_names_is_refused(tmp_path, monkeypatch):
    # finding 11: OUT under a regular file died inside save_pretrained; finding 1: the names a run owns, everywhere
    run = _hand_made_run(tmp_path / "run")
    monkeypatch.setattr(export, "load_trained", lambda *a, **k: pytest.fail("checked after loading"))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(
        RunFolderError,
        match=rf"out {tmp_path / 'notes.txt' / 'out'}: {tmp_path / 'notes.txt'} is a file, not a folder",
    ):
        export_run(run, tmp_path / "notes.txt" / "out")
    code, _, err = _cli(run, tmp_path / "notes.txt" / "out")
    assert code == 2 and "notes.txt is a file, not a folder" in err and err.count("\n") == 1
    for out in (
        tmp_path / "far" / ".staging" / "out",
        tmp_path / "far" / "checkpoint-2" / "out",
        tmp_path / "plain" / "model",
        run / "model-export" / "finished-step4",
        tmp_path / "x" / "log.jsonl",
    ):
        with pytest.raises(RunFolderError, match="is a name the run folder uses for itself"):
            export_run(run, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "run"]


def test_a_model_folder_with_links_is_named(tmp_path):
    # finding 7, for export: a linked or folder weights file counted as whole
    run = _hand_made_run(tmp_path / "run")
    model = run / "model"
    assert export.model_problems(model) == []
    os.replace(model / "model.safetensors", tmp_path / "weights.safetensors")
    (model / "model.safetensors").symlink_to(tmp_path / "weights.safetensors")
    (model / "tokenizer.json").symlink_to(tmp_path / "nowhere")
    assert export.model_problems(model) == [
        f"model.safetensors is a symbolic link (to {tmp_path / 'weights.safetensors'}): a model folder's files are its own",
        f"tokenizer.json is a symbolic link (to {tmp_path / 'nowhere'}): a model folder's files are its own",
    ]
    with pytest.raises(RunFolderError, match="model/ is damaged: model.safetensors is a symbolic link"):
        find_source(run)
    (model / "model.safetensors").unlink()
    (model / "tokenizer.json").unlink()
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../../weights.safetensors"}}))
    assert export.model_problems(model) == [
        "model.safetensors.index.json lists ../../weights.safetensors, which is no file name in the folder"
    ]


def test_save_model_never_deletes_what_no_trainer_staged(tmp_path):
    # finding 1, the deleting side: save_model empties .staging/model before it saves there
    class Trainer:
        accelerator = types.SimpleNamespace(wait_for_everyone=lambda: None)

        def is_world_process_zero(self):
            return True

        def save_model(self, folder):
            pytest.fail("saved over a nested run")

    nested = tmp_path / ".staging" / "model"
    nested.mkdir(parents=True)
    (nested / ".qae_lab-run.json").write_text('{"qae_lab_run": 1}')
    with pytest.raises(RunFolderError, match=r"\.staging/ holds a run of its own \(model/.qae_lab-run.json\)"):
        save_model(Trainer(), tmp_path)
    assert (nested / ".qae_lab-run.json").is_file()
