"""Files on disk: which ones a run checks (``collect_files``: folders walked, what git ignores left
out, no link out of the folder walked, each file once), how a fix is written (``write_atomically``:
never half a file, never over someone's edit; ``write_fix``: a fix of a checked tree, never over a
read-only file nor through a link out of the root it was found in; ``sweep_stale_temporaries``
removes what a killed write left) and shown (``unified_diff``)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from .config import Config, project_root
from .diffs import file_lines, text_diff
from .notebook import Notebook, is_notebook
from .report import FileReport
from .source import source_text


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
    excluded: Callable[[str], bool] = Config().excludes,
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
            walked: list[Path] = []
            links: set[Path] = set()
            for name, plain in _walk(str(path), errors, excluded):
                found = Path(name)
                kind = "" if plain else unreadable_kind(found)
                if not kind:
                    walked.append(found)
                    if not plain and os.path.islink(found):
                        links.add(found)
                elif kind == "no such file or directory" and os.path.islink(found):  # as ruff: a walk skips a dangling link, said
                    notices.append(f"{found}: a dangling symbolic link (to {os.readlink(found)}): skipped")
                elif kind != "not a regular file":  # a FIFO or device found by a walk is skipped
                    errors.append(PathError(str(found), f"{found}: {kind}"))
            ignored = _git_ignored(path, walked)
            kept = []
            for found in (f for f in walked if f not in ignored):
                # As black and ruff: a walk never follows a link out of the folder named, where a
                # fix would write into someone else's file. (The walk enters no linked folder, so
                # only a file that is itself a link can lead out.)
                if found in links and outside(found, path):
                    notices.append(f"{found}: a symbolic link out of {path} (to {os.path.realpath(found)}): skipped")
                else:
                    kept.append(found)
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


def outside(path: str | Path, root: str | Path) -> bool:
    """Whether ``path``, its links followed, is outside ``root`` (its links followed too)."""
    top = os.path.realpath(root)
    return os.path.commonpath([os.path.realpath(path), top]) != top


def write_root(path: str | Path, named: Sequence[str | Path]) -> Path:
    """The folder a fix of ``path``, found by ``collect_files(named)``, may write in: the folder
    named whose walk found it; for a file named itself, the work tree that holds the name (its own
    folder outside one). A link named on the command line is read wherever it points, as black
    and ruff read it, but a fix is not written through it out of the project."""
    given = Path(path)
    if given not in map(Path, named):
        for folder in map(Path, named):
            if folder in given.parents:
                return folder
    return project_root(given.parent)


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


def _walk(root: str, errors: list[PathError], excluded: Callable[[str], bool]) -> Iterator[tuple[str, bool]]:
    """The Python files and notebooks under ``root`` that are not excluded, in the order of a
    sorted ``os.walk`` (a folder's files, then each of its folders'), each with whether the walk
    knows it for a regular file that is no link; a folder that cannot be read is an error. Each
    folder is listed once and its names' kinds read from the listing (``os.scandir``), where
    ``os.walk`` asks again of every folder whether it is a link; paths are strings (a ``Path``
    for every name walked costs a warm run of a large tree more than the rest of the walk)."""
    try:
        with os.scandir(root) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        errors.append(PathError(str(error.filename), f"{error.filename}: cannot read: {error.strerror or error}"))
        return
    folders = []
    for entry in entries:
        path = os.path.join(root, entry.name)
        if _is_folder(entry):
            # A linked folder is never entered (as os.walk's); a virtualenv is told by its pyvenv.cfg.
            if not excluded(path) and not entry.is_symlink() and not os.path.exists(os.path.join(path, "pyvenv.cfg")):
                folders.append(path)
        elif (entry.name.endswith(".py") or is_notebook(entry.name)) and not excluded(path):
            yield path, entry.is_file(follow_symlinks=False)
    for folder in folders:
        yield from _walk(folder, errors, excluded)


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a folder, links followed (one whose kind cannot be read is not, as in
    ``os.walk``)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _git_ignored(root: Path, files: list[Path]) -> set[Path]:
    """The files under ``root`` that git ignores; none when ``root`` itself is ignored, because
    a folder named on the command line is checked whatever git says of it."""
    if not files:
        return set()
    import subprocess  # only a walk asks git: a check of the files named (pre-commit, an editor) does not pay for it

    # The paths as walked, not their targets: a link to outside the work tree would make git
    # refuse the whole list.
    absolute = [os.path.abspath(f) for f in [root, *files]]
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
            input=b"\0".join(map(os.fsencode, absolute)),
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if result.returncode not in (0, 1):  # 128: not a git work tree
        return set()
    ignored = {os.fsdecode(p) for p in result.stdout.split(b"\0") if p}
    if absolute[0] in ignored:
        return set()
    return {f for f, path in zip(files, absolute[1:]) if path in ignored}


class NotWritten(Exception):
    """A fix gradfix refuses to write; the message reads ``path: why; not written``."""


class FileChanged(NotWritten):
    """The file on disk is no longer what gradfix read: writing would lose someone's edit."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: changed since gradfix read it; not written")


