"""Which names a piece of code writes and reads.

Names are dotted paths: ``x``, ``self.hidden``, ``model.state``. Writing ``a[i] = v``, ``a += v`` or
calling a mutating method like ``a.append(v)`` / ``a.add_(v)`` counts as writing ``a``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import libcst as cst

from ..torch_api import METADATA_ATTRIBUTES, METADATA_METHODS
from .syntax import dotted_name, is_name, method_called
from .tree import SyntaxTree

APPENDING_METHODS = {"append", "extend", "insert"}


def _is_no_grad_block(node: cst.With) -> bool:
    return any(method_called(item.item) == "no_grad" or type(item.item) is cst.Call and is_name(item.item.func, "no_grad") for item in node.items)


def is_inplace_method(name: str) -> bool:
    return name.endswith("_") and not name.startswith("_")


def written_in_place(node: cst.BaseExpression) -> cst.BaseExpression:
    """What a chain of in-place methods writes to: ``ema`` of ``ema.mul_(decay)``, the receiver of
    ``ema.mul_(decay).add_(x)``'s ``add_``."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute and is_inplace_method(node.func.attr.value):
        node = node.func.value
    return node


def target_names(target: cst.BaseExpression, bindings_only: bool = False, rebound_only: bool = False) -> list[str]:
    """Names bound by an assignment target, with tuple unpacking flattened (``x[i]`` and ``x.a``
    name the ``x`` they write to, unless ``bindings_only``: they read ``x``, and bind nothing).
    With ``rebound_only``, the names and attributes bound anew, not the ``x`` an item write changes."""
    # (exact types: see ``dotted_name``)
    if type(target) is cst.Tuple or type(target) is cst.List:
        return [name for element in target.elements for name in target_names(element.value, bindings_only, rebound_only)]
    if type(target) is cst.StarredElement:
        return target_names(target.value, bindings_only, rebound_only)
    if bindings_only:
        return [target.value] if type(target) is cst.Name else []
    if type(target) is cst.Subscript:
        name = None if rebound_only else dotted_name(target.value)
        return [name] if name else []
    name = dotted_name(target)
    return [name] if name else []


