"""The command line under two CPU processes (``torchrun``, gloo): one run folder, one log, the model,
the evaluations and the report written once by the main process, and a resume that continues it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from qae_lab.storage.folder import read_log, step_rows

TINY = [
    "--n_train",
    "16",
    "--n_eval",
    "4",
    "--eval_samples",
    "2",
    "--per_device_train_batch_size",
    "4",
    "--num_generations",
    "4",
    "--save_strategy",
    "steps",
    "--save_steps",
    "1",
    "--torch_threads",
    "1",
    "--disable_tqdm",
    "true",
]


def torchrun(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc_per_node 2 -m qae_lab train ...`` (2 CPU processes)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "qae_lab",
        "train",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _why(proc: subprocess.CompletedProcess) -> str:
    """A failed launch's own error lines first (each process's ``qae-lab: error`` or traceback's last line, which
    torchrun's summary at the end of stderr hides), then the ends of its output."""
    lines = (proc.stdout + proc.stderr).splitlines()
    errors = [line for line in lines if "error" in line.lower() and "elastic" not in line][:20]
    return "\n".join(["error lines:", *errors, "stdout:", proc.stdout[-2000:], "stderr:", proc.stderr[-3000:]])


@pytest.mark.slow(seconds=40)
def test_two_processes_write_one_run_and_resume_it(tmp_path):
    out = tmp_path / "run"
    first = torchrun("--preset", "cpu-demo", "--output-dir", str(out), "--max_steps", "2", *TINY)
    assert first.returncode == 0, _why(first)
    # evaluated and reported once (the two identical "before" lines), by the main process
    assert first.stdout.count("before: greedy pass@1") == 1 and first.stdout.count("after: greedy pass@1") == 1
    assert first.stdout.count("run folder:") == 1
    listing = sorted(p.name for p in out.iterdir())
    assert listing == [
        ".qae_lab-run.json",
        "checkpoint-1",
        "checkpoint-2",
        "config.json",
        "eval_after.json",
        "eval_before.json",
        "log.jsonl",
        "model",
        "report.html",
    ], listing  # the lock: gone with the run
    assert (out / "checkpoint-2" / "README.md").is_file()  # TRL's model card: in the checkpoint, not over a user's file
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2]  # one log line per step, not one per process
    config = json.loads((out / "config.json").read_text())
    assert config["trainer"]["max_steps"] == 2 and (out / "model" / "config.json").is_file()

    again = torchrun("--resume", str(out), "--max_steps", "3")
    assert again.returncode == 0, _why(again)
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2, 3]  # continued from checkpoint 2, once
    assert again.stdout.count("after: greedy pass@1") == 1
    assert (out / "finished-step2" / "eval_after.json").is_file()  # the finished run's results set aside, once
    assert (out / "checkpoint-3").is_dir() and (out / "model").is_dir()
    assert json.loads((out / "config.json").read_text())["trainer"]["max_steps"] == 3
    assert not (out / ".staging").exists()


@pytest.mark.slow(seconds=25)
def test_two_processes_without_an_output_dir_share_the_main_ones_folder(tmp_path):
    # a new run's default folder is named from the clock; the second process starts 1.5 s late, so it would name
    # another folder (and write its checkpoint files there) if it did not take the main process's
    launcher = tmp_path / "late_second_process.py"
    launcher.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n    time.sleep(1.5)\n"
        "from qae_lab.__main__ import main\nsys.exit(main(['train', *sys.argv[1:]]))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(launcher),
            "--preset",
            "cpu-demo",
            "--max_steps",
            "1",
            "--evaluate",
            "false",
            *TINY,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, _why(proc)
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1, folders
    assert (folders[0] / "checkpoint-1" / "rng_state_1.pth").is_file()  # the second process's, in the one folder
    assert [r["step"] for r in step_rows(read_log(folders[0]))] == [1]
