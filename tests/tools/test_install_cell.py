"""The notebooks' first cells (tools.install_cell), the repository's one address (qae_lab.lab.notebook), the committed
data found from anywhere (qae_lab.analysis.committed_data), and environment.yml on Colab's Python."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from qae_lab.analysis import compare, committed_data, phenomena, seqpolicy_runs
from tools import install_cell
from qae_lab.lab import notebook
from qae_lab import _project
from tools.install_cell import EXTRA_MODULES, EXTRAS, INSTALL_ENV, MARKER, notebook_extras, sync

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
URL = "https://github.com/qae-lab/qae_lab"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


# ---------------------------------------------------------------- the cells agree with what the command writes


def test_every_notebook_badge_and_install_cell_is_what_the_command_writes():
    stale = [p.name for p in sync(NB_DIR, write=False)]
    assert stale == [], f"run `python -m tools.install_cell` (their badge or install cell disagree): {stale}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_install_cell_runs_on_a_bare_python(path):
    cell = "".join(_cells(path)[1]["source"])
    assert cell.startswith(MARKER)
    tree = ast.parse(cell)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names  # before anything is installed
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))]
    assert max(len(line) for line in cell.splitlines()) <= 100
    assert f'"git+{URL}"' in cell and INSTALL_ENV in cell


def test_the_address_is_written_once_in_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["urls"]["Repository"] == URL == notebook.REPOSITORY_URL and notebook.REPO == "qae-lab/qae_lab"
    for path in NB_DIR.glob("*.ipynb"):  # the first two cells are the command's
        assert "github.com/qae-lab" not in json.dumps(_cells(path)[2:]), f"{path.name} writes the address itself"
    for path in (ROOT / "qae_lab").rglob("*.py"):  # code, not the docstrings' examples
        tree = ast.parse(path.read_text(encoding="utf-8"))
        owners = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))]
        docs = {id(n.body[0].value) for n in owners if n.body and isinstance(n.body[0], ast.Expr)}
        strings = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        ]
        assert not [s for s in strings if "github.com/qae-lab" in s], f"{path.name} writes the address itself"


def test_sync_rewrites_only_the_first_cells_and_adds_them_to_a_new_notebook(tmp_path):
    old = NB_DIR / "05_compare_runs.ipynb"
    shutil.copy(old, tmp_path / old.name)
    nb = json.loads(old.read_text())
    nb["cells"][1]["source"] = ["# Install qae_lab the old way\n", "pass"]
    nb["cells"][0]["source"][0] = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](x)\n"
    (tmp_path / old.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    new = {
        "cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# 00 · A new one"]}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "00_new.ipynb").write_text(json.dumps(new))
    (tmp_path / "notes.ipynb").write_text("{}")  # not a numbered notebook: left alone
    assert [p.name for p in sync(tmp_path)] == ["00_new.ipynb", old.name]
    assert (tmp_path / old.name).read_text() == old.read_text()  # byte for byte the committed file
    cells = _cells(tmp_path / "00_new.ipynb")
    assert [c["cell_type"] for c in cells] == ["markdown", "code"] and "".join(cells[0]["source"]).endswith("A new one")
    assert sync(tmp_path) == [] and (tmp_path / "notes.ipynb").read_text() == "{}"
    assert install_cell.main(["--check", "--notebooks", str(tmp_path)]) == 0
    with pytest.raises(ValueError, match="notebook_dir"):
        sync(tmp_path / "missing")


# ---------------------------------------------------------------- the extras each notebook installs


def test_extra_modules_are_pyproject_extras_by_import_name():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        names = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].replace("-", "_") for d in extras[extra]}
        assert set(modules) == names
    assert set(EXTRAS) <= {p.name[:2] for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_a_notebook_without_the_train_extra_imports_without_it(path):
    # statically: no train module imported in a cell, and every qae_lab module it names imports with them blocked.
    # (tests/testkit/nbexec.py runs such a notebook whole with them blocked: their lazy imports, e.g. the embedded
    # tokenizer that makes notebook 03 need [train], show there.)
    if "train" in notebook_extras(path.name):
        pytest.skip("installs the train extra")
    code = "\n".join("".join(c["source"]) for c in _cells(path)[2:] if c["cell_type"] == "code")
    tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    tops = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    tops |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    tops |= {
        f"qae_lab.{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "qae_lab"
        for a in n.names
    }
    assert not {t.split(".")[0] for t in tops} & set(EXTRA_MODULES["train"])
    blocked = ", ".join(map(repr, EXTRA_MODULES["train"]))
    imports = "; ".join(f"import {t}" for t in sorted(t for t in tops if t.startswith("qae_lab")))
    subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules.update({{m: None for m in ({blocked},)}}); {imports}"],
        check=True,
    )


# ---------------------------------------------------------------- where the cell installs from


@pytest.fixture
def run_cell(monkeypatch, tmp_path):
    """Runs an install cell in ``tmp_path`` with every module missing; returns the pip command it ran, or None."""
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: calls.append(cmd))

    def run(extras=("train",), present=()):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name in present else None)
        before = len(calls)
        exec(compile(install_cell.install_cell(extras), "<install cell>", "exec"), {})
        return calls[-1] if len(calls) > before else None

    return run


@pytest.mark.parametrize(
    "source,target",
    [
        ("/work/clone", "/work/clone[train]"),
        ("/w/qae_lab-0.2.0-py3-none-any.whl", "/w/qae_lab-0.2.0-py3-none-any.whl[train]"),
        ("git+file:///work/clone", "qae-lab[train] @ git+file:///work/clone"),
    ],
)
def test_the_environment_variable_comes_first(run_cell, monkeypatch, tmp_path, capsys, source, target):
    monkeypatch.setenv(INSTALL_ENV, source)
    (tmp_path / "qae_lab-9.0.0-py3-none-any.whl").write_bytes(b"")
    assert run_cell() == [sys.executable, "-m", "pip", "install", "-q", target]
    assert capsys.readouterr().out == f"installed qae_lab[train] from {source}\n"


def test_then_the_newest_wheel_in_the_working_directory_then_github(run_cell, monkeypatch, tmp_path):
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    assert run_cell()[-1] == f"qae-lab[train] @ git+{URL}"
    assert run_cell(extras=())[-1] == f"qae-lab @ git+{URL}"
    for version in ("0.9.0", "0.10.0", "0.2.1"):
        (tmp_path / f"qae_lab-{version}-py3-none-any.whl").write_bytes(b"")
    assert run_cell()[-1] == "qae_lab-0.10.0-py3-none-any.whl[train]"  # by version, not by name
    assert run_cell(extras=())[-1] == "qae_lab-0.10.0-py3-none-any.whl"


def test_a_no_op_only_where_every_needed_module_imports(run_cell, monkeypatch):
    monkeypatch.setenv(INSTALL_ENV, "/work/clone")
    assert run_cell(present=("qae_lab", *EXTRA_MODULES["train"])) is None
    assert run_cell(present=("qae_lab",)) is not None  # the train stack missing: installs
    assert run_cell(extras=(), present=("qae_lab",)) is None  # no extras: qae_lab is all it needs


# ---------------------------------------------------------------- the repository's address


def test_repository_url_prefers_the_checkout_then_the_installed_metadata(tmp_path, monkeypatch):
    mine = tmp_path / "pyproject.toml"
    mine.write_text('[project]\nname = "qae-lab"\n[project.urls]\nRepository = "https://github.com/me/fork"\n')
    assert notebook.repository_url(mine) == "https://github.com/me/fork"
    assert notebook.github_repo(notebook.repository_url(mine)) == "me/fork"

    class Meta:
        def get_all(self, key):
            assert key == "Project-URL"
            return ["Homepage, https://x.org", "Repository, https://github.com/them/lab"]

    class NoUrls(Meta):
        def get_all(self, key):
            return None

    monkeypatch.setattr(_project.importlib.metadata, "metadata", lambda dist: Meta())
    other = tmp_path / "other.toml"
    other.write_text('[project]\nname = "something-else"\n')
    assert (
        notebook.repository_url(other)
        == notebook.repository_url(tmp_path / "none.toml")
        == "https://github.com/them/lab"
    )  # not qae-lab's, or no file: the installed metadata
    mine.write_text('[project]\nname = "qae-lab"\n')
    with pytest.raises(ValueError, match="Repository"):
        notebook.repository_url(mine)
    monkeypatch.setattr(_project.importlib.metadata, "metadata", lambda dist: NoUrls())
    with pytest.raises(LookupError, match="Repository"):
        notebook.repository_url(None)
    with pytest.raises(ValueError, match="Repository must be https://github.com"):
        notebook.github_repo("https://gitlab.com/a/b")


# ---------------------------------------------------------------- the data travels with the package


def test_data_dir_finds_the_checkouts_data_upwards(tmp_path, monkeypatch):
    (tmp_path / "data" / "reference_runs").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert committed_data.data_dir("reference_runs") == tmp_path / "data" / "reference_runs"
    with pytest.raises(ValueError, match="name must be one of"):
        committed_data.data_dir("embedded")


def test_outside_a_checkout_the_packages_copy_serves_notebooks_05_06_07_09(tmp_path, monkeypatch):
    # an installed package: qae_lab/<folder> in site-packages, no data/ beside it and none above the cwd
    site = tmp_path / "site-packages" / "qae_lab"
    shutil.copytree(ROOT / "data" / "reference_runs", site / "reference_runs")
    shutil.copytree(ROOT / "data" / "seqpolicy", site / "seqpolicy_data")
    monkeypatch.setattr(committed_data, "_PACKAGE", site)
    monkeypatch.chdir(tmp_path)
    ref = committed_data.data_dir("reference_runs")
    assert ref == site / "reference_runs" == compare.find_reference_runs()
    assert len(compare.load_runs(ref)) >= 8  # notebook 05's reference runs
    for name in phenomena.EXPERIMENTS:  # notebook 06's
        assert phenomena.load_experiment(ref, name), name
    assert seqpolicy_runs.load_regimes()["runs"]  # notebook 07's
    assert seqpolicy_runs.load_findings()["runs"]  # notebook 09's (07's appendix)
    with pytest.raises(FileNotFoundError, match="data/seqpolicy"):
        committed_data.data_dir("seqpolicy", package=tmp_path / "nowhere")
    for name in ("05_compare_runs.ipynb", "06_phenomena_in_miniature.ipynb"):
        assert any('REF = data_dir("reference_runs")' in "".join(c["source"]) for c in _cells(NB_DIR / name)), name


def test_pyproject_installs_every_data_folder_in_the_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for name, folder in committed_data.DATA_FOLDERS.items():
        assert setuptools["package-dir"][f"qae_lab.{folder}"] == f"data/{name}"
        assert f"qae_lab.{folder}" in setuptools["packages"]
        patterns = setuptools["package-data"][f"qae_lab.{folder}"]
        suffixes = {p.suffix for p in (ROOT / "data" / name).rglob("*") if p.is_file()}
        assert suffixes <= {Path(p).suffix for p in patterns}, f"data/{name} holds {suffixes}, ships {patterns}"


# ---------------------------------------------------------------- environment.yml


# extras the conda environment leaves out, and why
NOT_IN_ENVIRONMENT = {
    "vllm": "GPU generation (vLLM and its CUDA torch): for a GPU machine, not a laptop's environment",
    "mutation": "mutation testing (python -m tools.mutation): a maintainer's tool, hours long, not a participant's",
}


def test_environment_yml_is_on_colabs_python_with_every_extra():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert f"python={notebook.COLAB_PYTHON}" in deps
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    (line,) = [d for d in pip if d.startswith("-e .[")]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(line[len("-e .[") : -1].split(",")) == set(extras) - set(NOT_IN_ENVIRONMENT)
