"""What a rule is: a class with declared metadata that reads a ``FileAnalysis`` and reports
violations, each with the fix that removes it when the rule can prove one."""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass
from typing import ClassVar, Iterator

import libcst as cst

from .analysis import FileAnalysis
from .edits import Fix
from .symptoms import SECOND_BACKWARD, Symptom


class FixKind(str, enum.Enum):
    SAFE = "safe"  # keeps what the program computes, or only removes the error
    UNSAFE = "unsafe"  # changes the maths; applied only with --unsafe-fixes


@dataclass(frozen=True)
class Finding:
    """One problem at one place, as users see it."""

    code: str
    line: int
    column: int
    message: str
    fix: FixKind | None = None  # the kind of fix on offer, if any
    related_lines: tuple[int, ...] = ()  # other lines involved (the other backward, the loop, …)
    path: str = ""
    cell: int | None = None  # in a notebook, the cell that ``line`` counts in
    end_line: int = 0  # where the flagged code ends (0: not known)
    end_column: int = 0

    @property
    def location(self) -> str:
        """``path:line:column``, or ``path:cell N:line:column`` in a notebook."""
        cell = "" if self.cell is None else f"cell {self.cell}:"
        return f"{self.path}:{cell}{self.line}:{self.column}"

    def render(self) -> str:
        """One line, the same with or without colour; ends with the kind of fix on offer."""
        marker = f" [{self.fix.value} fix]" if self.fix is not None else ""
        return f"{self.location}: {self.code} {self.message}{marker}"


@dataclass(frozen=True)
class Violation:
    finding: Finding
    fix: Fix | None = None


class Rule:
    """Base class of every rule. Subclasses set the metadata below, explain the bug and its fix in
    their docstring (``gradfix explain`` prints it), and implement ``violations``."""

    CODE: ClassVar[str]
    NAME: ClassVar[str]  # the module name; also the fixture folder under tests/fixtures/
    SUMMARY: ClassVar[str]
    FIX: ClassVar[FixKind | None]  # the best fix the rule offers; None if it only reports
    KEEPS_GRADIENTS: ClassVar[bool] = False  # a fix gives the same gradients as retain_graph=True
    SYMPTOM: ClassVar[Symptom] = SECOND_BACKWARD  # what a run of the buggy program shows
    EXAMPLE_BEFORE: ClassVar[str]
    EXAMPLE_AFTER: ClassVar[str]

    def __init__(self, analysis: FileAnalysis) -> None:
        self.analysis = analysis

    def violations(self) -> Iterator[Violation]:
        raise NotImplementedError

    def violation(
        self,
        node: cst.CSTNode,
        message: str,
        fix: Fix | None = None,
        related: tuple[cst.CSTNode, ...] = (),
    ) -> Violation:
        line, column = self.analysis.start(node)
        end = self.analysis.range(node).end
        if fix is not None and any(self.analysis.updates_parameters(s) for s in fix.taken_away()):
            fix, message = None, message + " (not rewritten: the fix would remove or move an optimizer update)"
        kind = None if fix is None else (FixKind.SAFE if fix.safe else FixKind.UNSAFE)
        related_lines = tuple(sorted({self.analysis.line(n) for n in related} - {line}))
        finding = Finding(self.CODE, line, column + 1, message, kind, related_lines, end_line=end.line, end_column=end.column + 1)
        return Violation(finding, fix)

    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()
