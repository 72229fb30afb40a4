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
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from qae_lab.analysis.claims import VERDICTS, claim_card, matrix
from qae_lab.analysis.compare import Run, find_reference_runs, load_runs, summary_table, versus_baseline  # noqa: F401 -- find_reference_runs: the doctests
from qae_lab.analysis.evidence import judge_all
from qae_lab.analysis.phenomena import (
    choose_setting,
    dynamic_sampling_rows,
    load_experiment,
    load_search,
    search_rows,
    window_mean,
)
from qae_lab.analysis.stats import stat
from qae_lab.analysis.tables import markdown_table
from qae_lab.analysis.takeaways import phenomenon_sentence, saah_sentence, sgd_sentence
from qae_lab.runs.presets import GPU_RUN
from qae_lab.metric_names import QAE_HARD_FRAC, QAE_ZERO_ADV_FRAC
from qae_lab.runs.costs import GIB, GPUS, T4_MEMORY, run_memory, run_time
from qae_lab.runs.presets import build
from qae_lab.storage.folder import atomic_write_text
from tools.workshop_minutes import NOTEBOOK_TIMES, minutes_text, notebook_table_text, routes_text, workshop_plan_text

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
    "scoreboard_text",
    "claim_card_text",
    "phenomenon_search_text",
    "sentence_text",
    "gpu_memory_text",
    "t4_estimate",
    "gpu_time_text",
    "t4_time_line",
    "NOTEBOOK_TIMES",
    "THREAD_POLICY",
    "THREAD_JOBS",
    "cpu_time_text",
    "thread_ratios",
    "long_run_ratios",
    "thread_policy_text",
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
THREAD_POLICY = Path("data") / "thread_policy.json"  # benchmarks/bench_threads.py
THREAD_JOBS = {"cli": "command line", "nb04": "notebook 04", "nb08": "notebook 08"}  # its jobs, as its tables name them
T4_PRESET = "qwen2.5-0.5b-gsm8k-t4"
_EDGE = 50  # steps: the README's "first and last 50 steps" of a 400-step run


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


def _level_pass1(folder: Path, when: str) -> dict[str, float]:
    """``{level: sampled pass@1}`` of a committed run's evaluation ``before`` or ``after`` training."""
    data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))[when]
    return {level: v["pass@1"] for level, v in data["by_level"].items()}


def cpu_demo_text(reference_runs: str | Path, method: str = "qae", edge: int = _EDGE) -> str:
    r"""The main README's cpu-demo results as tables, over ``method``'s committed runs (mean ± std over seeds):
    greedy pass@1, sampled pass@1 and pass@8 before and after training, sampled pass@1 per level, and the reward,
    entropy, hard-prompt and zero-advantage fractions over the first and last ``edge`` steps.

    Args:
        reference_runs: the ``data/reference_runs`` folder (``<method>-seed<S>/`` each).
        method: the runs described; edge: steps at each end of training, at most half the steps.

    >>> "| embedded model | 0.705±0.000 | 0.278±0.000 | 0.830±0.000 |" in cpu_demo_text(ROOT / REFERENCE_RUNS)
    True
    """
    folder = Path(reference_runs)
    folders = sorted(folder.glob(f"{method}-seed*"))
    runs = [r for r in load_runs(folders) if r.method == method] if folders else []
    if not runs or any(r.before is None or r.after is None for r in runs):
        raise ValueError(f"no evaluated {method} runs in {folder}: make them with python benchmarks/reference_runs.py")
    steps = runs[0].rows[-1]["step"]
    if any(r.rows[-1]["step"] != steps for r in runs) or not 1 <= edge <= steps // 2:
        raise ValueError(f"the {method} runs must have one length of at least 2 * edge = {2 * edge} steps")
    run0, after0 = runs[0].config, runs[0].after
    sampled = f"sampled pass@1 (n = {after0['n_samples']}, T = {run0['trainer']['temperature']:g})"
    evals = [
        {
            "": label,
            "greedy pass@1": stat(getattr(r, when)["greedy_pass@1"] for r in runs),
            sampled: stat(getattr(r, when)["pass@1"] for r in runs),
            "pass@8": stat(getattr(r, when)["pass@8"] for r in runs),
        }
        for when, label in (("before", "embedded model"), ("after", f"after `{run0['preset']}`"))
    ]
    levels = {when: [_level_pass1(folder / r.name, when) for r in runs] for when in ("before", "after")}
    by_level = [
        {"level": n, **{f"pass@1 {w}": stat(d[n] for d in levels[w]) for w in ("before", "after")}}
        for n in sorted(levels["before"][0], key=int)
    ]
    training = [
        {
            "": f"{which} {edge} of {steps} steps",
            "reward": stat(window_mean(r.rows, "reward", lo, hi) for r in runs),
            "entropy (nats per token)": stat(window_mean(r.rows, "entropy", lo, hi) for r in runs),
            "hard-prompt fraction": stat(window_mean(r.rows, QAE_HARD_FRAC, lo, hi) for r in runs),
            "zero-advantage fraction": stat(window_mean(r.rows, QAE_ZERO_ADV_FRAC, lo, hi) for r in runs),
        }
        for which, lo, hi in (("first", 1, edge), ("last", steps - edge + 1, steps))
    ]
    return "\n".join(
        [
            "",
            _wrap(
                f"Measured in the committed runs of `benchmarks/reference_runs.py` (`data/reference_runs/{method}-seed*`,"
                f" `--method {method} --set sparse_update=false`), each evaluated on the same {after0['n_problems']} "
                "held-out problems with the same sampling seeds before and after training; mean ± std over the seeds:"
            ),
            "",
            markdown_table(evals),
            "",
            markdown_table(by_level, digits=2),
            "",
            markdown_table(training),
            "",
        ]
    )


