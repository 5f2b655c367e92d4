"""One file's check: parse it once, analyse it once, run every selected rule, and apply the fixes
the mode allows (re-parsed, repeated until nothing more applies). The library API for one file;
``engine`` runs it over many.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import keyword
import re
import sys
import tokenize
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

import libcst as cst
from libcst import CSTNode

from .analysis import FileAnalysis, ProjectSummaries
from .edits import apply_fixes, compatible
from .engine import FileReport, FixMode, SourceError, decoded, prefiltered_report, skips_parse
from .finding import Finding
from .notebook import Notebook, NotebookError, is_notebook
from .registry import RULE_MODULES
from .rule import Rule, Violation, without_repeats
from .skeleton import Skeleton, build_skeleton

MAX_FIX_ROUNDS = 5
# LibCST's native parser recurses on the C stack at each level of the tree it builds: some
# thousands of levels (a sum of 12,000 terms, a long `a and b and …` or `elif` chain) overflow
# it, which kills the process (SIGSEGV), and its parse takes seconds long before that. Python's
# own analysis of such a tree would give up anyway (its recursion limit is 1,000 frames).
NESTING_LIMIT = 1000
# `# noqa` (every rule) or `# noqa: GF001, duplicate_backward` anywhere in a comment; a whole file's
# `# gradfix: noqa` (or `# gradfix: noqa: GF001`) as a comment on a line of its own, as ruff's.
_NOQA = re.compile(r"#\s*noqa\b(?P<listed>\s*:(?P<codes>.*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(r"#\s*gradfix\s*:\s*noqa\b(?P<listed>\s*:(?P<codes>.*))?", re.IGNORECASE)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def check_file(
    path: str | Path, rules: Sequence[type[Rule]], mode: FixMode = FixMode.NONE, project: ProjectSummaries | None = None
) -> FileReport:
    report = FileReport(str(path))
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        report.errors.append(f"{path}: cannot read: {error.strerror or error}")
        return report
    return check_source(data, rules, mode, str(path), project)


def parse_source(data: bytes, path: str) -> cst.Module:
    """Parse a file's bytes, or raise ``SourceError`` saying why it cannot be."""
    text, _ = decoded(data, path)
    _refuse_deep_nesting(text, path)
    return _parsed(data, path)


def _parsed(data: bytes, path: str) -> cst.Module:
    """Parse bytes known to be text and not nested too deep, or raise ``SourceError`` saying why
    they cannot be."""
    try:
        return parse_trusted(data)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"{path}:{_syntax_error(data, error)}") from None
    except (RecursionError, MemoryError) as error:
        raise SourceError(f"{path}: cannot parse: {type(error).__name__}") from None


def parse_trusted(data: bytes) -> cst.Module:
    """``cst.parse_module``, without LibCST checking each node the parser builds. Every node's
    constructor validates its fields (whitespace by regular expression, names, parentheses), which
    the parser's own output always passes; that is 12–15% of a parse. (LibCST says as much beside
    ``CSTNode.__post_init__``.) The nodes of gradfix's edits are built outside this call, and are
    validated as usual."""
    validating = CSTNode.__dict__.get("__post_init__")
    if validating is None:  # a LibCST that validates elsewhere: parse as it does
        return cst.parse_module(data)
    CSTNode.__post_init__ = _trusted  # type: ignore[method-assign]
    try:
        return cst.parse_module(data)
    finally:
        CSTNode.__post_init__ = validating  # type: ignore[method-assign]


def _trusted(node: CSTNode) -> None:
    """A node's constructor hook that accepts the node as the parser built it."""


def check_source(
    data: bytes,
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    path: str = "<string>",
    project: ProjectSummaries | None = None,
) -> FileReport:
    """Findings (and, by ``mode``, fixes) for one file's bytes; ``project`` holds the summaries of
    the other checked files' functions, for calls of them."""
    skipped = prefiltered_report(data, path, project)
    if skipped is not None:
        return skipped
    with _cycle_collection_deferred():
        if is_notebook(path):
            return _check_notebook(data, rules, mode, path, project)
        return _check_python(data, rules, mode, path, project)


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


def _check_python(
    data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None
) -> FileReport:
    report = FileReport(path, original=data)
    try:
        text, encoding = decoded(data, path)
        skeleton = build_skeleton(text, encoding)
        if skeleton is None:
            _refuse_deep_nesting(text, path)
        elif _skeleton_finds_nothing(report, skeleton, data, rules, project):
            return report
        module = _parsed(data, path)
    except SourceError as error:
        report.errors.append(str(error))
        return report

    try:
        _fix_until_stable(report, module, rules, mode, path, project, skeleton and skeleton.python_tree)
    except (RecursionError, MemoryError) as error:
        report.errors.append(f"{path}: too deeply nested to analyse ({type(error).__name__})")
    except Exception as error:  # a bug in gradfix must not stop the other files
        report.internal_errors.append(f"{path}: internal error: {type(error).__name__}: {error}; the file was left as it was")
        report.findings, report.fixed, report.rewritten = [], [], None
    return report


def _skeleton_finds_nothing(
    report: FileReport, skeleton: Skeleton, data: bytes, rules: Sequence[type[Rule]], project: ProjectSummaries | None
) -> bool:
    """Whether the rules find nothing in the file's skeleton (``skeleton``), which is what they
    would find in LibCST's tree of it; the report then takes the file's exports. Anything else (a
    finding, an error of the analysis) is for the full check.
    The first finding settles it, before any ``# noqa`` is read: a skeleton's lines are not the
    file's, so only the full check can tell which comment silences which finding.
    The skeleton's tree is LibCST's, and the analysis walks it by recursion: a tree too deep for
    that raises ``SourceError`` before LibCST's parse, which would recurse as deep on the C stack
    (a tree the analysis walked is not deeper than Python's recursion limit)."""
    try:
        analysis = FileAnalysis(skeleton.module, project, data, skeleton.python_tree)
        if any(True for rule in rules for _ in rule(analysis).violations()):
            return False
        report.exports, report.imports = analysis.exports(), analysis.imports()
    except RecursionError as error:
        raise SourceError(f"{report.path}: too deeply nested to analyse ({type(error).__name__})") from None
    except Exception:  # the full check meets the same error in the analysis, and reports it
        return False
    return True


