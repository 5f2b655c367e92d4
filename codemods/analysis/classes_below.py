"""The module's classes that a function body above their ``class`` statement reads.

Python looks a global name up when the function runs, not when it is defined: ``model = Net()``
in ``main()`` means the ``class Net`` below it once the module has run down to that class before
``main()`` is called. ``classes_read_ahead`` lists, for each function body read before such
classes, those it calls; ``torch_names`` learns them on entering the body and forgets them on
leaving it, so that the module's own statements above the class (which raise ``NameError``)
conclude nothing from it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

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


def classes_read_ahead(tree: SyntaxTree) -> dict[int, tuple[cst.ClassDef, ...]]:
    """For each function body that calls a class of the module defined below it (``Net()``; by
    the ``id`` of the outermost function, a method included), the classes below it that it means
    by their names, in the module's order, with those of them that are bases of these. Such a
    class is a statement of the module's own body (not under an ``if``, a ``try`` or in a
    function) whose name nothing else in the module binds (another class, a function, an import,
    an assignment, a parameter, in any scope), and above which no statement of the module calls
    one of the module's functions or classes outside a function body (that call runs a body
    before the class exists: ``NameError``)."""
    body = tree.module.body
    functions = _outermost_functions(tree)
    if not functions:
        return {}
    own = {statement.name.value for statement in body if type(statement) is cst.FunctionDef or type(statement) is cst.ClassDef}
    starts = [tree.order(function) for function in functions]
    stop: int | None = None  # where the module first runs its own code
    called: dict[int, set[str]] = {}  # function (its index) -> the module's names it calls
    for call in tree.findall(tree.module, cst.Call):
        func = call.func
        if type(func) is not cst.Name or func.value not in own:
            continue
        index = bisect_right(starts, tree.order(call)) - 1
        if index >= 0 and tree.contains(functions[index].body, call):
            called.setdefault(index, set()).add(func.value)
        elif stop is None:
            stop = tree.order(call)
    if not called:
        return {}
    defined = {statement.name.value: statement for statement in body if type(statement) is cst.ClassDef}
    classes = {name: node for name, node in defined.items() if stop is None or _ends_before(tree, node, stop)}
    bases = {name: {base.value.value for base in node.bases if type(base.value) is cst.Name} for name, node in classes.items()}
    last_first = sorted(classes, key=lambda name: -tree.order(classes[name]))  # (a base is defined above)
    for index, names in called.items():  # (a class above the function is known when it is read)
        names.intersection_update(name for name in names & classes.keys() if tree.follows(classes[name], functions[index]))
    wanted = _with_bases(set().union(*called.values()), last_first, bases)
    if not wanted:
        return {}
    known = wanted - bound_again(tree, wanted)
    ahead: dict[int, tuple[cst.ClassDef, ...]] = {}
    for index, names in called.items():
        function = functions[index]
        needed = _with_bases(names & known, last_first, bases) & known
        below = tuple(node for name, node in classes.items() if name in needed and tree.follows(node, function))
        if below:
            ahead[id(function)] = below
    return ahead


def bound_again(tree: SyntaxTree, names: set[str]) -> set[str]:
    """Those of ``names`` (the module's classes and functions) that the module's scope binds more
    than once: a second ``class`` or ``def``, an assignment, an import, or a function that declares
    it ``global``. A call of such a name may run another object than its statement. (A name a
    function binds for itself, ``loss = ...`` in ``def loss()``, is that function's own.)"""
    declared = {item.name.value for statement in tree.findall(tree.module, cst.Global) for item in statement.names}
    counts = Counter(name.value for name in tree.names(tree.module, names) if _binds(tree, name) and _in_module_scope(tree, name))
    return {name for name, count in counts.items() if count > 1} | (declared & names)


def _in_module_scope(tree: SyntaxTree, name: cst.Name) -> bool:
    """Whether the binding ``name`` binds in the module's scope: no function, class or
    comprehension holds it (the name of a ``def`` or ``class`` binds where the statement is)."""
    node: cst.CSTNode = name
    parent = tree.parent(name)
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is name:
        node, parent = parent, tree.parent(parent)
    while parent is not None:
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.body is node:
            return False
        if isinstance(parent, (cst.Lambda, cst.CompFor, cst.Param)):
            return False
        node, parent = parent, tree.parent(parent)
    return True


def _with_bases(names: set[str], last_first: list[str], bases: dict[str, set[str]]) -> set[str]:
    """``names`` and, through the module's classes (``last_first``: the last defined first), the
    bases of each."""
    found = set(names)
    for name in last_first:
        if name in found:
            found |= bases[name] & bases.keys()
    return found


def _ends_before(tree: SyntaxTree, node: cst.CSTNode, order: int) -> bool:
    span = tree.span(node)
    return span is not None and span[1] <= order


def _outermost_functions(tree: SyntaxTree) -> list[cst.FunctionDef]:
    """The functions (methods included) that no function holds, in the module's order."""
    outermost: list[cst.FunctionDef] = []
    for function in tree.findall(tree.module, cst.FunctionDef):
        if not outermost or not tree.contains(outermost[-1], function):
            outermost.append(function)
    return outermost


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
