"""The project's own modules a file imports, read from disk whichever files a run names.

A file's findings may rest on what a function of another module of the project does
(``summaries``): ``from .steps import update``, where ``update`` backwards the loss it is handed.
That module is found as Python would find it and read from disk for every file that imports it,
so a file's findings and fixes are the same checked alone, with its tree, from stdin under its
name, by shard, in the editor, or by a pre-commit hook that passes only it.

Where an import is looked for (the first found wins, as on ``sys.path``): a relative import in the
importing file's package; an absolute one in the file's own folder (a script's ``sys.path[0]``),
the folder above the file's top package (``python -m pkg.train``'s), and the settings' source
roots (``src``: the project's top and its ``src/`` by default, as ruff's). Only a module inside the
project (the work tree that holds the importing file) and outside the folders a walk never enters
(virtualenvs, ``site-packages``, build output) is read; any other stays code gradfix did not read.

A module's summaries are computed from its bytes alone (``ModuleSummaries``: the analysis of it
with no project of its own), so they are the same whoever imports it, and kept by the digest of
its bytes (and in the report cache, authenticated as its reports are). The imports are found by a
scan of the text, not a parse: a file that need not be parsed still needs its project. The scan
may find more than the file imports (an import in a string), never less of what it writes on
one line or in parentheses; the analysis asks only for the names the file really imports.

Plain data and files: nothing here loads LibCST; computing a module's summaries is
``check.module_exports``'s, loaded when one is not known.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .config import DEFAULT_EXCLUDE, Settings, project_root
from .notebook import Notebook, is_notebook
from .source import may_backward
from .summaries import ExportedSummary, Exports, ProjectSummaries

if TYPE_CHECKING:
    from .cache import ReportCache


_IMPORT = re.compile(rb"(?:^|;)[ \t]*import[ \t]+([^\n#;]+)", re.MULTILINE)
_FROM_IMPORT = re.compile(rb"(?:^|;)[ \t]*from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n#;]*)", re.MULTILINE)
_NAME = re.compile(rb"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# A module larger than this is not read (calls of it stay calls of code gradfix did not read).
MAX_MODULE_BYTES = 16 * 2**20


@dataclass(frozen=True)
class WrittenModule:
    """A module as an import statement writes it: how many leading dots, and the dotted name
    after them (empty for ``from . import x``). The analysis names what the module holds by that
    name without the dots (``from .steps import update`` calls ``steps.update``)."""

    level: int
    name: str


def written_modules(code: bytes) -> list[WrittenModule]:
    """Every module ``code``'s import statements could name: each dotted prefix of an ``import``,
    and for ``from M import a, b`` the module ``M`` and the submodules ``M.a`` and ``M.b``."""
    found: dict[WrittenModule, None] = {}
    for statement in _IMPORT.finditer(code):
        for alias in statement.group(1).split(b","):
            name = _NAME.match(alias.strip())
            if name is not None:
                parts = name.group().decode().split(".")
                for end in range(1, len(parts) + 1):
                    found[WrittenModule(0, ".".join(parts[:end]))] = None
    for statement in _FROM_IMPORT.finditer(code):
        level, module = len(statement.group(1)), statement.group(2).decode().strip(".")
        if not level and not module:
            continue
        found[WrittenModule(level, module)] = None
        for alias in statement.group(3).strip(b"()").split(b","):
            name = _NAME.match(alias.strip())
            if name is not None and b"." not in name.group():
                found[WrittenModule(level, f"{module}.{name.group().decode()}" if module else name.group().decode())] = None
    return list(found)


class ModuleSummaries:
    """The summaries each module of the project exports, by the digest of its bytes: computed
    once (``check.module_exports``) and, with ``cache``, kept from one run to the next."""

    def __init__(self, cache: ReportCache | None = None) -> None:
        self._cache = cache
        self._known: dict[str, Exports] = {}

    def of(self, data: bytes) -> Exports:
        known = self._known_of(data)
        if known is None:
            from .check import module_exports  # LibCST and the analysis, only for a module not known

            known = module_exports(data)
            self.learn(data, known)
        return known

    def unknown(self, modules: Iterable[bytes]) -> list[bytes]:
        """Of ``modules``' bytes, each whose summaries must still be computed, once."""
        return list({hashlib.sha256(data).digest(): data for data in modules if self._known_of(data) is None}.values())

    def learn(self, data: bytes, exports: Exports) -> None:
        """``exports``, computed (here or in another process) from ``data``."""
        self._known[hashlib.sha256(data).hexdigest()] = exports
        if self._cache is not None:
            self._cache.store_exports(data, exports)

    def _known_of(self, data: bytes) -> Exports | None:
        if not may_backward(data):  # nothing it defines can backward, which is all a summary says
            return {}
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self._known and self._cache is not None and (kept := self._cache.load_exports(data)) is not None:
            self._known[digest] = kept
        return self._known.get(digest)