def lenient_text(runs: Sequence[Run]) -> str:
    r"""Whether the lenient figures (an answer found anywhere) equal the strict ones in ``runs``' evaluations.

    >>> ev = {"pass@1": 0.5, "lenient_pass@1": 0.5, "greedy_pass@1": 0.7, "lenient_greedy_pass@1": 0.7}
    >>> lenient_text([Run("qae-seed0", "qae", 0, {}, [], ev, ev)])
    'in the runs above the largest gap is 0.000'
    """
    gaps = [
        getattr(r, when)[f"lenient_{key}"] - getattr(r, when)[key]
        for r in runs
        for when in ("before", "after")
        for key in ("pass@1", "greedy_pass@1")
    ]
    if not gaps:
        raise ValueError("no evaluated runs to compare the lenient figures in")
    return f"in the runs above the largest gap is {max(gaps):.3f}"


def reference_text(runs: Sequence[Run]) -> str:
    r"""``data/reference_runs/README.md``'s table of the four methods (:func:`qae_lab.analysis.compare.summary_table`),
    mean ± std over seeds, and each method's sampled pass@1 after training against the mean baseline's (a - b with
    its 95% interval: :func:`qae_lab.analysis.compare.versus_baseline`).

    >>> reference_text(load_runs(find_reference_runs())).splitlines()[5][:36]
    '| mean | 0.278±0.000 | 0.586±0.009 |'
    """
    table = summary_table(runs)
    if {"mean", "qae"} - {row["method"] for row in table}:
        raise ValueError(f"the reference runs need the mean and qae methods, got {[r['method'] for r in table]}")
    columns = ["pass@1 before", "pass@1 after", "greedy pass@1 after", "pass@8 after", "zero-adv frac", "train var"]
    rows = [{"method": row["method"], **{c: row[c] for c in columns}} for row in table]
    vs = {r["group"]: r["- mean"] for r in versus_baseline(table, "pass@1 after")}
    for row in rows:
        row["pass@1 after - mean"] = vs[row["method"]]
    return "\n".join(
        [
            "",
            "Mean ± std over the seeds (the training variance: the reward's, detrended, window 20):",
            "",
            markdown_table(rows),
            "",
        ]
    )


def scoreboard_text(root: str | Path = ROOT) -> str:
    r"""The lab's scoreboard, for the README and docs/workshop.md: the claims of both papers against the settings that
    test them, one verdict a cell (:func:`qae_lab.analysis.claims.matrix` of every committed setting,
    :func:`qae_lab.analysis.evidence.judge_all`), and what each verdict means (:data:`qae_lab.analysis.claims.VERDICTS`).

    >>> "| sequence policy | sums model | sums model, lr 3e-4 | CPU preset |" in scoreboard_text()
    True
    """
    judged = judge_all()
    return "\n".join(
        [
            "",
            markdown_table(matrix(judged)),
            "",
            markdown_table([{"verdict": w, "meaning": m} for w, m in VERDICTS.items()]),
            "",
        ]
    )


