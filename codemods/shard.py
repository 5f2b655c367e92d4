"""``--shard i/n``: the part of a tree that one of n jobs checks (a CI matrix).

A file belongs to the shard picked by a hash of its path relative to the project root, so the
split does not depend on the order or the number of files, or on which job runs where: the n shards
are disjoint and together hold every file.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    number: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"2/4"``; raises ``ValueError`` saying what is wrong."""
        match = _SHARD.fullmatch(text)
        if not match:
            raise ValueError(f"--shard takes i/n (such as 2/4), not {text!r}")
        number, count = int(match[1]), int(match[2])
        if not 1 <= number <= count:
            raise ValueError(f"--shard {text}: i must be between 1 and n")
        return cls(number, count)

    def select(self, files: Sequence[Path], root: Path) -> list[Path]:
        return [path for path in files if self._holds(path, root)]

    def _holds(self, path: Path, root: Path) -> bool:
        relative = Path(os.path.relpath(os.path.abspath(path), root)).as_posix()
        number = int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "big")
        return number % self.count == self.number - 1
