"""How results look: findings, diffs and summaries. Diagnostics go to stderr; findings, diffs and
machine output to stdout, uncoloured when stdout is not a terminal or NO_COLOR is set. Text of the
checked files (a path, quoted code, a script's error) is printed with its control characters
escaped (``printed_line``); a diff piped to a file or to ``git apply`` keeps its bytes."""

from __future__ import annotations

import io
import json
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from rich.console import Console
from rich.text import Text

from gradfix.codemods.config import Config
from gradfix.codemods.files import PathError, unified_diff
from gradfix.codemods.diffs import file_lines
from gradfix.codemods.report import FileReport, Finding
from gradfix.codemods.registry import rule_by_code
from gradfix.codemods.rule import Rule

from .conventions import printed_line

if TYPE_CHECKING:
    from rich.table import Table

    from gradfix.codemods.execution.diagnose import Diagnosis
    from gradfix.codemods.execution.repair import Repair
    from gradfix.codemods.execution.verify import CheckResult, FixtureCase

stderr = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
# What is said beside the results (summaries, warnings): `--quiet` silences it, never an error.
notes = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=True, markup=False, emoji=False)


def coloured_stdout() -> bool:
    return _stdout().is_terminal and not _stdout().no_color


def print_diff(diff: str) -> None:
    if not coloured_stdout():
        sys.stdout.write(diff)
        sys.stdout.flush()
        return
    console = _stdout()
    for line in file_lines(diff):
        style = next((s for prefix, s in _DIFF_STYLES if line.startswith(prefix)), "")
        console.print(Text(printed_line(line.removesuffix("\n").removesuffix("\r")), style=style))


def print_findings(findings: Iterable[Finding], to_stderr: bool = False) -> None:
    """One line per finding, on stdout (on stderr when stdout carries code)."""
    stream = sys.stderr if to_stderr else sys.stdout
    if not (stderr.is_terminal if to_stderr else coloured_stdout()):
        stream.writelines(printed_line(finding.render()) + "\n" for finding in findings)
        stream.flush()
        return
    console = stderr if to_stderr else _stdout()
    for finding in findings:
        text = Text()
        text.append(f"{printed_line(finding.location)}:", style="bold")
        text.append(f" {finding.code}", style="bold red")
        text.append(f" {printed_line(finding.message)}")
        if finding.fix is not None:
            text.append(f" [{finding.fix.value} fix]", style="dim")
        console.print(text)


def finding_record(finding: Finding) -> dict:
    """A finding as machine output carries it."""
    return {
        "path": finding.path,
        "cell": finding.cell,
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "end_column": finding.end_column,
        "code": finding.code,
        "message": finding.message,
        "fix": None if finding.fix is None else finding.fix.value,
        "related_lines": list(finding.related_lines),
        # In a notebook, the cell each related line counts in (null in a script).
        "related_cells": list(finding.related_cells) if finding.cell is not None else None,
        # The fix's proof obligations, each proved, or unknown/refuted by a construct at a line.
        "proof": [{"obligation": p.obligation, "answer": p.answer, "line": p.line or None, "construct": p.construct or None} for p in finding.proof],
        # The finding rests on what gradfix could only guess (shown only with --hints).
        "hint": finding.hint,
    }


def all_errors(reports: Sequence[FileReport], errors: Sequence[PathError] = ()) -> list[PathError]:
    """Every path that could not be checked: ``errors`` (from collecting the files), then the
    reports' own."""
    return [*errors, *(PathError(r.path, message) for r in reports for message in [*r.errors, *r.internal_errors])]


def error_record(error: PathError) -> dict:
    """A file that could not be checked, as an entry of machine output (``code`` ``"error"``),
    with the cell and line its message names (null where it names none)."""
    cell, line = error.place
    return {"path": error.path, "cell": cell, "line": line, "code": "error", "message": error.message}


def print_json(records: Sequence[dict], lines: bool) -> None:
    """``records`` as one JSON list, or (``lines``) one JSON object a line, so that the outputs
    of several runs concatenate."""
    if lines:
        sys.stdout.writelines(json.dumps(record) + "\n" for record in records)
    else:
        sys.stdout.write(json.dumps(list(records), indent=2) + "\n")


def findings_records(findings: Iterable[Finding], reports: Sequence[FileReport] = (), errors: Sequence[PathError] = ()) -> list[dict]:
    """The findings, then the files that could not be checked."""
    return [*map(finding_record, findings), *map(error_record, all_errors(reports, errors))]


def print_errors(reports: Sequence[FileReport], extra: Sequence[PathError] = ()) -> None:
    for error in all_errors(reports, extra):
        stderr.print(Text("error: ", style="bold red") + Text(printed_line(error.message)))


