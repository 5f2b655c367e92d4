from __future__ import annotations

from functools import cached_property
from typing import Iterator

import libcst as cst

from ..analysis import TENSOR, Loop, Origin, appended, code_of, dotted_name, expand, is_name, read_names
from ..edits import Fix
from ..rule import FixKind, Rule, Violation
from ..symptoms import GraphsKeptAlive

_TENSOR_USES = {"stack", "cat", "tensor", "mean", "sum", "item", "detach", "cpu", "numpy", "tolist", "backward"}


class GraphKeptForLogging(Rule):
    """
    A loss kept for logging keeps its whole graph alive, step after step.

    ``total_loss += loss``, ``losses.append(loss)`` or ``history["loss"] = loss`` inside the training
    loop store the loss *tensor*, and with it the graph that produced it: every activation the
    forward pass saved. Nothing fails; memory grows with every step until the process runs out of
    it (the classic "CUDA out of memory after a few hundred iterations").

    The fix stores the number instead: ``total_loss += loss.item()``. When the kept values are later
    used as tensors (``torch.stack(losses)``, ``total_loss.item()``), it stores ``loss.detach()``
    instead. What is logged stays the same; the graphs are freed at each step.

    gradfix rewrites only a loss that the loop itself backwards (so it is a scalar that trains), in a
    loop whose iterations are training steps (an optimizer steps in it), and a store that outlives
    the iteration (the accumulator is made before the loop and not reset in it);
    an accumulator that is backwarded later (gradient accumulation) is not logging and is left alone.
    """

    CODE = "GF007"
    NAME = "graph_kept_for_logging"
    SUMMARY = "a loss kept for logging keeps every step's graph alive"
    FIX = FixKind.SAFE
    SYMPTOM = GraphsKeptAlive()
    EXAMPLE_BEFORE = """\
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
total_loss = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss.item()
print(total_loss / len(loader))
"""

    def violations(self) -> Iterator[Violation]:
        for loop in self.analysis.loops:
            if not self._steps_training(loop):
                continue  # its iterations are not training steps: what it keeps dies with the step
            trained = self._trained_losses(loop)
            for statement in self.analysis.tree.findall(loop.node.body, cst.SimpleStatementLine):
                if self.analysis.loops_around(statement)[:1] != (loop,) or len(statement.body) != 1:
                    continue
                kept = _kept_value(statement.body[0])
                if kept is None:
                    continue
                store, value = kept
                if not (value.value in trained or self._scalar_with_graph(loop, value)):
                    continue
                if not self._outlives_iteration(loop, store):
                    continue
                if self._backwarded_later(loop, store):
                    continue
                # A tensor accumulator stays a tensor after += of a number: .item() keeps its uses working.
                tensor_sum = not isinstance(statement.body[0], cst.Expr) and loop.entry[store].structure is TENSOR if store in loop.entry else False
                as_tensor = self._used_as_tensor(loop, store, statement) and not tensor_sum
                method = "detach" if as_tensor else "item"
                yield self.violation(
                    value,
                    f"`{code_of(statement.body[0])}` keeps the graph of every step alive in `{store}`; "
                    f"store `{value.value}.{method}()`",
                    Fix(safe=True, replace=((statement, statement.deep_replace(value, _called(value, method))),)),
                )

    def _steps_training(self, loop: Loop) -> bool:
        """A loop whose iterations are training steps: an optimizer steps in it, or it is a trainer
        hook (``training_step``) that the trainer calls once a step. An epoch loop that calls a
        ``train()`` function is not: what it keeps once an epoch is whatever ``train`` returns."""
        if loop.is_call:
            return any(hook is loop.node for hook, _ in self.analysis.trainer_hooks())
        effects = self.analysis.gradient_effects(loop.node.body)
        return {"step", "backward"} <= effects  # (a scheduler's step alone is no training step)

    def _scalar_with_graph(self, loop: Loop, value: cst.Name) -> bool:
        """A graph-carrying loss or metric: assigned in the loop from a loss function, a criterion
        module or a reduction (``.mean()``, ``.sum()``)."""
        held = self.analysis.value_read(value)
        if held is None or not held.graph:
            return False
        if _scalar_name(value.value):
            return True
        for assign in self.analysis.tree.findall(loop.node.body, cst.Assign):
            if any(dotted_name(t.target) == value.value for t in assign.targets):
                return _looks_scalar(assign.value, self.analysis)
        return False

    def _trained_losses(self, loop: Loop) -> set[str]:
        """Names of the tensors this loop backwards in its own body."""
        return self._trained_losses_by_loop.get(loop, set())

    @cached_property
    def _trained_losses_by_loop(self) -> dict[Loop, set[str]]:
        losses: dict[Loop, set[str]] = {}
        for site in self.analysis.backward_sites:
            if site.loops and isinstance(site.tensor, cst.Name):
                losses.setdefault(site.loops[0], set()).add(site.tensor.value)
        return losses

    def _outlives_iteration(self, loop: Loop, store: str) -> bool:
        """Made before the loop (or kept on the module across calls), and not made anew inside it."""
        if store not in loop.entry and not (loop.is_call and store.startswith("self.")):
            return False
        for assign in self.analysis.tree.findall(loop.node.body, cst.Assign):
            targets = {dotted_name(t.target) for t in assign.targets}
            if store in targets and store not in read_names(assign.value):
                return False
        return True

    def _backwarded_later(self, loop: Loop, store: str) -> bool:
        """Whether any backward's graph is built from the store (gradient accumulation)."""
        backwarded_names, graph_statements = self._names_backwards_read
        return store in backwarded_names or any(
            not self.analysis.contains(loop.node, statement) for statement in graph_statements.get(store, ())
        )

    @cached_property
    def _names_backwards_read(self) -> tuple[set[str], dict[str, list[cst.CSTNode]]]:
        """The names the backwarded tensors read, and by name the statements of backwarded graphs
        that read it: gathered once, not for each store."""
        backwarded_names: set[str] = set()
        graph_statements: dict[str, list[cst.CSTNode]] = {}
        seen: set[cst.CSTNode] = set()
        for site in self.analysis.backward_sites:
            if site.tensor is not None:
                backwarded_names |= read_names(site.tensor)
            for origin in expand(site.value.origins, None):
                if isinstance(origin, Origin) and origin.statement not in seen:
                    seen.add(origin.statement)
                    for name in read_names(origin.statement):
                        graph_statements.setdefault(name, []).append(origin.statement)
        return backwarded_names, graph_statements

    def _used_as_tensor(self, loop: Loop, store: str, keeping: cst.CSTNode) -> bool:
        """Whether code elsewhere in the scope treats the kept values as tensors."""
        scope = loop.scope.node
        for call in self.analysis.tree.findall(scope, cst.Call):
            if self.analysis.contains(keeping, call):
                continue
            func = call.func
            if isinstance(func, cst.Attribute) and dotted_name(func.value) == store and func.attr.value in _TENSOR_USES:
                return True
            if self.analysis.names.is_torch(func) and any(store in read_names(arg.value) for arg in call.args):
                return True
        return False


