"""The shared checks of course_utils._validate: one exception policy for every module.

A bad type raises TypeError, a bad value ValueError; bool is not an int; every message says what was expected
and what arrived.
"""

import math
import re

import numpy as np
import pytest
import torch

from course_utils._validate import (
    check_attention_call,
    check_bool,
    check_choice,
    check_even_int,
    check_fraction,
    check_greater_than,
    check_int,
    check_layer_input,
    check_nonnegative_number,
    check_positions,
    check_positive_number,
)
from course_utils.multihead import MultiHeadAttention, SingleHeadAttention


def test_check_int_returns_a_plain_int():
    assert check_int("n", 3) == 3
    assert type(check_int("n", np.int64(3))) is int
    assert check_int("k", -5, minimum=None) == -5
    assert check_int("i", 0, minimum=0, maximum=0) == 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n=True), TypeError, "n must be an int, got bool"),
        (dict(n=2.0), TypeError, "n must be an int, got float"),
        (dict(n="2"), TypeError, "n must be an int, got str"),
        (dict(n=None, expected="an int or None"), TypeError, "n must be an int or None, got NoneType"),
        (dict(n=0), ValueError, "n must be at least 1, got 0"),
        (dict(n=-1, minimum=0), ValueError, "n must be at least 0, got -1"),
        (dict(n=4, minimum=0, maximum=3), ValueError, r"n must be in \[0, 3\], got 4"),
        (dict(n=-1, minimum=0, maximum=3), ValueError, r"n must be in \[0, 3\], got -1"),
        (dict(n=9, minimum=None, maximum=3), ValueError, "n must be at most 3, got 9"),
    ],
)
def test_check_int_rejects(kwargs, error, match):
    with pytest.raises(error, match=match):
        check_int("n", **kwargs)


def test_check_int_counts_from_one_unless_told():
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        check_int("size", 0)
    with pytest.raises(TypeError, match="size must be an int, got bool"):
        check_int("size", False)
    assert check_int("start", 0, minimum=0) == 0


def test_check_choice():
    check_choice("mode", "a", ("a", "b"))
    check_choice("autocast", None, (None, "bf16"))
    with pytest.raises(ValueError, match=r"mode must be one of \('a', 'b'\), got 'c'"):
        check_choice("mode", "c", ("a", "b"))
    with pytest.raises(TypeError, match=r"mode must be one of \['a', 'b'\] \(a or b\), got 3 \(int\)"):
        check_choice("mode", 3, ["a", "b"], " (a or b)")  # a wrong type is a TypeError, as everywhere
    with pytest.raises(TypeError, match=r"autocast must be one of \(None, 'bf16'\), got True \(bool\)"):
        check_choice("autocast", True, (None, "bf16"))
    with pytest.raises(TypeError, match=r"got True \(bool\)"):
        check_choice("layers", True, (1, 2))  # bool is not an int here either
    with pytest.raises(ValueError, match=r"layers must be one of \(1, 2\), got 3$"):
        check_choice("layers", 3, (1, 2))


def test_check_bool_names_what_it_expected():
    assert check_bool("flag", np.bool_(True)) is True
    with pytest.raises(TypeError, match=r"flag must be True or False, got 'no' \(str\)"):
        check_bool("flag", "no")
    with pytest.raises(TypeError, match=r"flag must be True, False or None, got 1 \(int\)"):
        check_bool("flag", 1, "True, False or None")


@pytest.mark.parametrize(
    "check, x, error, match",
    [
        (check_positive_number, 0, ValueError, "s must be a positive finite number, got 0.0"),
        (check_positive_number, "1", TypeError, r"s must be a positive number, got '1' \(str\)"),
        (check_nonnegative_number, -0.5, ValueError, "s must be a finite number >= 0, got -0.5"),
        (check_nonnegative_number, math.inf, ValueError, "s must be a finite number >= 0, got inf"),
        (check_nonnegative_number, True, TypeError, r"s must be a number >= 0, got True \(bool\)"),
        (check_fraction, 1.0, ValueError, r"s must be in \[0, 1\), got 1.0"),
        (check_fraction, None, TypeError, r"s must be a number in \[0, 1\), got None \(NoneType\)"),
    ],
)
def test_number_checks_reject(check, x, error, match):
    with pytest.raises(error, match=match):
        check("s", x)


