"""A candidate rewrite of the repair search, and what every kind of rewrite reads to propose one:
how a rewrite treats the graphs (``Kind``), the files it writes, each blamed file of the user's code
with its lines on the stacks the failing run showed (``_Blamed``), and the questions about that
code that rewrites of more than one kind ask.

Apart from the kinds of rewrite (``repair_backwards.py``, ``repair_forwards.py``,
``repair_held_graphs.py``), which each build on it, and from the search and its judge, which run
and weigh candidates: what a candidate is does not depend on how it was found or how it is judged.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from ..analysis import FileAnalysis, code_of, find_nodes
from ..edits import Fix
from .runner import HeldGraph


class Kind(enum.Enum):
    """How a rewrite treats the graphs."""

    CUTS = "cuts a graph"  # detach, no_grad
    KEEPS = "keeps every graph"  # computes again, makes a gradient differentiable
    MERGES = "merges backwards"
    DROPS = "drops a call that backwards"


@dataclass(frozen=True)
class Candidate:
    description: str  # what the rewrite does, and where
    source: bytes
    kind: Kind
    change: str  # what it changes in the maths, unless a run proves it changes nothing
    module: Path | None = None  # the module beside the script it rewrites; None: the script
    module_original: bytes = b""  # that module as it was read
    base: "Candidate | None" = None  # the rewrite this one was found on top of

    def files(self, script: Path) -> dict[Path, tuple[bytes, bytes]]:
        """Every file this rewrite (and the ones it builds on) writes: path → (original, rewritten)."""
        written = self.base.files(script) if self.base is not None else {}
        path = self.module if self.module is not None else script
        original = written[path][0] if path in written else self.module_original
        written[path] = (original, self.source)
        return written

    def changed_lines(self, original: bytes) -> int:
        """Lines changed from what was read, in every file the rewrite writes: a line rewritten
        counts once, as a line added or removed does."""
        changed = 0
        for before, after in self.files(Path()).values():
            lines = [text.decode(errors="replace").splitlines() for text in (before or original, after)]
            for operation, start, end, new_start, new_end in difflib.SequenceMatcher(None, *lines, autojunk=False).get_opcodes():
                if operation != "equal":
                    changed += max(end - start, new_end - new_start)
        return changed


@dataclass
class _Blamed:
    """One file of the user's code, and its lines on each stack the run showed (innermost first)."""

    path: Path | None  # None: the script
    analysis: FileAnalysis
    forward: list[int]
    failing: list[int]
    freeing: list[int]
    reading: list[int]  # where the failing graph read the freed one
    freeing_reading: list[int]  # where the freeing backward's graph read the one the failing graph shares
    steps: set[int]  # lines that led to an optimizer step
    held: list[HeldGraph]

    def place(self, line: int) -> str:
        return f"line {line}" if self.path is None else f"{self.path.name} line {line}"

    def statement(self, lines: list[int]) -> cst.SimpleStatementLine | None:
        return self.analysis.statement_at(lines[0]) if lines else None

    @property
    def torch(self) -> str | None:
        return next((alias for alias, name in self.analysis.names.aliases.items() if name == "torch"), None)


Proposal = tuple[str, Fix, Kind, str]  # description, edit, kind, what it changes


def _loop_around(analysis: FileAnalysis, statement: cst.CSTNode | None):
    """The innermost ``for``/``while`` around ``statement`` in its own function."""
    if statement is None:
        return None
    function = analysis.function_at(analysis.line(statement))
    return next(
        (loop for loop in analysis.loops_around(statement) if not loop.is_call and analysis.function_at(analysis.line(loop.node)) is function),
        None,
    )


def _whole_backward(analysis: FileAnalysis, statement: cst.CSTNode | None):
    return next((s for s in analysis.sites_in(statement) if s.is_whole_statement), None)


def _is_import_or_docstring(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    return isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)


class _ReadReplacer(cst.CSTTransformer):
    """Replaces the reads (not the stores, nor ``is None`` tests) of one dotted expression."""

    def __init__(self, expression: str, replacement: cst.BaseExpression) -> None:
        super().__init__()
        self.expression, self.replacement = expression, replacement

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        return code_of(node.target) != self.expression

    def visit_Comparison(self, node: cst.Comparison) -> bool:
        return not any(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons)

    def leave_Attribute(self, original_node, updated_node):
        return self.replacement if code_of(original_node) == self.expression else updated_node

    def leave_Name(self, original_node, updated_node):
        return self.replacement if original_node.value == self.expression else updated_node


def _function_starting(analysis: FileAnalysis, line: int) -> cst.FunctionDef | None:
    """The function whose code starts at ``line`` (its ``def``, or its first decorator); None for 0."""
    if not line:
        return None
    for function in find_nodes(analysis.module, cst.FunctionDef):
        starts = [analysis.line(function)] + [analysis.line(d) for d in function.decorators]
        if line in starts:
            return function
    return None
