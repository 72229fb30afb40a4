r"""QAE and SA-AH-GRPO inside TRL's ``GRPOTrainer``: a thin subclass (checkpoints staged by
:class:`qae_lab.train.staged.StagedCheckpoints`); generation, vLLM, PEFT and accelerate/DeepSpeed stay TRL's.

* advantages: :func:`qae_lab.advantages.group_advantages` on the rewards TRL gathered across processes (POS/NEG-MASK:
  :func:`qae_lab.entropy_controls.sign_masked_advantages`), sliced per process into TRL's generation batch with each
  response's QAE regime (``prompt_hard``); the completion table's ``advantages`` column holds them (what trained);
* the loss: where QAE leaves it alone (no token weighting, covariance penalty or sparse update) TRL's own
  ``_compute_loss`` of QAE's advantages (:meth:`QAETrainer._trl_loss_step`; ``ledger/*`` and ``entropy/*`` from its
  forward); otherwise TRL's forward, then :func:`qae_lab.loss.grpo_loss` (a pure function: read it first) with a
  :class:`qae_lab.loss.LossSettings` of the config and the knobs in force, TRL's metrics reduced as TRL reduces them;
* sparse update: rows with A_i = 0 left out of the forward and backward, kept in the loss's denominators
  (:class:`qae_lab.loss.LossScale`) and in TRL's metrics, so gradient and readouts are a dense update's; one
  forward without a graph gives the left-out rows' entropies (``entropy``: every completion token);
* the knobs in force travel with each checkpoint (:class:`KnobsCheckpoint`) and come back on resume unless the
  resumed config changes them.

Implementer's notes: docs/implementation.md, section ``qae_lab.train.trainer``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import torch
import transformers
import trl
from accelerate.utils import gather_object
from transformers.trainer_callback import ExportableState
from trl import GRPOTrainer

from qae_lab._checks import host_floats, value_checks
from qae_lab.advantages import advantage_stats, group_advantages, hard_regime, signal_groups
from qae_lab.entropy_controls import sign_masked_advantages
from qae_lab.horizon import head_normalised_entropy, normalise_entropy
from qae_lab.knobs import Knobs, resumed_knobs
from qae_lab.ledger import batch_ledger
from qae_lab.loss import LossOutput, LossScale, LossSettings, grpo_loss
from qae_lab.methods import check_weighting_loss_type
from qae_lab.metric_names import (
    ADVANTAGE_STAT_METRICS,
    BEHAVIOUR_PREFIX,
    DYNAMIC_SAMPLING_METRICS,
    ENTROPY_EASY,
    ENTROPY_HARD,
    ENTROPY_UPDATED_EASY,
    ENTROPY_UPDATED_HARD,
    ENTROPY_UPDATED_ROWS,
    LEDGER_PREFIX,
    QAE_K,
    QAE_NEG_CORRECT_IF_MEAN,
    QAE_QUANTILE_BASELINE,
    SAAH_ALPHA,
    TOKEN_WEIGHTING,
)
from qae_lab.regimes import regime_token_means, regime_token_sums
from qae_lab.train.staged import StagedCheckpoints
from qae_lab.task.answers import completion_text
from qae_lab.task.behaviour import behaviour_stats, diversity_stats
from qae_lab.task.models import check_model_files
from qae_lab.train.config import (
    QAEConfig,  # noqa: F401  (the doctests build one)
    as_qae_config,
    check_lab_loss_options,
    refuse_code_and_credentials,
    uses_trl_loss,
)
from qae_lab.train.dynamic_sampling import assemble, epoch_walk, refill_prompts, refill_size
from qae_lab.train.generation import generation_policy, keep_base_weights, trl_deprecation_hidden

__all__ = ["QAETrainer"]

# (N, T) inputs whose trailing completion-padding columns sparse updates may drop; other keys: no trimming
_TRIMMABLE = {
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "old_per_token_logps",
    "sampling_per_token_logps",
    "ref_per_token_logps",
    "importance_sampling_ratio",
}
# config fields by which a model rescales its logits after the LM head (entropy_top_k's projection would miss them)
_LOGIT_RESCALERS = "final_logit_softcapping logit_scale output_multiplier lm_head_multiplier logits_scaling".split()
# the multimodal inputs TRL 1.16's forward takes (None for text models)
_FORWARD_EXTRAS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


# Every private member of TRL's GRPOTrainer and transformers' Trainer that QAETrainer overrides, calls or reads, and
# why: TRL has no public hook for the advantages (huggingface/trl #4525) nor for the loss. QAETrainer checks them when
# it is made (missing_private_members), so an upgrade that moves one fails there, naming it, not inside a step.
PRIVATE_MEMBERS = {
    # TRL's GRPOTrainer (tested with trl 1.16)
    "_generate_and_score_completions": "overridden: returns TRL's batch with QAE's advantages; behaviour/* metrics",
    "_calculate_rewards": "overridden: QAE's advantages and regimes from the rewards TRL gathered; qae/* metrics",
    "_generate_single_turn": "overridden: wraps TRL's generation in generation_policy (fast_generation)",
    "_compute_loss": "overridden: TRL's own where QAE leaves the loss alone; else sparse rows, qae_lab.loss.grpo_loss",
    "_get_per_token_logps_and_entropies": "overridden: keeps TRL's loss forward for the ledger; called in ours",
    "_logs": "read: the completion table's columns; its advantages' last generation batch is replaced by QAE's",
    "_metrics": "read: TRL's per-mode metric lists, where qae/*, saah/* and behaviour/* go",
    "_step": "read: TRL's micro-batch counter, which QAETrainer sets from the trainer's state when training begins",
    "_entropy_bonus_enabled": "read: whether TRL's entropy_coef applies",
    # transformers' Trainer
    "_save_checkpoint": "overridden: staged, renamed checkpoints (StagedCheckpoints)",
    "_get_output_dir": "overridden: the staging folder while a checkpoint is written",
    "_load_from_checkpoint": "called: loads a finished run's checkpoint without training a step",
}


def missing_private_members(trainer) -> list[str]:
    r"""The members of :data:`PRIVATE_MEMBERS` that ``trainer`` (a made GRPOTrainer, or its class for the methods
    only) lacks, each as ``"name (why)"``.

    >>> missing_private_members(GRPOTrainer)     # the methods: instance attributes are set by __init__
    []
    >>> import types
    >>> print(missing_private_members(types.SimpleNamespace(_step=0))[0])
    _generate_and_score_completions (overridden: returns TRL's batch with QAE's advantages; behaviour/* metrics)
    """
    on_class = isinstance(trainer, type)
    return [
        f"{name} ({why})"
        for name, why in PRIVATE_MEMBERS.items()
        if not (hasattr(trainer, name) or (on_class and why.startswith("read:")))  # read: set by __init__
    ]


def _check_private_members(trainer) -> None:
    missing = missing_private_members(trainer)
    if missing:
        raise ImportError(
            f"QAETrainer needs private members of TRL's GRPOTrainer / transformers' Trainer that trl {trl.__version__} "
            f"with transformers {transformers.__version__} lacks: {'; '.join(missing)}. qae_lab is tested with "
            "trl 1.16 (pip install 'trl>=1.16,<1.17')"
        )


def _pad_token_id(processing_class) -> int:
    """The pad id TRL pads generation batches with: the tokenizer's (a multimodal processor's tokenizer's)."""
    return getattr(processing_class, "tokenizer", processing_class).pad_token_id


def entropy_token_sums(
    entropies: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, hard_rows: torch.Tensor | None = None
) -> torch.Tensor:
    r"""The token sums behind one micro-batch's entropy metrics, (8,): :func:`qae_lab.regimes.regime_token_sums`
    over every row, then over the updated rows (A_i != 0). (B, T) entropies H_t (summed in at least float32) and
    mask, (B,) advantages, (B,) bool ``hard_rows`` (None: every row easy). Sums of parts and processes add.

    >>> h = torch.tensor([[1.0, 3.0], [2.0, 9.0], [4.0, 4.0]])
    >>> m = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    >>> entropy_token_sums(h, m, torch.tensor([0.5, 0.0, -1.0]), torch.tensor([True, True, False])).tolist()
    [6.0, 3.0, 8.0, 2.0, 4.0, 2.0, 8.0, 2.0]
    """
    h = entropies.to(torch.promote_types(entropies.dtype, torch.float32))  # (B, T); bf16 sums in float32
    hard = torch.zeros(h.shape[0], dtype=torch.bool, device=h.device) if hard_rows is None else hard_rows.bool()
    updated = advantages.reshape(h.shape[0], -1).ne(0).any(1)  # (B,): the rows the update moves
    m = mask.to(h.dtype)  # (B, T)
    return torch.cat([regime_token_sums(h, m, hard), regime_token_sums(h, m * updated[:, None].to(h.dtype), hard)])


def entropy_metrics(sums: torch.Tensor, split: bool = True) -> dict[str, float]:
    r"""The entropy metrics from :func:`entropy_token_sums`: TRL's ``entropy`` (every completion token, the count
    clamped at 1 as TRL does); ``entropy/updated_rows`` (NaN without such rows: TRL's ``log`` averages NaN out); with
    ``split``, each regime's mean where it has tokens.

    >>> entropy_metrics(torch.tensor([6.0, 3.0, 8.0, 2.0, 4.0, 2.0, 8.0, 2.0]))
    {'entropy': 2.8, 'entropy/updated_rows': 3.0, 'entropy/hard': 2.0, 'entropy/easy': 4.0, 'entropy/updated_rows/hard': 2.0, 'entropy/updated_rows/easy': 4.0}
    """
    s = [float(v) for v in sums.tolist()]
    out = {
        "entropy": (s[0] + s[2]) / max(s[1] + s[3], 1.0),
        ENTROPY_UPDATED_ROWS: (s[4] + s[6]) / (s[5] + s[7]) if s[5] + s[7] > 0 else float("nan"),
    }
    if split:  # a regime with no token on any process: not logged (None is not 0)
        names = (ENTROPY_HARD, ENTROPY_EASY, ENTROPY_UPDATED_HARD, ENTROPY_UPDATED_EASY)
        means = (*regime_token_means(s[:4]), *regime_token_means(s[4:]))
        out.update({name: value for name, value in zip(names, means) if value is not None})
    return out


def _replace_last(logged, values: list) -> None:
    r"""Replace the last ``len(values)`` entries of ``logged`` (a deque, perhaps bounded) by ``values``: TRL has just
    appended its mean-baseline advantages there; the completion table gets those that trained.

    >>> from collections import deque
    >>> d = deque([9.0, 1.0, 2.0], maxlen=3); _replace_last(d, [0.5, -0.5]); d
    deque([9.0, 0.5, -0.5], maxlen=3)
    """
    n = min(len(values), len(logged))  # a bounded deque holds at most its maxlen of them
    for _ in range(n):
        logged.pop()
    logged.extend(values[len(values) - n :])


def _check_dynamic_sampling(trainer) -> None:
    """Refuse, naming why, what dynamic sampling cannot serve: several processes (each holds a slice of the
    generation batch, whose groups a refill would have to exchange) and a training set without rows to draw."""
    if trainer.accelerator.num_processes > 1:
        raise ValueError(
            f"dynamic_sampling runs on one process; this run has {trainer.accelerator.num_processes}: each holds a "
            "slice of the generation batch, and dropping and refilling groups would have to move rows between them"
        )
    if not hasattr(trainer.train_dataset, "__getitem__") or not hasattr(trainer.train_dataset, "__len__"):
        raise ValueError(
            f"dynamic_sampling draws the refill prompts by row from the training set, but train_dataset is a "
            f"{type(trainer.train_dataset).__name__} without rows to index: pass a map-style dataset"
        )


@functools.lru_cache(maxsize=16)
def _loss_settings(**settings) -> LossSettings:
    return LossSettings(**settings)  # frozen: one object may serve every micro-batch with these settings


def _prompt_key(row: dict) -> str:
    """What makes two training rows the same prompt for dynamic sampling: their ``prompt`` (text or messages)."""
    return repr(row["prompt"])


class KnobsCheckpoint(transformers.TrainerCallback, ExportableState):
    """Puts the knobs in force, and the config's, in each checkpoint's ``trainer_state.json`` (``stateful_callbacks``);
    :class:`_StepFromState` reads them back when a resumed run begins."""

    def __init__(self, trainer=None):
        self.trainer = trainer  # None only where transformers remakes it (restore_callback_states_from_checkpoint)

    def state(self) -> dict:
        return {
            "args": {},
            "attributes": {
                "knobs": self.trainer.knobs.as_dict(),
                "configured": self.trainer.configured_knobs.as_dict(),
            },
        }


class _StepFromState(transformers.TrainerCallback):
    """Sets TRL's micro-batch counter ``_step`` (``global_step`` x accumulation: a new trainer starts it at 0, so a
    resumed run would generate, reuse a generation batch and seed dynamic sampling's refills at other steps than the
    uninterrupted run) and the knobs (those the checkpoint recorded, but where the resumed config changes one:
    :func:`qae_lab.knobs.resumed_knobs`) from the trainer's state when training begins."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._step = state.global_step * args.gradient_accumulation_steps
        name = KnobsCheckpoint.__name__
        for cb in self.trainer.callback_handler.callbacks:
            if isinstance(cb, KnobsCheckpoint):
                cb.trainer = self.trainer  # also one transformers remade from the checkpoint
        saved = state.stateful_callbacks.get(name) if state.global_step else None
        if isinstance(saved, dict) and "knobs" in saved.get("attributes", {}):
            recorded = saved["attributes"]
            self.trainer.set_knobs(
                resumed_knobs(recorded["knobs"], recorded["configured"], self.trainer.configured_knobs)
            )
        # a checkpoint from before KnobsCheckpoint has no entry, which transformers' next save expects
        state.stateful_callbacks.setdefault(name, KnobsCheckpoint(self.trainer).state())


@dataclasses.dataclass
class _Scoring:
    """One generation's state between TRL's reward call and its return: created and dropped in
    :meth:`QAETrainer._generate_and_score_completions`."""

    knobs: Knobs
    mode: str
    group_size: int
    rewards: torch.Tensor | None = None  # (N_all,) weighted total reward, gathered across processes
    success: torch.Tensor | None = None  # (N_all,) bool: success_reward's own score >= success_threshold
    advantages: torch.Tensor | None = None  # (N_all,) QAE's (sign-masked) advantages
    hard: torch.Tensor | None = None  # (N_all,) bool: each response's prompt is in QAE's hard regime
    completions: list | None = None  # this process's completions as TRL handed them to the reward functions


class QAETrainer(StagedCheckpoints, GRPOTrainer):
    r"""``GRPOTrainer`` with QAE advantages, SA-AH/AH horizon weights, sparse updates and fast generation.

    The knobs (``quantile_k``, ``alpha``, ``baseline``, ``token_weighting``) are one frozen :class:`qae_lab.knobs.Knobs`,
    :attr:`knobs`; :meth:`set_knobs` swaps in a new one between steps; ``qae/k`` and ``saah/alpha`` log what was used.

    Tested with trl 1.16.0 only; every private member of TRL and transformers it touches is in
    :data:`PRIVATE_MEMBERS`, with why; these public TRL attributes are read: ``epsilon_low``, ``epsilon_high``,
    ``importance_sampling_level``, ``current_gradient_accumulation_steps``, ``reward_weights``, ``num_generations``,
    ``num_generations_eval``, ``scale_rewards``, ``loss_type``, ``beta``, ``temperature``, ``top_entropy_quantile``
    (and ``get_high_entropy_mask``), ``entropy_coef``, ``aux_loss_enabled``, ``router_aux_loss_coef``, ``use_vllm``,
    ``vllm_importance_sampling_correction``, ``vllm_generation`` (its ``sync_weights`` is wrapped),
    ``max_completion_length``, ``generation_config`` (its ``disable_compile`` is set with ``compile_generation``);
    and the generation batch's keys ``completion_ids``, ``completion_mask``, ``tool_mask``, ``advantages``,
    ``prompt_ids``, ``prompt_mask``, ``old_per_token_logps``, ``ref_per_token_logps``,
    ``importance_sampling_ratio``, ``num_items_in_batch``.
    """

    @trl_deprecation_hidden()  # PEFT's wrapping reads a deprecated alias: that one warning, in here only
    def __init__(self, *args, **kwargs):
        _check_private_members(GRPOTrainer)  # the methods, before anything loads
        # before TRL's __init__ loads anything, checked: the config (a GRPOConfig or none becomes a QAEConfig of its
        # settings and QAE's defaults) and a model given by name (its config.json may name a kernel from the Hub)
        args, kwargs = list(args), dict(kwargs)
        config = as_qae_config(
            kwargs.get("args", args[2] if len(args) > 2 else None), args[0] if args else kwargs.get("model")
        )
        if len(args) > 2:
            args[2] = config
        else:
            kwargs["args"] = config
        refuse_code_and_credentials(config)
        model = kwargs.get("model", args[0] if args else None)
        rewards = kwargs.get("reward_funcs", args[1] if len(args) > 1 else None)
        for name in [model, *(rewards if isinstance(rewards, (list, tuple)) else [rewards])]:
            if isinstance(name, str):  # a policy or a reward model TRL loads by name
                check_model_files(name)
        super().__init__(*args, **kwargs)
        _check_private_members(self)  # and the attributes TRL's __init__ sets
        text = self.accelerator.unwrap_model(self.model).config.get_text_config()
        rescaled = [a for a in _LOGIT_RESCALERS if getattr(text, a, None) not in (None, 1.0)]
        if self.args.entropy_top_k is not None and rescaled:
            raise ValueError(
                f"entropy_top_k projects hidden states through the plain LM head, but this model also "
                f"applies {rescaled} to its logits; use entropy_top_k=None (exact entropy)"
            )
        a = self.args
        self._success_column = self._success_reward_column()
        self._trl_loss = uses_trl_loss(a)
        self.configured_knobs = Knobs(
            quantile_k=a.quantile_k, alpha=a.alpha, baseline=a.baseline, token_weighting=a.token_weighting
        )
        self.knobs = self.configured_knobs  # in force; swapped by set_knobs, saved by KnobsCheckpoint
        self._scoring: _Scoring | None = None  # set only while _generate_and_score_completions runs
        self._weightings: list[str] = []  # the token weighting of each training micro-batch since the last log
        if self.use_vllm and not (self.is_deepspeed_enabled or self.is_fsdp_enabled):  # sync unmerges LoRA
            self.vllm_generation.sync_weights = keep_base_weights(self.vllm_generation.sync_weights, self.model)
        if a.fast_generation and (self.is_deepspeed_enabled or self.is_fsdp_enabled):
            raise ValueError(
                "fast_generation merges LoRA into whole weights, which DeepSpeed ZeRO / FSDP shard: "
                "set fast_generation=False"
            )
        if a.dynamic_sampling:
            _check_dynamic_sampling(self)
        if a.compile_generation and getattr(self, "generation_config", None) is not None:
            self.generation_config.disable_compile = False  # TRL builds it with disable_compile=True
        self.add_callback(_StepFromState(self))
        self.add_callback(KnobsCheckpoint(self))

    def _success_reward_column(self) -> int | None:
        """The reward function whose own score decides a success (``success_reward``); None: the weighted sum."""
        names, chosen = list(self.reward_func_names), self.args.success_reward
        if chosen is not None:
            if chosen not in names:
                raise ValueError(
                    f"success_reward must name one of this trainer's reward functions {names}, got {chosen!r}"
                )
            return names.index(chosen)
        if len(names) == 1:
            return 0
        warnings.warn(
            f"{len(names)} reward functions ({', '.join(names)}) and no success_reward: the qae/* regime statistics "
            f"count a success where the weighted sum of their rewards is >= success_threshold "
            f"({self.args.success_threshold}); name the correctness reward (success_reward='{names[0]}') to judge "
            f"by its own score",
            UserWarning,
            stacklevel=3,
        )
        return None

    # ---------------------------------------------------------------- live knobs
    def set_knobs(self, knobs: Knobs | None = None, **changes) -> Knobs:
        r"""Put ``knobs`` (e.g. the live controls' value) and/or ``changes`` to its fields in force from the next step,
        validated first; the swap is one reference, so a step reads the old knobs or the new ones, never a mix.

        >>> import tempfile
        >>> from qae_lab.task import data, models, rewards
        >>> model, tok = models.load_policy("embedded", device="cpu")  # the committed tiny model: no download
        >>> with tempfile.TemporaryDirectory() as out:
        ...     args = QAEConfig(output_dir=out, use_cpu=True, report_to=[], per_device_train_batch_size=4,
        ...                      num_generations=4, max_completion_length=8)
        ...     trainer = QAETrainer(model=model, reward_funcs=rewards.correctness_reward, args=args,
        ...                          processing_class=tok, train_dataset=data.to_grpo_dataset(data.synthetic_task(4)))
        >>> trainer.set_knobs(quantile_k=0.6, token_weighting="sa_ah")
        Knobs(quantile_k=0.6, alpha=0.5, baseline='quantile', token_weighting='sa_ah')
        >>> trainer.set_knobs(quantile_k=1.5)
        Traceback (most recent call last):
        ValueError: quantile_k must lie in the open interval (0, 1), got 1.5
        """
        if knobs is not None and not isinstance(knobs, Knobs):
            raise ValueError(f"knobs must be a qae_lab.knobs.Knobs, got {type(knobs).__name__}")
        new = (self.knobs if knobs is None else knobs).replace(**changes)
        check_weighting_loss_type(new.token_weighting, self.loss_type)
        check_lab_loss_options(self.args, token_weighting=new.token_weighting)
        self.knobs = new
        return new

    def add_step_metrics(self, metrics: dict[str, float]) -> None:
        r"""Log ``metrics`` in the row of the training step now running (TRL averages each over the logging window),
        for callbacks that measure between steps (:class:`~qae_lab.train.regime_eval.RegimeEval`): call it from
        ``on_step_begin`` or during the step.

        >>> import types
        >>> trainer = types.SimpleNamespace(_metrics={"train": {}})
        >>> QAETrainer.add_step_metrics(trainer, {"regime_eval/entropy_all": 0.5}); trainer._metrics
        {'train': {'regime_eval/entropy_all': [0.5]}}
        """
        for name, value in metrics.items():
            self._metrics["train"].setdefault(name, []).append(float(value))

    # ---------------------------------------------------------------- generation
    def _generate_single_turn(self, *args, **kwargs):
        if not self.args.fast_generation or self.use_vllm:
            return super()._generate_single_turn(*args, **kwargs)
        with generation_policy(self.accelerator.unwrap_model(self.model_wrapped)):
            return super()._generate_single_turn(*args, **kwargs)

    # ---------------------------------------------------------------- advantages
    @trl_deprecation_hidden()  # TRL's generation reads a deprecated alias: that one warning, in here only
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        first = self._generate_round(inputs, mode, g)
        if mode == "eval" or not self.args.dynamic_sampling:
            return first
        return self._dynamic_sampling(first, inputs, len(inputs) // g, g)

    def _dynamic_sampling(self, first: dict, inputs: list, n_groups: int, g: int) -> dict:
        """DAPO's dynamic sampling (:mod:`qae_lab.train.dynamic_sampling`; verl's ``filter_groups``): refill rounds of
        ``ceil(dynamic_sampling_oversample x groups still needed)`` prompts, the next ones of the epoch's order that
        the batch lacks, until ``n_groups`` groups carry signal, ``dynamic_sampling_max_rounds`` rounds are spent or
        the order holds no new prompt; ``dynamic_sampling/*`` metrics."""
        a, data = self.args, self.train_dataset
        generation = self._step // (a.steps_per_generation * self.num_iterations)  # TRL's generation batches so far
        walk = epoch_walk(len(data), n_groups, generation, seed=a.seed, shuffle=self.shuffle_dataset)
        taken = {_prompt_key(row) for row in inputs}  # (B*G,) rows, G per prompt
        calls, signal = [first], [signal_groups(first["advantages"], g)]
        found, rounds = int(signal[0].sum()), 1
        while found < n_groups and rounds < a.dynamic_sampling_max_rounds:
            need = refill_size(n_groups - found, a.dynamic_sampling_oversample)
            rows = refill_prompts(walk, need, taken, lambda i: _prompt_key(data[i]))
            if not rows:  # the rest of the epoch and the next hold no prompt the batch lacks: as at the cap
                break
            rounds += 1
            for start in range(0, len(rows), n_groups):  # calls of at most TRL's generation batch (its memory)
                out = self._generate_round(
                    [data[i] for i in rows[start : start + n_groups] for _ in range(g)], "train", g
                )
                calls.append(out)
                signal.append(signal_groups(out["advantages"], g))
                found += int(signal[-1].sum())
        batch, short = assemble(calls, signal, g, n_groups, _pad_token_id(self.processing_class))
        generated = sum(int(s.numel()) for s in signal)  # groups generated over all rounds
        # rounds, generations, groups dropped, groups without signal, zero-advantage share (DYNAMIC_SAMPLING_METRICS)
        values = (rounds, generated * g, generated - found, short, (batch["advantages"] == 0).float().mean())
        for name, value in zip(DYNAMIC_SAMPLING_METRICS, values):
            self._metrics["train"][name].append(float(value))
        return batch

    def _generate_round(self, inputs, mode: str, g: int) -> dict:
        """TRL's generation and scoring of ``inputs``, with QAE's advantages and each response's regime."""
        scoring = self._scoring = _Scoring(knobs=self.knobs, mode=mode, group_size=g)
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._scoring = None
        n_local = out["completion_ids"].shape[0]
        local = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)
        device = out["completion_ids"].device
        self._log_behaviour(out, scoring, self._metrics[mode])
        _replace_last(self._logs["advantages"], scoring.advantages.tolist())  # the completion table: what trained
        adv, hard = scoring.advantages[local].to(device), scoring.hard[local].to(device)
        return {**out, "advantages": adv, "prompt_hard": hard}  # a new dict: TRL's own batch is not edited

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        scoring = self._scoring
        if scoring is not None:  # inside one of our generations (always, in training and evaluation)
            scoring.completions = list(completions)
            self._score(scoring, rewards_per_func)
        return rewards_per_func  # (N_all, n_funcs), gathered across processes

    def _score(self, scoring: _Scoring, rewards_per_func: torch.Tensor) -> None:
        """QAE's advantages (eq. Q1-Q5) and regimes from the gathered rewards, and the ``qae/*`` metrics."""
        rpf, knobs, g, a = rewards_per_func, scoring.knobs, scoring.group_size, self.args
        if torch.isnan(rpf).all(dim=1).any():
            raise ValueError(
                "a completion got no reward from any reward function (every one returned None): TRL leaves such a "
                "completion out of its group's baseline and gives it advantage 0, QAETrainer refuses it, because a "
                "K-quantile over the group's other members would sit at another rank of a smaller group (QAE's "
                "regime threshold 1 - K moves with the group size): give every completion a reward (0 where one "
                "cannot be scored)"
            )
        rewards = (rpf * self.reward_weights.to(rpf.device).unsqueeze(0)).nansum(dim=1)  # (N_all,), as TRL
        adv = group_advantages(
            rewards,
            g,
            baseline=knobs.baseline,
            k=knobs.quantile_k,
            quantile_method=a.quantile_method,
            scale=self.scale_rewards,
            eps=a.advantage_eps,
        )
        adv = sign_masked_advantages(adv, a.advantage_mask)  # POS-MASK / NEG-MASK ablations
        # a success by success_reward's own score (before reward_weights), else by the weighted sum
        score = rewards if self._success_column is None else rpf[:, self._success_column]
        success = score >= a.success_threshold  # (N_all,); a missing (NaN) score is no success
        hard = hard_regime(success.view(-1, g).sum(1), g, knobs.quantile_k).repeat_interleave(g)  # (N_all,)
        scoring.rewards, scoring.success, scoring.advantages, scoring.hard = rewards, success, adv, hard
        metrics = self._metrics[scoring.mode]
        metrics[QAE_K].append(knobs.quantile_k)
        metrics[QAE_QUANTILE_BASELINE].append(float(knobs.baseline == "quantile"))
        stats = advantage_stats(rewards, adv, g, knobs.quantile_k, success=success)
        for key, name in ADVANTAGE_STAT_METRICS.items():
            metrics[name].append(stats[key])
        if_mean = group_advantages(rewards, g, baseline="mean", scale=self.scale_rewards, eps=a.advantage_eps)
        metrics[QAE_NEG_CORRECT_IF_MEAN].append(
            advantage_stats(rewards, if_mean, g, knobs.quantile_k, success=success)["neg_correct"]
        )

    def _log_behaviour(self, out: dict, scoring: _Scoring, metrics) -> None:
        """``behaviour/*`` (:mod:`qae_lab.task.behaviour`: length, reflection, diversity) over every process's completions."""
        lengths = self.accelerator.gather(out["completion_mask"].sum(1))  # (N_all,)
        # the completions TRL decoded for the reward functions, every process's (in process order, as the rewards)
        texts = [completion_text(c) for c in gather_object(scoring.completions)]
        success = scoring.success.tolist()
        for key, value in {
            **behaviour_stats(lengths.tolist(), texts, success, words=self.args.reflection_words),
            **diversity_stats(texts, success, scoring.group_size),
        }.items():
            metrics[BEHAVIOUR_PREFIX + key].append(value)

    # ---------------------------------------------------------------- loss
    def loss_settings(self, knobs: Knobs | None = None) -> LossSettings:
        """The :class:`qae_lab.loss.LossSettings` of this trainer's config with ``knobs`` (default: in force), made
        and checked once for each set of values (:func:`_loss_settings`), not at every micro-batch."""
        knobs, a = self.knobs if knobs is None else knobs, self.args
        return _loss_settings(
            loss_type=self.loss_type,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            delta=a.delta,
            sequence_ratio=self.importance_sampling_level == "sequence",
            beta=self.beta,
            kl_ratio_correction=a.use_bias_correction_kl,
            token_weighting=knobs.token_weighting,
            alpha=knobs.alpha,
            entropy_coef=self.entropy_coef if self._entropy_bonus_enabled else 0.0,
            cov_penalty=a.cov_penalty,
            clip_cov_ratio=a.clip_cov_ratio,
            clip_cov_lb=a.clip_cov_lb,
            clip_cov_ub=a.clip_cov_ub,
            kl_cov_ratio=a.kl_cov_ratio,
            kl_cov_coef=a.kl_cov_coef,
            max_completion_length=self.max_completion_length,
        )

    def _sparse_active(self, settings: LossSettings) -> bool:
        # AH weights every row, zero-advantage ones included, and its token normaliser needs their weights;
        # the forking-token mask and Cov_t run over the micro-batch's tokens: skipping rows would move them
        return bool(
            self.args.sparse_update
            and settings.beta == 0.0
            and settings.entropy_coef == 0.0
            and not self.aux_loss_enabled
            and self.model.training
            and settings.token_weighting != "ah"
            and self.top_entropy_quantile >= 1.0
            and settings.cov_penalty == "none"
        )

    def log(self, logs: dict, start_time: float | None = None) -> None:
        """TRL's log, and in a training row the token weighting its steps trained with (a string: TRL averages
        ``_metrics``, so it goes in beside them), under ``knobs/token_weighting``."""
        if self.model.training and self._weightings:
            logs = {**logs, TOKEN_WEIGHTING: "+".join(dict.fromkeys(self._weightings))}  # in the order first used
            self._weightings = []
        super().log(logs, start_time)

    # the step's own tensors: their values were checked where the batch was made (the rewards and advantages, once per
    # generation), so no value check reads back to the host inside it; grpo_loss still checks their shapes
    @value_checks(False)
    def _compute_loss(self, model, inputs):
        if self.model.training:
            self._weightings.append(self.knobs.token_weighting)  # what this micro-batch's loss reads (loss_settings)
        if self._trl_loss:  # a loss type or option of TRL's alone (qae_lab.train.config.uses_trl_loss)
            return self._trl_loss_step(model, inputs)
        settings = self.loss_settings()  # the knobs in force now, for this whole micro-batch
        sparse = self._sparse_active(settings)
        if settings.token_weighting == "none" and settings.cov_penalty == "none" and not sparse:
            return self._trl_loss_step(model, inputs, settings)  # QAE leaves the loss alone: TRL's own
        training = self.model.training
        keep, skipped, kept = self._kept_rows(inputs) if sparse else (None, 0.0, None)
        if kept == 0:  # nothing to learn from (no row kept): a zero loss with a graph
            if settings.token_weighting != "none":  # the alpha in force, also when no row is weighted
                self._metrics["train"][SAAH_ALPHA].append(settings.alpha)
            sums = self._left_out_entropy_sums(model, inputs, ~keep)  # TRL's entropy: of every row
            self._log_entropy(sums, split="prompt_hard" in inputs)
            return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
        batch = inputs if keep is None else self._rows(inputs, keep)
        mask = self._loss_mask(batch)
        scale = LossScale(
            accumulation=self.current_gradient_accumulation_steps if training else 1,
            num_items=batch.get("num_items_in_batch"),
            num_processes=self.accelerator.num_processes,
            steps_per_generation=self.args.steps_per_generation if training else 1,
            rows=None if keep is None else keep.numel(),
            skipped_tokens=skipped,
        )
        logps, entropies, aux_loss, h_norm = self._forward(model, batch, settings)
        forking = (
            self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
            if self.top_entropy_quantile < 1.0
            else None
        )
        out = grpo_loss(
            logps,
            batch["advantages"],
            mask,
            settings,
            scale,
            old_logps=batch.get("old_per_token_logps"),
            entropies=entropies,
            h_norm=h_norm,
            ref_logps=batch.get("ref_per_token_logps"),
            entropy_mask=forking,
            sampling_ratio=batch.get("importance_sampling_ratio")
            if self.use_vllm and self.vllm_importance_sampling_correction
            else None,
            hard_rows=batch.get("prompt_hard"),
            generator=self._clip_cov_generator() if settings.cov_penalty == "clip_cov" else None,
        )
        self._log_loss(out, mask, settings, scale)
        sums = entropy_token_sums(entropies.detach(), mask, batch["advantages"], batch.get("prompt_hard"))
        if keep is not None:  # the rows left out: their entropies from a no-grad forward, so `entropy` is TRL's
            sums = sums + self._left_out_entropy_sums(model, inputs, ~keep)
        self._log_entropy(sums, split="prompt_hard" in inputs)
        loss = out.loss
        if self.aux_loss_enabled:  # a mixture-of-experts router's balance loss, split like the policy loss
            loss = loss + self.router_aux_loss_coef * aux_loss / scale.accumulation
            self._metrics["train" if training else "eval"]["aux_loss"].append(
                self.accelerator.gather_for_metrics(aux_loss).mean().item()
            )
        return loss

    def _trl_loss_step(self, model, inputs: dict, settings: LossSettings | None = None):
        """TRL's own ``_compute_loss`` of the batch (QAE's advantages in it), unchanged; its forward's log-probs and
        entropies give what TRL does not log: ``ledger/*`` (with ``settings``: the loss types qae_lab also reduces)
        and ``entropy/*`` (``entropy`` itself is TRL's)."""
        self._loss_forward = []
        try:
            loss = super()._compute_loss(model, inputs)
            logps, entropies = self._loss_forward[0]  # TRL's one forward of the micro-batch
        finally:
            self._loss_forward = None
        mask = self._loss_mask(inputs)
        metrics = self._metrics["train" if self.model.training else "eval"]
        if settings is not None:  # the PPO clip the ledger's update advantages assume
            on = mask
            if self.top_entropy_quantile < 1.0:  # the forking tokens TRL's loss acted on (its own mask, again)
                on = mask * self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
            ledger = batch_ledger(
                logps,
                entropies,
                inputs["advantages"][:, None].expand(mask.shape),
                on,
                inputs.get("prompt_hard"),
                old_logps=inputs.get("old_per_token_logps"),
                epsilon_low=settings.epsilon_low,
                epsilon_high=settings.epsilon_high,
                sequence_level=settings.sequence_ratio,
                per_sequence=settings.loss_type == "grpo",
            )
            for name, value in ledger.items():
                metrics[LEDGER_PREFIX + name].append(value)
        sums = entropy_token_sums(entropies, mask, inputs["advantages"], inputs.get("prompt_hard"))
        self._log_entropy(sums, split="prompt_hard" in inputs, trl_logged=True)
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if getattr(self, "_loss_forward", None) is not None:  # inside TRL's loss (_trl_loss_step): keep a detached copy
            self._loss_forward.append((out[0].detach(), out[1].detach()))
        return out

    def _kept_rows(self, inputs: dict) -> tuple[torch.Tensor | None, float, int]:
        """The rows a sparse update keeps (A != 0), or None when that is every row; the real tokens of the rows it
        leaves out; how many it keeps: one read back to the host for the counts."""
        keep = inputs["advantages"] != 0
        if self.accelerator.num_processes > 1:
            # the loss's metrics gather per-row values across ranks: every rank keeps the same number of rows
            # (padding with zero-advantage rows, which add nothing to the loss)
            n_keep, n_own = host_floats(
                torch.cat([self.accelerator.gather(keep.sum().reshape(1)).max().reshape(1), keep.sum().reshape(1)])
            )
            keep = keep.clone()
            keep[(~keep).nonzero().flatten()[: int(n_keep - n_own)]] = True
        n_keep, skipped = host_floats([keep.sum(), self._loss_mask(inputs)[~keep].sum()])
        if n_keep == keep.numel():
            return None, 0.0, int(n_keep)
        return keep, skipped, int(n_keep)

    def _forward(self, model, batch: dict, settings: LossSettings):
        """The model's forward on a micro-batch: log-probs (B, T), entropies (B, T), the auxiliary loss and,
        with token weighting, H~_t (B, T): exact (H_t / log V) or the top-k estimate from the same forward."""
        top_k = self.args.entropy_top_k if settings.token_weighting != "none" else None
        completion_ids = batch["completion_ids"]
        t = completion_ids.size(1)
        hidden, hook = [], None
        if top_k is not None:  # keep the same forward's final hidden states for the top-k estimate
            decoder = self.accelerator.unwrap_model(model).get_decoder()
            hook = decoder.register_forward_hook(
                lambda module, args_, out: hidden.append(out[0][:, -t - 1 : -1].detach())
            )
        try:
            logps, entropies, aux_loss = self._policy_forward(model, batch, aux_loss=self.aux_loss_enabled)
        finally:
            if hook is not None:
                hook.remove()
        h_norm = None
        if settings.token_weighting != "none" and top_k is None:  # H~_t = H_t / log V
            vocab = self.accelerator.unwrap_model(self.model).config.get_text_config().vocab_size
            h_norm = normalise_entropy(entropies.float(), vocab)
        elif top_k is not None:  # the hidden state at position p predicts token p + 1, as the fused head scores it
            head = self.accelerator.unwrap_model(model).get_output_embeddings()
            h_norm = head_normalised_entropy(
                torch.cat(hidden), head.weight, head.bias, temperature=self.temperature, top_k=top_k
            ).float()
        return logps, entropies, aux_loss, h_norm

    def _policy_forward(self, model, batch: dict, aux_loss: bool = False):
        """TRL's forward of a micro-batch's prompts and completions: log-probs (B, T), entropies (B, T), aux loss."""
        return self._get_per_token_logps_and_entropies(
            model,
            torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
            batch["completion_ids"].size(1),
            compute_entropy=True,
            compute_aux_loss=aux_loss,
            **{k: batch.get(k) for k in _FORWARD_EXTRAS},
        )

    def _left_out_entropy_sums(self, model, inputs: dict, rows: torch.Tensor) -> torch.Tensor:
        """:func:`entropy_token_sums` of the ``rows`` (B,) bool a sparse update leaves out, from one forward without
        a graph (no backward: about a third of what their forward and backward would cost). Every process holds as
        many of them (:meth:`_kept_rows`), so a sharded model's forward runs on all processes alike."""
        rest = self._rows(inputs, rows)
        with torch.no_grad():
            _, entropies, _ = self._policy_forward(model, rest)
        return entropy_token_sums(entropies, self._loss_mask(rest), rest["advantages"], rest.get("prompt_hard"))

    def _log_entropy(self, sums: torch.Tensor, split: bool, trl_logged: bool = False) -> None:
        """TRL's ``entropy`` (every completion token of the micro-batch; ``trl_logged``: TRL's loss logged it),
        ``entropy/updated_rows`` and their splits by regime, from :func:`entropy_token_sums` added over processes, as
        TRL reduces ``entropy``."""
        metrics = self._metrics["train" if self.model.training else "eval"]
        for name, value in entropy_metrics(self.accelerator.reduce(sums, reduction="sum"), split).items():
            if not (trl_logged and name == "entropy"):
                metrics[name].append(value)

    def _clip_cov_generator(self) -> torch.Generator:
        """Clip-Cov's draw, seeded by (seed, global step, micro-batch of the step): a resumed run draws as an
        uninterrupted one would, and every process the same (int tuples hash alike everywhere)."""
        draw = (self._step % self.current_gradient_accumulation_steps if self.model.training else 0) + 1
        return torch.Generator().manual_seed(hash((self.args.seed, self.state.global_step, draw)) % 2**63)

    def _log_loss(self, out: LossOutput, mask: torch.Tensor, settings: LossSettings, scale: LossScale) -> None:
        """The loss's metrics: ours (``saah/*``, ``cov/*``, ``ledger/*``) as computed on this process; TRL's (``kl``,
        ``clip_ratio/*``, ``policy_loss``) reduced across processes as TRL does, the rows a sparse update left out
        (``scale``) counted as clipping nothing."""
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        for name, value in out.metrics.items():
            metrics[name].append(value)
        left_rows = 0 if scale.rows is None else scale.rows - mask.shape[0]  # rows left out; their tokens:
        left_tokens = scale.skipped_tokens

        def global_mean(x: torch.Tensor) -> torch.Tensor:  # per token over the mask, or per response (sequence ratios)
            local = (
                torch.stack([x.sum(), torch.tensor(float(x.shape[0] + left_rows), device=x.device)])
                if x.shape[1] == 1
                else torch.stack([(x * mask).sum(), mask.sum().to(x.dtype) + left_tokens])
            )
            total = self.accelerator.reduce(local, reduction="sum")
            return total[0] / total[1].clamp(min=1.0)

        def row_means(x: torch.Tensor) -> torch.Tensor:  # and one 0 for the rows left out (a clip share), if any
            means = x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)
            left = 0.0 if (left_rows if x.shape[1] == 1 else left_tokens) else float("nan")  # NaN: no such row
            return torch.cat([means, means.new_full((1,), left)])

        stats = out.token_stats
        found = {}  # TRL's metrics as device numbers, read back to the host together (one transfer)
        if stats["kl"] is not None:
            found["kl"] = global_mean(stats["kl"])
        for side in ("low", "high", "region"):
            found[f"clip_ratio/{side}_mean"] = global_mean(stats[f"clip_{side}"].float())
        found["clip_ratio/low_min"] = torch.nanquantile(
            self.accelerator.gather(row_means(stats["clip_low"].float())), 0.0
        )
        found["clip_ratio/high_max"] = torch.nanquantile(
            self.accelerator.gather(row_means(stats["clip_high"].float())), 1.0
        )
        if settings.entropy_coef:
            found["policy_loss"] = self.accelerator.gather(stats["policy_loss"]).nanmean()
        for name, value in zip(found, host_floats(list(found.values()))):
            metrics[name].append(value)
        if settings.entropy_coef and mode == "train" and self.accelerator.sync_gradients:
            metrics["entropy_coef"].append(settings.entropy_coef)

    @staticmethod
    def _loss_mask(inputs: dict) -> torch.Tensor:
        """The token mask TRL's loss uses: completion tokens, minus tool output where there is some."""
        return inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]

    @staticmethod
    def _rows(inputs: dict, keep: torch.Tensor) -> dict:
        """The kept rows of every per-response tensor of a micro-batch, without the completion-padding
        columns no kept row reaches (trailing: causal attention, so earlier positions are unchanged)."""
        n = keep.shape[0]
        sub = {
            k: (v[keep] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n else v)
            for k, v in inputs.items()
        }
        if set(sub) <= _TRIMMABLE | {"prompt_ids", "prompt_mask", "advantages", "num_items_in_batch", "prompt_hard"}:
            m = sub["completion_mask"]
            # one past the last column any kept row reaches (1 when none does), in one read back to the host
            width = max(int((m.any(0) * torch.arange(1, m.shape[1] + 1, device=m.device)).max()), 1)
            t = m.shape[1]
            sub.update(
                {k: sub[k][:, :width] for k in _TRIMMABLE & set(sub) if sub[k].dim() == 2 and sub[k].shape[1] == t}
            )
        return sub
