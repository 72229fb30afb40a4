"""The committed reference runs (data/reference_runs/, from benchmarks/reference_runs.py) are complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qae_lab.methods import METHODS
from qae_lab.storage.folder import read_log

RUNS = sorted((Path(__file__).resolve().parents[2] / "data" / "reference_runs").glob("*-seed*"))


def test_every_method_has_three_seeds():
    assert {p.name for p in RUNS} == {f"{m}-seed{s}" for m in METHODS for s in (0, 1, 2)}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_run_is_complete_and_matches_its_name(run):
    method, seed = run.name.rsplit("-seed", 1)
    config = json.loads((run / "config.json").read_text())
    assert config["preset"] == "cpu-demo" and config["run"]["method"] == method
    trainer = config["trainer"]
    assert trainer["seed"] == int(seed)
    assert (trainer["baseline"], trainer["token_weighting"]) == (
        METHODS[method]["baseline"],
        METHODS[method]["token_weighting"],
    )
    assert trainer["sparse_update"] is False  # dense, so `entropy` covers every response
    steps = [row for row in read_log(run / "log.jsonl") if "reward" in row]
    assert [row["step"] for row in steps] == list(range(1, trainer["max_steps"] + 1))
    assert all(row["entropy"] is not None and "qae/zero_adv_frac" in row for row in steps)
    if METHODS[method]["token_weighting"] != "none":
        assert all(row["saah/alpha"] == trainer["alpha"] for row in steps)
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["before"]["summary"], summary["after"]["summary"]
    assert before["n_problems"] == after["n_problems"] == len(summary["after"]["success_rates"])
    assert after["pass@1"] > before["pass@1"] + 0.10  # every method clears the +10-point goal (sampled)