class _Writes(cst.CSTVisitor):
    def __init__(self, rebinding_only: bool) -> None:
        self.names: set[str] = set()
        self.rebinding_only = rebinding_only
        self._no_grad_depth = 0

    def visit_With(self, node: cst.With) -> None:
        self._no_grad_depth += _is_no_grad_block(node)

    def leave_With(self, original_node: cst.With) -> None:
        self._no_grad_depth -= _is_no_grad_block(original_node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names.update(target_names(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.names.update(target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        # Under no_grad, `w -= lr * w.grad` updates a parameter in place: the name keeps its object.
        if not (self.rebinding_only and self._no_grad_depth):
            self.names.update(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.names.update(target_names(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.names.update(target_names(node.asname.name))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.names.update(target_names(node.target))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not self.rebinding_only and type(func) is cst.Attribute and (func.attr.value in APPENDING_METHODS or is_inplace_method(func.attr.value)):
            name = dotted_name(func.value)
            if name:
                self.names.add(name)


def local_names(function: cst.FunctionDef, tree: SyntaxTree | None = None) -> set[str]:
    """The names Python makes local to ``function``: those its own body binds as plain names
    (assigned, augmented, loop and ``with`` targets, imports, nested ``def`` and ``class``,
    ``except ... as``, ``del``), the parameters aside. A read of one never reads the global of
    that name, even on a path that has not bound it yet (that path raises ``UnboundLocalError``).
    ``tree``, the module's, saves walking the body again (LibCST's walk of a long function cost a
    third of a cold check)."""
    visitor = _PlainBindings()
    if tree is None:
        function.body.visit(visitor)
    else:
        tree.replay(visitor, function.body)
    return visitor.names


def _bound(target: cst.BaseExpression) -> list[str]:
    return target_names(target, bindings_only=True)


class _PlainBindings(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names.update(_bound(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names.update(_bound(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.names.update(_bound(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.names.update(_bound(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.names.update(_bound(node.asname.name))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.names.update(_bound(node.target))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self.names.update(_bound(node.name.name))

    def visit_Del(self, node: cst.Del) -> None:
        self.names.update(_bound(node.target))

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        bound: cst.BaseExpression = node.asname.name if node.asname is not None else node.name
        while isinstance(bound, cst.Attribute):  # ``import os.path`` binds ``os``
            bound = bound.value
        self.names.update(_bound(bound))


def assigned_names(node: cst.CSTNode, rebinding_only: bool = False, tree: SyntaxTree | None = None) -> set[str]:
    """Every name written anywhere inside ``node`` (not inside nested functions or classes).
    With ``rebinding_only``, only writes that bind a name to another object: not ``a.append(v)``,
    ``a.add_(v)`` or an augmented assignment under ``torch.no_grad()``. ``tree``, the module's,
    saves walking ``node`` again, and keeps the answer for the next time it is asked."""
    visitor = _Writes(rebinding_only)
    if tree is None:
        node.visit(visitor)
        return visitor.names

    def written() -> frozenset[str]:
        tree.replay(visitor, node)
        return frozenset(visitor.names)

    return set(tree.kept(("written", rebinding_only), node, written))


class _Reads(cst.CSTVisitor):
    def __init__(self, tree: SyntaxTree | None) -> None:
        self.names: set[str] = set()
        self._tree = tree

    def walk(self, node: cst.CSTNode) -> None:
        if self._tree is None:
            node.visit(self)
        else:
            self._tree.replay(self, node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = dotted_name(node)
        if name is None:
            return True
        parts = name.split(".")
        self.names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.walk(node.value)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        _visit_target_reads(node.target, self)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        _visit_target_reads(node.target, self)
        if node.value is not None:
            self.walk(node.value)
        return False


def _visit_target_reads(target: cst.BaseExpression, visitor: _Reads) -> None:
    """Targets read only what they index into: ``a[i] = v`` reads ``a`` and ``i``."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _visit_target_reads(element.value, visitor)
    elif isinstance(target, cst.Subscript):
        visitor.walk(target.value)
        for index in target.slice:
            visitor.walk(index)
    elif isinstance(target, cst.Attribute) and dotted_name(target) is None:
        visitor.walk(target.value)


def read_names(node: cst.CSTNode, tree: SyntaxTree | None = None) -> set[str]:
    """Every name read inside ``node``, each dotted prefix included (``self.h`` reads ``self``).
    ``tree``, the module's, saves walking ``node`` again, and keeps the answer for the next time
    it is asked."""
    visitor = _Reads(tree)
    if tree is None:
        node.visit(visitor)
        return visitor.names

    def read() -> frozenset[str]:
        visitor.walk(node)
        return frozenset(visitor.names)

    return set(tree.kept("read", node, read))


def read_before_assigned(statements: Sequence[cst.CSTNode]) -> set[str]:
    """The names ``statements``, run in order, read before they assign them (of a loop's body:
    what they read of them is what the previous iteration left)."""
    assigned: set[str] = set()
    read_first: set[str] = set()
    for statement in statements:
        for part in statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]:
            read_first |= (read_names(part.value) if isinstance(part, cst.Assign) else read_names(part)) - assigned
            assigned |= assigned_names(part)
    return read_first & assigned


def read_for_data(statement: cst.CSTNode, tree: SyntaxTree) -> set[str]:
    """The names ``statement`` reads for their values, not only for what a tensor tells of itself
    (its shape, size, device) or for their length (``torch.randn(imgs.shape[0], latent)`` reads no
    data of ``imgs``)."""
    names: set[str] = set()
    for node in tree.findall(statement, cst.Name):
        parent = tree.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _METADATA:
            continue
        if isinstance(parent, cst.Arg) and isinstance(call := tree.parent(parent), cst.Call) and dotted_name(call.func) == "len":
            continue
        names.add(node.value)
    return names & read_names(statement, tree)


_METADATA = METADATA_ATTRIBUTES | METADATA_METHODS


def bound_by_header(statement: cst.CSTNode) -> list[str]:
    """The names a compound statement's header binds (its body's statements are walked apart)."""
    if isinstance(statement, cst.For):
        return target_names(statement.target)
    if isinstance(statement, cst.With):
        return [n for item in statement.items if item.asname is not None for n in target_names(item.asname.name)]
    if isinstance(statement, cst.ExceptHandler) and statement.name is not None:
        return target_names(statement.name.name)
    return []


def shared_containers(module: cst.Module, tree: SyntaxTree, only_reads: Callable[[cst.Call], bool]) -> frozenset[str]:
    """The dotted names that may share their object with another name, anywhere in the file: one
    bound to another (``alias = store``, ``self.history = history``, ``kept = KEPT = []``, a
    parameter's default ``store=kept``) and the one it is bound to, one
    written into a container (``[store]``, ``{"k": store}``), and one handed to a call that may keep
    it (``Plateau(store)``, ``kept.append(store)``: any but those ``only_reads`` proves keep nothing).
    A value stored into such an object (``store.append(loss)``, ``store[k] = loss``) is read through
    the other name too, which the dataflow, whose values are the names', does not follow."""
    shared: set[str] = {
        name for call in tree.findall(module, cst.Call) if not only_reads(call) for arg in call.args if (name := dotted_name(arg.value))
    }
    for assignment in tree.findall(module, cst.Assign):
        value = dotted_name(assignment.value)
        if value is not None:
            shared.add(value)
        if value is not None or len(assignment.targets) > 1:  # (``kept = KEPT = []``: two names, one list)
            shared.update(name for target in assignment.targets for name in target_names(target.target, rebound_only=True))
    # A parameter's default is the object the function holds under the parameter's name (``def finish(store=kept)``).
    shared.update(name for parameter in tree.findall(module, cst.Param) if parameter.default and (name := dotted_name(parameter.default)))
    displays: list[cst.List | cst.Tuple | cst.Set] = [
        *tree.findall(module, cst.List),
        *tree.findall(module, cst.Tuple),
        *tree.findall(module, cst.Set),
    ]
    for display in displays:
        if not _unpacked_into(display, tree):
            shared.update(name for element in display.elements if (name := dotted_name(element.value)) is not None)
    shared.update(name for element in tree.findall(module, cst.DictElement) if (name := dotted_name(element.value)) is not None)
    return frozenset(shared)


def _unpacked_into(display: cst.CSTNode, tree: SyntaxTree) -> bool:
    """Whether ``display`` is (part of) a target a value is unpacked into (``a, b = ...``,
    ``for x, y in ...``): its names are bound, not written into a container."""
    node, parent = display, tree.parent(display)
    while isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
        node, parent = parent, tree.parent(parent)
    return (isinstance(parent, (cst.AssignTarget, cst.For, cst.CompFor)) and parent.target is node) or (
        isinstance(parent, cst.AsName) and parent.name is node
    )


# Where a ``Name`` binds its variable: its parent's type, and the field of the parent that holds it
# (a name in a tuple or list of a target binds as the target does).
_BINDING_FIELDS: dict[type[cst.CSTNode], str] = {
    cst.AssignTarget: "target",
    cst.AugAssign: "target",
    cst.AnnAssign: "target",
    cst.For: "target",
    cst.CompFor: "target",
    cst.NamedExpr: "target",
    cst.AsName: "name",
    cst.Param: "name",
    cst.FunctionDef: "name",
    cst.ClassDef: "name",
    cst.ImportAlias: "name",
    cst.NameItem: "name",
    cst.Del: "target",
    cst.MatchAs: "name",
    cst.MatchStar: "name",
    cst.MatchMapping: "rest",
}


def names_bound_to_one_object(module: cst.Module, tree: SyntaxTree) -> dict[str, frozenset[str]]:
    """By name, the names it may share its object with because one is only ever bound to the
    other: a name whose every binding in the file is ``alias = store`` (``store`` a plain name),
    and each name it is bound to. Where ``alias`` still holds what ``store`` held when it was bound,
    they are one object: emptying it in place through either empties what both hold. (A name bound
    any other way anywhere in the file, an attribute, or a name a ``global`` or ``nonlocal``
    statement names, which a call of another function may bind anew, shares nothing here.)"""
    bound_to: dict[str, set[str]] = {}
    other_bindings: set[str] = set()
    for name in tree.findall(module, cst.Name):
        node: cst.CSTNode = name
        parent = tree.parent(name)
        while parent is not None and type(parent) in (cst.Tuple, cst.List, cst.Element, cst.StarredElement):
            node, parent = parent, tree.parent(parent)
        field_name = _BINDING_FIELDS.get(type(parent)) if parent is not None else None
        if field_name is None or getattr(parent, field_name) is not node:
            continue
        assignment = tree.parent(parent) if node is name and type(parent) is cst.AssignTarget else None
        if type(assignment) is cst.Assign and len(assignment.targets) == 1 and type(assignment.value) is cst.Name:
            bound_to.setdefault(name.value, set()).add(assignment.value.value)
        else:
            other_bindings.add(name.value)
    declared: list[cst.Global | cst.Nonlocal] = [*tree.findall(module, cst.Global), *tree.findall(module, cst.Nonlocal)]
    rebound_elsewhere = {item.name.value for statement in declared for item in statement.names}
    partners: dict[str, set[str]] = {}
    for alias, stores in bound_to.items():
        if alias in other_bindings | rebound_elsewhere:
            continue
        for store in stores - {alias} - rebound_elsewhere:
            partners.setdefault(alias, set()).add(store)
            partners.setdefault(store, set()).add(alias)
    return {name: frozenset(others) for name, others in partners.items()}
