"""The ``gradfix`` command line. Parses options, calls the library, renders; no analysis here.

Exit codes: 0 clean, 1 findings (``check``), changes pending / findings left (``fix``), failed
checks (``verify``) or an error found (``diagnose``); 2 usage errors, bad input or internal errors
(an error gradfix did not foresee is one line, its traceback with ``--verbose``).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import io
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Iterator, List, NoReturn, Optional

import typer
from typer.core import TyperCommand

from gradfix import __version__
from gradfix.codemods.cache import DEFAULT_FOLDER, ReportCache
from gradfix.codemods.config import ConfigError, Overrides, Settings, inline_table, project_root
from gradfix.codemods.files import (
    FileChanged,
    NotWritten,
    PathError,
    collect_files,
    path_lines,
    sweep_stale_temporaries,
    unified_diff,
    write_atomically,
    write_fix,
    write_root,
)
from gradfix.codemods.report import FileReport, FixKind, FixMode, SourceError
from gradfix.codemods.notebook import Notebook, NotebookError, is_notebook
from gradfix.codemods.registry import RULE_MODULES, UnknownRuleError, all_rules, codes_matching, rule_by_code
from gradfix.codemods.run import check_paths, excluded_by, excluded_when_named, rules_and_mode, hide_hints
from gradfix.codemods.shard import Shard
from gradfix.codemods.execution.runner import STOP_SHARE, RunOptions, ScriptRunner

from . import formats, pull_request, render
from .github_api import DEFAULT_API_URL, GitHub, GitHubError

if TYPE_CHECKING:
    from click import HelpFormatter  # (typer's own copy of click, in recent typer)

    from gradfix.codemods.execution.diagnose import Diagnosis
    from gradfix.codemods.execution.repair import Repair

# LibCST and the analysis are imported where a command needs them (the check for code on stdin
# and for reviewing fixes, the execution layer for verify and diagnose; the run imports the check
# for the files the cache does not answer): `check` answered by the cache loads neither.


class Command(TyperCommand):
    """Help as ruff's and black's read: arguments by their metavar (``PATH...``), without the
    Python types of their values."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [self.options_metavar or "", *(p.metavar or p.name or "" for p in self._parameters(ctx, "argument"))]

    def format_options(self, ctx: typer.Context, formatter: HelpFormatter) -> None:
        arguments = [(p.metavar or p.name or "", getattr(p, "help", None) or "") for p in self._parameters(ctx, "argument")]
        options = [record for p in self._parameters(ctx, "option") if (record := p.get_help_record(ctx))]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def _parameters(self, ctx: typer.Context, kind: str) -> list:
        return [p for p in self.get_params(ctx) if p.param_type_name == kind]


app = typer.Typer(
    add_completion=True,  # --install-completion and --show-completion, as typer writes them
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Find and fix the PyTorch training-loop bugs behind 'Trying to backward through the graph a second time'.",
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
RUN_TIMEOUT = 60.0  # seconds one run of a script may take in `%gradfix diagnose`
WATCH_INTERVAL = 0.5  # seconds between two looks at the files `check --watch` watches
_PROGRESS_MIN_FILES = 20
_tracebacks_shown = False


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
    global _tracebacks_shown
    _tracebacks_shown = _tracebacks_shown or value


def _quiet(value: bool) -> None:
    render.notes.quiet = value


Paths = Annotated[
    Optional[List[str]],
    typer.Argument(
        metavar="[PATH...]", help="Files or folders to check [default: the current folder]; `-` reads the code from stdin.", show_default=False
    ),
]
CURRENT_FOLDER = "."  # what `check` and `fix` check given no path, as ruff's
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
Jobs = Annotated[Optional[int], typer.Option("--jobs", "-j", metavar="N", min=1, help="Processes to use [default: all cores].", show_default=False)]
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
STDIN = "-"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradfix {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True, help="Show the version and exit.")] = None,
    verbose: Verbose = False,
) -> None:
    """Find and fix the PyTorch training-loop bugs behind 'Trying to backward through the graph a
    second time'."""
    render.notes.quiet = False  # until a command's --quiet says otherwise


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


def _print_unsafe_fixes(reports: list[FileReport], settings: Settings, unsafe_fixes: Optional[bool]) -> None:
    """``check --unsafe-fixes``: the diff each unsafe fix would make, rule by rule, in the files
    whose settings allow unsafe fixes."""
    overrides = Overrides(unsafe_fixes=unsafe_fixes)
    for report in reports:
        if any(f.fix is FixKind.UNSAFE for f in report.findings) and overrides.unsafe(settings.for_path(report.path)):
            for rewrite in formats.rule_rewrites(report, frozenset({FixKind.UNSAFE})).values():
                render.print_diff(unified_diff(rewrite))


