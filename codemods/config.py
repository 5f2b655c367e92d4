"""``[tool.gradfix]`` in ``pyproject.toml``: defaults for the command-line options.

    [tool.gradfix]
    select = ["GF00"]          # rule codes or prefixes
    ignore = ["GF004"]
    unsafe-fixes = false

Each file takes the table of the nearest ``pyproject.toml`` above it that has one (as ruff does), so
results never depend on the order of the paths. The command line wins: ``--select`` replaces the
file's selection and its ignores, ``--ignore`` adds to them, ``--[no-]unsafe-fixes`` replaces.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

_KEYS = {"select": list, "ignore": list, "unsafe-fixes": bool}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    path: Path | None = None  # the pyproject.toml it came from; None: no file has a table


def configs_for(paths: Sequence[str | Path]) -> list[Config]:
    """The settings of each file (or folder) of ``paths``; each ``pyproject.toml`` is read once.
    Raises ``ConfigError`` naming the file."""
    known: dict[Path, Config] = {}
    return [_config_in(_folder_of(path), known) for path in paths]


def find_config(paths: Sequence[str | Path]) -> Config:
    """The settings of the first of ``paths`` (the current folder when there is none)."""
    return configs_for([paths[0] if paths else Path.cwd()])[0]


def _folder_of(path: str | Path) -> Path:
    start = Path(os.path.abspath(path))  # not resolved: a symlink loop must not raise here
    return start if start.is_dir() else start.parent


def _config_in(folder: Path, known: dict[Path, Config]) -> Config:
    if folder not in known:
        candidate = folder / "pyproject.toml"
        found = _load(candidate) if candidate.is_file() else None
        if found is None:
            found = Config() if folder.parent == folder else _config_in(folder.parent, known)
        known[folder] = found
    return known[folder]


def _load(path: Path) -> Config | None:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the configuration: {error}") from None
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: [tool] must be a table")
    table = tool.get("gradfix")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.gradfix] must be a table")
    for key, value in table.items():
        expected = _KEYS.get(key)
        if expected is None:
            raise ConfigError(f"{path}: unknown key [tool.gradfix] {key} (known: {', '.join(_KEYS)})")
        if not isinstance(value, expected) or (expected is list and not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{path}: [tool.gradfix] {key} must be {'a list of strings' if expected is list else 'true or false'}")
    return Config(tuple(table.get("select", ())), tuple(table.get("ignore", ())), table.get("unsafe-fixes", False), path)


def project_root(start: str | Path | None = None) -> Path:
    """The top of the work tree holding ``start`` (the current folder by default): the nearest
    folder above it with a ``.git``, else ``start`` itself. The cache lives there, and shards name
    files relative to it, so every job of a CI matrix splits the tree the same way."""
    folder = Path(os.path.abspath(start or Path.cwd()))
    return next((f for f in (folder, *folder.parents) if (f / ".git").exists()), folder)
