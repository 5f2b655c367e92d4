"""Files in, findings and rewritten sources out. The library API behind the CLI; it never prints.

Data flows one way: paths → files → one parse per file → one analysis → every selected rule →
violations → fixes applied (re-parsed, repeated until nothing more applies) → a ``FileReport``.
Writing files is left to the caller, through ``write_atomically``.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import enum
import io
import errno
import os
import stat
import re
import signal
import subprocess
import sys
import tempfile
import tokenize
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import libcst as cst

from .analysis.backward_api import may_backward
from .analysis import ExportedSummary, FileAnalysis, ProjectSummaries, project_summaries
from .edits import apply_fixes, compatible
from .notebook import Notebook, NotebookError, is_notebook
from .rule import Finding, FixKind, Rule, Violation

if TYPE_CHECKING:
    from .cache import ReportCache

EXCLUDED_DIRECTORIES = {
    ".git", ".hg", ".svn", ".bzr", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".tox", ".nox", ".venv", "venv", ".eggs", "build", "dist", "node_modules", "site-packages",
    "__pypackages__", ".ipynb_checkpoints",
}
MAX_FIX_ROUNDS = 5
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


class FixMode(enum.Enum):
    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"

    def allows(self, kind: FixKind | None) -> bool:
        if kind is None or self is FixMode.NONE:
            return False
        return self is FixMode.UNSAFE or kind is FixKind.SAFE


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)  # what is left (after fixing, if fixing)
    fixed: list[Finding] = field(default_factory=list)
    original: bytes | None = None
    rewritten: bytes | None = None  # set only when fixes changed the file
    errors: list[str] = field(default_factory=list)  # bad input: the file could not be checked
    internal_errors: list[str] = field(default_factory=list)  # a fix gradfix made was wrong
    exports: dict[str, ExportedSummary] = field(default_factory=dict)  # summaries other files may import
    imports: set[str] = field(default_factory=set)  # dotted names the file imports

    @property
    def changed(self) -> bool:
        return self.rewritten is not None


# files -----------------------------------------------------------------------------------------
@dataclass
class FileSet:
    files: list[Path]
    errors: list[str]
    notices: list[str] = field(default_factory=list)  # worth saying, not errors (a folder with nothing to check)


def collect_files(paths: Sequence[str | Path]) -> FileSet:
    """The Python files under ``paths``. Folders are walked, skipping virtualenvs, build output,
    VCS folders and what git ignores; a file named explicitly is always taken."""
    files: list[Path] = []
    errors: list[str] = []
    notices: list[str] = []
    for raw in paths:
        path = Path(raw)
        problem = _unreadable_kind(path)
        if path.is_dir():
            walked = []
            for found in _walk(path, errors):
                kind = _unreadable_kind(found)
                if not kind:
                    walked.append(found)
                elif kind != "not a regular file":  # a FIFO or device found by a walk is skipped
                    errors.append(f"{found}: {kind}")
            ignored = _git_ignored(path, walked)
            kept = [f for f in walked if f not in ignored]
            if not kept:
                notices.append(f"{path}: no Python file or notebook to check")
            files += kept
        elif problem:
            errors.append(f"{path}: {problem}")
        else:
            files.append(path)
    unique = list(dict.fromkeys(files))
    return FileSet(unique, errors, notices)


def _unreadable_kind(path: Path) -> str:
    """Why ``path`` cannot be checked as a file ("" when it can): a FIFO or a device would block
    the read, a symlink loop or a dangling link has nothing to read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "symlink loop"
        return "no such file or directory" if error.errno == errno.ENOENT else f"cannot read: {error.strerror}"
    if stat.S_ISDIR(mode):
        return ""
    return "" if stat.S_ISREG(mode) else "not a regular file"


