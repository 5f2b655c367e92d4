"""Reports of unchanged files, kept from one run to the next (as ruff keeps ``.ruff_cache``).

An entry is one file's ``FileReport``, the summaries a module of the project exports to the files
that import it (``project``: they depend on its bytes alone), or the project modules a run's files
import (``ImportsFound``, under the run's files: it names all it read, and is taken only where all
of it reads the same again). A report is stored under a key made of everything it depends on:
the file's path and bytes (their ``bytes_digest``, computed once a run), gradfix's version and a digest of its own code (so that neither a new
release nor an edit of a development install serves an old result), the Python and the LibCST
that read the file (a file 3.11 cannot compile may be one 3.13 compiles), the selected rules, the
fix mode, and the summaries of the project modules' functions the report was computed with (a
file that calls into a sibling is checked again when the sibling's summaries change).

The folder lives in the checked tree by default, and the tree is not trusted: a pull request can
commit a ``.gradfix_cache`` of its own, a CI cache can be restored from anywhere, and another user
may write a shared folder. An entry's report says which file ``fix`` writes and what, so entries
are only ever served to the user that wrote them, on the machine that wrote them, for the file
they were written for. Under a secret of this user on this machine, kept outside any tree
(``machine_secret``), an entry's name is an HMAC of its key, and its bytes begin with an HMAC of
that name and of its body: an entry nobody here wrote has a name no lookup computes, and an entry
edited, or copied over another one, fails its MAC. A report is served only for the path and the
bytes it was made of (``Key``: it is kept only under the key of those bytes, which its entry does
not copy), so nothing downstream writes a path that an entry names. Entries
are JSON checked field by field against their type when read (``typed_json``), never pickles:
a foreign, partial or malformed entry is a miss. The folder is not followed through symbolic
links (it, its entries folder and its ``.gitignore`` must be real folders and files), so a
committed link cannot send writes elsewhere; a folder or secret of another user, or one that
other users may write, is not used at all.

Entries are written to a temporary file and renamed into place, so two runs sharing the folder see
either a whole entry or none.

A run over many files (``INDEXED_FILES`` or more: a tree, not the few files pre-commit names) keeps
one more entry, its index (``for_run``): every entry it read or kept, each under its name, in one
entry named by an HMAC of the run's files and of the rules and fix mode of each, and authenticated
as any entry is. The next run over the
same files reads that one entry instead of opening thousands (a warm run of a large tree spent a
sixth of its time opening and authenticating them), and takes from it only an entry of the very
name it computes, as it would take the entry's own file: what a report depends on is in its name,
not in the index. An entry the index lacks (a file changed, a module edited) is read from its own
file, and the index is kept again only when the entries read or kept differ from those it holds.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import os
import platform
import stat
import sys
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache
import importlib.util
import json
from pathlib import Path
from typing import Sequence

from gradfix import __version__

from . import typed_json
from .summaries import Exports, ImportsFound, ProjectSummaries, bytes_digest
from .report import FileReport, FixMode
from .registry import rule_codes
from .rule import Rule

DEFAULT_FOLDER = ".gradfix_cache"
SECRET_BYTES = 32
MAC_BYTES = hashlib.sha256().digest_size  # at the head of an entry, before its body
NAME_BYTES = 2 * hashlib.sha256().digest_size  # an entry's name: an HMAC-SHA256 in hex
LENGTH_BYTES = 8  # in an index, between an entry's name and its body: the body's length
INDEXED_FILES = 20  # a run over this many files or more keeps an index of its entries
FOLDER_MODE = 0o755  # no other user may write it, whatever the umask
_CODE_ROOT = Path(__file__).resolve().parent


class NoSecret(Exception):
    """Why this user has no secret the cache may use: none can be kept, or the one kept is another
    user's or other users may read or write it."""


@dataclass(frozen=True)
class Key:
    """The entry of one file's report: its name, and the file it must answer for (the path asked
    for and the bytes read from it)."""

    name: str
    path: str
    data: bytes


@dataclass
class _Index:
    """The index of a run's entries (``ReportCache.for_run``): the entries it held when the run
    began, and those the run has read or kept since, by name."""

    name: str
    held: dict[str, bytes]
    used: dict[str, bytes]


