r"""qae_lab: a notebook-first lab for two RLVR methods on LLM reasoning.

* QAE, Quantile Advantage Estimation (arXiv 2509.22611): the group K-quantile replaces
  GRPO's group-mean baseline -> :mod:`qae_lab.advantages`.
* SA-AH-GRPO (arXiv 2606.05434): entropy-adaptive horizon weights on the tokens of
  negative-advantage rollouts -> :mod:`qae_lab.horizon`.

The layout shows the layers (docs/architecture.md): the maths at the top (:mod:`~qae_lab.methods`,
:mod:`~qae_lab.advantages`, :mod:`~qae_lab.horizon`, :mod:`~qae_lab.entropy_controls`, :mod:`~qae_lab.ledger`,
:mod:`~qae_lab.regimes`, :mod:`~qae_lab.loss`), then ``task/`` and ``toys/``, ``train/`` (TRL), ``runs/``,
``analysis/`` and ``lab/`` (the notebooks' figures and widgets). ``import qae_lab`` loads torch and the maths only;
the names below from the training stack (transformers, TRL) or the lab (plotly, ipywidgets) load when first used.

Shape legend used throughout: B prompts, G group size, N = B*G responses,
T tokens, V vocabulary.
"""

import importlib

from qae_lab.advantages import advantage_stats, group_advantages, quantile_baseline
from qae_lab.horizon import horizon_weights, normalised_entropy, selective_horizon_weights, weighted_token_mean
from qae_lab.loss import LossSettings, grpo_loss
from qae_lab.knobs import Knobs

__version__ = "0.1.0"

# the public names that live above the maths: name -> the module that defines it, imported on first use
_LAZY = {
    "QAEConfig": "qae_lab.train.config",
    "QAETrainer": "qae_lab.train.trainer",
    "load_policy": "qae_lab.task.models",
    "load_gsm8k": "qae_lab.task.data",
    "synthetic_task": "qae_lab.task.data",
    "sums_task": "qae_lab.task.sums",
    "to_grpo_dataset": "qae_lab.task.data",
    "REWARDS": "qae_lab.task.rewards",
    "build": "qae_lab.runs.presets",
    "make_trainer": "qae_lab.runs.pipeline",
    "export_run": "qae_lab.runs.export",
    "load_runs": "qae_lab.analysis.compare",
    "LiveRun": "qae_lab.lab.live",
}

__all__ = [
    "advantage_stats",
    "group_advantages",
    "quantile_baseline",
    "horizon_weights",
    "normalised_entropy",
    "selective_horizon_weights",
    "weighted_token_mean",
    "LossSettings",
    "grpo_loss",
    "Knobs",
    *_LAZY,
    "__version__",
]


def __getattr__(name: str):
    """The training stack's and the lab's public names, imported when first asked for (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # asked once: a plain attribute from then on
        return value
    raise AttributeError(f"module 'qae_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
