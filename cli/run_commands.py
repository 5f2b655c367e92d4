"""The commands that run the user's code: ``gradfix verify`` (fixture folders) and ``gradfix
diagnose`` (a training script or notebook run until it fails, and with ``--fix`` the rewrite a rule
or the repair search proves written). Apart because they need PyTorch and start the runner
(``codemods/execution/``), which no other command does but ``fix --verify``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, NoReturn, Optional

import typer

from gradfix.codemods.files import FileChanged
from gradfix.codemods.report import FixKind, SourceError
from gradfix.codemods.notebook import Notebook, NotebookError, is_notebook
from gradfix.codemods.execution.runner import STOP_SHARE, RunOptions, ScriptRunner

from . import render
from .conventions import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS
from .options import ListFormat, Verbose, _require_torch, _usage_error, at_least

if TYPE_CHECKING:
    from gradfix.codemods.execution.diagnose import Diagnosis
    from gradfix.codemods.execution.repair import Repair


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
        float, typer.Option("--timeout", metavar="SECONDS", parser=at_least(1.0), help="Seconds each run of a fixture script may take.")
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
            parser=at_least(1),
            help="Stop after this many optimizer steps (default: run until the error, the end of the script or --timeout).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            parser=at_least(1.0),
            help="Seconds for the whole diagnosis and repair search; a run still training then stops and says so.",
        ),
    ] = 120,
    memory_limit: Annotated[int, typer.Option("--memory-limit", metavar="MIB", parser=at_least(64), help="MiB the script may allocate.")] = 4096,
    fix: Annotated[bool, typer.Option("--fix", help="Apply the matching rule's rewrite and run again to confirm.")] = False,
    unsafe_fixes: Annotated[bool, typer.Option("--unsafe-fixes", help="With --fix: also apply a fix that changes the maths.")] = False,
    show_output: Annotated[bool, typer.Option("--show-output", help="Show what the script printed.")] = False,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            metavar="N",
            parser=at_least(1),
            help="Candidate rewrites the repair search runs at once, each on a warm runner of its own.",
        ),
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
    with ScriptRunner() as runner:
        # Its server imports torch for seconds, the script's own start-up: that goes on while
        # gradfix imports its analysis and reads the script, instead of after.
        runner.start()
        from gradfix.codemods.execution.diagnose import notebook_as_script

        try:  # a fix is not written over a file edited while the script ran
            if not is_notebook(str(script)):
                _diagnose_script(runner, script, None, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
            with notebook_as_script(script) as (runnable, notebook):
                _diagnose_script(runner, runnable, notebook, options, started, timeout, fix, unsafe_fixes, show_output, jobs)
        except (NotebookError, FileChanged) as error:
            render.stderr.print(f"error: {error}")
            raise typer.Exit(EXIT_ERROR) from None


def _diagnose_script(
    runner: ScriptRunner,
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
    """Diagnose ``script`` (made from ``notebook``, if given) on ``runner`` and exit with what it found."""
    from gradfix.codemods.execution.diagnose import diagnose as run_diagnosis
    from gradfix.codemods.execution.diagnose import fix_and_rerun
    from gradfix.codemods.execution.repair import repair

    shown = Path(notebook.path) if notebook is not None else script
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
