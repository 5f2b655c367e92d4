"""Function summaries across the modules of a project: what a function or method defined in one
module does to graphs, for the files that import it.

A module exports the summaries that matter (a parameter it backwards, a result it already
backwarded) and its ``nn.Module`` classes' facts (``ExportedModuleClass``); a file that imports the module (``project``) sees them under the dotted names it
calls them by (``steps.update`` for ``from .steps import update``).

Plain data: the summaries cross processes and are read back from the cache, so this module never
loads LibCST (the analysis computes them: ``FileAnalysis.exports``); so is where a run's files found
the modules they import (``ImportsFound``), which the cache keeps too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

from .frameworks import BackwardApi, Tristate


@dataclass(frozen=True)
class ExportedItem:
    """One item of the tuple a forward returns (``ExportedModuleClass.returned_items``)."""

    graph: bool  # it may hold a graph
    graphless: bool  # proved to hold none
    guessed: bool  # its graph is only guessed (``Value.guessed``)
    tensor: bool  # proved a tensor
    group: int  # the first item it shares a node of the forward's graph with (its own index: none)


@dataclass(frozen=True)
class ExportedModuleClass:
    """What the analysis of its module proved of an ``nn.Module`` class of it (its bases read through
    the module's imports, its ``forward`` defined in it, no ``__call__`` of its own): what a file that
    imports it learns of calling an instance (``model = Net(); model(x)``)."""

    # Every path of its forward returns a graph built from the module's parameters (must).
    returns_parameters: bool
    # Every graph its callers hand its forward reaches what it returns (must; ``class_exports._carried``).
    returns_inputs: bool
    # What its forward returns may come out of code gradfix did not read (may: the call's result is a guess).
    returns_unread: bool
    # Every graph its forward returns holds an operation that certainly saved a tensor (as ``returns_saved``).
    returns_saved: bool
    # Building and calling it runs only code gradfix read and models: no construct of ``closed_world``
    # in its methods, the module's other code they run, or the module's top-level statements.
    reads_modelled_code: bool
    # Where every return of its forward writes out a tuple of one length: what each item holds, as
    # the forward's walk read it (``analysis.calls._items_of_the_call`` reads them as a forward's of the file).
    returned_items: tuple[ExportedItem, ...] | None = None


@dataclass(frozen=True)
class ExportedSummary:
    """A function summary without the syntax tree it was computed from (it crosses processes)."""

    name: str  # ``train_step`` or ``Criterion.__call__``
    parameters: tuple[str, ...]  # as callers pass them
    backwarded: tuple[tuple[str, BackwardApi, Tristate], ...]  # (parameter, how, retain_graph)
    returns_backwarded: tuple[BackwardApi, Tristate] | None  # how its result was already backwarded
    # Every graph it returns, on each path, holds an operation that certainly saved a tensor: a
    # backward of its result frees one, and walking that result again raises.
    returns_saved: bool = False
    # An ``nn.Module`` class, not a function: what calling an instance does (``name`` is the class's).
    module_class: ExportedModuleClass | None = None


ProjectSummaries = Mapping[str, ExportedSummary]  # the name a file calls it by -> summary
Exports = dict[str, ExportedSummary]  # what one module exports: its function's or method's name -> summary


@dataclass(frozen=True)
class ImportsFound:
    """The project modules a run's files import, and what finding them read
    (``project.ProjectModules.found`` and ``recall``): the names in folders, the roots of absolute
    imports (the settings' ``src``, the packages' tops), the work trees' tops and where module files
    lead. A later run reads those again, which costs a fifth of finding the imports anew, and takes
    a file's imports from here only where all of it is as it was and the file's bytes are too."""

    imports: dict[str, tuple[str, tuple[tuple[str, str], ...]]]  # file (absolute) -> bytes_digest of it, its (prefix, module file)s
    listed: tuple[str, ...]  # the folders whose names were read
    rooted: tuple[str, ...]  # the folders whose import roots were found
    topped: tuple[str, ...]  # the folders whose work tree top was found
    placed: tuple[tuple[str, str], ...]  # (module file, top): whether the file is in that project
    reads: str  # the digest of what those reads returned, in that order


def bytes_digest(data: bytes) -> str:
    """The digest a file's bytes are known by (``ImportsFound``, the report cache's keys): BLAKE2b,
    twice as fast as SHA-256 where the processor has no SHA instructions, and every byte of a tree
    is hashed at each run."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def written_names(project: ProjectSummaries | None, classes: bool = False) -> frozenset[tuple[bytes, bytes, bytes]]:
    """What the text of a file that calls one of ``project``'s functions holds: the last name of
    its module, the function's or class's name (``from .steps import Criterion``), and the method
    it calls, empty when calling the instance runs it (``__call__``, ``forward``). ``classes``: the
    module classes too (``module_class``), which backward nothing themselves (a file that cannot
    backward by its own text still cannot), but which the analysis of a file that may reads."""
    names: set[tuple[str, str, str]] = set()
    for key, summary in (project or {}).items():
        if summary.module_class is not None and not classes:
            continue
        module = key[: len(key) - len(summary.name)].rstrip(".").rpartition(".")[2]  # "" for ``from . import f``
        name, _, method = summary.name.partition(".")
        names.add((module, name, "" if method in ("__call__", "forward") else method))
    return frozenset((module.encode(), name.encode(), method.encode()) for module, name, method in names)
