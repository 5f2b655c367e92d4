from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Iterator, Sequence

import libcst as cst

from ..analysis import (
    BackwardSite,
    Carried,
    Element,
    FunctionOf,
    Loop,
    NO_GRADIENT_HOOKS,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    Origin,
    READS_MODELLED_CODE,
    argument,
    assigned_names,
    code_of,
    dotted_name,
    expand,
    read_names,
    target_names,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation
from ..symptoms import RunsCorrectly


# Defaults that hold no graph (``None``, ``True`` and ``False`` are the names among them).
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)


class NeedlessRetainGraph(Rule):
    """
    What it finds: ``retain_graph=True`` keeps a graph that nothing backwards again.

    Why it fails: ``retain_graph=True`` tells autograd to keep every tensor the graph saved after the
    backward, so that a second backward can walk it. It is the usual answer to ``RuntimeError:
    Trying to backward through the graph a second time``, and it often stays after the real cause is
    gone (or was never there): then the graph of every step is held until its loss is dropped, for
    nothing.

    The fix: gradfix removes the argument when no later backward that may run in the same pass (not one
    in the other branch of ``if use_amp:``/``else``, a test nothing changes) reaches any part of that
    graph, no later iteration of a loop carries it on or walks it again (a graph built before the loop),
    no part of a backward's graph inside a function was built outside it (a global, a variable of the
    scope around it: every call of the function walks it again), no part of it in a method reads an
    attribute of its object that code other than ``__init__`` writes (another method or an earlier
    call may have left a graph there),
    the graph is not handed to code it does not follow (stored on an object, returned, passed to a call
    made for its effect, read by a nested function or a lambda from the scope around it, or the receiver
    of ``loss.backward`` taken as a value: code that may run later), no part of it may come out of code
    gradfix did not read (a method of a module of another file's class, a model the function is handed:
    that code may keep it for another backward), and, inside a function, no caller
    in the file passes it a graph (or the graph does not reach its parameters). The gradients are the
    same; the memory is freed at the backward.

    When gradfix only reports: A ``True`` passed by position (``loss.backward(None, True)``) is
    reported and left: dropping it would shift the arguments after it. With ``create_graph=True`` (a
    double backward) the graph is needed and nothing is reported; nor is it for a backward called in a
    comprehension (``[l.backward(retain_graph=True) for l in losses]``) or an operand that may not be
    evaluated (``warm and loss.backward(retain_graph=True)``): nothing tells how many times it runs. The
    fix is unsafe where the graph reads what an earlier call may have built and kept, which the walk
    reads as built anew: a function's result out of a cache (``_cache["f"]``, ``functools.lru_cache``,
    ``self._f`` set lazily), ``next()`` of an iterator, a parameter's default that is not a literal, an
    argument's attribute set where other code runs (``cfg.prior = enc(x)``), a class-body attribute.
    """

    SUMMARY = "retain_graph=True keeps a graph nothing backwards again"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_CAUGHT_ERRORS)
    KEEPS_GRADIENTS = True
    SYMPTOM = RunsCorrectly()
    EXAMPLE_BEFORE = """\
model = nn.Linear(4, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward(retain_graph=True)
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
model = nn.Linear(4, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        for site in self.analysis.backward_sites:
            retained = argument(site.call, site.api.retain_position, "retain_graph")
            tensor = site.tensor
            if retained is None or tensor is None or site.retain_graph is not True or not self._needless(site):
                continue
            message = f"`retain_graph=True` keeps the graph of `{code_of(tensor)}`, but nothing backwards it again; drop it to free that memory at the backward"
            fix = self._fix(site, retained)
            if fix is not None and (unknown := self._what_may_be_an_older_graph(site, self.analysis.graph_nodes(site))):
                fix, message = (
                    replace(fix, safe=False),
                    f"{message} (unsafe fix: {unknown} may be a graph an earlier call built and kept, which this backward walks)",
                )
            yield self.violation(retained, message, fix, sites=(site,))

    def _needless(self, site: BackwardSite) -> bool:
        if site.create_graph is not False or not site.runs_as_walked:
            return False
        if site.value.backwarded:
            return False  # the same tensor backwarded again on purpose: its author keeps the flags
        within = site.loops[0] if site.loops else None
        nodes = self.analysis.graph_nodes(site)
        if any(self._handed_to_next_iteration(loop, nodes) for loop in site.loops):
            return False
        if not nodes or nodes & (self.analysis.escaped(site.scope) | self.analysis.closed_world.graphs_read_later(site.scope.node)):
            return False
        if any(node.possible for node in nodes):
            # part of it may come out of code gradfix did not read, which may share it with another
            # backward (``module.merge_weights()`` keeping merged weights for every forward)
            return False
        if any(isinstance(source, Element) for source in site.value.origins | expand(site.value.origins, within)):
            return False  # an element of a container of graphs: what the elements share is not known
        if within is not None and any(not self.analysis.contains(within.node, o.statement) for o in nodes):
            return False  # built before the loop: every iteration backwards through it again
        if isinstance(site.scope.node, cst.FunctionDef) and any(not self.analysis.contains(site.scope.node, o.statement) for o in nodes):
            return False  # built outside the function (a global, a closure's): every call walks it again
        if self._reads_what_a_call_left(site, nodes):
            return False
        if any(self.analysis.iterates_graph(loop) for loop in site.loops):
            return False  # the loop hands out parts of a graph built before it, which every iteration walks
        if any(
            self.analysis.graph_nodes(other) & nodes and not self.analysis.exclusive(site.statement, other.statement)
            for other in self.analysis.sites_after(site)
        ):
            return False  # (an earlier one can reach it only through a graph kept across iterations)
        return self.analysis.called_with_graph(site.scope) is False or not self._reaches_parameters(site, nodes)

    def _reads_what_a_call_left(self, site: BackwardSite, nodes: frozenset[Origin]) -> bool:
        """Whether, in a method, the graph reads an attribute of its object that code other than the
        constructor writes (another method, this one in an earlier call, code outside the class):
        the walk starts a method from what ``__init__`` leaves, and the object may then hold a graph
        an earlier call built, which this backward walks again."""
        method = site.scope.node
        if site.scope.class_name is None or not isinstance(method, cst.FunctionDef) or not method.params.params:
            return False
        me = method.params.params[0].name.value + "."
        read = {name[len(me) :].split(".")[0] for origin in nodes for name in read_names(origin.statement) if name.startswith(me)}
        return any(writer is None or writer.name.value != "__init__" for attribute in read for _, writer in self.analysis.attribute_writes(attribute))

    def _what_may_be_an_older_graph(self, site: BackwardSite, nodes: frozenset[Origin]) -> str:
        """What the graph reads that the walk took for no graph, or for one this pass builds, and that may be a graph an
        earlier call built and kept (then walked again by the next backward): "" where nothing is."""
        if (outliving := self._reads_what_outlives_a_call(site, nodes)) is not None:
            return f"`{code_of(outliving)}`"
        for statement in sorted({origin.statement for origin in nodes}, key=self.analysis.order):
            for call in self.analysis.tree.findall(statement, cst.Call):
                if type(call.func) is cst.Name and call.func.value == "next" and "next" not in self.analysis.names.aliases:
                    return f"what `{code_of(call)}` returns"  # (an iterator hands back what it holds: a generator's frame lives on)
                if self._may_return_what_it_kept(call):
                    return f"what `{code_of(call)}` returns"
                if self.analysis.closed_world.unmodelled_with_graphs(call):
                    return f"what `{code_of(call)}`, code gradfix did not read, returns"
        return ""

    def _may_return_what_it_kept(self, call: cst.Call) -> bool:
        """Whether ``call`` may hand back a graph an earlier call built: code gradfix did not read, a generator
        function (its frame lives between calls), or a function of the file that reads what may outlive a call
        (``_outliving_read``: ``_cache["f"]``, ``self.features``, a default) or hands back what it did not compute
        (a name no assignment of the function binds)."""
        if self.analysis.returns_unread_graph(call):
            return True
        function = self.analysis.function_called(call)
        if function is None:
            return False
        tree = self.analysis.tree
        if tree.findall(function.body, cst.Yield):
            return True
        if self._outliving_read(function, self.analysis.class_name_of(function), [function.body]) is not None:
            return True
        parameters = {p.name.value for p in (*function.params.params, *function.params.kwonly_params, *function.params.posonly_params)}
        bound = assigned_names(function.body, tree=tree) | parameters
        return any(isinstance(returned.value, cst.Name) and returned.value.value not in bound for returned in tree.findall(function.body, cst.Return))

    def _reads_what_outlives_a_call(self, site: BackwardSite, nodes: frozenset[Origin]) -> cst.CSTNode | None:
        """What, in a function, the statements that build the graph read that may outlive a call of it
        (``_outliving_read``)."""
        function = site.scope.node
        if not isinstance(function, cst.FunctionDef):
            return None
        statements = sorted({origin.statement for origin in nodes if self.analysis.contains(function, origin.statement)}, key=self.analysis.order)
        return self._outliving_read(function, site.scope.class_name, statements)

    def _outliving_read(self, function: cst.FunctionDef, class_name: str | None, parts: Sequence[cst.CSTNode]) -> cst.CSTNode | None:
        """The first value ``parts`` of ``function`` read that may outlive a call of it, which the walk
        reads as holding no graph: a parameter whose default is not a literal (evaluated once, when
        the function is defined), an attribute of a parameter other than ``self`` that the file sets
        other than in a constructor (``cfg.prior``) or, but on a module, never sets, an attribute a
        class body sets (read on any object) or one of ``self`` a method other than ``__init__`` sets, or a name of the module or
        the enclosing scope that holds a graph or that some function writes (a cache a call fills,
        an iterator a generator feeds). A module, a function or a class called is code, not such a
        value."""
        tree, names = self.analysis.tree, self.analysis.names
        parameters = {p.name.value: p for p in (*function.params.params, *function.params.kwonly_params, *function.params.posonly_params)}
        me = function.params.params[0].name.value if class_name is not None and function.params.params else None
        targets = [*(t.target for t in tree.findall(function.body, cst.AssignTarget)), *(f.target for f in tree.findall(function.body, cst.For))]
        scoping: list[cst.Global | cst.Nonlocal] = [*tree.findall(function.body, cst.Global), *tree.findall(function.body, cst.Nonlocal)]
        declared = {n.name.value for statement in scoping for n in statement.names}
        local = ({name for target in targets for name in target_names(target, rebound_only=True) if "." not in name} - declared) | set(parameters)
        for part in parts:
            skipped = {id(call.func) for call in tree.findall(part, cst.Call)}  # (code called; and below, what is written)
            skipped |= {
                id(node) for target in tree.findall(part, cst.AssignTarget) for node in (target.target, *tree.findall(target.target, cst.Attribute))
            }
            reads: list[cst.Name | cst.Attribute] = [*tree.findall(part, cst.Name), *tree.findall(part, cst.Attribute)]
            for read in reads:
                if isinstance(read, cst.Attribute) and read.attr.value in self._class_body_attributes and id(read) not in skipped:
                    return read  # (set once, in a class body, for every instance: ``self.prior``, ``Trainer.prior``, ``type(self).prior``)
                name = dotted_name(read)
                if name is None or id(read) in skipped or names.module(read, class_name) is not None:
                    continue
                head, _, attribute = name.partition(".")
                parameter = parameters.get(head)
                default = parameter.default if parameter is not None else None
                if (
                    default is not None
                    and not isinstance(default, _LITERALS)
                    and not (type(default) is cst.Name and default.value in ("None", "True", "False"))
                ):
                    return read
                if attribute and parameter is not None and isinstance(read, cst.Attribute):
                    if head == me and self._set_before_in_the_call(function, read, f"{me}.{attribute.split('.')[0]}"):
                        continue  # (``self.z = ...`` earlier in the same call: this call's value)
                    writes = self.analysis.attribute_writes(attribute.split(".")[0])
                    if any(writer is None or writer.name.value != "__init__" for _, writer in writes):
                        return read  # (``cfg.prior = enc(x)``, ``self._f = enc(x)``: set where any code may run before the call)
                    if head != me and not writes and names.module(read.value, class_name) is None:
                        return read  # (an attribute of an object the file never writes it on: anything)
                if not attribute and head not in local and head not in names.local_classes and head not in names.aliases:
                    value = self.analysis.value_read(read)
                    if head in self._written_by_functions or value is not None and value.graph and not isinstance(value.structure, FunctionOf):
                        return read  # (a cache a call fills, what a generator holds: the site's own nodes say where a graph was built)
        return None

    def _set_before_in_the_call(self, function: cst.FunctionDef, read: cst.CSTNode, attribute: str) -> bool:
        """Whether a statement of ``function``'s own body before the one that holds ``read`` binds ``attribute``
        (``self.z_mean, self.z_sigma = ...`` then ``return self.z_mean + ...``)."""
        tree = self.analysis.tree
        holding = tree.child_holding(function.body, read)
        statements = list(function.body.body)
        if holding is None or holding not in statements:
            return False
        return any(attribute in assigned_names(statement, rebinding_only=True, tree=tree) for statement in statements[: statements.index(holding)])

    @cached_property
    def _class_body_attributes(self) -> frozenset[str]:
        """The names the file's class bodies bind outside their methods: attributes of the class, which every
        instance, the class and ``type(self)`` read, built once."""
        tree = self.analysis.tree
        return frozenset(
            name
            for class_def in tree.findall(self.analysis.module, cst.ClassDef)
            for statement in class_def.body.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            for name in assigned_names(statement, tree=tree)
        )

    @cached_property
    def _written_by_functions(self) -> frozenset[str]:
        """The names the file's functions write (bind, or write into: ``_cache["f"] = enc(x)``)."""
        tree = self.analysis.tree
        return frozenset().union(*(assigned_names(function.body, tree=tree) for function in tree.findall(self.analysis.module, cst.FunctionDef)))

    def _handed_to_next_iteration(self, loop: Loop, nodes: frozenset[Origin]) -> bool:
        """Whether a name leaves an iteration holding part of this graph and a backward of the
        next iteration reads it before it is assigned again."""
        kept = {name for name, value in loop.back_edge.items() if value.graph and self.analysis.value_nodes(value) & nodes}
        return any(
            Carried(loop, name) in expand(other.value.origins, loop) for other in self.analysis.backward_sites if loop in other.loops for name in kept
        )

    @staticmethod
    def _reaches_parameters(site: BackwardSite, nodes: frozenset[Origin]) -> bool:
        """Whether the graph may extend into tensors a caller passed in (callers not seen, or one
        passing a graph): the caller may backward that part again."""
        function = site.scope.node
        if not isinstance(function, cst.FunctionDef):
            return False
        parameters = {p.name.value for p in function.params.params} - {"self", "cls"}
        return any(read_names(node.statement) & parameters for node in nodes)

    @staticmethod
    def _fix(site: BackwardSite, retained: cst.Arg) -> Fix | None:
        if retained.keyword is None or not isinstance(site.statement, cst.SimpleStatementLine):
            return None  # a positional True: dropping it would shift the arguments after it
        args = [arg for arg in site.call.args if arg is not retained]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        call = site.call.with_changes(args=args)
        return Fix(safe=True, replace=((site.statement, cst.ensure_type(site.statement.deep_replace(site.call, call), cst.SimpleStatementLine)),))
