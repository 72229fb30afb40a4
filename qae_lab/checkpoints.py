r"""Checkpoints in a run folder, and the rules of a resume. Files and JSON; torch only loads a checkpoint's
torch files to check them (:func:`checkpoint_problems` with ``load=True``).

* A checkpoint is complete when :func:`checkpoint_problems` finds nothing missing, cut short or unloadable;
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
import pickle
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qae_lab.runfolder import CHECKPOINT_NAME, LOG_NAME, RunFolderError, fsync_dir, read_log_lines, step_rows

__all__ = ["SAFE_ON_RESUME", "checkpoint_problems", "safetensors_problem", "checkpoints", "latest_complete_checkpoint", "publish_dir",
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
    "push_to_hub": "where the model is also sent",
    "hub_strategy": "where the model is also sent",
    "hub_private_repo": "where the model is also sent",
    "hub_always_push": "where the model is also sent",
    "hub_revision": "where the model is also sent",
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


def safetensors_problem(path: Path) -> str | None:
    r"""What is wrong with a safetensors file (None: its structure is whole): an 8-byte header length, a JSON
    header naming each tensor's byte range, then exactly the tensors' bytes. Cheap: reads the header only.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "model.safetensors"; _ = p.write_bytes(b"\x05" + bytes(7) + b"[1,2]")
    >>> safetensors_problem(p)
    'model.safetensors is damaged (its header is not a map of tensors)'
    """
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                return f"{path.name} is cut short (header of {n} bytes in a {size}-byte file)"
            header = json.loads(f.read(n))
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, OSError, RecursionError) as err:
        return f"{path.name} is damaged ({type(err).__name__}: {str(err)[:120]})"
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (AttributeError, KeyError, TypeError, IndexError, ValueError):
        return f"{path.name} is damaged (its header is not a map of tensors)"
    if 8 + n + end != size:
        return f"{path.name} is cut short ({size} bytes, {8 + n + end} expected)"
    return None


# what a resume loads besides the weights (transformers' Trainer names): without them it would go on with a fresh
# optimizer, a restarted schedule or other random draws, and say nothing
_RESUME_STATE = {"optimizer.pt": "Adam's moments", "scheduler.pt": "the learning-rate schedule's position"}
_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json")


def _is_rng_file(name: str) -> bool:
    return name == "rng_state.pth" or (name.startswith("rng_state_") and name.endswith(".pth"))


def checkpoint_problems(checkpoint: str | os.PathLike, *, load: bool = False, resume: bool = True) -> list[str]:
    r"""What is missing or damaged in a Trainer checkpoint folder; empty when it can be resumed.

    A checkpoint is complete when every file a resume needs is there and whole: ``trainer_state.json``
    naming its step, the weights as safetensors (pickled ``pytorch_model.bin`` weights are never loaded),
    ``optimizer.pt``, ``scheduler.pt`` and the RNG state (``rng_state.pth``, or one per process); and every
    JSON, torch (``.pt``/``.pth``/``.bin``) and safetensors file in it is whole (their structure, read
    cheaply: a cut file is caught, a bit flip inside the data is not). With ``load=True`` each torch file is
    also loaded as the Trainer loads it (``torch.load(weights_only=True)``, its numpy allow-list; memory-mapped,
    so a large optimizer state costs little), so that one holding anything but tensors (a crafted pickle) or
    failing to load is named here, before a resume starts, instead of inside ``torch.load`` halfway in.
    ``resume=False`` asks only for what an export reads: the state and whole weights, no optimizer or RNG state.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "checkpoint-4"; d.mkdir()
    >>> _ = (d / "trainer_state.json").write_text('{"global_step": 4'); _ = (d / "optimizer.pt").write_bytes(b"PK..")
    >>> for p in checkpoint_problems(d): print(p)
    trainer_state.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 18 (char 17))
    no model weights (model.safetensors, adapter_model.safetensors or a sharded model.safetensors.index.json)
    scheduler.pt is missing (the learning-rate schedule's position)
    no RNG state (rng_state.pth): the resumed run would draw other samples than an uninterrupted one
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
            data = json.loads(state.read_text(encoding="utf-8"))
            step = data.get("global_step") if isinstance(data, dict) else None
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                problems.append("trainer_state.json names no global_step (a whole number >= 0)")
            elif not isinstance(data.get("log_history", []), list):
                problems.append("trainer_state.json is damaged (its log_history is not a list)")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            problems.append(f"trainer_state.json is damaged (not JSON: {err})")
        except RecursionError:
            problems.append("trainer_state.json is damaged (nested too deep to read)")
    names = {p.name for p in folder.iterdir()}
    if not names & set(_WEIGHTS):
        pickled = sorted(names & set(_PICKLED_WEIGHTS))
        problems.append(f"no model weights (model.safetensors, adapter_model.safetensors or a sharded "
                        f"model.safetensors.index.json)" + (f"; {', '.join(pickled)} holds pickled weights, which "
                                                             f"qae_lab never loads" if pickled else ""))
    for name, what in _RESUME_STATE.items() if resume else ():
        if name not in names:
            problems.append(f"{name} is missing ({what})")
    if resume and not any(_is_rng_file(n) for n in names):
        problems.append("no RNG state (rng_state.pth): the resumed run would draw other samples than an "
                        "uninterrupted one")
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name == "trainer_state.json":
            continue
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                problems.append(f"{path.name} is damaged (not JSON: {err})")
            except RecursionError:
                problems.append(f"{path.name} is damaged (nested too deep to read)")
        elif path.suffix in (".pt", ".pth", ".bin"):
            cut = _zip_problem(path)
            problems.append(cut if cut or not load or path.suffix == ".bin" else _load_problem(path))
        elif path.suffix == ".safetensors":
            problems.append(safetensors_problem(path))
    index = "model.safetensors.index.json"
    if index in names:
        try:
            shards = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
            problems += [f"{s} (listed in {index}) is missing" for s in sorted(shards - names)]
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError, UnicodeDecodeError, RecursionError):
            pass  # reported above as damaged JSON, or an index without a weight map
    return [p for p in problems if p]


