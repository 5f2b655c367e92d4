"""Function summaries: what calling a function or method of the checked code does to graphs.

A part of ``DataflowAnalysis`` (``dataflow``): each function's body is walked once and summed up
(which parameters it backwards on every path, what it returns, what it leaves on ``self`` or in the
module's names for its caller), and a call of it reads that summary instead of walking the body
again; a call of another checked file's function reads that file's exported summary. What callers
pass a function is kept too, so its body is walked with their graphs. A call met before its
function's definition reads the previous round's summary (``DataflowAnalysis`` repeats rounds until
they agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import libcst as cst

from ..frameworks import BackwardApi
from ..summaries import ExportedSummary
from . import backward_calls
from .assignments import assigned_names, read_names
from .backward_calls import BackwardSite
from .kept_on_self import KeptArgument, KeptOnSelf, kept_on_self
from .loops import Env
from .syntax import decorator_callee, dotted_name, is_name, parameter_receiving
from .unread_parameters import arguments_reaching_nothing, parameter_detached_in_place, parameter_only_read, unread_parameters
from .values import LEAF, NOTHING, UNKNOWN, UNREAD_PARAMETERS, ListOf, Origin, Source, Structure, Value, combine


@dataclass(frozen=True)
class FunctionSummary:
    """What calling a function or method of the checked code does to graphs."""

    name: str
    parameters: tuple[str, ...]  # as callers pass them (``self`` left out of methods)
    backwarded: tuple[BackwardSite, ...]  # backwards of a parameter, on every path through the body
    returned: Value  # what a call returns; ``backwarded`` says it was already backwarded inside
    # The graphs a call leaves where its caller sees them, or that a backward inside it freed there:
    # on ``self`` for a method (``self.reg_loss += decay * reg``), in the module's names for a
    # module-level function (``experience.extend(...)``), by name (parameters it keeps are leaves:
    # nothing frees them).
    left_for_caller: Mapping[str, Value] = field(default_factory=dict)
    # What each item holds, when every return writes out a tuple of the same length.
    returned_items: tuple[Value, ...] | None = None
    # What each key holds, when every return builds a dict with constant keys (the keys all have).
    returned_keys: Mapping[str, Value] | None = None
    # What a call returns when it passes True or False for a parameter some return's path tested.
    returned_given: Mapping[tuple[str, bool], Value] = field(default_factory=dict)
    items_given: Mapping[tuple[str, bool], tuple[Value, ...] | None] = field(default_factory=dict)  # (as ``returned_items``)
    literal_defaults: Mapping[str, bool] = field(default_factory=dict)  # parameters that default to True or False
    # The parameters a method adds or appends to its object's attributes on every call
    # (``self.sum += val * n``: ``kept_on_self``).
    kept_on_self: Mapping[str, KeptOnSelf] = field(default_factory=dict)

    @property
    def has_effect(self) -> bool:
        return bool(self.backwarded or self.returned.backwarded)

    def backward_api(self, site: BackwardSite) -> BackwardApi:
        name = site.tensor.value
        return BackwardApi.of_function(self.name, self.parameters.index(name), name, site.api, site.retain_graph)

    def exported(self, backward_sites: Mapping[cst.Call, BackwardSite], returns_saved: bool) -> ExportedSummary:
        returned = [backward_sites[call] for call in self.returned.backwarded]
        return ExportedSummary(
            self.name,
            self.parameters,
            tuple((site.tensor.value, site.api, site.retain_graph) for site in self.backwarded),
            (returned[0].api, returned[0].retain_graph) if returned else None,
            returns_saved,
        )


class FunctionSummaries:
    """The summary half of ``DataflowAnalysis``: summing up the walked functions and reading the
    summaries at their calls."""

    def _leave_for_caller(self, node: cst.FunctionDef, class_name: str | None, start: Env, left: Env | None, shared) -> None:
        """Records, in the function's summary, the graphs a call leaves in the ``shared`` names its
        caller sees: those it writes, or a method of the file it calls leaves (``super().before_step()``),
        built from graphs or proved to hold none on every path out (``self.h = self.h.detach()``), and
        those its backwards freed."""
        if left is None:
            return
        written = assigned_names(node.body, tree=self._tree)
        for call in self._tree.findall(node.body, cst.Call):
            called = self.summaries.get(self.callees.get(call)) if call in self.callees else None
            written |= set(called.left_for_caller) if isinstance(called, FunctionSummary) else set()

        def leaves(name: str, value: Value) -> bool:
            if name in written and (value.origins or value.graphless and (name in start or not value.unbound)):
                return True
            return value.freed and name in start and not start[name].freed

        kept = {name: value for name, value in left.items() if shared(name) and leaves(name, value)}
        key = callee_key(node, class_name)
        self.summaries[key] = replace(self.summaries[key], left_for_caller=kept)

    def _summarize(self, node: cst.FunctionDef, class_name: str | None) -> None:
        parameters = [p.name.value for p in node.params.params]
        static = any(decorator_callee(d).value == "staticmethod" for d in node.decorators if isinstance(decorator_callee(d), cst.Name))
        if class_name is not None and parameters and not static:
            parameters = parameters[1:]  # self
        sites = (self.backward_sites.get(call) for call in self._tree.findall(node, cst.Call))  # not all the file's
        backwarded = tuple(
            site
            for site in sites
            if site is not None
            and site.scope.node is node
            and isinstance(site.tensor, cst.Name)
            and site.tensor.value in parameters
            and not site.loops
            and self._unconditional(site.statement, node)
            and not self._rebound_before(site.tensor.value, site.statement, node)
        )
        name = node.name.value if class_name is None else f"{class_name}.{node.name.value}"
        defaults = {
            p.name.value: p.default.value == "True"
            for p in node.params.params
            if type(p.default) is cst.Name and p.default.value in ("True", "False")
        }
        summary = FunctionSummary(
            name,
            tuple(parameters),
            backwarded,
            self.returned.get(node, NOTHING),
            returned_items=self.returned_items.get(node),
            returned_keys=self.returned_keys.get(node),
            returned_given=self.returned_given.get(node, {}),
            items_given=self.items_given.get(node, {}),
            literal_defaults=defaults,
            # (a fact of the method's syntax alone: computed once, not at each round)
            kept_on_self=self._tree.kept(kept_on_self, node, lambda: kept_on_self(node, parameters, self._tree))
            if class_name is not None and not static
            else {},
        )
        key = node.name.value if class_name is None else (class_name, node.name.value)
        self.summaries[key] = summary
        self.summarized_functions[key] = node
        self._summarized.add(key)

    def arguments_kept(self, call: cst.Call) -> list[KeptArgument]:
        """What ``call``, a call of a method of the file's class on an object other than ``self``
        (``meter.update(loss, n)``), hands a parameter that method keeps on the object: each such
        argument, with what the method does of it."""
        key = self.callees.get(call)
        summary = self.summaries.get(key) if type(key) is tuple else None
        if summary is None or not summary.kept_on_self or type(call.func) is not cst.Attribute or dotted_name(call.func.value) == "self":
            return []
        if any(arg.star for arg in call.args):
            return []
        bound = dict(zip(summary.parameters, (arg.value for arg in call.args if arg.keyword is None)))
        bound.update((arg.keyword.value, arg.value) for arg in call.args if arg.keyword is not None)
        left = frozenset(name.partition(".")[2] for name, value in summary.left_for_caller.items() if name.startswith("self.") and value.graph)
        return [KeptArgument(bound[name], kept, key[0], left) for name, kept in summary.kept_on_self.items() if name in bound]

    def _summary(self, key: object) -> FunctionSummary | None:
        summary = self.summaries.get(key)
        if key not in self._summarized:
            self._summaries_before_definition.setdefault(key, summary)
        return summary

    @staticmethod
    def _unconditional(statement: cst.CSTNode, function: cst.FunctionDef) -> bool:
        return any(s is statement for s in function.body.body)

    def _rebound_before(self, name: str, statement: cst.CSTNode, function: cst.FunctionDef) -> bool:
        """Whether a statement of ``function``'s body before ``statement`` binds ``name`` again to a
        value it does not read (``loss_d = critic(fake.detach()).mean()``): a backward of it there
        backwards what the body made, not what the caller passed. One that reads it (``loss = loss *
        2``, ``loss += reg``) still holds the caller's graph."""
        earlier = function.body.body[: [id(s) for s in function.body.body].index(id(statement))]
        return any(name in assigned_names(s, tree=self._tree) and name not in read_names(s, self._tree) for s in earlier)

    def _call_summary(self, call: cst.Call, env: Env) -> Value | None:
        """A call of a function or method of the checked code whose summary backwards an argument
        or returns a tensor it already backwarded: record the backward, return the result."""
        imported = self._imported_summary(call.func)
        if imported is not None:
            return self._call_imported(call, imported, env)
        summary = self._summary_of(call.func)
        self._returned_dicts.pop(call, None)
        self._read_arguments.pop(call, None)
        if summary is None:
            return None
        values = self._eval_all([arg.value for arg in call.args], env)
        if summary.returned_keys is not None and not summary.has_effect:
            self._returned_dicts[call] = dict(summary.returned_keys)
            self._note_graph_given(call, self._reaching(summary_key(summary), call, values))
        self._record_arguments(summary_key(summary), summary.parameters, call, values)
        self.callees[call] = summary_key(summary)
        if summary.kept_on_self:
            self.assigned_values.update((arg.value, value) for arg, value in zip(call.args, values))  # (what it keeps)
        if self._loops:
            self.repeated_functions.add(summary.name)
        self.graph_arguments[summary.name] = self.graph_arguments.get(summary.name, False) or any(v.graph for v in values)
        if type(call.func) is cst.Attribute and (dotted_name(call.func.value) == "self" or _is_super(call.func.value)):
            self._record_object_state(summary_key(summary), env)
            if self.summarized_functions.get(summary_key(summary)) in self.forgetting_methods:
                self._objects_may_change(call, env)  # (it hands ``self`` to code gradfix did not read)
            env.update(summary.left_for_caller)  # self.add_regularization_loss(...) in __init__: what it keeps stays
        elif self._module_functions.get(summary.name) is not None:
            caller = self._scope.node
            shadowed = self._local_names(caller) if type(caller) is cst.FunctionDef else set()
            self._record_module_state(summary.name, env, shadowed)
            env.update((name, value) for name, value in summary.left_for_caller.items() if name.split(".")[0] not in shadowed)
        self._free_what_the_call_walked(summary, values, env)
        returned_structure = self._returned_structure(summary, call)
        if summary.returned.graphless and not summary.has_effect:
            # proved on every path, whatever it was given (``return float(acc.item())``)
            return Value(structure=returned_structure, graphless=True)
        if not summary.has_effect and (items := self._returned_items(summary, call)) is not None:
            self._keep_returned_items(call, items, self._reaching(summary_key(summary), call, values))
        if not summary.has_effect:
            if not summary.returned.graph:
                self._returned_shapes[call] = returned_structure  # (the call is read as any other)
                self._read_callees[call] = summary_key(summary)
                self._read_arguments[call] = values  # (evaluated once: ``_arguments_of``)
                return None
            if self._frozen_module(call.func):
                # a module whose parameters were all set not to require grad: its result holds
                # what its inputs bring, and no graph of its own
                return combine(values, self._origin(call), returned_structure)
            if not summary.returned.origins:
                # only leaves it made or parameters (``w = torch.randn(..., requires_grad=True)``;
                # ``return [w, b]``): what no operation built, no forward of it is repeated
                return Value(graph=True, structure=returned_structure)
            # self.sample_G(n): a method that returns what it built from parameters
            # (parameters of code it did not read, where that is all it builds from: only possible)
            parameters = UNREAD_PARAMETERS if summary.returned.possible else LEAF
            built = combine([*self._flowing(summary_key(summary), call, values), parameters], self._origin(call), returned_structure)
            if self._returned_items(summary, call) is None:
                # Only guessed where its return is (a dict holding an optimizer of another package);
                # a tuple's items say it each for itself (``_items_of_the_call``).
                built = built.changed(guessed=summary.returned.guessed, unread=summary.returned.unread)
            return self._freed_inside(call, summary, built)
        self._eval(call.func, env)
        for inner in summary.backwarded:
            api = summary.backward_api(inner)
            if backward_calls.tensor_expression(api, call) is not None:
                self._record_backward(call, api, env)
        result = combine(self._reaching(summary_key(summary), call, values), self._origin(call), returned_structure, known_operation=False)
        if summary.returned.backwarded:
            frees = any(self.backward_sites[inner].retain_graph is False for inner in summary.returned.backwarded if inner in self.backward_sites)
            # (a graph the call built, whatever it was given: ``return loss`` after ``loss.backward()``)
            origins = result.origins | {self._origin(call)}
            result = result.changed(graph=True, origins=origins, freed=frees, backwarded=summary.returned.backwarded, possible=False)
        return self._freed_inside(call, summary, result)

    def _keep_returned_items(self, call: cst.Call, items: tuple[Value, ...], passed: Sequence[Value]) -> None:
        """What each item of the tuple ``call`` returns holds, as its callee's returns say, and whether
        the call passes it a graph: an item the callee builds from no graph of its own (from its
        arguments, or from code gradfix did not read given none) holds none where it passes none."""
        self._call_items[call] = items
        self._note_graph_given(call, passed)

    def _note_graph_given(self, call: cst.Call, passed: Sequence[Value]) -> None:
        """Whether ``call``, whose callee's items are known (a tuple's, a dict's), passes it a graph."""
        if any(value.graph for value in passed):
            self._items_given_no_graph.discard(call)
        else:
            self._items_given_no_graph.add(call)

    def _arguments_changed(self, call: cst.Call, env: Env) -> None:
        """What a call may do to the objects it is handed. A list whose graph an earlier backward
        freed, handed to a call that may change it (a helper that backwards what it holds, then
        ``losses.clear()``), only may hold what was freed after it; not where the call only reads it
        (``torch.stack(losses)``, a function of the file whose body only reads that parameter). A
        tensor handed to a function of the file that detaches that parameter in place on every path
        (``h.detach_()``) holds no graph after it."""
        for position, arg in enumerate(call.args):
            value = env.get(arg.value.value) if type(arg.value) is cst.Name else None
            if value is None or not value.graph:
                continue
            received = self._parameter_received(call, position, arg)
            if received is not None and parameter_detached_in_place(*received, self._tree):
                env[arg.value.value] = value.without_graph()
            elif value.freed and not value.freed_unsure and isinstance(value.structure, ListOf) and not self._only_reads_its_arguments(call):
                if received is None or not parameter_only_read(*received, self._tree, self._only_reads_its_arguments):
                    env[arg.value.value] = value.changed(freed_unsure=True)

    def _parameter_received(self, call: cst.Call, position: int, arg: cst.Arg) -> tuple[cst.FunctionDef, str] | None:
        """The function of the file ``call`` runs and the parameter ``arg`` arrives as; None where gradfix cannot tell."""
        key = self.callees.get(call)
        function = self.summarized_functions.get(key) if key is not None and not isinstance(key, ExportedSummary) else None
        func = call.func
        through_class = type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in self.names.local_classes
        if function is None or arg.star or through_class:
            return None  # (``Trainer.flush(self, losses)``: which parameter it arrives as, gradfix does not follow)
        bound = isinstance(key, tuple) and not any(decorator_callee(d) == "staticmethod" for d in function.decorators)
        parameter = parameter_receiving(function, position, arg.keyword.value if arg.keyword is not None else None, bound)
        return None if parameter is None else (function, parameter)

    def _returned_structure(self, summary: FunctionSummary, call: cst.Call) -> Structure:
        """The structure a call of ``summary``'s function returns (``_given``)."""
        given = _given(summary, call)
        return summary.returned.structure if given is None else summary.returned_given[given].structure

    def _returned_items(self, summary: FunctionSummary, call: cst.Call) -> tuple[Value, ...] | None:
        """What each item of the tuple a call of ``summary``'s function returns holds (``_given``)."""
        given = _given(summary, call)
        return summary.returned_items if given is None else summary.items_given.get(given)

    def _free_what_the_call_walked(self, summary: FunctionSummary, arguments: Sequence[Value], env: Env) -> None:
        """After a call of a function of the file whose body backwards, on every path and without
        keeping the graph, a value built from what it was given (``critic.fit(prediction, target)``
        backwards a loss of ``prediction``): the caller's names that share the graph this call
        passed in are freed. (A backward of a parameter itself is the call's own backward site.)"""
        passed = frozenset().union(*(self.graph_nodes(value) for value in arguments if value.graph))
        if not passed or summary.backwarded:
            return
        key = summary_key(summary)
        sites = self.backward_sites
        if key not in self._summarized:
            sites = self._sites_of_last_round
            self._sites_read_before_definition.append((key, self._walked_by(key, sites)))
        for site in sites.values():
            function = site.scope.node
            if (
                not isinstance(function, cst.FunctionDef)
                or (function.name.value if site.scope.class_name is None else (site.scope.class_name, function.name.value)) != key
                or site.retain_graph is not False
                or site.api.guessed
                or any(not loop.is_call for loop in site.loops)
                or not self._unconditional(site.statement, function)
                or any(self._tree.follows(site.statement, r) for r in self._tree.findall(function.body, cst.Return))
            ):
                continue
            walked = self.graph_nodes(site.value) & passed
            for name in self._sharing_graph(env, walked):
                env[name] = env[name].changed(freed=True)

    def _walked_by(self, key: object, sites: Mapping[cst.Call, BackwardSite]) -> dict[cst.Call, frozenset[Origin]]:
        """What each backward of the function ``key`` walks, by call: a fact a caller met before
        the definition reads from the previous round."""
        return {
            call: self.graph_nodes(site.value)
            for call, site in sites.items()
            if isinstance(site.scope.node, cst.FunctionDef) and callee_key(site.scope.node, site.scope.class_name) == key
        }

    def _record_object_state(self, callee: object, env: Env) -> None:
        """What a method of a plain class called on ``self`` finds on the object: the graphs the
        caller's ``self`` holds that the method names (``self.pred_real``, kept and freed by
        ``backward_D``, then read by ``backward_G``), joined over calls as its parameters are."""
        method = self._plain_methods.get(callee)
        if method is None:
            return
        named = dict.fromkeys(dotted_name(a) for a in self._tree.findall(method.body, cst.Attribute))
        self._record_found(callee, {name: env[name] for name in named if name is not None and name.startswith("self.") and name in env})

    def _left_by_calls(self, body: cst.CSTNode) -> set[str]:
        """The names that calls in ``body`` of the file's functions and methods may leave graphs in
        for their caller (``remember()`` filling the module's ``memory``): a loop carries them."""
        left: set[str] = set()
        class_name = self._scope.class_name
        for call in self._tree.findall(body, cst.Call):
            unsummarized: list[object] = []
            names = self._left_by(call.func, class_name, unsummarized)
            if unsummarized:
                self._left_read_before_definition.append((call.func, class_name, names))
            left.update(names)
        return left

    def _left_by(self, func: cst.BaseExpression, class_name: str | None, unsummarized: list[object]) -> frozenset[str]:
        """The names a call of ``func`` from ``class_name``'s methods may leave graphs in; the keys of
        the summaries it read before their function's definition was walked go to ``unsummarized``.
        The loop reads these names alone (a round ends final where they are the same: a function
        defined in the loop's body leaves none, whether its summary was there yet or not)."""

        def read(key: object) -> FunctionSummary | None:
            if key not in self._summarized:
                unsummarized.append(key)
            return self.summaries.get(key)

        summary = self._summary_of(func, class_name, read)
        return frozenset(summary.left_for_caller) if summary is not None else frozenset()

    def _frozen_module(self, func: cst.BaseExpression) -> bool:
        """Whether ``func`` calls a frozen module, or a method of one (``model(x)``, ``model.generate(x)``)."""
        class_name = self._scope.class_name
        module = self.names.module(func, class_name)
        if module is None and isinstance(func, cst.Attribute):
            module = self.names.module(func.value, class_name)
        return module is not None and module.frozen

    def _record_module_state(self, callee: str, env: Env, shadowed: set[str]) -> None:
        """What a module-level function finds in the module's names it reads when it is called
        (``experience``, filled by another function before this call), joined over calls as its
        parameters are; the caller's own local names (``shadowed``) are not those."""
        found = self._globals_read(self._module_functions[callee], env)
        self._record_found(callee, {name: value for name, value in found.items() if name.split(".")[0] not in shadowed})

    def _freed_inside(self, call: cst.Call, summary: FunctionSummary, result: Value) -> Value:
        """``result``, freed where what the function returns is freed inside it (a criterion that
        backwards the loss it returns when it is given an optimizer)."""
        if not summary.returned.freed or not result.graph:
            return result
        self.calls_returning_freed.add(call)
        return result.changed(freed=True)

    def _call_imported(self, call: cst.Call, summary: ExportedSummary, env: Env) -> Value:
        """The same for a function of another checked file: a backward inside it has no site here,
        so the call stands for it."""
        values = self._eval_all([arg.value for arg in call.args], env)
        self.callees[call] = summary
        for parameter, inner, retains in summary.backwarded:
            api = BackwardApi.of_function(summary.name, summary.parameters.index(parameter), parameter, inner, retains)
            if backward_calls.tensor_expression(api, call) is not None:
                self._record_backward(call, api, env)
        result = combine(values, self._origin(call), UNKNOWN, known_operation=False)
        if summary.returns_backwarded is None:
            return result
        api, retained = summary.returns_backwarded
        # What it backwarded had a graph, which the call built: its node stands for it.
        result = result.changed(graph=True, origins=result.origins | {self._origin(call)}, possible=False)
        self.backward_sites.setdefault(
            call,
            BackwardSite(call, self._statement, api, (), result, retained, False, tuple(reversed(self._loops)), self._scope),
        )
        return result.changed(graph=True, freed=retained is False, backwarded=frozenset({call}))

    def _imported_summary(self, func: cst.BaseExpression) -> ExportedSummary | None:
        if not self.imported:
            return None
        qualified = self.names.qualify(func)
        if qualified in self.imported:
            found = self.imported[qualified]
            return found if found.module_class is None else None  # (a class: building it is read as a module's)
        receiver, method = (func.value, func.attr.value) if isinstance(func, cst.Attribute) else (func, None)
        built_from = self.names.constructed.get(self.names.key(receiver) or "")
        if built_from is None:
            return None
        methods = [method] if method else ["__call__", "forward"]
        return next((self.imported[f"{built_from}.{m}"] for m in methods if f"{built_from}.{m}" in self.imported), None)

    def _summary_of(
        self, func: cst.BaseExpression, class_name: str | None = None, read: Callable[[object], FunctionSummary | None] | None = None
    ) -> FunctionSummary | None:
        """The summary of the file's function or method a call of ``func`` runs (from the calling
        scope's class, or ``class_name``), each summary looked up by ``read`` (``_summary``)."""
        if read is None:
            class_name, read = self._scope.class_name, self._summary
        if type(func) is cst.Name:  # (exact types: see ``dotted_name``)
            if func.value in self.names.local_classes:
                return None
            if self.names.instance_class(func, class_name) is not None:
                instance = self.names.method_class(func, class_name, "__call__", "forward")
                return instance and (read((instance, "__call__")) or read((instance, "forward")))
            function = self.names.module_function(func)
            return None if function is None else read(function)
        if type(func) is cst.Attribute:
            if _is_super(func.value):  # (the method of the class's first base of the file that defines it)
                bases = self.names.local_bases.get(class_name or "", ())
                return next((summary for base in bases if (summary := read((base, func.attr.value))) is not None), None)
            if self.names.instance_class(func.value, class_name) is not None:
                instance = self.names.method_class(func.value, class_name, func.attr.value)
                return instance and read((instance, func.attr.value))
            if self.names.instance_class(func, class_name) is not None:
                instance = self.names.method_class(func, class_name, "__call__", "forward")
                return instance and (read((instance, "__call__")) or read((instance, "forward")))
        return None

    def _read_result(self, callee: object, call: cst.Call, values: list[Value], structure: Structure) -> Value | None:
        """What a call of a function of the file returns, where its summary (a walk with no graph in
        its parameters) says nothing of what it makes of its arguments' graphs, as the walk with
        what its callers pass shows it (``returned_with_arguments``): none, when that walk returns
        none (a helper that detaches what it is given, or computes with gradients off); a graph
        built from its arguments by the operations it runs otherwise, guessed (or out of code gradfix
        did not read) where that walk's is. None where no caller passed it a graph."""
        returned = self._with_arguments(callee) if callee is not None else None
        if returned is None:
            return None
        if not returned.graph:
            return Value(structure=structure)
        return combine(
            self._flowing(callee, call, values), self._origin(call), structure, guessed=returned.guessed or None, unread=returned.unread or None
        )

    def _with_arguments(self, callee: object) -> Value | None:
        """What the walk of ``callee`` with what its callers pass returned: this round's walk, or,
        where this round has not walked it yet (a call before the function's definition), the
        last round's, which the round keeps to check against its own (``_saw_final_facts``): a
        call read as if no caller passed a graph would take a detaching helper's result for its
        arguments' graph."""
        if callee in self._summarized:
            return self.returned_with_arguments.get(callee)
        returned = self._results_of_last_round.get(callee)
        self._results_read_before_definition.append((callee, result_facts(returned)))
        return returned

    def _flowing(self, callee: object, call: cst.Call, values: list[Value]) -> list[Value]:
        """The arguments whose graph may reach what a call of ``callee`` returns: all, but those
        bound to a parameter that reaches nothing (``_reaching``) and those the walk with what its
        callers pass (``returned_with_arguments``) carried to no return (a gradient penalty that
        makes its input a fresh leaf). An argument known by no origin of its own (a leaf, a marker
        of a loop) cannot be told apart by that walk, and may."""
        values = self._reaching(callee, call, values)
        returned = self._with_arguments(callee)
        if returned is None:
            return values
        return [
            value for value in values if not value.origins or value.origins & returned.origins or not all(type(o) is Origin for o in value.origins)
        ]

    def _reaching(self, callee: object, call: cst.Call, values: list[Value]) -> list[Value]:
        """``values`` (what ``call`` passes, argument by argument, then what else its result is
        built from), but the arguments bound to a parameter of ``callee``, a function gradfix read
        whole, that reaches nothing: rebound before any read on every path, or never read
        (``unread_parameters``; ``forward(self, x, hidden=None)`` that starts a fresh state). Not
        in a file that registers a forward hook, whose result replaces what the forward returns."""
        function = self.summarized_functions.get(callee)
        if function is None or self._tree.kept(FORWARD_HOOKS, self._module, lambda: bool(self._tree.names(self._module, FORWARD_HOOKS))):
            return values  # (a forward hook may return what a module's call was given)
        unread = self._tree.kept(unread_parameters, function, lambda: unread_parameters(function, self._tree))
        dropped = arguments_reaching_nothing(function, type(callee) is tuple, call, unread)
        return [value for index, value in enumerate(values) if index not in dropped]

    def _record_arguments(self, callee: object, parameters: Sequence[str], call: cst.Call, values: list[Value], freed: bool = True) -> None:
        """What ``call`` passes the graph-carrying parameters of ``callee``, joined with what other
        calls pass them. ``freed``: whether a freed graph stays freed inside (a helper that
        backwards it fails); a constructor keeps what it is given for later calls."""
        bound = dict(zip(parameters, (v for arg, v in zip(call.args, values) if arg.keyword is None and not arg.star)))
        bound.update((arg.keyword.value, v) for arg, v in zip(call.args, values) if arg.keyword is not None)
        self._record_found(callee, {name: value for name, value in bound.items() if name in parameters}, freed)

    def _record_found(self, callee: object, found: Mapping[str, Value], freed: bool = True) -> None:
        """What a call of ``callee`` finds in the names it reads (its parameters, its object's
        attributes, the module's names), joined with what other calls find: the graph-carrying
        values only. ``freed``: whether a freed graph stays freed inside."""
        known = self.arguments.setdefault(callee, {})
        for name, value in found.items():
            # A graph that only may be one (out of code gradfix did not read) is not handed along:
            # the callee's walk with it would find only may-facts, which no finding of the default
            # output and no safe fix rests on, and walking again for them took a third more of a
            # cold check of diffusers (a round more for most of its training scripts).
            if value.graph and not value.possible:
                # Carried markers name this round's loops: keep the places they stand for.
                value = Value(
                    True,
                    self.graph_nodes(value),
                    value.structure,
                    freed=freed and value.freed,
                    guessed=value.guessed,
                    unread=value.unread,
                    possible=value.possible,
                    freed_unsure=freed and value.freed_unsure,
                    uncertain_origins=value.uncertain_origins,
                )
                known[name] = known[name].join(value) if name in known else value

    @property
    def parameter_backwards(self) -> set[cst.Call]:
        """The backward calls of functions' own parameters, which their summaries carry to callers."""
        return {site.call for summary in self.summaries.values() for site in summary.backwarded}

    def exports(self) -> dict[str, ExportedSummary]:
        """The summaries other files may import: module-level functions and methods, with an effect."""
        return {
            key if isinstance(key, str) else ".".join(key): summary.exported(self.backward_sites, self.returns_saved(key))
            for key, summary in self.summaries.items()
            if summary.has_effect
        }


