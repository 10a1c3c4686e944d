"""The shared checks of course_utils._validate: one exception policy for every module,
and every message a check at a module's door gives.

A bad type raises TypeError, a bad value ValueError; bool is not an int; every message says what was expected
and what arrived.
"""

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import refusals_test

from course_utils._validate import (
    broadcast_shapes,
    check_bool,
    check_choice,
    check_fraction,
    check_greater_than,
    check_int,
    check_nonnegative_number,
    check_positive_number,
)
from course_utils.generation import beam_search, generate, generate_stream
from course_utils.gpt import GPT, GPTConfig
from course_utils.multihead import SingleHeadAttention
from course_utils.positional import rope_pairing_permutation


@given(shapes=st.lists(st.lists(st.integers(0, 3), max_size=4), max_size=4))
def test_broadcast_shapes_agrees_with_torch(shapes):
    """The course's broadcast_shapes returns what torch.broadcast_shapes returns, and raises where it raises."""
    try:
        expected = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="do not broadcast"):
            broadcast_shapes(*shapes)
    else:
        assert broadcast_shapes(*shapes) == expected and isinstance(broadcast_shapes(*shapes), torch.Size)


def test_a_checked_call_does_not_import_sympy():
    """torch.broadcast_shapes imports sympy on its first call (about 1.3 s); the checks use their own."""
    code = (
        "import sys, torch\n"
        "from course_utils.attention import scaled_dot_product_attention\n"
        "from course_utils.masking import causal_mask\n"
        "q = torch.randn(2, 1, 3, 4)\n"
        "scaled_dot_product_attention(q, q, q, causal_mask(3))\n"
        "print('sympy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_check_int_returns_a_plain_int():
    assert check_int("n", 3) == 3
    assert type(check_int("n", np.int64(3))) is int
    assert check_int("k", -5, minimum=None) == -5
    assert check_int("i", 0, minimum=0, maximum=0) == 0


def test_check_int_counts_from_one_unless_told_and_choices_take_a_subtype():
    """Equal values of a str subclass (numpy's str_, a StrEnum member) are valid choices (second review)."""
    import enum

    class Kind(str, enum.Enum):
        ROPE = "rope"

    assert check_int("start", 0, minimum=0) == 0
    check_choice("mode", "a", ("a", "b"))
    check_choice("autocast", None, (None, "bf16"))
    for value in (np.str_("rope"), Kind.ROPE, "rope"):
        check_choice("positions", value, ("learned", "rope"))
    assert check_bool("flag", np.bool_(True)) is True
    assert check_greater_than("base", 10000, 1) == 10000.0
    assert check_nonnegative_number("x", 0) == 0.0


# --- the checks the modules now write at their door, through their public functions -------------------------

_MODEL = GPT(GPTConfig.preset("tiny", vocab_size=16, context_length=8)).for_generation()
_IDS = torch.zeros(1, 4, dtype=torch.long)
_X = torch.randn(2, 3, 8)


def _gen(idx=_IDS, n=2, **kw):
    return list(generate_stream(_MODEL, idx, n, **kw))


MESSAGES = [  # (call; exception; what the message must say)
    # the shared checks: bool is not an int, a wrong type is a TypeError, a bad value a ValueError
    (lambda: check_int("n", True), TypeError, "n must be an int, got bool"),
    (lambda: check_int("n", 2.0), TypeError, "n must be an int, got float"),
    (lambda: check_int("n", "2"), TypeError, "n must be an int, got str"),
    (lambda: check_int("n", None, expected="an int or None"), TypeError, "n must be an int or None, got NoneType"),
    (lambda: check_int("n", 0), ValueError, "n must be at least 1, got 0"),
    (lambda: check_int("n", -1, minimum=0), ValueError, "n must be at least 0, got -1"),
    (lambda: check_int("n", 4, minimum=0, maximum=3), ValueError, r"n must be in \[0, 3\], got 4"),
    (lambda: check_int("n", -1, minimum=0, maximum=3), ValueError, r"n must be in \[0, 3\], got -1"),
    (lambda: check_int("n", 9, minimum=None, maximum=3), ValueError, "n must be at most 3, got 9"),
    (lambda: check_choice("mode", "c", ("a", "b")), ValueError, r"mode must be one of \('a', 'b'\), got 'c'"),
    (lambda: check_choice("mode", 3, ["a", "b"], " (a or b)"), TypeError,
     r"mode must be one of \['a', 'b'\] \(a or b\), got 3 \(int\)"),
    (lambda: check_choice("autocast", True, (None, "bf16")), TypeError,
     r"autocast must be one of \(None, 'bf16'\), got True \(bool\)"),
    (lambda: check_choice("layers", True, (1, 2)), TypeError, r"got True \(bool\)"),  # bool is not an int here
    (lambda: check_choice("layers", 3, (1, 2)), ValueError, r"layers must be one of \(1, 2\), got 3$"),
    (lambda: check_bool("flag", "no"), TypeError, r"flag must be True or False, got 'no' \(str\)"),
    (lambda: check_bool("flag", 1, "True, False or None"), TypeError,
     r"flag must be True, False or None, got 1 \(int\)"),
    (lambda: check_positive_number("s", 0), ValueError, "s must be a positive finite number, got 0.0"),
    (lambda: check_positive_number("s", "1"), TypeError, r"s must be a positive number, got '1' \(str\)"),
    (lambda: check_nonnegative_number("s", -0.5), ValueError, "s must be a finite number >= 0, got -0.5"),
    (lambda: check_nonnegative_number("s", math.inf), ValueError, "s must be a finite number >= 0, got inf"),
    (lambda: check_nonnegative_number("s", True), TypeError, r"s must be a number >= 0, got True \(bool\)"),
    (lambda: check_fraction("s", 1.0), ValueError, r"s must be in \[0, 1\), got 1.0"),
    (lambda: check_fraction("s", None), TypeError, r"s must be a number in \[0, 1\), got None \(NoneType\)"),
    (lambda: check_greater_than("base", 1, 1), ValueError, "base must be a number greater than 1, got 1"),
    (lambda: check_greater_than("base", math.inf, 1), ValueError, "base must be a number greater than 1, got inf"),
    (lambda: check_greater_than("base", "big", 1), TypeError,
     r"base must be a number greater than 1, got 'big' \(str\)"),
    # generation: the prompt (its shape and dtype: test_generation.py's table)
    (lambda: _gen([[1, 2]]), TypeError, r"idx must be a \(B, T\) torch.Tensor of token ids, got list"),
    (lambda: _gen(torch.zeros(2, 0, dtype=torch.long)), ValueError, r"idx must hold at least one token \(the prompt\)"),
    # the room in one KV cache: generate's words, and beam_search's
    (lambda: _gen(n=6), ValueError,
     r"^prompt \(4 tokens\) \+ max_new_tokens \(6\) - 1 exceeds the model's context_length \(8\): the KV "
     r"cache cannot hold them \(the last token is never fed back\); shorten them or pass use_cache=False, "
     r"which crops to the last context_length tokens$"),
    (lambda: beam_search(_MODEL, _IDS, 2, 6), ValueError,  # beam_search says it in generate's words
     r"context_length \(8\): the KV cache cannot hold them .*pass use_cache=False"),
    # attention modules: the mask against the scores
    (lambda: SingleHeadAttention(8, 4)(_X, torch.ones(2, 2, 3, 3, dtype=torch.bool)), ValueError,
     r"to the scores' shape \(2, 3, 3\)"),
    # positions
    (lambda: rope_pairing_permutation(4.0), TypeError, "D must be an int, got float"),
    (lambda: rope_pairing_permutation(0), ValueError, "D must be at least 2, got 0"),
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True, ids=[m[:60] for *_, m in MESSAGES])


def test_the_doors_let_good_calls_through():
    SingleHeadAttention(8, 4)(_X, torch.ones(2, 3, 3, dtype=torch.bool))  # (B, T, T)
    assert len(_gen(n=5)) == 5  # 4 + 5 - 1 = 8 fits: the last token is never fed back
    for on_full, keep in (("shift", None), ("shift", 1), ("shift", 8)):
        assert len(_gen(n=2, on_full=on_full, keep_on_shift=keep)) == 2
    assert generate(_MODEL, torch.zeros(2, 3, dtype=torch.long), 1).shape == (2, 4)
