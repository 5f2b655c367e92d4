"""Jupyter notebooks as Python source, and back.

The code cells, in order, become one Python source that the analysis, the rules and the runner read
like any script: each cell after the first starts with a marker line naming it, and each line of
IPython's magics and shell lines (``%matplotlib inline``, ``!pip install …``, ``%%time``, ``cd data``),
with the lines a backslash continues them onto, becomes a ``pass`` statement whose comment keeps the
line as it was written, at the indentation IPython runs it at. A statement, not a comment: LibCST
keeps a comment with the statement below it, which a fix may move (into a loop) or remove. A rewrite
of that source is written back into the cells it changed, and nowhere else, and only where it left
each of those lines as it was: the new source replaces the old one's text in the JSON, laid out as
the old one was, so outputs, metadata, untouched cells, the magics and the file's own indentation
and key order keep their bytes.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from .diffs import file_lines, text_diff

# A statement, not a comment: LibCST keeps a comment with the statement below it, so a fix that
# removes a cell's first statement would take a comment marker away with it.
CELL_MARKER = "pass  # gradfix-cell "
MAGIC_MARKER = "pass  # gradfix-magic: "
# Cell magics whose body is still Python that runs; any other cell magic makes the cell not Python.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "autoreload"}
# IPython's line magics (its own, and the shell commands it aliases), which it runs without their
# `%` (automagic): `cd data`, `pip install torch`. A line of them that is Python too (`ls -la`, `pwd`)
# is read as Python, as IPython reads it in a cell of more than one line.
AUTOMAGICS = frozenset(
    "alias alias_magic autoawait autocall automagic bookmark cat cd code_wrap colors conda config cp debug dhist dirs"
    " doctest_mode ed edit env gui hist history killbgscripts ldir lf lk ll load load_ext loadpy logoff logon logstart"
    " logstate logstop ls lsmagic lx macro magic mamba matplotlib micromamba mkdir mv notebook page pastebin pdb pdef pdoc"
    " pfile pinfo pinfo2 pip popd pprint precision prun psearch psource pushd pwd pycat pylab quickref recall rehashx"
    " reload_ext rep rerun reset reset_selective rm rmdir run save sc set_env sx system tb time timeit unalias unload_ext"
    " uv who who_ls whos xdel xmode".split()
)
# A line magic's name (one of AUTOMAGICS) and what may follow a command's name but never a name
# that starts a statement of Python: not a bracket, an operator or a keyword (`config = dict(` is
# Python, `cd data`, `rm -rf out` and `run "train.py"` are not).
_AUTOMAGIC_LINE = re.compile(r"^\s*(\w+)[ \t]+(?!(?:and|or|not|in|is|if|else)\b)(?:[\w\"'$~{./]|-[\w-]|-\s*$)")
# `%magic`, `!shell`, `?name`, `name?`, and `files = !ls`, where a statement starts.
# (IPython's help, `x?` and `?x`, takes wildcards too: `torch.*Tensor?` searches the names.)
_MAGIC_LINE = re.compile(r"^\s*[%!]|^\s*\?{1,2}[\w.*]|^\s*[\w.*]+\?{1,2}\s*$|^\s*[\w.\[\], ]+=\s*[%!]")
_PYTHON_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_LINE_REFERENCE = re.compile(r"\bline (\d+)\b")
_BLANK = re.compile(r"[ \t\n\r]*")
# Half of a UTF-16 pair, alone: JSON's "\ud800" escape reads as one, and no UTF-8 text holds it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Reading a notebook's JSON takes memory: a few times its size in strings (outputs: images, logs),
# and some 150 bytes for each value (object, array, string or number), which `[{},{},…]` packs in
# three bytes. A notebook over either limit is refused before its JSON is decoded; its code cells
# are then held to the limits of any code (``source.MAX_LINES``, ``source.MAX_WORDS_AND_SYMBOLS``).
# Code at those limits with 10 MB of outputs took 295 MB to check (benchmarks/file_size_memory.py).
MAX_NOTEBOOK_BYTES = 10 << 20
MAX_NOTEBOOK_VALUES = 500_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


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
        too_large = _over_json_limits(data)
        if too_large:
            raise NotebookError(f"{path}: too large to check: {too_large} (clear its outputs, or exclude it)")
        try:
            self.text = data.decode("utf-8")
            self.document: dict[str, Any] = json.loads(self.text, object_pairs_hook=_object_of_unique_keys)
            malformed = _malformation(self.document)
            self._spans = {} if malformed else _source_spans(self.text)
        except (UnicodeDecodeError, ValueError) as error:
            raise NotebookError(f"{path}: not a Jupyter notebook ({type(error).__name__}: {error})") from None
        except RecursionError:
            raise NotebookError(f"{path}: not a Jupyter notebook (its JSON is nested too deep to read)") from None
        if malformed:
            raise NotebookError(f"{path}: not a Jupyter notebook ({malformed})")
        cells = self.document["cells"]
        self.language = str(self.document.get("metadata", {}).get("language_info", {}).get("name", "python"))
        self.code_cells = [i for i, cell in enumerate(cells) if cell.get("cell_type") == "code"]
        lines: list[str] = []
        self._cell_starts: list[tuple[int, int]] = []  # (first source line, cell index), in order
        self._cell_lengths: dict[int, int] = {}  # each cell's lines in ``source``
        self._indents: dict[int, str] = {}  # the indentation IPython strips from a cell before running it
        self._magics: dict[int, list[str]] = {}  # each cell's masked lines, which no rewrite may change
        for index in self.code_cells:
            if lines or self._cell_starts:
                lines.append(f"{CELL_MARKER}{index + 1}\n")
            self._cell_starts.append((len(lines) + 1, index))
            self._indents[index], source = _without_leading_indent(cell_source(cells[index]))
            masked = [line if line.endswith(("\n", "\r")) else line + "\n" for line in _masked(source)]
            self._magics[index] = _magic_lines("".join(masked))
            self._cell_lengths[index] = len(masked)
            lines += masked
        self.source = "".join(lines).encode("utf-8")

    @property
    def is_python(self) -> bool:
        return self.language.lower() == "python"

    def locate(self, line: int) -> CellLine:
        """The cell and in-cell line of a line of ``source``; the line that marks the next cell's
        start (where Python places an error found at a cell's end) is its cell's last line."""
        first, index = max((start for start in self._cell_starts if start[0] <= line), default=self._cell_starts[0])
        return CellLine(index + 1, max(1, min(line - first + 1, self._cell_lengths[index])))

    def describe(self, message: str) -> str:
        """``message`` with each ``line N`` of ``source`` named as the notebook shows it."""

        def relabel(match: re.Match[str]) -> str:
            place = self.locate(int(match.group(1)))
            return f"cell {place.cell}, line {place.line}"

        return _LINE_REFERENCE.sub(relabel, message)

    def with_source(self, rewritten: bytes) -> bytes:
        """The notebook with its code cells replaced by those of ``rewritten`` (a rewrite of
        ``source``); only the text of the sources that changed is replaced. Raises
        ``NotebookError`` for a rewrite that moves code across cells, or moves, changes or removes
        a line of IPython syntax: it is written back as it was, where it was."""
        cells = _split_cells(rewritten.decode("utf-8"), self.code_cells[0]) if self.code_cells else []
        if [index for index, _ in cells] != self.code_cells:
            raise NotebookError(f"{self.path}: a rewrite moved code across cells; the notebook was left as it was")
        edits = []
        for index, text in cells:
            if _magic_lines(text) != self._magics[index]:
                raise NotebookError(f"{self.path}: a rewrite moved a magic or shell line of cell {index + 1}; the notebook was left as it was")
            old = cell_source(self.document["cells"][index])
            new = _unmasked(text)
            if not old.endswith("\n") and new.endswith("\n"):
                new = new[:-1]
            if new == _without_leading_indent(old)[1]:
                continue
            indent = self._indents[index]
            new = "".join(indent + line if line.strip() else line for line in _code_lines(new))
            if new != old:
                edits.append((self._spans[index], self._source_text(self._spans[index], new)))
        text = self.text
        for span, replacement in sorted(edits, key=lambda edit: edit[0].start, reverse=True):
            text = text[: span.start] + replacement + text[span.end :]
        return text.encode("utf-8")

    def _source_text(self, span: _Span, new: str) -> str:
        """``new`` as the JSON of a cell's source, in the layout of the one at ``span``: a string
        for a string, else a list of lines laid out as its lines were (each line kept as it was
        written where it did not change)."""
        escaped = "\\u" in self.text and self.text.isascii()  # written with ensure_ascii
        if not span.items:
            if self.text[span.start] == '"':
                return json.dumps(new, ensure_ascii=escaped)
            return json.dumps(new.splitlines(keepends=True), ensure_ascii=escaped)
        written = {json.loads(self.text[item.start : item.end]): self.text[item.start : item.end] for item in span.items}
        lines = [written.get(line) or json.dumps(line, ensure_ascii=escaped) for line in new.splitlines(keepends=True)]
        first, last = span.items[0], span.items[-1]
        opening, closing = self.text[span.start : first.start], self.text[last.end : span.end]
        between = self.text[first.end : span.items[1].start] if len(span.items) > 1 else "," + opening[1:]
        return opening + between.join(lines) + closing if lines else "[]"

    def json_line(self, cell: int, line: int) -> int:
        """The line of the notebook's file that holds line ``line`` of cell ``cell`` (1-based, as
        ``CellLine`` counts): where the source is a list of lines, that line's item, else the
        source's first line."""
        span = self._spans.get(cell - 1)
        if span is None:
            return 1
        items = span.items
        offset = items[min(line, len(items)) - 1].start if items else span.start
        return self.text.count("\n", 0, offset) + 1

    def cell_diffs(self, rewritten_notebook: bytes, name: str) -> str:
        """A unified diff of the notebook's file (``git apply`` takes it), each hunk headed with
        the cell it changes (where git shows a function's name)."""
        after = file_lines(rewritten_notebook.decode("utf-8"))
        return text_diff(file_lines(self.text), after, name, self._cell_named)

    def _cell_named(self, json_line: int) -> str:
        """``cell N`` for the cell whose source holds that line of the file, else ""."""
        lines = file_lines(self.text)
        start = sum(map(len, lines[: json_line - 1]))
        end = start + len(lines[json_line - 1]) if json_line <= len(lines) else start
        return next((f"cell {index + 1}" for index, span in self._spans.items() if span.start < end and start < span.end), "")


