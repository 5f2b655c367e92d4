"""What code may do to the gradients of parameters where gradfix reads it only in part: whether a
statement may clear (or overwrite) them, *may*: what gradfix does not understand, yes.

A statement clears gradients by what ``optimizers.gradient_effects`` reads (a ``zero_grad()``, an
optimizer's update), by naming a ``.grad`` (``p.grad = None`` is not told from a read), or through
a call gradfix does not read that can reach a parameter: one handed ``self``, a module, an
optimizer, a module's parameters or a name the file binds from any of these. A call handed only
data (``next(batches)``, ``meter.update(loss.item())``) cannot reach a parameter but through
another module's globals, which gradfix does not follow.

``GradientReach`` reads the file's ``FileAnalysis``, which builds it: it names it, and does not
import it (as ``ClosedWorld``).
"""

from __future__ import annotations

import weakref
from functools import cached_property
from typing import Any, Collection

import libcst as cst

from ..frameworks import GradientEffect
from ..torch_api import PARAMETER_METHODS
from .assignments import read_names, target_names
from .contexts import is_listed_context
from .syntax import dotted_name, is_grad
from .tree import SyntaxTree

_CONTAINER_BUILDERS = frozenset({"dict", "list", "tuple", "set", "sorted"})
_DISPLAYS = (cst.Dict, cst.List, cst.Tuple, cst.Set, cst.DictComp, cst.ListComp, cst.SetComp)
Bindings = list[tuple[set[str], "cst.BaseExpression | None"]]


class GradientReach:
    """Whether a statement of the file may clear the gradients of parameters (``may_clear``)."""

    def __init__(self, analysis: Any) -> None:  # the file's FileAnalysis
        # Weakly: the analysis keeps this object (as ``ClosedWorld``).
        self.analysis = weakref.proxy(analysis)
        self._reading: list[cst.FunctionDef] = []  # the file's own methods being read, on the way here

    def may_clear(self, node: cst.CSTNode) -> bool:
        """Whether running ``node`` may clear (or overwrite) the gradients of parameters: it zeroes
        them or updates parameters (``GradientEffect.UPDATING``, the file's own methods read one
        level), names a ``.grad`` other than as ``torch.autograd.grad``, or calls code gradfix does
        not read that may reach a parameter (``_may_reach_parameters``)."""
        analysis = self.analysis
        if analysis.gradient_effects(node) & GradientEffect.UPDATING:
            return True
        functions = {id(call.func) for call in analysis.tree.findall(node, cst.Call) if analysis.names.is_torch(call.func)}
        if any(id(attribute) not in functions for attribute in analysis.tree.findall(node, cst.Attribute, is_grad)):
            return True
        return any(self._may_reach_parameters(call) for call in analysis._calls_not_read(node))

    def _may_reach_parameters(self, call: cst.Call) -> bool:
        """Whether the call ``call``, into code gradfix does not read, may reach a parameter's
        gradient through what it is handed: its receiver or an argument leads to parameters
        (``_leads_to_parameters``). A known module's method that changes no parameter does not; a
        method of the file's own class does what its body may do; a method of a dict or list the
        function builds itself sees only its arguments (``params.values()``)."""
        analysis = self.analysis
        if analysis._keeps_parameters(call) or is_listed_context(analysis.names, call):
            return False
        methods = [method for method in analysis._own_methods_called(call) if method not in self._reading]
        if methods:
            self._reading.extend(methods)
            try:
                return any(self.may_clear(method.body) for method in methods)
            finally:
                del self._reading[-len(methods) :]
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if isinstance(receiver, cst.Name) and self._plain_container(receiver):
            return any(self._leads_to_parameters(argument) for argument in call.args)
        handed = [*call.args] if isinstance(call.func, cst.Name) else [call.func, *call.args]
        return any(self._leads_to_parameters(part) for part in handed)

    def _leads_to_parameters(self, node: cst.CSTNode, held: Collection[str] | None = None) -> bool:
        """Whether an expression (or argument) names something that is, holds or lists parameters
        or an optimizer: ``self``, a module (not one called: that hands back its output), an
        optimizer, a ``.parameters()`` or ``.grad``, or a name in ``held`` (the file's names bound
        from these, ``_names_holding_parameters``, unless given)."""
        analysis = self.analysis
        held = self._names_holding_parameters if held is None else held
        if any(name == "self" or name in held for name in read_names(node, analysis.tree)):
            return True
        called = {id(call.func) for call in analysis.tree.findall(node, cst.Call)}
        for expression in (*analysis.tree.findall(node, cst.Attribute), *analysis.tree.findall(node, cst.Name)):
            if id(expression) in called:
                continue
            if (
                dotted_name(expression) in analysis.names.optimizers
                or analysis.names.module(expression, analysis.class_name_of(expression)) is not None
            ):
                return True
        return any(
            isinstance(call.func, cst.Attribute) and (call.func.attr.value in PARAMETER_METHODS or is_grad(call.func))
            for call in analysis.tree.findall(node, cst.Call)
        )

    @cached_property
    def _names_holding_parameters(self) -> frozenset[str]:
        """The names the file binds (anywhere, whatever the scope: a may-fact) from an expression
        that leads to parameters, or from another such name (``params = list(model.parameters())``,
        ``trainer = Trainer(model, optimizer)``)."""
        held: set[str] = set()
        changed = True
        while changed:
            changed = False
            for names, value in self._bindings:
                if value is not None and not names <= held and self._leads_to_parameters(value, held):
                    held |= names
                    changed = True
        return frozenset(held)

    @cached_property
    def _bindings(self) -> Bindings:
        return bindings_in(self.analysis.tree, self.analysis.module)

    def _plain_container(self, name: cst.Name) -> bool:
        """Whether every binding of ``name`` in its function (or module) makes it a dict, list,
        tuple or set the program builds itself (a display, a comprehension, or a call of the
        builtin ``dict``, ``list``, ``tuple``, ``set`` or ``sorted`` the file does not rebind):
        its methods are the container's, which change no gradient. A name the function does not
        bind (a global, a closure's) is not known."""
        analysis = self.analysis
        scope = analysis.tree.scope_of(name)
        if scope is None:
            return False
        rebound = {n for names, _ in self._bindings for n in names} | {f.name.value for f in analysis._functions}
        builders = _CONTAINER_BUILDERS - rebound
        values = [(names, value) for names, value in bindings_in(analysis.tree, scope) if name.value in names]
        return bool(values) and all(
            names == {name.value}
            and (isinstance(value, _DISPLAYS) or isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in builders)
            for names, value in values
        )


