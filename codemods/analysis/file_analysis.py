"""``FileAnalysis``: one parsed module with its structure, torch names and dataflow facts, and
the questions the rules ask of them."""

from __future__ import annotations

import ast
from bisect import bisect_left
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import libcst as cst
from libcst.metadata import CodeRange

from ..frameworks import PARAMETER_KEEPING_METHODS, TENSOR_BACKWARD, GradientEffect
from ..torch_api import BUILTINS_WITHOUT_GRADIENTS
from ..summaries import ExportedSummary, ProjectSummaries
from .assignments import assigned_names, bound_by_header, read_names, target_names
from .optimizers import gradient_effects, steps_for_certain
from .positions import Positions
from .gan import GanSteps, find_gan_steps
from .exclusive_branches import ExclusiveBranches
from .call_flow import passed_for
from .guards import bound_afresh, bound_in_file, in_the_first_iteration_only, read_carried_only_under_tests, read_only_where_assigned
from .contexts import header_bound_from_itself
from .reach import GradientReach
from .dataflow import DataflowAnalysis
from .backward_calls import BackwardSite, argument
from .closed_world import ClosedWorld
from .kept_graphs import KeptGraphs
from .kept_on_self import KeptArgument
from .syntax import as_operand, code_of, dotted_name, is_grad, is_single_assignment, method_called, method_receiver
from .torch_facts import TorchNames
from .class_exports import module_class_exports
from .torch_names import collect_torch_names
from .tree import SyntaxTree
from .loops import Carried, Loop, Scope, expand
from .values import NOTHING, TENSOR, ListOf, Origin, TupleOf, Value


@dataclass(frozen=True)
class Block:
    """A statement list that edits can change: a module body or an indented block."""

    owner: cst.Module | cst.IndentedBlock
    statements: Sequence[cst.BaseStatement]

    def index(self, statement: cst.CSTNode) -> int:
        return self._indexes[id(statement)]

    @cached_property
    def _indexes(self) -> dict[int, int]:
        return {id(s): i for i, s in enumerate(self.statements)}


