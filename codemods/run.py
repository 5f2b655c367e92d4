"""Many files: each checked once on several processes, unchanged ones answered from the cache, and
the files that call another checked file's functions checked again with their summaries. Nothing
here loads LibCST or the analysis: a run answered by the cache never pays for them; ``check``
checks one file, and is imported only when some file must be checked.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .analysis.project import ProjectSummaries, importable_names, project_summaries, written_names
from .report import FileReport, FixMode
from .source import may_call

if TYPE_CHECKING:
    from .cache import ReportCache
    from .rule import Rule


def check_files(
    files: Sequence[Path],
    rules: Sequence[type[Rule]],
    mode: FixMode = FixMode.NONE,
    jobs: int | None = None,
    cache: ReportCache | None = None,
) -> list[FileReport]:
    """Reports for ``files``, in order, computed on ``jobs`` processes (all cores by default);
    with ``cache``, reports of unchanged files are taken from it and new ones kept in it.

    Every file is checked once; then the files that import a function (or a class, for its
    methods) of another checked file whose summary matters (it backwards an argument, or returns
    a tensor it backwarded) are checked again with those summaries, and so are the files the
    prefilter skipped that name one."""
    reports = _cached_map(files, rules, mode, jobs, None, cache)
    project = project_summaries((report.path, report.exports) for report in reports if report.exports)
    importable, helpers = importable_names(project), written_names(project)
    again = [
        i
        for i, report in enumerate(reports)
        if report.imports & importable or report.prefiltered and may_call(report.original, helpers)
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
) -> list[FileReport]:
    if cache is None:
        return _map_files(files, rules, mode, jobs, project)
    reports: list[FileReport | None] = []
    for path in files:
        try:
            data = Path(path).read_bytes()
        except OSError:
            reports.append(None)  # checking it says why it cannot be read
            continue
        reports.append(cache.load(cache.key(path, data, rules, mode, project)))
    missing = [i for i, report in enumerate(reports) if report is None]
    for index, report in zip(missing, _map_files([files[i] for i in missing], rules, mode, jobs, project)):
        reports[index] = report
        if report.original is not None:  # keyed by the bytes the check read, even if the file changed since
            cache.store(cache.key(files[index], report.original, rules, mode, project), report)
    return reports


def _map_files(
    files: Sequence[Path], rules: Sequence[type[Rule]], mode: FixMode, jobs: int | None, project: ProjectSummaries | None
) -> list[FileReport]:
    if not files:
        return []
    # LibCST and the analysis load here, in this process before it forks the workers, and only when
    # some file is not answered by the cache.
    from .check import check_file

    jobs = jobs or os.cpu_count() or 1
    rules = tuple(rules)  # a selection's rules are imported here too, once, not by each worker
    if jobs == 1 or len(files) < 2 * jobs:
        return [check_file(path, rules, mode, project) for path in files]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
        # Small chunks: the files that must be parsed cluster (a folder of long training scripts),
        # and chunks of 32 files left one worker idle at the end (0.2 s of diffusers' cold check).
        chunk = max(1, min(4, len(files) // (jobs * 4)))
        try:
            return list(pool.map(_check_file_job, [(path, rules, mode, project) for path in files], chunksize=chunk))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _check_file_job(job: tuple[Path, Sequence[type[Rule]], FixMode, ProjectSummaries | None]) -> FileReport:
    from .check import check_file  # loaded by the process that forked this one

    return check_file(*job)