# The registrations of a hook that sees a module call's arguments and may replace what it returns.
FORWARD_HOOKS = frozenset({"register_forward_hook", "register_forward_pre_hook", "register_module_forward_hook", "register_module_forward_pre_hook"})


def _given(summary: FunctionSummary, call: cst.Call) -> tuple[str, bool] | None:
    """Where a return's path tested a parameter this call gives as ``True`` or ``False`` (or leaves
    to such a default), that parameter and its truth: the call reaches those returns only
    (``return y_hat, codes`` for ``return_latents=True``)."""
    for parameter in dict.fromkeys(name for name, _ in summary.returned_given):
        given = summary.literal_defaults.get(parameter)
        position = summary.parameters.index(parameter) if parameter in summary.parameters else None
        for index, arg in enumerate(call.args):
            if arg.star:
                return None
            if (arg.keyword is not None and arg.keyword.value == parameter) or (arg.keyword is None and index == position):
                given = arg.value.value == "True" if type(arg.value) is cst.Name and arg.value.value in ("True", "False") else None
        if given is not None and (parameter, given) in summary.returned_given:
            return (parameter, given)
    return None


# What a name holds as far as another round would walk differently: graph, origins, freed.
GraphFacts = dict[str, tuple[bool, frozenset[Source], bool]]


