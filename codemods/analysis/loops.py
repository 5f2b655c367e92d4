"""Loops as the dataflow interpreter walks them, and the facts it keeps on each.

A loop (a ``for``, a ``while``, or a method of an nn.Module whose calls act as iterations) keeps the
values that enter it and those an iteration leaves for the next (its back edge). Names an iteration
may hand to the next get a ``Carried`` marker at the loop's head, standing for "whatever this name
held when the iteration started"; an element a loop variable picks from a container is an
``Element``. ``expand`` replaces the markers by what they stand for. Paths meet in ``join_envs``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not
from typing import TYPE_CHECKING, Iterable, Sequence, Union

import libcst as cst

from .assignments import assigned_names, read_before_assigned
from .syntax import dotted_name, is_detach, method_called, method_receiver
from .values import CONSTANT, NONE, NOTHING, LoopMarker, Source, Value, joined

if TYPE_CHECKING:
    from .tree import SyntaxTree

Env = dict[str, Value]
LoopNode = Union[cst.For, cst.While, cst.FunctionDef]


@dataclass(eq=False)
class Scope:
    node: Union[cst.Module, cst.FunctionDef]
    class_name: str | None = None
    in_module_class: bool = False  # a method of an nn.Module other than __init__: walked as repeated calls


@dataclass(eq=False)
class Loop:
    """A ``for``/``while`` loop, or a method of an nn.Module whose calls act as iterations."""

    node: LoopNode
    parent: "Loop | None"
    scope: Scope
    carried_names: frozenset[str]
    entry: Env = field(default_factory=dict)  # values before the first iteration
    back_edge: Env = field(default_factory=dict)  # values at the end of an iteration
    returned: Value = NOTHING  # for methods: what a call returns
    returns: tuple[Value, ...] = ()  # (what each of its ``return`` statements does)
    freed_at_entry: frozenset[str] = frozenset()  # names holding a freed graph when the loop starts
    # By name: another name the loop empties in place (``pending.clear()``) that may hold the same
    # list (``pending = losses`` on some path only): the name may hold no graph after it.
    maybe_emptied_through: dict[str, str] = field(default_factory=dict)
    # A loop that runs once at most (``for i in range(1):``): no iteration follows another, and
    # nothing is carried from one to the next.
    runs_once: bool = False
    _written_beside_a_detach: frozenset[str] | None = field(default=None, init=False, repr=False)  # (``detaches``, once)

    def __post_init__(self) -> None:
        if self.runs_once:
            self.carried_names = frozenset()

    @property
    def is_call(self) -> bool:
        return type(self.node) is cst.FunctionDef

    @property
    def body(self) -> cst.BaseSuite:
        return self.node.body

    def encloses(self, other: "Loop | None") -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False

    # What an iteration hands the next: asked of the loop, answered once.
    def carries(self, name: str) -> bool:
        """Whether an iteration reads ``name`` before it assigns it (``total = total + loss``): what
        it reads is what the previous iteration left."""
        return name in self._read_before_assigned

    def carried_with(self, statements: Sequence[cst.CSTNode]) -> frozenset[str]:
        """The names an iteration would carry (``carries``) with ``statements`` added at the end of
        the body (code a fix would move into the loop)."""
        return frozenset(read_before_assigned([*self.node.body.body, *statements]))

    @cached_property
    def _read_before_assigned(self) -> frozenset[str]:
        return self.carried_with(())

    def carries_graph(self, name: str, value: Value) -> bool:
        """Whether ``value`` is built from the graph ``name`` held as the previous iteration left it."""
        left_behind = self.back_edge.get(name)
        return left_behind is not None and left_behind.graph and self.built_from_previous(name, value)

    def built_from_previous(self, name: str, value: Value) -> bool:
        """Whether ``value`` is built from what ``name`` held when the iteration (the call) started."""
        return Carried(self, name) in expand(value.origins, self)

    def detaches(self, name: str, tree: SyntaxTree) -> bool:
        """Whether a statement of the loop that writes ``name`` detaches something it assigns
        (``if it > 0: h = h.detach()``): the author manages that state, on paths the analysis
        does not tell apart. ``tree``: the module's (the nodes looked up, not walked)."""
        if self._written_beside_a_detach is None:
            detaching = (
                statement
                for statement in tree.findall(self.node.body, cst.SimpleStatementLine)
                if any(type(small) is cst.Assign and tree.findall(small.value, cst.Call, is_detach) for small in statement.body)
            )
            written: set[str | None] = {name for statement in detaching for name in assigned_names(statement, tree=tree)}
            # (detached in place, ``h.detach_()``, or bound to its data, ``h = h.data``)
            written |= {dotted_name(method_receiver(call)) for call in tree.findall(self.node.body, cst.Call) if method_called(call) == "detach_"}
            written |= {
                dotted_name(target.target)
                for assign in tree.findall(self.node.body, cst.Assign)
                if type(assign.value) is cst.Attribute and assign.value.attr.value == "data"
                for target in assign.targets
            }
            self._written_beside_a_detach = frozenset(name for name in written if name is not None)
        return name in self._written_beside_a_detach


