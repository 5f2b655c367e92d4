"""What a check says of a file: its ``Finding``s, the kind of fix each offers, the ``FileReport`` of
one file and the ``FixMode`` it was checked in. Plain data, with no dependency on the analysis:
reports are read back from the cache (and pass between processes) without loading it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FixKind(str, enum.Enum):
    SAFE = "safe"  # keeps what the program computes, or only removes the error
    UNSAFE = "unsafe"  # changes the maths; applied only with --unsafe-fixes


@dataclass(frozen=True)
class ProofLine:
    """One obligation of a fix and its answer: ``proved``, or ``unknown``/``refuted`` by a construct
    (``kind``) at ``line``."""

    obligation: str
    answer: str
    line: int = 0
    construct: str = ""


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
    related_cells: tuple[int, ...] = ()  # in a notebook, the cell each of ``related_lines`` counts in
    end_line: int = 0  # where the flagged code ends (0: not known)
    end_column: int = 0
    proof: tuple[ProofLine, ...] = ()  # the obligations of the fix on offer, each with its answer
    # The bug rests on a fact gradfix could only guess (a "may", not a "must"): shown only when
    # hints are asked for (``--hints``), and never with a fix.
    hint: bool = False

    @property
    def location(self) -> str:
        """``path:line:column``, or ``path:cell N:line:column`` in a notebook."""
        cell = "" if self.cell is None else f"cell {self.cell}:"
        return f"{self.path}:{cell}{self.line}:{self.column}"

    def render(self) -> str:
        """One line, the same with or without colour; ends with the kind of fix on offer."""
        marker = f" [{self.fix.value} fix]" if self.fix is not None else (" [hint]" if self.hint else "")
        return f"{self.location}: {self.code} {self.message}{marker}"


class FixMode(enum.Enum):
    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"

    def allows(self, kind: FixKind | None) -> bool:
        if kind is None or self is FixMode.NONE:
            return False
        return self is FixMode.UNSAFE or kind is FixKind.SAFE


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)  # what is left (after fixing, if fixing)
    fixed: list[Finding] = field(default_factory=list)
    original: bytes | None = None
    rewritten: bytes | None = None  # set only when fixes changed the file
    errors: list[str] = field(default_factory=list)  # bad input: the file could not be checked
    internal_errors: list[str] = field(default_factory=list)  # a fix gradfix made was wrong
    prefiltered: bool = False  # never parsed: its text could not backward (``may_backward``)
    hints_hidden: int = 0  # hints (findings resting on a guess) left out, as not asked for

    @property
    def changed(self) -> bool:
        return self.rewritten is not None


class SourceError(ValueError):
    """A file that cannot be checked: binary, undecodable or unparsable. The message names it."""
