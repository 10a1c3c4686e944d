"""Mutants of each exercise's reference solution, made from the notebook source, for tests/test_mutations.py.

The reference a learner sees is the code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` in
``course_source/NN_*.py``, inside a ``def`` whose function the notebook then checks with
``check("NN.K", name)``. :func:`solutions` finds those functions and the namespace they run in (every
top-level ``import`` of the notebook source, as its import cells give it). :func:`mutants` parses one with
:mod:`ast` and yields every single-site mutant a learner's slip could make:

- ``dim``: an axis changed (``dim=-1`` -> ``-2``, ``0`` <-> ``1``; positional axes of ``transpose``, ``sum``, ...);
- ``transpose``: ``.T``, ``.mT``, ``.transpose(...)``, ``.permute(...)`` dropped;
- ``scale``: the right operand of a ``*`` or ``/`` dropped, or doubled;
- ``off-by-one``: +-1 on slice bounds, ``arange``/``range`` arguments, ``diagonal=`` and ``tril``/``triu`` arguments;
- ``in-place``: a method or ``torch.f(arg, ...)`` call, or ``arg op y``, on a parameter turned into the
  in-place variant (``scores.masked_fill(`` -> ``scores.masked_fill_(``, ``x / t`` -> ``x.div_(t)``);
- ``dtype``: the returned tensors' dtype changed (floating -> float64, integer and bool -> float32);
- ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, and each reversed;
- ``max/min``, ``sum/mean``, ``tril/triu``: the one swapped for the other;
- ``sign``: a unary minus dropped; ``polarity``: a ``~`` dropped;
- ``dropped call``: ``torch.softmax(s, ...)``, ``torch.exp(s)``, ... replaced by ``s``;
- ``operands swapped``: ``a @ b`` -> ``b @ a``, ``a - b`` -> ``b - a``.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

AXIS_METHODS = {
    "transpose",
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "softmax",
    "log_softmax",
    "cumsum",
    "flatten",
    "argmax",
    "argmin",
    "unsqueeze",
    "squeeze",
    "size",
    "logsumexp",
    "std",
    "var",
    "norm",
}
AXIS_SWAP = {-1: -2, -2: -1, 0: 1, 1: 0, 2: 1, 3: 2}
SWAPPED = [("amax", "amin"), ("max", "min"), ("argmax", "argmin"), ("sum", "mean"), ("tril", "triu")]
SWAPS = {a: b for pair in SWAPPED for a, b in (pair, pair[::-1])}  # each name to the other of its pair
COMPARE = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE)}
INPLACE_BINOP = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}
OFF_BY_ONE_CALLS = {"arange", "range", "tril", "triu"}
DTYPE_HELPER = "__mutant_dtype__"


@dataclass(frozen=True)
class Solution:
    key: str
    name: str
    source: str  # the def, from its first line to the END SOLUTION marker
    namespace: dict  # the notebook's imports
    path: Path


@dataclass(frozen=True)
class Mutant:
    operator: str
    description: str  # the mutated line, as source
    source: str  # the whole mutated def


def _changed_dtype(x: Any) -> Any:
    """The returned value with each tensor's dtype changed: float32 -> float64, anything else -> float32."""
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() and x.dtype != torch.float64 else x.float()
    if isinstance(x, tuple):
        return tuple(_changed_dtype(i) for i in x)
    if isinstance(x, list):
        return [_changed_dtype(i) for i in x]
    return x


def _imports(tree: ast.Module) -> str:
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def solutions() -> dict[str, Solution]:
    """Every checked exercise's reference solution in the notebook sources, by exercise key."""
    found: dict[str, Solution] = {}
    for path in sorted(ROOT.glob("course_source/[0-9][0-9]_*.py")):
        text = path.read_text()
        if BEGIN not in text:
            continue
        tree = ast.parse(text)
        namespace: dict[str, Any] = {}
        exec(compile(_imports(tree), str(path), "exec"), namespace)  # noqa: S102 - the notebook's own imports
        lines = text.splitlines()
        checked = dict((name, key) for key, name in re.findall(r"check\(\s*\"(\d\d\.\d+)\",\s*(\w+)", text))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name not in checked:
                continue
            body = lines[node.lineno - 1 :]
            end = next((i for i, ln in enumerate(body) if END in ln), None)
            if end is None or not any(BEGIN in ln for ln in body[:end]):
                continue
            source = "\n".join(body[: end + 1])
            found[checked[node.name]] = Solution(checked[node.name], node.name, source, namespace, path)
    return found


def compile_function(sol: Solution, source: str) -> Callable[..., Any]:
    """The function ``source`` defines, run in a copy of the notebook's namespace."""
    namespace = dict(sol.namespace)
    namespace[DTYPE_HELPER] = _changed_dtype
    exec(compile(source, f"<mutant of {sol.key}>", "exec"), namespace)  # noqa: S102 - our own mutants
    return namespace[sol.name]


