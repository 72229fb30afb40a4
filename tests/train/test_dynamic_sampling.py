"""DAPO's dynamic sampling: the batch assembled from the rounds (hand-built cases), the refill draw, and QAETrainer
dropping the groups without signal and refilling to TRL's batch size, with every baseline, within the cap on rounds,
logged; its refusals. The trainer tests run the embedded model on the CPU with a scripted reward, so which groups
carry signal is known."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from testkit.tiny_runs import tiny_trainer
from trl.trainer.utils import RepeatSampler

from qae_lab.advantages import signal_groups
from qae_lab.methods import method_settings
from qae_lab.metric_names import DYNAMIC_SAMPLING_METRICS, DYNAMIC_SAMPLING_ZERO_ADV_FRAC
from qae_lab.task import rewards
from qae_lab.train import trainer as trainer_module
from qae_lab.train.config import QAEConfig
from qae_lab.train.dynamic_sampling import assemble, epoch_order, epoch_walk, refill_prompts, refill_size

G = 2


def _round(prompt_width, completion_width, advantages, first_id):
    """A generation batch of len(advantages) rows: prompt ids first_id + row, left-padded by one column on odd rows;
    completions right-padded by one column on odd rows."""
    n = len(advantages)
    prompt = torch.tensor([[first_id + i] * prompt_width for i in range(n)])
    prompt_mask = torch.ones(n, prompt_width, dtype=torch.long)
    completion = torch.tensor([[100 + first_id + i] * completion_width for i in range(n)])
    completion_mask = torch.ones(n, completion_width, dtype=torch.long)
    prompt_mask[1::2, 0] = 0
    completion_mask[1::2, -1] = 0
    return {
        "prompt_ids": prompt,
        "prompt_mask": prompt_mask,
        "completion_ids": completion,
        "completion_mask": completion_mask,
        "old_per_token_logps": -torch.ones(n, completion_width),
        "advantages": torch.tensor(advantages, dtype=torch.float),
        "prompt_hard": torch.zeros(n, dtype=torch.bool),
        "num_items_in_batch": completion_mask.sum(),
    }


def test_the_batch_takes_the_groups_with_signal_in_order_padded_to_the_widest_round():
    first = _round(2, 3, [0, 0, 1, -1, 0, 0], first_id=0)  # groups: none, signal, none
    second = _round(3, 2, [0.5, 0, 0, 0, 0, -2], first_id=10)  # signal, none, signal
    signal = [signal_groups(r["advantages"], G) for r in (first, second)]
    assert [s.tolist() for s in signal] == [[False, True, False], [True, False, True]]
    batch, short = assemble([first, second], signal, G, n_groups=2, pad_token_id=-1)
    assert short == 0
    # rows 2, 3 of the first round, then rows 0, 1 of the second; prompts left-padded, completions right-padded
    assert batch["prompt_ids"].tolist() == [[-1, 2, 2], [-1, 3, 3], [10, 10, 10], [11, 11, 11]]
    assert batch["prompt_mask"].tolist() == [[0, 1, 1], [0, 0, 1], [1, 1, 1], [0, 1, 1]]
    assert batch["completion_ids"].tolist() == [[102, 102, 102], [103, 103, 103], [110, 110, -1], [111, 111, -1]]
    assert batch["completion_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]]
    assert batch["old_per_token_logps"].tolist() == [[-1, -1, -1]] * 2 + [[-1, -1, 0]] * 2
    assert batch["advantages"].tolist() == [1, -1, 0.5, 0]
    assert int(batch["num_items_in_batch"]) == 3 + 2 + 2 + 1  # counted again over the batch


def test_the_refilled_batchs_token_count_leaves_out_the_tool_tokens_as_trl_does():
    # TRL's num_items_in_batch (what dapo's loss divides by) sums completion_mask * tool_mask where the batch has a
    # tool_mask (tool results are 0 in it)
    # Planted bug: assemble's `mask = ... completion_mask * tool_mask` as `mask = batch["completion_mask"]` -> the
    # count is 3 + 2 + 2 + 1 = 8 and the num_items_in_batch assert fails
    first = {**_round(1, 3, [1, -1, 0, 0], first_id=0), "tool_mask": torch.tensor([[1, 0, 1], [1, 1, 1]] * 2)}
    second = {**_round(1, 2, [0.5, 0], first_id=10), "tool_mask": torch.tensor([[0, 1], [1, 1]])}
    signal = [signal_groups(r["advantages"], G) for r in (first, second)]
    batch, short = assemble([first, second], signal, G, n_groups=2, pad_token_id=0)
    assert short == 0
    assert batch["completion_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]]
    assert batch["tool_mask"].tolist() == [[1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]]  # right-padded with 1, as TRL
    # the products, row by row: [1, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 0]
    assert int(batch["num_items_in_batch"]) == 2 + 2 + 1 + 1


def test_past_the_cap_the_first_rounds_groups_without_signal_keep_the_size():
    first = _round(1, 1, [0, 0, 1, 0, 0, 0], first_id=0)
    batch, short = assemble([first], [signal_groups(first["advantages"], G)], G, n_groups=3, pad_token_id=0)
    assert short == 2 and batch["prompt_ids"].flatten().tolist() == [2, 3, 0, 1, 4, 5]  # signal first


def test_past_the_cap_the_padding_comes_from_the_first_round_when_later_rounds_lack_signal_too():
    # as assemble and docs/dynamic-sampling.md document: the groups with signal of every round, then groups without
    # signal from the first round, in order (verl stops with an error there)
    # Planted bug: the padding `picks += [(0, b) ... (~signal[0])]` taken from the last round (`len(rounds) - 1`,
    # `~signal[-1]`) -> the padded groups are (20, 21), (22, 23) and the group assert fails
    first = _round(1, 1, [0, 0, 0, 0, 0, 0], first_id=0)  # none, none, none
    second = _round(1, 1, [1, -1, 0, 0], first_id=10)  # signal, none
    third = _round(1, 1, [0, 0, 0, 0], first_id=20)  # none, none
    signal = [signal_groups(r["advantages"], G) for r in (first, second, third)]
    assert [s.tolist() for s in signal] == [[False] * 3, [True, False], [False, False]]
    batch, short = assemble([first, second, third], signal, G, n_groups=3, pad_token_id=0)
    assert short == 2
    groups = batch["prompt_ids"].view(3, G).tolist()  # one row per group of G, prompts of width 1
    assert sorted(map(tuple, groups)) == [(0, 1), (2, 3), (10, 11)]  # round 2's signal, round 1's first two
    advantages = dict(zip(map(tuple, groups), batch["advantages"].view(3, G).tolist(), strict=True))
    assert advantages == {(0, 1): [0, 0], (2, 3): [0, 0], (10, 11): [1, -1]}  # each group with its own advantages


def test_a_key_it_does_not_know_is_refused_by_name():
    first = {**_round(1, 1, [1, 0], first_id=0), "pixel_values": torch.zeros(2, 3)}
    with pytest.raises(ValueError, match=r"holding \['pixel_values'\] \(round 0\).*dynamic_sampling=False"):
        assemble([first], [torch.tensor([True])], G, n_groups=1, pad_token_id=0)


def _sampler_epochs(n_rows, batch_size, epochs, seed):
    """The prompts TRL's own sampler hands out, generation batch by generation batch, over `epochs` epochs."""
    sampler = RepeatSampler(range(n_rows), mini_repeat_count=G, batch_size=batch_size, repeat_count=3, seed=seed)
    batches = []
    for _ in range(epochs):  # one iteration of the sampler per epoch, as the Trainer's loop does
        rows = list(sampler)[::G]  # one per group
        batches += [rows[k : k + batch_size] for k in range(0, len(rows), batch_size * 3)]  # repeat_count=3 times each
    return batches


