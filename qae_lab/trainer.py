r"""QAE and SA-AH-GRPO inside TRL's ``GRPOTrainer``: a thin subclass (its config: :mod:`qae_lab.config`).

The subclass only calls library functions; everything else (generation, vLLM, PEFT,
clipping, GSPO, accelerate/DeepSpeed) stays TRL's:

* advantages: :func:`qae_lab.advantages.group_advantages` on the rewards TRL gathered
  across processes, then sliced per process, replacing TRL's mean-baseline advantages
  (also in TRL's logged completion table);
* token weights: :func:`qae_lab.token_weights.sa_ah_weights` from the entropies of the
  loss's own forward pass (TRL computes them there), detached, applied as per-token
  advantages A_i * w_t (TRL accepts (B, T) advantages), rescaled so that the loss type's
  token normaliser becomes the effective token count sum(w);
* sparse update: rows with A_i = 0 exactly are left out of the loss's forward and backward,
  with the normaliser kept as for the full batch, so the gradient is unchanged; completion
  padding columns beyond the longest kept completion are dropped as well;
* partners (:mod:`qae_lab.partners`, departures there): POS/NEG-MASK zero one sign of the
  advantages; Clip-Cov zeroes drawn tokens' advantages; KL-Cov adds its penalty to the loss;
* the entropy ledger (``ledger/*``): :func:`qae_lab.ledger.batch_ledger` on the loss's own log-probs
  and entropies, with the advantages the loss applies and each prompt's QAE regime.

Departures, and why:

* ``sum(w)`` normalisation is exact for ``loss_type="bnpo"`` and ``"grpo"`` (per sequence).
  For ``"dapo"`` TRL normalises by the token count of the whole generation batch, which a
  micro-batch cannot know in weighted form before its forward; each micro-batch then uses
  its own sum(w), exact when one micro-batch holds the generation batch (the CPU demo).
  Other loss types reject token weighting.
* Sparse skipping stays off with AH-GRPO (its token normaliser needs the zero-advantage rows'
  weights) and with Clip-Cov / KL-Cov (Cov_t is centred over all the micro-batch's tokens).
* When sparse skipping leaves rows out, TRL's per-token ``entropy`` metric would cover the
  updated rows only; it is logged as ``entropy/updated_rows`` instead, and ``entropy`` is not
  logged for that step (set ``sparse_update=False`` for entropy curves over all responses).
* ``entropy_top_k=k``: TRL's fused LM head returns exact entropies only, never the logits.
  The top-k estimate hooks the same forward's final hidden states and projects them again
  through the LM head without gradient, in chunks (a (chunk, V) matmul per chunk, not a
  second model forward). Models that rescale or soft-cap their logits are refused.
* The live knobs are per process: in a multi-process run, set them on every rank (a
  callback does, since every rank runs the callbacks).
* Regime statistics count a response as a success when its total reward is at least
  ``success_threshold`` (0.5 suits the 0/1 correctness reward).
* ``fast_generation=True`` (the GPU presets): generation in eval mode with the LoRA adapters merged,
  restored bit-exactly afterwards (:func:`qae_lab.generation.generation_policy` says why: TRL samples
  in train mode, LoRA dropout live, through PEFT's unmerged branches); ``compile_generation=True``
  undoes TRL's ``disable_compile=True`` (static cache, GPU only).
"""

from __future__ import annotations

import math
import threading

import torch
from trl import GRPOTrainer

from qae_lab.advantages import advantage_stats, group_advantages, hard_regime
from qae_lab.answers import completion_text
from qae_lab.config import QAEConfig
from qae_lab.generation import generation_policy, silence_trl_deprecation
from qae_lab.behaviour import behaviour_stats, diversity_stats
from qae_lab.ledger import batch_ledger
from qae_lab.methods import (ADVANTAGE_STAT_METRICS, BEHAVIOUR_PREFIX, COV_SELECTED_FRAC, COV_TOKEN_COV,
                             LEDGER_PREFIX, QAE_K, QAE_NEG_CORRECT_IF_MEAN, QAE_QUANTILE_BASELINE, SAAH_ALPHA,
                             SAAH_EFFECTIVE_TOKENS_FRAC, SAAH_W_MEAN_NEG, check_weighting_loss_type, validate_knobs)
