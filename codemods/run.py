"""Many files: the one entry point of a run over paths (``check_paths``: the CLI, the Python API and
the GitHub Action call it). It finds the files, gives each the rules and fix mode of its own
configuration and the summaries of the project modules it imports (``project``: read from disk,
named in the run or not), checks each once on several processes, and answers unchanged ones from
the cache. Nothing here loads LibCST or the analysis: a run answered by the cache never
pays for them; ``check`` checks one file, and is imported only when some file must be checked.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence, TypeVar

from .notebook import is_notebook
from .source import may_backward, may_call
from .summaries import Exports, ProjectSummaries, written_names
from .config import Config, Overrides, Settings, project_root
from .files import PathError, collect_files
from .registry import RuleSelection
from .report import FileReport, Finding, FixMode
from .project import ModuleSummaries, ProjectModules, modules_imported

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from .cache import ReportCache
    from .rule import Rule
    from .shard import Shard

PR_SET_PDEATHSIG = 1  # prctl(2)
T = TypeVar("T")
R = TypeVar("R")
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
    in_folder: dict[str, Config] = {}  # a folder as the walk names it -> its settings (looked up, and made absolute, once)
    configs = []
    for folder in map(os.path.dirname, found.files):  # (a file found is no folder)
        if folder not in in_folder:
            in_folder[folder] = settings.in_folder(folder)
        configs.append(in_folder[folder])
    groups: dict[tuple[tuple[str, ...], FixMode], list[int]] = {}
    # The rules and mode of settings without per-file-ignores, which are those of each of their files.
    of_settings: dict[int, tuple[RuleSelection, FixMode]] = {}  # (by id: each folder's settings are one object)
    for index, (path, config) in enumerate(zip(found.files, configs)):
        if config.per_file_ignores:
            rules, mode = configured_rules_and_mode(config, overrides, path, fixing)
        else:
            if id(config) not in of_settings:
                of_settings[id(config)] = configured_rules_and_mode(config, overrides, path, fixing)
            rules, mode = of_settings[id(config)]
        groups.setdefault((rules.codes, mode), []).append(index)
    selections = [(RuleSelection(codes), mode, indexes) for (codes, mode), indexes in groups.items()]
    reports = _check_groups(found.files, selections, jobs, cache, progress, settings)
    for config, report in zip(configs, reports):
        if not overrides.shows_hints(config):
            hide_hints(report)
    return Checked(reports, found.errors, found.notices)


def hide_hints(report: FileReport) -> None:
    """Leave out the report's hints (findings that rest on a guess), which are shown only when
    asked for, and count them; the cache keeps them, so asking needs no new check."""
    findings = without_hints(report.findings)
    report.hints_hidden, report.findings = len(report.findings) - len(findings), findings


def without_hints(findings: list[Finding]) -> list[Finding]:
    return [finding for finding in findings if not finding.hint]


def excluded_by(settings: Settings, overrides: Overrides) -> Callable[[str | Path], bool]:
    """Whether a path a walk found (a folder's, joined with a name in it) is excluded, by the
    settings of the folder it is in (with the command line's exclusions applied, and the folder's
    place below their root worked out, once for each folder, not for each path)."""
    in_folder: dict[str, Callable[[str], bool]] = {}  # a folder as the walk names it -> whether a name in it is excluded

    def excluded(path: str | Path) -> bool:
        folder, name = os.path.split(path)
        if folder not in in_folder:
            in_folder[folder] = overrides.applied(settings.in_folder(folder)).excludes_in(folder)
        return in_folder[folder](name)

    return excluded


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
    return configured_rules_and_mode(settings.for_path(path), overrides, path, fixing)


def configured_rules_and_mode(config: Config, overrides: Overrides, path: Path, fixing: bool) -> tuple[RuleSelection, FixMode]:
    """The rules that check ``path``, whose settings are ``config``, and the fixes they may make."""
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
    return _check_groups(files, [(rules, mode, range(len(files)))], jobs, cache, None, Settings())


def _check_groups(
    files: Sequence[Path],
    groups: Sequence[tuple[Sequence[type[Rule]], FixMode, Sequence[int]]],
    jobs: int | None,
    cache: ReportCache | None,
    progress: Progress | None,
    settings: Settings,
) -> list[FileReport]:
    """Reports for ``files``, in order, each checked by the rules and in the mode of its group (the
    indexes of its files), computed on ``jobs`` processes (all cores by default); with ``cache``,
    reports of unchanged files are taken from it and new ones kept in it (and in the index of the
    run's entries, ``ReportCache.for_run``, once all are known).

    Each file is checked once, with the summaries of the project modules it imports, read from
    disk whether the run names them or not (``project``): first the summaries no one knows yet
    are computed, on the same processes, then the files."""
    contents = [_read(path) for path in files]
    absolute = [os.path.abspath(path) for path in files]  # (the project's modules and the cache's keys name files so, asked often)
    group_of = {index: (rules, mode) for rules, mode, indexes in groups for index in indexes}
    cache = cache.for_run(absolute, [group_of[index] for index in range(len(files))]) if cache is not None else None
    with _Workers(jobs, [rules for rules, _, _ in groups], contents) as workers:
        # A cold run checks every file: those whose own text cannot backward are checked for what
        # Python parses on the workers now, while this process finds what the files import; a file
        # that turns out to call a function of the project that backwards is analysed as the others.
        cold = cache is None or cache.holds_nothing()
        by_text = [i for i, data in enumerate(contents) if cold and data is not None and not is_notebook(str(files[i])) and not may_backward(data)]
        parsed_by_text = workers.start(_prefiltered_job, [(str(files[i]), i) for i in by_text], cost=lambda item: workers.size(item[1]))
        modules = ProjectModules(ModuleSummaries(_module_exports, cache), settings)
        for here, data in zip(absolute, contents):
            modules.read_already(here, data)
        if cache is not None and (kept := cache.load_imports(absolute)) is not None:
            modules.recall(kept)
        unknown = modules.summaries.unknown(modules_imported(modules, ((here, data) for here, data in zip(absolute, contents) if data is not None)))
        # A module that is also a file of the run is checked by the job that computes its exports, from
        # the same analysis, with no project: the report stands where the file's project turns out
        # empty, or to hold only functions the file does not call (``_calls_none_of``), and is made
        # again with it where not. Only a file whose project is known now, and is not empty, is not
        # checked there.
        file_holding = {data: index for index, data in enumerate(contents) if data is not None}
        pending = set(unknown)

        def module_work(data: bytes) -> ModuleWork:
            index = file_holding.get(data)
            if index is None:
                return data, None
            if not any(modules.module_bytes(file) in pending for _, file in modules.imported(absolute[index], data)) and modules.project_for(
                absolute[index], data
            ):
                return index, None
            rules, mode = group_of[index]
            return index, (tuple(rules), mode, str(files[index]))

        checked_with_no_project: dict[int, FileReport] = {}
        for data, (exports, report) in zip(
            unknown, workers.map(_module_exports_job, [module_work(data) for data in unknown], cost=lambda work: workers.size(work[0]))
        ):
            modules.summaries.learn(data, exports)
            if report is not None:
                checked_with_no_project[file_holding[data]] = report
        projects = [modules.project_for(here, data) if data is not None else {} for here, data in zip(absolute, contents)]
        checked_early = {
            index: report for index, report in checked_with_no_project.items() if _calls_none_of(files[index], contents[index], projects[index])
        }
        for index, report in zip(by_text, parsed_by_text()):
            if report is not None and _calls_none_of(files[index], contents[index], projects[index]):
                report.original = contents[index]  # (``_prefiltered_job`` did not send the bytes back)
                checked_early[index] = report
        if cache is not None and (found := modules.found()) is not None:
            cache.store_imports(absolute, found)
        reports: list[FileReport] = [FileReport(str(path)) for path in files]
        done = iter(range(1, len(files) + 1))

        def checked() -> None:
            if progress is not None:
                progress(next(done), len(files))

        for rules, mode, indexes in groups:
            work = [(files[i], i, projects[i]) for i in indexes]
            answered = {position: checked_early[i] for position, i in enumerate(indexes) if i in checked_early}
            for index, report in zip(indexes, _cached_map(work, rules, mode, workers, cache, checked, answered, modules.digest)):
                reports[index] = report
        if cache is not None:
            cache.keep_index()
        return reports


# A file to check: its path, the index of the run's file (``_Workers.size``), and the summaries
# of the project modules it imports.
Work = tuple[Path, int, ProjectSummaries]


def _calls_none_of(path: Path, data: bytes | None, project: ProjectSummaries) -> bool:
    """Whether the analysis of the file reads nothing of ``project``: it reads a summary only where
    the file calls its function, and a call writes the module's name, the function's (or class's)
    and the method's (``written_names``, which the prefilter trusts as much); a module class of
    the project counts where the file's own text may backward (a file that cannot backward has no
    finding a class's facts could change). A notebook's text is JSON, whose escapes may hide a
    name: it is not told from its bytes."""
    if not project:
        return True
    if data is None or is_notebook(str(path)):
        return False
    return not may_call(data, written_names(project)) and not (may_backward(data) and may_call(data, written_names(project, classes=True)))


def _read(path: Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _cached_map(
    work: Sequence[Work],
    rules: Sequence[type[Rule]],
    mode: FixMode,
    workers: _Workers,
    cache: ReportCache | None,
    checked: Callable[[], None],
    answered: Mapping[int, FileReport],
    digest: Callable[[bytes], str],
) -> list[FileReport]:
    """Reports for ``work``; ``checked`` is called as each is known. A report from the cache is of
    the very path asked for (``ReportCache.load``); ``answered`` holds reports already checked (by
    position in ``work``); each new one is kept as soon as it is known, so a run killed midway
    keeps what it had checked. ``digest`` gives the digest of a file's bytes, which the run
    computes once for its imports and its key."""

    def keep(project: ProjectSummaries, report: FileReport) -> None:
        if cache is not None and report.original is not None:  # keyed by the bytes the check read, even if the file changed since
            cache.store(cache.key(report.path, report.original, rules, mode, project, digest(report.original)), report)
        checked()

    reports: list[FileReport | None] = []
    for position, (path, index, project) in enumerate(work):
        data = workers.files[index]
        reports.append(cache.load(cache.key(path, data, rules, mode, project, digest(data))) if cache is not None and data is not None else None)
        if reports[-1] is not None:
            checked()
        elif position in answered:
            reports[-1] = answered[position]
            keep(project, answered[position])
    missing = [i for i, report in enumerate(reports) if report is None]

    missed = [work[i] for i in missing]

    def known(indexes: Sequence[int], checked_reports: list[FileReport]) -> None:
        for index, report in zip(indexes, checked_reports):
            if report.original is None:  # (``_check_files_job`` did not send the bytes back)
                report.original = workers.files[missed[index][1]]
            keep(missed[index][2], report)

    if missed:  # a selection's rules are imported here, once, not by each worker, and only when some file is checked
        job = partial(_check_files_job, rules=tuple(rules), mode=mode)
        for index, report in zip(missing, workers.map(job, missed, known, lambda item: workers.size(item[1]))):
            reports[index] = report
    return [report for report in reports if report is not None]  # (every one is known by now)


class _Workers:
    """The processes a run checks its files on: ``jobs`` of them (all cores by default), forked
    once, when some work first needs them, and shared by the run's steps (the modules' exports,
    then the files): each new process pays again for the pages it copies from this one and for
    the memory it grows to (a pool a step cost diffusers' cold check about 45,000 page faults more)."""

    def __init__(self, jobs: int | None, rules: Iterable[Sequence[type[Rule]]], files: Sequence[bytes | None] = ()) -> None:
        """``files``: the bytes of the run's files (None: unreadable), which jobs name by index."""
        self.jobs = jobs or os.cpu_count() or 1
        self._rules = rules  # imported before the workers fork, not by each of them
        self.files = files
        self._pool: ProcessPoolExecutor | None = None
        self._files_before: Sequence[bytes | None] = ()

    def __enter__(self) -> _Workers:
        global _run_files
        self._files_before, _run_files = _run_files, self.files
        return self

    def __exit__(self, *exception: object) -> None:
        global _run_files
        _run_files = self._files_before
        if self._pool is not None:
            self._pool.shutdown(wait=exception[0] is None, cancel_futures=True)
            gc.unfreeze()

    def size(self, file: bytes | int) -> int:
        """How long a file (its bytes, or the index of a run's file) is: a job's rough cost."""
        return len(_bytes_of(file) or b"")

    def map(
        self,
        job: Callable[[Sequence[T]], list[R]],
        items: Sequence[T],
        known: Callable[[Sequence[int], list[R]], object] = lambda indexes, results: None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        """``job`` over ``items``, in order; ``known`` is called with each chunk's results (and
        the indexes of its items) as they are known. ``cost``: how long an item takes, roughly,
        for handing out the longest first."""
        return self.start(job, items, known, cost)()

    def start(
        self,
        job: Callable[[Sequence[T]], list[R]],
        items: Sequence[T],
        known: Callable[[Sequence[int], list[R]], object] = lambda indexes, results: None,
        cost: Callable[[T], int] | None = None,
    ) -> Callable[[], list[R]]:
        """``map``, handed to the workers now; the function returned waits for its results (on one
        process, they are computed here and now). Work started later runs after it."""
        if not items:
            return list
        # LibCST and the analysis load here, in this process before it forks the workers, and only
        # when some file or module is not answered by the cache.
        from . import check  # noqa: F401

        if self.jobs == 1 or len(items) < 2 * self.jobs:
            computed: list[R] = []
            for index, item in enumerate(items):
                result = job([item])
                known([index], result)
                computed.extend(result)
            return lambda: computed
        # Small chunks, longest first: the files that must be parsed cluster (a folder of long
        # training scripts), and a long file met last keeps one worker busy while the other idles.
        order = sorted(range(len(items)), key=lambda index: -cost(items[index])) if cost is not None else range(len(items))
        size = max(1, min(4, len(items) // (self.jobs * 4)))
        chunks = [order[first : first + size] for first in range(0, len(items), size)]
        pool = self._started()
        submitted = {pool.submit(job, [items[index] for index in chunk]): chunk for chunk in chunks}

        def results() -> list[R]:
            from concurrent.futures import as_completed

            found: dict[int, R] = {}
            for done in as_completed(submitted):  # each known as soon as it is, not behind a slower one
                chunk_results = done.result()
                known(submitted[done], chunk_results)
                found.update(zip(submitted[done], chunk_results))
            return [found[index] for index in range(len(items))]

        return results

    def _started(self) -> ProcessPoolExecutor:
        # Imported only for a run big enough for a pool: a one-file check (pre-commit, an editor)
        # would spend a fifth of its start-up on them.
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        if self._pool is None:
            for selection in self._rules:
                tuple(selection)
            # What this process holds is out of the workers' collections: a collection writes to
            # each object it scans, and the page that holds it is copied into the worker.
            gc.freeze()
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=get_context("fork"), initializer=_die_with, initargs=(os.getpid(),))
        return self._pool


def _die_with(parent: int) -> None:
    """A worker's first step: on Linux, be killed when ``parent`` dies, SIGKILL included (else a
    killed run leaves its workers waiting for work for ever); ``parent`` may have died already,
    before the kernel was asked."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if os.getppid() != parent:
        os._exit(1)


# The bytes of the run's files, by index, while a run's ``_Workers`` are open. The workers are
# forked with them in memory: a job names a file by its index rather than sending its bytes down a
# pipe (a cold check of diffusers sent 45 MB to its workers, a copy and a pickle each way).
_run_files: Sequence[bytes | None] = ()


def _bytes_of(file: bytes | int) -> bytes | None:
    """A file's bytes, given as they are or as the index of a run's file."""
    return file if isinstance(file, bytes) else _run_files[file]


def _prefiltered_job(files: Sequence[tuple[str, int]]) -> list[FileReport | None]:
    """``source.prefiltered_report`` of each file (its path and the index of its bytes) with no
    project: the report of a file whose text cannot backward, and that calls no function of the
    project that does."""
    from .source import prefiltered_report

    reports = [prefiltered_report(data, path) if (data := _run_files[index]) is not None else None for path, index in files]
    for report in reports:
        if report is not None:
            report.original = None  # (the process that read the bytes has them)
    return reports


def _check_files_job(work: Sequence[Work], rules: Sequence[type[Rule]], mode: FixMode) -> list[FileReport]:
    from .check import check_file, check_source  # loaded by the process that forked this one

    reports = []
    for path, index, project in work:
        data = _run_files[index]
        report = check_file(path, rules, mode, project) if data is None else check_source(data, rules, mode, str(path), project)
        # The bytes a report was made from go back to the process that read them as None: it has
        # them (``_cached_map`` puts them back), and a cold run's reports would carry its whole tree.
        if report.original is data:
            report.original = None
        reports.append(report)
    return reports


# A module whose exports are computed: its bytes (the index of a run's file, or bytes read since),
# and where the run checks it too, with no project, the rules and mode that check it and its path.
ModuleWork = tuple[bytes | int, "tuple[Sequence[type[Rule]], FixMode, str] | None"]


def _module_exports(data: bytes) -> Exports:
    """A module's exports, computed here (a module no job computed: LibCST and the analysis are
    loaded only then)."""
    from .check import module_exports

    return module_exports(data)


def _module_exports_job(modules: Sequence[ModuleWork]) -> list[tuple[Exports, FileReport | None]]:
    from . import check  # loaded by the process that forked this one

    results: list[tuple[Exports, FileReport | None]] = []
    for module, checked in modules:
        data = _bytes_of(module)
        assert data is not None  # (a module's index names a file the run could read)
        results.append((check.module_exports(data), None) if checked is None else check.exports_and_report(data, *checked))
    return results
