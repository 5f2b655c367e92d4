"""The module's classes that a function body above their ``class`` statement reads.

Python looks a global name up when the function runs, not when it is defined: ``model = Net()``
in ``main()`` means the ``class Net`` below it once the module has run down to that class before
``main()`` is called. ``classes_read_ahead`` lists the classes for which that holds of every
function body read before them; ``torch_names`` learns them on entering such a body, and forgets
them on leaving it, so that the module's own statements above the class (which raise
``NameError``) conclude nothing from it.
"""

from __future__ import annotations

import libcst as cst

from .tree import SyntaxTree

# Where a ``Name`` is bound rather than read: its node type -> the fields that bind it (``Tuple``,
# ``List`` and ``StarredElement`` around a target are looked through).
_BINDING_FIELDS: dict[type[cst.CSTNode], tuple[str, ...]] = {
    cst.AssignTarget: ("target",),
    cst.AnnAssign: ("target",),
    cst.AugAssign: ("target",),
    cst.For: ("target",),
    cst.CompFor: ("target",),
    cst.NamedExpr: ("target",),
    cst.AsName: ("name",),  # ``import x as Net``, ``with ... as Net``, ``except E as Net``
    cst.ImportAlias: ("name",),  # ``from m import Net``, ``import Net``
    cst.Del: ("target",),
    cst.NameItem: ("name",),  # ``global Net``: a function that may bind it
    cst.Param: ("name",),
    cst.FunctionDef: ("name",),
    cst.ClassDef: ("name",),
    cst.MatchAs: ("name",),
    cst.MatchStar: ("name",),
}
_TARGET_WRAPPERS = (cst.Tuple, cst.List, cst.StarredElement, cst.Element)


def classes_read_ahead(tree: SyntaxTree) -> tuple[cst.ClassDef, ...]:
    """The classes a function body read before their ``class`` statement means by their name: a
    statement of the module's own body (not under an ``if``, a ``try`` or in a function) whose name
    nothing else in the module binds (another class, a function, an import, an assignment, a
    parameter, in any scope), and above which no statement of the module calls one of the module's
    functions or classes (that call runs a body before the class exists: ``NameError``)."""
    body = tree.module.body
    own = {statement.name.value for statement in body if type(statement) is cst.FunctionDef or type(statement) is cst.ClassDef}
    candidates: list[cst.ClassDef] = []
    function_above = False
    for statement in body:
        if type(statement) is cst.ClassDef and function_above:
            candidates.append(statement)
        if _runs_own_code(tree, statement, own):
            break
        function_above = function_above or bool(tree.findall(statement, cst.FunctionDef))
    if not candidates:
        return ()
    bindings: dict[str, int] = {}
    for name in tree.names(tree.module, {c.name.value for c in candidates}):
        if _binds(tree, name):
            bindings[name.value] = bindings.get(name.value, 0) + 1
    return tuple(c for c in candidates if bindings.get(c.name.value) == 1)


def _runs_own_code(tree: SyntaxTree, statement: cst.CSTNode, own: set[str]) -> bool:
    """Whether the statement, when the module runs it, may call one of the module's functions or
    classes: a call of one by name outside a function body (a decorator or a default included)."""
    calls = [call for call in tree.findall(statement, cst.Call) if type(call.func) is cst.Name and call.func.value in own]
    if not calls:
        return False
    bodies = tree.findall(statement, cst.FunctionDef)
    return any(not any(tree.contains(function.body, call) for function in bodies) for call in calls)


def _binds(tree: SyntaxTree, name: cst.Name) -> bool:
    node: cst.CSTNode = name
    parent = tree.parent(node)
    while type(parent) is cst.Attribute and parent.value is node:  # ``import Net.layers`` binds ``Net``
        node, parent = parent, tree.parent(parent)
    if type(parent) is cst.ImportAlias:
        return True
    node, parent = name, tree.parent(name)
    while parent is not None and isinstance(parent, _TARGET_WRAPPERS):
        node, parent = parent, tree.parent(parent)
    fields = _BINDING_FIELDS.get(type(parent)) if parent is not None else None
    return fields is not None and any(getattr(parent, field) is node for field in fields)
