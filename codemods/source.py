"""A file's bytes before any parse: their text (``source_text``, the one decoder of source bytes;
``decoded``, refused where the code is too large to check: ``over_size_limits``), and the prefilter
that tells, from the bytes alone, whether a file could backward a graph. A file that could not, and that Python parses, is never parsed by LibCST
(``prefiltered_report``).

Plain text tests: this module never loads LibCST (a run answered by the cache, or by the
prefilter, never pays for it).
"""

from __future__ import annotations

import io
import re
import symtable
import tokenize
import warnings
from typing import Iterable

from .summaries import ProjectSummaries, written_names
from .frameworks import TRAINER_HOOKS
from .notebook import Notebook, NotebookError, is_notebook
from .report import FileReport, SourceError

_BACKWARD_CALL = re.compile(rb"backward\s*\(")
# A check's memory grows with the code it parses: LibCST's tree takes about 1.6 KB for each word or
# symbol and 6 KB more for each line (a statement's own nodes), the analysis a third on top
# (benchmarks/file_size_memory.py: 1 MB of training code took 800 MB, 1 MB of `a;a;…` 2 GB). Code
# over either limit is refused before anything parses it: the largest code within them took at most
# 251 MB to check and 328 MB to fix, and 200 KB of training code (53,000 words and symbols, 5,800
# lines) is well inside.
MAX_LINES = 10_000
MAX_WORDS_AND_SYMBOLS = 70_000
# Each byte's kind: part of a word (a name, number or keyword: ``w``), a space, or a symbol (``s``).
_BYTE_KINDS = b"".join(
    b"w" if re.match(rb"[\w\x80-\xff]", byte) else b" " if re.match(rb"\s", byte) else b"s" for byte in (bytes([code]) for code in range(256))
)
# A class reaches a trainer's base only through a name whose last part the file writes (imported,
# or read as an attribute), and a trainer backwards only the hook the file's class defines: a
# ``def`` of it (``FileAnalysis.trainer_hooks``; the name alone is in every file that calls
# ``trainer.fit``, or mentions the hook).
_TRAINER_HOOKS = [
    (
        hook.encode(),
        re.compile(rb"def[\s\\]+%s[\s\\]*\(" % hook.encode()),
        {base.rpartition(".")[2].encode() for base, its_hook in TRAINER_HOOKS.items() if its_hook == hook},
    )
    for hook in dict.fromkeys(TRAINER_HOOKS.values())
]


def may_backward(source: bytes, helpers: Iterable[tuple[bytes, bytes, bytes]] = ()) -> bool:
    """Whether a file's text could backward anything in a way ``frameworks``' table knows: every
    row's method or function is called as ``…backward(`` or lives in ``autograd``; a trainer
    backwards what the hooks the file defines return; ``helpers`` are other checked files' functions that backward, each as the module,
    name and method a file that calls it writes (``summaries.written_names``).
    ("backward" alone would also take every "backward compatibility" of a docstring; plain
    substring tests first, as one regular expression of alternatives is slow.)"""
    if b"autograd" in source:
        return True
    if any(
        hook in source and any(base in source for base in bases) and definition.search(source) is not None
        for hook, definition, bases in _TRAINER_HOOKS
    ):
        return True
    if b"backward" in source and _BACKWARD_CALL.search(source) is not None:
        return True
    return may_call(source, helpers)


_CLASS_STATEMENT = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)", re.MULTILINE)


def module_class_names(source: bytes) -> frozenset[bytes]:
    """The names of the classes a module's text may define as ``nn.Module`` classes with a forward,
    which its exports describe (``summaries.ExportedModuleClass``): a class whose bases spell
    ``Module`` (as ``nn.Module``, ``torch.nn.Module`` and ``Module`` do), or name such a class of
    the module. (A base imported under another name is missed: its class stays unread.)"""
    if b"Module" not in source or b"forward" not in source:
        return frozenset()
    statements = [(match.group(1), match.group(2)) for match in _CLASS_STATEMENT.finditer(source)]
    names = {name for name, bases in statements if b"Module" in bases}
    grown = True
    while grown:
        more = {name for name, bases in statements if name not in names and any(re.search(rb"\b%s\b" % n, bases) for n in names)}
        names |= more
        grown = bool(more)
    return frozenset(names)


