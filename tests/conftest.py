"""Fixtures shared by every test module."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test may reach a model hub: any attempt fails loudly instead of hanging."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run far faster on one thread than on a busy 2-core machine's two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
