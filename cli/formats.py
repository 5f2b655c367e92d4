"""Output for CI: GitHub workflow-command annotations, a Markdown step summary, step outputs, and
SARIF 2.1.0 for code scanning. Everything here turns reports into text; nothing analyses code."""

from __future__ import annotations

import dataclasses
import difflib
import io
import json
import os
import re
import secrets
import tokenize
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from gradfix import __version__
from gradfix.cli.conventions import visible
from gradfix.cli.render import plain_documentation
from gradfix.cli.rule_pages import rules_page_link
from gradfix.codemods.config import project_root
from gradfix.codemods.files import PathError
from gradfix.codemods.report import FileReport, Finding, FixKind, FixMode
from gradfix.codemods.notebook import Notebook, NotebookError, is_notebook
from gradfix.codemods.source import source_text
from gradfix.codemods.registry import all_rules, rule_by_code
from gradfix.codemods.rule import Rule

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT = "%SRCROOT%"  # code scanning resolves URIs against the repository's root


# GitHub workflow commands ----------------------------------------------------------------------
def escape_data(text: str) -> str:
    """A workflow command's message: the runner decodes these three, and a raw newline would end
    the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value, where `:` ends the properties and `,` separates them."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding, file_line: int | None = None) -> str:
    """``::error file=…,line=…,col=…,title=…::message``; GitHub places it on the line in the diff
    view. A notebook's line counts within its cell: its annotation names the cell in its message
    and is placed on ``file_line``, the line of the notebook's file that holds it."""
    properties = {"file": repository_path(finding.path)}
    if finding.cell is None:
        properties |= {"line": str(finding.line), "col": str(finding.column)}
    elif file_line is not None:
        properties["line"] = str(file_line)
    properties["title"] = f"{finding.code} {rule_by_code(finding.code).NAME}"
    place = "" if finding.cell is None else f"cell {finding.cell}, line {finding.line}: "
    marker = f" [{finding.fix.value} fix]" if finding.fix is not None else ""
    return _command(properties, place + finding.message + marker, "notice" if finding.hint else "error")


def error_annotation(error: PathError, file_line: int | None = None) -> str:
    """A file that could not be checked, as an annotation on it (on its line, where one is known)."""
    properties = {"file": repository_path(error.path)}
    if file_line is not None:
        properties["line"] = str(file_line)
    properties["title"] = "gradfix: cannot check this file"
    return _command(properties, error.message)


def annotations(reports: Sequence[FileReport], errors: Sequence[PathError]) -> list[str]:
    """An annotation for each finding and each file that could not be checked."""
    lines = [error_annotation(error, _file_line(None, *error.place)) for error in errors]
    for report in reports:
        notebook = _notebook(report)
        for finding in report.findings:
            lines.append(annotation(finding, _file_line(notebook, finding.cell, finding.line)))
        for error in report_errors(report):
            lines.append(error_annotation(error, _file_line(notebook, *error.place)))
    return lines


def report_errors(report: FileReport) -> list[PathError]:
    return [PathError(report.path, message) for message in [*report.errors, *report.internal_errors]]


def _command(properties: Mapping[str, str], message: str, level: str = "error") -> str:
    """An ``error`` (or ``notice``) command; its message (which may quote the checked code) is one
    line, its control characters shown (``visible``): the runner writes it into the log as it
    decodes it."""
    joined = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{level} {joined}::{escape_data(visible(message))}"


def _notebook(report: FileReport) -> Notebook | None:
    """The notebook a report is of, to place its cells' lines in its file (None for a script,
    or a notebook that could not be read)."""
    if not is_notebook(report.path) or report.original is None:
        return None
    try:
        return Notebook(report.original, report.path)
    except NotebookError:
        return None


def _file_line(notebook: Notebook | None, cell: int | None, line: int | None) -> int | None:
    """The line of the file that holds ``line`` (of ``cell``, in a notebook), where known."""
    if cell is None or line is None:
        return line
    return notebook.json_line(cell, line) if notebook is not None else None


