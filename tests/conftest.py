"""Shared fixtures: the tiny model is built once per test session (about a second); tests that put
adapters on it take them from `scratch_adapter`, which removes them again however the test ends."""
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


@pytest.fixture
def scratch_adapter(tiny):
    """add(name, seed=0, std=0.05, rank=4, alpha=8) puts adapter `name` on the shared tiny model with
    its own seeded generator (A as lora.add_adapter draws it; with std > 0 every A and B entry is then
    redrawn from N(0, std), so B != 0 and the adapter changes the outputs). Nothing is drawn from the
    global RNG, so a test's numbers do not depend on what ran before it. On teardown, pass or fail,
    the adapters are deleted and none is left active."""
    import lora
    model, _ = tiny
    added = []

    def add(name, seed=0, std=0.05, rank=4, alpha=8):
        g = torch.Generator().manual_seed(seed)
        lora.add_adapter(model, name, rank=rank, alpha=alpha, generator=g)
        added.append(name)
        if std:
            with torch.no_grad():
                for p in lora.adapter_parameters(model, name):
                    p.copy_(torch.randn(p.shape, generator=g) * std)
        return lora.adapter_parameters(model, name)

    try:
        yield add
    finally:
        model.eval()
        lora.set_adapter(model, None)
        for name in added:
            lora.delete_adapter(model, name)
