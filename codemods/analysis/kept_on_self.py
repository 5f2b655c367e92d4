"""What a method keeps of its parameters on its object, on every call: a fact of its summary.

``AverageMeter.update(self, val, n=1)`` runs ``self.sum += val * n``: whatever ``val`` holds, the
object holds it afterwards, added to what it held before. A caller that hands it a loss each
training step keeps every step's graph in the meter, as ``total += loss`` keeps them in ``total``.
The fact is one of syntax and of the method alone: a statement of the method's own body that runs
on every path through it (none of the statements before it can return or raise, and it is under
no condition, loop or ``with``), which adds the parameter, or arithmetic on it (``val * n``), to an
attribute of ``self`` (``+=``, ``self.a = self.a + v``) or appends it to one, with the parameter
never rebound in the method and the attribute written nowhere else in it (``self.sum = 0`` before
would keep one call's only). A decorated method is not read (``@torch.no_grad()`` records no graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import libcst as cst

from ..torch_api import GRAPH_KEEPING_METHODS
from .assignments import assigned_names
from .syntax import appended, dotted_name
from .tree import SyntaxTree


@dataclass(frozen=True)
class KeptOnSelf:
    """A parameter a method adds or appends to attributes of its object on every call."""

    attributes: tuple[str, ...]  # as the method writes them: ``self.sum``
    # Whether every such store computes a new tensor (``self.sum += val * n``) rather than keeping
    # the tensor itself (``self.values.append(val)``): with gradients off, the sum records no graph.
    new_tensor: bool
    # Whether the method reads the parameter only in statements that store it, or arithmetic on it,
    # on its object (``self.val = val``): nothing else of the method is handed its graph.
    only_stored: bool


@dataclass(frozen=True)
class KeptArgument:
    """An argument a call hands a method of the file's class that keeps it on the object."""

    value: cst.BaseExpression  # the argument, as the call writes it
    kept: KeptOnSelf
    class_name: str
    # The attributes (``sum``, ``val``, ``avg``) the method leaves holding a graph, as its walk with
    # what its callers pass finds them: where what it was given may be read from the object.
    left_with_graph: frozenset[str]


# Operators whose result, on a tensor with a graph, is a node of that graph (not ``//`` or ``%``).
_GRAPH_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power, cst.MatrixMultiply)


def operands(expression: cst.BaseExpression) -> list[cst.Name]:
    """The names ``expression`` is, or is arithmetic on (``val * n``, ``-val``) or a
    ``GRAPH_KEEPING_METHODS`` call of (``val.float()``): if one of them holds a tensor with a graph,
    so does the result; ``[]`` for anything else (another call, ``float(val)``)."""
    if type(expression) is cst.Name:
        return [expression]
    if type(expression) is cst.Call and type(expression.func) is cst.Attribute and expression.func.attr.value in GRAPH_KEEPING_METHODS:
        return operands(expression.func.value)
    if type(expression) is cst.BinaryOperation and isinstance(expression.operator, _GRAPH_OPERATORS):
        left, right = operands(expression.left), operands(expression.right)
        return [*left, *right] if left or right else []
    if type(expression) is cst.UnaryOperation and isinstance(expression.operator, (cst.Minus, cst.Plus)):
        return operands(expression.expression)
    return []


def kept_on_self(node: cst.FunctionDef, parameters: Sequence[str], tree: SyntaxTree) -> dict[str, KeptOnSelf]:
    """The parameters of the method ``node`` (``parameters``: as callers pass them, ``self`` left
    out) that every call adds or appends to attributes of its object."""
    if node.decorators or not node.params.params:
        return {}
    me = node.params.params[0].name.value
    stores: list[tuple[cst.BaseSmallStatement, str, cst.BaseExpression, bool]] = []
    # (``def update(self, val): self.sum += val`` is a suite of small statements on one line)
    body = node.body
    lines: Sequence[cst.CSTNode] = [body] if isinstance(body, cst.SimpleStatementSuite) else body.body
    for statement in lines:
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            if tree.findall(statement, cst.Return) or bool(tree.findall(statement, cst.Raise)):
                break  # what follows may not run
            continue
        ended = False
        for small in statement.body:
            if type(small) is cst.Return or type(small) is cst.Raise:
                ended = True
                break
            stored = _added_to_attribute(small, me)
            if stored is not None:
                stores.append((small, *stored))
        if ended:
            break
    if not stores:
        return {}
    rebound = assigned_names(node.body, tree=tree)
    found: dict[str, list[tuple[str, bool]]] = {}
    for small, attribute, value, new_tensor in stores:
        for name in dict.fromkeys(n.value for n in operands(value)):
            if name in parameters and name not in rebound and _written_only_by(attribute, node, small, tree):
                found.setdefault(name, []).append((attribute, new_tensor))
    return {
        name: KeptOnSelf(tuple(dict.fromkeys(a for a, _ in kept)), all(n for _, n in kept), _only_stored(name, me, node, tree))
        for name, kept in found.items()
    }


