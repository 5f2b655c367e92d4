"""What users see of a problem: a ``Finding`` and the kind of fix on offer. Plain data, with no
dependency on the analysis: reports are read back from the cache without loading it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
    related_cells: tuple[int, ...] = ()  # in a notebook, the cell each of ``related_lines`` counts in
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
