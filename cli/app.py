"""The ``gradfix`` command line. Parses options, calls the library, renders; no analysis here.

Exit codes: 0 clean, 1 findings (``check``) or changes pending / findings left (``fix``),
2 usage errors, bad input or internal errors.
"""

from __future__ import annotations

import enum
import sys
from typing import List, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from typing_extensions import Annotated

from gradfix import __version__
from gradfix.codemods import engine
from gradfix.codemods.engine import FileReport, FixMode
from gradfix.codemods.registry import UnknownRuleError, all_rules, rule_by_code, select_rules

from . import render

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Find and fix the PyTorch training-loop bugs behind "
    "'Trying to backward through the graph a second time'.",
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_PROGRESS_MIN_FILES = 20


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"


Paths = Annotated[List[str], typer.Argument(help="Files or folders to check.", show_default=False)]
Select = Annotated[
    Optional[List[str]],
    typer.Option("--select", help="Only these rule codes or prefixes (comma-separated, repeatable)."),
]
Ignore = Annotated[
    Optional[List[str]],
    typer.Option("--ignore", help="Skip these rule codes or prefixes (comma-separated, repeatable)."),
]
Jobs = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Processes to use [default: all cores].")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradfix {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = None,
) -> None:
    """Find and fix the PyTorch training-loop bugs behind 'Trying to backward through the graph a
    second time'."""


def _split(values: Optional[List[str]]) -> list[str]:
    return [part for value in values or () for part in value.split(",") if part.strip()]


def _run(paths: list[str], select, ignore, mode: FixMode, jobs: Optional[int]) -> tuple[list[FileReport], list[str]]:
    try:
        rules = select_rules(_split(select), _split(ignore))
    except UnknownRuleError as error:
        render.stderr.print(f"error: unknown rule code or prefix: {error}")
        raise typer.Exit(EXIT_ERROR)
    files = engine.collect_files(paths)
    results = engine.check_files(files.files, rules, mode, jobs)
    if render.stderr.is_terminal and len(files.files) >= _PROGRESS_MIN_FILES:
        columns = (TextColumn("checking"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, console=render.stderr, transient=True) as progress:
            task = progress.add_task("files", total=len(files.files))
            reports = []
            for report in results:
                reports.append(report)
                progress.advance(task)
    else:
        reports = list(results)
    return reports, files.errors


def _has_errors(reports: list[FileReport], errors: list[str]) -> bool:
    return bool(errors) or any(r.errors or r.internal_errors for r in reports)


@app.command()
def check(
    paths: Paths,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--output-format", help="How findings are printed.")
    ] = OutputFormat.text,
) -> None:
    """Report findings as `path:line:col: CODE message`. Exit 1 if there are any."""
    reports, errors = _run(paths, select, ignore, FixMode.NONE, jobs)
    findings = [f for r in reports for f in r.findings]
    if output_format is OutputFormat.json:
        render.print_findings_json(findings)
    else:
        render.print_findings(findings)
        render.stderr.print(render.check_summary(reports))
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if findings else EXIT_CLEAN)


@app.command()
def fix(
    paths: Paths,
    diff: Annotated[bool, typer.Option("--diff", help="Write nothing; print a unified diff of the fixes.")] = False,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Also apply fixes that change what the program computes.")
    ] = False,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
) -> None:
    """Apply fixes in place (or show them with --diff). Exit 1 if findings are left unfixed, or
    with --diff if there would be changes."""
    mode = FixMode.UNSAFE if unsafe_fixes else FixMode.SAFE
    reports, errors = _run(paths, select, ignore, mode, jobs)
    changed = [r for r in reports if r.changed]
    for report in changed:
        if diff:
            render.print_diff(engine.unified_diff(report))
        else:
            try:
                engine.write_atomically(report.path, report.rewritten)
            except OSError as error:
                errors.append(f"{report.path}: cannot write: {error.strerror or error}")
    if not diff:
        render.print_findings(f for r in reports for f in r.findings)
    render.stderr.print(render.fix_summary(reports, diff))
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    pending = changed if diff else [f for r in reports for f in r.findings]
    raise typer.Exit(EXIT_FINDINGS if pending else EXIT_CLEAN)


@app.command()
def rules() -> None:
    """List the rules."""
    render.print_table(render.rules_table(all_rules()))


@app.command()
def explain(code: Annotated[str, typer.Argument(help="A rule code (GF001) or name.")]) -> None:
    """Explain a rule, with a before/after example."""
    try:
        rule = rule_by_code(code)
    except UnknownRuleError:
        render.stderr.print(f"error: unknown rule: {code} (see `gradfix rules`)")
        raise typer.Exit(EXIT_ERROR)
    typer.echo(render.explanation(rule))


def main() -> None:
    try:
        app(prog_name="gradfix")
    except KeyboardInterrupt:
        render.stderr.print("interrupted")
        sys.exit(130)
