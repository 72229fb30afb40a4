r"""Resuming a run: which checkpoints are complete, the rules of a resume, and the one plan that decides it (torch
only loads a checkpoint's files to check them: :func:`checkpoint_problems` with ``load=True``).

Implementer's notes: docs/implementation.md, section ``qae_lab.storage.resume``.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> plan_run(d).kind
'fresh'
>>> _ = (d / "log.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
>>> p = plan_run(d); p.kind, "already holds a run (log.jsonl)" in p.reason
('refuse', True)
>>> plan_run(d, overwrite=True).reason   # no run's marker: these files are not a run's to delete
'--overwrite deletes only the files of a run: .../ holds log.jsonl, but no run wrote them ...'
>>> _ = (d / ".qae_lab-run.json").write_text('{"qae_lab_run": 1}')
>>> plan_run(d, overwrite=True).overwrite
('log.jsonl',)
>>> plan_run(d, resume=True).reason
'.../: no complete checkpoint in this run folder'
>>> import torch
>>> ckpt = d / "checkpoint-1"; ckpt.mkdir()
>>> _ = (ckpt / "trainer_state.json").write_text('{"global_step": 1, "log_history": []}')
>>> _ = (ckpt / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")
>>> for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"): torch.save({}, ckpt / name)
>>> p = plan_run(d, resume=True, settings={"trainer": {"max_steps": 4}, "run": {}})
>>> p.kind, p.step, p.checkpoint.name, p.start_step
('resume', 1, 'checkpoint-1', 1)
"""

from __future__ import annotations

import json
import os
import pickle
import re
import stat
import struct
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qae_lab.storage.claim import claim_fresh, fresh_refusal, removal_problem
from qae_lab.storage.folder import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    LOG_NAME,
    MARKER_NAME,
    STAGING_DIR,
    SUPERSEDED_NAME,
    TRACKER_FILES,
    RunFolderError,
    RunLock,
    check_folder,
    fsync_dir,
    irregular,
    log_row_problem,
    open_to_read,
    read_json,
    read_log_lines,
    read_text,
    run_files,
    step_rows,
    symlinks,
)

__all__ = [
    "SAFE_ON_RESUME",
    "checkpoint_problems",
    "folder_problems",
    "safetensors_problem",
    "shard_problems",
    "checkpoints",
    "latest_complete_checkpoint",
    "publish_dir",
    "resume_changes",
    "check_resume_point",
    "finished_step",
    "resume_log",
    "FRESH",
    "RESUME",
    "REFUSE",
    "ResumePlan",
    "plan_run",
    "claim",
]


SAFE_ON_RESUME = {
    "max_steps": "may grow past the checkpoint's step (a schedule that decays over max_steps is stretched from there)",
    **dict.fromkeys(("save_strategy", "save_steps", "save_total_limit"), "which checkpoints are written and kept"),
    **dict.fromkeys(("torch_threads", "dataloader_num_workers"), "speed only"),
    "disable_tqdm": "display only",
    "report_to": "where metrics are also sent",
    "compile_generation": "speed only (the same sampling distribution, compiled or eager)",
    **dict.fromkeys(
        ("push_to_hub", "hub_strategy", "hub_private_repo", "hub_always_push", "hub_revision"),
        "where the model is also sent",
    ),
}
_NOT_SETTINGS = {"output_dir", "logging_dir", "run_name", "command", "build", "hub_model_id"}


def _zip_problem(path: Path) -> str | None:
    """torch.save writes a zip archive whose directory sits at its end: a cut file has none. Reads no data."""
    try:
        f = open_to_read(path)
    except (OSError, RunFolderError) as err:
        return f"{path.name} cannot be read ({err})"
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            with zipfile.ZipFile(f) as z:
                for info in z.infolist():  # a member's data follows its local header: 30 bytes and its name at least
                    if info.header_offset + 30 + len(info.filename.encode()) + info.compress_size > size:
                        return f"{path.name} is cut short (member {info.filename} runs past the end)"
        except (zipfile.BadZipFile, OSError, ValueError) as err:
            return f"{path.name} is damaged or cut short ({type(err).__name__}: {err}; {size} bytes)"
    return None


