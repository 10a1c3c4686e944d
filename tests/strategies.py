"""What the property tests share: hypothesis strategies for seeds and dtypes, and the tolerance per dtype."""

import torch
from hypothesis import strategies as st

DTYPES = (torch.float32, torch.float64)
seeds = st.integers(min_value=0, max_value=2**31 - 1)
dtypes = st.sampled_from(DTYPES)


def tol(dtype: torch.dtype) -> dict:
    """Tolerances for comparing two correct computations done in a different order."""
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-10}