@dataclass(frozen=True)
class _Span:
    start: int  # where a cell's source value starts and ends in the JSON text
    end: int
    items: tuple[_Span, ...] = ()  # a list's items


def _source_spans(text: str) -> dict[int, _Span]:
    """Where each cell's ``source`` is in a notebook's JSON text, by cell index (text that
    ``json.loads`` read as a notebook)."""
    return _Scanner(text).source_spans()


class _Scanner:
    """Positions in JSON text, read as ``json`` reads it; values of no interest are skipped by
    ``json``'s own decoder."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._decoder = json.JSONDecoder()

    def source_spans(self) -> dict[int, _Span]:
        spans: dict[int, _Span] = {}

        def cell(index: int, start: int) -> int:
            def member(key: str, value: int) -> int:
                if key != "source":
                    return self._skipped(value)
                items: list[_Span] = []

                def source_line(_: int, item: int) -> int:
                    items.append(_Span(item, self._skipped(item)))
                    return items[-1].end

                if self.text[value] == "[":
                    end = self._array(value, source_line)
                else:
                    end = self._skipped(value)
                spans[index] = _Span(value, end, tuple(items))
                return end

            return self._object(start, member)

        def top(key: str, value: int) -> int:
            return self._array(value, cell) if key == "cells" else self._skipped(value)

        self._object(self._blank(0), top)
        return spans

    def _blank(self, position: int) -> int:
        blank = _BLANK.match(self.text, position)
        return position if blank is None else blank.end()

    def _skipped(self, position: int) -> int:
        return self._decoder.raw_decode(self.text, position)[1]

    def _object(self, position: int, member: Callable[[str, int], int]) -> int:
        """Past the object at ``position``; ``member(key, where its value starts)`` returns
        where the value ends."""
        position = self._blank(position + 1)
        while self.text[position] != "}":
            key, position = json.decoder.scanstring(self.text, position + 1)  # type: ignore[attr-defined]  # (not in the stubs)
            position = self._blank(member(key, self._blank(self._blank(position) + 1)))
            if self.text[position] == ",":
                position = self._blank(position + 1)
        return position + 1

    def _array(self, position: int, item: Callable[[int, int], int]) -> int:
        """Past the array at ``position``; ``item(index, where it starts)`` returns where it ends."""
        position, index = self._blank(position + 1), 0
        while self.text[position] != "]":
            position, index = self._blank(item(index, position)), index + 1
            if self.text[position] == ",":
                position = self._blank(position + 1)
        return position + 1


def _over_json_limits(data: bytes) -> str:
    """How a notebook's bytes are over ``MAX_NOTEBOOK_BYTES``, or hold more values than
    ``MAX_NOTEBOOK_VALUES`` (about as many as the brackets and commas outside strings), or ""."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        return f"{len(data):,} bytes, over gradfix's limit of {MAX_NOTEBOOK_BYTES:,} for a notebook"
    if len(data) > MAX_NOTEBOOK_VALUES:
        structure = _JSON_STRING.sub(b"", data)
        values = sum(map(structure.count, (b"{", b"[", b",")))
        if values > MAX_NOTEBOOK_VALUES:
            return f"about {values:,} JSON values, over gradfix's limit of {MAX_NOTEBOOK_VALUES:,} for a notebook"
    return ""