def safetensors_problem(path: Path) -> str | None:
    r"""What is wrong with a safetensors file (None: its structure is whole): an 8-byte header length, a JSON header
    naming each tensor's byte range, then exactly the tensors' bytes. Reads the header only.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "model.safetensors"; _ = p.write_bytes(b"\x05" + bytes(7) + b"[1,2]")
    >>> safetensors_problem(p)
    'model.safetensors is damaged (its header is not a map of tensors)'
    """
    try:
        with open_to_read(path) as f:
            size = os.fstat(f.fileno()).st_size
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                return f"{path.name} is cut short (header of {n} bytes in a {size}-byte file)"
            header = json.loads(f.read(n))
    except RunFolderError as err:  # a link or a pipe under the name: never read through
        return str(err)
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, OSError, RecursionError) as err:
        return f"{path.name} is damaged ({type(err).__name__}: {str(err)[:120]})"
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (AttributeError, KeyError, TypeError, IndexError, ValueError):
        return f"{path.name} is damaged (its header is not a map of tensors)"
    if 8 + n + end != size:
        said = "is cut short" if size < 8 + n + end else "holds bytes after its tensors"
        return f"{path.name} {said} ({size} bytes, {8 + n + end} expected)"
    return None


# what a resume loads besides the weights (transformers' Trainer names): without them it would go on with a fresh
# optimizer, a restarted schedule or other random draws, and say nothing
_RESUME_STATE = {"optimizer.pt": "Adam's moments", "scheduler.pt": "the learning-rate schedule's position"}
_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json")


def checkpoint_problems(checkpoint: str | os.PathLike, *, load: bool = False, resume: bool = True) -> list[str]:
    r"""What is missing or damaged in a Trainer checkpoint folder; empty when it can be resumed.

    Complete: ``trainer_state.json`` naming its step (and each ``log_history`` row's), safetensors weights (pickles are
    never loaded), ``optimizer.pt``, ``scheduler.pt``, the RNG state; every JSON, torch and safetensors file whole in
    structure (a cut file is caught, a flipped bit is not) and a regular file of the folder's own. ``load=True`` also
    loads each torch file as the Trainer does (``weights_only=True``), naming a crafted pickle before a resume starts.
    ``resume=False``: only what an export reads (state and weights).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "checkpoint-4"; d.mkdir()
    >>> _ = (d / "trainer_state.json").write_text('{"global_step": 4'); _ = (d / "optimizer.pt").write_bytes(b"PK..")
    >>> (d / "scheduler.pt").mkdir()
    >>> for p in checkpoint_problems(d): print(p)
    scheduler.pt is a folder, not a regular file
    trainer_state.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 18 (char 17))
    no model weights (model.safetensors, adapter_model.safetensors or a sharded model.safetensors.index.json)
    no RNG state (rng_state.pth): the resumed run would draw other samples than an uninterrupted one
    optimizer.pt is damaged or cut short (BadZipFile: File is not a zip file; 4 bytes)
    """
    folder = Path(checkpoint)
    if folder.is_symlink():
        return [f"{folder} is a symbolic link (to {os.readlink(folder)}), not a checkpoint folder"]
    if not folder.is_dir():
        return [f"{folder} is not a folder"]
    modes = {p.name: p.lstat().st_mode for p in folder.iterdir()}
    regular = {name for name, mode in modes.items() if stat.S_ISREG(mode)}
    problems = _not_its_own(folder, modes, "a checkpoint's")
    if "trainer_state.json" not in modes:
        problems.append("trainer_state.json is missing")
    elif "trainer_state.json" in regular:
        problems += _state_problems(folder / "trainer_state.json")
    if not modes.keys() & set(_WEIGHTS):
        pickled = sorted(modes.keys() & set(_PICKLED_WEIGHTS))
        problems.append(
            "no model weights (model.safetensors, adapter_model.safetensors or a sharded "
            "model.safetensors.index.json)"
            + (f"; {', '.join(pickled)} holds pickled weights, which qae_lab never loads" if pickled else "")
        )
    for name, what in _RESUME_STATE.items() if resume else ():
        if name not in modes:
            problems.append(f"{name} is missing ({what})")
    if resume and not any(re.fullmatch(r"rng_state(_.+)?\.pth", n) for n in modes):
        problems.append(
            "no RNG state (rng_state.pth): the resumed run would draw other samples than an uninterrupted one"
        )
    return [p for p in problems + _file_problems(folder, regular - {"trainer_state.json"}, load=load) if p]