class FileAnalysis:
    def __init__(
        self,
        module: cst.Module,
        imported: ProjectSummaries | None = None,
        source: bytes | None = None,
        python_tree: ast.Module | None = None,
    ) -> None:
        """``imported``: summaries of the other checked files' functions, by import path;
        ``source``: the bytes ``module`` was parsed from (rendered from it when not given);
        ``python_tree``: Python's own tree of them, where it was parsed already."""
        self.module = module
        self._given_python_tree = python_tree
        self.tree = SyntaxTree(module)
        self.names: TorchNames = collect_torch_names(self.tree, imported)
        self._dataflow = DataflowAnalysis(module, self.names, imported, self.tree)
        self._blocks: dict[int, Block] = {}  # by id of the Module or IndentedBlock
        self._writes: dict[tuple[cst.CSTNode, str], dict[cst.CSTNode, bool | None]] = {}  # by loop and name
        self._training_loops: dict[cst.CSTNode, bool] = {}  # (``is_training_loop``, by loop)
        if source is not None:
            self.source = source

    @cached_property
    def source(self) -> bytes:
        return self.module.bytes

    @property
    def python_tree(self) -> ast.Module:
        """The module as Python's own parser reads it; raises SyntaxError where it cannot (LibCST
        parses syntax this Python does not). Placing nodes reads it too: it is parsed once."""
        return self._positions.python_tree

    @cached_property
    def _positions(self) -> Positions:
        # Placing nodes renders the code that holds them: only files with something to report or
        # to order by place pay for it, and only for the statements that hold those nodes.
        return Positions(self.module, self.tree, self.source, self._given_python_tree)

    def exports(self) -> dict[str, ExportedSummary]:
        """This file's function summaries that other files may import, and its module classes'."""
        return {**module_class_exports(self), **self._dataflow.exports()}

    @cached_property
    def kept_graphs(self) -> KeptGraphs:
        """What a graph may read that an earlier call built and kept (``analysis.kept_graphs``)."""
        return KeptGraphs(self)

    @cached_property
    def closed_world(self) -> ClosedWorld:
        """The constructs of the file gradfix does not see through, and what a fix may prove."""
        return ClosedWorld(self)

    # facts -----------------------------------------------------------------------------------
    @cached_property
    def backward_sites(self) -> list[BackwardSite]:
        return sorted(self._dataflow.backward_sites.values(), key=lambda site: self.order(site.call))

    def graph_nodes(self, site: BackwardSite) -> frozenset[Origin]:
        """Every place that built part of the graph ``site`` walks, through all loop heads (for ``autograd.grad``, to its ``inputs``)."""
        return self._dataflow.walked_nodes(site.value, site.stops_at)

    def value_nodes(self, value: Value) -> frozenset[Origin]:
        """Every place that built part of ``value``'s graph, through all loop heads."""
        return self._dataflow.graph_nodes(value)

    def escaped(self, scope: Scope) -> set[Origin]:
        """Graph nodes ``scope`` stores on objects, returns or hands to calls made for their effect: code not followed may backward them."""
        return self._dataflow.escaped.get(scope.node, set())

    def shares_its_object(self, name: str) -> bool:
        """Whether another name may hold ``name``'s object (``alias = store``, ``{"k": store}``: ``shared_containers``) and read what is
        stored into it where the dataflow sees ``name`` alone."""
        return name in self._dataflow.shared_objects

    @cached_property
    def gan_steps(self) -> list[GanSteps]:
        """Pairs of backwards that are a GAN's discriminator and generator steps (``analysis.gan``)."""
        return find_gan_steps(self)

    def returns_unread_graph(self, call: cst.Call) -> bool:
        """Whether what ``call`` returns holds a graph that came out of code gradfix did not read (another package's
        function, a parameter, a helper of the file that calls such code or itself): it may as well hold none (in a
        loop: its last pass)."""
        return call in self._dataflow.unread_results

    def function_called(self, call: cst.Call) -> cst.FunctionDef | None:
        """The file's function (or method, or module's ``forward``) whose summary ``call`` was read by, if any."""
        callee = self._dataflow.callees.get(call)
        return self._dataflow.summarized_functions.get(callee) if callee is not None else None

    def returns_a_tensor(self, call: cst.Call) -> bool:
        """Whether ``call`` runs a plain function of the file (no decorator, not a generator or a
        coroutine) that ends in a ``return`` and hands back a tensor at every one."""
        function = self.function_called(call)
        if function is None or function.decorators or function.asynchronous:
            return False
        last = function.body.body[-1]
        return (
            type(last.body[-1] if type(last) is cst.SimpleStatementLine else last) is cst.Return
            and self._dataflow.returned.get(function, NOTHING).structure is TENSOR
            and all(value.structure is TENSOR for value in self._dataflow.returns.get(function, ()))
        )

    def value_assigned(self, expression: cst.BaseExpression) -> Value | None:
        """What an assignment's value (or a target of ``a, b = ...`` got), ``+=`` adds or ``.append(...)`` stores evaluated to (None: unreached)."""
        return self._dataflow.assigned_values.get(expression)

    def arguments_kept(self, call: cst.Call) -> list[KeptArgument]:
        """The arguments a method of the file's class keeps on the object it is called on."""
        return self._dataflow.arguments_kept(call)

    def writes_of(self, loop: Loop, name: str) -> dict[cst.CSTNode, bool | None]:
        """The statements of ``loop`` (a method walked as calls included) that write ``name``, in the order of the source, each with
        whether it computes the new value from what the previous iteration (or call) left. True or False for a plain assignment that
        binds the whole name (``h = cell(x, h)``, ``cache = f(x)``): told by the dataflow where the name may carry a graph into the
        iteration (so through aliases: ``prev = h; h = f(prev)``), else by whether the value reads the name. None for a write that
        changes or adds to the old value (an append, ``+=``, ``x[i] = v``, ``x.add_(...)``); a ``for`` or ``with`` header's binding is
        from the previous value where its iterable or item reads the name, None for an ``except`` clause's."""
        key = (loop.node, name)
        if key not in self._writes:
            self._writes[key] = self._find_writes(loop, name)
        return self._writes[key]

    def _find_writes(self, loop: Loop, name: str) -> dict[cst.CSTNode, bool | None]:
        marker = Carried(loop, name)
        tracked = any(value is not None and value.graph for value in (loop.entry.get(name), loop.back_edge.get(name)))
        writes: dict[cst.CSTNode, bool | None] = {}
        for statement in self._binding_statements(loop):
            if isinstance(statement, cst.SimpleStatementLine):
                if name not in assigned_names(statement, tree=self.tree):
                    continue
                assignment = cst.ensure_type(statement.body[0], cst.Assign) if is_single_assignment(statement) else None
                if assignment is None or name not in target_names(assignment.targets[0].target, rebound_only=True):
                    writes[statement] = None
                elif tracked:
                    assigned = self.value_assigned(assignment.value)
                    writes[statement] = assigned is not None and marker in expand(assigned.origins, loop)
                else:
                    writes[statement] = name in read_names(assignment.value)
            elif name in bound_by_header(statement):
                writes[statement] = header_bound_from_itself(statement, name)
        return writes

    def _binding_statements(self, loop: Loop) -> list[cst.CSTNode]:
        """The statement lines of ``loop``'s body and its compound statements that bind names in
        their header, in the order of the source."""
        found: list[cst.CSTNode] = [*self.tree.findall(loop.node.body, cst.SimpleStatementLine)]
        for kind in (cst.For, cst.With, cst.ExceptHandler):
            found += self.tree.findall(loop.node.body, kind)
        return sorted(found, key=self.order)

    def attribute_writes(self, attribute: str) -> list[tuple[str, cst.FunctionDef | None]]:
        """Where the file writes an attribute spelled ``attribute`` (``model.hidden = None``, ``self.hidden.append(h)``):
        each as the object written to, by its name (``self``, ``model``), and the function whose own statements write
        it (None: the module's)."""
        return self._attribute_writes.get(attribute, [])

    @cached_property
    def _attribute_writes(self) -> dict[str, list[tuple[str, cst.FunctionDef | None]]]:
        writes: dict[str, list[tuple[str, cst.FunctionDef | None]]] = {}
        for function in [*self._functions, None]:
            for written in assigned_names(self.module if function is None else function.body, tree=self.tree):
                owner, _, attribute = written.rpartition(".")
                if owner:
                    writes.setdefault(attribute, []).append((owner, function))
        return writes

    def afresh_each_iteration(self, loop: Loop, name: str) -> bool:
        """Whether each iteration of ``loop`` binds ``name`` anew before it adds to it (``guards.bound_afresh``): after the loop it holds the last one's alone."""
        return bound_afresh(loop, name, self.writes_of(loop, name), self.names, self.tree)

    def made_anew_in(self, loop: Loop, name: str) -> bool:
        """Whether some iteration of ``loop`` may bind ``name`` anew, not from what the last one left (``losses = []``, under a test too)."""
        return False in self.writes_of(loop, name).values()

    def value_read(self, name: cst.Name | cst.Attribute) -> Value | None:
        """What the name (or attribute) held where the program read it (None where the analysis never got)."""
        return self._dataflow.read_values.get(name)

    def iterates_graph(self, loop: Loop) -> bool:
        """Whether a ``for`` loop iterates over a value that carries a graph (``zip(inputs, soft_targets)`` where a teacher
        built ``soft_targets`` before the loop). The dataflow reads what an unknown iterable yields as data, not graphs."""
        if not isinstance(loop.node, cst.For):
            return False
        values = (self.value_read(name) for name in self.tree.findall(loop.node.iter, cst.Name))
        return any(value is not None and value.graph for value in values)

    def frees_what_they_saved(self, site: BackwardSite, statements: Sequence[cst.CSTNode]) -> bool:
        """Whether the backward at ``site`` certainly frees a tensor that an operation of ``statements`` saved: a graph
        of joins and sums of parameters saves nothing, and a second backward through it runs."""
        return self.saved_for_certain(origin for origin in self.graph_nodes(site) if any(self.contains(s, origin.node) for s in statements))

    def saved_for_certain(self, origins: Iterable[Origin]) -> bool:
        """Whether one of the operations at ``origins`` certainly saved a tensor for its backward
        (``DataflowAnalysis.saves_for_certain``), so that walking them again after a backward freed them raises:
        casts, views, joins, repeats and sums save none."""
        return any(not origin.possible and self._dataflow.saves_for_certain(origin.node, self.class_name_of(origin.node)) for origin in origins)

    def saved_nothing_for_certain(self, origins: Iterable[Origin]) -> bool:
        """Whether the operations at ``origins`` are all seen and none may have saved a tensor for its backward (sums,
        means, views and joins: ``DataflowAnalysis.saves_tensors``), so that a backward walking them again runs; False
        for no operation at all (nothing seen)."""
        seen = list(origins)
        return bool(seen) and not any(origin.possible or self._dataflow.saves_tensors(origin.node) for origin in seen)

    def read_only_where_assigned(self, loop: Loop, name: str, inner_loops_run: bool = False) -> bool:
        """Whether ``name`` is read in ``loop`` only where this iteration assigned it, under tests
        that answer the same twice (``guards``); ``inner_loops_run``: if every inner loop runs."""
        return read_only_where_assigned(self.tree, self._dataflow.read_values, self._bound_names, loop, name, inner_loops_run, self.names)

    def read_carried_only_under_tests(self, loop: Loop, name: str) -> bool:  # (``loop`` only may carry ``name``: ``guards``)
        return read_carried_only_under_tests(self.tree, self._dataflow.read_values, self._bound_names, loop, name)

    def runs_in_the_first_iteration_only(self, node: cst.CSTNode, loop: Loop) -> bool:  # (``guards``)
        return in_the_first_iteration_only(self.tree, lambda: self._bound_names, loop, node)

    @property
    def _bound_names(self) -> frozenset[str]:
        return bound_in_file(self.module, self.tree, self.names)

    def runs_in_every_iteration(self, statement: cst.CSTNode, loop: Loop) -> bool:
        """Whether ``statement`` runs, once, in every iteration of ``loop``: nothing between them
        but blocks and ``with`` statements (no branch, ``try``, inner loop or nested function)."""
        node = self.tree.parent(statement)
        while node is not None and node is not loop.node:
            if not isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite, cst.With)):
                return False
            node = self.tree.parent(node)
        return node is loop.node

    def unread_value(self, statements: Sequence[cst.CSTNode]) -> cst.BaseExpression | None:
        """The first value ``statements`` assign whose graph came out of code gradfix did not read
        (``create_transform(model=encoder)`` may return a transform, not a forward), also through
        the statements a compound one holds (``for k, v in feats.items(): grams[k] = gram(v)``)."""
        for statement in statements:
            assigned: list[cst.BaseExpression | None] = [a.value for a in self.tree.findall(statement, cst.Assign)]
            for expression in [*assigned, *(a.value for a in self.tree.findall(statement, cst.AnnAssign))]:
                value = None if expression is None else self.value_assigned(expression)
                if expression is not None and value is not None and value.graph and value.unread:
                    return expression
        return None

    def built_before_loop(self, site: BackwardSite, loop: Loop) -> list[cst.BaseStatement]:
        """Statements outside ``loop`` that built part of the graph ``site`` backwards in it."""
        statements = {
            source.statement
            for source in expand(site.value.origins, loop)
            if isinstance(source, Origin) and loop not in self.loops_around(source.statement) and not self.contains(loop.node, source.statement)
        }
        return sorted(statements, key=self.start)

    @cached_property
    def trained_modules(self) -> set[str] | None:
        """The modules some optimizer updates (``torch.optim.X(model.parameters())``, handed back by
        ``accelerator.prepare`` / ``fabric.setup``); None when an optimizer's parameters are not known, so no module
        can be said to stay untrained."""
        names = self.names
        if (
            not names.optimizers
            or names.optimizers - names.optimized_modules.keys()
            or names.optimizers_of_unknown_parameters
            or names.updated_by_hand
        ):
            return None
        return set().union(*names.optimized_modules.values(), names.manually_trained)

    def untrained_graph(self, statements: Sequence[cst.CSTNode]) -> bool:
        """Whether ``statements`` build their graph only from modules no optimizer updates (a teacher, a frozen feature
        extractor): a constant of training. A module handed to a call or kept in a container
        (``nn.ModuleDict({"teacher": teacher})``), or of a class that keeps a module bound elsewhere
        (``sharing_classes``), may be trained through what else holds it."""
        trained = self.trained_modules
        if trained is None or any(self._reads_a_leaf(statement) for statement in statements):
            return False
        modules = [
            (passed, module.class_name)  # (a module a function is handed is what its callers pass: ``training_loop(model=net)``)
            for statement in statements
            for call in self.tree.findall(statement, cst.Call)
            if (module := self.names.module(call.func, self.class_name_of(statement))) is not None
            for passed in passed_for(self.tree, self.module, self.tree.scope_of(statement), dotted_name(call.func))
        ]
        held, shared = self.names.stored_values, self.names.sharing_classes
        return bool(modules) and not any(name in held or self.may_train(name, trained) or kind in shared for name, kind in modules)

    def reads_what_trains(self, statements: Sequence[cst.CSTNode]) -> bool:
        """Whether ``statements`` read something an optimizer may train: a module that may hold parameters (called, or
        handed to a call), a parameter read as an attribute, or a tensor with a graph they did not make (a leaf, a
        graph built elsewhere). Where they read none, their graph starts at tensors they make themselves with
        ``requires_grad=True`` (a PINN's collocation points, cast once), and recomputed it would be the same."""
        for statement in statements:
            class_name = self.class_name_of(statement)
            read: list[cst.Name | cst.Attribute] = [*self.tree.findall(statement, cst.Name), *self.tree.findall(statement, cst.Attribute)]
            for node in read:
                module = self.names.module(node, class_name)
                value = self.value_read(node)
                if module is not None and module.trainable or value is not None and value.graph:
                    return True
                if isinstance(node, cst.Attribute) and self.names.is_parameter(node, class_name):
                    return True
        return False

    def _reads_a_leaf(self, statement: cst.CSTNode) -> bool:
        """Whether ``statement`` reads a tensor that requires grad of its own and that an optimizer may train: an input
        it is given (``SGD([image])``), a leaf of unknown making, a parameter read as an attribute
        (``teacher(x) * self.scale``)."""
        for name in self.tree.findall(statement, cst.Name):
            value = self.value_read(name)
            if value is not None and value.graph and not value.origins:
                if name.value in self.names.optimized_leaves or self.names.key(name) not in self.names.leaf_tensors:
                    return True
        class_name = self.class_name_of(statement)
        return any(self.names.is_parameter(a, class_name) for a in self.tree.findall(statement, cst.Attribute))

    @staticmethod
    def may_train(module: str | None, trained: set[str]) -> bool:
        """Whether an optimizer may update ``module``: it trains the module, a module holding it (``model`` holds
        ``model.encoder``) or one inside it; and, since ``self.model`` may be the ``model`` some optimizer trains, any
        module named through ``self`` by an optimizer that is not (or the other way round)."""
        if module is None:
            return True
        on_self = module.split(".")[0] == "self"
        return any(t == module or t.startswith(module + ".") or module.startswith(t + ".") or on_self != (t.split(".")[0] == "self") for t in trained)

    def called_with_graph(self, scope: Scope) -> bool | None:
        """Whether a call of the function ``scope`` in this file passes it a graph-carrying
        argument; None when the file never calls it (its callers are not known)."""
        if not isinstance(scope.node, cst.FunctionDef):
            return False
        return self._dataflow.graph_arguments.get(_function_name(scope.node, scope.class_name))

    def runs_every_step(self, scope: Scope) -> bool:
        """Whether the function ``scope`` runs again and again with the same globals and the same instance: a method of
        an nn.Module (each call is another step's forward), a trainer hook, or a function or method this file calls in
        a loop."""
        if not isinstance(scope.node, cst.FunctionDef):
            return False
        return scope.in_module_class or self.is_forward(scope) or _function_name(scope.node, scope.class_name) in self._dataflow.repeated_functions

    def is_forward(self, scope: Scope) -> bool:
        """Whether ``scope`` is what calling a module runs (``forward``, ``__call__``) or a hook
        whose result a trainer backwards."""
        node = scope.node
        if not isinstance(node, cst.FunctionDef) or scope.class_name is None:
            return False
        name = node.name.value
        return name in ("forward", "__call__") or self.names.trainer_hooks.get(scope.class_name) == name

    def built_outside(self, scope: Scope, values: Sequence[Value]) -> list[cst.CSTNode]:
        """Statements outside the function ``scope`` that built part of the graphs of ``values``: globals it reads,
        attributes its instance was constructed with; not what its callers pass it, which each call passes afresh."""
        function = scope.node
        if not isinstance(function, cst.FunctionDef):
            return []  # the module's own code, which runs once
        key = function.name.value if scope.class_name is None else (scope.class_name, function.name.value)
        parameters = {p.name.value for p in function.params.params}
        passed = {source for name, value in self._dataflow.arguments.get(key, {}).items() if name in parameters for source in self.value_nodes(value)}
        statements = {
            source.statement
            for value in values
            for source in self.value_nodes(value)
            if not self.contains(scope.node, source.statement) and source not in passed
        }
        return sorted(statements, key=self.start)

    def is_training_loop(self, loop: Loop) -> bool:
        """Whether the iterations of ``loop`` are training steps: a backward runs and an optimizer steps in each (a
        scheduler's step alone is none), or it is a trainer hook (``training_step``) that the trainer calls once a
        step. An epoch loop that calls a ``train()`` function is not."""
        if loop.is_call:
            return any(hook is loop.node for hook, _ in self.trainer_hooks())
        if loop.node not in self._training_loops:  # (asked of each loop around every statement a rule reads)
            self._training_loops[loop.node] = (GradientEffect.STEP | GradientEffect.BACKWARD) in self.gradient_effects(loop.node.body)
        return self._training_loops[loop.node]

    def constructed_every_step(self, class_name: str) -> bool:
        """Whether some instance of the local class ``class_name`` is made in a training loop:
        each step then has a fresh instance."""
        return any(self.is_training_loop(loop) for loops in self._dataflow.constructions.get(class_name, ()) for loop in loops)

    def site_of(self, call: cst.Call) -> BackwardSite:
        return self._dataflow.backward_sites[call]

    def sites_in(self, statement: cst.CSTNode | None) -> list[BackwardSite]:
        """The backwards whose statement is ``statement``, in the order of the source."""
        return self._sites_by_statement.get(id(statement), [])

    def sites_after(self, site: BackwardSite) -> list[BackwardSite]:
        """The backwards that stand after ``site`` in the source."""
        return [other for other in self.backward_sites if self.order(other.call) > self.order(site.call)]

    @cached_property
    def _sites_by_statement(self) -> dict[int, list[BackwardSite]]:
        sites: dict[int, list[BackwardSite]] = {}
        for site in self.backward_sites:
            sites.setdefault(id(site.statement), []).append(site)
        return sites

    def trainer_hooks(self) -> Iterator[tuple[cst.FunctionDef, str]]:
        """Methods whose result a trainer backwards (``training_step`` of a LightningModule under
        automatic optimization, ``compute_loss`` of a Hugging Face Trainer), with their class."""
        hooks = self.names.trainer_hooks
        for cls in self._classes:
            name = cls.name.value
            if name not in hooks or name in self.names.manual_optimization:
                continue
            if name in self.names.lightning_classes and self.names.automatic_optimization_unknown:
                continue  # whether Lightning backwards the result is not proved
            for statement in cls.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == hooks[name]:
                    yield statement, name

    def class_body(self, name: str | None) -> Sequence[cst.BaseStatement | cst.BaseSmallStatement]:
        """The statements of the class called ``name`` (empty when there is none)."""
        cls = next((c for c in self._classes if c.name.value == name), None)
        return cls.body.body if cls is not None else ()

    def runs_methods_of(self, node: cst.CSTNode, class_name: str | None) -> bool:
        """Whether ``node`` calls a module of the file's class ``class_name``, or of one whose constructor builds one
        (``GPT`` holds ``Block``s, each with a ``CausalSelfAttention``): the call runs that class's methods."""
        if not isinstance(node, cst.Call):
            return False
        module = self.names.module(node.func, self.class_name_of(node))
        return module is not None and module.is_local and class_name in {module.class_name, *self._submodules.get(module.class_name, ())}

    @cached_property
    def _submodules(self) -> dict[str, set[str]]:
        """The file's module classes whose instances each module class's ``__init__`` builds (as
        attributes, in a ``ModuleList`` or a ``Sequential``), through every level."""
        built: dict[str, set[str]] = {}
        for name in self.names.module_classes:
            constructor = self.constructor_of(name)
            calls = self.tree.findall(constructor.body, cst.Call) if constructor is not None else []
            built[name] = {call.func.value for call in calls if isinstance(call.func, cst.Name) and call.func.value in self.names.module_classes}
        changed = True
        while changed:
            changed = False
            for name, inner in built.items():
                deeper = set().union(*(built.get(i, set()) for i in inner)) - inner
                if deeper:
                    inner |= deeper
                    changed = True
        return built

    def class_name_of(self, node: cst.CSTNode | None) -> str | None:
        """The name of the innermost class whose body holds ``node``."""
        while node is not None and type(node) is not cst.ClassDef:  # (exact types: see ``dotted_name``)
            node = self.tree.parent(node)
        return node.name.value if node is not None else None

    def constructor_of(self, name: str | None) -> cst.FunctionDef | None:
        """The ``__init__`` of the class called ``name``, if it has one."""
        return next(
            (s for s in self.class_body(name) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"),
            None,
        )

    @cached_property
    def _classes(self) -> list[cst.ClassDef]:
        return self.tree.findall(self.module, cst.ClassDef)

    @property
    def loops(self) -> list[Loop]:
        return list(self._dataflow.loops.values())

    def exclusive(self, first: cst.CSTNode, second: cst.CSTNode, proved: bool = True) -> bool:
        """Whether no run reaches both statements (``exclusive_branches``)."""
        return ExclusiveBranches(self.tree, self.loops_around).exclusive(first, second, proved)

    def backwards_a_parameter(self, site: BackwardSite) -> bool:
        """Whether ``site`` is a function's backward of its own parameter, which each call of the
        function stands for (where a caller passes it a freed graph, the call is where it fails)."""
        return site.call in self._dataflow.parameter_backwards

    def calls_freeing(self, site: BackwardSite) -> list[cst.Call]:
        """The calls of the file's own functions that built part of what ``site`` backwards and
        freed it inside (a criterion that backwards the loss it returns)."""
        freeing = self._dataflow.calls_returning_freed
        return sorted((o.node for o in self.graph_nodes(site) if isinstance(o.node, cst.Call) and o.node in freeing), key=self.order)

    def under_no_grad(self, statement: cst.CSTNode) -> bool:
        """Whether ``statement`` runs with gradients off (``torch.no_grad()``, ``inference_mode``,
        a ``@torch.no_grad()`` function): what it computes records no graph."""
        return statement in self._dataflow.no_grad_statements

    def loops_around(self, statement: cst.CSTNode) -> tuple[Loop, ...]:
        """The loops (innermost first) a statement runs in, within its own function."""
        return self._dataflow.statement_loops.get(statement, ())

    # positions and structure -----------------------------------------------------------------
    def range(self, node: cst.CSTNode) -> CodeRange:
        return self._positions[node]

    def order(self, node: cst.CSTNode) -> int:
        """Sorts nodes as they appear in the source; cheaper than ``start``, which places them."""
        return self.tree.order(node)

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        position = self._positions[node].start
        return position.line, position.column

    def line(self, node: cst.CSTNode) -> int:
        return self._positions[node].start.line

    def block_of(self, statement: cst.CSTNode) -> Block | None:
        """The editable statement list that directly holds ``statement``."""
        owner = self.tree.parent(statement)
        if isinstance(owner, (cst.Module, cst.IndentedBlock)) and isinstance(statement, cst.BaseStatement):
            block = self._blocks.get(id(owner))
            if block is None:
                block = self._blocks[id(owner)] = Block(owner, owner.body)
            return block
        return None

    def statement_of(self, node: cst.CSTNode | None) -> cst.SimpleStatementLine | None:
        """The statement line an expression is in (None inside a compound statement's header)."""
        while node is not None and not isinstance(node, cst.SimpleStatementLine):
            if isinstance(node, cst.BaseCompoundStatement):
                return None
            node = self.tree.parent(node)
        return node

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
        return self.tree.findall(self.module, cst.SimpleStatementLine)

    @cached_property
    def _functions(self) -> list[cst.FunctionDef]:
        return self.tree.findall(self.module, cst.FunctionDef)

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        return self.tree.contains(outer, inner)

    # effects ---------------------------------------------------------------------------------
    def gradient_effects(self, node: cst.CSTNode) -> GradientEffect:
        """What ``node`` does to gradients and parameters: backwards, steps, zeroes, clips, reads ``.grad``
        (``optimizers.gradient_effects``), with what the methods of the file's own classes it calls do (one level
        deep)."""
        effects = gradient_effects(node, self.tree.findall, self.names.optimizers, self._holds_a_backward)
        for method in self._own_methods_called(node):
            effects |= gradient_effects(method.body, self.tree.findall, self.names.optimizers, self._holds_a_backward)
        return effects

    def _own_methods_called(self, node: cst.CSTNode) -> Iterator[cst.FunctionDef]:
        """The methods of the file's own plain classes (not modules) that ``node`` calls on their
        instances (``optimizer.ascend()`` on an object built from a class of the file)."""
        for call in self.tree.findall(node, cst.Call, method_called):
            class_name = self.names.instance_class(method_receiver(call), self.class_name_of(call))
            if class_name in self.names.module_classes:
                continue  # a module's methods compute (its ``step`` is a time step, not an update)
            for statement in self.class_body(class_name):
                if isinstance(statement, cst.FunctionDef) and statement.name.value == method_called(call):
                    yield statement

    def _holds_a_backward(self, node: cst.CSTNode) -> bool:
        span = self.tree.span(node)
        if span is None:
            return any(self.contains(node, site.call) for site in self.backward_sites)
        # Searched, not scanned: a long file asks this of every statement.
        first = bisect_left(self._backward_orders, span[0])
        return first < len(self._backward_orders) and self._backward_orders[first] < span[1]

    @cached_property
    def _backward_orders(self) -> list[int]:
        return [self.order(site.call) for site in self.backward_sites]

    def may_clear_gradients(self, node: cst.CSTNode) -> bool:
        """Whether running ``node`` may clear or overwrite parameters' gradients (*may*: what gradfix
        does not understand, yes; ``reach.GradientReach.may_clear``)."""
        return self._reach.may_clear(node)

    @cached_property
    def _reach(self) -> GradientReach:
        return GradientReach(self)

    def run_between(self, first: BackwardSite, second: BackwardSite) -> Sequence[cst.CSTNode] | None:
        """What runs after the first call and before the second, where gradfix can list it: going out from the second
        call's statement (through the statements around it: a ``try``, an ``if``, a loop, with what runs before it in
        each block and each one's header) to the block that holds the first call's statement, the statements between
        the two; or, where the first call is a statement of a function's own body, the rest of that function and
        what follows the statement that calls it. None where gradfix cannot list it. (A function of another checked
        file is its call: its summary says only that it backwards what it returns, not what runs after that.)"""
        function = first.scope.node if first.tensors else None
        rest = (
            function.body.body[function.body.body.index(first.statement) + 1 :]
            if isinstance(function, cst.FunctionDef) and first.statement in function.body.body
            else None
        )
        after: list[cst.CSTNode] = []
        node: cst.CSTNode = second.statement
        while (block := self.block_of(node)) is not None:
            before = block.statements[: block.index(node)]
            if first.statement in before:
                return [*before[before.index(first.statement) + 1 :], *after]
            calling = [i for i, statement in enumerate(before) if rest is not None and self._calls(statement, function)]
            if calling:
                return [*(rest or ()), *before[calling[-1] + 1 :], *after]
            owner = self.tree.parent(block.owner)
            while isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)):
                owner = self.tree.parent(owner)
            if not isinstance(owner, (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.Match)):
                return None
            header = (getattr(owner, "test", None), getattr(owner, "iter", None), getattr(owner, "subject", None))
            after = [*(n for n in header if n is not None), *(item.item for item in getattr(owner, "items", ())), *before, *after]
            node = owner
        return None

    def _calls(self, statement: cst.CSTNode, function: cst.CSTNode | None) -> bool:
        return any(self.function_called(call) is function for call in self.tree.findall(statement, cst.Call))

    def reads_gradients(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` reads a gradient itself (``p.grad``), where it is written."""
        return bool(self.tree.findall(node, cst.Attribute, is_grad))

    def call_that_may_read_gradients(self, node: cst.CSTNode, changing_only: bool = False) -> cst.Call | None:
        """The first call in ``node`` into code that may read or (``changing_only``: may) change gradients where gradfix does
        not look (a logger, an imported helper, a method of an object it does not know); None when every call is torch's,
        a module's forward (changing only: or ``model.parameters()``…), a builtin, a tensor's method or a function of the
        file whose own body reads no gradient."""
        return next((call for call in self._calls_not_read(node) if not (changing_only and self._keeps_parameters(call))), None)

    def may_change_parameters(self, node: cst.CSTNode) -> bool | None:
        """Whether running ``node`` changes parameters: True when an optimizer steps in it; None when gradfix cannot tell
        (the file updates parameters by hand, or ``node`` calls code gradfix does not read, other than a known
        module's methods that change no parameter); False when nothing in it can."""
        if GradientEffect.STEP in self.gradient_effects(node):
            return True if self.steps_for_certain(node) else None
        unread = (call for call in self._calls_not_read(node) if not self._keeps_parameters(call))
        return None if self.names.updated_by_hand or next(unread, None) is not None else False

    def _keeps_parameters(self, call: cst.Call) -> bool:
        """A method of a module gradfix knows that changes no parameter (``model.zero_grad()``, ``model.parameters()``);
        the same name on any other object may be anything (``trainer.train()``)."""
        func = call.func
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value in PARAMETER_KEEPING_METHODS
            and self.names.module(func.value, self.class_name_of(call)) is not None
        )

    def _calls_not_read(self, node: cst.CSTNode, reading: frozenset[str] = frozenset()) -> Iterator[cst.Call]:
        """The calls in ``node`` into code gradfix does not see into. ``reading``: the functions
        whose bodies are being read, on the way here (a recursive call is read once)."""
        for call in self.tree.findall(node, cst.Call):
            func = call.func
            if self.names.is_torch(func) or self.names.module(func, self.class_name_of(call)) is not None:
                continue
            if isinstance(func, cst.Name) and (
                func.value in BUILTINS_WITHOUT_GRADIENTS or func.value in reading or self._reads_no_gradient(func.value, reading)
            ):
                continue
            if isinstance(func, cst.Attribute) and (self._is_tensor(func.value) or self._is_container(func.value)):
                continue
            site = self._dataflow.backward_sites.get(call)
            if site is not None and (not site.api.function or type(func) is cst.Name and self._reads_no_gradient(func.value, reading, True)):
                continue  # (a backward; a function that backwards runs the rest of its body too, read where it is the file's)
            yield call

    def _is_tensor(self, expression: cst.BaseExpression) -> bool:
        """Whether ``expression`` is a tensor: a name holding one, what a torch function or a
        module returns, a tensor's method, attribute or item."""
        if isinstance(expression, cst.Name):
            # By what it is, not by holding a graph: an object built from parameters holds their
            # graph too (an optimizer of the file's own), and its methods may read gradients.
            value = self.value_read(expression)
            return value is not None and value.structure is TENSOR
        if isinstance(expression, cst.Call):
            func = expression.func
            if self.names.is_torch(func) or self.names.module(func, self.class_name_of(expression)) is not None:
                return True
            return isinstance(func, cst.Attribute) and self._is_tensor(func.value)
        if isinstance(expression, cst.Attribute) and self.names.is_parameter(expression, self.class_name_of(expression)):
            return True  # (``model[0].weight``)
        return isinstance(expression, (cst.Subscript, cst.Attribute)) and self._is_tensor(expression.value)

    def _is_container(self, expression: cst.BaseExpression) -> bool:
        """A list, tuple, dict or string the program built itself (``history.append(...)``)."""
        if isinstance(expression, (cst.SimpleString, cst.FormattedString, cst.List, cst.Dict, cst.Tuple)):
            return True
        value = self.value_read(expression) if isinstance(expression, cst.Name) else None
        return value is not None and isinstance(value.structure, (ListOf, TupleOf))

    def _reads_no_gradient(self, function_name: str, reading: frozenset[str] = frozenset(), backwarding: bool = False) -> bool:
        """A function of this file (the one function of that name, at any depth) whose body neither steps, zeroes, clips,
        reads ``.grad`` nor (unless ``backwarding``) backwards, and calls only what gradfix sees into: torch, modules,
        builtins, tensors' methods, and functions of the file that do the same (``gdpp_loss`` calling ``compute_diversity``)."""
        functions = [f for f in self._functions if f.name.value == function_name]
        if len(functions) != 1 or self.gradient_effects(functions[0].body) & ~(GradientEffect.BACKWARD if backwarding else GradientEffect(0)):
            return False
        return next(self._calls_not_read(functions[0].body, reading | {function_name}), None) is None

    def merged_backward(self, sites: Sequence[BackwardSite]) -> cst.Call | None:
        """One call that backwards every tensor of ``sites`` as their separate calls did (the last one's call, on the
        sum), or None. Tensors given their own gradient (``out.backward(grad)``) are backwarded together by
        ``torch.autograd.backward(tensors, gradients)``, which is what it is for. Whether the merge keeps the
        program's meaning (nothing reads the first gradient between them) is the caller's question."""
        earlier, last = sites[:-1], sites[-1]
        tensors = [tensor for site in sites if (tensor := site.tensor) is not None]
        if any(site.api != last.api for site in sites) or len(tensors) < len(sites) or any(site.retain_graph is None for site in earlier):
            return None  # one merged call must backward them all the same way, each one tensor
        gradients = [argument(site.call, 0, "gradient") if site.api == TENSOR_BACKWARD else None for site in sites]
        retains = [argument(site.call, site.api.retain_position, "retain_graph") for site in sites]
        for site, gradient, retain in zip(sites, gradients, retains):
            kept = {id(gradient), id(retain), id(argument(site.call, site.api.tensor_position, site.api.tensor_keyword))}
            if (site is not last or gradient is not None) and any(id(arg) not in kept for arg in site.call.args):
                return None  # arguments other than the tensor, its gradient and retain_graph would be lost
        if all(gradient is None for gradient in gradients):
            total = as_operand(tensors[0])
            for tensor in tensors[1:]:
                total = cst.BinaryOperation(left=total, operator=cst.Add(), right=as_operand(tensor))
            return last.with_tensor(total)
        torch = next((name for name, qualified in self.names.aliases.items() if qualified == "torch"), None)
        if torch is None:
            return None
        listed = ", ".join(code_of(tensor) for tensor in tensors)
        given = ", ".join("None" if gradient is None else code_of(gradient.value) for gradient in gradients)
        keep = "" if retains[-1] is None else f", retain_graph={code_of(retains[-1].value)}"
        return cst.ensure_type(cst.parse_expression(f"{torch}.autograd.backward([{listed}], [{given}]{keep})"), cst.Call)

    def steps_for_certain(self, node: cst.CSTNode) -> bool:
        """Whether ``node``, or a method of the file it calls, steps an optimizer of the file
        (``optimizers.steps_for_certain``): not a scheduler's ``step()``, nor an unknown object's."""
        bodies = [node, *(method.body for method in self._own_methods_called(node))]
        return any(steps_for_certain(body, self.tree.findall, self.names.optimizers) for body in bodies)

    def updates_parameters(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` steps or zeroes an optimizer (or calls any other method of a known one)."""
        return bool(self.gradient_effects(node) & GradientEffect.UPDATING)


def _function_name(function: cst.FunctionDef, class_name: str | None) -> str:
    """How the dataflow names a function: ``f`` or ``Class.method``."""
    name = function.name.value
    return name if class_name is None else f"{class_name}.{name}"
