"""The ``gradfix`` command line. Parses options, calls the library, renders; no analysis here.

Exit codes: 0 clean, 1 findings (``check``), changes pending / findings left (``fix``), failed
checks (``verify``) or an error found (``diagnose``); 2 usage errors, bad input or internal errors.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Iterator, List, NoReturn, Optional

import typer


from gradfix import __version__
from gradfix.codemods import engine
from gradfix.codemods.cache import DEFAULT_FOLDER, ReportCache
from gradfix.codemods.config import Config, ConfigError, configs_for, project_root
from gradfix.codemods.engine import FileReport, FixMode, SourceError
from gradfix.codemods.notebook import Notebook, NotebookError, is_notebook
from gradfix.codemods.finding import FixKind
from gradfix.codemods.registry import UnknownRuleError, all_rules, rule_by_code, select_rules
from gradfix.codemods.shard import Shard
from gradfix.codemods.execution.runner import RunOptions, ScriptRunner

from . import formats, pull_request, render
from .github_api import DEFAULT_API_URL, GitHub, GitHubError

if TYPE_CHECKING:
    from gradfix.codemods.execution.diagnose import Diagnosis
    from gradfix.codemods.execution.repair import Repair

# LibCST and the analysis are imported where a command needs them (the checker for code on stdin
# and for reviewing fixes, the execution layer for verify and diagnose; the engine imports the
# checker for the files the cache does not answer): `check` answered by the cache loads neither.

app = typer.Typer(
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Find and fix the PyTorch training-loop bugs behind "
    "'Trying to backward through the graph a second time'.",
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
RUN_TIMEOUT = 60.0  # seconds one run of a script may take in `diagnose`
_PROGRESS_MIN_FILES = 20


class OutputFormat(str, enum.Enum):
    text = "text"
    concise = "concise"  # the finding lines only: no summary
    json = "json"
    json_lines = "json-lines"  # one JSON object a line, the records of `json`: shards' outputs concatenate
    github = "github"  # workflow-command annotations, and a summary table in $GITHUB_STEP_SUMMARY
    sarif = "sarif"  # SARIF 2.1.0, for code scanning


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
UnsafeFixes = Annotated[
    Optional[bool],
    typer.Option("--unsafe-fixes/--no-unsafe-fixes", help="Also apply fixes that change what the program computes.", show_default=False),
]
StdinFilename = Annotated[
    Optional[str],
    typer.Option("--stdin-filename", help="With the path `-`: the name of the code read from stdin (for settings and messages).", show_default=False),
]
CacheDir = Annotated[
    Optional[Path],
    typer.Option(
        "--cache-dir",
        envvar="GRADFIX_CACHE_DIR",
        help=f"Where to keep the reports of unchanged files [default: {DEFAULT_FOLDER} at the project root].",
        show_default=False,
    ),
]
NoCache = Annotated[bool, typer.Option("--no-cache", envvar="GRADFIX_NO_CACHE", help="Check every file; neither read nor write the cache.")]
ShardOption = Annotated[
    Optional[str],
    typer.Option("--shard", help="Check only part i of n of the files (1-based: 1/4 … 4/4), for a CI matrix.", show_default=False),
]
STDIN = "-"


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


def _run(
    paths: list[str],
    select,
    ignore,
    jobs: Optional[int],
    fixing: bool = False,
    unsafe_fixes: Optional[bool] = None,
    stdin_filename: Optional[str] = None,
    cache: ReportCache | None = None,
    shard: Shard | None = None,
) -> tuple[list[FileReport], list[str]]:
    """Check (or fix) the files under ``paths`` (those of ``shard``), each with the settings of its
    own configuration and the command line's on top; reports in the order of the files. The path
    ``-`` is the code on stdin, named ``stdin_filename``."""
    if select is not None and not _split(select):
        render.stderr.print("error: --select names no rule (give codes or prefixes such as GF001 or GF00)")
        raise typer.Exit(EXIT_ERROR)
    if STDIN in paths:
        if paths != [STDIN]:
            render.stderr.print("error: `-` (stdin) cannot be given with other paths")
            raise typer.Exit(EXIT_ERROR)
        name = stdin_filename or STDIN
        try:
            config = configs_for([name if stdin_filename else Path.cwd()])[0]
        except ConfigError as error:
            render.stderr.print(f"error: {error}")
            raise typer.Exit(EXIT_ERROR) from None
        mode = _mode(config, fixing, unsafe_fixes)
        from gradfix.codemods import checker

        return [checker.check_source(sys.stdin.buffer.read(), _rules(config, select, ignore), mode, name)], []
    files = engine.collect_files(paths)
    for notice in files.notices:
        render.stderr.print(f"warning: {notice}")
    if shard is not None:
        files.files = shard.select(files.files, project_root())
    groups: dict[Config, list[int]] = {}
    try:
        for index, config in enumerate(configs_for(files.files)):
            groups.setdefault(config, []).append(index)
    except ConfigError as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    reports: list[FileReport | None] = [None] * len(files.files)
    with _progress(len(files.files)) as advance:
        for config, indexes in groups.items():
            rules, mode = _rules(config, select, ignore), _mode(config, fixing, unsafe_fixes)
            for index, report in zip(indexes, engine.check_files([files.files[i] for i in indexes], rules, mode, jobs, cache)):
                reports[index] = report
                advance()
    return reports, files.errors


def _mode(config: Config, fixing: bool, unsafe_fixes: Optional[bool]) -> FixMode:
    if not fixing:
        return FixMode.NONE
    return FixMode.UNSAFE if (config.unsafe_fixes if unsafe_fixes is None else unsafe_fixes) else FixMode.SAFE


def _rules(config: Config, select, ignore) -> tuple[type, ...]:
    """``--select`` replaces the configuration's selection and ignores; ``--ignore`` adds to them."""
    try:
        if select is not None:
            return select_rules(_split(select), _split(ignore))
        return select_rules(list(config.select), [*config.ignore, *_split(ignore)])
    except UnknownRuleError as error:
        valid = ", ".join(rule.CODE for rule in all_rules())
        where = f" (settings read from {config.path})" if config.path else ""
        render.stderr.print(f"error: unknown rule code or prefix: {error} (the rules are {valid}){where}")
        raise typer.Exit(EXIT_ERROR) from None


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for a run over many files, when stderr is a terminal."""
    if not render.stderr.is_terminal or total < _PROGRESS_MIN_FILES:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # only a terminal's long run draws one

    columns = (TextColumn("checking"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=render.stderr, transient=True) as progress:
        task = progress.add_task("files", total=total)
        yield lambda: progress.advance(task)


def _cache(cache_dir: Optional[Path], no_cache: bool) -> ReportCache | None:
    if no_cache:
        return None
    return ReportCache(cache_dir or project_root() / DEFAULT_FOLDER)


def _shard(text: Optional[str]) -> Shard | None:
    if text is None:
        return None
    try:
        return Shard.parse(text)
    except ValueError as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


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
    stdin_filename: StdinFilename = None,
    statistics: Annotated[bool, typer.Option("--statistics", help="Count the findings per rule instead of listing them.")] = False,
    exit_zero: Annotated[bool, typer.Option("--exit-zero", help="Exit 0 even when there are findings (errors still exit 2).")] = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    shard: ShardOption = None,
) -> None:
    """Report findings as `path:line:col: CODE message`. Exit 1 if there are any. The path `-`
    reads the code from stdin."""
    reports, errors = _run(
        paths, select, ignore, jobs, stdin_filename=stdin_filename, cache=_cache(cache_dir, no_cache), shard=_shard(shard)
    )
    findings = [f for r in reports for f in r.findings]
    if statistics:
        render.print_table(render.statistics_table(findings))
    elif output_format is OutputFormat.json:
        render.print_findings_json(findings, reports, errors)
    elif output_format is OutputFormat.json_lines:
        render.print_findings_json_lines(findings, reports, errors)
    elif output_format is OutputFormat.github:
        typer.echo("".join(formats.annotation(f) + "\n" for f in findings), nl=False)
        formats.append_to_file_named_by("GITHUB_STEP_SUMMARY", formats.step_summary(reports))
        formats.append_to_file_named_by("GITHUB_OUTPUT", formats.step_outputs({"findings": str(len(findings))}))
    elif output_format is OutputFormat.sarif:
        sys.stdout.write(formats.sarif_text(reports, errors))
    else:
        render.print_findings(findings)
    if output_format in (OutputFormat.text, OutputFormat.github):
        render.stderr.print(render.check_summary(reports))
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


@app.command()
def fix(
    paths: Paths,
    diff: Annotated[bool, typer.Option("--diff", help="Write nothing; print a unified diff of the fixes.")] = False,
    unsafe_fixes: UnsafeFixes = None,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
    stdin_filename: StdinFilename = None,
    show_fixes: Annotated[bool, typer.Option("--show-fixes", help="List each finding the fixes removed.")] = False,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Show each rule's fix in each file and ask before applying it.")
    ] = False,
    exit_non_zero_on_fix: Annotated[
        bool, typer.Option("--exit-non-zero-on-fix", help="Exit 1 when a file was changed, even if nothing is left to fix.")
    ] = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    shard: ShardOption = None,
) -> None:
    """Apply fixes in place (or show them with --diff). Exit 1 if findings are left unfixed, or
    with --diff if there would be changes. The path `-` reads the code from stdin and writes the
    fixed code to stdout (findings left go to stderr)."""
    from_stdin = paths == [STDIN]
    if interactive and (diff or from_stdin):
        render.stderr.print("error: --interactive writes files: it cannot go with --diff or stdin")
        raise typer.Exit(EXIT_ERROR)
    reports, errors = _run(
        paths,
        select,
        ignore,
        jobs,
        fixing=True,
        unsafe_fixes=unsafe_fixes,
        stdin_filename=stdin_filename,
        cache=_cache(cache_dir, no_cache),
        shard=_shard(shard),
    )
    if interactive:
        _review(reports)
    changed = [r for r in reports if r.changed]
    if from_stdin and not diff:
        [report] = reports
        sys.stdout.buffer.write(report.rewritten or report.original or b"")
        sys.stdout.flush()
    for report in changed:
        if diff:
            render.print_diff(engine.unified_diff(report))
        elif not from_stdin:
            try:
                engine.write_atomically(report.path, report.rewritten, expected=report.original)
            except engine.FileChanged as error:
                errors.append(str(error))
                _not_written(report)
            except OSError as error:
                errors.append(f"{report.path}: cannot write: {error.strerror or error}")
                _not_written(report)
    if not diff:
        render.print_findings((f for r in reports for f in r.findings), to_stderr=from_stdin)
    if show_fixes:
        render.print_fixed(f for r in reports for f in r.fixed)
    render.stderr.print(render.fix_summary(reports, diff))
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    pending = changed if diff else [f for r in reports for f in r.findings]
    wrote = exit_non_zero_on_fix and any(r.changed for r in reports)
    raise typer.Exit(EXIT_FINDINGS if pending or wrote else EXIT_CLEAN)


def _review(reports: list[FileReport]) -> None:
    """Ask, file by file and rule by rule, whether to apply the fix shown; keep in each report only
    what was accepted. `a` accepts this and every later fix, `q` skips this and every later one."""
    from gradfix.codemods import checker

    answer = ""
    for report in (r for r in reports if r.changed):
        current, accepted = report.original, set()
        for code in dict.fromkeys(f.code for f in report.fixed):
            rule = rule_by_code(code)
            kinds = {f.fix for f in report.fixed if f.code == code}
            mode = FixMode.UNSAFE if FixKind.UNSAFE in kinds else FixMode.SAFE
            step = checker.check_source(current, [rule], mode, report.path)
            if not step.changed:
                continue
            if answer not in ("a", "q"):
                render.print_diff(engine.unified_diff(step))
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


def _not_written(report: FileReport) -> None:
    """A rewrite that could not be written fixed nothing: its findings are still there."""
    report.findings, report.fixed, report.rewritten = report.fixed + report.findings, [], None


@app.command()
def pr(
    paths: Annotated[Optional[List[str]], typer.Argument(help="Files or folders to fix [default: the whole checkout].", show_default=False)] = None,
    unsafe_fixes: UnsafeFixes = None,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
    branch: Annotated[str, typer.Option("--branch", help="The branch the fixes are pushed to.")] = pull_request.DEFAULT_BRANCH,
    base: Annotated[Optional[str], typer.Option("--base", help="The branch to fix [default: the branch checked out].", show_default=False)] = None,
    remote: Annotated[str, typer.Option("--remote", help="The git remote to fetch from and push to.")] = "origin",
    title: Annotated[str, typer.Option("--title", help="The pull request's title.")] = pull_request.DEFAULT_TITLE,
    label: Annotated[Optional[List[str]], typer.Option("--label", help="Labels for the pull request (comma-separated, repeatable).", show_default=False)] = None,
    draft: Annotated[bool, typer.Option("--draft", help="Open the pull request as a draft.")] = False,
    author: Annotated[str, typer.Option("--author", help="The commit's author, as 'Name <email>'.")] = pull_request.DEFAULT_AUTHOR,
    message: Annotated[Optional[str], typer.Option("--message", help="The commit message [default: the title].", show_default=False)] = None,
    token_env: Annotated[str, typer.Option("--token-env", help="The environment variable that holds the GitHub token.")] = "GITHUB_TOKEN",
    repository: Annotated[Optional[str], typer.Option("--repository", envvar="GITHUB_REPOSITORY", help="owner/name on GitHub.", show_default=False)] = None,
    api_url: Annotated[str, typer.Option("--api-url", envvar="GITHUB_API_URL", help="The GitHub REST API (GitHub Enterprise: https://HOST/api/v3).")] = DEFAULT_API_URL,
) -> None:
    """Commit the fixes on a branch made from the base branch, push it and open (or update) one
    pull request; close it and delete the branch when nothing is left to fix. Exit 1 while fixes
    wait in the pull request or findings are left, 0 when nothing is left to fix."""
    token = pull_request.token_from_environment(token_env)
    if not token:
        render.stderr.print(f"error: no GitHub token: set {token_env} (or name another variable with --token-env)")
        raise typer.Exit(EXIT_ERROR)
    settings = pull_request.Settings(remote, base, branch, title, message, tuple(_split(label)), draft, author)
    try:
        github = GitHub(token, repository or "", api_url)
        with pull_request.base_checkout(settings, token) as workspace:
            reports, errors = _run(workspace.paths(paths or ["."]), select, ignore, jobs, fixing=True, unsafe_fixes=unsafe_fixes)
            # As `fix` does, a file that cannot be checked does not hold back the other files' fixes.
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
        raise typer.Exit(EXIT_ERROR) from None
    typer.echo(render.explanation(rule))


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        render.stderr.print("error: this command runs code and needs PyTorch installed (pip install torch)")
        raise typer.Exit(EXIT_ERROR)


@app.command()
def verify(
    folders: Annotated[List[str], typer.Argument(help="Fixture folders: <rule>/<case>/ with before.py+after.py, ok.py or reported.py.", show_default=False)],
    output_format: Annotated[OutputFormat, typer.Option("--output-format", help="How results are printed.")] = OutputFormat.text,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds each run of a fixture script may take.")] = RunOptions.timeout,
) -> None:
    """Run fixture folders: before.py must fail, the rule must turn it into after.py, after.py must
    run (with equal gradients where the rule keeps the maths); ok.py must be left alone and run.
    Exit 1 if any check fails."""
    from gradfix.codemods.execution.verify import BadFixture, discover
    from gradfix.codemods.execution.verify import verify as verify_cases

    _require_torch()
    try:
        cases = discover(folders)
    except BadFixture as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    if not cases:
        render.stderr.print(f"error: no fixtures under {', '.join(folders)}")
        raise typer.Exit(EXIT_ERROR)
    with ScriptRunner() as runner:
        results = list(verify_cases(cases, runner, timeout))
    if output_format is OutputFormat.json:
        render.print_verify_json(results)
    else:
        render.print_table(render.verify_table(results))
    failed = sum(not r.passed for r in results)
    render.stderr.print(f"{len(results) - failed} passed, {failed} failed ({len(cases)} fixture case(s))")
    raise typer.Exit(EXIT_FINDINGS if failed else EXIT_CLEAN)


@app.command(context_settings={"ignore_unknown_options": True})
def diagnose(
    script: Annotated[Path, typer.Argument(help="The training script to run.", show_default=False)],
    args: Annotated[Optional[List[str]], typer.Argument(help="Arguments for the script, after --.", show_default=False)] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Stop after this many successful backward calls.")] = 5,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds for the whole diagnosis and repair search (each run at most 60).")
    ] = 120,
    memory_limit: Annotated[int, typer.Option("--memory-limit", min=64, help="MiB the script may allocate.")] = 4096,
    fix: Annotated[bool, typer.Option("--fix", help="Apply the matching rule's rewrite and run again to confirm.")] = False,
    unsafe_fixes: Annotated[bool, typer.Option("--unsafe-fixes", help="With --fix: also apply a fix that changes the maths.")] = False,
    show_output: Annotated[bool, typer.Option("--show-output", help="Show what the script printed.")] = False,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Candidate rewrites the repair search runs at once, each on a warm runner of its own.")
    ] = 1,
    pass_env: Annotated[
        Optional[List[str]],
        typer.Option("--pass-env", help="Pass this environment variable to the script too (it gets an allow-list of the environment; repeatable).", show_default=False),
    ] = None,
) -> None:
    """Run a training script for a few steps with autograd anomaly detection; when it fails with
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
        timeout=min(timeout, RUN_TIMEOUT),
        memory_limit=memory_limit << 20,
        max_steps=steps,
        cwd=str(script.resolve().parent),
        pass_env=tuple(pass_env or ()),
    )
    from gradfix.codemods.execution.diagnose import notebook_as_script

    try:  # a fix is not written over a file edited while the script ran
        if not is_notebook(str(script)):
            _diagnose_script(script, None, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
        with notebook_as_script(script) as (runnable, notebook):
            _diagnose_script(runnable, notebook, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
    except (NotebookError, engine.FileChanged) as error:
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
            render.print_errors([], [str(error)])
            raise typer.Exit(EXIT_ERROR) from None
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
                ("This fix changes the maths (unsafe). " if unsafe else "")
                + f"Run `gradfix diagnose {flags} {shown}` to apply it and check again."
            )
            raise typer.Exit(EXIT_FINDINGS)
        again = fix_and_rerun(diagnosis, runner, options)
    confirmed, detail = diagnosis.confirmed_by(again)
    if confirmed:
        render.stderr.print(f"fixed {shown}: {detail}")
        raise typer.Exit(EXIT_CLEAN)
    render.stderr.print(f"applied the fix to {shown}, but it is not confirmed: {detail}")
    raise typer.Exit(EXIT_FINDINGS)


def _apply_repair(searched: Repair, diagnosis: Diagnosis, shown: Path, fix: bool, unsafe_fixes: bool) -> NoReturn:
    """Write the rewrite the search chose (when asked, and when the file is still as it was read)."""
    from gradfix.codemods.execution.repair import write_chosen

    chosen = searched.chosen
    if chosen is None:
        render.stderr.print(f"no candidate rewrite ran clean; {shown} is unchanged")
        raise typer.Exit(EXIT_FINDINGS)
    if not fix or (not chosen.safe and not unsafe_fixes):
        flags = "--fix" if chosen.safe else "--fix --unsafe-fixes"
        render.stderr.print(
            ("This rewrite changes the maths (unsafe). " if not chosen.safe else "")
            + f"Run `gradfix diagnose {flags} {shown}` to apply it."
        )
        raise typer.Exit(EXIT_FINDINGS)
    try:
        write_chosen(searched, diagnosis.script)
    except engine.FileChanged as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    fixed = chosen.candidate.module or shown
    render.stderr.print(f"fixed {fixed}: {diagnosis.describe(chosen.candidate.description)} ({chosen.outcome()})")
    raise typer.Exit(EXIT_CLEAN)


def run() -> None:
    """Run the command line; ``gradfix.cli.main`` wraps it with signal handling."""
    app(prog_name="gradfix")