# what transformers' Trainer allows a resume's torch files beside tensors (its trainer_pt_utils.safe_globals): the
# numpy arrays and dtypes of the RNG state
_NUMPY_CORE = getattr(np, "_core", None) or np.core
_NUMPY_GLOBALS = [_NUMPY_CORE.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _load_problem(path: Path) -> str | None:
    """Load a torch file as transformers' Trainer loads a resume's optimizer, scheduler and RNG state
    (``weights_only=True``, numpy's arrays allowed); None when it loads, else what went wrong."""
    try:
        with torch.serialization.safe_globals(_NUMPY_GLOBALS):
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (f"{path.name} holds more than tensors and plain values, which a resume never unpickles "
                f"(refused by torch's weights-only loader: {first[:160]})")
    except Exception as err:  # noqa: BLE001 -- any failure to load is the file's problem, named
        return f"{path.name} does not load ({type(err).__name__}: {str(err)[:160]})"
    return None


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


def latest_complete_checkpoint(folder: str | os.PathLike, *, load: bool = False,
                               resume: bool = True) -> tuple[Path | None, list[str]]:
    r"""The run folder's latest checkpoint with no :func:`checkpoint_problems` (``load``: its torch files also
    load; ``resume=False``: complete for an export), and a note per later one skipped, naming it and what is wrong.

    Returns:
        ``(path or None, notes)``.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "checkpoint-6").mkdir()
    >>> latest_complete_checkpoint(d)[1][0][:63]
    'checkpoint-6 skipped: trainer_state.json is missing; no model w'
    """
    notes = []
    for _step, path in reversed(checkpoints(folder)):
        problems = checkpoint_problems(path, load=load, resume=resume)
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


def check_resume_point(output_dir: str | os.PathLike, step: int, *, skipped=()) -> None:
    r"""Refuse to resume a run folder from step ``step`` when that would train logged, kept steps again.

    Allowed: the latest complete checkpoint of a run that was interrupted (steps logged after it
    were never saved, so they are trained again and their old rows kept aside), or any step of a
    finished run's last checkpoint. Refused: a checkpoint older than a later complete one (``skipped``: names of
    later checkpoints already found incomplete, e.g. whose files do not load), or older than the end of a finished
    run; the message says how to go on.

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
    later = [s for s, path in checkpoints(out) if s > step and path.name not in skipped and not checkpoint_problems(path)]
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
