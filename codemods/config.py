"""``[tool.gradfix]`` in the nearest ``pyproject.toml``: defaults for the command-line options.

    [tool.gradfix]
    select = ["GF00"]          # rule codes or prefixes
    ignore = ["GF004"]
    unsafe-fixes = false

Options given on the command line win over the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
import os
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
    path: Path | None = None


def find_config(paths: Sequence[str | Path]) -> Config:
    """The ``[tool.gradfix]`` table of the first ``pyproject.toml`` above the first path."""
    start = Path(os.path.abspath(paths[0])) if paths else Path.cwd()  # a symlink loop must not raise here
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return _load(candidate)
    return Config()


def _load(path: Path) -> Config:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the configuration: {error}") from None
    table = document.get("tool", {}).get("gradfix")
    if table is None:
        return Config()
    for key, value in table.items():
        expected = _KEYS.get(key)
        if expected is None:
            raise ConfigError(f"{path}: unknown key [tool.gradfix] {key} (known: {', '.join(_KEYS)})")
        if not isinstance(value, expected) or (expected is list and not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{path}: [tool.gradfix] {key} must be {'a list of strings' if expected is list else 'true or false'}")
    return Config(tuple(table.get("select", ())), tuple(table.get("ignore", ())), table.get("unsafe-fixes", False), path)
