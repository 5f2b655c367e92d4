"""What the contexts of a ``with`` statement do to the paths through it."""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from ..frameworks import EXCEPTION_KEEPING_CONTEXTS, EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS
from .assignments import read_names
from .syntax import is_name
from .torch_facts import TorchNames
from .tree import SyntaxTree

_LEAVING = (cst.Break, cst.Continue, cst.Return, cst.Raise)


def runs_to_its_end(names: TorchNames, tree: SyntaxTree, statement: cst.With) -> bool:
    """Whether every path past ``statement`` ran its body to the end: nothing in the body leaves it
    (``break``, ``continue``, ``return``, ``raise``), and each of its contexts is one that lets the
    body's exceptions through (``EXCEPTION_KEEPING_CONTEXTS``, by qualified name or by a framework
    object's kind and method); any other may swallow one (``contextlib.suppress``)."""
    return not any(tree.findall(statement.body, leaving) for leaving in _LEAVING) and all(
        type(call := item.item) is cst.Call
        and (
            names.qualify(call.func) in EXCEPTION_KEEPING_CONTEXTS
            or type(call.func) is cst.Attribute
            and (names.framework(call.func.value), call.func.attr.value) in EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS
        )
        for item in statement.items
    )


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


def context_bound_from_itself(statement: cst.CSTNode, name: str) -> bool | None:
    """Whether ``with item as name`` computes ``name`` from its previous value: the item reads it
    (what the context hands back is made of the item); None for the other headers' bindings."""
    if type(statement) is not cst.With:
        return None
    items = [item for item in statement.items if item.asname is not None and is_name(item.asname.name, name)]
    return name in read_names(items[-1].item) if items else None