def test_check_greater_than():
    assert check_greater_than("base", 10000, 1) == 10000.0
    with pytest.raises(ValueError, match="base must be a number greater than 1, got 1"):
        check_greater_than("base", 1, 1)
    with pytest.raises(ValueError, match="base must be a number greater than 1, got inf"):
        check_greater_than("base", math.inf, 1)
    with pytest.raises(TypeError, match=r"base must be a number greater than 1, got 'big' \(str\)"):
        check_greater_than("base", "big", 1)
    assert check_nonnegative_number("x", 0) == 0.0


def test_check_choice_takes_values_of_a_subtype_but_not_a_bool_for_a_number():
    """Equal values of a str subclass (numpy's str_, a StrEnum member) are valid choices (second review)."""
    import enum

    import numpy as np

    class Kind(str, enum.Enum):
        ROPE = "rope"

    for value in (np.str_("rope"), Kind.ROPE, "rope"):
        check_choice("positions", value, ("learned", "rope"))
    with pytest.raises(TypeError, match=r"got True \(bool\)"):
        check_choice("layers", True, (1, 2))


# --- gpt, generation: the checks their modules call once at the boundary (issue #20) ---------------------


def test_check_prompt_keeps_generations_words_and_order():
    import torch

    from course_utils._validate import check_prompt as prompt
    from course_utils._validate import check_token_ids

    prompt(torch.zeros(2, 3, dtype=torch.long))
    cases = [
        ([[1, 2]], TypeError, r"idx must be a \(B, T\) torch.Tensor of token ids, got list"),
        (torch.zeros(4, dtype=torch.long), ValueError, r"idx must have at least 2 dimensions, got shape \(4,\)"),
        (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"idx must be \(B, T\) integer token ids, got shape"),
        (torch.zeros(1, 2, 3), TypeError, r"idx must hold integer token ids \(torch.long\), got dtype torch.float32"),
        (torch.zeros(2, 0, dtype=torch.long), ValueError, r"idx must hold at least one token \(the prompt\)"),
    ]
    for idx, error, match in cases:
        with pytest.raises(error, match=match):
            prompt(idx)
    # The models' own check of token ids has its words, and allows an empty sequence.
    with pytest.raises(ValueError, match=r"idx must be a \(B, T\) tensor of token ids, got shape \(1, 2, 3\)"):
        check_token_ids("idx", torch.zeros(1, 2, 3), 5)
    check_token_ids("idx", torch.zeros(2, 0, dtype=torch.long), 5)


def test_check_cache_room_says_generates_words_unless_told_otherwise():
    import torch

    from course_utils._validate import check_cache_room

    idx = torch.zeros(1, 4, dtype=torch.long)
    check_cache_room(idx, 5, 8)  # 4 + 5 - 1 = 8 fits: the last token is never fed back
    with pytest.raises(
        ValueError,
        match=r"^prompt \(4 tokens\) \+ max_new_tokens \(6\) - 1 exceeds the model's context_length \(8\): the KV "
        r"cache cannot hold them \(the last token is never fed back\); shorten them or pass use_cache=False, "
        r"which crops to the last context_length tokens$",
    ):
        check_cache_room(idx, 6, 8)
    with pytest.raises(ValueError, match=r"context_length \(8\); pass use_cache=False to crop instead$"):
        check_cache_room(idx, 6, 8, "; pass use_cache=False to crop instead")


def test_check_scores_mask_is_the_mask_check_of_scaled_dot_product_attention():
    import torch

    from course_utils._validate import check_scores_mask

    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8)  # (B, H, T, D), (B, H, S, D)
    check_scores_mask(torch.ones(4, 6, dtype=torch.bool), q, k)
    with pytest.raises(TypeError, match=r"mask must be boolean \(True = may attend\), got dtype torch.float32"):
        check_scores_mask(torch.zeros(4, 6), q, k)
    wrong_shape = r"mask of shape \(4, 4\) does not broadcast to the scores' shape \(2, 3, 4, 6\)"
    with pytest.raises(ValueError, match=wrong_shape):
        check_scores_mask(torch.ones(4, 4, dtype=torch.bool), q, k)


