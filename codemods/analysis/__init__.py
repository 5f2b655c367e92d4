"""The analysis every rule shares, computed once per file.

``FileAnalysis`` wraps one parsed module with the LibCST metadata the rules use (positions and
parents), what its names mean in torch terms, and the dataflow facts: backward sites, loops and the
values that cross them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from .assignments import assigned_names, read_names, target_names
from .backward_api import BackwardApi, Tristate
from .optimizers import gradient_effects, stepped_optimizers, updates_parameters
from .project import ExportedSummary, ProjectSummaries, module_names, project_summaries
from .dataflow import BackwardSite, DataflowAnalysis, FunctionSummary, Loop, Scope, expand
from .syntax import as_operand, code_of, is_single_assignment, is_single_call, parenthesized
from .torch_names import TorchNames, collect_torch_names, dotted_name
from .values import NONE, TENSOR, UNKNOWN, Carried, ListOf, Origin, Structure, TupleOf, Value

__all__ = [
    "BackwardApi",
    "BackwardSite",
    "ExportedSummary",
    "FunctionSummary",
    "ProjectSummaries",
    "Tristate",
    "Block",
    "Carried",
    "FileAnalysis",
    "ListOf",
    "Loop",
    "NONE",
    "Origin",
    "Scope",
    "Structure",
    "TENSOR",
    "TupleOf",
    "UNKNOWN",
    "Value",
    "as_operand",
    "assigned_names",
    "code_of",
    "dotted_name",
    "expand",
    "is_single_assignment",
    "is_single_call",
    "parenthesized",
    "module_names",
    "project_summaries",
    "read_names",
    "stepped_optimizers",
    "updates_parameters",
    "target_names",
]

@dataclass(frozen=True)
class Block:
    """A statement list that edits can change: a module body or an indented block."""

    owner: cst.CSTNode  # the Module or IndentedBlock
    statements: Sequence[cst.BaseStatement]

    def index(self, statement: cst.CSTNode) -> int:
        return next(i for i, s in enumerate(self.statements) if s is statement)


class FileAnalysis:
    def __init__(self, wrapper: MetadataWrapper, imported: ProjectSummaries | None = None) -> None:
        self.module = wrapper.module
        metadata = wrapper.resolve_many([PositionProvider, ParentNodeProvider])  # one traversal for both
        self._positions = metadata[PositionProvider]
        self._parents = metadata[ParentNodeProvider]
        self.names: TorchNames = collect_torch_names(self.module)
        self._dataflow = DataflowAnalysis(self.module, self.names, imported)

    @classmethod
    def of_module(cls, module: cst.Module, imported: ProjectSummaries | None = None) -> "FileAnalysis":
        """``imported``: summaries of the other checked files' functions, by import path."""
        return cls(MetadataWrapper(module, unsafe_skip_copy=True), imported)

    def exports(self) -> dict[str, ExportedSummary]:
        """This file's function summaries that other files may import."""
        return self._dataflow.exports()

    def imports(self) -> set[str]:
        """The dotted names this file imports (what it could use from other checked files)."""
        return set(self.names.aliases.values())

    # facts -----------------------------------------------------------------------------------
    @cached_property
    def backward_sites(self) -> list[BackwardSite]:
        return sorted(self._dataflow.backward_sites.values(), key=lambda site: self.start(site.call))

    def graph_nodes(self, site: BackwardSite) -> set[Origin]:
        """Every place that built part of the graph ``site`` backwards, through all loop heads."""
        return {source for source in expand(site.value.origins, None) if isinstance(source, Origin)}

    def escaped(self, scope: Scope) -> set[Origin]:
        """Graph nodes that ``scope`` stores on objects, returns or hands to calls made for their
        effect: code gradfix does not follow may backward them again."""
        return self._dataflow.escaped.get(scope.node, set())

    def site_of(self, call: cst.Call) -> BackwardSite:
        return self._dataflow.backward_sites[call]

    def returned(self, function: cst.FunctionDef) -> Value | None:
        """What a call of ``function`` returns."""
        return self._dataflow.returned.get(function)

    def trainer_hooks(self) -> Iterator[tuple[cst.FunctionDef, str]]:
        """Methods whose result a trainer backwards (``training_step`` of a LightningModule under
        automatic optimization, ``compute_loss`` of a Hugging Face Trainer), with their class."""
        hooks = self.names.trainer_hooks
        for cls in self._classes:
            name = cls.name.value
            if name not in hooks or name in self.names.manual_optimization:
                continue
            for statement in cls.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == hooks[name]:
                    yield statement, name

    def class_body(self, name: str | None) -> Sequence[cst.BaseStatement]:
        """The statements of the class called ``name`` (empty when there is none)."""
        cls = next((c for c in self._classes if c.name.value == name), None)
        return cls.body.body if cls is not None else ()

    @cached_property
    def _classes(self) -> list[cst.ClassDef]:
        return m.findall(self.module, m.ClassDef())

    @property
    def loops(self) -> list[Loop]:
        return list(self._dataflow.loops.values())

    def loops_around(self, statement: cst.CSTNode) -> tuple[Loop, ...]:
        """The loops (innermost first) a statement runs in, within its own function."""
        return self._dataflow.statement_loops.get(statement, ())

    # positions and structure -----------------------------------------------------------------
    def range(self, node: cst.CSTNode) -> CodeRange:
        return self._positions[node]

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        position = self._positions[node].start
        return position.line, position.column

    def line(self, node: cst.CSTNode) -> int:
        return self._positions[node].start.line

    def block_of(self, statement: cst.CSTNode) -> Block | None:
        """The editable statement list that directly holds ``statement``."""
        owner = self._parents.get(statement)
        if isinstance(owner, (cst.Module, cst.IndentedBlock)) and isinstance(statement, cst.BaseStatement):
            return Block(owner, owner.body)
        return None

    def statement_at(self, line: int) -> cst.SimpleStatementLine | None:
        """The statement line that spans source line ``line``."""
        return next(
            (s for s in self._simple_statements if self._positions[s].start.line <= line <= self._positions[s].end.line),
            None,
        )

    def function_at(self, line: int) -> cst.FunctionDef | None:
        """The innermost function whose definition spans source line ``line``."""
        spanning = [f for f in self._functions if self._positions[f].start.line <= line <= self._positions[f].end.line]
        return spanning[-1] if spanning else None

    @cached_property
    def _simple_statements(self) -> list[cst.SimpleStatementLine]:
        return m.findall(self.module, m.SimpleStatementLine())

    @cached_property
    def _functions(self) -> list[cst.FunctionDef]:
        return m.findall(self.module, m.FunctionDef())

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        while inner is not None:
            if inner is outer:
                return True
            inner = self._parents.get(inner)
        return False

    # effects ---------------------------------------------------------------------------------
    def gradient_effects(self, node: cst.CSTNode) -> set[str]:
        """What in ``node`` reads or changes gradients (``optimizers.gradient_effects``), and
        ``backward`` when a backward site is in it."""
        effects = gradient_effects(node)
        if any(self.contains(node, site.call) for site in self.backward_sites):
            effects.add("backward")
        if self._calls_an_optimizer(node):
            effects.add("step")  # first_step(), second_step(), a wrapper's own update methods
        return effects

    def updates_parameters(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` steps or zeroes an optimizer (or calls any method of a known one)."""
        return updates_parameters(node) or self._calls_an_optimizer(node)

    def _calls_an_optimizer(self, node: cst.CSTNode) -> bool:
        return any(
            dotted_name(call.func.value) in self.names.optimizers
            for call in m.findall(node, m.Call(func=m.Attribute()))
        )
