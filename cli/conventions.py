"""What every command says the same way, without typer or rich (``plain_check`` answers before they
are imported): the exit statuses, the path that means stdin and the one checked given none, how
text of the checked files is printed, and the line that ends a check or a fix."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from gradfix.codemods.report import FileReport, FixKind

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STDIN = "-"
CURRENT_FOLDER = "."  # what `check` and `fix` check given no path, as ruff's


def visible(text: str) -> str:
    """Text of the checked files (quoted code, a path) as it is shown, never obeyed: each character
    Python would not print as it is (a control character of C0 or C1, DEL, half of a UTF-16 pair,
    a line separator, a format character that hides itself) is its escape, as ``repr`` writes it
    (``\\n``, ``\\x1b``, ``\\u202e``). So no escape sequence reaches a terminal, and the text
    stays on one line."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else ascii(character)[1:-1] for character in text)


def printed_line(text: str) -> str:
    """A line gradfix prints holding text of the checked files: ``visible``, and never a workflow
    command of the CI runner that reads gradfix's output. GitHub's obeys a line that starts with
    ``::`` after its blanks, and a ``##[`` anywhere in one; their escapes are shown instead."""
    line = visible(text).replace("##[", "##\\x5b")
    blanks = len(line) - len(line.lstrip())
    if line.startswith("::", blanks):
        line = line[:blanks] + "\\x3a" + line[blanks + 1 :]
    return line


def fix_summary(reports: Sequence[FileReport], diff: bool) -> str:
    fixed = Counter(f.code for r in reports for f in r.fixed)
    changed = sum(r.changed for r in reports)
    remaining = sum(len(r.findings) for r in reports)
    verb = "Would fix" if diff else "Fixed"
    parts = [f"{verb} {sum(fixed.values())} finding(s) in {changed} file(s)"]
    if fixed:
        parts[0] += " (" + ", ".join(f"{code}: {n}" for code, n in sorted(fixed.items())) + ")"
    parts.append(f"{remaining} finding(s) left unfixed" if remaining else "nothing left to fix")
    return "; ".join(parts) + "."


def check_summary(reports: Sequence[FileReport]) -> str:
    """What a check found; a file that could not be checked is not counted as one without
    findings."""
    findings = [f for r in reports for f in r.findings]
    unchecked = sum(bool(r.errors or r.internal_errors) for r in reports)
    hidden = sum(r.hints_hidden for r in reports)
    # (a hint rests on what gradfix could only guess: it is counted, and shown on request)
    hints = f" {hidden} hint(s) not shown (`--hints` shows them)." if hidden else ""
    if not findings:
        summary = f"No findings in {len(reports) - unchecked} file(s)"
        return summary + (f"; {unchecked} could not be checked." if unchecked else ".") + hints
    safe = sum(f.fix is FixKind.SAFE for f in findings)
    unsafe = sum(f.fix is FixKind.UNSAFE for f in findings)
    summary = f"Found {len(findings)} finding(s) in {sum(bool(r.findings) for r in reports)} file(s); {safe} can be fixed with `gradfix fix`"
    if unsafe:
        summary += f", {unsafe} more with `gradfix fix --unsafe-fixes`"
    return summary + "." + hints
