"""What the tests share: hypothesis strategies for seeds and dtypes, the tolerance per dtype, and a practice text."""

import random

import torch
from hypothesis import strategies as st

DTYPES = (torch.float32, torch.float64)
seeds = st.integers(min_value=0, max_value=2**31 - 1)
dtypes = st.sampled_from(DTYPES)


def tol(dtype: torch.dtype) -> dict:
    """Tolerances for comparing two correct computations done in a different order."""
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-10}


def practice_text(lines: int) -> str:
    """Simple, learnable text made here (no network): about 30 characters a line, the same every time."""
    rng = random.Random(0)
    words = "to be or not that is the question whether tis nobler in mind suffer slings arrows".split()
    return (
        "\n".join(
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + "." for _ in range(lines)
        )
        + "\n"
    )