def may_call(source: bytes, helpers: Iterable[tuple[bytes, bytes, bytes]]) -> bool:
    """Whether a file's text could call one of ``helpers`` (module, name and method, as
    ``summaries.written_names`` spells them)."""
    return any(module in source and name in source and (not method or re.search(rb"\b%s\s*\(" % method, source)) for module, name, method in helpers)


def decoded(data: bytes, path: str) -> tuple[str, str]:
    """The text of a file's bytes and the encoding they declare; ``SourceError`` for bytes that are
    not text in that encoding, or code too large to check (``over_size_limits``)."""
    if b"\0" in data:
        raise SourceError(f"{path}: binary file (contains NUL bytes), skipped")
    too_large = over_size_limits(data)
    if too_large:
        raise SourceError(f"{path}: too large to check: {too_large} (split the file, or exclude it)")
    try:
        return source_text(data)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        raise SourceError(f"{path}: cannot decode: {error}") from None


def source_text(data: bytes) -> tuple[str, str]:
    """The text of Python source bytes and the encoding they declare (a coding comment, a UTF-8
    byte order mark, else UTF-8), as Python reads them; ``SyntaxError``, ``LookupError`` or
    ``UnicodeDecodeError`` for bytes that are not text in it."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def over_size_limits(code: bytes) -> str:
    """How code is over ``MAX_LINES`` or ``MAX_WORDS_AND_SYMBOLS``, or "". Words and symbols are
    counted only in code that could hold that many."""
    lines = code.count(b"\n") + code.count(b"\r") - code.count(b"\r\n")
    if lines > MAX_LINES:
        return f"{lines:,} lines, over gradfix's limit of {MAX_LINES:,}"
    if len(code) > MAX_WORDS_AND_SYMBOLS and words_and_symbols(code) > MAX_WORDS_AND_SYMBOLS:
        return f"more words and symbols than gradfix's limit of {MAX_WORDS_AND_SYMBOLS:,}"
    return ""


def words_and_symbols(code: bytes) -> int:
    """How many words (runs of word bytes) and symbols (each other byte but a space) ``code``
    holds: the matches of ``[\\w\\x80-\\xff]+|[^\\w\\s]``, counted in C from each byte's kind
    (``_BYTE_KINDS``) rather than found one match object at a time, up to 70,000 a file over
    70 KB (decoding diffusers' 2,089 files, 102 of them over 70 KB: 0.74 -> 0.34 s CPU)."""
    kinds = code.translate(_BYTE_KINDS)
    return kinds.count(b"s") + kinds.count(b" w") + kinds.count(b"sw") + kinds.startswith(b"w")


def prefiltered_report(data: bytes, path: str, project: ProjectSummaries | None = None) -> FileReport | None:
    """The report of a file that LibCST need not parse: its code cannot backward a graph
    (``may_backward``, calling none of ``project``'s functions) and Python parses it; nothing
    found, or why it cannot be read (not text, not a notebook, too large). None for a file that
    must be parsed."""
    if may_backward(data, written_names(project)):
        return None
    report = FileReport(path, original=data, prefiltered=True)
    try:
        skipped = _notebook_skips_parse(Notebook(data, path), project) if is_notebook(path) else _parses(decoded(data, path)[0])
    except (SourceError, NotebookError) as error:
        report.errors.append(str(error))
        return report
    return report if skipped else None


def _notebook_skips_parse(notebook: Notebook, project: ProjectSummaries | None) -> bool:
    # Its JSON may spell the cells' code with escapes: the cells are prefiltered too.
    return not notebook.is_python or skips_parse(notebook.source, project)


def skips_parse(code: bytes, project: ProjectSummaries | None = None) -> bool:
    """Whether Python code need not be parsed by LibCST: it cannot backward a graph, and Python
    parses it (code too large to check is not parsed here: the check refuses it)."""
    return not may_backward(code, written_names(project)) and not over_size_limits(code) and _parses(code)


def _parses(code: str | bytes) -> bool:
    """Whether Python parses ``code`` (building its symbol table parses it, at about 15% less CPU
    than compiling it). Code it does not parse is parsed by LibCST, to say why (or to find
    syntax newer than this Python, which LibCST reads): a file that cannot be parsed never reads
    as clean."""
    try:
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            symtable.symtable(code.decode("utf-8") if isinstance(code, bytes) else code, "<prefiltered>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
