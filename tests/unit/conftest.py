"""Shared fixtures of the unit tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture()
def one_thread():
    """Tiny models run fastest (and steadiest on a busy machine) on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
