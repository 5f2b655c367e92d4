from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import (
    BackwardSite,
    Carried,
    Element,
    Loop,
    NO_GRADIENT_HOOKS,
    NO_BOOKKEEPING_READS,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    Origin,
    READS_MODELLED_CODE,
    argument,
    code_of,
    expand,
    read_names,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation
from ..symptoms import RunsCorrectly


class NeedlessRetainGraph(Rule):
    """
    What it finds: ``retain_graph=True`` keeps a graph that nothing backwards again.

    Why it fails: ``retain_graph=True`` tells autograd to keep every tensor the graph saved after the
    backward, so that a second backward can walk it. It is the usual answer to ``RuntimeError:
    Trying to backward through the graph a second time``, and it often stays after the real cause is
    gone (or was never there): then the graph of every step is held until its loss is dropped, for
    nothing.

    The fix: gradfix removes the argument when no later backward that may run in the same pass (not one
    in the other branch of ``if use_amp:``/``else``, a test nothing changes, nor one under
    ``if task == "depth":`` where this one is under ``if task == "semantic":`` and ``task`` is a
    variable of the function nothing between them assigns) reaches any part of that
    graph, no later iteration of a loop carries it on or walks it again (a graph built before the loop),
    no part of a backward's graph inside a function was built outside it (a global, a variable of the
    scope around it: every call of the function walks it again), no part of it in a method reads an
    attribute of its object that code other than ``__init__`` writes (another method or an earlier
    call may have left a graph there),
    the graph is not handed to code it does not follow (stored on an object, returned, passed to a call
    made for its effect, read by a nested function or a lambda from the scope around it, held by a
    nested function's default (``def again(t=loss)``), held in or stored into a global some function
    of the file reads (``KEPT["loss"] = loss``), or the receiver of ``loss.backward`` taken as a
    value: code that may run later), nothing reads autograd's bookkeeping of it (``loss.grad_fn``,
    whose nodes can be called), no part of it may come out of code
    gradfix did not read (a method of a module of another file's class, a model the function is handed:
    that code may keep it for another backward), and, inside a function, no caller
    in the file passes it a graph (or the graph does not reach its parameters). The gradients are the
    same; the memory is freed at the backward.

    When gradfix only reports: A ``True`` passed by position (``loss.backward(None, True)``) is
    reported and left: dropping it would shift the arguments after it. With ``create_graph=True`` (a
    double backward) the graph is needed and nothing is reported; nor is it for a backward called in a
    comprehension (``[l.backward(retain_graph=True) for l in losses]``) or an operand that may not be
    evaluated (``warm and loss.backward(retain_graph=True)``): nothing tells how many times it runs.
    That nothing backwards the graph again is the finding itself: where it is not proved, the finding
    is a hint (``--hints``), not an unsafe fix. So it is where code gradfix did not read may keep or
    backward part of the graph (a hook, a call it does not model), and where the graph reads what an
    earlier call may have built and kept, which the walk reads as built anew: a function's result out
    of a cache (``_cache["f"]``, ``functools.lru_cache``, ``self._f`` set lazily, a caching
    ``@property``), ``next()`` of an iterator, a parameter's default that is not a literal, an
    argument's attribute set where other code runs (``cfg.prior = enc(x)``), a class-body attribute.
    """

    SUMMARY = "retain_graph=True keeps a graph nothing backwards again"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS)
    CLAIMS_THE_OBLIGATIONS = True
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
            unknown = self._what_may_be_an_older_graph(site, self.analysis.graph_nodes(site))
            guess = f"{unknown} may be a graph an earlier call built and kept, which this backward walks" if unknown else ""
            yield self.violation(retained, message, self._fix(site, retained), sites=(site,), guess=guess)

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
        if (outliving := self.analysis.kept_graphs.outliving_read_at(site, nodes)) is not None:
            return f"`{code_of(outliving)}`"
        for statement in sorted({origin.statement for origin in nodes}, key=self.analysis.order):
            for call in self.analysis.tree.findall(statement, cst.Call):
                if type(call.func) is cst.Name and call.func.value == "next" and "next" not in self.analysis.names.aliases:
                    return f"what `{code_of(call)}` returns"  # (an iterator hands back what it holds: a generator's frame lives on)
                if self.analysis.kept_graphs.may_return_what_it_kept(call):
                    return f"what `{code_of(call)}` returns"
                if self.analysis.closed_world.unmodelled_with_graphs(call):
                    return f"what `{code_of(call)}`, code gradfix did not read, returns"
        return ""

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
