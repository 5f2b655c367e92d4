"""Reports of unchanged files, kept from one run to the next (as ruff keeps ``.ruff_cache``).

An entry is one file's ``FileReport``, stored under a key made of everything the report depends on:
the file's path and bytes, gradfix's version and a digest of its own code (so that neither a new
release nor an edit of a development install serves an old result), the selected rules, the fix
mode, and the summaries of other files' functions the report was computed with (a file that calls
into a sibling is checked again when the sibling's summaries change).

Entries are written to a temporary file and renamed into place, so two runs sharing the folder see
either a whole entry or none; an entry that cannot be read is a miss. Entries are pickles: the
folder is as trusted as the ``__pycache__`` folders beside the code.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from gradfix import __version__

from .analysis.project import ProjectSummaries
from .engine import FileReport, FixMode
from .registry import rule_codes
from .rule import Rule

DEFAULT_FOLDER = ".gradfix_cache"
_CODE_ROOT = Path(__file__).resolve().parent


class ReportCache:
    def __init__(self, folder: str | Path, version: str = __version__) -> None:
        self.folder = Path(folder)
        self._entries = self.folder / _code_digest(version)

    def key(self, path: str | Path, data: bytes, rules: Sequence[type[Rule]], mode: FixMode, project: ProjectSummaries | None) -> str:
        digest = hashlib.sha256()
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
        try:
            report = pickle.loads((self._entries / key).read_bytes())
        except FileNotFoundError:
            return None
        except Exception:  # a partial or foreign entry is a miss; the next store replaces it
            return None
        return report if isinstance(report, FileReport) else None

    def store(self, key: str, report: FileReport) -> None:
        """Keep ``report``; a folder that cannot be written only costs the next run its speed."""
        try:
            self._create_folder()
            descriptor, temporary = tempfile.mkstemp(dir=self._entries, prefix=f".{key}.")
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    pickle.dump(report, handle, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, self._entries / key)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass

    def _create_folder(self) -> None:
        if not self._entries.is_dir():
            self._entries.mkdir(parents=True, exist_ok=True)
            # Like .ruff_cache: git ignores the folder without an entry in the project's .gitignore.
            (self.folder / ".gitignore").write_text("*\n")


@lru_cache(maxsize=None)
def _code_digest(version: str) -> str:
    """gradfix's version and the bytes of its analysis and rules."""
    digest = hashlib.sha256(version.encode())
    for source in sorted(_CODE_ROOT.rglob("*.py")):
        digest.update(os.fsencode(source.relative_to(_CODE_ROOT)))
        digest.update(source.read_bytes())
    return digest.hexdigest()[:32]