def _object_of_unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, read only where no key is repeated in it: readers disagree on which of two
    ``cells`` is the notebook (``json`` keeps the last), and a rewrite must edit the one that was
    checked."""
    document = dict(pairs)
    if len(document) < len(pairs):
        repeated = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"the key {json.dumps(repeated)} is repeated in one object")
    return document


def _malformation(document: Any) -> str:
    """What makes ``document`` (a notebook's JSON) not a notebook this module can read, or ""."""
    if not isinstance(document, dict):
        return "not a JSON object"
    if "cells" not in document:
        return "no `cells`"
    if not isinstance(document["cells"], list):
        return "`cells` is not a list"
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        return "`metadata` is not an object"
    language = metadata.get("language_info", {})
    if not isinstance(language, dict):
        return "metadata.language_info is not an object"
    if not isinstance(language.get("name", ""), str):
        return "metadata.language_info.name is not text"
    for number, cell in enumerate(document["cells"], start=1):
        if not isinstance(cell, dict):
            return f"cell {number} is not an object"
        source = cell.get("source", "")
        if cell.get("cell_type") == "code" and not (
            isinstance(source, str) or isinstance(source, list) and all(isinstance(line, str) for line in source)
        ):
            return f"the source of cell {number} is not text"
        if cell.get("cell_type") == "code" and (surrogate := _LONE_SURROGATE.search(cell_source(cell))):
            return f"the source of cell {number} holds a lone surrogate ({ascii(surrogate[0])[1:-1]}), which is not text"
    return ""


def cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _without_leading_indent(source: str) -> tuple[str, str]:
    """The indentation of a cell's first line, and the cell without it where a line starts with
    it: IPython strips it so before it runs the cell (a cell pasted with every line indented)."""
    lines = _code_lines(source)
    indent = lines[0][: len(lines[0]) - len(lines[0].lstrip(" \t"))] if lines else ""
    if not indent or not lines[0].strip():
        return "", source
    return indent, "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)


def _code_lines(text: str) -> list[str]:
    """``text``'s lines as Python counts them: ended by ``\\n``, ``\\r\\n`` or ``\\r`` (``str.splitlines``
    also ends one at a form feed or a line separator, which strings and comments may hold)."""
    return _PYTHON_LINE.findall(text)


def _masked(source: str) -> list[str]:
    """A cell's lines with IPython's syntax masked. A cell magic whose body is not Python masks the
    whole cell; one whose body is (``%%time``, ``%%capture``) runs that body as a cell of its own,
    which may start with a cell magic in turn (``%%capture`` then ``%%bash``)."""
    lines = _code_lines(source)
    if lines and lines[0].startswith("%%"):
        magic = (lines[0][2:].split() or [""])[0]
        if magic not in PYTHON_CELL_MAGICS:
            return [_mask(line, "") for line in lines]
        return [_mask(lines[0], ""), *_masked("".join(lines[1:]))]
    return _masked_magics(lines)


def _masked_magics(lines: list[str]) -> list[str]:
    """``lines`` with each line of IPython syntax masked at its indentation, and the lines a
    backslash at its end continues it onto (IPython joins them) at the same one."""
    masked: list[str] = []
    indent = None  # of the line of IPython syntax being masked
    for line in lines:
        if indent is None and _is_ipython_syntax(line, masked):
            indent = line[: len(line) - len(line.lstrip(" \t"))]
        masked.append(line if indent is None else _mask(line, indent))
        if not line.rstrip("\r\n").endswith("\\"):
            indent = None
    return masked


def _is_ipython_syntax(line: str, before: list[str]) -> bool:
    """Whether ``line`` looks like IPython syntax, does not compile, and starts a statement: it is
    not inside brackets or a string that the code ``before`` it opened."""
    automagic = _AUTOMAGIC_LINE.match(line)
    looks_like_it = _MAGIC_LINE.search(line) or automagic is not None and automagic[1] in AUTOMAGICS
    return bool(looks_like_it) and not _compiles(line.strip()) and _ends_statements(before)


def _compiles(line: str) -> bool:
    try:
        compile(line, "<cell>", "exec")
    except SyntaxError:
        return False
    return True


def _ends_statements(before: list[str]) -> bool:
    """Whether the code ``before`` a line leaves no bracket or string open (the line would continue it)."""
    try:
        list(tokenize.generate_tokens(io.StringIO("".join(before)).readline))  # raises where one is left open
    except (tokenize.TokenError, SyntaxError):
        return False
    return True


def _mask(line: str, indent: str) -> str:
    """``line`` as a statement at ``indent`` whose comment is the line as it was written."""
    text = line.rstrip("\r\n")
    ending = line[len(text) :] or "\n"
    return f"{indent}{MAGIC_MARKER}{text}{ending}"


def _unmasked(text: str) -> str:
    return "".join(_unmasked_line(line) for line in _code_lines(text))


def _unmasked_line(line: str) -> str:
    code = line.lstrip(" \t")
    return code[len(MAGIC_MARKER) :] if code.startswith(MAGIC_MARKER) else line


def _magic_lines(text: str) -> list[str]:
    """The lines of masked IPython syntax in ``text``, as they are masked."""
    return [line for line in _code_lines(text) if line.lstrip(" \t").startswith(MAGIC_MARKER)]


def _split_cells(source: str, first_cell: int) -> list[tuple[int, str]]:
    cells: list[tuple[int, list[str]]] = [(first_cell, [])]
    for line in _code_lines(source):
        if line.startswith(CELL_MARKER) and line[len(CELL_MARKER) :].strip().isdigit():
            cells.append((int(line[len(CELL_MARKER) :]) - 1, []))
        else:
            cells[-1][1].append(line)
    return [(index, "".join(lines)) for index, lines in cells]
