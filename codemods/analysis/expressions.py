"""Expressions and assignment targets: what each expression holds, and where an assignment puts it.

A part of ``DataflowAnalysis`` (``dataflow``): operators, names, attributes, subscripts, containers
and comprehensions (calls are ``calls``'); assignments to names, attribute chains, slots (``x[i]``)
and unpacked targets; and what an ``if`` test says of the names it tests.
"""

from __future__ import annotations

from functools import cached_property
from typing import Iterator, cast

import libcst as cst

from ..frameworks import SCALED_LOSS_CONTEXTS
from ..torch_api import AUTOGRAD_RECORD, GRAPHLESS_ATTRIBUTES, METADATA_ATTRIBUTES
from .dicts import shape_kept_by, unpacked_items, written_at
from .assignments import APPENDING_METHODS, assigned_names, names_bound_to_one_object, read_names, target_names
from .loops import Element, Env, join_envs, join_values
from .syntax import constant_key, dotted_name, is_name
from .tree import SyntaxTree
from .values import (
    CONSTANT,
    LEAF,
    FunctionOf,
    NONE,
    NOTHING,
    NUMBER,
    TENSOR,
    UNKNOWN,
    ListOf,
    Origin,
    RecordOf,
    Structure,
    TupleOf,
    Value,
    combine,
    dict_of,
    element_of,
    item_of,
    item_replaced,
    join_structures,
    part,
    sharing_groups,
    union,
    yielded,
)

# Attributes that hold no graph of their object (``config``: a Hugging Face model's configuration object).
_NON_GRAPH_ATTRIBUTES = {*GRAPHLESS_ATTRIBUTES, *METADATA_ATTRIBUTES, *AUTOGRAD_RECORD, "config"}
_CONSTANT_EXPRESSIONS = (cst.SimpleString, cst.ConcatenatedString, cst.Lambda, cst.Ellipsis)


