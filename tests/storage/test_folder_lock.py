"""qae_lab.storage.folder.RunLock: one process per run folder, the holder its lock file names, letting go."""

from __future__ import annotations

import gc
import json
import os
import re
import socket
import subprocess
import sys
from datetime import datetime
from types import SimpleNamespace

import pytest

from qae_lab.storage import folder
from qae_lab.storage.folder import LOCK_NAME, RunFolderError, RunLock

fcntl = pytest.importorskip("fcntl")  # flock and signals: the POSIX side of the lock


def _refusal(run, who: str) -> str:
    """The refusal of a folder another holds, written out by hand."""
    return (
        f"{run}/ is being written by {who}: one run folder takes one process at a time. Wait until that run ends, "
        f"or choose another --output-dir."
    )


@pytest.mark.parametrize(
    "holder, suffix",
    [("parent", ""), ("elsewhere", ""), ("me", ", this very process")],
)
def test_the_refusal_names_the_holder_and_says_this_very_process_only_when_it_is(tmp_path, monkeypatch, holder, suffix):
    # The holder a lock file names, in words: pid, host, since, command, and ", this very process" only where
    # both pid and host are this process's (another process on this host, or this pid on another host, is not).
    # Planted: `mine or True`, `pid == ... or host == ...`, the suffix "XX, this very processXX", the empty
    # suffix "XXXX" -> fails.
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))  # the lock file decides (no flock)
    pid = os.getppid() if holder == "parent" else os.getpid()  # both running, so the holder counts as alive
    host = "elsewhere.invalid" if holder == "elsewhere" else socket.gethostname()
    h = {"pid": pid, "host": host, "since": "2024-05-06 07:08:09", "command": "qae-lab train --output-dir x"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(h) + "\n")
    who = f"process {pid} on {host} since 2024-05-06 07:08:09 (qae-lab train --output-dir x){suffix}"
    assert RunLock(tmp_path).busy() == _refusal(tmp_path, who)


def test_the_holder_is_this_process_its_host_the_time_and_the_command_line_cut_at_300_characters(monkeypatch):
    # holder(): what a lock file and a claim record. Planted: the since format changed ("XX%Y...XX", "%y-%m-%d
    # %h:%m:%s", "%Y-%M-%D ..."), the command joined by "XX XX" or cut at 301 -> fails.
    monkeypatch.setattr(sys, "argv", ["qae-lab", "train", "--output-dir", "o" * 400])
    h = folder.holder()
    assert sorted(h) == ["command", "host", "pid", "since"]
    assert (h["pid"], h["host"]) == (os.getpid(), socket.gethostname())
    assert h["command"] == "qae-lab train --output-dir " + "o" * 273  # 27 + 273 = 300 characters
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", h["since"])  # e.g. 2024-05-06 07:08:09, local time
    datetime.strptime(h["since"], "%Y-%m-%d %H:%M:%S")  # a real date and time


@pytest.mark.parametrize(
    "size, who",
    [
        (None, "process 4242 on elsewhere since 2024-05-06 07:08:09 (qae-lab train --output-dir out)"),
        (4096, "process 4242 on elsewhere since 2024-05-06 07:08:09 (qae-lab train --output-dir out)"),
        (4097, "another process (it has not written its name yet)"),  # past the 4096 bytes read: not read whole
    ],
)
def test_the_refusal_names_the_holder_its_lock_file_records_read_up_to_4096_bytes(tmp_path, size, who):
    # A second lock (and a dry run's busy()) names the holder the file records: its process, host, since when and
    # command; the file is read up to 4096 bytes (a holder record is far smaller), so a longer one names nobody.
    # Planted: since or command read as str(None); the read limit dropped, None or 4097 -> fails.
    record = (
        '{"pid": 4242, "host": "elsewhere", "since": "2024-05-06 07:08:09", '
        '"command": "qae-lab train --output-dir out"}'
    )
    if size is not None:
        record = " " * (size - len(record)) + record  # leading blanks: the record's last byte is byte `size`
    with RunLock(tmp_path) as lock:
        lock.path.write_text(record)
        assert RunLock(tmp_path).busy() == _refusal(tmp_path, who)
        with pytest.raises(RunFolderError, match="^" + re.escape(_refusal(tmp_path, who)) + "$"):
            RunLock(tmp_path).acquire()


def test_a_missing_folder_is_made_with_its_parents_and_busy_neither_makes_it_nor_counts_its_own_holder(tmp_path):
    # busy() of a folder that does not exist: not busy, nothing made; acquire() makes it, parents too; the lock's
    # own holder is not "another". Planted: mkdir(parents=False/None/left out), busy's `or` -> `and` -> fails.
    run = tmp_path / "runs" / "a"
    assert RunLock(run).busy() is None
    assert not (tmp_path / "runs").exists()
    with RunLock(run) as lock:
        assert run.is_dir()
        assert lock.busy() is None
        other = RunLock(run).busy()  # another object of this process: kept out
        assert other.startswith(f"{run}/ is being written by process {os.getpid()} on {socket.gethostname()} since ")
        assert other.endswith(
            ", this very process: one run folder takes one process at a time. "
            "Wait until that run ends, or choose another --output-dir."
        )
    assert sorted(p.name for p in run.iterdir()) == []


