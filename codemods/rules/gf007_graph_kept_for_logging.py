from __future__ import annotations

from functools import cached_property
from typing import Iterator, NamedTuple

import libcst as cst

from ..analysis import (
    ACCUMULATING_METHODS,
    BUILTINS_WITHOUT_GRADIENTS,
    NO_GRADIENT_HOOKS,
    READS_MODELLED_CODE,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    NO_BOOKKEEPING_READS,
    TENSOR,
    KeptArgument,
    ListOf,
    Loop,
    Origin,
    Value,
    appended,
    as_operand,
    assigned_names,
    code_of,
    dotted_name,
    expand,
    expression_key,
    none_test,
    operands,
    read_names,
    target_names,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation
from ..symptoms import GraphsKeptAlive


class GraphKeptForLogging(Rule):
    """
    What it finds: A value kept across training steps keeps its whole graph alive, step after step.
    ``total_loss += loss`` (or ``total_loss.add_(loss)``), a running mean (``loss_ema = 0.95 * loss_ema + 0.05 * loss``),
    ``losses.append(loss)``, ``history[step] = loss`` or
    ``predictions.append(output)`` inside the training loop store the *tensor*, and with it the
    graph that produced it: every activation the forward pass saved.

    gradfix reports a graph-carrying value stored, in a loop whose iterations are training steps
    (an optimizer steps and a backward runs in it, or a trainer hook), in a store that outlives the
    iteration (made before the loop and not made anew inside it: a total that starts as None and
    takes the first loss as it is, ``if total is None: total = loss`` / ``else: total = total +
    loss``, is given its first value once, not made anew). The values of a dict of losses built with
    constant keys are read one by one (``for name, value in losses.items(): running[name] += value``). An item stored under the same key
    in every iteration (``loss_dict["d"] = d_loss``) replaces the previous step's: it keeps one
    step's graph, not every step's, and is left alone; an item added to (``running["g_loss"] +=
    g_loss``) keeps them all, as does a list in an item (``history["loss"].append(loss)``: its
    fix is unsafe, gradfix cannot tell the item is a list). A loss handed to a method of a class of the file that adds it to its
    object on every call (``losses.update(loss, n)``, where ``AverageMeter.update`` runs
    ``self.sum += val * n``) is stored in that object (a meter of another package is not read).

    Why it fails: Nothing fails; memory grows with every step until the process runs out of it (the
    classic "CUDA out of memory after a few hundred iterations").

    The fix: gradfix stores ``loss.detach()``: the same tensor, with the same value, dtype and
    device, and without its history, so every use of what was kept (``losses[-1].item()``,
    ``max(losses)``, ``torch.stack(losses)``, ``total / n``) works and gives the same numbers as
    before, and the graphs are freed at each step. (``.item()`` would change the kept values' type,
    which breaks any later use of them as tensors, and sums them in double precision instead of the
    tensor's.)

    When gradfix only reports: gradfix rewrites only when it can prove that nothing needs the kept
    graphs: a backward that does not keep its graph has already walked them (so no later backward
    could), or, within the file's own code, no backward reads the store and nothing hands it on;
    and no code reads autograd's bookkeeping (``grad_fn``, ``requires_grad``) of what was kept. A
    store a backward reads (a loss computed from what it keeps, or gradient accumulation) is left
    alone: its graphs are what that backward walks. An ``append`` keeps its argument for certain only
    on a list: on an object gradfix cannot tell is one (of a class of another package, monai's
    ``CumulativeAverage``, which keeps a detached copy) it is a hint. A store the loop makes anew only under a condition
    (``if (i + 1) % 100 == 0: running_loss = 0``) keeps the graphs of the steps between: a hint, as
    whether the condition ever lets a step by is not known. So is a store whose object another name holds
    (``history = losses``, ``kept = KEPT = []``, ``def finish(store=kept)``, ``{"losses": losses}``),
    unless a backward freed what it keeps: a backward
    may read it through that name, and gradfix only hints. A meter's ``update`` is rewritten
    (``losses.update(loss.detach(), n)``) only where a backward that does not keep its graph
    walks the loss in the same iteration, the method hands what it is given nowhere but the
    object, the meter and what it keeps reach no code gradfix does not follow (``float(losses.sum)``
    and ``losses.avg``, a float, do not; ``log(losses)`` may), and nothing reads autograd's
    bookkeeping of what it keeps; a class with a method that runs a backward is left alone.
    """

    SUMMARY = "a value kept across training steps keeps every step's graph alive"
    FIX = FixKind.SAFE
    KEEPS_GRADIENTS = True
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS)
    SYMPTOM = GraphsKeptAlive()
    EXAMPLE_BEFORE = """\
model = nn.Linear(8, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total_loss = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss
print(total_loss / len(loader))
"""
    EXAMPLE_AFTER = """\
model = nn.Linear(8, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total_loss = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss.detach()
print(total_loss / len(loader))
"""

    def violations(self) -> Iterator[Violation]:
        for loop in self.analysis.loops:
            if not self.analysis.is_training_loop(loop):
                continue  # its iterations are not training steps: what it keeps dies with the step
            # (and those of the loops inside it that are no training steps: ``for k, v in losses.items(): totals[k] += v``)
            statements = [
                statement
                for statement in self.analysis.tree.findall(loop.node.body, cst.SimpleStatementLine)
                if self._innermost_training_loop(statement) is loop
            ]
            # (each statement of a line: ``loss.backward(); losses.append(loss)``)
            kept_at = [
                (statement, small, kept)
                for statement in statements
                for small in statement.body
                if (kept := self._kept_value(loop, small)) is not None
                and not (kept.replaces and self.analysis.loops_around(statement)[0] is not loop)  # (an inner loop's keys may repeat)
            ]
            carried_on = self._carried_on(loop, {kept.store for _, _, kept in kept_at})
            for statement, small, kept in kept_at:
                store, value = kept.store, kept.value
                if kept.replaces and self._same_slot_every_iteration(loop, small):
                    continue
                held = self.analysis.value_read(value) if isinstance(value, cst.Name) else self.analysis.value_assigned(value)
                if held is None or not self.analysis.value_nodes(held):
                    continue  # no graph kept: a number, a detached tensor, a value made under no_grad
                if not isinstance(value, cst.Name) and held.guessed and not self._walks_a_backwarded_tensor(loop, statement, value):
                    continue  # an expression whose graph came out of code gradfix cannot read (`sum(rewards)` of env.step's rewards)
                if self.analysis.value_nodes(held) <= carried_on:
                    continue  # the state the loop carries on holds all of it anyway: storing it keeps nothing more
                if self.analysis.under_no_grad(statement) and self._makes_a_new_tensor(loop, kept, small):
                    continue  # `total += loss` or `stats[i] = loss` with gradients off records no graph
                reset = self._reset_only_sometimes(loop, store)
                if not (kept.by_method is not None or kept.in_an_item or self._outlives_iteration(loop, store) or reset) or self._backwarded(store):
                    continue
                # Out of code gradfix did not read, or an item of a tuple, it may be a number (an
                # environment's `reward`, `time.time() - start`) or a dict of tensors; a tensor a
                # backward walked is one.
                proved = held.backwarded or self._walks_a_backwarded_tensor(loop, statement, value)
                one_tensor = held.structure is TENSOR or bool(proved)
                if kept.in_an_item:
                    unfixable = self._why_item_lists_may_need_them(loop, statement, kept)
                elif kept.by_method is None:
                    unfixable = self._why_graphs_may_be_needed(loop, store, held)
                else:
                    unfixable = self._why_the_method_may_need_them(loop, statement, kept)
                if not unfixable and not one_tensor:
                    # (``stats.detach()`` of a dict of losses raises AttributeError)
                    unfixable = f"gradfix cannot tell that `{code_of(value)}` is one tensor"
                message = f"`{code_of(small)}` keeps the graph of every step alive in `{store}`; " + (
                    f"store `{code_of(_detached(value))}`" if one_tensor else "store its tensors detached"
                )
                fix = None
                if unfixable:
                    message += f" (not rewritten: {unfixable})"
                else:
                    kept_detached = cst.ensure_type(statement.deep_replace(value, _detached(value)), cst.SimpleStatementLine)
                    fix = Fix(safe=True, replace=((statement, kept_detached),), kept_whole=(value,))
                guess = ""
                if kept.appended_to is not None and not self._proved_a_list(kept.appended_to):
                    guess = f"`{store}` may be no list (an object of code gradfix did not read): what its `append` keeps is not known"
                elif reset is not None:
                    guess = f"`{store}` is made anew under a condition (line {self.analysis.line(reset)}): it keeps the graphs of the steps between"
                elif self.analysis.shares_its_object(store) and not self._freed(loop, store, held):
                    guess = f"another name holds the object `{store}` holds, and a backward may walk what it keeps through that name"
                elif held.unread and not proved:
                    guess = f"`{code_of(value)}` may hold no graph: it comes out of code gradfix did not read"
                elif held.possible and not proved:
                    guess = f"`{code_of(value)}` may hold no graph: what it is built from may not require grad where it runs"
                elif held.guessed and not proved:
                    guess = f"`{code_of(value)}` may hold no graph: it is an item of a tuple gradfix cannot tell apart from the others"
                yield self.violation(value, message, fix, guess=guess)

    def _innermost_training_loop(self, statement: cst.SimpleStatementLine) -> Loop | None:
        return next((loop for loop in self.analysis.loops_around(statement) if self.analysis.is_training_loop(loop)), None)

    def _kept_value(self, loop: Loop, small: cst.BaseSmallStatement) -> _Kept | None:
        """What ``small`` keeps where: ``store += value``, ``store = store + value`` (or any sum of
        products and quotients that reads ``store`` once, ``ema = 0.95 * ema + 0.05 * loss``),
        ``store.append(value)``, ``store[key] = value`` (``value`` a name, or for all but the sum
        of a name written out any expression: ``total += loss / n``), ``store[key] += value`` and
        ``store[key] = store[key] + value`` (they add to the item: no key makes them replace),
        ``store[key].append(value)`` (a list in each item, where the loop writes no item of the
        store: ``history[key] = []`` would empty one), ``store.add_(value)`` (a tensor's in-place sum,
        ``ACCUMULATING_METHODS``) and ``store.method(value)`` where a method of the file's
        class adds or appends that parameter to the object on every call (``meter.update(loss, n)``
        with ``self.sum += val * n``)."""
        if type(small) is cst.AugAssign and type(small.operator) is cst.AddAssign:
            target = small.target
            name = dotted_name(target.value) if type(target) is cst.Subscript else dotted_name(target)
            return _Kept(name, small.value) if name else None
        if type(small) is cst.Assign and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
            name = dotted_name(target)
            if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add:
                if name and dotted_name(value.left) == name and type(value.right) is cst.Name:
                    return _Kept(name, value.right)
                if name and _arithmetic_leaves(value).count(name) == 1:
                    return _Kept(name, value)  # (a running mean: ``ema = 0.95 * ema + 0.05 * loss``, detached whole)
                if (
                    type(target) is cst.Subscript
                    and (container := dotted_name(target.value))
                    and expression_key(value.left) == expression_key(target)
                ):
                    # ``store[key] = store[key] + value``: a sum, as ``+=`` (its whole right-hand side
                    # detached, where the value is not a name: what the analysis evaluated)
                    return _Kept(container, value.right if type(value.right) is cst.Name else value)
            if type(target) is cst.Subscript and (container := dotted_name(target.value)):
                return _Kept(container, value, replaces=True)
        call = appended(small)
        if call is not None and type(call.func) is cst.Attribute:
            receiver = call.func.value
            name = dotted_name(receiver)
            if name:
                return _Kept(name, call.args[0].value, appended_to=receiver)
            if (
                type(receiver) is cst.Subscript
                and (container := dotted_name(receiver.value))
                and not self.analysis.writes_of(loop, container)
                and self._bound_before(loop, container)
            ):
                return _Kept(container, call.args[0].value, in_an_item=True)  # ``history[key].append(loss)``
            return None
        if type(small) is cst.Expr and type(small.value) is cst.Call:
            call = small.value
            if type(call.func) is cst.Attribute and call.func.attr.value in ACCUMULATING_METHODS and call.args and not call.args[0].keyword:
                name = dotted_name(call.func.value)
                entry = loop.entry.get(name) if name else None  # (a tensor's method: not an object's of code gradfix did not read)
                return _Kept(name, call.args[0].value) if name and entry is not None and entry.structure is TENSOR else None
            return self._kept_by_method(loop, call)
        return None

    def _kept_by_method(self, loop: Loop, call: cst.Call) -> _Kept | None:
        """``meter.update(loss, n)`` where the file's class proves the meter keeps ``loss`` on every
        call and across the loop's iterations: the object is made by that class's constructor
        wherever the loop's function binds it, no other call of the loop on it writes what the
        method adds to (``meter.reset()``), and no method of the class runs a backward (its sum
        may be what a backward walks: gradient accumulation)."""
        kept = self.analysis.arguments_kept(call)
        receiver = dotted_name(cst.ensure_type(call.func, cst.Attribute).value) if kept else None
        if not kept or receiver is None:
            return None
        # (the argument that holds a graph: ``n`` of ``self.sum += val * n`` is kept too)
        argument = next((k for k in kept if self._holds_graph(k.value)), kept[0])
        class_name, method = argument.class_name, argument.kept
        tree = self.analysis.tree
        bindings = self._bound_before(loop, receiver)
        if not bindings or any(type(value) is not cst.Call or dotted_name(value.func) != class_name for value in bindings):
            return None  # made by another class, or anew in the loop (or after it: a loop around this one)
        if any(site.scope.class_name == class_name for site in self.analysis.backward_sites):
            return None
        attributes = {a.partition(".")[2] for a in method.attributes}
        written_by = {
            function.name.value
            for function in self.analysis.class_body(class_name)
            if isinstance(function, cst.FunctionDef)
            and function.params.params
            and attributes
            & {w.partition(".")[2] for w in assigned_names(function.body, tree=tree) if w.startswith(function.params.params[0].name.value + ".")}
        }
        method_name = cst.ensure_type(call.func, cst.Attribute).attr.value
        for other in tree.findall(loop.node.body, cst.Call):
            if other is not call and type(other.func) is cst.Attribute and dotted_name(other.func.value) == receiver:
                if other.func.attr.value != method_name and other.func.attr.value in written_by:
                    return None
        return _Kept(receiver, argument.value, by_method=argument, method_name=method_name)

    def _proved_a_list(self, receiver: cst.BaseExpression) -> bool:
        """Whether ``receiver`` holds a list where it is appended to (``[]``, ``list(...)``, a list
        the walk saw grow): an object of another class may keep what its ``append`` is given, or not
        (monai's ``CumulativeAverage`` keeps a detached copy)."""
        held = self.analysis.value_read(receiver) if isinstance(receiver, (cst.Name, cst.Attribute)) else None
        return held is not None and isinstance(held.structure, ListOf)

    def _bound_before(self, loop: Loop, name: str) -> list[cst.BaseExpression] | None:
        """What the assignments of ``name`` in the loop's function assign, where each of them
        comes before the loop (None where one does not, or none is there): the object outlives
        the iterations."""
        tree = self.analysis.tree
        bindings = [
            assign
            for assign in tree.findall(loop.scope.node, cst.Assign)
            if any(name in target_names(t.target, rebound_only=True) for t in assign.targets)
        ]
        if not bindings or not all(tree.follows(loop.node, assign) for assign in bindings):
            return None
        return [assign.value for assign in bindings]

    def _holds_graph(self, value: cst.BaseExpression) -> bool:
        held = self.analysis.value_read(value) if isinstance(value, cst.Name) else self.analysis.value_assigned(value)
        return held is not None and bool(self.analysis.value_nodes(held))

    def _why_the_method_may_need_them(self, loop: Loop, statement: cst.SimpleStatementLine, kept: _Kept) -> str:
        """For a store a method of the file makes on its object: why its graphs may still be needed,
        or "" when a backward that does not keep its graph walks them in the same iteration (no
        later backward can: whatever reads the object), the method hands its argument nowhere
        else, what the object keeps reaches no code gradfix does not follow, and nothing reads
        autograd's bookkeeping of it."""
        argument = kept.by_method
        assert argument is not None
        call = f"`{kept.store}.{kept.method_name}`"
        if self._reads_bookkeeping(loop, kept.store):
            return f"code reads autograd's bookkeeping (`grad_fn`, `requires_grad`, …) of what `{kept.store}` keeps"
        if not argument.kept.only_stored:
            return f"{call} hands what it is given to more than the object it keeps it on"
        if any(
            isinstance(a, cst.Attribute) and a.attr.value in _BOOKKEEPING
            for node in self.analysis.class_body(argument.class_name)
            for a in self.analysis.tree.findall(node, cst.Attribute)
        ):
            return f"the class of `{kept.store}` reads autograd's bookkeeping (`grad_fn`, `requires_grad`, …)"
        handed_on = self._handed_on(loop, kept.store, argument)
        if handed_on:
            return handed_on
        if not self._freed_in_the_iteration(loop, statement, kept.value):
            return f"what {call} keeps lives on an object, and code gradfix does not see may backward it"
        return ""

    def _handed_on(self, loop: Loop, store: str, argument: KeptArgument) -> str:
        """Where the object, or an attribute of it that may hold what the method keeps, may reach
        code gradfix does not follow (which may read its autograd bookkeeping), in the loop's
        function or in the methods of the class it calls: "" where it cannot. Only calls of the
        class's methods on the object, and reads of its other attributes (``losses.avg``, a float),
        are followed; a method may hand its object's attributes only to builtins that read no
        bookkeeping (``float(self.sum)``)."""
        tree = self.analysis.tree
        methods = {f.name.value: f for f in self.analysis.class_body(argument.class_name) if isinstance(f, cst.FunctionDef)}
        with_graph = argument.left_with_graph | {a.partition(".")[2] for a in argument.kept.attributes}
        called: list[str] = []
        if "." in store:
            return f"`{store}` lives on an object, and code gradfix does not see may read what it keeps"
        for name in tree.names(loop.scope.node, [store]):
            parent = tree.parent(name)
            if type(parent) is cst.AssignTarget:
                continue  # (its binding)
            if type(parent) is cst.Attribute and parent.value is name:
                outer = tree.parent(parent)
                if type(outer) is cst.Call and outer.func is parent and parent.attr.value in methods:
                    called.append(parent.attr.value)
                    continue
                if type(outer) is not cst.Call and (parent.attr.value not in with_graph or self._read_by_a_builtin(parent)):
                    continue  # (``losses.avg``, a float; ``float(losses.sum)``)
            return f"`{code_of(parent or name)}` may hand what `{store}` keeps to code gradfix does not follow"
        shadowed = self._builtins_shadowed
        seen: set[str] = set()
        while called:
            method_name = called.pop()
            if method_name in seen:
                continue
            seen.add(method_name)
            method = methods[method_name]
            me = method.params.params[0].name.value if method.params.params else None
            for inner in tree.findall(method.body, cst.Call):
                func = inner.func
                if type(func) is cst.Attribute and dotted_name(func.value) == me and func.attr.value in methods:
                    called.append(func.attr.value)
                    continue
                if type(func) is cst.Name and func.value in BUILTINS_WITHOUT_GRADIENTS and func.value not in shadowed:
                    continue
                if me is not None and any(me in read_names(arg.value, tree) for arg in inner.args):
                    return f"`{argument.class_name}.{method_name}` hands what the object keeps to code gradfix does not follow"
        return ""

    def _read_by_a_builtin(self, expression: cst.BaseExpression) -> bool:
        """Whether ``expression`` is an argument of a builtin that reads no autograd bookkeeping
        (``float(losses.sum)``), the file's own definitions of the name aside."""
        tree = self.analysis.tree
        arg = tree.parent(expression)
        call = tree.parent(arg) if type(arg) is cst.Arg else None
        return (
            type(call) is cst.Call
            and type(call.func) is cst.Name
            and call.func.value in BUILTINS_WITHOUT_GRADIENTS
            and call.func.value not in self._builtins_shadowed
        )

    @cached_property
    def _builtins_shadowed(self) -> set[str]:
        """The builtins' names the file binds (a ``print`` of its own may read anything)."""
        module = self.analysis.module
        tree = self.analysis.tree
        defined = {node.name.value for node in tree.findall(module, cst.FunctionDef)} | {
            node.name.value for node in tree.findall(module, cst.ClassDef)
        }
        return (defined | set(self.analysis.names.aliases) | assigned_names(module, tree=tree)) & BUILTINS_WITHOUT_GRADIENTS

    def _why_item_lists_may_need_them(self, loop: Loop, statement: cst.SimpleStatementLine, kept: _Kept) -> str:
        """For ``store[key].append(value)``: the analysis does not follow what the lists in the
        store's items hold, so only a backward that freed the value's graph in the same iteration
        proves that nothing needs it (and no code reads autograd's bookkeeping of the store)."""
        if self._reads_bookkeeping(loop, kept.store):
            return f"code reads autograd's bookkeeping (`grad_fn`, `requires_grad`, …) of what `{kept.store}` keeps"
        if not self._freed_in_the_iteration(loop, statement, kept.value):
            return f"gradfix does not follow the lists in `{kept.store}`'s items, and code it does not see may backward what they keep"
        return ""

    def _freed_in_the_iteration(self, loop: Loop, statement: cst.CSTNode, value: cst.BaseExpression) -> bool:
        """Whether a backward that does not keep its graph walks the graph of ``value`` (a name, or
        arithmetic on names) in this iteration: what it held was freed where it was kept, or a name it
        operates on is freed where the iteration ends and not bound again after ``statement``."""
        held = self.analysis.value_read(value) if isinstance(value, cst.Name) else self.analysis.value_assigned(value)
        if held is not None and held.freed:
            return True
        tree = self.analysis.tree
        for name in operands(value):
            left = loop.back_edge.get(name.value)
            if left is not None and left.freed and not any(tree.follows(write, statement) for write in self.analysis.writes_of(loop, name.value)):
                return True
        return False

    def _operates_on_a_backwarded_tensor(self, expression: cst.BaseExpression) -> bool:
        """Whether ``expression`` is arithmetic (``loss * y.size(0)``, ``-loss``, ``loss / n``) on a
        name that holds, on every path here, a tensor a backward already walked: that tensor holds a
        graph (the backward would have raised otherwise), and so does any of these operations on it,
        whatever code built it."""
        return any((read := self.analysis.value_read(name)) is not None and bool(read.backwarded) for name in operands(expression))

    def _walks_a_backwarded_tensor(self, loop: Loop, statement: cst.CSTNode, value: cst.BaseExpression) -> bool:
        """Whether ``value`` is a name, or ``operands`` of names, one of which a backward walked
        before or walks later in the iteration as ``statement`` kept it: it holds a graph."""
        return self._operates_on_a_backwarded_tensor(value) or any(self._backwarded_later(loop, statement, name.value) for name in operands(value))

    def _backwarded_later(self, loop: Loop, statement: cst.CSTNode, name: str) -> bool:
        """Whether a backward later in the same iteration walks ``name`` as ``statement`` kept it
        (``train_loss += loss`` then ``loss.backward()``): a tensor a backward walks holds a graph."""
        writes = self.analysis.writes_of(loop, name)
        tree = self.analysis.tree
        return any(
            isinstance(site.tensor, cst.Name)
            and site.tensor.value == name
            and site.loops[:1] == (loop,)
            and tree.follows(site.call, statement)
            and not any(tree.follows(write, statement) and tree.follows(site.call, write) for write in writes)
            for site in self.analysis.backward_sites
        )

    def _carried_on(self, loop: Loop, stores: set[str]) -> frozenset[Origin]:
        """The graph the loop hands each next iteration in the names it rebinds from their previous
        value, other than what it stores for later (MAML's fast weights, built from the step's
        ``create_graph`` gradients, which hold that step's loss)."""
        rebound = assigned_names(loop.node.body, rebinding_only=True, tree=self.analysis.tree) - stores
        carried = [
            value
            for name in sorted(rebound & loop.carried_names)
            if (value := loop.back_edge.get(name)) is not None and value.graph and self._never_cut(loop, name)
        ]
        return frozenset().union(*(self.analysis.value_nodes(value) for value in carried))

    def _never_cut(self, loop: Loop, name: str) -> bool:
        """Whether every write of ``name`` in the loop computes it from, or adds to, its previous
        value, so that the chain of graphs it holds is never cut (no ``params = params.detach()``)."""
        return bool(self.analysis.writes_of(loop, name)) and not self.analysis.made_anew_in(loop, name)

    @staticmethod
    def _makes_a_new_tensor(loop: Loop, kept: _Kept, small: cst.BaseSmallStatement) -> bool:
        """Whether the store gets a value computed from the kept one (a sum, a copy into a
        tensor), rather than the tensor itself (an append, an item of a dict or list)."""
        if kept.by_method is not None:
            return kept.by_method.kept.new_tensor
        if isinstance(small, cst.AugAssign) or (isinstance(small, cst.Assign) and not isinstance(small.targets[0].target, cst.Subscript)):
            return True
        entry = loop.entry.get(kept.store)
        return entry is not None and entry.structure is TENSOR

    def _same_slot_every_iteration(self, loop: Loop, small: cst.BaseSmallStatement) -> bool:
        """``store[key] = value`` with a key no iteration changes: literals, and in a loop statement
        plain names it never assigns; no call, no attribute (``store[len(store)]``,
        ``store[self.step]`` are a new slot every time). A trainer hook's iterations are its calls:
        only a literal key is the same in each."""
        if not isinstance(small, cst.Assign) or not isinstance(small.targets[0].target, cst.Subscript):
            return False
        key = small.targets[0].target.slice
        if len(key) != 1 or not isinstance(key[0].slice, cst.Index):
            return False
        index = key[0].slice.value
        tree = self.analysis.tree
        read = read_names(index, tree)
        if tree.findall(index, cst.Call) or any("." in name for name in read):
            return False
        return not read if loop.is_call else not read & assigned_names(loop.node, tree=tree)

    def _why_graphs_may_be_needed(self, loop: Loop, store: str, held: Value) -> str:
        """Why the kept graphs may still be needed, or "" when they cannot be."""
        if self._reads_bookkeeping(loop, store):
            return f"code reads autograd's bookkeeping (`grad_fn`, `requires_grad`, …) of what `{store}` keeps"
        if self._freed(loop, store, held):
            return ""
        if "." in store:
            return f"`{store}` lives on an object, and code gradfix does not see may backward what it keeps"
        if self.analysis.value_nodes(held) & self.analysis.escaped(loop.scope):
            return "the value is handed to code gradfix does not follow, which may backward it"
        return ""

    def _freed(self, loop: Loop, store: str, held: Value) -> bool:
        """Whether a backward that does not keep its graph walks what was stored, in the same
        iteration (the loop's own ``loss.backward()``, or the trainer's backward of what its hook
        returns): nothing can backward those graphs again."""
        if loop.is_call:  # (a trainer hook: its training loop is the trainer's)
            return bool(self.analysis.value_nodes(held) & self.analysis.value_nodes(loop.returned))
        left = loop.back_edge.get(store)
        return held.freed or (left is not None and left.freed)

    def _outlives_iteration(self, loop: Loop, store: str) -> bool:
        """Made before the loop (or kept on the module across calls), and not made anew inside it."""
        if store not in loop.entry and not (loop.is_call and store.startswith("self.")):
            return False
        return not self.analysis.made_anew_in(loop, store) or self._given_its_first_value_only(loop, store)

    def _reset_only_sometimes(self, loop: Loop, store: str) -> cst.CSTNode | None:
        """The first statement that makes ``store`` anew, where the loop does so only under a
        condition (``if (i + 1) % 100 == 0: running_loss = 0``, the PyTorch tutorials' shape):
        the store keeps the graphs of every step between two resets, as many as the condition lets
        by (all of them, if it never holds; none, if it always does)."""
        if store not in loop.entry:
            return None
        writes = self.analysis.writes_of(loop, store)
        resets = [statement for statement, from_before in writes.items() if from_before is False]
        if not resets or any(self.analysis.runs_in_every_iteration(statement, loop) for statement in resets):
            return None
        return None if self._given_its_first_value_only(loop, store) else resets[0]

    def _given_its_first_value_only(self, loop: Loop, store: str) -> bool:
        """Whether the one write of the loop that makes ``store`` anew runs only while ``store`` is
        None (the arm of ``if store is None:``, or the ``else`` of ``if store is not None:``), and
        every other write adds to what the store holds (``store = store + loss``, ``store += loss``),
        which is never None: it gives the store its first value, once (``if total is None: total =
        loss``), and no later iteration makes it anew."""
        tree, writes = self.analysis.tree, self.analysis.writes_of(loop, store)
        resets = [statement for statement, from_before in writes.items() if from_before is False]
        if len(resets) != 1:
            return False
        reset = resets[0]
        others = [statement for statement in writes if statement is not reset]
        if not others or any(not _adds_to(statement, writes[statement]) for statement in others):
            return False
        node: cst.CSTNode = reset
        while (parent := tree.parent(node)) is not None and parent is not loop.node:
            if isinstance(parent, cst.If) and node is not parent.test:
                tested = none_test(parent.test)  # (the name tested, and the test's truth where it holds None)
                return tested is not None and tested[0] == store and tested[1] is (node is parent.body)
            node = parent
        return False

    def _backwarded(self, store: str) -> bool:
        """Whether a backward's graph is built from the store: this iteration's loss computed from
        what it keeps (detached, that loss would stop training what built them), or gradient
        accumulation after the loop."""
        return store in self._names_backwards_read

    @cached_property
    def _names_backwards_read(self) -> set[str]:
        """The names the backwarded tensors and the statements of backwarded graphs read: gathered
        once, not for each store."""
        names: set[str] = set()
        seen: set[cst.CSTNode] = set()
        for site in self.analysis.backward_sites:
            if site.tensor is not None:
                names |= read_names(site.tensor)
            for origin in expand(site.value.origins, None):
                if isinstance(origin, Origin) and origin.statement not in seen:
                    seen.add(origin.statement)
                    names |= read_names(origin.statement)
        return names

    def _reads_bookkeeping(self, loop: Loop, store: str) -> bool:
        """Whether the scope reads autograd's bookkeeping of the store or of a name taken from it
        (``losses[-1].grad_fn``, ``for l in losses: l.requires_grad``)."""
        scope = loop.scope.node
        derived = {store}
        for node in self.analysis.tree.findall(scope, cst.For):
            if store in read_names(node.iter):
                derived |= set(target_names(node.target))
        for assign in self.analysis.tree.findall(scope, cst.Assign):
            if store in read_names(assign.value):
                derived |= {n for t in assign.targets for n in target_names(t.target)}
        return any(
            attribute.attr.value in _BOOKKEEPING and read_names(attribute.value) & derived
            for attribute in self.analysis.tree.findall(scope, cst.Attribute)
        )


