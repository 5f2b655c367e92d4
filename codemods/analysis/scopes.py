"""Which scope binds a name, by Python's own rules: a name a function assigns (or takes as a
parameter, loops over, imports, defines) is that function's variable unless the function declares
it ``global`` or ``nonlocal``; a name the function only reads is its enclosing function's (a
closure), and at the end the module's.

What the file's names mean to torch (``torch_names``) is a fact of the variable, not of its
spelling: ``model`` of ``def report(model): model.named_parameters()`` is not the ``model`` another
function trains. ``Scopes.key`` names a variable: its dotted spelling as written where the module
binds it (or no function does), and the spelling after the binding function's label
(``Trainer.compute_loss:model``) where a function does.

Simplifications, each keeping two variables apart no less than Python does or reading one as the
module's as before: a class body is no scope of its own (its names read as the module's); a
comprehension's loop variable is its function's; two functions of one qualified name (a
``def`` in both branches of an ``if``) share a label; ``self.x`` is the class's attribute, kept
as written (the class tables of ``torch_names`` tell classes apart).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import libcst as cst

from .syntax import dotted_name
from .tree import SyntaxTree

Scope = cst.FunctionDef | cst.Lambda


class _Bindings(cst.CSTVisitor):
    """One pass over the file: the names each function (and lambda) binds, and its label."""

    def __init__(self) -> None:
        self.bound: dict[Scope, set[str]] = {}
        self.declared: dict[Scope, set[str]] = {}  # ``global`` / ``nonlocal``: not its own
        self.labels: dict[Scope, str] = {}
        self._stack: list[tuple[Scope | None, str]] = []  # (scope, qualified prefix); classes: no scope

    def _bind(self, name: str | None) -> None:
        scope = next((s for s, _ in reversed(self._stack) if s is not None), None)
        if scope is not None and name:
            self.bound[scope].add(name)

    def _bind_target(self, target: cst.BaseExpression) -> None:
        if type(target) is cst.Name:
            self._bind(target.value)
        elif type(target) is cst.Tuple or type(target) is cst.List:
            for element in target.elements:
                self._bind_target(element.value)
        elif type(target) is cst.StarredElement:
            self._bind_target(target.value)

    def _enter(self, scope: Scope, name: str) -> None:
        prefix = self._stack[-1][1] + "." if self._stack else ""
        self.labels[scope] = f"{prefix}{name}"
        self.bound[scope] = set()
        self.declared[scope] = set()
        self._stack.append((scope, f"{prefix}{name}.<locals>"))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bind(node.name.value)
        self._enter(node, node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._stack.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._enter(node, "<lambda>")

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name.value)
        prefix = self._stack[-1][1] + "." if self._stack else ""
        self._stack.append((None, f"{prefix}{node.name.value}"))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._stack.pop()

    def visit_Param(self, node: cst.Param) -> None:
        self._bind(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind_target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind_target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._bind_target(node.name)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is None:
            self._bind((dotted_name(node.name) or "").split(".")[0])

    def visit_Del(self, node: cst.Del) -> None:
        self._bind_target(node.target)

    def visit_Global(self, node: cst.Global) -> None:
        self._declare(node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._declare(node.names)

    def _declare(self, names: Sequence[cst.NameItem]) -> None:
        scope = next((s for s, _ in reversed(self._stack) if s is not None), None)
        if scope is not None:
            self.declared[scope].update(item.name.value for item in names)


class Scopes:
    """The variable a name written at a node is, as a key of ``TorchNames``' tables."""

    def __init__(self, tree: SyntaxTree) -> None:
        self._tree = tree
        bindings = _Bindings()
        tree.replay(bindings)
        self._own = {scope: frozenset(bound - bindings.declared[scope]) for scope, bound in bindings.bound.items()}
        counted: dict[str, int] = {}
        self._labels: dict[Scope, str] = {}
        for scope, label in bindings.labels.items():  # (lambdas of one function: numbered in order)
            counted[label] = counted.get(label, 0) + 1
            self._labels[scope] = label if type(scope) is cst.FunctionDef or counted[label] == 1 else f"{label}#{counted[label]}"
        # The scopes by where they start in the tree's order, each with the one around it: a node's
        # scopes are found by its order, not by walking its parents (asked of every name the analysis reads).
        placed = sorted((span, scope) for scope in self._own if (span := tree.span(scope)) is not None)
        self._scopes = [scope for _, scope in placed]
        self._starts = [span[0] for span, _ in placed]
        self._ends = [span[1] for span, _ in placed]
        self._outer: list[int] = []
        self._keys: dict[int, str | None] = {}  # id of a node of the tree -> ``key``
        around: list[int] = []
        for index, start in enumerate(self._starts):
            while around and self._ends[around[-1]] <= start:
                around.pop()
            self._outer.append(around[-1] if around else -1)
            around.append(index)

    def binder(self, node: cst.CSTNode, name: str) -> Scope | None:
        """The function (or lambda) whose variable ``name`` is where ``node`` reads or binds it;
        None for the module's."""
        span = self._tree.span(node)
        if span is None:
            return None
        order = span[0]
        index = bisect_left(self._starts, order) - 1  # (the last scope starting before the node: strictly inside it)
        while index >= 0 and self._ends[index] <= order:
            index = self._outer[index]
        while index >= 0:
            scope = self._scopes[index]
            if name in self._own[scope]:
                return scope
            index = self._outer[index]
        return None

    def key(self, node: cst.CSTNode) -> str | None:
        """The variable the dotted expression ``node`` names (``model``, ``model.encoder``), as a
        key: its spelling, after the label of the function that binds its head if one does."""
        if id(node) in self._keys:  # (kept for the tree's own nodes, which live as long as it)
            return self._keys[id(node)]
        name = dotted_name(node)
        key = None if name is None else self.key_of(name, node)
        if self._tree.span(node) is not None:
            self._keys[id(node)] = key
        return key

    def key_of(self, name: str, node: cst.CSTNode) -> str:
        """``name`` (a dotted spelling) as a key, read or bound where ``node`` is."""
        head = name.partition(".")[0]
        if head == "self":
            return name
        scope = self.binder(node, head)
        return name if scope is None else f"{self._labels[scope]}:{name}"

    def key_in(self, scope: Scope | None, name: str) -> str:
        """``name`` as a key of a variable of ``scope`` itself (a parameter of that function)."""
        if scope is None or name.partition(".")[0] == "self" or name.partition(".")[0] not in self._own.get(scope, ()):
            return name
        return f"{self._labels[scope]}:{name}"


def spelling(key: str) -> str:
    """The dotted spelling of a key (``model`` of ``train:model``)."""
    return key.rpartition(":")[2]