def test_with_flock_the_folder_itself_is_locked_and_a_file_another_host_left_is_taken_over(tmp_path):
    # Where flock works the operating system's lock on the folder decides, not the file: a lock file left behind
    # naming a process on another host (nothing here can ask it) does not block, and the folder's descriptor is
    # locked while held. Planted: `fcntl is not None` (never flock), LOCK_EX & LOCK_NB (flock(fd, 0): refused, so
    # the file decides) -> fails.
    left = {"pid": 1, "host": "another-host.example", "since": "2024-05-06 07:08:09", "command": "qae-lab train"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(left) + "\n")
    assert RunLock(tmp_path).busy() is None
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with RunLock(tmp_path) as lock:
            assert json.loads(lock.path.read_text())["pid"] == os.getpid()
            with pytest.raises(BlockingIOError):  # another descriptor of the folder: refused while the lock is held
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go: free
    finally:
        os.close(fd)


def test_with_flock_a_lock_file_that_is_a_link_is_refused_as_the_runs_lock_and_left_as_it_was(tmp_path):
    # The lock path is checked before anything is written, with flock too: a symbolic or a hard link is refused
    # as a run folder's lock (not replaced by the holder's file). Planted: `problem = None` (the check skipped:
    # the write's own refusal, or a hard link renamed over) -> fails.
    victim = tmp_path / "victim.json"
    victim.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    lock_file = run / LOCK_NAME
    tail = (
        ": a run folder's lock is a regular file of its own, written only by the run that holds it; "
        "remove it if no run is writing this folder"
    )
    lock_file.symlink_to(victim)
    with pytest.raises(
        RunFolderError,
        match="^" + re.escape(f"{lock_file} is a symbolic link (to {victim}), not a regular file" + tail) + "$",
    ):
        RunLock(run).acquire()
    assert lock_file.is_symlink() and victim.read_text() == "mine\n"
    lock_file.unlink()
    os.link(victim, lock_file)
    with pytest.raises(RunFolderError, match="^" + re.escape(f"{lock_file} has 2 names (hard links), not one" + tail)):
        RunLock(run).acquire()
    assert os.stat(lock_file).st_nlink == 2 and victim.read_text() == "mine\n"
    lock_file.unlink()
    RunLock(run).acquire().release()  # nothing was left held


def test_without_flock_the_lock_file_is_one_json_line_naming_this_process(tmp_path, monkeypatch):
    # A file system without flock: the lock file, created by the lock, is the lock and names its holder in one JSON
    # line from its first byte. Planted: lseek(fd, 1) (a NUL byte first), json.dumps(None), "XX\nXX" -> fails.
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))
    with RunLock(tmp_path) as lock:
        raw = lock.path.read_bytes()
        assert raw.endswith(b"}\n") and raw.count(b"\n") == 1
        h = json.loads(raw)
        assert (h["pid"], h["host"], sorted(h)) == (
            os.getpid(),
            socket.gethostname(),
            ["command", "host", "pid", "since"],
        )
    assert not lock.path.exists()


def test_on_windows_the_locked_file_stays_the_lock_file_and_a_second_lock_is_refused_naming_the_holder(
    tmp_path, monkeypatch
):
    # Windows (no fcntl; msvcrt.locking, here played by flock on the file's descriptor): the file the lock holds
    # locked must stay the one under the lock's name, written once through that descriptor; replaced by a new file
    # (atomic_write_text's rename), the lock would sit on an orphan and a second lock would take the name.
    # Planted: `self._file_only = None/False` (the file rewritten after _lock_file), lseek(fd, 1), json.dumps(None),
    # "XX\nXX" (the holder unreadable), msvcrt.locking(fd, None, 1) or (fd, LK_NBLCK, None) -> fails.
    def locking(fd, mode, nbytes):  # msvcrt's own checks: a mode of its constants, a whole count of bytes
        if not isinstance(mode, int) or not isinstance(nbytes, int) or nbytes < 1:
            raise TypeError(f"locking(fd, mode, nbytes): got mode={mode!r}, nbytes={nbytes!r}")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError (an OSError) while another holds it

    monkeypatch.setattr(folder, "fcntl", None)
    monkeypatch.setattr(folder, "msvcrt", SimpleNamespace(LK_NBLCK=2, locking=locking))
    first = RunLock(tmp_path).acquire()
    try:
        who = f"process {os.getpid()} on {re.escape(socket.gethostname())} since .* \\(.*\\), this very process"
        with pytest.raises(RunFolderError, match=f"^{re.escape(str(tmp_path))}/ is being written by {who}: "):
            RunLock(tmp_path).acquire()
    finally:
        first.release()
    RunLock(tmp_path).acquire().release()  # let go: taken at once
    assert list(tmp_path.iterdir()) == []


