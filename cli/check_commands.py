"""``gradfix check`` and ``gradfix fix``: the findings reported, and the fixes applied (or shown as a
diff, or reviewed one by one). One module, as they are one command in ruff (``ruff check --fix``):
``check --fix`` runs ``fix``. ``check``'s other modes are here too: ``--add-noqa``,
``--show-files`` and ``--show-settings``, ``--watch``, ``--output-file``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Callable, Iterator, NoReturn, Optional

import typer

from gradfix.codemods.cache import ReportCache
from gradfix.codemods.config import ConfigError, Overrides, Settings, project_root
from gradfix.codemods.files import collect_files, path_lines, sweep_stale_temporaries, unified_diff, write_atomically, write_root
from gradfix.codemods.report import FileReport, FixKind, FixMode
from gradfix.codemods.notebook import is_notebook
from gradfix.codemods.registry import rule_by_code
from gradfix.codemods.run import excluded_by, excluded_when_named
from gradfix.codemods.shard import Shard

from . import formats, render
from .conventions import CURRENT_FOLDER, EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, STDIN, check_summary, fix_summary
from .options import (
    CacheDir,
    ConfigOption,
    Exclude,
    ExitZero,
    ExtendExclude,
    ExtendSelect,
    ForceExclude,
    HintsOption,
    Ignore,
    Jobs,
    NoCache,
    OutputFormat,
    OutputFormatOption,
    Paths,
    Quiet,
    Select,
    ShardOption,
    StdinFilename,
    UnsafeFixes,
    Verbose,
    _cache,
    _has_errors,
    _not_written,
    _print_results,
    _require_torch,
    _run,
    _selection,
    _shard,
    _usage_error,
    _write_fixes,
)


WATCH_INTERVAL = 0.5  # seconds between two looks at the files `check --watch` watches


def _print_unsafe_fixes(reports: list[FileReport], settings: Settings, unsafe_fixes: Optional[bool]) -> None:
    """``check --unsafe-fixes``: the diff each unsafe fix would make, rule by rule, in the files
    whose settings allow unsafe fixes."""
    overrides = Overrides(unsafe_fixes=unsafe_fixes)
    for report in reports:
        if any(f.fix is FixKind.UNSAFE for f in report.findings) and overrides.unsafe(settings.for_path(report.path)):
            for rewrite in formats.rule_rewrites(report, frozenset({FixKind.UNSAFE})).values():
                render.print_diff(unified_diff(rewrite))


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
            render.notes.print(check_summary(reports))
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
        from .run_commands import ScriptRunner  # the runner the commands that run code start (a test lends its warm one)
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
    render.notes.print(fix_summary(reports, diff))
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
