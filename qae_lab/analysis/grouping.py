r"""Which runs may be averaged and compared: the same settings, the same length, distinct seeds.

A mean over seeds is a mean over repeats of one experiment, so :func:`group_runs` puts two runs
(:class:`qae_lab.analysis.compare.Run`) in one :class:`Group` only when they have the same method and come from the
same place (the committed reference runs, or your own ``runs/``), the same settings (:func:`settings_of`: the
``config.json`` fields that change the experiment, and whether a knob was steered live) and the same length
(:func:`run_length`: a run stopped early is shorter than its ``max_steps``). Within a group a seed counts once: of
runs that share a seed (a rerun) the newest is kept and the others are set aside, with the reason.

:func:`differences` lists the settings two groups differ in (a method's own knobs left out when the methods differ:
that difference is the comparison); :func:`qae_lab.analysis.compare.versus_baseline` compares only groups without.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from qae_lab.knobs import knob_changes
from qae_lab.methods import method_settings

__all__ = [
    "SETTINGS",
    "LIVE",
    "settings_of",
    "run_length",
    "Group",
    "group_runs",
    "differences",
    "format_differences",
    "describe_groups",
    "differences_report",
]

_RUN, _TRAINER = "run", "trainer"
# the config.json fields that change the experiment: name -> (section, value when the field is missing,
# as in configs written before the field existed). Not counted: output_dir, seed, logging, saving,
# evaluation batch sizes, and run.gsm8k_path (where the same data lives).
SETTINGS: dict[str, tuple[str | None, object]] = {
    "preset": (None, None),
    **{
        k: (_RUN, None)
        for k in "model task levels n_train n_eval data_seed lora lora_r eval_samples eval_max_new_tokens".split()
    },
    "dtype": (_RUN, "auto"),
    "reward": (_RUN, "strict"),
    **{
        k: (_TRAINER, None)
        for k in """max_steps learning_rate lr_scheduler_type warmup_steps weight_decay max_grad_norm
            per_device_train_batch_size gradient_accumulation_steps num_generations generation_batch_size
            steps_per_generation max_completion_length temperature top_p top_k beta num_iterations epsilon
            epsilon_high importance_sampling_level loss_type scale_rewards baseline quantile_k quantile_method
            advantage_eps token_weighting alpha success_threshold""".split()
    },
    "sparse_update": (_TRAINER, True),
    "entropy_top_k": (_TRAINER, None),
    "advantage_mask": (_TRAINER, "none"),
    "cov_penalty": (_TRAINER, "none"),
}
LIVE = "knobs changed live"  # the one setting read from the log, not the config
STEPS = "steps"  # the name of a length difference in differences()


def _frozen(value):
    """Lists (levels) as tuples and dicts as sorted pairs, so that settings can be compared and used as a key."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def settings_of(run) -> dict[str, object]:
    r"""The settings of a run that change its experiment: :data:`SETTINGS` read from its config (a missing field
    takes its default there), then :data:`LIVE`, the knobs changed during training (None when they never changed).

    >>> from qae_lab.analysis.compare import Run
    >>> rows = [{"step": 1, "reward": 0.5, "qae/k": 0.4}, {"step": 2, "reward": 0.5, "qae/k": 0.6}]
    >>> s = settings_of(Run("r", "qae", 0, {"preset": "cpu-demo", "trainer": {"max_steps": 400}}, rows, None, None))
    >>> s["preset"], s["max_steps"], s["reward"], s["n_train"], s[LIVE]
    ('cpu-demo', 400, 'strict', None, 'step 2: qae/k=0.6')
    """
    config = run.config if isinstance(run.config, Mapping) else {}
    out = {}
    for name, (section, default) in SETTINGS.items():
        where = config if section is None else (config.get(section) or {})
        out[name] = _frozen(where.get(name, default))
    changes = knob_changes(run.rows)
    out[LIVE] = (
        "; ".join(
            f"step {c['step']}: " + ", ".join(f"{k}={v}" for k, v in c.items() if k != "step" and v != before[k])
            for before, c in zip(changes, changes[1:])
        )
        or None
    )
    return out


