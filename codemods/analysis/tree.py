"""One walk of a module that answers the structural questions the analysis and the rules ask again
and again: a node's parent, whether one node holds another, and the nodes of a kind under a node.

The rules ask for the nodes of a kind under a node thousands of times per file; ``SyntaxTree.findall``
answers from the one walk, by type, instead of walking the subtree again. (The analysis does not use
``libcst.matchers``: importing it costs more than checking a short file.)
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import typing
import weakref
from bisect import bisect_left
from operator import attrgetter
from typing import Any, Callable, Hashable, Iterable, TypeVar, cast

import libcst as cst

N = TypeVar("N", bound=cst.CSTNode)
T = TypeVar("T")
# A visitor class's ``visit_<Type>`` or ``leave_<Type>`` function, called with the visitor and the
# node (a visit answers False to skip the children).
Handler = Callable[[cst.CSTVisitor, cst.CSTNode], object]


# Whitespace, newlines and comments, punctuation and operators: no question of the analysis or the
# rules is about where they are (an operator is read as its expression's field), and they are more
# than half of a module's nodes. They are not in the tree (``findall`` of one of them walks the
# subtree).
LAYOUT = frozenset(
    {
        cst.SimpleWhitespace,
        cst.ParenthesizedWhitespace,
        cst.TrailingWhitespace,
        cst.EmptyLine,
        cst.Newline,
        cst.Comment,
        cst.Comma,
        cst.Dot,
        cst.Colon,
        cst.Semicolon,
        cst.AssignEqual,
        cst.LeftParen,
        cst.RightParen,
        cst.LeftSquareBracket,
        cst.RightSquareBracket,
        cst.LeftCurlyBrace,
        cst.RightCurlyBrace,
        *(
            getattr(cst, operator.__name__)
            for kind in (cst.BaseBinaryOp, cst.BaseAugOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp)
            for operator in kind.__subclasses__()
        ),
    }
)


class SyntaxTree:
    # Nodes are known by their place in ``_nodes`` and looked up by ``id``: libcst defines a node's
    # hash in Python, and hashing each node a few times cost a fifth of building the tree.
    def __init__(self, module: cst.Module) -> None:
        self._nodes: list[cst.CSTNode] = []  # in the order libcst visits them (each node before what it holds)
        self._ends: list[int] = []  # by index: one past the index of the node's last descendant
        self._parents: list[int] = []  # by index: the parent's index (-1 for the module)
        self._indexes: dict[int, int] = {}  # by id of the node
        self._by_type: dict[type, list[int]] = {}
        self._kept: dict[tuple[Hashable, int], object] = {}  # answers of ``kept``, by question and index
        self._walk(module, -1)

    def _walk(self, node: cst.CSTNode, parent: int) -> None:
        # Reads each node's fields instead of libcst's visit, which rebuilds every node it passes
        # and so costs more than the rest of the analysis; the order is libcst's own.
        nodes = self._nodes
        index = len(nodes)
        nodes.append(node)
        self._parents.append(parent)
        self._ends.append(index + 1)
        self._indexes[id(node)] = index
        node_type = type(node)
        of_type = self._by_type.get(node_type)
        if of_type is None:
            of_type = self._by_type[node_type] = []
        of_type.append(index)
        read_fields = _field_reader(node_type)
        child: cst.CSTNode  # (what a node holds in a sequence field is a node)
        if read_fields is _NO_FIELDS:  # (a name, a number: more than a third of the nodes)
            return
        if read_fields is None:  # libcst's own list, which costs more to build
            for child in node.children:
                if type(child) not in LAYOUT:
                    self._walk(child, index)
        else:
            for value in read_fields(node):
                value_type: type = type(value)
                if value_type is tuple or value_type is list:
                    for child in value:
                        if _is_walked(type(child)):
                            self._walk(child, index)
                elif _is_walked(value_type):
                    self._walk(value, index)
        self._ends[index] = len(nodes)

    @property
    def module(self) -> cst.Module:
        return cst.ensure_type(self._nodes[0], cst.Module)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        span = self.span(node)
        if span is None or self._parents[span[0]] < 0:
            return None
        return self._nodes[self._parents[span[0]]]

    def scope_of(self, node: cst.CSTNode | None) -> cst.FunctionDef | cst.Module | None:
        """The function (or the module) that holds ``node``, itself if it is one."""
        while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
            node = self.parent(node)
        return node

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

    def findall(self, root: cst.CSTNode, node_type: type[N], where: Callable[[N], object] | None = None) -> list[N]:
        """The nodes of ``node_type`` under ``root`` (``root`` included) that ``where`` accepts, in
        the order of the source; a node that is not part of this module is walked (``find_nodes``)."""
        span = self.span(root)
        if span is None or node_type in LAYOUT:
            return find_nodes(root, node_type, where)
        indexes = self._by_type.get(node_type, [])
        first, end = bisect_left(indexes, span[0]), bisect_left(indexes, span[1])
        # (the nodes of ``_by_type[node_type]`` are of that type)
        found = cast("list[N]", [self._nodes[i] for i in indexes[first:end]])
        return found if where is None else [node for node in found if where(node)]

    def names(self, root: cst.CSTNode, values: Iterable[str]) -> list[cst.Name]:
        """The ``Name`` nodes under ``root`` (part of this module) spelled as one of ``values``, in
        the order of the source: looked up by spelling, so a rule asking about a few names of a long
        scope does not walk it."""
        first, end = self._known_span(root)
        found = []
        for value in set(values):
            indexes = self._names_by_value.get(value, [])
            found += indexes[bisect_left(indexes, first) : bisect_left(indexes, end)]
        return cast("list[cst.Name]", [self._nodes[i] for i in sorted(found)])

    def kept(self, question: Hashable, node: cst.CSTNode, answer: Callable[[], T]) -> T:
        """``answer()``, the answer to ``question`` about ``node`` from its syntax alone, computed
        once for a node of this module: the analysis asks the same of a loop's body at each of its
        passes and each round of the summaries."""
        index = self._indexes.get(id(node))
        if index is None:  # (not part of this module: its id may be another node's later)
            return answer()
        key = (question, index)
        if key not in self._kept:
            self._kept[key] = answer()
        return self._kept[key]  # type: ignore[return-value]

    @functools.cached_property
    def _names_by_value(self) -> dict[str, list[int]]:
        by_value: dict[str, list[int]] = {}
        for index in self._by_type.get(cst.Name, []):
            by_value.setdefault(cast("cst.Name", self._nodes[index]).value, []).append(index)
        return by_value

    def replay(self, visitor: cst.CSTVisitor, root: cst.CSTNode | None = None) -> None:
        """Run ``visitor`` over the module (or the subtree at ``root``) as ``root.visit(visitor)``
        does (the same calls in the same order, children skipped where ``on_visit`` says so,
        layout nodes left out) without walking it again."""
        if root is not None and self.span(root) is None:  # not part of this module (or layout)
            root.visit(visitor)
            return
        first, end = (0, len(self._nodes)) if root is None else self._known_span(root)
        handlers = _HANDLERS.setdefault(type(visitor), {})
        nodes, ends = self._nodes, self._ends
        leaving: list[tuple[int, cst.CSTNode, Handler]] = []  # (end of its span, node, leave), innermost last
        index = first
        while index < end:
            node = nodes[index]
            while leaving and leaving[-1][0] <= index:
                _, left, leave_left = leaving.pop()
                leave_left(visitor, left)
            node_type = type(node)
            found = handlers.get(node_type)
            if found is None:
                found = handlers[node_type] = _handlers(type(visitor), node_type)
            visit, leave = found
            if leave is not None:
                leaving.append((ends[index], node, leave))
            index = index + 1 if visit is None or visit(visitor, node) is not False else ends[index]
        while leaving:
            _, left, leave_left = leaving.pop()
            leave_left(visitor, left)


# Each visitor class's handlers (``_handlers``), by node type: looked up once, not at each replay
# (the analysis replays its visitors over thousands of bodies a file).
_HANDLERS: weakref.WeakKeyDictionary[type, dict[type, tuple[Handler | None, Handler | None]]] = weakref.WeakKeyDictionary()


def _handlers(visitor_type: type[cst.CSTVisitor], node_type: type) -> tuple[Handler | None, Handler | None]:
    """A visitor class's ``visit_<Type>`` and ``leave_<Type>`` functions for ``node_type`` (None
    where it has libcst's empty one), called with the visitor and the node; a visitor that
    overrides ``on_visit`` or ``on_leave`` gets every call."""
    if visitor_type.on_visit is not cst.CSTVisitor.on_visit or visitor_type.on_leave is not cst.CSTVisitor.on_leave:
        # libcst enters a node's children when ``on_visit`` returns anything true.
        return (lambda visitor, node: visitor.on_visit(node) or False), visitor_type.on_leave
    name = node_type.__name__
    return _own(visitor_type, f"visit_{name}"), _own(visitor_type, f"leave_{name}")


def _own(visitor_type: type[cst.CSTVisitor], name: str) -> Handler | None:
    """The visitor class's function ``name``; None where it is libcst's empty one."""
    found: Handler | None = getattr(visitor_type, name, None)
    return None if found is getattr(cst.CSTVisitor, name, None) else found


def node_types(*kinds: type) -> frozenset[type]:
    """The node classes that are ``kinds`` or derive from them: ``type(node) in`` this answers
    ``isinstance(node, kinds)`` without going through ABCMeta, as every ``isinstance`` of a LibCST
    class that fails does (millions of times in the analysis of a long file)."""
    found: set[type] = set()
    pending: list[type] = list(kinds)
    while pending:
        kind = pending.pop()
        if kind not in found:
            found.add(kind)
            pending += kind.__subclasses__()
    return frozenset(found)


def find_nodes(root: cst.CSTNode, node_type: type[N], where: Callable[[N], object] | None = None) -> list[N]:
    """The nodes of ``node_type`` under ``root`` (``root`` included) that ``where`` accepts, in the
    order of the source, by walking ``root``: for nodes that are not part of an analysed module."""
    found: list[N] = []
    pending = [root]
    while pending:
        node = pending.pop()
        if type(node) is node_type and (where is None or where(node)):
            found.append(node)
        pending.extend(reversed(node.children))
    return found


@functools.cache
def _is_walked(value_type: type) -> bool:
    """Whether a field's value of this type is a node of the tree: ``isinstance(value, cst.CSTNode)``
    goes through ABCMeta for every field of every node, a table of types does not."""
    return issubclass(value_type, cst.CSTNode) and value_type not in LAYOUT


def _no_fields(node: cst.CSTNode) -> tuple[Any, ...]:
    return ()


_NO_FIELDS = _no_fields  # the reader of a node that holds no node of the tree


@functools.cache
def _field_reader(node_type: type[cst.CSTNode]) -> Callable[[cst.CSTNode], tuple[Any, ...]] | None:
    """The values of a node's fields that may hold nodes of the tree, in visit order, read in one
    call: each a node, a sequence of nodes, or a token's value, told apart by type
    (``SyntaxTree._walk``). A field whose declared type holds only layout (parentheses, commas,
    whitespace) is not read."""
    fields = _fields_in_visit_order(node_type)
    if fields is None:
        return None
    hints = typing.get_type_hints(node_type)
    fields = tuple(field for field in fields if field not in hints or not _only_layout(hints[field]))
    if not fields:
        return _NO_FIELDS
    if len(fields) == 1:
        read = attrgetter(*fields)
        return lambda node: (read(node),)
    return attrgetter(*fields)


def _only_layout(declared: Any) -> bool:
    """Whether a field of this declared type can hold no node of the tree: only layout nodes,
    ``MaybeSentinel`` or plain values, one or a sequence of them."""
    arguments = typing.get_args(declared)
    if arguments:
        return all(_only_layout(argument) for argument in arguments)
    if not isinstance(declared, type) or declared is object:
        return False
    # By name: libcst's slotted node classes replace the classes they were made from, which stay
    # among their bases' subclasses.
    return not issubclass(declared, cst.CSTNode) or all(kind.__name__ in _LAYOUT_NAMES for kind in node_types(declared) if not kind.__subclasses__())


_LAYOUT_NAMES = frozenset(kind.__name__ for kind in LAYOUT)


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
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id.startswith("visit_")
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ]
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    return tuple(dict.fromkeys(field.value for call in calls if isinstance(field := call.args[1], ast.Constant) and isinstance(field.value, str)))
