"""Bytes to a tree: LibCST's parse (trusted: its own output is not validated again), and why a
file cannot be parsed: Python's words for a syntax error, nesting too deep for LibCST's parser,
code this Python does not compile.

The tree the analysis reads first, built from Python's own parser, is ``skeleton.py``'s: a builder
of its own, which shares nothing with this module but the file it reads.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from keyword import kwlist
from typing import TYPE_CHECKING

import libcst as cst
from libcst import CSTNode

from .notebook import is_notebook
from .report import SourceError
from .source import decoded

if TYPE_CHECKING:
    from .analysis import FileAnalysis


# LibCST's native parser recurses on the C stack at each level of the tree it builds: some
# thousands of levels (a sum of 12,000 terms, a long `a and b and …` or `elif` chain) overflow
# it, which kills the process (SIGSEGV), and its parse takes seconds long before that. Python's
# own analysis of such a tree would give up anyway (its recursion limit is 1,000 frames).
NESTING_LIMIT = 1000


def parse_source(data: bytes, path: str) -> cst.Module:
    """Parse a file's bytes, or raise ``SourceError`` saying why it cannot be."""
    text, _ = decoded(data, path)
    refuse_deep_nesting(text, path)
    return parse_decoded(data, path)


def parse_decoded(data: bytes, path: str) -> cst.Module:
    """Parse bytes known to be text and not nested too deep, or raise ``SourceError`` saying why
    they cannot be."""
    try:
        return parse_trusted(data)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"{path}:{_syntax_error(data, error)}") from None
    except (RecursionError, MemoryError) as error:
        raise SourceError(f"{path}: cannot parse: {type(error).__name__}") from None


def parse_trusted(data: bytes) -> cst.Module:
    """``cst.parse_module``, without LibCST checking each node the parser builds. Every node's
    constructor validates its fields (whitespace by regular expression, names, parentheses), which
    the parser's own output always passes; that is 12–15% of a parse. (LibCST says as much beside
    ``CSTNode.__post_init__``.) The nodes of gradfix's edits are built outside this call, and are
    validated as usual."""
    validating = CSTNode.__dict__.get("__post_init__")
    if validating is None:  # a LibCST that validates elsewhere: parse as it does
        return cst.parse_module(data)
    CSTNode.__post_init__ = _trusted  # type: ignore[method-assign]
    try:
        return cst.parse_module(data)
    finally:
        CSTNode.__post_init__ = validating  # type: ignore[method-assign]


def _trusted(node: CSTNode) -> None:
    """A node's constructor hook that accepts the node as the parser built it."""


def _syntax_error(data: bytes, error: cst.ParserSyntaxError) -> str:
    """``line: cannot parse: why``; Python's own parser words it best and places it exactly. Where
    it says it noticed the error later ("detected at line N", N counted in the whole module, which
    is no line of a notebook's cell), that is said from the line the error is placed at."""
    try:
        ast.parse(data)
    except SyntaxError as python_error:
        placed = python_error.lineno or 0
        why = _NOTICED_AT.sub(lambda noticed: _noticed_below(int(noticed.group(1)) - placed), python_error.msg)
        return f"{python_error.lineno}: cannot parse: {why}"
    mixed = _first_line_indented_with_tabs_and_spaces(data)
    if mixed is not None:
        return f"{mixed}: cannot parse: Python reads this file, but LibCST, which gradfix parses with, does not ({error.message}): this line's indentation mixes tabs and spaces"
    return f"{error.raw_line}: cannot parse: Python reads this file, but LibCST, which gradfix parses with, does not ({error.message})"


def _first_line_indented_with_tabs_and_spaces(data: bytes) -> int | None:
    """The first line Python indents with both a tab and a space (which LibCST's tokenizer counts
    otherwise than Python's): the usual cause of a file only Python reads."""
    try:
        for token in tokenize.tokenize(io.BytesIO(data).readline):
            if token.type == tokenize.INDENT and "\t" in token.string and " " in token.string:
                return token.start[0]
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


_NOTICED_AT = re.compile(r" \(detected at line (\d+)\)")


