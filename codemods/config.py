"""``[tool.gradfix]`` in ``pyproject.toml``: defaults for the command-line options.

    [tool.gradfix]
    select = ["GF00"]          # rule codes, prefixes or names
    extend-select = []         # added to select
    ignore = ["GF004"]
    unsafe-fixes = false
    hints = false              # also report findings that rest on what gradfix could only guess
    exclude = [...]            # replaces the folders and files skipped by default
    extend-exclude = ["generated", "experiments/*.py"]
    src = [".", "src"]         # where the project's absolute imports are found (``project``)
    [tool.gradfix.per-file-ignores]
    "tests/*" = ["GF001"]

Each file takes the table of the nearest ``pyproject.toml`` above it that has one (as ruff does), so
results never depend on the order of the paths; the search stops at the top of the git work tree
(the folder holding ``.git``, a folder or a file), so a ``pyproject.toml`` outside the repository
(a home folder's, a CI runner's work folder's) never changes its results. A pattern (of ``exclude`` and ``per-file-ignores``)
without a ``/`` matches a file's or a folder's name; one with a ``/`` matches the path relative to
the folder of the ``pyproject.toml``; ``*`` matches any characters, ``/`` included (as ruff's
globs do). The command line wins (``Overrides``). ``--config FILE`` reads every file's settings
from one file instead: a ``pyproject.toml``'s ``[tool.gradfix]`` table, or any other TOML file's
top level.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from .registry import RULE_MODULES, UnknownRuleError, codes_matching

# Skipped in a folder's walk unless a configuration's `exclude` says otherwise (virtualenvs are
# also told by their pyvenv.cfg, and what git ignores is skipped too).
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    "__pypackages__",
    ".ipynb_checkpoints",
    ".gradfix_cache",
)
PYPROJECT = "pyproject.toml"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    hints: bool = False  # findings that rest on a guess shown too
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    src: tuple[str, ...] = (".", "src")  # relative to ``root`` (the work tree's top without a file)
    path: Path | None = None  # the file it came from; None: no file has a table
    root: Path | None = None  # the folder its patterns are relative to (the file's)

    def excludes(self, path: str | Path) -> bool:
        """Whether a walk skips ``path`` (a file or a folder)."""
        return _Place(path, self.root).matches((*self.exclude, *self.extend_exclude))

    def excludes_in(self, folder: str) -> Callable[[str], bool]:
        """``excludes`` of the paths in ``folder``, asked by name (neither "", "." nor ".."): what
        the folder decides (where it is below the root) is worked out once for all its names."""
        names, paths = _compiled((*self.exclude, *self.extend_exclude))
        relative = _relative(os.path.abspath(folder), os.path.abspath(self.root or os.getcwd())) if paths is not None else None
        if paths is None or relative is None:  # (a pattern with a / matches no path outside the root, nor the root itself)
            return lambda name: names.match(name) is not None
        prefix = "" if relative == "." else relative + os.sep
        return lambda name: names.match(name) is not None or paths.match(prefix + name) is not None

    def ignored_for(self, path: str | Path) -> tuple[str, ...]:
        """The rule patterns ``per-file-ignores`` ignores in ``path`` (a name pattern also matches
        the folders it is in, below the settings' folder)."""
        if not self.per_file_ignores:
            return ()
        place = _Place(path, self.root)
        return tuple(code for pattern, codes in self.per_file_ignores if place.matches((pattern,), folders=True) for code in codes)

    def selected_codes(self) -> set[str]:
        """The rule codes the table selects: ``select`` (every rule when empty) with
        ``extend-select``, less ``ignore``. Raises ``UnknownRuleError``."""
        chosen = codes_matching(self.select) if self.select else set(RULE_MODULES)
        return (chosen | codes_matching(self.extend_select)) - codes_matching(self.ignore)


class _Place:
    """A path as patterns match it (worked out once for all the patterns of a table): strings,
    not ``Path`` objects, which a walk of thousands of files would build for every pattern."""

    def __init__(self, path: str | Path, root: Path | None) -> None:
        self._path = path
        self._root = root

    def matches(self, patterns: tuple[str, ...], folders: bool = False) -> bool:
        """Whether one of ``patterns`` matches the path: its name (``folders``: or a folder's it is
        in, below the root), or its path relative to the root when the pattern has a ``/``."""
        names, paths = _compiled(patterns)
        if any(names.match(name) for name in (self._names if folders else (self._name,))):
            return True
        if paths is None:
            return False
        relative = self._relative
        return relative is not None and paths.match(relative) is not None

    @cached_property
    def absolute(self) -> str:
        return os.path.abspath(self._path)

    @cached_property
    def _name(self) -> str:
        """The path's name, read from the path as written where it ends in one (a walk's paths do:
        the default exclusions match names alone, and a walk need not make its paths absolute)."""
        name = os.path.basename(self._path)
        return name if name not in ("", ".", "..") else os.path.basename(self.absolute)

    @cached_property
    def root(self) -> str:
        return os.path.abspath(self._root or os.getcwd())

    @cached_property
    def _names(self) -> tuple[str, ...]:
        """The path's name and those of the folders it is in, below ``root``."""
        names = [self._name]
        folder = os.path.dirname(self.absolute)
        while _strictly_inside(folder, self.root):
            names.append(os.path.basename(folder))
            folder = os.path.dirname(folder)
        return tuple(names)

    @cached_property
    def _relative(self) -> str | None:
        return _relative(self.absolute, self.root)


def _relative(absolute: str, root: str) -> str | None:
    """``absolute`` relative to ``root`` (``.`` for ``root`` itself); None outside it."""
    if absolute == root:
        return "."
    return absolute[len(_as_folder(root)) :] if _strictly_inside(absolute, root) else None


def _as_folder(root: str) -> str:
    return root if root.endswith(os.sep) else root + os.sep  # ("/" ends with one)


def _strictly_inside(path: str, root: str) -> bool:
    return path != root and path.startswith(_as_folder(root))


def excluded_name(name: str) -> bool:
    """Whether ``name`` is the name of a file or folder the default exclusions skip."""
    return _compiled(DEFAULT_EXCLUDE)[0].match(name) is not None


@lru_cache(maxsize=None)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """``patterns`` in two expressions compiled once: one matched against a name (a pattern without
    a ``/``), one against the path relative to the settings' folder (None: no pattern has a ``/``);
    ``*`` matches any characters, ``/`` included, and a folder's pattern the paths under it."""
    cleaned = [pattern.removeprefix("./").rstrip("/") for pattern in patterns]
    names = [fnmatch.translate(pattern) for pattern in cleaned if "/" not in pattern]
    paths = [fnmatch.translate(form) for pattern in cleaned if "/" in pattern for form in (pattern, pattern + "/*")]
    return re.compile("|".join(names) or "(?!)"), re.compile("|".join(paths)) if paths else None  # ((?!) matches nothing)


@dataclass(frozen=True)
class Overrides:
    """What the command line says over every file's settings. ``select`` replaces the table's
    whole selection (its ``select``, ``extend-select`` and ``ignore``); ``extend_select`` and
    ``ignore`` then add to and take from what is selected; the others replace the table's."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool | None = None
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    hints: bool | None = None

    def codes(self, config: Config, path: str | Path) -> set[str]:
        """The codes of the rules that check ``path``, whose settings are ``config``. Raises
        ``UnknownRuleError``."""
        chosen = codes_matching(self.select) if self.select is not None else config.selected_codes()
        return (chosen | codes_matching(self.extend_select)) - codes_matching([*self.ignore, *config.ignored_for(path)])

    def unsafe(self, config: Config) -> bool:
        return config.unsafe_fixes if self.unsafe_fixes is None else self.unsafe_fixes

    def shows_hints(self, config: Config) -> bool:
        return config.hints if self.hints is None else self.hints

    def applied(self, config: Config) -> Config:
        """``config`` with the exclusions of the command line."""
        exclude = config.exclude if self.exclude is None else self.exclude
        return dataclasses.replace(config, exclude=exclude, extend_exclude=config.extend_exclude + self.extend_exclude)


class Settings:
    """Every file's settings: found above it, or all from one file (``--config FILE``), with the
    keys of ``table`` (``--config KEY=VALUE``) on top; each ``pyproject.toml`` is read once."""

    def __init__(self, config_file: str | Path | None = None, table: dict[str, Any] | None = None) -> None:
        self._table = table or {}
        if table:
            _fields(table, "--config")  # said at once, whatever files there are
        self._fixed = None if config_file is None else self._with_table(_load_file(Path(config_file)))
        self._known: dict[str, Config] = {}  # a folder (absolute) -> its settings: a run asks for each file's

    def for_path(self, path: str | Path) -> Config:
        """The settings of a file (or of the files in a folder). Raises ``ConfigError`` naming the
        file they could not be read from."""
        absolute = os.path.abspath(path)  # not resolved: a symlink loop must not raise here
        return self.in_folder(absolute if os.path.isdir(absolute) else os.path.dirname(absolute))

    def in_folder(self, folder: str) -> Config:
        """The settings of the files in ``folder`` (a path to a folder); ``ConfigError`` as
        ``for_path``."""
        if self._fixed is not None:
            return self._fixed
        return self._in(os.path.abspath(folder))

    def _in(self, folder: str) -> Config:
        if folder not in self._known:
            candidate = os.path.join(folder, PYPROJECT)
            found = _load(Path(candidate), pyproject=True) if os.path.isfile(candidate) else None
            if found is not None:
                found = self._with_table(found)
            elif os.path.dirname(folder) == folder or _is_work_tree_top(folder):
                found = self._with_table(Config())
            else:
                found = self._in(os.path.dirname(folder))
            self._known[folder] = found
        return self._known[folder]

    def _with_table(self, config: Config) -> Config:
        return dataclasses.replace(config, **_fields(self._table, "--config")) if self._table else config


def configs_for(paths: Sequence[str | Path]) -> list[Config]:
    """The settings of each file (or folder) of ``paths``. Raises ``ConfigError`` naming the
    file."""
    settings = Settings()
    return [settings.for_path(path) for path in paths]


def find_config(paths: Sequence[str | Path]) -> Config:
    """The settings of the first of ``paths`` (the current folder when there is none)."""
    return configs_for([paths[0] if paths else Path.cwd()])[0]


def inline_table(text: str) -> dict[str, Any]:
    """``--config 'KEY = VALUE'``: one or more settings in TOML, as ruff takes them. Raises
    ``ConfigError``."""
    import tomllib  # (as ``_load``)

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"--config {text!r} is neither a file nor a setting (KEY = VALUE in TOML): {error}") from None
    _fields(table, "--config")
    return table


def _load_file(path: Path) -> Config:
    """``--config FILE``: a ``pyproject.toml``'s table (settings from none when it has none), or
    the top level of another TOML file."""
    if not path.is_file():
        raise ConfigError(f"--config {path}: no such file")
    found = _load(path, pyproject=path.name == PYPROJECT)
    return found if found is not None else Config(path=path, root=path.parent)


def _load(path: Path, pyproject: bool) -> Config | None:
    import tomllib  # imported once a file is read: a tree without one never pays for it

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the configuration: {error}") from None
    if not pyproject:
        return Config(path=path, root=path.parent, **_fields(document, str(path)))
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: [tool] must be a table")
    table = tool.get("gradfix")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.gradfix] must be a table")
    return Config(path=path, root=path.parent, **_fields(table, str(path), "[tool.gradfix] "))


_LISTS = ("select", "extend-select", "ignore", "exclude", "extend-exclude", "src")
_SWITCHES = ("unsafe-fixes", "hints")
_KEYS = (*_LISTS, *_SWITCHES, "per-file-ignores")
_RULE_LISTS = ("select", "extend-select", "ignore")


def _fields(table: dict[str, Any], where: str, table_name: str = "") -> dict[str, Any]:
    """``Config``'s fields from a table's keys, checked. Raises ``ConfigError`` naming ``where``
    (and the key as ``table_name`` + key)."""
    fields: dict[str, Any] = {}
    for key, value in table.items():
        named = f"{table_name}{key}"
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {named} (known: {', '.join(_KEYS)})")
        if key in _SWITCHES:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {named} must be true or false")
        elif key == "per-file-ignores":
            if not isinstance(value, dict) or not all(_strings(codes) for codes in value.values()):
                raise ConfigError(f"{where}: {named} must be a table of patterns, each a list of rule codes")
            value = tuple((pattern, tuple(codes)) for pattern, codes in value.items())
            _known_rules(where, named, [code for _, codes in value for code in codes])
        elif not _strings(value):
            raise ConfigError(f"{where}: {named} must be a list of strings")
        else:
            value = tuple(value)
            if key in _RULE_LISTS:
                _known_rules(where, named, value)
        fields[key.replace("-", "_")] = value
    return fields


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _known_rules(where: str, key: str, patterns: Sequence[str]) -> None:
    try:
        codes_matching(patterns)
    except UnknownRuleError as error:
        raise ConfigError(f"{where}: {key}: unknown rule code, prefix or name: {error} (the rules are {', '.join(RULE_MODULES)})") from None


def project_root(start: str | Path | None = None) -> Path:
    """The top of the work tree holding ``start`` (the current folder by default): the nearest
    folder above it with a ``.git``, else ``start`` itself. The cache lives there, shards name
    files relative to it, so every job of a CI matrix splits the tree the same way, and GitHub
    names files relative to it."""
    folder = os.path.abspath(start or os.getcwd())
    return Path(work_tree_top(folder, {}) or folder)


def work_tree_top(folder: str, known: dict[str, str | None]) -> str | None:
    """The nearest folder at or above ``folder`` (an absolute path) that holds a ``.git``, or None;
    ``known`` keeps each folder's answer, for a caller that asks of many folders of one tree."""
    if folder not in known:
        parent = os.path.dirname(folder)
        known[folder] = folder if _is_work_tree_top(folder) else None if parent == folder else work_tree_top(parent, known)
    return known[folder]


def _is_work_tree_top(folder: str | Path) -> bool:
    return os.path.exists(os.path.join(folder, ".git"))  # a folder, or a file naming it (a worktree, a submodule)