from qae_lab.partners import (aggregate_token_loss, clip_cov_select, kl_cov_penalty, kl_cov_select, ppo_clip_active,
                              sign_masked_advantages, token_covariance)
from qae_lab.staged_checkpoints import StagedCheckpoints
from qae_lab.token_weights import head_normalized_entropy, normaliser_factor, sa_ah_weights, weight_stats

__all__ = ["QAETrainer"]

# (N, T) inputs whose trailing completion-padding columns sparse updates may drop; other keys: no trimming
_TRIMMABLE = {"completion_ids", "completion_mask", "tool_mask", "old_per_token_logps", "sampling_per_token_logps",
              "ref_per_token_logps", "importance_sampling_ratio"}
_LOGIT_RESCALERS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                    "logits_scaling")


class QAETrainer(StagedCheckpoints, GRPOTrainer):
    r"""``GRPOTrainer`` with QAE advantages, SA-AH/AH token weights, sparse updates and fast generation.

    ``quantile_k``, ``alpha``, ``baseline`` and ``token_weighting`` are live: change them
    with :meth:`set_knobs` (thread-safe) between steps, e.g. from a widget or callback; the
    next generation / loss reads them, and ``qae/k`` and ``saah/alpha`` log what was used.

    Tested with trl 1.16.0 only (pyproject caps trl below 1.17): these TRL methods are
    overridden (all private in TRL), each calling TRL's own implementation inside,

    ====================================== ===============================================================
    overridden TRL method                  what this class does there
    ====================================== ===============================================================
    ``_generate_single_turn``              wraps TRL's call in ``generation_policy`` (``fast_generation``)
    ``_calculate_rewards``                 keeps TRL's (N_all, n_funcs) rewards for the QAE baseline
    ``_generate_and_score_completions``    QAE's advantages (sign-masked: ``advantage_mask``), each row's regime
                                           (a ``prompt_hard`` key); ``qae/*``, ``behaviour/*``
    ``_compute_loss``                      sparse row selection, token-weight set-up, normaliser, KL-Cov
    ``_get_per_token_logps_and_entropies`` SA-AH/AH weights, Clip-Cov/KL-Cov tokens, the ledger: same forward
    ====================================== ===============================================================

    ``train``, ``_save_checkpoint`` and ``_get_output_dir`` (transformers) come from
    :class:`~qae_lab.staged_checkpoints.StagedCheckpoints`,

    and these TRL attributes are read (the private ones can change in any TRL release):
    ``epsilon_low``, ``epsilon_high``, ``importance_sampling_level``, ``current_gradient_accumulation_steps``,
    private ``_metrics`` and ``_logs`` (metric and completion-table buffers; the decoded completions are read there),
    ``_entropy_bonus_enabled``; public ``reward_weights``, ``num_generations``,
    ``num_generations_eval``, ``scale_rewards``, ``loss_type``, ``beta``, ``temperature``, ``top_entropy_quantile``
    (and ``get_high_entropy_mask``), ``aux_loss_enabled``, ``use_vllm``, ``generation_config`` (its
    ``disable_compile`` is set with ``compile_generation``); and the generation batch's keys
    ``completion_ids``, ``completion_mask``, ``tool_mask``, ``advantages``, ``prompt_ids``,
    ``old_per_token_logps``, ``num_items_in_batch``.
    """

    def __init__(self, *args, **kwargs):
        silence_trl_deprecation()
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, QAEConfig):
            raise ValueError("args must be a qae_lab.config.QAEConfig")
        text = self.accelerator.unwrap_model(self.model).config.get_text_config()
        rescaled = [a for a in _LOGIT_RESCALERS if getattr(text, a, None) not in (None, 1.0)]
        if self.args.entropy_top_k is not None and rescaled:
            raise ValueError(f"entropy_top_k projects hidden states through the plain LM head, but this model also "
                             f"applies {rescaled} to its logits; use entropy_top_k=None (exact entropy)")
        self._knob_lock = threading.Lock()
        self._knobs = {"quantile_k": self.args.quantile_k, "alpha": self.args.alpha,
                       "baseline": self.args.baseline, "token_weighting": self.args.token_weighting}
        self._rewards_per_func = None
        self._loss_inputs = None
        self._loss_knobs = self.knobs()
        self._skipped_tokens, self._skipped_rows = 0.0, 0  # rows sparse updates left out of the loss's forward
        self._cov_penalty = None  # KL-Cov's (B, T) penalty from the loss's forward, added in _compute_loss
        self._cov_draws = (-1, 0)  # (global step, Clip-Cov draws in it): seeds each draw reproducibly
        if self.args.fast_generation and (self.is_deepspeed_enabled or self.is_fsdp_enabled):
            raise ValueError("fast_generation merges LoRA into whole weights, which DeepSpeed ZeRO / FSDP shard: "
                             "set fast_generation=False")
        if self.args.compile_generation and getattr(self, "generation_config", None) is not None:
            self.generation_config.disable_compile = False  # TRL builds it with disable_compile=True

    # ---------------------------------------------------------------- live knobs
    def set_knobs(self, **knobs) -> None:
        r"""Set any of quantile_k, alpha, baseline, token_weighting for the next step (validated).

        >>> import tempfile
        >>> from qae_lab import data, models, rewards
        >>> model, tok = models.load_policy("embedded", device="cpu")  # the committed tiny model: no download
        >>> with tempfile.TemporaryDirectory() as out:
        ...     args = QAEConfig(output_dir=out, use_cpu=True, report_to=[], per_device_train_batch_size=4,
        ...                      num_generations=4, max_completion_length=8)
        ...     trainer = QAETrainer(model=model, reward_funcs=rewards.correctness_reward, args=args,
        ...                          processing_class=tok, train_dataset=data.to_grpo_dataset(data.synthetic_task(4)))
        >>> trainer.set_knobs(quantile_k=0.6, token_weighting="sa_ah")
        >>> trainer.knobs()
        {'quantile_k': 0.6, 'alpha': 0.5, 'baseline': 'quantile', 'token_weighting': 'sa_ah'}
        >>> trainer.set_knobs(quantile_k=1.5)
        Traceback (most recent call last):
        ValueError: quantile_k must lie in the open interval (0, 1), got 1.5
        """
        clean = validate_knobs(**knobs)
        check_weighting_loss_type(clean.get("token_weighting", "none"), self.loss_type)
        with self._knob_lock:
            self._knobs.update(clean)

    def knobs(self) -> dict:
        """A consistent snapshot of the live knobs."""
        with self._knob_lock:
            return dict(self._knobs)

    # ---------------------------------------------------------------- generation
    def _generate_single_turn(self, *args, **kwargs):
        if not self.args.fast_generation or self.use_vllm:
            return super()._generate_single_turn(*args, **kwargs)
        with generation_policy(self.accelerator.unwrap_model(self.model_wrapped)):
            return super()._generate_single_turn(*args, **kwargs)

    # ---------------------------------------------------------------- advantages
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func  # (N_all, n_funcs), gathered across processes

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        knobs = self.knobs()
        rpf = self._rewards_per_func
        if torch.isnan(rpf).all(dim=1).any():
            raise ValueError("a completion got no reward from any reward function (all None); QAE needs every reward")
        rewards = (rpf * self.reward_weights.to(rpf.device).unsqueeze(0)).nansum(dim=1)  # (N_all,), as TRL
        adv = group_advantages(rewards, g, baseline=knobs["baseline"], k=knobs["quantile_k"],
                               quantile_method=self.args.quantile_method, scale=self.scale_rewards,
                               eps=self.args.advantage_eps)
        adv = sign_masked_advantages(adv, self.args.advantage_mask)  # POS-MASK / NEG-MASK ablations
        n_local = out["completion_ids"].shape[0]
        start = self.accelerator.process_index * n_local
        out["advantages"] = adv[start:start + n_local].to(out["completion_ids"].device)
        # QAE's regime of each response's prompt at the K in force, for the entropy ledger's split
        hard = hard_regime((rewards >= self.args.success_threshold).view(-1, g).sum(1), g, knobs["quantile_k"])
        out["prompt_hard"] = hard.repeat_interleave(g)[start:start + n_local].to(out["completion_ids"].device)
        logged = self._logs["advantages"]  # TRL logged its mean-baseline advantages: replace them
        for _ in range(min(adv.numel(), len(logged))):
            logged.pop()
        logged.extend(adv.tolist())
        stats = advantage_stats(rewards, adv, g, knobs["quantile_k"], success_threshold=self.args.success_threshold)
        metrics = self._metrics[mode]
        metrics[QAE_K].append(knobs["quantile_k"])
        metrics[QAE_QUANTILE_BASELINE].append(float(knobs["baseline"] == "quantile"))
        for key, name in ADVANTAGE_STAT_METRICS.items():
            metrics[name].append(stats[key])
        if_mean = group_advantages(rewards, g, baseline="mean", scale=self.scale_rewards, eps=self.args.advantage_eps)
        metrics[QAE_NEG_CORRECT_IF_MEAN].append(advantage_stats(
            rewards, if_mean, g, knobs["quantile_k"], success_threshold=self.args.success_threshold)["neg_correct"])
        self._log_behaviour(out, rewards, metrics, g)
        return out

    def _log_behaviour(self, out: dict, rewards: torch.Tensor, metrics, g: int) -> None:
        """``behaviour/*`` (:mod:`qae_lab.behaviour`: length, reflection, diversity) over every process's completions."""
        lengths = self.accelerator.gather(out["completion_mask"].sum(1))  # (N_all,)
        # the texts TRL decoded and gathered for its completion table: this generation's are the last N_all
        texts = [completion_text(c) for c in list(self._logs["completion"])[-rewards.numel():]]
        success = rewards >= self.args.success_threshold
        for key, value in {**behaviour_stats(lengths.tolist(), texts, success.tolist(), words=self.args.reflection_words),
                           **diversity_stats(texts, success.tolist(), g)}.items():
            metrics[BEHAVIOUR_PREFIX + key].append(value)

    # ---------------------------------------------------------------- loss
    def _sparse_active(self, knobs: dict) -> bool:
        # AH weights every row, zero-advantage ones included, and its token normaliser needs their weights
        # TRL's top-entropy mask and Cov_t's centring run over the micro-batch's tokens: skipping rows moves them
        return bool(self.args.sparse_update and self.beta == 0.0 and not self._entropy_bonus_enabled
                    and not self.aux_loss_enabled and self.model.training and knobs["token_weighting"] != "ah"
                    and self.top_entropy_quantile >= 1.0 and self.args.cov_penalty == "none")

    def _compute_loss(self, model, inputs):
        knobs = self.knobs()
        self._loss_knobs = knobs
        if knobs["token_weighting"] != "none":  # the alpha in force, also when no row ends up weighted
            self._metrics["train" if self.model.training else "eval"][SAAH_ALPHA].append(knobs["alpha"])
        adv = inputs["advantages"]
        keep = adv != 0 if self._sparse_active(knobs) else None
        if keep is not None and self.accelerator.num_processes > 1:
            # TRL's loss gathers per-row metrics across ranks: every rank keeps the same number of rows
            # (padding with zero-advantage rows, which add nothing to the loss)
            n_keep = int(self.accelerator.gather(keep.sum().reshape(1)).max())
            keep = keep.clone()
            keep[(~keep).nonzero().flatten()[: n_keep - int(keep.sum())]] = True
        if keep is not None and bool(keep.all()):
            keep = None
        if keep is not None and not bool(keep.any()):  # nothing to learn from: a zero loss with a graph
            return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
        sub = inputs if keep is None else self._rows(inputs, keep)
        mask = self._loss_mask(inputs)
        self._skipped_tokens = 0.0 if keep is None else float(mask[~keep].sum())
        self._skipped_rows = 0 if keep is None else int((~keep).sum())
        self._loss_inputs = sub  # read by the loss's own forward (token weights, Clip-Cov / KL-Cov, the ledger)
        original = sub["advantages"]
        try:
            loss = super()._compute_loss(model, sub)
            if self._cov_penalty is not None:  # KL-Cov: its penalty, normalised as the policy loss
                training = self.model.training
                loss = loss + aggregate_token_loss(
                    self._cov_penalty, mask, self.loss_type,
                    accumulation=self.current_gradient_accumulation_steps if training else 1,
                    num_items=sub.get("num_items_in_batch"), num_processes=self.accelerator.num_processes,
                    steps_per_generation=self.args.steps_per_generation if training else 1)
        finally:
            sub["advantages"] = original
            self._loss_inputs = None
            self._cov_penalty = None
        if keep is None:
            return loss
        self._relabel_entropy_metric()
        return loss * self._sparse_scale(mask, keep)

    @staticmethod
    def _loss_mask(inputs: dict) -> torch.Tensor:
        """The token mask TRL's loss uses: completion tokens, minus tool output where there is some."""
        return inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]

    @staticmethod
    def _rows(inputs: dict, keep: torch.Tensor) -> dict:
        """The kept rows of every per-response tensor of a micro-batch, without the completion-padding
        columns no kept row reaches (trailing: causal attention, so earlier positions are unchanged)."""
        n = keep.shape[0]
        sub = {k: (v[keep] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n else v)
               for k, v in inputs.items()}
        if set(sub) <= _TRIMMABLE | {"prompt_ids", "prompt_mask", "advantages", "num_items_in_batch", "prompt_hard"}:
            m = sub["completion_mask"]
            width = int(m.sum(0).nonzero().max()) + 1 if bool(m.any()) else 1
            t = m.shape[1]
            sub.update({k: sub[k][:, :width] for k in _TRIMMABLE & set(sub) if sub[k].dim() == 2
                        and sub[k].shape[1] == t})
        return sub

    def _sparse_scale(self, mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor | float:
        """Factor that restores the full micro-batch's normaliser after rows were left out."""
        if self.loss_type == "bnpo":  # sum(l m) / sum(m): the denominator must count every row's tokens
            return mask[keep].sum() / mask.sum()
        if self.loss_type in ("grpo", "sapo", "dr_grpo", "luspo"):  # a mean over rows
            return keep.sum() / keep.numel()
        return 1.0  # dapo / cispo / vespo divide by the generation batch's token count, unchanged

    def _relabel_entropy_metric(self) -> None:
        metrics = self._metrics["train"]
        if metrics.get("entropy"):
            metrics["entropy/updated_rows"].append(metrics["entropy"].pop())

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        inputs = self._loss_inputs
        weighting = inputs is not None and self._loss_knobs["token_weighting"] != "none"
        top_k = self.args.entropy_top_k if weighting else None
        hidden, hook = [], None
        if top_k is not None:  # keep the same forward's final hidden states for the top-k estimate
            decoder = self.accelerator.unwrap_model(model).get_decoder()
            hook = decoder.register_forward_hook(
                lambda module, args_, out: hidden.append(out[0][:, -logits_to_keep - 1:-1].detach()))
        try:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        finally:
            if hook is not None:
                hook.remove()
        if inputs is None or entropies is None:  # not the loss's own forward
            return logps, entropies, aux
        adv = inputs["advantages"]  # (B,): the response-level advantages, as Cov_t takes them
        if weighting:
            if top_k is None:  # H~_t = H_t / log V
                vocab = self.accelerator.unwrap_model(self.model).config.get_text_config().vocab_size
                h_norm = (entropies.detach().float() / math.log(vocab)).clamp(0.0, 1.0)
            else:  # the hidden state at position p predicts token p + 1, as the fused head scores it
                head = self.accelerator.unwrap_model(model).get_output_embeddings()
                h_norm = head_normalized_entropy(torch.cat(hidden), head.weight, head.bias,
                                                 temperature=self.temperature, top_k=top_k).float()
            inputs["advantages"] = self._weighted_advantages(inputs, h_norm)
        if self.args.cov_penalty != "none":
            self._cov_select(inputs, logps, adv)
        self._log_ledger(inputs, logps, entropies)
        return logps, entropies, aux

    def _log_ledger(self, inputs: dict, logps: torch.Tensor, entropies: torch.Tensor) -> None:
        """``ledger/*``: the update's first-order entropy change and its parts (:func:`qae_lab.ledger.batch_ledger`)."""
        mask = self._loss_mask(inputs)
        if self.top_entropy_quantile < 1.0:  # TRL's forking-token mask: the other tokens get no gradient
            mask = mask * self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
        parts = batch_ledger(logps, entropies, inputs["advantages"], mask, inputs.get("prompt_hard"),
                             old_logps=inputs.get("old_per_token_logps"), epsilon_low=self.epsilon_low,
                             sequence_level=self.importance_sampling_level == "sequence",
                             epsilon_high=self.epsilon_high, per_sequence=self.loss_type == "grpo",
                             skipped_tokens=self._skipped_tokens, skipped_rows=self._skipped_rows)
        metrics = self._metrics["train" if self.model.training else "eval"]
        for name, value in parts.items():
            metrics[LEDGER_PREFIX + name].append(value)

    def _cov_select(self, inputs: dict, logps: torch.Tensor, adv: torch.Tensor) -> None:
        """Clip-Cov (zero advantages on the drawn tokens) or KL-Cov (keep its penalty), arXiv 2505.22617."""
        mask = self._loss_mask(inputs)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        cov = token_covariance(logps, adv, mask)  # (B, T)
        a = self.args
        if a.cov_penalty == "clip_cov":
            draw = self._cov_draws[1] + 1 if self._cov_draws[0] == self.state.global_step else 1
            self._cov_draws = (self.state.global_step, draw)  # int tuples hash the same in every process
            gen = torch.Generator().manual_seed(hash((a.seed, self.state.global_step, draw)) % 2**63)
            clipped = ppo_clip_active(logps.detach() - old, adv, self.epsilon_low, self.epsilon_high)
            chosen = clip_cov_select(cov, mask, a.clip_cov_ratio, a.clip_cov_lb, a.clip_cov_ub, exclude=clipped,
                                     generator=gen)
            per_token = inputs["advantages"]
            per_token = per_token[:, None].expand(mask.shape) if per_token.dim() == 1 else per_token
            inputs["advantages"] = per_token.masked_fill(chosen, 0.0)  # no gradient through the drawn tokens
        else:
            chosen = kl_cov_select(cov, mask, a.kl_cov_ratio)
            self._cov_penalty = kl_cov_penalty(logps, old, chosen, a.kl_cov_coef)  # (B, T)
        metrics = self._metrics["train" if self.model.training else "eval"]
        n = mask.sum().clamp(min=1)
        metrics[COV_SELECTED_FRAC].append((chosen.sum() / n).item())
        metrics[COV_TOKEN_COV].append((cov.sum() / n).item())

    def _weighted_advantages(self, inputs: dict, h_norm: torch.Tensor) -> torch.Tensor:
        r"""SA-AH / AH per-token advantages A_i w_t c (arXiv 2606.05434): (B, T).

        c (:func:`qae_lab.token_weights.normaliser_factor`) turns TRL's token normaliser sum(m) into
        the effective token count sum(w), so the loss is L = sum_t w_t l_t / sum_t w_t as in
        :func:`qae_lab.token_weights.weighted_token_mean`.
        """
        knobs = self._loss_knobs
        mask = self._loss_mask(inputs)
        adv = inputs["advantages"]
        w = sa_ah_weights(h_norm, mask, adv, knobs["alpha"], selective=knobs["token_weighting"] == "sa_ah")  # (B, T)
        per_sequence = self.loss_type == "grpo"  # grpo: sum_t w_t per row; bnpo/dapo: sum w over the micro-batch
        # skipped rows (A = 0: weight 1 on every token) still count in the token-level normaliser
        factor = normaliser_factor(w, mask, per_sequence=per_sequence,
                                   skipped_tokens=0.0 if per_sequence else self._skipped_tokens)  # (B, 1) or ()
        stats = weight_stats(w, mask, adv)
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics[SAAH_W_MEAN_NEG].append(stats["w_mean_neg"])
        metrics[SAAH_EFFECTIVE_TOKENS_FRAC].append(stats["effective_tokens_frac"])
        return adv.unsqueeze(1) * (w * factor).to(adv.dtype)  # (B, T): A_i * w_t, normaliser -> sum(w)
