#!/usr/bin/env python3
"""Print, per module, the share of function-body lines that check arguments (authors' tool, issue #20).

    python3 tools/check_share.py                 # the modules a learner reads, against the 20% goal
    python3 tools/check_share.py --all           # every module of course_utils
    python3 tools/check_share.py --functions     # also each function whose checks are more than half its body
    python3 tools/check_share.py --max 0.20      # exit 1 when a module listed is above the share given
    python3 tools/check_share.py FILE [FILE ...] # these files

What counts (read from the syntax tree, no import): a function-body line is a line of a statement inside a
``def``, less its docstring, blank lines and comment lines. A check line is a line of a statement that checks:
``raise SomeError(...)`` (a bare ``raise`` passes a failure on: no check), ``assert``, a call to a function
whose name starts with ``check`` or ``_check`` (as a statement, anywhere in the value of an assignment, or as
the value returned), an ``if`` or ``for`` whose whole body is such statements, an ``except`` that ends in
``raise SomeError(...)``, a ``try`` whose body only calls (``torch.broadcast_shapes(...)``) and whose every
``except`` is such, and every line of a function named ``check_*``, ``_check_*`` or ``validate*``. What a
module hands to ``_validate`` is one line where it is called: the checks live in one place, the module reads
as the idea.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
GOAL = 0.20


def _calls_check(node: ast.AST) -> bool:
    """True for a call of a function named ``check*`` or ``_check*`` (plain or as an attribute)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name.startswith(("check", "_check"))


def _is_check_call(node: ast.AST) -> bool:
    """True for an expression holding such a call anywhere."""
    return any(_calls_check(sub) for sub in ast.walk(node))


def _is_check(stmt: ast.stmt) -> bool:
    """True for a statement that only checks (see the module's docstring)."""
    if isinstance(stmt, ast.Raise):
        return stmt.exc is not None  # a bare ``raise`` passes a failure on (after a clean-up, say): no check
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, ast.Expr):
        return _is_check_call(stmt.value)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return stmt.value is not None and _is_check_call(stmt.value)
    if isinstance(stmt, ast.Return):  # return check_int(...): the checked value is the answer
        return _calls_check(stmt.value)  # not return kernel(check_x(...)): that line is the idea
    if isinstance(stmt, (ast.If, ast.For)):
        return all(_is_check(s) for s in stmt.body + stmt.orelse)
    if isinstance(stmt, ast.Try):  # try: torch.broadcast_shapes(...) except RuntimeError: raise ValueError(...)
        provokes = all(isinstance(s, ast.Expr) for s in stmt.body)  # its result unused: it is there to fail
        return provokes and not (stmt.orelse or stmt.finalbody) and all(_translates(h) for h in stmt.handlers)
    return False


def _translates(node: ast.AST) -> bool:
    """True for an ``except`` that ends in ``raise SomeError(...)``: it turns a failure into the caller's error."""
    if not isinstance(node, ast.ExceptHandler):
        return False
    return isinstance(node.body[-1], ast.Raise) and node.body[-1].exc is not None


def _lines(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _is_checker(name: str) -> bool:
    """Whether a function of this name is a check as a whole (all its lines count)."""
    return name.startswith(("check_", "_check", "validate", "_validate"))


def measure(source: str) -> tuple[int, int, list[tuple[str, int, int]]]:
    """(function-body lines, check lines, [(function, body lines, check lines)]) of one module's source."""
    tree = ast.parse(source)
    code_lines = set()  # lines holding code: not blank, not only a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    body, checks, per_function = set(), set(), []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        statements = list(func.body)
        if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
            statements = statements[1:]  # the docstring
        own_body, own_checks = set(), set()
        for stmt in statements:
            own_body |= _lines(stmt)
            if _is_checker(func.name):
                own_checks |= _lines(stmt)
            else:
                for sub in ast.walk(stmt):  # checks inside loops, with-blocks, try-blocks of this function
                    if _translates(sub) or isinstance(sub, ast.stmt) and _is_check(sub):
                        own_checks |= _lines(sub)
        own_body &= code_lines
        own_checks &= own_body
        per_function.append((func.name, len(own_body), len(own_checks)))
        body |= own_body
        checks |= own_checks
    return len(body), len(checks), per_function


def _default_files(every: bool) -> list[Path]:
    if every:
        return sorted((ROOT / "course_utils").rglob("*.py"))
    return [ROOT / "course_utils" / f"{name}.py" for name in LEARNER_MODULES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Share of function-body lines that check arguments, per module (goal: at most 20%).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[-1],
    )
    parser.add_argument("files", nargs="*", type=Path, help="modules to measure (default: the learner's nine)")
    parser.add_argument("--all", action="store_true", help="every module of course_utils")
    parser.add_argument("--functions", action="store_true", help="list functions whose checks outweigh their idea")
    parser.add_argument("--max", type=float, default=None, help="exit 1 when a module's share is above this")
    args = parser.parse_args(argv)
    if args.max is not None and not 0 <= args.max <= 1:
        parser.error(f"--max is a share between 0 and 1 (0.20 for 20%), got {args.max}")
    files = args.files or _default_files(args.all)
    sources = {}
    for path in files:
        try:
            sources[path] = path.read_text(encoding="utf-8")
            ast.parse(sources[path], filename=str(path))
        except (OSError, UnicodeDecodeError) as err:
            parser.error(f"cannot read {path}: {err.strerror if isinstance(err, OSError) else err}")
        except SyntaxError as err:
            parser.error(f"{path} is not Python this script can read: {err.msg} (line {err.lineno})")
    total_body = total_checks = 0
    over = []
    print(f"{'module':<42} {'body':>6} {'checks':>7} {'share':>6}")
    for path in files:
        n_body, n_checks, per_function = measure(sources[path])
        total_body += n_body
        total_checks += n_checks
        share = n_checks / n_body if n_body else 0.0
        name = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        flag = "  over" if args.max is not None and share > args.max else ""
        print(f"{str(name):<42} {n_body:>6} {n_checks:>7} {share:>6.0%}{flag}")
        if flag:
            over.append(str(name))
        if args.functions:
            for func, n, c in per_function:
                if n and c / n > 0.5 and not _is_checker(func):
                    print(f"    {func:<38} {n:>6} {c:>7} {c / n:>6.0%}")
    share = total_checks / total_body if total_body else 0.0
    print(f"{'all':<42} {total_body:>6} {total_checks:>7} {share:>6.0%}")
    if over:
        print(f"above {args.max:.0%}: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