def statistics(findings: Sequence[Finding]) -> list[dict]:
    """How many findings each rule made, most first, and how many of them a fix is on offer for."""
    counts = Counter(f.code for f in findings)
    return [
        {"count": count, "code": code, "name": rule_by_code(code).NAME, "fixable": sum(f.fix is not None for f in findings if f.code == code)}
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


def _table() -> Table:
    from rich.table import Table  # only for the commands that print a table, not at every start

    return Table(box=None, pad_edge=False)


def statistics_table(findings: Sequence[Finding]) -> Table:
    table = _table()
    for column in ("count", "code", "name", "fixable"):
        table.add_column(column, justify="right" if column in ("count", "fixable") else "left")
    for row in statistics(findings):
        table.add_row(*(str(row[column]) for column in ("count", "code", "name", "fixable")))
    return table


def print_fixed(findings: Iterable[Finding], diff: bool = False) -> None:
    """The findings the fixes removed (``diff``: would remove), one line each, on stderr (stdout
    may carry code or a diff)."""
    verb = "would fix" if diff else "fixed"
    for finding in findings:
        stderr.print(Text(printed_line(f"{verb} {finding.location}: {finding.code} {finding.message}")))


def rule_record(rule: type[Rule]) -> dict:
    """A rule as machine output carries it."""
    return {
        "code": rule.CODE,
        "name": rule.NAME,
        "fix": rule.FIX.value if rule.FIX else None,
        "keeps_gradients": rule.KEEPS_GRADIENTS,
        "summary": rule.SUMMARY,
        "explanation": rule.documentation(),
        "example_before": rule.EXAMPLE_BEFORE,
        "example_after": rule.EXAMPLE_AFTER,
    }


def rules_table(rules: Sequence[type[Rule]]) -> Table:
    table = _table()
    for column in ("code", "name", "fix", "summary"):
        table.add_column(column)
    for rule in rules:
        table.add_row(rule.CODE, rule.NAME, rule.FIX.value if rule.FIX else "report", rule.SUMMARY)
    return table


def settings_lines(path: str, config: Config, codes: Iterable[str], unsafe_fixes: bool, hints: bool) -> list[str]:
    """``check --show-settings``: what checks ``path``, as TOML: the file its settings come from,
    the rules selected (``codes``), the fix mode and hints, and ``config``'s exclusions (the
    command line's over them)."""
    ignores = ", ".join(f"{json.dumps(pattern)} = {json.dumps(list(ignored))}" for pattern, ignored in config.per_file_ignores)
    return [
        printed_line(f"Settings for: {path}"),
        printed_line(f"Settings file: {config.path or 'none (the defaults)'}"),
        f"rules = {json.dumps(sorted(codes))}",
        f"unsafe-fixes = {json.dumps(unsafe_fixes)}",
        f"hints = {json.dumps(hints)}",
        f"exclude = {json.dumps(list(config.exclude))}",
        f"extend-exclude = {json.dumps(list(config.extend_exclude))}",
        f"per-file-ignores = {{{ignores}}}",
    ]


PIPED_WIDTH = 1000  # a table piped to a file or another program is not wrapped to a terminal's width


def print_table(table: Table) -> None:
    """A table, laid out for the terminal; piped, not wrapped and without the spaces that pad
    each line to the table's width."""
    console = _stdout()
    if console.is_terminal:
        console.print(table)
        return
    table.expand = False
    piped = Console(highlight=False, markup=False, emoji=False, width=PIPED_WIDTH, file=io.StringIO(), color_system=None)
    piped.print(table)
    sys.stdout.writelines(line.rstrip() + "\n" for line in piped.file.getvalue().splitlines())


def explanation(rule: type[Rule]) -> str:
    return (
        f"{rule.CODE} {rule.NAME}: {rule.SUMMARY}\n\n{plain_documentation(rule)}\n\n"
        f"Before:\n\n{_indent(rule.EXAMPLE_BEFORE)}\nAfter:\n\n{_indent(rule.EXAMPLE_AFTER)}"
    )


def plain_documentation(rule: type[Rule]) -> str:
    """A rule's documentation as plain text: the code its docstring marks as reST does (two
    backticks each side) is quoted as the findings' messages quote code, with one."""
    return _REST_LITERAL.sub(r"`\1`", rule.documentation())


_REST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def _indent(code: str) -> str:
    return "".join("    " + line if line.strip() else line for line in code.splitlines(keepends=True))


def verify_table(results: Sequence[CheckResult], skipped: Sequence[FixtureCase] = ()) -> Table:
    table = _table()
    for column in ("case", "check", "result", "detail"):
        table.add_column(column, overflow="fold")
    for result in results:
        mark = Text("pass", style="green") if result.passed else Text("FAIL", style="bold red")
        table.add_row(result.case.name, result.check, mark, result.detail)
    for case in skipped:
        table.add_row(case.name, "all", Text("skip", style="yellow"), _missing(case))
    return table


def _missing(case: FixtureCase) -> str:
    return f"needs {', '.join(case.missing_modules())}, which is not installed"


def print_verify_json(results: Sequence[CheckResult], skipped: Sequence[FixtureCase] = ()) -> None:
    records = [
        {"case": str(r.case.directory), "rule": r.case.rule.CODE, "check": r.check, "passed": r.passed, "skipped": False, "detail": r.detail}
        for r in results
    ]
    records += [
        {"case": str(c.directory), "rule": c.rule.CODE, "check": None, "passed": None, "skipped": True, "detail": _missing(c)} for c in skipped
    ]
    sys.stdout.write(json.dumps(records, indent=2) + "\n")


def print_diagnosis(diagnosis: Diagnosis, show_output: bool) -> None:
    console = _stdout()
    run = diagnosis.run
    shown = diagnosis.notebook.path if diagnosis.notebook is not None else diagnosis.script
    if show_output and (run.stdout or run.stderr):
        console.print(Text("script output:", style="bold"))
        console.print(Text(run.stdout + run.stderr))
    if diagnosis.symptom:
        console.print(Text(printed_line(f"{shown}: runs, but {diagnosis.describe(diagnosis.symptom)}"), style="bold red"))
    elif not diagnosis.second_backward:
        if run.succeeded:
            console.print(Text(printed_line(f"no error in {run.backward_calls} step(s) ({run.describe()})")))
        else:
            console.print(Text(printed_line(f"{shown}: {run.describe()}"), style="bold"))
            if run.status == "error" and not show_output and run.traceback:
                for line in run.traceback.rstrip().split("\n"):
                    console.print(Text(printed_line(line)))
        return
    else:
        console.print(Text(printed_line(f"{shown}: RuntimeError: {diagnosis.run.error_message.split('.')[0]}"), style="bold red"))
    for line in diagnosis_lines(diagnosis, diagnosis.describe):
        console.print(Text(printed_line(line)))
    if diagnosis.finding is None:
        if diagnosis.symptom:
            console.print("  No gradfix rule finds the cause: look for losses or outputs kept across steps.")
            return
        console.print("  No gradfix rule matches this shape. Look at the two lines above: the value built at the")
        console.print("  second one must be rebuilt, or detached, before the backward at the first one.")
        return
    if diagnosis.fix is None:
        console.print(
            f"  {diagnosis.fix_refused}: not offered." if diagnosis.fix_refused else "  gradfix reports this shape but cannot prove a rewrite for it."
        )
        return
    console.print("  fix:")
    print_diff(diagnosis.diff(diagnosis.fix.rewritten))


def diagnosis_lines(diagnosis: Diagnosis, describe: Callable[[str], str], calls_counted: bool = True) -> list[str]:
    """What a diagnosis found of the error: the backward that failed, the line that built the freed
    graph, where that line keeps it, how the two relate, the matching rule. ``describe`` names the
    lines (the cells of a notebook); ``calls_counted``: whether the failing backward's calls were
    counted (a run's were, a live traceback's were not)."""
    lines = []
    if diagnosis.failing is not None:
        when = [f"on its {_ordinal(diagnosis.failing_call_number)} call"] if calls_counted else []
        if diagnosis.loop_line is not None:
            when.append(f"in the loop at {describe(f'line {diagnosis.loop_line}')}")
        where = f"  failed at  {describe(f'line {diagnosis.failing.line}')}: {diagnosis.failing.code}"
        lines.append(where + (f"   ({', '.join(when)})" if when else ""))
    if diagnosis.graph is not None:
        lines.append(f"  graph from {describe(f'line {diagnosis.graph.line}')}: {diagnosis.graph.code}")
    if diagnosis.kept_in:
        lines.append(f"  kept in:   {diagnosis.kept_in}")
    if diagnosis.relation:
        lines.append(f"  why: {describe(diagnosis.relation)}")
    if diagnosis.finding is not None:
        lines.append(f"  rule: {diagnosis.finding.code} {diagnosis.rule.NAME}: {describe(diagnosis.finding.message)}")
    return lines


def print_repair(searched: Repair, diagnosis: Diagnosis) -> None:
    """The candidates a repair search ran, one line each, and the diff of the one it chose."""
    console = _stdout()
    for line in repair_lines(searched, diagnosis.describe):
        console.print(Text(printed_line(line)))
    chosen = searched.chosen
    if chosen is None:
        return
    console.print(f"  chosen because {searched.why()}:")
    candidate = chosen.candidate
    if candidate.module is None:
        print_diff(diagnosis.diff(candidate.source))
    else:
        print_diff(unified_diff(FileReport(str(candidate.module), original=candidate.module_original, rewritten=candidate.source)))


def repair_lines(searched: Repair, describe: Callable[[str], str]) -> list[str]:
    """The candidates a repair search ran, one line each, with what their runs showed."""
    chosen = searched.chosen
    lines = [f"  no rule proves a rewrite; tried {len(searched.attempts)} candidate rewrite(s) at the blamed lines:"]
    for attempt in searched.attempts:
        mark = "chosen" if attempt is chosen else ("ok" if attempt.accepted else "failed")
        lines.append(f"    [{mark}] {describe(attempt.candidate.description)}: {attempt.outcome()}")
    return lines


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
