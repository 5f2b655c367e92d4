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
with no project of its own), so they are the same whoever imports it, and kept by its bytes (and
in the report cache, authenticated as its reports are). The imports are found by a
scan of the text, not a parse: a file that need not be parsed still needs its project. The scan
may find more than the file imports (an import in a string), never less of what it writes on
one line or in parentheses; the analysis asks only for the names the file really imports.

What a run's files import is kept in the report cache too (``ImportsFound``): the next run reads
again all that finding them read and takes a file's imports from the entry only when every read
returns what it did and the file's bytes are the same; a module created, deleted or moved, a new
``src`` or a new work tree top changes a read, and all is found anew.

Plain data and files: nothing here loads LibCST; computing a module's summaries is
``check.module_exports``'s, loaded when one is not known.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from .config import Settings, excluded_name, work_tree_top
from .notebook import Notebook, is_notebook
from .source import may_backward, module_class_names
from .summaries import ExportedSummary, Exports, ImportsFound, ProjectSummaries, bytes_digest

if TYPE_CHECKING:
    from .cache import ReportCache


# An import statement, matched at the start of a line that holds the word ``import``.
_STATEMENT = re.compile(rb"[ \t]*(?:from[ \t]+(?P<dots>\.*)[ \t]*(?P<module>[\w.]*)[ \t]+)?import[ \t]*(?P<names>[^\n]*)")
_NAME = re.compile(rb"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# A module larger than this is not read (calls of it stay calls of code gradfix did not read).
MAX_MODULE_BYTES = 16 * 2**20
# Code that changes where Python looks for modules: ``sys.path.insert(0, ...)``, ``sys.path +=``,
# ``sys.path[:0] = ...``, ``site.addsitedir(...)``.
_SEARCH_PATH_EDITS = re.compile(
    rb"\bsys\s*\.\s*path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\b|\+=|=(?!=)|\[[^\]]*\]\s*=(?!=))|\baddsitedir\b"
)
_EXTENSION_SUFFIXES = (".so", ".pyd")


@dataclass(frozen=True)
class WrittenModule:
    """A module as an import statement writes it: how many leading dots, and the dotted name
    after them (empty for ``from . import x``). The analysis names what the module holds by that
    name without the dots (``from .steps import update`` calls ``steps.update``)."""

    level: int
    name: str


def written_modules(code: bytes) -> list[WrittenModule]:
    """Every module the import statements of ``code`` could name (each at the start of a line):
    each dotted prefix of an ``import``, and for ``from M import a, b`` the module ``M`` and the
    submodules ``M.a`` and ``M.b``. (Lines are found by the word, which is fast; a regular
    expression tried at every line start of a large tree is not.)"""
    found: dict[WrittenModule, None] = {}
    position = code.find(b"import")
    while position != -1:
        start = code.rfind(b"\n", 0, position) + 1
        end = code.find(b"\n", position)
        end = len(code) if end == -1 else end
        statement = _STATEMENT.match(code, start, end)
        if statement is not None:
            names = statement.group("names")
            if names.startswith(b"(") and b")" not in names:  # names in parentheses, over several lines
                closing = code.find(b")", start)
                end = len(code) if closing == -1 else closing
                names = code[statement.start("names") : end]
            names = names.split(b"#")[0].split(b";")[0].strip(b"() \t\r\n")
            _note_statement(found, statement.group("dots"), statement.group("module"), names)
        position = code.find(b"import", end)
    return list(found)


def _note_statement(found: dict[WrittenModule, None], dots: bytes | None, module: bytes | None, names: bytes) -> None:
    aliases = [name.group().decode() for alias in names.split(b",") if (name := _NAME.match(alias.strip())) is not None]
    if module is None and dots is None:  # import a.b, c
        for alias in aliases:
            parts = alias.split(".")
            for end in range(1, len(parts) + 1):
                found[WrittenModule(0, ".".join(parts[:end]))] = None
        return
    level, base = len(dots or b""), (module or b"").decode().strip(".")
    if not level and not base:
        return
    found[WrittenModule(level, base)] = None
    for alias in aliases:
        if "." not in alias:
            found[WrittenModule(level, f"{base}.{alias}" if base else alias)] = None


class ModuleSummaries:
    """The summaries each module of the project exports, by its bytes: computed once by
    ``exports_of`` (``check.module_exports``: the caller gives it, as this layer never imports
    LibCST and the analysis) and, with ``cache``, kept from one run to the next."""

    def __init__(self, exports_of: Callable[[bytes], Exports], cache: ReportCache | None = None) -> None:
        self._exports_of = exports_of
        self._cache = cache
        self._known: dict[bytes, Exports] = {}  # (the bytes, not a digest of them: a run asks twice of each module)
        self._backwards: dict[bytes, bool] = {}
        self._class_names: dict[bytes, frozenset[bytes]] = {}

    def may_backward(self, data: bytes) -> bool:
        """``source.may_backward`` of a module's or a file's bytes, once a run: a warm run asks it
        of every file and of every module twice."""
        if data not in self._backwards:
            self._backwards[data] = may_backward(data)
        return self._backwards[data]

    def class_names(self, data: bytes) -> frozenset[bytes]:
        """``source.module_class_names`` of a module's bytes, once a run: asked where its exports
        are known, and again by each file that may build one of its classes."""
        if data not in self._class_names:
            self._class_names[data] = module_class_names(data)
        return self._class_names[data]

    def of(self, data: bytes, classes: bool = True) -> Exports:
        """What the module of ``data`` exports; ``classes``: its module classes are wanted too (by
        a file that may backward), else a module that cannot backward exports nothing."""
        if not classes and not self.may_backward(data):
            return {}
        known = self._known_of(data)
        if known is None:
            known = self._exports_of(data)
            self.learn(data, known)
        return known

    def unknown(self, modules: Iterable[bytes]) -> list[bytes]:
        """Of ``modules``' bytes, each whose summaries must still be computed, once."""
        return list(dict.fromkeys(data for data in modules if self._known_of(data) is None))

    def learn(self, data: bytes, exports: Exports) -> None:
        """``exports``, computed (here or in another process) from ``data``."""
        self._known[data] = exports
        if self._cache is not None:
            self._cache.store_exports(data, exports)

    def _known_of(self, data: bytes) -> Exports | None:
        if data not in self._known:
            if not self.may_backward(data) and not self.class_names(data):  # nothing it defines can backward, nor is a module
                self._known[data] = {}
            elif self._cache is not None and (kept := self._cache.load_exports(data)) is not None:
                self._known[data] = kept
        return self._known.get(data)


@dataclass
class ProjectModules:
    """Finds, for a file, the modules of its project it imports, and what they export. Paths are
    strings here and every answer is kept: a run asks the same of thousands of imports."""

    summaries: ModuleSummaries
    settings: Settings = field(default_factory=Settings)
    _listings: dict[str, dict[str, bool]] = field(default_factory=dict)  # folder -> its names, True for a folder
    _tops: dict[str, str] = field(default_factory=dict)  # folder -> the real path of its work tree's top
    _roots: dict[str, tuple[str, ...]] = field(default_factory=dict)  # folder -> where its absolute imports are looked for
    _found: dict[tuple[str, int, str], str | None] = field(default_factory=dict)  # (importing folder, level, module) -> its file
    _below: dict[tuple[str, str], str | None] = field(default_factory=dict)  # (folder, module) -> its file below the folder
    _inside: dict[tuple[str, str], bool] = field(default_factory=dict)  # (file, top) -> whether it is in the project
    _imported: dict[tuple[str, bytes], list[tuple[str, Path]]] = field(default_factory=dict)
    _modules: dict[str, bytes | None] = field(default_factory=dict)  # a module's file -> its bytes
    _exports: dict[tuple[Path, bool], Exports] = field(default_factory=dict)  # (a module's file, classes wanted) -> what it exports
    _recalled: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)  # ImportsFound.imports still true
    _found_anew: bool = False  # whether some file's imports were found here, not recalled
    _digests: dict[bytes, str] = field(default_factory=dict)  # a file's bytes -> their digest
    _work_trees: dict[str, str | None] = field(default_factory=dict)  # folder -> the top of the work tree holding it
    _real_paths: dict[str, str] = field(default_factory=dict)  # file or folder -> its real path
    _paths: dict[str, Path] = field(default_factory=dict)  # a module's file -> its Path
    _absolute: dict[str | Path, str] = field(default_factory=dict)  # a file asked about -> its absolute path

    def digest(self, data: bytes) -> str:
        """The digest of a file's bytes (``bytes_digest``), computed once a run: its recalled
        imports are checked by it, and its report's cache key is made of it."""
        if data not in self._digests:
            self._digests[data] = bytes_digest(data)
        return self._digests[data]

    def imported(self, path: str | Path, data: bytes) -> list[tuple[str, Path]]:
        """The project modules the file at ``path`` (holding ``data``) imports: each with the
        prefix the analysis names its contents by, and its file."""
        here = self._absolute_path(path)
        if (here, data) not in self._imported:
            recalled = self._recalled.get(here)
            if recalled is not None and recalled[0] == self.digest(data):
                self._imported[here, data] = [(prefix, self._path(file)) for prefix, file in recalled[1]]
            else:
                self._imported[here, data] = self._find_imports(here, _code_of(path, data))
                self._found_anew = True
        return self._imported[here, data]

    def _absolute_path(self, path: str | Path) -> str:
        """``os.path.abspath(path)``, once for each file: a run asks about each of its files thrice."""
        if path not in self._absolute:
            self._absolute[path] = os.path.abspath(path)
        return self._absolute[path]

    def _find_imports(self, here: str, code: bytes | None) -> list[tuple[str, Path]]:
        found: list[tuple[str, Path]] = []
        if code is not None:
            folder = os.path.dirname(here)
            # A file that changes where Python looks for modules may import another file of the
            # same name than the one looked for here: only its relative imports are read.
            absolute = not _edits_search_path(code)
            for module in written_modules(code):
                if not module.level and not absolute:
                    continue
                file = self._find(module, folder)
                if file is not None and file != here:
                    found.append((module.name, self._path(file)))
        return found

    def _path(self, file: str) -> Path:
        """``Path(file)``, made once for all the imports of a module's file."""
        if file not in self._paths:
            self._paths[file] = Path(file)
        return self._paths[file]

    def recall(self, kept: ImportsFound) -> None:
        """Take the imports ``kept`` found (by an earlier run, of the same files) for the files
        whose bytes are unchanged, if all it read reads the same now; call it before anything
        is found, so that what is read again is read from disk."""
        if self._reads(kept.listed, kept.rooted, kept.topped, kept.placed) == kept.reads:
            self._recalled = kept.imports

    def found(self) -> ImportsFound | None:
        """The imports of the files asked about and what finding them read, for ``recall`` in a
        later run; None when all of it was recalled (the entry it came from still holds), or when
        no file imports a module of the project (a script, a folder of scripts: the cache keeps
        only their reports, and finding their imports again scans them)."""
        if not self._found_anew or not any(self._imported.values()):
            return None
        imports = {here: (self.digest(data), tuple((prefix, str(file)) for prefix, file in found)) for (here, data), found in self._imported.items()}
        listed, rooted, topped, placed = tuple(self._listings), tuple(self._roots), tuple(self._tops), tuple(self._inside)
        return ImportsFound(imports, listed, rooted, topped, placed, self._reads(listed, rooted, topped, placed))

    def _reads(self, listed: Iterable[str], rooted: Iterable[str], topped: Iterable[str], placed: Iterable[tuple[str, str]]) -> str:
        """The digest of what these reads return (each read once, then kept, as finding keeps it)."""
        digest = hashlib.sha256()
        for value in (
            *(sorted(self._listing(folder).items()) for folder in listed),
            *(self._roots_of(folder) for folder in rooted),
            *(self._top(folder) for folder in topped),
            *(self._in_project(file, top) for file, top in placed),
        ):
            digest.update(repr(value).encode() + b"\n")  # (a repr holds no line break)
        return digest.hexdigest()

    def project_for(self, path: str | Path, data: bytes) -> ProjectSummaries:
        """The summaries the file at ``path`` (holding ``data``) may call, named as it calls them;
        a name two of its imports could mean is left out. The module classes of a module that
        cannot backward only for a file that may (``ProjectModules.wants_classes``)."""
        index: dict[str, ExportedSummary] = {}
        ambiguous: set[str] = set()
        backwards = self.wants_classes(path, data)
        for prefix, file in self.imported(path, data):
            for name, summary in self._exports_in(file, backwards and self.names_a_class(data, file)).items():
                key = f"{prefix}.{name}" if prefix else name
                if index.get(key, summary) != summary:
                    ambiguous.add(key)
                index[key] = summary
        return {key: summary for key, summary in index.items() if key not in ambiguous}

    def _exports_in(self, file: Path, classes: bool) -> Exports:
        """What the module in ``file`` exports (nothing where it cannot be read; ``classes``: as
        ``ModuleSummaries.of``), asked of the summaries once: its bytes are read once, and many
        files import it."""
        if (file, classes) not in self._exports:
            module = self.module_bytes(file)
            self._exports[file, classes] = {} if module is None else self.summaries.of(module, classes)
        return self._exports[file, classes]

    def wants_classes(self, path: str | Path, data: bytes) -> bool:
        """Whether the file at ``path`` reads the module classes of the project modules it imports
        (those it builds: ``names_a_class``): where its own text may backward (the facts
        of a class alone make no finding in a file that cannot; a notebook's JSON may spell the code
        with escapes, so a notebook does). A file that backwards only inside a project function it
        calls does not read them: a missed finding at most, and analysing every module a library's
        own modules import cost diffusers' check twice its time."""
        return is_notebook(str(path)) or self.summaries.may_backward(data)

    def names_a_class(self, data: bytes, file: Path) -> bool:
        """Whether the text ``data`` builds one of the module classes the module in ``file`` may
        define (``module_class_names``): it writes its name called (``Net(``; a name only tested,
        ``isinstance(m, Attention)``, builds none), or imports it under another (``Net as N``)."""
        module = self.module_bytes(file)
        names = self.summaries.class_names(module) if module is not None else frozenset()
        return any(name in data and re.search(rb"\b%s(?:\s*\(|\s+as\b)" % name, data) is not None for name in names)

    def module_bytes(self, file: Path) -> bytes | None:
        """A module's bytes, read once; None for a file that cannot be read or is too large to be
        code gradfix checks."""
        name = os.fspath(file)
        if name not in self._modules:
            try:
                with open(file, "rb") as handle:
                    data = handle.read(MAX_MODULE_BYTES + 1)
                self._modules[name] = data if len(data) <= MAX_MODULE_BYTES else None
            except OSError:
                self._modules[name] = None
        return self._modules[name]

    def read_already(self, absolute: str, data: bytes | None) -> None:
        """The bytes the run read from its file at ``absolute`` (its path as ``os.path.abspath``
        makes it, which is not made again; None: it could not): the module in that file, which
        most of a package's files import, is not read again."""
        self._absolute.setdefault(absolute, absolute)
        self._modules.setdefault(absolute, data if data is not None and len(data) <= MAX_MODULE_BYTES else None)

    def _find(self, module: WrittenModule, folder: str) -> str | None:
        """The file of ``module``, imported by a file in ``folder``: relative to its package, else
        in the one of its roots that holds it; None outside the work tree that holds ``folder``, and
        where two roots hold it (which one Python finds first depends on how the file is run:
        ``python pkg/train.py`` looks in ``pkg/``, ``python -m pkg.train`` in the folder above)."""
        key = (folder, module.level, module.name)
        if key not in self._found:
            if module.level:
                base = folder
                for _ in range(module.level - 1):
                    base = os.path.dirname(base)
                folders: tuple[str, ...] = (base,)
            else:
                folders = self._roots_of(folder)
            top = self._top(folder)
            held = {file for file in (self._module_file(candidate, module.name) for candidate in folders) if file is not None}
            self._found[key] = held.pop() if len(held) == 1 and self._in_project(next(iter(held)), top) else None
        return self._found[key]

    def _roots_of(self, folder: str) -> tuple[str, ...]:
        """Where an absolute import from a file in ``folder`` is looked for, in order."""
        if folder not in self._roots:
            package_top = folder
            while self._listing(package_top).get("__init__.py") is False and os.path.dirname(package_top) != package_top:
                package_top = os.path.dirname(package_top)
            config = self.settings.for_path(os.path.join(folder, "__init__.py"))
            base = os.path.abspath(config.root) if config.root is not None else self._project_root(folder)
            roots = [folder, package_top, *(os.path.normpath(os.path.join(base, root)) for root in config.src)]
            self._roots[folder] = tuple(dict.fromkeys(roots))
        return self._roots[folder]

    def _module_file(self, folder: str, name: str) -> str | None:
        """The module ``name`` (dotted) below ``folder``: ``a/b.py`` or ``a/b/__init__.py``."""
        if (folder, name) not in self._below:
            self._below[folder, name] = self._look_below(folder, name.split(".") if name else [])
        return self._below[folder, name]

    def _look_below(self, folder: str, parts: list[str]) -> str | None:
        for part in parts[:-1]:
            if self._listing(folder).get(part) is not True:
                return None
            folder = os.path.join(folder, part)
        if not parts:
            return os.path.join(folder, "__init__.py") if self._listing(folder).get("__init__.py") is False else None
        last = parts[-1]
        names = self._listing(folder)
        # As Python's finder: a package before a module of the same name; an extension module
        # (``losses.cpython-311-x86_64-linux-gnu.so``) before a ``.py``, and it is not read.
        package = os.path.join(folder, last)
        if names.get(last) is True and self._listing(package).get("__init__.py") is False:
            return os.path.join(package, "__init__.py")
        if any(name.startswith(f"{last}.") and name.endswith(_EXTENSION_SUFFIXES) for name in names):
            return None
        if names.get(f"{last}.py") is False:
            return os.path.join(folder, f"{last}.py")
        return None

    def _listing(self, folder: str) -> dict[str, bool]:
        """The names in ``folder``: True for a folder, False for a regular file (links followed)."""
        if folder not in self._listings:
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
            self._listings[folder] = names
        return self._listings[folder]

    def _top(self, folder: str) -> str:
        if folder not in self._tops:
            self._tops[folder] = self._real_path(self._project_root(folder))
        return self._tops[folder]

    def _project_root(self, folder: str) -> str:
        """``config.project_root(folder)``, each folder above looked at once for all the folders below it."""
        return work_tree_top(folder, self._work_trees) or folder

    def _real_path(self, path: str) -> str:
        """``os.path.realpath(path)`` (an absolute path), each path resolved once, from its folder's
        (a realpath reads every folder of the path again, and a module file is placed in the
        project of each folder that imports it)."""
        if path not in self._real_paths:
            folder, name = os.path.split(path)
            if name in ("", ".", "..") or os.path.islink(path):
                self._real_paths[path] = os.path.realpath(path)
            else:  # (the folder read through its links, as lstat reads it)
                self._real_paths[path] = os.path.join(self._real_path(folder), name)
        return self._real_paths[path]

    def _in_project(self, file: str, top: str) -> bool:
        """Whether ``file``, wherever its links lead, is inside the work tree ``top`` (a real path)
        and outside the folders a walk never enters (a virtualenv's, installed packages, build
        output)."""
        if (file, top) not in self._inside:
            real = self._real_path(file)
            folders = real[len(top) + 1 :].split(os.sep)[:-1]
            self._inside[file, top] = real.startswith(top + os.sep) and not any(excluded_name(part) for part in folders)
        return self._inside[file, top]


