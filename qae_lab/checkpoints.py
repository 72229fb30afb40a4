r"""Checkpoints in a run folder, and the rules of a resume. Pure: files and JSON, no torch import.

* A checkpoint is complete when :func:`checkpoint_problems` finds nothing missing or cut short;
  :class:`qae_lab.trainer.QAETrainer` stages every save and publishes it in one rename
  (:func:`publish_dir`), so a ``checkpoint-N`` folder is never half written; a resume takes the
  latest complete one (:func:`latest_complete_checkpoint`).
* A resume continues the same experiment: only the fields of :data:`SAFE_ON_RESUME` may change
  (:func:`resume_changes`); it starts from the latest checkpoint, and not from before the end of
  a finished run (:func:`check_resume_point`); and the log goes on without losing a row
  (:func:`resume_log`: rows after the checkpoint are set aside, rows the log lacks are restored).
"""

from __future__ import annotations

import json
import os
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

from qae_lab.runfolder import CHECKPOINT_NAME, LOG_NAME, RunFolderError, fsync_dir, read_log_lines, step_rows

__all__ = ["SAFE_ON_RESUME", "checkpoint_problems", "checkpoints", "latest_complete_checkpoint", "publish_dir",
           "resume_changes", "check_resume_point", "finished_step", "resume_log"]


SAFE_ON_RESUME = {
    "max_steps": "may grow past the checkpoint's step (a schedule that decays over max_steps is stretched from there)",
    "save_strategy": "when checkpoints are written",
    "save_steps": "when checkpoints are written",
    "save_total_limit": "how many checkpoints are kept",
    "torch_threads": "speed only",
    "dataloader_num_workers": "speed only",
    "disable_tqdm": "display only",
    "report_to": "where metrics are also sent",
    "compile_generation": "speed only (the same sampling distribution, compiled or eager)",
}
_NOT_SETTINGS = {"output_dir", "logging_dir", "run_name", "command", "build", "hub_model_id"}


def _zip_problem(path: Path) -> str | None:
    """torch.save writes a zip archive, whose directory sits at its end: a cut file has none. Cheap: reads no data."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"{path.name} is cut short (member {info.filename} runs past the end)"
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        return f"{path.name} is damaged or cut short ({type(err).__name__}: {err}; {size} bytes)"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file: 8-byte header length, a JSON header, then exactly the tensors' bytes."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                return f"{path.name} is cut short (header of {n} bytes in a {size}-byte file)"
            header = json.loads(f.read(n))
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        return f"{path.name} is damaged ({type(err).__name__}: {err})"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        return f"{path.name} is cut short ({size} bytes, {8 + n + end} expected)"
    return None


def checkpoint_problems(checkpoint: str | os.PathLike) -> list[str]:
    r"""What is missing or damaged in a Trainer checkpoint folder; empty when it can be resumed.

    Checks that ``trainer_state.json`` parses and names its step, that model weights are there,
    and that every JSON, torch (``.pt``/``.pth``/``.bin``) and safetensors file in it is whole
    (their structure, read cheaply: a cut file is caught, a bit flip inside the data is not).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "checkpoint-4"; d.mkdir()
    >>> _ = (d / "trainer_state.json").write_text('{"global_step": 4'); _ = (d / "optimizer.pt").write_bytes(b"PK..")
    >>> for p in checkpoint_problems(d): print(p)
    trainer_state.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 18 (char 17))
    no model weights (model.safetensors, adapter_model.safetensors, pytorch_model.bin or a sharded index)
    optimizer.pt is damaged or cut short (BadZipFile: File is not a zip file; 4 bytes)
    """
    folder = Path(checkpoint)
    if not folder.is_dir():
        return [f"{folder} is not a folder"]
    problems = []
    state = folder / "trainer_state.json"
    if not state.is_file():
        problems.append("trainer_state.json is missing")
    else:
        try:
            step = json.loads(state.read_text(encoding="utf-8")).get("global_step")
            if not isinstance(step, int):
                problems.append("trainer_state.json names no global_step")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as err:
            problems.append(f"trainer_state.json is damaged (not JSON: {err})")
    names = {p.name for p in folder.iterdir()}
    weights = {"model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin",
               "model.safetensors.index.json", "pytorch_model.bin.index.json"}
    if not names & weights:
        problems.append("no model weights (model.safetensors, adapter_model.safetensors, pytorch_model.bin or "
                        "a sharded index)")
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name == "trainer_state.json":
            continue
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                problems.append(f"{path.name} is damaged (not JSON: {err})")
        elif path.suffix in (".pt", ".pth", ".bin"):
            problems.append(_zip_problem(path))
        elif path.suffix == ".safetensors":
            problems.append(_safetensors_problem(path))
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            try:
                shards = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
                problems += [f"{s} (listed in {index}) is missing" for s in sorted(shards - names)]
            except (json.JSONDecodeError, KeyError, AttributeError, UnicodeDecodeError):
                pass  # reported above as damaged JSON, or an index without a weight map
    return [p for p in problems if p]


def checkpoints(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    r"""``(step, path)`` of every ``checkpoint-N`` folder in a run folder, by step (complete or not).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = [(d / n).mkdir() for n in ("checkpoint-10", "checkpoint-2", "x")]
    >>> [s for s, _ in checkpoints(d)]
    [2, 10]
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT_NAME.match(p.name))]
    return sorted(found)


