"""``gradfix check PATH...`` whose output is plain text, answered before typer and rich are imported.

A check from pre-commit, an editor or CI (staged files, a saved file, the tree) is almost always
answered by the cache, and its output is plain text: one line per finding on stdout, the summary
on stderr. Importing typer and rich to say it was two thirds of a one-file check's time. So
``main`` asks this module first: it reads the command line of that one shape (``check``, the
paths, and only the options of ``ACCEPTED_OPTIONS``), runs the same check the ``check`` command
runs (``run.check_paths``, with the settings and overrides those options give), and prints what
the command prints when it has nothing to colour or draw: the findings' lines and the summary,
and exits as it would. Anything else is declined (another command, another option, a value it
does not read as the command does, an error or a notice to say, findings for a terminal that
colours them, unsafe fixes a configuration asks to show, a progress bar the command may draw):
the full command line runs as if this module did not exist, and speaks for itself (the cache
answers its check of the same files).

So the two never disagree: what is answered here is what the full command prints for the same
arguments, environment and files (tests/test_plain_check.py holds each accepted shape to it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence, TextIO

from gradfix.codemods.cache import DEFAULT_FOLDER, ReportCache
from gradfix.codemods.config import Overrides, Settings, project_root
from gradfix.codemods.report import FileReport, FixKind
from gradfix.codemods.run import check_paths

from .conventions import CURRENT_FOLDER, EXIT_CLEAN, EXIT_FINDINGS, STDIN, check_summary, printed_line

EXIT_BROKEN_PIPE = 1  # click's status when stdout's reader has gone

# Options whose meaning here is the ``check`` command's, each with whether it takes a value, and
# the other names click knows them by.
ACCEPTED_OPTIONS = {"--force-exclude": False, "--exit-zero": False, "--cache-dir": True, "--jobs": True}
OTHER_NAMES = {"-j": "--jobs"}
# A run over this many files or more draws a progress bar where stderr is a terminal
# (``options._progress``).
FEWEST_FILES_WITH_PROGRESS = 20
# Environment the command reads before or instead of the options: completion, and ``--no-cache``.
DECLINING_ENVIRONMENT = ("_GRADFIX_COMPLETE", "GRADFIX_NO_CACHE")
# Environment that makes rich take a stream for a terminal (colours, a progress bar) whatever it is.
TERMINAL_ENVIRONMENT = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class Declined(Exception):
    """The command line is not of the shape answered here."""


def plain_check_status(arguments: Sequence[str]) -> int | None:
    """The exit status of ``gradfix`` run with ``arguments``, once the check's findings and summary
    are printed, when they are a check whose output is plain text; None when the full command line
    must run (nothing has been printed then)."""
    try:
        paths, options = _read_command_line(arguments)
        cache = _cache(options.get("--cache-dir", os.environ.get("GRADFIX_CACHE_DIR")))
        settings = Settings()
        checked = check_paths(paths, Overrides(), settings, jobs=_jobs(options), cache=cache, force_exclude="--force-exclude" in options)
        reports = checked.reports
        findings = [finding for report in reports for finding in report.findings]
        if checked.errors or checked.notices or any(r.errors or r.internal_errors for r in reports):
            return None
        if findings and (_may_be_a_terminal(sys.stdout) or any(_shows_unsafe_fixes(report, settings) for report in reports)):
            return None
    except Exception:  # (declined, or an error: the full command says it in its words)
        return None
    try:
        sys.stdout.writelines(printed_line(finding.render()) + "\n" for finding in findings)
        sys.stdout.flush()
    except BrokenPipeError:  # a reader that stopped early (`| head`): the command ends as click ends it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (nothing left to flush at exit)
        return EXIT_BROKEN_PIPE
    sys.stderr.write(check_summary(reports) + "\n")
    return EXIT_FINDINGS if findings and "--exit-zero" not in options else EXIT_CLEAN


def _may_be_a_terminal(stream: TextIO) -> bool:
    """Whether rich may take ``stream`` for a terminal (``render``'s consoles colour findings and
    draw progress there)."""
    return stream.isatty() or any(name in os.environ for name in TERMINAL_ENVIRONMENT)


def _shows_unsafe_fixes(report: FileReport, settings: Settings) -> bool:
    """Whether the command would show the diffs of the report's unsafe fixes (its file's settings
    say ``unsafe-fixes = true``)."""
    return any(f.fix is FixKind.UNSAFE for f in report.findings) and settings.for_path(report.path).unsafe_fixes


def _read_command_line(arguments: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The paths and the options of ``check PATH...``, as click reads them (options anywhere, a
    value after the option or after ``=``, paths only after ``--``); ``Declined`` for any other."""
    if not arguments or arguments[0] != "check" or any(name in os.environ for name in DECLINING_ENVIRONMENT):
        raise Declined
    paths: list[str] = []
    options: dict[str, str] = {}
    words = iter(arguments[1:])
    for word in words:
        if word == "--":
            paths.extend(words)
        elif word.startswith("-") and word != "-":
            written, equals, value = word.partition("=")
            name = OTHER_NAMES.get(written, written)
            if name not in ACCEPTED_OPTIONS or name in options or equals and not ACCEPTED_OPTIONS[name]:
                raise Declined  # (a repeated option: click keeps the last, and a flag's too)
            if ACCEPTED_OPTIONS[name] and not equals:
                value = next(words, "")
            if ACCEPTED_OPTIONS[name] and (not value or value.startswith("-")):
                raise Declined
            options[name] = value
        else:
            paths.append(word)
    paths = paths or [CURRENT_FOLDER]
    if STDIN in paths:
        raise Declined
    if _may_be_a_terminal(sys.stderr) and (len(paths) >= FEWEST_FILES_WITH_PROGRESS or not all(os.path.isfile(path) for path in paths)):
        raise Declined
    return paths, options


def _jobs(options: dict[str, str]) -> int | None:
    value = options.get("--jobs")
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and not value.startswith("0")):
        raise Declined  # (the full command says why it does not take it, or reads it its own way)
    return int(value)


def _cache(folder: str | None) -> ReportCache:
    """The cache the ``check`` command uses (``options._cache``); a folder it would warn about, or
    named by an empty value, is declined, for the full command to say what it makes of it."""
    if folder is None:
        return ReportCache(project_root() / DEFAULT_FOLDER)
    cache = ReportCache(Path(folder))
    if not folder or cache.unusable():
        raise Declined
    return cache
