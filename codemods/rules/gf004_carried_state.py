from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from ..analysis import (
    NO_GRADIENT_HOOKS,
    READS_MODELLED_CODE,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    NO_BOOKKEEPING_READS,
    ListOf,
    NONE,
    NUMBER,
    UNKNOWN,
    BackwardSite,
    Loop,
    Origin,
    RecordOf,
    Structure,
    Value,
    assigned_names,
    code_of,
    detached,
    dotted_name,
    expand,
    is_single_assignment,
    read_names,
    target_names,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class CarriedState(Rule):
    """
    What it finds: State that carries an autograd graph crosses from one training iteration into the
    next. A recurrent hidden state (``hidden``, an LSTM's ``(h, c)``), an unrolled estimate
    (``Yest = Yest + w * x``), a list of stored states or an attribute a module keeps on ``self``
    between calls is updated through differentiable operations in one iteration and used by the
    next iteration's loss.

    Why it fails: That loss's backward walks back into the previous iteration's graph, which the
    previous backward already freed: ``RuntimeError: Trying to backward through the graph a second
    time``. With ``retain_graph=True`` it runs, but every step backpropagates through all earlier
    steps: the time and memory of each step grow without bound.

    The fix: truncated backpropagation through time. gradfix detaches the state where an iteration
    starts (``hidden = hidden.detach()``, element by element for tuples and lists, guarded when
    the state starts as ``None``). For state a module keeps on ``self``, the value is detached
    where it is stored for the next call; an attribute not computed from its own last value (a
    cache, ``self._cached_adj = adj`` reused as it was stored, or the last call's output kept for
    the next, ``self._prev_y_hat = y_hat``) is no state: detached, the loss that reads it no longer
    trains what built it (a cache: after the first call), so that detach is an unsafe fix
    (computing a cached value at every call keeps it trained). So is the detach of state a loop of
    the file updates by several calls before the step's one backward (a decoder's time steps):
    detached at every call, the step's gradient would no longer flow through its earlier calls. The
    values the program computes stay the same; the
    gradients stop at the iteration boundary instead of reaching into freed graphs. This changes
    the maths on purpose: it is what training a recurrent model step by step means. A state that
    enters the loop with a graph of its own (a learned initial state ``h0``) is detached where the
    iteration ends instead, so the first iteration still trains what built it.

    When gradfix only reports: gradfix only reports when it cannot tell the state's structure (a
    namedtuple, a dataclass, a dict, the result of an unknown function) or when the state has no
    value before the loop. State a module keeps on ``self`` whose calls no backward of the file
    walks (its training loop is in another file, which may set ``model.hidden`` afresh before each
    batch) is a hint; a trainer's hook is called by the trainer, which sets nothing. State another
    module sets afresh in its own forward (``self.dec.H = ...`` before the decoder's time steps) is
    managed by the program, and not reported; so is state a method writes anew (a ``reset()`` of the
    class, of a class of the file it derives from, or of one derived from it) that the file calls,
    or that code gradfix did not read may call, the module being handed to it
    (``functional.reset_net(net)``). State the iteration reads before assigning it only
    under a test (``if feed_back: inp = mu`` in a decoder's time loop that assigns ``mu`` after) is
    a hint: the test may be false whenever the previous value is there. Under the time loop's own
    counter (``if t > 0: inp = mu``) it is never read before its first pass assigned it, and is
    not reported.
    A list the loop empties in place through another name (``pending = losses`` then
    ``del pending[:]``) carries nothing where the two names hold one list for certain (one bound to
    the other earlier in a block around the emptying, neither bound anew since); where the other
    name may hold another list (bound to it only under a test), the graph it carries is a hint.

    When every backward keeps its graph (``retain_graph=True``) and no optimizer steps inside the
    loop, the program backpropagates through all iterations on purpose (full backpropagation
    through time) and nothing is reported. When an optimizer steps between those backwards, each
    step walks every earlier graph again: that is reported, and the detach is an unsafe fix (a state
    the loop cuts itself somewhere, ``h = h.detach()``, ``h.detach_()`` or ``h = h.data`` after
    every k-th step, is managed by its author, and not reported). So is
    the detach of a state a branch builds: on that branch it may come from what no backward of the
    iteration walks, and the next iteration's backward then trains through it once, and runs.
    """

    SUMMARY = "state carries its graph across training iterations"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS)
    EXAMPLE_BEFORE = """\
lstm = nn.LSTM(8, size)
head = nn.Linear(size, 1)
criterion = nn.MSELoss()
hidden = (torch.zeros(1, batch, size), torch.zeros(1, batch, size))
for inputs, targets in loader:
    output, hidden = lstm(inputs, hidden)
    loss = criterion(head(output), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
lstm = nn.LSTM(8, size)
head = nn.Linear(size, 1)
criterion = nn.MSELoss()
hidden = (torch.zeros(1, batch, size), torch.zeros(1, batch, size))
for inputs, targets in loader:
    hidden = tuple(h.detach() for h in hidden)
    output, hidden = lstm(inputs, hidden)
    loss = criterion(head(output), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        yield from self._loop_violations()
        yield from self._stored_on_self_violations()

    # state carried by a loop ------------------------------------------------------------------
    def _loop_violations(self) -> Iterator[Violation]:
        freed: dict[Loop, dict[str, BackwardSite]] = {}
        kept: dict[Loop, dict[str, BackwardSite]] = {}
        for site in self.analysis.backward_sites:
            taken: set[str] = set()
            for loop in site.loops:
                if loop.is_call:
                    continue
                for name in sorted(loop.carried_names - taken):
                    if (
                        not loop.carries_graph(name, site.value)
                        or loop.detaches(name, self.analysis.tree)
                        or self.analysis.read_only_where_assigned(loop, name)
                    ):
                        continue
                    if loop.back_edge[name].freed:
                        freed.setdefault(loop, {}).setdefault(name, site)
                    elif site.retain_graph is True and site.create_graph is not True and self.analysis.steps_for_certain(loop.node.body):
                        # (with create_graph=True, gradients differentiated again later are the point: MAML's fast weights)
                        kept.setdefault(loop, {}).setdefault(name, site)
                    else:
                        continue  # full backpropagation through time, the graphs kept on purpose
                    taken.add(name)
        for loop, sites in freed.items():
            yield self._loop_violation(loop, sites, retained=False)
        for loop, sites in kept.items():
            if loop not in freed:
                yield self._loop_violation(loop, sites, retained=True)

    def _walked_where_built(self, loop: Loop, name: str) -> bool:
        """Whether each write of ``name`` in the loop gives it a value whose graph a backward of the
        iteration that keeps no graph walks, whichever of them ran. ``freed`` says only that some
        path's graph was freed: a branch may build the state from what no loss of the iteration
        reads, the next iteration's backward then walks it once and runs, and a detach would cut
        that gradient."""

        def built_here(origins: frozenset[object]) -> set[Origin]:  # (not through a loop head: a last iteration's)
            return {o for o in origins if isinstance(o, Origin)}

        walking = [s for s in self.analysis.backward_sites if loop in s.loops and s.retain_graph is False]
        walked = set().union(*(built_here(s.value.origins) for s in walking))
        for write in self.analysis.writes_of(loop, name):
            small = write.body[0] if isinstance(write, cst.SimpleStatementLine) and len(write.body) == 1 else None
            if isinstance(small, (cst.Assign, cst.AugAssign)):
                written: cst.BaseExpression | None = small.value
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and small.value.args:
                written = small.value.args[-1].value  # (``states.append(h)``)
            else:
                written = None
            value = None if written is None else self.analysis.value_assigned(written)
            if value is not None and value.graph and not built_here(value.origins) & walked:
                return False  # (a write of no graph, ``buffer[0] = x0``, builds nothing to walk)
            if value is None and (written is None or not any(self.analysis.contains(written, o.node) for o in walked)):
                return False  # (``state.add_(layer(x))``: what it adds is built where it is written)
        return True

    def _loop_violation(self, loop: Loop, sites: dict[str, BackwardSite], retained: bool) -> Violation:
        updates = {name: first for name in sites if (first := self._first_update(loop, name)) is not None}
        names = sorted(sites, key=lambda n: (self.analysis.order(updates[n]), _position(updates[n], n)) if n in updates else (0, 0))
        shown = ", ".join(f"`{n}`" for n in names)
        first_update = updates.get(names[0], loop.node)
        # A named tuple of the file's own class may mix the state with what feeds the parameters
        # the loss reaches only through it (a spiking cell's input current): detached, those stop
        # training, which gradfix cannot see. Its detach is for review.
        records = any(isinstance(_state_structure(loop.entry[n], loop.back_edge[n]), RecordOf) for n in names if n in loop.entry)
        # A detach in every iteration removes only a graph the backward freed when that backward runs
        # in every iteration; one that runs on some (every k steps) backwards the graphs of the others,
        # which the detach would cut (a window shortened, a learned initial state left untrained).
        every_iteration = all(self.analysis.runs_in_every_iteration(site.statement, loop) for site in sites.values())
        one_path = all(self._walked_where_built(loop, name) for name in names)
        fix, unfixable = self._loop_fix(loop, names, safe=not retained and not records and every_iteration and one_path)
        if fix is not None and not all(self._builds_afresh(site, loop) for site in sites.values()):
            fix, unfixable = None, "once detached, nothing the iteration computes would require grad, and the backward would fail"
        passed = self._passed_through_unread_code(loop, names)
        unread = [name for name in names if loop.back_edge[name].unread]
        guess = ""
        if passed is not None:
            name, function = passed
            guess = (
                f"`{name}` passes through `{function}`, whose result comes out of code gradfix cannot read: if that code detaches it, there is no bug"
            )
        elif unread:
            guess = f"what `{unread[0]}` carries comes out of code gradfix did not read, and may hold no graph"
        elif skipping := [name for name in names if self.analysis.read_only_where_assigned(loop, name, inner_loops_run=True)]:
            withs = self.analysis.tree.findall(loop.node.body, cst.With)
            guess = f"`{skipping[0]}` reaches the backward from the previous iteration only if an inner loop that assigns it runs no time" + (
                ", or a `with` around the assignment swallows an exception" if any(skipping[0] in assigned_names(w.body) for w in withs) else ""
            )
        elif tested := [name for name in names if self.analysis.read_carried_only_under_tests(loop, name)]:
            guess = f"`{tested[0]}` is read before this iteration assigns it only under a test, which may skip that read while the previous iteration's value is there"
        elif emptied := [name for name in names if name in loop.maybe_emptied_through]:
            through = loop.maybe_emptied_through[emptied[0]]
            guess = f"the loop empties `{through}` in place, which may hold the same list as `{emptied[0]}`: then it carries no graph"
        them = "them" if len(names) > 1 else "it"
        where = "ends" if fix is not None and fix.insert_after else "starts"
        if retained:
            message = (
                f"{shown} {'carry' if len(names) > 1 else 'carries'} the graph of every earlier iteration of the loop "
                f"at line {self.analysis.line(loop.node)} into each backward, which retain_graph=True keeps: each "
                "step backpropagates through all earlier ones (with parameters the optimizer has changed since) "
                f"and memory grows; detach {them} where the iteration {where} (truncated backpropagation: this "
                "changes the gradients)"
            )
        else:
            message = (
                f"{shown} {'carry' if len(names) > 1 else 'carries'} the graph of the previous iteration "
                f"of the loop at line {self.analysis.line(loop.node)} into the next backward; "
                f"detach {them} where the iteration {where}"
            )
        if fix is not None and not retained and not every_iteration:
            message += " (unsafe fix: the backward does not run in every iteration, and the detach would cut the graphs of those it skips)"
        elif fix is not None and not retained and not one_path:
            message += (
                " (unsafe fix: a branch builds it, maybe from what no backward of the iteration walks, which the next step then trains through)"
            )
        return self.violation(
            first_update,
            message + (f" (not rewritten: {unfixable})" if unfixable else ""),
            fix,
            related=(loop.node, *(site.call for site in sites.values())),
            sites=tuple(sites.values()),
            guess=guess,
        )

    def _first_update(self, loop: Loop, name: str) -> cst.SimpleStatementLine | None:
        return next((s for s in self.analysis.writes_of(loop, name) if isinstance(s, cst.SimpleStatementLine)), None)

    def _passed_through_unread_code(self, loop: Loop, names: list[str]) -> tuple[str, str] | None:
        """A state the iteration hands, on its way to its next value, to a call whose result
        comes out of code gradfix did not read (``hidden = repackage_hidden(hidden)`` imported, or
        a helper of the file that hands it to such code; ``state = cell(x, refresh(state))``):
        that code may be the detach."""
        for statement in loop.node.body.body:
            if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(statement.body[0], cst.Assign):
                continue
            # (``hidden[i] = repackage_hidden(hidden[i])`` writes into the state as well)
            written = {dotted_name(_stored_into(target.target)) for target in statement.body[0].targets}
            for call in self.analysis.tree.findall(statement.body[0].value, cst.Call):
                if not self.analysis.returns_unread_graph(call):
                    continue
                for name in sorted(set(names) & written & read_names(call)):
                    return name, code_of(call.func)
        return None

    def _loop_fix(self, loop: Loop, names: list[str], safe: bool) -> tuple[Fix | None, str]:
        """The detaches, or why gradfix cannot write them. A state that enters the loop proved
        without a graph (zeros, None) is detached where the iteration starts; one that may enter
        with a graph of its own (a learned initial state, an encoder's output, a parameter of the
        function) is detached where the iteration ends, so the first iteration still backwards
        into what built it."""
        body = loop.node.body
        if not isinstance(body, cst.IndentedBlock):
            return None, "the loop body is on one line"
        at_start, at_end = [], []
        for name in names:
            if name not in loop.entry or loop.entry[name].unbound:
                return None, f"`{name}` has no value before the first iteration"
            if loop.entry[name].structure is NUMBER:
                return None, f"`{name}` starts as a number, which has no .detach()"
            statement = _detach_statement(name, loop.entry[name], loop.back_edge[name])
            if statement is None:
                return None, f"gradfix cannot tell what `{name}` holds (a namedtuple, a dataclass, …)"
            if safe and self.analysis.shares_its_object(name) and isinstance(loop.back_edge[name].structure, ListOf):
                safe = False  # (``losses = [s.detach() for s in losses]`` makes a new list: another name holding the old one no longer sees it)
            if loop.entry[name].graphless or loop.entry[name].structure is NONE:
                at_start.append(statement)
            elif _continues(body):
                return None, (
                    f"`{name}` enters the loop with a graph of its own, which a detach where the iteration "
                    "starts would cut, and a `continue` skips the end of the iteration"
                )
            else:
                at_end.append(statement)
        return Fix(
            safe=safe,
            insert_before=((body.body[0], tuple(at_start)),) if at_start else (),
            insert_after=((body.body[-1], tuple(at_end)),) if at_end else (),
        ), ""

    def _builds_afresh(self, site: BackwardSite, loop: Loop) -> bool:
        """Whether an iteration of ``loop`` may add to the graph ``site`` backwards a part of its
        own, so that something is left to backward once the values carried in from the previous
        iteration are detached. False only when every part the iteration adds is plainly made of
        carried graphs and numbers: ``state = state * 0.5; state.sum().backward()``."""
        for origin in self.analysis.graph_nodes(site):
            if not self.analysis.contains(loop.node, origin.node):
                continue
            for call in self.analysis.tree.findall(origin.node, cst.Call):
                if not isinstance(call.func, cst.Attribute) or not self._holds_graph(call.func.value):
                    return True  # a function or a method of something else: it may read parameters
            for name in self.analysis.tree.findall(origin.node, cst.Name):
                read = self.analysis.value_read(name)
                if read is None or name.value in ("True", "False", "None"):
                    continue  # not a read: an attribute's or a keyword's name
                if (read.graph and not read.origins) or (not read.graph and read.structure is not NUMBER):
                    return True  # a tensor that may require grad (a leaf, a parameter, an argument)
        return False

    def _holds_graph(self, expression: cst.BaseExpression) -> bool:
        return any((read := self.analysis.value_read(name)) is not None and read.graph for name in self.analysis.tree.findall(expression, cst.Name))

    # state a module keeps on self between calls -------------------------------------------
    def _stored_on_self_violations(self) -> Iterator[Violation]:
        for method in self.analysis.loops:
            if not isinstance(method.node, cst.FunctionDef):
                continue  # a loop, not a method's calls
            for name in sorted(method.carried_names):
                stored = method.back_edge.get(name)
                if stored is None or not any(isinstance(o, Origin) for o in stored.origins):
                    continue
                writes = self.analysis.writes_of(method, name)
                stores = list(writes)
                if not self._read_by_the_next_call(method, name, writes):
                    continue
                if self._written_elsewhere(method, name):
                    continue  # another method resets or detaches it: the user manages the state
                if self._called_only_at_construction(method):
                    continue  # no training step runs between its calls
                evolves = True in writes.values()  # a state computed from the last, not a cache
                several = self._called_several_times_a_step(method)
                fix, unfixable = self._store_fix(method, name, stores, stored, safe=evolves and several is None)
                if fix is not None and several is not None:
                    unfixable = (
                        f"the loop at line {self.analysis.line(several.node)} calls it several times between two backwards: detached at "
                        "every call, a step's gradient no longer flows through its earlier calls; detach it where a step starts, or "
                        "--unsafe-fixes detaches it at every call"
                    )
                elif fix is not None and not evolves:
                    unfixable = (
                        f"`{name}` is not computed from its own last value (a cache, or the last call's output kept for the next): "
                        "detached, the loss that reads it no longer trains what built it; --unsafe-fixes detaches it"
                    )
                backwarding = self._backwarding(method)
                guess = ""
                if stored.unread:
                    guess = f"what `{name}` keeps comes out of code gradfix did not read, and may hold no graph"
                elif not backwarding and self.analysis.names.trainer_hooks.get(method.scope.class_name or "") != method.node.name.value:
                    guess = (
                        f"no backward in this file walks what a call of `{method.scope.class_name}` builds: its callers are elsewhere, "
                        f"and may set `{name}` afresh between calls"
                    )
                elif not self._backwarded_again(method, name, backwarding):
                    guess = f"no backward gradfix sees walks what `{name}` keeps again: it holds each call's graph until it is cleared"
                yield self.violation(
                    stores[0] if stores else method.node,
                    f"`{name}` keeps this call's graph for the next call of `{method.node.name.value}`; "
                    "detach it where it is stored" + (f" (not rewritten: {unfixable})" if unfixable else ""),
                    fix,
                    # (and the backwards that walk it again: where the error is raised)
                    related=(method.node, *stores[1:], *self._built_in(method, stored), *(site.call for site in backwarding)),
                    sites=backwarding,
                    guess=guess,
                )

    def _read_by_the_next_call(self, method: Loop, name: str, writes: dict[cst.CSTNode, bool | None]) -> bool:
        """Whether what a call leaves in the attribute reaches what the next call computes: its
        result, or the attribute's new value (a store that adds to it, appends to it or computes
        it from it). A path that leaves the attribute as it was (an early ``return``) carries
        nothing by itself, and a call that first binds it afresh (``self.cache = self.cache.detach()``)
        changes only its own value after that."""
        if method.built_from_previous(name, method.returned):
            return True
        return not self.analysis.afresh_each_iteration(method, name) and any(w is not False for w in writes.values())

    def _backwarded_again(self, method: Loop, name: str, backwarding: Sequence[BackwardSite]) -> bool:
        """Whether a backward walks what the previous call left in the attribute: the call's result
        is built from it (and the training loop backwards that result), or a backward inside
        the call reads it."""
        return method.built_from_previous(name, method.returned) or any(
            method.built_from_previous(name, site.value) for site in backwarding if self.analysis.contains(method.node, site.call)
        )

    def _called_only_at_construction(self, method: Loop) -> bool:
        """Whether every call of the method in the file is one its class's ``__init__`` makes
        (``self.add_regularization_loss(...)`` twice while building the model)."""
        constructor = self.analysis.constructor_of(method.scope.class_name)
        name = cst.ensure_type(method.node, cst.FunctionDef).name.value  # a method's calls
        calls = [
            call
            for call in self.analysis.tree.findall(self.analysis.module, cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == name
        ]
        return constructor is not None and bool(calls) and all(self.analysis.contains(constructor, call) for call in calls)

    def _built_in(self, method: Loop, stored: Value) -> list[cst.CSTNode]:
        """The statements of ``method`` that built what it keeps."""
        statements = {o.statement for o in expand(stored.origins, method) if isinstance(o, Origin)}
        return sorted((s for s in statements if self.analysis.contains(method.node, s)), key=self.analysis.order)

    def _backwarding(self, method: Loop) -> tuple[BackwardSite, ...]:
        """The backwards whose graph holds what a call of ``method`` built: inside it, or through
        a call of a module that runs it (the training loop's backward of ``model(x)``)."""
        class_name = method.scope.class_name
        return tuple(
            site
            for site in self.analysis.backward_sites
            if any(
                self.analysis.contains(method.node, origin.statement) or self.analysis.runs_methods_of(origin.node, class_name)
                for origin in self.analysis.graph_nodes(site)
            )
        )

    def _called_several_times_a_step(self, method: Loop) -> Loop | None:
        """A loop of the file that calls the module whose method ``method`` is (or one that holds it)
        and backwards nothing itself: a decoder's time steps, all before the step's one backward. (Not
        one with gradients off, an evaluation's, which keeps no graph between the calls.)"""
        for loop in self.analysis.loops:
            if (
                loop.is_call
                or self.analysis.under_no_grad(loop.node)
                or any(self.analysis.contains(loop.node, site.call) for site in self.analysis.backward_sites)
            ):
                continue
            calls = self.analysis.tree.findall(loop.node.body, cst.Call)
            if any(self.analysis.runs_methods_of(call, method.scope.class_name) for call in calls):
                return loop
        return None

    def _written_elsewhere(self, method: Loop, name: str) -> bool:
        """Whether another method of the same class that the file calls, or code outside it
        (``model.hidden = None``), writes the attribute; ``self.<attribute>`` in another class is
        another object's."""
        related = self._related_classes(method.scope.class_name)
        own_methods = {s for c in related for s in self.analysis.class_body(c) if isinstance(s, cst.FunctionDef)}
        calls = self.analysis.tree.findall(self.analysis.module, cst.Call)
        called = {call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", None) for call in calls}
        # (a module's forward runs where the module is called: ``EncDec.forward`` sets ``self.dec.H`` afresh)
        called |= {"forward"} if self.analysis.names.module_classes else set()
        # (a module handed to code gradfix did not read may have any of its methods called: ``functional.reset_net(net)``)
        any_called = any(self._hands_a_module_to_unread_code(call) for call in calls)
        for owner, function in self.analysis.attribute_writes(name.split(".", 1)[1]):
            if function is method.node or (
                function is not None and (function.name.value == "__init__" or function.name.value not in called and not any_called)
            ):
                continue  # (a reset method that nothing calls resets nothing)
            if owner != "self" or function in own_methods:
                return True
        return False

    def _related_classes(self, class_name: str | None) -> set[str]:
        """``class_name`` and the classes of the file it derives from or that derive from it (and so,
        through a shared base, its siblings: a may-answer, wider than Python's): their methods may run
        on its objects (``reset()`` a neuron inherits from its base)."""
        bases = self.analysis.names.local_bases
        related, pending = set[str](), [class_name] if class_name else []
        while pending:
            current = pending.pop()
            if current not in related:
                related.add(current)
                pending += bases.get(current, [])
                pending += [derived for derived, of in bases.items() if current in of]
        return related

    def _hands_a_module_to_unread_code(self, call: cst.Call) -> bool:
        """A call of code gradfix did not read (not torch's, not the file's) given a module object."""
        names = self.analysis.names
        if names.is_torch(call.func) or self.analysis.function_called(call) is not None or names.module(call.func, None) is not None:
            return False
        return any(names.module(arg.value, self.analysis.class_name_of(arg)) is not None for arg in call.args)

    def _store_fix(self, method: Loop, name: str, stores: list[cst.CSTNode], stored: Value, safe: bool) -> tuple[Fix | None, str]:
        """The detaches where ``name`` is stored, or why gradfix cannot write them. Safe for a
        state each call computes from the last (the truncation recurrent code means); a cache
        reused as it was stored, detached, stops training what built it after its first call."""
        if not stores or not all(is_single_assignment(s) for s in stores):
            return None, f"`{name}` is not stored by plain assignments"
        unknown = f"gradfix cannot tell what `{name}` holds (a namedtuple, a dataclass, …)"
        replace: list[tuple[cst.BaseStatement, cst.BaseStatement]] = []
        insert_after: list[tuple[cst.BaseStatement, tuple[cst.BaseStatement, ...]]] = []
        for store in stores:
            store = cst.ensure_type(store, cst.SimpleStatementLine)  # one assignment, checked above
            if self._read_after(method, name, store):
                return None, (
                    f"this call reads `{name}` after storing it, and a detach there would cut this call's "
                    "own gradient; store a detached copy for the next call instead"
                )
            assign = cst.ensure_type(store.body[0], cst.Assign)
            target = assign.targets[0].target
            if dotted_name(target) == name:
                value = detached(assign.value, stored.structure)
                if value is None:
                    return None, unknown
                replace.append((store, store.with_changes(body=[assign.with_changes(value=value)])))
            else:
                statement = _detach_statement(name, stored, stored)
                if statement is None:
                    return None, unknown
                insert_after.append((store, (statement,)))
        return Fix(safe=safe, replace=tuple(replace), insert_after=tuple(insert_after)), ""

    def _read_after(self, method: Loop, name: str, store: cst.CSTNode) -> bool:
        for node in self.analysis.tree.findall(method.node.body, cst.Attribute):
            if dotted_name(node) == name and self.analysis.tree.follows(node, store):
                return True
        return False


def _stored_into(target: cst.BaseExpression) -> cst.BaseExpression:
    """The name a target writes: ``hidden`` of ``hidden[i]``, ``hidden`` itself."""
    while isinstance(target, cst.Subscript):
        target = target.value
    return target


def _continues(node: cst.CSTNode) -> bool:
    """Whether a ``continue`` of this loop (not of a loop nested in it) skips the end of its body."""
    for child in node.children:
        if isinstance(child, cst.Continue):
            return True
        if isinstance(child, (cst.For, cst.While)):
            if child.orelse is not None and _continues(child.orelse):
                return True
        elif not isinstance(child, (cst.FunctionDef, cst.ClassDef)) and _continues(child):
            return True
    return False


def _position(statement: cst.SimpleStatementLine, name: str) -> tuple[int, str]:
    """Where ``name`` stands among the names the statement assigns, for stating them in that order
    (``output, (h, c) = lstm(x, (h, c))``)."""
    targets = [n for small in statement.body if isinstance(small, cst.Assign) for t in small.targets for n in target_names(t.target)]
    return (targets.index(name), "") if name in targets else (len(targets), name)


def _state_structure(entry: Value, left_behind: Value) -> Structure | None:
    """The structure a state keeps across iterations, if the code shows one consistently."""
    known = [v.structure for v in (entry, left_behind) if v.structure not in (UNKNOWN, NONE)]
    if not known:
        return None
    structure = known[0] if len(known) == 1 else known[0].join(known[1])
    return None if structure is UNKNOWN else structure


def _detach_statement(name: str, entry: Value, left_behind: Value) -> cst.BaseStatement | None:
    structure = _state_structure(entry, left_behind)
    value = None if structure is None else detached(cst.parse_expression(name), structure)
    if value is None:
        return None
    code = f"{name} = {code_of(value)}\n"
    if entry.may_be_none or entry.structure is NONE or left_behind.may_be_none:
        return cst.parse_statement(f"if {name} is not None:\n    {code}")
    return cst.parse_statement(code)
