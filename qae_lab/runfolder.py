r"""The run folder on disk: what a run writes there, and the rules that keep it whole.

A run folder is someone's data. Three rules hold for everything qae_lab writes into one:

1. **Nothing is replaced without an explicit choice.** A new run refuses a folder that holds
   another run's files (:func:`claim_fresh`): resume it, pass ``overwrite=True``
   (``--overwrite``), or pick another folder.
2. **Every write that can be interrupted leaves the old state or the new one, never half.**
   Small files are written to a temporary file and renamed over the old one
   (:func:`atomic_write_text`); checkpoints are written into ``.staging/checkpoint-N`` and renamed
   to ``checkpoint-N`` once complete (:func:`publish_dir`); the log is append-only, one
   ``fsync``-ed line per step. A process killed at any moment (Ctrl-C twice, SIGKILL, a power
   cut after the fsync) leaves at worst a cut last log line and a stale ``.staging`` folder,
   neither of which a resume mistakes for data.
3. **A resume continues the same experiment.** :func:`resume_changes` compares the settings of a
   resume with those in ``config.json``: only the fields in :data:`SAFE_ON_RESUME` may change,
   and each accepted change is recorded (an ``event`` row in ``log.jsonl`` and the ``resumes``
   list of ``config.json``), never by deleting logged steps.

Layout::

    config.json             settings (``trainer``: QAEConfig.to_dict(), ``run``: RunArgs + how it was built),
                            library versions, and every resume with what it changed
    log.jsonl               one JSON object per logged step, plus ``{"event": ...}`` rows
    log.superseded.jsonl    rows of steps that a resume trained again (they were after the last checkpoint)
    eval_before.json, eval_after.json, report.html, model/
    checkpoint-N/           complete, resumable Trainer checkpoints (:func:`checkpoint_problems` is empty)
    .staging/               a checkpoint being written (removed by the next save)

This module is pure: files and JSON only, no torch or transformers import.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_NAME", "LOG_NAME", "SUPERSEDED_NAME", "REPORT_NAME", "EVAL_BEFORE", "EVAL_AFTER", "MODEL_DIR",
           "STAGING_DIR", "SAFE_ON_RESUME", "RunFolderError", "atomic_write_text", "fsync_dir", "read_json",
           "run_files", "claim_fresh", "checkpoint_problems", "checkpoints", "latest_complete_checkpoint",
           "publish_dir", "resume_changes", "jsonable", "append_line", "read_log_lines", "read_log", "step_rows", "check_resume_point", "resume_log"]

CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, REPORT_NAME = "config.json", "log.jsonl", "log.superseded.jsonl", "report.html"
EVAL_BEFORE, EVAL_AFTER, MODEL_DIR, STAGING_DIR = "eval_before.json", "eval_after.json", "model", ".staging"
_RUN_FILES = (CONFIG_NAME, LOG_NAME, SUPERSEDED_NAME, EVAL_BEFORE, EVAL_AFTER, REPORT_NAME, MODEL_DIR)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

# Settings a resume may change, and why each is safe. Everything else in config.json must match.
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
# Fields that name the folder or how the command was typed, not what is trained
_NOT_SETTINGS = {"output_dir", "logging_dir", "run_name", "command", "build", "hub_model_id"}


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: it holds another run, a damaged file, or other settings."""


# ---------------------------------------------------------------- atomic writes