def folder_problems(folder: str | os.PathLike, whose: str) -> list[str]:
    r"""What is wrong in a saved model folder (``whose``: its owner, in words), checked as a checkpoint's files are.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text("{"); folder_problems(d, "a model's")
    ['config.json is damaged (not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1))']
    """
    folder = Path(folder)
    modes = {p.name: p.lstat().st_mode for p in folder.iterdir()}
    regular = {name for name, mode in modes.items() if stat.S_ISREG(mode)}
    return [p for p in _not_its_own(folder, modes, whose) + _file_problems(folder, regular) if p]


def _file_problems(folder: Path, names, *, load: bool = False) -> list[str | None]:
    """Each JSON, torch (``load``: loaded too) and safetensors file of ``names`` not whole; then each index's shards."""
    problems = []
    for name in sorted(names):
        path = folder / name
        if path.suffix == ".json":
            problems.append(_json_content(path)[1])
        elif path.suffix in (".pt", ".pth", ".bin"):
            cut = _zip_problem(path)
            problems.append(cut if cut or not load or path.suffix == ".bin" else _load_problem(path))
        elif path.suffix == ".safetensors":
            problems.append(safetensors_problem(path))
    for name in sorted(n for n in names if n.endswith(".safetensors.index.json")):
        problems += shard_problems(folder, name)
    return problems


def _json_content(path: Path) -> tuple[Any, str | None]:
    """``(content, None)`` of a regular JSON file, else ``(None, what is wrong)``."""
    try:
        return json.loads(read_text(path)), None
    except RunFolderError as err:  # replaced by a link or a pipe since it was listed
        return None, str(err)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return None, f"{path.name} is damaged (not JSON: {err})"
    except RecursionError:
        return None, f"{path.name} is damaged (nested too deep to read)"


def _not_its_own(folder: Path, modes: dict[str, int], whose: str) -> list[str]:
    """Every symbolic link in ``folder`` and below, then each file a loader reads that is no regular file."""
    problems = [
        f"{rel} is a symbolic link (to {target}): {whose} files are its own" for rel, target in symlinks(folder)
    ]
    for name, mode in sorted(modes.items()):
        known = Path(name).suffix in (".json", ".pt", ".pth", ".bin", ".safetensors")
        if known and not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
            problems.append(f"{name} is {'a folder' if stat.S_ISDIR(mode) else 'a special file'}, not a regular file")
    return problems