def latest_complete_checkpoint(folder: str | os.PathLike) -> tuple[Path | None, list[str]]:
    r"""The run folder's latest checkpoint with no :func:`checkpoint_problems`, and a note per later damaged one.

    Returns:
        ``(path or None, notes)``: each note names a skipped checkpoint and what is wrong with it.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "checkpoint-6").mkdir()
    >>> latest_complete_checkpoint(d)
    (None, ['checkpoint-6 skipped: trainer_state.json is missing; no model weights (model.safetensors, adapter_model.safetensors, pytorch_model.bin or a sharded index)'])
    """
    notes = []
    for _step, path in reversed(checkpoints(folder)):
        problems = checkpoint_problems(path)
        if not problems:
            return path, notes
        notes.append(f"{path.name} skipped: " + "; ".join(problems))
    return None, notes


def publish_dir(staged: str | os.PathLike, final: str | os.PathLike) -> Path:
    r"""Make a fully written folder visible under its final name in one rename.

    Every file in ``staged`` is ``fsync``-ed first, so the renamed folder never holds a file
    whose data is still only in memory. A folder already at ``final`` is kept: renamed to
    ``.replaced-<name>-<time>`` (nothing is deleted).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); staged = d / ".staging" / "checkpoint-2"; staged.mkdir(parents=True)
    >>> _ = (staged / "trainer_state.json").write_text('{"global_step": 2}')
    >>> publish_dir(staged, d / "checkpoint-2").name, sorted(p.name for p in (d / "checkpoint-2").iterdir())
    ('checkpoint-2', ['trainer_state.json'])
    """
    staged, final = Path(staged), Path(final)
    for path in staged.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    fsync_dir(staged)
    if final.exists():
        os.rename(final, final.with_name(f".replaced-{final.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"))
    os.rename(staged, final)
    fsync_dir(final.parent)
    return final


def _differ(old: Any, new: Any) -> bool:
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        return float(old) != float(new)
    return old != new


def resume_changes(stored: dict, trainer: dict, run: dict, *, checkpoint_step: int) -> dict[str, list]:
    r"""The settings a resume changes, ``{name: [old, new]}``; refuses any change not in :data:`SAFE_ON_RESUME`.

    Args:
        stored: the run folder's ``config.json`` (``{"trainer": ..., "run": ...}``).
        trainer, run: the resume's settings in the same JSON form (``QAEConfig.to_dict()``, RunArgs fields).
        checkpoint_step: the step the resume starts from (``max_steps`` must exceed it).

    Fields present on one side only (another TRL version) are not compared.

    Raises:
        RunFolderError: listing every unsafe change (name, stored value, new value) and the safe fields.

    >>> stored = {"trainer": {"quantile_k": 0.4, "max_steps": 20, "seed": 1}, "run": {"n_train": 64}}
    >>> resume_changes(stored, {"quantile_k": 0.4, "max_steps": 40, "seed": 1}, {"n_train": 64}, checkpoint_step=20)
    {'max_steps': [20, 40]}
    >>> resume_changes(stored, {"quantile_k": 0.6, "max_steps": 20, "seed": 1}, {"n_train": 64}, checkpoint_step=5)
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: resuming with other settings than the run was trained with: quantile_k 0.4 -> 0.6. ...
    """
    changes: dict[str, list] = {}
    for section, new in (("trainer", trainer), ("run", run)):
        old = stored.get(section) or {}
        for name in sorted(set(old) & set(new) - _NOT_SETTINGS):
            if _differ(old[name], new[name]):
                changes[name] = [old[name], new[name]]
    unsafe = {k: v for k, v in changes.items() if k not in SAFE_ON_RESUME}
    if unsafe:
        said = ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in unsafe.items())
        raise RunFolderError(
            f"resuming with other settings than the run was trained with: {said}. A resume continues the same "
            f"experiment; only {', '.join(SAFE_ON_RESUME)} may change. For other settings start a new run "
            f"(another --output-dir).")
    if "max_steps" in changes and not changes["max_steps"][1] > checkpoint_step:
        raise RunFolderError(f"max_steps must exceed the checkpoint's step {checkpoint_step} to train on, "
                             f"got {changes['max_steps'][1]}")
    return changes


