"""Files in, findings and rewritten sources out. The library API behind the CLI; it never prints.

Data flows one way: paths → files → one parse per file → one analysis → every selected rule →
violations → fixes applied (re-parsed, repeated until nothing more applies) → a ``FileReport``.
``checker`` checks one file; this module finds the files, answers unchanged ones from the cache and
checks the others on several processes. Writing files is left to the caller, through
``write_atomically``. Nothing here loads LibCST or the analysis: a run answered by the cache never
pays for them.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import errno
import io
import os
import re
import signal
import stat
import subprocess
import symtable
import tempfile
import tokenize
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from .source import may_backward, may_call
from .analysis.project import ExportedSummary, ProjectSummaries, importable_names, project_summaries, written_names
from .config import Config
from .finding import Finding, FixKind
from .notebook import Notebook, NotebookError, file_lines, is_notebook

if TYPE_CHECKING:
    from .cache import ReportCache
    from .rule import Rule

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
    prefiltered: bool = False  # never parsed: its text could not backward (``may_backward``)

    @property
    def changed(self) -> bool:
        return self.rewritten is not None


# files -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PathError:
    """A path that cannot be checked; ``message`` reads ``path: why``, or ``path:line: why``
    (``path:cell N:line: why`` in a notebook) where a place in the file is known."""

    path: str
    message: str

    def __str__(self) -> str:
        return self.message

    @property
    def place(self) -> tuple[int | None, int | None]:
        """The cell and the line the message names (None where it names none)."""
        match = _PLACE.match(self.message, len(self.path)) if self.message.startswith(self.path) else None
        if match is None:
            return None, None
        return (int(match["cell"]) if match["cell"] else None), int(match["line"])


_PLACE = re.compile(r":(?:cell (?P<cell>\d+):)?(?P<line>\d+):")


@dataclass
class FileSet:
    files: list[Path]
    errors: list[PathError]
    notices: list[str] = field(default_factory=list)  # worth saying, not errors (a folder with nothing to check)


def collect_files(
    paths: Sequence[str | Path],
    excluded: Callable[[Path], bool] = Config().excludes,
    excluded_named: Callable[[Path], bool] | None = None,
) -> FileSet:
    """The Python files under ``paths``, each once. Folders are walked, skipping what ``excluded``
    says (virtualenvs, build output and VCS folders by default), other virtualenvs and what git
    ignores; a file or folder named explicitly is always taken, unless ``excluded_named`` says
    it is excluded (``--force-exclude``: pre-commit names every file)."""
    files: list[Path] = []
    errors: list[PathError] = []
    notices: list[str] = []
    for raw in paths:
        path = Path(raw)
        if excluded_named is not None and excluded_named(path):
            continue
        problem = unreadable_kind(path)
        if path.is_dir():
            walked = []
            for found in _walk(path, errors, excluded):
                kind = unreadable_kind(found)
                if not kind:
                    walked.append(found)
                elif kind != "not a regular file":  # a FIFO or device found by a walk is skipped
                    errors.append(PathError(str(found), f"{found}: {kind}"))
            ignored = _git_ignored(path, walked)
            kept = [f for f in walked if f not in ignored]
            if not kept:
                notices.append(f"{path}: no Python file or notebook to check")
            files += kept
        elif problem:
            errors.append(PathError(str(path), f"{path}: {problem}"))
        else:
            files.append(path)
    return FileSet(_one_name_each(files), errors, notices)


def _one_name_each(files: list[Path]) -> list[Path]:
    """``files`` with one name for each file: a symlink or a hard link to a file listed, or the
    same path twice, would be checked twice, and the second fix would find the file changed by
    the first. A name that is not a symlink is preferred, in the place of the first name."""
    kept: list[Path] = []
    place: dict[tuple[int, int], int] = {}
    for path in files:
        try:
            status = os.stat(path)
        except OSError:  # checking it says why it cannot be read
            kept.append(path)
            continue
        identity = (status.st_dev, status.st_ino)
        if identity not in place:
            place[identity] = len(kept)
            kept.append(path)
        elif os.path.islink(kept[place[identity]]) and not os.path.islink(path):
            kept[place[identity]] = path
    return kept


def unreadable_kind(path: Path) -> str:
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


def _walk(root: Path, errors: list[PathError], excluded: Callable[[Path], bool]) -> Iterator[Path]:
    """The Python files and notebooks under ``root`` that are not excluded; a folder that cannot
    be read is an error."""

    def unreadable(error: OSError) -> None:
        errors.append(PathError(str(error.filename), f"{error.filename}: cannot read: {error.strerror or error}"))

    for directory, subdirectories, filenames in os.walk(root, onerror=unreadable):
        subdirectories[:] = sorted(
            d
            for d in subdirectories
            if not excluded(Path(directory, d)) and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        for filename in sorted(filenames):
            if (filename.endswith(".py") or is_notebook(filename)) and not excluded(Path(directory, filename)):
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
    is written through (its target is replaced); owner, group, mode and extended attributes are
    kept where the process may (setuid and setgid only with the owner and group they had). A
    file with several hard links is updated in place, so that every name sees the fix, with
    signals held off until it is whole. With ``expected``, raise ``FileChanged`` instead of
    writing when the file no longer holds those bytes just before the replace."""
    target = Path(os.path.realpath(path))
    status = target.stat()
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".gradfix")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # chown clears setuid and setgid: the mode is set after it.
        with contextlib.suppress(PermissionError):
            os.chown(temporary, status.st_uid, status.st_gid)
        _copy_extended_attributes(target, temporary)
        os.chmod(temporary, _kept_mode(status, os.stat(temporary)))
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


