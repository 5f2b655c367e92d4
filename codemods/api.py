"""gradfix as a library: check or fix one module's source, no files, no processes.

    >>> import gradfix
    >>> result = gradfix.fix(source, path="train.py")
    >>> result.source          # the fixed code (the same type as given: str or bytes)
    >>> result.fixed           # the findings the fixes removed
    >>> result.findings        # the findings left

Or the files under some paths, each with its own configuration, as the command checks them
(``check_paths``): nothing is written.

Bad input (a syntax error, a binary file) is not an exception: ``result.errors`` says why and the
source comes back unchanged. A path ending in ``.ipynb`` reads the source as a notebook's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Sequence, TypeVar

from . import run
from .check import check_source
from .config import Overrides
from .registry import codes_matching, patterns, select_rules
from .report import FileReport, Finding, FixMode

Source = TypeVar("Source", str, bytes)


@dataclass(frozen=True)
class Result(Generic[Source]):
    source: Source  # after the fixes (the input itself for ``check``)
    findings: tuple[Finding, ...]  # what is left
    fixed: tuple[Finding, ...] = ()
    errors: tuple[str, ...] = ()  # why the source could not be checked, if it could not

    @property
    def changed(self) -> bool:
        return bool(self.fixed)


def check(
    source: Source, *, path: str = "<string>", select: Sequence[str] | str = (), ignore: Sequence[str] | str = (), hints: bool = False
) -> Result[Source]:
    """The findings in ``source``, a module's code. ``select`` / ``ignore`` take rule codes,
    prefixes or names, as a list or one comma-separated string (``UnknownRuleError`` for an
    unknown one). ``hints``: also the findings that rest on what gradfix could only guess
    (``Finding.hint``)."""
    return _result(source, _report(source, path, select, ignore, FixMode.NONE), hints)


def fix(
    source: Source,
    *,
    path: str = "<string>",
    select: Sequence[str] | str = (),
    ignore: Sequence[str] | str = (),
    unsafe_fixes: bool = False,
    hints: bool = False,
) -> Result[Source]:
    """``source`` with every fix applied that gradfix can prove (and, with ``unsafe_fixes``, the
    ones that change the maths), with what was fixed and what is left (with ``hints``, the hints
    too: they have no fix)."""
    mode = FixMode.UNSAFE if unsafe_fixes else FixMode.SAFE
    return _result(source, _report(source, path, select, ignore, mode), hints)


def check_paths(
    paths: Sequence[str | Path],
    *,
    select: Sequence[str] | str | None = None,
    ignore: Sequence[str] | str = (),
    fixing: bool = False,
    unsafe_fixes: bool | None = None,
    hints: bool | None = None,
    jobs: int | None = None,
) -> run.Checked:
    """The Python files and notebooks under ``paths`` as ``gradfix check`` (``fixing``: ``gradfix
    fix``) finds them: each with the ``[tool.gradfix]`` table of its nearest ``pyproject.toml``, and
    ``select`` / ``ignore`` / ``unsafe_fixes`` / ``hints`` over it as the command line's options. Nothing is
    written: a fixed file's report holds its new bytes (``rewritten``)."""
    select, ignore = (None if select is None else patterns(select)), patterns(ignore)
    codes_matching([*(select or ()), *ignore])  # UnknownRuleError for a pattern that chooses no rule
    overrides = Overrides(select=None if select is None else tuple(select), ignore=tuple(ignore), unsafe_fixes=unsafe_fixes, hints=hints)
    return run.check_paths(paths, overrides, fixing=fixing, jobs=jobs)


def _report(source: str | bytes, path: str, select: Sequence[str] | str, ignore: Sequence[str] | str, mode: FixMode) -> FileReport:
    data = source.encode("utf-8") if isinstance(source, str) else source
    return check_source(data, select_rules(select, ignore), mode, path)


def _result(source: Source, report: FileReport, hints: bool) -> Result[Source]:
    fixed_source = source
    if report.rewritten is not None:
        fixed_source = report.rewritten.decode("utf-8") if isinstance(source, str) else report.rewritten
    errors = (*report.errors, *report.internal_errors)
    findings = report.findings if hints else run.without_hints(report.findings)
    return Result(fixed_source, tuple(findings), tuple(report.fixed), errors)