@dataclass
class ProjectModules:
    """Finds, for a file, the modules of its project it imports, and what they export."""

    settings: Settings = field(default_factory=Settings)
    summaries: ModuleSummaries = field(default_factory=ModuleSummaries)
    _entries: dict[Path, dict[str, bool]] = field(default_factory=dict)  # folder -> its names, True for a folder
    _tops: dict[Path, Path] = field(default_factory=dict)  # folder -> its work tree's top
    _imported: dict[tuple[Path, bytes], list[tuple[str, Path]]] = field(default_factory=dict)
    _modules: dict[Path, bytes | None] = field(default_factory=dict)  # a module's file -> its bytes

    def imported(self, path: str | Path, data: bytes) -> list[tuple[str, Path]]:
        """The project modules the file at ``path`` (holding ``data``) imports: each with the
        prefix the analysis names its contents by, and its file."""
        here = Path(os.path.abspath(path))
        if (here, data) not in self._imported:
            code = _code_of(path, data)
            found: list[tuple[str, Path]] = []
            if code is not None:
                top, roots = self._top(here.parent), self._roots(here)
                for module in written_modules(code):
                    file = self._find(module, here, roots, top)
                    if file is not None and file != here:
                        found.append((module.name, file))
            self._imported[here, data] = found
        return self._imported[here, data]

    def project_for(self, path: str | Path, data: bytes) -> ProjectSummaries:
        """The summaries the file at ``path`` (holding ``data``) may call, named as it calls them;
        a name two of its imports could mean is left out."""
        index: dict[str, ExportedSummary] = {}
        ambiguous: set[str] = set()
        for prefix, file in self.imported(path, data):
            module = self.module_bytes(file)
            if module is None:
                continue
            for name, summary in self.summaries.of(module).items():
                key = f"{prefix}.{name}" if prefix else name
                if index.get(key, summary) != summary:
                    ambiguous.add(key)
                index[key] = summary
        return {key: summary for key, summary in index.items() if key not in ambiguous}

    def module_bytes(self, file: Path) -> bytes | None:
        """A module's bytes, read once; None for a file that cannot be read or is too large to be
        code gradfix checks."""
        if file not in self._modules:
            try:
                with open(file, "rb") as handle:
                    data = handle.read(MAX_MODULE_BYTES + 1)
                self._modules[file] = data if len(data) <= MAX_MODULE_BYTES else None
            except OSError:
                self._modules[file] = None
        return self._modules[file]

    def _find(self, module: WrittenModule, here: Path, roots: list[Path], top: Path) -> Path | None:
        """Where ``module``, imported by ``here``, is: relative to ``here``'s package, else in the
        first of ``roots`` that holds it; None outside the project ``top``."""
        parts = module.name.split(".") if module.name else []
        folders = roots
        if module.level:
            folders = [here.parents[module.level - 1]] if module.level <= len(here.parents) else []
        for folder in folders:
            file = self._module_file(folder, parts)
            if file is not None and _in_project(file, top):
                return file
        return None

    def _roots(self, here: Path) -> list[Path]:
        """Where an absolute import from ``here`` is looked for, in order."""
        package_top = here.parent
        while self._listing(package_top).get("__init__.py") is False and package_top.parent != package_top:
            package_top = package_top.parent
        config = self.settings.for_path(here)
        base = Path(os.path.abspath(config.root)) if config.root is not None else self._top(here.parent)
        roots = [here.parent, package_top, *(Path(os.path.normpath(base / root)) for root in config.src)]
        return list(dict.fromkeys(roots))

    def _module_file(self, folder: Path, parts: list[str]) -> Path | None:
        """``parts`` as a module below ``folder``: ``a/b.py`` or ``a/b/__init__.py``."""
        for part in parts[:-1]:
            if self._listing(folder).get(part) is not True:
                return None
            folder = folder / part
        if not parts:
            return folder / "__init__.py" if self._listing(folder).get("__init__.py") is False else None
        last = parts[-1]
        if self._listing(folder).get(f"{last}.py") is False:
            return folder / f"{last}.py"
        if self._listing(folder).get(last) is True and self._listing(folder / last).get("__init__.py") is False:
            return folder / last / "__init__.py"
        return None

    def _listing(self, folder: Path) -> dict[str, bool]:
        """The names in ``folder``: True for a folder, False for a regular file (links followed)."""
        if folder not in self._entries:
            names: dict[str, bool] = {}
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir() or entry.is_file():  # (a FIFO or a device is neither: never read)
                                names[entry.name] = entry.is_dir()
                        except OSError:
                            continue
            except OSError:
                pass
            self._entries[folder] = names
        return self._entries[folder]

    def _top(self, folder: Path) -> Path:
        if folder not in self._tops:
            self._tops[folder] = project_root(folder)
        return self._tops[folder]


def _code_of(path: str | Path, data: bytes) -> bytes | None:
    """The Python code of a file's bytes: a notebook's cells, joined."""
    if not is_notebook(str(path)):
        return data
    try:
        notebook = Notebook(data, str(path))
    except Exception:  # (NotebookError, or a bug: the file's own check meets it again, and says so)
        return None
    return notebook.source if notebook.is_python else None


def _in_project(file: Path, top: Path) -> bool:
    """Whether ``file``, wherever its links lead, is inside the work tree ``top`` and outside the
    folders a walk never enters (a virtualenv's, installed packages, build output)."""
    real, real_top = Path(os.path.realpath(file)), Path(os.path.realpath(top))
    if real_top not in real.parents:
        return False
    return not any(fnmatch.fnmatchcase(part, pattern) for part in real.relative_to(real_top).parts[:-1] for pattern in DEFAULT_EXCLUDE)


def modules_imported(modules: ProjectModules, files: Iterable[tuple[str | Path, bytes]]) -> list[bytes]:
    """The bytes of every project module ``files`` (paths and bytes) import."""
    return [module for path, data in files for _, file in modules.imported(path, data) if (module := modules.module_bytes(file)) is not None]
