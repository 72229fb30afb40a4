"""Tests for qae_lab.labels: every baseline and token weighting has its name on screen, no two metrics share a colour,
and the names have one home (no module of the lab writes its own)."""

from __future__ import annotations

import ast
from pathlib import Path

from qae_lab import labels
from qae_lab.methods import BASELINES, TOKEN_WEIGHTINGS

LAB = Path(__file__).resolve().parents[1] / "qae_lab" / "lab"
KEYS = {"mean", "quantile", "none", "ah", "sa_ah"}  # baseline and weighting names a table of labels would map


def test_every_baseline_and_weighting_has_a_label():
    assert set(BASELINES) <= set(labels.BASELINE_NAMES) and set(BASELINES) <= set(labels.BASELINE_SHORT)
    assert set(TOKEN_WEIGHTINGS) <= set(labels.WEIGHTING_NAMES)


def test_no_two_metrics_share_a_colour():
    colours = [colour for _, _, colour in labels.CURVES.values()]
    assert len(set(colours)) == len(colours)


def second_homes(source: str) -> list[str]:
    """The dict literals of ``source`` that map a baseline or weighting name to a string."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values)
        if isinstance(key, ast.Constant)
        and key.value in KEYS
        and isinstance(value, (ast.Constant, ast.JoinedStr))
        and isinstance(getattr(value, "value", ""), str)
    ]


def test_the_lab_writes_no_label_of_its_own():
    found = {
        str(p.relative_to(LAB)): homes for p in sorted(LAB.rglob("*.py")) if (homes := second_homes(p.read_text()))
    }
    assert found == {}, f"labels written outside qae_lab.labels: {found}"
    assert second_homes('NAMES = {"mean": "GRPO mean", "quantile": f"QAE K={K}"}') != []  # the guard sees one