def _state_problems(state: Path) -> list[str]:
    """What is wrong with a checkpoint's ``trainer_state.json``: its ``global_step``, its ``log_history`` rows."""
    data, problem = _json_content(state)
    if problem:
        return [problem]
    step = data.get("global_step") if isinstance(data, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return ["trainer_state.json names no global_step (a whole number >= 0)"]
    history = data.get("log_history", [])
    if not isinstance(history, list):
        return ["trainer_state.json is damaged (its log_history is not a list)"]
    for i, row in enumerate(history, 1):
        problem = log_row_problem(row)
        if problem:
            return [f"trainer_state.json is damaged (log_history row {i}: {problem})"]
    return []


def shard_problems(folder: str | os.PathLike, index: str) -> list[str]:
    r"""What is wrong with the shards a weights index in ``folder`` lists: each must be a plain file name there.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); index = "model.safetensors.index.json"
    >>> _ = (d / index).write_text('{"weight_map": {"a": "model-1.safetensors", "b": "../other.safetensors"}}')
    >>> shard_problems(d, index)
    ['model.safetensors.index.json lists ../other.safetensors, which is no file name in the folder', 'model-1.safetensors (listed in model.safetensors.index.json) is missing']
    """
    folder = Path(folder)
    try:
        shards = set(json.loads(read_text(folder / index))["weight_map"].values())
    except (OSError, ValueError, KeyError, AttributeError, TypeError, UnicodeDecodeError, RecursionError):
        return []  # ValueError: not JSON, or not a regular file (RunFolderError), each named where the index is read
    plain = {
        s for s in shards if isinstance(s, str) and s not in ("", ".", "..") and Path(s).name == s and "\\" not in s
    }
    return [f"{index} lists {s}, which is no file name in the folder" for s in sorted(map(str, shards - plain))] + [
        f"{s} (listed in {index}) is missing" for s in sorted(plain) if not os.path.lexists(folder / s)
    ]


# what transformers' Trainer allows beside tensors in a resume's torch files (its trainer_pt_utils.safe_globals)
_NUMPY_CORE = getattr(np, "_core", None) or np.core
_NUMPY_GLOBALS = [_NUMPY_CORE.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _load_problem(path: Path) -> str | None:
    """None when a torch file loads as the Trainer loads a resume's state, else what went wrong."""
    try:
        with torch.serialization.safe_globals(_NUMPY_GLOBALS):
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (
            f"{path.name} holds more than tensors and plain values, which a resume never unpickles "
            f"(refused by torch's weights-only loader: {first[:160]})"
        )
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


def latest_complete_checkpoint(
    folder: str | os.PathLike, *, load: bool = False, resume: bool = True
) -> tuple[Path | None, list[str]]:
    r"""``(path or None, notes)``: the latest checkpoint with no :func:`checkpoint_problems`, and a note per later one
    skipped, naming what is wrong.

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
    r"""Rename a fully written folder, every file fsync-ed, to ``final``; a folder there is renamed aside, not deleted.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); staged = d / ".staging" / "checkpoint-2"; staged.mkdir(parents=True)
    >>> _ = (staged / "trainer_state.json").write_text('{"global_step": 2}')
    >>> publish_dir(staged, d / "checkpoint-2").name, sorted(p.name for p in (d / "checkpoint-2").iterdir())
    ('checkpoint-2', ['trainer_state.json'])
    """
    staged, final = Path(staged), Path(final)
    for root, _dirs, files in os.walk(staged):  # followlinks=False
        for path in (Path(root) / name for name in files):
            if stat.S_ISREG(os.lstat(path).st_mode):  # a link is not followed: nothing outside is touched
                with open_to_read(path) as f:
                    os.fsync(f.fileno())
    fsync_dir(staged)
    if final.exists():
        os.rename(final, final.with_name(f".replaced-{final.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"))
    os.rename(staged, final)
    fsync_dir(final.parent)
    return final


def resume_changes(stored: dict, trainer: dict, run: dict, *, checkpoint_step: int) -> dict[str, list]:
    r"""The settings a resume changes, ``{name: [old, new]}``, ``stored`` (``config.json``) against ``trainer`` and
    ``run``; fields on one side only (another TRL version) are not compared. A change not in :data:`SAFE_ON_RESUME`, or
    a ``max_steps`` not past ``checkpoint_step``, is refused.

    >>> stored = {"trainer": {"quantile_k": 0.4, "max_steps": 20, "seed": 1}, "run": {"n_train": 64}}
    >>> resume_changes(stored, {"quantile_k": 0.4, "max_steps": 40, "seed": 1}, {"n_train": 64}, checkpoint_step=20)
    {'max_steps': [20, 40]}
    >>> resume_changes(stored, {"quantile_k": 0.6, "max_steps": 20, "seed": 1}, {"n_train": 64}, checkpoint_step=5)
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: resuming with other settings than the run was trained with: quantile_k 0.4 -> 0.6. ...
    """
    changes: dict[str, list] = {}
    for section, new in (("trainer", trainer), ("run", run)):
        old = stored.get(section) or {}
        for name in sorted(set(old) & set(new) - _NOT_SETTINGS):
            if old[name] != new[name]:  # 1 and 1.0 alike (JSON's forms); whole numbers past 2**53 exactly
                changes[name] = [old[name], new[name]]
    unsafe = {k: v for k, v in changes.items() if k not in SAFE_ON_RESUME}
    if unsafe:
        said = ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in unsafe.items())
        raise RunFolderError(
            f"resuming with other settings than the run was trained with: {said}. A resume continues the same "
            f"experiment; only {', '.join(SAFE_ON_RESUME)} may change. For other settings start a new run "
            f"(another --output-dir)."
        )
    if "max_steps" in changes and not changes["max_steps"][1] > checkpoint_step:
        raise RunFolderError(
            f"max_steps must exceed the checkpoint's step {checkpoint_step} to train on, got {changes['max_steps'][1]}"
        )
    return changes


def check_resume_point(output_dir: str | os.PathLike, step: int, *, skipped=()) -> None:
    r"""Refuse to resume from ``step`` when that would train logged, kept steps again: only the latest complete
    checkpoint of an interrupted run and the last of a finished one may be. ``skipped``: later ones found incomplete.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "log.jsonl").write_text('{"step": 4, "reward": 0.5}\n{"step": 4, "train_runtime": 9.0}\n')
    >>> check_resume_point(d, 4)  # the end of the finished run: fine (None)
    >>> check_resume_point(d, 2)
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: the run in .../ finished at step 4, after checkpoint-2: ...
    """
    out = Path(output_dir)
    later = [
        s for s, path in checkpoints(out) if s > step and path.name not in skipped and not checkpoint_problems(path)
    ]
    if later:
        raise RunFolderError(
            f"{out}/checkpoint-{step} is not the run's latest checkpoint (checkpoint-{later[-1]} is): resuming it in "
            f"{out}/ would train steps {step + 1}-{later[-1]} again over their logged rows. Resume "
            f"checkpoint-{later[-1]}, or start a new run folder to try something else from step {step}."
        )
    finished = finished_step(out)
    if finished is not None and finished > step:
        raise RunFolderError(
            f"the run in {out}/ finished at step {finished}, after checkpoint-{step}: resuming it would train "
            f"logged steps {step + 1}-{finished} again. To train on, resume from a checkpoint at step "
            f"{finished} (save_strategy='steps' keeps one at the end); to try something else from step {step}, "
            f"start a new run folder."
        )


def finished_step(output_dir: str | os.PathLike) -> int | None:
    r"""The step at which the run in ``output_dir`` last finished training (its end-of-training row), else None.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "log.jsonl").write_text('{"step": 4, "reward": 0.5}\n{"step": 4, "train_runtime": 9.0}\n')
    >>> finished_step(d), finished_step(tempfile.mkdtemp())
    (4, None)
    """
    steps = [r["step"] for r in read_log_lines(Path(output_dir) / LOG_NAME)[0] if "train_runtime" in r]
    return steps[-1] if steps else None


def resume_log(rows: list[dict], step: int, log_history: list[dict]) -> tuple[list[dict], list[dict], list[int]]:
    r"""``(kept rows, superseded rows, restored steps)`` of a log continued from a checkpoint at ``step``: rows after it
    are trained again; steps up to it the log lacks are restored from ``log_history``.

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
    restored = [
        {**h, "restored_from": f"checkpoint-{step}/trainer_state.json"}
        for h in log_history
        if h.get("reward") is not None and h.get("step", 0) <= step and h.get("step") not in have
    ]
    merged = sorted(kept + restored, key=lambda r: r.get("step", 0))  # stable: events keep their place
    return merged, later, [r["step"] for r in restored]