def repository_path(path: str) -> str:
    """A path as GitHub names it: relative to the root of the repository checked out in the
    current folder (the nearest folder above with a ``.git``, else the current folder), with
    ``/``; absolute where the file is outside it."""
    relative = os.path.relpath(os.path.abspath(path), project_root())
    return os.path.abspath(path) if relative.startswith("..") else Path(relative).as_posix()


def step_summary(reports: Sequence[FileReport]) -> str:
    """A Markdown table of every finding: GitHub shows only the first annotations of a step, the
    job's summary page shows them all."""
    findings = [f for r in reports for f in r.findings]
    fixed, left = sum(len(r.fixed) for r in reports), " left" if any(r.fixed for r in reports) else ""
    lines = ["### gradfix", ""]
    if fixed:
        lines += [f"gradfix fixed {fixed} finding(s) in {sum(r.changed for r in reports)} file(s).", ""]
    if not findings:
        return "\n".join([*lines, f"No findings{left} in {len(reports)} file(s)."]) + "\n"
    files = sum(bool(r.findings) for r in reports)
    fixable = Counter(f.fix for f in findings)
    lines += [
        f"{len(findings)} finding(s){left} in {files} file(s): {fixable[FixKind.SAFE]} with a safe fix (`gradfix fix`), "
        f"{fixable[FixKind.UNSAFE]} with an unsafe fix (`gradfix fix --unsafe-fixes`), {fixable[None]} to fix by hand.",
        "",
        "| location | rule | message | fix |",
        "|---|---|---|---|",
    ]
    for finding in findings:
        rule = rule_by_code(finding.code)
        fix = finding.fix.value if finding.fix is not None else "by hand"
        location = dataclasses.replace(finding, path=repository_path(finding.path)).location
        lines.append(f"| {code_span(location)} | {finding.code} {rule.NAME} | {markdown_message(finding.message)} | {fix} |")
    return "\n".join(lines) + "\n"


def markdown_text(text: str) -> str:
    """Text of the checked files as Markdown that shows it as it is, inside a cell of a table: its
    control characters escaped (``visible``), and a backslash before each character that could
    start markup inside a line (emphasis, code, a link or image, HTML, an entity, strikethrough,
    maths, a cell's end)."""
    return _INLINE_MARKUP.sub(r"\\\g<0>", visible(text))


_INLINE_MARKUP = re.compile(r"[\\`*_\[\]<>&~|$]")


def code_span(text: str) -> str:
    """``text`` as a code span inside a cell of a table, which no backtick of it can close: its
    fence is a run of backticks longer than any in it, spaced from a backtick at either end of the
    text, or from blanks at both (a span drops one space at each end when it has one at both),
    and a ``|`` is escaped, as a table reads it before the span."""
    text = visible(text).replace("|", "\\|")
    fence = "`" * (1 + max(map(len, re.findall("`+", text)), default=0))
    padding = " " if "`" in (text[:1], text[-1:]) or text[:1] == text[-1:] == " " else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def markdown_message(message: str) -> str:
    """A finding's message in Markdown: what it quotes between backticks as code spans, the rest
    as text. The quoted code is the checked file's, and may hold backticks of its own: they only
    move where a span starts or ends, as every part is escaped as what it becomes (an odd
    backtick, which would open no span, is text)."""
    parts = message.split("`")
    if len(parts) % 2 == 0:
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return "".join(code_span(part) if index % 2 else markdown_text(part) for index, part in enumerate(parts))


def markdown_cell(text: str) -> str:
    """Text that stays inside one cell of a Markdown table."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


class StepFileError(OSError):
    """A file the runner names (the step summary, the outputs) that cannot be appended to."""


def append_to_file_named_by(variable: str, text: str) -> bool:
    """Append ``text`` to the file that the environment variable names (the runner's step summary,
    its outputs); False when the variable is not set. ``StepFileError`` when it cannot be."""
    path = os.environ.get(variable)
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise StepFileError(f"${variable} names {path}, which cannot be appended to: {error.strerror or error}") from None
    return True


def step_outputs(values: Mapping[str, str]) -> str:
    """Step outputs in the runner's multi-line form, each with a delimiter no value can contain."""
    blocks = []
    for name, value in values.items():
        delimiter = f"gradfix_{secrets.token_hex(16)}"
        blocks.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
    return "".join(blocks)


