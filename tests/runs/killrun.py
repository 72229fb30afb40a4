"""The child process of the kill test (tests/runs/test_pipeline_safety.py): one ``qae-lab train`` command, output to a file."""

from __future__ import annotations

import os
import sys


def run_cli(argv: list[str], cwd: str, output: str) -> None:
    """``python -m qae_lab <argv>`` in ``cwd``, its output appended to ``output``; exits with its status."""
    os.chdir(cwd)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    import torch

    from qae_lab.__main__ import main

    torch.set_num_threads(1)
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