class _LoopMarker(LoopMarker):
    """A marker that names its loop by a weak reference. The loop keeps the values that hold its
    markers; naming it strongly would make a cycle, and leave each file's syntax tree to the cycle
    collector, which walks all of it, instead of freeing it when the file is done."""

    _loop: weakref.ref[Loop]

    @property
    def loop(self) -> Loop | None:
        """The loop; None once nothing else holds it (a walk of a function the dataflow replaced
        by a walk with its callers' arguments)."""
        return self._loop()


@dataclass(frozen=True, init=False)
class Carried(_LoopMarker):
    """The value ``name`` had when an iteration of ``loop`` started."""

    _loop: weakref.ref[Loop]
    name: str

    def __init__(self, loop: "Loop", name: str) -> None:
        object.__setattr__(self, "_loop", weakref.ref(loop))
        object.__setattr__(self, "name", name)


@dataclass(frozen=True, init=False)
class Element(_LoopMarker):
    """An element picked from a container by a variable of ``loop`` (``losses[i]``): another
    element, with a graph of its own, in every iteration of that loop; to any other loop, the
    graph of the whole container (``origins``)."""

    _loop: weakref.ref[Loop]
    node: cst.CSTNode
    origins: frozenset[Source]

    def __init__(self, loop: "Loop", node: cst.CSTNode, origins: frozenset[Source]) -> None:
        object.__setattr__(self, "_loop", weakref.ref(loop))
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "origins", origins)


@dataclass
class Frame:
    """What left a loop's iteration or a call's body early (continues, breaks, returns), and what
    the returns and yields handed back."""

    loop: Loop | None
    # Of a loop's pass: the environment at its head (``Carried`` names joined with what the previous
    # iteration left), and the one before the loop.
    head: Env = field(default_factory=dict)
    before: Env = field(default_factory=dict)
    continues: list[Env] = field(default_factory=list)
    breaks: list[Env] = field(default_factory=list)
    returns: list[Env] = field(default_factory=list)
    returned: list[Value] = field(default_factory=list)
    # Each return's items, when it returns a tuple written out (``return loss, acc.item()``); None
    # for a return of anything else.
    returned_items: list[list[Value] | None] = field(default_factory=list)
    # Each return's items by key, when it returns a dict built with constant keys (``return
    # dict(loss=loss)``); None for a return of anything else.
    returned_keys: list[dict[str, Value] | None] = field(default_factory=list)
    # For each return, the parameters whose truth its path tested (``if return_latents: return y, z``).
    returned_truths: list[dict[str, bool]] = field(default_factory=list)
    yielded: list[Value] = field(default_factory=list)

    def leave_by(self, ends: list[Env | None], last: bool | None) -> list[Env | None]:
        """``ends``, the ends of an ``if``'s arm taken (``last`` True) and of what its test false
        leads to, with the one only the loop's last iteration reaches (``guards.last_iteration_arm``)
        left as the loop's way out, a ``break``."""
        if last is not None and (left := ends[0 if last else 1]) is not None:
            self.breaks.append(left)
            ends = [None, *ends[1:]] if last else [ends[0], None, *ends[2:]]
        return ends

    def returned_given(self) -> dict[tuple[str, bool], Value]:
        """What a call returns when it passes a parameter that one of the returns' paths tested as
        True or as False: the returns that path may take."""
        given: dict[tuple[str, bool], Value] = {}
        for parameter in dict.fromkeys(name for truths in self.returned_truths for name in truths):
            for truth in (True, False):
                taken = [value for value, truths in zip(self.returned, self.returned_truths) if truths.get(parameter, truth) is truth]
                if taken:
                    given[(parameter, truth)] = joined(taken)
        return given

    def items_returned(self, given: tuple[str, bool] | None = None) -> tuple[Value, ...] | None:
        """What each position of the tuple every return writes out may hold; None unless each
        return writes one of the same length, or returns a value proved to hold no graph, whose
        items hold none (``return action.detach().numpy()`` beside ``return action, log_prob``),
        and nothing is yielded. ``given``: of the returns a call passing that parameter's truth
        may take (as ``returned_given``)."""
        if self.yielded or not self.returned_items:
            return None
        parameter, truth = given or ("", True)
        taken = [
            (items, value)
            for items, value, truths in zip(self.returned_items, self.returned, self.returned_truths)
            if truths.get(parameter, truth) is truth
        ]
        if any(items is None and not value.graphless for items, value in taken):
            return None
        lengths = {len(items) for items, _ in taken if items is not None}
        if len(lengths) != 1:
            return None
        length = lengths.pop()
        returned = [items if items is not None else [CONSTANT] * length for items, _ in taken]
        return tuple(joined([items[position] for items in returned]) for position in range(length))

    def keys_returned(self) -> dict[str, Value] | None:
        """What each key of the dict every return builds may hold, for the keys every one of them
        has; None unless each return builds a dict with constant keys, and nothing is yielded."""
        if self.yielded or not self.returned_keys or any(keys is None for keys in self.returned_keys):
            return None
        every = [keys for keys in self.returned_keys if keys is not None]
        shared = [key for key in every[0] if all(key in keys for keys in every)]
        return {key: joined([keys[key] for keys in every]) for key in shared}

    def items_given(self) -> dict[tuple[str, bool], tuple[Value, ...] | None]:
        """``items_returned`` for each truth of a parameter that a return's path tested."""
        return {key: self.items_returned(key) for key in self.returned_given()}


