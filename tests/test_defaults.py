"""Each default of the method's settings is written once: K, alpha, the baseline, the token weighting, the quantile
method, the std scaling, the success threshold and the covariance penalties' settings, as qae_lab.methods' DEFAULT_*
constants. Every parameter default, keyword default or dataclass field default of those names (Knobs', QAEConfig's,
LossSettings', every function's) reads its home, or is None (meaning "the default")."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "qae_lab"
# parameter and field names whose default has one home: its qae_lab.methods constant
DEFAULTED = {
    **dict.fromkeys(("quantile_k", "k", "K"), "DEFAULT_K"),
    # "method": the quantile method's name in qae_lab.advantages.quantile_baseline and the toys
    **dict.fromkeys(("quantile_method", "method"), "DEFAULT_QUANTILE_METHOD"),
    **{
        name: f"DEFAULT_{name.upper()}"
        for name in "alpha baseline token_weighting scale success_threshold cov_penalty clip_cov_ratio clip_cov_lb "
        "clip_cov_ub kl_cov_ratio kl_cov_coef".split()
    },
}
# a literal of one of those names that is not that setting's default, and why
OTHER_MEANINGS = {
    ("analysis/compare.py", "baseline"): "the method rows are compared against (GRPO's 'mean'), not a baseline setting",
    ("toys/seqpolicy_training.py", "alpha"): "UpdateSettings' horizon weights are off unless asked (alpha 0: GRPO)",
}


def _literal(node) -> bool:
    """A constant default other than None (None means "the default"), a negative number included."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value is not None


def literal_defaults(source: str, where: str) -> list[str]:
    """``path:line: name=value`` for each literal default of :data:`DEFAULTED` in ``source`` outside its home."""
    found = []
    for node in ast.walk(ast.parse(source)):
        pairs = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs += zip(positional[len(positional) - len(a.defaults) :], a.defaults)
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            pairs = [(arg.arg, d) for arg, d in pairs]
        elif isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                    value = st.value
                    if isinstance(value, ast.Call):  # field(default=...)
                        value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
                    if value is not None:
                        pairs.append((st.target.id, value))
        for name, default in pairs:
            if name in DEFAULTED and _literal(default) and (where, name) not in OTHER_MEANINGS:
                found.append(f"qae_lab/{where}:{default.lineno}: {name}={ast.unparse(default)}")
    return found


def test_each_default_is_written_once():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in literal_defaults(path.read_text(), path.relative_to(PACKAGE).as_posix())
    ]
    assert not found, "a default written again (read qae_lab.methods' DEFAULT_*):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "def f(rewards, *, k: float = 0.4): ...",
        "def f(alpha=0.5): ...",
        "class C:\n    baseline: str = 'quantile'",
        "class C:\n    token_weighting: str = field(default='none')",
        "class Knobs:\n    quantile_k: float = field(default=0.4, metadata={})",
        "class LossSettings:\n    clip_cov_ratio: float = 2e-4",
    ],
)
def test_a_second_literal_is_named(source):
    assert literal_defaults(source, "toys/x.py")[0].startswith("qae_lab/toys/x.py:")


def test_reads_and_the_homes_pass():
    from qae_lab import methods
    from qae_lab.knobs import Knobs
    from qae_lab.loss import LossSettings
    from qae_lab.train.config import QAEConfig

    assert not literal_defaults("def f(k: float = DEFAULT_K, alpha=None): ...", "toys/x.py")
    for cls in (QAEConfig, LossSettings, Knobs):
        for f in dataclasses.fields(cls):
            if f.name in DEFAULTED:
                assert f.default == getattr(methods, DEFAULTED[f.name]), (cls.__name__, f.name)
    assert all(hasattr(methods, home) for home in DEFAULTED.values())