# ------------------------------------------------------------------------------------------ the operators


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _int_node(v: int) -> ast.AST:
    return ast.UnaryOp(ast.USub(), ast.Constant(-v)) if v < 0 else ast.Constant(v)


def _plus(node: ast.AST, d: int) -> ast.AST:
    v = _int_value(node)
    if v is not None:
        return _int_node(v + d)
    return ast.BinOp(copy.deepcopy(node), ast.Add() if d > 0 else ast.Sub(), ast.Constant(abs(d)))


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _sites(fn: ast.FunctionDef, returns_tensors: bool) -> list[tuple[str, ast.AST, Callable[[ast.AST], ast.AST]]]:
    """Every (operator, node, replace) a mutant can come from: ``replace(node)`` gives the mutated node."""
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    sites: list[tuple[str, ast.AST, Callable[[ast.AST], ast.AST]]] = []

    def add(op: str, node: ast.AST, replace: Callable[[ast.AST], ast.AST]) -> None:
        sites.append((op, node, replace))

    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            for i, kw in enumerate(node.keywords):
                v = _int_value(kw.value)
                if kw.arg == "dim" and v in AXIS_SWAP:
                    add("dim", node, lambda n, i=i, v=v: _with_keyword(n, i, _int_node(AXIS_SWAP[v])))
                if kw.arg == "diagonal":
                    for d in (1, -1):
                        add("off-by-one", node, lambda n, i=i, d=d: _with_keyword(n, i, _plus(n.keywords[i].value, d)))
            if name in AXIS_METHODS and isinstance(node.func, ast.Attribute):
                # method axes: x.sum(1), x.transpose(1, 2); torch.f(x, dim) has the axis second
                first = 0 if not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F")) else 1
                for j in range(first, len(node.args)):
                    v = _int_value(node.args[j])
                    if v in AXIS_SWAP:
                        add("dim", node, lambda n, j=j, v=v: _with_arg(n, j, _int_node(AXIS_SWAP[v])))
            if (
                name in ("softmax", "log_softmax", "exp", "log")
                and node.args
                and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) in ("torch", "F")
            ):  # torch.softmax(s, dim) -> s
                add("dropped call", node, lambda n: copy.deepcopy(n.args[0]))
            if name in ("transpose", "permute") and isinstance(node.func, ast.Attribute):
                add("transpose", node, lambda n: copy.deepcopy(n.func.value))
            if name in OFF_BY_ONE_CALLS:
                for j in range(len(node.args)):
                    if (
                        name in ("tril", "triu")
                        and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "torch"
                        and j == 0
                    ):
                        continue  # torch.tril(x, d): x is the tensor, not a number
                    for d in (1, -1):
                        add("off-by-one", node, lambda n, j=j, d=d: _with_arg(n, j, _plus(n.args[j], d)))
            if name in SWAPS and isinstance(node.func, ast.Attribute):
                op = {"tril": "tril/triu", "triu": "tril/triu", "sum": "sum/mean", "mean": "sum/mean"}.get(
                    name, "max/min"
                )
                add(op, node, lambda n, s=SWAPS[name]: _with_func_attr(n, s))
            if isinstance(node.func, ast.Attribute) and hasattr(torch.Tensor, f"{name}_") and not name.endswith("_"):
                receiver = node.func.value
                if isinstance(receiver, ast.Name) and receiver.id in params:  # param.f(...) -> param.f_(...)
                    add("in-place", node, lambda n: _with_func_attr(n, f"{_call_name(n)}_"))
                elif (
                    isinstance(receiver, (ast.Name, ast.Attribute))
                    and ast.unparse(receiver) in ("torch", "torch.special", "F")
                    and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in params
                ):  # torch.f(param, ...) -> param.f_(...)
                    add(
                        "in-place", node, lambda n: _method_call(n.args[0], f"{_call_name(n)}_", n.args[1:], n.keywords)
                    )
        elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
            add("transpose", node, lambda n: copy.deepcopy(n.value))
        elif isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.Mult, ast.Div)):
                add("scale", node, lambda n: copy.deepcopy(n.left))
                add(
                    "scale",
                    node,
                    lambda n: ast.BinOp(
                        copy.deepcopy(n.left),
                        type(n.op)(),
                        ast.BinOp(ast.Constant(2), ast.Mult(), copy.deepcopy(n.right)),
                    ),
                )
            if isinstance(node.op, (ast.MatMult, ast.Sub)):  # a @ b -> b @ a, a - b -> b - a
                add(
                    "operands swapped",
                    node,
                    lambda n: ast.BinOp(copy.deepcopy(n.right), type(n.op)(), copy.deepcopy(n.left)),
                )
            if type(node.op) in INPLACE_BINOP and isinstance(node.left, ast.Name) and node.left.id in params:
                add("in-place", node, lambda n: _method_call(n.left, INPLACE_BINOP[type(n.op)], [n.right]))
        elif isinstance(node, ast.Subscript):
            for part in node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]:
                if isinstance(part, ast.Slice):
                    for bound in ("lower", "upper"):
                        if getattr(part, bound) is not None:
                            for d in (1, -1):
                                add("off-by-one", part, lambda p, b=bound, d=d: _with_bound(p, b, d))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
            for new in COMPARE[type(node.ops[0])]:
                add(
                    "compare",
                    node,
                    lambda n, new=new: ast.Compare(copy.deepcopy(n.left), [new()], copy.deepcopy(n.comparators)),
                )
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int_value(node) is None:
            add("sign", node, lambda n: copy.deepcopy(n.operand))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            add("polarity", node, lambda n: copy.deepcopy(n.operand))
            if isinstance(node.operand, ast.Name) and node.operand.id in params:  # ~mask -> mask.bitwise_not_()
                add("in-place", node, lambda n: _method_call(n.operand, "bitwise_not_"))
        elif isinstance(node, ast.Return) and node.value is not None and returns_tensors:
            add(
                "dtype",
                node,
                lambda n: ast.Return(ast.Call(ast.Name(DTYPE_HELPER, ast.Load()), [copy.deepcopy(n.value)], [])),
            )
    return sites


