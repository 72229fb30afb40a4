"""Project-level checks: the README's commands, CI script, packaging metadata and docs agree."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]


def _readme_block(heading: str, lang: str = "bash") -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = _readme_block("Test").strip()
    ci = (ROOT / ".ci/run").read_text()
    ci_cmds = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert ci_cmds[-1] == test_cmd
    assert "set -euo pipefail" in ci
    # torch's CPU wheel goes in before anything that could pull a CUDA build
    assert ci.index("torch==2.13.0") < ci.index('-e ".[train,lab,dev]"')
    assert 'pip install -e ".[train,lab,dev]"' in _readme_block("Set up")
    # the fresh-Colab job runs before the main suite, and pins what Colab ships
    assert ci.index("bash .ci/fresh-colab") < ci.rindex(test_cmd)
    fresh = (ROOT / ".ci/fresh-colab").read_text()
    assert '-r "$COLAB_STACK"' in fresh and "COLAB_STACK=.ci/colab-stack.txt" in fresh
    stack = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in (ROOT / ".ci/colab-stack.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # Colab's whole stack, each package pinned exactly (what the install cells upgrade from)
    colab = {"torch": "2.11.0", "transformers": "5.15.0", "accelerate": "1.14.0", "peft": "0.20.0"}
    colab |= {"datasets": "4.0.0", "pyarrow": "18.1.0", "huggingface-hub": "1.27.0", "ipywidgets": "7.7.1"}
    colab |= {"plotly": "5.24.1", "ipykernel": "6.17.1", "numpy": "2.1.3", "anywidget": "0.9.21"}
    assert {name: stack.get(name) for name in colab} == colab
    assert "trl" not in stack  # not on Colab: the install cell brings it


def test_pyproject_dependencies():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "qae-lab" and meta["requires-python"] == ">=3.11"
    deps = {re.split(r"[<>=!~ ]", d, 1)[0]: d for d in meta["dependencies"]}
    assert deps["torch"] == "torch>=2.6"  # a range, no upper bound: users bring their CUDA build
    assert deps["ipywidgets"] == "ipywidgets>=7.7,<9"  # Colab ships 7.7
    assert {"numpy", "plotly", "anywidget"} <= set(deps)
    extras = meta["optional-dependencies"]
    assert any(d.startswith("trl>=1.16") for d in extras["train"])
    # vLLM through TRL's own extra (its vLLM bounds, aiohttp, requests), within the train extra's trl range
    (trl,) = [d for d in extras["train"] if d.startswith("trl")]
    assert extras["vllm"] == [trl.replace("trl", "trl[vllm]", 1)]
    assert {"transformers", "peft", "accelerate", "datasets"} <= {re.split(r"[<>=]", d)[0] for d in extras["train"]}
    assert any(d.startswith("jupyterlab") for d in extras["lab"])


def test_equations_doc_names_real_functions():
    text = (ROOT / "docs/equations.md").read_text()
    names = set(re.findall(r"`(qae_lab(?:\.\w+)+)`", text))
    assert len(names) >= 10
    for dotted in names:  # module.function, or module.Class.method
        parts, obj, rest = dotted.split("."), None, []
        for cut in range(2, len(parts) + 1):  # the longest importable module prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                break
            rest = parts[cut:]
        for attr in rest:
            obj = getattr(obj, attr)
        assert callable(obj) or type(obj).__name__ == "module", dotted


def test_checks_module_is_generic():
    # input checks import nothing of qae_lab, so the maths can import them without a cycle;
    # the paper's rank ceil(K*G) lives beside the quantile baseline that uses it
    src = (ROOT / "qae_lab/_checks.py").read_text()
    assert not re.search(r"^\s*(from|import) qae_lab", src, re.M)
    assert "quantile_rank" not in src
    assert importlib.import_module("qae_lab.advantages").quantile_rank(0.6, 5) == 3


def test_equations_doc_names_the_training_code():
    # each equation's row goes on to the QAETrainer method that applies it in training, or says "—"
    text = (ROOT / "docs/equations.md").read_text()
    trainer_cls = importlib.import_module("qae_lab.train.trainer").QAETrainer
    rows, applied = 0, set()
    for table in re.findall(r"^\| # \|.*?(?=\n\n|\Z)", text, re.S | re.M):
        header, _, *body = table.splitlines()
        col = [c.strip() for c in header.strip("|").split("|")].index("in training")
        for row in body:
            cell = row.strip("|").split(" | ")[col].strip()
            methods = re.findall(r"`qae_lab\.train\.trainer\.QAETrainer\.(\w+)`", cell)
            in_loss = re.findall(r"`qae_lab\.loss\.(\w+)`", cell)
            assert cell.startswith("—") or methods or in_loss, row
            applied.update(methods + [f"loss.{name}" for name in in_loss])
            rows += 1
    assert rows >= 30
    # by method name, never by line; our own overrides, not methods TRL would run anyway
    assert not re.search(r"trainer\.py:\d+|line \d+", text)
    for method in set(re.findall(r"`qae_lab\.train\.trainer\.QAETrainer\.(\w+)`", text)):
        assert method in vars(trainer_cls), method
    assert {"_score", "_forward", "_compute_loss", "loss.grpo_loss", "loss.reduce_token_loss"} <= applied
    from qae_lab import loss

    for name in re.findall(r"`qae_lab\.loss\.(\w+)`", text):
        assert name in loss.__all__, name


def test_readme_example_runs(tmp_path):
    code = _readme_block("A first look", "python")
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0.875"


def test_core_import_needs_no_trainer_stack():
    # the maths must import where trl / transformers are absent (e.g. a bare Colab kernel)
    code = (
        "import sys; sys.modules.update({m: None for m in ('trl', 'transformers', 'peft', 'verl')}); "
        "import qae_lab, qae_lab.advantages, qae_lab.horizon, qae_lab.integrations.verl"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_wheel_carries_the_package_and_the_embedded_model(tmp_path):
    # a non-editable install (e.g. `pip install git+...` in Colab) must bring data/embedded along
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("qae_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"):
        assert f"qae_lab/embedded_model/{f}" in names, f
    # the committed data notebooks 05-07 read (qae_lab.analysis.committed_data), every file of it
    for name, folder in (("reference_runs", "reference_runs"), ("seqpolicy", "seqpolicy_data")):
        files = {
            p.relative_to(ROOT / "data" / name).as_posix() for p in (ROOT / "data" / name).rglob("*") if p.is_file()
        }
        assert files and {f"qae_lab/{folder}/{f}" for f in files} <= names, name
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "qae_lab").rglob("*.py")}
    assert modules <= names  # every module of every subpackage is packaged


def _doctest_coverage(path: Path) -> tuple[int, int]:
    """(public functions and classes with a ``>>>`` example, all of them) in one module.

    Public: named in ``__all__``, or not starting with "_" when there is no ``__all__``. A class
    counts once, by its docstring or any of its methods' docstrings.
    """
    tree = ast.parse(path.read_text())
    exported = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                exported = set(ast.literal_eval(node.value))
            except ValueError:  # a computed __all__: fall back to the names
                pass
    have = total = 0
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        if exported is not None and node.name not in exported:
            continue
        documented = [node]
        if isinstance(node, ast.ClassDef):
            documented += [m for m in node.body if isinstance(m, ast.FunctionDef)]
        total += 1
        have += any(">>>" in (ast.get_docstring(d) or "") for d in documented)
    return have, total


def test_doctest_examples_cover_most_public_functions():
    # at least 85% of the public functions and classes show a runnable >>> example
    per_module = {
        p.relative_to(ROOT).as_posix(): _doctest_coverage(p) for p in sorted((ROOT / "qae_lab").rglob("*.py"))
    }
    per_module = {name: counts for name, counts in per_module.items() if counts[1]}
    have = sum(h for h, _ in per_module.values())
    total = sum(n for _, n in per_module.values())
    table = "\n".join(f"  {name:32s} {h}/{n}" for name, (h, n) in per_module.items())
    assert have / total >= 0.85, f"doctest coverage {have}/{total} = {have / total:.0%} (want >= 85%):\n{table}"


def _imports_inside_functions(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, the line's text) of every import inside a function of a module."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    module = sub.module if isinstance(sub, ast.ImportFrom) else sub.names[0].name
                    found.append((sub.lineno, module, lines[sub.lineno - 1]))
    return found


# optional dependencies (pyproject's extras, or not a dependency at all) a function may import when used,
# heavy ones that code which is not about drawing loads only when it draws (docs/architecture.md, "Imports"),
# and qae_lab modules that import them at their own top
OPTIONAL = (
    "datasets",
    "tokenizers",
    "transformers",
    "huggingface_hub",
    "peft",
    "trl",
    "accelerate",
    "verl",
    "tqdm",
    "qae_lab.train.config",
    "plotly",
    "ipywidgets",
    "IPython",
    "qae_lab.lab.report",
    "qae_lab.lab.figures",
    "qae_lab.lab.widgets",
    "math_verify",
    "sympy",
    "vllm",
)  # the verify extra (qae_lab/task/verify.py) and the sympy it computes with


def test_imports_sit_at_the_top_except_optional_heavy_dependencies_with_a_reason():
    # docs/architecture.md, "Imports": imports at the top of each module; only an optional heavy dependency
    # may be imported inside a function, with a comment on that line saying why
    bad = []
    for path in sorted((ROOT / "qae_lab").rglob("*.py")):
        for lineno, module, text in _imports_inside_functions(path):
            optional = module.split(".")[0] in OPTIONAL or module in OPTIONAL
            if not optional or "#" not in text:
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {text.strip()}")
    assert bad == [], (
        "imports inside functions (move to the top, or an optional dependency with a # reason):\n" + "\n".join(bad)
    )


def test_every_module_stays_within_1000_lines():
    # a module is as long as its idea (about 600 lines a guideline, 1,000 a limit);
    # a longer one splits along a seam of its ideas, never at a count (a 400-line cap split trainer, export and
    # the sequence policy where no seam was, and the run-folder lock belongs with the run folder)
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in sorted((ROOT / "qae_lab").rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 1000
    }
    assert long == {}, f"modules over 1,000 lines: {long}"


def test_every_test_file_stays_within_1000_lines():
    # a test file is as long as the behaviour it checks, as a module is as long as its idea (1,000 lines a limit)
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 1000
    }
    assert long == {}, f"test files over 1,000 lines: {long}"


def test_the_code_is_formatted_and_passes_pyflakes():
    # ruff format at pyproject's 120 characters: one density everywhere, so no line count is met by cramming;
    # and pyflakes' rules (F: unused or shadowed imports, undefined names, ...)
    for command in (["format", "--check"], ["check", "--select", "F"]):
        out = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "qae_lab", "tools", "tests", "benchmarks"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_no_module_under_tests_shadows_a_package_module_or_an_importable_one():
    # tests/ goes first on sys.path, so tests/callbacks.py would stand in for any top-level `callbacks` and read
    # as qae_lab.train.callbacks; a helper's name must be neither a qae_lab module nor importable from elsewhere
    tests_dir = (ROOT / "tests").resolve()
    package = {p.stem for p in (ROOT / "qae_lab").rglob("*.py")} | {
        p.name for p in (ROOT / "qae_lab").rglob("*") if p.is_dir() and (p / "__init__.py").exists()
    }
    folders = {tests_dir, *(p for p in tests_dir.iterdir() if p.is_dir())}  # each goes on sys.path for its tests
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() not in folders]
    clashes = {}
    helpers = [*tests_dir.glob("*.py"), *tests_dir.glob("*/*.py"), *tests_dir.glob("*/__init__.py")]
    for path in sorted(helpers):
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if name == "conftest" or name.startswith("test_") or path.parent.name == "testkit" and name != "testkit":
            continue  # pytest's own files; test modules; testkit's modules are named through it
        if name in package:
            clashes[name] = f"qae_lab.{name}"
        elif name in sys.stdlib_module_names:
            clashes[name] = "the standard library"
        elif (spec := importlib.machinery.PathFinder.find_spec(name, elsewhere)) is not None:
            clashes[name] = spec.origin or "a namespace package"
    assert clashes == {}, f"modules under tests/ named like another module (rename them): {clashes}"


def test_license_file_matches_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT" and meta["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    authors = ", ".join(a["name"] for a in meta["authors"])
    assert re.search(rf"^Copyright \(c\) \d{{4}} {re.escape(authors)}$", text, re.M), "LICENSE names the authors"


def _local_imports(path: Path, seen: set[Path]) -> set[str]:
    """The repository's own top-level folders that ``path`` imports, following the helper modules under tests/."""
    if path in seen or not path.is_file():
        return set()
    seen.add(path)
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if (ROOT / top / "__init__.py").is_file() or (ROOT / f"{top}.py").is_file():
                out.add(top)
            helper = ROOT / "tests" / f"{top}.py"  # tests/ is on sys.path: its helper modules import by name
            if helper.is_file():
                out |= _local_imports(helper, seen)
    return out


