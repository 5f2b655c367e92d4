"""``gradfix fix --verify CMD``: verify the rewrites by running CMD, and say what became of each."""

from __future__ import annotations

from pathlib import Path

import typer

from gradfix.codemods.execution.runner import ScriptRunner
from gradfix.codemods.execution.verify_command import BadCommand, verify_rewrites
from gradfix.codemods.report import FileReport

from . import render
from .conventions import EXIT_ERROR

_SHOWN = {"verified": "verified", "refused": "not applied, refused", "not exercised": "not applied, not exercised"}


def refused_rewrites(reports: list[FileReport], command: str, runner: ScriptRunner) -> list[FileReport]:
    """The reports whose rewrites CMD did not verify (run from the current folder), after a line
    on stderr for each rewrite; exit 2 when CMD cannot be run."""
    try:
        verdicts = verify_rewrites(reports, command, runner, Path.cwd())
    except BadCommand as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    for verdict in verdicts:
        render.stderr.print(f"{verdict.path}: {_SHOWN[verdict.status]}" + (f": {verdict.detail}" if verdict.detail else ""))
    kept = {v.path for v in verdicts if v.status == "verified"}
    return [r for r in reports if r.changed and r.path not in kept]
