"""Names that moved or were renamed: code written before is told the new name in one line. The one home of those
errors: a module's moved names (:func:`moved_names`), a function's renamed keywords (:func:`renamed_keywords`) and
a class's renamed attributes (:func:`renamed_attributes`).

Imports nothing heavy (no torch), so that the setup check (``environment``) can use it on a machine without torch.
"""

from __future__ import annotations

import functools


def moved_names(module: str, moved: dict[str, str]):
    """A module-level ``__getattr__`` for ``module``: each old name of ``moved`` (old name -> its new dotted home)
    raises ImportError in one line naming the new home; any other missing name the usual AttributeError.

    ImportError, not AttributeError: ``from module import old`` (a learner's notebook from before a move) would
    otherwise show only Python's "cannot import name". So ``hasattr(module, old)`` and ``getattr(module, old, None)``
    raise it too: an old name is never quietly absent.
    """

    def __getattr__(name: str):
        if name in moved:
            raise ImportError(f"{module}.{name} is now {moved[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def renamed_keywords(where: str, renamed: dict[str, str]):
    """A decorator: the function (or a dataclass's ``__init__``) refuses each old keyword of ``renamed`` (old ->
    new) with one TypeError line, "lr was renamed learning_rate (where)"; the signature shown stays the real one."""

    def decorate(function):
        @functools.wraps(function)
        def refusing(*args, **kwargs):
            for name in kwargs:
                if name in renamed:
                    raise TypeError(f"{name} was renamed {renamed[name]} ({where})")
            return function(*args, **kwargs)

        return refusing

    return decorate


def renamed_attributes(where: str, renamed: dict[str, str]):
    """A class's ``__getattr__`` (reached only for a name the object lacks): an old attribute of ``renamed`` raises
    AttributeError in one line naming the new one; any other the usual AttributeError."""

    def __getattr__(self, name: str):
        if name in renamed:
            raise AttributeError(f"{name} was renamed {renamed[name]} ({where})")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    return __getattr__
