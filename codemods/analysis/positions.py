"""Where nodes are in the source, placed one top-level statement at a time.

LibCST places nodes by rendering the code that holds them; rendering a whole module to place the
few nodes a finding names cost 40% of checking a 10k-line file with findings. ``Positions`` renders
only the top-level statement that holds the node asked about, on its own, and moves its lines to
where the statement starts in the file: the line Python's own parser gives the statement (LibCST
places a statement, like Python, at its first token after comments and decorators). Columns need no
moving: a top-level statement starts at column 0 either way.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, cast

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from .tree import SyntaxTree


@dataclass(frozen=True)
class _Placed:
    ranges: Mapping[cst.CSTNode, CodeRange]  # as rendered on their own
    lines_down: int  # added to each rendered line


class Positions:
    def __init__(self, module: cst.Module, tree: SyntaxTree, source: bytes, python_tree: ast.Module | None = None) -> None:
        """``source``: the bytes ``module`` was parsed from; ``python_tree``: Python's own tree of
        them, where it was parsed already."""
        if python_tree is not None:
            self.python_tree = python_tree
        self._module = module
        self._tree = tree
        self._source = source
        self._placed: dict[int, _Placed] = {}  # by the index of the top-level statement

    @cached_property
    def python_tree(self) -> ast.Module:
        """The module as Python's own parser reads it; raises SyntaxError where it cannot (LibCST
        parses syntax this Python does not)."""
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            return ast.parse(self._source)

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        index = self._top_level_index(node)
        placed = self._placed.get(index)
        if placed is None:
            placed = self._placed[index] = self._place(index)
        found = placed.ranges[node]
        if not placed.lines_down:
            return found
        return CodeRange(_down(found.start, placed.lines_down), _down(found.end, placed.lines_down))

    def _top_level_index(self, node: cst.CSTNode) -> int:
        """The index of the top-level statement that holds ``node``; -1 for the module, or when the
        statements' lines are not known (the whole module is rendered then)."""
        if self._statement_lines is None:
            return -1
        statement = self._tree.child_holding(self._module, node)
        return -1 if statement is None else self._statement_indexes[id(statement)]

    @cached_property
    def _statement_indexes(self) -> dict[int, int]:
        return {id(statement): index for index, statement in enumerate(self._module.body)}

    def _place(self, index: int) -> _Placed:
        if index < 0 or self._statement_lines is None:
            return _Placed(_rendered_ranges(self._module), 0)
        statement = self._module.body[index]
        ranges = _rendered_ranges(self._module.with_changes(header=(), body=(statement,), footer=()))
        return _Placed(ranges, self._statement_lines[index] - ranges[statement].start.line)

    @cached_property
    def _statement_lines(self) -> list[int] | None:
        """The line of each top-level statement's first token, from Python's parser; None where it
        cannot say (LibCST parses syntax this Python does not)."""
        try:
            python_statements = self.python_tree.body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        lines, taken = [], 0
        for statement in self._module.body:
            if taken >= len(python_statements):
                return None
            lines.append(python_statements[taken].lineno)
            # A statement line holds one Python statement per ``;``-separated part.
            taken += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
        return lines if taken == len(python_statements) else None


def _rendered_ranges(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """Where LibCST's ``PositionProvider`` places each node of ``module``, by the provider's own
    render. Not through ``MetadataWrapper.resolve``: it then walks the whole tree once more for the
    providers that share one walk, even when none was asked (half of placing a node)."""
    return cast(Mapping[cst.CSTNode, CodeRange], PositionProvider()._gen(MetadataWrapper(module, unsafe_skip_copy=True)))


def _down(position: CodePosition, lines: int) -> CodePosition:
    return CodePosition(position.line + lines, position.column)
