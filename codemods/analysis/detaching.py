"""Which values hold no graph of their own, by what the file writes: the functions whose every
``return`` hands back detached values (``repackage_hidden``), and the calls that make a leaf
requiring grad instead (``nn.Parameter(...)``, ``torch.zeros(..., requires_grad=True)``).

Read once per file by ``torch_names`` (``TorchNames.detaching_functions``); apart from it because
it asks what a returned expression is, not what a name means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from .. import torch_api
from .syntax import dotted_name, is_detach, is_name, method_called
from .tree import SyntaxTree

if TYPE_CHECKING:
    from .torch_facts import TorchNames


def creates_parameter(names: TorchNames, value: cst.BaseExpression) -> bool:
    """``nn.Parameter(...)`` or a tensor factory called with ``requires_grad=True``; not
    ``nn.Parameter(x, requires_grad=False)``, a constant of the module's state (a step count)."""
    if type(value) is not cst.Call:
        return False
    if names.qualify(value.func) in torch_api.PARAMETER_CLASSES:
        flags = [a.value for i, a in enumerate(value.args) if (a.keyword.value == "requires_grad" if a.keyword else i == 1)]
        return not (flags and is_name(flags[0], "False"))
    return any(arg.keyword is not None and arg.keyword.value == "requires_grad" and is_name(arg.value, "True") for arg in value.args)


def returns_detached(function: cst.FunctionDef, tree: SyntaxTree, names: TorchNames) -> bool:
    """Whether every ``return`` of ``function`` hands back values without a graph, by torch's
    tables (``torch_api``) as the dataflow reads them: ``h.detach()``, ``h.item()``, ``h.data``,
    a new tensor (``Variable(h.data)``, ``torch.zeros(...)``), a tuple, list or comprehension of
    them, ``map(torch.Tensor.detach, h)``, or a call of the function itself (``repackage_hidden``:
    every value it returns bottoms out in a return of the others)."""
    returns = [r for r in tree.findall(function.body, cst.Return) if not _nested(tree, r, function)]
    return bool(returns) and all(r.value is not None and _detached(names, r.value, function.name.value) for r in returns)


def _nested(tree: SyntaxTree, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    parent = tree.parent(node)
    while parent is not None and parent is not function:
        if type(parent) is cst.FunctionDef or type(parent) is cst.Lambda:
            return True
        parent = tree.parent(parent)
    return False


def _detached(names: TorchNames, value: cst.BaseExpression, function: str) -> bool:
    if is_detach(value) or method_called(value) in torch_api.DETACHING_METHODS:
        return True
    if isinstance(value, cst.Attribute) and value.attr.value in torch_api.GRAPHLESS_ATTRIBUTES:
        return True
    if isinstance(value, (cst.Tuple, cst.List)):
        return all(_detached(names, element.value, function) for element in value.elements)
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
        return _detached(names, value.elt, function)
    if isinstance(value, cst.Name):
        return value.value == "None"
    if isinstance(value, cst.Call):
        if isinstance(value.func, cst.Attribute) and not value.args and value.func.attr.value not in torch_api.BOOKKEEPING_METHODS:
            if _detached(names, value.func.value, function):  # ``Variable(h.data).cuda()``: given nothing but a tensor without a graph
                return True
        callee = dotted_name(value.func)
        if callee in names.detaching_functions or (callee or "").rpartition(".")[2] == function:
            return True  # (``function`` itself, called as ``f``, ``self.f``, ``cls.f`` or ``Class.f``)
        qualified = names.qualify(value.func) or ""
        if qualified.startswith("torch.") and qualified.rpartition(".")[2] in torch_api.CREATION_FUNCTIONS and not creates_parameter(names, value):
            return True
        if callee in ("tuple", "list") and len(value.args) == 1:
            return _detached(names, value.args[0].value, function)
        if callee == "map" and value.args:
            mapped = value.args[0].value
            return (
                names.qualify(mapped) == "torch.Tensor.detach"
                or (isinstance(mapped, cst.Lambda) and _detached(names, mapped.body, function))
                or dotted_name(mapped) in names.detaching_functions
            )
    return False
