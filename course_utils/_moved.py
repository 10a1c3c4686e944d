"""Names that moved or were renamed: code written before is told the new name in one line.

Imports nothing heavy (no torch), so that the setup check (``environment``) can use it on a machine without torch.
"""

from __future__ import annotations


def moved_names(module: str, moved: dict[str, str]):
    """A module-level ``__getattr__`` for ``module``: each old name of ``moved`` (old name -> its new dotted home)
    raises ImportError in one line naming the new home; any other missing name the usual AttributeError.

    ImportError, not AttributeError: ``from module import old`` (a learner's notebook from before a move) would
    otherwise show only Python's "cannot import name". So ``hasattr(module, old)`` and ``getattr(module, old, None)``
    raise it too: an old name is never quietly absent. The one home of the module-level moved-name errors.
    """

    def __getattr__(name: str):
        if name in moved:
            raise ImportError(f"{module}.{name} is now {moved[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
