r"""qae_lab: a notebook-first lab for two RLVR methods on LLM reasoning.

* QAE, Quantile Advantage Estimation (arXiv 2509.22611): the group K-quantile replaces
  GRPO's group-mean baseline -> :mod:`qae_lab.advantages`.
* SA-AH-GRPO (arXiv 2606.05434): entropy-adaptive horizon weights on the tokens of
  negative-advantage rollouts -> :mod:`qae_lab.horizon`.

Shape legend used throughout: B prompts, G group size, N = B*G responses,
T tokens, V vocabulary.
"""

from qae_lab.advantages import advantage_stats, group_advantages, quantile_baseline
from qae_lab.horizon import horizon_weights, normalised_entropy, selective_horizon_weights, weighted_token_mean

__version__ = "0.1.0"

__all__ = [
    "advantage_stats",
    "group_advantages",
    "quantile_baseline",
    "horizon_weights",
    "normalised_entropy",
    "selective_horizon_weights",
    "weighted_token_mean",
    "__version__",
]
