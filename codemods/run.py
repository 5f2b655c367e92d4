"""Many files: the one entry point of a run over paths (``check_paths``: the CLI, the Python API and
the GitHub Action call it). It finds the files, gives each the rules and fix mode of its own
configuration, checks each once on several processes, answers unchanged ones from the cache, and
checks again, with their summaries, the files that call another checked file's functions (across
every configuration). Nothing here loads LibCST or the analysis: a run answered by the cache never
pays for them; ``check`` checks one file, and is imported only when some file must be checked.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from .summaries import ProjectSummaries, importable_names, project_summaries, written_names
from .config import Overrides, Settings, project_root
from .files import PathError, collect_files
from .registry import RuleSelection
from .report import FileReport, Finding, FixMode
from .source import may_call

if TYPE_CHECKING:
    from .cache import ReportCache
    from .rule import Rule
    from .shard import Shard

PR_SET_PDEATHSIG = 1  # prctl(2)
# Called once a file is checked (or answered by the cache), with how many are and how many there are.
Progress = Callable[[int, int], None]


@dataclass
class Checked:
    reports: list[FileReport]  # one a file, in the order of the files found
    errors: list[PathError] = field(default_factory=list)  # paths that could not be checked
    notices: list[str] = field(default_factory=list)  # worth saying, not errors (a folder with nothing to check)


def check_paths(
    paths: Sequence[str | Path],
    overrides: Overrides = Overrides(),
    settings: Settings | None = None,
    *,
    fixing: bool = False,
    jobs: int | None = None,
    cache: ReportCache | None = None,
    shard: Shard | None = None,
    force_exclude: bool = False,
    progress: Progress | None = None,
) -> Checked:
    """Check (or, ``fixing``, fix) the files under ``paths`` (those of ``shard``), each with the
    settings of its own configuration (``settings``: each file's nearest ``pyproject.toml`` by
    default) and ``overrides`` on top; ``ConfigError`` for a configuration that cannot be read,
    before any file is checked. ``force_exclude``: a path named in ``paths`` is excluded as a
    folder's walk would exclude it."""
    settings = settings or Settings()
    excluded_named = excluded_when_named(settings, overrides) if force_exclude else None
    found = collect_files(paths, excluded_by(settings, overrides), excluded_named)
    if shard is not None:
        found.files = shard.select(found.files, project_root())
    groups: dict[tuple[tuple[str, ...], FixMode], list[int]] = {}
    for index, path in enumerate(found.files):
        rules, mode = rules_and_mode(settings, overrides, path, fixing)
        groups.setdefault((rules.codes, mode), []).append(index)
    selections = [(RuleSelection(codes), mode, indexes) for (codes, mode), indexes in groups.items()]
    reports = _check_groups(found.files, selections, jobs, cache, progress)
    for path, report in zip(found.files, reports):
        if not overrides.shows_hints(settings.for_path(path)):
            hide_hints(report)
    return Checked(reports, found.errors, found.notices)


def hide_hints(report: FileReport) -> None:
    """Leave out the report's hints (findings that rest on a guess), which are shown only when
    asked for, and count them; the cache keeps them, so asking needs no new check."""
    findings = without_hints(report.findings)
    report.hints_hidden, report.findings = len(report.findings) - len(findings), findings


def without_hints(findings: list[Finding]) -> list[Finding]:
    return [finding for finding in findings if not finding.hint]


def excluded_by(settings: Settings, overrides: Overrides) -> Callable[[Path], bool]:
    """Whether a path is excluded, by the settings of the folder it is in."""
    return lambda path: overrides.applied(settings.for_path(path.parent)).excludes(path)


def excluded_when_named(settings: Settings, overrides: Overrides) -> Callable[[Path], bool]:
    """``--force-exclude``: whether a path named on the command line is excluded: it, or a folder
    above it inside the folder its settings' patterns are relative to (as ruff's)."""

    def excluded(path: Path) -> bool:
        absolute = Path(os.path.abspath(path))
        for candidate in (absolute, *absolute.parents):
            config = overrides.applied(settings.for_path(candidate.parent))
            root = Path(os.path.abspath(config.root or Path.cwd()))
            if candidate != absolute and root not in candidate.parents:
                return False
            if config.excludes(candidate):
                return True
        return False

    return excluded


def rules_and_mode(settings: Settings, overrides: Overrides, path: Path, fixing: bool) -> tuple[RuleSelection, FixMode]:
    """The rules that check ``path`` and the fixes they may make (``ConfigError`` from its
    settings)."""
    config = settings.for_path(path)
    rules = RuleSelection(overrides.codes(config, path))
    if not fixing:
        return rules, FixMode.NONE
    return rules, FixMode.UNSAFE if overrides.unsafe(config) else FixMode.SAFE


def check_files(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    jobs: int | None = None,
    cache: ReportCache | None = None,
) -> list[FileReport]:
    """Reports for ``files``, in order, all checked by ``rules`` in ``mode`` (``check_paths``
    gives each file its own)."""
    return _check_groups(files, [(rules, mode, range(len(files)))], jobs, cache, None)