def check_resume_point(output_dir: str | os.PathLike, step: int) -> None:
    r"""Refuse to resume a run folder from step ``step`` when that would train logged, kept steps again.

    Allowed: the latest complete checkpoint of a run that was interrupted (steps logged after it
    were never saved, so they are trained again and their old rows kept aside), or any step of a
    finished run's last checkpoint. Refused: a checkpoint older than a later complete one, or older
    than the end of a finished run; the message says how to go on.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "log.jsonl").write_text('{"step": 4, "reward": 0.5}\n{"step": 4, "train_runtime": 9.0}\n')
    >>> check_resume_point(d, 4)  # the end of the finished run: fine (None)
    >>> check_resume_point(d, 2)
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: the run in .../ finished at step 4, after checkpoint-2: ...
    """
    out = Path(output_dir)
    later = [s for s, path in checkpoints(out) if s > step and not checkpoint_problems(path)]
    if later:
        raise RunFolderError(
            f"{out}/checkpoint-{step} is not the run's latest checkpoint (checkpoint-{later[-1]} is): resuming it in "
            f"{out}/ would train steps {step + 1}-{later[-1]} again over their logged rows. Resume "
            f"checkpoint-{later[-1]}, or start a new run folder to try something else from step {step}.")
    finished = finished_step(out)
    if finished is not None and finished > step:
        raise RunFolderError(
            f"the run in {out}/ finished at step {finished}, after checkpoint-{step}: resuming it would train "
            f"logged steps {step + 1}-{finished} again. To train on, resume from a checkpoint at step "
            f"{finished} (save_strategy='steps' keeps one at the end); to try something else from step {step}, "
            f"start a new run folder.")


def finished_step(output_dir: str | os.PathLike) -> int | None:
    r"""The step at which the run in ``output_dir`` last finished training (its end-of-training log row), else None.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "log.jsonl").write_text('{"step": 4, "reward": 0.5}\n{"step": 4, "train_runtime": 9.0}\n')
    >>> finished_step(d), finished_step(tempfile.mkdtemp())
    (4, None)
    """
    steps = [r["step"] for r in read_log_lines(Path(output_dir) / LOG_NAME)[0] if "train_runtime" in r]
    return steps[-1] if steps else None


def resume_log(rows: list[dict], step: int, log_history: list[dict]) -> tuple[list[dict], list[dict], list[int]]:
    r"""A log continued from a checkpoint at ``step``: ``(kept rows, superseded rows, restored steps)``.

    Rows after ``step`` are superseded (trained again). Training steps up to ``step`` that the
    log lacks are restored from the checkpoint's ``log_history`` (marked ``restored_from``).

    >>> rows = [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}, {"step": 3, "reward": 0.3}]
    >>> history = [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]
    >>> kept, later, restored = resume_log(rows, 2, history)
    >>> [r["step"] for r in kept], [r["step"] for r in later], restored
    ([1, 2], [3], [])
    >>> kept, later, restored = resume_log(rows[:1], 2, history)
    >>> [(r["step"], r.get("restored_from")) for r in kept], restored
    ([(1, None), (2, 'checkpoint-2/trainer_state.json')], [2])
    """
    kept = [r for r in rows if r.get("step", 0) <= step]
    later = [r for r in rows if r.get("step", 0) > step]
    have = {r["step"] for r in step_rows(kept)}
    restored = [{**h, "restored_from": f"checkpoint-{step}/trainer_state.json"} for h in log_history
                if h.get("reward") is not None and h.get("step", 0) <= step and h.get("step") not in have]
    merged = sorted(kept + restored, key=lambda r: r.get("step", 0))  # stable: events keep their place
    return merged, later, [r["step"] for r in restored]