FRESH, RESUME, REFUSE = "fresh", "resume", "refuse"

# a run's settings in config.json's form ({"trainer", "run"}), or a function of the stored config.json and folder
Settings = dict | Callable[[dict, Path], dict] | None


@dataclass(frozen=True)
class ResumePlan:
    r"""What a run does with its folder: start ``"fresh"``, ``"resume"`` a checkpoint, or ``"refuse"`` (``reason``);
    made by :func:`plan_run`. ``overwrite``: a fresh run's deleted files. ``trains_on`` False: a finished run resumed
    as it was; ``superseded_steps``: trained again, their rows moved aside; ``notes``: later checkpoints skipped.

    >>> p = ResumePlan(RESUME, Path("runs/x"), checkpoint=Path("runs/x/checkpoint-4"), step=4,
    ...                changes=(("max_steps", 4, 8),))
    >>> p.changed, p.resume_from, p.start_step, p.require() is p
    ({'max_steps': [4, 8]}, 'runs/x/checkpoint-4', 4, True)
    >>> p.summary
    'the resume of runs/x/checkpoint-4 (step 4)'
    >>> p.lines()
    ['resuming runs/x/checkpoint-4 (step 4); changed: max_steps 4 -> 8']
    >>> ResumePlan(REFUSE, Path("runs/x"), reason="no").require()
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: no
    """

    kind: str
    folder: Path
    reason: str = ""
    overwrite: tuple[str, ...] = ()
    checkpoint: Path | None = None
    step: int | None = None
    changes: tuple[tuple[str, Any, Any], ...] = ()
    finished_at: int | None = None
    trains_on: bool = True
    superseded_steps: tuple[int, ...] = ()
    restored_steps: tuple[int, ...] = ()
    cut_line: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in (FRESH, RESUME, REFUSE):
            raise ValueError(f"kind must be {FRESH!r}, {RESUME!r} or {REFUSE!r}, got {self.kind!r}")
        if (self.kind == REFUSE) != bool(self.reason):
            raise ValueError("a refused plan says why, and only a refused plan has a reason")
        if (self.kind == RESUME) != (self.checkpoint is not None and self.step is not None):
            raise ValueError("a resume plan names its checkpoint and step, and only a resume plan does")

    @property
    def changed(self) -> dict[str, list]:
        """``{name: [old, new]}`` of the settings the resume changes."""
        return {name: [old, new] for name, old, new in self.changes}

    @property
    def summary(self) -> str:
        """The plan in a few words."""
        return {FRESH: "a new run", RESUME: f"the resume of {self.checkpoint} (step {self.step})"}.get(
            self.kind, f"refused: {self.reason}"
        )

    @property
    def start_step(self) -> int | None:
        """The trainer's global step when training begins: 0 fresh, the checkpoint's on a resume."""
        return {FRESH: 0, RESUME: self.step}.get(self.kind)

    @property
    def resume_from(self) -> str | None:
        """What ``trainer.train(resume_from_checkpoint=...)`` gets: the checkpoint's path, or None."""
        return str(self.checkpoint) if self.kind == RESUME else None

    def require(self) -> ResumePlan:
        """The plan itself; raises :class:`RunFolderError` with the reason when refused."""
        if self.kind == REFUSE:
            raise RunFolderError(self.reason)
        return self

    def lines(self) -> list[str]:
        """What the plan does, for people: the notes, then one line (none for a plain fresh start)."""
        if self.kind == FRESH:
            said = f"--overwrite: deleting the previous run's {', '.join(self.overwrite)} in {self.folder}/"
            return [said] if self.overwrite else []
        if self.kind == REFUSE:
            return [*self.notes, self.reason]
        steps, restored = (", ".join(map(str, s)) for s in (self.superseded_steps, self.restored_steps))
        parts = [
            f"resuming {self.checkpoint} (step {self.step})",
            self.changes and "changed: " + ", ".join(f"{k} {a} -> {b}" for k, a, b in self.changes),
            steps
            and f"steps {steps} were logged after the checkpoint and are trained again (their rows move to "
            f"{SUPERSEDED_NAME})",
            self.cut_line and f"the log's last line was cut short (moves to {SUPERSEDED_NAME})",
            restored and f"steps {restored} missing from the log are restored from the checkpoint",
        ]
        return [*self.notes, "; ".join(p for p in parts if p)]