def _added_to_attribute(small: cst.BaseSmallStatement, me: str) -> tuple[str, cst.BaseExpression, bool] | None:
    """``(attribute, value, new_tensor)`` for ``me.a += value``, ``me.a = me.a + value`` and
    ``me.a.append(value)``, ``me.a`` an attribute of the object itself."""
    if type(small) is cst.AugAssign and type(small.operator) is cst.AddAssign:
        attribute = dotted_name(small.target)
        return (attribute, small.value, True) if attribute is not None and _own(attribute, me) else None
    if type(small) is cst.Assign and len(small.targets) == 1:
        attribute = dotted_name(small.targets[0].target)
        value = small.value
        if (
            attribute is not None
            and _own(attribute, me)
            and type(value) is cst.BinaryOperation
            and type(value.operator) is cst.Add
            and dotted_name(value.left) == attribute
        ):
            return attribute, value.right, True
        return None
    call = appended(small)
    if call is not None and type(call.func) is cst.Attribute:
        attribute = dotted_name(call.func.value)
        return (attribute, call.args[0].value, False) if attribute is not None and _own(attribute, me) else None
    return None


def _own(attribute: str | None, me: str) -> bool:
    """Whether ``attribute`` is one of the object's own (``self.sum``, not ``self.model.sum``)."""
    return attribute is not None and attribute.count(".") == 1 and attribute.startswith(me + ".")


def _written_only_by(attribute: str, node: cst.FunctionDef, store: cst.BaseSmallStatement, tree: SyntaxTree) -> bool:
    """Whether ``store`` is the only statement of the method that writes ``attribute``."""
    lines: list[cst.SimpleStatementLine | cst.SimpleStatementSuite] = [
        *tree.findall(node.body, cst.SimpleStatementLine),
        *tree.findall(node.body, cst.SimpleStatementSuite),
    ]
    return all(small is store or attribute not in assigned_names(small) for line in lines for small in line.body)


def _only_stored(name: str, me: str, node: cst.FunctionDef, tree: SyntaxTree) -> bool:
    """Whether every read of ``name`` in the method is in a statement that stores it, or arithmetic
    on it, on the object (``self.val = val``, ``self.sum += val * n``): nothing else is handed it."""
    for read in tree.names(node.body, [name]):
        parent = tree.parent(read)
        if type(parent) is cst.Attribute and parent.attr is read or type(parent) is cst.Arg and parent.keyword is read:
            continue  # (``self.val``, ``f(val=...)``: not a read of the name)
        small = next((n for n in _ancestors(read, tree) if isinstance(n, cst.BaseSmallStatement)), None)
        if small is None:
            return False
        if _added_to_attribute(small, me) is not None and any(o is read for o in operands(_stored_value(small))):
            continue
        if type(small) is cst.Assign and len(small.targets) == 1 and _own(dotted_name(small.targets[0].target), me):
            if any(o is read for o in operands(small.value)):
                continue
        return False
    return True


def _stored_value(small: cst.BaseSmallStatement) -> cst.BaseExpression:
    if type(small) is cst.AugAssign:
        return small.value
    if type(small) is cst.Assign:
        value = small.value
        return value.right if type(value) is cst.BinaryOperation else value
    call = appended(small)
    return call.args[0].value if call is not None else cst.Name("_")


def _ancestors(node: cst.CSTNode, tree: SyntaxTree) -> Iterator[cst.CSTNode]:
    parent = tree.parent(node)
    while parent is not None:
        yield parent
        parent = tree.parent(parent)
