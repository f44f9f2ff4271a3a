"""Workflow data plumbing: `{{ name.path }}` templates and a small safe condition language.

Conditions are Python-shaped expressions over step outputs — comparisons, `and`/`or`/`not`,
`in`, literals, dotted names — plus the word `empty` (`x is empty`, `x is not empty`).
Anything else (for example plain prose) is not an expression: `evaluate` raises
`NotAnExpression` and the engine asks the model instead.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["NotAnExpression", "evaluate", "lookup", "render"]

_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][\w-]*(?:\.[\w-]+)*)\s*\}\}")
_EMPTY = object()


class NotAnExpression(ValueError):
    """The condition is not in the expression language (or names something unknown)."""


def lookup(state: Mapping[str, Any], path: str) -> Any:
    head, *rest = path.split(".")
    if head not in state:
        raise KeyError(f"{head!r} is not an input or an earlier step output (known: {sorted(state)})")
    value = state[head]
    for part in rest:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list | tuple) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(f"{path!r}: no {part!r} in {type(value).__name__}")
    return value


def render(value: Any, state: Mapping[str, Any]) -> Any:
    """Fill `{{ name }}` references; a string that is one whole reference keeps the raw value."""
    if isinstance(value, str):
        whole = _TEMPLATE.fullmatch(value.strip())
        if whole:
            return lookup(state, whole.group(1))
        return _TEMPLATE.sub(lambda m: _as_text(lookup(state, m.group(1))), value)
    if isinstance(value, Mapping):
        return {k: render(v, state) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, state) for v in value]
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def evaluate(expression: str, state: Mapping[str, Any]) -> bool:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise NotAnExpression(expression) from None
    return bool(_eval(tree.body, state))


def _eval(node: ast.AST, state: Mapping[str, Any]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Name(id="empty"):
            return _EMPTY
        case ast.Name() | ast.Attribute() if (path := _dotted(node)) is not None:
            try:
                return lookup(state, path)
            except KeyError:
                raise NotAnExpression(f"unknown name {path!r}") from None
        case ast.List(elts=items) | ast.Tuple(elts=items):
            return [_eval(i, state) for i in items]
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(v, state) for v in values)
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(v, state) for v in values)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return not _eval(operand, state)
        case ast.Compare(left=left, ops=ops, comparators=rights):
            current = _eval(left, state)
            for op, right_node in zip(ops, rights, strict=True):
                right = _eval(right_node, state)
                if not _compare(op, current, right):
                    return False
                current = right
            return True
    raise NotAnExpression(f"unsupported syntax: {ast.dump(node)[:80]}")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if right is _EMPTY and isinstance(op, ast.Is | ast.IsNot):
        is_empty = left is None or (hasattr(left, "__len__") and len(left) == 0) or left == ""
        return is_empty if isinstance(op, ast.Is) else not is_empty
    match op:
        case ast.Eq():
            return bool(left == right)
        case ast.NotEq():
            return bool(left != right)
        case ast.Lt():
            return bool(left < right)
        case ast.LtE():
            return bool(left <= right)
        case ast.Gt():
            return bool(left > right)
        case ast.GtE():
            return bool(left >= right)
        case ast.In():
            return left in right
        case ast.NotIn():
            return left not in right
        case ast.Is():
            return left is right
        case ast.IsNot():
            return left is not right
    raise NotAnExpression(f"unsupported comparison {type(op).__name__}")
