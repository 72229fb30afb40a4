"""benchmarks/host_costs.py: the host's time per eager decode step of a Qwen2.5-0.5B-shaped model (the input of
qae_lab.runs.costs's host term), measured in smoke mode; an existing measurement is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qae_lab.runs.costs import QWEN25, Arch
from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
# the benchmark script, loaded from its file (sys.path stays as it is: it imports no neighbour)
host_costs = load_script("benchmarks/host_costs.py")


def test_the_tiny_model_has_qwen25_05bs_layout():
    c = host_costs.TINY_05B
    q = QWEN25["qwen2.5-0.5b"]
    assert (c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]) == (
        q.layers,
        q.heads,
        q.kv_heads,
    )
    Arch.from_config(c)  # a valid Qwen2 shape (hidden divisible by the heads)


@pytest.mark.slow(seconds=8)
def test_merged_adapters_take_fewer_ops_per_decode_step():
    rows = host_costs.measure(new_tokens=3, repeats=1)
    unmerged, merged = rows["unmerged"], rows["merged"]
    # PEFT's LoRA branch (dropout, A, B, scale, add) on seven projections of 24 layers: about 1,000 more ops
    assert unmerged["aten_ops_per_decode_step"] - merged["aten_ops_per_decode_step"] >= 24 * 7 * 4
    assert merged["ms_per_decode_step"] > 0 and unmerged["ms_per_decode_step"] > 0


def test_an_existing_measurement_is_kept(tmp_path, capsys):
    out = tmp_path / "host_costs.json"
    out.write_text(json.dumps({"rows": "earlier"}))
    assert host_costs.main(["--out", str(out)]) == 1
    assert json.loads(out.read_text()) == {"rows": "earlier"}
    assert "the earlier measurement is kept" in capsys.readouterr().err


def test_the_committed_measurement_has_both_paths():
    measured = json.loads((ROOT / "data" / "gpu_time" / "host_costs.json").read_text())
    assert (
        measured["rows"]["unmerged"]["aten_ops_per_decode_step"]
        > measured["rows"]["merged"]["aten_ops_per_decode_step"]
    )
    assert measured["threads"] == 1 and measured["layout"] == host_costs.TINY_05B
