r"""Fast in-loop sampling for GRPO: the policy in eval mode with its LoRA adapters merged.

TRL's ``GRPOTrainer`` samples with the model as it trains: in train mode, LoRA branches unmerged, so each adapted
layer runs the base matmul plus dropout, ``lora_A``, ``lora_B``, a scale and an add at every decode step, about twice
the bare model's kernels (``benchmarks/gpu_check.py --smoke``: 4,965 vs 2,221 aten ops per decode step on
Qwen2.5-1.5B's layout, r = 16 on all seven projections); decoding a 1.5B model for 64 sequences is bound by those
launches, not by arithmetic. :func:`generation_policy` removes them without a new inference engine: eval mode (no
dropout), PEFT's own ``merge_adapter`` folds W + (alpha/r) B A into the base weights for the ``generate`` call, and
PEFT's wrapper layers step out of the module tree meanwhile (their Python runs at every decode step even when merged).

Implementer's notes: docs/implementation.md, section ``qae_lab.train.generation``.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager

import torch

__all__ = ["generation_policy", "keep_base_weights", "lora_base_params", "trl_deprecation_hidden"]


@contextmanager
def trl_deprecation_hidden():
    """Hide, inside the block only, the one FutureWarning that TRL's generation and PEFT's wrapping cause at every call
    (they read transformers' deprecated ``is_gradient_checkpointing``): addressed to TRL, not to whoever trains, it
    would land under a notebook's cell as if something were wrong. Only that message is filtered, until the block ends.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def _lora_layers(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """(parent, name, LoRA layer) for each PEFT LoRA layer in the module tree."""
    try:
        from peft.tuners.lora import LoraLayer  # the `train` extra provides peft
    except ImportError:
        return []
    return [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, LoraLayer)
    ]


def lora_base_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    r"""The base-layer parameters PEFT's LoRA merge writes into (weight and bias of each adapted layer).

    >>> lora_base_params(torch.nn.Linear(2, 2))   # no LoRA layers
    []
    """
    return _base_params(_lora_layers(model))


def keep_base_weights(sync, model: torch.nn.Module):
    r"""``sync`` (a call that merges ``model``'s LoRA adapters and unmerges them, such as TRL's vLLM weight
    sync) made to leave the base weights bit-identical: they are copied back from a snapshot after it.

    >>> net = torch.nn.Linear(2, 2)   # no LoRA layers: nothing to keep, sync runs as it is
    >>> keep_base_weights(lambda: "synced", net)()
    'synced'
    """

    @functools.wraps(sync)
    def synced(*args, **kwargs):
        with _restored(lora_base_params(model)):
            return sync(*args, **kwargs)

    return synced


def _base_params(layers) -> list[torch.nn.Parameter]:
    """The distinct parameters of the (parent, name, LoRA layer) triples' base layers."""
    params = {id(p): p for _, _, layer in layers for p in layer.get_base_layer().parameters(recurse=False)}
    return list(params.values())


@contextmanager
def _restored(params: list[torch.nn.Parameter]):
    """The block, then ``params`` copied back from a snapshot taken before it: bit-identical, whatever it did."""
    snapshot = [p.detach().clone() for p in params]
    try:
        yield
    finally:
        with torch.no_grad():
            for p, saved in zip(params, snapshot):
                p.copy_(saved)


@contextmanager
def generation_policy(model: torch.nn.Module, merge_lora: bool = True):
    r"""Sample from the policy as it is, fast: eval mode (no dropout) and LoRA merged, restored after.

    Inside the block, a PEFT model's adapters are merged (``merge_adapter``) and each LoRA layer is replaced by its
    base layer in the module tree. On exit the LoRA layers are put back, the adapters unmerged and the base weights
    copied back from a snapshot, bit-identical to before (an unmerge alone leaves bf16 rounding in them, which would
    add up step after step; the snapshot costs one copy of the adapted layers' weights), and the mode restored.

    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    >>> with generation_policy(net):
    ...     net.training
    False
    >>> net.training
    True
    """
    was_training = model.training
    layers = _lora_layers(model) if merge_lora and hasattr(model, "merge_adapter") else []
    if any(layer.merged for _, _, layer in layers):  # merged by the caller already: theirs to keep, eval mode only
        layers = []
    merged, swaps = False, []
    try:
        with _restored(_base_params(layers)):  # after the unmerge below: bit-identical base weights
            try:
                model.eval()
                if layers:
                    model.merge_adapter()
                    merged = True
                    # each merged layer's base layer in its place (its weights hold the merge): no PEFT wrapper per call
                    swaps = [(parent, name, layer) for parent, name, layer in layers if layer.merged]
                    for parent, name, layer in swaps:
                        setattr(parent, name, layer.get_base_layer())
                yield model
            finally:
                for parent, name, layer in swaps:
                    setattr(parent, name, layer)
                if merged:
                    model.unmerge_adapter()
    finally:
        model.train(was_training)