# What a detached tensor answers differently from the tensor it was detached from.
_BOOKKEEPING = {"grad_fn", "requires_grad", "is_leaf", "register_hook", "retain_grad", "backward", "grad", "_version"}


class _Kept(NamedTuple):
    """What a statement of a loop keeps, and where."""

    store: str
    value: cst.BaseExpression
    replaces: bool = False  # ``store[key] = value``: the item under the same key is dropped
    in_an_item: bool = False  # ``store[key].append(value)``: appended to a list in an item of the store
    by_method: KeptArgument | None = None  # kept by a method of the file's class on the object ``store``
    method_name: str = ""  # (that method)
    appended_to: cst.BaseExpression | None = None  # ``store.append(value)``: what the call's receiver is


def _detached(value: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=as_operand(value), attr=cst.Name("detach")))


def _arithmetic_leaves(value: cst.BaseExpression) -> list[str | None]:
    """The dotted names and numbers (None) an expression of ``+``, ``-``, ``*`` and ``/`` is made
    of; ``["?"]`` for anything else in it (a call, a subscript), which may keep what it is given."""
    if type(value) is cst.BinaryOperation and type(value.operator) in (cst.Add, cst.Subtract, cst.Multiply, cst.Divide):
        return [*_arithmetic_leaves(value.left), *_arithmetic_leaves(value.right)]
    if type(value) is cst.Integer or type(value) is cst.Float:
        return [None]
    return [dotted_name(value) or "?"]


def _adds_to(statement: cst.CSTNode, from_before: bool | None) -> bool:
    """Whether ``statement`` writes its name by adding to what it held: ``+=`` (or any write that
    changes the old value in place), or an assignment of a sum that reads it."""
    if from_before is None:
        return True
    small = cst.ensure_type(statement, cst.SimpleStatementLine).body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    return from_before is True and type(small) is cst.Assign and type(small.value) is cst.BinaryOperation
