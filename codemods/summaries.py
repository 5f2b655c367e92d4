"""Function summaries across the files of one run: what a function or method defined in one checked
file does to graphs, for the files that import it.

Each file exports the summaries that matter (a parameter it backwards, a result it already
backwarded) under the dotted names an import could reach it by: ``pkg/train/utils.py`` exports
``train_step`` as ``utils.train_step``, ``train.utils.train_step`` and ``pkg.train.utils.train_step``,
so ``from utils import train_step``, ``from .utils import train_step`` and
``from pkg.train.utils import train_step`` all resolve. A name two files could both mean is dropped.

Plain data: the summaries cross processes and are read back from the cache, so this module never
loads LibCST (the analysis computes them: ``FileAnalysis.exports``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Iterable, Mapping

from .frameworks import BackwardApi, Tristate


@dataclass(frozen=True)
class ExportedSummary:
    """A function summary without the syntax tree it was computed from (it crosses processes)."""

    name: str  # ``train_step`` or ``Criterion.__call__``
    parameters: tuple[str, ...]  # as callers pass them
    backwarded: tuple[tuple[str, BackwardApi, Tristate], ...]  # (parameter, how, retain_graph)
    returns_backwarded: tuple[BackwardApi, Tristate] | None  # how its result was already backwarded


ProjectSummaries = Mapping[str, ExportedSummary]  # import path -> summary


def module_names(path: str | PurePath) -> list[str]:
    """The dotted names an import may use for the module in ``path``, shortest first."""
    parts = list(PurePath(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    parts = [p for p in parts if p not in ("/", "") and p.isidentifier()]
    return [".".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]


def project_summaries(exports: Iterable[tuple[str, Mapping[str, ExportedSummary]]]) -> dict[str, ExportedSummary]:
    """One index over every file's exports; names that two files share are left out."""
    index: dict[str, ExportedSummary] = {}
    ambiguous: set[str] = set()
    for path, summaries in exports:
        for module in module_names(path):
            for name, summary in summaries.items():
                key = f"{module}.{name}"
                if key in index:
                    ambiguous.add(key)
                index[key] = summary
    return {key: summary for key, summary in index.items() if key not in ambiguous}


def importable_names(project: ProjectSummaries | None) -> frozenset[str]:
    """The dotted names a file imports to call one of ``project``'s functions: the function's own,
    or its class's for a method (``steps.Criterion`` for ``steps.Criterion.__call__``)."""
    return frozenset(key[: len(key) - len(summary.name)] + summary.name.partition(".")[0] for key, summary in (project or {}).items())


def written_names(project: ProjectSummaries | None) -> frozenset[tuple[bytes, bytes, bytes]]:
    """What the text of a file that calls one of ``project``'s functions holds: the last name of
    its module, the function's or class's name (``from .steps import Criterion``), and the method
    it calls, empty when calling the instance runs it (``__call__``, ``forward``)."""
    names: set[tuple[str, str, str]] = set()
    for key, summary in (project or {}).items():
        module = key[: len(key) - len(summary.name) - 1].rpartition(".")[2]
        name, _, method = summary.name.partition(".")
        names.add((module, name, "" if method in ("__call__", "forward") else method))
    return frozenset((module.encode(), name.encode(), method.encode()) for module, name, method in names)
