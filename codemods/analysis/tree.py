"""One walk of a module that answers the structural questions the analysis and the rules ask again
and again: a node's parent, whether one node holds another, and the nodes of a kind under a node.

``libcst.matchers.findall`` walks the whole subtree on every call (rebuilding each node it passes),
and the rules ask it thousands of times per file; ``SyntaxTree.findall`` answers from the one walk,
with the same nodes in the same order.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from bisect import bisect_left
from typing import Callable, Iterable, Sequence

import libcst as cst
import libcst.matchers as m


# Whitespace, newlines and comments: no question of the analysis or the rules is about them, and
# they are more than half of a module's nodes. They are not in the tree (``findall`` of one of
# them is answered by libcst).
LAYOUT = frozenset({
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
})


class SyntaxTree:
    # Nodes are known by their place in ``_nodes`` and looked up by ``id``: libcst defines a node's
    # hash in Python, and hashing each node a few times cost a fifth of building the tree.
    def __init__(self, module: cst.Module) -> None:
        self._nodes: list[cst.CSTNode] = []  # in the order libcst visits them (each node before what it holds)
        self._ends: list[int] = []  # by index: one past the index of the node's last descendant
        self._parents: list[int] = []  # by index: the parent's index (-1 for the module)
        self._walk(module, -1)
        self._indexes = {id(node): index for index, node in enumerate(self._nodes)}
        self._by_type: dict[type, list[int]] = {}
        for index, node in enumerate(self._nodes):
            self._by_type.setdefault(type(node), []).append(index)

    def _walk(self, node: cst.CSTNode, parent: int) -> None:
        # Reads each node's fields instead of libcst's visit, which rebuilds every node it passes
        # and so costs more than the rest of the analysis; the order is libcst's own.
        nodes = self._nodes
        index = len(nodes)
        nodes.append(node)
        self._parents.append(parent)
        self._ends.append(index + 1)
        fields = _fields_in_visit_order(type(node))
        if fields is None:  # libcst's own list, which costs more to build
            for child in node.children:
                if type(child) not in LAYOUT:
                    self._walk(child, index)
        else:
            for field in fields:
                value = getattr(node, field)
                value_type = type(value)
                if value_type is tuple or value_type is list:
                    for child in value:
                        if _is_walked(type(child)):
                            self._walk(child, index)
                elif _is_walked(value_type):
                    self._walk(value, index)
        self._ends[index] = len(nodes)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        span = self.span(node)
        if span is None or self._parents[span[0]] < 0:
            return None
        return self._nodes[self._parents[span[0]]]

    def child_holding(self, ancestor: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
        """The child of ``ancestor`` that is or holds ``node`` (the statement of a body that holds an
        expression); None when ``node`` is not under ``ancestor``."""
        parent = self.parent(node)
        while parent is not None and parent is not ancestor:
            node, parent = parent, self.parent(parent)
        return None if parent is None else node

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """Whether ``inner`` is ``outer`` or under it."""
        outer_span, inner_span = self.span(outer), self.span(inner)
        if outer_span is None or inner_span is None:
            return inner is outer
        return outer_span[0] <= inner_span[0] < outer_span[1]

    def span(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """The orders (``order``) of ``node`` and of what follows all it holds; None for a node
        that is not part of this module (or layout)."""
        index = self._indexes.get(id(node))
        return None if index is None else (index, self._ends[index])

    def order(self, node: cst.CSTNode) -> int:
        """A key that sorts the module's nodes as they start in the source (a node before what it
        holds), without placing them."""
        return self._known_span(node)[0]

    def follows(self, node: cst.CSTNode, earlier: cst.CSTNode) -> bool:
        """Whether ``node`` starts after the end of ``earlier``."""
        return self._known_span(node)[0] >= self._known_span(earlier)[1]

    def _known_span(self, node: cst.CSTNode) -> tuple[int, int]:
        span = self.span(node)
        if span is None:
            raise KeyError(node)
        return span

    def findall(self, root: cst.CSTNode, matcher: m.BaseMatcherNode) -> Sequence[cst.CSTNode]:
        """What ``libcst.matchers.findall(root, matcher)`` returns, for a matcher of one node type
        (``m.Call(...)``); a node that is not part of this module is walked by libcst."""
        span = self.span(root)
        node_type = getattr(cst, type(matcher).__name__, None)
        if span is None or not isinstance(node_type, type) or node_type in LAYOUT:
            return m.findall(root, matcher)
        indexes = self._by_type.get(node_type, [])
        first, end = bisect_left(indexes, span[0]), bisect_left(indexes, span[1])
        candidates = [self._nodes[i] for i in indexes[first:end]]
        if type(matcher)() == matcher:  # no attribute to match: the type says it all
            return candidates
        try:
            matches = _fields_matcher(matcher)
        except TypeError:  # unhashable: it holds a list
            matches = None
        matches = matches or (lambda node: m.matches(node, matcher))
        return [node for node in candidates if matches(node)]

    def names(self, root: cst.CSTNode, values: Iterable[str]) -> list[cst.Name]:
        """The ``Name`` nodes under ``root`` (part of this module) spelled as one of ``values``, in
        the order of the source: looked up by spelling, so a rule asking about a few names of a long
        scope does not walk it."""
        first, end = self._known_span(root)
        found = []
        for value in set(values):
            indexes = self._names_by_value.get(value, [])
            found += indexes[bisect_left(indexes, first) : bisect_left(indexes, end)]
        return [self._nodes[i] for i in sorted(found)]

    @functools.cached_property
    def _names_by_value(self) -> dict[str, list[int]]:
        by_value: dict[str, list[int]] = {}
        for index in self._by_type.get(cst.Name, []):
            by_value.setdefault(self._nodes[index].value, []).append(index)
        return by_value

    def replay(self, visitor: cst.CSTVisitor, root: cst.CSTNode | None = None) -> None:
        """Run ``visitor`` over the module (or the subtree at ``root``) as ``root.visit(visitor)``
        does (the same calls in the same order, children skipped where ``on_visit`` says so,
        layout nodes left out) without walking it again."""
        span = (0, len(self._nodes)) if root is None else self.span(root)
        if span is None:  # not part of this module (or layout)
            root.visit(visitor)
            return
        first, end = span
        handlers = _Handlers(visitor)
        nodes, ends = self._nodes, self._ends
        leaving: list[tuple[int, cst.CSTNode, Callable]] = []  # (end of its span, node, leave), innermost last
        index = first
        while index < end:
            node = nodes[index]
            while leaving and leaving[-1][0] <= index:
                _, left, leave = leaving.pop()
                leave(left)
            visit, leave = handlers.of(type(node))
            if leave is not None:
                leaving.append((ends[index], node, leave))
            index = index + 1 if visit is None or visit(node) is not False else ends[index]
        while leaving:
            _, left, leave = leaving.pop()
            leave(left)


class _Handlers:
    """A visitor's ``visit_<Type>`` and ``leave_<Type>`` methods, looked up once per node type (None
    where it has none); a visitor that overrides ``on_visit`` or ``on_leave`` gets every call."""

    def __init__(self, visitor: cst.CSTVisitor) -> None:
        self._visitor = visitor
        self._by_type: dict[type, tuple[Callable | None, Callable | None]] = {}
        if type(visitor).on_visit is not cst.CSTVisitor.on_visit or type(visitor).on_leave is not cst.CSTVisitor.on_leave:
            # libcst enters a node's children when ``on_visit`` returns anything true.
            self._generic = (lambda node: visitor.on_visit(node) or False, visitor.on_leave)
        else:
            self._generic = None

    def of(self, node_type: type) -> tuple[Callable | None, Callable | None]:
        found = self._by_type.get(node_type)
        if found is None:
            name = node_type.__name__
            found = self._by_type[node_type] = self._generic or (self._own(f"visit_{name}"), self._own(f"leave_{name}"))
        return found

    def _own(self, name: str) -> Callable | None:
        """The visitor's method ``name``; None where it is libcst's empty one."""
        if getattr(type(self._visitor), name, None) is getattr(cst.CSTVisitor, name, None):
            return None
        return getattr(self._visitor, name)


@functools.cache
def _is_walked(value_type: type) -> bool:
    """Whether a field's value of this type is a node of the tree: ``isinstance(value, cst.CSTNode)``
    goes through ABCMeta for every field of every node, a table of types does not."""
    return issubclass(value_type, cst.CSTNode) and value_type not in LAYOUT


@functools.cache
def _fields_matcher(matcher: m.BaseMatcherNode) -> Callable[[cst.CSTNode], bool] | None:
    """A plain function answering ``m.matches(node, matcher)`` for a node of the matcher's type,
    when the matcher is made only of node types, their alternatives (``|``) and literal values
    (``m.Attribute(attr=m.Name("grad"))``); None for anything else (``MatchIfTrue``, sequences,
    metadata), which libcst answers.
    ``m.matches`` re-reads the matcher's dataclass fields on every call, which costs more than the
    rest of a ``findall``."""
    checks: list[Callable[[cst.CSTNode], bool]] = []
    for field in dataclasses.fields(matcher):
        desired = getattr(matcher, field.name)
        if desired is m.DoNotCare() or field.name == "_metadata":
            continue
        if field.name == "metadata":
            return None
        if type(desired) in (str, int, bool):
            checks.append(_field_equals(field.name, desired))
            continue
        options = desired.options if isinstance(desired, m.OneOf) else (desired,)
        alternatives = [_node_matcher(option) for option in options]
        if None in alternatives:
            return None
        checks.append(_field_matches(field.name, alternatives))
    if len(checks) == 1:
        return checks[0]
    return lambda node: all(check(node) for check in checks)


def _node_matcher(matcher: object) -> tuple[type, Callable[[cst.CSTNode], bool]] | None:
    """The node type a matcher of one node takes, and the test of its fields."""
    node_type = getattr(cst, type(matcher).__name__, None) if isinstance(matcher, m.BaseMatcherNode) else None
    fields_match = _fields_matcher(matcher) if isinstance(node_type, type) else None
    return None if fields_match is None else (node_type, fields_match)


def _field_equals(name: str, desired: object) -> Callable[[cst.CSTNode], bool]:
    return lambda node: getattr(node, name) == desired


def _field_matches(name: str, alternatives: list[tuple[type, Callable[[cst.CSTNode], bool]]]) -> Callable[[cst.CSTNode], bool]:
    if len(alternatives) == 1:
        ((node_type, fields_match),) = alternatives
        return lambda node: type(value := getattr(node, name)) is node_type and fields_match(value)
    return lambda node: any(type(value := getattr(node, name)) is t and match(value) for t, match in alternatives)


@functools.cache
def _fields_in_visit_order(node_type: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The fields of ``node_type`` that may hold nodes, in the order its
    ``_visit_and_replace_children`` visits them (each ``visit_*(self, "field", ...)`` call names its
    field); None where libcst's source cannot be read."""
    try:
        source = textwrap.dedent(inspect.getsource(node_type._visit_and_replace_children))
    except (OSError, TypeError):
        return None
    calls = [
        node for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("visit_")
        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
    ]
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    return tuple(dict.fromkeys(call.args[1].value for call in calls))
