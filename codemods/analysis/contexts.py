"""What the contexts of a ``with`` statement do to the paths through it."""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from ..frameworks import EXCEPTION_KEEPING_CONTEXTS, EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS, EXCEPTION_SWALLOWING_CONTEXTS
from .assignments import read_names
from .syntax import is_name
from .torch_facts import TorchNames
from .tree import SyntaxTree

_LEAVING = (cst.Break, cst.Continue, cst.Return, cst.Raise)


def runs_to_its_end(names: TorchNames, tree: SyntaxTree, statement: cst.With) -> bool:
    """Whether every path past ``statement`` ran its body to the end: nothing in the body leaves it
    (``break``, ``continue``, ``return``, ``raise``), and each of its contexts is one that lets the
    body's exceptions through (``EXCEPTION_KEEPING_CONTEXTS``, by qualified name or by a framework
    object's kind and method), written in the ``with`` or bound to the name it reads (``ctx =
    nullcontext() if cpu else torch.autocast("cuda")``: ``made_by``); any other may swallow one
    (``contextlib.suppress``)."""
    return not any(tree.findall(statement.body, leaving) for leaving in _LEAVING) and all(
        (calls := made_by(tree, item.item)) is not None and all(is_listed_context(names, call) for call in calls) for item in statement.items
    )


def may_run_to_its_end(names: TorchNames, tree: SyntaxTree, statement: cst.With) -> bool:
    """Whether ``statement`` may run its body to the end on every path past it, as far as gradfix
    knows: nothing in the body leaves it, and no context is one known to swallow exceptions
    (``EXCEPTION_SWALLOWING_CONTEXTS``). A context gradfix does not know may, or may not."""
    return not any(tree.findall(statement.body, leaving) for leaving in _LEAVING) and not any(
        names.qualify(call.func) in EXCEPTION_SWALLOWING_CONTEXTS for item in statement.items for call in made_by(tree, item.item) or ()
    )


def is_listed_context(names: TorchNames, call: cst.Call) -> bool:
    """Whether ``call`` makes one of the contexts ``frameworks`` lists as letting exceptions through
    (none of which clears or writes a gradient: ``reach`` reads their calls as touching none)."""
    return names.qualify(call.func) in EXCEPTION_KEEPING_CONTEXTS or (
        type(call.func) is cst.Attribute and (names.framework(call.func.value), call.func.attr.value) in EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS
    )


def made_by(tree: SyntaxTree, item: cst.BaseExpression) -> list[cst.Call] | None:
    """The calls that make the context ``item``: itself, a call; or, for a name the file binds once,
    by a plain assignment of a call or of a conditional expression between calls, each of those
    calls (nanoGPT's ``ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(...)``).
    None for anything else."""
    if type(item) is cst.Call:
        return [item]
    if type(item) is not cst.Name:
        return None
    bindings = [node for node in tree.names(tree.module, [item.value]) if not _read(tree, node)]
    assign = tree.parent(tree.parent(bindings[0]) or bindings[0]) if len(bindings) == 1 else None
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or assign.targets[0].target is not bindings[0]:
        return None
    calls: list[cst.Call] = []
    pending: list[cst.BaseExpression] = [assign.value]
    while pending:
        value = pending.pop()
        if type(value) is cst.IfExp:
            pending += [value.body, value.orelse]
        elif type(value) is cst.Call:
            calls.append(value)
        else:
            return None
    return calls


def _read(tree: SyntaxTree, name: cst.Name) -> bool:
    """Whether the name ``name`` is read where it is written, not bound (assigned, a loop's or a
    ``with``'s target, a parameter, a definition, an import, declared ``global``, deleted)."""
    node: cst.CSTNode = name
    parent = tree.parent(name)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, parent = parent, tree.parent(parent)
    if isinstance(parent, (cst.AssignTarget, cst.AsName, cst.Param, cst.NameItem, cst.Del, cst.ImportAlias)):
        return False
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is node:
        return False
    return not (isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)) and parent.target is node)


def runs_whenever(names: TorchNames, tree: SyntaxTree, body: Sequence[cst.CSTNode], statement: cst.CSTNode) -> bool:
    """Whether ``statement`` runs whenever the block ``body`` runs to its end: it is one of its
    statements, or in the body of ``with`` statements there that run to their end
    (``with torch.autocast("cuda"): loss = ...``)."""
    while not any(statement is own for own in body):
        block = tree.parent(statement)
        holder = tree.parent(block) if block is not None else None
        if type(holder) is not cst.With or not runs_to_its_end(names, tree, holder):
            return False
        statement = holder
    return True


def header_bound_from_itself(statement: cst.CSTNode, name: str) -> bool | None:
    """Whether ``with item as name`` or ``for name in iterable`` computes ``name`` from its previous
    value: the item or the iterable reads it (what the context hands back is made of the item, and
    each element the loop binds is one of the iterable's); None for an ``except`` clause's binding."""
    if type(statement) is cst.For:
        return name in read_names(statement.iter)
    if type(statement) is not cst.With:
        return None
    items = [item for item in statement.items if item.asname is not None and is_name(item.asname.name, name)]
    return name in read_names(items[-1].item) if items else None
