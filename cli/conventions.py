"""What every command says the same way, without typer or rich (``clean_check`` answers before they
are imported): the exit statuses, the path that means stdin, and the line that ends a check or a
fix."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from gradfix.codemods.report import FileReport, FixKind

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STDIN = "-"


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
