"""No credential is ever written: a planted secret offered on every route a run takes settings from (``--NAME VALUE``,
``--set``, a config file's fields and its ``env:``, ``QAEConfig`` from Python) is refused, and with the secret in the
process's environment (where credentials belong) no file that a run, its checkpoints and an export write holds it."""

from __future__ import annotations

import pytest
from testkit.tiny_runs import tiny_sets

from qae_lab.__main__ import main

SECRET = "hf_qaeLabPlantedSecret7d1e"


def files_holding(folder, secret: str) -> list[str]:
    """Every file under ``folder`` whose bytes hold ``secret`` (as text, UTF-8 or UTF-16, and in torch's pickles)."""
    needles = [secret.encode(), secret.encode("utf-16-le")]
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and any(n in p.read_bytes() for n in needles)
    )


def test_a_planted_secret_reaches_no_file_a_run_or_an_export_writes(tmp_path, capsys, monkeypatch):
    out, exported = tmp_path / "run", tmp_path / "exported"
    config = tmp_path / "run.yaml"
    config.write_text(f"hub_token: {SECRET}\n")
    env_config = tmp_path / "env.yaml"
    env_config.write_text(f"env:\n  WANDB_API_KEY: {SECRET}\n")
    routes = [
        ["--hub_token", SECRET],
        ["--set", f"hub_token={SECRET}"],
        ["--config", str(config)],
        ["--config", str(env_config)],
    ]
    for route in routes:  # each refused before anything is written
        assert main(["train", "--output-dir", str(out), *tiny_sets(), *route]) == 2
        said = capsys.readouterr()
        assert "carries a credential" in said.err and SECRET not in said.out + said.err
    assert not out.exists()
    from qae_lab.train.config import QAEConfig

    with pytest.raises(ValueError, match="hub_token carries a credential"):
        QAEConfig(output_dir=str(out), use_cpu=True, report_to=[], hub_token=SECRET)

    # where a credential belongs: the environment of the process (a login would put it in the Hub's own cache)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    assert main(["train", "--output-dir", str(out), *tiny_sets(["save_strategy=steps", "save_steps=1"])]) == 0
    assert main(["export", str(out), str(exported), "--dtype", "float32"]) == 0
    capsys.readouterr()
    written = sorted(p.name for p in out.iterdir())
    assert {"config.json", "log.jsonl", "report.html", "model", "checkpoint-2", "eval_after.json"} <= set(written)
    assert files_holding(out, SECRET) == [] and files_holding(exported, SECRET) == []
    assert files_holding(tmp_path, SECRET) == ["env.yaml", "run.yaml"]  # the scan finds a planted secret
