r"""The largest settings a run accepts, before anything loads: from the estimated peak memory where a bound depends on
the model (:mod:`qae_lab.runs.costs`), a documented cap where it does not; the disk its checkpoints take and the
completions an evaluation samples. :func:`qae_lab.runs.pipeline.check_run` refuses a run past any of them;
docs/command-line.md tables them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from qae_lab.runs.costs import (
    DTYPE_BYTES,
    GIB,  # noqa: F401 -- the doctests
    PROMPT_TOKENS,
    QWEN25,
    Arch,
    lora_grpo_memory,
    lora_param_count,
    param_count,
    projections,
)
from qae_lab.task.data import GSM8K_ENV
from qae_lab.task.models import EMBEDDED_MODELS, LORA_TARGETS, embedded_dir, resolve_name

__all__ = [
    "MAX_PEAK",
    "MAX_DRAWN",
    "GSM8K_SIZES",
    "SMALLEST_ARCH",
    "MAX_DISK",
    "MAX_EVAL_COMPLETIONS",
    "model_arch",
    "run_peak",
    "limits",
    "over_limits",
    "checkpoint_bytes",
    "saved_checkpoints",
    "trainer_steps",
]

MAX_PEAK = 2 * 2**40
"""2 TiB: the most a run's estimated peak memory (:func:`run_peak`, a lower estimate) may be: eight times the largest
GPU's (256 GB) and more than most servers' RAM."""
MAX_DRAWN = 100_000
"""Problems the synthetic and sums tasks draw (``n_train``, ``n_eval``), held in memory as records and an Arrow
table: 100,000 take about 250 MB and 2 s to draw (50 times cpu-demo's 2,000)."""
GSM8K_SIZES = {"train": 7_473, "test": 1_319}
"""GSM8K's splits on the Hub (openai/gsm8k, main); a local folder's are counted by
:func:`qae_lab.runs.run_plan.plan`."""
SMALLEST_ARCH = Arch(128, 4, 4, 2, 384, 470, True)
"""The embedded model's architecture, the smallest: the estimates' model when a run's has no ``config.json`` here."""
_LARGEST = 2**62  # the top of the search for a memory-bound setting's largest value


def model_arch(model: str) -> Arch | None:
    r"""The architecture of a run's ``model`` without loading it: :data:`QWEN25`, else the ``config.json`` of the
    embedded model, a local folder or the Hub's cache (never fetched); None when none here is readable.

    >>> model_arch("qwen2.5-1.5b").hidden, model_arch("embedded") == SMALLEST_ARCH, model_arch("no-such/model-here")
    (1536, True, None)
    """
    if str(model).lower() in QWEN25:
        return QWEN25[str(model).lower()]
    try:
        if model in EMBEDDED_MODELS:
            file = embedded_dir(model) / "config.json"
        elif Path(model).is_dir():  # a local folder's own file, never a link to another place
            file = None if (Path(model) / "config.json").is_symlink() else Path(model) / "config.json"
        else:
            from huggingface_hub import try_to_load_from_cache  # transformers' own dependency (the train extra)

            cached = try_to_load_from_cache(resolve_name(model), "config.json")
            file = Path(cached) if isinstance(cached, str) else None
        if file is None or not file.is_file() or file.stat().st_size > 2**20:
            return None
        return Arch.from_config(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # unreadable: the run's load says why
        return None


_EVERY_PHASE = ("step", "evaluation", "trl_evaluation", "regime_eval")
# the settings run_peak counts, and the phases each enters; those of RunArgs
_PHASES = {
    **dict.fromkeys(("lora_r", "max_completion_length"), _EVERY_PHASE),
    **dict.fromkeys(
        ("per_device_train_batch_size", "steps_per_generation", "pad_to_multiple_of", "entropy_top_k"), ("step",)
    ),
    **dict.fromkeys(("eval_batch_size", "eval_samples", "eval_max_new_tokens"), ("evaluation",)),
    "per_device_eval_batch_size": ("trl_evaluation",),
    **dict.fromkeys(("regime_eval_samples", "regime_eval_prompts"), ("regime_eval",)),
}
_RUN_SIZES = ("lora_r", "eval_batch_size", "eval_samples", "eval_max_new_tokens")
# the settings whose bound is the largest generate call's (_memory_limits)
_BATCHES = ("generation_batch_size", "num_generations", "num_generations_eval")


def _sizes(run, cfg) -> dict[str, int | None]:
    """The run's settings that :func:`run_peak` counts, by name."""
    return {name: getattr(run if name in _RUN_SIZES else cfg, name, None) for name in _PHASES}


def run_peak(run, cfg, *, regime_batch: int, regime_draws: int, **sizes) -> dict[str, int]:
    r"""A lower estimate of a built run's peak memory in bytes, phase by phase, and ``peak``, the largest.

    ``step``: :func:`lora_grpo_memory` of a process's generation batch and a micro-batch's update (padded; with
    ``entropy_top_k``'s values and indices; without LoRA no gradients nor optimizer state counted). ``evaluation``,
    ``trl_evaluation``, ``regime_eval``: one generate call each, counted whether or not the run turns it on. The model
    is :func:`model_arch`'s, else :data:`SMALLEST_ARCH`. ``sizes``: values in place of the run's settings.

    >>> from types import SimpleNamespace as NS
    >>> run = NS(model="qwen2.5-0.5b", dtype="float16", lora=True, lora_r=16, task="gsm8k", eval_batch_size=32,
    ...          eval_samples=4, eval_max_new_tokens=None)
    >>> cfg = NS(per_device_train_batch_size=16, steps_per_generation=2, max_completion_length=256,
    ...          gradient_checkpointing=True, fast_generation=True, pad_to_multiple_of=None, entropy_top_k=None,
    ...          per_device_eval_batch_size=8, regime_eval_samples=8, regime_eval_prompts=64)
    >>> est = run_peak(run, cfg, regime_batch=16, regime_draws=4)
    >>> {k: round(v / GIB, 2) for k, v in est.items()}   # the step: run_memory's 3.18 GiB
    {'step': 3.18, 'evaluation': 3.39, 'trl_evaluation': 1.17, 'regime_eval': 10.52, 'peak': 10.52}
    """
    return _run_peak(
        run, cfg, model_arch(run.model) or SMALLEST_ARCH, regime_batch, regime_draws, {**_sizes(run, cfg), **sizes}
    )


def _beams(cfg) -> int:
    """The sequences generation keeps a row: ``generation_kwargs``' ``num_beams`` (1 when sampling)."""
    kwargs = getattr(cfg, "generation_kwargs", None)
    return int((kwargs if isinstance(kwargs, dict) else {}).get("num_beams") or 1)


def trainer_steps(run, cfg) -> int:
    r"""The optimizer steps a run takes, by the Trainer's count: ``max_steps``, or with ``max_steps=-1``
    ``num_train_epochs`` epochs of a process's generation batches.

    >>> from qae_lab.runs.presets import build
    >>> trainer_steps(*build("cpu-demo", ["max_steps=-1", "num_train_epochs=2"], output_dir="unused"))
    500
    """
    if cfg.max_steps > 0:
        return cfg.max_steps
    return math.ceil(cfg.num_train_epochs * _steps_an_epoch(run, cfg))


def _steps_an_epoch(run, cfg) -> int:
    batches = run.n_train // (cfg.generation_batch_size // cfg.num_generations) * cfg.steps_per_generation
    return max(-(-batches * cfg.num_iterations // cfg.gradient_accumulation_steps), 1)


def _run_peak(run, cfg, arch: Arch, regime_batch: int, regime_draws: int, s: dict) -> dict[str, int]:
    """:func:`run_peak` of the model ``arch`` and the settings ``s``."""
    b = 2 if run.dtype == "auto" else DTYPE_BYTES[run.dtype]
    common = {
        "dtype_bytes": b,
        "lora_r": s["lora_r"] if run.lora else 1,
        "targets": LORA_TARGETS if run.lora else (),
        "prompt_len": PROMPT_TOKENS.get(run.task, 320),
    }
    n, t, m = s["per_device_train_batch_size"], s["max_completion_length"], s["pad_to_multiple_of"] or 1

    def generation(batch: int, new_tokens: int) -> int:  # the persistent terms and one generate call
        est = lora_grpo_memory(
            arch, **common, micro_batch=1, generation_batch=batch, completion_len=new_tokens, fast_generation=False
        )
        return est["persistent"] + est["generation"]

    checkpointing = bool(getattr(cfg, "gradient_checkpointing", False))
    step = lora_grpo_memory(
        arch,
        **common,
        micro_batch=n,
        generation_batch=n * s["steps_per_generation"] * _beams(cfg),  # beam search: num_beams sequences a row
        completion_len=t,
        checkpointing=checkpointing,
        fast_generation=bool(getattr(cfg, "fast_generation", False)),
    )
    padded_t = -(-t // m) * m  # TRL pads prompts and completions to a multiple of pad_to_multiple_of
    update = lora_grpo_memory(
        arch,
        **{**common, "prompt_len": -(-common["prompt_len"] // m) * m},
        micro_batch=n,
        generation_batch=1,
        completion_len=padded_t,
        checkpointing=checkpointing,
    )
    top_k = n * padded_t * (s["entropy_top_k"] or 0) * 12
    regime = min(regime_batch, s["regime_eval_prompts"]) * regime_draws * s["regime_eval_samples"]
    phases = {
        "step": step["persistent"] + max(step["generation"], update["training"] + top_k),
        "evaluation": generation(s["eval_batch_size"] * s["eval_samples"], s["eval_max_new_tokens"] or t),
        "trl_evaluation": generation(s["per_device_eval_batch_size"], t),
        "regime_eval": generation(regime, t),
    }
    return {**phases, "peak": max(phases.values())}


def _largest(fits: Callable[[int], bool], top: int = _LARGEST) -> int:
    """The largest v in [0, top] with ``fits(v)``, for a ``fits`` true up to some value and false after (0: none)."""
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _drawable(run) -> dict[str, int]:
    """``{"n_train": most, "n_eval": most}`` the run's task draws; empty for a local GSM8K folder."""
    if run.task != "gsm8k":
        return {"n_train": MAX_DRAWN, "n_eval": MAX_DRAWN}
    if run.gsm8k_path or os.environ.get(GSM8K_ENV):
        return {}
    return {"n_train": GSM8K_SIZES["train"], "n_eval": GSM8K_SIZES["test"]}


def limits(run, cfg, *, regime_batch: int, regime_draws: int, memory: bool = True) -> dict[str, tuple[float, str]]:
    r"""The largest value a built run accepts for each of its size settings, ``{field: (largest, why)}``, the others as
    set: by the model (``lora_r``, ``entropy_top_k``, and each setting :func:`run_peak` counts within :data:`MAX_PEAK`,
    by bisection, left out with ``memory=False``), by the task's problems, by ``QAEConfig``'s ``MAX_STEPS``.

    >>> from qae_lab.runs.presets import build
    >>> bounds = limits(*build("cpu-demo", output_dir="unused"), regime_batch=16, regime_draws=4)
    >>> bounds["n_train"][0], bounds["lora_r"][0], bounds["per_device_train_batch_size"][0]
    (100000, 128, 852169)
    """
    out: dict[str, tuple[float, str]] = {}

    def bound(name: str, largest: float, why: str) -> None:  # of two bounds of one field, the smaller stands
        if name not in out or largest < out[name][0]:
            out[name] = (largest, why)

    gsm8k = {"n_train": "the problems in GSM8K's train split", "n_eval": "the problems in GSM8K's test split"}
    for name, most in _drawable(run).items():
        bound(name, most, gsm8k[name] if run.task == "gsm8k" else f"the most problems the {run.task} task draws")
    bound("regime_eval_prompts", _drawable(run).get("n_eval", MAX_DRAWN), "the most held-out problems there can be")
    if cfg.max_steps == -1:  # the Trainer's count of an epoch's optimizer steps, within QAEConfig's MAX_STEPS
        from qae_lab.train.config import MAX_STEPS  # imports TRL (the train extra), loaded already where cfg was built

        per_epoch = _steps_an_epoch(run, cfg)
        bound(
            "num_train_epochs",
            MAX_STEPS / per_epoch,
            f"{per_epoch} steps an epoch, within the most steps a run takes ({MAX_STEPS}: the Trainer keeps every "
            "logged step in memory)",
        )
    arch = model_arch(run.model)
    if arch is not None:
        widest = max(min(i, o) for t, (i, o) in projections(arch).items() if t in LORA_TARGETS)
        bound("lora_r", widest, f"the widest rank of an adapted layer of the model {run.model!r}, min(in, out)")
        if cfg.entropy_top_k is not None:
            bound("entropy_top_k", arch.vocab, f"the vocabulary of the model {run.model!r}")
    why = f"keeps the estimated peak memory within {MAX_PEAK // 2**40} TiB, the other settings as set"
    sizes = _memory_limits(run, cfg, arch or SMALLEST_ARCH, regime_batch, regime_draws) if memory else {}
    for name, largest in sizes.items():
        if name != "num_generations_eval" or cfg.num_generations_eval is not None:
            bound(name, largest, why)
    return out


def _memory_limits(run, cfg, arch: Arch, regime_batch: int, regime_draws: int) -> dict[str, int]:
    """The largest value of each setting :func:`run_peak` counts within :data:`MAX_PEAK`, the rest as set."""
    sizes = _sizes(run, cfg)
    n, spg = sizes["per_device_train_batch_size"], sizes["steps_per_generation"]

    def largest(name: str) -> int:
        def fits(v: int) -> bool:
            est = _run_peak(run, cfg, arch, regime_batch, regime_draws, {**sizes, name: v})
            return max(est[phase] for phase in _PHASES[name]) <= MAX_PEAK

        return _largest(fits)

    out = {
        name: largest(name)
        for name, value in sizes.items()
        if value is not None and (name != "lora_r" or run.lora)  # without LoRA, lora_r sizes nothing
    }
    # a generate call holds per_device_train_batch_size * steps_per_generation sequences a process, whichever grows
    processes = cfg.generation_batch_size // (n * spg)
    most = max(out["per_device_train_batch_size"] * spg, n * out["steps_per_generation"])
    out["generation_batch_size"] = out["num_generations"] = processes * most
    out["num_generations_eval"] = processes * out["per_device_eval_batch_size"]
    return out


def over_limits(run, cfg, *, regime_batch: int, regime_draws: int) -> list[str]:
    r"""Each size setting of a built run above its largest (:func:`limits`), then how far the peak is over and where.

    >>> from qae_lab.runs.presets import build
    >>> run, cfg = build("cpu-demo", ["n_train=1000000000000", "per_device_train_batch_size=100000000"], output_dir="x")
    >>> said = over_limits(run, cfg, regime_batch=16, regime_draws=4)
    >>> print(said[0]); print(said[1]); print(said[-1])
    n_train=1000000000000 (at most 100000: the most problems the synthetic task draws)
    per_device_train_batch_size=100000000 (at most 852169: keeps the estimated peak memory within 2 TiB, the ...)
    the estimated peak memory (qae_lab.runs.limits.run_peak) is 235 TiB, in its step phase
    """
    said, named = [], set()
    peak = run_peak(run, cfg, regime_batch=regime_batch, regime_draws=regime_draws)
    over = peak["peak"] > MAX_PEAK  # the peak grows with every size: each one's largest is needed only when over
    for name, (largest, why) in limits(
        run, cfg, regime_batch=regime_batch, regime_draws=regime_draws, memory=over
    ).items():
        value = getattr(run, name) if hasattr(run, name) else getattr(cfg, name)
        if value is None or value <= largest or largest == 0:
            continue  # within; or no value fits with the rest as set: another setting is the cause
        named.add(name)
        said.append(f"{name}={value} (at most {f'{largest:.4g}' if isinstance(largest, float) else largest}: {why})")
    if over:
        phase = max((k for k in peak if k != "peak"), key=peak.get)
        tib = peak["peak"] / 2**40
        line = f"the estimated peak memory (qae_lab.runs.limits.run_peak) is {tib:,.0f} TiB, in its {phase} phase"
        if not named & {*_PHASES, *_BATCHES}:  # no one setting alone is the cause: the phase's settings together
            sizes = _sizes(run, cfg)
            line += ", which these size together: " + ", ".join(
                f"{k}={sizes[k]}" for k, phases in _PHASES.items() if phase in phases and sizes[k] is not None
            )
        said.append(line)
    return said


MAX_DISK = 2 * 2**40
"""2 TiB: the most a run's checkpoints may take on disk (:func:`checkpoint_bytes` x :func:`saved_checkpoints`)."""
MAX_EVAL_COMPLETIONS = 10_000_000
"""Completions one evaluation samples (held-out problems x samples each; the regime evaluation's start split):
at a hundred a second on a GPU, more than a day."""


def checkpoint_bytes(arch: Arch, *, lora_r: int | None, dtype_bytes: int) -> int:
    r"""The bytes of one checkpoint: the trained weights (LoRA: the adapters, float32) and AdamW's two moments of each.

    >>> round(checkpoint_bytes(QWEN25["qwen2.5-1.5b"], lora_r=None, dtype_bytes=2) / GIB, 1)   # 1.5B x (2 + 8) bytes
    14.4
    """
    if lora_r is None:
        return param_count(arch) * (dtype_bytes + 8)
    return lora_param_count(arch, lora_r) * (4 + 8)


def saved_checkpoints(cfg, steps: int) -> int:
    r"""How many checkpoints a run of ``steps`` steps keeps: one every ``save_steps`` or an epoch, ``save_total_limit``.


    >>> import types
    >>> saved_checkpoints(types.SimpleNamespace(save_strategy="steps", save_steps=50, save_total_limit=None), 200)
    4
    """
    strategy = getattr(cfg.save_strategy, "value", cfg.save_strategy)
    if strategy == "steps":
        every = math.ceil(steps * cfg.save_steps) if cfg.save_steps < 1 else int(cfg.save_steps)
        saved = steps // max(every, 1)
    elif strategy == "epoch":
        saved = math.ceil(getattr(cfg, "num_train_epochs", 1))
    else:
        saved = 0
    return saved if cfg.save_total_limit is None else min(saved, cfg.save_total_limit)
