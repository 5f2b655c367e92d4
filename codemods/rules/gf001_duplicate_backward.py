from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import (
    NO_GRADIENT_HOOKS,
    TENSOR,
    BackwardSite,
    GradientEffect,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    READS_MODELLED_CODE,
    assigned_names,
    code_of,
    expression_key,
    loss_handed_to_trainer,
    read_names,
    with_retained_graph,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class DuplicateBackward(Rule):
    """
    What it finds: The same tensor is backwarded twice, with no new value assigned to it in between.

    The repeat is often hidden: a criterion or wrapper whose method already calls
    ``loss.backward()``, a helper that backwards a loss and returns it to a loop that backwards it
    again, ``accelerator.backward(loss)`` next to ``loss.backward()``, or a LightningModule's
    ``training_step`` (automatic optimization) or a Hugging Face ``Trainer.compute_loss`` that
    backwards the loss it returns, which the trainer then backwards itself. gradfix follows these
    through function summaries of the checked file.

    Why it fails: The first ``loss.backward()`` walks the graph and frees its saved tensors, so the
    second call raises ``RuntimeError: Trying to backward through the graph a second time``. Adding
    ``retain_graph=True`` to the first call silences the error but keeps the graph alive and adds
    every gradient twice, which is never what a training step means.

    The fix: gradfix removes the repeated call (the one in the hook, for trainers; an unsafe fix
    where the hook backwards an item or attribute, ``losses["loss"]``, which is the tensor it returns
    only if the container hands back what it holds). When the first
    call is a gradient check with ``torch.autograd.grad``, which adds nothing to ``.grad``, the fix
    lets that check keep the graph (``retain_graph=True``) for the real backward.

    When gradfix only reports: When the two calls pass other arguments (a gradient, ``inputs``),
    or backward two ways (``accelerator.backward(loss)`` and ``loss.backward()``: scaled and
    plain), which one was meant is not clear, and the message says so; so it is when an optimizer steps or the gradients are zeroed
    between them (``loss.backward(); optimizer.zero_grad(); loss.backward()``: removing the second
    call would leave the step no gradient). Code between them gradfix does not read (a
    helper that may zero the gradients) makes the removal an unsafe fix. When the first call already passes ``retain_graph=True`` on purpose,
    or gradfix cannot tell what it passes (an expression, or a keyword ``Tensor.backward`` does not
    take: torch 0.3's ``retain_variables``), nothing is rewritten: the program runs, and the second
    backward is then deliberate; a first call that may keep the graph makes the finding a hint.
    Where gradfix sees no graph in the value at all (it may be no tensor: a course's own autodiff
    class, whose ``backward`` runs twice on purpose), the finding is a hint. A gradient check whose graph saved no tensor (sums, means, views and
    concatenations of leaves) frees nothing, and the backward after it runs and counts nothing
    twice: no finding. Removing the repeated call is safe only where the first call certainly freed
    a tensor its graph saved (a product, a layer with parameters, a loss function, an activation;
    and through the file's functions, on every path they return by): then the second call raises,
    and the program never meant it. A graph of repeats, flips, casts and sums saves nothing: the
    second call runs and doubles the gradient, which a lesson on accumulation means (``y =
    x.sum()`` of a leaf, backwarded cell after cell), and removing it changes what the program
    computes: a hint. So is a graph through a layer with a parameter that may not require grad
    (``model.weight.requires_grad_(False)``) where nothing else certainly saves a tensor: a linear
    layer keeps its input only for its weight's gradient, and the second call may run.
    """

    SUMMARY = "the same tensor is backwarded twice"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_CAUGHT_ERRORS)
    EXAMPLE_BEFORE = """\
model = nn.Linear(8, 2)
criterion = nn.CrossEntropyLoss()
for batch, target in loader:
    optimizer.zero_grad()
    loss = criterion(model(batch), target)
    loss.backward()
    loss.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
model = nn.Linear(8, 2)
criterion = nn.CrossEntropyLoss()
for batch, target in loader:
    optimizer.zero_grad()
    loss = criterion(model(batch), target)
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        for site in self.analysis.backward_sites:
            if site.value.backwarded:
                first = min((self.analysis.site_of(call) for call in site.value.backwarded), key=self._order)
                if first.retain_graph is True:
                    continue  # a graph kept on purpose is backwarded again on purpose
                if not first.api.accumulates and first.retain_graph is False and not site.value.freed:
                    continue  # a gradient check that freed nothing (sums and views of leaves save no tensor) counts nothing twice
                yield self._duplicate(first, site)
        yield from self._backwarded_for_the_trainer()

    def _order(self, site: BackwardSite) -> int:
        return self.analysis.order(site.call)

    def _duplicate(self, first: BackwardSite, second: BackwardSite) -> Violation:
        name = code_of(second.tensor) if second.tensor is not None else "the tensor"
        where = f"at line {self.analysis.line(first.call)}"
        if not first.tensors:  # a call of another checked file's function that backwards inside
            where = f"inside `{code_of(first.call.func)}`, called {where}"
        elif first.scope is not second.scope:
            where += f", inside `{_scope_name(first)}`"
        if not first.api.accumulates:
            detail = f"`{first.api.name}` freed its graph; keep it there (retain_graph=True), it adds nothing to .grad"
        elif first.retain_graph is None:
            detail = "the first call frees its graph unless its retain_graph, which gradfix cannot read, keeps it"
        elif self._freed_by_the_first(first, second):
            detail = "its graph was freed by the first call"
        elif self._saved_nothing(first):
            detail = "its graph saved no tensor (sums, views and joins), so this call runs and adds the gradient again"
        else:
            detail = "if it holds a graph, the first call freed it"
        # Backwarded twice, a tensor with a graph raises and a leaf adds its gradient twice; what
        # gradfix saw no graph in, and does not know for a tensor (a torch operation's result,
        # which a first backward that ran proves has a graph), may be no tensor at all: an object
        # whose own ``backward`` runs.
        unknown = (not second.value.graph or second.value.possible) and second.value.structure is not TENSOR
        unseen = f"gradfix sees no graph in `{name}`: it may be no tensor, and its `backward` not autograd's" if unknown else ""
        if first.retain_graph is None:  # kept, it is backwarded again on purpose, as with retain_graph=True
            unseen = unseen or "the first call may keep its graph"
        elif not first.runs_as_walked:
            unseen = unseen or "the first call runs only where the expression around it lets it (a comprehension, `flag and ...`)"
        elif first.api.accumulates and self._saved_nothing(first):
            # A lesson on accumulation does that on purpose (``y = x.sum()`` of a leaf, backwarded
            # cell after cell): it raises nothing, and only the program knows what it meant.
            unseen = unseen or "the program may mean the gradient twice"
        elif first.api.accumulates and self._frozen_layer_may_save_nothing(first):
            unseen = unseen or (
                "a layer of its graph has a parameter that may not require grad, and may then save no tensor: "
                "this call would run and add the gradient again, which the program may mean"
            )
        between = self.analysis.run_between(first, second)
        unseen_between = "gradfix cannot list what runs between the two calls" if between is None else ""
        unread = next(filter(None, (self.analysis.call_that_may_read_gradients(s, changing_only=True) for s in between or ())), None)
        if unread is not None:
            unseen_between = f"`{code_of(unread)}` runs between the two calls, and gradfix does not see whether it zeroes the gradients"
        fix = self._fix(first, second, seen_between=not unseen_between)
        if first.api.accumulates and between is not None and any(self.analysis.gradient_effects(s) & GradientEffect.UPDATING for s in between):
            # (the step that follows the second call does not see the first call's gradients: which is meant is not clear)
            detail += " (not rewritten: an optimizer steps or the gradients are zeroed between the two calls)"
            fix = None
        elif fix is not None and fix.remove and not fix.safe and unseen_between:
            detail += f" (unsafe fix: {unseen_between})"
        elif fix is None and first.api.accumulates and first.retain_graph is not None and first.api != second.api:
            detail += f" (not rewritten: backwarded two ways, by `{first.api.name}` and by `{second.api.name}`: which one is meant is not clear)"
        return self.violation(
            second.call,
            f"`{name}` is backwarded again (first {where}); {detail}",
            fix,
            related=(first.call,),
            sites=(first, second),
            guess=unseen,
        )

    def _fix(self, first: BackwardSite, second: BackwardSite, seen_between: bool) -> Fix | None:
        if first.retain_graph is None:
            return None  # gradfix cannot tell whether the first call keeps the graph
        if not first.api.accumulates:
            # A gradient check (autograd.grad) before the real backward: let it keep the graph.
            if not second.api.accumulates or not _is_simple_statement(first.statement):
                return None
            kept = cst.ensure_type(first.statement.deep_replace(first.call, with_retained_graph(first.api, first.call)), cst.SimpleStatementLine)
            return Fix(safe=True, replace=((first.statement, kept),))
        (called, passed), (called_again, passed_again) = _passed(first), _passed(second)
        if first.api != second.api or called == called_again and passed != passed_again:
            return None  # backwarded two ways (scaled and plain, another gradient): which one was meant is not clear
        if not second.is_whole_statement or self.analysis.block_of(second.statement) is None:
            return None
        # Unless the value is proved to hold a graph the first call freed, the second call may run
        # (a leaf, a loader's item, a graph of repeats and casts that saved nothing) and add its
        # gradient again: dropping it changes the maths. So may code between them that gradfix
        # does not see (a helper that zeroes the gradients).
        return Fix(safe=self._freed_by_the_first(first, second) and seen_between, remove=(second.statement,))

    def _freed_by_the_first(self, first: BackwardSite, second: BackwardSite) -> bool:
        """Whether the second backward certainly walks a tensor the first one freed: it backwards
        the very tensor again, so walks all the first walked, and a node there certainly saved
        one (``FileAnalysis.saved_for_certain``): the second raises."""
        seen = second.value.graph and not second.value.possible  # (a graph only possible is none it proved)
        return bool(seen and second.value.freed) and self.analysis.saved_for_certain(self.analysis.graph_nodes(first))

    def _saved_nothing(self, first: BackwardSite) -> bool:
        """Whether every operation of the graph the first call walked is seen and saved no tensor:
        the second call then raises nothing."""
        return first.retain_graph is False and self.analysis.saved_nothing_for_certain(self.analysis.graph_nodes(first))

    def _frozen_layer_may_save_nothing(self, first: BackwardSite) -> bool:
        """Whether no operation of the graph the first call walked certainly saved a tensor, and one
        of them is a call of a layer with a parameter that may not require grad (``partly_frozen``:
        ``model.weight.requires_grad_(False)``), which then may save none (a linear layer saves its
        input only for its weight's gradient): the second call may run."""
        names, nodes = self.analysis.names, self.analysis.graph_nodes(first)
        frozen = any(type(origin.node) is cst.Call and names.key(origin.node.func) in names.partly_frozen for origin in nodes)
        return first.retain_graph is False and frozen and not self.analysis.saved_for_certain(nodes)

    def _backwarded_for_the_trainer(self) -> Iterator[Violation]:
        """A trainer (Lightning under automatic optimization, Hugging Face's ``Trainer``) backwards
        what a hook returns: a backward of that tensor inside the hook is a second one."""
        for hook, class_name in self.analysis.trainer_hooks():
            for site in self._returned_after_backward(hook):
                fix = None
                if site.retain_graph is False and site.is_whole_statement:
                    # (a name read twice is one tensor; an item or attribute is one only if reading it
                    # is plain: a container gradfix did not build may hand back a new one each time)
                    fix = Fix(safe=type(site.tensor) is cst.Name, remove=(site.statement,))
                yield self.violation(
                    site.call,
                    f"`{class_name}.{hook.name.value}` returns a loss it already backwarded, and the trainer "
                    "backwards what it returns; drop this backward",
                    fix,
                    sites=(site,),
                )

    def _returned_after_backward(self, hook: cst.FunctionDef) -> Iterator[BackwardSite]:
        """Backwards in ``hook``'s own body of a tensor that every ``return`` hands back unchanged
        (``return loss``, ``return {"loss": loss}``, ``return (loss, outputs) if … else loss``)."""
        returns = self.analysis.tree.findall(hook.body, cst.Return)
        returned = [_returned_tensors(r.value) for r in returns]
        if not returns or any(not keys for keys in returned):
            return
        body = list(hook.body.body)
        for site in self.analysis.backward_sites:
            tensor = site.tensor
            root = _root_name(tensor) if tensor is not None else None
            if site.scope.node is not hook or tensor is None or root is None or site.statement not in body:
                continue
            later = body[body.index(site.statement) + 1 :]
            # An item or attribute (``train_loss["loss"]``) is the same tensor where nothing after
            # the backward names its container but a return: a call could change what it holds.
            untouched = type(tensor) is cst.Name or not any(root in read_names(s) for s in later if not _returns_only(s))
            if all(expression_key(tensor) in keys for keys in returned) and untouched and not any(root in assigned_names(s) for s in later):
                yield site


def _scope_name(site: BackwardSite) -> str:
    node = site.scope.node
    return node.name.value if isinstance(node, cst.FunctionDef) else "the module body"


def _returned_tensors(value: cst.BaseExpression | None) -> set[str]:
    """The expressions (by ``expression_key``) a returned expression hands to the trainer as its
    loss: a name, or an item or attribute of one (``train_loss["loss"]``)."""
    if isinstance(value, cst.IfExp):
        return _returned_tensors(value.body) & _returned_tensors(value.orelse) or (_returned_tensors(value.body) | _returned_tensors(value.orelse))
    handed = loss_handed_to_trainer(value) if value is not None else None
    if handed is not value:
        return _returned_tensors(handed)
    return {expression_key(value)} if value is not None and _root_name(value) is not None else set()


def _root_name(value: cst.BaseExpression) -> str | None:
    """``x`` of ``x``, ``x.loss`` or ``x["loss"]`` (items and attributes of a name, any depth)."""
    while isinstance(value, (cst.Attribute, cst.Subscript)):
        value = value.value
    return value.value if isinstance(value, cst.Name) else None


def _returns_only(statement: cst.CSTNode) -> bool:
    return type(statement) is cst.SimpleStatementLine and all(type(small) is cst.Return for small in statement.body)


def _is_simple_statement(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1


def _passed(site: BackwardSite) -> tuple[str, list[tuple[str | None, str]]]:
    """What is called, and what it is passed but whether it keeps or differentiates the graph
    (``torch.tensor(0.5)`` as the gradient, ``inputs=``); a call of a function that backwards
    for its caller passes its own arguments, and is told apart by its name."""
    keywords = [(arg.keyword.value if arg.keyword is not None else None, code_of(arg.value)) for arg in site.call.args]
    called = code_of(site.call.func).rpartition(".")[2]
    return called, [(keyword, code) for keyword, code in keywords if keyword not in ("retain_graph", "create_graph")]