def plan_run(
    folder: str | os.PathLike | None = None,
    *,
    resume: str | os.PathLike | bool | int | None = None,
    overwrite: bool = False,
    settings: Settings = None,
    history: list[dict] | None = None,
) -> ResumePlan:
    r"""The plan for a run in ``folder``: the one place that decides fresh, resume or refuse.

    ``resume``: None/False a new run (``overwrite`` replaces the run there); True ``folder``'s latest complete
    checkpoint; a checkpoint or run folder; an int, the step the trainer has loaded (its ``history``). ``settings``:
    the resume's in ``config.json``'s form (None: the stored ones), or a function of the stored ``config.json`` and the
    folder. A :class:`RunFolderError` becomes a ``refuse`` plan; other errors are raised.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> plan_run(d, resume=d, overwrite=True).reason
    '--overwrite starts a new run; --resume continues one: choose one'
    >>> plan_run(d / "nowhere", resume=d / "nowhere").reason
    '.../nowhere: no such folder to resume'
    """
    try:
        if resume is None or resume is False:
            if folder is None:
                raise TypeError("a new run needs its run folder")
            check_folder(folder)
            refused = fresh_refusal(folder, overwrite)
            if refused:
                raise RunFolderError(refused)
            names = run_files(folder) if overwrite else []
            replaced = tuple(n for n in names if n != MARKER_NAME) or tuple(names)  # or a failed start's marker
            return ResumePlan(FRESH, Path(folder), overwrite=replaced)
        if overwrite:
            raise RunFolderError("--overwrite starts a new run; --resume continues one: choose one")
        return _resume(folder, resume, settings, history)
    except RunFolderError as err:
        return ResumePlan(REFUSE, Path(folder if folder is not None else resume), reason=str(err))