def _kept_mode(original: os.stat_result, replacement: os.stat_result) -> int:
    """``original``'s permission bits, less setuid (setgid) where the replacement's owner (group)
    is not the original's: the fix must not hand a privilege to another user."""
    mode = stat.S_IMODE(original.st_mode)
    if replacement.st_uid != original.st_uid:
        mode &= ~stat.S_ISUID
    if replacement.st_gid != original.st_gid:
        mode &= ~stat.S_ISGID
    return mode


def _copy_extended_attributes(source: Path, destination: str) -> None:
    """Give ``destination`` the extended attributes of ``source`` (ACLs, SELinux labels, user
    attributes) that the filesystem keeps and the process may set."""
    if not hasattr(os, "listxattr"):  # not Linux
        return
    try:
        names = os.listxattr(source)
    except OSError:  # a filesystem without them
        return
    for name in names:
        with contextlib.suppress(OSError):  # e.g. trusted.* without CAP_SYS_ADMIN
            os.setxattr(destination, name, os.getxattr(source, name))


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


class SourceError(ValueError):
    """A file that cannot be checked: binary, undecodable or unparsable. The message names it."""


def decoded(data: bytes, path: str) -> tuple[str, str]:
    """The text of a file's bytes and the encoding they declare; ``SourceError`` for bytes that are
    not text in that encoding."""
    if b"\0" in data:
        raise SourceError(f"{path}: binary file (contains NUL bytes), skipped")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        raise SourceError(f"{path}: cannot decode: {error}") from None


def prefiltered_report(data: bytes, path: str, project: ProjectSummaries | None = None) -> FileReport | None:
    """The report of a file that LibCST need not parse: its code cannot backward a graph
    (``may_backward``, calling none of ``project``'s functions) and Python parses it; nothing
    found, or why it cannot be read (not text, not a notebook). None for a file that must be
    parsed."""
    if may_backward(data, written_names(project)):
        return None
    report = FileReport(path, original=data, prefiltered=True)
    try:
        skipped = _notebook_skips_parse(Notebook(data, path), project) if is_notebook(path) else _parses(decoded(data, path)[0])
    except (SourceError, NotebookError) as error:
        report.errors.append(str(error))
        return report
    return report if skipped else None


def _notebook_skips_parse(notebook: Notebook, project: ProjectSummaries | None) -> bool:
    # Its JSON may spell the cells' code with escapes: the cells are prefiltered too.
    return not notebook.is_python or skips_parse(notebook.source, project)