class Expressions:
    """The expression half of ``DataflowAnalysis``."""

    def _context_value(self, item: cst.BaseExpression, env: Env) -> Value:
        """What ``with item as name`` binds: apex's ``amp.scale_loss(loss, optimizer)`` yields the
        scaled loss, whose graph is the loss's."""
        if isinstance(item, cst.Call) and item.args and (self.names.qualify(item.func) or "") in SCALED_LOSS_CONTEXTS:
            loss = self._eval(item.args[0].value, env)
            return loss.changed(backwarded=frozenset())
        return NOTHING

    def _origin(self, node: cst.CSTNode) -> Origin | None:
        return None if self._no_grad else Origin(node, self._statement)

    def _eval(self, node: cst.BaseExpression, env: Env) -> Value:
        value = self._eval_expression(node, env)
        return value.without_graph() if self._no_grad and value.graph else value

    def _eval_all(self, nodes, env: Env) -> list[Value]:
        return [self._eval(node, env) for node in nodes]

    def _eval_expression(self, node: cst.BaseExpression, env: Env) -> Value:
        node_type = type(node)  # exact types: see ``dotted_name``
        if node_type is cst.Name:
            if node.value == "None":
                return Value(structure=NONE, graphless=True)
            held = env.get(node.value)
            self.read_values[node] = held if held is not None else self._torch_function(node) if node.value in self.names.aliases else NOTHING
            return self.read_values[node]
        if node_type is cst.Attribute:
            self.read_values[node] = self._eval_attribute(node, env)
            return self.read_values[node]
        if node_type in (cst.Integer, cst.Float, cst.Imaginary):
            return Value(structure=NUMBER, graphless=True)
        if node_type is cst.Call:
            return self._eval_call(node, env)
        if node_type is cst.BinaryOperation:
            operands = self._eval_all([node.left, node.right], env)
            # ``[None] * n``, ``pairs + [(a, b)]``: a list or a tuple repeated or joined is one still.
            containers = [v.structure for v in operands if isinstance(v.structure, (ListOf, TupleOf))]
            if containers:
                return part(union(operands, UNKNOWN), containers[0] if isinstance(containers[0], ListOf) else UNKNOWN)
            structures = {v.structure for v in operands}
            # a tensor when one operand is; two numbers make a number; anything else is not known
            structure = TENSOR if TENSOR in structures else NUMBER if structures == {NUMBER} else UNKNOWN
            return combine(operands, self._origin(node), structure)
        if node_type is cst.UnaryOperation:
            operand = self._eval(node.expression, env)
            return CONSTANT if type(node.operator) is cst.Not else combine([operand], self._origin(node))
        if node_type is cst.BooleanOperation:
            left = self._eval(node.left, env)
            if not self._tree.findall(node.right, cst.Call) and not self._tree.findall(node.right, cst.NamedExpr):
                return left.join(self._eval(node.right, env))
            # The right operand runs only where the left one lets it (``warm and loss.backward()``).
            otherwise = dict(env)
            self._runs_unknown += 1
            try:
                value = left.join(self._eval(node.right, otherwise))
            finally:
                self._runs_unknown -= 1
            env.update(join_envs([env, otherwise]) or {})
            return value
        if node_type is cst.Comparison:
            # (of tensors, a tensor of booleans with no history: ``(logits.argmax(1) == y).sum()``)
            operands = [self._eval(node.left, env), *self._eval_all([c.comparator for c in node.comparisons], env)]
            tensors = any(v.graph or v.structure is TENSOR for v in operands)
            return Value(structure=TENSOR, graphless=True) if tensors else CONSTANT
        if node_type is cst.Yield:
            value = self._eval(node.value, env) if isinstance(node.value, cst.BaseExpression) else NOTHING
            frame = next(f for f in reversed(self._frames) if f.loop is None or f.loop.is_call)
            frame.yielded.append(value)
            return NOTHING  # (what the caller sends back)
        if node_type is cst.IfExp:
            self._eval(node.test, env)
            if not self._tree.findall(node.body, cst.Call) and not self._tree.findall(node.body, cst.NamedExpr):
                return self._eval(node.body, env).join(self._eval(node.orelse, env))
            # One branch runs, not both: ``loss.backward() if last else loss.backward(retain_graph=True)``.
            otherwise = dict(env)
            self._runs_unknown += 1
            try:
                value = self._eval(node.body, env).join(self._eval(node.orelse, otherwise))
            finally:
                self._runs_unknown -= 1
            env.update(join_envs([env, otherwise]) or {})
            return value
        if node_type is cst.Subscript:
            slot = _slot(node)
            written = env.get(slot) if slot is not None else None
            base = self._eval(node.value, env)
            for element in node.slice:
                if type(element.slice) is cst.Index:
                    self._eval(element.slice.value, env)
            if base.structure is TENSOR:
                return combine([base], self._origin(node))
            if written is not None and not written.unbound:
                return written  # ``losses[i] = loss`` then ``losses[i]``: this very value
            taken = self._item_taken(node, base) if type(node.value) is cst.Call else self._dict_item(node.value, base)
            if taken is not None:
                return taken
            if isinstance(base.structure, ListOf) and any(type(e.slice) is cst.Slice for e in node.slice):
                # ``history[-2:]``: a list of some of its items, which only may be those a backward freed
                return base if not base.freed or all(_whole(e.slice) for e in node.slice) else base.changed(freed_unsure=True)
            element = element_of(base)
            if not isinstance(base.structure, (ListOf, TupleOf)) or self._grown(node.value):
                # (an item of a container not known item by item, a dict that escaped: what it may hold; one
                # item of a list the program grows, which gradfix does not tell from the others a backward
                # may have freed)
                element = item_replaced(element)
            loop = self._loops[-1] if self._loops else None
            if (
                element.graph
                and loop is not None
                and not loop.is_call
                and _indexed_by(node, loop.carried_names - self._comprehension_names)
                # a container the iteration did not build itself (``outputs = model(x)`` then
                # ``outputs[mask]`` is this step's value, not one kept from an earlier step)
                and not any(isinstance(o, Origin) and self._tree.contains(loop.node, o.statement) for o in base.origins)
            ):
                picked = frozenset({Element(loop, node, base.origins)})
                # Another element each iteration, freed only if the container was when the loop began.
                return Value(
                    True,
                    picked,
                    element.structure,
                    freed=dotted_name(node.value) in loop.freed_at_entry,
                    guessed=element.guessed,
                    unread=element.unread,
                    possible=element.possible,
                )
            return element
        if node_type in (cst.Tuple, cst.List):
            self._escape_items([e.value for e in node.elements], env)
            values = self._eval_all([e.value for e in node.elements], env)
            if node_type is cst.Tuple and not any(type(e) is cst.StarredElement for e in node.elements):
                self._tuple_items[node] = values
            structure: Structure = (
                TupleOf(tuple(v.structure for v in values)) if isinstance(node, cst.Tuple) else ListOf(join_structures(v.structure for v in values))
            )
            return union(values, structure)
        if node_type in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self._eval_comprehension(node, env)
        if node_type is cst.Dict:
            self._escape_items([e.value for e in node.elements], env)
            values = self._eval_all([e.value for e in node.elements if isinstance(e, cst.DictElement)], env)
            keys = [constant_key(e.key) if type(e) is cst.DictElement else None for e in node.elements]
            if None not in keys:  # (every key a constant, no ``**``)
                self._dict_items[node] = dict(zip(cast(list[str], keys), values))
            return union(values, dict_of(values) if None not in keys else UNKNOWN)
        if node_type in (cst.StarredElement, cst.Await):
            return self._eval(node.value if isinstance(node, cst.StarredElement) else node.expression, env)
        if node_type is cst.NamedExpr:
            value = self._eval(node.value, env)
            self._assign(node.target, value, env)
            return value
        if node_type is cst.FormattedString:
            for piece in node.parts:
                if type(piece) is cst.FormattedStringExpression:
                    self._eval(piece.expression, env)
            return CONSTANT
        if node_type in _CONSTANT_EXPRESSIONS:
            return CONSTANT
        return NOTHING

    def _eval_attribute(self, node: cst.Attribute, env: Env) -> Value:
        name = dotted_name(node)
        if name is not None and name in env:
            return env[name]
        if node.attr.value in _NON_GRAPH_ATTRIBUTES:
            base = self._eval(node.value, env)
            # (a tensor's ``.data`` and ``.grad`` are tensors, of no graph: ``p.grad.norm()`` is a tensor's method)
            return Value(structure=TENSOR, graphless=True) if node.attr.value in GRAPHLESS_ATTRIBUTES and base.structure is TENSOR else CONSTANT
        if self.names.is_parameter(node, self._scope.class_name):
            return LEAF
        kept = self._constructed.get(self.names.instance_class(node.value, None) or "", {}).get(f"self.{node.attr.value}")
        if kept is not None and kept.graph:
            return kept  # what the object's constructor keeps, read from outside it
        if self.names.module(node.value, self._scope.class_name) is not None:
            return NOTHING  # a submodule, or an attribute of one gradfix cannot name
        root = node.value
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is cst.Name and root.value in self.names.aliases:  # (only an import names torch)
            function = self._torch_function(node)
            if function is not NOTHING:
                return function
        base = self._eval(node.value, env)
        if isinstance(base.structure, RecordOf):
            fields = self.names.record_classes.get(base.structure.name, ())
            if node.attr.value in fields:
                return item_of(base, base.structure.items[fields.index(node.attr.value)])
        return base.changed(structure=TENSOR if base.structure is TENSOR else UNKNOWN, may_be_none=False)

    def _torch_function(self, node: cst.Name | cst.Attribute) -> Value:
        """What a name of torch's function holds (``F.mse_loss``): that function (``FunctionOf``)."""
        function = self.names.torch_function(node)
        return NOTHING if function is None else Value(structure=FunctionOf(frozenset({function})))

    def _iterated_together(self, call: cst.Call, values: list[Value], env: Env) -> Value | None:
        """``zip(a, b)`` and ``enumerate(a)``, the builtins: a list of tuples of what iterating each
        argument yields (for ``enumerate``, a number first), each tuple's items kept apart for a
        ``for`` that unpacks them (``together``); None for any other call, one with ``*``, or one
        given a graph out of code gradfix did not read (read as such code's result)."""
        func = call.func
        if type(func) is not cst.Name or func.value not in ("zip", "enumerate") or self._names_a_value(func, env) or func.value in self.names.aliases:
            return None
        if any(arg.star or arg.keyword is not None and arg.keyword.value not in ("strict", "start") for arg in call.args):
            return None
        if any(value.graph and value.unread for value in values):
            return None
        iterated = [yielded(value) for arg, value in zip(call.args, values) if arg.keyword is None]
        items = [Value(structure=NUMBER, graphless=True), *iterated[:1]] if func.value == "enumerate" else iterated
        self.together[call] = tuple(items)
        return union(items, ListOf(TupleOf(tuple(item.structure for item in items))))

    def _eval_comprehension(self, node, env: Env) -> Value:
        inner = dict(env)
        outer_names = self._comprehension_names
        self._runs_unknown += 1
        try:
            for clause in _comprehension_clauses(node.for_in):
                self._assign(clause.target, element_of(self._eval(clause.iter, inner)), inner)
                # A comprehension's names are its own (``x[i] for i in ...`` inside ``for i in ...``).
                self._comprehension_names |= frozenset(target_names(clause.target))
            element = self._eval(node.elt, inner)
            # ``[loss := f(x) for x in xs]`` binds ``loss`` in the scope around it, when an item runs.
            for bound in self._tree.findall(node, cst.NamedExpr):
                if type(bound.target) is cst.Name:
                    name = bound.target.value
                    bound_here = inner.get(name, NOTHING)
                    joined_value = join_values(env.get(name, NOTHING), bound_here)
                    # (what an earlier backward freed is there only if no item ran: may-freed, not freed)
                    env[name] = joined_value.changed(freed_unsure=True) if joined_value.freed and not bound_here.freed else joined_value
        finally:
            self._comprehension_names = outer_names
            self._runs_unknown -= 1
        structure: Structure = ListOf(element.structure)
        return part(element, structure)

    def _item_taken(self, node: cst.Subscript, whole: Value) -> Value | None:
        """``f(x)[1]``: the item a literal index takes out of the tuple a call returns, as ``a, b =
        f(x)`` unpacks it (``_items_of_the_call``); None where the call's items are not known."""
        call = cst.ensure_type(node.value, cst.Call)
        items = self._call_items.get(call)
        index = node.slice[0].slice.value if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index else None
        if items is None or type(index) is not cst.Integer or int(index.value, 0) >= len(items):
            return None
        values = self._items_of_the_call(call, whole, [node] * len(items))
        return None if values is None else values[int(index.value, 0)]

    def _assign(
        self,
        target: cst.BaseExpression,
        value: Value,
        env: Env,
        source: cst.BaseExpression | None = None,
        differentiable: bool = False,
    ) -> None:
        """``differentiable``: ``value`` is a tuple of differentiable outputs of a torch.nn module,
        each holding its graph (what ``(h, c)`` of ``out, (h, c) = lstm(x)`` unpacks)."""
        # (exact types: see ``dotted_name``)
        if type(target) is cst.Tuple or type(target) is cst.List:
            elements = [e.value for e in target.elements]
            sources: list[cst.BaseExpression | None] = [None] * len(elements)
            known = self._items_of_the_call(source, value, elements) if type(source) is cst.Call else None
            differentiable = differentiable or source in self._differentiable_outputs
            if (type(source) is cst.Tuple or type(source) is cst.List) and len(source.elements) == len(elements):
                sources = [e.value for e in source.elements]
                values = [self._eval(s, env) for s in sources]
            elif known is not None:
                values = known
            else:
                values = unpacked_items(value, len(elements), differentiable)
            for element, element_value, element_source in zip(elements, values, sources):
                self.assigned_values[element] = element_value  # (what this target was given: ``value_assigned``)
                self._assign(element, element_value, env, element_source, differentiable)
            return
        if type(target) is cst.StarredElement:
            self._assign(target.value, item_of(value, ListOf(UNKNOWN)), env)
            return
        if type(target) is cst.Subscript:
            name = dotted_name(target.value)
            if name is not None:
                held = env.get(name, NOTHING)
                slot = _slot(target)
                # (a write by a literal key leaves the items of the other literal keys where they are)
                self._forget_slots(name, env, keep_literal=slot is not None and type(target.slice[0].slice.value) is not cst.Name)
                if held.structure is TENSOR:  # an in-place copy into a tensor: a node of its graph
                    env[name] = combine([held, value], self._origin(target), TENSOR)
                elif isinstance(held.structure, ListOf) and _every_item(target):
                    if name in self.shared_objects:
                        self._escape([value])
                    env[name] = value  # (``losses[:] = []``: its items are the new ones, in place)
                    self._emptied_in_place(name, env)
                else:  # a dict, a list, a ParameterDict holds the value itself
                    if name in self.shared_objects:
                        self._escape([value])  # (read through another name that holds the container too)
                    others = self._other_items(name, slot, env) if slot is not None and _immutable_graphless(value) else None
                    # (a dict whose every item is known, the one that held its graph overwritten: it holds none)
                    structure = written_at(held.structure, target, value, env)
                    env[name] = union([value, *others], structure) if others is not None else union([held, value], structure)
                    if slot is not None:
                        self._write_slot(name, slot, value, env, target.slice[0].slice.value)
            return
        name = dotted_name(target)
        if name is None:
            return
        if name in self._declared_global(self._scope.node):
            self._escape([value])  # the next call of the function reads it again
        if type(target) is cst.Attribute and target.attr.value == "data":
            value = value.without_graph()  # what is written to .data is never recorded
        self._forget_attributes(name, env)
        self._forget_slots(name, env)
        env.pop(truth_key(name), None)
        if type(source) is cst.Name and source.value in ("True", "False") and "." not in name and name not in self._parameter_names():
            env[truth_key(name)] = TESTED_TRUE if source.value == "True" else TESTED_FALSE  # (``training = False``)
        if self._names_an_object(target):
            value = NOTHING  # model = DDP(model), engine, optimizer, … = deepspeed.initialize(…): not tensors
        if "." in name:
            self._escape([value])  # kept on an object: another call may backward it
            if value.graph:
                self.keeping_functions.add(self._scope.node)  # (whatever reads the attribute after a call reaches its graph)
        env[name] = shape_kept_by(name, value, self.shared_objects)
        if source is not None:
            self._escape_items([source], env)
            for key, item in self._dict_items.get(source, {}).items():  # (a dict built with constant keys)
                self._write_slot(name, f"{name}[{key}]", item, env)
            if type(source) is cst.Call and source in self._returned_dicts:
                self._write_returned_items(name, source, value, env)

    def _write_returned_items(self, name: str, call: cst.Call, value: Value, env: Env) -> None:
        """``name = f(...)`` of a function of the file that returns a dict with constant keys: each
        ``name[key]`` holds the call's graph, as a tuple's items do; where the callee builds items
        from no node in common (two heads' outputs), each group of them holds a part of the call's
        graph of its own (``Origin.part``), and the whole dict every part."""
        items = self._returned_dicts[call]
        groups = sharing_groups(tuple(items.values()), given_a_graph=call not in self._items_given_no_graph)
        keys = list(items)
        whole = next((o for o in value.origins if isinstance(o, Origin) and o.node is call and o.part is None), None)
        parts = {group: Origin(call, whole.statement, whole.possible, keys[group]) for group in set(groups) - {0}} if whole is not None else {}
        if parts:
            env[name] = value.changed(origins=value.origins | frozenset(parts.values()))
        for key, item, group in zip(keys, items.values(), groups):
            held = Value(structure=item.structure, graphless=True) if item.graphless else part(value, item.structure)
            if group in parts:
                held = held.changed(origins=held.origins - {whole} | {parts[group]})
            held = held.changed(guessed=value.guessed or item.guessed or not item.graphless and not item.graph)
            self._write_slot(name, f"{name}[{key}]", held, env)

    def _write_slot(self, name: str, slot: str, value: Value, env: Env, index: cst.BaseExpression | None = None) -> None:
        """``x[i] = value`` (``index``: the name ``i``, or a constant key when None or not a name)."""
        env[slot] = value
        if type(index) is not cst.Name:
            self._literal_slots.add(slot)
        for owner in (name, index.value) if type(index) is cst.Name else (name,):
            self._slots.setdefault(owner, set()).add(slot)

    def _escape_items(self, expressions: list[cst.BaseExpression], env: Env) -> None:
        """A container whose items the env keeps (``x[k]``), handed on as a whole: to another name,
        into another container, to a call of code that may write to it. What ``x[k]`` reads after
        that is no longer known to be what was written."""
        if not self._slots:
            return
        for expression in expressions:
            name = dotted_name(expression) if type(expression) is cst.Name or type(expression) is cst.Attribute else None
            if name is not None and name in self._slots:
                for slot in self._slots[name]:
                    if slot.startswith(f"{name}["):
                        env.pop(slot, None)

    def _other_items(self, name: str, slot: str, env: Env) -> list[Value] | None:
        """The items of the dict ``name`` other than ``slot``, where every one is known (``every_item_key``)
        and holds no graph for good (a number or None, which nothing changes in place). None where the
        dict may hold more: an item that is or may be a tensor, or a path on which not every item of
        ``name`` is known (written at a key gradfix cannot read, aliased, handed to a call)."""
        every_item = every_item_key(name)
        if every_item not in env or env[every_item].unbound:
            return None
        others = [env[key] for key in self._slots[name] if key != slot and key != every_item and key in env]
        return others if all(_immutable_graphless(other) for other in others) else None

    def _know_every_item(self, target: cst.BaseExpression, display: cst.Dict, env: Env) -> None:
        """After ``target = {...}``: where the dict holds numbers, strings or None under literal keys, and
        its name is used nowhere but as ``name[<literal>]`` in the scope that writes it out (never
        aliased, handed to a call, written at a key gradfix cannot read or by another function), every
        item of it is known from then on: those it was written out with hold no graph, for good, and
        each written since is the env's ``name[<key>]``."""
        if type(target) is not cst.Name or not _written_out(display) or not self._used_only_by_literal_keys(target.value):
            return
        key = every_item_key(target.value)
        env[key] = CONSTANT
        self._slots.setdefault(target.value, set()).add(key)
        self._literal_slots.add(key)  # (kept by a write at a literal key, forgotten with the dict's other slots)
        self._items_known.add(target.value)

    def _used_only_by_literal_keys(self, name: str) -> bool:
        """Whether every use of ``name`` in the module is a dict written out (``name = {...}``) or an item
        of it picked by a literal key, all in one scope. (Once per name and file.)"""
        known = self._literal_key_dicts.get(name)
        if known is None:
            scopes = set()
            known = True
            for node in self._tree.names(self._module, (name,)):
                parent = self._tree.parent(node)
                if type(parent) is cst.Attribute and parent.attr is node or type(parent) is cst.Arg and parent.keyword is node:
                    continue  # (an attribute's or a keyword's name: not this one)
                if type(parent) is cst.Subscript and parent.value is node:
                    used = _slot(parent) is not None and type(parent.slice[0].slice.value) is not cst.Name
                else:
                    statement = self._tree.parent(parent) if type(parent) is cst.AssignTarget else None
                    used = type(statement) is cst.Assign and len(statement.targets) == 1 and type(statement.value) is cst.Dict
                if not used:
                    known = False
                    break
                scope = self._tree.parent(node)
                while scope is not None and type(scope) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                    scope = self._tree.parent(scope)
                scopes.add(id(scope))
            known = self._literal_key_dicts[name] = known and len(scopes) == 1
        return known

    def _objects_may_change(self, call: cst.Call, env: Env) -> None:
        """A method gradfix did not read (``cb.on_batch_start(self)``, ``super().before_step()``) may set any
        attribute of its object and of any object it is handed: what was known of them is forgotten (in a
        method, of ``self``: then its calls forget it too, ``forgetting_methods``)."""
        func = cst.ensure_type(call.func, cst.Attribute)
        receiver = "self" if type(func.value) is cst.Call and is_name(func.value.func, "super") else dotted_name(func.value)
        handed = [dotted_name(arg.value) for arg in call.args if type(arg.value) is cst.Name or type(arg.value) is cst.Attribute]
        # (only objects whose attributes are known, or ``self``, which a method's callers may know)
        objects = {name for name in (receiver, *handed) if name is not None and (name == "self" or name in self._attributes_of)}
        if objects - {receiver} and self._only_reads_its_arguments(call):
            objects &= {receiver}  # (what a call that only reads is handed stays as it was)
        for name in objects:
            self._forget_attributes(name, env)
            if name == "self" and self._scope.class_name is not None:
                self.forgetting_methods.add(self._scope.node)

    def _grown(self, container: cst.BaseExpression) -> bool:
        """Whether the program adds items to what ``container`` names (``KEPT.append(loss)``, ``+=``):
        its items are then of different steps, and one of them is not told from the others."""
        grown = self._tree.kept(_GROWN_LISTS, self._module, lambda: _grown_names(self._tree, self._module))
        return dotted_name(container) in grown

    def _parameter_names(self) -> set[str]:
        """The parameters of the function being walked: what a path's test says of one is said of what
        the caller passed (``returned_given``), which a literal bound to it later is not."""
        function = self._scope.node
        return {p.name.value for p in function.params.params} if type(function) is cst.FunctionDef else set()

    def _forget_attributes(self, name: str, env: Env) -> None:
        """What was known of ``name``'s attributes (``model.hidden``), once ``name`` or its object may have changed."""
        for key in self._attributes_of.get(name, ()):
            env.pop(key, None)

    def _delete(self, target: cst.BaseExpression, env: Env) -> None:
        """``del x``, ``del x[i]``, ``del x.a``: what ``x`` held is forgotten; ``del x[:]`` empties
        its object, which each name bound to it holds too (``_emptied_in_place``)."""
        if type(target) is cst.Tuple or type(target) is cst.List:
            for element in target.elements:
                self._delete(element.value, env)
            return
        for name in target_names(target):
            env.pop(name, None)
            self._forget_slots(name, env)
            if type(target) is cst.Subscript and _every_item(target):
                self._emptied_in_place(name, env)

    @cached_property
    def _names_of_one_object(self) -> dict[str, frozenset[str]]:
        return names_bound_to_one_object(self._module, self._tree)

    def _emptied_in_place(self, name: str, env: Env) -> None:
        """``name``'s object was emptied, or its items replaced, in place (``clear()``, ``del x[:]``,
        ``x[:] = ...``), and ``name`` now holds what it holds: so does each name bound to the same
        object for certain here (``_one_object_here``); one that may hold another object keeps what
        it held, and the loops around say it may have been emptied (a must-fact of its graph is
        not proved)."""
        for other in self._names_of_one_object.get(name, ()):
            if self._one_object_here(name, other):
                self._forget_slots(other, env)
                if name in env:
                    env[other] = env[name]
                else:
                    env.pop(other, None)
            else:
                for loop in self._loops:
                    loop.maybe_emptied_through.setdefault(other, name)

    def _one_object_here(self, name: str, other: str) -> bool:
        """Whether ``name`` and ``other`` hold one object at the statement being walked: one is bound
        to the other (``pending = losses``) by a statement of a block around it, before it, in the
        same function, and nothing from there to here binds either anew."""
        tree = self._tree
        node: cst.CSTNode = self._statement
        if type(node) is cst.SimpleStatementLine and len(node.body) > 1:
            return False  # (``losses = []; pending.clear()``)
        parent = tree.parent(node)
        while parent is not None and type(parent) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            if type(parent) is cst.IndentedBlock or type(parent) is cst.Module:
                statements = list(parent.body)
                between = [] if node is self._statement else [node]
                for earlier in reversed(statements[: statements.index(node)]):
                    if _binds_one_to_the_other(earlier, name, other):
                        return not any(assigned_names(s, rebinding_only=True, tree=tree) & {name, other} for s in between)
                    between.append(earlier)
            node, parent = parent, tree.parent(parent)
        return False

    def _forget_slots(self, name: str, env: Env, keep_literal: bool = False, counted_from_end: bool = False) -> None:
        """What was written to ``x[i]`` is what ``x[i]`` reads only until ``x`` or ``i`` changes
        (``keep_literal``: ``x`` changes only at a literal key; ``x["a"]`` is still what was written;
        ``counted_from_end``: but for ``x[-1]`` and the others a negative literal picks, as ``x.append``)."""
        for slot in self._slots.get(name, ()):
            if not (keep_literal and slot in self._literal_slots) or counted_from_end and slot.startswith(f"{name}[-"):
                env.pop(slot, None)


