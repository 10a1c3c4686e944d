#!/usr/bin/env python3
"""Print, per module a learner reads, the share of the lines a call runs that check its arguments (issue #25).

    python3 tools/check_share.py          # one good call of every public entry (tests/bad_inputs.py's)
    python3 tools/check_share.py --lines  # also every check line that ran, file:line

How it counts. Each good call runs under ``sys.settrace``; the lines of ``course_utils`` it executes are
collected once per call (a loop's line is one line), in whatever file they are: the module's own, another
module's, or ``_validate``. A line is a check line when it belongs to a statement that checks: every line of
``_validate``; every line of a function named ``check_*``; ``raise SomeError(...)``; a call of a ``check*``
function as a statement; an ``if`` or ``for`` whose body only checks (the ``if`` line and its body); a
``try`` that only provokes an error whose every ``except`` raises the caller's error. Everything else is the
idea. A call belongs to the module of the first ``course_utils`` line outside ``_validate`` it runs. Lines
that compute only for a check (``scores_shape = ...``) count as idea: the share is a floor, not a ceiling.
Moving a check to another file does not change it: the validator's lines count where they run.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_utils"
LEARNER_MODULES = (
    "attention",
    "masking",
    "multihead",
    "positional",
    "variants",
    "fast_attention",
    "generation",
    "block",
    "gpt",
)


def _calls_check(node: ast.AST) -> bool:
    """True for a call of a function named ``check*`` (plain, or as an attribute: ``self.check_ids``)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name.startswith(("check", "_check"))


def _is_check(stmt: ast.stmt) -> bool:
    """True for a statement that only checks (see the module's docstring)."""
    if isinstance(stmt, ast.Raise):
        return stmt.exc is not None  # a bare ``raise`` passes a failure on: no check
    if isinstance(stmt, ast.Expr):
        return _calls_check(stmt.value)
    if isinstance(stmt, (ast.If, ast.For)):
        return all(_is_check(s) for s in stmt.body + stmt.orelse)
    if isinstance(stmt, ast.Try):  # try: torch.broadcast_shapes(...) except RuntimeError: raise ValueError(...)
        provokes = all(isinstance(s, ast.Expr) for s in stmt.body)
        translates = all(isinstance(h.body[-1], ast.Raise) and h.body[-1].exc is not None for h in stmt.handlers)
        return provokes and translates and not (stmt.orelse or stmt.finalbody)
    return False


@cache
def check_lines(path: str) -> frozenset[int]:
    """The line numbers of ``path`` that belong to a check."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    whole_file = Path(path).name == "_validate.py"
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            whole_file or node.name.startswith(("check_", "_check"))
        ):
            lines.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.stmt) and _is_check(node):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return frozenset(lines)


def lines_run(fn, args, kwargs) -> tuple[str | None, set[tuple[str, int]]]:
    """(the module the call belongs to, the distinct course_utils lines it ran); its exception is swallowed."""
    seen: set[tuple[str, int]] = set()
    first: list[str] = []

    def tracer(frame, event, arg):
        path = frame.f_code.co_filename
        if not path.startswith(str(PACKAGE)):
            return None  # not course_utils: do not trace inside it
        if event == "line":
            seen.add((path, frame.f_lineno))
            if not first and not path.endswith("_validate.py"):
                first.append(Path(path).stem)
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args, **kwargs)
    except Exception:  # noqa: BLE001, S110 - a good call should not fail; the lines it ran are counted anyway
        pass
    finally:
        sys.settrace(None)
    return (first[0] if first else None), seen


def _entries():
    spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "tests" / "bad_inputs.py")
    battery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(battery)
    return battery._entries()


def measure() -> dict[str, dict]:
    """Per module: calls, lines run, check lines run, and where each check line lives."""
    out: dict[str, dict] = defaultdict(lambda: {"calls": 0, "run": 0, "checks": 0, "where": defaultdict(int)})
    for _name, fn, args, kwargs in _entries():
        module, seen = lines_run(fn, args, kwargs)
        if module is None:
            continue
        row = out[module]
        row["calls"] += 1
        row["run"] += len(seen)
        for path, line in seen:
            if line in check_lines(path):
                row["checks"] += 1
                row["where"][f"{Path(path).name}:{line}"] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Share of the lines a call runs that check its arguments, per learner module.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[-1],
    )
    parser.add_argument("--lines", action="store_true", help="list the check lines that ran, file:line")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    rows = measure()
    print(f"{'module':<16} {'calls':>5} {'lines run':>9} {'checks':>7} {'share':>6}")
    total_run = total_checks = 0
    for module in LEARNER_MODULES:
        row = rows.get(module)
        if row is None:
            continue
        total_run, total_checks = total_run + row["run"], total_checks + row["checks"]
        print(f"{module:<16} {row['calls']:>5} {row['run']:>9} {row['checks']:>7} {row['checks'] / row['run']:>6.0%}")
        if args.lines:
            print("    " + ", ".join(sorted(row["where"])))
    print(f"{'all':<16} {'':>5} {total_run:>9} {total_checks:>7} {total_checks / total_run:>6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
