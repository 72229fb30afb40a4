"""One opener for every file a run writes or reads. The source of qae_lab/storage, qae_lab/runs and qae_lab/train is
parsed (``ast``, not text), every call that opens, reads, writes or deletes a file by its name is listed, and each
must be the no-follow opener itself (``qae_lab.storage.folder._open_regular``, on which ``read_text``,
``open_to_read``, ``atomic_write_text``, ``read_json`` and ``append_lines`` are built) or an entry of
:data:`EXCEPTIONS`, which says why that call is safe or opens no file of a run's. Then the appends themselves: a
link, a folder or a pipe at a run's file is refused, named, and nothing is written through it.

Shown to fail with the bug it guards against: put ``append_lines``' body back to
``with Path(path).open("a", encoding="utf-8") as f: ...`` and ``test_every_file_call_goes_through_the_opener`` names
``qae_lab/storage/folder.py append_lines: .open (line N)``; ``test_the_scanner_names_a_plain_append`` plants that
body in a copy of the source and checks so every time."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from qae_lab.storage import folder
from qae_lab.storage.folder import RunFolderError, append_line, append_lines, open_to_read, read_text
from qae_lab.storage.resume import safetensors_problem

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("qae_lab/storage", "qae_lab/runs", "qae_lab/train")
OPENER = ("qae_lab/storage/folder.py", "_open_regular")  # the one place a run's file is opened by its name

# (module, function, call): why it is safe, or why what it opens is no run's file. Short on purpose: a new entry
# needs a reason a reviewer accepts.
EXCEPTIONS = {
    ("qae_lab/storage/folder.py", "fsync_dir", "os.open"): (
        "opens a folder read-only to fsync its entries: no file's content is read or written"
    ),
    ("qae_lab/storage/folder.py", "_lock_folder", "os.open"): (
        "opens the run folder itself read-only, to flock it: the folder, not a file in it"
    ),
    ("qae_lab/storage/resume.py", "_load_problem", "torch.load"): (
        "torch memory-maps a checkpoint's file by its name (mmap takes a name, no file object); called only for "
        "names checkpoint_problems found regular by lstat in a checkpoint whose every link is named, and read "
        "weights-only; transformers loads the same names itself when the resume starts"
    ),
    ("qae_lab/storage/claim.py", "claim_fresh", "shutil.rmtree"): (
        "deletes a folder of the run --overwrite replaces, once overwrite_refusal allowed it; rmtree never follows "
        "a link (one at the name is unlinked instead, links inside are removed as links)"
    ),
    ("qae_lab/storage/staged.py", "StagedCheckpoints._save_checkpoint", "shutil.rmtree"): (
        "deletes .staging, only as removal_problem allows (a folder of checkpoint-N and model folders, no link); "
        "rmtree never follows a link"
    ),
    ("qae_lab/storage/folder.py", "new_folder", "shutil.rmtree"): (
        "a leftover folder at a staging name (.staging/model, an export's own) before os.mkdir makes it anew; a link "
        "there is unlinked, and rmtree never follows one"
    ),
    ("qae_lab/runs/export.py", "export_run", "shutil.rmtree"): (
        "the export's own staging folder beside OUT, named with this process's id: no run's file"
    ),
    ("qae_lab/runs/limits.py", "model_arch", ".read_text"): (
        "reads a model's config.json (the embedded model's package file, a local model folder, or the Hub's cache, "
        "whose files are links into its blob store by design) to estimate memory: no run's file"
    ),
    ("qae_lab/runs/settings.py", "_config_text", ".open"): (
        "reads the --config file the user names: their input, not a run's file (a config kept as a link, among "
        "dotfiles say, is theirs to choose)"
    ),
}

_PATH_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "touch"}  # pathlib's openers
_BY_NAME = {"os.open", "io.open", "builtins.open", "codecs.open", "torch.load", "torch.save"}  # open a name they get
_MODULES = {"os", "io", "builtins", "codecs", "shutil", "torch"}


def _call_name(func: ast.expr, modules: dict[str, str], names: dict[str, str]) -> str | None:
    """What a call opens a file with (``open``, ``.read_text``, ``os.open``, ``shutil.copy``, ...), else None."""
    if isinstance(func, ast.Name):
        if func.id == "open":
            return "open"
        dotted = names.get(func.id)  # from shutil import rmtree; from os import open as o
        return dotted if dotted and (dotted in _BY_NAME or dotted.startswith("shutil.")) else None
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id in modules:  # import shutil; import shutil as sh
        dotted = f"{modules[func.value.id]}.{func.attr}"
        if dotted in _BY_NAME or dotted.startswith("shutil."):
            return dotted
        if func.value.id in _MODULES:  # os.fdopen, os.fsync, torch.tensor: no name is opened
            return None
    return f".{func.attr}" if func.attr in _PATH_METHODS else None


def file_calls(source: str) -> list[tuple[str, str, int]]:
    r"""``(function, call, line)`` of every call in ``source`` that opens, reads, writes or deletes a file by its name:
    builtin ``open``, ``Path.open`` and pathlib's ``read_*``/``write_*``/``touch``, ``os.open``, ``io.open``,
    ``torch.load``/``torch.save``, every ``shutil`` function; under any import alias. ``function`` is the
    enclosing ``Class.method`` or ``outer.inner`` (``<module>`` at the top level)."""
    tree = ast.parse(source)
    modules, names = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in _MODULES:
                    modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in _MODULES:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    found = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, (*scope, child.name))
                continue
            if isinstance(child, ast.Call):
                call = _call_name(child.func, modules, names)
                if call:
                    found.append((".".join(scope) or "<module>", call, child.lineno))
            visit(child, scope)

    visit(tree, ())
    return found


def _all_calls() -> dict[tuple[str, str, str], list[int]]:
    calls: dict[tuple[str, str, str], list[int]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = path.relative_to(ROOT).as_posix()
            for function, call, line in file_calls(path.read_text(encoding="utf-8")):
                calls.setdefault((module, function, call), []).append(line)
    return calls


def test_the_scanner_finds_every_form_of_opening_a_file():
    source = """
