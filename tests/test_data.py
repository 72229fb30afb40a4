"""Tests for qae_lab.data: GSM8K (local copy and a monkeypatched Hub), the synthetic task, prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qae_lab import data
from qae_lab.data import (
    LEVELS,
    SYSTEM_PROMPT,
    chat_messages,
    gsm8k_gold,
    load_gsm8k,
    prompt_text,
    sa_ah_split,
    seeded_subset,
    synthetic_task,
    to_grpo_dataset,
    xml_completion,
)

RECORD_KEYS = {"id", "question", "answer", "gold", "level", "source", "steps"}


def _gsm8k_dir() -> Path:
    import os

    env = os.environ.get("QAE_LAB_GSM8K_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="module")
def gsm8k_dir() -> Path:
    d = _gsm8k_dir()
    if not (d / "train.jsonl").is_file():
        pytest.skip(f"GSM8K not found at {d}; set QAE_LAB_GSM8K_DIR to a folder with train.jsonl/test.jsonl")
    return d


# ---------------------------------------------------------------- GSM8K

def test_gsm8k_local_files(gsm8k_dir):
    train, test = load_gsm8k("train", path=gsm8k_dir), load_gsm8k("test", path=gsm8k_dir)
    assert (len(train), len(test)) == (7473, 1319)
    for split, recs in (("train", train), ("test", test)):
        assert all(set(r) == RECORD_KEYS and r["source"] == "gsm8k" and r["level"] is None for r in recs)
        assert all(re.fullmatch(r"-?\d+", r["gold"]) for r in recs)
        assert recs[0]["id"] == f"gsm8k-{split}-0"
    assert train[0]["gold"] == "72" and train[0]["steps"][0] == "Natalia sold 48/2 = 24 clips in May."
    assert not any("<<" in s for r in train for s in r["steps"])  # calculator annotations removed
    # thousands commas are dropped from the gold ("#### 1,000" -> "1000"); negatives kept
    raw = [json.loads(line) for line in (gsm8k_dir / "train.jsonl").open()]
    commas = [i for i, row in enumerate(raw) if "," in row["answer"].rsplit("####", 1)[1]]
    assert len(commas) == 79 and all("," not in train[i]["gold"] for i in commas)
    assert sum(r["gold"].startswith("-") for r in train) == 3 and sum(r["gold"].startswith("-") for r in test) == 2


def test_gsm8k_env_var_and_subsets(gsm8k_dir, monkeypatch):
    monkeypatch.setenv("QAE_LAB_GSM8K_DIR", str(gsm8k_dir))
    a = load_gsm8k("test", n=50, seed=3)
    assert len(a) == 50 and [r["id"] for r in a] == [r["id"] for r in load_gsm8k("test", n=50, seed=3)]
    assert [r["id"] for r in a] != [r["id"] for r in load_gsm8k("test", n=50, seed=4)]
    train, evals = sa_ah_split()
    assert (len(train), len(evals)) == (800, 500)
    assert len({r["id"] for r in train}) == 800 and all(r["id"].startswith("gsm8k-test-") for r in evals)


def test_gsm8k_hub_path_uses_datasets(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"question": " Q? ", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"},
                {"question": "R?", "answer": "#### -1,200"}]

    monkeypatch.delenv("QAE_LAB_GSM8K_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    recs = load_gsm8k("test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [r["gold"] for r in recs] == ["4", "-1200"] and recs[0]["question"] == "Q?"
    assert recs[0]["steps"] == ["2 + 2 = 4"]


def test_gsm8k_errors(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_gsm8k("validation", path=tmp_path)
    with pytest.raises(FileNotFoundError, match="QAE_LAB_GSM8K_DIR"):
        load_gsm8k("train", path=tmp_path)
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    with pytest.raises(ValueError, match="####"):
        load_gsm8k("train", path=tmp_path)
    for bad in ("#### 1.5", "#### twelve", "####", 17):
        with pytest.raises(ValueError, match="answer"):
            gsm8k_gold(bad)
    with pytest.raises(ValueError, match="n must be"):
        seeded_subset([{"id": 1}], 2)


# ---------------------------------------------------------------- the synthetic task

_STEP = re.compile(r"^(-?\d+) ([+\-*]) (-?\d+) = (-?\d+)$")


def _check_steps(steps: list[str]) -> int:
    """Recompute each 'a op b = c' line independently; return the last result."""
    for line in steps:
        a, op, b, c = _STEP.match(line).groups()
        a, b, c = int(a), int(b), int(c)
        assert c == {"+": a + b, "-": a - b, "*": a * b}[op], line
    return c


def test_synthetic_task_shape_levels_and_arithmetic():
    recs = synthetic_task(500, seed=7)
    assert all(set(r) == RECORD_KEYS and r["source"] == "synthetic" for r in recs)
    assert [r["level"] for r in recs[:10]] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    for r in recs:
        assert _check_steps(r["steps"]) == int(r["gold"])
        assert r["answer"].endswith(f"\n#### {r['gold']}") and gsm8k_gold(r["answer"]) == r["gold"]
        assert len(r["steps"]) == (2 if r["level"] == 5 else 1)
    assert len({r["question"] for r in recs}) > 400  # varied


def test_synthetic_task_is_deterministic_and_validated():
    assert synthetic_task(20, seed=1) == synthetic_task(20, seed=1)
    assert synthetic_task(20, seed=1) != synthetic_task(20, seed=2)
    assert {r["level"] for r in synthetic_task(30, levels=(2, 4))} == {2, 4}
    for bad in ({"n": 0}, {"n": 2.0}, {"n": True}):
        with pytest.raises(ValueError, match="n must be"):
            synthetic_task(**bad)
    for levels in ((), (0,), (6,), (1, 9)):
        with pytest.raises(ValueError, match="levels"):
            synthetic_task(5, levels=levels)


# ---------------------------------------------------------------- prompts

def test_chat_messages_and_xml_completion():
    rec = synthetic_task(1, seed=0)[0]
    msgs = chat_messages(rec)
    assert msgs == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": rec["question"]}]
    assert "<reasoning>" in SYSTEM_PROMPT and "<answer>" in SYSTEM_PROMPT
    assert xml_completion(rec) == f"<reasoning>\n{rec['steps'][0]}\n</reasoning>\n<answer>\n{rec['gold']}\n</answer>"
    assert xml_completion(rec, answer="5").endswith("<answer>\n5\n</answer>")


def test_prompt_text_uses_the_chat_template():
    from qae_lab.embedded import build_tokenizer

    tok = build_tokenizer()
    rec = synthetic_task(1, seed=0)[0]
    text = prompt_text(rec, tok)
    assert text == (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{rec['question']}<|im_end|>\n"
                    "<|im_start|>assistant\n")

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="chat_template"):
        prompt_text(rec, NoTemplate())


def test_to_grpo_dataset_columns():
    recs = synthetic_task(4, seed=0) + [{"id": "gsm8k-test-0", "question": "Q", "gold": "3", "level": None}]
    ds = to_grpo_dataset(recs)
    assert set(ds.column_names) == {"prompt", "gold", "level", "id"} and len(ds) == 5
    assert ds[0]["prompt"][1]["content"] == recs[0]["question"] and ds[4]["level"] == 0
    assert ds[2]["gold"] == recs[2]["gold"]
    with pytest.raises(ValueError, match="records"):
        to_grpo_dataset([])


def test_levels_constant():
    assert LEVELS == (1, 2, 3, 4, 5) and data.GSM8K_HUB_ID == "openai/gsm8k"
