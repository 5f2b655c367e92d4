"""One walk of a module that answers the structural questions the analysis and the rules ask again
and again: a node's parent, whether one node holds another, and the nodes of a kind under a node.

``libcst.matchers.findall`` walks the whole subtree on every call (rebuilding each node it passes),
and the rules ask it thousands of times per file; ``SyntaxTree.findall`` answers from the one walk,
with the same nodes in the same order.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

import libcst as cst
import libcst.matchers as m


class SyntaxTree:
    def __init__(self, module: cst.Module) -> None:
        walk = _Walk()
        module.visit(walk)
        self._parents = walk.parents
        self._nodes = walk.nodes  # in the order libcst visits them (each node before what it holds)
        self._spans = walk.spans  # node -> (its index, one past the index of the last node it holds)
        self._by_type: dict[type, list[int]] = {}
        for index, node in enumerate(self._nodes):
            self._by_type.setdefault(type(node), []).append(index)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(node)

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """Whether ``inner`` is ``outer`` or under it."""
        outer_span, inner_span = self._spans.get(outer), self._spans.get(inner)
        if outer_span is None or inner_span is None:
            return inner is outer
        return outer_span[0] <= inner_span[0] < outer_span[1]

    def findall(self, root: cst.CSTNode, matcher: m.BaseMatcherNode) -> Sequence[cst.CSTNode]:
        """What ``libcst.matchers.findall(root, matcher)`` returns, for a matcher of one node type
        (``m.Call(...)``); a node that is not part of this module is walked by libcst."""
        span = self._spans.get(root)
        node_type = getattr(cst, type(matcher).__name__, None)
        if span is None or not isinstance(node_type, type):
            return m.findall(root, matcher)
        indexes = self._by_type.get(node_type, [])
        first, end = bisect_left(indexes, span[0]), bisect_left(indexes, span[1])
        candidates = [self._nodes[i] for i in indexes[first:end]]
        if type(matcher)() == matcher:  # no attribute to match: the type says it all
            return candidates
        return [node for node in candidates if m.matches(node, matcher)]

    def replay(self, visitor: cst.CSTVisitor) -> None:
        """Run ``visitor`` over the module as ``module.visit(visitor)`` does (the same calls in the
        same order, children skipped where ``on_visit`` says so) without walking it again."""
        leaving: list[tuple[int, cst.CSTNode]] = []  # (end of its span, node), innermost last
        index = 0
        while index < len(self._nodes):
            node = self._nodes[index]
            while leaving and leaving[-1][0] <= index:
                visitor.on_leave(leaving.pop()[1])
            end = self._spans[node][1]
            leaving.append((end, node))
            index = index + 1 if visitor.on_visit(node) else end
        while leaving:
            visitor.on_leave(leaving.pop()[1])


class _Walk(cst.CSTVisitor):
    def __init__(self) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.nodes: list[cst.CSTNode] = []
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self._open: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._open:
            self.parents[node] = self._open[-1]
        self.spans[node] = (len(self.nodes), len(self.nodes))
        self.nodes.append(node)
        self._open.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._open.pop()
        self.spans[original_node] = (self.spans[original_node][0], len(self.nodes))
