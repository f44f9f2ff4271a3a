"""Pieces the structural tests share: an AST rule violation, the docstrings of a module (text in
them is not code), and whether a module uses some names at all."""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["Violation", "docstring_ids", "uses_names"]


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    detail: str


def docstring_ids(tree: ast.Module) -> set[int]:
    """`id()` of every docstring constant in `tree` (module, class and function docstrings)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def uses_names(tree: ast.Module, names: Collection[str]) -> bool:
    """Whether `tree` imports one of `names` or reaches one as an attribute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(alias.name in names for alias in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr in names:
            return True
    return False
