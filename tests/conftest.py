"""Shared fixtures: the tiny model is built once per test session (about a second)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def tiny():
    from models import load_model
    return load_model("tiny", device="cpu")
