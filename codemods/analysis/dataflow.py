"""Which values carry an autograd graph, where it was built, and what crosses loop boundaries.

An abstract interpreter walks every scope (the module body and each function body) once, statement
by statement, keeping an environment of ``Value``s. Branches are joined; a loop body is walked until
its head values stop changing (two or three passes), so the values that reach an iteration from the
previous one are known. Methods of ``nn.Module`` subclasses are walked the same way with one call as
the "iteration": attributes stored on ``self`` are what one call hands to the next.

The interpreter records the facts the rules need: every backward site with the value it backwards
and its enclosing loops, every loop with the values entering it and leaving an iteration, and the
loops each statement sits in.
"""

from __future__ import annotations

from functools import reduce
from itertools import compress
from operator import attrgetter, not_
from typing import Callable, Sequence, Union, cast

import libcst as cst

from ..frameworks import GRAD_ENABLING_CONTEXTS, GRAD_MODE_SWITCH, LIGHTNING_NO_GRAD_HOOKS, NO_GRAD_CONTEXTS
from ..summaries import ProjectSummaries
from .assignments import assigned_names, local_names, shared_containers, target_names
from .backward_calls import BackwardSite
from .calls import CallSemantics
from .dicts import DictsOfKnownKeys
from .expressions import TESTED_FALSE, TESTED_TRUE, Expressions, every_item_key, narrowed, truth_key
from .function_summaries import FunctionSummaries, FunctionSummary, GraphFacts, callee_key, graph_facts, result_facts, summary_facts
from .guards import bound_in_file, exits, in_the_first_iteration, last_iteration_arm, runs_at_most_once
from .loops import Carried, Env, Frame, Loop, LoopNode, Scope, expand, join_envs, join_values, same_graphs
from .saved_tensors import SavedTensors
from .syntax import decorator_callee, dotted_name, is_grad, method_called
from .torch_facts import TorchNames
from .tree import SyntaxTree, node_types
from .walk_order import called_on_self, callees_first, in_walk_order
from .values import (
    LEAF,
    NOTHING,
    NUMBER,
    TENSOR,
    UNKNOWN,
    FunctionOf,
    ListOf,
    Origin,
    Source,
    Structure,
    Value,
    combine,
    item_of,
    joined,
    part,
    yielded,
)

_MAX_PASSES = 4
_MAX_SUMMARY_ROUNDS = 5


class _Terminated(Exception):
    """Control left the current block (return, break, continue or raise)."""


_GRAPH = attrgetter("graph")
_STATEMENTS = node_types(cst.SimpleStatementLine, cst.BaseCompoundStatement)
_SMALL_STATEMENTS = node_types(cst.BaseSmallStatement)