def _edits_search_path(code: bytes) -> bool:
    """Whether ``code`` may change where Python looks for modules (``_SEARCH_PATH_EDITS``). The
    expression is tried only on code that spells one of its words: tried at every byte of
    diffusers' 45 MB, it was a quarter of finding what the run's files import."""
    return (b"sys" in code or b"addsitedir" in code) and _SEARCH_PATH_EDITS.search(code) is not None


def _code_of(path: str | Path, data: bytes) -> bytes | None:
    """The Python code of a file's bytes: a notebook's cells, joined."""
    if not is_notebook(str(path)):
        return data
    try:
        notebook = Notebook(data, str(path))
    except Exception:  # (NotebookError, or a bug: the file's own check meets it again, and says so)
        return None
    return notebook.source if notebook.is_python else None


def modules_imported(modules: ProjectModules, files: Iterable[tuple[str | Path, bytes]]) -> list[bytes]:
    """The bytes of each project module ``files`` (paths and bytes) import whose exports a file
    reads, once (in the order they are first imported): a module that cannot backward only where
    a file that may imports it (``ProjectModules.wants_classes``)."""
    imported: dict[Path, bool] = {}
    for path, data in files:
        backwards = modules.wants_classes(path, data)
        for _, file in modules.imported(path, data):
            imported[file] = imported.get(file, False) or (backwards and modules.names_a_class(data, file))
    return [
        module
        for file, classes in imported.items()
        if (module := modules.module_bytes(file)) is not None and (classes or modules.summaries.may_backward(module))
    ]