def _check_groups(
    files: Sequence[Path],
    groups: Sequence[tuple[Sequence[type[Rule]], FixMode, Sequence[int]]],
    jobs: int | None,
    cache: ReportCache | None,
    progress: Progress | None,
) -> list[FileReport]:
    """Reports for ``files``, in order, each checked by the rules and in the mode of its group (the
    indexes of its files), computed on ``jobs`` processes (all cores by default); with ``cache``,
    reports of unchanged files are taken from it and new ones kept in it.

    Every file is checked once; then the files that import a function (or a class, for its
    methods) of another checked file, of any group, whose summary matters (it backwards an
    argument, or returns a tensor it backwarded) are checked again with those summaries, and so
    are the files the prefilter skipped that name one."""
    reports: list[FileReport] = [FileReport(str(path)) for path in files]
    done = iter(range(1, len(files) + 1))

    def checked() -> None:
        if progress is not None:
            progress(next(done), len(files))

    for rules, mode, indexes in groups:
        for index, report in zip(indexes, _cached_map([files[i] for i in indexes], rules, mode, jobs, None, cache, checked)):
            reports[index] = report
    project = project_summaries((report.path, report.exports) for report in reports if report.exports)
    importable, helpers = importable_names(project), written_names(project)
    for rules, mode, indexes in groups:
        again = [
            i
            for i in indexes
            if reports[i].imports & importable
            or reports[i].prefiltered
            and (original := reports[i].original) is not None
            and may_call(original, helpers)
        ]
        for index, report in zip(again, _cached_map([files[i] for i in again], rules, mode, jobs, project, cache)):
            reports[index] = report
    return reports


def _cached_map(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode,
    jobs: int | None,
    project: ProjectSummaries | None,
    cache: ReportCache | None,
    checked: Callable[[], None] = lambda: None,
) -> list[FileReport]:
    """Reports for ``files``; ``checked`` is called as each is known. A report from the cache is of
    the very path asked for (``ReportCache.load``), and each new one is kept as soon as it is
    known, so a run killed midway keeps what it had checked."""
    if cache is None:
        return _map_files(files, rules, mode, jobs, project, lambda report: checked())
    reports: list[FileReport | None] = []
    for path in files:
        try:
            data = Path(path).read_bytes()
        except OSError:
            reports.append(None)  # checking it says why it cannot be read
            continue
        reports.append(cache.load(cache.key(path, data, rules, mode, project)))
        if reports[-1] is not None:
            checked()
    missing = [i for i, report in enumerate(reports) if report is None]

    def kept(report: FileReport) -> None:
        if report.original is not None:  # keyed by the bytes the check read, even if the file changed since
            cache.store(cache.key(report.path, report.original, rules, mode, project), report)
        checked()

    for index, report in zip(missing, _map_files([files[i] for i in missing], rules, mode, jobs, project, kept)):
        reports[index] = report
    return [report for report in reports if report is not None]  # (every one is known by now)


def _map_files(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode,
    jobs: int | None,
    project: ProjectSummaries | None,
    known: Callable[[FileReport], None],
) -> list[FileReport]:
    """Reports for ``files``, in order; ``known`` is called with each as it is known."""
    if not files:
        return []
    # LibCST and the analysis load here, in this process before it forks the workers, and only when
    # some file is not answered by the cache.
    from .check import check_file

    jobs = jobs or os.cpu_count() or 1
    rules = tuple(rules)  # a selection's rules are imported here too, once, not by each worker
    if jobs == 1 or len(files) < 2 * jobs:
        return list(_each_known((check_file(path, rules, mode, project) for path in files), known))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork"), initializer=_die_with, initargs=(os.getpid(),)) as pool:
        # Small chunks: the files that must be parsed cluster (a folder of long training scripts),
        # and chunks of 32 files left one worker idle at the end (0.2 s of diffusers' cold check).
        chunk = max(1, min(4, len(files) // (jobs * 4)))
        try:
            # Each chunk's future, with the index of its first file.
            chunks = {
                pool.submit(_check_files_job, files[first : first + chunk], rules, mode, project): first for first in range(0, len(files), chunk)
            }
            found: dict[int, FileReport] = {}
            for done in as_completed(chunks):  # each known as soon as it is, not behind a slower file
                for index, report in enumerate(done.result(), chunks[done]):
                    known(report)
                    found[index] = report
            return [found[index] for index in range(len(files))]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _each_known(reports: Iterator[FileReport], known: Callable[[FileReport], None]) -> Iterator[FileReport]:
    for report in reports:
        known(report)
        yield report


def _die_with(parent: int) -> None:
    """A worker's first step: on Linux, be killed when ``parent`` dies, SIGKILL included (else a
    killed run leaves its workers waiting for work for ever); ``parent`` may have died already,
    before the kernel was asked."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if os.getppid() != parent:
        os._exit(1)


def _check_files_job(files: Sequence[Path], rules: Sequence[type[Rule]], mode: FixMode, project: ProjectSummaries | None) -> list[FileReport]:
    from .check import check_file  # loaded by the process that forked this one

    return [check_file(path, rules, mode, project) for path in files]