def _locate(folder, resume) -> tuple[Path, int, list[dict], list[str]]:
    """``(checkpoint, step, its log history, notes)`` of what ``resume`` names; refuses what cannot be resumed."""
    if isinstance(resume, int) and not isinstance(resume, bool):
        if resume < 1 or folder is None:
            raise ValueError(f"resume={resume}: a loaded checkpoint's step is >= 1, in a given run folder")
        return Path(folder) / f"checkpoint-{resume}", resume, [], []
    if resume is True and folder is None:
        raise TypeError("resume=True takes the latest checkpoint of the run folder: give the folder")
    p = Path(folder if resume is True else resume)
    if not p.exists():
        raise RunFolderError(f"{p}: no such folder to resume")
    notes: list[str] = []
    if not p.is_dir():
        raise RunFolderError(f"{p} is a file: give a run folder or one of its checkpoint-N folders to resume")
    if (p / "trainer_state.json").exists() or CHECKPOINT_NAME.match(p.name):
        problems = checkpoint_problems(p, load=True)
        if problems:
            raise RunFolderError(f"{p}: the checkpoint cannot be resumed: {'; '.join(problems)}")
        checkpoint = p
    else:
        checkpoint, notes = latest_complete_checkpoint(p, load=True)
        if checkpoint is None:
            raise RunFolderError(
                f"{p}/: no complete checkpoint in this run folder" + (f" ({'; '.join(notes)})" if notes else "")
            )
    state = read_json(checkpoint / "trainer_state.json", "checkpoint state", expect=dict)
    return checkpoint, state["global_step"], list(state.get("log_history", [])), notes


def _linked_run_files(out: Path) -> list[str]:
    """Each link among the run's names, and each link or special file inside its trackers' folders."""
    found = [
        f"{out / n} is a symbolic link (to {os.readlink(out / n)})" for n in run_files(out) if (out / n).is_symlink()
    ]
    for name in TRACKER_FILES:
        if (out / name).is_dir() and not (out / name).is_symlink():
            found += [f"{out / name / rel} is a symbolic link (to {target})" for rel, target in symlinks(out / name)]
            for root, _dirs, files in os.walk(out / name):  # links among files were named just above
                special = [Path(root) / f for f in files if not (Path(root) / f).is_symlink()]
                found += [problem for problem in map(irregular, special) if problem]
    return found


