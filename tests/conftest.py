"""Shared fixtures."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (thread hand-offs dominate) and do not crawl on a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
