"""Jupyter notebooks as Python source, and back.

The code cells, in order, become one Python source that the analysis, the rules and the runner read
like any script: each cell after the first starts with a marker line naming it, and IPython's magics and shell
lines (``%matplotlib inline``, ``!pip install …``, ``%%time``) become comments that keep their
text. A rewrite of that source is written back into the cells it changed, and nowhere else:
outputs, metadata and untouched cells keep their bytes when the notebook's JSON layout can be
reproduced (as Jupyter writes it), and their content otherwise.
"""

from __future__ import annotations

import copy
import difflib
import io
import json
import re
import tokenize
from dataclasses import dataclass
from typing import Any

# A statement, not a comment: LibCST keeps a comment with the statement below it, so a fix that
# removes a cell's first statement would take a comment marker away with it.
CELL_MARKER = "pass  # gradfix-cell "
MAGIC_MARKER = "# gradfix-magic: "
# Cell magics whose body is still Python that runs; any other cell magic makes the cell not Python.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "autoreload"}
# `%magic`, `!shell`, `?name`, `name?`, and `files = !ls`, where a statement starts.
_MAGIC_LINE = re.compile(r"^\s*[%!]|^\s*\?{1,2}[\w.]|^\s*[\w.]+\?{1,2}\s*$|^\s*[\w.\[\], ]+=\s*[%!]")
_LINE_REFERENCE = re.compile(r"\bline (\d+)\b")
_LAYOUTS = ({"indent": 1, "ensure_ascii": False}, {"indent": 2, "ensure_ascii": False},
            {"indent": 1, "ensure_ascii": True}, {"indent": 2, "ensure_ascii": True},
            {"indent": 4, "ensure_ascii": False})


class NotebookError(ValueError):
    """A notebook that cannot be read or written back; the message says why."""


def is_notebook(path: str) -> bool:
    return str(path).endswith(".ipynb")


@dataclass(frozen=True)
class CellLine:
    cell: int  # 1-based, counting every cell as Jupyter shows it (markdown too)
    line: int  # 1-based, within the cell


class Notebook:
    """One notebook: its JSON, and its code cells as one Python source."""

    def __init__(self, data: bytes, path: str) -> None:
        self.path = path
        try:
            self.document: dict[str, Any] = json.loads(data.decode("utf-8"))
            cells = self.document["cells"]
            if not isinstance(cells, list):
                raise TypeError("`cells` is not a list")
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            raise NotebookError(f"{path}: not a Jupyter notebook ({type(error).__name__}: {error})") from None
        self.language = self.document.get("metadata", {}).get("language_info", {}).get("name", "python")
        self.code_cells = [i for i, cell in enumerate(cells) if cell.get("cell_type") == "code"]
        self._layout = next((layout for layout in _LAYOUTS if _dumped(self.document, layout) == data), None)
        lines: list[str] = []
        self._cell_starts: list[tuple[int, int]] = []  # (first source line, cell index), in order
        for index in self.code_cells:
            if lines or self._cell_starts:
                lines.append(f"{CELL_MARKER}{index + 1}\n")
            self._cell_starts.append((len(lines) + 1, index))
            lines += [line if line.endswith("\n") else line + "\n" for line in _masked(cell_source(cells[index]))]
        self.source = "".join(lines).encode("utf-8")

    @property
    def is_python(self) -> bool:
        return self.language.lower() == "python"

    def locate(self, line: int) -> CellLine:
        """The cell and in-cell line of a line of ``source``."""
        first, index = max((start for start in self._cell_starts if start[0] <= line), default=self._cell_starts[0])
        return CellLine(index + 1, max(1, line - first + 1))

    def describe(self, message: str) -> str:
        """``message`` with each ``line N`` of ``source`` named as the notebook shows it."""
        def relabel(match: re.Match[str]) -> str:
            place = self.locate(int(match.group(1)))
            return f"cell {place.cell}, line {place.line}"
        return _LINE_REFERENCE.sub(relabel, message)

    def with_source(self, rewritten: bytes) -> bytes:
        """The notebook with its code cells replaced by those of ``rewritten`` (a rewrite of
        ``source``); only the cells whose code changed are touched."""
        cells = _split_cells(rewritten.decode("utf-8"), self.code_cells[0]) if self.code_cells else []
        if [index for index, _ in cells] != self.code_cells:
            raise NotebookError(f"{self.path}: a rewrite moved code across cells; the notebook was left as it was")
        document = copy.deepcopy(self.document)
        for index, text in cells:
            cell = document["cells"][index]
            old = cell_source(cell)
            new = _unmasked(text)
            if not old.endswith("\n") and new.endswith("\n"):
                new = new[:-1]
            if new != old:
                lines = new.splitlines(keepends=True)
                cell["source"] = lines if isinstance(cell["source"], list) else new
        return _dumped(document, self._layout or _LAYOUTS[0])

    def cell_diffs(self, rewritten_notebook: bytes, name: str) -> str:
        """A unified diff per changed code cell, each headed with the cell it is in."""
        after = Notebook(rewritten_notebook, self.path)
        chunks = []
        for index in self.code_cells:
            old = cell_source(self.document["cells"][index])
            new = cell_source(after.document["cells"][index])
            if old != new:
                where = f"{name}:cell {index + 1}"
                diff = difflib.unified_diff(_lines(old), _lines(new), f"a/{where}", f"b/{where}")
                chunks.append("".join(diff))
        return "".join(chunks)


def cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]


def _masked(source: str) -> list[str]:
    lines = source.splitlines(keepends=True)
    if lines and lines[0].startswith("%%"):
        magic = (lines[0][2:].split() or [""])[0]
        body = _masked_magics(lines[1:]) if magic in PYTHON_CELL_MAGICS else [_mask(line) for line in lines[1:]]
        return [_mask(lines[0]), *body]
    return _masked_magics(lines)


def _masked_magics(lines: list[str]) -> list[str]:
    return [_mask(line) if _is_magic(line, lines[:number]) else line for number, line in enumerate(lines)]


def _is_magic(line: str, before: list[str]) -> bool:
    """Whether ``line`` is IPython syntax: it looks like it, does not compile, and starts a
    statement (it is not inside brackets or a string that lines ``before`` opened)."""
    if not _MAGIC_LINE.search(line):
        return False
    try:
        compile(line.strip(), "<cell>", "exec")
        return False
    except SyntaxError:
        pass
    try:
        for _ in tokenize.generate_tokens(io.StringIO("".join(before)).readline):
            pass
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string: the line continues it
        return False
    return True


def _mask(line: str) -> str:
    body = line.rstrip("\n")
    indent = body[: len(body) - len(body.lstrip())]
    return f"{indent}{MAGIC_MARKER}{body.lstrip()}\n"


def _unmasked(text: str) -> str:
    return "".join(
        line.replace(MAGIC_MARKER, "", 1) if line.lstrip().startswith(MAGIC_MARKER) else line
        for line in text.splitlines(keepends=True)
    )


def _split_cells(source: str, first_cell: int) -> list[tuple[int, str]]:
    cells: list[tuple[int, list[str]]] = [(first_cell, [])]
    for line in source.splitlines(keepends=True):
        if line.startswith(CELL_MARKER) and line[len(CELL_MARKER):].strip().isdigit():
            cells.append((int(line[len(CELL_MARKER):]) - 1, []))
        else:
            cells[-1][1].append(line)
    return [(index, "".join(lines)) for index, lines in cells]


def _dumped(document: dict[str, Any], layout: dict[str, Any]) -> bytes:
    return (json.dumps(document, **layout) + "\n").encode("utf-8")