def _resume(folder, resume, settings: Settings, history) -> ResumePlan:
    checkpoint, step, log_history, notes = _locate(folder, resume)
    out = checkpoint.parent
    if folder is not None and Path(folder).resolve() != out.resolve():
        raise RunFolderError(
            f"--resume continues its own run folder {out}/; --output-dir {folder} differs "
            f"(to branch off, start a new run)"
        )
    check_folder(out)  # the run folder's lock refuses what this refuses: the plan says so first
    staging = removal_problem(out / STAGING_DIR)
    if staging:  # the resumed run's first checkpoint save replaces .staging
        raise RunFolderError(f"{staging}: a resume's first checkpoint replaces {STAGING_DIR}; nothing was changed")
    config = out / CONFIG_NAME
    stored = read_json(config, "run config", expect=dict) if config.exists() or callable(settings) else None
    if stored is not None:
        for section in ("trainer", "run"):
            if not isinstance(stored.get(section, {}), dict):
                raise RunFolderError(f"run config {config} is damaged (its {section!r} is not a mapping of settings)")
    wanted = settings(stored, out) if callable(settings) else settings
    changes = {}
    if stored is not None:
        wanted = wanted if wanted is not None else stored
        changes = resume_changes(stored, wanted.get("trainer") or {}, wanted.get("run") or {}, checkpoint_step=step)
    try:
        check_resume_point(out, step, skipped={note.split(" skipped: ")[0] for note in notes})
    except RunFolderError as err:  # with the reason a later checkpoint was skipped, if one was
        raise RunFolderError(". ".join([*notes, str(err)])) from None
    rows, cut = read_log_lines(out / LOG_NAME)
    _kept, later, restored = resume_log(rows, step, history if history is not None else log_history)
    aside = irregular(out / SUPERSEDED_NAME) if later or cut is not None else None
    if aside:  # the rows it would move there would go wherever the link points
        moved = f"the log's rows after step {step}" if later else "the log's cut last line"
        raise RunFolderError(
            f"{aside}: the resume moves {moved} there, and qae_lab appends only to a regular file of the run's "
            f"own. Move it away and resume again (nothing was changed)"
        )
    linked = _linked_run_files(out)
    if linked:  # the resume writes there: log rows, checkpoints, the trackers' events
        raise RunFolderError(
            f"{linked[0]}: a resume writes into the run's own files, and a link would send the writes elsewhere (a "
            f"named pipe would block them); move it away (nothing was changed)"
        )
    finished = finished_step(out)
    max_steps = ((wanted or stored or {}).get("trainer") or {}).get("max_steps")
    return ResumePlan(
        RESUME,
        out,
        checkpoint=checkpoint,
        step=step,
        notes=tuple(notes),
        changes=tuple((k, a, b) for k, (a, b) in changes.items()),
        finished_at=finished,
        trains_on=finished is None or max_steps is None or max_steps > finished,
        superseded_steps=tuple(sorted({r["step"] for r in step_rows(later)})),
        restored_steps=tuple(restored),
        cut_line=cut is not None,
    )


def claim(plan: ResumePlan) -> RunLock:
    r"""Carry out a plan's claim on its folder before anything loads; returns the held :class:`RunLock`. Under the lock
    the plan is checked again: a fresh one claims the folder (:func:`~qae_lab.storage.claim.claim_fresh`); a resume
    refuses a folder whose checkpoints or end changed since, and touches nothing.


    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "run"
    >>> lock = claim(plan_run(d)); lock.held, d.is_dir(), run_files(d)
    (True, True, ['.qae_lab-run.json'])
    >>> claim(plan_run(d, overwrite=True))
    Traceback (most recent call last):
    ...
    qae_lab.storage.folder.RunFolderError: .../run/ is being written by process ..., this very process: ...
    >>> lock.release()
    """
    plan.require()
    lock = RunLock(plan.folder).acquire()
    try:
        if plan.kind == FRESH:
            claim_fresh(plan.folder, overwrite=bool(plan.overwrite), lock=lock)
        else:
            now = _still_complete(plan)
            if now:
                raise RunFolderError(f"{plan.folder}/ changed since the resume was planned ({now}): plan it again")
    except BaseException:
        lock.release()
        raise
    return lock


def _still_complete(plan: ResumePlan) -> str | None:
    """What changed in a resumed folder between its plan and its claim (None: nothing that matters)."""
    problems = checkpoint_problems(plan.checkpoint)
    if problems:
        return f"{plan.checkpoint.name}: {'; '.join(problems)}"
    try:
        check_resume_point(plan.folder, plan.step, skipped={note.split(" skipped: ")[0] for note in plan.notes})
    except RunFolderError as err:
        return str(err)
    if finished_step(plan.folder) != plan.finished_at:
        return f"the run now ends at step {finished_step(plan.folder)}"
    return None