def every_item_key(name: str) -> str:
    """The env key that says every item of the dict ``name`` is known: those written out with it hold
    no graph and nothing changes them in place, each written since is kept under ``name[<key>]``."""
    return f"{name}[*]"


def _written_out(display: cst.Dict) -> bool:
    """``{"n": 0, "loss": 0.0}``: a dict of literal keys and values that hold no graph, for good."""
    return all(
        type(element) is cst.DictElement
        and type(element.key) in (cst.SimpleString, cst.Integer)
        and (type(element.value) in (cst.SimpleString, cst.Integer, cst.Float) or type(element.value) is cst.Name and element.value.value == "None")
        for element in display.elements
    )


def _immutable_graphless(value: Value) -> bool:
    """A number or None: no graph, and nothing gives it one in place."""
    return value.graphless and (value.structure is NUMBER or value.structure is NONE)


def _comprehension_clauses(clause: cst.CompFor | None) -> Iterator[cst.CompFor]:
    while clause is not None:
        yield clause
        clause = clause.inner_for_in


def narrowed(test: cst.BaseExpression, env: Env) -> tuple[Env, Env]:
    """The environments at the start of an ``if``'s two branches: after ``x is None`` /
    ``x is not None``, ``x`` holds None on one side."""
    then_env, else_env = dict(env), dict(env)
    tested = test.expression if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not else test
    if type(tested) is cst.Name and tested.value not in ("True", "False", "None"):
        true_side, false_side = (then_env, else_env) if tested is test else (else_env, then_env)
        true_side[truth_key(tested.value)], false_side[truth_key(tested.value)] = TESTED_TRUE, TESTED_FALSE
    if (
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
    ):
        name = dotted_name(test.left)
        operator = test.comparisons[0].operator
        if name is not None and (type(operator) is cst.Is or type(operator) is cst.IsNot):
            none_side = then_env if type(operator) is cst.Is else else_env
            none_side[name] = Value(structure=NONE)
    return then_env, else_env