class DataflowAnalysis(Expressions, CallSemantics, FunctionSummaries, SavedTensors, DictsOfKnownKeys):
    """Runs the interpreter over a whole module and keeps what it found."""

    def __init__(self, module: cst.Module, names: TorchNames, imported: ProjectSummaries | None, tree: SyntaxTree) -> None:
        self.names = names
        self._tree = tree
        self._module = module
        self.imported = imported or {}
        # Function summaries, by function name or (class, method); a call met before the function's
        # definition sees the summary of the previous round, so rounds repeat until they agree.
        self.summaries: dict[object, FunctionSummary] = {}
        self.summarized_functions: dict[object, cst.FunctionDef] = {}  # the definition of each summary's function
        # What each local class's constructor, function and method was called with in this file, by
        # parameter (by class name, function name or (class, method)): the body is walked with it,
        # so what it keeps, returns or backwards carries the callers' graphs (seen a round late,
        # as above). Only graph-carrying arguments are kept: a parameter the file never passes a
        # graph still holds what the analysis cannot see.
        self.arguments: dict[object, Env] = {}
        # The methods of the file's plain classes (not modules), which share state through ``self``.
        self._plain_methods = {
            (cls.name.value, method.name.value): method
            for cls in tree.findall(module, cst.ClassDef)
            if cls.name.value not in names.module_classes
            for method in cls.body.body
            if isinstance(method, cst.FunctionDef) and method.name.value != "__init__"
        }
        self._module_functions = {statement.name.value: statement for statement in module.body if type(statement) is cst.FunctionDef}
        # By class name: the attributes its methods assign on their object, and the methods it
        # defines (``self.model(x)`` calls what the object holds where the first, not the second).
        self._attributes_assigned: dict[str, set[str]] = {}
        self._method_names: dict[str, set[str]] = {}
        for cls in tree.findall(module, cst.ClassDef):
            defined = [s for s in cls.body.body if type(s) is cst.FunctionDef]
            self._method_names.setdefault(cls.name.value, set()).update(method.name.value for method in defined)
            assigned = self._attributes_assigned.setdefault(cls.name.value, set())
            for method in defined:
                me = method.params.params[0].name.value + "." if method.params.params else None
                assigned.update(n[len(me) :] for n in assigned_names(method.body, tree=tree) if me and n.startswith(me) and n.count(".") == 1)
        # The names a ``def`` binds outside a class body: calling one runs the file's code, not a value it holds.
        methods = {id(s) for cls in tree.findall(module, cst.ClassDef) for s in cls.body.body if type(s) is cst.FunctionDef}
        self._defined_functions = {f.name.value for f in tree.findall(module, cst.FunctionDef) if id(f) not in methods}
        self._constructor_parameters = {
            cls.name.value: [p.name.value for p in init.params.params[1:]]
            for cls in tree.findall(module, cst.ClassDef)
            for init in cls.body.body
            if isinstance(init, cst.FunctionDef) and init.name.value == "__init__" and init.params.params
        }
        # Every attribute chain the module names, under each of its prefixes (``model`` and
        # ``model.rnn`` for ``model.rnn.hidden``): assigning ``model`` forgets what was known of the
        # chains under it without scanning every name of the environment.
        self._attributes_of: dict[str, list[str]] = {}
        self.shared_objects = shared_containers(module, tree, self._only_reads_its_arguments)  # names whose object another name may hold
        self._globals_declared: dict[cst.CSTNode, frozenset[str]] = {}
        self._locals_of: dict[cst.FunctionDef, set[str]] = {}  # (asked at every call of the file's functions)
        self._literal_key_dicts: dict[str, bool] = {}  # names used only as dicts picked by literal keys
        self._named_by: dict[cst.FunctionDef, list[str]] = {}  # the names and chains a function reads of its scope's
        for attribute in dict.fromkeys(name for a in tree.findall(module, cst.Attribute) if (name := dotted_name(a)) is not None):
            parts = attribute.split(".")
            for end in range(1, len(parts)):
                self._attributes_of.setdefault(".".join(parts[:end]), []).append(attribute)
        self.backward_sites: dict[cst.Call, BackwardSite] = {}
        self.returned_with_arguments: dict[object, Value] = {}
        self._module_walk_order = in_walk_order(module.body, tree)
        for _ in range(_MAX_SUMMARY_ROUNDS):
            known = {key for key, summary in self.summaries.items() if summary.has_effect}
            arguments = {callee: graph_facts(env) for callee, env in self.arguments.items()}
            self._run_module(module)
            if self._saw_final_facts():
                break
            if {key for key, summary in self.summaries.items() if summary.has_effect} == known and arguments == {
                callee: graph_facts(env) for callee, env in self.arguments.items()
            }:
                break

    def _saw_final_facts(self) -> bool:
        """Whether another round would repeat this one: every call made before its function's definition got the summary
        the round ended with (none, when nothing defines it), and every body was walked with the arguments its callers
        ended up passing, and every loop carries the names the calls in its body leave graphs in. Most files define
        their functions and classes before they call them, and take one round."""
        return (
            all(summary_facts(self.summaries.get(key)) == summary_facts(seen) for key, seen in self._summaries_before_definition.items())
            and all(graph_facts(self.arguments.get(callee, {})) == facts for callee, facts in self._arguments_read)
            and all(self._walked_by(key, self.backward_sites) == walked for key, walked in self._sites_read_before_definition)
            and all(result_facts(self.returned_with_arguments.get(key)) == facts for key, facts in self._results_read_before_definition)
            and all(self._left_by(func, class_name, []) == names for func, class_name, names in self._left_read_before_definition)
        )

    def _run_module(self, module: cst.Module) -> None:
        # A function defined after its caller has its backwards walked later in the round: its caller sees the last round's.
        self._sites_of_last_round = self.backward_sites
        self._results_of_last_round = self.returned_with_arguments
        self.backward_sites = {}
        self.loops: dict[LoopNode, Loop] = {}
        self.statement_loops: dict[cst.CSTNode, tuple[Loop, ...]] = {}
        self.forward_results: dict[str, Structure] = {}  # what calling a local nn.Module returns
        # Local module classes whose methods keep a graph on ``self`` for the next call; functions that keep one on an object;
        # methods that hand ``self`` to code gradfix did not read (which may set any attribute of it).
        self.stateful_classes, self.keeping_functions, self.forgetting_methods = set[str](), set[cst.CSTNode](), set[cst.CSTNode]()
        self.returned: dict[cst.FunctionDef, Value] = {}
        # What each ``return`` of a function hands back, one by one (a must-fact about every path
        # reads them apart: ``returned`` is their join).
        self.returns: dict[cst.FunctionDef, tuple[Value, ...]] = {}
        # The calls read through a summary: the key of the file's function, another file's summary.
        self.callees: dict[cst.Call, object] = {}
        self.returned_items: dict[cst.FunctionDef, tuple[Value, ...] | None] = {}
        self.returned_keys: dict[cst.FunctionDef, dict[str, Value] | None] = {}  # (as ``returned_items``, of a dict's keys)
        self._returned_dicts: dict[cst.Call, dict[str, Value]] = {}  # calls of the file's functions that return one
        self.returned_given: dict[cst.FunctionDef, dict[tuple[str, bool], Value]] = {}
        self.items_given: dict[cst.FunctionDef, dict[tuple[str, bool], tuple[Value, ...] | None]] = {}
        self._tuple_items: dict[cst.Tuple, list[Value]] = {}  # each tuple written out, by its items
        self._dict_items: dict[cst.BaseExpression, dict[str, Value]] = {}  # each dict built with constant keys, by key
        self._read_arguments: dict[cst.Call, list[Value]] = {}  # (``CallSemantics._arguments_of``)
        # What each item of a call's tuple result holds, where the callee says it: the returns of
        # a function or forward of the file, or a torch.nn module's outputs.
        self._call_items: dict[cst.Call, tuple[Value, ...]] = {}
        self._items_given_no_graph: set[cst.Call] = set()  # of those, calls that pass no graph (in a loop: its last pass)
        self._read_callees: dict[cst.Call, object] = {}  # calls read as any other, of the file's functions
        # The calls of a name that holds one of torch's functions (``FunctionOf``): those functions.
        self.called_functions: dict[cst.Call, frozenset[str]] = {}
        # What a function of the file returns in the walk with what its callers pass it (a call
        # before the function's definition reads the last round's: ``_with_arguments``).
        self.returned_with_arguments = {}
        self._items_with_arguments: dict[object, tuple[Value, ...] | None] = {}  # (of this round's walks only)
        self._differentiable_outputs: set[cst.CSTNode] = set()  # calls of torch.nn modules returning tuples
        self.escaped: dict[cst.CSTNode, set[Origin]] = {}  # per scope: graphs stored, returned or handed away
        self.read_values: dict[cst.Name | cst.Attribute, Value] = {}  # what each name (attribute) read held (in a loop: its last pass)
        self.unread_results: set[cst.Call] = set()  # calls whose result's graph came out of code gradfix did not read (its last pass)
        # Right-hand sides, each target of a tuple assignment, what ``+=`` adds or ``.append(...)`` stores.
        self.assigned_values: dict[cst.BaseExpression, Value] = {}
        self.graph_arguments: dict[str, bool] = {}  # function -> whether a call in this file passes it a graph
        self.repeated_functions: set[str] = set()  # functions and methods called in a loop of this file
        self.no_grad_statements: set[cst.CSTNode] = set()  # run under no_grad / inference_mode
        self.calls_returning_freed: set[cst.Call] = set()  # calls of the file's functions that free what they return
        self.constructions: dict[str, list[tuple[Loop, ...]]] = {}  # local class -> loops around each construction
        # What each local class's constructor leaves on ``self``: read from outside as ``model.reg_loss``.
        self._constructed: dict[str, Env] = {}
        self._graph_nodes_kept: dict[frozenset[Source], tuple[frozenset[Origin], tuple[tuple[Loop, Env, Env], ...]]] = {}
        # What this round read of the previous round's facts (``_saw_final_facts``).
        self._summaries_before_definition: dict[object, FunctionSummary | None] = {}
        self._summarized: set[object] = set()
        self._arguments_read: list[tuple[object, GraphFacts]] = []
        self._sites_read_before_definition: list[tuple[object, dict[cst.Call, frozenset[Origin]]]] = []
        self._results_read_before_definition: list[tuple[object, tuple[object, ...] | None]] = []
        self._left_read_before_definition: list[tuple[cst.BaseExpression, str | None, frozenset[str]]] = []
        self._scope = Scope(module)
        self._loops: list[Loop] = []
        self._comprehension_names: frozenset[str] = frozenset()  # bound by the comprehensions being evaluated
        self._runs_unknown = 0  # (how many comprehensions, or operands that may not run, hold the expression evaluated)
        self.together: dict[cst.Call, tuple[Value, ...]] = {}  # ``zip(a, b)``: what one step yields of each
        self._module_items: set[str] = set()  # loop targets naming the items of a module container
        # The slots ``x[i]`` written since ``x`` and ``i`` last changed, by ``x`` and by ``i``: the env
        # keeps each one's value under the key ``x[i]``.
        self._slots: dict[str, set[str]] = {}
        self._literal_slots: set[str] = set()  # the slots picked by a literal key (``x["a"]``, ``x[0]``)
        self._items_known: set[str] = set()  # dicts every item of which was known somewhere (``every_item_key``)
        self._returned_shapes: dict[cst.Call, Structure] = {}  # calls of the file's functions read as any call
        self._frames: list[Frame] = []
        # The statement being walked, which the origins and backward sites its expressions make
        # belong to: set before any of its expressions is evaluated (``_exec_statement``).
        self._statement: cst.BaseStatement
        self._no_grad = 0
        self._run_scope(self._scope, self._module_walk_order, {})

    # scopes ----------------------------------------------------------------------------------
    def _run_scope(self, scope: Scope, body: Sequence[cst.CSTNode], env: Env) -> Env | None:
        """Walks one scope; returns the environment at its end (None for a method walked as
        repeated calls, or when the end is unreachable)."""
        saved = (self._scope, self._loops, self._frames, self._no_grad)
        self._scope, self._loops, self._frames = scope, [], [Frame(None)]
        # A function's body runs where it is called, not under the blocks around its definition.
        self._no_grad = int(
            isinstance(scope.node, cst.FunctionDef)
            and (
                any(self.names.qualify(decorator_callee(d)) in NO_GRAD_CONTEXTS for d in scope.node.decorators)
                or scope.class_name in self.names.lightning_classes
                and scope.node.name.value in LIGHTNING_NO_GRAD_HOOKS
            )
        )
        try:
            if isinstance(scope.node, cst.FunctionDef) and scope.in_module_class:
                method_body = scope.node.body
                self._run_loop(scope.node, env, iteration=lambda head: self._exec_body(method_body, head))
                self.returned[scope.node] = self.loops[scope.node].returned
                self.returns[scope.node] = self.loops[scope.node].returns
                return None
            end = self._exec_block(body, env)
            if isinstance(scope.node, cst.FunctionDef):
                frame = self._frames[0]
                end = join_envs([end, *frame.returns])  # where the call hands back to its caller
                # A generator function's call is an iterable of what it yields.
                self.returned[scope.node] = (
                    part(joined(frame.yielded), ListOf(joined(frame.yielded).structure)) if frame.yielded else joined(frame.returned)
                )
                self.returns[scope.node] = tuple(frame.returned)
                self.returned_items[scope.node] = frame.items_returned()
                self.returned_keys[scope.node] = frame.keys_returned()
                self.returned_given[scope.node] = frame.returned_given()
                self.items_given[scope.node] = frame.items_given()
            return end
        finally:
            self._scope, self._loops, self._frames, self._no_grad = saved

    def _define_function(self, node: cst.FunctionDef, class_name: str | None = None, env: Env | None = None) -> Env | None:
        # Calls of a module's methods act as iterations; construction happens once.
        called_repeatedly = class_name in self.names.module_classes and node.name.value != "__init__"
        start = dict(env or {})
        callee = callee_key(node, class_name)
        arguments = self.arguments.get(callee, {})
        self._arguments_read.append((callee, graph_facts(arguments)))
        constructor = node.name.value == "__init__"
        if constructor:
            start.update(arguments)  # what it keeps on self, later calls read
        # A parameter whose .grad the function reads is a tensor that requires grad.
        with_gradients = {dotted_name(a.value) for a in self._tree.findall(node.body, cst.Attribute, is_grad)}
        for parameter in node.params.params:
            if parameter.name.value in with_gradients:
                start[parameter.name.value] = LEAF
        scope = Scope(node, class_name, called_repeatedly)
        end = self._run_scope(scope, node.body.body, dict(start))
        if called_repeatedly and class_name is not None and node.name.value == "forward":
            self.forward_results[class_name] = self.loops[node].returned.structure
        if called_repeatedly and class_name is not None and _reads_what_the_last_call_kept(self.loops[node]):
            self.stateful_classes.add(class_name)
        # The summary says what the body does of its own (what it builds from parameters it reads,
        # what it backwards); the body's facts are those of a walk with what callers pass it.
        self._summarize(node, class_name)
        if arguments and not constructor:
            start = {**start, **arguments}
            end = self._run_scope(scope, node.body.body, dict(start))
            if any(name in arguments for name in self.summaries[callee].parameters):
                self.returned_with_arguments[callee] = self.returned.get(node, NOTHING)
                self._items_with_arguments[callee] = self.returned_items.get(node)
        left = self.loops[node].back_edge if called_repeatedly and node in self.loops else end
        if class_name is not None and not constructor:
            self._leave_for_caller(node, class_name, start, left, lambda name: name.startswith("self."))
        elif class_name is None and self._module_functions.get(node.name.value) is node:
            local = self._local_names(node)
            self._leave_for_caller(node, class_name, start, left, lambda name: name.split(".")[0] not in local)
        return end

    def _define_class(self, node: cst.ClassDef) -> None:
        """Methods start from the attributes ``__init__`` leaves on the instance."""
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        constructor = next((f for f in methods if f.name.value == "__init__"), None)
        constructed: Env = {}
        in_callee_order = callees_first([f for f in methods if f is not constructor], on_self=True, tree=self._tree)
        if constructor is not None:
            called = called_on_self(constructor, {method.name.value: method for method in in_callee_order}, self._tree)
            self._summarize_ahead([method for method in in_callee_order if method.name.value in called], node.name.value)
            end = self._define_function(constructor, node.name.value) or {}
            constructed = {name: value for name, value in end.items() if name.startswith("self.")}
        self._constructed[node.name.value] = constructed
        walked = iter(in_callee_order)
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef) and statement is not constructor:
                self._define_function(next(walked), node.name.value, constructed)
            elif isinstance(statement, cst.ClassDef):
                self._define_class(statement)

    def _summarize_ahead(self, functions: list[cst.FunctionDef], class_name: str) -> None:
        """Summarizes the methods ``functions`` a constructor of ``class_name`` calls on ``self``
        (``self._load()``) where no round has yet, before the constructor is walked: walked after
        it, as they must be (they start from what it leaves on the instance), they would have no
        summary for it to read, and the whole module would be walked again for it. Each is walked
        from an empty instance, and everything that walk recorded is undone but its summary, which
        the constructor reads as a summary read before the definition (``_summary``): a round ends
        final only where it is the summary the method's own walk ends with (``_saw_final_facts``)."""
        summarized = {key: function for function in functions if (key := callee_key(function, class_name)) not in self.summaries}
        if not summarized:
            return
        before = {name: _copied(value) for name, value in vars(self).items()}
        for function in summarized.values():
            self._define_function(function, class_name, {})
        summaries = {key: self.summaries[key] for key in summarized}
        vars(self).update(before)
        self.summaries.update(summaries)
        self.summarized_functions.update(summarized)

    # blocks and statements -------------------------------------------------------------------
    def _exec_body(self, suite: cst.BaseSuite, env: Env) -> Env | None:
        return self._exec_block(suite.body, env)

    def _exec_block(self, statements: Sequence[cst.CSTNode], env: Env | None) -> Env | None:
        for statement in statements:
            if env is None:
                break
            try:
                env = self._exec_statement(statement, env)
            except _Terminated:
                env = None
        return env

    def _exec_statement(self, statement: cst.CSTNode, env: Env) -> Env | None:
        statement_type = type(statement)  # (exact types: see ``dotted_name``)
        owner = statement if statement_type in _STATEMENTS else self._tree.parent(statement)  # (of a one-line body: its suite)
        if owner is not None and (owner is statement or type(owner) is cst.SimpleStatementSuite):
            self._statement = cast(cst.BaseStatement, owner)
            self.statement_loops[owner] = tuple(reversed(self._loops))
            if self._no_grad:
                self.no_grad_statements.add(owner)
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                self._statement = statement
                env = self._exec_small(small, env)
            return env
        if statement_type in _SMALL_STATEMENTS:
            return self._exec_small(cast(cst.BaseSmallStatement, statement), env)
        if type(statement) is cst.If:
            return self._exec_if_chain(statement, env)
        if type(statement) is cst.For:
            items = self._eval(statement.iter, env)
            # What a data loader or an unknown iterable yields is data; a list of losses, the items
            # of a dict of features, or the rows of a tensor, yield graphs.
            element = yielded(items, method_called(statement.iter) in ("items", "values"))
            # ``for block in self.blocks``: each item of a module container is a module, and
            # calling it a forward through its parameters.
            container = self.names.module(statement.iter, self._scope.class_name)
            modules = {statement.target.value} if container is not None and container.trainable and isinstance(statement.target, cst.Name) else set()
            together = self.together.get(statement.iter) if type(statement.iter) is cst.Call else None
            targets = [e.value for e in statement.target.elements] if isinstance(statement.target, (cst.Tuple, cst.List)) else []
            if together is None or len(targets) != len(together) or any(type(t) is cst.StarredElement for t in targets):
                together, targets = None, []

            def iteration(head: Env) -> Env | None:
                if together is None:
                    self._assign(statement.target, element, head)
                for target, item in zip(targets, together or ()):  # ``for w, loss in zip(weights, losses)``: each its own
                    self.assigned_values[target] = item
                    self._assign(target, item, head)
                return self._exec_body(statement.body, head)

            self._module_items |= modules
            try:
                after = self._run_loop(statement, env, iteration)
            finally:
                self._module_items -= modules
            if after is not None:
                for name in self.names.leaves_made_by.get(statement, ()):
                    held = after.get(name, NOTHING)
                    after[name] = held if held.graph else LEAF  # for p in [W, b]: p.requires_grad = True
            return self._exec_else(statement, after)
        if type(statement) is cst.While:

            def iteration(head: Env) -> Env | None:
                self._eval(statement.test, head)
                return self._exec_body(statement.body, head)

            after = self._run_loop(statement, env, iteration)
            return self._exec_else(statement, after)
        if type(statement) is cst.With:
            no_grad = any(self._is_no_grad(item.item, env) for item in statement.items)
            for item in statement.items:
                self._eval(item.item, env)
                if item.asname is not None:
                    self._assign(item.asname.name, self._context_value(item.item, env), env)
            saved = self._no_grad
            if any(self._may_enable_grad(item.item, env) for item in statement.items):
                self._no_grad = 0  # (``with torch.enable_grad():`` inside ``no_grad``: graphs again)
            self._no_grad += no_grad
            try:
                return self._exec_body(statement.body, env)
            finally:
                self._no_grad = saved
        if type(statement) is cst.Try:
            body_env = self._exec_body(statement.body, dict(env))
            handler_start = join_envs([env, body_env]) or env
            ends = [self._exec_body(handler.body, dict(handler_start)) for handler in statement.handlers]
            if statement.orelse is not None and body_env is not None:
                body_env = self._exec_body(statement.orelse.body, body_env)
            joined = join_envs([body_env, *ends])
            if statement.finalbody is not None:
                return self._exec_body(statement.finalbody.body, joined if joined is not None else dict(env))
            return joined
        if type(statement) is cst.FunctionDef:
            env[statement.name.value] = NOTHING
            # A module-level function reads the graph-carrying globals defined before it.
            is_global = isinstance(self._scope.node, cst.Module)
            self._define_function(statement, env=self._globals_read(statement, env) if is_global else None)
            return env
        if type(statement) is cst.ClassDef:
            env[statement.name.value] = NOTHING
            self._define_class(statement)
            return env
        if type(statement) is cst.Match:
            subject = self._eval(statement.subject, env)
            # (no case may match, unless the last one matches anything: ``case loss:``, ``case _:``)
            last = statement.cases[-1] if statement.cases else None
            ends = [] if last is not None and type(last.pattern) is cst.MatchAs and last.pattern.pattern is None and last.guard is None else [env]
            for case in statement.cases:
                matched = dict(env)
                # (``case loss:`` binds the subject itself; a name inside a pattern, a part of it)
                for capture in self._tree.findall(case.pattern, cst.MatchAs):
                    if capture.name is not None:
                        self._assign(capture.name, subject if capture is case.pattern else item_of(subject, UNKNOWN), matched)
                for starred in self._tree.findall(case.pattern, cst.MatchStar):
                    if starred.name is not None:
                        self._assign(starred.name, item_of(subject, UNKNOWN), matched)
                ends.append(self._exec_body(case.body, matched))
            return join_envs(ends)
        return env

    def _globals_read(self, function: cst.FunctionDef, env: Env) -> Env:
        """The graph-carrying globals of ``env`` that ``function`` names (a name, or an attribute
        chain such as ``model.hidden``): looked up by what it names rather than copied whole, since
        a long script has thousands of globals and hundreds of functions."""
        named = self._named_by.get(function)
        if named is None:
            local = self._local_names(function)
            every: list[str | None] = [name.value for name in self._tree.findall(function, cst.Name)]
            every += [dotted_name(attribute) for attribute in self._tree.findall(function, cst.Attribute)]
            named = self._named_by[function] = [name for name in dict.fromkeys(every) if name is not None and name.split(".")[0] not in local]
        return {name: env[name] for name in named if name in env and env[name].graph}

    def _exec_if_chain(self, statement: cst.If, env: Env) -> Env | None:
        """``if``/``elif``/``else``. A chain of two or more tests with no ``else`` that assigns a name
        in every branch is taken to be exhaustive for that name (``if mode == "a": loss = …`` /
        ``elif mode == "b": loss = …``): the value from before the chain does not flow past it."""
        branch_ends: list[Env | None] = []
        bodies: list[cst.BaseSuite] = []
        current: cst.If | None = statement
        start = env
        # (the arm only the last iteration takes ends it, and leaves the loop: its end is no next iteration's head)
        last = last_iteration_arm(self._tree, self._bound_names, self._frames[-1], statement, self._unchanged) if self._loops else None
        while current is not None:
            self._eval(current.test, start)
            then_start, start = narrowed(current.test, start)
            if self._loops:
                then_start, start = in_the_first_iteration(self._tree, self._bound_names, self._frames[-1], current.test, then_start, start)
            branch_ends.append(self._exec_body(current.body, then_start))
            bodies.append(current.body)
            orelse = current.orelse
            current = orelse if type(orelse) is cst.If else None
            if type(orelse) is cst.Else:
                branch_ends.append(self._exec_body(orelse.body, start))
                return join_envs(self._frames[-1].leave_by(branch_ends, last))
        joined = join_envs(self._frames[-1].leave_by([*branch_ends, start], last))
        if joined is None or len(bodies) < 2:
            return joined
        for name in set.intersection(*(assigned_names(body, rebinding_only=True, tree=self._tree) for body in bodies)):
            values = [end[name] for end in branch_ends if end is not None and name in end]
            # (taken to be exhaustive, not proved: a function the chain binds may be one bound before it)
            if values and type(reduce(join_values, values).structure) is not FunctionOf:
                joined[name] = reduce(join_values, values)
        return joined

    def _exec_else(self, statement: Union[cst.For, cst.While], env: Env | None) -> Env | None:
        if statement.orelse is None or env is None:
            return env
        return self._exec_body(statement.orelse.body, env)

    def _exec_small(self, small: cst.BaseSmallStatement, env: Env) -> Env:
        # (exact types: see ``dotted_name``)
        if type(small) is cst.Assign:
            value = self._eval(small.value, env)
            self.assigned_values[small.value] = value
            for target in small.targets:
                self._assign(target.target, value, env, small.value)
            if type(small.value) is cst.Dict and len(small.targets) == 1:
                self._know_every_item(small.targets[0].target, small.value, env)
        elif type(small) is cst.AnnAssign:
            if small.value is not None:
                self._assign(small.target, self._eval(small.value, env), env, small.value)
        elif type(small) is cst.AugAssign:
            added = self.assigned_values[small.value] = self._eval(small.value, env)
            held = self._eval(small.target, env)
            if dotted_name(small.target) in self.shared_objects and held.structure is not TENSOR and held.structure is not NUMBER:
                self._escape([added])  # (``store += [loss]`` extends the list another name holds too)
            value = combine([held, added], self._origin(small))
            self._assign(small.target, value, env)
        elif type(small) is cst.Expr:
            self._eval(small.value, env)
            if type(small.value) is cst.Call and self._may_keep_its_arguments(small.value):
                self._escape([self._eval(arg.value, env) for arg in small.value.args])
            if type(small.value) is cst.Call and exits(small.value.func, self._module, self._tree, self.names):
                raise _Terminated  # (as a ``raise``)
        elif type(small) is cst.Return:
            frame = next(f for f in reversed(self._frames) if f.loop is None or f.loop.is_call)
            if small.value is not None:
                frame.returned.append(self._eval(small.value, env))
                self._escape(frame.returned[-1:])
                items = self._tuple_items.get(small.value) if type(small.value) is cst.Tuple else None
                frame.returned_items.append(None if items is None else [v.without_graph() if self._no_grad else v for v in items])
                keys = self._dict_items.get(small.value)
                frame.returned_keys.append(None if keys is None else {k: v.without_graph() if self._no_grad else v for k, v in keys.items()})
                function = self._scope.node
                parameters = [p.name.value for p in function.params.params] if type(function) is cst.FunctionDef else []
                # (by identity: a join of the two markers is a value equal to both, and says neither)
                truths = {name: env.get(truth_key(name)) for name in parameters}
                frame.returned_truths.append(
                    {name: held is TESTED_TRUE for name, held in truths.items() if held is TESTED_TRUE or held is TESTED_FALSE}
                )
            frame.returns.append(env)
            raise _Terminated
        elif type(small) is cst.Raise:
            raise _Terminated
        elif type(small) is cst.Break or type(small) is cst.Continue:
            loop_frame = next((f for f in reversed(self._frames) if f.loop is not None and not f.loop.is_call), None)
            if loop_frame is not None:
                (loop_frame.breaks if type(small) is cst.Break else loop_frame.continues).append(env)
            raise _Terminated
        elif type(small) is cst.Del:
            self._delete(small.target, env)
        return env

    # loops -----------------------------------------------------------------------------------
    def _run_loop(self, node: LoopNode, env: Env, iteration: Callable[[Env], Env | None]) -> Env | None:
        loop = self.loops.get(node)
        if loop is None:
            carried = assigned_names(node.body, tree=self._tree) | self._left_by_calls(node.body)
            if type(node) is cst.FunctionDef:
                # Across calls only what is kept on the instance survives.
                self_name = node.params.params[0].name.value if node.params.params else "self"
                carried = {name for name in carried if name.startswith(self_name + ".")}
            elif isinstance(node, cst.For):
                carried |= set(target_names(node.target))
            parent = self._loops[-1] if self._loops else None
            loop = Loop(node, parent, self._scope, frozenset(carried), runs_once=runs_at_most_once(node, self._bound_names()))
            self.loops[node] = loop
        entry = {name: env[name] for name in loop.carried_names if name in env}
        loop.freed_at_entry = frozenset(compress(env, map(attrgetter("freed"), env.values())))
        # A nested loop runs again at every pass of the loops around it: it starts from what its iterations left at its
        # previous run, so it takes one pass when what enters it has not changed, not its two or three passes again (and
        # each of its own nested loops theirs: the innermost body would be walked 2^depth times).
        back_edge: Env = dict(loop.back_edge)
        # Names the loop only reads, whose graph a backward in it freed: the next iteration finds them freed (a forward computed
        # once before the loop, a target cached before it), each with whether only may-freed (``Value.freed_unsure``).
        freed_in_loop: dict[str, bool] = {}
        frame = Frame(loop)
        # The dicts known item by item as the loop starts, and what an iteration leaves in their items.
        known_items = [name for name in self._items_known & loop.carried_names if every_item_key(name) in env]
        items_left: Env | None = None
        for _ in range(_MAX_PASSES):
            head = dict(env)
            for name, unsure in freed_in_loop.items():
                head[name] = head[name].changed(freed=True, freed_unsure=unsure)
            for name in loop.carried_names:
                before, after = entry.get(name), back_edge.get(name)
                value = after if before is None else before if after is None else join_values(before, after)
                if value is None:  # (bound neither before the loop nor by an iteration)
                    continue
                head[name] = Value(
                    graph=value.graph,
                    origins=frozenset({Carried(loop, name)}) if value.graph else frozenset(),
                    structure=value.structure,
                    may_be_none=value.may_be_none,
                    freed=value.freed,
                    unbound=value.unbound,
                    graphless=value.graphless,
                    guessed=value.guessed,
                    unread=value.unread,
                    possible=value.possible,
                    freed_unsure=value.freed_unsure,
                )
            for name in loop.carried_names & self._slots.keys():
                if name not in known_items:  # (an item a previous iteration may have written: ``x[k] = ...``)
                    for slot in self._slots[name]:
                        head.pop(slot, None)
            for name in known_items:
                self._carry_items(loop, name, env, items_left, head)
            frame = Frame(loop, head=dict(head), before=env)
            self._frames.append(frame)
            self._loops.append(loop)
            try:
                end = iteration(head)
            finally:
                self._loops.pop()
                self._frames.pop()
            ends = join_envs([end, *frame.continues, *frame.returns]) or {}
            new_back_edge = {name: ends[name] for name in loop.carried_names if name in ends}
            newly_freed = {
                name for name, value in ends.items() if value.freed and name not in loop.carried_names and name in env and not env[name].freed
            } - freed_in_loop.keys()
            if type(loop.node) is cst.FunctionDef:  # (a method's calls)
                newly_freed -= self._local_names(loop.node)  # each call binds its own: the next one is not freed
            converged = same_graphs(new_back_edge, back_edge) and (not newly_freed or loop.runs_once)
            if known_items:
                new_items_left = {key: ends[key] for name in known_items for key in self._slots[name] if key in ends}
                converged = converged and items_left is not None and same_graphs(new_items_left, items_left)
                items_left = new_items_left
            back_edge = new_back_edge
            freed_in_loop.update((name, ends[name].freed_unsure) for name in newly_freed)
            if converged:
                break
        loop.entry, loop.back_edge = entry, back_edge
        loop.returned, loop.returns = joined(frame.returned), tuple(frame.returned)
        if type(node) is cst.FunctionDef:
            self.returned_items[node] = frame.items_returned()
            self.returned_keys[node] = frame.keys_returned()
            self.returned_given[node] = frame.returned_given()
            self.items_given[node] = frame.items_given()
        return join_envs([env, end, *frame.breaks])

    def _carry_items(self, loop: Loop, name: str, entry: Env, left: Env | None, head: Env) -> None:
        """The items of the dict ``name``, known item by item as the loop starts, at its head: what
        entered the loop joined with what an iteration left (``left``; None before one has run), a
        graph marked as the dict's ``Carried`` one; none known when an iteration may leave the dict
        not known item by item."""
        keys = [key for key in self._slots[name] if key in entry or (left is not None and key in left)]
        if left is not None and every_item_key(name) not in left:
            for key in keys:
                head.pop(key, None)
            return
        for key in keys:
            held = [value for value in (entry.get(key), None if left is None else left.get(key)) if value is not None]
            value = join_values(*held) if len(held) == 2 else held[0]
            if len(held) < (1 if left is None else 2):
                value = value.changed(unbound=True)  # (an item one of them does not hold)
            if value.graph:
                value = value.changed(origins=frozenset({Carried(loop, name)}))
            head[key] = value

    # names -----------------------------------------------------------------------------------

    def _local_names(self, function: cst.FunctionDef) -> set[str]:
        """The names a call of ``function`` binds afresh: its parameters and the names Python makes
        local to it (a write to ``x[i]`` or ``x.a`` binds no ``x``)."""
        local = self._locals_of.get(function)
        if local is None:
            params = function.params
            parameters = [*params.params, *params.kwonly_params, *params.posonly_params]
            parameters += [star for star in (params.star_arg, params.star_kwarg) if isinstance(star, cst.Param)]
            bound = {p.name.value for p in parameters} | local_names(function, self._tree)
            local = self._locals_of[function] = bound - self._declared_global(function)
        return local

    def _bound_names(self) -> frozenset[str]:
        return bound_in_file(self._module, self._tree, self.names)

    def _unchanged(self, name: str) -> bool:  # (no other code binds it, no other name holds its object)
        return not self._bound_elsewhere(name) and name not in self.shared_objects

    def _declared_global(self, scope: cst.CSTNode) -> frozenset[str]:
        """The names a function declares ``global`` or ``nonlocal``."""
        declared = self._globals_declared.get(scope)
        if declared is None:
            statements: list[cst.Global | cst.Nonlocal] = (
                [*self._tree.findall(scope.body, cst.Global), *self._tree.findall(scope.body, cst.Nonlocal)]
                if isinstance(scope, cst.FunctionDef)
                else []
            )
            declared = frozenset(name.name.value for statement in statements for name in statement.names)
            self._globals_declared[scope] = declared
        return declared

    def _is_no_grad(self, node: cst.BaseExpression, env: Env | None = None) -> bool:
        """A context that turns gradients off for certain: ``torch.no_grad()``, ``torch.inference_mode()`` (not given
        ``False``), ``torch.set_grad_enabled(False)``, or of a name that holds False on every path to it in ``env``
        (``training = False``, the ``else`` of ``if training:``)."""
        if not isinstance(node, cst.Call):
            return False
        name = self.names.qualify(node.func)
        first = node.args[0].value if node.args else None
        if name in NO_GRAD_CONTEXTS:
            return first is None or type(first) is cst.Name and first.value == "True"
        return (
            name == GRAD_MODE_SWITCH
            and type(first) is cst.Name
            and (
                first.value == "False"
                or env is not None
                and env.get(truth_key(first.value)) is TESTED_FALSE
                and not self._bound_elsewhere(first.value)
            )
        )

    def _bound_elsewhere(self, name: str) -> bool:
        """Whether code other than the path being walked may bind ``name`` between its test or binding and a read:
        a function of the module declares it ``global`` or ``nonlocal`` (``def turn_on(): global training``), or the
        module hands its namespace to code (``globals()``, ``vars()``, ``exec``, ``eval``)."""
        functions = self._tree.findall(self._module, cst.FunctionDef)
        return bool(self._tree.names(self._module, ("globals", "vars", "exec", "eval"))) or any(name in self._declared_global(f) for f in functions)

    def _may_enable_grad(self, node: cst.BaseExpression, env: Env) -> bool:
        """A context that may turn gradients back on: ``torch.enable_grad()``, ``torch.set_grad_enabled(flag)`` with
        a flag not ``False``, ``torch.inference_mode(False)``."""
        if not isinstance(node, cst.Call):
            return False
        name = self.names.qualify(node.func)
        return name in GRAD_ENABLING_CONTEXTS or (name == GRAD_MODE_SWITCH or name in NO_GRAD_CONTEXTS) and not self._is_no_grad(node, env)

    # graphs ----------------------------------------------------------------------------------
    def walked_nodes(self, value: Value, stops_at: Value) -> frozenset[Origin]:
        """The nodes a backward of ``value`` walks (and frees): all of its graph, except, for
        ``autograd.grad``, the graph that built its ``inputs`` (``stops_at``): a later backward may
        still walk that."""
        walked = self.graph_nodes(value)
        return walked - self.graph_nodes(stops_at) if stops_at.graph else walked

    def _sharing_graph(self, env: Env, nodes: frozenset[Origin]) -> list[str]:
        """The names of ``env`` whose graph has one of ``nodes``. A backward in a long script's
        module body asks this of its hundreds of graph-carrying globals: the names are filtered in C."""
        if not nodes:
            return []
        graph_names = [*compress(env, map(_GRAPH, env.values()))]
        graphs = map(self.graph_nodes, map(env.__getitem__, graph_names))
        return [*compress(graph_names, map(not_, map(nodes.isdisjoint, graphs)))]

    def graph_nodes(self, value: Value) -> frozenset[Origin]:
        """Every place that built part of ``value``'s graph, through all loop heads. Kept until a
        loop it was read from runs again: a backward asks it of every graph-carrying name in scope,
        and a long script has thousands (most of them built by no loop at all)."""
        kept = self._graph_nodes_kept.get(value.origins)
        if kept is not None and (not kept[1] or all(loop.entry is entry and loop.back_edge is back for loop, entry, back in kept[1])):
            return kept[0]
        loops_read: list[tuple[Loop, Env, Env]] = []
        nodes = frozenset(source for source in expand(value.origins, None, loops_read) if isinstance(source, Origin))
        self._graph_nodes_kept[value.origins] = (nodes, tuple(loops_read))
        return nodes


def _reads_what_the_last_call_kept(method: Loop) -> bool:
    """Whether what a call of ``method`` returns or keeps on ``self`` is built from a graph the
    previous call kept there (``self.hidden = self.cell(x, self.hidden)``), not only written anew."""
    # (Leaves it keeps, a list of parameters, have no graph a backward frees.)
    kept = [
        Carried(method, name)
        for name, value in method.back_edge.items()
        if value.graph and any(isinstance(source, Origin) for source in expand(value.origins, method))
    ]
    made = method.returned.origins.union(*(value.origins for value in method.back_edge.values()))
    return bool(kept) and not expand(made, method).isdisjoint(kept)


def _copied(value: object) -> object:
    """``value`` with the containers it holds copied two levels deep (a dict of sets, a dict of
    lists): what a walk records in the analysis's tables, so that it can be undone."""
    if type(value) is dict:
        return {key: type(item)(item) if type(item) in (dict, set, list) else item for key, item in value.items()}
    if type(value) is set or type(value) is list:
        return type(value)(value)
    return value