def _noticed_below(lines: int) -> str:
    return "" if lines <= 0 else f" (noticed {lines} line{'s' if lines > 1 else ''} below)"


def compile_error(analysis: FileAnalysis, path: str) -> SyntaxError | None:
    """Why Python would not compile the analysed module (its syntax tree, which placing findings
    parsed already), or None. A notebook's cells are compiled one by one where they run, so a
    ``from __future__`` import that opens a later cell is in its place there; and IPython runs a
    cell's top-level ``await``, ``async for`` and ``async with`` in its event loop."""
    flags = 0
    try:
        tree = analysis.python_tree
        if is_notebook(path):
            body = [s for s in tree.body if not (isinstance(s, ast.ImportFrom) and s.module == "__future__")]
            tree = ast.Module(body=body, type_ignores=tree.type_ignores)
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            compile(tree, path, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as error:
        return error
    return None


def refuse_deep_nesting(text: str, path: str) -> None:
    """Raise ``SourceError`` for code that may nest deeper than ``NESTING_LIMIT``."""
    line = _line_nested_deeper_than(text, NESTING_LIMIT)
    if line is not None:
        raise SourceError(f"{path}:{line}: too deeply nested to parse (more than {NESTING_LIMIT} levels)")


def _line_nested_deeper_than(text: str, limit: int) -> int | None:
    """The first line of the first statement whose depth in LibCST's tree of ``text`` may exceed
    ``limit``, or None. Counted as at least that depth: in a statement, each operator, keyword,
    string and bracket may add a level to the element (of those commas separate) it is in; each
    block adds a few, and so does each ``elif`` of a chain, nested in the one before. The count
    stops at a token Python's tokenizer rejects (syntax newer than this Python that LibCST reads,
    such as an f-string in the quotes of the f-string it is in, is not counted past it)."""
    blocks, statement_line, elifs = 0, 0, {}  # elifs: the length of the chain at each column
    brackets = [_Element()]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    try:
        for kind, string, start, _, _ in tokens:
            if kind == tokenize.NAME:
                if not statement_line:
                    statement_line, column = start
                    elifs = {c: n for c, n in elifs.items() if c < column or c == column and string in ("elif", "else")}
                    if string == "elif":
                        elifs[column] = elifs.get(column, 0) + 1
                elif string in _KEYWORDS:
                    brackets[-1].levels += 1
            elif kind == tokenize.OP or kind == tokenize.STRING:
                statement_line = statement_line or start[0]
                if string in "([{":
                    brackets[-1].levels += 1
                    brackets.append(_Element())
                elif string in ")]}" and len(brackets) > 1:
                    inner = _closed(brackets[-1:])
                    brackets.pop()
                    brackets[-1].inner = max(brackets[-1].inner, inner)
                elif string == ",":
                    brackets[-1].end()
                elif string == ";":
                    if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
                        return statement_line
                    brackets = [_Element()]
                else:
                    brackets[-1].levels += 1
            elif kind == tokenize.NEWLINE or kind == tokenize.ENDMARKER:
                if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
                    return statement_line
                brackets, statement_line = [_Element()], 0
            elif kind == tokenize.INDENT:
                blocks += 1
            elif kind == tokenize.DEDENT:
                blocks -= 1
    except (tokenize.TokenError, SyntaxError):
        if 3 * blocks + sum(elifs.values()) + _closed(brackets) > limit:
            return statement_line or 1
    return None


_KEYWORDS = frozenset(kwlist)


class _Element:
    """The levels counted so far in one element of an open bracket (or of a statement)."""

    def __init__(self) -> None:
        self.levels = 0  # tokens of the element itself
        self.inner = 0  # the deepest bracket it holds
        self.deepest = 0  # the deepest element before it in the same bracket

    def end(self) -> None:
        self.deepest = max(self.deepest, self.levels + self.inner)
        self.levels = self.inner = 0


def _closed(brackets: list[_Element]) -> int:
    """The depth of the outermost of ``brackets``, closing every one still open."""
    inner = 0
    for element in reversed(brackets):
        element.inner = max(element.inner, inner)
        element.end()
        inner = element.deepest
    return inner