# What a path's ``if flag:`` says of ``flag``, kept in the path's environment under ``flag?``.
TESTED_TRUE = Value(graphless=True)
TESTED_FALSE = Value(graphless=True)


def truth_key(name: str) -> str:
    return f"{name}?"


def _whole(index: cst.BaseSlice) -> bool:
    """``[:]``: every item."""
    return type(index) is cst.Slice and index.lower is None and index.upper is None and index.step is None


def _indexed_by(node: cst.Subscript, names: frozenset[str]) -> bool:
    return any(isinstance(element.slice, cst.Index) and read_names(element.slice.value) & names for element in node.slice)


def _every_item(node: cst.Subscript) -> bool:
    """``x[:]``: a slice of every item."""
    index = node.slice[0].slice if len(node.slice) == 1 else None
    return type(index) is cst.Slice and index.lower is None and index.upper is None and index.step is None


def _slot(node: cst.Subscript) -> str | None:
    """``"losses[i]"`` for ``losses[i]``: a container's item picked by a plain name, or by a string
    or integer literal (``losses["recon"]``)."""
    container = dotted_name(node.value)
    if container is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    index = node.slice[0].slice.value
    if type(index) is cst.Name:
        return f"{container}[{index.value}]"
    key = constant_key(index)
    return None if key is None else f"{container}[{key}]"


def _binds_one_to_the_other(statement: cst.CSTNode, name: str, other: str) -> bool:
    """``a = b`` (one of ``name`` and ``other`` bound to the object the other holds), alone on its line."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or type(statement.body[0]) is not cst.Assign:
        return False
    assignment = statement.body[0]
    if len(assignment.targets) != 1 or type(assignment.targets[0].target) is not cst.Name or type(assignment.value) is not cst.Name:
        return False
    return {assignment.targets[0].target.value, assignment.value.value} == {name, other}


_GROWN_LISTS = "the names of the lists a module grows"  # (the question ``SyntaxTree.kept`` keeps its answer by)


def _grown_names(tree: SyntaxTree, module: cst.Module) -> frozenset[str | None]:
    """The names and attribute chains the module adds items to: receivers of ``append``, ``extend``,
    ``insert``, and targets of ``+=``."""
    appended = (
        call.func.value for call in tree.findall(module, cst.Call) if type(call.func) is cst.Attribute and call.func.attr.value in APPENDING_METHODS
    )
    added = (statement.target for statement in tree.findall(module, cst.AugAssign))
    return frozenset(dotted_name(node) for node in (*appended, *added))