def run_length(run) -> int:
    r"""The last training step a run logged (0: none): how long it actually trained.

    >>> from qae_lab.analysis.compare import Run
    >>> run_length(Run("r", "qae", 0, {"trainer": {"max_steps": 400}}, [{"step": 1}, {"step": 48}], None, None))
    48
    """
    return max((int(r["step"]) for r in run.rows if r.get("step") is not None), default=0)


def _seeds_text(seeds: Sequence) -> str:
    """'seed 42', 'seeds 0-2', 'seeds 0, 5', 'seed ?' (unknown)."""
    known = sorted(s for s in seeds if s is not None)
    parts = []
    for _, run in itertools.groupby(enumerate(known), lambda p: p[1] - p[0]):  # consecutive seeds: one run
        run = [s for _, s in run]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    parts += ["?"] * (len(seeds) - len(known))
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(parts)


@dataclass(frozen=True, eq=False)
class Group:
    r"""Runs of one method, settings and length, one per distinct seed (in seed order): what a mean may average.

    ``label``: the name in tables and legends (the method for a method's only reference group, else :attr:`title`);
    ``mine``: your own runs; ``set_aside``: ``(run, why)`` for each run not counted.

    >>> from qae_lab.analysis.compare import Run
    >>> [g] = group_runs([], [Run("a", "qae", 42, {}, [{"step": 48}], None, None)])
    >>> g.label, g.seeds, g.title
    ('qae (yours, 48 steps, seed 42)', [42], 'qae (yours, 48 steps, seed 42)')
    """

    label: str
    method: str
    mine: bool
    steps: int
    settings: dict
    runs: tuple
    set_aside: tuple = ()

    @property
    def seeds(self) -> list:
        """The distinct seeds of the counted runs (None: unknown)."""
        return [r.seed for r in self.runs]

    @property
    def title(self) -> str:
        """``<method> (<yours | reference>, <steps> steps, <seeds>)``."""
        return f"{self.method} ({'yours' if self.mine else 'reference'}, {self.steps} steps, {_seeds_text(self.seeds)})"


def _checked(runs, name: str) -> list:
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Iterable):
        raise ValueError(
            f"{name} must be a list of Run (qae_lab.analysis.compare.load_runs), got {type(runs).__name__}"
        )
    runs = list(runs)
    for i, r in enumerate(runs):
        if not all(hasattr(r, a) for a in ("name", "method", "seed", "config", "rows")):
            raise ValueError(f"{name}[{i}] must be a Run (qae_lab.analysis.compare.load_run), got {type(r).__name__}")
    return runs


def _newest(run) -> tuple:
    return max((r.get("time") or 0.0 for r in run.rows), default=0.0), run.name


def group_runs(runs: Iterable, mine: Iterable = ()) -> list[Group]:
    r"""Reference ``runs`` and your own runs (``mine``) in :class:`Group` s of one method, settings and length, in
    the order their first run appears, reference groups first; of runs that share a seed the newest (latest logged
    ``time``, then name) is kept.

    >>> from qae_lab.analysis.compare import Run
    >>> run = lambda name, seed, n: Run(name, "qae", seed, {}, [{"step": s} for s in range(1, n + 1)], None, None)
    >>> groups = group_runs([run("a", 0, 4), run("b", 1, 4)], [run("c", 42, 3), run("d", 42, 3), run("e", 42, 2)])
    >>> [(g.label, [r.name for r in g.runs], len(g.set_aside)) for g in groups]
    [('qae', ['a', 'b'], 0), ('qae (yours, 3 steps, seed 42)', ['d'], 1), ('qae (yours, 2 steps, seed 42)', ['e'], 0)]
    >>> groups[1].set_aside[0][1]
    'same seed 42 as d: a rerun counts once'
    """
    found: dict[tuple, list] = {}
    for mine_flag, name, items in ((False, "runs", runs), (True, "mine", mine)):
        for r in _checked(items, name):
            settings = settings_of(r)
            key = (mine_flag, r.method, run_length(r), tuple(settings.items()))
            found.setdefault(key, [settings]).append(r)
    groups = []
    for (mine_flag, method, steps, _), (settings, *members) in found.items():
        by_seed: dict = {}
        for r in members:
            by_seed.setdefault(r.seed, []).append(r)
        kept, aside = [], []
        for seed in sorted(by_seed, key=lambda s: (s is None, s if s is not None else 0)):
            keep, *rest = sorted(by_seed[seed], key=_newest, reverse=True)
            kept.append(keep)
            same = "an unknown seed" if seed is None else f"seed {seed}"
            aside += [(r, f"same {same} as {keep.name}: a rerun counts once") for r in rest]
        groups.append(Group("", method, mine_flag, steps, settings, tuple(kept), tuple(aside)))
    return _labelled(groups)


