"""Tests for tools.task_properties: token regions by hand, the table, and the committed sums model's properties."""

from __future__ import annotations

import pytest
import torch

from qae_lab.task.models import load_policy
from qae_lab.task.sums import sums_task
from tools.task_properties import TARGETS, property_table, reasoning_tokens, task_properties


@pytest.fixture(scope="module")
def sums_policy():
    return load_policy("embedded-sums", device="cpu")


def _ids(tok, texts):
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask


def test_reasoning_tokens_cover_the_block_content_only(sums_policy):
    _, tok = sums_policy
    texts = [
        "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>",
        "<reasoning>\nAdd 2: 5 + 2 = 7.\n<answer>\n7\n</answer>",  # never closed: up to <answer>
        "no tags at all, 7",
    ]
    ids, mask = _ids(tok, texts)
    inside = reasoning_tokens(tok, ids, mask)
    decoded = [tok.decode(ids[i][inside[i]]) for i in range(3)]
    assert decoded[0].strip() == "3 + 4 = 7" and decoded[1].strip() == "Add 2: 5 + 2 = 7."
    assert decoded[2] == "" and not inside[~mask.bool()].any()


def test_property_table_marks_each_band():
    table = property_table({"distinct_correct": 3.0, "format_compliance": 0.8, "entropy_format": 0.1})
    lines = table.splitlines()  # in TARGETS' order
    assert lines[0].startswith("| property |") and len(lines) == 2 + 3
    assert lines[2].endswith("| >= 4 | NO |") and lines[3].endswith("| (reported) | — |")
    assert lines[4].endswith("| >= 0.7 and <= 0.9 | yes |")
    assert set(TARGETS) >= {"distinct_correct", "hard_frac", "reflect_frac"}


@pytest.mark.slow(seconds=25)
def test_the_committed_sums_model_offers_what_the_phenomena_need(sums_policy):
    """The committed model on fresh problems, smaller than the README's measurement (data/embedded_sums/README.md)
    and with looser bands for the sampling noise of 40 prompts."""
    model, tok = sums_policy
    props = task_properties(model, tok, sums_task(40, seed=777), group_size=16, max_new_tokens=160, batch_size=8)
    assert props["distinct_correct"] >= 3.0, props
    assert props["length_cv"] >= 0.1 and 25 <= props["length_q05"] and props["length_q95"] <= 150, props
    assert props["entropy_reasoning"] >= 0.1 and props["entropy_reasoning"] > props["entropy_format"], props
    assert props["hard_frac"] >= 0.15 and props["easy_frac"] >= 0.15, props
    assert 0.6 <= props["format_compliance"] <= 0.95, props
    assert props["reflect_frac"] > 0 and props["neg_correct_group_frac"] > 0, props