def graph_facts(env: Env) -> GraphFacts:
    return {name: (value.graph, value.origins, value.freed) for name, value in env.items()}


def summary_facts(summary: FunctionSummary | None) -> tuple | None:
    """What a caller reads of a summary (a later round's summary of the same function is another
    object, with other sites of the same calls): whether what it returns is only guessed too, or a
    round that read a method not yet defined as unread code would be taken for the last."""
    if summary is None:
        return None
    returned = summary.returned
    return (
        summary.parameters,
        tuple(site.call for site in summary.backwarded),
        (
            returned.graph,
            returned.origins,
            returned.structure,
            returned.freed,
            returned.backwarded,
            returned.guessed,
            returned.unread,
            returned.possible,
        ),
        graph_facts(dict(summary.left_for_caller)),
        _items_facts(summary.returned_items),
        None
        if summary.returned_keys is None
        else tuple((key, *facts) for key, facts in zip(summary.returned_keys, _items_facts(tuple(summary.returned_keys.values())) or ())),
        tuple(sorted((key, value.structure, value.graph) for key, value in summary.returned_given.items())),
        tuple(sorted((key, _items_facts(items)) for key, items in summary.items_given.items())),
    )


def result_facts(returned: Value | None) -> tuple[object, ...] | None:
    """What a call reads of the walk of its callee with what callers pass (``_read_result``)."""
    return None if returned is None else (returned.graph, returned.origins, returned.guessed, returned.unread, returned.possible)


def _items_facts(items: tuple[Value, ...] | None) -> tuple | None:
    return None if items is None else tuple((v.graph, v.graphless, v.guessed, v.origins, v.structure) for v in items)


def callee_key(function: cst.FunctionDef, class_name: str | None) -> object:
    """How the analysis names a function it walks: ``f``, or ``(Class, method)``."""
    return function.name.value if class_name is None else (class_name, function.name.value)


def _is_super(receiver: cst.BaseExpression) -> bool:
    """``super()``: the object itself, its methods looked up from the class's bases."""
    return type(receiver) is cst.Call and is_name(receiver.func, "super") and not receiver.args


def summary_key(summary: FunctionSummary) -> object:
    owner, _, method = summary.name.rpartition(".")
    return (owner, method) if owner else method
