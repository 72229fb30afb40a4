"""The verl integration tests' shared set-up (tests/integrations/test_verl.py, tests/integrations/test_verl_saah.py):
a fake verl, a blocked one, the real one's registries restored after each test, and its files.

The real-verl fixtures skip where verl is absent (the main environment), unless ``QAE_LAB_REQUIRE_VERL=1``
(``.ci/verl-registry``, which installs verl): then a missing verl fails, so that job cannot pass by skipping.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

CORE_ALGOS = "verl.trainer.ppo.core_algos"
PACKAGES = ("verl", "verl.trainer", "verl.trainer.ppo")  # the packages above core_algos


def stub_verl(monkeypatch, **attributes) -> types.ModuleType:
    """A fake verl for the test: empty packages above a ``core_algos`` module that holds ``attributes``."""
    core = types.ModuleType(CORE_ALGOS)
    for name, value in attributes.items():
        setattr(core, name, value)
    for name in PACKAGES:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, CORE_ALGOS, core)
    return core


def block_verl(monkeypatch) -> None:
    """``import verl`` (and its core_algos) raises ImportError for the test, even where verl is installed and
    already imported."""
    for name in (*PACKAGES, CORE_ALGOS):
        monkeypatch.setitem(sys.modules, name, None)


def registry_fixture(registry: str, name: str):
    """A fixture giving verl's real ``core_algos``, with ``name`` out of its dict ``registry`` for the test and
    put back afterwards. Skips where verl is absent, unless ``QAE_LAB_REQUIRE_VERL=1``: then a missing verl
    fails."""

    def core_algos():
        if os.environ.get("QAE_LAB_REQUIRE_VERL") == "1":
            core = importlib.import_module(CORE_ALGOS)
        else:
            core = pytest.importorskip(CORE_ALGOS)
        entries = getattr(core, registry)  # verl's name -> function dict, filled at import
        before = entries.pop(name, None)
        yield core
        entries.pop(name, None)
        if before is not None:
            entries[name] = before

    core_algos.__doc__ = f"verl's ``core_algos``, its {registry} without {name!r} for the test, restored afterwards."
    return pytest.fixture(core_algos)


def verl_file(package: str, name: str) -> Path:
    """A file of an installed verl package, found without importing anything heavy."""
    return Path(importlib.util.find_spec(package).submodule_search_locations[0], name)
