r"""The embedded models: tiny Qwen2s the project trains itself, so everything runs offline on a CPU.

Two of them, one per synthetic task (:data:`TASKS`), each with its own tokenizer:

* ``embedded`` (``data/embedded/``): the arithmetic word problems of :func:`qae_lab.task.data.synthetic_task`;
  notebooks 00 and 03-05 and the ``cpu-demo`` preset.
* ``embedded-sums`` (``data/embedded_sums/``): the sums task of :mod:`qae_lab.task.sums` (any order, free
  wording, an optional check line), built so that the papers' phenomena can show on a CPU: several
  correct completions per prompt, lengths that vary, real token entropy, format slips; notebook 06
  and the ``cpu-sums`` preset.

``python -m tools.embedded_models [--task sums]`` rebuilds one from scratch (minutes on 2 cores) into its
folder: a byte-level BPE tokenizer (digits split one by one, Qwen's chat markers ``<|im_start|>`` /
``<|im_end|>``, a Qwen-style chat template) and a ``transformers.Qwen2ForCausalLM`` of about a million
parameters, supervised on freshly drawn problems of its task in the XML answer format.

Why noisy targets. RLVR mostly sharpens what a model can already sample: it turns pass@k
into pass@1. A tiny model whose errors are pure incapacity leaves RL nothing to find in a
short run. So the supervised targets are right only part of the time, at a rate that
falls with the difficulty level (:data:`CORRECT_RATE`, :data:`qae_lab.task.sums.SUMS_CORRECT_RATE`); the
wrong targets move one result by a small offset, consistently in the reasoning and the answer. The
model learns to put real but partial probability on the right answer: sampled pass@1 in the
middle, pass@8 far higher, and per-prompt success rates spread over (0, 1), so that
both of QAE's regimes are populated.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from qae_lab.task.data import SYSTEM_PROMPT, chat_messages, synthetic_task, xml_completion
from qae_lab.task.sums import sums_completion, sums_task

__all__ = [
    "CORRECT_RATE",
    "CHAT_TEMPLATE",
    "DATA_DIR",
    "DEFAULT_DIR",
    "EmbeddedTask",
    "TASKS",
    "build_tokenizer",
    "embedded_config",
    "noisy_example",
    "train_embedded",
    "main",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DEFAULT_DIR = DATA_DIR / "embedded"
CORRECT_RATE = {1: 0.85, 2: 0.7, 3: 0.55, 4: 0.45, 5: 0.35}  # P(supervised target is right) per level
WRONG_OFFSETS = (-10, -2, -1, 1, 2, 10)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def noisy_example(record: dict, rng: random.Random, correct_rate: dict[int, float] = CORRECT_RATE) -> str:
    r"""The supervised completion for a synthetic record: right with probability ``correct_rate[level]``,
    else the last step's result moved by one of :data:`WRONG_OFFSETS` (reasoning and answer agree).

    >>> rec = {"steps": ["3 + 4 = 7"], "gold": "7", "level": 1}
    >>> noisy_example(rec, random.Random(0), {1: 1.0}).splitlines()[-2]
    '7'
    >>> noisy_example(rec, random.Random(0), {1: 0.0}).splitlines()[1]
    '3 + 4 = 8'
    """
    if rng.random() < correct_rate[record["level"]]:
        return xml_completion(record)
    wrong = int(record["gold"]) + rng.choice(WRONG_OFFSETS)
    *head, last = record["steps"]
    last = last.rsplit("=", 1)[0] + f"= {wrong}"
    return xml_completion({"steps": [*head, last], "gold": str(wrong)})


@dataclass(frozen=True)
class EmbeddedTask:
    r"""What one embedded model is trained on, and its defaults.

    >>> TASKS["sums"].folder, TASKS["arithmetic"].steps
    ('embedded_sums', 1500)
    """

    records: Callable
    """``records(n, seed=...)``: fresh problems of the task"""
    target: Callable
    """``target(record, rng)``: one supervised completion (noisy on purpose, module docstring)"""
    folder: str
    """the model's folder under ``data/``"""
    steps: int
    """default optimisation steps"""
    batch_size: int
    """default sequences per step"""
    lr: float
    """default peak learning rate"""
    hidden: int = 128
    """hidden size (the model: :func:`embedded_config`)"""
    layers: int = 4
    """decoder layers"""
    buckets: int = 1
    """each step's batch is sorted by length and cut into this many micro-batches, each padded only to its own
    longest sequence (the gradient is the batch's; long, varied sequences waste less on padding)"""


