"""Unified diffs of text, as git writes and applies them: ``file_lines`` splits a file's text where git
ends its lines, ``text_diff`` diffs two files' lines. Below both ``files`` (a rewritten script) and
``notebook`` (a rewritten notebook, its hunks headed by cell), and importing neither."""

from __future__ import annotations

import difflib
from typing import Callable


def file_lines(text: str) -> list[str]:
    """``text``'s lines as git counts them: ended by ``\\n`` alone (``str.splitlines`` also ends
    one at a form feed or a line separator, which JSON strings and Python comments may hold)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]] * bool(lines[-1])


def text_diff(before: list[str], after: list[str], name: str, section: Callable[[int], str] = lambda line: "") -> str:
    """A unified diff of the lines of one file named ``name``; ``section(line)`` names the part
    of the file that a hunk's first changed line (of ``before``) is in, after its ``@@``."""
    # A name with a space ends with a tab, or `patch` reads only up to the space.
    end = "\t" if " " in name else ""
    lines = list(difflib.unified_diff(before, after, f"a/{name}{end}", f"b/{name}{end}"))
    for index, line in enumerate(lines):
        if line.startswith("@@"):
            where = section(_first_changed_line(lines, index))
            lines[index] = f"{line.rstrip()} {where}\n" if where else line
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _first_changed_line(lines: list[str], header: int) -> int:
    """The line of the old file where the hunk whose header is ``lines[header]`` first changes it."""
    line = int(lines[header].split()[1].lstrip("-").split(",")[0])
    for text in lines[header + 1 :]:
        if not text.startswith(" "):
            return max(line, 1)
        line += 1
    return max(line, 1)
