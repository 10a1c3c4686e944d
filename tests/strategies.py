"""What the tests share: hypothesis strategies for seeds and dtypes, the tolerance per dtype, a practice text, the test
that runs a module's table of messages, a counter of matrix products, and one CPU thread for a module's fixture."""

import random
import re
from contextlib import contextmanager

import pytest
import torch
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

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


def refusals_test(table: list, regex: bool = False, ids=None):
    """The test of a module's message table: each row (call, exception type, what the message must say) raises that
    exception, and its message contains the words (or, with ``regex``, matches the pattern)."""

    @pytest.mark.parametrize("call, error, words", table, ids=ids)
    def test_each_bad_input_gets_its_message(call, error, words):
        with pytest.raises(error) as raised:
            call()
        assert re.search(words, str(raised.value)) if regex else words in str(raised.value), str(raised.value)

    return test_each_bad_input_gets_its_message


class CountProducts(TorchDispatchMode):
    """Counts the matrix-product kernels (mm, bmm and their fused-bias forms) that reach ATen while it is active:
    below autograd, so a backward pass's products count too."""

    PRODUCTS = frozenset({"mm", "bmm", "addmm", "baddbmm"})

    def __init__(self) -> None:
        super().__init__()
        self.products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.products += func.overloadpacket.__name__ in self.PRODUCTS
        return func(*args, **(kwargs or {}))


@contextmanager
def one_cpu_thread():
    """conftest's ``one_thread`` for a module-scoped fixture (set up before any test's function-scoped fixtures)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
