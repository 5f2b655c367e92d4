"""Whether an operation saves tensors for its backward, answered twice, side by side: may
(``saves_tensors``: a backward walking the operation again may raise) and must
(``saves_for_certain``: a backward of what it computed certainly frees what it saved, so walking it
again raises). The freed-graph facts and the rules read both; a row of ``torch_api``'s tables, or
an operator below, is what is known of each operation.

A part of ``DataflowAnalysis`` (``dataflow``), reading the walk's facts: the calls it read through
a summary (``callees``), the functions held (``called_functions``) and what each function returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from ..summaries import ExportedSummary
from ..torch_api import SAVING_FOR_CERTAIN, SAVING_FOR_CERTAIN_MODULES, SAVING_NOTHING_FUNCTIONS, SAVING_NOTHING_METHODS
from .assignments import assigned_names

if TYPE_CHECKING:
    from .torch_facts import TorchNames
    from .tree import SyntaxTree
    from .values import Origin, Value


class SavedTensors:
    """The saving half of ``DataflowAnalysis``: what each operation saves for its backward."""

    names: TorchNames
    _tree: SyntaxTree
    _module: cst.Module
    called_functions: dict[cst.Call, frozenset[str]]
    callees: dict[cst.Call, object]
    summarized_functions: dict[object, cst.FunctionDef]
    returns: dict[cst.FunctionDef, tuple[Value, ...]]
    graph_nodes: Callable[[Value], frozenset[Origin]]  # (``DataflowAnalysis.graph_nodes``)

    def saves_tensors(self, node: cst.CSTNode) -> bool:
        """Whether the operation at ``node`` may save tensors for its backward: anything but an
        addition, a subtraction, a negation, an index or slice, and the sums, means, views and
        joins of ``SAVING_NOTHING_METHODS`` and ``SAVING_NOTHING_FUNCTIONS``."""
        if type(node) is cst.BinaryOperation:
            return type(node.operator) is not cst.Add and type(node.operator) is not cst.Subtract
        if type(node) is cst.AugAssign:
            return type(node.operator) is not cst.AddAssign and type(node.operator) is not cst.SubtractAssign
        if type(node) is cst.UnaryOperation:
            return type(node.operator) is not cst.Minus and type(node.operator) is not cst.Plus
        if type(node) is cst.Subscript:
            return False
        if type(node) is cst.Call:
            if node in self.called_functions:  # (a function held: any one of them may save)
                return not self.called_functions[node] <= SAVING_NOTHING_FUNCTIONS
            if (self.names.qualify(node.func) or "") in SAVING_NOTHING_FUNCTIONS:
                return False
            return not (type(node.func) is cst.Attribute and node.func.attr.value in SAVING_NOTHING_METHODS and not self.names.is_torch(node.func))
        return True

    def saves_for_certain(self, node: cst.CSTNode, class_name: str | None = None, reading: frozenset[str] = frozenset()) -> bool:
        """Whether the operation at ``node`` certainly saves a tensor for its backward: a product,
        a quotient or a power (each saves an operand or its result), a call of
        ``SAVING_FOR_CERTAIN`` (torch's function or a tensor's method) or of a module of
        ``SAVING_FOR_CERTAIN_MODULES``, or a call of a torch.nn layer that holds parameters."""
        if isinstance(node, cst.BinaryOperation):
            return isinstance(node.operator, _SAVING_OPERATORS)
        if isinstance(node, cst.AugAssign):
            return isinstance(node.operator, _SAVING_ASSIGNMENTS)
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        if node in self.called_functions:  # (a function held: every one of them must save)
            return all(function.rsplit(".", 1)[1] in SAVING_FOR_CERTAIN for function in self.called_functions[node])
        qualified = self.names.qualify(func) or ""
        if qualified.startswith("torch.") and qualified.rsplit(".", 1)[1] in SAVING_FOR_CERTAIN:
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in SAVING_FOR_CERTAIN and not qualified.startswith("torch."):
            return True
        callee = self.callees.get(node)
        if isinstance(callee, ExportedSummary):  # a function of another checked file
            return callee.returns_saved
        if callee is not None:
            return self.returns_saved(callee, reading)
        module = self.names.module(func, class_name)
        if module is not None and module.project is not None:  # another module's class: what its analysis proved
            return module.trainable and module.project.returns_saved
        if module is not None and not module.is_local and module.class_name in SAVING_FOR_CERTAIN_MODULES:
            return True
        if module is None or not module.trainable or self.names.key(func) in self.names.partly_frozen:
            return False  # (a layer of which a parameter may not require grad may save nothing for its backward)
        if module.is_local:  # the file's own class: what its forward certainly saves
            return module.class_name not in reading and any(
                self.saves_for_certain(node, module.class_name, reading | {module.class_name})
                for method in self._methods(module.class_name, "forward")
                for node in [*self._tree.findall(method.body, cst.Call), *self._tree.findall(method.body, cst.BinaryOperation)]
            )
        return bool(module.class_name)

    def returns_saved(self, callee: object, reading: frozenset[str] = frozenset()) -> bool:
        """Whether every graph the function ``callee`` returns, on each path, holds an operation
        that certainly saved a tensor: a backward of what a call of it returns then frees one."""
        function, marker = self.summarized_functions.get(callee), f"{callee}()"
        if function is None or marker in reading:
            return False
        class_name, reading = (callee[0] if isinstance(callee, tuple) else None), reading | {marker}
        # (a graph only possible, out of code gradfix did not read, is no graph it proved)
        graphs = [value for value in self.returns.get(function, ()) if value.graph and not value.possible]
        if graphs:
            return all(
                any(self.saves_for_certain(origin.node, class_name, reading) for origin in self.graph_nodes(value) if not origin.possible)
                for value in graphs
            )
        return self._returned_expressions_save(function, class_name, reading)

    def _returned_expressions_save(self, function: cst.FunctionDef, class_name: str | None, reading: frozenset[str]) -> bool:
        """Where the walk saw no graph in what ``function`` returns (its parameters hold none there:
        ``train_step(model, batch)``), whether each ``return`` hands back what an operation that certainly
        saves computed from everything the returned value reads (``return model(batch).pow(2).mean()``, or a
        name only plain assignments bind so): whatever graph a caller's arguments bring flows through that
        operation, and a backward of the result frees what it saved."""
        tree = self._tree
        if any(tree.findall(function.body, kind) for kind in (cst.FunctionDef, cst.Lambda)):
            return False  # (a nested function's returns are not this one's)
        expressions: list[cst.BaseExpression] = []
        for statement in tree.findall(function.body, cst.Return):
            value = statement.value
            if value is None:
                return False
            assigned = self._plainly_bound(function, value.value) if type(value) is cst.Name else [value]
            if not assigned:
                return False
            expressions += assigned
        return bool(expressions) and all(self._saves_all_it_reads(expression, class_name, reading) for expression in expressions)

    def _plainly_bound(self, function: cst.FunctionDef, name: str) -> list[cst.BaseExpression]:
        """What the assignments of ``function`` bind ``name`` to, where only assignments of that
        one name bind it (not ``+=``, an unpacking, a loop's or a ``with``'s target, a parameter)."""
        tree, plain = self._tree, []
        for assignment in tree.findall(function.body, cst.Assign):
            if name not in assigned_names(assignment, tree=tree):
                continue
            if len(assignment.targets) != 1 or type(assignment.targets[0].target) is not cst.Name:
                return []
            plain.append(assignment.value)
        others = [*tree.findall(function.body, cst.AugAssign), *tree.findall(function.body, cst.For), *tree.findall(function.body, cst.With)]
        others += [*tree.findall(function.body, cst.NamedExpr), *tree.findall(function.body, cst.AnnAssign)]
        if any(name in assigned_names(other, tree=tree) for other in others) or name in {p.name.value for p in function.params.params}:
            return []
        return plain

    def _saves_all_it_reads(self, expression: cst.BaseExpression, class_name: str | None, reading: frozenset[str]) -> bool:
        """Whether an operation of ``expression`` certainly saves a tensor and reads every name the
        expression reads, so that any graph in it passes through that operation."""
        names = self._names_read(expression)
        operations = [*self._tree.findall(expression, cst.Call), *self._tree.findall(expression, cst.BinaryOperation)]
        return any(self.saves_for_certain(operation, class_name, reading) and self._names_read(operation) == names for operation in operations)

    def _names_read(self, node: cst.CSTNode) -> set[int]:
        """The ``Name`` nodes ``node`` reads (not an attribute's or a keyword's name), by identity."""
        tree = self._tree
        spelled = {id(a.attr) for a in tree.findall(node, cst.Attribute)} | {id(a.keyword) for a in tree.findall(node, cst.Arg) if a.keyword}
        return {id(name) for name in tree.findall(node, cst.Name) if id(name) not in spelled}

    def _methods(self, class_name: str, name: str) -> list[cst.FunctionDef]:
        classes = self._tree.findall(self._module, cst.ClassDef, lambda c: c.name.value == class_name)
        return [s for c in classes for s in c.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name]


# Operators whose backward needs an operand or the result: ``a * b`` saves ``b`` for ``a``'s
# gradient (even a number: ``w * 2`` raises when walked again).
_SAVING_OPERATORS = (cst.Multiply, cst.Divide, cst.Power, cst.MatrixMultiply)
_SAVING_ASSIGNMENTS = (cst.MultiplyAssign, cst.DivideAssign, cst.PowerAssign, cst.MatrixMultiplyAssign)