import os, shutil as sh, torch
from pathlib import Path
from shutil import copyfile
from os import open as os_open

def builtin(p): return open(p, "a")
def path_open(p): return Path(p).open("a")
def texts(p): Path(p).write_text("x"); Path(p).read_bytes(); p.touch()
def low(p): return os.open(p, os.O_RDONLY), os_open(p, 0)
def copies(a, b): sh.copy(a, b); copyfile(a, b)
def tensors(p): torch.save({}, p); return torch.load(p)
class C:
    def m(self, p):
        def inner(): return open(p)
        return inner
def fine(fd, p): os.fdopen(fd); os.fsync(fd); os.path.exists(p); torch.tensor([1]); dict(open=1)
"""
    assert sorted((f, c) for f, c, _ in file_calls(source)) == [
        ("C.m.inner", "open"),
        ("builtin", "open"),
        ("copies", "shutil.copy"),
        ("copies", "shutil.copyfile"),
        ("low", "os.open"),
        ("low", "os.open"),
        ("path_open", ".open"),
        ("tensors", "torch.load"),
        ("tensors", "torch.save"),
        ("texts", ".read_bytes"),
        ("texts", ".touch"),
        ("texts", ".write_text"),
    ]


def test_the_scanner_names_a_plain_append():
    # the finding: after a kill between checkpoints the resume appended the superseded rows with a plain
    # open("a"), so a link planted at log.superseded.jsonl sent them into the file it names. Planted back here
    source = (ROOT / "qae_lab/storage/folder.py").read_text(encoding="utf-8")
    old = "fd = _open_regular(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)"
    assert old in source
    planted = source.replace(old, 'fd = Path(path).open("a", encoding="utf-8")')
    assert ("append_lines", ".open") in {(f, c) for f, c, _ in file_calls(planted)}
    assert ("append_lines", ".open") not in {(f, c) for f, c, _ in file_calls(source)}


def test_every_file_call_goes_through_the_opener():
    calls = _all_calls()
    opener = {key: lines for key, lines in calls.items() if key[:2] == OPENER}
    assert opener, "the opener itself opens with os.open: the scanner must see it"
    stray = [
        f"{module} {function}: {call} (line {', '.join(map(str, lines))})"
        for (module, function, call), lines in sorted(calls.items())
        if (module, function) != OPENER and (module, function, call) not in EXCEPTIONS
    ]
    assert not stray, (
        "a run's files are opened through qae_lab.storage.folder's opener (read_text, open_to_read, "
        "atomic_write_text, read_json, append_lines); these open by name instead:\n  " + "\n  ".join(stray)
    )
    stale = sorted(set(EXCEPTIONS) - set(calls))
    assert not stale, f"exceptions that no longer match a call (remove them): {stale}"


# ---------------------------------------------------------------- the helpers refuse what is not a regular file


def test_appends_never_write_through_a_link_and_refuse_what_is_no_file(tmp_path):
    victim = tmp_path / "victim.jsonl"
    victim.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.superseded.jsonl").symlink_to(victim)
    with pytest.raises(
        RunFolderError,
        match=rf"{run / 'log.superseded.jsonl'} is a symbolic link \(to {victim}\), not a regular file: .*"
        r"nothing was written",
    ):
        append_lines(run / "log.superseded.jsonl", [{"step": 3, "reward": 0.5}])
    (run / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")  # O_CREAT through a link would make this file
    with pytest.raises(RunFolderError, match="is a symbolic link"):
        append_line(run / "dangling.jsonl", {"step": 1})
    assert victim.read_text() == "mine\n" and not (tmp_path / "nowhere.jsonl").exists()
    (run / "log.jsonl").mkdir()
    with pytest.raises(RunFolderError, match=r"log.jsonl is a folder, not a regular file"):
        append_line(run / "log.jsonl", {"step": 1})
    os.mkfifo(run / "pipe.jsonl")  # opened for writing, a pipe with no reader would block or fail
    with pytest.raises(RunFolderError, match=r"pipe.jsonl is a named pipe, not a regular file"):
        append_line(run / "pipe.jsonl", {"step": 1})
    append_lines(run / "new.jsonl", [{"step": 1}, {"step": 2, "x": float("inf")}])  # a regular file: as before
    append_line(run / "new.jsonl", {"step": 3})
    assert [json.loads(line) for line in (run / "new.jsonl").read_text().splitlines()] == [
        {"step": 1},
        {"step": 2, "x": None},
        {"step": 3},
    ]


def test_the_readers_never_read_through_a_link(tmp_path):
    secret = tmp_path / "secret.safetensors"
    secret.write_bytes(b"\x02" + bytes(7) + b"{}")
    ckpt = tmp_path / "checkpoint-2"
    ckpt.mkdir()
    (ckpt / "model.safetensors").symlink_to(secret)
    (ckpt / "trainer_state.json").symlink_to(tmp_path / "state.json")
    (tmp_path / "state.json").write_text('{"global_step": 2}')
    assert safetensors_problem(secret) is None  # the file itself is whole
    assert safetensors_problem(ckpt / "model.safetensors") == (
        f"{ckpt / 'model.safetensors'} is a symbolic link (to {secret}), not a regular file"
    )
    for read in (read_text, open_to_read):
        with pytest.raises(RunFolderError, match=r"trainer_state.json is a symbolic link"):
            read(ckpt / "trainer_state.json")
    assert folder.irregular(ckpt / "trainer_state.json").endswith("not a regular file")
