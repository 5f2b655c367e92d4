from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import (
    BackwardSite,
    Carried,
    GradientEffect,
    Origin,
    as_operand,
    assigned_names,
    code_of,
    expand,
    is_single_assignment,
    loss_handed_to_trainer,
    read_names,
    target_names,
)
from ..edits import Fix
from ..frameworks import AUTOGRAD_GRAD, TENSOR_BACKWARD, TRAINER_RUNS
from ..report import FixKind
from ..rule import Rule, Violation

_EQUAL = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


class FreedGraph(Rule):
    """
    What it finds: A backward walks a graph that an earlier backward already freed. gradfix says
    this when its analysis proves that what a backward walks was built from a value an earlier
    backward freed, on some path through the code, and no other rule explains the same backward with
    its shape and its fix. It names the backward that freed the graph and the line that built it.
    Two backwards no run reaches both of are no pair: the two arms of an ``if`` whose test nothing
    changes, ``if flag:`` and ``if not flag:``, ``if task == "semantic":`` and ``if task == "depth":``.

    Why it fails: A backward that does not keep its graph (no ``retain_graph=True``) frees the
    tensors each node of that graph saved for it. Any later backward that reaches one of those nodes
    raises ``RuntimeError: Trying to backward through the graph a second time``: a second loss built
    on the same forward, a value computed once and used by every step, state carried from the
    previous iteration, a loss a helper or framework already backwarded. A trainer hook
    (Lightning's ``training_step`` under automatic optimization) that returns a loss built on a
    graph a backward or ``autograd.grad`` inside it freed fails the same way at the trainer's own
    backward, which gradfix places at the ``return``.

    The fix: it depends on what the program means: backward the losses together once, compute the
    value again after the first backward (inside the loop), or detach what must not train.
    ``retain_graph=True`` only hides it, but where the program reads the gradients between the two
    backwards (``p.grad`` of the first loss alone), it means the first backward's gradients, which
    one backward of both would not leave: keeping that graph is the fix. gradfix rewrites only a trainer hook's two shapes, as
    unsafe fixes (the trainer may scale or clip what the hook returns): a gradient penalty's
    ``autograd.grad`` gets ``create_graph=True``, and a loss the hook backwards itself is returned
    with the hook's loss for the trainer's one backward. And where a loop keeps adding to a loss
    that was backwarded before it (``loss += part`` for SAM's second pass, on the first pass's
    total), the sum starts afresh after the first backward: ``loss = loss.detach()`` (unsafe: the
    first pass's losses are not backwarded again). Where an optimizer steps between the two
    backwards and the second loss reads a forward of the same block (Sophia's periodic Hessian
    estimate from the step's logits), that forward runs again where the second loss first reads it
    (unsafe: at the stepped weights).

    When gradfix only reports: everywhere else: run ``gradfix diagnose --fix`` on the script to try
    the candidate fixes. Where the backwarded value comes out of code gradfix did not read, or is an
    item of a container whose items gradfix no longer knows (a dict written under another name,
    handed to a call, stored at a key it cannot read), the finding is a hint (``--hints``): that
    value may not hold the freed graph. So is one whose graph a helper's backward freed where that
    backward may not run on the path the call takes (under the helper's flag, after an early
    ``return``, in a loop of the helper: ``compute(x, do_backward=False)``).
    """

    SUMMARY = "a backward walks a graph an earlier backward freed"
    FIX = FixKind.UNSAFE
    DEFERS = True
    EXAMPLE_BEFORE = """\
import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 8)
        self.decoder = nn.Linear(8, 6)
        self.head = nn.Linear(8, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        code = self.encoder(x)
        reconstruction_loss = (self.decoder(code) - x).pow(2).mean()
        reconstruction_loss.backward()
        loss = nn.functional.cross_entropy(self.head(code), y)
        return loss
"""
    EXAMPLE_AFTER = """\
import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 8)
        self.decoder = nn.Linear(8, 6)
        self.head = nn.Linear(8, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        code = self.encoder(x)
        reconstruction_loss = (self.decoder(code) - x).pow(2).mean()
        loss = nn.functional.cross_entropy(self.head(code), y)
        return loss + reconstruction_loss
"""

    def violations(self) -> Iterator[Violation]:
        yield from self._returned_to_the_trainer()
        for site in self.analysis.backward_sites:
            if not site.value.freed or not site.value.graph or self.analysis.backwards_a_parameter(site):
                continue  # (a helper's backward of its parameter fails at the call that passes a freed graph)
            nodes = self.analysis.graph_nodes(site)
            freeing = [
                other
                for other in self.analysis.backward_sites
                if other is not site
                and other.retain_graph is False
                and not other.api.guessed
                and self.analysis.graph_nodes(other) & nodes
                and self._may_run_before(other, site, self.analysis.graph_nodes(other) & nodes)
            ]
            if freeing and all(self.analysis.exclusive(other.statement, site.statement, proved=False) for other in freeing):
                continue  # no run reaches both
            earlier = [
                other
                for other in freeing
                if self.analysis.order(other.call) < self.analysis.order(site.call)
                and not self.analysis.exclusive(other.statement, site.statement, proved=False)
            ]
            shared = set().union(*(self.analysis.graph_nodes(other) & nodes for other in freeing)) if freeing else set()
            built = min((origin.statement for origin in shared), key=self.analysis.order, default=None)
            inside = self.analysis.calls_freeing(site)
            if not freeing and not inside and site.stops_at.freed:
                continue  # the freed part may be the graph below its inputs, which it does not walk
            if not earlier and not inside and self._carried_only_by_impossible_paths(site):
                continue  # (``if flag:`` assigns it and a later ``if flag:`` reads it: never the previous iteration's)
            if earlier:
                by = f"the backward at line {self.analysis.line(earlier[-1].call)}"
            elif inside:
                by = f"a backward inside `{code_of(inside[-1].func)}(...)`, called at line {self.analysis.line(inside[-1])},"
                built = built or self.analysis.statement_of(inside[-1])
            else:
                by = "an earlier backward (a previous iteration's, or one gradfix does not place)"
            where = f", built at line {self.analysis.line(built)}" if built is not None else ""
            message = (
                f"`{code_of(site.tensor if site.tensor is not None else site.call)}` is backwarded through a graph that {by} already freed{where}; "
            )
            restart = self._restarted_sum(earlier[-1], site) if earlier else None
            recompute = self._recomputed(earlier[-1], site, built) if earlier and restart is None and built is not None else None
            reading = self._gradients_read_between(earlier[-1], site) if earlier else None
            if restart is not None and site.tensor is not None:  # (a name, where the sum restarts)
                message += f"`{code_of(site.tensor)}` keeps adding to the loss that backward took: start the sum afresh after it"
            elif recompute is not None and built is not None:
                message += f"an optimizer steps between them: compute line {self.analysis.line(built)} again after the step, where it is read"
            elif reading is not None:
                message += (
                    f"line {self.analysis.line(reading)} reads the gradients that backward left, which one backward of both losses "
                    "would not leave: keep its graph there (retain_graph=True), or compute the value again for this backward"
                )
            else:
                message += (
                    "backward the losses together once, compute the value again after that backward, or detach what must "
                    "not train (retain_graph=True only hides it)"
                )
            guess = self._guess(site, placed=bool(earlier or inside))
            if not guess and not earlier and inside and not self._frees_whenever_it_returns(inside[-1]):
                guess = f"the backward inside `{code_of(inside[-1].func)}(...)` may not run on the path that call takes (under a test, in a loop, after a return)"
            if not guess and not inside and earlier and not any(other.runs_as_walked for other in earlier):
                guess = f"the backward at line {self.analysis.line(earlier[-1].call)} runs only where the expression around it lets it"
            yield self.violation(
                site.call,
                message,
                restart or recompute,
                related=tuple(node for node in (*(other.call for other in earlier[-1:]), built) if node is not None),
                sites=(site,),
                guess=guess,
            )

    def _frees_whenever_it_returns(self, call: cst.Call, reading: frozenset[cst.FunctionDef] = frozenset()) -> bool:
        """Whether the file's function ``call`` runs backwards on every path to a return: a backward that is a
        statement of its own body, runs as the walk reads it and stands before every ``return``, or a call there
        (in a plain statement, not under ``and``/``or``, a conditional expression, a comprehension or a lambda) of
        a function that does so (``self.block(x)`` in a model's forward). Not one under a flag
        (``compute(x, do_backward=False)``), which this call may not take."""
        function = self.analysis.function_called(call) or self._forward_of(call)
        if function is None or function in reading:
            return False
        tree, order = self.analysis.tree, self.analysis.order
        last = min((order(r) for r in tree.findall(function.body, cst.Return)), default=None)
        statements = [s for s in function.body.body if isinstance(s, cst.SimpleStatementLine) and (last is None or order(s) <= last)]
        if any(site.scope.node is function and site.statement in statements and site.runs_as_walked for site in self.analysis.backward_sites):
            return True
        return any(
            self._runs_whenever(inner, statement) and self._frees_whenever_it_returns(inner, reading | {function})
            for statement in statements
            for inner in tree.findall(statement, cst.Call)
        )

    def _forward_of(self, call: cst.Call) -> cst.FunctionDef | None:
        """The ``forward`` of the file's module class that ``call`` calls an instance of (``self.block(x)``)."""
        module = self.analysis.names.module(call.func, self.analysis.class_name_of(call))
        if module is None or not module.is_local:
            return None
        body = self.analysis.class_body(module.class_name)
        return next((f for f in body if isinstance(f, cst.FunctionDef) and f.name.value == "forward"), None)

    def _runs_whenever(self, node: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Whether ``node`` is evaluated whenever ``statement`` runs: nothing around it in the statement may skip or
        defer it."""
        around: cst.CSTNode | None = node
        while around is not statement and around is not None:
            if isinstance(around, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                return False
            around = self.analysis.tree.parent(around)
        return around is statement

    def _guess(self, site: BackwardSite, placed: bool) -> str:
        """Why the graph may not be freed after all: the backwarded value came out of code gradfix
        did not read, or reaches the freed graph only through an item of a container whose items
        gradfix does not know (``Value.freed_unsure``: written under another name, handed on, at a
        key it cannot read), or (when no backward in
        the file is placed before it) what was built before its loop came out of code gradfix did
        not read."""
        if site.value.unread:
            return f"`{code_of(site.tensor if site.tensor is not None else site.call)}` comes out of code gradfix did not read, and may not hold the graph it seems to"
        if site.value.freed_unsure:  # (through an item of a container whose items gradfix does not know)
            return f"gradfix cannot tell what `{code_of(site.tensor if site.tensor is not None else site.call)}` holds, and it may not hold the freed graph"
        loop = next((loop for loop in site.loops if not loop.is_call), None)
        unread = None if placed or loop is None else self.analysis.unread_value(self.analysis.built_before_loop(site, loop))
        if unread is not None:
            return f"`{code_of(unread)}`, built before the loop, comes out of code gradfix did not read, and may hold no graph"
        if not placed and self._carried_only_by_impossible_paths(site, inner_loops_run=True):
            return "the previous iteration's graph reaches it only if an inner loop runs no time"
        return ""

    def _carried_only_by_impossible_paths(self, site: BackwardSite, inner_loops_run: bool = False) -> bool:
        """Whether every name that carries the previous iteration's graph into this backward is
        read only where the iteration assigned it (``FileAnalysis.read_only_where_assigned``): the
        path that would read the previous value is one no run takes (``inner_loops_run``: if
        every inner loop runs)."""
        for loop in site.loops:
            origins = expand(site.value.origins, loop)
            carried = [name for name in loop.carried_names if Carried(loop, name) in origins]
            # (a graph built before the loop is walked by the first iteration's backward, whatever the tests say)
            if (
                carried
                and all(self.analysis.read_only_where_assigned(loop, name, inner_loops_run) for name in carried)
                and not self.analysis.built_before_loop(site, loop)
            ):
                return True
        return False

    def _gradients_read_between(self, first: BackwardSite, second: BackwardSite) -> cst.CSTNode | None:
        """The first of what runs between the two backwards (``FileAnalysis.run_between``) that reads
        a gradient (``p.grad``): the program means the first backward's gradients alone, before the
        second adds to them."""
        return next((node for node in self.analysis.run_between(first, second) or () if self.analysis.reads_gradients(node)), None)

    def _restarted_sum(self, earlier: BackwardSite, site: BackwardSite) -> Fix | None:
        """``loss.backward()``, then a loop that adds more to ``loss`` (``loss += part``) and backwards
        it again (SAM's second pass summing the tasks' losses into the first pass's total): the
        sum is started afresh after the first backward, ``loss = loss.detach()``, which keeps its
        value and gives the second backward only what was added since. Unsafe: retain_graph=True
        would have backwarded the first losses a second time."""
        name = site.tensor.value if isinstance(site.tensor, cst.Name) else None
        block = self.analysis.block_of(earlier.statement)
        if (
            name is None
            or not isinstance(earlier.tensor, cst.Name)
            or earlier.tensor.value != name
            or block is None
            or self.analysis.block_of(site.statement) is not block
        ):
            return None
        between = block.statements[block.index(earlier.statement) + 1 : block.index(site.statement)]
        adding = [
            statement
            for statement in between
            if isinstance(statement, (cst.For, cst.While))
            and any(
                _accumulates(small, name)
                for small in [*self.analysis.tree.findall(statement.body, cst.AugAssign), *self.analysis.tree.findall(statement.body, cst.Assign)]
            )
        ]
        rebound = any(name in assigned_names(statement, rebinding_only=True) for statement in between if statement not in adding)
        if not adding or rebound:
            return None
        restart = cst.parse_statement(f"{name} = {name}.detach()")
        return Fix(safe=False, insert_after=((earlier.statement, (restart,)),))

    def _recomputed(self, earlier: BackwardSite, site: BackwardSite, built: cst.CSTNode) -> Fix | None:
        """``logits, loss = model(x)``; ``loss.backward()``; ``optimizer.step()``; then code (in the
        same block, or in an ``if`` of it) that builds a second loss from ``logits`` and backwards
        it (Sophia's periodic Hessian estimate): the forward runs again where the second loss first
        reads it, at the stepped weights. Only for a forward that is one assignment of that block,
        whose inputs nothing changes up to there, with an optimizer step between. Unsafe: the
        second loss is taken at the new weights, and the names it assigns hold the new values."""
        block = self.analysis.block_of(earlier.statement)
        if block is None or not is_single_assignment(built) or self.analysis.block_of(built) is not block:
            return None
        if block.index(built) > block.index(earlier.statement):
            return None
        inner = self.analysis.block_of(site.statement)
        container = self.analysis.tree.child_holding(block.owner, site.statement) if inner is not block else site.statement
        if (
            inner is None
            or container is None
            or site.scope is not earlier.scope
            or self.analysis.loops_around(site.statement) != self.analysis.loops_around(earlier.statement)
        ):
            return None  # not under the same block, or a loop between: it runs another number of times
        if block.index(container) <= block.index(earlier.statement):
            return None
        computed = assigned_names(built)
        start = block.index(earlier.statement) + 1 if inner is block else 0
        candidates = inner.statements[start : inner.index(site.statement) + 1]
        first_read = next((statement for statement in candidates if read_names(statement) & computed), None)
        if first_read is None:
            return None
        up_to = start if inner is block else block.index(container)
        on_the_way = [*block.statements[block.index(built) + 1 : up_to], *candidates[: candidates.index(first_read)]]
        if not any(self.analysis.gradient_effects(statement) & GradientEffect.STEP for statement in on_the_way):
            return None  # (no step between: the two losses are one step's, backwarded together)
        changed = set().union(*(assigned_names(statement) for statement in on_the_way if statement is not earlier.statement))
        if (read_names(cst.ensure_type(built.body[0], cst.Assign).value) | computed) & changed:
            return None
        return Fix(safe=False, insert_before=((first_read, (built.with_changes(leading_lines=[]),)),))

    def _may_run_before(self, other: BackwardSite, site: BackwardSite, shared: frozenset[Origin]) -> bool:
        """Whether ``other`` can free the shared graph before ``site`` backwards it: it comes first,
        or a loop around both runs it again before ``site``'s next pass (a function's calls only when
        some of the graph outlives a call: each call builds what its body builds afresh). A backward
        of another function may run before, whatever the order of their definitions."""
        if other.scope is not site.scope or self.analysis.order(other.call) < self.analysis.order(site.call):
            return True
        around_other = {id(loop) for loop in self.analysis.loops_around(other.statement)}
        return any(
            not loop.is_call or any(not self.analysis.contains(loop.node, origin.statement) for origin in shared)
            for loop in self.analysis.loops_around(site.statement)
            if id(loop) in around_other
        )

    def _returned_to_the_trainer(self) -> Iterator[Violation]:
        """A trainer hook (Lightning's ``training_step`` under automatic optimization, a Hugging
        Face ``compute_loss``) returns a loss built on a graph that a backward or ``autograd.grad``
        inside it freed: the trainer's own backward of it is the second one."""
        for hook, class_name in self.analysis.trainer_hooks():
            for returned in self.analysis.tree.findall(hook.body, cst.Return):
                whole = _handed_whole(returned.value)
                freed = [
                    value
                    for name in _operands(returned.value)
                    if (value := self.analysis.value_read(name)) is not None
                    and value.graph
                    and value.freed
                    # the very loss backwarded again is GF001's, returned alone or as what the trainer
                    # takes of a tuple or dict (``return loss, outputs``)
                    and not (value.backwarded and name is whole)
                ]
                nodes = frozenset().union(*map(self.analysis.value_nodes, freed))
                freeing = [
                    site
                    for site in self.analysis.backward_sites
                    if site.scope.node is hook and site.retain_graph is False and self.analysis.graph_nodes(site) & nodes
                ]
                if not freeing:
                    continue
                shared = self.analysis.graph_nodes(freeing[-1]) & nodes
                built = min((origin.statement for origin in shared), key=self.analysis.order)
                yield self.violation(
                    returned,
                    f"`{class_name}.{hook.name.value}` returns a loss the trainer backwards, built on a graph that "
                    f"`{code_of(freeing[-1].call.func)}` at line {self.analysis.line(freeing[-1].call)} already freed, built at line "
                    f"{self.analysis.line(built)}; return the losses summed for the trainer's one backward, or keep "
                    "that graph for it (create_graph=True for a gradient penalty)",
                    self._trainer_fix(hook, returned, freeing[-1]),
                    related=(freeing[-1].call, built, *self._fits_of(class_name)),
                )

    def _trainer_fix(self, hook: cst.FunctionDef, returned: cst.Return, site: BackwardSite) -> Fix | None:
        """The hook's own fix, where its shape proves one (unsafe: the trainer may scale or clip
        what the hook returns). A gradient the returned loss is computed from (a gradient penalty)
        is taken with ``create_graph=True``, so the trainer's backward differentiates through it.
        A loss the hook backwards itself (``aux_loss.backward()``, a statement of its body before
        the ``return``, with nothing between that reads or changes gradients) is returned with
        the hook's loss instead, for the trainer's one backward: the same gradients."""
        statement = site.statement
        body = list(hook.body.body)
        if site.api == AUTOGRAD_GRAD:
            if statement not in body or sum(arg.keyword is None for arg in site.call.args) > 2:
                return None
            # (taken without create_graph, the gradient holds no graph the dataflow could follow)
            computed = set(assigned_names(statement))
            for later in body[body.index(statement) + 1 :]:
                if read_names(later) & computed:
                    computed |= assigned_names(later)
            if returned.value is None or not read_names(returned.value) & computed:
                return None
            kept = [arg for arg in site.call.args if arg.keyword is None or arg.keyword.value not in ("retain_graph", "create_graph")]
            create = cst.Arg(value=cst.Name("True"), keyword=cst.Name("create_graph"), equal=_EQUAL)
            call = site.call.with_changes(args=[*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT), create])
            return Fix(safe=False, replace=((statement, cst.ensure_type(statement.deep_replace(site.call, call), type(statement))),))
        line = self.analysis.statement_of(returned)
        handed = loss_handed_to_trainer(returned.value) if returned.value is not None else None
        if (
            site.api != TENSOR_BACKWARD
            or not site.is_whole_statement
            or site.call.args
            or handed is None
            or statement not in body
            or line not in body
            or site.tensor is None
        ):
            return None
        between = body[body.index(statement) + 1 : body.index(line)]
        if any(self.analysis.gradient_effects(s) or read_names(site.tensor) & assigned_names(s) for s in between):
            return None
        summed = cst.BinaryOperation(left=as_operand(handed), operator=cst.Add(), right=as_operand(site.tensor))
        return Fix(safe=False, remove=(statement,), replace=((line, cst.ensure_type(line.deep_replace(handed, summed), cst.SimpleStatementLine)),))

    def _fits_of(self, class_name: str) -> list[cst.Call]:
        """The ``trainer.fit(model, ...)`` calls of the file that hand the trainer an instance of
        ``class_name``: where the trainer's failing backward runs."""
        constructed = self.analysis.names.constructed
        return [
            call
            for call in self.analysis.tree.findall(self.analysis.module, cst.Call)
            if isinstance(call.func, cst.Attribute)
            and TRAINER_RUNS.get(constructed.get(self.analysis.names.key(call.func.value) or "", "")) == call.func.attr.value
            and any(constructed.get(self.analysis.names.key(arg.value) or "") == class_name for arg in call.args)
        ]


def _handed_whole(expression: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """The expression a hook's return hands the trainer as its loss (``loss`` of ``return loss,
    outputs``), as ``_operands`` follows it."""
    while expression is not None and (handed := loss_handed_to_trainer(expression)) is not expression:
        expression = handed
    return expression


def _operands(expression: cst.BaseExpression | None) -> Iterator[cst.Name]:
    """The names the loss a hook hands the trainer is computed from by arithmetic alone
    (``loss + w * penalty``): a call or a subscript in between may detach."""
    handed = loss_handed_to_trainer(expression) if expression is not None else None
    if handed is not expression:
        yield from _operands(handed)
    elif isinstance(expression, cst.Name):
        yield expression
    elif isinstance(expression, cst.BinaryOperation):
        yield from _operands(expression.left)
        yield from _operands(expression.right)
    elif isinstance(expression, cst.UnaryOperation):
        yield from _operands(expression.expression)


def _accumulates(small: cst.BaseSmallStatement, name: str) -> bool:
    """Whether ``small`` computes ``name`` from the value it replaces (``loss += part``,
    ``loss = loss + part``)."""
    if isinstance(small, cst.AugAssign):
        return target_names(small.target, bindings_only=True) == [name]
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and target_names(small.targets[0].target, bindings_only=True) == [name]
        and name in read_names(small.value)
    )
