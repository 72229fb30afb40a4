"""Tests for qae_lab.lab.notebook: smoke mode, pick, Colab detection and the Colab address."""

from __future__ import annotations

import sys
import types

import pytest

from qae_lab.lab.notebook import HEADLESS_ENV, REPO, SMOKE_ENV, colab_url, headless, in_colab, pick, smoke_mode


def test_smoke_env_name():
    assert SMOKE_ENV == "QAE_LAB_SMOKE"


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "yes", "Yes", " 1 ", "\tyes\n"])
def test_smoke_mode_on(value):
    assert smoke_mode({SMOKE_ENV: value}) is True


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "No", "", "  "])
def test_smoke_mode_off(value):
    assert smoke_mode({SMOKE_ENV: value}) is False


def test_smoke_mode_unset_and_other_variables():
    assert smoke_mode({}) is False
    assert smoke_mode({"QAE_LAB_SMOKE_X": "1", "SMOKE": "1"}) is False  # only the exact name counts


@pytest.mark.parametrize("value", ["2", "on", "off", "y", "n", "t", "smoke", "1.0", "-1"])
def test_smoke_mode_invalid(value, monkeypatch):
    with pytest.raises(ValueError, match="QAE_LAB_SMOKE"):
        smoke_mode({SMOKE_ENV: value})
    monkeypatch.setenv(SMOKE_ENV, value)
    with pytest.raises(ValueError, match="QAE_LAB_SMOKE"):
        smoke_mode()
    with pytest.raises(ValueError, match="QAE_LAB_SMOKE"):
        pick(1, 2)


def test_smoke_mode_reads_os_environ_by_default(monkeypatch):
    monkeypatch.delenv(SMOKE_ENV, raising=False)
    assert smoke_mode() is False
    monkeypatch.setenv(SMOKE_ENV, "1")
    assert smoke_mode() is True
    assert smoke_mode({}) is False  # an explicit mapping wins over os.environ
    monkeypatch.setenv(SMOKE_ENV, "no")
    assert smoke_mode() is False
    assert smoke_mode({SMOKE_ENV: "yes"}) is True


def test_pick(monkeypatch):
    full, smoke = object(), object()
    assert pick(full, smoke, {SMOKE_ENV: "1"}) is smoke
    assert pick(full, smoke, {SMOKE_ENV: "0"}) is full
    assert pick(full, smoke, {}) is full
    assert pick(4000, 200, {SMOKE_ENV: "true"}) == 200
    monkeypatch.setenv(SMOKE_ENV, "yes")
    assert pick(4000, 200) == 200
    monkeypatch.delenv(SMOKE_ENV)
    assert pick(4000, 200) == 4000


def test_in_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert in_colab() is False
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert in_colab() is True


def test_colab_url():
    assert REPO == "qae-lab/qae_lab"
    assert colab_url("03_sampled_groups.ipynb") == (
        "https://colab.research.google.com/github/qae-lab/qae_lab/blob/main/notebooks/03_sampled_groups.ipynb"
    )
    assert colab_url("02_softmax_entropy_proofs.ipynb").startswith(
        f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/"
    )


@pytest.mark.parametrize("value,expected", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_headless_flag(value, expected):
    assert headless({HEADLESS_ENV: value}) is expected
    assert headless({}) is False and headless({SMOKE_ENV: "1"}) is False  # smoke mode alone is not headless
    with pytest.raises(ValueError, match="QAE_LAB_HEADLESS"):
        headless({HEADLESS_ENV: "maybe"})