def test_the_walk_is_the_order_trls_sampler_hands_out():
    # planted: refills from a permutation of their own (seeded per epoch) instead of the sampler's: they were not the
    # next prompts TRL trains on
    batches = _sampler_epochs(11, 3, epochs=3, seed=7)  # 3 batches an epoch, rows 9 and 10 dropped each epoch
    assert len(batches) == 9 and all(len({r for b in batches[e * 3 : e * 3 + 3] for r in b}) == 9 for e in range(3))
    for generation in range(6):
        epoch_end = (generation // 3 + 2) * 3  # the walk ends with the next epoch
        expected = [r for b in batches[generation + 1 : epoch_end] for r in b]
        assert list(epoch_walk(11, 3, generation, seed=7)) == expected


def test_refills_take_the_next_prompts_of_the_epoch_the_batch_lacks():
    # by hand, without shuffling: 7 rows, batches of 2, so 3 an epoch (row 6 dropped); row 5 repeats row 2's prompt
    prompts = ["a", "b", "c", "d", "e", "c", "g"]
    walk = epoch_walk(7, 2, 1, seed=0, shuffle=False)  # generation batch 1 held rows 2, 3
    taken = {"c", "d"}
    # the rest of epoch 0 (4; 5 is prompt "c" again), then epoch 1 from its start (0, 1)
    assert refill_prompts(walk, 3, taken, prompts.__getitem__) == [4, 0, 1]
    assert refill_prompts(walk, 2, taken, prompts.__getitem__) == []  # epoch 1's rows 2-5: all in the batch already
    assert taken == {"a", "b", "c", "d", "e"}
    assert list(epoch_walk(7, 2, 2, seed=0, shuffle=False)) == [0, 1, 2, 3, 4, 5]  # the epoch's last batch: epoch 1
    with pytest.raises(ValueError, match="at least one batch"):
        next(epoch_walk(1, 2, 0, seed=0))


def test_a_training_set_of_exactly_one_batch_is_walked_not_refused():
    # the boundary of the "at least one batch" refusal: n_rows // batch_size == 1 is allowed; every generation batch
    # is the epoch's last, so the walk is the next epoch's one batch (a trailing row is dropped, as the sampler does)
    # Planted: epoch_walk's `if chunks < 1` as `if chunks <= 1` or `if chunks < 2` -> ValueError, the test fails
    assert list(epoch_walk(2, 2, 0, seed=0, shuffle=False)) == [0, 1]
    assert list(epoch_walk(3, 2, 4, seed=0, shuffle=False)) == [0, 1]  # row 2 dropped each epoch
    with pytest.raises(ValueError, match=r"at least one batch \(2 rows\), got 1"):  # one row short still refused
        next(epoch_walk(1, 2, 0, seed=0))


def test_a_refill_rounds_prompts_differ_from_step_to_step():
    # every pair of steps is compared: a chained `a != b != c` only compares neighbours (a != b and b != c), so a
    # refill that repeats two steps apart passed it.
    # Planted bug: epoch_walk's `divmod(generation, chunks)` as `divmod(generation % 2, chunks)` (the order forgets
    # all but the parity of the step): generation 2 refills generation 0's prompts and 3 generation 1's, neighbours
    # still differ -> the by-hand list and both `len(set(...)) == count` asserts fail
    def refill(n_rows, batch_size, generation, batch, **order):  # the first refill round of a generation batch
        walk = epoch_walk(n_rows, batch_size, generation, **order)
        return tuple(refill_prompts(walk, batch_size, set(batch), int))

    # by hand, without shuffling: 8 rows, batches of 2 (rows 2g, 2g+1); the last batch of the epoch refills from the
    # next epoch's start
    plain = [refill(8, 2, g, {2 * g, 2 * g + 1}, seed=0, shuffle=False) for g in range(4)]
    assert plain == [(2, 3), (4, 5), (6, 7), (0, 1)]
    assert len(set(plain)) == 4
    # shuffled, two epochs of TRL's own sampler's batches
    batches = _sampler_epochs(11, 3, epochs=3, seed=7)
    shuffled = [refill(11, 3, g, batches[g], seed=7) for g in range(6)]
    assert all(len(r) == 3 and not set(r) & set(b) for r, b in zip(shuffled, batches, strict=False))
    assert len(set(shuffled)) == 6


def test_a_round_generates_ceil_oversample_times_the_groups_still_needed():
    assert [refill_size(n, 1.0) for n in (1, 2, 5)] == [1, 2, 5]  # no over-sampling: what is missing
    assert [refill_size(n, 1.5) for n in (1, 2, 5)] == [2, 3, 8]
    assert refill_size(10, 1.1) == 11  # 1.1 * 10 is 11.000000000000002 in floats


# ---------------------------------------------------------------- in QAETrainer


def _scripted_reward(calls, no_signal):
    """A 0/1 reward: every completion of a prompt whose id `no_signal` picks scores 1 (a group without signal);
    the others alternate 1, 0 within the group (signal, whatever the baseline). Records each call's prompt ids."""

    def correctness_reward(completions, id, **kwargs):
        calls.append(list(id))
        return [1.0 if no_signal(p) else float(i % 2 == 0) for i, p in enumerate(id)]

    return correctness_reward


def _trained_batches(trainer):
    batches = []
    real = trainer._dynamic_sampling

    def spy(*args):
        batches.append(real(*args))
        return batches[-1]

    trainer._dynamic_sampling = spy
    return batches


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("method", ["mean", "qae", "qae+pos_mask"])
def test_groups_without_signal_are_dropped_and_refilled_for_every_baseline(tmp_path, monkeypatch, method):
    calls = []
    no_signal = {f"synthetic-5-{i}" for i in range(0, 32, 2)}  # half the prompts
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, no_signal.__contains__))
    settings = {**method_settings(method), "dynamic_sampling": True}
    trainer = tiny_trainer(tmp_path, max_steps=3, max_completion_length=8, **settings)
    batches = _trained_batches(trainer)
    trainer.train()
    assert len(batches) == 3
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "dynamic_sampling/rounds" in r]
    assert len(steps) == 3 and all(set(DYNAMIC_SAMPLING_METRICS) <= set(r) for r in steps)
    groups = [[c[i] for i in range(0, len(c), 4)] for c in calls]  # each call's prompts, one per group of 4
    # pos_mask zeroes the negative advantages: with one success in two, every group keeps a positive one
    assert sum(r["dynamic_sampling/generations"] for r in steps) == 4 * sum(map(len, groups))
    assert sum(r["dynamic_sampling/rounds"] for r in steps) == len(calls)
    assert sum(r["dynamic_sampling/groups_dropped"] for r in steps) == sum(p in no_signal for c in groups for p in c)
    assert sum(r["dynamic_sampling/groups_dropped"] for r in steps) >= 1  # the refill did something
    for batch in batches:  # TRL's batch size, every group with signal: QAE's and the mean's drops are the same
        assert batch["advantages"].shape == (8,) and bool(signal_groups(batch["advantages"], 4).all())
        assert batch["completion_ids"].shape[0] == batch["prompt_ids"].shape[0] == 8
    assert all(r["dynamic_sampling/groups_without_signal"] == 0 for r in steps)