class OutsideRoot(NotWritten):
    """The file is a link to a file outside the folder the fix may write in."""

    def __init__(self, path: str | Path, root: str | Path) -> None:
        super().__init__(f"{path}: a symbolic link out of {root} (to {os.path.realpath(path)}); not written")


class ReadOnly(NotWritten):
    """The file is read-only for this user: replacing it (which its folder's permissions allow)
    would rewrite a file the user may not write."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: read-only (no permission to write it); not written")


def write_fix(path: str | Path, data: bytes, expected: bytes, root: str | Path) -> None:
    """Write a fix of a file of a checked tree (``write_atomically``) as black and ruff write a
    file they format: not through a link out of ``root`` (``OutsideRoot``), and only where the
    user may write the file itself (``ReadOnly``; root may write any)."""
    if outside(path, root):
        raise OutsideRoot(path, root)
    if not os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        raise ReadOnly(path)
    write_atomically(path, data, expected)


# What write_atomically names its temporary file: ``.NAME.PID.RANDOM.gradfix``, beside the file
# it replaces; the pid of the process writing it tells whether a write is still under way.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[a-z0-9_]+\.gradfix")


def write_atomically(path: str | Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace ``path`` with ``data`` so that it is, at every moment, either old or new. A symlink
    is written through (its target is replaced); owner, group, mode and extended attributes are
    kept where the process may (setuid and setgid only with the owner and group they had). A
    file with several hard links is updated in place, so that every name sees the fix, with
    signals held off until it is whole. With ``expected``, raise ``FileChanged`` instead of
    writing when the file no longer holds those bytes just before the replace. No temporary file
    outlives an exception."""
    target = Path(os.path.realpath(path))
    status = target.stat()
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=".gradfix")
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
        # By its name, not by ``temporary``: an interruption inside mkstemp leaves a file the
        # code here was never told the name of.
        for name, pid, entry in _temporaries(target.parent):
            if (name, pid) == (target.name, os.getpid()):
                with contextlib.suppress(OSError):  # the error to raise is the one that stopped the write
                    os.unlink(entry)
        raise


def sweep_stale_temporaries(paths: Iterable[str | Path]) -> None:
    """Remove, in the folders that hold ``paths`` (not where a link among them points: that may
    be out of the tree), the temporary files of writes that were killed: regular files named as
    ``write_atomically`` names them whose writer is no running process."""
    for folder in {os.path.dirname(os.path.abspath(path)) for path in paths}:
        for _, pid, entry in _temporaries(Path(folder)):
            if not _running(pid):
                with contextlib.suppress(FileNotFoundError):  # another run swept it first
                    os.unlink(entry)


def _temporaries(folder: Path) -> Iterator[tuple[str, int, Path]]:
    """The name of the file each temporary of ``write_atomically`` in ``folder`` stands for, the
    pid of its writer and its path: regular files only, never a link."""
    try:
        entries = list(os.scandir(folder))
    except OSError:  # a folder that cannot be read holds nothing to sweep
        return
    for entry in entries:
        named = _TEMPORARY.fullmatch(entry.name)
        if named and entry.is_file(follow_symlinks=False):
            yield named["name"], int(named["pid"]), Path(entry.path)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs here, another user's too (signal 0 only asks); a pid no
    process can have is taken as running, so that nothing is removed on its account."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass
    return True


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


def unified_diff(report: FileReport) -> str:
    """A ``git apply``-able diff of a report's rewrite."""
    name = _diff_name(report.path)
    if is_notebook(report.path):
        return Notebook(report.original or b"", report.path).cell_diffs(report.rewritten or b"", name)
    before, after = (file_lines(source_text(data)[0]) for data in (report.original or b"", report.rewritten or b""))
    return text_diff(before, after, name)


def path_lines(paths: Iterable[str]) -> str:
    """``paths`` one a line, unambiguous whatever their names: a path that holds a double quote,
    a backslash, a control character (a newline) or bytes that are not UTF-8 is written as git
    writes it (with ``core.quotePath`` off): in double quotes, those as C escapes."""
    return "\n".join(_quoted(path) for path in paths)


_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _quoted(path: str) -> str:
    escaped = "".join(_escaped(c) for c in path)
    return f'"{escaped}"' if escaped != path else path


def _escaped(character: str) -> str:
    """``character`` as git writes it in a quoted path: a C escape for a double quote, a
    backslash, a control character or a byte that is not UTF-8 (``os.fsdecode`` keeps one as a
    lone surrogate); itself otherwise."""
    code = ord(character)
    if character in _C_ESCAPES:
        return _C_ESCAPES[character]
    if code < 0x20 or code == 0x7F:
        return f"\\{code:03o}"
    return f"\\{code - 0xDC00:03o}" if 0xDC80 <= code <= 0xDCFF else character


def _diff_name(path: str) -> str:
    """The path as a diff names it: relative to the current folder, so that `git apply` and
    `patch -p1` take the diff from there; an absolute path elsewhere without its leading slash."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute.lstrip("/") if relative.startswith("..") else relative