@app.command(cls=Command)
def check(
    paths: Paths = None,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Ignore = None,
    config: ConfigOption = None,
    exclude: Exclude = None,
    extend_exclude: ExtendExclude = None,
    force_exclude: ForceExclude = False,
    jobs: Jobs = None,
    output_format: OutputFormatOption = OutputFormat.text,
    stdin_filename: StdinFilename = None,
    hints: HintsOption = None,
    statistics: Annotated[bool, typer.Option("--statistics", help="Count the findings per rule instead of listing them (text or JSON).")] = False,
    unsafe_fixes: Annotated[
        Optional[bool],
        typer.Option(
            "--unsafe-fixes/--no-unsafe-fixes", help="Show the diff of each fix that changes what the program computes.", show_default=False
        ),
    ] = None,
    exit_zero: ExitZero = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Check again whenever a file changes, until Ctrl-C.")] = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    shard: ShardOption = None,
    fix_: Annotated[bool, typer.Option("--fix", help="Apply the fixes, as `gradfix fix` does (--unsafe-fixes: the unsafe ones too).")] = False,
    add_noqa: Annotated[
        bool, typer.Option("--add-noqa", help="Silence each finding with a `# noqa: CODE` comment on its line, to adopt gradfix on code as it is.")
    ] = False,
    show_files: Annotated[bool, typer.Option("--show-files", help="List the files a check would read, and stop.")] = False,
    show_settings: Annotated[bool, typer.Option("--show-settings", help="Show the settings that check the first file, and stop.")] = False,
    output_file: Annotated[
        Optional[Path],
        typer.Option("--output-file", "-o", metavar="FILE", help="Write what would go to stdout to this file instead.", show_default=False),
    ] = None,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Report findings as `path:line:col: CODE message`. Exit 1 if there are any. No path checks
    the current folder; the path `-` reads the code from stdin."""
    paths = paths or [CURRENT_FOLDER]
    if statistics and output_format in (OutputFormat.github, OutputFormat.sarif):
        _usage_error(f"--statistics counts findings as text or JSON, not as {output_format.value}")
    if watch and STDIN in paths:
        _usage_error("--watch watches files: it cannot read stdin")
    if add_noqa and fix_:
        _usage_error("--add-noqa silences the findings --fix would fix: give one of them")
    for given, option in ((add_noqa, "--add-noqa"), (show_files, "--show-files"), (show_settings, "--show-settings")):
        if given and STDIN in paths:
            _usage_error(f"{option} works on files: it cannot read stdin")
    if (fix_ or add_noqa) and (watch or statistics):
        _usage_error(f"{'--fix' if fix_ else '--add-noqa'} writes files once: it cannot go with --watch or --statistics")
    if fix_ and output_file is not None and STDIN in paths:
        _usage_error("--fix puts the fixed code read from stdin on stdout: it cannot go with --output-file")
    if fix_:
        with _output_to(output_file):
            fix(
                paths,
                unsafe_fixes=unsafe_fixes,
                select=select,
                extend_select=extend_select,
                ignore=ignore,
                config=config,
                exclude=exclude,
                extend_exclude=extend_exclude,
                force_exclude=force_exclude,
                jobs=jobs,
                output_format=output_format,
                stdin_filename=stdin_filename,
                hints=hints,
                exit_zero=exit_zero,
                cache_dir=cache_dir,
                no_cache=no_cache,
                shard=shard,
            )
    settings, overrides = _selection(config, select, extend_select, ignore, None, exclude, extend_exclude, hints)
    cache, part = _cache(cache_dir, no_cache), _shard(shard)
    if show_files or show_settings:
        with _output_to(output_file):
            _show(paths, settings, overrides, force_exclude, part, show_files, show_settings)
    if add_noqa:
        _add_noqa(paths, settings, overrides, jobs, cache, part, force_exclude)

    def once() -> int:
        with _output_to(output_file):
            reports, errors = _run(
                paths, settings, overrides, jobs, stdin_filename=stdin_filename, cache=cache, shard=part, force_exclude=force_exclude
            )
            findings = [f for r in reports for f in r.findings]
            if statistics and output_format in (OutputFormat.json, OutputFormat.json_lines):
                render.print_json(render.statistics(findings), lines=output_format is OutputFormat.json_lines)
            elif statistics:
                render.print_table(render.statistics_table(findings))
            else:
                _print_results(output_format, reports, errors, {"findings": str(len(findings))})
            if output_format in (OutputFormat.text, OutputFormat.concise) and not statistics:
                _print_unsafe_fixes(reports, settings, unsafe_fixes)
        render.print_errors(reports, errors)
        # --watch: the project's totals after each change, whatever the format of the findings
        if (watch or output_format in (OutputFormat.text, OutputFormat.github)) and (reports or not errors):
            render.notes.print(render.check_summary(reports))
        if _has_errors(reports, errors):
            return EXIT_ERROR
        return EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN

    if watch:
        _watch(paths, excluded_by(settings, overrides), once)
    raise typer.Exit(once())


@contextlib.contextmanager
def _output_to(path: Optional[Path]) -> Iterator[None]:
    """``--output-file``: what the block prints on stdout goes to ``path`` instead, written whole
    when the block ends or exits; nothing is written when it fails (an error gradfix did not
    foresee, Ctrl-C)."""
    if path is None:
        yield
        return
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    except typer.Exit:
        _write_output(path, printed.getvalue())
        raise
    _write_output(path, printed.getvalue())


def _write_output(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` as a fix replaces a file: never half of it. A new file is
    made empty first, and removed again if the write fails."""
    made = False
    try:
        if not os.path.lexists(path):
            path.touch(exist_ok=False)
            made = True
        write_atomically(path, text.encode("utf-8"))
    except BaseException as error:
        if made:
            with contextlib.suppress(OSError):
                path.unlink()
        if isinstance(error, OSError):
            _usage_error(f"--output-file {path}: cannot write: {error.strerror or error}")
        raise


def _show(
    paths: list[str], settings: Settings, overrides: Overrides, force_exclude: bool, shard: Shard | None, files: bool, first_settings: bool
) -> NoReturn:
    """``--show-files``: the files a check would read (as ``run.check_paths`` collects them), one
    a line; ``--show-settings``: the settings that check the first of them."""
    found = collect_files(paths, excluded_by(settings, overrides), excluded_when_named(settings, overrides) if force_exclude else None)
    if shard is not None:
        found.files = shard.select(found.files, project_root())
    if first_settings:
        first = found.files[0] if found.files else Path(paths[0])
        try:
            config = settings.for_path(first)
        except ConfigError as error:
            _usage_error(str(error))
        codes = overrides.codes(config, first)
        lines = render.settings_lines(str(first), overrides.applied(config), codes, overrides.unsafe(config), overrides.shows_hints(config))
        typer.echo("\n".join(lines))
    if files and found.files:
        typer.echo(path_lines(map(str, sorted(found.files))))
    for notice in found.notices:
        render.notes.print(f"warning: {notice}")
    render.print_errors([], found.errors)
    raise typer.Exit(EXIT_ERROR if found.errors else EXIT_CLEAN)


def _add_noqa(
    paths: list[str],
    settings: Settings,
    overrides: Overrides,
    jobs: Optional[int],
    cache: ReportCache | None,
    shard: Shard | None,
    force_exclude: bool,
) -> NoReturn:
    """``check --add-noqa``: a ``# noqa`` comment for each finding shown by default
    (``formats.noqa_added``), written as a fix is. Exit 1 when a finding is left unsilenced."""
    reports, errors = _run(paths, settings, overrides, jobs, cache=cache, shard=shard, force_exclude=force_exclude)
    added, left = {}, 0
    for report in (r for r in reports if r.findings):
        if is_notebook(report.path):  # (a cell's line is not a line of the file)
            render.notes.print(render.printed_line(f"warning: {report.path}: a notebook: add its `# noqa` comments in its cells"))
            left += 1
            continue
        report.rewritten, added[report.path], skipped = formats.noqa_added(report)
        for line, why in skipped:
            render.notes.print(render.printed_line(f"warning: {report.path}:{line}: {why}; no `# noqa` added"))
        left += len(skipped)
    _write_fixes(reports, errors, lambda path: write_root(path, paths))
    written = [r for r in reports if r.changed]
    render.print_errors(reports, errors)
    render.notes.print(f"Added {sum(added[r.path] for r in written)} `# noqa` comment(s) in {len(written)} file(s).")
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if left else EXIT_CLEAN)