def test_on_windows_asking_whether_the_holder_runs_probes_the_file_lock_and_signals_nothing(tmp_path, monkeypatch):
    # Windows has no signal 0: os.kill(pid, 0) sends CTRL_C_EVENT to the holder's console group, so a dry run's busy()
    # would interrupt the very training it asks about. The file's msvcrt lock (played by flock) answers instead.
    # Planted: `_alive` without its Windows branch (os.kill called) -> fails; `_file_locked` returning False while
    # the lock is held -> fails.
    def locking(fd, mode, nbytes):
        fcntl.flock(fd, fcntl.LOCK_UN if mode == 0 else fcntl.LOCK_EX | fcntl.LOCK_NB)

    def kill(pid, sig):
        raise AssertionError(f"os.kill({pid}, {sig}) on Windows")

    monkeypatch.setattr(folder, "fcntl", None)
    monkeypatch.setattr(folder, "msvcrt", SimpleNamespace(LK_UNLCK=0, LK_NBLCK=2, locking=locking))
    monkeypatch.setattr(folder.os, "kill", kill)
    first = RunLock(tmp_path).acquire()
    try:
        assert RunLock(tmp_path).busy().startswith(f"{tmp_path}/ is being written by process {os.getpid()}")
    finally:
        first.release()
    assert RunLock(tmp_path).busy() is None
    h = {"pid": 1, "host": socket.gethostname(), "since": "2024-05-06 07:08:09", "command": "qae-lab train"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(h) + "\n")  # a holder gone without letting go: not locked
    assert RunLock(tmp_path).busy() is None


_ALIVE = """
import signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a parent started under nohup passes SIGHUP on ignored
print("ready", flush=True)
sys.stdin.readline()
print("alive", flush=True)
"""


def test_asking_whether_the_holder_runs_sends_it_no_signal(tmp_path, monkeypatch):
    # Without flock, a lock file naming a live process on this host means the folder is busy; asking (os.kill with
    # signal 0) must not touch that process. The process answers through a pipe after the question: no timing.
    # Planted: os.kill(pid, 1) (SIGHUP: the holder dies) -> fails.
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))
    proc = subprocess.Popen([sys.executable, "-c", _ALIVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        h = {"pid": proc.pid, "host": socket.gethostname(), "since": "2024-05-06 07:08:09", "command": "qae-lab train"}
        (tmp_path / LOCK_NAME).write_text(json.dumps(h) + "\n")
        who = f"process {proc.pid} on {socket.gethostname()} since 2024-05-06 07:08:09 (qae-lab train)"
        assert RunLock(tmp_path).busy() == _refusal(tmp_path, who)
        out, _ = proc.communicate("go\n", timeout=60)
        assert (out, proc.returncode) == ("alive\n", 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_release_is_a_no_op_when_not_held_and_quiet_when_the_lock_file_is_gone(tmp_path):
    # release() a second time does nothing (it must not delete the file of whoever holds the folder now); a lock
    # file removed by hand while held does not make letting go fail. Planted: release's `or` -> `and`,
    # unlink(missing_ok=False/None) -> fails.
    first = RunLock(tmp_path).acquire()
    first.release()
    second = RunLock(tmp_path).acquire()
    first.release()
    assert second.held and json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    with pytest.raises(RunFolderError, match="this very process"):
        RunLock(tmp_path).acquire()
    second.release()
    with RunLock(tmp_path) as lock:
        lock.path.unlink()
    assert not lock.held
    RunLock(tmp_path).acquire().release()  # let go all the same
    assert list(tmp_path.iterdir()) == []


def test_a_lock_dropped_while_held_lets_go_and_a_lock_never_made_drops_quietly(tmp_path, monkeypatch):
    # A held lock object dropped (no release) lets go with its descriptor; one whose construction failed has nothing
    # to let go and says nothing (no "Exception ignored in __del__"). Planted: getattr(None, ...), getattr(self,
    # None[, None]), getattr("_fd", None), no default, "XX_fdXX"/"_FD", `is None` -> fails.
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    lock = RunLock(tmp_path).acquire()
    del lock
    gc.collect()
    assert list(tmp_path.iterdir()) == []
    RunLock(tmp_path).acquire().release()  # taken: the dropped lock let go
    with pytest.raises(TypeError):
        RunLock(None)
    gc.collect()
    assert unraisable == []


@pytest.mark.parametrize("holder", ["none", "a dead process"])
def test_without_flock_a_folder_no_live_process_holds_is_not_busy(tmp_path, monkeypatch, holder):
    # where flock is refused the lock file alone is the lock: no file, or one naming a process that no longer runs,
    # leaves the folder free (busy() says None, and acquire takes it). Planted: busy's `taken = None` -> always busy;
    # `exists() or _alive()` -> the dead holder's file counts as held -> fails
    monkeypatch.setattr(folder, "_lock_folder", lambda folder: (None, None))
    if holder == "a dead process":
        child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        h = {"pid": int(child.stdout), "host": socket.gethostname(), "since": "2024-05-06 07:08:09", "command": "x"}
        (tmp_path / LOCK_NAME).write_text(json.dumps(h) + "\n")
    assert RunLock(tmp_path).busy() is None
    RunLock(tmp_path).acquire().release()
