"""The shared checks of course_utils._validate: one exception policy for every module.

A bad type raises TypeError, a bad value ValueError; bool is not an int; every message says what was expected
and what arrived.
"""

import math

import numpy as np
import pytest

from course_utils._validate import (
    check_bool,
    check_choice,
    check_fraction,
    check_greater_than,
    check_int,
    check_nonnegative_number,
    check_positive_number,
)


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
