r"""QAE's Prop. 4.2 in training, by the regime a prompt starts in: a held-out prompt set sampled every few steps.

QAE (arXiv 2509.22611), Prop. 4.2: on hard prompts (p <= 1-K) the quantile baseline raises the entropy
at most as much as the mean baseline (no explosion), on easy ones (p > 1-K) at least as much (no collapse).
A training batch mixes both, so its net ``entropy`` can hide the two. :class:`RegimeEval` follows a fixed
held-out prompt set instead, grouped once by where the start model stands.

Implementer's notes: docs/implementation.md, section ``qae_lab.train.regime_eval``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import TrainerCallback

from qae_lab.task.evaluate import validate_records
from qae_lab.metric_names import REGIME_GROUPS, regime_eval_metric
from qae_lab.regimes import group_means, start_split
from qae_lab.task.rollouts import completion_entropies, sample_groups
from qae_lab.storage.folder import REGIME_SPLIT_NAME, RunFolderError, atomic_write_text, read_json

__all__ = [
    "REGIME_FRAC",
    "SPLIT_DRAWS",
    "RegimeSplit",
    "regime_split",
    "regime_measure",
    "RegimeEval",
    "add_regime_eval",
]

REGIME_FRAC = 0.25  # the hard and the easy group: the hardest and the easiest quarter of the held-out prompts
SPLIT_DRAWS = 4  # the split samples SPLIT_DRAWS x regime_eval_samples completions per prompt
_SEED_STRIDE, _SPLIT_OFFSET = 10_000, 5_000  # measurement draws: seed * stride (+ batch); the split's: + offset


@dataclass(frozen=True)
class RegimeSplit:
    r"""A held-out prompt set grouped by the start model's success rate: each prompt's ``id`` (its question when it
    has none) and ``start_success`` in the split's draw (``samples`` completions a prompt, the run's ``seed``); the
    indices of the hardest and the easiest ``frac`` of them.

    >>> s = RegimeSplit(("a", "b", "c", "d"), (0.0, 0.5, 1.0, 0.25), (0,), (2,), 0, 4, 0.25)
    >>> s.groups(), RegimeSplit.from_json(s.to_json()) == s
    ({'hard': [0], 'easy': [2], 'all': [0, 1, 2, 3]}, True)
    """

    prompts: tuple[str, ...]
    start_success: tuple[float, ...]
    hard: tuple[int, ...]
    easy: tuple[int, ...]
    seed: int
    samples: int
    frac: float

    def groups(self) -> dict[str, list[int]]:
        """``{"hard": [...], "easy": [...], "all": [...]}``: the prompt indices of each of :data:`REGIME_GROUPS`."""
        return dict(zip(REGIME_GROUPS, (list(self.hard), list(self.easy), list(range(len(self.prompts))))))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RegimeSplit:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict) -> RegimeSplit:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _prompt_ids(records) -> tuple[str, ...]:
    return tuple(str(r.get("id", r["question"])) for r in records)


def _draw(model, tokenizer, records, args, samples: int, seed: int, batch_size: int):
    """``samples`` completions per record (:func:`qae_lab.task.rollouts.sample_groups`) at the run's sampling settings."""
    return sample_groups(
        model,
        tokenizer,
        records,
        samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_completion_length,
        batch_size=batch_size,
        seed=seed,
    )


def regime_split(model, tokenizer, records, args, *, frac: float = REGIME_FRAC, batch_size: int = 16) -> RegimeSplit:
    r"""Sample the held-out ``records`` (``question``, ``gold``, ``id`` if any) with the start model, at the run's
    sampling settings ``args``, and group them by success rate (``frac``: :func:`qae_lab.regimes.start_split`)."""
    records = validate_records(records)
    samples = SPLIT_DRAWS * args.regime_eval_samples
    ro = _draw(model, tokenizer, records, args, samples, args.seed * _SEED_STRIDE + _SPLIT_OFFSET, batch_size)
    p = (ro.success_counts / ro.group_size).tolist()  # (B,) start success rate of each prompt
    hard, easy = start_split(p, frac)
    return RegimeSplit(_prompt_ids(records), tuple(p), tuple(hard), tuple(easy), int(args.seed), samples, float(frac))


