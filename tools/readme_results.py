r"""The result figures of the READMEs, written from the committed runs, and a check that they have not drifted.

The READMEs state what the committed reference runs (``data/reference_runs/``, made by
``benchmarks/reference_runs.py``) measured. Each such passage sits between two markers,
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``, and is generated here from the runs
through :mod:`qae_lab.analysis.compare`, :mod:`qae_lab.analysis.phenomena` and :mod:`qae_lab.analysis.stats`; nothing in
it is typed by hand. :data:`BLOCKS` says which passages each README holds.

    python -m tools.readme_results           # rewrite the passages (each README atomically)
    python -m tools.readme_results --check   # exit 1, naming the files, where a passage differs

``tests/tools/test_readme_results.py`` runs the check, so a README that no longer says what the
committed runs say fails the tests. Runs offline in about a second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from qae_lab.analysis.compare import Run, load_runs, summary_table
from qae_lab.runs.costs import GPUS, run_time
from qae_lab.lab.nb04_live_run import GPU_RUN
from qae_lab.runs.costs import GIB, T4_MEMORY, run_memory
from qae_lab.methods import QAE_HARD_FRAC, QAE_ZERO_ADV_FRAC
from qae_lab.analysis.phenomena import per_method, window_mean
from qae_lab.runs.presets import build
from qae_lab.storage.folder import atomic_write_text
from qae_lab.analysis.stats import Stat, stat, within_spread

__all__ = [
    "COMMAND",
    "ROOT",
    "REFERENCE_RUNS",
    "HOST_COSTS",
    "marker",
    "replace_block",
    "cpu_demo_text",
    "lenient_text",
    "reference_text",
    "gpu_memory_text",
    "t4_estimate",
    "gpu_time_text",
    "t4_time_line",
    "NOTEBOOK_TIMES",
    "PLANS",
    "notebook_minutes",
    "workshop_plan_text",
    "answer_key_text",
    "BLOCKS",
    "render",
    "stale",
    "main",
]

COMMAND = "python -m tools.readme_results"
ROOT = Path(__file__).resolve().parents[1]  # the source checkout the READMEs belong to
REFERENCE_RUNS = Path("data") / "reference_runs"
HOST_COSTS = Path("data") / "gpu_time" / "host_costs.json"  # benchmarks/host_costs.py
T4_PRESET = "qwen2.5-0.5b-gsm8k-t4"
_EDGE = 50  # steps: the README's "first and last 50 steps" of a 400-step run
_COUNT = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def marker(name: str) -> tuple[str, str]:
    r"""The opening and closing markers of passage ``name``.

    >>> marker("cpu-demo")
    ('<!-- results:cpu-demo -->', '<!-- /results:cpu-demo -->')
    """
    return f"<!-- results:{name} -->", f"<!-- /results:{name} -->"


def replace_block(text: str, name: str, body: str) -> str:
    r"""``text`` with what stands between the markers of passage ``name`` replaced by ``body`` (markers kept).

    Raises:
        ValueError: the markers are missing, repeated or out of order.

    >>> replace_block("a <!-- results:x -->old<!-- /results:x --> b", "x", "new")
    'a <!-- results:x -->new<!-- /results:x --> b'
    >>> replace_block("no markers", "x", "new")
    Traceback (most recent call last):
    ...
    ValueError: passage 'x' needs one '<!-- results:x -->' followed by one '<!-- /results:x -->'
    """
    begin, end = marker(name)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i or text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"passage {name!r} needs one {begin!r} followed by one {end!r}")
    return text[: i + len(begin)] + body + text[j:]


def _wrap(paragraph: str) -> str:
    """A paragraph broken into lines of at most 100 characters at spaces, as the READMEs are written."""
    return textwrap.fill(paragraph, 100, break_long_words=False, break_on_hyphens=False)


def _mean_std(s: Stat, digits: int = 3) -> str:
    """A seed mean, with its spread where the seeds differ ("0.705" or "0.747 ± 0.013")."""
    return f"{s.mean:.{digits}f}" if s.std == 0 else f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"


def _points(diff: float) -> str:
    """A difference of rates in percentage points, in words: "gains 30 points", "loses 2 points"."""
    n = round(100 * abs(diff))
    return f"{'gains' if diff >= 0 else 'loses'} {n} point{'' if n == 1 else 's'}"


def _seeds(runs: Sequence[Run]) -> str:
    seeds = sorted(r.seed for r in runs)
    return ", ".join(map(str, seeds[:-1])) + f" and {seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def _level_pass1(folder: Path, when: str) -> dict[str, float]:
    """``{level: sampled pass@1}`` of a committed run's evaluation ``before`` or ``after`` training."""
    data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))[when]
    return {level: v["pass@1"] for level, v in data["by_level"].items()}


