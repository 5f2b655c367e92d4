"""Output for CI: GitHub workflow-command annotations, a Markdown step summary, step outputs, and
SARIF 2.1.0 for code scanning. Everything here turns reports into text; nothing analyses code."""

from __future__ import annotations

import difflib
import io
import json
import os
import secrets
import tokenize
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from gradfix import __version__
from gradfix.codemods.engine import FileReport, FixMode
from gradfix.codemods.notebook import is_notebook
from gradfix.codemods.registry import all_rules, rule_by_code
from gradfix.codemods.finding import Finding, FixKind
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


def annotation(finding: Finding) -> str:
    """``::error file=…,line=…,col=…,title=…::message``; GitHub places it on the line in the diff
    view. A notebook's line counts within its cell, so a notebook's annotation names the cell in
    its message and gets no line."""
    properties = {"file": finding.path}
    if finding.cell is None:
        properties |= {"line": str(finding.line), "col": str(finding.column)}
    properties["title"] = f"{finding.code} {rule_by_code(finding.code).NAME}"
    place = "" if finding.cell is None else f"cell {finding.cell}, line {finding.line}: "
    marker = f" [{finding.fix.value} fix]" if finding.fix is not None else ""
    joined = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::error {joined}::{escape_data(place + finding.message + marker)}"


def step_summary(reports: Sequence[FileReport]) -> str:
    """A Markdown table of every finding: GitHub shows only the first annotations of a step, the
    job's summary page shows them all."""
    findings = [f for r in reports for f in r.findings]
    if not findings:
        return f"### gradfix\n\nNo findings in {len(reports)} file(s).\n"
    files = sum(bool(r.findings) for r in reports)
    fixable = Counter(f.fix for f in findings)
    lines = [
        "### gradfix",
        "",
        f"{len(findings)} finding(s) in {files} file(s): {fixable[FixKind.SAFE]} with a safe fix (`gradfix fix`), "
        f"{fixable[FixKind.UNSAFE]} with an unsafe fix (`gradfix fix --unsafe-fixes`), {fixable[None]} to fix by hand.",
        "",
        "| location | rule | message | fix |",
        "|---|---|---|---|",
    ]
    for finding in findings:
        rule = rule_by_code(finding.code)
        fix = finding.fix.value if finding.fix is not None else "by hand"
        cells = (f"`{finding.location}`", f"{finding.code} {rule.NAME}", finding.message, fix)
        lines.append("| " + " | ".join(markdown_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_cell(text: str) -> str:
    """Text that stays inside one cell of a Markdown table."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def append_to_file_named_by(variable: str, text: str) -> bool:
    """Append ``text`` to the file that the environment variable names (the runner's step summary,
    its outputs); False when the variable is not set."""
    path = os.environ.get(variable)
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
    return True


def step_outputs(values: Mapping[str, str]) -> str:
    """Step outputs in the runner's multi-line form, each with a delimiter no value can contain."""
    blocks = []
    for name, value in values.items():
        delimiter = f"gradfix_{secrets.token_hex(16)}"
        blocks.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
    return "".join(blocks)


# SARIF -----------------------------------------------------------------------------------------
def sarif_log(reports: Sequence[FileReport], errors: Sequence[str] = ()) -> dict:
    """A SARIF 2.1.0 log of the findings, with every rule's documentation and, for each finding a
    fix is on offer for, that fix as text replacements in the file."""
    rules = all_rules()
    index = {rule.CODE: position for position, rule in enumerate(rules)}
    results = []
    for report in reports:
        fixes = _fixes_by_rule(report)
        for finding in report.findings:
            result = _sarif_result(finding, index[finding.code])
            if finding.code in fixes:
                result["fixes"] = [fixes[finding.code]]
            results.append(result)
    messages = [*errors, *(m for r in reports for m in [*r.errors, *r.internal_errors])]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": {"name": "gradfix", "version": __version__, "semanticVersion": __version__, "rules": [_sarif_rule(r) for r in rules]}},
                "columnKind": "unicodeCodePoints",
                "originalUriBaseIds": {SOURCE_ROOT: {"uri": Path.cwd().as_uri() + "/"}},
                "invocations": [
                    {
                        "executionSuccessful": not messages,
                        "toolExecutionNotifications": [{"level": "error", "message": {"text": m}} for m in messages],
                    }
                ],
                "results": results,
            }
        ],
    }


