"""Tests for qae_lab.task.data: GSM8K (local copy and a monkeypatched Hub), the synthetic task, prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qae_lab.task import data
from qae_lab.task.answers import gold_value
from qae_lab.task.data import (
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
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


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
        return [
            {"question": " Q? ", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"},
            {"question": "R?", "answer": "#### -1,200"},
        ]

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


def _write_train(folder: Path, text: str) -> Path:
    (folder / "train.jsonl").write_text(text, encoding="utf-8")
    return folder / "train.jsonl"


_GOOD = json.dumps({"question": "q", "answer": "1 + 1 = 2\n#### 2"}) + "\n"

FILE_ERRORS = [
    # (train.jsonl text, the error after "<file> ")
    # a blank line 3 is skipped but counted
    (_GOOD * 2 + "\n" + '{"question": "q", "answer": "#### 1"\n', r"line 4: not JSON \(.*column"),
    (_GOOD + "#### 5\n", r"line 2: not JSON"),
    (
        _GOOD * 2 + json.dumps({"question": "q", "solution": "#### 1"}) + "\n",
        r"line 3: no field 'answer' \(fields: question, solution\)",
    ),
    (json.dumps({"answer": "#### 1"}) + "\n", r"line 1: no field 'question' \(fields: answer\)"),
    (json.dumps({}) + "\n", r"line 1: no field 'question' \(fields: none\)"),
    (_GOOD + json.dumps({"question": "q", "answer": 72}) + "\n", r"line 2: field 'answer' must be a str, got int"),
    (json.dumps({"question": ["q"], "answer": "#### 1"}) + "\n", r"line 1: field 'question' must be a str, got list"),
    (_GOOD + json.dumps(["q", "#### 1"]) + "\n", r"line 2: not a JSON object .*got list"),
    (_GOOD * 6 + json.dumps({"question": "q", "answer": "72"}) + "\n", r"line 7: field 'answer': .*####"),
    # golds the rewards' reader cannot read are refused here, not half-way through training
    (
        _GOOD * 2 + json.dumps({"question": "q", "answer": "#### " + "1" * 31}) + "\n",
        r"line 3: field 'answer': .*at most 30.*got '1{31}'",
    ),
    (
        _GOOD + json.dumps({"question": "q", "answer": "1 + 2 = 3\n#### 1,2,3"}) + "\n",
        r"line 2: field 'answer': .*thousands commas well-formed.*got '1,2,3'",
    ),
    (json.dumps({"question": "q", "answer": "#### 1,,000"}) + "\n", r"line 1: field 'answer': .*got '1,,000'"),
    (json.dumps({"question": "q", "answer": "#### ٣"}) + "\n", r"line 1: field 'answer': .*digits 0-9"),
    (json.dumps({"question": "q", "answer": "#### 5 kg"}) + "\n", r"line 1: field 'answer': .*got '5 kg'"),
    (json.dumps({"question": "q", "answer": "#### 2.5"}) + "\n", r"line 1: field 'answer': .*integer.*got '2.5'"),
    (json.dumps({"question": "q", "answer": "#### 3/4"}) + "\n", r"line 1: field 'answer': .*integer.*got '3/4'"),
]


@pytest.mark.parametrize(
    "text, error",
    FILE_ERRORS,
    ids=[
        "not-json-after-blank-line",
        "bare-text",
        "no-answer",
        "no-question",
        "empty-object",
        "answer-int",
        "question-list",
        "row-list",
        "no-marker",
        "gold-31-digits",
        "gold-commas-1,2,3",
        "gold-commas-1,,000",
        "gold-arabic-indic-digit",
        "gold-unit",
        "gold-decimal",
        "gold-fraction",
    ],
)
def test_gsm8k_file_errors_name_file_line_and_field(tmp_path, text, error):
    file = _write_train(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(str(file)) + " " + error):
        load_gsm8k("train", path=tmp_path)


def test_gsm8k_file_not_utf8_names_file_and_line(tmp_path):
    (tmp_path / "train.jsonl").write_bytes(_GOOD.encode() + b'{"question": "\xff"}\n')
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "train.jsonl")) + " line 2: not UTF-8"):
        load_gsm8k("train", path=tmp_path)


def test_gsm8k_empty_or_short_file_names_file_and_counts(tmp_path):
    for empty in ("", "\n  \n"):
        file = _write_train(tmp_path, empty)
        with pytest.raises(ValueError, match=re.escape(f"{file} holds no problems")):
            load_gsm8k("train", path=tmp_path)
        with pytest.raises(ValueError, match="holds no problems"):
            sa_ah_split(path=tmp_path)
    file = _write_train(tmp_path, _GOOD * 10)
    (tmp_path / "test.jsonl").write_text(_GOOD * 3)
    with pytest.raises(ValueError, match=re.escape(f"n must be an int [1, 10] ({file} holds 10 problems), got 64")):
        load_gsm8k("train", path=tmp_path, n=64)
    message = f"n_train must be an int [1, 10] ({file} holds 10 problems), got 64"
    with pytest.raises(ValueError, match=re.escape(message)):
        sa_ah_split(path=tmp_path, n_train=64, n_eval=3)
    with pytest.raises(ValueError, match=r"n_eval must be an int \[1, 3\] \(.*test.jsonl holds 3 problems\), got 500"):
        sa_ah_split(path=tmp_path, n_train=10)
    train, evals = sa_ah_split(path=tmp_path, n_train=10, n_eval=3)
    assert (len(train), len(evals)) == (10, 3)
    with pytest.raises(ValueError, match=r"records holds no problems"):
        seeded_subset([], 3)


def test_gsm8k_hub_row_errors_name_the_row(monkeypatch):
    import datasets

    rows = {"train": [{"question": "Q", "answer": "#### 1"}, {"question": "R"}], "test": []}
    monkeypatch.delenv("QAE_LAB_GSM8K_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: rows[split])
    with pytest.raises(ValueError, match=r"openai/gsm8k .*'train'.* row 1: no field 'answer' \(fields: question\)"):
        load_gsm8k("train")
    with pytest.raises(ValueError, match=r"openai/gsm8k .*'test'.* holds no problems"):
        load_gsm8k("test")


def _gsm8k_gold_reference(answer: str) -> str:
    """The earlier implementation, kept as a reference (its regex is quadratic on long whitespace)."""
    m = re.search(r"####\s*(.+?)\s*$", answer, re.S)
    value = m.group(1).replace(",", "") if m else ""
    if not re.fullmatch(r"-?\d+", value):
        raise ValueError("no gold")
    return str(int(value))


def _outcome(fn, answer):
    try:
        return fn(answer)
    except ValueError:
        return ValueError


def test_gsm8k_gold_matches_reference_on_gsm8k(gsm8k_dir):
    for split in ("train", "test"):
        with (gsm8k_dir / f"{split}.jsonl").open(encoding="utf-8") as f:
            answers = [json.loads(line)["answer"] for line in f if line.strip()]
        for a in answers:
            assert gsm8k_gold(a) == _gsm8k_gold_reference(a), a
            assert _outcome(gsm8k_gold, a + " \n") == _outcome(_gsm8k_gold_reference, a + " \n")


@pytest.mark.parametrize(
    "answer",
    [
        "#### 72",
        "x\n####72",
        "#### 1,000\n",
        "####\t-3 \n\n",
        "#### 007",
        "####",
        "#### ",
        "####\n",
        "no marker",
        "#### 5 ####",
        "##### 5",
        "#### 5\n#### 6",
        "#### 1 2",
        "#### 1.5",
        "#### \u00a05\u2003",
        "#### --3",
        "# ### 5",
        "#### " + "9" * 30,
    ],
)
def test_gsm8k_gold_matches_reference_by_hand(answer):
    assert _outcome(gsm8k_gold, answer) == _outcome(_gsm8k_gold_reference, answer)


@pytest.mark.parametrize(
    "answer, reference, now",
    [
        # where the loader now follows the rewards' reader (qae_lab.task.answers.gold_value) instead of int()
        ("#### " + "9" * 31, "9" * 31, ValueError),  # more than MAX_DIGITS: the reward would raise mid-run
        ("#### 1,2,3", "123", ValueError),  # malformed thousands commas
        ("#### 1,,0", "10", ValueError),
        ("#### 12,34", "1234", ValueError),
        ("#### ٣", "3", ValueError),  # an Arabic-Indic digit: no number to the reader
        ("#### +3", ValueError, "3"),  # the reader reads a sign and a currency symbol
        ("#### $1,000", ValueError, "1000"),
        ("#### 2.0", ValueError, "2"),  # an integer written with decimals
    ],
)
def test_gsm8k_gold_is_the_rewards_reading(answer, reference, now):
    assert _outcome(_gsm8k_gold_reference, answer) == reference
    assert _outcome(gsm8k_gold, answer) == now
    if now is ValueError:
        with pytest.raises(ValueError):
            gold_value(answer.removeprefix("#### "))  # the reward's reader refuses it too
    else:
        assert gold_value(now) == gold_value(answer.removeprefix("#### "))


def test_gsm8k_gold_thousands_still_read(tmp_path):
    _write_train(tmp_path, json.dumps({"question": "q", "answer": "2 * 500 = 1000\n#### 1,000"}) + "\n")
    (record,) = load_gsm8k("train", path=tmp_path)
    assert record["gold"] == "1000" and gsm8k_gold("#### -1,200") == "-1200"


def test_gsm8k_loader_refuses_nothing_real(gsm8k_dir):
    # every real gold loads, unchanged from the earlier int() reading, and the reward's reader agrees
    for split in ("train", "test"):
        with (gsm8k_dir / f"{split}.jsonl").open(encoding="utf-8") as f:
            answers = [json.loads(line)["answer"] for line in f if line.strip()]
        old = [str(int(a[a.find("####") + 4 :].strip().replace(",", ""))) for a in answers]
        records = load_gsm8k(split, path=gsm8k_dir)
        assert [r["gold"] for r in records] == old
        assert all(gold_value(r["gold"]) == int(g) for r, g in zip(records, old))


def test_gsm8k_gold_is_linear_on_long_whitespace():
    # No clock here (machines are noisy): 1 MB inputs that the earlier regex needed about an
    # hour for (5 s at 40 KB, quadratic), so a quadratic version stalls the suite instead.
    n = 1_000_000
    assert gsm8k_gold("#### " + " \t\n" * (n // 3) + "72" + " \n" * (n // 2)) == "72"
    for bad in ("#### 5" + " " * n + "x", "#### 1" + "\n" * n + "2", "####" + " " * n):
        with pytest.raises(ValueError, match="answer"):
            gsm8k_gold(bad)
    with pytest.raises(ValueError, match="answer"):
        gsm8k_gold("#### " + "1" * 5_000)  # longer than int() converts: our error, not Python's


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
    from tools.embedded_models import build_tokenizer

    tok = build_tokenizer()
    rec = synthetic_task(1, seed=0)[0]
    text = prompt_text(rec, tok)
    assert text == (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{rec['question']}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )

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