# SARIF -----------------------------------------------------------------------------------------
def sarif_log(reports: Sequence[FileReport], errors: Sequence[PathError] = ()) -> dict:
    """A SARIF 2.1.0 log of the findings, with every rule's documentation and, for each finding a
    fix is on offer for, that fix as text replacements in the file. Paths are relative to the
    repository's root, as code scanning reads them."""
    rules = all_rules()
    index = {rule.CODE: position for position, rule in enumerate(rules)}
    semantic = semantic_version(__version__)
    driver = {
        "name": "gradfix",
        "version": __version__,
        **({"semanticVersion": semantic} if semantic else {}),
        "rules": [_sarif_rule(r) for r in rules],
    }
    results, notifications = [], [_notification(error) for error in errors]
    for report in reports:
        fixes = {code: _sarif_fix(report.path, code, rewrite) for code, rewrite in rule_rewrites(report).items()}
        notebook = _notebook(report)
        for finding in report.findings:
            result = _sarif_result(finding, index[finding.code], notebook)
            if finding.code in fixes:
                result["fixes"] = [fixes[finding.code]]
            results.append(result)
        notifications += [_notification(error, notebook) for error in report_errors(report)]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "columnKind": "unicodeCodePoints",
                "originalUriBaseIds": {SOURCE_ROOT: {"uri": project_root().as_uri() + "/"}},
                "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
                "results": results,
            }
        ],
    }


def _notification(error: PathError, notebook: Notebook | None = None) -> dict:
    location = _location(error.path, _file_line(notebook, *error.place))
    return {"level": "error", "message": {"text": error.message}, "locations": [location]}


_PEP_440 = re.compile(
    r"(?:\d+!)?(?P<release>\d+(?:\.\d+)*)(?:(?P<pre>a|b|rc)(?P<pre_number>\d+))?(?:\.post(?P<post>\d+))?(?:\.dev(?P<dev>\d+))?(?:\+(?P<local>[a-z0-9.]+))?"
)


def semantic_version(version: str) -> str | None:
    """A version in PEP 440's normal form (gradfix's: ``0.2.0.dev0``) as SemVer, which SARIF's
    ``semanticVersion`` must be: three release numbers, its pre-release and development parts as
    pre-release identifiers (``0.2.0-dev.0``), its post-release and local parts as build metadata
    (no epoch); None for another form."""
    match = _PEP_440.fullmatch(version)
    if match is None:
        return None
    major, minor, patch = [*map(int, match["release"].split(".")), 0, 0][:3]
    pre = [match["pre"], str(int(match["pre_number"]))] if match["pre"] else []
    pre += ["dev", str(int(match["dev"]))] if match["dev"] is not None else []
    build = ["post", str(int(match["post"]))] if match["post"] is not None else []
    build += match["local"].split(".") if match["local"] else []
    return f"{major}.{minor}.{patch}" + ("-" + ".".join(pre) if pre else "") + ("+" + ".".join(build) if build else "")


def _sarif_rule(rule: type[Rule]) -> dict:
    fix = rule.FIX.value if rule.FIX is not None else "none"
    text = plain_documentation(rule)
    example = f"Before:\n\n{rule.EXAMPLE_BEFORE}\nAfter:\n\n{rule.EXAMPLE_AFTER}"
    markdown_example = f"Before:\n\n```python\n{rule.EXAMPLE_BEFORE}```\n\nAfter:\n\n```python\n{rule.EXAMPLE_AFTER}```\n"
    link = rules_page_link(rule.CODE)
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.SUMMARY},
        "fullDescription": {"text": text},
        "help": {"text": f"{text}\n\n{example}", "markdown": f"{rule.documentation()}\n\n{markdown_example}"},
        **({"helpUri": link} if link else {}),
        "defaultConfiguration": {"level": "error"},
        "properties": {"fix": fix, "keeps-gradients": rule.KEEPS_GRADIENTS, "tags": ["pytorch", "autograd", "correctness"]},
    }