def _labelled(groups: list[Group]) -> list[Group]:
    """Each group with its label: the method for the only reference group of a method, else the title, and
    where titles coincide the settings that tell the groups apart (then #n)."""
    ref_methods = [g.method for g in groups if not g.mine]
    labels = [g.method if not g.mine and ref_methods.count(g.method) == 1 else g.title for g in groups]
    for label in set(labels):
        same = [i for i, x in enumerate(labels) if x == label]
        varying = [k for k in groups[same[0]].settings if len({groups[i].settings[k] for i in same}) > 1][:2]
        if len(same) > 1:  # titles end with ")": the settings go inside
            for i in same:
                labels[i] = label[:-1] + "".join(f", {k}={groups[i].settings[k]}" for k in varying) + ")"
    return [
        replace(g, label=label + (f" #{labels[:i].count(label) + 1}" if labels[:i].count(label) else ""))
        for i, (g, label) in enumerate(zip(groups, labels))
    ]


def _parts(group: Group) -> dict:
    try:
        return method_settings(group.method)
    except ValueError:  # a method without a name (mean+ah): only its baseline and weighting are known
        return {k: group.settings.get(k) for k in ("baseline", "token_weighting")}


def _own_knobs(a: Group, b: Group) -> set[str]:
    """The settings that make two different methods different: left out when comparing them."""
    if a.method == b.method:
        return set()
    pa, pb = _parts(a), _parts(b)
    own = {"baseline", "token_weighting"} | {k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k)}
    if not pa.get("baseline") == pb.get("baseline") == "quantile":
        own.add("quantile_k")  # K is QAE's knob, unless both use the quantile baseline
    if "none" in (pa.get("token_weighting", "none"), pb.get("token_weighting", "none")):
        own.add("alpha")  # alpha is SA-AH's / AH's knob, unless both weight tokens
    return own


def differences(a: Group, b: Group) -> dict[str, tuple]:
    r"""The settings two groups differ in, ``{name: (a's value, b's value)}``, their length (``"steps"``) first; none:
    comparable. When the methods differ, each one's own knobs (baseline, token weighting, K unless both use the
    quantile baseline, alpha unless both weight tokens) are what the comparison is about, not differences.

    >>> from qae_lab.analysis.compare import Run
    >>> ref = Run("qae-seed0", "qae", 0, {"run": {"n_train": 2000}}, [{"step": 400}], None, None)
    >>> you = Run("live", "qae", 42, {"run": {"n_train": 64}}, [{"step": 48}], None, None)
    >>> differences(*group_runs([ref], [you]))
    {'steps': (400, 48), 'n_train': (2000, 64)}
    >>> ref_k = Run("r", "qae", 0, {"trainer": {"quantile_k": 0.4}}, [{"step": 400}], None, None)
    >>> mean_k = Run("m", "mean", 0, {"trainer": {"quantile_k": 0.6}}, [{"step": 400}], None, None)
    >>> differences(*group_runs([ref_k, mean_k]))    # K is QAE's own knob: no difference
    {}
    """
    for name, g in (("a", a), ("b", b)):
        if not isinstance(g, Group):
            raise ValueError(f"{name} must be a Group (qae_lab.analysis.grouping.group_runs), got {type(g).__name__}")
    out = {STEPS: (a.steps, b.steps)} if a.steps != b.steps else {}
    own = _own_knobs(a, b)
    out.update({k: (v, b.settings.get(k)) for k, v in a.settings.items() if k not in own and v != b.settings.get(k)})
    return out