def claim_card_text(root: str | Path = ROOT) -> str:
    r"""The README's claim card: six verdicts in plain words (:func:`qae_lab.analysis.claims.claim_card`).

    >>> claim_card_text().splitlines()[1]
    '| the paper says | measured on | verdict | how sure |'
    """
    return "\n".join(["", markdown_table(claim_card(judge_all())), ""])


def sentence_text(sentence: Callable[[], str]) -> Callable[[Path], str]:
    r"""A passage that is one sentence of :mod:`qae_lab.analysis.takeaways`, wrapped as the READMEs are.

    >>> sentence_text(sgd_sentence)(ROOT).startswith("\nUnder plain SGD")
    True
    """
    return lambda root: "\n" + _wrap(sentence()) + "\n"


def dynamic_sampling_text(root: str | Path = ROOT) -> str:
    r"""docs/dynamic-sampling.md's table: QAE with and without dynamic sampling on the committed runs
    (:func:`qae_lab.analysis.phenomena.dynamic_sampling_rows`).

    >>> dynamic_sampling_text().splitlines()[1].startswith("| method | seeds | pass@1 before |")
    True
    """
    rows = dynamic_sampling_rows(load_experiment(Path(root) / REFERENCE_RUNS, "dynamic_sampling"))
    return "\n".join(["", markdown_table(rows, digits={"completions per batch": 1, "train s": 0}), ""])