TASKS = {
    "arithmetic": EmbeddedTask(synthetic_task, noisy_example, "embedded", steps=1500, batch_size=48, lr=3e-3),
    "sums": EmbeddedTask(sums_task, sums_completion, "embedded_sums", steps=1500, batch_size=48, lr=3e-3, buckets=4),
}


def _task(task: str) -> EmbeddedTask:
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    return TASKS[task]


def _chat(record: dict) -> str:
    """The prompt as the chat template writes it (without a tokenizer: the corpus is built before it)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in chat_messages(record))


def _corpus(n: int, seed: int, task: str) -> list[str]:
    """Texts the tokenizer learns its merges from: whole chats of the task."""
    rng = random.Random(seed)
    spec = _task(task)
    return [
        _chat(rec) + "<|im_start|>assistant\n" + spec.target(rec, rng) + "<|im_end|>\n"
        for rec in spec.records(n, seed=seed)
    ]


def build_tokenizer(vocab_size: int = 640, *, seed: int = 0, task: str = "arithmetic"):
    r"""A byte-level BPE tokenizer for a task of :data:`TASKS`, wrapped as a transformers fast tokenizer.

    Digits are split one by one before BPE (arithmetic on whole-number tokens is much harder
    for a small model); ``<|im_end|>`` ends a turn and is the EOS token; ``<|endoftext|>``
    pads. Any text round-trips (byte-level), so GSM8K text also encodes, just long.

    >>> tok = build_tokenizer()
    >>> tok.tokenize("12 + 3"), tok.eos_token, tok.pad_token
    (['1', '2', 'Ġ+', 'Ġ', '3'], '<|im_end|>', '<|endoftext|>')
    >>> tok.decode(tok("Zoë pays 1,250 €")["input_ids"])
    'Zoë pays 1,250 €'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # the train extra
    from transformers import PreTrainedTokenizerFast  # the train extra: imported only when used

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(4000, seed, task) + [SYSTEM_PROMPT], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=512,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def embedded_config(vocab_size: int, *, hidden: int = 128, layers: int = 4, heads: int = 4):
    r"""A Qwen2 architecture small enough to train in minutes on a CPU (about 1M parameters).

    >>> cfg = embedded_config(470)
    >>> cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_key_value_heads
    (128, 384, 4, 2)
    """
    from transformers import Qwen2Config  # the train extra: imported only when used

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        use_sliding_window=False,
    )


