"""QAETrainer on two CPU processes (torchrun, gloo): the same advantages as one process, and sparse
updates that keep every rank in step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from testkit.step_setup import G, qae_advantages

import qae_lab
from qae_lab.advantages import group_advantages

# ---------------------------------------------------------------- 8. two processes (gloo)

MP_REWARDS = [1.0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0]  # 3 groups over 2 ranks of 6: group 2 spans both
MP_WORKER = r'''
"""One rank of the two-process check: generation on fixed completions, then sparse vs dense losses."""
import datetime, json, os, sys

import torch

torch.set_num_threads(1)
out, tests_dir = sys.argv[1], sys.argv[2]
sys.path[:0] = [tests_dir, os.path.join(tests_dir, "train")]
from testkit.step_setup import completion_ids, make_trainer, rows, trainer_grads  # noqa: E402
from test_trainer_processes import MP_REWARDS  # noqa: E402

from qae_lab.task.models import load_policy  # noqa: E402

# a short collective timeout: a rank stuck waiting for another fails instead of hanging the test
torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank, n = int(os.environ["RANK"]), len(MP_REWARDS) // 2
tok = load_policy("embedded", device="cpu")[1]
local = slice(rank * n, (rank + 1) * n)
trainer = make_trainer(os.path.join(out, f"run{rank}"), tok, n=n, completions=completion_ids(2 * n, len(tok))[local],
                       loss_type="bnpo", token_weighting="sa_ah")
assert trainer.accelerator.num_processes == 2 and trainer.accelerator.process_index == rank
inputs = trainer._generate_and_score_completions(rows(MP_REWARDS)[local])
with open(os.path.join(out, f"adv{rank}.json"), "w") as f:
    json.dump({"local": inputs["advantages"].tolist(), "logged": list(trainer._logs["advantages"]),
               "zero_adv_frac": trainer._metrics["train"]["qae/zero_adv_frac"]}, f)


def max_diff(idx, name):
    """Sparse vs dense gradients of the rows idx of this rank's batch; both ranks call it together."""
    sub = {k: (v[idx] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n else v)
           for k, v in inputs.items()}
    trainer.args.sparse_update = False
    dense = trainer_grads(trainer, sub)
    trainer.args.sparse_update = True
    sparse = trainer_grads(trainer, sub)
    diff = max((sparse[p] - dense[p]).abs().max().item() for p in dense)
    with open(os.path.join(out, f"{name}{rank}.json"), "w") as f:
        json.dump({"max_diff": diff, "kept": int((sub["advantages"] != 0).sum())}, f)


# the ranks keep different numbers of non-zero-advantage rows (2 and 3) ...
max_diff(torch.arange(n), "uneven")
# ... and one rank's micro-batch is all zero-advantage while the other's is not
max_diff(torch.tensor([1, 2, 3]) if rank == 0 else torch.tensor([0, 1, 2]), "allzero")
torch.distributed.barrier()
torch.distributed.destroy_process_group()
'''


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """Launch MP_WORKER on 2 CPU processes (torchrun, gloo) once; return its output folder and log."""
    out = tmp_path_factory.mktemp("two_process")
    script = out / "worker.py"
    script.write_text(MP_WORKER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # the workers import the qae_lab this test imported (a mutation run's copy, not the installed package)
    here = str(Path(qae_lab.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        str(script),
        str(out),
        str(Path(__file__).resolve().parents[1]),
    ]
    try:
        proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
        text = proc.stdout + proc.stderr
        key = [line for line in text.splitlines() if any(s in line for s in ("what()", "Error", "trainer.py"))]
        log = "\n".join(dict.fromkeys(key)) + "\n...\n" + text[-3000:]
    except subprocess.TimeoutExpired as err:
        log = f"timed out: {err}"
    return out, log


def read_ranks(out: Path, name: str, log: str) -> list[dict]:
    paths = [out / f"{name}{rank}.json" for rank in range(2)]
    assert all(p.exists() for p in paths), f"a rank did not get through '{name}':\n{log}"
    return [json.loads(p.read_text()) for p in paths]


@pytest.mark.slow(seconds=14)
def test_two_processes_same_advantages_and_gradients_as_one(two_process_run):
    """One two-process run (a single test: its run is built once, in one test process) checked twice over."""
    out, log = two_process_run
    # the advantages: each rank its own slice of those of the whole batch on one process
    ranks = read_ranks(out, "adv", log)
    want = group_advantages(torch.tensor(MP_REWARDS), G, eps=1e-4).tolist()
    assert want == pytest.approx(qae_advantages(MP_REWARDS), abs=1e-6)
    n = len(MP_REWARDS) // 2
    for rank, got in enumerate(ranks):
        assert got["local"] == pytest.approx(want[rank * n : (rank + 1) * n], abs=1e-6)  # each rank its own slice
        assert got["logged"] == pytest.approx(want, abs=1e-6)  # the gathered batch in the completion table
        assert got["zero_adv_frac"] == [pytest.approx(7 / 12)]

    # sparse updates: skipping leaves a different number of rows on each rank; TRL's loss then gathers
    # per-row metrics and reduces per-token ones across ranks, which needs every rank to take part
    for name, kept in (("uneven", [2, 3]), ("allzero", [0, 2])):
        ranks = read_ranks(out, name, log)
        assert [r["kept"] for r in ranks] == kept
        assert all(r["max_diff"] < 1e-6 for r in ranks), ranks
