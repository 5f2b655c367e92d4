"""One file's check: the skeleton gate (a file whose skeleton has no finding is done), then one
LibCST parse, one analysis, every selected rule, ``# noqa`` comments, and the fixes the mode allows
(re-parsed, repeated until nothing more applies). The library API for one file; ``run`` runs it over
many.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import re
import sys
import tokenize
from dataclasses import replace
from difflib import SequenceMatcher
from pathlib import Path
from typing import Iterator, Sequence

import libcst as cst

from .analysis import FileAnalysis
from .project import ModuleSummaries, ProjectModules
from .summaries import ExportedSummary, ProjectSummaries
from .edits import apply_fixes, compatible
from .notebook import Notebook, NotebookError, is_notebook
from .parse import compile_error, parse_decoded, parse_trusted, refuse_deep_nesting
from .registry import RULE_MODULES, all_rules
from .report import FileReport, Finding, FixMode, SourceError
from .rule import Rule, Violation, without_repeats
from .skeleton import Skeleton, build_skeleton
from .source import decoded, prefiltered_report, skips_parse


MAX_FIX_ROUNDS = 5


# `# noqa` (every rule) or `# noqa: GF001, duplicate_backward` anywhere in a comment; a whole file's
# `# gradfix: noqa` (or `# gradfix: noqa: GF001`) as a comment on a line of its own, as ruff's.
_NOQA = re.compile(r"#\s*noqa\b(?P<listed>\s*:(?P<codes>.*))?", re.IGNORECASE)


_FILE_NOQA = re.compile(r"#\s*gradfix\s*:\s*noqa\b(?P<listed>\s*:(?P<codes>.*))?", re.IGNORECASE)


_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def check_file(path: str | Path, rules: Sequence[type[Rule]], mode: FixMode = FixMode.NONE, project: ProjectSummaries | None = None) -> FileReport:
    report = FileReport(str(path))
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        report.errors.append(f"{path}: cannot read: {error.strerror or error}")
        return report
    return check_source(data, rules, mode, str(path), project)


def check_source(
    data: bytes,
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    path: str = "<string>",
    project: ProjectSummaries | None = None,
) -> FileReport:
    """Findings (and, by ``mode``, fixes) for one file's bytes; ``project`` holds the summaries of
    the functions of the project's modules the file imports, for calls of them: by default read
    from disk around ``path`` (``project.ProjectModules``), none for a name that is no place
    (``<string>``, ``-``)."""
    try:
        if project is None:
            project = ProjectModules(summaries=_MODULE_SUMMARIES).project_for(path, data) if _is_place(path) else {}
        skipped = prefiltered_report(data, path, project)
        if skipped is not None:
            return skipped
        with _cycle_collection_deferred():
            if is_notebook(path):
                return _check_notebook(data, rules, mode, path, project)
            return _check_python(data, rules, mode, path, project)
    except Exception as error:  # a bug in gradfix must not stop the other files
        return FileReport(path, original=data, internal_errors=[_internal_error(path, error)])


def _is_place(path: str) -> bool:
    return path != "-" and not path.startswith("<")


def module_exports(data: bytes) -> dict[str, ExportedSummary]:
    """What a module of the project exports to the files that import it: the summaries of its
    functions, from its bytes alone (analysed with no project of its own). A module gradfix cannot
    read or analyse exports nothing: calls of it stay calls of code gradfix did not read."""
    try:
        text, encoding = decoded(data, "<module>")
        with _cycle_collection_deferred():
            skeleton = build_skeleton(text, encoding)
            if skeleton is None:
                refuse_deep_nesting(text, "<module>")
            module = skeleton.module if skeleton is not None else parse_decoded(data, "<module>")
            analysis = FileAnalysis(module, {}, data, skeleton and skeleton.python_tree)
            if skeleton is not None and _skeleton_analyses is not None:
                _skeleton_analyses[data] = (skeleton, analysis)
            return analysis.exports()
    except Exception:  # (what cannot be analysed is unread, which no finding and no fix rests on)
        return {}


# Summaries by the digest of a module's bytes: never stale, so kept for the life of the process.
_MODULE_SUMMARIES = ModuleSummaries(module_exports)


# While ``exports_and_report`` runs: the skeleton of each module ``module_exports`` analysed, and
# that analysis, by the module's bytes, for the check of the same bytes with no project to reuse.
_skeleton_analyses: dict[bytes, tuple[Skeleton, FileAnalysis]] | None = None


def exports_and_report(data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str) -> tuple[dict[str, ExportedSummary], FileReport]:
    """``module_exports(data)``, and the report of ``check_source`` of the file at ``path`` holding
    ``data`` with no project of its own, from one analysis of its skeleton: a run checks most of
    the modules it reads the exports of, and most import no summary (analysing them twice was a
    fifth of a cold check of Lightning)."""
    global _skeleton_analyses
    _skeleton_analyses = {}
    try:
        with _cycle_collection_deferred():  # (the analysis lives from one to the other)
            return module_exports(data), check_source(data, rules, mode, path, {})
    finally:
        _skeleton_analyses = None


def _internal_error(path: str, error: Exception) -> str:
    return f"{path}: internal error: {type(error).__name__}: {error}; the file was left as it was"


@contextlib.contextmanager
def _cycle_collection_deferred() -> Iterator[None]:
    """A syntax tree and its analysis are hundreds of thousands of objects, freed by reference
    counting when the file is done (nothing of gradfix's makes a cycle). At Python's default
    thresholds the cycle collector scans each young tree many times over (a collection every 700
    allocations), and walks all of it again at every full collection, more often the longer the
    file: young objects are collected every 100,000 allocations, and full collections wait until
    the file is done."""
    saved = gc.get_threshold()
    gc.set_threshold(100_000, saved[1], _FULL_COLLECTIONS_DEFERRED)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


_FULL_COLLECTIONS_DEFERRED = 10**9  # collections of the middle generation before a full one


def _check_python(data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None) -> FileReport:
    report = FileReport(path, original=data)
    try:
        text, encoding = decoded(data, path)
        kept = _skeleton_analyses.pop(data, None) if _skeleton_analyses and not project else None
        skeleton, analysis = kept if kept is not None else (build_skeleton(text, encoding), None)
        if skeleton is None:
            refuse_deep_nesting(text, path)
        elif _skeleton_finds_nothing(report, skeleton, data, rules, project, analysis):
            return report
        module = parse_decoded(data, path)
    except SourceError as error:
        report.errors.append(str(error))
        return report

    try:
        _fix_until_stable(report, module, rules, mode, path, project, skeleton and skeleton.python_tree)
    except (RecursionError, MemoryError) as error:
        report.errors.append(f"{path}: too deeply nested to analyse ({type(error).__name__})")
    except Exception as error:  # a bug in gradfix must not stop the other files
        report.internal_errors.append(_internal_error(path, error))
        report.findings, report.fixed, report.rewritten = [], [], None
    return report


def _skeleton_finds_nothing(
    report: FileReport,
    skeleton: Skeleton,
    data: bytes,
    rules: Sequence[type[Rule]],
    project: ProjectSummaries | None,
    analysis: FileAnalysis | None = None,
) -> bool:
    """Whether the rules find nothing in the file's skeleton (``skeleton``), which is what they
    would find in LibCST's tree of it. Anything else (a finding, an error of the analysis) is for
    the full check.
    The first finding settles it, before any ``# noqa`` is read: a skeleton's lines are not the
    file's, so only the full check can tell which comment silences which finding.
    The skeleton's tree is LibCST's, and the analysis walks it by recursion: a tree too deep for
    that raises ``SourceError`` before LibCST's parse, which would recurse as deep on the C stack
    (a tree the analysis walked is not deeper than Python's recursion limit). ``analysis``: the
    skeleton's, where it was made already."""
    try:
        analysis = analysis or FileAnalysis(skeleton.module, project, data, skeleton.python_tree)
        if any(True for rule in rules for _ in rule(analysis).violations()):
            return False
    except RecursionError as error:
        raise SourceError(f"{report.path}: too deeply nested to analyse ({type(error).__name__})") from None
    except Exception:  # the full check meets the same error in the analysis, and reports it
        return False
    return True


def _check_notebook(data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None) -> FileReport:
    """A notebook is checked as the Python source of its code cells; findings are placed by cell
    and a rewrite goes back into the cells it changed."""
    report = FileReport(path, original=data)
    try:
        notebook = Notebook(data, path)
    except NotebookError as error:
        report.errors.append(str(error))
        return report
    if not notebook.is_python:
        return report
    # The JSON may mention a backward only in outputs or markdown: the cells' code is prefiltered too.
    if skips_parse(notebook.source, project):
        checked = FileReport(path, original=notebook.source, prefiltered=True)
    else:
        checked = _check_python(notebook.source, rules, mode, path, project)
    report.prefiltered = checked.prefiltered
    report.errors = [_error_in_cells(notebook, error) for error in checked.errors]
    report.internal_errors = checked.internal_errors
    report.findings = [_in_cells(notebook, finding) for finding in checked.findings]
    report.fixed = [_in_cells(notebook, finding) for finding in checked.fixed]
    if checked.rewritten is not None:
        try:
            report.rewritten = notebook.with_source(checked.rewritten)
        except NotebookError as error:
            report.errors.append(str(error))
            report.findings, report.fixed = report.findings + report.fixed, []
    return report


def _error_in_cells(notebook: Notebook, error: str) -> str:
    """``path:line: why`` of the cells' source as ``path:cell N:line: why`` (and the lines ``why``
    names, as the notebook shows them)."""
    prefix = notebook.path + ":"
    line, _, why = error.removeprefix(prefix).partition(":")
    if not error.startswith(prefix) or not line.isdigit():
        return error
    place = notebook.locate(int(line))
    return f"{prefix}cell {place.cell}:{place.line}:{notebook.describe(why)}"


def _in_cells(notebook: Notebook, finding: Finding) -> Finding:
    place, end = notebook.locate(finding.line), notebook.locate(finding.end_line)
    related = [notebook.locate(line) for line in finding.related_lines]
    end_line = end.line if end.cell == place.cell else place.line
    return replace(
        finding,
        cell=place.cell,
        line=place.line,
        end_line=end_line,
        message=notebook.describe(finding.message),
        related_lines=tuple(r.line for r in related),
        related_cells=tuple(r.cell for r in related),
    )


def _fix_until_stable(
    report: FileReport,
    module: cst.Module,
    rules: Sequence[type[Rule]],
    mode: FixMode,
    path: str,
    project: ProjectSummaries | None,
    python_tree: ast.Module | None = None,
) -> None:
    """Apply compatible fixes, re-parse and re-analyse, until no applicable fix is left.
    ``python_tree``: Python's own tree of the file, where it was parsed already."""
    data = report.original
    parsed = module
    analysis = FileAnalysis(module, project, data, python_tree)
    violations = found_first = find_violations(analysis, rules)
    if violations and (error := compile_error(analysis, path)):
        # LibCST parses more than this Python compiles (3.12 syntax, `continue` outside a loop):
        # such a file is not gradfix's to judge, and any rewrite of it would look like gradfix's fault.
        report.errors.append(f"{path}:{error.lineno}: does not compile on Python {sys.version_info.major}.{sys.version_info.minor}: {error.msg}")
        return
    stubborn: set[tuple[str, str, str]] = set()  # findings whose fix left them where they were
    for _ in range(MAX_FIX_ROUNDS):
        applicable = [v for v in violations if mode.allows(v.finding.fix) and _identity(v.finding, data) not in stubborn]
        if not applicable:
            break
        chosen = compatible(v.fix for v in applicable)
        try:
            rewritten_bytes = apply_fixes(module, chosen).bytes
            rewritten = FileAnalysis(parse_trusted(rewritten_bytes), project, rewritten_bytes)
            if error := compile_error(rewritten, path):
                raise error
        except (cst.ParserSyntaxError, SyntaxError, ValueError) as error:
            report.internal_errors.append(f"{path}: internal error: a fix produced code that does not parse ({error}); the file was left as it was")
            break
        applied = [v.finding for v in applicable if v.fix in chosen]
        found_again = find_violations(rewritten, rules)
        # A fix that does not fix (its finding comes back at the same code) is refused, as a
        # wrong one is: this round is undone and the finding stays, without that fix.
        kept = {_identity(f, data) for f in applied} & {_identity(v.finding, rewritten_bytes) for v in found_again}
        if kept:
            stubborn |= kept
            continue
        report.fixed += applied
        module, data = rewritten.module, rewritten_bytes
        violations = found_again
    report.findings = [replace(v.finding, path=path) for v in violations]
    report.fixed = [replace(f, path=path) for f in report.fixed]
    data = _final_line_endings_kept(report.original, data)
    if report.fixed and data != report.original:
        kept = _untouched_lines_kept(report.original, _final_line_endings_kept(report.original, parsed.bytes), data)
        if kept is None:
            report.internal_errors.append(
                f"{path}: internal error: LibCST does not give back the file's own text next to what the fixes change; the file was left as it was"
            )
            report.findings, report.fixed = [replace(v.finding, path=path) for v in found_first], []
        else:
            report.rewritten = kept


def _identity(finding: Finding, data: bytes) -> tuple[str, str, str]:
    """A finding as it stays across a rewrite that moves lines: its rule, its message with line
    numbers left out, and the text of the line it is on."""
    lines = data.splitlines()
    text = lines[finding.line - 1].strip().decode("utf-8", "replace") if 0 < finding.line <= len(lines) else ""
    return finding.code, re.sub(r"\d+", "#", finding.message), text


def _final_line_endings_kept(original: bytes, rewritten: bytes) -> bytes:
    """``rewritten`` ending as ``original`` does. LibCST's code of a module drops the last
    character of a file that ends with a carriage return alone (``b"x = 1\\r"`` comes back as
    ``b"x = 1"``), at each parse."""
    if not original.endswith(b"\r"):
        return rewritten
    return rewritten.rstrip(b"\r") + original[len(original.rstrip(b"\r")) :]


def _untouched_lines_kept(original: bytes, parsed: bytes, rewritten: bytes) -> bytes | None:
    """``rewritten`` with each line the fixes left alone as ``original`` has it. The fixes rewrite
    LibCST's tree of the file, whose code is not always the file's bytes (a blank line before a
    last line of spaces is dropped): where ``parsed``, that code, differs from ``original``, what
    the fixes changed is carried over to the original lines, by a merge of the two sets of changes
    to ``parsed``; None where both change the same lines, or start at the same place (which of the
    two comes first is not known)."""
    if parsed == original:
        return rewritten
    base = parsed.splitlines(keepends=True)
    lost = _changes(base, original.splitlines(keepends=True))
    fixed = _changes(base, rewritten.splitlines(keepends=True))
    if any(max(start, other) < min(end, other_end) or start == other for start, end, _ in lost for other, other_end, _ in fixed):
        return None
    merged: list[bytes] = []
    at = 0
    for start, end, lines in sorted([*lost, *fixed], key=lambda change: change[:2]):
        merged += [*base[at:start], *lines]
        at = end
    return b"".join([*merged, *base[at:]])


def _changes(base: list[bytes], changed: list[bytes]) -> list[tuple[int, int, list[bytes]]]:
    """What turns ``base`` into ``changed``: each range of lines of ``base`` replaced, with the lines that replace it."""
    matcher = SequenceMatcher(None, base, changed, autojunk=False)
    return [(i1, i2, changed[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def find_violations(analysis: FileAnalysis, rules: Sequence[type[Rule]]) -> list[Violation]:
    """What ``rules`` find in an analysed module, less what ``# noqa`` comments silence. A deferring
    rule's violation about backwards another rule names is dropped whether or not that rule is
    selected: one bug has one code, however the other is turned off (``--ignore``,
    ``per-file-ignores``, ``# noqa``)."""
    selected = {rule.CODE for rule in rules}
    running = [*rules, *(rule for rule in all_rules() if rule.CODE not in selected and not rule.DEFERS)] if any(r.DEFERS for r in rules) else rules
    found = [v for v in without_repeats([violation for rule in running for violation in rule(analysis).violations()]) if v.finding.code in selected]
    if found:
        silenced = Suppressions(analysis.source.decode(analysis.module.encoding))
        found = [v for v in found if not silenced.silences(v.finding)]
    return sorted(found, key=lambda v: (v.finding.line, v.finding.column, v.finding.code))


class Suppressions:
    """What the comments of a module's code silence: each line's ``# noqa`` and the file's
    ``# gradfix: noqa``. An empty set of codes silences every rule; a ``# noqa:`` whose list
    names no rule code or name (``# noqa: see #12``) silences nothing. Text that only looks like
    a comment, inside a string, is not one."""

    def __init__(self, code: str) -> None:
        self.lines: dict[int, frozenset[str]] = {}
        self.file: frozenset[str] | None = None
        for line, text, own_line in _comments(code):
            whole_file = _FILE_NOQA.match(text) if own_line else None
            if whole_file:
                codes = _listed_codes(whole_file)
                if codes is not None:
                    self.file = codes if self.file is None else _joined(self.file, codes)
                continue
            match = _NOQA.search(text)
            codes = _listed_codes(match) if match else None
            if codes is not None:
                self.lines[line] = codes

    def silences(self, finding: Finding) -> bool:
        return any(codes is not None and (not codes or finding.code in codes) for codes in (self.file, self.lines.get(finding.line)))


def _joined(first: frozenset[str], second: frozenset[str]) -> frozenset[str]:
    """The codes two comments silence; an empty set (every rule) wins."""
    return first | second if first and second else frozenset()


def _listed_codes(match: re.Match[str]) -> frozenset[str] | None:
    """The rule codes a ``noqa`` lists (empty: it lists none, so every rule), None when its list
    names none. The list ends at the first word that is neither a code nor a rule's name (the
    comment's own words)."""
    if not match.group("listed"):
        return frozenset()
    codes = set()
    for word in re.split(r"[\s,]+", match.group("codes").strip()):
        if _CODE.fullmatch(word):
            codes.add(word.upper())
        elif word.lower() in RULE_MODULES.values():
            codes.update(code for code, name in RULE_MODULES.items() if name == word.lower())
        else:
            break
    return frozenset(codes) or None


def _comments(code: str) -> Iterator[tuple[int, str, bool]]:
    """Each comment's line, text and whether it stands on a line of its own; code the tokenizer
    stops at (syntax newer than this Python) keeps the comments before it."""
    if "#" not in code:
        return
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string, not token.line[: token.start[1]].strip()
    except (tokenize.TokenError, SyntaxError):
        return
