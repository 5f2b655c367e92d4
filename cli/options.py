"""What the commands share: their options and arguments as typer reads them (each defined once, so
that every command that takes ``--select`` takes it alike), the exit codes, usage errors, and the
steps of a command over files: the settings the command line gives, the run (the files, or the code
on stdin) with its progress bar, the results printed, the fixes written.

Apart from the commands, which each take what they need of it, and from the app, which registers
them: a command's module imports this one and nothing of another command's.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated, Callable, Iterator, List, NoReturn, Optional

import typer

from gradfix.codemods.cache import DEFAULT_FOLDER, ReportCache
from gradfix.codemods.config import ConfigError, Overrides, Settings, inline_table, project_root
from gradfix.codemods.files import NotWritten, PathError, write_fix
from gradfix.codemods.report import FileReport
from gradfix.codemods.registry import RULE_MODULES, UnknownRuleError, codes_matching
from gradfix.codemods.run import check_paths, excluded_when_named, rules_and_mode, hide_hints
from gradfix.codemods.shard import Shard

from . import formats, render
from .conventions import EXIT_ERROR, STDIN

_PROGRESS_MIN_FILES = 20
tracebacks_shown = False  # --verbose was given: an error gradfix did not foresee shows its traceback


class OutputFormat(str, enum.Enum):
    text = "text"
    concise = "concise"  # the finding lines only: no summary
    json = "json"
    json_lines = "json-lines"  # one JSON object a line, the records of `json`: shards' outputs concatenate
    github = "github"  # workflow-command annotations, and a summary table in $GITHUB_STEP_SUMMARY
    sarif = "sarif"  # SARIF 2.1.0, for code scanning


class ListFormat(str, enum.Enum):
    text = "text"
    json = "json"


def _show_tracebacks(value: bool) -> None:
    global tracebacks_shown
    tracebacks_shown = tracebacks_shown or value


def _quiet(value: bool) -> None:
    render.notes.quiet = value


Paths = Annotated[
    Optional[List[str]],
    typer.Argument(
        metavar="[PATH...]", help="Files or folders to check [default: the current folder]; `-` reads the code from stdin.", show_default=False
    ),
]
Select = Annotated[
    Optional[List[str]],
    typer.Option("--select", metavar="RULES", help="Only these rules: codes, prefixes, names or ALL (comma-separated, repeatable)."),
]
ExtendSelect = Annotated[
    Optional[List[str]],
    typer.Option("--extend-select", metavar="RULES", help="Also these rules, on top of the selection (comma-separated, repeatable)."),
]
Ignore = Annotated[
    Optional[List[str]],
    typer.Option("--ignore", metavar="RULES", help="Skip these rules: codes, prefixes or names (comma-separated, repeatable)."),
]
ConfigOption = Annotated[
    Optional[List[str]],
    typer.Option(
        "--config",
        metavar="FILE|KEY=VALUE",
        help="Take every file's settings from this pyproject.toml (its [tool.gradfix]) or TOML file, instead of the "
        "nearest pyproject.toml; or set one setting over them, in TOML (--config 'unsafe-fixes = true'). Repeatable.",
        show_default=False,
    ),
]
Exclude = Annotated[
    Optional[List[str]],
    typer.Option(
        "--exclude",
        metavar="PATTERNS",
        help="Skip these files and folders in folders' walks, instead of the configured ones (glob patterns, comma-separated, repeatable).",
        show_default=False,
    ),
]
ExtendExclude = Annotated[
    Optional[List[str]],
    typer.Option("--extend-exclude", metavar="PATTERNS", help="Skip these too (glob patterns, comma-separated, repeatable).", show_default=False),
]
ForceExclude = Annotated[
    bool, typer.Option("--force-exclude", help="Skip excluded files even when they are named on the command line (as pre-commit names them).")
]


class NotTaken(typer.BadParameter):
    """A value an option does not take, said as what it takes (``--jobs takes 1 or more, not 0``)."""


def at_least(least: int | float) -> Callable[[str], int | float]:
    """An option's parser: a whole number of ``least`` or more (a number, when ``least`` is a float),
    its errors in gradfix's words rather than in the words of typer's version of click or pydantic."""
    kind, taken = (int, "a whole number") if isinstance(least, int) else (float, "a number")

    def parse(text: str | int | float) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise NotTaken(f"takes {taken}, not {text!r}") from None
        if value < least:
            raise NotTaken(f"takes {least:g} or more, not {text}")
        return value

    return parse


Jobs = Annotated[
    Optional[int], typer.Option("--jobs", "-j", metavar="N", parser=at_least(1), help="Processes to use [default: all cores].", show_default=False)
]
UnsafeFixes = Annotated[
    Optional[bool],
    typer.Option("--unsafe-fixes/--no-unsafe-fixes", help="Also apply fixes that change what the program computes.", show_default=False),
]
HintsOption = Annotated[
    Optional[bool],
    typer.Option(
        "--hints/--no-hints",
        help="Also report findings that rest on what gradfix could only guess (code it did not read): hints, never fixed.",
        show_default=False,
    ),
]
OutputFormatOption = Annotated[
    OutputFormat,
    typer.Option("--output-format", metavar="FORMAT", help="How findings are printed: text, concise, json, json-lines, github or sarif."),
]
StdinFilename = Annotated[
    Optional[str],
    typer.Option(
        "--stdin-filename",
        metavar="NAME",
        help="With the path `-`: the name of the code read from stdin (for settings and messages).",
        show_default=False,
    ),
]
CacheDir = Annotated[
    Optional[Path],
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        envvar="GRADFIX_CACHE_DIR",
        help=f"Where to keep the reports of unchanged files [default: {DEFAULT_FOLDER} at the project root].",
        show_default=False,
    ),
]
NoCache = Annotated[bool, typer.Option("--no-cache", envvar="GRADFIX_NO_CACHE", help="Check every file; neither read nor write the cache.")]
ShardOption = Annotated[
    Optional[str],
    typer.Option("--shard", metavar="I/N", help="Check only part i of n of the files (1-based: 1/4 … 4/4), for a CI matrix.", show_default=False),
]
ExitZero = Annotated[bool, typer.Option("--exit-zero", help="Exit 0 even when findings are left (errors still exit 2).")]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        callback=_show_tracebacks,
        expose_value=False,
        is_eager=True,
        help="Show the traceback of an error gradfix did not foresee.",
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        callback=_quiet,
        expose_value=False,
        help="Print the findings and the errors, nothing else (no summary, no warning).",
    ),
]


def _split(values: Optional[List[str]]) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _rule_patterns(values: Optional[List[str]]) -> list[str]:
    """``--select`` and the like: ``_split``, ``ALL`` standing for every rule (as ruff's)."""
    return [pattern for part in _split(values) for pattern in (RULE_MODULES if part == "ALL" else [part])]


def _usage_error(message: str) -> NoReturn:
    render.stderr.print(f"error: {message}")
    raise typer.Exit(EXIT_ERROR)


def _selection(
    config: Optional[List[str]],
    select: Optional[List[str]],
    extend_select: Optional[List[str]] = None,
    ignore: Optional[List[str]] = None,
    unsafe_fixes: Optional[bool] = None,
    exclude: Optional[List[str]] = None,
    extend_exclude: Optional[List[str]] = None,
    hints: Optional[bool] = None,
) -> tuple[Settings, Overrides]:
    """The settings every file reads (``--config``) and what the command line says over them."""
    if select is not None and not _split(select):
        _usage_error("--select names no rule (give codes, prefixes or names such as GF001, GF00 or duplicate_backward, or ALL)")
    try:
        for patterns in (_rule_patterns(select), _rule_patterns(extend_select), _rule_patterns(ignore)):
            codes_matching(patterns)
    except UnknownRuleError as error:
        _usage_error(f"unknown rule code, prefix or name: {error} (the rules are {', '.join(RULE_MODULES)}, or ALL)")
    overrides = Overrides(
        select=tuple(_rule_patterns(select)) if select is not None else None,
        extend_select=tuple(_rule_patterns(extend_select)),
        ignore=tuple(_rule_patterns(ignore)),
        unsafe_fixes=unsafe_fixes,
        exclude=tuple(_split(exclude)) if exclude is not None else None,
        extend_exclude=tuple(_split(extend_exclude)),
        hints=hints,
    )
    files = [value for value in config or () if os.path.isfile(value)]
    if len(files) > 1:
        _usage_error(f"--config names {len(files)} files; give one")
    try:
        table: dict = {}
        for value in config or ():
            if value not in files:
                table |= inline_table(value)
        return Settings(files[0] if files else None, table), overrides
    except ConfigError as error:
        _usage_error(str(error))


def _run(
    paths: list[str],
    settings: Settings,
    overrides: Overrides,
    jobs: Optional[int],
    fixing: bool = False,
    stdin_filename: Optional[str] = None,
    cache: ReportCache | None = None,
    shard: Shard | None = None,
    force_exclude: bool = False,
) -> tuple[list[FileReport], list[PathError]]:
    """Check (or fix) the files under ``paths`` (``run.check_paths``); reports in the order of the
    files. The path ``-`` is the code on stdin, named ``stdin_filename``."""
    try:
        if STDIN in paths:
            if paths != [STDIN]:
                _usage_error("`-` (stdin) cannot be given with other paths")
            name = stdin_filename or STDIN
            data = sys.stdin.buffer.read()
            if force_exclude and stdin_filename and excluded_when_named(settings, overrides)(Path(name)):
                return [FileReport(name, original=data)], []
            named = Path(name) if stdin_filename else Path.cwd()
            rules, mode = rules_and_mode(settings, overrides, named, fixing)
            from gradfix.codemods.check import check_source

            report = check_source(data, rules, mode, name)
            if not overrides.shows_hints(settings.for_path(named)):
                hide_hints(report)
            return [report], []
        with _progress() as advance:
            checked = check_paths(
                paths, overrides, settings, fixing=fixing, jobs=jobs, cache=cache, shard=shard, force_exclude=force_exclude, progress=advance
            )
    except ConfigError as error:
        _usage_error(str(error))
    for notice in checked.notices:
        render.notes.print(f"warning: {notice}")
    return checked.reports, checked.errors


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr for a run over many files, when stderr is a terminal; it appears
    when the first file is checked, which tells how many there are."""
    if not render.stderr.is_terminal:
        yield lambda done, total: None
        return
    with contextlib.ExitStack() as shown:
        bar: list = []  # the progress and its task, once shown

        def advance(done: int, total: int) -> None:
            if total < _PROGRESS_MIN_FILES:
                return
            if not bar:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # only a terminal's long run draws one

                columns = (TextColumn("checking"), BarColumn(), MofNCompleteColumn())
                progress = shown.enter_context(Progress(*columns, console=render.stderr, transient=True))
                bar.extend((progress, progress.add_task("files", total=total)))
            bar[0].update(bar[1], completed=done)

        yield advance


def _cache(cache_dir: Optional[Path], no_cache: bool) -> ReportCache | None:
    """The cache of reports; a folder named by --cache-dir (or GRADFIX_CACHE_DIR) that cannot
    hold it is said once, and the run goes on without it."""
    if no_cache:
        return None
    cache = ReportCache(cache_dir or project_root() / DEFAULT_FOLDER)
    problem = cache.unusable() if cache_dir is not None else ""
    if problem:
        render.notes.print(f"warning: --cache-dir {cache_dir}: {problem}; checking without the cache")
        return None
    return cache


def _shard(text: Optional[str]) -> Shard | None:
    if text is None:
        return None
    try:
        return Shard.parse(text)
    except ValueError as error:
        _usage_error(str(error))


def _has_errors(reports: list[FileReport], errors: list[PathError]) -> bool:
    return bool(errors) or any(r.errors or r.internal_errors for r in reports)


def _print_results(output_format: OutputFormat, reports: list[FileReport], errors: list[PathError], outputs: dict[str, str]) -> None:
    """The findings left in ``reports`` and the files that could not be checked, in
    ``output_format``; for ``github`` also the step summary and the step ``outputs``."""
    findings = [f for r in reports for f in r.findings]
    if output_format in (OutputFormat.json, OutputFormat.json_lines):
        render.print_json(render.findings_records(findings, reports, errors), lines=output_format is OutputFormat.json_lines)
    elif output_format is OutputFormat.github:
        typer.echo("".join(line + "\n" for line in formats.annotations(reports, errors)), nl=False)
        formats.append_to_file_named_by("GITHUB_STEP_SUMMARY", formats.step_summary(reports))
        formats.append_to_file_named_by("GITHUB_OUTPUT", formats.step_outputs(outputs))
    elif output_format is OutputFormat.sarif:
        sys.stdout.write(formats.sarif_text(reports, errors))
    else:
        render.print_findings(findings)


def _write_fixes(reports: list[FileReport], errors: list[PathError], root_of: Callable[[str], Path]) -> None:
    """Write each report's rewrite, inside the folder ``root_of`` its path; one that cannot be
    written is an error of its file, whose findings are then still there, and the others are
    written all the same."""
    for report in (r for r in reports if r.changed):
        try:
            write_fix(report.path, report.rewritten, report.original, root_of(report.path))
        except NotWritten as error:
            errors.append(PathError(report.path, str(error)))
            _not_written(report)
        except OSError as error:
            errors.append(PathError(report.path, f"{report.path}: cannot write: {error.strerror or error}"))
            _not_written(report)


def _not_written(report: FileReport) -> None:
    """A rewrite that could not be written fixed nothing: its findings are still there."""
    report.findings, report.fixed, report.rewritten = report.fixed + report.findings, [], None


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        render.stderr.print("error: this command runs code and needs PyTorch installed (pip install torch)")
        raise typer.Exit(EXIT_ERROR)
