"""Skin-model tests train on two threads: the CI machine's cores, whatever torch would pick."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _two_threads():
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)
