"""The abstract values the dataflow analysis computes for names and expressions.

A ``Value`` answers three questions about what a name holds at one point of a program:

* does it carry an autograd graph (``graph``)?
* which places built the interior nodes of that graph (``origins``)? Leaf parameters build none,
  so two losses that only share parameters share no origin, while two heads on one encoder output
  share the encoder call.
* what shape of container is it (``structure``): a tensor, a tuple of them, a list of them, ``None``, a function of torch's
  or unknown? The rewrites need it to write a correct ``.detach()``.

Once a backward that does not keep its graph (``retain_graph`` false, as written) has run, the
values whose graph it walked are ``freed``: using them in another backward fails. A backward that keeps
the graph, or whose ``retain_graph`` gradfix cannot evaluate, frees nothing the analysis can prove. The tensor it backwarded itself also records the call (``backwarded``), on every path
(a must-fact, so a duplicate backward can be removed). Assigning a new value clears that, so the analysis can tell a state that crosses
into the next iteration after its backward from one that is reset first.

A loop's head is where values from before the loop meet values from the previous iteration. Names
assigned in a loop get a ``Carried`` origin there, standing for "whatever this name held when the
iteration started", so a rule can tell a graph built in this iteration from one carried into it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import reduce
from typing import Iterable, Sequence, TypeVar, Union

import libcst as cst

C = TypeVar("C", bound=type)


def _stored_in_its_dict(cls: C) -> C:
    """A frozen dataclass whose constructor stores each field in the instance's dict, as
    ``Value.changed`` copies it: the same parameters, defaults and factories, and the same dict,
    in the same order. The constructor ``dataclasses`` writes for a frozen class calls
    ``object.__setattr__`` once a field (the class's own ``__setattr__`` refuses), and the
    dataflow makes about 450,000 values and 100,000 origins over diffusers' parsed files (their
    dataflow: 9.65 -> 9.14 s CPU)."""
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__}: only plain fields are stored this way")
    defaults, factories = {}, {}
    parameters, stores = [], []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
            parameters.append(f"{f.name}=defaults[{f.name!r}]")
            stores.append(f"    stored[{f.name!r}] = {f.name}\n")
        elif f.default_factory is not dataclasses.MISSING:
            factories[f.name] = f.default_factory
            parameters.append(f"{f.name}=made")
            stores.append(f"    stored[{f.name!r}] = factories[{f.name!r}]() if {f.name} is made else {f.name}\n")
        else:
            parameters.append(f.name)
            stores.append(f"    stored[{f.name!r}] = {f.name}\n")
    namespace = {"defaults": defaults, "factories": factories, "made": object()}
    exec(f"def __init__(self, {', '.join(parameters)}):\n    stored = self.__dict__\n{''.join(stores)}", namespace)
    setattr(cls, "__init__", namespace["__init__"])
    return cls


@_stored_in_its_dict
@dataclass(frozen=True)
class Origin:
    """An expression that creates interior autograd nodes, and the statement it belongs to.
    Nodes compare by identity, so the origins a loop body builds are equal from pass to pass.
    ``possible``: the expression only may create nodes, from a graph gradfix did not see (every
    graph it was given is only possible: ``Value.possible``). ``part``: the key of the items of the
    dict a call returns that hold a part of its graph no other item holds (``sharing_groups``)."""

    node: cst.CSTNode
    statement: cst.BaseStatement
    possible: bool = False
    part: str | None = None


class LoopMarker:
    """A source that stands for what a loop's iterations built: what a name held when an iteration
    started (``loops.Carried``), an element a loop variable picked (``loops.Element``)."""


Source = Union[Origin, LoopMarker]


class Structure:
    """The container shape of a value; subclasses are the known shapes."""

    def join(self, other: "Structure") -> "Structure":
        if other is EMPTY:
            return self
        if self is EMPTY:
            return other
        return self if self == other else UNKNOWN


@dataclass(frozen=True)
class _Named(Structure):
    name: str

    def __repr__(self) -> str:
        return self.name


TENSOR = _Named("tensor")
EMPTY: Structure = _Named("empty")  # the items of an empty list literal: whatever is appended later
UNKNOWN = _Named("unknown")
NONE = _Named("None")
NUMBER = _Named("number")  # a Python int or float literal: no .detach()
DISTRIBUTION = _Named("distribution")  # a torch.distributions object
DICT_KEY = _Named("key")  # a key of a ``DictOf``: no graph


@dataclass(frozen=True)
class TupleOf(Structure):
    items: tuple[Structure, ...]

    def join(self, other: Structure) -> Structure:
        if other is EMPTY:
            return self
        if type(other) is TupleOf and type(self) is TupleOf and len(other.items) == len(self.items):
            return TupleOf(tuple(a.join(b) for a, b in zip(self.items, other.items)))
        return UNKNOWN


@dataclass(frozen=True)
class RecordOf(TupleOf):
    """A named tuple of a class the file defines (``LIFState(v, i)``): a tuple whose rebuilt copy
    must be the same class, since the code reads its fields by name (``state.v``)."""

    name: str = ""

    def join(self, other: Structure) -> Structure:
        if other is EMPTY:
            return self
        if isinstance(other, RecordOf) and other.name == self.name and len(other.items) == len(self.items):
            return RecordOf(tuple(a.join(b) for a, b in zip(self.items, other.items)), self.name)
        return UNKNOWN


@dataclass(frozen=True)
class ListOf(Structure):
    item: Structure

    def join(self, other: Structure) -> Structure:
        if other is EMPTY:
            return self
        if isinstance(other, ListOf):
            return ListOf(self.item.join(other.item))
        return UNKNOWN


@dataclass(frozen=True)
class DictOf(Structure):
    """A dict whose keys hold no graph (``dicts``), of values of the structure ``value``;
    ``graphs``: every value written to it holds a graph for certain (else one read out of it by a
    key gradfix cannot tell may be one that holds none: ``{"loss": loss, "n": n}``)."""

    value: Structure
    graphs: bool = False

    def join(self, other: Structure) -> Structure:
        if other is EMPTY:
            return self
        if isinstance(other, DictOf):
            return DictOf(self.value.join(other.value), self.graphs and other.graphs)
        return UNKNOWN


@dataclass(frozen=True)
class FunctionOf(Structure):
    """A function of torch's, held as a value (``cost = F.mse_loss``): one of ``names`` on every
    path here. Where two paths meet, each holding such a function, the name holds one of either: a
    call of it has the facts every one of them has (must) and those any one has (may); where one
    path holds anything else, it is a value of unknown shape, whose call is code gradfix did not read."""

    names: frozenset[str]

    def join(self, other: Structure) -> Structure:
        if other is EMPTY:
            return self
        if type(other) is FunctionOf:
            return self if other.names <= self.names else FunctionOf(self.names | other.names)
        return UNKNOWN


@_stored_in_its_dict
@dataclass(frozen=True)
class Value:
    graph: bool = False
    origins: frozenset[Source] = field(default_factory=frozenset)
    structure: Structure = UNKNOWN
    may_be_none: bool = False
    freed: bool = False  # a backward that already ran, without retain_graph, walked (and freed) part of its graph
    # The backward calls that already backwarded this very tensor on every path here.
    backwarded: frozenset[cst.Call] = frozenset()
    unbound: bool = False  # on some path here the name was never assigned
    # Proved to carry no graph: a number, a string, a tensor made by a factory, a ``.detach()`` or
    # ``.item()``, anything computed with gradients off, a module or optimizer object. ``graph``
    # false alone only says the analysis saw none (a parameter, an unknown call's result).
    graphless: bool = False
    # Its graph is only guessed: it came through an item of a tuple or a container of unknown
    # shape (``out, idx = model(x)``: ``idx`` may be integers) or out of a function gradfix cannot
    # read. Enough to report; a rewrite that cuts this value's graph needs it proved.
    guessed: bool = False
    # Its graph came out of code gradfix did not read (a function of another package, a parameter
    # called): a guess of the first kind, which no fact of the file can settle. (An item of a
    # tuple the file's own code builds is guessed, not unread.)
    unread: bool = False
    # Its graph is only possible: no graph gradfix saw reaches it, but it comes out of a call of code
    # gradfix did not read that may run parameters it did not see (a method of a module of another
    # file, a callable it was handed: ``UNREAD_PARAMETERS``). A may-fact: what may hold, free or
    # share a graph reads it; what must (a finding of the default output, a safe rewrite) does not.
    possible: bool = False
    # Freed only through values that may no longer be what was stored (``item_replaced``: an item of
    # a container gradfix stopped knowing item by item, which code it does not follow may have
    # written since): a may-fact of ``freed``. A finding that rests on the freed graph is a hint.
    freed_unsure: bool = False
    # Of ``origins``, those it holds only through code gradfix did not read (``augment(fake)`` of
    # another package may hand back a copy without ``fake``'s graph) or through an operand whose
    # graph is only guessed (a helper whose walk could not tell its items apart, added to a loss):
    # a may-fact of ``origins``. What must share a graph with another value (a finding of the
    # default output) does not read them; what may (a freed graph walked again, a graph a later
    # backward needs) does.
    uncertain_origins: frozenset[Source] = frozenset()

    def join(self, other: "Value") -> "Value":
        """What a name may hold where two paths meet."""
        structures = [v.structure for v in (self, other) if v.structure is not NONE]
        structure = structures[0] if structures else NONE
        for extra in structures[1:]:
            structure = structure.join(extra)
        return Value(
            graph=self.graph or other.graph,
            origins=self.origins | other.origins,
            structure=structure,
            may_be_none=self.may_be_none or other.may_be_none or NONE in (self.structure, other.structure),
            freed=self.freed or other.freed,
            freed_unsure=(self.freed or other.freed) and all(v.freed_unsure for v in (self, other) if v.freed),
            backwarded=self.backwarded & other.backwarded,
            unbound=self.unbound or other.unbound,
            graphless=self.graphless and other.graphless,
            guessed=(self.graph and self.guessed) or (other.graph and other.guessed),
            unread=(self.graph and self.unread) or (other.graph and other.unread),
            possible=(self.graph or other.graph) and all(v.possible for v in (self, other) if v.graph),
            uncertain_origins=_held_only_uncertainly((self, other)) if self.uncertain_origins or other.uncertain_origins else frozenset(),
        )

    def changed(self, **fields: object) -> "Value":
        """``dataclasses.replace(self, **fields)`` without reading the class's fields and running
        its constructor again: the dataflow copies values this way hundreds of thousands of times a
        long file, and ``replace`` cost five times as much."""
        copy = object.__new__(Value)
        copy.__dict__.update(self.__dict__, **fields)
        return copy

    def without_graph(self) -> "Value":
        return Value(structure=self.structure, may_be_none=self.may_be_none, graphless=True)


NOTHING = Value()  # nothing known of it
CONSTANT = Value(graphless=True)  # no graph, proved: a constant, an object that is no tensor
LEAF = Value(graph=True, structure=TENSOR)
# What a call of code gradfix did not read may add to its result: a graph built from parameters it
# did not see. Only possible, guessed and out of unread code.
UNREAD_PARAMETERS = Value(graph=True, structure=TENSOR, guessed=True, unread=True, possible=True)
# The parameters of a module frozen in one place and trained in another (``ModuleInfo.toggled``):
# they may require grad where it is called, or not: a graph only possible. (Not guessed: what else
# a value built from them holds, a generator's output beside a toggled discriminator's, is known.)
TOGGLED_PARAMETERS = Value(graph=True, structure=TENSOR, possible=True)


def combine(
    values: Iterable[Value],
    created_by: Origin | None,
    structure: Structure = TENSOR,
    known_operation: bool = True,
    guessed: bool | None = None,
    unread: bool | None = None,
) -> Value:
    """The value of an operation on ``values``: it carries graph when any input does, and then the
    operation itself is a new interior node. A known operation (an operator, a torch function)
    of values proved graphless is proved graphless; an unknown function's result is not, and its
    graph is only guessed (``unread``: out of code gradfix did not read). ``guessed`` and
    ``unread`` override that for a method called on a graph-carrying value: whatever the receiver
    is, it holds a graph as much as the receiver does."""
    values = list(values)
    if not any(v.graph for v in values):
        return Value(structure=structure, graphless=known_operation and all(v.graphless for v in values))
    origins = frozenset().union(*(v.origins for v in values))
    possible = all(v.possible for v in values if v.graph)
    if created_by is not None:
        origins |= {Origin(created_by.node, created_by.statement, True) if possible else created_by}
    if guessed is None:
        guessed = not known_operation or all(v.guessed for v in values if v.graph)
    if unread is None:
        unread = not known_operation or all(v.unread for v in values if v.graph)
    freed = [v.freed_unsure for v in values if v.freed]
    return Value(
        graph=True,
        origins=origins,
        structure=structure,
        freed=bool(freed),
        guessed=guessed,
        unread=unread,
        possible=possible,
        freed_unsure=bool(freed) and all(freed),
        # (out of unread code, every node it holds is only passed on, or made, by that code)
        uncertain_origins=origins if unread else _held_only_uncertainly(values),
    )


def part(value: Value, structure: Structure) -> Value:
    """``value``'s graph (freed where it is) with another structure; not the very tensor a
    backward backwarded."""
    return Value(
        value.graph,
        value.origins,
        structure,
        freed=value.freed,
        graphless=value.graphless,
        guessed=value.guessed,
        unread=value.unread,
        possible=value.possible,
        freed_unsure=value.freed_unsure,
        uncertain_origins=value.uncertain_origins,
    )


def item_of(container: Value, structure: Structure, differentiable: bool = False) -> Value:
    """An item taken out of ``container`` (unpacked, indexed, iterated): the container's graph.
    The rows of a tensor and the items of a list hold it as the whole does; the items of a tuple
    or of a container of unknown shape are told apart by nothing gradfix sees (a model's
    ``(logits, indices)``), so an item's graph is only guessed; not where every item is a
    differentiable output of a torch.nn module (``differentiable``: an LSTM's ``(h, c)``)."""
    homogeneous = container.structure is TENSOR or isinstance(container.structure, ListOf) or differentiable
    return part(container, structure).changed(guessed=container.guessed or (container.graph and not homogeneous))


def item_replaced(item: Value) -> Value:
    """``item``, read out of a container whose items gradfix no longer knows one by one (the dict
    handed to another name, to a call, stored at a key it cannot read: UNKNOWNS 23; one item of a
    list the program grows, which it does not tell from the others): what the container may hold,
    not what was stored. A graph freed through it is only may-freed."""
    return item.changed(freed_unsure=True) if item.freed else item


def element_of(value: Value) -> Value:
    """What iterating over ``value`` yields."""
    structure = value.structure
    if isinstance(structure, ListOf):
        item = structure.item
    elif isinstance(structure, TupleOf):
        item = join_structures(structure.items)
    else:
        item = TENSOR if structure is TENSOR else UNKNOWN
    return item_of(value, item)


def yielded(items: Value, known: bool = False) -> Value:
    """What one step of iterating over ``items`` yields (a ``for`` loop's target, ``next(it)``):
    an item of a list, a tuple or a tensor; of an iterable gradfix knows nothing of (a data loader,
    an environment, what code it did not read returns), data, unless the iterable was built from
    graphs gradfix saw (``zip(weights, losses)``, ``enumerate(losses)``, ``map(f, outputs)``):
    then it may yield them, which gradfix only guesses. ``known``: the iterable is one of graphs
    whatever its structure says (a dict's ``items()`` or ``values()``)."""
    known = known or isinstance(items.structure, (ListOf, TupleOf)) or items.structure is TENSOR
    return element_of(items) if known or items.graph and not items.unread else NOTHING


def dict_of(values: Sequence[Value]) -> DictOf:
    """The structure of a dict built with constant keys holding ``values``."""
    return DictOf(join_structures(v.structure for v in values), all(v.graph and not v.guessed for v in values))


def join_structures(structures: Iterable[Structure]) -> Structure:
    return reduce(lambda joined, structure: joined.join(structure), structures, EMPTY)


def union(values: Sequence[Value], structure: Structure) -> Value:
    return Value(
        graph=any(v.graph for v in values),
        origins=frozenset().union(*(v.origins for v in values)) if values else frozenset(),
        structure=structure,
        freed=any(v.freed for v in values),
        freed_unsure=any(v.freed for v in values) and all(v.freed_unsure for v in values if v.freed),
        graphless=all(v.graphless for v in values),
        guessed=any(v.guessed for v in values if v.graph),
        unread=any(v.unread for v in values if v.graph),
        possible=any(v.graph for v in values) and all(v.possible for v in values if v.graph),
        uncertain_origins=_held_only_uncertainly(values),
    )


def _held_only_uncertainly(values: Iterable[Value]) -> frozenset[Source]:
    """The origins of ``values`` that each holds only uncertainly (through code gradfix did not
    read, or as a value whose graph is only guessed: every origin of it), where none holds them
    otherwise."""
    values = [v for v in values if v.graph]
    if not any(v.guessed or v.uncertain_origins for v in values):
        return frozenset()
    uncertain = [(v.origins if v.guessed else v.uncertain_origins, v.origins) for v in values]
    held = frozenset().union(*(some for some, _ in uncertain))
    return held - frozenset().union(*(origins - some for some, origins in uncertain))


def certain_origins(value: Value) -> frozenset[Source]:
    """The origins ``value`` holds other than through code gradfix did not read or a guess."""
    return value.origins - value.uncertain_origins if value.uncertain_origins else value.origins


def joined(values: Sequence[Value]) -> Value:
    """What one of ``values`` may be: NOTHING when there are none."""
    return reduce(Value.join, values) if values else NOTHING


def sharing_groups(items: Sequence[Value], given_a_graph: bool) -> list[int]:
    """For each of a callee's returned items, the first item it is joined to by nodes of the
    callee's graph they both hold (directly or through other items). Where the callee says
    nothing of the graph of an item that may hold one (a torch.nn module's outputs, a value
    built from an argument where the call passes a graph), all are one group."""
    nodes = [{source.node for source in item.origins if isinstance(source, Origin)} for item in items]
    if any(not graph_nodes and not item.graphless and (item.graph or given_a_graph) for item, graph_nodes in zip(items, nodes)):
        return [0] * len(items)
    groups = list(range(len(items)))
    for index in range(len(items)):
        for earlier in range(index):
            if nodes[index] & nodes[earlier] and groups[index] != groups[earlier]:
                joined, into = max(groups[index], groups[earlier]), min(groups[index], groups[earlier])
                groups = [into if group == joined else group for group in groups]
    return groups