def test_check_config_dict_names_the_class():
    import dataclasses

    from course_utils._validate import check_config_dict

    @dataclasses.dataclass
    class Settings:
        width: int = 1

    check_config_dict(Settings, {"width": 2})
    not_a_dict = r"from_dict takes a dict of Settings fields \(what to_dict returned\), got list"
    with pytest.raises(TypeError, match=not_a_dict):
        check_config_dict(Settings, [("width", 2)])
    with pytest.raises(ValueError, match=r"unknown Settings field\(s\) \['height'\]"):
        check_config_dict(Settings, {"height": 2})


def test_check_on_full_accepts_the_policies_and_refuses_a_keep_that_does_not_fit():
    from course_utils._validate import check_on_full

    choices = ("error", "shift")
    for on_full, keep in (("error", None), ("shift", None), ("shift", 1), ("shift", 16)):
        check_on_full(on_full, choices, keep, 16)  # no error
    with pytest.raises(ValueError, match=r"keep_on_shift applies only with on_full='shift', got on_full='error'"):
        check_on_full("error", choices, 4, 16)
    with pytest.raises(ValueError, match=r"keep_on_shift must be in \[1, 16\], got 17"):
        check_on_full("shift", choices, 17, 16)
    with pytest.raises(ValueError, match=r"on_full must be one of \('error', 'shift'\), got 'wrap'"):
        check_on_full("wrap", choices, None, 16)


# ---------------------------------------------------------------- attention, masking, multihead, block, positional


def test_check_attention_call_names_a_memory_passed_as_the_mask_only_where_a_memory_is_taken():
    attn, x, memory = MultiHeadAttention(8, 2), torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(TypeError, match=r"looks like a \(B, S, C\) memory: for cross-attention pass it by keyword"):
        check_attention_call(attn, x, memory, False, takes_memory=True)
    with pytest.raises(TypeError, match=r"mask must be boolean \(True = may attend\), got dtype torch.float32"):
        check_attention_call(attn, x, memory, False)  # a module without a memory: the mask's own message


def test_check_attention_call_fits_the_mask_to_the_scores():
    attn, x, memory = MultiHeadAttention(8, 2), torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    check_attention_call(attn, x, torch.ones(2, 2, 3, 5, dtype=torch.bool), False, memory)  # (B, H, T, S)
    with pytest.raises(
        ValueError, match=re.escape("mask of shape (3, 3) does not broadcast to the scores' shape (2, 2, 3, 5)")
    ):
        check_attention_call(attn, x, torch.ones(3, 3, dtype=torch.bool), False, memory)
    head = SingleHeadAttention(8, 4)
    check_attention_call(head, x, torch.ones(2, 3, 3, dtype=torch.bool), False, per_head=False)  # (B, T, T)
    with pytest.raises(ValueError, match=re.escape("to the scores' shape (2, 3, 3)")):
        check_attention_call(head, x, torch.ones(2, 2, 3, 3, dtype=torch.bool), False, per_head=False)


def test_check_positions_defaults_to_0_to_T_minus_1_and_keeps_below_the_context_length():
    assert torch.equal(check_positions(None, 4, torch.device("cpu")), torch.arange(4))
    assert torch.equal(check_positions(torch.tensor([5, 6]), 2, torch.device("cpu")), torch.tensor([5, 6]))
    with pytest.raises(ValueError, match="position 4 is beyond context_length = 4"):
        check_positions(None, 5, torch.device("cpu"), context_length=4)
    with pytest.raises(ValueError, match="position 6 is beyond context_length = 5"):
        check_positions(torch.tensor([5, 6]), 2, torch.device("cpu"), context_length=5)


def test_check_even_int_checks_the_int_before_the_pairs():
    with pytest.raises(TypeError, match="D must be an int, got float"):
        check_even_int("D", 4.0, "pairs")
    with pytest.raises(ValueError, match="D must be at least 2, got 0"):
        check_even_int("D", 0, "pairs")
    with pytest.raises(ValueError, match=re.escape("D must be even (pairs), got 3")):
        check_even_int("D", 3, "pairs")


def test_check_layer_input_is_skipped_while_torch_compile_traces(monkeypatch):
    attn = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=re.escape("x must have shape (B, T, C=8), got (1, 3, 6)")):
        check_layer_input(torch.randn(1, 3, 6), 8, attn)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    check_layer_input(torch.randn(1, 3, 6), 8, attn)  # no attribute reads in a compiled graph