def _watch(paths: list[str], excluded: Callable[[Path], bool], once: Callable[[], int]) -> NoReturn:
    """Run ``once`` now and again whenever a file it checks is added, removed or changed."""
    seen: dict[Path, tuple[int, int]] | None = None
    while True:
        now = _stamps(collect_files(paths, excluded).files)
        if now != seen:
            seen = now
            once()
            render.notes.print(f"[{time.strftime('%H:%M:%S')}] Watching for file changes (Ctrl-C to stop).")
        time.sleep(WATCH_INTERVAL)


def _stamps(files: list[Path]) -> dict[Path, tuple[int, int]]:
    stamps = {}
    for path in files:
        with contextlib.suppress(OSError):  # gone since the walk: the next look sees it gone
            status = path.stat()
            stamps[path] = (status.st_mtime_ns, status.st_size)
    return stamps


def _stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


@app.command(cls=Command)
def fix(
    paths: Paths = None,
    diff: Annotated[bool, typer.Option("--diff", help="Write nothing; print a unified diff of the fixes.")] = False,
    unsafe_fixes: UnsafeFixes = None,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Ignore = None,
    config: ConfigOption = None,
    exclude: Exclude = None,
    extend_exclude: ExtendExclude = None,
    force_exclude: ForceExclude = False,
    jobs: Jobs = None,
    output_format: OutputFormatOption = OutputFormat.text,
    stdin_filename: StdinFilename = None,
    hints: HintsOption = None,
    show_fixes: Annotated[bool, typer.Option("--show-fixes", help="List each finding the fixes removed.")] = False,
    verify: Annotated[
        Optional[str],
        typer.Option(
            "--verify",
            metavar="CMD",
            help="Run CMD (your smoke run: 'python train.py --max-steps 3') in copies of the current folder, without and with the fixes, and apply only the fixes whose runs agree.",
            show_default=False,
        ),
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Show each rule's fix in each file and ask before applying it (needs a terminal).")
    ] = False,
    exit_zero: ExitZero = False,
    exit_non_zero_on_fix: Annotated[
        bool, typer.Option("--exit-non-zero-on-fix", help="Exit 1 when a file was changed, even if nothing is left to fix.")
    ] = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    shard: ShardOption = None,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Apply fixes in place (or show them with --diff). Exit 1 if findings are left unfixed, or
    with --diff if there would be changes. No path fixes the current folder; the path `-` reads
    the code from stdin and writes the fixed code to stdout (findings left go to stderr)."""
    paths = paths or [CURRENT_FOLDER]
    from_stdin = paths == [STDIN]
    if interactive and (diff or from_stdin):
        _usage_error("--interactive writes files: it cannot go with --diff or stdin")
    if interactive and not _stdin_is_terminal():
        _usage_error("--interactive asks before each fix: it needs a terminal on stdin")
    if output_format not in (OutputFormat.text, OutputFormat.concise) and (diff or from_stdin):
        _usage_error(f"--diff and stdin put code on stdout: they cannot go with --output-format {output_format.value}")
    if exit_zero and exit_non_zero_on_fix:
        _usage_error("--exit-zero and --exit-non-zero-on-fix contradict each other")
    if verify is not None and from_stdin:
        _usage_error("--verify runs a command on the files: it cannot go with stdin")
    settings, overrides = _selection(config, select, extend_select, ignore, unsafe_fixes, exclude, extend_exclude, hints)
    reports, errors = _run(
        paths,
        settings,
        overrides,
        jobs,
        fixing=True,
        stdin_filename=stdin_filename,
        cache=_cache(cache_dir, no_cache),
        shard=_shard(shard),
        force_exclude=force_exclude,
    )
    if interactive:
        _review(reports)
    if verify is not None:
        from .verify_command import refused_rewrites

        _require_torch()
        with ScriptRunner() as runner:
            for report in refused_rewrites(reports, verify, runner):
                _not_written(report)
    changed = [r for r in reports if r.changed]
    if from_stdin and not diff:
        [report] = reports
        sys.stdout.buffer.write(report.rewritten or report.original or b"")
        sys.stdout.flush()
    if diff:
        for report in changed:
            render.print_diff(unified_diff(report))
    elif not from_stdin:
        sweep_stale_temporaries(r.path for r in reports)
        _write_fixes(reports, errors, lambda path: write_root(path, paths))
    changed = [r for r in reports if r.changed]
    if from_stdin:
        render.print_findings((f for r in reports for f in r.findings), to_stderr=True)
    elif not diff:
        left = sum(len(r.findings) for r in reports)
        _print_results(
            output_format, reports, errors, {"findings": str(left), "changed-files": path_lines(formats.repository_path(r.path) for r in changed)}
        )
    if show_fixes:
        render.print_fixed((f for r in reports for f in r.fixed), diff)
    render.print_errors(reports, errors)
    render.notes.print(render.fix_summary(reports, diff))
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    pending = changed if diff else [f for r in reports for f in r.findings]
    wrote = exit_non_zero_on_fix and bool(changed)
    raise typer.Exit(EXIT_FINDINGS if (pending and not exit_zero) or wrote else EXIT_CLEAN)


def _review(reports: list[FileReport]) -> None:
    """Ask, file by file and rule by rule, whether to apply the fix shown; keep in each report only
    what was accepted. `a` accepts this and every later fix, `q` skips this and every later one."""
    from gradfix.codemods.check import check_source

    answer = ""
    for report in (r for r in reports if r.changed):
        current, accepted = report.original, set()
        for code in dict.fromkeys(f.code for f in report.fixed):
            rule = rule_by_code(code)
            kinds = {f.fix for f in report.fixed if f.code == code}
            mode = FixMode.UNSAFE if FixKind.UNSAFE in kinds else FixMode.SAFE
            step = check_source(current, [rule], mode, report.path)
            if not step.changed:
                continue
            if answer not in ("a", "q"):
                render.print_diff(unified_diff(step))
                answer = _ask(f"{report.path}: apply {code} {rule.NAME}? [y]es, [n]o, [a]ll, [q]uit")
            if answer in ("y", "a"):
                current = step.rewritten
                accepted.add(code)
        report.findings += [f for f in report.fixed if f.code not in accepted]
        report.fixed = [f for f in report.fixed if f.code in accepted]
        report.rewritten = current if current != report.original else None


def _ask(question: str) -> str:
    while True:
        answer = typer.prompt(question, default="y", err=True).strip().lower()[:1]
        if answer in ("y", "n", "a", "q"):
            return answer
        render.stderr.print("answer y, n, a or q")


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


@app.command(cls=Command)
def pr(
    paths: Annotated[
        Optional[List[str]], typer.Argument(metavar="[PATH...]", help="Files or folders to fix [default: the whole checkout].", show_default=False)
    ] = None,
    unsafe_fixes: UnsafeFixes = None,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
    branch: Annotated[str, typer.Option("--branch", metavar="BRANCH", help="The branch the fixes are pushed to.")] = pull_request.DEFAULT_BRANCH,
    base: Annotated[
        Optional[str], typer.Option("--base", metavar="BRANCH", help="The branch to fix [default: the branch checked out].", show_default=False)
    ] = None,
    remote: Annotated[str, typer.Option("--remote", metavar="REMOTE", help="The git remote to fetch from and push to.")] = "origin",
    title: Annotated[str, typer.Option("--title", metavar="TITLE", help="The pull request's title.")] = pull_request.DEFAULT_TITLE,
    label: Annotated[
        Optional[List[str]],
        typer.Option("--label", metavar="LABELS", help="Labels for the pull request (comma-separated, repeatable).", show_default=False),
    ] = None,
    draft: Annotated[bool, typer.Option("--draft", help="Open the pull request as a draft.")] = False,
    author: Annotated[
        str, typer.Option("--author", metavar="NAME <EMAIL>", help="The commit's author, as 'Name <email>'.")
    ] = pull_request.DEFAULT_AUTHOR,
    message: Annotated[
        Optional[str], typer.Option("--message", metavar="MESSAGE", help="The commit message [default: the title].", show_default=False)
    ] = None,
    token_env: Annotated[
        str, typer.Option("--token-env", metavar="VARIABLE", help="The environment variable that holds the GitHub token.")
    ] = "GITHUB_TOKEN",
    repository: Annotated[
        Optional[str],
        typer.Option("--repository", metavar="OWNER/NAME", envvar="GITHUB_REPOSITORY", help="owner/name on GitHub.", show_default=False),
    ] = None,
    api_url: Annotated[
        str, typer.Option("--api-url", metavar="URL", envvar="GITHUB_API_URL", help="The GitHub REST API (GitHub Enterprise: https://HOST/api/v3).")
    ] = DEFAULT_API_URL,
    verbose: Verbose = False,
) -> None:
    """Commit the fixes on a branch made from the base branch, push it and open (or update) one
    pull request; close it and delete the branch when nothing is left to fix. Exit 1 while fixes
    wait in the pull request or findings are left, 0 when nothing is left to fix."""
    token = pull_request.token_from_environment(token_env)
    if not token:
        render.stderr.print(f"error: no GitHub token: set {token_env} (or name another variable with --token-env)")
        raise typer.Exit(EXIT_ERROR)
    settings = pull_request.Settings(remote, base, branch, title, message, tuple(_split(label)), draft, author)
    checked, overrides = _selection(None, select, ignore=ignore, unsafe_fixes=unsafe_fixes)
    try:
        github = GitHub(token, repository or "", api_url)
        with pull_request.base_checkout(settings, token) as workspace:
            reports, errors = _run(workspace.paths(paths or ["."]), checked, overrides, jobs, fixing=True)
            # As `fix` does, a file that cannot be checked or written does not hold back the other files' fixes.
            _write_fixes(reports, errors, lambda path: workspace.root)
            outcome = pull_request.publish(workspace, reports, github)
    except (pull_request.GitError, GitHubError) as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    render.print_findings(outcome.left)
    formats.append_to_file_named_by("GITHUB_OUTPUT", formats.step_outputs(outcome.outputs()))
    render.stderr.print(outcome.summary())
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if outcome.pending else EXIT_CLEAN)


@app.command(cls=Command)
def rules(
    output_format: Annotated[ListFormat, typer.Option("--output-format", metavar="FORMAT", help="text (a table) or json.")] = ListFormat.text,
    verbose: Verbose = False,
) -> None:
    """List the rules."""
    if output_format is ListFormat.json:
        render.print_json([render.rule_record(rule) for rule in all_rules()], lines=False)
    else:
        render.print_table(render.rules_table(all_rules()))


@app.command(cls=Command)
def explain(
    code: Annotated[str, typer.Argument(metavar="RULE", help="A rule code (GF001) or name (duplicate_backward).")], verbose: Verbose = False
) -> None:
    """Explain a rule, with a before/after example."""
    try:
        rule = rule_by_code(code)
    except UnknownRuleError:
        _usage_error(f"unknown rule: {code} (see `gradfix rules`)")
    typer.echo(render.explanation(rule))


app.command("rule", cls=Command, help="Explain a rule, with a before/after example (as `explain`, ruff's name for it).")(explain)


@app.command(cls=Command)
def server(verbose: Verbose = False) -> None:
    """Run the language server for editors, on stdin and stdout (README: "In your editor")."""
    if importlib.util.find_spec("pygls") is None:
        _usage_error("the language server needs pygls: install gradfix with its `server` extra (gradfix[server]), or pip install pygls")
    from .server import serve

    serve()


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        render.stderr.print("error: this command runs code and needs PyTorch installed (pip install torch)")
        raise typer.Exit(EXIT_ERROR)


@app.command(cls=Command)
def verify(
    folders: Annotated[
        List[str],
        typer.Argument(
            metavar="FOLDER...", help="Fixture folders: <rule>/<case>/ with before.py+after.py, ok.py or reported.py.", show_default=False
        ),
    ],
    output_format: Annotated[
        ListFormat, typer.Option("--output-format", metavar="FORMAT", help="How results are printed: text or json.")
    ] = ListFormat.text,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", min=1, help="Seconds each run of a fixture script may take.")
    ] = RunOptions.timeout,
    verbose: Verbose = False,
) -> None:
    """Run fixture folders: before.py must fail, the rule must turn it into after.py, after.py must
    run (with equal gradients where the rule keeps the maths); ok.py must be left alone and run.
    A case whose scripts import a module that is not installed (DeepSpeed) is skipped. Exit 1 if
    any check fails."""
    from gradfix.codemods.execution.verify import BadFixture, discover
    from gradfix.codemods.execution.verify import verify as verify_cases

    _require_torch()
    try:
        cases = discover(folders)
    except BadFixture as error:
        _usage_error(str(error))
    if not cases:
        _usage_error(f"no fixtures under {', '.join(folders)}")
    skipped = [case for case in cases if case.missing_modules()]
    with ScriptRunner() as runner:
        results = list(verify_cases([case for case in cases if case not in skipped], runner, timeout))
    if output_format is ListFormat.json:
        render.print_verify_json(results, skipped)
    else:
        render.print_table(render.verify_table(results, skipped))
    failed = sum(not r.passed for r in results)
    render.stderr.print(f"{len(results) - failed} passed, {failed} failed, {len(skipped)} skipped ({len(cases)} fixture case(s))")
    raise typer.Exit(EXIT_FINDINGS if failed else EXIT_CLEAN)


@app.command(cls=Command, context_settings={"ignore_unknown_options": True})
def diagnose(
    script: Annotated[Path, typer.Argument(metavar="SCRIPT", help="The training script (or notebook) to run.", show_default=False)],
    args: Annotated[
        Optional[List[str]], typer.Argument(metavar="[-- ARGS...]", help="Arguments for the script, after --.", show_default=False)
    ] = None,
    steps: Annotated[
        Optional[int],
        typer.Option(
            "--steps",
            metavar="N",
            min=1,
            help="Stop after this many optimizer steps (default: run until the error, the end of the script or --timeout).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=1,
            help="Seconds for the whole diagnosis and repair search; a run still training then stops and says so.",
        ),
    ] = 120,
    memory_limit: Annotated[int, typer.Option("--memory-limit", metavar="MIB", min=64, help="MiB the script may allocate.")] = 4096,
    fix: Annotated[bool, typer.Option("--fix", help="Apply the matching rule's rewrite and run again to confirm.")] = False,
    unsafe_fixes: Annotated[bool, typer.Option("--unsafe-fixes", help="With --fix: also apply a fix that changes the maths.")] = False,
    show_output: Annotated[bool, typer.Option("--show-output", help="Show what the script printed.")] = False,
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", metavar="N", min=1, help="Candidate rewrites the repair search runs at once, each on a warm runner of its own."),
    ] = 1,
    pass_env: Annotated[
        Optional[List[str]],
        typer.Option(
            "--pass-env",
            metavar="NAME",
            help="Pass this environment variable to the script too (it gets an allow-list of the environment; repeatable).",
            show_default=False,
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Run a training script with autograd anomaly detection until it fails, ends or --timeout; when it fails with
    'backward through the graph a second time', say which lines and which rule, and show the fix.
    Silent bugs are measured in the same run: graphs kept alive step after step, a backward that
    misses the loop's batches. Exit 0 when nothing shows (or --fix removed it), 1 when it does."""
    _require_torch()
    if not script.is_file():
        render.stderr.print(f"error: {script}: no such file")
        raise typer.Exit(EXIT_ERROR)
    started = time.monotonic()
    options = RunOptions(
        args=tuple(args or ()),
        timeout=timeout,
        stop_after=STOP_SHARE * timeout,
        memory_limit=memory_limit << 20,
        max_optimizer_steps=steps,
        cwd=str(script.resolve().parent),
        pass_env=tuple(pass_env or ()),
    )
    from gradfix.codemods.execution.diagnose import notebook_as_script

    try:  # a fix is not written over a file edited while the script ran
        if not is_notebook(str(script)):
            _diagnose_script(script, None, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
        with notebook_as_script(script) as (runnable, notebook):
            _diagnose_script(runnable, notebook, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
    except (NotebookError, FileChanged) as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def _diagnose_script(
    script: Path,
    notebook: Optional[Notebook],
    options: RunOptions,
    started: float,
    timeout: float,
    fix: bool,
    unsafe_fixes: bool,
    show_output: bool,
    jobs: int,
) -> NoReturn:
    """Diagnose ``script`` (made from ``notebook``, if given) and exit with what it found."""
    from gradfix.codemods.execution.diagnose import diagnose as run_diagnosis
    from gradfix.codemods.execution.diagnose import fix_and_rerun
    from gradfix.codemods.execution.repair import repair

    shown = Path(notebook.path) if notebook is not None else script
    with ScriptRunner() as runner:
        try:
            diagnosis = run_diagnosis(script, runner, options, notebook)
        except SourceError as error:
            _usage_error(str(error))
        render.print_diagnosis(diagnosis, show_output)
        if not diagnosis.found:
            raise typer.Exit(EXIT_CLEAN if diagnosis.run.succeeded else EXIT_FINDINGS)
        if diagnosis.fix is None:
            if not diagnosis.second_backward:
                raise typer.Exit(EXIT_FINDINGS)
            searched = repair(diagnosis, runner, options, budget=timeout - (time.monotonic() - started), jobs=jobs)
            render.print_repair(searched, diagnosis)
            _apply_repair(searched, diagnosis, shown, fix, unsafe_fixes)
        unsafe = diagnosis.finding.fix is FixKind.UNSAFE
        if not fix or (unsafe and not unsafe_fixes):
            flags = "--fix --unsafe-fixes" if unsafe else "--fix"
            render.stderr.print(
                ("This fix changes the maths (unsafe). " if unsafe else "") + f"Run `gradfix diagnose {flags} {shown}` to apply it and check again."
            )
            raise typer.Exit(EXIT_FINDINGS)
        again = fix_and_rerun(diagnosis, runner, options)
    confirmed, detail = diagnosis.confirmed_by(again)
    if confirmed:
        render.stderr.print(f"fixed {shown}: {detail}")
        raise typer.Exit(EXIT_CLEAN)
    render.stderr.print(f"the fix is not confirmed ({detail}); {shown} is left as it was")
    raise typer.Exit(EXIT_FINDINGS)


def _apply_repair(searched: Repair, diagnosis: Diagnosis, shown: Path, fix: bool, unsafe_fixes: bool) -> NoReturn:
    """Write the rewrite the search chose (when asked, and when the file is still as it was read)."""
    from gradfix.codemods.execution.repair import write_chosen

    chosen = searched.chosen
    if chosen is None:
        render.stderr.print(f"{searched.why()}; {shown} is unchanged")
        raise typer.Exit(EXIT_FINDINGS)
    if not fix or (not chosen.safe and not unsafe_fixes):
        flags = "--fix" if chosen.safe else "--fix --unsafe-fixes"
        render.stderr.print(
            ("This rewrite changes the maths (unsafe). " if not chosen.safe else "") + f"Run `gradfix diagnose {flags} {shown}` to apply it."
        )
        raise typer.Exit(EXIT_FINDINGS)
    try:
        write_chosen(searched, diagnosis.script)
    except FileChanged as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    fixed = chosen.candidate.module or shown
    render.stderr.print(f"fixed {fixed}: {diagnosis.describe(chosen.candidate.description)} ({chosen.outcome()})")
    raise typer.Exit(EXIT_CLEAN)


# click's UsageError, of the click typer uses (its own copy, in recent typer), which exports no name for it
UsageError = typer.BadParameter.__base__


def run() -> None:
    """Run the command line; ``gradfix.cli.main`` wraps it with signal handling. A usage error is
    one line in gradfix's words; an error gradfix did not foresee exits 2 with one line (its
    traceback too with --verbose)."""
    global _tracebacks_shown
    _tracebacks_shown = False
    try:
        # Not standalone: click's usage errors come here instead of being printed in its words.
        status = app(prog_name="gradfix", standalone_mode=False)
    except typer.Abort:  # end of input at a prompt
        render.stderr.print("Aborted!")
        sys.exit(EXIT_FINDINGS)
    except UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # `gradfix` alone: the help (as typer tells it)
            error.show()
        else:
            render.stderr.print(usage_message(error))
        sys.exit(EXIT_ERROR)
    except formats.StepFileError as error:
        render.stderr.print(f"error: {error}")
        sys.exit(EXIT_ERROR)
    except Exception as error:
        if _tracebacks_shown:
            traceback.print_exception(error)
        hint = "" if _tracebacks_shown else " (--verbose shows where)"
        render.stderr.print(f"error: internal error: {type(error).__name__}: {error}{hint}")
        sys.exit(EXIT_ERROR)
    sys.exit(status if isinstance(status, int) else EXIT_CLEAN)


def usage_message(error: Exception) -> str:
    """A usage error as gradfix says it, on one line: an unknown option with the ones it may
    have meant, a value with what the option takes (from pydantic's account, in recent typer,
    never its words), a missing argument; and where the usage is shown."""
    context = getattr(error, "ctx", None)
    where = f" (see `{context.command_path} -h`)" if context is not None else ""
    parameter = getattr(error, "param", None)
    if hasattr(error, "possibilities"):  # click's NoSuchOption
        meant = error.possibilities
        return f"error: unknown option {error.option_name}" + (f" (did you mean {' or '.join(sorted(meant))}?)" if meant else "") + where
    if not isinstance(error, typer.BadParameter) or parameter is None:
        return f"error: {error.format_message()}{where}"
    name = parameter.opts[0] if parameter.param_type_name == "option" else (parameter.metavar or parameter.name)
    if hasattr(error, "param_type"):  # click's MissingParameter
        return f"error: missing {name}{where}"
    account = error.__cause__.errors()[0] if hasattr(error.__cause__, "errors") else None
    if account is None:
        return f"error: {name}: {error.message}{where}"
    if account["type"] == "value_error":
        return f"error: {name}: {str(account['ctx']['error']).rstrip('.')}{where}"
    taken = _TAKEN.get(account["type"])
    if taken is None:
        return f"error: {name}: {account['input']!r} is not a value it takes{where}"
    given = account["input"] if account["type"] in _BOUNDS else repr(account["input"])
    return f"error: {name} takes {taken(account.get('ctx', {}))}, not {given}{where}"


# What an option takes, by the kind of value pydantic says it was not.
_BOUNDS = {
    "greater_than_equal": lambda bound: f"{bound['ge']} or more",
    "greater_than": lambda bound: f"more than {bound['gt']}",
    "less_than_equal": lambda bound: f"{bound['le']} or less",
    "less_than": lambda bound: f"less than {bound['lt']}",
}
_TAKEN = {
    **_BOUNDS,
    "int_parsing": lambda bound: "a whole number",
    "int_from_float": lambda bound: "a whole number",
    "float_parsing": lambda bound: "a number",
    "bool_parsing": lambda bound: "true or false",
}