def _walk(root: Path, errors: list[str]) -> Iterator[Path]:
    """The Python files and notebooks under ``root``; a folder that cannot be read is an error."""

    def unreadable(error: OSError) -> None:
        errors.append(f"{error.filename}: cannot read: {error.strerror or error}")

    for directory, subdirectories, filenames in os.walk(root, onerror=unreadable):
        subdirectories[:] = sorted(
            d
            for d in subdirectories
            if d not in EXCLUDED_DIRECTORIES
            and not d.endswith(".egg-info")
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        for filename in sorted(filenames):
            if filename.endswith(".py") or is_notebook(filename):
                yield Path(directory, filename)


def _git_ignored(root: Path, files: list[Path]) -> set[Path]:
    """The files under ``root`` that git ignores; none when ``root`` itself is ignored, because
    a folder named on the command line is checked whatever git says of it."""
    if not files:
        return set()
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
            # The paths as walked, not their targets: a link to outside the work tree would make
            # git refuse the whole list.
            input=b"\0".join(os.fsencode(os.path.abspath(f)) for f in [root, *files]),
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if result.returncode not in (0, 1):  # 128: not a git work tree
        return set()
    ignored = {os.fsdecode(p) for p in result.stdout.split(b"\0") if p}
    if os.path.abspath(root) in ignored:
        return set()
    return {f for f in files if os.path.abspath(f) in ignored}


class FileChanged(Exception):
    """The file on disk is no longer what gradfix read: writing would lose someone's edit."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: changed since gradfix read it; not written")


def write_atomically(path: str | Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace ``path`` with ``data`` so that it is, at every moment, either old or new. A symlink
    is written through (its target is replaced); owner, group and mode are kept where the process
    may. A file with several hard links is updated in place, so that every name sees the fix,
    with signals held off until it is whole. With ``expected``, raise ``FileChanged`` instead of
    writing when the file no longer holds those bytes just before the replace."""
    target = Path(os.path.realpath(path))
    status = target.stat()
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".gradfix")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, status.st_mode & 0o7777)
        with contextlib.suppress(PermissionError):
            os.chown(temporary, status.st_uid, status.st_gid)
        if expected is not None and target.read_bytes() != expected:
            raise FileChanged(path)
        if status.st_nlink > 1:
            _overwrite_in_place(target, data)
            os.unlink(temporary)
        else:
            os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _overwrite_in_place(target: Path, data: bytes) -> None:
    """Write ``data`` over ``target``'s own inode (its other hard links see it); Ctrl-C and SIGTERM
    wait until the file is whole."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        with open(target, "r+b") as handle:
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


# one file --------------------------------------------------------------------------------------
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


class SourceError(ValueError):
    """A file that cannot be checked: binary, undecodable or unparsable. The message names it."""


def parse_source(data: bytes, path: str) -> cst.Module:
    """Parse a file's bytes, or raise ``SourceError`` saying why it cannot be."""
    _check_decodable(data, path)
    try:
        return cst.parse_module(data)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"{path}:{_syntax_error(data, error)}") from None
    except (RecursionError, MemoryError) as error:
        raise SourceError(f"{path}: cannot parse: {type(error).__name__}") from None


def check_source(
    data: bytes,
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    path: str = "<string>",
    project: ProjectSummaries | None = None,
) -> FileReport:
    """Findings (and, by ``mode``, fixes) for one file's bytes; ``project`` holds the summaries of
    the other checked files' functions, for calls of them."""
    if is_notebook(path):
        return _check_notebook(data, rules, mode, path, project)
    return _check_python(data, rules, mode, path, project)


def _check_python(
    data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None
) -> FileReport:
    report = FileReport(path, original=data)
    try:
        if not may_backward(data):
            _check_decodable(data, path)
            return report
        module = parse_source(data, path)
    except SourceError as error:
        report.errors.append(str(error))
        return report

    try:
        _fix_until_stable(report, module, rules, mode, path, project)
    except (RecursionError, MemoryError) as error:
        report.errors.append(f"{path}: too deeply nested to analyse ({type(error).__name__})")
    except Exception as error:  # a bug in gradfix must not stop the other files
        report.internal_errors.append(f"{path}: internal error: {type(error).__name__}: {error}; the file was left as it was")
        report.findings, report.fixed, report.rewritten = [], [], None
    return report


