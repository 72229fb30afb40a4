r"""Policies to train: Qwen2.5-Instruct from the Hub, or the project's embedded tiny Qwen2, with LoRA.

``load_policy(name_or_path)`` returns ``(model, tokenizer)`` for ``"embedded"`` (the tiny Qwen2 that
``python -m tools.embedded_models`` trains into ``data/embedded/``: offline, on a CPU), ``"embedded-sums"`` (its
sibling for :mod:`qae_lab.task.sums`), ``"qwen2.5-0.5b"`` / ``"-1.5b"`` / ``"-3b"`` (the SA-AH set-up's
Qwen/Qwen2.5-*-Instruct), or any Hub id or folder of a causal LM with a chat template.

Weights load as safetensors only and never with ``trust_remote_code``: a model repository cannot run code here.
LoRA (SA-AH: r = 16 on the attention and MLP projections) comes from :func:`lora_config`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

from qae_lab._checks import check_int

__all__ = [
    "QWEN_MODELS",
    "LORA_TARGETS",
    "EMBEDDED_ENV",
    "EMBEDDED_MODELS",
    "embedded_dir",
    "resolve_name",
    "lora_config",
    "ATTENTION_IMPLEMENTATIONS",
    "check_attention",
    "EXPERTS_IMPLEMENTATIONS",
    "check_model_files",
    "load_policy",
]

QWEN_MODELS = {
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-3b": "Qwen/Qwen2.5-3B-Instruct",
}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EMBEDDED_ENV = "QAE_LAB_EMBEDDED_DIR"
# name -> (folder under data/ in a checkout, folder inside the installed package, environment variable)
EMBEDDED_MODELS = {
    "embedded": ("embedded", "embedded_model", EMBEDDED_ENV),
    "embedded-sums": ("embedded_sums", "embedded_sums_model", "QAE_LAB_EMBEDDED_SUMS_DIR"),
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def embedded_dir(name: str = "embedded") -> Path:
    r"""Where an embedded model's files are (:data:`EMBEDDED_MODELS`): its environment variable, else
    ``data/<folder>`` of a source checkout, else the copy installed inside the package.

    >>> (embedded_dir() / "config.json").is_file(), embedded_dir().name in ("embedded", "embedded_model")
    (True, True)
    >>> embedded_dir("embedded-sums").name in ("embedded_sums", "embedded_sums_model")
    True
    """
    if name not in EMBEDDED_MODELS:
        raise ValueError(f"name must be one of {sorted(EMBEDDED_MODELS)}, got {name!r}")
    folder, installed, env = EMBEDDED_MODELS[name]
    here = Path(__file__).resolve().parents[1]
    candidates = [Path(os.environ[env])] if os.environ.get(env) else []
    candidates += [here.parent / "data" / folder, here / installed]
    for path in candidates:
        if (path / "config.json").is_file():
            return path
    task = "" if name == "embedded" else " --task sums"
    raise FileNotFoundError(
        f"the {name} model is not in {', '.join(map(str, candidates))}; rebuild it with "
        f"`python -m tools.embedded_models{task} --out <folder>` and point {env} at the folder"
    )


def resolve_name(name_or_path: str) -> str:
    r"""The folder or Hub id behind a name: an embedded model's, a :data:`QWEN_MODELS` alias's, or as given.

    >>> resolve_name("qwen2.5-1.5b"), resolve_name("Qwen/Qwen2.5-3B-Instruct")
    ('Qwen/Qwen2.5-1.5B-Instruct', 'Qwen/Qwen2.5-3B-Instruct')
    """
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ValueError(
            f"name_or_path must be one of {sorted(EMBEDDED_MODELS)} or {sorted(QWEN_MODELS)}, a Hub id "
            f"or a folder, got {name_or_path!r}"
        )
    name = str(name_or_path)
    if name in EMBEDDED_MODELS:
        return str(embedded_dir(name))
    return QWEN_MODELS.get(name.lower(), name)


def lora_config(r: int = 16, alpha: int | None = None, dropout: float = 0.05, targets=LORA_TARGETS):
    r"""PEFT LoRA: rank ``r`` (SA-AH: 16) on the attention and MLP projections, ``lora_alpha = 2 r`` unless given.

    >>> cfg = lora_config()
    >>> cfg.r, cfg.lora_alpha, cfg.lora_dropout, sorted(cfg.target_modules)[:3], lora_config(8, alpha=8).lora_alpha
    (16, 32, 0.05, ['down_proj', 'gate_proj', 'k_proj'], 8)
    """
    from peft import LoraConfig  # the train extra: imported only when used

    check_int(r, "r", 1)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
    return LoraConfig(
        r=r,
        lora_alpha=2 * r if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=list(targets),
        task_type="CAUSAL_LM",
        bias="none",
    )


# transformers' own attention implementations (a Hub kernel repository named instead would be fetched and run)
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
# the package each flash attention needs: without it, transformers fetches a kernel from the Hub in its place
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def check_attention(value, name: str = "attn_implementation") -> None:
    r"""Refuse, naming ``name``, an attention implementation that would run code from elsewhere: anything but
    transformers' own :data:`ATTENTION_IMPLEMENTATIONS` (optionally ``paged|...``), and flash attention where its
    package is not installed (transformers would then fetch a kernel from the Hub, code no one here wrote).

    >>> check_attention("sdpa"), check_attention("paged|eager")
    (None, None)
    >>> check_attention("kernels-community/flash-attn2", "model_init_kwargs.attn_implementation")
    Traceback (most recent call last):
    ...
    ValueError: model_init_kwargs.attn_implementation must be one of transformers' own ('eager', 'sdpa', ...
    """
    if value is None:
        return
    plain = str(value).removeprefix("paged|")
    if plain not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"{name} must be one of transformers' own {ATTENTION_IMPLEMENTATIONS} (optionally 'paged|...'), got "
            f"{value!r}: another name would fetch and run a kernel from the Hub"
        )
    package = _FLASH_PACKAGES.get(plain)
    if package is not None and importlib.util.find_spec(package) is None:
        raise ValueError(
            f"{name}={value!r} needs the {package} package, which is not installed here: transformers would fetch a "
            f"kernel from the Hub in its place (code from elsewhere). Install {package}, or use 'sdpa'"
        )


# transformers' mixture-of-experts implementations that run its own code (deepgemm and sonicmoe fetch a kernel)
EXPERTS_IMPLEMENTATIONS = ("eager", "batched_mm", "grouped_mm")


def check_model_files(source: str) -> None:
    r"""Refuse a model whose ``config.json`` names an attention implementation :func:`check_attention` refuses, or
    an experts implementation outside :data:`EXPERTS_IMPLEMENTATIONS` (transformers would fetch a kernel from the
    Hub for either). A Hub id's file is read as transformers reads it (the local cache, else the Hub).

    >>> check_model_files(resolve_name("embedded")) is None
    True
    """
    from transformers import PretrainedConfig  # the train extra: imported only when used

    config, _ = PretrainedConfig.get_config_dict(source)
    check_attention(config.get("attn_implementation"), f"the model's config.json ({source}): attn_implementation")
    experts = config.get("experts_implementation")
    if experts is not None and experts not in EXPERTS_IMPLEMENTATIONS:
        raise ValueError(
            f"the model's config.json ({source}): experts_implementation must be one of transformers' own "
            f"{EXPERTS_IMPLEMENTATIONS} or absent, got {experts!r}: another would fetch and run a kernel from the Hub"
        )


def _dtype(dtype, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":  # bf16 where the GPU does it natively, float32 elsewhere (CPU, old GPUs)
        cuda = device.startswith("cuda") and torch.cuda.is_available()
        return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'auto', one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}")
    return _DTYPES[dtype]


def load_policy(
    name_or_path: str = "embedded", *, lora=None, dtype="auto", device: str | None = None, gradient_checkpointing=False
):
    r"""Load a causal LM and its tokenizer, optionally wrapped with LoRA.

    ``lora``: None/False, True (:func:`lora_config`) or a ``peft.LoraConfig``; ``dtype`` ``"auto"``: bf16 on a
    bf16-capable GPU, else float32. The tokenizer pads on the left and has a pad token.

    >>> model, tokenizer = load_policy("embedded", device="cpu")
    >>> type(model).__name__, model.dtype, tokenizer.padding_side, tokenizer.pad_token
    ('Qwen2ForCausalLM', torch.float32, 'left', '<|endoftext|>')

    LoRA r = 16 on 4 layers: q, o (128 -> 128), k, v (128 -> 64) and gate, up, down (128 <-> 384)
    train 16 * (4 * 256 + 2 * 192 + 3 * 512) = 38,912 parameters per layer:

    >>> peft_model, _ = load_policy("embedded", lora=True, device="cpu")
    >>> sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    155648
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # the train extra: imported only when used

    source = resolve_name(name_or_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_model_files(source)  # before anything loads: no kernel from elsewhere named in its config.json
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=_dtype(dtype, device), use_safetensors=True, trust_remote_code=False
    ).to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora:
        from peft import LoraConfig, get_peft_model  # the train extra: imported only when used

        model = get_peft_model(model, lora if isinstance(lora, LoraConfig) else lora_config())
    return model, tokenizer