def _sarif_rule(rule: type[Rule]) -> dict:
    fix = rule.FIX.value if rule.FIX is not None else "none"
    example = f"Before:\n\n{rule.EXAMPLE_BEFORE}\nAfter:\n\n{rule.EXAMPLE_AFTER}"
    markdown_example = f"Before:\n\n```python\n{rule.EXAMPLE_BEFORE}```\n\nAfter:\n\n```python\n{rule.EXAMPLE_AFTER}```\n"
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.SUMMARY},
        "fullDescription": {"text": rule.documentation()},
        "help": {"text": f"{rule.documentation()}\n\n{example}", "markdown": f"{rule.documentation()}\n\n{markdown_example}"},
        "defaultConfiguration": {"level": "error"},
        "properties": {"fix": fix, "keeps-gradients": rule.KEEPS_GRADIENTS, "tags": ["pytorch", "autograd", "correctness"]},
    }


def _sarif_result(finding: Finding, rule_index: int) -> dict:
    place = "" if finding.cell is None else f"cell {finding.cell}, line {finding.line}: "
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": "error",
        "message": {"text": place + finding.message},
        "locations": [_location(finding.path, finding.cell, finding.line, finding.column)],
        "properties": {"fix": finding.fix.value if finding.fix is not None else "none"},
    }
    if finding.related_lines:
        result["relatedLocations"] = [
            {"id": number, **_location(finding.path, finding.cell, line)} for number, line in enumerate(finding.related_lines)
        ]
    return result


def _location(path: str, cell: int | None, line: int, column: int | None = None) -> dict:
    """A physical location; a notebook's lines count within a cell, not in the file, so a
    notebook's location is the file alone."""
    physical: dict = {"artifactLocation": _artifact(path)}
    if cell is None:
        physical["region"] = {"startLine": line} | ({"startColumn": column} if column is not None else {})
    return {"physicalLocation": physical}


def _artifact(path: str) -> dict:
    relative = os.path.relpath(os.path.abspath(path))
    if relative.startswith(".."):
        return {"uri": Path(path).resolve().as_uri()}
    return {"uri": Path(relative).as_posix(), "uriBaseId": SOURCE_ROOT}


def _fixes_by_rule(report: FileReport) -> dict[str, dict]:
    """For each rule with a fix on offer in this file, its rewrite of the file on its own (the
    engine fixes a file rule by rule; a rule's findings in one file share its rewrite). A
    notebook's fix rewrites cells inside its JSON, which is no text fix a reader can apply."""
    if report.original is None or is_notebook(report.path):
        return {}
    from gradfix.codemods import checker  # (LibCST: only where a finding has a fix)

    fixes = {}
    for code in dict.fromkeys(f.code for f in report.findings if f.fix is not None):
        kinds = {f.fix for f in report.findings if f.code == code}
        mode = FixMode.UNSAFE if FixKind.UNSAFE in kinds else FixMode.SAFE
        rewrite = checker.check_source(report.original, [rule_by_code(code)], mode, report.path)
        if rewrite.changed:
            fixes[code] = _sarif_fix(report.path, code, mode, report.original, rewrite.rewritten)
    return fixes


def _sarif_fix(path: str, code: str, mode: FixMode, before: bytes, after: bytes) -> dict:
    rule = rule_by_code(code)
    kind = "unsafe: it changes what the program computes" if mode is FixMode.UNSAFE else "safe"
    return {
        "description": {"text": f"{code} {rule.NAME}: gradfix's {kind} fix of this rule's findings in the file"},
        "artifactChanges": [{"artifactLocation": _artifact(path), "replacements": text_replacements(_text(before), _text(after))}],
    }


def _text(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


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


def sarif_text(reports: Sequence[FileReport], errors: Sequence[str] = ()) -> str:
    return json.dumps(sarif_log(reports, errors), indent=2) + "\n"
