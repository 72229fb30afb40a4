r"""Prompts for RL with verifiable rewards: GSM8K, a synthetic arithmetic task, chat prompts.

Every loader returns *records*, plain dicts of one shape whatever the source::

    {"id": "gsm8k-test-17", "question": "...", "answer": "...\n#### 72",
     "gold": "72", "level": None, "source": "gsm8k", "steps": ["48 / 2 = 24", ...]}

Implementer's notes: docs/implementation.md, section ``qae_lab.task.data``.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

from qae_lab._checks import check_int, check_regular_file
from qae_lab.task.answers import MAX_DIGITS, canonical, parse_number

__all__ = [
    "SYSTEM_PROMPT",
    "GSM8K_ENV",
    "LEVELS",
    "load_gsm8k",
    "gsm8k_gold",
    "sa_ah_split",
    "synthetic_task",
    "chat_messages",
    "prompt_text",
    "xml_completion",
    "to_grpo_dataset",
    "seeded_subset",
    "cycled_records",
]

GSM8K_ENV = "QAE_LAB_GSM8K_DIR"
GSM8K_HUB_ID, GSM8K_CONFIG = "openai/gsm8k", "main"
SYSTEM_PROMPT = (
    "Solve the problem. Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>"
)
LEVELS = (1, 2, 3, 4, 5)
_ANNOTATION = re.compile(r"<<[^<>]*>>")


def gsm8k_gold(answer: str) -> str:
    r"""The final answer of a GSM8K solution, after ``####``, as a canonical integer string, read by the rewards' own
    :func:`qae_lab.task.answers.parse_number` (what loads never fails inside a reward). Linear time.

    >>> gsm8k_gold("She pays 2 * 500 = <<2*500=1000>>1000.\n#### 1,000"), gsm8k_gold("#### -3")
    ('1000', '-3')
    >>> gsm8k_gold("#### 1,2,3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: answer must end in '#### <integer>' (GSM8K format), an integer the rewards read ... got '1,2,3'
    """
    marker = answer.find("####") if isinstance(answer, str) else -1
    if marker < 0:
        raise ValueError(f"answer must end in '#### <integer>' (GSM8K format), got {answer!r:.80}")
    text = answer[marker + 4 :].strip()
    value = parse_number(text)
    if value is None:
        raise ValueError(
            f"answer must end in '#### <integer>' (GSM8K format), an integer the rewards read "
            f"(digits 0-9, at most {MAX_DIGITS}, thousands commas well-formed as in '1,000'), "
            f"got {text!r:.80}"
        )
    if value.denominator != 1:
        raise ValueError(
            f"answer must end in '#### <integer>' (GSM8K format; every GSM8K gold is an integer), got {text!r:.80}"
        )
    return canonical(value)


def _gsm8k_record(row, split: str, i: int, where: str) -> dict[str, Any]:
    """Record ``i`` of a split from one raw row; ValueError naming ``where`` (file and line) and the field."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not a JSON object with 'question' and 'answer', got {type(row).__name__}")
    for field in ("question", "answer"):
        if field not in row:
            raise ValueError(f"{where}: no field {field!r} (fields: {', '.join(map(str, row)) or 'none'})")
        if not isinstance(row[field], str):
            raise ValueError(f"{where}: field {field!r} must be a str, got {type(row[field]).__name__}")
    answer = row["answer"]
    try:
        gold = gsm8k_gold(answer)
    except ValueError as err:
        raise ValueError(f"{where}: field 'answer': {err}") from None
    body = answer[: answer.rfind("####")]
    steps = [_ANNOTATION.sub("", line).strip() for line in body.splitlines() if line.strip()]
    return {
        "id": f"gsm8k-{split}-{i}",
        "question": row["question"].strip(),
        "answer": answer,
        "gold": gold,
        "level": None,
        "source": "gsm8k",
        "steps": steps,
    }


