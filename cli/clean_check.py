"""``gradfix check FILE...`` that finds nothing, answered before typer and rich are imported.

A check of a few named files (pre-commit's staged files, an editor's saved one) is almost always
answered by the cache, and almost always finds nothing: its whole output is one line on stderr.
Importing typer and rich to say it was two thirds of its time. So ``main`` asks this module first:
it reads the command line of that one shape (``check``, the files, and only the options of
``ACCEPTED_OPTIONS``), runs the same check the ``check`` command runs (``run.check_paths``, with
the settings and overrides those options give), and, when nothing is found and nothing went wrong,
prints the command's summary line and exits as it would. Anything else (another command, another
option, a folder, a value it does not read as the command does, a finding, an error, a notice)
is declined: the full command line runs as if this module did not exist, and speaks for itself
(the cache answers its check of the same files).

So the two never disagree: what is answered here is what the full command prints for the same
arguments, environment and files (tests/test_clean_check.py holds each accepted shape to it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from gradfix.codemods.cache import DEFAULT_FOLDER, ReportCache
from gradfix.codemods.config import Overrides, Settings, project_root
from gradfix.codemods.run import check_paths

from .conventions import EXIT_CLEAN, STDIN, check_summary

# Options whose meaning here is the ``check`` command's, each with whether it takes a value, and
# the other names click knows them by.
ACCEPTED_OPTIONS = {"--force-exclude": False, "--exit-zero": False, "--cache-dir": True, "--jobs": True}
OTHER_NAMES = {"-j": "--jobs"}
# A run over this many files or more draws a progress bar on a terminal (``options._progress``).
FEWEST_FILES_WITH_PROGRESS = 20
# Environment the command reads before or instead of the options: completion, and ``--no-cache``.
DECLINING_ENVIRONMENT = ("_GRADFIX_COMPLETE", "GRADFIX_NO_CACHE")


class Declined(Exception):
    """The command line is not of the shape answered here."""


def clean_check_status(arguments: Sequence[str]) -> int | None:
    """The exit status of ``gradfix`` run with ``arguments``, once the check's summary is printed,
    when they are a check of named files that finds nothing; None when the full command line must
    run (nothing has been printed then)."""
    try:
        paths, options = _read_command_line(arguments)
        cache = _cache(options.get("--cache-dir", os.environ.get("GRADFIX_CACHE_DIR")))
        checked = check_paths(paths, Overrides(), Settings(), jobs=_jobs(options), cache=cache, force_exclude="--force-exclude" in options)
    except Exception:  # (declined, or an error: the full command says it in its words)
        return None
    reports = checked.reports
    if checked.errors or checked.notices or any(r.findings or r.errors or r.internal_errors for r in reports):
        return None
    sys.stderr.write(check_summary(reports) + "\n")
    return EXIT_CLEAN


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
    if not paths or len(paths) >= FEWEST_FILES_WITH_PROGRESS or STDIN in paths or not all(os.path.isfile(path) for path in paths):
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