def bindings_in(tree: SyntaxTree, root: cst.CSTNode) -> Bindings:
    """Every binding of names under ``root`` (nested functions too): the names and the value (a
    ``for`` loop's iterable; None where the value is not an expression the names hold: a
    ``with``'s, an augmented assignment's, a function's parameters, an exception, an import)."""
    bindings: Bindings = []
    for assign in tree.findall(root, cst.Assign):
        bindings.append(({n for t in assign.targets for n in target_names(t.target)}, assign.value))
    for annotated in tree.findall(root, cst.AnnAssign):
        bindings.append((set(target_names(annotated.target)), annotated.value))
    for loop in tree.findall(root, cst.For):
        bindings.append((set(target_names(loop.target)), loop.iter))
    for walrus in tree.findall(root, cst.NamedExpr):
        bindings.append((set(target_names(walrus.target)), walrus.value))
    for augmented in tree.findall(root, cst.AugAssign):
        bindings.append((set(target_names(augmented.target)), None))
    for item in tree.findall(root, cst.WithItem):
        if item.asname is not None:
            bindings.append((set(target_names(item.asname.name)), None))
    for parameter in tree.findall(root, cst.Param):
        bindings.append(({parameter.name.value}, None))
    for handler in tree.findall(root, cst.ExceptHandler):
        if handler.name is not None:
            bindings.append((set(target_names(handler.name.name)), None))
    for alias in tree.findall(root, cst.ImportAlias):
        bound: cst.BaseExpression = alias.asname.name if alias.asname is not None else alias.name
        while isinstance(bound, cst.Attribute):  # ``import a.b`` binds ``a``
            bound = bound.value
        if isinstance(bound, cst.Name):
            bindings.append(({bound.value}, None))
    return bindings