def _method_call(
    receiver: ast.AST, name: str, args: Iterable[ast.AST] = (), keywords: Iterable[ast.keyword] = ()
) -> ast.Call:
    """``receiver.name(*args, **keywords)``, built of copies of the nodes given."""
    return ast.Call(
        ast.Attribute(copy.deepcopy(receiver), name, ast.Load()),
        [copy.deepcopy(a) for a in args],
        [copy.deepcopy(k) for k in keywords],
    )


def _with_keyword(call: ast.Call, i: int, value: ast.AST) -> ast.Call:
    new = copy.deepcopy(call)
    new.keywords[i].value = value
    return new


def _with_arg(call: ast.Call, j: int, value: ast.AST) -> ast.Call:
    new = copy.deepcopy(call)
    new.args[j] = value
    return new


def _with_func_attr(call: ast.Call, attr: str) -> ast.Call:
    new = copy.deepcopy(call)
    new.func.attr = attr
    return new


def _with_bound(part: ast.Slice, bound: str, d: int) -> ast.Slice:
    new = copy.deepcopy(part)
    setattr(new, bound, _plus(getattr(part, bound), d))
    return new


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST) -> None:
        self.target, self.replacement = target, replacement

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return self.replacement
        return super().visit(node)


def mutants(sol: Solution, returns_tensors: bool = True) -> Iterator[Mutant]:
    """Every distinct single-site mutant of ``sol`` (none equal to the original once unparsed).

    ``returns_tensors=False`` (a solution that returns a Python number) leaves out the ``dtype`` mutants:
    a number has no dtype the instructions could ask for.
    """
    tree = ast.parse(sol.source)
    original = ast.unparse(tree)
    seen = {original}
    n_sites = len(_sites(tree.body[0], returns_tensors))
    for index in range(n_sites):
        fresh = ast.parse(sol.source)  # a fresh tree each time, so sites are found by position
        op, node, replace = _sites(fresh.body[0], returns_tensors)[index]
        mutated = _Replace(node, replace(node)).visit(fresh)
        ast.fix_missing_locations(mutated)
        source = ast.unparse(mutated)
        if source in seen:
            continue
        seen.add(source)
        yield Mutant(op, _diff_line(original, source), source)


def _diff_line(original: str, mutated: str) -> str:
    """The first line of ``mutated`` that differs from ``original`` (the mutation, in source)."""
    for a, b in zip(original.splitlines(), mutated.splitlines()):
        if a != b:
            return b.strip()
    return mutated.splitlines()[-1].strip()


SCORE_PROPERTY = "mutation_score"  # a test report's user property: [key, killed, killable, equivalent, seconds]


def summary_lines(scores: dict[str, tuple[int, int, int, float]]) -> list[str]:
    """The mutation score per exercise (key -> killed, killable, equivalent, seconds), for the end of the run."""
    if not scores:
        return []
    lines = []
    for key in sorted(scores, key=lambda k: tuple(int(p) for p in k.split("."))):
        killed, total, equivalent, seconds = scores[key]
        extra = f", {equivalent} equivalent" if equivalent else ""
        lines.append(
            f"{key}: {killed}/{total} mutants killed ({100 * killed / max(total, 1):.0f}%){extra}, {seconds:.1f} s"
        )
    killed = sum(s[0] for s in scores.values())
    total = sum(s[1] for s in scores.values())
    seconds = sum(s[3] for s in scores.values())
    lines.append(
        f"all {len(scores)} exercises: {killed}/{total} killed ({100 * killed / max(total, 1):.1f}%), "
        f"{sum(s[2] for s in scores.values())} equivalent, {seconds:.1f} s"
    )
    return lines