def skips_parse(code: bytes, project: ProjectSummaries | None = None) -> bool:
    """Whether Python code need not be parsed by LibCST: it cannot backward a graph, and Python
    parses it."""
    return not may_backward(code, written_names(project)) and _parses(code)


def _parses(code: str | bytes) -> bool:
    """Whether Python parses ``code`` (building its symbol table parses it, at about 15% less CPU
    than compiling it). Code it does not parse is parsed by LibCST, to say why (or to find
    syntax newer than this Python, which LibCST reads): a file that cannot be parsed never reads
    as clean."""
    try:
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            symtable.symtable(code.decode("utf-8") if isinstance(code, bytes) else code, "<prefiltered>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


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

    Every file is checked once; then the files that import a function (or a class, for its
    methods) of another checked file whose summary matters (it backwards an argument, or returns
    a tensor it backwarded) are checked again with those summaries, and so are the files the
    prefilter skipped that name one."""
    reports = _cached_map(files, rules, mode, jobs, None, cache)
    project = project_summaries((report.path, report.exports) for report in reports if report.exports)
    importable, helpers = importable_names(project), written_names(project)
    again = [
        i
        for i, report in enumerate(reports)
        if report.imports & importable or report.prefiltered and may_call(report.original, helpers)
    ]
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
    if not files:
        return []
    # LibCST and the analysis load here, in this process before it forks the workers, and only when
    # some file is not answered by the cache.
    from .checker import check_file

    jobs = jobs or os.cpu_count() or 1
    rules = tuple(rules)  # a selection's rules are imported here too, once, not by each worker
    if jobs == 1 or len(files) < 2 * jobs:
        return [check_file(path, rules, mode, project) for path in files]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
        # Small chunks: the files that must be parsed cluster (a folder of long training scripts),
        # and chunks of 32 files left one worker idle at the end (0.2 s of diffusers' cold check).
        chunk = max(1, min(4, len(files) // (jobs * 4)))
        try:
            return list(pool.map(_check_file_job, [(path, rules, mode, project) for path in files], chunksize=chunk))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _check_file_job(job: tuple[Path, Sequence[type[Rule]], FixMode, ProjectSummaries | None]) -> FileReport:
    from .checker import check_file  # loaded by the process that forked this one

    return check_file(*job)


def unified_diff(report: FileReport) -> str:
    """A ``git apply``-able diff of a report's rewrite."""
    name = _diff_name(report.path)
    if is_notebook(report.path):
        return Notebook(report.original or b"", report.path).cell_diffs(report.rewritten or b"", name)
    return text_diff(_decoded(report.original or b""), _decoded(report.rewritten or b""), name)


def text_diff(before: list[str], after: list[str], name: str, section: Callable[[int], str] = lambda line: "") -> str:
    """A unified diff of the lines of one file named ``name``; ``section(line)`` names the part
    of the file that a hunk's first changed line (of ``before``) is in, after its ``@@``."""
    # A name with a space ends with a tab, or `patch` reads only up to the space.
    end = "\t" if " " in name else ""
    lines = list(difflib.unified_diff(before, after, f"a/{name}{end}", f"b/{name}{end}"))
    for index, line in enumerate(lines):
        if line.startswith("@@"):
            where = section(_first_changed_line(lines, index))
            lines[index] = f"{line.rstrip()} {where}\n" if where else line
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _first_changed_line(lines: list[str], header: int) -> int:
    """The line of the old file where the hunk whose header is ``lines[header]`` first changes it."""
    line = int(lines[header].split()[1].lstrip("-").split(",")[0])
    for text in lines[header + 1 :]:
        if not text.startswith(" "):
            return max(line, 1)
        line += 1
    return max(line, 1)


def _diff_name(path: str) -> str:
    """The path as a diff names it: relative to the current folder, so that `git apply` and
    `patch -p1` take the diff from there; an absolute path elsewhere without its leading slash."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute.lstrip("/") if relative.startswith("..") else relative


def _decoded(data: bytes) -> list[str]:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return file_lines(data.decode(encoding))