def _moves(what: str, first: Stat, last: Stat, digits: int) -> str:
    verb = "rises" if last.mean > first.mean else "falls"
    return f"{what} {verb} from {first.mean:.{digits}f} to {last.mean:.{digits}f}"


def cpu_demo_text(reference_runs: str | Path, method: str = "qae", edge: int = _EDGE) -> str:
    r"""The main README's cpu-demo results: the before/after table over ``method``'s committed runs (mean ± std over
    seeds where they differ), pass@1 per level, and how reward, entropy, hard-prompt and zero-advantage fractions
    moved during training (means over the first and last ``edge`` steps, then over seeds).

    Args:
        reference_runs: the ``data/reference_runs`` folder (``<method>-seed<S>/`` each).
        method: the runs described; edge: steps at each end of training, at most half the steps.

    >>> "| embedded model | 0.705 | 0.278 | 0.830 |" in cpu_demo_text(ROOT / REFERENCE_RUNS).splitlines()
    True
    """
    folder = Path(reference_runs)
    folders = sorted(folder.glob(f"{method}-seed*"))
    runs = [r for r in load_runs(folders) if r.method == method] if folders else []
    if not runs or any(r.before is None or r.after is None for r in runs):
        raise ValueError(f"no evaluated {method} runs in {folder}: make them with python benchmarks/reference_runs.py")
    evals = {
        (when, key): stat(getattr(r, when)[key] for r in runs)
        for when in ("before", "after")
        for key in ("greedy_pass@1", "pass@1", "pass@8")
    }
    levels = {when: [_level_pass1(folder / r.name, when) for r in runs] for when in ("before", "after")}
    names = sorted(levels["before"][0], key=int)
    level = ", ".join(
        f"{'level ' if i == 0 else ''}{n}: {stat(d[n] for d in levels['before']).mean:.2f} -> "
        f"{stat(d[n] for d in levels['after']).mean:.2f}"
        for i, n in enumerate(names)
    )
    steps = runs[0].rows[-1]["step"]
    if any(r.rows[-1]["step"] != steps for r in runs) or not 1 <= edge <= steps // 2:
        raise ValueError(f"the {method} runs must have one length of at least 2 * edge = {2 * edge} steps")
    first = {m: stat(window_mean(r.rows, m, 1, edge) for r in runs) for m in ("reward", "entropy", QAE_HARD_FRAC)}
    last = {m: stat(window_mean(r.rows, m, steps - edge + 1) for r in runs) for m in first}
    zero = stat(window_mean(r.rows, QAE_ZERO_ADV_FRAC) for r in runs)
    gain = {key: evals["after", key].mean - evals["before", key].mean for key in ("greedy_pass@1", "pass@1", "pass@8")}
    sharpens = (
        ": within this budget RL mostly sharpens the sampling distribution towards answers the greedy "
        "decoder already picks"
        if gain["pass@1"] > 2 * abs(gain["greedy_pass@1"])
        else ""
    )
    run0, after0 = runs[0].config, runs[0].after
    row = {
        when: " | ".join(_mean_std(evals[when, key]) for key in ("greedy_pass@1", "pass@1", "pass@8"))
        for when in ("before", "after")
    }
    return "\n".join(
        [
            "",
            _wrap(
                f"Measured in the committed runs of `benchmarks/reference_runs.py` "
                f"(`data/reference_runs/{method}-seed*`: `--method {method}`, seeds {_seeds(runs)}, "
                f"`--set sparse_update=false`), each evaluated on the same {after0['n_problems']} held-out problems "
                f"with the same sampling seeds before and after training; after training, mean ± std over the "
                f"{_COUNT.get(len(runs), len(runs))} seeds:"
            ),
            "",
            f"| | greedy pass@1 | sampled pass@1 (n = {after0['n_samples']}, T = {run0['trainer']['temperature']:g}) "
            "| pass@8 |",
            "| --- | --- | --- | --- |",
            f"| embedded model | {row['before']} |",
            f"| after `{run0['preset']}` | {row['after']} |",
            "",
            _wrap(
                f"Sampled pass@1 {_points(gain['pass@1'])} ({level}), pass@8 {_points(gain['pass@8'])} and greedy "
                f"pass@1 {_points(gain['greedy_pass@1'])}{sharpens}. "
                f"{_moves('The training reward', first['reward'], last['reward'], 2)} (means over the first and last "
                f"{edge} of the {steps} steps, then over the seeds), "
                f"{_moves('the entropy of the sampled completions', first['entropy'], last['entropy'], 3)} (nats per "
                f"token), {_moves('the hard-prompt fraction', first[QAE_HARD_FRAC], last[QAE_HARD_FRAC], 2)}, and "
                f"{100 * zero.mean:.0f}% of completions get exactly zero advantage (mean over the steps)."
            ),
            "",
        ]
    )