def join_envs(envs: Sequence[Env | None]) -> Env | None:
    """Where paths meet; a name missing on one of them may be unbound there. A name that holds the
    very same value on every path keeps it (and with it, the names it is an alias of): most names
    of a long script are untouched by any one loop or branch, and joining each would cost as much
    as the rest of the analysis."""
    live = [env for env in envs if env is not None]
    if not live:
        return None
    joined = dict(live[0])
    for env in live[1:]:
        for name in _names_to_join(joined, env):
            held, value = joined.get(name), env.get(name)
            if value is None:
                joined[name] = joined[name].changed(unbound=True)  # (held: bound on the other path)
            elif held is None:
                joined[name] = value.changed(unbound=True)
            else:
                joined[name] = join_values(held, value)
    return joined


def join_values(held: Value, value: Value) -> Value:
    """What a name that two meeting paths both bind holds: the very same value is kept, except None
    (None joined with itself: may be None)."""
    return held if held is value and held.structure is not NONE else held.join(value)


_STRUCTURE = attrgetter("structure")


def _names_to_join(joined: Env, env: Env) -> Iterable[str]:
    """The names whose join differs from what ``joined`` holds: those missing on one side, held as
    different objects, or holding None (None joined with itself: may be None). Paths copied from
    one environment keep its names in its order, and add new ones after them; the values of the
    names they share are then compared by position, in C, as a long script's module body meets
    thousands of times and changes a few names each time."""
    shared = min(len(joined), len(env))
    names, other_names = list(joined), list(env)
    if names[:shared] != other_names[:shared]:
        every_name = dict.fromkeys(chain(names, other_names))
        return [name for name in every_name if joined.get(name) is not env.get(name) or env[name].structure is NONE]
    changed = compress(names, map(is_not, joined.values(), env.values()))
    nones = compress(other_names, map(is_, map(_STRUCTURE, env.values()), repeat(NONE)))
    # (in order: the names new to ``joined`` are added in the order the path assigned them)
    return dict.fromkeys(chain(changed, nones, names[shared:], other_names[shared:]))


def same_graphs(a: Env, b: Env) -> bool:
    return a.keys() == b.keys() and all(
        (a[k].graph, a[k].origins, a[k].freed, a[k].backwarded) == (b[k].graph, b[k].origins, b[k].freed, b[k].backwarded) for k in a
    )


def expand(origins: frozenset[Source], within: Loop | None, loops_read: list[tuple[Loop, Env, Env]] | None = None) -> frozenset[Source]:
    """``origins`` with the ``Carried`` markers of loops nested inside ``within`` (of every loop when
    ``within`` is None) replaced by what they stand for: what entered that loop and what one of its
    iterations left behind. Markers of ``within`` itself and of outer loops are kept. ``loops_read``
    collects each loop whose entry and back edge the result was read from, with them."""
    result: set[Source] = set()
    pending = list(origins)
    seen: set[Source] = set()
    while pending:
        source = pending.pop()
        if source in seen:
            continue
        seen.add(source)
        result.add(source)
        if isinstance(source, Element):
            if source.loop is not within:
                pending.extend(source.origins)
            continue
        if isinstance(source, Carried) and (loop := source.loop) is not None and loop is not within and (within is None or within.encloses(loop)):
            if loops_read is not None:
                loops_read.append((loop, loop.entry, loop.back_edge))
            for env in (loop.entry, loop.back_edge):
                if source.name in env:
                    pending.extend(env[source.name].origins)
    return frozenset(result)