@pytest.mark.slow(seconds=15)
def test_at_the_cap_the_batch_trains_with_what_it_has_and_says_so(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, lambda p: True))  # no signal anywhere
    trainer = tiny_trainer(tmp_path, max_steps=2, max_completion_length=8, dynamic_sampling=True)
    trainer.args.dynamic_sampling_max_rounds = 3
    trainer.train()
    steps = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "dynamic_sampling/rounds" in r]
    assert [r["dynamic_sampling/rounds"] for r in steps] == [3, 3] and len(calls) == 6
    assert [r["dynamic_sampling/groups_without_signal"] for r in steps] == [2, 2]
    assert [r["dynamic_sampling/zero_adv_frac"] for r in steps] == [1.0, 1.0]


@pytest.mark.slow(seconds=15)
def test_evaluation_never_refills(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, lambda p: True))
    trainer = tiny_trainer(tmp_path, max_completion_length=8, dynamic_sampling=True, per_device_eval_batch_size=8)
    metrics = trainer.evaluate(eval_dataset=trainer.train_dataset.select(range(4)))
    assert len(calls) == 2 and not any(k.startswith("eval_dynamic_sampling") for k in metrics)


def _rounds_by_step(trainer):
    """Spies on the trainer's generation calls: the optimizer step each was made at, in order."""
    steps = []
    real = trainer._generate_round
    trainer._generate_round = lambda *a: (steps.append(trainer.state.global_step), real(*a))[1]
    return steps


