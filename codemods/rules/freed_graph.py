from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import code_of, dotted_name, loss_handed_to_trainer
from ..frameworks import TRAINER_RUNS
from ..rule import Rule, Violation


class FreedGraph(Rule):
    """
    A backward walks a graph that an earlier backward already freed.

    A backward that does not keep its graph (no ``retain_graph=True``) frees the tensors each node
    of that graph saved for it. Any later backward that reaches one of those nodes raises
    ``RuntimeError: Trying to backward through the graph a second time``: a second loss built on
    the same forward, a value computed once and used by every step, state carried from the
    previous iteration, a loss a helper or framework already backwarded. A trainer hook
    (Lightning's ``training_step`` under automatic optimization) that returns a loss built on a
    graph a backward or ``autograd.grad`` inside it freed fails the same way at the trainer's own
    backward, which gradfix places at the ``return``.

    gradfix says this when its analysis proves that what a backward walks was built from a value
    an earlier backward freed, on some path through the code, and no other rule explains the same
    backward with its shape and its fix. It names the backward that freed the graph and the line
    that built it. The fix depends on what the program means: backward the losses together once,
    compute the value again after the first backward (inside the loop), or detach what must not
    train. ``retain_graph=True`` only hides it. gradfix does not rewrite this on its own; run
    ``gradfix diagnose --fix`` on the script to try the candidate fixes.
    """

    CODE = "GF010"
    NAME = "freed_graph"
    SUMMARY = "a backward walks a graph an earlier backward freed"
    FIX = None
    DEFERS = True
    EXAMPLE_BEFORE = """\
encoder = nn.Linear(4, 8)
features = encoder(torch.randn(2, 4))
if check_features:
    features.sum().backward()
features.pow(2).mean().backward()
"""
    EXAMPLE_AFTER = EXAMPLE_BEFORE

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
            ]
            if freeing and all(self.analysis.exclusive(other.statement, site.statement) for other in freeing):
                continue  # no run reaches both
            earlier = [other for other in freeing if self.analysis.order(other.call) < self.analysis.order(site.call)]
            shared = set().union(*(self.analysis.graph_nodes(other) & nodes for other in freeing)) if freeing else set()
            built = min((origin.statement for origin in shared), key=self.analysis.order, default=None)
            inside = self.analysis.calls_freeing(site)
            if earlier:
                by = f"the backward at line {self.analysis.line(earlier[-1].call)}"
            elif inside:
                by = f"a backward inside `{code_of(inside[-1].func)}(...)`, called at line {self.analysis.line(inside[-1])},"
                built = built or self.analysis.statement_of(inside[-1])
            else:
                by = "an earlier backward (a previous iteration's, or one gradfix does not place)"
            where = f", built at line {self.analysis.line(built)}" if built is not None else ""
            yield self.violation(
                site.call,
                f"`{code_of(site.tensor if site.tensor is not None else site.call)}` is backwarded through a graph "
                f"that {by} already freed{where}; backward the losses together once, compute the value again "
                "after that backward, or detach what must not train (retain_graph=True only hides it)",
                related=tuple(node for node in (*(other.call for other in earlier[-1:]), built) if node is not None),
                sites=(site,),
            )

    def _returned_to_the_trainer(self) -> Iterator[Violation]:
        """A trainer hook (Lightning's ``training_step`` under automatic optimization, a Hugging
        Face ``compute_loss``) returns a loss built on a graph that a backward or ``autograd.grad``
        inside it freed: the trainer's own backward of it is the second one."""
        for hook, class_name in self.analysis.trainer_hooks():
            for returned in self.analysis.tree.findall(hook.body, cst.Return):
                freed = [
                    value
                    for name in _operands(returned.value)
                    if (value := self.analysis.value_read(name)) is not None
                    and value.graph
                    and value.freed
                    and not (value.backwarded and name is returned.value)  # the very loss backwarded again is GF001's
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
                    related=(freeing[-1].call, built, *self._fits_of(class_name)),
                )

    def _fits_of(self, class_name: str) -> list[cst.Call]:
        """The ``trainer.fit(model, ...)`` calls of the file that hand the trainer an instance of
        ``class_name``: where the trainer's failing backward runs."""
        constructed = self.analysis.names.constructed
        return [
            call
            for call in self.analysis.tree.findall(self.analysis.module, cst.Call)
            if isinstance(call.func, cst.Attribute)
            and TRAINER_RUNS.get(constructed.get(dotted_name(call.func.value) or "", "")) == call.func.attr.value
            and any(constructed.get(dotted_name(arg.value) or "") == class_name for arg in call.args)
        ]


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