def format_differences(diffs: Mapping[str, tuple], limit: int | None = None) -> str:
    r"""``"steps 48 vs 400, n_train 64 vs 2000"`` (:func:`differences`): all, or the first ``limit`` and how many more.

    >>> format_differences({"steps": (48, 400), "n_train": (64, 2000), "n_eval": (8, 200)}, limit=2)
    'steps 48 vs 400, n_train 64 vs 2000, and 1 more'
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError(f"limit must be None (all) or an int >= 1, got {limit!r}")
    items = [f"{k} {a} vs {b}" for k, (a, b) in diffs.items()]
    more = len(items) - (limit or len(items))
    return ", ".join(items[:limit]) + (f", and {more} more" if more > 0 else "")


def describe_groups(groups: Sequence[Group]) -> str:
    r"""One line per group (label, length, distinct seeds, runs), and a line for each run set aside.

    >>> from qae_lab.analysis.compare import Run
    >>> you = [Run(n, "qae", 42, {}, [{"step": 40, "time": t}], None, None) for n, t in (("a", 1.0), ("b", 2.0))]
    >>> print(describe_groups(group_runs([], you)))
    qae (yours, 40 steps, seed 42): 40 steps, 1 seed (42): b
      set aside: a (same seed 42 as b: a rerun counts once)
    """
    lines = []
    for g in groups:
        seeds = ", ".join("?" if s is None else str(s) for s in g.seeds)
        lines.append(
            f"{g.label}: {g.steps} steps, {len(g.runs)} seed{'s' if len(g.runs) != 1 else ''} ({seeds}): "
            + ", ".join(r.name for r in g.runs)
        )
        lines += [f"  set aside: {r.name} ({why})" for r, why in g.set_aside]
    return "\n".join(lines)


def differences_report(groups: Sequence[Group]) -> str:
    r"""For each of your groups, how it differs from the nearest reference group (same method first, then the
    fewest differences), or that it is comparable with it.

    >>> from qae_lab.analysis.compare import Run
    >>> ref = [Run(f"qae-seed{s}", "qae", s, {"run": {"n_train": 2000}}, [{"step": 400}], None, None) for s in (0, 1)]
    >>> you = [Run("live", "qae", 42, {"run": {"n_train": 64}}, [{"step": 48}], None, None)]
    >>> print(differences_report(group_runs(ref, you)))
    qae (yours, 48 steps, seed 42) vs qae (reference, 400 steps, seeds 0-1):
      differs in steps 48 vs 400, n_train 64 vs 2000
    """
    refs = [g for g in groups if not g.mine]
    lines = []
    for g in (g for g in groups if g.mine):
        if not refs:
            lines.append(f"{g.title}: no reference runs to compare with")
            continue
        near = min(refs, key=lambda r: (r.method != g.method, len(differences(g, r))))
        diffs = differences(g, near)
        # no-break spaces inside each "name a vs b", so that lines break between differences only
        verdict = (
            "differs in " + ", ".join(f"{k} {a} vs {b}".replace(" ", "\xa0") for k, (a, b) in diffs.items())
            if diffs
            else "comparable (same settings and length)"
        )
        lines.append(
            f"{g.title} vs {near.title}:\n"
            + textwrap.fill(verdict, 100, initial_indent="  ", subsequent_indent="    ").replace("\xa0", " ")
        )
    return "\n".join(lines) or "no runs of your own: only the reference groups above"