def _batch(tokenizer, rng: random.Random, batch_size: int, spec: EmbeddedTask) -> dict[str, torch.Tensor]:
    """A fresh batch of (prompt, noisy completion) pairs; the loss covers completion tokens only."""
    records = spec.records(batch_size, seed=rng.randrange(2**31))
    ids, labels = [], []
    for rec in records:
        prompt = tokenizer.apply_chat_template(chat_messages(rec), tokenize=False, add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(spec.target(rec, rng) + "<|im_end|>", add_special_tokens=False)["input_ids"]
        ids.append(p_ids + c_ids)
        labels.append([-100] * len(p_ids) + c_ids)
    t = max(map(len, ids))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([x + [pad] * (t - len(x)) for x in ids])  # (B, T), right-padded for training
    label_t = torch.tensor([y + [-100] * (t - len(y)) for y in labels])
    attention = torch.tensor([[1] * len(x) + [0] * (t - len(x)) for x in ids])
    return {"input_ids": input_ids, "labels": label_t, "attention_mask": attention}


def _buckets(batch: dict[str, torch.Tensor], parts: int) -> list[tuple[dict[str, torch.Tensor], float]]:
    """``batch`` sorted by length and cut into ``parts`` micro-batches without their trailing padding, each with
    its share of the batch's loss tokens (the weight of its mean loss in the batch's mean)."""
    if parts == 1:
        return [(batch, 1.0)]
    order = batch["attention_mask"].sum(1).argsort()
    n_labels = float((batch["labels"] != -100).sum())
    out = []
    for rows in order.chunk(parts):
        width = int(batch["attention_mask"][rows].sum(1).max())
        part = {k: v[rows, :width] for k, v in batch.items()}  # right-padded: the tail columns are padding
        out.append((part, float((part["labels"] != -100).sum()) / n_labels))
    return out


def train_embedded(
    out_dir: str | Path | None = None,
    *,
    task: str = "arithmetic",
    steps: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    seed: int = 0,
    log_every: int = 100,
) -> Path:
    r"""Build the tokenizer, train the tiny Qwen2 by SFT on the task's noisy targets, save both.

    Every step draws fresh problems (no epoch, no overfitting to a fixed set). AdamW with
    linear warm-up and cosine decay. Saves safetensors weights and the tokenizer into
    ``out_dir`` (default: the task's folder under ``data/``) and returns it. ``steps``,
    ``batch_size`` and ``lr`` default to the task's (:data:`TASKS`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +ELLIPSIS
    ...     out = train_embedded(folder, steps=1, batch_size=2)
    ...     (out / "model.safetensors").is_file(), (out / "tokenizer.json").is_file()
    embedded model (arithmetic): 0.85M parameters, vocab 470, 1 steps of 2
    step     1  loss ...
    (True, True)
    """
    from transformers import Qwen2ForCausalLM  # the train extra: imported only when used

    spec = _task(task)
    steps, batch_size, lr = steps or spec.steps, batch_size or spec.batch_size, lr or spec.lr
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = build_tokenizer(seed=seed, task=task)
    model = Qwen2ForCausalLM(embedded_config(len(tokenizer), hidden=spec.hidden, layers=spec.layers))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    t0 = time.time()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"embedded model ({task}): {n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}, {steps} steps of "
        f"{batch_size}"
    )
    for step in range(1, steps + 1):
        loss = 0.0
        for part, share in _buckets(_batch(tokenizer, rng, batch_size, spec), spec.buckets):
            part_loss = model(**part).loss * share  # the batch's token-mean loss, one micro-batch at a time
            part_loss.backward()
            loss += part_loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == steps:
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.time() - t0:6.0f}s", flush=True)
    out_dir = Path(out_dir) if out_dir is not None else DATA_DIR / spec.folder
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    r"""Command line: rebuild an embedded model (``python -m tools.embedded_models --help``).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +ELLIPSIS
    ...     main(["--out", folder, "--steps", "1", "--batch-size", "2"])
    embedded model (arithmetic): 0.85M parameters, vocab 470, 1 steps of 2
    step     1  loss ...
    saved to ...
    """
    p = argparse.ArgumentParser(
        prog="python -m tools.embedded_models",
        description="Rebuild one of qae_lab's embedded "
        "tiny Qwen2 models from scratch (SFT on noisy synthetic targets).",
    )
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="arithmetic",
        help="arithmetic (data/embedded, the default) or sums (data/embedded_sums)",
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default: the task's folder under data/)")
    p.add_argument("--steps", type=int, default=None, help="optimisation steps (default: the task's, 1500)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step (default: the task's, 48)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the task's, 3e-3)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if any(x is not None and x < 1 for x in (a.steps, a.batch_size)) or (a.lr is not None and not a.lr > 0):
        p.error("--steps and --batch-size must be >= 1 and --lr > 0")
    out = train_embedded(a.out, task=a.task, steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed)
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
