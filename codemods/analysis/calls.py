"""Call semantics: what a call hands back, and what it does to the graphs it is given.

A part of ``DataflowAnalysis`` (``dataflow``). A call is read by the first handler that knows its
callee: a backward (``frameworks``' rows), a function of the checked code (its summary), a module's
forward, an engine that wraps a model, a method (backwards, a module's methods, the tensor methods
of ``torch_api``'s tables), a torch function, a builtin; any other call is a function gradfix cannot
read, whose result holds what its arguments hold, guessed. Whether an operation saves tensors for
its backward is ``saved_tensors``' question.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from ..frameworks import BACKWARD_METHODS, CALLED_AS_FORWARD, FUNCTION_APIS, HANDING_BACK_METHODS, READING_LOGGERS, BackwardApi
from ..torch_api import (
    CASTING_METHODS,
    INTEGER_TYPES,
    INITIALIZING_FUNCTIONS,
    BOOKKEEPING_METHODS,
    MODULE_API,
    REGISTERING_METHODS,
    MODULE_ATTRIBUTES_WITHOUT_PARAMETERS,
    CREATION_FUNCTIONS,
    DETACHING_METHODS,
    EVERY_OUTPUT_DIFFERENTIABLE,
    FACTORY_METHODS,
    NON_DIFFERENTIABLE,
    PARAMETER_CLASSES,
    SAMPLING_METHODS,
    TUPLE_FUNCTIONS,
    is_optimizer_class,
)
from . import backward_calls
from .assignments import APPENDING_METHODS, is_inplace_method, written_in_place
from .backward_calls import BackwardSite
from .function_summaries import summary_key
from .loops import Env
from .module_info import ModuleInfo
from .detaching import creates_parameter
from .syntax import constant_key, dotted_name, turns_gradients_off
from .values import (
    CONSTANT,
    DISTRIBUTION,
    EMPTY,
    LEAF,
    FunctionOf,
    NOTHING,
    TENSOR,
    TOGGLED_PARAMETERS,
    UNREAD_PARAMETERS,
    UNKNOWN,
    ListOf,
    Origin,
    RecordOf,
    Structure,
    TupleOf,
    Value,
    combine,
    element_of,
    item_of,
    dict_of,
    joined,
    part,
    sharing_groups,
    union,
    yielded,
)

# Libraries of plain numbers: what they return carries no graph (and a graph cannot enter numpy).
_NUMBER_LIBRARIES = ("math.", "numpy.", "random.", "statistics.", "time.")
# (not ``round``: ``round(tensor)`` is a tensor with a graph)
_NON_GRAPH_BUILTINS = {"float", "int", "bool", "str", "len", "print", "range", "repr", "format", "isinstance", "id", "hash"}
_CONTAINER_BUILTINS = {"tuple", "list", "sorted", "reversed", "sum", "max", "min"}
_REDUCING_BUILTINS = {"sum", "max", "min"}
_LIST_BUILDING_BUILTINS = {"list", "sorted"}
_ITERATING_BUILTINS = {"enumerate", "reversed", "zip", "iter"}


class CallSemantics:
    """The call half of ``DataflowAnalysis``: each call's value, and the backwards it records."""

    def _eval_call(self, node: cst.Call, env: Env) -> Value:
        if self._slots and any(dotted_name(arg.value) in self._slots for arg in node.args) and not self._only_reads_its_arguments(node):
            self._escape_items([arg.value for arg in node.args], env)
        value = self._call_value(node, env)
        self._arguments_changed(node, env)
        if self._detaching_call(node.func):
            return CONSTANT
        (self.unread_results.add if value.graph and value.unread else self.unread_results.discard)(node)
        keeping = self.summarized_functions.get(self.callees[node]) if node in self.callees else None
        if keeping in self.keeping_functions:
            self.keeping_functions.add(self._scope.node)  # (what it hands that function, the function keeps)
        if value.graph and (self._called_class(node.func) in self.stateful_classes or keeping in self.keeping_functions):
            self._escape([value])  # the object keeps part of this graph: for its next call, or for whoever reads it
        return value

    def _arguments_of(self, node: cst.Call, arguments: Sequence[cst.BaseExpression], env: Env) -> list[Value]:
        """The values of ``node``'s ``arguments``: those the reading of its summary evaluated, where
        it hands the call back to be read as any other (``_call_summary``), else evaluated now. Each
        is evaluated once: a backward inside one (``normalize(torch.autograd.grad(loss, x)[0])``) is
        recorded once, not a second time over a graph its first record freed."""
        read = self._read_arguments.pop(node, None)
        return read if read is not None and len(read) == len(arguments) else self._eval_all(arguments, env)

    def _detaching_call(self, func: cst.BaseExpression) -> bool:
        """A call of a function or method of the file whose every return is detached (``repackage_hidden(h)``, ``self.model.f(h)``)."""
        detaching = self.names.detaching_functions
        if type(func) is cst.Name:  # (the module's function only where the name is bound to it alone)
            return self.names.module_function(func) in detaching
        if dotted_name(func) in detaching:  # ``Class.method(h)``
            return True
        called = self._called_class(func.value) if type(func) is cst.Attribute else None
        if called is None or f"{called}.{func.attr.value}" not in detaching:
            return False
        return self.names.runs_its_class_method(func.value, self._scope.class_name, func.attr.value)  # (``self.f(h)``: maybe a subclass's)

    def _called_class(self, func: cst.BaseExpression) -> str | None:
        """The file's own class whose instance (or method) a call runs: ``model(x)``, ``model.step(x)``."""
        class_name = self._scope.class_name
        for receiver in (func, func.value) if type(func) is cst.Attribute else (func,):
            instance = self.names.instance_class(receiver, class_name)
            module = self.names.module(receiver, class_name)
            if instance is not None:
                return instance
            if module is not None and module.is_local:
                return module.class_name
        return None

    def _call_value(self, node: cst.Call, env: Env) -> Value:
        value = self._read_call(node, env)
        shape = self._returned_shapes.pop(node, UNKNOWN)
        # A call of the file's function read as any call, shaped as its returns show (a later helper's ``(matrix, norm)``).
        return value.changed(structure=shape) if value.structure is UNKNOWN and shape is not UNKNOWN else value

    def _read_call(self, node: cst.Call, env: Env) -> Value:
        """The value of a call, read by the first handler that knows its callee."""
        func = node.func
        qualified = self.names.qualify(func) or ""
        if qualified in FUNCTION_APIS:
            return self._backward_function_call(node, FUNCTION_APIS[qualified], env)
        held = env.get(qualified) if not qualified.startswith("torch.") else None
        if held is not None and type(held.structure) is FunctionOf and not held.unbound:
            return self._torch_functions_call(node, held.structure.names, env)
        self.called_functions.pop(node, None)
        summary_result = self._call_summary(node, env)
        if summary_result is not None:
            return summary_result
        called_module = self.names.module(func, self._scope.class_name)
        if called_module is not None:
            return self._module_call(called_module, node, [arg.value for arg in node.args], env)
        if self.names.framework(func) in CALLED_AS_FORWARD:
            return self._engine_call(node, env)
        if type(func) is cst.Attribute and func.attr.value in HANDING_BACK_METHODS and self.names.framework(func.value) is not None:
            return self._handed_back(node, env)
        if type(func) is cst.Attribute and not self.names.is_torch(func.value):
            return self._method_call(node, qualified, env)
        return self._function_call(node, qualified, env)

    def _torch_functions_call(self, node: cst.Call, functions: frozenset[str], env: Env) -> Value:
        """A call of a name that holds one of torch's ``functions`` on every path (``cost(d_fake, label)``, ``cost`` being
        ``F.mse_loss`` or ``F.l1_loss``): the join of the calls spelled with each, kept as its row (``called_functions``)."""
        self.called_functions[node] = functions
        values = self._eval_all([arg.value for arg in node.args], env)
        if creates_parameter(self.names, node):
            return LEAF
        value = joined([self._torch_call(node, function, values) for function in sorted(functions)])
        if not functions <= EVERY_OUTPUT_DIFFERENTIABLE:
            self._differentiable_outputs.discard(node)  # (an item's graph is proved only where every callee proves it)
        return value

    def _backward_function_call(self, node: cst.Call, api: BackwardApi, env: Env) -> Value:
        """``torch.autograd.backward(...)``, ``torch.autograd.grad(...)``."""
        values = self._eval_all([arg.value for arg in node.args], env)
        self._record_backward(node, api, env)
        if api.accumulates or backward_calls.create_graph(api, node) is False:
            return CONSTANT
        # Gradients made with create_graph=True (a gradient penalty) carry a graph through everything the backward walked.
        return combine(values, self._origin(node), UNKNOWN)

    def _handed_back(self, node: cst.Call, env: Env) -> Value:
        """``accelerator.prepare(model, optimizer, loader)``, ``fabric.setup(...)``: what it is given,
        position for position, wrapped: a module, an optimizer or a loader holds no graph."""
        values = [CONSTANT if self._names_an_object(arg.value) else self._eval(arg.value, env) for arg in node.args]
        if len(values) == 1 or any(arg.star or arg.keyword is not None for arg in node.args):
            return joined(values)  # (one, or what arrives at which position is not known)
        self._call_items[node] = tuple(values)
        return joined(values).changed(structure=TupleOf(tuple(value.structure for value in values)))

    def _engine_call(self, node: cst.Call, env: Env) -> Value:
        """A call of an engine that wraps the model (DeepSpeed's): the model's forward."""
        arguments = [arg.value for arg in node.args]
        wrapped = self.names.wrapped_modules.get(self.names.key(node.func) or "")
        if wrapped is not None:
            return self._module_call(wrapped, node, arguments, env)
        return combine([*self._arguments_of(node, arguments, env), LEAF], self._origin(node), UNKNOWN)

    def _method_call(self, node: cst.Call, qualified: str, env: Env) -> Value:
        """``x.method(...)`` of anything but torch's modules: a backward, a module's method, a tensor method of
        ``_TENSOR_METHODS``, an append, or a method gradfix cannot read."""
        func = node.func
        method = func.attr.value
        if method in BACKWARD_METHODS and self._backward_method_call(node, env):
            return CONSTANT
        module = self.names.module(func.value, self._scope.class_name)
        if module is not None:
            return self._module_method_call(module, node, env)
        arguments = [arg.value for arg in node.args]
        receiver = self._eval(func.value, env)
        values = self._arguments_of(node, arguments, env)
        target = dotted_name(written_in_place(func.value))
        if method in REGISTERING_METHODS and len(values) > 1 and (name := constant_key(arguments[0])) and name[0] == "'" and target:
            env[f"{target}.{name[1:-1]}"] = values[1]  # (``self.register_buffer("w_avg", torch.zeros(4))``)
            return CONSTANT
        if _number_library_result(qualified, values):
            return CONSTANT
        if method in CASTING_METHODS and self._casts_to_integers(node):
            return Value(structure=TENSOR, graphless=True)
        view = None if values else self._dict_view(method, func.value, receiver)
        if view is not None:
            return view
        self._dict_method_may_write(method, target, receiver, env)
        handler = _TENSOR_METHODS.get(method)
        value = handler(node, receiver) if handler is not None else None
        if value is not None:
            if method in BOOKKEEPING_METHODS and target is not None:
                env[target] = value
            return value
        if target is not None:  # (``insert``, ``pop``, ``clear``: the slots move; ``append``, ``extend``: those counted from the end)
            self._forget_slots(target, env, keep_literal=(adding := method in ("append", "extend")), counted_from_end=adding)
        if method == "clear" and not values and target is not None and isinstance(receiver.structure, ListOf):
            env[target] = Value(structure=receiver.structure, graphless=True)  # (emptied in place: no item is left to hold a graph)
            self._emptied_in_place(target, env)
            return CONSTANT
        if method in APPENDING_METHODS and target is not None:
            item = values[-1] if values else NOTHING
            if method == "append" and target not in self.shared_objects:
                self._write_slot(target, f"{target}[-1]", item, env)  # (``losses[-1]`` is what was appended last)
            if arguments:
                self.assigned_values[arguments[-1]] = item
            if method == "extend":
                item = element_of(item)
            stored = env.get(target, NOTHING)
            if target in self.shared_objects:
                self._escape([item])  # (another name holds the list: what it reads there, the walk does not see)
            if "." in target and item.graph:
                self.keeping_functions.add(self._scope.node)  # (an object's list: whatever reads it after a call reaches its graph)
            item_structure = stored.structure.item if isinstance(stored.structure, ListOf) else item.structure
            env[target] = union([stored, item], ListOf(item_structure.join(item.structure)))
            return CONSTANT
        tensor_method = receiver.structure is TENSOR
        given_no_graph = all(value.graphless for value in values)  # (what the call is given, not what it may run)
        if not tensor_method and not receiver.graph and not receiver.graphless and self._part_of_a_module(func.value) and method not in MODULE_API:
            values = [*values, UNREAD_PARAMETERS]  # ``model.encoder.encode(x)``: a submodule gradfix cannot name
        elif self._calls_what_the_object_holds(func):
            values = [*values, UNREAD_PARAMETERS]  # ``self.G(z)``: a model the object was handed
        # A method of a graph-carrying receiver holds its graph as much as the receiver does; one of anything else
        # is a function gradfix cannot read, unless it read it.
        guessed = (not tensor_method and not receiver.graph) or all(v.guessed for v in (receiver, *values) if v.graph)
        # (one of what is proved to hold no graph, given nothing that holds one, returns none: ``a.numpy().squeeze(0)``)
        if not tensor_method and node not in self._read_callees:
            self._objects_may_change(node, env)
        result = self._read_result(self._read_callees.get(node), node, values, UNKNOWN) or combine(
            [receiver, *values],
            self._origin(node),
            TENSOR if tensor_method else UNKNOWN,
            known_operation=tensor_method or receiver.graphless,
            guessed=guessed,
            unread=(not tensor_method and not receiver.graph and not receiver.graphless) or all(v.unread for v in (receiver, *values) if v.graph),
        )
        if (
            is_inplace_method(method)
            and target is not None
            and not self.names.is_imported_module(func.value)
            and not self._names_an_object(func.value)
        ):
            # (not a module's object: ``commons.clip_grad_value_(...)``, ``accelerator.clip_grad_norm_(...)``). A tensor's
            # in-place operation writes the graph into it (into ``x.data``, none); of anything else, what it keeps is a guess.
            # Given nothing that may hold one, of a receiver that holds none (``eps.normal_()``), it builds no graph: it
            # hands back the receiver as it was (a graph the receiver holds, it extends: ``h.mul_(0.9)``).
            value = result if tensor_method else result.changed(guessed=True, unread=True)
            if target.endswith(".data"):
                env[target] = value.without_graph()
            elif receiver.graph or not given_no_graph:
                env[target] = value
            else:
                result = receiver
        if self._imported_code(func):
            self._escape(values)  # trpo.hessian_vector_product(kl, params) may backward what it is given
        return result

    def _casts_to_integers(self, call: cst.Call) -> bool:
        """``x.to(torch.long)``, ``x.to(dtype=torch.int64)``, ``x.type(torch.LongTensor)``: a cast to an ``INTEGER_TYPES``."""
        return any(self.names.qualify(arg.value) in INTEGER_TYPES for arg in call.args if arg.keyword is None or arg.keyword.value == "dtype")

    def _backward_method_call(self, node: cst.Call, env: Env) -> bool:
        """Whether ``x.backward(...)`` (or ``manual_backward``) is a row of ``frameworks``' backward table, then recorded."""
        func = node.func
        class_name = self._scope.class_name
        instance = self.names.instance_class(func.value, class_name)
        if instance is not None and self._summary_of(func) is not None:
            return False  # (a method of the file's own class, read: its summary says what it backwards)
        receiver = self._eval(func.value, env)
        passed = [value for arg, value in zip(node.args, self._eval_all([arg.value for arg in node.args], env)) if arg.keyword is None]
        api = backward_calls.method_api(
            func.attr.value,
            node,
            self.names.framework(func.value),
            receiver.graph and not self._names_an_object(func.value) and not any(v.graph for v in passed[:1]),
            class_name in self.names.lightning_classes,
            self.names.is_imported_module(func.value),
            receiver_is_an_object=self._names_an_object(func.value) or instance is not None,
            argument_is_graphless=bool(passed) and passed[0].graphless,
        )
        if api is None:
            return False
        self._record_backward(node, api, env)
        return True

    def _module_method_call(self, module: ModuleInfo, node: cst.Call, env: Env) -> Value:
        """``model.method(...)``: its forward, its parameters, or a method read by its summary."""
        method = node.func.attr.value
        arguments = [arg.value for arg in node.args]
        if method == "forward":
            return self._module_call(module, node, arguments, env)
        values = self._arguments_of(node, arguments, env)
        if method == "parameters" and module.trainable:
            return Value(graph=True, structure=ListOf(TENSOR))  # its parameters: leaves that require grad
        if method == "named_parameters" and module.trainable:  # (a name and a parameter, kept apart for ``for n, p in ...``)
            self.together[node] = (CONSTANT, LEAF)
            return union([CONSTANT, LEAF], ListOf(TupleOf((UNKNOWN, TENSOR))))
        summary = self._summary((module.class_name, method)) if module.is_local else None
        if summary is not None and not summary.has_effect and (items := self._returned_items(summary, node)) is not None:
            self._keep_returned_items(node, items, values)
        if summary is not None and summary.returned.graph:  # builds its result from parameters
            return combine([*values, LEAF], self._origin(node), summary.returned.structure)
        # D.compute_loss(fake, …): from its inputs (and maybe parameters gradfix does not see)
        read = self._read_result(summary and summary_key(summary), node, values, UNKNOWN)
        if read is not None:
            return read
        if summary is None and module.trainable and method not in MODULE_API:
            # a method gradfix did not read (its class is another file's, or it inherits it): it may
            # run the module's layers, ``self.policy.sample(state)``
            values = [*values, UNREAD_PARAMETERS]
        return combine(values, self._origin(node), UNKNOWN, known_operation=False)

    def _function_call(self, node: cst.Call, qualified: str, env: Env) -> Value:
        """``f(...)``: a class of the file, a parameter made, a module built, a torch function, a
        number library's, a builtin, or a function gradfix cannot read."""
        func = node.func
        arguments = [arg.value for arg in node.args]
        values = self._arguments_of(node, arguments, env)
        if type(func) is cst.Name and func.value in self.names.record_classes:
            return union(values, self._record_structure(func.value, node, values))
        if type(func) is cst.Name and func.value in self.names.local_classes:
            self._record_construction(func.value, node, values)
            if func.value in self._constructor_parameters:
                # An object: its methods read what it keeps from its ``__init__``; what reads it
                # from outside (``outputs.loss``) gets the graphs it was built with.
                return union(values, UNKNOWN) if func.value not in self.names.module_classes else NOTHING
        if creates_parameter(self.names, node):
            return LEAF
        if qualified in PARAMETER_CLASSES:
            return Value(structure=TENSOR, graphless=True)  # ``nn.Parameter(w, requires_grad=False)``: a new leaf of no graph
        if self.names.module_class(func) is not None:
            return NOTHING  # a module object
        if is_optimizer_class(qualified) or qualified in self.names.optimizer_classes:
            return NOTHING  # an optimizer object, whatever parameters it is handed
        if qualified.startswith("torch."):
            return self._torch_call(node, qualified, values)
        if _number_library_result(qualified, values):
            return CONSTANT
        if isinstance(func, cst.Name):
            if func.value in _NON_GRAPH_BUILTINS:
                return CONSTANT
            if func.value == "iter" and len(values) == 1:
                return values[0]  # an iterator over what it is given
            if (
                func.value == "getattr"
                and arguments
                and not self._names_a_value(func, env)
                and self.names.module(arguments[0], self._scope.class_name)
            ):
                return NOTHING  # an attribute of a module, as ``model.<name>`` reads it: a submodule, a parameter, a buffer
            if func.value == "next" and values:
                return joined([yielded(values[0]), *values[1:]])  # one step of the iteration, or the default
            if func.value == "dict" and all(arg.keyword is not None for arg in node.args) and not self._names_a_value(func, env):
                self._dict_items[node] = {repr(arg.keyword.value): value for arg, value in zip(node.args, values) if arg.keyword is not None}
                return union(values, dict_of(values))  # ``dict(loss=loss)``: constant keys
            if (together := self._iterated_together(node, values, env)) is not None:
                return together
            if func.value in _CONTAINER_BUILTINS:
                element = element_of(values[0]) if values else NOTHING
                if func.value in _LIST_BUILDING_BUILTINS:  # (a new list of what its argument yields: ``list()`` is ``[]``)
                    return part(element, ListOf(element.structure)) if values else Value(structure=ListOf(EMPTY), graphless=True)
                structure = element.structure if func.value in _REDUCING_BUILTINS else UNKNOWN
                return part(element, structure)
        # An unknown function of graph-carrying values (a loss function, a helper) is differentiable in all code we
        # have seen; passing a module in makes its result depend on parameters (or it is an object built around the
        # module, an optimizer, a wrapper: nothing is rewritten on what ``x.backward(arg)`` of it backwards). Not a
        # function of the file whose walk, calling what the parameter holds, found no graph in what it returns.
        module_arguments = [self.names.module(a, self._scope.class_name) for a in arguments] if node not in self._read_callees else []
        if any(m is not None and m.trainable for m in module_arguments) or isinstance(func, cst.Name) and func.value in self._module_items:
            values.append(LEAF)
        callee = self._eval(func, env)
        if node not in self._read_callees and not callee.graphless and self._names_a_value(func, env):
            # a callable the code holds (a parameter, an item of a list, what a factory built): a
            # module gradfix cannot see may be behind it, ``criterion(model_s(x), y)``
            values.append(UNREAD_PARAMETERS)
        if self._imported_code(func):
            self._escape(values)  # another package's function may backward what it is given
        read = self._read_result(self._read_callees.get(node), node, values, UNKNOWN)
        return read if read is not None else combine(values, self._origin(node), UNKNOWN, known_operation=False)

    def _record_structure(self, class_name: str, call: cst.Call, values: list[Value]) -> Structure:
        """``State(v, i)``, ``State(v=v, i=i)``: the named tuple with its fields' structures, when
        the call gives every field (by position or by name) and nothing else."""
        fields = self.names.record_classes[class_name]
        given: dict[str, Structure] = {}
        for position, (arg, value) in enumerate(zip(call.args, values)):
            if arg.star or (arg.keyword is None and position >= len(fields)):
                return UNKNOWN
            given[fields[position] if arg.keyword is None else arg.keyword.value] = value.structure
        if set(given) != set(fields):
            return UNKNOWN
        return RecordOf(tuple(given[name] for name in fields), class_name)

    def _record_construction(self, class_name: str, call: cst.Call, values: list[Value]) -> None:
        self.constructions.setdefault(class_name, []).append(tuple(reversed(self._loops)))
        parameters = self._constructor_parameters.get(class_name)
        if parameters is not None:
            self._record_arguments((class_name, "__init__"), parameters, call, values, freed=False)

    def _module_call(self, module: ModuleInfo, node: cst.Call, arguments, env: Env) -> Value:
        values = self._arguments_of(node, arguments, env)
        forward = self._summary((module.class_name, "forward")) if module.is_local else None
        if forward is not None:
            self._record_arguments((module.class_name, "forward"), forward.parameters, node, values)
            values = self._reaching((module.class_name, "forward"), node, values)  # (a state it starts afresh)
        # A module adds its parameters' graph where its forward does; a project class's, where proved or where it returns unread code's (a guess).
        project = module.project
        builds = project is None or project.returns_parameters or project.returns_unread
        if module.trainable and (forward.returned.graph if forward is not None else builds):
            values = [*values, TOGGLED_PARAMETERS if module.toggled else LEAF]
        result = self.forward_results.get(module.class_name, UNKNOWN) if module.is_local else module.call_result
        if forward is not None and forward.returned_given:
            result = self._returned_structure(forward, node)
        # A module known only by its use runs a forward gradfix did not read: what it returns may be anything (a
        # detached output, a dict), a guess; so does a project's class whose forward returns what such code gave it.
        unread = True if module.unread or (project is not None and (project.returns_unread or not project.returns_inputs)) else None
        called = combine(values, self._origin(node), result, guessed=unread, unread=unread)
        if forward is not None and not forward.has_effect and (items := self._returned_items(forward, node)) is not None:
            self._keep_returned_items(node, items, values)
        elif forward is None and project is not None and project.returned_items is not None:
            # a class of another module of the project: its forward's items as that module read them
            marks = [Origin(cst.Name(f"item{item.group}"), self._statement) for item in project.returned_items]
            exported = tuple(
                Value(
                    item.graph and not self._no_grad,  # (under no_grad: no graph, and no origin to place one)
                    frozenset({marks[item.group]}) if item.graph else frozenset(),
                    TENSOR if item.tensor else UNKNOWN,
                    graphless=item.graphless,
                    guessed=item.guessed,
                )
                for item in project.returned_items
            )
            self._keep_returned_items(node, exported, values)
        elif forward is None and isinstance(result, TupleOf):
            # every output of a torch.nn module is computed from its input and its parameters
            self._call_items[node] = tuple(Value(graph=True, structure=item) for item in result.items)
            self._differentiable_outputs.add(node)
        return called if forward is None else self._freed_inside(node, forward, called)

    def _torch_call(self, node: cst.Call, qualified: str, values: list[Value]) -> Value:
        unbound = qualified[len("torch.Tensor.") :] if qualified.startswith("torch.Tensor.") else ""
        if unbound in _TENSOR_METHODS and values and node.args[0].keyword is None and not node.args[0].star:
            # ``torch.Tensor.detach(x)`` is ``x.detach()``: the method, called on its first argument
            if (value := _TENSOR_METHODS[unbound](node, values[0])) is not None:
                return value
        if qualified.rsplit(".", 1)[-1] in CREATION_FUNCTIONS or qualified.count(".") == 1 and qualified[6:] in NON_DIFFERENTIABLE:
            return Value(structure=TENSOR, graphless=True)
        initialized = node.args[0] if node.args and qualified.startswith("torch.nn.init.") and qualified[14:] in INITIALIZING_FUNCTIONS else None
        if initialized is not None and initialized.keyword is None and not initialized.star:
            return values[0]  # (the tensor it was given, filled)
        if qualified.startswith("torch.distributions."):
            return combine(values, self._origin(node), DISTRIBUTION)
        if qualified in TUPLE_FUNCTIONS:
            if qualified in EVERY_OUTPUT_DIFFERENTIABLE:
                self._differentiable_outputs.add(node)
            return combine(values, self._origin(node), TupleOf((TENSOR,) * TUPLE_FUNCTIONS[qualified]))
        return combine(values, self._origin(node))

    def _items_of_the_call(self, call: cst.Call, whole: Value, targets: Sequence[cst.BaseExpression]) -> list[Value] | None:
        """What each target of ``a, b = f(...)`` holds, for a function of the file whose every return writes out a tuple of
        that length: nothing, where the returns prove an item graphless (``return loss, acc.item()``, ``return penalty,
        mean.detach()``); the graph of the whole call for any other item, guessed where the returns prove it no tensor."""
        if len(targets) == 2 and self.names.returns_indices(call):
            return [item_of(whole, TENSOR), Value(structure=TENSOR, graphless=True)]
        items = self._call_items.get(call)
        if items is None or len(items) != len(targets):
            return None
        groups = sharing_groups(items, given_a_graph=call not in self._items_given_no_graph)
        call_origin = next((o for o in whole.origins if isinstance(o, Origin) and o.node is call), self._origin(call))
        # (an item the walk with what the callers pass found no graph in holds one only through what it did not know)
        walked = self._items_with_arguments.get(self.callees.get(call))
        values = []
        for index, item in enumerate(items):
            unproved = not (item.graph or item.structure is TENSOR) or walked is not None and len(walked) == len(items) and not walked[index].graph
            value = part(whole, item.structure).changed(guessed=whole.guessed or item.guessed or unproved)
            if call_origin in value.origins and groups[index] != groups[0]:
                # Items the callee builds from no node in common share nothing of the call: each group of them stands
                # for its own part (``return policy_loss, q1_loss, q2_loss`` of three networks).
                value = value.changed(
                    origins=value.origins - {call_origin} | {Origin(targets[groups[index]], call_origin.statement, call_origin.possible)}
                )
            values.append(Value(structure=item.structure, graphless=True) if item.graphless else value)
        return values

    def _escape(self, values: Sequence[Value]) -> None:
        """Graphs handed to code gradfix does not follow, which may backward them later."""
        for value in values:
            if value.graph:
                self.escaped.setdefault(self._scope.node, set()).update(self.graph_nodes(value))

    def _only_reads_its_arguments(self, call: cst.Call) -> bool:
        """``print(d)``, ``len(d)``, ``sum(d)``, a torch function, a logger's method: it writes to or keeps nothing it is handed."""
        func, builtin = call.func, call.func.value if type(call.func) is cst.Name else ""
        if builtin in self._defined_functions or builtin in self.names.aliases:
            builtin = ""  # (the file binds the name to other code: not the builtin)
        # (an iterator over it that only a ``for`` reads, which no name holds: ``for i, x in enumerate(xs)``)
        walked = builtin in _ITERATING_BUILTINS and isinstance(loop := self._tree.parent(call), cst.For) and loop.iter is call
        return (
            walked
            or builtin in _NON_GRAPH_BUILTINS
            or builtin in _CONTAINER_BUILTINS - {"reversed"}
            or self.names.is_torch(func)
            or self._only_reads(func)
        )

    def _may_keep_its_arguments(self, call: cst.Call) -> bool:
        """A call made for its effect (``hook(out)``, ``self.log_graph(loss)``), not a torch
        function, a builtin that only reads, a module or a backward."""
        func = call.func
        if call in self.backward_sites or self.names.is_torch(func) or call in self.called_functions:
            return False
        if type(func) is cst.Name and func.value in _NON_GRAPH_BUILTINS:
            return False
        if type(func) is cst.Attribute and (func.attr.value in APPENDING_METHODS or func.attr.value in DETACHING_METHODS):
            return False
        if self._only_reads(func):
            return False
        return self.names.module(func, self._scope.class_name) is None

    def _part_of_a_module(self, node: cst.BaseExpression) -> bool:
        """An attribute (of an attribute…) of a module, or of ``self`` in a module class, that gradfix
        knows no more of: ``model.gcn``, ``self.policy`` (a submodule of a class it did not read)."""
        class_name = self._scope.class_name
        while type(node) is cst.Attribute:
            if node.attr.value in MODULE_ATTRIBUTES_WITHOUT_PARAMETERS:
                return False
            node = node.value
            if self.names.module(node, class_name) is not None:
                return True
            if type(node) is cst.Name and node.value == "self" and class_name in self.names.module_classes:
                return True
        return False

    def _calls_what_the_object_holds(self, func: cst.Attribute) -> bool:
        """``self.G(z)`` in a method, where the class's methods assign ``self.G`` and it defines no
        method ``G``: a value the object holds (a model or a criterion handed to its constructor),
        which may run parameters gradfix did not see, as a callable handed to a function does."""
        scope = self._scope
        if scope.class_name is None or type(scope.node) is not cst.FunctionDef or not scope.node.params.params:
            return False
        me, attribute = scope.node.params.params[0].name.value, func.attr.value
        return (
            type(func.value) is cst.Name
            and func.value.value == me
            and attribute in self._attributes_assigned.get(scope.class_name, ())
            and attribute not in self._method_names.get(scope.class_name, ())
        )

    def _names_a_value(self, func: cst.BaseExpression, env: Env) -> bool:
        """Whether the callee is a value the code holds, not a function, class or import it names:
        a parameter or a name bound by an assignment, an item of a container, what a call returned."""
        if type(func) is cst.Call:  # what a call returned, unless torch's or the file's class built it (``nn.ReLU()(x)``)
            inner = func.func
            known = self.names.module_class(inner) is not None or (self.names.qualify(inner) or "").startswith("torch.")
            return not known and not (type(inner) is cst.Name and inner.value in self.names.local_classes)
        if type(func) is cst.Subscript:
            return True
        if type(func) is not cst.Name:
            return False
        name = func.value
        if name in self.names.aliases or name in self.names.local_classes or name in self._defined_functions:
            return False
        scope = self._scope.node
        return name in env or (type(scope) is cst.FunctionDef and name in self._local_names(scope))

    def _imported_code(self, func: cst.BaseExpression) -> bool:
        """A function or class an import names (``trpo.hessian_vector_product``, ``from utils import
        helper``), outside torch and the number libraries: code gradfix does not read here."""
        name = dotted_name(func)
        qualified = self.names.qualify(func) or ""
        return name is not None and name.split(".")[0] in self.names.aliases and not qualified.startswith(("torch.", *_NUMBER_LIBRARIES))

    def _only_reads(self, func: cst.BaseExpression) -> bool:
        """A method of an object of a class that only reads what it is given (``writer.add_scalar``)."""
        return isinstance(func, cst.Attribute) and self.names.constructed.get(self.names.key(func.value) or "") in READING_LOGGERS

    def _names_an_object(self, node: cst.BaseExpression) -> bool:
        """A module, an optimizer or a framework object: never a graph, whatever it is built from."""
        return (
            self.names.module(node, self._scope.class_name) is not None
            or self.names.framework(node) is not None
            or dotted_name(node) in self.names.optimizers
            or self.names.key(node) in self.names.objects
        )

    def _record_backward(self, call: cst.Call, api: BackwardApi, env: Env) -> None:
        tensors = backward_calls.backwarded_expressions(api, call)
        values = [self._eval(tensor, env) for tensor in tensors]
        value = joined(values)
        if api.guessed:  # what it may backward: its argument or its object
            value = value.join(self._eval(call.func.value, env))
        retain_graph = backward_calls.retain_graph(api, call)
        # A kept graph, one gradfix cannot tell, or a tensor it guessed is not proved freed.
        frees = retain_graph is False and not api.guessed
        inputs = backward_calls.argument(call, 1, "inputs") if api.name == "torch.autograd.grad" else None
        stops_at = self._eval(inputs.value, env) if inputs is not None else NOTHING
        walked = self.walked_nodes(value, stops_at)
        # It frees what the walked nodes saved for it; a graph of sums and views of leaves saved
        # nothing, and what shares only such nodes can be backwarded again. (Nor a node that only
        # may exist, of a graph gradfix did not see: nothing is proved freed there.)
        saving = frozenset(origin for origin in walked if not origin.possible and self.saves_tensors(origin.node)) if frees else frozenset()
        freed = set(self._sharing_graph(env, saving))
        for name in self._sharing_graph(env, walked):
            held = env[name]
            # The very tensor (an alias holds the same value), not another that shares its graph.
            backwarded = held.backwarded | {call} if any(held is v for v in values) else held.backwarded
            env[name] = held.changed(freed=held.freed or name in freed, backwarded=backwarded)
        for tensor, held in zip(tensors, values):
            name = dotted_name(tensor)
            if name is not None:  # known to be this very tensor even when its graph is not
                before = env.get(name, held)
                env[name] = before.changed(freed=before.freed or bool(saving), backwarded=before.backwarded | {call})
        self.backward_sites[call] = BackwardSite(
            call=call,
            statement=self._statement,
            api=api,
            tensors=tensors,
            value=value,
            retain_graph=retain_graph,
            create_graph=backward_calls.create_graph(api, call),
            loops=tuple(reversed(self._loops)),
            scope=self._scope,
            stops_at=stops_at,
            runs_as_walked=self._runs_unknown == 0,
        )