class ReportCache:
    """``secret``: the key of this user's entries (``machine_secret()`` by default); without one
    (none can be kept, or the one kept is not to be trusted) nothing is read or kept."""

    def __init__(self, folder: str | Path, version: str = __version__, secret: bytes | None = None) -> None:
        self.folder = Path(folder)
        self._entries = self.folder / _code_digest(version, _python_and_libcst())
        self._secret, self._without_secret = secret, ""
        self._index: _Index | None = None
        if secret is None:
            try:
                self._secret = machine_secret()
            except NoSecret as why:
                self._without_secret = str(why)

    def key(
        self,
        path: str | Path,
        data: bytes,
        rules: Sequence[type[Rule]],
        mode: FixMode,
        project: ProjectSummaries | None,
        digest: str | None = None,
    ) -> Key:
        """The key of the report of ``path`` holding ``data``; ``digest``: ``bytes_digest(data)``
        where the run has it already (``ProjectModules.digest``), so each file is hashed once."""
        parts = (*_selection(rules, mode), repr(sorted(project.items()) if project else []).encode())
        contents = (digest or bytes_digest(data)).encode()
        return self._key((os.fsencode(str(path)), *parts, contents), str(path), data)

    def load(self, key: Key) -> FileReport | None:
        """The report kept under ``key``, if this user's gradfix wrote it there, for that file and
        those bytes; anything else is a miss, replaced by the next store."""
        body = self._entry(key)
        if body is None:
            return None
        report = _report_without_findings(body, key.path)
        if report is None:
            try:
                report = typed_json.loads(body, FileReport)
            except typed_json.UnexpectedData:  # of another shape
                return None
            if not _answers(report, key):
                return None
        report.original = key.data  # (the entry's name is made of these bytes)
        return report

    def store(self, key: Key, report: FileReport) -> None:
        """Keep ``report`` if it is of the file and bytes of ``key``; a folder that cannot be
        written only costs the next run its speed. The entry holds no copy of the bytes, which the
        key is made of: a tree's entries were as large as its files, and reading them back was
        most of a warm run."""
        if report.original == key.data:
            self._keep(key, typed_json.dumps(replace(report, original=None), FileReport))

    def load_exports(self, module: bytes) -> Exports | None:
        """The summaries kept for a project module of these bytes (``project.ModuleSummaries``),
        which depend on nothing else."""
        body = self._entry(self._exports_key(module))
        try:
            return typed_json.loads(body, Exports) if body is not None else None
        except typed_json.UnexpectedData:
            return None

    def store_exports(self, module: bytes, exports: Exports) -> None:
        self._keep(self._exports_key(module), typed_json.dumps(exports, Exports))

    def load_imports(self, files: Sequence[str]) -> ImportsFound | None:
        """What a run over these ``files`` (absolute paths) found they import, and what finding it
        read (``project.ProjectModules.recall`` reads it all again before it takes any of it)."""
        body = self._entry(self._imports_key(files))
        try:
            return typed_json.loads(body, ImportsFound) if body is not None else None
        except typed_json.UnexpectedData:
            return None

    def store_imports(self, files: Sequence[str], found: ImportsFound) -> None:
        self._keep(self._imports_key(files), typed_json.dumps(found, ImportsFound))

    def for_run(self, files: Sequence[str], checks: Sequence[tuple[Sequence[type[Rule]], FixMode]]) -> ReportCache:
        """This cache as a run over ``files`` (absolute paths), each checked by the rules and in the
        fix mode ``checks`` gives it (in the same order), reads and keeps it: with an index of its
        entries (read here) when they are many, else itself. ``keep_index`` ends the run. The
        index is named by the rules and modes too: a run of others over the same files reads
        other entries, and runs alternated wrote one index over in turn, each then reading every
        entry from its own file."""
        if len(files) < INDEXED_FILES or not self._secret:
            return self
        run = copy.copy(self)
        selections = [part for rules, mode in checks for part in _selection(rules, mode)]
        name = self._files_key(b"run index", files, selections).name
        run._index = _Index(name, _index_entries(self._authenticated(name) or b""), {})
        return run

    def holds_nothing(self) -> bool:
        """Whether this run's index holds no entry: a cold run, whose every file is checked (a run
        too small for an index may still find entries of its own)."""
        return self._index is not None and not self._index.held

    def keep_index(self) -> None:
        """Keep the index of the entries this run read or kept, unless it holds them already."""
        if self._index is not None and self._index.used != self._index.held:
            entries = self._index.used.items()
            self._write(self._index.name, b"".join(name.encode() + len(body).to_bytes(LENGTH_BYTES, "little") + body for name, body in entries))

    def _imports_key(self, files: Sequence[str]) -> Key:
        return self._files_key(b"project imports", files)

    def _files_key(self, kind: bytes, files: Sequence[str], more: Sequence[bytes] = ()) -> Key:
        return self._key((kind, *map(os.fsencode, files), *more), "", b"")

    def _exports_key(self, module: bytes) -> Key:
        return self._key((b"module summaries", module), "", module)

    def _key(self, parts: Sequence[bytes], path: str, data: bytes) -> Key:
        message = b"".join(len(part).to_bytes(8, "little") + part for part in parts)  # one call: hmac's updates cost more than the parts
        return Key(hmac.digest(self._secret or b"", message, "sha256").hex(), path, data)

    def _entry(self, key: Key) -> bytes | None:
        """The body kept under ``key`` if this user's gradfix wrote it there (in the run's index,
        else in its own file); None for a missing, partial, edited or foreign entry."""
        body = self._index.held.get(key.name) if self._index is not None else None
        if body is None:
            body = self._authenticated(key.name)
        if body is not None and self._index is not None:
            self._index.used[key.name] = body
        return body

    def _authenticated(self, name: str) -> bytes | None:
        """The body of the entry file ``name`` if this user's gradfix wrote it there."""
        if not self._secret:
            return None
        try:
            if _untrusted(self.folder) or _untrusted(self._entries):
                return None
            entry = (self._entries / name).read_bytes()
        except OSError:
            return None
        body = entry[MAC_BYTES:]
        return body if hmac.compare_digest(entry[:MAC_BYTES], self._mac(name, body)) else None  # else edited, or kept under another key

    def _keep(self, key: Key, body: bytes) -> None:
        if self._index is not None:
            self._index.used[key.name] = body
        self._write(key.name, body)

    def _write(self, name: str, body: bytes) -> None:
        if not self._secret:
            return
        try:
            if self._refusal():
                return
            descriptor, temporary = tempfile.mkstemp(dir=self._entries, prefix=f".{name}.")
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(self._mac(name, body) + body)
                os.replace(temporary, self._entries / name)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass

    def unusable(self) -> str:
        """Why no entry can be kept (made here if need be), or "" when entries can be."""
        if not self._secret:
            return self._without_secret or "no secret for its entries"
        try:
            refusal = self._refusal()
        except OSError as error:
            return f"cannot be made: {error.strerror or error}"
        return refusal or ("" if os.access(self._entries, os.W_OK) else "cannot be written")

    def _mac(self, name: str, body: bytes) -> bytes:
        return hmac.digest(self._secret or b"", name.encode() + body, "sha256")

    def _refusal(self) -> str:
        """Why the entries folder cannot hold entries (made here if need be), or "" when it can."""
        made = False
        for folder in (self.folder, self._entries):
            if not os.path.isdir(folder):  # (a file there: "File exists")
                folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
                made = True
            if refusal := _untrusted(folder):
                return refusal
        if made:  # Like .ruff_cache: git ignores the folder without an entry in the project's .gitignore.
            with contextlib.suppress(FileExistsError):
                descriptor = os.open(self.folder / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(descriptor, "w") as handle:
                    handle.write("*\n")
        return ""


def machine_secret() -> bytes:
    """A random key of this user on this machine, made on first use in the user's cache folder
    (``$XDG_CACHE_HOME/gradfix``, else ``~/.cache/gradfix``), which no checked tree holds.
    ``NoSecret`` when that folder cannot be written, or when the key kept there is another
    user's or other users may read or write it (whoever knows it can write entries this user
    trusts)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(home, "gradfix", "cache-secret")
    try:
        with open(path, "rb") as handle:
            kept = os.fstat(handle.fileno())  # of the file read, wherever a link sends it
            if kept.st_uid != os.geteuid():
                raise NoSecret(f"its secret {path} belongs to another user")
            if kept.st_mode & 0o077:
                raise NoSecret(f"its secret {path} can be read or written by other users (chmod 600 it)")
            secret = handle.read()
    except FileNotFoundError:
        secret = b""
    except OSError as error:
        raise NoSecret(f"its secret {path} cannot be read: {error.strerror or error}") from None
    if len(secret) == SECRET_BYTES:
        return secret
    import secrets  # (the first run alone makes one)

    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".cache-secret.")  # readable by this user only
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secret)
        # Two first runs at once each keep their own for this run; the entries of the one that
        # loses are never read again, which costs only their time.
        os.replace(temporary, path)
    except OSError as error:
        raise NoSecret(f"no secret for its entries can be kept in {path.parent}: {error.strerror or error}") from None
    return secret


def _untrusted(folder: Path) -> str:
    """Why ``folder`` may not hold entries (``OSError`` if it is missing), or "" when it is a real
    folder of this user that no other user may write."""
    status = os.lstat(folder)
    if not stat.S_ISDIR(status.st_mode):
        return f"{folder} is not a real folder (a link or a file)"
    if status.st_uid != os.geteuid():
        return f"{folder} belongs to another user"
    if status.st_mode & 0o022:
        return f"{folder} can be written by other users (chmod go-w it)"
    return ""


def _index_entries(index: bytes) -> dict[str, bytes]:
    """The entries an index holds, by name (``keep_index`` wrote each as its name, its body's
    length and its body); none where it is not of that form."""
    entries: dict[str, bytes] = {}
    position = 0
    while position < len(index):
        start = position + NAME_BYTES + LENGTH_BYTES
        end = start + int.from_bytes(index[start - LENGTH_BYTES : start], "little")
        if end > len(index):
            return {}
        entries[index[position : position + NAME_BYTES].decode("latin-1")] = index[start:end]
        position = end
    return entries


def _selection(rules: Sequence[type[Rule]], mode: FixMode) -> tuple[bytes, bytes]:
    """The parts of a key that name the rules and the fix mode a file is checked by."""
    return ",".join(rule_codes(rules)).encode(), mode.value.encode()


def _answers(report: FileReport, key: Key) -> bool:
    """Whether ``report``, as ``store`` keeps it, is of the file ``key`` asks for: its path (and its
    findings')."""
    findings = (*report.findings, *report.fixed)
    return report.path == key.path and report.original is None and all(f.path == key.path for f in findings)


def _report_without_findings(body: bytes, path: str) -> FileReport | None:
    """The report ``body`` holds where it is that of ``path`` with nothing found, fixed or said (most
    of a tree's: a warm run decoded 2,000 of them field by field to print none), told by its
    bytes: an entry of exactly the bytes ``store`` keeps for that report is that report."""
    name = json.dumps(path).encode()  # (as typed_json writes a string)
    for prefiltered in (False, True):
        head, tail = _report_around_its_path(prefiltered)
        if body == head + name + tail:
            return FileReport(path, prefiltered=prefiltered)
    return None


@lru_cache(maxsize=None)
def _report_around_its_path(prefiltered: bool) -> tuple[bytes, bytes]:
    """The entry ``store`` keeps for a report with nothing in it (``prefiltered`` or not), before
    and after its path."""
    mark = "-"  # (written nowhere else in it: it names fields alone)
    head, _, tail = typed_json.dumps(FileReport(mark, prefiltered=prefiltered), FileReport).partition(json.dumps(mark).encode())
    return head, tail


def _python_and_libcst() -> str:
    """The Python (implementation and version) that compiles a checked file and the LibCST that
    parses it: where it is installed and when (installing another version writes its files anew).
    This layer never imports LibCST, nor reads its version from its metadata: importing
    ``importlib.metadata`` would cost a check answered from the cache a tenth of its start-up."""
    spec = importlib.util.find_spec("libcst")
    origin = spec.origin if spec is not None and spec.origin is not None else ""
    installed = os.stat(origin) if origin else None
    libcst = f"{origin} {installed.st_mtime_ns} {installed.st_size}" if installed else "none"
    return f"{sys.implementation.name} {platform.python_version()} libcst {libcst}"


@lru_cache(maxsize=None)
def _code_digest(version: str, python_and_libcst: str) -> str:
    """gradfix's version, the bytes of its analysis and rules, and what reads the checked files
    (by BLAKE2b, as a checked file's bytes: every run hashes the 1 MB of gradfix's code, which
    was half of what a one-file check does after its imports, and SHA-256 takes twice as long)."""
    digest = hashlib.blake2b(f"{version}\n{python_and_libcst}".encode(), digest_size=16)
    for source in sorted(_CODE_ROOT.rglob("*.py")):
        digest.update(os.fsencode(source.relative_to(_CODE_ROOT)))
        digest.update(source.read_bytes())
    return digest.hexdigest()