def _check_notebook(
    data: bytes, rules: Sequence[type[Rule]], mode: FixMode, path: str, project: ProjectSummaries | None
) -> FileReport:
    """A notebook is checked as the Python source of its code cells; findings are placed by cell
    and a rewrite goes back into the cells it changed."""
    report = FileReport(path, original=data)
    if not may_backward(data):
        return report
    try:
        notebook = Notebook(data, path)
    except NotebookError as error:
        report.errors.append(str(error))
        return report
    if not notebook.is_python:
        return report
    checked = _check_python(notebook.source, rules, mode, path, project)
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
    related = tuple(notebook.locate(line).line for line in finding.related_lines)
    end_line = end.line if end.cell == place.cell else place.line
    return replace(
        finding, cell=place.cell, line=place.line, end_line=end_line, message=notebook.describe(finding.message), related_lines=related
    )


def _fix_until_stable(
    report: FileReport,
    module: cst.Module,
    rules: Sequence[type[Rule]],
    mode: FixMode,
    path: str,
    project: ProjectSummaries | None,
) -> None:
    """Apply compatible fixes, re-parse and re-analyse, until no applicable fix is left."""
    data = report.original
    analysis = FileAnalysis.of_module(module, project)
    report.exports, report.imports = analysis.exports(), analysis.imports()
    violations = find_violations(analysis, rules)
    if violations and (error := _compile_error(data, path)):
        # LibCST parses more than this Python compiles (3.12 syntax, `continue` outside a loop):
        # such a file is not gradfix's to judge, and any rewrite of it would look like gradfix's fault.
        report.errors.append(f"{path}:{error.lineno}: does not compile on Python {sys.version_info.major}.{sys.version_info.minor}: {error.msg}")
        return
    for _ in range(MAX_FIX_ROUNDS):
        applicable = [v for v in violations if mode.allows(v.finding.fix)]
        if not applicable:
            break
        chosen = compatible(v.fix for v in applicable)
        try:
            rewritten = cst.parse_module(apply_fixes(module, chosen).bytes)
            if error := _compile_error(rewritten.bytes, path):
                raise error
        except (cst.ParserSyntaxError, SyntaxError, ValueError) as error:
            report.internal_errors.append(
                f"{path}: internal error: a fix produced code that does not parse ({error}); the file was left as it was"
            )
            break
        report.fixed += [v.finding for v in applicable if v.fix in chosen]
        module = rewritten
        violations = find_violations(FileAnalysis.of_module(module, project), rules)
    report.findings = [replace(v.finding, path=path) for v in violations]
    report.fixed = [replace(f, path=path) for f in report.fixed]
    if report.fixed and module.bytes != data:
        report.rewritten = module.bytes


def _compile_error(data: bytes, path: str) -> SyntaxError | None:
    try:
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            compile(data, path, "exec", dont_inherit=True)
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


def _check_decodable(data: bytes, path: str) -> None:
    if b"\0" in data:
        raise SourceError(f"{path}: binary file (contains NUL bytes), skipped")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        raise SourceError(f"{path}: cannot decode: {error}") from None


def find_violations(analysis: FileAnalysis, rules: Sequence[type[Rule]]) -> list[Violation]:
    """What ``rules`` find in an analysed module, less what ``# noqa`` comments silence."""
    found = [violation for rule in rules for violation in rule(analysis).violations()]
    if found:  # rendering the module to read its comments costs as much as parsing it
        suppressions = _suppressions(analysis.module.code)
        found = [v for v in found if not _suppressed(v.finding, suppressions.get(v.finding.line))]
    return sorted(found, key=lambda v: (v.finding.line, v.finding.column, v.finding.code))


def _suppressed(finding: Finding, codes: set[str] | None) -> bool:
    return codes is not None and (not codes or finding.code in codes)