def _kept_value(small: cst.BaseSmallStatement) -> tuple[str, cst.Name] | None:
    """``(store, value)`` for ``store += value``, ``store = store + value``, ``store.append(value)``
    and ``store[key] = value``."""
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and isinstance(small.value, cst.Name):
        name = dotted_name(small.target)
        return (name, small.value) if name else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target, value = small.targets[0].target, small.value
        name = dotted_name(target)
        if (
            name
            and isinstance(value, cst.BinaryOperation)
            and isinstance(value.operator, cst.Add)
            and dotted_name(value.left) == name
            and isinstance(value.right, cst.Name)
        ):
            return name, value.right
        if isinstance(target, cst.Subscript) and isinstance(value, cst.Name) and dotted_name(target.value):
            return dotted_name(target.value), value
    call = appended(small)
    if call is not None and is_name(call.args[0].value):
        name = dotted_name(call.func.value)
        return (name, call.args[0].value) if name else None
    return None


_SCALAR_NAMES = ("loss", "mse", "mae", "error", "criterion", "distance", "penalty", "entropy", "nll")


def _scalar_name(name: str) -> bool:
    return any(word in name.lower() for word in _SCALAR_NAMES)
_REDUCTIONS = {"mean", "sum", "norm", "max", "min"}


def _looks_scalar(expression: cst.BaseExpression, analysis) -> bool:
    if isinstance(expression, cst.BinaryOperation):
        return _looks_scalar(expression.left, analysis) or _looks_scalar(expression.right, analysis)
    if not isinstance(expression, cst.Call):
        return False
    func = expression.func
    if isinstance(func, cst.Attribute) and func.attr.value in _REDUCTIONS and not expression.args:
        return True
    module = analysis.names.module(func, None)
    return _scalar_name((dotted_name(func) or "").rsplit(".", 1)[-1]) or (
        module is not None and module.class_name.endswith("Loss")
    )


def _called(value: cst.Name, method: str) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=value, attr=cst.Name(method)))