def _groups(batch):
    """The prompt of each group of a trained batch, as its unpadded token ids."""
    ids, mask = batch["prompt_ids"][::4], batch["prompt_mask"][::4]  # (B, P): one row per group of 4
    return [tuple(row[m.bool()].tolist()) for row, m in zip(ids, mask, strict=True)]


def _run_with_one_prompt_without_signal(tmp_path, monkeypatch, n_prompts, max_steps):
    """A dynamic-sampling run on the first `n_prompts` prompts, where prompt 0's groups carry no signal: its trained
    batches, each generation call's prompt ids (one per group) and the step each call was made at."""
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, {"synthetic-5-0"}.__contains__))
    trainer = tiny_trainer(tmp_path, max_steps=max_steps, max_completion_length=8, dynamic_sampling=True)
    trainer.train_dataset = trainer.train_dataset.select(range(n_prompts))  # batches of 2 prompts
    batches, steps = _trained_batches(trainer), _rounds_by_step(trainer)
    trainer.train()
    assert len(batches) == max_steps and len(calls) > max_steps  # prompt 0 lost its group: some refill happened
    return batches, [c[::4] for c in calls], steps


@pytest.mark.slow(seconds=20)
def test_a_batch_never_holds_a_prompt_twice(tmp_path, monkeypatch):
    # planted: the old refill (random rows of the whole training set, seeded by step and round) put a prompt of the
    # batch into it again: with 4 prompts, a refill of 2 drew the batch's other prompt
    batches, _, _ = _run_with_one_prompt_without_signal(tmp_path, monkeypatch, n_prompts=4, max_steps=4)
    for batch in batches:
        assert len(set(_groups(batch))) == 2 and bool(signal_groups(batch["advantages"], 4).all())