def _number_library_result(qualified: str, values: Sequence[Value]) -> bool:
    """Whether a call of ``math``, ``numpy``, ``random``, ``statistics`` or ``time`` returns nothing that holds a graph: when
    given nothing that holds one (nothing they keep holds one). Given a graph, it may hand it back: ``random.choice(losses)``,
    ``np.squeeze(t)`` (numpy hands the call to the tensor's own method)."""
    return qualified.startswith(_NUMBER_LIBRARIES) and not any(value.graph for value in values)


# Tensor methods whose value the method alone tells, by name: each handler takes the call and what
# its receiver holds, and returns the call's value (None: the method of something else, read as any
# other). What a bookkeeping method returns is also what its receiver holds after it.
def _detached(call: cst.Call, receiver: Value) -> Value:
    return Value(structure=TENSOR if call.func.attr.value == "detach" else UNKNOWN, graphless=True)


def _sampled(call: cst.Call, receiver: Value) -> Value | None:
    return Value(structure=UNKNOWN, graphless=True) if receiver.structure is DISTRIBUTION else None


def _without_history(call: cst.Call, receiver: Value) -> Value:
    return Value(structure=TENSOR, graphless=True)


def _made_by_factory(call: cst.Call, receiver: Value) -> Value:
    asked = any(arg.keyword is not None and arg.keyword.value == "requires_grad" for arg in call.args)
    return LEAF if asked else Value(structure=TENSOR, graphless=True)


def _bookkept(call: cst.Call, receiver: Value) -> Value:
    if call.func.attr.value == "requires_grad_" and not turns_gradients_off(call):
        # A tensor with a graph keeps it (requires_grad_ on it changes nothing); any other becomes a leaf.
        return receiver if receiver.graph and receiver.origins else LEAF
    return Value(structure=TENSOR, graphless=True)


_TENSOR_METHODS = {
    **dict.fromkeys(DETACHING_METHODS, _detached),
    **dict.fromkeys(SAMPLING_METHODS, _sampled),
    **dict.fromkeys(NON_DIFFERENTIABLE, _without_history),
    **dict.fromkeys(FACTORY_METHODS, _made_by_factory),
    **dict.fromkeys(BOOKKEEPING_METHODS, _bookkept),
}
