"""Reports of unchanged files, kept from one run to the next (as ruff keeps ``.ruff_cache``).

An entry is one file's ``FileReport``, stored under a key made of everything the report depends on:
the file's path and bytes, gradfix's version and a digest of its own code (so that neither a new
release nor an edit of a development install serves an old result), the selected rules, the fix
mode, and the summaries of other files' functions the report was computed with (a file that calls
into a sibling is checked again when the sibling's summaries change).

The folder lives in the checked tree by default, and the tree is not trusted: a pull request can
commit a ``.gradfix_cache`` of its own. An entry's report says which file to write and what
(``fix``, ``pr``), so entries are only ever served to the machine that wrote them: keys are HMACs
under a secret of this machine, kept outside any tree (``machine_secret``), so an entry nobody here
wrote has a name no lookup computes. Entries are JSON checked field by field against
``FileReport`` when read (``typed_json``), never pickles: a foreign, partial or malformed entry is a
miss. The folder is not followed through symbolic links (it, its entries folder and its
``.gitignore`` must be real folders and files), so a committed link cannot send writes elsewhere.

Entries are written to a temporary file and renamed into place, so two runs sharing the folder see
either a whole entry or none.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from gradfix import __version__

from . import typed_json
from .summaries import ProjectSummaries
from .report import FileReport, FixMode
from .registry import rule_codes
from .rule import Rule

DEFAULT_FOLDER = ".gradfix_cache"
SECRET_BYTES = 32
_CODE_ROOT = Path(__file__).resolve().parent


class ReportCache:
    """``secret``: the key of this machine's entries (``machine_secret()`` by default); without
    one (no user cache folder can be written) nothing is read or kept."""

    def __init__(self, folder: str | Path, version: str = __version__, secret: bytes | None = None) -> None:
        self.folder = Path(folder)
        self._entries = self.folder / _code_digest(version)
        self._secret = secret if secret is not None else machine_secret()

    def key(self, path: str | Path, data: bytes, rules: Sequence[type[Rule]], mode: FixMode, project: ProjectSummaries | None) -> str:
        digest = hmac.new(self._secret or b"", digestmod=hashlib.sha256)
        for part in (
            os.fsencode(str(path)),
            ",".join(rule_codes(rules)).encode(),
            mode.value.encode(),
            repr(sorted(project.items()) if project else []).encode(),
            data,
        ):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        return digest.hexdigest()

    def load(self, key: str) -> FileReport | None:
        if not self._secret or not _real_folder(self.folder) or not _real_folder(self._entries):
            return None
        try:
            return typed_json.loads((self._entries / key).read_bytes(), FileReport)
        except (OSError, typed_json.UnexpectedData):  # missing, partial or foreign: a miss, replaced by the next store
            return None

    def store(self, key: str, report: FileReport) -> None:
        """Keep ``report``; a folder that cannot be written only costs the next run its speed."""
        if not self._secret:
            return
        try:
            if not self._created_folder():
                return
            descriptor, temporary = tempfile.mkstemp(dir=self._entries, prefix=f".{key}.")
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(typed_json.dumps(report, FileReport))
                os.replace(temporary, self._entries / key)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass

    def unusable(self) -> str:
        """Why no entry can be kept (made here if need be), or "" when entries can be."""
        if not self._secret:
            return "no secret for its entries can be kept in the user's cache folder"
        try:
            if not self._created_folder():
                return "it, or the folder of its entries, is not a real folder (a link or a file)"
        except OSError as error:
            return f"cannot be made: {error.strerror or error}"
        return "" if os.access(self._entries, os.W_OK) else "cannot be written"

    def _created_folder(self) -> bool:
        """The entries folder exists, made here if need be; False if the tree put something else
        (a link, a file) in its place."""
        if _real_folder(self.folder) and _real_folder(self._entries):
            return True
        for folder in (self.folder, self._entries):
            folder.mkdir(parents=True, exist_ok=True)
            if not _real_folder(folder):
                return False
        # Like .ruff_cache: git ignores the folder without an entry in the project's .gitignore.
        try:
            descriptor = os.open(self.folder / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return True
        with os.fdopen(descriptor, "w") as handle:
            handle.write("*\n")
        return True


def machine_secret() -> bytes | None:
    """A random key of this user on this machine, made on first use in the user's cache folder
    (``$XDG_CACHE_HOME/gradfix``, else ``~/.cache/gradfix``), which no checked tree holds; None
    when that folder cannot be written."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(home, "gradfix", "cache-secret")
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        secret = b""
    except OSError:
        return None
    if len(secret) == SECRET_BYTES:
        return secret
    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".cache-secret.")  # readable by this user only
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secret)
        # Two first runs at once each keep their own for this run; the entries of the one that
        # loses are never read again, which costs only their time.
        os.replace(temporary, path)
    except OSError:
        return None
    return secret


def _real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@lru_cache(maxsize=None)
def _code_digest(version: str) -> str:
    """gradfix's version and the bytes of its analysis and rules."""
    digest = hashlib.sha256(version.encode())
    for source in sorted(_CODE_ROOT.rglob("*.py")):
        digest.update(os.fsencode(source.relative_to(_CODE_ROOT)))
        digest.update(source.read_bytes())
    return digest.hexdigest()[:32]