@pytest.mark.slow(seconds=15)
def test_the_zero_advantage_share_logged_is_the_trained_batchs(tmp_path, monkeypatch):
    # QAE's default K = 0.4: a group scored 1, 0, 1, 0 has its quantile baseline at 0, so its failures' advantages
    # are 0 (half the group); prompt 0's group (all 1) has only zeros. 4 prompts, 2 a step: one step's first round
    # holds prompt 0 ((4 + 2) / 8 = 0.75 zero), its refill replaces it with a group of signal: every trained batch
    # is two groups of signal, 4 / 8 = 0.5 zero
    # Planted bug: the metric from `first["advantages"]` (round 1) instead of `batch["advantages"]` -> the step
    # holding prompt 0 logs 0.75 and the logged-list assert fails
    batches, prompts, steps = _run_with_one_prompt_without_signal(tmp_path, monkeypatch, n_prompts=4, max_steps=2)
    first_rounds = [prompts[steps.index(s)] for s in range(2)]
    assert sum("synthetic-5-0" in c for c in first_rounds) == 1  # one step's round 1 held prompt 0
    assert [float((b["advantages"] == 0).float().mean()) for b in batches] == [0.5, 0.5]
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r[DYNAMIC_SAMPLING_ZERO_ADV_FRAC] for r in logged if DYNAMIC_SAMPLING_ZERO_ADV_FRAC in r] == [0.5, 0.5]