def _read_jsonl(file: Path) -> list[tuple[str, Any]]:
    """(where, row) for each non-blank line of a JSON-lines file; ValueError naming file and line."""
    rows = []
    check_regular_file(file, "data file")  # a named pipe would block the read forever
    with file.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{file} line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
            if not line.strip():
                continue
            try:
                rows.append((where, json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not JSON ({err.msg} at column {err.colno})") from None
    return rows


def seeded_subset(
    records: list[dict], n: int | None, seed: int = 0, *, name: str = "n", source: str = "records"
) -> list[dict]:
    r"""``n`` records drawn without replacement by ``seed`` (all, in order, when n is None); ``name`` and
    ``source`` word the errors.

    >>> [r["id"] for r in seeded_subset([{"id": i} for i in range(5)], 3, seed=1)]
    [1, 0, 4]
    """
    if n is None:
        return list(records)
    check_int(n, name, 1)
    if not records:
        raise ValueError(f"{source} holds no problems, so none can be drawn ({name}={n})")
    if n > len(records):
        raise ValueError(f"{name} must be an int [1, {len(records)}] ({source} holds {len(records)} problems), got {n}")
    return random.Random(seed).sample(list(records), n)


def _load_gsm8k(split: str, path, n: int | None, seed: int, name: str) -> list[dict[str, Any]]:
    """:func:`load_gsm8k`, with ``name`` the argument that ``n`` came in as (for error messages)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    path = path if path is not None else os.environ.get(GSM8K_ENV) or None
    if path is not None:
        file = Path(path) / f"{split}.jsonl"
        if not file.is_file():
            raise FileNotFoundError(f"no {file.name} in {Path(path)} (set path= or {GSM8K_ENV} to the GSM8K folder)")
        source, rows = str(file), _read_jsonl(file)
    else:
        from datasets import load_dataset  # the [train] extra provides it

        source = f"{GSM8K_HUB_ID} ({GSM8K_CONFIG}, split {split!r})"
        rows = [
            (f"{source} row {i}", row) for i, row in enumerate(load_dataset(GSM8K_HUB_ID, GSM8K_CONFIG, split=split))
        ]
    if not rows:
        raise ValueError(f"{source} holds no problems")
    records = [_gsm8k_record(row, split, i, where) for i, (where, row) in enumerate(rows)]
    return seeded_subset(records, n, seed, name=name, source=source)


def load_gsm8k(
    split: str = "train", *, path: str | os.PathLike | None = None, n: int | None = None, seed: int = 0
) -> list[dict[str, Any]]:
    r"""GSM8K records of one split from the folder ``path`` (``train.jsonl`` / ``test.jsonl``; default
    ``QAE_LAB_GSM8K_DIR``), else from the Hub; ``n``: a seeded subset (None: all, in file order). A bad row raises
    ValueError naming the file and line (or Hub row) and the field.

    >>> import tempfile
    >>> row = {"question": "Ann has 2 pens and buys 3. How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "test.jsonl").write_text(json.dumps(row) + "\n")
    ...     (record,) = load_gsm8k("test", path=folder)
    >>> record["id"], record["gold"], record["steps"]
    ('gsm8k-test-0', '5', ['2 + 3 = 5'])
    """
    return _load_gsm8k(split, path, n, seed, "n")


def sa_ah_split(
    *, path: str | os.PathLike | None = None, n_train: int = 800, n_eval: int = 500, seed: int = 0
) -> tuple[list[dict], list[dict]]:
    r"""SA-AH-GRPO's set-up (arXiv 2606.05434): 800 training problems from GSM8K's train
    split and 500 evaluation problems from its test split, drawn by ``seed``.

    >>> import tempfile
    >>> rows = "".join(json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n" for i in range(4))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     for split in ("train", "test"):
    ...         _ = (Path(folder) / f"{split}.jsonl").write_text(rows)
    ...     train, evaluation = sa_ah_split(path=folder, n_train=3, n_eval=2, seed=0)
    >>> [r["id"] for r in train], [r["id"] for r in evaluation]
    (['gsm8k-train-3', 'gsm8k-train-1', 'gsm8k-train-0'], ['gsm8k-test-3', 'gsm8k-test-1'])
    """
    return (_load_gsm8k("train", path, n_train, seed, "n_train"), _load_gsm8k("test", path, n_eval, seed, "n_eval"))


_NAMES = ("Ava", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lena", "Milo", "Nia")
_ITEMS = ("apples", "pens", "cards", "stamps", "books", "shells", "coins", "marbles", "stickers", "cookies")


_ONE_STEP = {  # level: the ranges of a and b, the operator, the question
    1: ((0, 9), (0, 9), "+", "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"),
    2: (
        (10, 49),
        (1, 9),
        "+",
        "{name} has {a} {item}. A friend gives {name} {b} more. How many {item} does {name} have?",
    ),
    3: ((10, 49), (1, 9), "-", "{name} has {a} {item} and gives away {b}. How many {item} are left?"),
    4: ((2, 9), (2, 9), "*", "There are {a} boxes with {b} {item} in each box. How many {item} are there?"),
}


def _problem(level: int, rng: random.Random) -> tuple[str, list[str], int]:
    """One word problem of a level: (question, solution steps, answer)."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if level in _ONE_STEP:
        (a_lo, a_hi), (b_lo, b_hi), op, question = _ONE_STEP[level]
        a, b = rng.randint(a_lo, a_hi), rng.randint(b_lo, b_hi)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        return question.format(name=name, item=item, a=a, b=b), [f"{a} {op} {b} = {value}"], value
    if level == 5:  # two steps: multiply, then add
        a, b, c = rng.randint(1, 20), rng.randint(2, 5), rng.randint(2, 5)
        return (
            (
                f"{name} has {a} {item} and buys {b} packs with {c} {item} in each pack. "
                f"How many {item} does {name} have now?"
            ),
            [f"{b} * {c} = {b * c}", f"{a} + {b * c} = {a + b * c}"],
            a + b * c,
        )
    raise ValueError(f"level must be one of {LEVELS}, got {level!r}")


def synthetic_task(n: int, *, levels=LEVELS, seed: int = 0) -> list[dict[str, Any]]:
    r"""``n`` synthetic arithmetic word problems in GSM8K's record shape, deterministic by ``seed``, levels cycled: 1
    one-digit addition, 2 two-digit plus one-digit, 3 two-digit minus one-digit, 4 one-digit product, 5 then add.

    >>> r = synthetic_task(2, levels=(1, 4), seed=3)
    >>> [x["level"] for x in r], r[0]["answer"].splitlines()[-1] == "#### " + r[0]["gold"]
    ([1, 4], True)
    """
    return cycled_records(n, levels, LEVELS, seed, "synthetic", lambda level, rng: (*_problem(level, rng), {}))


def cycled_records(n: int, levels, allowed, seed: int, source: str, problem) -> list[dict[str, Any]]:
    r"""``n`` records of a synthetic task in GSM8K's record shape, levels cycled, deterministic by ``seed``, from
    ``problem(level, rng) -> (question, steps, answer value, extra fields)``; ``source``: also the id prefix.

    >>> one = lambda level, rng: (f"{level} + 1?", [f"{level} + 1 = {level + 1}"], level + 1, {"terms": [level, 1]})
    >>> [(r["id"], r["gold"], r["terms"]) for r in cycled_records(3, (1, 2), (1, 2), 0, "toy", one)]
    [('toy-0-0', '2', [1, 1]), ('toy-0-1', '3', [2, 1]), ('toy-0-2', '2', [1, 1])]
    """
    check_int(n, "n", 1)
    levels = tuple(levels)
    if not levels or any(lv not in allowed for lv in levels):
        raise ValueError(f"levels must be a non-empty subset of {tuple(allowed)}, got {levels!r}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = levels[i % len(levels)]
        question, steps, value, extra = problem(level, rng)
        out.append(
            {
                "id": f"{source}-{seed}-{i}",
                "question": question,
                **extra,
                "answer": "\n".join(steps) + f"\n#### {value}",
                "gold": str(value),
                "level": level,
                "source": source,
                "steps": steps,
            }
        )
    return out


def chat_messages(record: dict) -> list[dict[str, str]]:
    r"""The conversation that asks ``record``'s question: the format system prompt, then the user turn.

    >>> [m["role"] for m in chat_messages({"question": "What is 2 + 2?"})]
    ['system', 'user']
    """
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": record["question"]}]


def prompt_text(record: dict, tokenizer) -> str:
    r"""The prompt string a model generates from: :func:`chat_messages` through the tokenizer's
    chat template, ending with the assistant turn's opening.

    >>> from transformers import AutoTokenizer
    >>> from qae_lab.task.models import embedded_dir
    >>> text = prompt_text({"question": "What is 2 + 2?"}, AutoTokenizer.from_pretrained(embedded_dir()))
    >>> text.startswith("<|im_start|>system\nSolve the problem."), text.splitlines()[-3:]
    (True, ['<|im_start|>user', 'What is 2 + 2?<|im_end|>', '<|im_start|>assistant'])
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("tokenizer has no chat_template; use an instruct model's tokenizer or qae_lab's embedded one")
    return tokenizer.apply_chat_template(chat_messages(record), tokenize=False, add_generation_prompt=True)


def xml_completion(record: dict, answer: str | None = None) -> str:
    r"""The completion in the requested format, from the record's steps and its gold (or ``answer``).

    >>> print(xml_completion({"steps": ["3 + 4 = 7"], "gold": "7"}))
    <reasoning>
    3 + 4 = 7
    </reasoning>
    <answer>
    7
    </answer>
    """
    steps = "\n".join(record["steps"])
    return f"<reasoning>\n{steps}\n</reasoning>\n<answer>\n{record['gold'] if answer is None else answer}\n</answer>"


def to_grpo_dataset(records: list[dict]):
    r"""A ``datasets.Dataset`` for TRL's GRPOTrainer: conversational ``prompt``, ``gold``, ``level`` (0 for GSM8K),
    ``id``; TRL passes ``gold`` and ``level`` to the reward functions as keyword lists.

    >>> ds = to_grpo_dataset(synthetic_task(2, levels=(1, 4)) + [{"id": "gsm8k-test-0", "question": "1 + 1?",
    ...                                                          "gold": "2", "level": None}])
    >>> ds.column_names, list(ds["level"]), [m["role"] for m in ds[2]["prompt"]]
    (['prompt', 'gold', 'level', 'id'], [1, 4, 0], ['system', 'user'])
    """
    from datasets import Dataset  # the train extra: imported only when used

    if not records:
        raise ValueError("records must not be empty")
    return Dataset.from_list(
        [{"prompt": chat_messages(r), "gold": r["gold"], "level": r["level"] or 0, "id": r["id"]} for r in records]
    )
