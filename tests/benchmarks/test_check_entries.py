"""benchmarks/check_entries.py: one loss call enters qae_lab._checks where its inputs enter, not at every hop."""

from __future__ import annotations

from testkit.scripts import load_script

check_entries = load_script("benchmarks/check_entries.py")

# where grpo_loss's inputs are checked (its own check, and H~'s range, shared with horizon_weights), and the metrics'
# read-backs to the host (one transfer each): nothing else of the loss's rooms may call a check
BOUNDARY = {("loss", "_checked_inputs"), ("horizon", "check_normalised_entropy")}
READ_BACKS = {("horizon", "_weight_stats"), ("ledger", "_ledger_parts"), ("loss", "_cov_control")}


def test_one_loss_call_checks_its_inputs_once():
    counts = check_entries.public_loss_entries()
    callers = {(module, caller) for module, caller, _ in counts}
    assert callers <= BOUNDARY | READ_BACKS, callers - BOUNDARY - READ_BACKS
    assert {check for (module, caller, check) in counts if (module, caller) in READ_BACKS} == {"host_floats"}
    # 8 for the inputs (the mask, the advantages, old log-probs, entropies, H~, hard_rows; two value guards), 3 reads
    assert sum(counts.values()) <= 11, counts