def _sarif_result(finding: Finding, rule_index: int, notebook: Notebook | None) -> dict:
    """A finding as a result; a notebook's places are the lines of its file that hold them (its
    cells' lines are named in the message)."""
    place = "" if finding.cell is None else f"cell {finding.cell}, line {finding.line}: "
    line, end_line = (_file_line(notebook, finding.cell, number) if number else None for number in (finding.line, finding.end_line))
    # (in a notebook, a column of the cell's line is none of its file's)
    columns = (finding.column, finding.end_column or None) if finding.cell is None else (None, None)
    location = _location(finding.path, line, *columns, end_line)
    cells = finding.related_cells or (finding.cell,) * len(finding.related_lines)
    related = [_location(finding.path, _file_line(notebook, cell, line)) for cell, line in zip(cells, finding.related_lines)]
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": "note" if finding.hint else "error",  # (a hint rests on a guess)
        "message": {"text": place + finding.message},
        "locations": [location],
        "properties": {"fix": finding.fix.value if finding.fix is not None else "none"},
    }
    if related:
        result["relatedLocations"] = [{"id": number, **other} for number, other in enumerate(related)]
    return result


def _location(path: str, line: int | None, column: int | None = None, end_column: int | None = None, end_line: int | None = None) -> dict:
    """A place in a file: its region from ``line`` (and ``column``) to ``end_line`` (and
    ``end_column``, the column after it), where they are known."""
    physical: dict = {"artifactLocation": _artifact(path)}
    if line is not None:
        bounds = {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}
        physical["region"] = {key: value for key, value in bounds.items() if value is not None}
    return {"physicalLocation": physical}


def _artifact(path: str) -> dict:
    relative = repository_path(path)
    if os.path.isabs(relative):
        return {"uri": Path(relative).as_uri()}
    return {"uri": relative, "uriBaseId": SOURCE_ROOT}


def rule_rewrites(report: FileReport, kinds: frozenset[FixKind] = frozenset(FixKind)) -> dict[str, FileReport]:
    """For each rule with a fix of ``kinds`` on offer in this file, its rewrite of the file on its
    own (``check`` fixes a file rule by rule; a rule's findings in one file share its rewrite).
    A notebook's rewrite changes only the text of the cells it fixes in its JSON."""
    if report.original is None:
        return {}
    from gradfix.codemods.check import check_source  # (LibCST: only where a finding has a fix)

    rewrites = {}
    for code in dict.fromkeys(f.code for f in report.findings if f.fix in kinds):
        offered = {f.fix for f in report.findings if f.code == code}
        mode = FixMode.UNSAFE if FixKind.UNSAFE in offered else FixMode.SAFE
        rewrite = check_source(report.original, [rule_by_code(code)], mode, report.path)
        if rewrite.changed:
            rewrites[code] = rewrite
    return rewrites


def _sarif_fix(path: str, code: str, rewrite: FileReport) -> dict:
    rule = rule_by_code(code)
    unsafe = any(f.fix is FixKind.UNSAFE for f in rewrite.fixed)
    kind = "unsafe: it changes what the program computes" if unsafe else "safe"
    replacements = text_replacements(source_text(rewrite.original)[0], source_text(rewrite.rewritten)[0])
    return {
        "description": {"text": f"{code} {rule.NAME}: gradfix's {kind} fix of this rule's findings in the file"},
        "artifactChanges": [{"artifactLocation": _artifact(path), "replacements": replacements}],
    }


