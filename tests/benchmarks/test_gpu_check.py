"""Tests for benchmarks/gpu_check.py: its --smoke mode runs every section on the CPU with a tiny
28-layer Qwen2 (Qwen2.5-1.5B's layer count, so the ops per decode step are the real model's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow(seconds=20)
def test_smoke_runs_every_section_and_the_fast_path_has_the_bare_models_ops(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--smoke",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "models"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for header in (
        "1. the qwen2.5-1.5b-gsm8k preset",
        "2. decode",
        "3-4. update phase",
        "5. other precisions",
        "random Qwen2",
        "gpu_check: done (smoke)",
    ):
        assert header in proc.stdout
    report = json.loads(out.read_text())
    sections = report["sections"]
    assert sections["step_1.5b"]["steady_step_s"] > 0
    ops = {row["what"].split(" (")[0]: row["aten_ops_per_decode_step"] for row in sections["decode"]}
    bare, trl_default, fast = (ops["bare generate"], ops["in-loop, TRL default"], ops["in-loop, fast_generation"])
    # LoRA unmerged in train mode roughly doubles the kernels of a decode step; the fast path has the bare model's
    assert fast == bare and trl_default > 2 * bare
    update = sections["update"]
    assert update["grad_check_ok"] and update["grad_rel_diff_sparse_vs_dense"] < 1e-4
    assert 0.7 < update["zero_adv_frac"] < 0.9
    assert {"QAE/TRL", "QAE+SA-AH/TRL", "sparse/dense", "floor_kept/all"} <= update.keys()
    assert [row["what"] for row in sections["more"]] == ["1.5B live preset (notebook 04)", "1.5B, float32"]
    assert (tmp_path / "models" / "qwen2.5-1.5b-smoke-random" / "config.json").exists()


def test_refuses_full_mode_without_cuda(capsys):
    """Without --smoke and with no CUDA device, the script says to use --smoke and exits 2 (its main, in this process)."""
    import importlib.util

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    saved = list(sys.path)  # the script puts its folder on the path (it imports its neighbour bench_trainer)
    try:
        spec.loader.exec_module(gpu_check)
    finally:
        sys.path[:] = saved
    assert gpu_check.main([]) == 2
    assert "--smoke" in capsys.readouterr().err


def test_the_estimates_beside_a_measured_step_name_the_fraction_of_the_peaks(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # taken off again after the test
    import gpu_check

    from qae_lab.runs.costs import GPUS, run_time
    from qae_lab.runs.presets import build

    run, cfg = build("qwen2.5-0.5b-gsm8k-t4", output_dir="unused")
    floor = run_time(run, cfg, GPUS["t4"])["step"]
    row = {"steady_step_s": 2 * floor}  # a step measured at twice the estimate: half the datasheet peaks
    lines = gpu_check.estimates(row, run, cfg, "Tesla T4", bf16=False)
    assert row["estimated_peak"] == "3.18 GiB" and row["peak_fraction"] == 0.5
    assert lines[1].startswith(f"estimated step {floor:.2f} s at the NVIDIA T4's datasheet peaks")
    assert lines[1].endswith("the measured steady step reaches 50% of them")
    unknown = {"steady_step_s": 1.0}
    assert "no time estimate" in gpu_check.estimates(unknown, run, cfg, "NVIDIA GeForce RTX 3090", bf16=True)[-1]
    assert "peak_fraction" not in unknown