def _refuse_deep_nesting(text: str, path: str) -> None:
    """Raise ``SourceError`` for code that may nest deeper than ``NESTING_LIMIT``."""
    line = _line_nested_deeper_than(text, NESTING_LIMIT)
    if line is not None:
        raise SourceError(f"{path}:{line}: too deeply nested to parse (more than {NESTING_LIMIT} levels)")


def _line_nested_deeper_than(text: str, limit: int) -> int | None:
    """The first line of the first statement whose depth in LibCST's tree of ``text`` may exceed
    ``limit``, or None. Counted as at least that depth: in a statement, each operator, keyword,
    string and bracket may add a level to the element (of those commas separate) it is in; each
    block adds a few, and so does each ``elif`` of a chain, nested in the one before. The count
    stops at a token Python's tokenizer rejects (syntax newer than this Python that LibCST reads,
    such as an f-string in the quotes of the f-string it is in, is not counted past it)."""
    blocks, statement_line, elifs = 0, 0, {}  # elifs: the length of the chain at each column
    brackets = [_Element()]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    try:
        for kind, string, start, _, _ in tokens:
            if kind == tokenize.NAME:
                if not statement_line:
                    statement_line, column = start
                    elifs = {c: n for c, n in elifs.items() if c < column or c == column and string in ("elif", "else")}
                    if string == "elif":
                        elifs[column] = elifs.get(column, 0) + 1
                elif string in _KEYWORDS:
                    brackets[-1].levels += 1
            elif kind == tokenize.OP or kind == tokenize.STRING:
                statement_line = statement_line or start[0]
                if string in "([{":
                    brackets[-1].levels += 1
                    brackets.append(_Element())
                elif string in ")]}" and len(brackets) > 1:
                    inner = _closed(brackets[-1:])
                    brackets.pop()
                    brackets[-1].inner = max(brackets[-1].inner, inner)
                elif string == ",":
                    brackets[-1].end()
                elif string == ";":
                    if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
                        return statement_line
                    brackets = [_Element()]
                else:
                    brackets[-1].levels += 1
            elif kind == tokenize.NEWLINE or kind == tokenize.ENDMARKER:
                if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
                    return statement_line
                brackets, statement_line = [_Element()], 0
            elif kind == tokenize.INDENT:
                blocks += 1
            elif kind == tokenize.DEDENT:
                blocks -= 1
    except (tokenize.TokenError, SyntaxError):
        if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
            return statement_line or 1
    return None


_KEYWORDS = frozenset(keyword.kwlist)


class _Element:
    """The levels counted so far in one element of an open bracket (or of a statement)."""

    def __init__(self) -> None:
        self.levels = 0  # tokens of the element itself
        self.inner = 0  # the deepest bracket it holds
        self.deepest = 0  # the deepest element before it in the same bracket

    def end(self) -> None:
        self.deepest = max(self.deepest, self.levels + self.inner)
        self.levels = self.inner = 0


def _closed(brackets: list[_Element]) -> int:
    """The depth of the outermost of ``brackets``, closing every one still open."""
    inner = 0
    for element in reversed(brackets):
        element.inner = max(element.inner, inner)
        element.end()
        inner = element.deepest
    return inner


def _check_notebook(
    data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None
) -> FileReport:
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
    report.exports, report.imports = checked.exports, checked.imports
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
    """``path:line: why`` of the cells' source as ``path:cell N:line: why``."""
    prefix = notebook.path + ":"
    line, _, why = error.removeprefix(prefix).partition(":")
    if not error.startswith(prefix) or not line.isdigit():
        return error
    place = notebook.locate(int(line))
    return f"{prefix}cell {place.cell}:{place.line}:{why}"


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
    analysis = FileAnalysis(module, project, data, python_tree)
    report.exports, report.imports = analysis.exports(), analysis.imports()
    violations = find_violations(analysis, rules)
    if violations and (error := _compile_error(analysis, path)):
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
            if error := _compile_error(rewritten, path):
                raise error
        except (cst.ParserSyntaxError, SyntaxError, ValueError) as error:
            report.internal_errors.append(
                f"{path}: internal error: a fix produced code that does not parse ({error}); the file was left as it was"
            )
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
        report.rewritten = data


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
    return rewritten.rstrip(b"\r") + original[len(original.rstrip(b"\r")):]


def _compile_error(analysis: FileAnalysis, path: str) -> SyntaxError | None:
    """Why Python would not compile the analysed module (its syntax tree, which placing findings
    parsed already), or None."""
    try:
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            compile(analysis.python_tree, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        return error
    return None


def _syntax_error(data: bytes, error: cst.ParserSyntaxError) -> str:
    """``line: cannot parse: why``; Python's own parser words it best and places it exactly."""
    try:
        ast.parse(data)
    except SyntaxError as python_error:
        return f"{python_error.lineno}: cannot parse: {python_error.msg}"
    return f"{error.raw_line}: cannot parse: {error.message}"


def find_violations(analysis: FileAnalysis, rules: Sequence[type[Rule]]) -> list[Violation]:
    """What ``rules`` find in an analysed module, less what ``# noqa`` comments silence."""
    found = without_repeats([violation for rule in rules for violation in rule(analysis).violations()])
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