def regime_measure(model, tokenizer, records, split: RegimeSplit, args, *, batch_size: int = 16) -> dict[str, float]:
    r"""One measurement of the held-out set: ``{regime_eval/entropy_<group>: ..., regime_eval/success_<group>: ...}``
    for the groups of ``split`` (hard, easy, all), from a fresh draw with the measurement seed.

    The entropy is H_t of softmax(z_t / T) in nats, token-weighted over the group's completions; the success rate
    the share of its completions that are correct.
    """
    records = validate_records(records)
    ro = _draw(model, tokenizer, records, args, args.regime_eval_samples, args.seed * _SEED_STRIDE, batch_size)
    h = completion_entropies(
        model,
        tokenizer,
        ro.prompts,
        ro.completion_ids,
        ro.mask,
        temperature=args.temperature,
        batch_size=4 * batch_size,
        nats=True,
    )  # (N, T), H_t in nats, 0 on padding
    out = {}
    for group, (entropy, success) in group_means(h, ro.mask, ro.rewards, ro.group_size, split.groups()).items():
        out[regime_eval_metric("entropy", group)] = entropy
        out[regime_eval_metric("success", group)] = success
    return out


def _read_split(path: Path, records, args) -> RegimeSplit:
    """The split a run wrote before its first step, checked against the held-out set and settings of this start."""
    data = read_json(path, "regime split", expect=dict)
    try:
        split = RegimeSplit.from_dict(data)
    except TypeError as err:
        raise RunFolderError(f"regime split {path} is damaged ({err})") from None
    want = {"prompts": _prompt_ids(records), "seed": int(args.seed), "samples": SPLIT_DRAWS * args.regime_eval_samples}
    got = {"prompts": split.prompts, "seed": split.seed, "samples": split.samples}
    if got != want:
        bad = [k for k in want if want[k] != got[k]]
        raise RunFolderError(
            f"regime split {path} was made for other {', '.join(bad)} than this run's: the split "
            f"comes from the start model, so a resume cannot remake it; resume with the run's own "
            f"held-out problems and settings"
        )
    return split


class RegimeEval(TrainerCallback):
    r"""Measures the first ``regime_eval_prompts`` held-out ``records``, grouped by start difficulty, every
    ``regime_eval_steps`` steps (and before the last), into the trainer's ``add_step_metrics``.

    The split (``split``) is made when training begins at step 0 and read back when it begins later; with ``resume``
    (the run's plan resumes) it is read back here, so that a missing or foreign ``regime_split.json`` is refused
    before training begins and anything in the folder changes. ``measured`` lists ``(step, metrics)``. Add it after
    the run's :class:`~qae_lab.train.callbacks.RunLogger` (:func:`add_regime_eval` does): the plan is checked first.
    """

    def __init__(self, trainer, records, *, resume: bool = False, batch_size: int = 16):
        args = trainer.args
        if args.regime_eval_steps is None:
            raise ValueError("RegimeEval needs regime_eval_steps (an int >= 1) in the trainer's config, got None")
        self.trainer, self.batch_size = trainer, batch_size
        self.records = validate_records(records)[: args.regime_eval_prompts]
        if len(self.records) < 2:
            raise ValueError(f"the regime evaluation needs at least 2 held-out problems, got {len(self.records)}")
        self.split: RegimeSplit | None = None
        self.measured: list[tuple[int, dict[str, float]]] = []
        if resume:
            self.split = _read_split(Path(args.output_dir) / REGIME_SPLIT_NAME, self.records, args)

    def _policy(self):
        return self.trainer.model, self.trainer.processing_class

    def on_train_begin(self, args, state, control, **kwargs):
        if self.split is not None:  # read back for a resume, or a second start of the same trainer
            return
        path = Path(args.output_dir) / REGIME_SPLIT_NAME
        if state.global_step == 0:  # the start model: split now, and keep the split for a resume
            self.split = regime_split(*self._policy(), self.records, args, batch_size=self.batch_size)
            if state.is_world_process_zero:
                atomic_write_text(path, self.split.to_json())
        else:  # a resume: the loaded model is not the start model
            self.split = _read_split(path, self.records, args)

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step + 1  # the step about to run
        if (step - 1) % args.regime_eval_steps and step != state.max_steps:
            return
        metrics = regime_measure(*self._policy(), self.records, self.split, args, batch_size=self.batch_size)
        self.trainer.add_step_metrics(metrics)
        self.measured.append((step, metrics))


def add_regime_eval(trainer, records, *, resume: bool = False, batch_size: int = 16) -> RegimeEval | None:
    r"""Add a :class:`RegimeEval` on ``records`` to ``trainer`` when its config sets ``regime_eval_steps`` (else
    nothing); returns it.

    >>> import types
    >>> add_regime_eval(types.SimpleNamespace(args=types.SimpleNamespace(regime_eval_steps=None)), []) is None
    True
    """
    if trainer.args.regime_eval_steps is None:
        return None
    callback = RegimeEval(trainer, records, resume=resume, batch_size=batch_size)
    trainer.add_callback(callback)
    return callback
