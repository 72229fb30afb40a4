"""qae_lab.threads: the one thread policy — the count a setting names, one thread outside training steps on a CPU, the
probe that picks the training steps' count — and that the command line, the notebooks and the benchmarks use it."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import torch

from qae_lab import threads
from qae_lab.threads import (
    MAX_THREADS,
    THREADS_ENV,
    TORCH_DEFAULT,
    CpuRoom,
    ThreadProbe,
    in_fresh_thread,
    named_threads,
    policy_threads,
    thread_probe,
    use_threads,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def threads_kept():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_in_fresh_thread_runs_in_a_thread_that_ends_and_passes_errors_back():
    seen = []
    assert in_fresh_thread(lambda x, *, y: seen.append(threading.current_thread()) or x + y, 1, y=2) == 3
    assert seen[0] is not threading.main_thread() and not seen[0].is_alive()
    with pytest.raises(KeyError, match="nope"):
        in_fresh_thread({}.__getitem__, "nope")


# ---------------------------------------------------------------- the rule


def test_a_named_count_wins_the_setting_before_the_environment():
    env = {THREADS_ENV: "3"}
    assert named_threads(2, environ=env) == 2  # the run's own setting first
    assert named_threads(None, environ=env) == 3
    assert named_threads(None, environ={THREADS_ENV: " "}) is None  # set but blank: not a count
    assert named_threads(None, environ={}) is None
    assert named_threads(MAX_THREADS, environ={}) == MAX_THREADS


@pytest.mark.parametrize("raw", ["0", "-1", "1.5", "two", str(MAX_THREADS + 1), "1e3", "²", "٣"])
def test_a_bad_count_in_the_environment_is_refused_by_name(raw):
    with pytest.raises(ValueError, match=rf"{THREADS_ENV} must be a whole number of threads in \[1, 1024\], got "):
        named_threads(None, environ={THREADS_ENV: raw})


@pytest.mark.parametrize("bad", [0, -2, MAX_THREADS + 1, 1.0, "2", True])
def test_a_bad_setting_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"torch_threads must be an int in \[1, 1024\] or None"):
        named_threads(bad, environ={})


def test_outside_training_steps_a_cpu_takes_one_thread_another_device_is_left_alone(monkeypatch):
    monkeypatch.setattr(threads, "TORCH_DEFAULT", 4)  # the tests' own default is one thread (conftest.py)
    assert policy_threads(device="cpu", environ={}) == 1
    assert policy_threads(device=torch.device("cpu"), environ={}) == 1
    assert policy_threads(device="cuda", environ={}) is None
    assert policy_threads(device="cuda:1", environ={THREADS_ENV: "4"}) == 4  # a named count holds everywhere
    assert policy_threads(2, device="cpu", environ={}) == 2


def test_use_threads_sets_the_policys_count_and_leaves_a_gpus_alone(threads_kept):
    torch.set_num_threads(2)
    assert use_threads(device="cuda", environ={}) == 2  # nothing named, not a CPU: untouched
    assert use_threads(device="cpu", environ={}) == 1 == torch.get_num_threads()
    assert use_threads(device="cpu", environ={THREADS_ENV: "2"}) == 2 == torch.get_num_threads()


# ---------------------------------------------------------------- the probe


class Clock:
    def __init__(self, tuner: ThreadProbe):
        self.now, self.tuner = 0.0, tuner
        tuner._clock = lambda: self.now

    def step(self, seconds) -> int:
        """One unit of work taking ``seconds(count)``; the count it ran at."""
        self.tuner.begin()
        count = torch.get_num_threads()
        assert count == self.tuner.count
        self.now += seconds(count)
        self.tuner.end()
        return count


def test_a_probe_keeps_the_count_with_the_shorter_median_step(threads_kept):
    # one slow outlier at one thread: its median (0.5 s) beats two threads' 0.6 s, its mean (2.0 s) would not
    tuner = ThreadProbe(counts=(1, 2), probe=3, period=10)
    clock = Clock(tuner)
    times = {1: iter([0.5, 5.0, 0.5]), 2: iter([0.6, 0.6, 0.6])}
    ran = [clock.step(lambda c: next(times[c])) for _ in range(6)]
    assert ran == [2, 1, 2, 1, 2, 1]  # interleaved, the count in force (the larger at first) first
    assert clock.step(lambda c: 0.5) == 1 and tuner.chosen == [(6, 1)]


def test_a_count_far_slower_ends_the_probe_after_one_step_each(threads_kept):
    tuner = ThreadProbe(counts=(1, 2), probe=3, period=4, clear=1.5)
    clock = Clock(tuner)
    ran = [clock.step(lambda c: 3.0 if c == 2 else 1.0) for _ in range(3)]
    assert ran == [2, 1, 1] and tuner.chosen == [(2, 1)]  # 3.0 > 1.5 x 1.0: no second step at two threads
    # just under the ratio: the probe runs its full length
    tuner = ThreadProbe(counts=(1, 2), probe=2, period=4, clear=1.5)
    clock = Clock(tuner)
    assert [clock.step(lambda c: 1.49 if c == 2 else 1.0) for _ in range(5)] == [2, 1, 2, 1, 1]


def test_the_wait_between_probes_doubles_while_the_count_holds_and_resets_when_it_changes(threads_kept):
    tuner = ThreadProbe(counts=(1, 2), probe=1, period=2, max_period=8)
    clock = Clock(tuner)
    for _ in range(40):
        clock.step(lambda c: 0.5 if c == 2 else 0.9)  # two threads keep winning
    starts = [step for step, _ in tuner.chosen]
    # each probe takes 2 steps; then waits 4, 8, 8 (capped): chosen at 2, 2+4+2, ...
    assert starts[:4] == [2, 8, 18, 28] and {count for _, count in tuner.chosen} == {2}
    for _ in range(12):
        clock.step(lambda c: 2.0 if c == 2 else 0.9)  # the load changed: one thread wins at the next probe
    assert tuner.chosen[-1][1] == 1 and tuner._wait == 2  # the wait starts again from period


def test_the_count_in_force_before_training_is_put_back(threads_kept):
    torch.set_num_threads(1)
    tuner = ThreadProbe(counts=(1, 2), probe=2, period=2)
    tuner.start()
    clock = Clock(tuner)
    clock.step(lambda c: 0.1)  # the first probe step runs at two threads
    assert torch.get_num_threads() == 2
    tuner.stop()
    assert torch.get_num_threads() == 1


def test_one_count_is_set_for_the_whole_run_and_not_probed(threads_kept):
    torch.set_num_threads(2)
    tuner = ThreadProbe(counts=(1,))
    tuner.start()
    assert torch.get_num_threads() == 1
    clock = Clock(tuner)
    assert [clock.step(lambda c: 1.0) for _ in range(3)] == [1, 1, 1] and tuner.chosen == []
    tuner.stop()
    assert torch.get_num_threads() == 2


class Room:
    """A fake :class:`CpuRoom`: the counts that fit, set by the test; every question it was asked."""

    def __init__(self, fits=(1, 2)):
        self.fits, self.asked = tuple(fits), 0

    def __call__(self, counts):
        self.asked += 1
        return tuple(c for c in counts if c in self.fits)


def test_a_count_the_machine_has_no_room_for_is_neither_probed_nor_used(threads_kept):
    room = Room(fits=(1,))  # busy beside: two threads do not fit
    tuner = ThreadProbe(counts=(1, 2), probe=3, period=4, room=room)
    clock = Clock(tuner)
    assert [clock.step(lambda c: 1.0) for _ in range(5)] == [1] * 5  # no unit timed at two threads, not even the first
    assert tuner.chosen == [] and not any(tuner.times.values()) and room.asked == 5
    room.fits = (1, 2)  # the other process ended: the probe, due since unit 0, begins at once
    ran = [clock.step(lambda c: 0.8 if c == 2 else 1.0) for _ in range(7)]
    assert ran == [2, 1, 2, 1, 2, 1, 2] and tuner.chosen == [(11, 2)]


def test_a_count_that_stops_fitting_mid_probe_is_dropped_from_it_and_from_use(threads_kept):
    room = Room()
    tuner = ThreadProbe(counts=(1, 2), probe=3, period=4, room=room)
    clock = Clock(tuner)
    assert [clock.step(lambda c: 0.7 if c == 2 else 0.9) for _ in range(3)] == [2, 1, 2]
    room.fits = (1,)  # a busy process starts: the probe's last two-thread unit is not run
    assert [clock.step(lambda c: 0.9) for _ in range(3)] == [1, 1, 1]
    assert tuner.chosen == [(5, 2)]  # the probe kept its fastest (two threads) ...
    assert tuner.count == 1  # ... which runs only once it fits again
    room.fits = (1, 2)
    assert clock.step(lambda c: 0.5) == 2


def test_room_counts_other_processes_busy_cores_from_proc_stat():
    ticks, idle, own, clock, slept = [5000], [900], [0.0], [0.0], []
    stat = lambda: f"cpu  {ticks[0]} 7 0 {idle[0]} 50 0 0 0 0 0\ncpu0 1 2\ncpu1 3 4\ncpu2 5 6\ncpu3 7 8\nintr 1 2\n"
    room = CpuRoom(window=0.5, read=stat, tick=100, own=lambda: own[0], clock=lambda: clock[0], sleep=slept.append)
    assert room.cores == 4 and room((1, 2, 4)) == (1, 2, 4)  # the first look waits half a second (nothing busy)
    assert slept == [0.5]

    def spend(busy, mine, wall):  # the machine busy ``busy`` core-seconds, this process ``mine`` of them
        ticks[0] += round(100 * busy)
        idle[0] += round(100 * (4 * wall - busy))  # the rest of the four cores' time
        own[0] += mine
        clock[0] += wall

    spend(8.0, 4.0, 2.0)  # others kept two of four cores busy: two threads fit (2 + 0.5 >= 2), four do not
    assert room((1, 2, 4)) == (1, 2)
    spend(0.3, 0.1, 0.2)  # a look before the window is full: the last answer, the measure runs on
    assert room((1, 2, 4)) == (1, 2) and slept == [0.5]
    spend(2.2, 0.4, 0.4)  # others' 2.0 core-seconds over the whole 0.6 s: three and a third cores busy
    assert room((1, 2, 4)) == (1,)
    spend(2.0, 2.0, 1.0)  # only this process busy: all four fit
    assert room((1, 2, 4)) == (1, 2, 4)


@pytest.mark.parametrize("read", [lambda: "", lambda: "no cpu line here\n", lambda: open("/no/such/proc/stat").read()])
def test_room_without_a_linux_proc_stat_lets_every_count_fit(read):
    room = CpuRoom(read=read, sleep=lambda s: pytest.fail("waited for a measure it cannot take"))
    assert room.cores is None and room((1, 2, 8)) == (1, 2, 8)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="Linux's /proc/stat")
def test_room_on_this_machine_sees_busy_processes_beside_it():
    import subprocess
    import sys

    room = CpuRoom(window=1.0)
    if not room.cores or room.cores > 8:
        pytest.skip(f"{room.cores} cores: too many to fill with busy processes in a test")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(room.cores)]
    try:
        time.sleep(0.5)  # the processes started
        room((1, 2))  # the measure from here
        assert room((1, 2)) == (1,)  # every core busy with others' work: one thread only
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_the_default_counts_are_one_and_torchs_own():
    assert ThreadProbe().counts == tuple(sorted({1, TORCH_DEFAULT}))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"counts": (0, 2)}, "counts must be thread counts in"),
        ({"counts": (1, MAX_THREADS + 1)}, "counts must be thread counts in"),
        ({"probe": 0}, "need probe >= 1"),
        ({"period": 5, "max_period": 4}, "period <= max_period"),
        ({"clear": 1.0}, "clear > 1"),
    ],
)
def test_bad_probe_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ThreadProbe(**kwargs)


# ---------------------------------------------------------------- who uses it


def test_repeated_work_is_probed_on_a_cpu_and_fixed_where_a_count_is_named():
    from qae_lab.train.callbacks import ThreadTuner, thread_callbacks

    assert thread_probe(device="cpu", environ={}).counts == ThreadProbe().counts
    assert isinstance(thread_probe(device="cpu", environ={}).room, CpuRoom)  # within the cores others leave free
    assert thread_probe(device="cuda", environ={}) is None
    assert thread_probe(device="cuda:0", environ={THREADS_ENV: "3"}).counts == (3,)
    assert thread_probe(2, device="cpu", environ={THREADS_ENV: "3"}).counts == (2,)
    # the trainer's callback wraps the same probe
    assert thread_callbacks(None, "cpu", environ={})[0].probe.counts == ThreadProbe().counts
    assert thread_callbacks(None, "cuda", environ={}) == []
    [fixed] = thread_callbacks(None, "cuda", environ={THREADS_ENV: "3"})
    assert isinstance(fixed, ThreadTuner) and fixed.probe.counts == (3,)


def test_the_callback_drives_the_probe_from_the_trainers_events(threads_kept):
    from qae_lab.train.callbacks import ThreadTuner

    torch.set_num_threads(1)
    tuner = ThreadTuner(ThreadProbe(counts=(1, 2), probe=1, period=5))
    tuner.on_train_begin(None, None, None)
    ran = []
    for _ in range(3):
        tuner.on_step_begin(None, None, None)
        ran.append(torch.get_num_threads())
        tuner.on_step_end(None, None, None)
    # one step at each count, then the one the probe chose (which depends on this machine's speed)
    assert ran[:2] == [2, 1] and [(2, ran[2])] == tuner.probe.chosen
    tuner.on_train_end(None, None, None)
    assert torch.get_num_threads() == 1


def test_generation_runs_each_batch_at_the_probes_count(threads_kept):
    from qae_lab.task.data import prompt_text, synthetic_task
    from qae_lab.task.models import load_policy
    from qae_lab.task.sampling import generate_ids

    model, tok = load_policy("embedded", device="cpu")
    prompts = [prompt_text(r, tok) for r in synthetic_task(5, seed=0)]
    seen = []

    class Seen(ThreadProbe):
        def begin(self):
            super().begin()
            seen.append(torch.get_num_threads())

    pace = Seen(counts=(1, 2), probe=1, period=100)
    pace.start()
    plain = generate_ids(model, tok, prompts, max_new_tokens=4, batch_size=2, progress=False)
    paced = generate_ids(model, tok, prompts, max_new_tokens=4, batch_size=2, progress=False, pace=pace)
    pace.stop()
    assert seen[:2] == [2, 1] and [(2, seen[2])] == pace.chosen  # a batch at each count, then the one kept
    assert all(torch.equal(a, b) for a, b in zip(plain, paced))  # the same completions, whatever the count


def test_a_command_line_run_evaluates_on_one_thread_and_tunes_its_steps(tmp_path, monkeypatch, threads_kept):
    from transformers import TrainerCallback

    from qae_lab.runs import pipeline
    from qae_lab.runs.presets import build
    from qae_lab.train.callbacks import ThreadTuner, run_logger

    monkeypatch.delenv(THREADS_ENV, raising=False)  # the policy itself, not the tests' fixed count
    monkeypatch.setattr(threads, "TORCH_DEFAULT", 2)  # a 2-core machine's default (the tests set OMP_NUM_THREADS=1)
    rooms = []  # an idle machine's room (the tests' own processes keep this one busy): both counts fit
    monkeypatch.setattr(threads, "CpuRoom", lambda: rooms.append(Room()) or rooms[-1])
    torch.set_num_threads(2)
    seen = {"evaluate": [], "steps": []}
    evaluate = pipeline.evaluate

    def counted(*args, **kwargs):
        seen["evaluate"].append((torch.get_num_threads(), kwargs["pace"]))
        return evaluate(*args, **kwargs)

    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after the tuner's on_step_begin
            seen["steps"].append(torch.get_num_threads())

    monkeypatch.setattr(pipeline, "evaluate", counted)
    sets = ["max_steps=4", "n_train=16", "per_device_train_batch_size=8", "num_generations=4", "n_eval=4"]
    run, cfg = build("cpu-demo", [*sets, "eval_samples=1", "disable_tqdm=true"], output_dir=str(tmp_path / "run"))
    pipeline.train(run, cfg, preset="cpu-demo", callbacks=[Steps()])
    # before and after: one thread outside the batches, which a probe of their own times (a greedy and a sampled one)
    assert [count for count, _ in seen["evaluate"]] == [1, 1]
    assert [(pace.counts, pace._units) for _, pace in seen["evaluate"]] == [((1, 2), 2)] * 2
    assert set(seen["steps"]) == {1, 2} and len(seen["steps"]) == 4  # the probe's first steps ran at each count
    assert len(rooms) == 3 and all(room.asked for room in rooms)  # each probe asked the room before its units
    assert torch.get_num_threads() == 2  # put back

    # a named count is the tuner's one count
    run, cfg = build(
        "cpu-demo",
        [*sets, "eval_samples=1", "disable_tqdm=true", "torch_threads=2"],
        output_dir=str(tmp_path / "fixed"),
    )
    trainer, _, _ = pipeline.make_trainer(run, cfg, preset="cpu-demo")
    [tuner] = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, ThreadTuner)]
    assert tuner.probe.counts == (2,)
    run_logger(trainer).release_lock(force=True)  # nothing trains: the folder's lock is let go


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_every_notebook_that_computes_uses_the_policy_and_nothing_else_sets_threads():
    computes = re.compile(r"^\s*import torch\b|load_policy|Trainer\(|make_trainer", re.M)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = _code(path)
        assert "set_num_threads" not in code, path.name
        if computes.search(code):
            assert re.search(r"^use_threads\(", code, re.M), f"{path.name} computes without the thread policy"
    nb08 = _code(ROOT / "notebooks" / "08_write_it_yourself.ipynb")
    assert nb08.count("callbacks=thread_callbacks()") == nb08.count("Trainer(") == 2  # both trainers' steps
    # in the package and the benchmarks, torch's count is set by qae_lab.threads alone
    for path in [*(ROOT / "qae_lab").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        if path != ROOT / "qae_lab" / "threads.py":
            assert "set_num_threads(" not in path.read_text(), path.relative_to(ROOT)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="Linux's /proc/stat")
def test_room_reads_every_cores_line_and_nothing_after_them():
    lines = threads._cpu_lines().splitlines()
    assert lines[0].startswith("cpu ") and all(line.startswith("cpu") for line in lines)
    assert CpuRoom().cores == len(lines) - 1 == sum(1 for line in open("/proc/stat") if line[:3] == "cpu") - 1
