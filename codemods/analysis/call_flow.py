"""Facts handed along the file's own calls: a parameter of one of the file's functions, of a
class's ``__init__`` or of a method of one of its classes, that every call in the file passes a
module (``backward_outputs(conv1, conv2, x)``), the same framework object (``train(fabric, ...)``)
or an instance of the same class of the file (``task.train_step(sample, model, criterion,
optimizer)``) names one: the fact of the caller's variable becomes the callee's, along the call,
whatever either is named.

*Must* only where every call is read: a callee is resolved by what its receiver is (a function of
the module, ``Class(...)``, ``self.m(...)`` in the class, ``x.m(...)`` on an instance the file
built or handed on), and a method is left alone where any call of a method of its name has a
receiver gradfix cannot name, where its class is not plain (a base other than the file's plain
classes: a trainer, an ``nn.Module``, whose methods the library calls; or subclasses in the file,
whose ``super()`` calls and overrides are not counted), where it is a dunder (the language calls
it: ``obj(x)``) or where a decorator changes what it receives. Read again until
nothing changes (an instance handed on is resolved only once it is known), at most a few times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from .module_info import ModuleInfo
from .scopes import Scopes
from .syntax import dotted_name, parameter_receiving
from .tree import SyntaxTree

if TYPE_CHECKING:
    from .torch_facts import TorchNames

# (how many times the calls are read again: each pass may hand an instance one call deeper)
_PASSES = 4

Callee = tuple[str, cst.FunctionDef, bool]  # (its name, its definition, whether a receiver comes first)


def flow_along_calls(
    names: TorchNames,
    scopes: Scopes,
    tree: SyntaxTree,
    calls: list[cst.Call],
    functions: dict[str, cst.FunctionDef],
    methods: dict[tuple[str, str], cst.FunctionDef],
    plain: set[str],
    constructed_module: Callable[[cst.BaseExpression], ModuleInfo | None],
) -> None:
    """Give each parameter the fact every call of the file hands it (see the module's docstring)."""
    flow = _Flow(names, scopes, tree, functions, methods, plain, constructed_module)
    for _ in range(_PASSES):
        if not flow.once(calls):
            return


class _Flow:
    def __init__(
        self,
        names: TorchNames,
        scopes: Scopes,
        tree: SyntaxTree,
        functions: dict[str, cst.FunctionDef],
        methods: dict[tuple[str, str], cst.FunctionDef],
        plain: set[str],
        constructed_module: Callable[[cst.BaseExpression], ModuleInfo | None],
    ) -> None:
        self.names = names
        self.scopes = scopes
        self.tree = tree
        self.functions = functions
        self.methods = methods
        self.plain = plain  # classes whose methods only the file's code calls
        self.constructed_module = constructed_module

    def once(self, calls: list[cst.Call]) -> bool:
        """One reading of every call; whether it taught a parameter something new."""
        count: dict[str, int] = {}
        handed: dict[tuple[str, str], list[tuple[ModuleInfo | None, str | None, str | None]]] = {}
        unresolved_methods: set[str] = set()
        for call in calls:
            callee = self._callee(call)
            if callee is None:
                if type(call.func) is cst.Attribute:
                    unresolved_methods.add(call.func.attr.value)
                continue
            name, function, skips_first = callee
            count[name] = count.get(name, 0) + 1
            for position, arg in enumerate(call.args):
                if arg.star:
                    continue  # (what arrives where is not known: this call hands no fact)
                keyword = arg.keyword.value if arg.keyword is not None else None
                parameter = parameter_receiving(function, position, keyword, skips_first)
                if parameter is not None:
                    variable = (name, self.scopes.key_in(function, parameter))
                    handed.setdefault(variable, []).append(self._facts(arg.value, call))
        changed = False
        for (name, parameter), facts in handed.items():
            method = name.rpartition(".")[2] if "." in name else None
            if len(facts) != count[name] or (method is not None and method in unresolved_methods):
                continue
            changed |= self._learn(parameter, facts)
        return changed

    def _learn(self, parameter: str, facts: list[tuple[ModuleInfo | None, str | None, str | None]]) -> bool:
        names, changed = self.names, False
        modules = [module for module, _, _ in facts if module is not None]
        # (a parameter only seen calling a module's method, ``model.parameters()``, is a module of no known class)
        if len(modules) == len(facts) and not names.modules.get(parameter, ModuleInfo("")).class_name:
            same = all(module == modules[0] for module in modules)
            learned = modules[0] if same else ModuleInfo("", frozen=all(m.frozen for m in modules))
            changed |= names.modules.get(parameter) != learned
            names.modules[parameter] = learned
        for table, kinds in ((names.frameworks, [framework for _, framework, _ in facts]), (names.instances, [instance for _, _, instance in facts])):
            first = kinds[0]
            if first is not None and all(kind == first for kind in kinds) and parameter not in table:
                table[parameter] = first
                changed = True
        return changed

    def _facts(self, value: cst.BaseExpression, call: cst.Call) -> tuple[ModuleInfo | None, str | None, str | None]:
        """What the argument ``value`` is: a module, a framework object, an instance of a class of the file."""
        names, class_name = self.names, self._class_of(call)
        if type(value) is cst.Call:
            built = dotted_name(value.func)
            instance = built if built in names.local_classes and self.scopes.key(value.func) == built else None
            return self.constructed_module(value), None, instance
        key = names.key(value)
        return names.module(value, class_name), names.frameworks.get(key or ""), names.instance_class(value, class_name)

    def _callee(self, call: cst.Call) -> Callee | None:
        func = call.func
        if type(func) is cst.Name:
            if self.scopes.key(func) != func.value:
                return None  # (a variable of the function calling it, not the module's function)
            if func.value in self.functions:
                return func.value, self.functions[func.value], False
            init = self.methods.get((func.value, "__init__"))
            if init is not None and func.value in self.plain and _plain(init):
                return func.value, init, True
            return None
        if type(func) is not cst.Attribute:
            return None
        receiver = func.value
        if type(receiver) is cst.Call:
            built = dotted_name(receiver.func)
            owner = built if built in self.names.local_classes and self.scopes.key(receiver.func) == built else None
        else:  # (the class around the call names only ``self``: looked for only then)
            owner = self.names.method_class(
                receiver, self._class_of(call) if type(receiver) is cst.Name and receiver.value == "self" else None, func.attr.value
            )
        method = self.methods.get((owner, func.attr.value)) if owner is not None else None
        if owner not in self.plain or method is None or func.attr.value.startswith("__") or not _plain(method):
            return None  # (a dunder runs by the language's own calls too: ``obj(x)``, ``with obj``)
        return f"{owner}.{func.attr.value}", method, True

    def _class_of(self, node: cst.CSTNode) -> str | None:
        """The class whose method ``node`` is in (``self`` there is an instance of it)."""
        parent = self.tree.parent(node)
        while parent is not None:
            if type(parent) is cst.ClassDef:
                return parent.name.value
            parent = self.tree.parent(parent)
        return None


def _plain(function: cst.FunctionDef) -> bool:
    """A function that receives what its calls pass as written: no decorator (a ``staticmethod``
    would not take the receiver, a ``property`` is no call, a wrapper may pass anything)."""
    return not function.decorators


def passed_for(tree: SyntaxTree, module: cst.Module, scope: cst.CSTNode | None, name: str | None) -> list[str | None]:
    """What the dotted ``name`` (a module a statement of ``scope`` calls) may be in the callers' own
    names: itself, where its first part is no parameter of ``scope``; else what every call of the
    file passes that parameter, the rest of ``name`` after it (``model.encoder`` of
    ``training_loop(model=linear_model)`` is ``linear_model.encoder``): a function of the module
    called by its name, or a class's ``__init__`` by the class's. None for what gradfix cannot name:
    an argument that is no dotted name, a callee it cannot find every call of (a method, a function
    called from no place of the file or handed on)."""
    if name is None or not isinstance(scope, cst.FunctionDef):
        return [name]
    first, _, rest = name.partition(".")
    owner = tree.parent(tree.parent(scope) or scope)
    is_method = isinstance(owner, cst.ClassDef)
    parameters = [p.name.value for p in scope.params.params]
    if first not in parameters or is_method and parameters[0] == first:
        return [name]
    callee = scope.name.value if not isinstance(owner, cst.ClassDef) else owner.name.value if scope.name.value == "__init__" else None
    named_by = [n for n in tree.names(module, [callee])] if callee is not None else []
    calls = [call for n in named_by if isinstance(call := tree.parent(n), cst.Call) and call.func is n]
    if not calls or len(calls) != len(named_by) - 1:  # (its name read other than as a call, but where defined: handed on)
        return [None]
    passed: list[str | None] = []
    for call in calls:
        found = [
            dotted_name(arg.value)
            for position, arg in enumerate(call.args)
            if not arg.star and parameter_receiving(scope, position, arg.keyword.value if arg.keyword else None, is_method) == first
        ]
        passed += [f"{found[0]}.{rest}" if rest and found[0] else found[0]] if len(found) == 1 and not any(a.star for a in call.args) else [None]
    return passed