@pytest.mark.slow(seconds=20)
def test_refills_are_the_prompts_trl_trains_next(tmp_path, monkeypatch):
    # planted: the old random refill, and a walk that starts one batch late: both drew other prompts than TRL's next
    _, prompts, steps = _run_with_one_prompt_without_signal(tmp_path, monkeypatch, n_prompts=6, max_steps=4)
    first = {s: prompts[steps.index(s)] for s in range(4)}  # TRL's own batch of each step (3 an epoch)
    for i, s in enumerate(steps):
        if i != steps.index(s):  # a refill: the next prompts of TRL's order (the next batches'), not in the batch
            later = [p for t in range(s + 1, 4) for p in first[t] if p not in first[s]]
            assert prompts[i][: len(later)] == later[: len(prompts[i])]  # as far as this run's batches show it


@pytest.mark.slow(seconds=15)
def test_in_the_trainer_each_steps_refill_is_the_next_batchs_first_prompt(tmp_path, monkeypatch):
    # the second prompt of each of TRL's batches carries no signal, so each step refills one group: the next prompt
    # of the epoch's order, the first of the next batch (it carries signal: one refill round a step)
    # Planted bug: _dynamic_sampling's `generation = self._step // (...)` as `generation = 0` (the walk ignores the
    # step) -> step 2 refills step 0's prompt again, order[2] (neighbours still differ): the `refills ==` assert fails
    # (and the pairwise one below it would); test_refills_are_the_prompts_trl_trains_next passes with that plant
    order = [f"synthetic-5-{i}" for i in epoch_order(32, 0, seed=3)]  # TRL's sampler's, tiny_trainer's seed 3
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, set(order[1:8:2]).__contains__))
    trainer = tiny_trainer(tmp_path, max_steps=3, max_completion_length=8, dynamic_sampling=True)
    steps = _rounds_by_step(trainer)
    trainer.train()
    prompts = [c[::4] for c in calls]  # one per group of 4
    assert steps == [0, 0, 1, 1, 2, 2] and [prompts[i] for i in (0, 2, 4)] == [order[0:2], order[2:4], order[4:6]]
    refills = [tuple(prompts[i]) for i in (1, 3, 5)]
    assert refills == [(order[2],), (order[4],), (order[6],)]
    assert len(set(refills)) == 3  # every pair of steps differs


@pytest.mark.slow(seconds=20)
def test_oversampling_generates_ceil_factor_times_the_missing_groups_a_round(tmp_path, monkeypatch):
    # planted: a round of the groups still needed, without the factor: 2 groups a round, 16 completions a step
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, lambda p: True))  # no signal anywhere
    trainer = tiny_trainer(
        tmp_path, max_steps=1, max_completion_length=8, dynamic_sampling=True, dynamic_sampling_oversample=1.5
    )
    trainer.args.dynamic_sampling_max_rounds = 3
    trainer.train()
    (step,) = [
        r for r in map(json.loads, (tmp_path / "log.jsonl").read_text().splitlines()) if "dynamic_sampling/rounds" in r
    ]
    # TRL's 2 groups, then two rounds of ceil(1.5 x 2) = 3 groups, each in calls of at most TRL's 2
    assert [len(c) // 4 for c in calls] == [2, 2, 1, 2, 1]
    assert step["dynamic_sampling/rounds"] == 3 and step["dynamic_sampling/generations"] == (2 + 3 + 3) * 4
    assert step["dynamic_sampling/groups_dropped"] == 8 and step["dynamic_sampling/groups_without_signal"] == 2


@pytest.mark.slow(seconds=15)
def test_the_rounds_stop_when_the_order_holds_no_new_prompt(tmp_path, monkeypatch):
    # planted: rounds went on to the cap (10) with nothing left to draw
    calls = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(calls, lambda p: True))
    trainer = tiny_trainer(tmp_path, max_steps=1, max_completion_length=8, dynamic_sampling=True)
    trainer.train_dataset = trainer.train_dataset.select(range(4))
    trainer.train()
    (step,) = [
        r for r in map(json.loads, (tmp_path / "log.jsonl").read_text().splitlines()) if "dynamic_sampling/rounds" in r
    ]
    assert len(calls) == 2 and len({p for c in calls for p in c}) == 4  # the batch's 2 prompts, then the other 2
    assert step["dynamic_sampling/rounds"] == 2 and step["dynamic_sampling/groups_without_signal"] == 2