def phenomenon_search_text(root: str | Path = ROOT) -> str:
    r"""docs/notebook-notes.md's table of the entropy phenomenon search: every try of the mean baseline, what it
    changed, its entropy ratios, reward, clipped share and time (:func:`qae_lab.analysis.phenomena.search_rows`), and
    the setting :func:`~qae_lab.analysis.phenomena.choose_setting` takes.

    >>> phenomenon_search_text().splitlines()[1].startswith("| try | changed | peak / start | final / start |")
    True
    """
    rows = load_search("phenomenon", Path(root) / REFERENCE_RUNS)
    choice = choose_setting(rows)
    chosen = (
        f"Chosen: **{choice['chosen']}**, an {choice['phenomenon']} in {choice['showed']} seeds."
        if choice["chosen"]
        else "Chosen: none (no setting showed it in most of three seeds)."
    )
    return "\n".join(["", markdown_table(search_rows(rows)), "", chosen, ""])


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
    r"""Notebook 04's run on a free Colab T4 (the T4 preset with :data:`qae_lab.runs.presets.GPU_RUN`), estimated by
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


def _clock(seconds: float) -> str:
    r"""Seconds as a reader counts them.

    >>> _clock(47.4), _clock(167.0), _clock(600.0)
    ('47 s', '2 min 47 s', '10 min 0 s')
    """
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


_CPU_JOBS = {
    "main_job": "the README's main job (`--preset cpu-demo`: 400 steps, two evaluations)",  # with --main-job
    "full_nb04": "notebook 04's whole CPU path, 400 steps and two evaluations (Run All)",  # with --full
    "cli": "`cpu-demo` from the command line, {steps} steps and two evaluations",
    "nb04": "notebook 04's CPU path, {steps} steps and two evaluations (Run All)",
    "nb08": "notebook 08, full mode",
}


def cpu_time_text(root: str | Path = ROOT, jobs: Sequence[str] = ("cli", "nb04", "nb08")) -> str:
    r"""The wall times of ``jobs`` on a CPU, idle and beside busy processes, from ``benchmarks/bench_threads.py``'s
    committed record: under the lab's thread policy, and in brackets at torch's default count.

    >>> [line for line in cpu_time_text(jobs=["cli"]).splitlines() if line.startswith("| job")]
    ['| job | idle | beside 1 busy process | beside 2 busy processes |']
    """
    rec = json.loads((Path(root) / THREAD_POLICY).read_text(encoding="utf-8"))
    default, loads = str(rec["torch_default"]), ("0", "1", "2")

    def cell(cols: dict | None) -> str:
        if not cols:
            return "not measured"
        if "policy" not in cols:  # the main job: the policy alone
            return _clock(cols["wall_s"])
        at_default = cols[default]
        shown = _clock(at_default["wall_s"]) if "wall_s" in at_default else f"over {_clock(at_default['over_s'])}"
        return f"{_clock(cols['policy']['wall_s'])} ({shown})"

    rows = []
    for job in jobs:
        by_load = _policy_runs(rec, job)
        label = _CPU_JOBS[job].format(steps=rec["steps"])
        names = {"0": "idle", "1": "beside 1 busy process", "2": "beside 2 busy processes"}
        rows.append({"job": label, **{names[n]: cell(by_load.get(n)) for n in loads}})
    about = (
        f"Measured by `benchmarks/bench_threads.py` on {rec['date']}, on {rec['cores']} CPU cores, idle and beside "
        f"processes that keep a core busy each (a browser, a second notebook), under the lab's thread policy "
        f'(docs/processes.md, "CPU threads")'
        + (f"; in brackets, at torch's default of {default} threads" if set(jobs) & set(rec["rows"]) else "")
        + ":"
    )
    return "\n".join(["", _wrap(about), "", markdown_table(rows), ""])


def _policy_runs(rec: dict, job: str) -> dict:
    # load -> the job's columns in the record (the main job and the 400-step path: the policy's run alone)
    if job == "main_job":
        return rec["main_job"]
    if job == "full_nb04":
        return {load: got["nb04"] for load, got in rec["full"].items()}
    return rec["rows"][job]


def long_run_ratios(record: dict) -> list[dict]:
    r"""The 400-step runs of ``benchmarks/bench_threads.py``'s record, under the policy: notebook 04's whole CPU path
    against the command line with its settings (``--full``), and the README's main job (``--main-job``), at each load
    measured, with the ratio each target is set on.

    >>> rec = {"full": {"0": {"cli": {"wall_s": 300.0}, "nb04": {"wall_s": 330.0}}},
    ...        "main_job": {"0": {"wall_s": 200.0}, "2": {"wall_s": 450.0}}}
    >>> [(r["job"], r["busy beside"], r["ratio"]) for r in long_run_ratios(rec)]
    [('notebook 04 / command line, 400 steps', 0, 1.1), ("the README's main job, beside two / idle", 2, 2.25)]
    """
    out = [
        {
            "job": "notebook 04 / command line, 400 steps",
            "busy beside": int(load),
            "seconds": f"{got['nb04']['wall_s']} / {got['cli']['wall_s']}",
            "ratio": round(got["nb04"]["wall_s"] / got["cli"]["wall_s"], 2),
        }
        for load, got in record.get("full", {}).items()
    ]
    main = record.get("main_job", {})
    if "0" in main and "2" in main:
        out.append(
            {
                "job": "the README's main job, beside two / idle",
                "busy beside": 2,
                "seconds": f"{main['2']['wall_s']} / {main['0']['wall_s']}",
                "ratio": round(main["2"]["wall_s"] / main["0"]["wall_s"], 2),
            }
        )
    return out


def thread_ratios(record: dict) -> list[dict]:
    r"""One row per (job, load) of ``benchmarks/bench_threads.py``'s record: the seconds under the policy and at each
    fixed count, the policy's over the fastest fixed count's, and notebook 04's over the command line's (both under
    the policy).

    >>> rec = {"torch_default": 2, "rows": {
    ...     "cli": {"0": {"policy": {"wall_s": 10.0}, "1": {"wall_s": 12.0}, "2": {"wall_s": 9.0}}},
    ...     "nb04": {"0": {"policy": {"wall_s": 11.0}, "1": {"wall_s": 13.0}, "2": {"wall_s": 10.0}}}}}
    >>> [(r["job"], r["policy / fastest fixed"], r["notebook 04 / command line"]) for r in thread_ratios(rec)]
    [('command line', 1.11, ''), ('notebook 04', 1.1, 1.1)]
    """
    out = []
    for job, by_load in record["rows"].items():
        for load, cols in by_load.items():
            # a run stopped after over_s seconds was slower than that: never the fastest (policy's time x --cap)
            fixed = {n: c["wall_s"] for n, c in cols.items() if n != "policy" and "wall_s" in c}
            cli = record["rows"].get("cli", {}).get(load, {}).get("policy")
            out.append(
                {
                    "job": THREAD_JOBS[job],
                    "busy beside": int(load),
                    "policy (s)": cols["policy"]["wall_s"],
                    **{
                        f"{n} thread{'s' * (n != '1')}{' (default)' * (int(n) == record['torch_default'])} (s)": c.get(
                            "wall_s", f"> {c.get('over_s')}"
                        )
                        for n, c in sorted(cols.items(), key=lambda item: int(item[0]) if item[0] != "policy" else 0)
                        if n != "policy"
                    },
                    "policy / fastest fixed": round(cols["policy"]["wall_s"] / min(fixed.values()), 2),
                    "notebook 04 / command line": round(cols["policy"]["wall_s"] / cli["wall_s"], 2)
                    if job == "nb04" and cli
                    else "",
                }
            )
    return out


def thread_policy_text(root: str | Path = ROOT) -> str:
    r"""docs/processes.md's table: :func:`thread_ratios` of the committed record.

    >>> "| job | busy beside | policy (s) |" in thread_policy_text()
    True
    """
    rec = json.loads((Path(root) / THREAD_POLICY).read_text(encoding="utf-8"))
    about = (
        f"`benchmarks/bench_threads.py` on {rec['date']}, {rec['cores']} cores, one run of each, interleaved; the "
        f"command line and notebook 04 train {rec['steps']} steps and evaluate before and after (notebook 04's CPU "
        f'settings), notebook 08 runs in full mode; the record\'s `notes` say how it was assembled. Wall seconds; "> N": '
        f"stopped after N seconds, slower than that:"
    )
    parts = ["", _wrap(about), "", markdown_table(thread_ratios(rec), digits=2), ""]
    long_runs = long_run_ratios(rec)
    if long_runs:
        parts += [
            _wrap(
                "The 400-step runs under the policy (`--full`: the command line with notebook 04's settings; "
                "`--main-job`: `python -m qae_lab train --preset cpu-demo`), wall seconds:"
            ),
            "",
            markdown_table(long_runs, digits=2),
            "",
        ]
    return "\n".join(parts)


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

NOTEBOOKS = Path("notebooks")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


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
        "scoreboard": scoreboard_text,
        "claim-card": claim_card_text,
        "sgd": sentence_text(sgd_sentence),
        "saah": sentence_text(saah_sentence),
        "phenomenon": sentence_text(phenomenon_sentence),
        "cpu-demo": lambda root: cpu_demo_text(root / REFERENCE_RUNS),
        "lenient": lambda root: lenient_text([r for r in _reference(root) if r.method == "qae"]),
        "workshop-routes": routes_text,
        "cpu-time": lambda root: cpu_time_text(root, ["main_job", "cli"]),
    },
    str(REFERENCE_RUNS / "README.md"): {
        "reference-runs": lambda root: reference_text(_reference(root)),
    },
    "docs/dynamic-sampling.md": {
        "dynamic-sampling": dynamic_sampling_text,
    },
    "docs/workshop.md": {
        "scoreboard": scoreboard_text,
        "sgd": sentence_text(sgd_sentence),
        "saah": sentence_text(saah_sentence),
        "cpu-demo": lambda root: cpu_demo_text(root / REFERENCE_RUNS),
        "gpu-memory": lambda root: gpu_memory_text(),
        "gpu-time": gpu_time_text,
        "cpu-time": lambda root: cpu_time_text(root, ["full_nb04", "cli", "nb04", "nb08"]),
        "workshop-minutes": notebook_table_text,
        "workshop-plans": workshop_plan_text,
        "answer-key": answer_key_text,
    },
    "docs/notebook-notes.md": {
        "sgd": sentence_text(sgd_sentence),
        "phenomenon-search": phenomenon_search_text,
        "phenomenon": sentence_text(phenomenon_sentence),
    },
    "docs/processes.md": {
        "thread-policy": thread_policy_text,
    },
}


MINUTES = "minutes"  # the passage of each notebook's opening lines that states its time (minutes_text)


def _with_minutes(path: Path, root: Path) -> tuple[str, str]:
    """(a notebook's JSON text now, the same with its opening cell's minutes passage regenerated)."""
    now = path.read_text(encoding="utf-8")
    nb = json.loads(now)
    head = nb["cells"][0]
    head["source"] = lines(replace_block(_source(head), MINUTES, minutes_text(path.name[:2], root)))
    return now, json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def lines(text: str) -> list[str]:
    """A cell's source as a notebook stores it: its lines, each but the last with its newline."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def render(
    root: str | Path = ROOT, blocks: Mapping[str, Mapping[str, Callable[[Path], str]]] = BLOCKS
) -> dict[Path, tuple[str, str]]:
    r"""``{path: (its text now, its text with every passage regenerated)}`` under ``root``: the READMEs of ``blocks``,
    then each notebook's opening lines (:data:`MINUTES`); writes nothing.

    >>> [str(path.relative_to(ROOT)) for path in render()][:4]
    ['README.md', 'data/reference_runs/README.md', 'docs/dynamic-sampling.md', 'docs/workshop.md']
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
    for path in sorted((root / NOTEBOOKS).glob("[0-9][0-9]_*.ipynb")):
        out[path] = _with_minutes(path, root)
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
