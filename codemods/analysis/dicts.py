"""What a dict built with constant keys holds (``{"mse": mse, "l1": l1}``, ``dict(loss=loss)``,
``losses = {}`` then ``losses["total"] = total``): a ``DictOf`` its values' structure, whose keys
hold no graph. Iterating its ``items()`` yields pairs whose graph is all in the value; its
``values()`` and its items read by key are its values, each holding its graph as a list's items do.

A fact of the walk only where the walk sees every write to the dict: read through a name of the
scope being walked that no other name holds (``shared_objects``: not aliased, not handed to a call
that may keep it) and that no function inside that scope mentions (a helper may write
``losses["n"] = 0`` into it, which the walk of its caller does not see). A write at a key gradfix
cannot prove graphless, a method that may add items (``update``, ``setdefault``), or the dict
handed to a call that may write to it, leaves a dict of unknown shape. Anything else is read as any
object of unknown shape, as before (a dict's items are then guessed).

A part of ``DataflowAnalysis`` (``dataflow``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from .syntax import constant_key
from .values import DICT_KEY, NOTHING, UNKNOWN, DictOf, ListOf, Structure, TupleOf, Value, item_of, item_replaced, part

if TYPE_CHECKING:
    from .loops import Env, Scope
    from .tree import SyntaxTree


# The methods of a dict that read it and write nothing into it: what they hand back holds what the
# dict holds (its views, a lookup, a copy).
DICT_READING_METHODS = frozenset({"items", "values", "keys", "get", "copy"})

_MENTIONED_BELOW = "names mentioned in the functions below a scope"


class DictsOfKnownKeys:
    """The dict half of ``DataflowAnalysis``: the shape of dicts built with constant keys."""

    _tree: SyntaxTree
    _scope: Scope
    shared_objects: frozenset[str]

    def _known_dict(self, expression: cst.BaseExpression, value: Value) -> DictOf | None:
        """``value``'s ``DictOf``, where ``expression`` names a dict whose every write the walk sees."""
        if not isinstance(value.structure, DictOf) or type(expression) is not cst.Name:
            return None
        name = expression.value
        if name in self.shared_objects or name in self._mentioned_below(self._scope.node):
            return None
        return value.structure

    def _mentioned_below(self, scope: cst.Module | cst.FunctionDef) -> frozenset[str]:
        """The names any function or lambda inside ``scope`` (not ``scope`` itself) mentions."""

        def mentioned() -> frozenset[str]:
            inner = [*self._tree.findall(scope, cst.FunctionDef), *self._tree.findall(scope, cst.Lambda)]
            return frozenset(name.value for function in inner if function is not scope for name in self._tree.findall(function, cst.Name))

        return self._tree.kept(_MENTIONED_BELOW, scope, mentioned)

    def _dict_view(self, method: str, receiver: cst.BaseExpression, value: Value) -> Value | None:
        """``d.items()``, ``d.values()`` and ``d.keys()`` of a dict whose shape is known: what
        iterating them yields, item by item. None for anything else."""
        known = self._known_dict(receiver, value)
        if known is None:
            return None
        # (a graph freed through one of its values only may be what another value holds)
        if method == "values":
            return _told_apart(item_replaced(part(value, ListOf(known.value))), known)
        if method == "items":
            return _told_apart(item_replaced(part(value, ListOf(TupleOf((DICT_KEY, known.value))))), known)
        if method == "keys":
            return Value(structure=ListOf(DICT_KEY), graphless=True)
        return None

    def _dict_item(self, receiver: cst.BaseExpression, value: Value) -> Value | None:
        """``d[key]`` of a dict whose shape is known: one of its values."""
        known = self._known_dict(receiver, value)
        return None if known is None else _told_apart(item_replaced(item_of(value, known.value, differentiable=True)), known)

    def _dict_method_may_write(self, method: str, target: str | None, receiver: Value, env: Env) -> None:
        """A method of a dict that may add items to it (``update``, ``setdefault``, one gradfix does
        not know): its shape is no longer known."""
        if target is not None and isinstance(receiver.structure, DictOf) and method not in DICT_READING_METHODS:
            env[target] = receiver.changed(structure=UNKNOWN)


def written_at(container: Structure, target: cst.Subscript, item: Value, env: Env) -> Structure:
    """The structure of a container after ``target = item`` (``losses[key] = item``): a dict of
    known shape stays one where the key holds no graph (a constant, a key of another such dict)."""
    if not isinstance(container, DictOf):
        return container
    index = target.slice[0].slice if len(target.slice) == 1 else None
    key = index.value if type(index) is cst.Index else None
    if key is None or constant_key(key) is None and not (type(key) is cst.Name and env.get(key.value, NOTHING).structure is DICT_KEY):
        return UNKNOWN
    return DictOf(container.value.join(item.structure), container.graphs and item.graph and not item.guessed)


def _told_apart(read: Value, known: DictOf) -> Value:
    """``read`` out of a dict of ``known`` structure: its graph only guessed where not every value
    of the dict holds one (``{"loss": loss, "n": n}``: ``n`` holds none)."""
    return read if known.graphs or not read.graph else read.changed(guessed=True)


def shape_kept_by(name: str, value: Value, shared_objects: frozenset[str]) -> Value:
    """``value`` as ``name`` keeps it: a dict kept on an object (``self.stats``) or under a name
    another name may hold is read by code the walk of this scope does not see: of unknown shape."""
    if isinstance(value.structure, DictOf) and ("." in name or name in shared_objects):
        return value.changed(structure=UNKNOWN)
    return value


def unpacked_items(container: Value, count: int, differentiable: bool) -> list[Value]:
    """The values ``count`` targets unpack out of ``container`` (``a, b = pair``): each item of its
    tuple structure. A dict's key holds no graph; the item beside it then holds all the pair's graph
    (``for name, loss in losses.items()``)."""
    items = container.structure.items if isinstance(container.structure, TupleOf) and len(container.structure.items) == count else (UNKNOWN,) * count
    keys = [structure is DICT_KEY for structure in items]
    if not any(keys):
        return [item_of(container, structure, differentiable) for structure in items]
    rest_is_keys = count - sum(keys) == 1
    return [
        Value(structure=DICT_KEY, graphless=True) if key else item_of(container, structure, differentiable or rest_is_keys)
        for key, structure in zip(keys, items)
    ]