def test_refusals_name_the_setting_and_why(tmp_path):
    with pytest.raises(ValueError, match=r"scale_rewards='batch' would scale each group by the std of the round"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], dynamic_sampling=True, scale_rewards="batch")
    with pytest.raises(ValueError, match=r"dynamic_sampling_max_rounds must be"):
        QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], dynamic_sampling_max_rounds=0)
    several = SimpleNamespace(accelerator=SimpleNamespace(num_processes=2), train_dataset=[])
    with pytest.raises(ValueError, match=r"dynamic_sampling runs on one process; this run has 2"):
        trainer_module._check_dynamic_sampling(several)
    stream = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1), train_dataset=iter([]))
    with pytest.raises(ValueError, match=r"train_dataset is a list_iterator without rows to index"):
        trainer_module._check_dynamic_sampling(stream)


def _stop_after(step: int):
    import transformers

    class Stop(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                control.should_save, control.should_training_stop = True, True

    return Stop()


@pytest.mark.slow(seconds=30)
def test_a_resumed_run_refills_with_the_prompts_the_uninterrupted_run_drew(tmp_path, monkeypatch):
    # planted: the refill seeded with TRL's _step (which a new trainer starts at 0 again) drew step 0's prompts for the
    # resumed step 1: the resumed run's refills differed from the uninterrupted run's
    no_signal = {f"synthetic-5-{i}" for i in range(0, 32, 2)}
    settings = {"max_steps": 3, "max_completion_length": 8, "dynamic_sampling": True, "save_strategy": "no"}

    def refills(calls):  # the prompt ids of each refill round, one per group of 4 (round 1 is TRL's own batch)
        return [[c[i] for i in range(0, len(c), 4)] for c in calls]

    whole = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(whole, no_signal.__contains__))
    rounds_whole = []
    trainer = tiny_trainer(tmp_path / "whole", **settings)
    real = trainer._generate_round
    trainer._generate_round = lambda *a: (rounds_whole.append(trainer.state.global_step), real(*a))[1]
    trainer.train()

    cut = []
    monkeypatch.setattr(rewards, "correctness_reward", _scripted_reward(cut, no_signal.__contains__))
    first = tiny_trainer(tmp_path / "cut", callbacks=[_stop_after(1)], **{**settings, "save_strategy": "steps"})
    first.train()
    assert (tmp_path / "cut" / "checkpoint-1").is_dir() and first.state.global_step == 1
    resumed_calls = len(cut)
    rounds_cut = []
    second = tiny_trainer(tmp_path / "cut", **settings)
    real2 = second._generate_round
    second._generate_round = lambda *a: (rounds_cut.append(second.state.global_step), real2(*a))[1]
    second.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-1"))
    assert second.state.global_step == 3
    # the generation rounds of steps 1 and 2, uninterrupted and resumed: the same prompts, refills included
    later = [i for i, step in enumerate(rounds_whole) if step >= 1]
    assert rounds_cut == [rounds_whole[i] for i in later] and len(rounds_cut) > 2  # some refill happened
    assert refills(cut[resumed_calls:]) == refills([whole[i] for i in later])