def _suppressions(code: str) -> dict[int, set[str]]:
    """``# noqa`` (every code) or ``# noqa: GF001, GF002`` per line."""
    suppressions = {}
    for number, line in enumerate(code.splitlines(), start=1):
        if "noqa" not in line.lower():
            continue
        match = _NOQA.search(line)
        if match:
            codes = match.group("codes")
            suppressions[number] = set(re.split(r"[\s,]+", codes.upper())) if codes else set()
    return suppressions


# many files ------------------------------------------------------------------------------------
def check_files(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    jobs: int | None = None,
    cache: ReportCache | None = None,
) -> list[FileReport]:
    """Reports for ``files``, in order, computed on ``jobs`` processes (all cores by default);
    with ``cache``, reports of unchanged files are taken from it and new ones kept in it.

    Every file is checked once; then the files that import a function of another checked file
    whose summary matters (it backwards an argument, or returns a tensor it backwarded) are
    checked again with those summaries."""
    reports = _cached_map(files, rules, mode, jobs, None, cache)
    project = project_summaries((report.path, report.exports) for report in reports if report.exports)
    again = [i for i, report in enumerate(reports) if report.imports & project.keys()]
    for index, report in zip(again, _cached_map([files[i] for i in again], rules, mode, jobs, project, cache)):
        reports[index] = report
    return reports


def _cached_map(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode,
    jobs: int | None,
    project: ProjectSummaries | None,
    cache: ReportCache | None,
) -> list[FileReport]:
    if cache is None:
        return _map_files(files, rules, mode, jobs, project)
    reports: list[FileReport | None] = []
    for path in files:
        try:
            data = Path(path).read_bytes()
        except OSError:
            reports.append(None)  # checking it says why it cannot be read
            continue
        if not may_backward(data):  # never parsed: checking it costs less than reading an entry
            reports.append(check_source(data, rules, mode, str(path), project))
            continue
        reports.append(cache.load(cache.key(path, data, rules, mode, project)))
    missing = [i for i, report in enumerate(reports) if report is None]
    for index, report in zip(missing, _map_files([files[i] for i in missing], rules, mode, jobs, project)):
        reports[index] = report
        if report.original is not None:  # keyed by the bytes the check read, even if the file changed since
            cache.store(cache.key(files[index], report.original, rules, mode, project), report)
    return reports


def _map_files(
    files: Sequence[Path], rules: Sequence[type[Rule]], mode: FixMode, jobs: int | None, project: ProjectSummaries | None
) -> list[FileReport]:
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1 or len(files) < 2 * jobs:
        return [check_file(path, rules, mode, project) for path in files]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
        chunk = max(1, min(32, len(files) // (jobs * 4)))
        try:
            return list(pool.map(_check_file_job, [(path, rules, mode, project) for path in files], chunksize=chunk))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _check_file_job(job: tuple[Path, Sequence[type[Rule]], FixMode, ProjectSummaries | None]) -> FileReport:
    return check_file(*job)


def unified_diff(report: FileReport) -> str:
    """A ``git apply``-able diff of a report's rewrite."""
    name = _diff_name(report.path)
    if is_notebook(report.path):
        return Notebook(report.original or b"", report.path).cell_diffs(report.rewritten or b"", name)
    before = _decoded(report.original or b"")
    after = _decoded(report.rewritten or b"")
    # A name with a space ends with a tab, or `patch` reads only up to the space.
    end = "\t" if " " in name else ""
    lines = list(difflib.unified_diff(before, after, f"a/{name}{end}", f"b/{name}{end}"))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _diff_name(path: str) -> str:
    """The path as a diff names it: relative to the current folder, so that `git apply` and
    `patch -p1` take the diff from there; an absolute path elsewhere without its leading slash."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute.lstrip("/") if relative.startswith("..") else relative


def _decoded(data: bytes) -> list[str]:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding).splitlines(keepends=True)