def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename, a new file) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    r"""Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one, never half.

    The text goes to a temporary file beside ``path``, is flushed and ``fsync``-ed, then renamed
    over ``path`` (``os.replace`` is atomic on one file system).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = atomic_write_text(p, "1\n"); _ = atomic_write_text(p, "2\n"); p.read_text(), len(list(p.parent.iterdir()))
    ('2\n', 1)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    r"""A JSON file's content; a missing or damaged file raises :class:`RunFolderError` naming it.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = p.write_text('{"a": 1')
    >>> read_json(p, "run config")
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: run config .../config.json is damaged (not JSON: Expecting ',' delimiter: line 1 column 8 (char 7))
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFolderError(f"{what} {path} is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFolderError(f"{what} {path} cannot be read ({err})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{what} {path} is damaged (not JSON: {err})") from None


# ---------------------------------------------------------------- a fresh run

def run_files(folder: str | os.PathLike) -> list[str]:
    r"""The names in ``folder`` that a run writes (config, log, evaluations, report, model, checkpoints), sorted.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "notes.txt").touch(); (d / "log.jsonl").touch(); (d / "checkpoint-2").mkdir()
    >>> run_files(d)
    ['checkpoint-2', 'log.jsonl']
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name in _RUN_FILES or _CHECKPOINT.match(p.name))


def claim_fresh(folder: str | os.PathLike, *, overwrite: bool = False) -> list[str]:
    r"""Make ``folder`` ready for a new run; refuse one that holds another run's files unless ``overwrite``.

    Other files in the folder are left alone. With ``overwrite=True`` the previous run's files
    (:func:`run_files`, and a stale ``.staging``) are deleted: the caller chose that explicitly.

    Returns:
        the names deleted (empty unless ``overwrite``).

    Raises:
        RunFolderError: the folder holds a run and ``overwrite`` is False; the message lists the
        files and the three ways on.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "log.jsonl").write_text('{"step": 1}\n')
    >>> claim_fresh(d)
    Traceback (most recent call last):
    ...
    qae_lab.runfolder.RunFolderError: .../ already holds a run (log.jsonl): ...
    >>> claim_fresh(d, overwrite=True), run_files(d)
    (['log.jsonl'], [])
    """
    folder = Path(folder)
    found = run_files(folder)
    if found and not overwrite:
        raise RunFolderError(
            f"{folder}/ already holds a run ({', '.join(found)}): a new run would overwrite it. Either continue it "
            f"(--resume {folder}), or replace it (--overwrite; deletes those files), or choose another folder "
            f"(--output-dir).")
    for name in found:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.rmtree(folder / STAGING_DIR, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return found if overwrite else []


# ---------------------------------------------------------------- checkpoints

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
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return sorted(found)


def latest_complete_checkpoint(folder: str | os.PathLike) -> tuple[Path | None, list[str]]:
    r"""The run folder's latest checkpoint with no :func:`checkpoint_problems`, and a note per later damaged one.

    Returns:
        ``(path or None, notes)``: each note names a skipped checkpoint and what is wrong with it.
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


# ---------------------------------------------------------------- a resume

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
    """
    out = Path(output_dir)
    later = [s for s, path in checkpoints(out) if s > step and not checkpoint_problems(path)]
    if later:
        raise RunFolderError(
            f"{out}/checkpoint-{step} is not the run's latest checkpoint (checkpoint-{later[-1]} is): resuming it in "
            f"{out}/ would train steps {step + 1}-{later[-1]} again over their logged rows. Resume "
            f"checkpoint-{later[-1]}, or start a new run folder to try something else from step {step}.")
    rows, _ = read_log_lines(out / LOG_NAME)
    finished = [r["step"] for r in rows if "train_runtime" in r and r.get("step", 0) > step]
    if finished:
        raise RunFolderError(
            f"the run in {out}/ finished at step {finished[-1]}, after checkpoint-{step}: resuming it would train "
            f"logged steps {step + 1}-{finished[-1]} again. To train on, resume from a checkpoint at step "
            f"{finished[-1]} (save_strategy='steps' keeps one at the end); to try something else from step {step}, "
            f"start a new run folder.")


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


# ---------------------------------------------------------------- the log

def jsonable(x: Any) -> Any:
    r"""x with NaN/inf as None and tuples/sets as lists, so the JSON is strict.

    >>> jsonable({"a": float("nan"), "b": (1, 2)})
    {'a': None, 'b': [1, 2]}
    """
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (str, int, bool)):
        return x
    return str(x)


def append_line(path: str | os.PathLike, row: dict) -> None:
    """One JSON line appended, flushed and fsync-ed: on disk before the call returns."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(jsonable(row), allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_log_lines(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    r"""``(rows, cut)``: the rows of a ``log.jsonl`` (a file or the run folder) and its cut last line, if any.

    A last line that does not parse, or lacks its newline, was being written when the process
    died: it is returned as ``cut`` (its raw text), not as a row. A bad line anywhere else
    raises :class:`RunFolderError` naming the file and the line. A missing log has no rows.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log_lines(p)
    ([{'step': 1, 'reward': 0.5}], '{"step": 2, "rew')
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    if not path.exists():
        return [], None
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    tail = lines.pop()  # "" when the file ends with its newline, else a line cut short
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1 and not tail:
                return rows, line
            raise RunFolderError(f"{path}: line {i + 1} is damaged (not JSON: {err}); only a cut last line "
                                 f"can come from an interruption") from None
    if tail.strip():
        try:  # a whole JSON object whose newline never reached the disk still counts as cut: nothing follows it
            json.loads(tail)
        except json.JSONDecodeError:
            pass
        return rows, tail
    return rows, None


def read_log(path: str | os.PathLike, *, strict: bool = False) -> list[dict]:
    r"""The rows of a ``log.jsonl`` (a file or the run folder), in order.

    A cut last line (the process died while writing it) is dropped, unless ``strict``, when it
    raises; a bad line anywhere else always raises :class:`RunFolderError` (a ``ValueError``).
    A missing file raises ``FileNotFoundError`` naming it.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    >>> read_log(p)
    [{'step': 1, 'reward': 0.5}]
    """
    path = Path(path)
    path = path / LOG_NAME if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"no log at {path}: no step has been logged there yet")
    rows, cut = read_log_lines(path)
    if cut is not None and strict:
        line = path.read_text(encoding="utf-8", errors="replace").rstrip("\n").count("\n") + 1
        raise RunFolderError(f"{path}: line {line}, the last, is cut short ({cut[:60]!r})")
    return rows


def step_rows(rows: list[dict]) -> list[dict]:
    r"""The training-step rows of a log (those with a ``reward``), without events or the end-of-training summary.

    >>> step_rows([{"step": 1, "reward": 0.5}, {"step": 1, "train_runtime": 3.0}, {"step": 1, "event": "resume"}])
    [{'step': 1, 'reward': 0.5}]
    """
    return [r for r in rows if r.get("reward") is not None and "event" not in r]
