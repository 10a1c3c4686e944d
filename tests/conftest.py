"""Shared test settings: a hypothesis profile sized for a 2-core CI machine, and the gpu marker."""

import pytest
import torch
from hypothesis import settings

settings.register_profile("course", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("course")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