def test_the_fresh_colab_suite_copies_every_folder_its_tests_import():
    # the fresh-Colab job runs its tests from a copy of the checkout without qae_lab/ (the installed one must serve):
    # a folder those tests import that the copy leaves out (tools/, when the maintainer tools left the package)
    # fails only there
    fresh = (ROOT / ".ci/fresh-colab").read_text()
    copied = set(re.search(r"archive HEAD ([^|]+)\|", fresh).group(1).split())
    files = re.findall(r"tests/[\w/]+\.py", fresh[fresh.index('"$py" -m pytest') :])
    assert files, "no test files found in .ci/fresh-colab's pytest command"
    seen: set[Path] = set()
    imported = set().union(*(_local_imports(ROOT / f, seen) for f in ["conftest.py", *files]))
    assert imported - {"qae_lab"} <= copied, f"imported but not copied: {sorted(imported - {'qae_lab'} - copied)}"


def test_no_source_file_is_ignored_by_git():
    # a package file that .gitignore matches (qae_lab/runs/__init__.py under a "runs/" rule for run folders) exists
    # in the working tree, so every local test passes, and is missing from every clone, wheel and CI run
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = [
        str(p.relative_to(ROOT))
        for top in ("qae_lab", "tools", "tests")
        for p in (ROOT / top).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    out = subprocess.run(
        ["git", "check-ignore", "--stdin"], input="\n".join(files), cwd=ROOT, capture_output=True, text=True
    )
    assert out.stdout.split() == [], f"source files git ignores: {out.stdout.split()}"


# ---------------------------------------------------------------- module docstrings


def _module_docstrings():
    for path in sorted((ROOT / "qae_lab").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        yield path.relative_to(ROOT), doc or ""


def test_every_module_docstring_is_one_short_and_followable():
    notes = (ROOT / "docs/implementation.md").read_text(encoding="utf-8")
    for path, doc in _module_docstrings():
        assert doc.strip(), f"{path}: no docstring"
        # one docstring: no second one glued under it, the first line said once
        assert "The former" not in doc, path
        first, *rest = doc.strip().split("\n\n")
        assert not rest or " ".join(rest[0].split()[:4]) != " ".join(first.split()[:4]), (
            f"{path} repeats its first line"
        )
        # a screen or less of prose (doctest examples, which run, apart)
        prose = [p for p in doc.strip().split("\n\n") if not p.lstrip().startswith(">>>")]
        lines = sum(p.count("\n") + 1 for p in prose) + len(prose) - 1
        assert lines <= 25, f"{path}: {lines} lines of prose; implementer detail goes to docs/implementation.md"
        # citations a reader can follow: papers, and files of the repository
        for section in re.findall(r"docs/implementation\.md, section ``([\w.]+)``", doc):
            assert f"## `{section}`" in notes, f"{path}: docs/implementation.md has no section {section}"


def test_no_issue_numbers_and_no_specification_outside_the_repository_cited():
    for folder in ("qae_lab", "tests", "tools", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"\bissues? #?\d+\b", text, re.I), path
            # the specification this project was written from is not in the repository: cite the papers
            assert not re.search(r"\bS" + r"PEC\b", text), path


def test_a_module_that_says_it_imports_no_plotly_does_not():
    said = [
        ".".join(path.with_suffix("").parts)
        for path, doc in _module_docstrings()
        if "Nothing here imports plotly or ipywidgets" in " ".join(doc.split())
    ]
    assert said
    for module in said:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys, {module}; print('plotly' in sys.modules or 'ipywidgets' in sys.modules)",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        assert out.stdout.strip() == "False", module


def test_every_test_path_a_ci_job_names_exists():
    # a renamed or moved test file would leave a job running nothing (pytest: "no tests ran")
    named = {
        path
        for script in sorted((ROOT / ".ci").iterdir())
        if script.is_file()
        for path in re.findall(r"\btests/[\w/]+(?:\.py)?\b", script.read_text(encoding="utf-8"))
    }
    assert named and [p for p in sorted(named) if not (ROOT / p).exists()] == []