def lenient_text(runs: Sequence[Run]) -> str:
    r"""Whether the lenient figures (an answer found anywhere) equal the strict ones in ``runs``' evaluations.

    >>> ev = {"pass@1": 0.5, "lenient_pass@1": 0.5, "greedy_pass@1": 0.7, "lenient_greedy_pass@1": 0.7}
    >>> lenient_text([Run("qae-seed0", "qae", 0, {}, [], ev, ev)])
    'in the runs above they are equal'
    >>> lenient_text([Run("qae-seed0", "qae", 0, {}, [], ev, {**ev, "lenient_pass@1": 0.52})])
    'in the runs above the lenient figures exceed the strict ones by up to 0.020'
    """
    gaps = [
        getattr(r, when)[f"lenient_{key}"] - getattr(r, when)[key]
        for r in runs
        for when in ("before", "after")
        for key in ("pass@1", "greedy_pass@1")
    ]
    if not gaps:
        raise ValueError("no evaluated runs to compare the lenient figures in")
    if all(g == 0 for g in gaps):
        return "in the runs above they are equal"
    return f"in the runs above the lenient figures exceed the strict ones by up to {max(gaps):.3f}"


def reference_text(runs: Sequence[Run]) -> str:
    r"""``data/reference_runs/README.md``'s table of the four methods (:func:`qae_lab.analysis.compare.summary_table`) and
    what it says: the spread of sampled pass@1 after training, which methods lie within the mean baseline's seed
    range, the zero-advantage fractions and QAE's pass@8 against the mean baseline's.

    >>> from qae_lab.analysis.compare import find_reference_runs
    >>> reference_text(load_runs(find_reference_runs())).splitlines()[5][:40]
    '| mean (GRPO) | 0.278 -> 0.586 ± 0.009 |'
    """
    table = {row["method"]: row for row in summary_table(runs)}
    if "mean" not in table or "qae" not in table:
        raise ValueError(f"the reference runs need the mean and qae methods, got {sorted(table)}")
    seeds = sorted(set(per_method(runs, lambda r: r.seed).get("mean", [])))
    lines = [
        "",
        _wrap(
            f"Seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]} for every method. Mean ± "
            f"spread (population std) over the {_COUNT.get(len(seeds), len(seeds))} seeds:"
        ),
        "",
        "| method | sampled pass@1 before -> after | greedy pass@1 before -> after | pass@8 after | zero-adv frac "
        "| training variance (reward, detrended, window 20) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for method, row in table.items():
        cells = [
            f"{row[f'{k} before'].mean:.3f} -> {row[f'{k} after'].mean:.3f} ± {row[f'{k} after'].std:.3f}"
            for k in ("pass@1", "greedy pass@1")
        ]
        cells += [f"{row[k].mean:.3f} ± {row[k].std:.3f}" for k in ("pass@8 after", "zero-adv frac", "train var")]
        lines.append(f"| {'mean (GRPO)' if method == 'mean' else method} | {' | '.join(cells)} |")
    after = {m: row["pass@1 after"] for m, row in table.items()}
    lo, hi = min(after, key=lambda m: after[m].mean), max(after, key=lambda m: after[m].mean)
    inside = [m for m in after if m != "mean" and within_spread(after[m], after["mean"])]
    outside = [m for m in after if m != "mean" and m not in inside]
    spread = ", ".join(
        filter(
            None,
            [
                f"{' and '.join(inside)} within the seed spread of the mean baseline (the seed ranges overlap)"
                if inside
                else "",
                f"{' and '.join(outside)} outside it" if outside else "",
            ],
        )
    )
    q, m = table["qae"], table["mean"]
    d8 = q["pass@8 after"].mean - m["pass@8 after"].mean
    lines += [
        "",
        _wrap(
            f"On this tiny task the {_COUNT.get(len(table), len(table))} methods end within "
            f"{round(100 * (after[hi].mean - after[lo].mean))} points of each other in sampled pass@1 "
            f"({lo} {after[lo].mean:.3f} to {hi} {after[hi].mean:.3f}), {spread}. QAE leaves "
            f"{100 * q['zero-adv frac'].mean:.0f}% of responses with exactly zero advantage against "
            f"{100 * m['zero-adv frac'].mean:.0f}% (the all-equal groups) under the mean baseline, and its pass@8 "
            f"ends "
            f"{round(100 * abs(d8))} points {'higher' if d8 >= 0 else 'lower'}. The table comes from "
            "`qae_lab.analysis.compare.summary_table` (notebook 05 draws the curves)."
        ),
        "",
    ]
    return "\n".join(lines)


_GPU_PRESETS = ("qwen2.5-0.5b-gsm8k-t4", "qwen2.5-1.5b-gsm8k-live", "qwen2.5-1.5b-gsm8k", "qwen2.5-3b-gsm8k")


def gpu_memory_text(presets: Sequence[str] = _GPU_PRESETS) -> str:
    r"""docs/workshop.md's table of each GPU preset's estimated peak memory (:func:`qae_lab.runs.costs.run_memory`;
    ``dtype="auto"`` taken as bf16, the GPU such a preset is meant for).

    >>> print(gpu_memory_text(["qwen2.5-0.5b-gsm8k-t4"]).splitlines()[3])
    | qwen2.5-0.5b-gsm8k-t4 | qwen2.5-0.5b, float16 | 4 x 8, <= 256 tokens | 3.2 GiB | 6.8 GiB |
    """
    lines = [
        "",
        "| preset | model, weights | prompts x completions per step, length | estimated peak | with full "
        "float32 logits |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in presets:
        run, cfg = build(name, output_dir="unused")
        fused, full = (run_memory(run, cfg, bf16_gpu=True, fused_lm_head=f)["peak"] / GIB for f in (True, False))
        weights = "bfloat16" if run.dtype == "auto" else run.dtype
        lines.append(
            f"| {name} | {run.model}, {weights} | {cfg.generation_batch_size // cfg.num_generations} x "
            f"{cfg.num_generations}, <= {cfg.max_completion_length} tokens | {fused:.1f} GiB | {full:.1f} GiB |"
        )
    lines += [
        "",
        _wrap(
            f"A T4's 16 GB leave about {T4_MEMORY / GIB:.0f} GiB to a program. The estimate counts the weights, the LoRA adapters "
            "and their optimizer state, the generation's KV cache, the activations and the loss's "
            "logits; the CUDA context and the allocator's slack come on top. TRL's fused LM head keeps "
            "only a tile of the logits; the last column is the figure without it."
        ),
        "",
    ]
    return "\n".join(lines)


def t4_estimate(root: str | Path = ROOT) -> dict:
    r"""Notebook 04's run on a free Colab T4 (the T4 preset with :data:`qae_lab.lab.nb04_live_run.GPU_RUN`), estimated by
    :func:`qae_lab.runs.costs.run_time` at the datasheet peaks (``floor``, a lower bound) and at half of them
    (``half``), with the host's eager decode step from ``data/gpu_time/host_costs.json`` (``host``, seconds).

    >>> est = t4_estimate()
    >>> est["floor"]["total"] < est["half"]["total"] < 2 * est["floor"]["total"], sorted(est["host"])
    (True, ['merged', 'unmerged'])
    """
    measured = json.loads((Path(root) / HOST_COSTS).read_text(encoding="utf-8"))
    host = {path: row["ms_per_decode_step"] / 1e3 for path, row in measured["rows"].items()}
    run, cfg = build(T4_PRESET, [f"{k}={v}" for k, v in GPU_RUN.items()], output_dir="unused")
    return {
        "floor": run_time(run, cfg, GPUS["t4"], host=host),
        "half": run_time(run, cfg, GPUS["t4"], host=host, sustained=0.5),
        "host": host,
        "measured": measured,
        "run": run,
        "cfg": cfg,
    }


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def gpu_time_text(root: str | Path = ROOT) -> str:
    r"""docs/workshop.md's table of notebook 04's estimated time on a T4 (:func:`t4_estimate`).

    >>> print(gpu_time_text().splitlines()[7])
    | one training step | 1.8 s | 3.5 s |
    """
    est = t4_estimate(root)
    floor, half, cfg, run = est["floor"], est["half"], est["cfg"], est["run"]
    t4, m = GPUS["t4"], est["measured"]
    rows = [
        ("one training step", f"{floor['step']:.1f} s", f"{half['step']:.1f} s"),
        (f"{cfg.max_steps} steps", _minutes(floor["steps"]), _minutes(half["steps"])),
        ("the evaluations before and after", _minutes(floor["evaluations"]), _minutes(half["evaluations"])),
        ("in all", _minutes(floor["total"]), _minutes(half["total"])),
    ]
    lines = [
        "",
        _wrap(
            f"Notebook 04 on a T4 ({T4_PRESET}: {cfg.max_steps} steps of "
            f"{cfg.generation_batch_size // cfg.num_generations} x {cfg.num_generations} completions of <= "
            f"{cfg.max_completion_length} tokens, {run.n_eval} held-out problems evaluated before and after), "
            "estimated by `qae_lab.runs.costs.run_time`, not measured:"
        ),
        "",
        "| | at the datasheet peaks (a lower bound) | at half the peaks |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += [
        "",
        _wrap(
            f"The card's terms come from the {t4.name}'s datasheet ({t4.tflops:.0f} TFLOP/s in float16, "
            f"{t4.bandwidth:.0f} GB/s). Decoding without CUDA graphs (the evaluations, on the PEFT model) "
            f"waits at least {1e3 * est['host']['unmerged']:.1f} ms per decode step for the host: "
            f"{m['rows']['unmerged']['aten_ops_per_decode_step']:,} ops measured on {m['cores']} CPU "
            f"cores by `benchmarks/host_costs.py` ({m['date']}); the training steps decode through "
            "CUDA graphs. Not counted: downloading the model (about 1 GB), compiling the decode step "
            "during the first steps, the rewards and the dashboard. `benchmarks/gpu_check.py` prints "
            "a measured step beside its estimate on the GPU it runs on."
        ),
        "",
    ]
    return "\n".join(lines)


def t4_time_line(root: str | Path = ROOT) -> str:
    r"""Notebook 04's words on its time on a free Colab T4 (:func:`t4_estimate`), as its opening lines say it.

    >>> t4_time_line().startswith("on a free Colab T4 about ")
    True
    """
    est = t4_estimate(root)
    return (
        f"on a free Colab T4 about {est['floor']['total'] / 60:.0f}-{est['half']['total'] / 60:.0f} min "
        f"(estimated from the architecture, not measured; docs/workshop.md)"
    )


# ---------------------------------------------------------------- the workshop's plans and answer key

NOTEBOOK_TIMES = Path("data") / "notebook_times.json"  # benchmarks/bench_notebooks.py --write
NOTEBOOKS = Path("notebooks")
READING_WPM = 150  # words a minute: a participant reads prose at about 200, slower with formulas and figures
PREDICTION_MIN = 2  # write the guess, run the check, read the why
EXERCISE_MIN = 6  # the closing exercise, with a look at the solution
INSTALL_MIN = 10  # everyone's first cell, and the facilitator checking that each person sees a figure
BREAK_MIN = 10
# which notebooks each plan runs, in order; "core" notebooks are 00-08, 09 is 07's appendix. 90 minutes hold 00-04
# without 02 (95 minutes with 08 as well, measured 2026-12-03): 08 is what they take home
PLANS = {
    "90 minutes": ("00", "01", "03", "04"),
    "half a day (3.5 hours)": ("00", "01", "02", "03", "04", "05", "06", "07", "08"),
}
PLAN_BUDGET = {"90 minutes": 90, "half a day (3.5 hours)": 210}
PLAN_BREAKS = {"90 minutes": 0, "half a day (3.5 hours)": 2}


def _notebook(root: Path, number: str) -> tuple[str, dict]:
    """(file name, its JSON) of notebook ``number`` ("00") under ``root``."""
    [path] = sorted((root / NOTEBOOKS).glob(f"{number}_*.ipynb"))
    return path.name, json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def notebook_minutes(root: str | Path = ROOT) -> dict[str, dict]:
    r"""Each notebook's time in a workshop, from what it holds and what it measured: its markdown words read at
    :data:`READING_WPM`, its full-mode run time (:data:`NOTEBOOK_TIMES`, measured by ``benchmarks/bench_notebooks.py
    --write``), :data:`PREDICTION_MIN` for its prediction and :data:`EXERCISE_MIN` for its exercise; ``minutes`` is
    their sum rounded up.

    >>> m = notebook_minutes()["00"]; m["minutes"] == math.ceil(m["reading"] + m["computing"] + m["activities"])
    True
    """
    root = Path(root)
    times = json.loads((root / NOTEBOOK_TIMES).read_text(encoding="utf-8"))
    out = {}
    for path in sorted((root / NOTEBOOKS).glob("[0-9][0-9]_*.ipynb")):
        number, nb = path.name[:2], json.loads(path.read_text(encoding="utf-8"))
        if path.name not in times["notebooks"]:
            raise ValueError(
                f"{root / NOTEBOOK_TIMES} has no time for {path.name}: run benchmarks/bench_notebooks.py --write"
            )
        words = sum(len(_source(c).split()) for c in nb["cells"] if c["cell_type"] == "markdown")
        predicts = any(_source(c).startswith("PREDICTION = ") for c in nb["cells"] if c["cell_type"] == "code")
        activities = PREDICTION_MIN * predicts + EXERCISE_MIN
        reading, computing = words / READING_WPM, times["notebooks"][path.name]["full_s"] / 60
        out[number] = {
            "name": path.name,
            "words": words,
            "reading": reading,
            "computing": computing,
            "activities": activities,
            "minutes": math.ceil(reading + computing + activities),
        }
    return out


def workshop_plan_text(root: str | Path = ROOT) -> str:
    r"""docs/workshop.md's two plans: each notebook's minutes (:func:`notebook_minutes`), the set-up and breaks, and
    what is left of the plan's length for questions; a plan that does not fit raises.

    >>> "| total |" in workshop_plan_text()
    True
    """
    root = Path(root)
    minutes = notebook_minutes(root)
    times = json.loads((root / NOTEBOOK_TIMES).read_text(encoding="utf-8"))
    lines = [
        "",
        _wrap(
            f"Each notebook's minutes are its markdown read at {READING_WPM} words a minute, its run time "
            f"in full mode on {times['cores']} CPU cores (measured {times['date']} by "
            f"`benchmarks/bench_notebooks.py`), {PREDICTION_MIN} minutes for its prediction and "
            f"{EXERCISE_MIN} for its exercise, rounded up."
        ),
        "",
    ]
    for plan, numbers in PLANS.items():
        rows = [("set-up", "everyone runs notebook 00's first cell", INSTALL_MIN)]
        for n in numbers:
            m = minutes[n]
            rows.append((n, f"{m['words']} words, {m['computing']:.1f} min of computing", m["minutes"]))
        rows += [("break", "", BREAK_MIN)] * PLAN_BREAKS[plan]
        used = sum(r[2] for r in rows)
        if used > PLAN_BUDGET[plan]:
            raise ValueError(f"the {plan} plan takes {used} min, more than its {PLAN_BUDGET[plan]}")
        rows.append(("questions", "what is left of the plan", PLAN_BUDGET[plan] - used))
        lines += [f"**{plan}**", "", "| part | what | minutes |", "| --- | --- | --- |"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
        lines += [f"| total | | {sum(r[2] for r in rows)} |", ""]
    return "\n".join(lines)


def _between(text: str, start: str, end: str) -> str:
    i = text.find(start)
    return "" if i < 0 else text[i + len(start) : text.find(end, i + len(start))].strip()


def _prediction_question(cells: list[dict]) -> str:
    """The question of a notebook's prediction: the markdown just before its ``PREDICTION = `` cell, from the line
    that names the prediction ("Predict first" heading or a "**Predict:**" line) on, without that heading; "" when
    the notebook asks none."""
    at = next(
        (i for i, c in enumerate(cells) if c["cell_type"] == "code" and _source(c).startswith("PREDICTION = ")), None
    )
    md = [i for i in range(at or 0) if cells[i]["cell_type"] == "markdown"]
    if at is None or not md:
        return ""
    lines = _source(cells[md[-1]]).splitlines()
    start = next((k for k, line in enumerate(lines) if "Predict" in line), 0)
    head = lines[start]
    rest = (
        lines[start + 1 :] if head.startswith("#") else [head.replace("**Predict:**", "").strip()] + lines[start + 1 :]
    )
    return "\n".join(rest).strip()


def answer_key_text(root: str | Path = ROOT) -> str:
    r"""docs/workshop.md's answer key, read from the notebooks themselves: each one's prediction (its question and
    its two-line Why) and its exercise (the checker and the solution's code).

    >>> "### 00 ·" in answer_key_text()
    True
    """
    root = Path(root)
    out = [""]
    for path in sorted((root / NOTEBOOKS).glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        md = [_source(c) for c in cells if c["cell_type"] == "markdown"]
        title = next(line[2:] for text in md for line in text.splitlines() if line.startswith("# "))
        out += [f"### {title}", ""]
        question = _prediction_question(cells)
        why = next(
            (_between(t, "<summary>Why</summary>", "</details>") for t in md if "<summary>Why</summary>" in t), ""
        )
        if question:
            out += [
                _wrap(f"**Prediction.** {' '.join(question.split())}"),
                "",
                _wrap(f"**Answer.** {' '.join(why.split())}"),
                "",
            ]
        solution = next((_between(t, "```python", "```") for t in md if "<summary>Solution" in t), "")
        checker = next((word for word in _source(cells[-1]).replace("(", " ").split() if "check_" in word), "")
        if solution:
            out += [f"**Exercise** (checked by `{checker}`):", "", "```python", solution, "```", ""]
    return "\n".join(out)


def _reference(root: Path) -> list[Run]:
    return [r for r in load_runs(root / REFERENCE_RUNS) if r.config.get("preset") == "cpu-demo"]


# README (relative to the root) -> {passage: its text from the root's committed runs}
BLOCKS: dict[str, dict[str, Callable[[Path], str]]] = {
    "README.md": {
        "cpu-demo": lambda root: cpu_demo_text(root / REFERENCE_RUNS),
        "lenient": lambda root: lenient_text([r for r in _reference(root) if r.method == "qae"]),
    },
    str(REFERENCE_RUNS / "README.md"): {
        "reference-runs": lambda root: reference_text(_reference(root)),
    },
    "docs/workshop.md": {
        "cpu-demo": lambda root: cpu_demo_text(root / REFERENCE_RUNS),
        "gpu-memory": lambda root: gpu_memory_text(),
        "gpu-time": gpu_time_text,
        "workshop-plans": workshop_plan_text,
        "answer-key": answer_key_text,
    },
}


def render(
    root: str | Path = ROOT, blocks: Mapping[str, Mapping[str, Callable[[Path], str]]] = BLOCKS
) -> dict[Path, tuple[str, str]]:
    r"""``{README path: (its text now, its text with every passage regenerated)}`` under ``root``; writes nothing.

    >>> [str(path.relative_to(ROOT)) for path in render()]
    ['README.md', 'data/reference_runs/README.md', 'docs/workshop.md']
    """
    root = Path(root)
    out = {}
    for name, passages in blocks.items():
        path = root / name
        now = path.read_text(encoding="utf-8")
        new = now
        for passage, make in passages.items():
            new = replace_block(new, passage, make(root))
        out[path] = (now, new)
    return out


def stale(root: str | Path = ROOT) -> list[Path]:
    r"""The READMEs under ``root`` whose result passages differ from what the committed runs say.

    >>> stale()
    []
    """
    return [path for path, (now, new) in render(root).items() if now != new]


def main(argv: Sequence[str] | None = None) -> int:
    r"""Rewrite the READMEs' result passages (``--check``: only report the ones that differ, exit status 1).

    >>> main(["--check"])
    READMEs up to date with the committed runs
    0
    """
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a README's passages differ")
    p.add_argument("--root", type=Path, default=ROOT, help="the source checkout (default: this package's)")
    args = p.parse_args(argv)
    changed = [(path, new) for path, (now, new) in render(args.root).items() if now != new]
    for path, new in changed:
        if args.check:
            print(f"{path}: its result passages differ from the committed runs; run {COMMAND}")
        else:
            atomic_write_text(path, new)  # a reader sees the old README or the new one, never half of one
            print(f"{path}: result passages rewritten")
    if not changed:
        print("READMEs up to date with the committed runs")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