def text_replacements(before: str, after: str) -> list[dict]:
    """Replacements that turn ``before`` into ``after``, line by line, as SARIF regions of
    ``before`` counted in characters (the order SARIF applies them in does not matter: each
    region is of the original text)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    replacements = []
    for tag, old_start, old_end, new_start, new_end in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        replacements.append(
            {
                "deletedRegion": {"charOffset": offsets[old_start], "charLength": offsets[old_end] - offsets[old_start]},
                "insertedContent": {"text": "".join(new[new_start:new_end])},
            }
        )
    return replacements


def sarif_text(reports: Sequence[FileReport], errors: Sequence[PathError] = ()) -> str:
    return json.dumps(sarif_log(reports, errors), indent=2) + "\n"


# Suppression comments: check --add-noqa -----------------------------------------------------------
def noqa_added(report: FileReport) -> tuple[bytes | None, int, list[tuple[int, str]]]:
    """``check --add-noqa`` on a script: its file with a ``# noqa: CODE`` on each line where a
    finding shown by default is (not a hint), the codes put first in the ``# noqa:`` list the
    line has, and every other byte kept. A line where a comment would change the code (one
    that ends inside a string, or goes on after a backslash) is left as it is, and so is one
    whose comment the new codes would not silence. The new bytes (None when nothing changes),
    how many lines got codes, and each line left with why."""
    # The reader of the comments a check uses, and its pattern of a noqa comment (LibCST: a file
    # with findings was parsed already).
    from gradfix.codemods.check import _NOQA, Suppressions

    text, encoding = source_text(report.original or b"")
    codes_at: dict[int, list[str]] = {}
    for finding in report.findings:
        if not finding.hint and finding.code not in codes_at.setdefault(finding.line, []):
            codes_at[finding.line].append(finding.code)
    try:
        comments, open_ends = _comment_places(text)
    except (tokenize.TokenError, SyntaxError):
        return None, 0, [(line, "this Python cannot read its tokens") for line in codes_at]
    lines = io.StringIO(text).readlines()  # lines as the tokenizer, and so ``Suppressions``, counts them
    skipped = [(line, f"{open_ends[line]}: a comment there would change the code") for line in codes_at if line in open_ends]
    edited = {
        line: _with_noqa(lines[line - 1], _NOQA.search(lines[line - 1], comments[line]) if line in comments else None, codes)
        for line, codes in codes_at.items()
        if line not in open_ends
    }
    silenced = Suppressions("".join(edited.get(number, line) for number, line in enumerate(lines, 1)))
    for line in list(edited):
        if not all(silenced.silences(Finding(code, line, 0, "")) for code in codes_at[line]):
            skipped.append((line, "its comment's `# noqa` cannot take the codes"))
            del edited[line]
    rewritten = "".join(edited.get(number, line) for number, line in enumerate(lines, 1)).encode(encoding)
    return (rewritten if edited else None), len(edited), sorted(skipped)


def _with_noqa(line: str, directive: re.Match[str] | None, codes: list[str]) -> str:
    """``line`` with ``codes`` first in the list of ``directive``, its comment's first ``# noqa``
    (the one ``Suppressions`` reads), or with a ``# noqa: CODES`` of its own at its end."""
    listed = ", ".join(codes)
    if directive is not None and directive["listed"]:
        start = directive.start("codes") + len(directive["codes"]) - len(directive["codes"].lstrip())
        return line[:start] + f"{listed}, " + line[start:]
    body = line.rstrip("\r\n")
    return f"{body}  # noqa: {listed}" + line[len(body) :]


_STRING_STARTS = {getattr(tokenize, name) for name in ("FSTRING_START", "TSTRING_START") if hasattr(tokenize, name)}  # Python 3.12, 3.14
_STRING_ENDS = {getattr(tokenize, name) for name in ("FSTRING_END", "TSTRING_END") if hasattr(tokenize, name)}


def _comment_places(text: str) -> tuple[dict[int, int], dict[int, str]]:
    """Where each line's comment starts, and the lines at whose end a comment would change the
    code, with why: the line ends inside a string (a comment would be part of it), or a
    backslash carries it on to the next (a comment after it is a syntax error)."""
    comments: dict[int, int] = {}
    open_ends: dict[int, str] = {}
    opened: list[int] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
        elif token.type in _STRING_STARTS:
            opened.append(token.start[0])
        elif token.type == tokenize.STRING or token.type in _STRING_ENDS:
            first = opened.pop() if token.type in _STRING_ENDS else token.start[0]
            open_ends.update(dict.fromkeys(range(first, token.end[0]), "ends inside a string"))
    for number, line in enumerate(io.StringIO(text).readlines(), 1):
        if number not in open_ends and number not in comments and line.rstrip("\r\n").endswith("\\"):
            open_ends[number] = "goes on after a backslash"
    return comments, open_ends
