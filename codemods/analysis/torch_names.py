"""What the file's names mean in terms of torch: import aliases, module classes and instances,
parameters, and functions that return detached values.

This is a cheap syntactic pass (no qualified-name metadata): it reads imports and assignments once
and resolves dotted names like ``F.mse_loss`` to ``torch.nn.functional.mse_loss``.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from ..frameworks import (
    AUTOGRAD_FUNCTION_BASES,
    FRAMEWORK_CONSTRUCTORS,
    FRAMEWORK_TUPLE_CONSTRUCTORS,
    GRADIENT_HOOK_METHODS,
    GRADIENT_HOOKING_LIBRARIES,
    HANDING_BACK_METHODS,
    MODULE_WRAPPERS,
    LIGHTNING_AUTOMATIC_OPTIMIZATION,
    LIGHTNING_HOOK,
    LIGHTNING_OPTIMIZERS_HOOK,
    LIGHTNING_OPTIMIZERS_METHOD,
    OPTIMIZER_BASES,
    OPTIMIZER_ONLY_METHODS,
    TRAINER_ATTRIBUTES,
    TRAINER_HOOKS,
    WRAPPED_MODEL_KEYWORDS,
)
from ..torch_api import MODULE_METHODS, MODULE_RETURNING, PARAMETER_METHODS, is_optimizer_class
from .lightning_optimizers import LightningOptimizers, is_configure_optimizers
from .syntax import changes_in_place, dotted_name, is_name, method_called, method_receiver, parameter_receiving, turns_gradients_off, unpacked
from .changed_in_place import loaded_in_a_loop, modules_changed_by_a_loop
from ..summaries import ExportedModuleClass, ProjectSummaries
from .assignments import assigned_names
from .call_flow import flow_along_calls
from .call_targets import METHOD_DECORATORS, decorators_modelled, placeholder, rebound_functions, stored_attribute_names
from .classes_below import bound_again, classes_read_ahead
from .detaching import creates_parameter, returns_detached
from .guards import runs_only_under_a_test
from .module_info import ModuleInfo
from .scopes import Scopes, spelling
from .torch_facts import TorchNames
from .tree import SyntaxTree


class _TorchNamesCollector(cst.CSTVisitor):
    def __init__(self, tree: SyntaxTree) -> None:
        self._scopes = Scopes(tree)
        self.names = TorchNames(scopes=self._scopes)
        self._key = self.names.key  # (the variable a dotted expression names where it is written)
        self._tree = tree
        self._classes: list[str] = []
        self._aliases: list[tuple[str | None, str, str]] = []  # (class, target, module name) to resolve
        self._class_nodes: list[cst.ClassDef] = []
        self._frozen_names: set[str] = set()
        self._frozen_classes: set[str] = set()
        # Modules (and classes, through ``self``) whose parameters some code turns gradients on for
        # again, or to a value gradfix cannot read: not frozen for the whole file.
        self._switched_on: set[str] = set()
        self._switched_on_classes: set[str] = set()
        self._switching_classes: set[str] = set()  # classes not Lightning's whose body sets ``automatic_optimization`` (mixins)
        self._functions: list[cst.FunctionDef] = []
        self._by_parameter_loops: set[int] = set()  # updates inside ``for p in model.parameters():``
        self._name_lists: dict[str, cst.BaseExpression] = {}  # name -> the list or tuple literal bound to it
        self._callables: dict[str, cst.FunctionDef] = {}  # module-level function, or class -> its __init__
        # (name, callee, position, keyword, the function passing it, the name's key): names passed to
        # the file's own functions and classes, stored only if the callee stores (or passes on) the parameter.
        self._handed: list[tuple[str, str, int, str | None, cst.FunctionDef | None, str]] = []
        self._handed_under_a_test: set[int] = set()  # (of ``_handed``: the calls that run only where a test lets them)
        self._calls: list[cst.Call] = []  # every call, for the facts handed along them (``call_flow``)
        self._methods: dict[tuple[str, str], cst.FunctionDef] = {}  # (class, name) -> method, of top-level classes
        self._plain_classes: set[str] = set()  # classes of the file of no base but ``object`` and the file's plain classes
        self._derived: set[str] = set()  # the file's classes another class of the file derives from
        self._local_bases = self.names.local_bases
        self._module_defs: list[cst.FunctionDef] = []  # every ``def`` of the module's scope, in order
        self._rebound_classes: set[str] = set()  # class names the module binds more than once (``bound_again``)
        self._stored_in: dict[cst.FunctionDef | None, set[str]] = {}
        self._bindings: dict[str, list[str | None]] = {}  # key -> what each assignment binds it to (a name, or None)
        self._assigned_aliases: set[str] = set()  # names an assignment made another name for torch's
        self._spelled_bindings: dict[str, int] = {}  # spelling -> how many assignments bind it, in any scope
        self.lightning = LightningOptimizers()
        # The classes below a function body that it means by their names (``classes_below``), by
        # the function; and those learned on entering the function body being read.
        self._ahead = classes_read_ahead(tree)
        self._read_ahead: tuple[str, ...] = ()

    # imports ---------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.names.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.names.aliases[head] = head

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        """``from a.b import c``; a relative import (``from .b import c``) keeps its dotted tail, how other checked files are known."""
        if isinstance(node.names, cst.ImportStar):
            return
        if node.module is None:  # from . import utils
            for alias in node.names:
                imported = dotted_name(alias.name)
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else imported
                if imported is not None and local is not None:
                    self.names.aliases[local] = imported
            return
        base = dotted_name(node.module)
        for alias in node.names:
            imported = dotted_name(alias.name)
            if base is None or imported is None:
                continue
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.names.aliases[local] = f"{base}.{imported}"

    # classes and functions -------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        class_name = node.name.value
        self._learn_class(node)
        for base in node.bases:
            name = self.names.qualify(base.value) or ""
            if name in self.names.local_classes:
                self.lightning.local_bases.setdefault(class_name, set()).add(name)
            self.names.frameworks.update(TRAINER_ATTRIBUTES.get(name, {}))
            if name in AUTOGRAD_FUNCTION_BASES:
                self.names.gradient_hooks.append(node)
        bases = [self.names.qualify(base.value) or "" for base in node.bases]
        self._derived.update(bases)
        self._local_bases[class_name] = [base for base in bases if base in self.names.local_classes and base != class_name]
        if not node.keywords and all(base == "object" or base in self._plain_classes for base in bases):
            self._plain_classes.add(class_name)
        self._classes.append(class_name)
        self._class_nodes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def _learn_class(self, node: cst.ClassDef) -> None:
        """What ``CLASS_TABLES`` hold of a class, from its name and bases."""
        class_name = node.name.value
        self.names.local_classes.add(class_name)
        for base in node.bases:
            name = self.names.qualify(base.value) or ""
            if name == "typing.NamedTuple":
                self.names.record_classes[class_name] = tuple(
                    statement.body[0].target.value
                    for statement in node.body.body
                    if isinstance(statement, cst.SimpleStatementLine)
                    and isinstance(statement.body[0], cst.AnnAssign)
                    and isinstance(statement.body[0].target, cst.Name)
                )
            hook = TRAINER_HOOKS.get(name) or self.names.trainer_hooks.get(name)
            if hook is not None:
                self.names.trainer_hooks[class_name] = hook
            if hook == LIGHTNING_HOOK or name in self.names.lightning_classes:
                self.names.lightning_classes.add(class_name)
            if name in self.names.manual_optimization:
                self.names.manual_optimization.add(class_name)
            if name in OPTIMIZER_BASES or name in self.names.optimizer_classes:
                self.names.optimizer_classes.add(class_name)
            if name == "torch.nn.Module" or name in self.names.module_classes or class_name in self.names.lightning_classes:
                self.names.module_classes.add(class_name)
        read = self.names.local_classes | TRAINER_HOOKS.keys() | {"object", "torch.nn.Module"}  # (bases whose constructor is modelled)
        if class_name in self.names.lightning_classes and any((self.names.qualify(base.value) or "") not in read for base in node.bases):
            self.names.manual_optimization.add(class_name)  # (maybe: its constructor runs code gradfix did not read)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == LIGHTNING_AUTOMATIC_OPTIMIZATION:  # a property
            self.names.automatic_optimization_unknown = True
        if not self._functions:
            if not self._classes:
                self._callables[node.name.value] = node
                self._module_defs.append(node)
            elif node.name.value == "__init__" and len(self._classes) == 1:
                self._callables[self._classes[-1]] = node
            if len(self._classes) == 1:
                self._methods[(self._classes[-1], node.name.value)] = node
        elif type(self._enclosing_scope(node)) is cst.FunctionDef:  # (a function's own ``def``, under an ``if`` too)
            self.names.function_aliases[self._scopes.key_in(self._functions[-1], node.name.value)] = node.name.value
        if not self._functions and self._ahead and (below := self._ahead.get(id(node))):
            self._read_ahead = tuple(c.name.value for c in below)  # (their names bound nowhere else)
            for class_node in below:
                self._learn_class(class_node)
        self._functions.append(node)
        for param in node.params.params:
            annotation = param.annotation
            if annotation is None:
                continue
            qualified = self.names.qualify(annotation.annotation)
            key = self._scopes.key_in(node, param.name.value)  # (the function's own parameter)
            if qualified == "torch.nn.Module":
                self.names.modules[key] = ModuleInfo("", unread=True)
            elif qualified in FRAMEWORK_CONSTRUCTORS:
                self.names.frameworks[key] = FRAMEWORK_CONSTRUCTORS[qualified]

    def visit_Return(self, node: cst.Return) -> None:
        """A LightningModule's ``configure_optimizers`` returns optimizers the trainer steps
        (``return torch.optim.Adam(...)``) and ``self.optimizers()`` hands back (by position)."""
        if not self._classes or self._classes[-1] not in self.names.lightning_classes:
            return
        if len(self._functions) == 1 and is_configure_optimizers(self._functions[0]):
            generator = bool(self._tree.findall(self._functions[0].body, cst.Yield))
            self.lightning.note_return(self._classes[-1], None if generator else node.value, self._built_optimizer)
        for call in self._tree.findall(node.value, cst.Call) if node.value is not None else ():
            callee = self.names.qualify(call.func) or ""
            if is_optimizer_class(callee) or callee in self.names.optimizer_classes:
                hook = cst.Attribute(cst.Name(self._classes[-1]), cst.Name(LIGHTNING_OPTIMIZERS_HOOK))
                self._bind_optimizers(hook, call, callee)

    def _built_optimizer(self, call: cst.Call) -> set[str] | None:
        """The modules the optimizer ``call`` builds trains; None when gradfix cannot tell."""
        callee, args = self.names.qualify(call.func) or "", call.args
        built = (is_optimizer_class(callee) or callee in self.names.optimizer_classes) and args and args[0].keyword is None
        return self._optimized_modules(args[0].value) if built else None

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()
        if self._functions:
            return
        if len(self._classes) <= 1:
            name = original_node.name.value
            qualified = f"{self._classes[-1]}.{name}" if self._classes else name  # a method: ``Class.method``
            if returns_detached(original_node, self._tree, self.names):
                self.names.detaching_functions.add(qualified)
        if self._read_ahead:  # (the module's statements above the classes raise NameError)
            self.names.forget_classes(self._read_ahead)
            self._read_ahead = ()

    # instances -------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and type(node.targets[0].target) is cst.Name and (type(node.value) is cst.List or type(node.value) is cst.Tuple):
            self._name_lists[self._key(node.targets[0].target) or ""] = node.value
        for target in node.targets:
            pairs = unpacked(target.target, node.value)
            for element, value in pairs:  # self.model, self.steps = model, steps; actor, critic = Actor(), Critic()
                self._bind(element, value)
                self._bind_framework(element, value)
                self._note_held_elsewhere(element, value)
            self._bind(target.target, node.value)
            self._bind_framework(target.target, node.value)
            self._note_held_elsewhere(target.target, node.value)
        if any(_names_automatic_optimization(t.target) for t in node.targets):
            own = self._classes and self._classes[-1] in self.names.lightning_classes
            spelled = all(
                dotted_name(t.target) in (f"self.{LIGHTNING_AUTOMATIC_OPTIMIZATION}", LIGHTNING_AUTOMATIC_OPTIMIZATION) for t in node.targets
            )
            if own and spelled and is_name(node.value, "False"):
                self.names.manual_optimization.add(self._classes[-1])
            elif self._classes and not own:
                self._switching_classes.add(self._classes[-1])  # (a mixin: the classes derived from it may optimize by hand)
            elif not (own and spelled and is_name(node.value, "True")):
                # (a helper given the module, ``model.automatic_optimization = False`` after it is built: which it switches, not followed)
                self.names.automatic_optimization_unknown = True

    def _bind_framework(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """``accelerator = Accelerator()``, ``engine, opt, _, _ = deepspeed.initialize(...)``, instances of the file's own classes."""
        if type(value) is not cst.Call:
            return
        callee = self.names.qualify(value.func)
        self._bind_optimizers(target, value, callee or "")
        if (type(target) is cst.Tuple or type(target) is cst.List) and callee in FRAMEWORK_TUPLE_CONSTRUCTORS and target.elements:
            if len(target.elements) > 1 and (optimizer := dotted_name(target.elements[1].value)):  # (file-wide: TorchNames)
                self.names.optimizers.add(optimizer)  # engine, optimizer, …
            kind: str | None
            target, kind = target.elements[0].value, FRAMEWORK_TUPLE_CONSTRUCTORS[callee]
            keyword = WRAPPED_MODEL_KEYWORDS.get(callee or "")
            wrapped = next((self._module_of(arg.value) for arg in value.args if arg.keyword is not None and arg.keyword.value == keyword), None)
            if wrapped is not None and (engine := self._key(target)) is not None:
                self.names.wrapped_modules[engine] = wrapped
        else:
            kind = FRAMEWORK_CONSTRUCTORS.get(callee or "")
        name = self._key(target)
        if name is None:
            return
        if callee is not None:
            self.names.constructed[name] = callee
        if kind is not None:
            self.names.frameworks[name] = kind
        elif callee in self.names.local_classes:
            self.names.instances[name] = callee
        elif (module := self._constructed_module(value)) is not None and module.is_local:
            self.names.instances[name] = module.class_name  # ``Net(...).to(device)``: the module ``Net(...)`` built

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        name = self._key(target)
        if name is None:
            return
        module = self._constructed_module(value) or self._built_modules(value)
        current_class = self._classes[-1] if self._classes else None
        self._bindings.setdefault(name, []).append(value.value if type(value) is cst.Name else None)
        spelled = dotted_name(target) or name  # (an alias is file-wide: any binding of its spelling unmakes it)
        self._spelled_bindings[spelled] = self._spelled_bindings.get(spelled, 0) + 1
        self._alias_torch_name(spelled, value, self._spelled_bindings[spelled])
        if module is None and type(value) is cst.Name:
            self._aliases.append((current_class, name, self._key(value) or value.value))
        if module is not None:
            if name.startswith("self.") and self._classes:
                self.names.self_modules.setdefault(self._classes[-1], {})[name[5:]] = module
            else:
                self.names.modules[name] = module
            if type(value) is cst.Call and any(self._names_a_module(arg.value) for arg in value.args):
                self.names.stored_values.add(dotted_name(target) or name)  # ``nn.Sequential(student[0], head)``: it holds them
        elif name.startswith("self.") and self._classes and creates_parameter(self.names, value):
            self.names.self_parameters.setdefault(self._classes[-1], set()).add(name[5:])
        elif creates_parameter(self.names, value):
            self.names.leaf_tensors.add(name)

    def _alias_torch_name(self, name: str, value: cst.BaseExpression, bindings: int) -> None:
        """``AdamW = torch.optim.AdamW`` at the module's top, its only binding: torch's (a second unmakes it)."""
        if bindings > 1 and name in self._assigned_aliases:
            del self.names.aliases[name]
            self._assigned_aliases.discard(name)
        elif bindings == 1 and not (self._functions or self._classes or name in self.names.aliases) and isinstance(value, cst.Attribute):
            qualified = self.names.qualify(value) or ""
            if qualified.split(".")[0] == "torch":
                self.names.aliases[name] = qualified
                self._assigned_aliases.add(name)

    def _names_a_module(self, expression: cst.BaseExpression) -> bool:
        """``student``, ``student.fc``, ``student[0]``, or a list or tuple holding one: a module gradfix knows, or a part (not one built there)."""
        if type(expression) is cst.List or type(expression) is cst.Tuple:
            return any(self._names_a_module(element.value) for element in expression.elements)
        while type(expression) is cst.Subscript:
            expression = expression.value
        return type(expression) is not cst.Call and self._module_of(expression) is not None

    def _module_of(self, expression: cst.BaseExpression) -> ModuleInfo | None:
        """The module an expression names or builds (``model``, ``Net()``, ``Net().to(device)``)."""
        if type(expression) is cst.Call:
            return self._constructed_module(expression)
        return self.names.module(expression, self._classes[-1] if self._classes else None)

    def _built_modules(self, value: cst.BaseExpression) -> ModuleInfo | None:
        """A plain list or tuple of modules the expression builds (``[nn.Linear(6, 1) for _ in range(3)]``, ``(encoder, decoder)``): named as a
        container of modules, whose items are modules (``heads[0](x)``), as an ``nn.ModuleList`` is."""
        if (type(value) is cst.ListComp or type(value) is cst.GeneratorExp) and value.for_in.inner_for_in is None:
            items = [value.elt]
        elif (type(value) is cst.List or type(value) is cst.Tuple) and value.elements:
            items = [element.value for element in value.elements]
        else:
            return None
        if any(isinstance(element, cst.StarredElement) for element in getattr(value, "elements", ())):
            return None
        modules = [self._module_of(item) for item in items]
        return ModuleInfo("") if all(module is not None for module in modules) else None

    def _constructed_module(self, value: cst.BaseExpression) -> ModuleInfo | None:
        if type(value) is not cst.Call:
            return None
        func = value.func
        if type(func) is cst.Attribute and func.attr.value in MODULE_RETURNING:
            return self._module_of(func.value)
        if self.names.qualify(func) in MODULE_WRAPPERS:
            return self._module_of(value.args[0].value) if value.args else None  # the wrapped module
        class_name = self.names.module_class(func)
        return None if class_name is None else self.names.built_module(func, class_name)

    def _bind_optimizers(self, target: cst.BaseExpression, value: cst.Call, callee: str) -> None:
        """Optimizers by construction (``torch.optim.X(...)``, a local Optimizer subclass), by a framework handing them back (``accelerator.prepare``,
        ``fabric.setup``, position for position) and by a LightningModule's ``self.optimizers()``."""
        elements = [e.value for e in target.elements] if (type(target) is cst.Tuple or type(target) is cst.List) else [target]
        method = value.func.attr.value if type(value.func) is cst.Attribute else ""
        updated: dict[str | None, set[str]] = {}
        if method == LIGHTNING_OPTIMIZERS_METHOD and is_name(method_receiver(value), "self") and self._classes:
            chosen = elements  # (what each trains: known once the whole file is read)
            self.lightning.note_unpacked(self._classes[-1], elements, type(target) is cst.Tuple or type(target) is cst.List)
        elif is_optimizer_class(callee) or callee in self.names.optimizer_classes or method == LIGHTNING_OPTIMIZERS_METHOD:
            chosen = elements
            modules = self._optimized_modules(value.args[0].value) if value.args and method != LIGHTNING_OPTIMIZERS_METHOD else None
            updated = {dotted_name(e): modules for e in chosen} if modules is not None else {}
            if modules is None:  # (a name bound again to an optimizer of unknown parameters)
                self.names.optimizers_of_unknown_parameters.update(n for n in map(dotted_name, chosen) if n is not None)
        elif method in HANDING_BACK_METHODS:
            passed = [dotted_name(arg.value) for arg in value.args if arg.keyword is None]
            chosen = [e for e, p in zip(elements, passed) if p in self.names.optimizers]
            updated = {dotted_name(e): self.names.optimized_modules[p] for e, p in zip(elements, passed) if p in self.names.optimized_modules}
        else:
            return
        self.names.optimizers.update(name for name in map(dotted_name, chosen) if name is not None)
        for name, modules in updated.items():
            if name is not None:  # a name bound to several optimizers: each of them trains
                self.names.optimized_modules.setdefault(name, set()).update(modules)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if method_called(node) in GRADIENT_HOOK_METHODS or (self.names.qualify(func) or "").startswith(GRADIENT_HOOKING_LIBRARIES):
            self.names.gradient_hooks.append(node)
        if is_name(func, "setattr", "__setattr__") or method_called(node) == "__setattr__":
            named = [a.value for a in node.args[1:2]]
            if not named or not isinstance(named[0], cst.SimpleString) or LIGHTNING_AUTOMATIC_OPTIMIZATION in named[0].value:
                self.names.automatic_optimization_unknown = True
        callee = dotted_name(func)
        self._calls.append(node)
        if (loaded := loaded_in_a_loop(self._tree, node)) is not None:
            self.names.manually_trained.add(loaded)  # (a target network synced in the training loop)
        for position, arg in enumerate(node.args):
            name = dotted_name(arg.value)
            if callee in self._callables or callee in self.names.local_classes:
                keyword = arg.keyword.value if arg.keyword is not None else None
                if name is not None and not arg.star:
                    self._handed.append(
                        (name, callee, position, keyword, self._functions[-1] if self._functions else None, self._key(arg.value) or name)
                    )
                    if runs_only_under_a_test(self._tree, node):
                        self._handed_under_a_test.add(len(self._handed) - 1)
                    continue
            self._note_stored(arg.value)
        if method_called(node) == "add_param_group":
            self._add_parameter_group(node)
        if type(func) is cst.Attribute and method_called(node) in ("append", "insert") and node.args:
            self._note_module_container(func.value, node.args[-1].value)
        if type(func) is cst.Attribute and changes_in_place(node):
            for arg in node.args:
                self._note_update_by_hand(node, func.value, arg.value)
        if type(func) is cst.Attribute and turns_gradients_off(node):
            self._switch(func.value, where=node)  # vgg.requires_grad_(False)
        elif type(func) is cst.Attribute and method_called(node) == "requires_grad_":
            self._switch(func.value, on=True)
            if type(func.value) is cst.Name:
                # image.requires_grad_(): a tensor the program turns into a leaf itself (a module's
                # parameters require grad already), such as an input it optimizes
                self.names.leaf_tensors.add(self._key(func.value) or func.value.value)
        if type(func) is cst.Attribute and func.attr.value in OPTIMIZER_ONLY_METHODS:
            name = self._key(func.value)
            if name is not None:
                self.names.objects.add(name)
        if type(func) is cst.Attribute and func.attr.value in MODULE_METHODS:
            receiver = func.value
            while type(receiver) is cst.Call and type(receiver.func) is cst.Attribute and receiver.func.attr.value in MODULE_RETURNING:
                receiver = receiver.func.value  # (``global_net.to(device).parameters()``: ``global_net``)
            name = self._key(receiver)  # (a helper's ``model.named_parameters()``: the helper's ``model``)
            if name is None or (self.names.instances.get(name), func.attr.value) in self._methods:
                return  # (``net.eval(x, y)``, where ``net`` is built by the file's class that defines ``eval``)
            if name.startswith("self.") and name.count(".") == 1 and self._classes:
                self.names.self_modules.setdefault(self._classes[-1], {}).setdefault(name[5:], ModuleInfo("", unread=True))
            elif not name.startswith("self."):
                self.names.modules.setdefault(name, ModuleInfo("", unread=True))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._note_update_by_hand(node, node.target, node.value)

    def _note_update_by_hand(self, node: cst.CSTNode, written: cst.BaseExpression, value: cst.CSTNode) -> None:
        """``w -= lr * w.grad``, ``p.data.add_(p.grad, alpha=-lr)``: a tensor trained by hand."""
        name = dotted_name(written.value if isinstance(written, cst.Attribute) and written.attr.value == "data" else written)
        if name is None or id(node) in self._by_parameter_loops:
            return
        if any(dotted_name(a.value) == name for a in self._tree.findall(value, cst.Attribute) if a.attr.value == "grad"):
            self.names.updated_by_hand = True

    def _note_module_container(self, container: cst.BaseExpression, item: cst.BaseExpression) -> None:
        """``models.append(Net())``: a list of modules; what ``models[i]`` calls is a forward."""
        name = self._key(container)
        class_name = self._classes[-1] if self._classes else None
        module = self._constructed_module(item) or self.names.module(item, class_name)
        if name is not None and module is not None and not name.startswith("self."):
            self.names.modules.setdefault(name, ModuleInfo(""))

    def _note_held_elsewhere(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """What ``target = value`` lets another name hold: stored on an object or in a container (``self.t = t``, ``teacher[0] = student[0]``: the
        container holds it too), or a module bound to a second name (``net = teacher``: an optimizer of ``net`` trains ``teacher``)."""
        if type(target) is cst.Attribute or type(target) is cst.Subscript:
            self._note_stored(value)
            # (what holds it, ``proj`` or ``teacher`` of ``teacher[0]``, holds a module or a module's parameter: ``proj.weight = student[0].weight``)
            if self._names_a_module(value) or type(value) is cst.Attribute and self._names_a_module(value.value):
                self.names.stored_values.update(_names_it_is_part_of(target.value))
        elif type(target) is cst.Name and type(value) in (cst.Name, cst.Attribute, cst.Subscript) and self._names_a_module(value):
            self.names.stored_values.update({target.value, *_names_it_is_part_of(value)})  # (either name may be the one trained)

    def _note_stored(self, value: cst.BaseExpression) -> None:
        """Names that ``value`` hands over as they are (not called, not read through a method)."""
        # (exact types: see ``dotted_name``)
        if type(value) is cst.List or type(value) is cst.Tuple or type(value) is cst.Set:
            for element in value.elements:
                self._note_stored(element.value)
        elif type(value) is cst.Dict:
            for entry in value.elements:
                self._note_stored(entry.value)
        elif type(value) is cst.StarredElement:
            self._note_stored(value.value)
        else:  # (and what it is part of: ``twin.weight = teacher[0].weight`` lets an optimizer of ``twin`` train ``teacher``)
            self._stored_in.setdefault(self._functions[-1] if self._functions else None, set()).update(_names_it_is_part_of(value))

    def _add_parameter_group(self, call: cst.Call) -> None:
        """``optimizer.add_param_group({"params": teacher.parameters(), ...})``: the optimizer now
        updates that module too; a group gradfix cannot read leaves its parameters unknown."""
        optimizer = dotted_name(method_receiver(call))
        group = call.args[0].value if call.args else None
        params = None
        if isinstance(group, cst.Dict):
            params = next(
                (
                    e.value
                    for e in group.elements
                    if isinstance(e, cst.DictElement) and type(e.key) is cst.SimpleString and e.key.evaluated_value == "params"
                ),
                None,
            )
        modules = None if params is None else self._optimized_modules(params)
        if modules is None:
            self.names.optimizers_of_unknown_parameters.add(optimizer or "")
        elif optimizer is not None:
            self.names.optimized_modules.setdefault(optimizer, set()).update(modules)

    def _optimized_modules(self, params: cst.BaseExpression) -> set[str] | None:
        """The modules whose parameters an optimizer's first argument holds: ``model.parameters()``, ``[*a.parameters(), *b.parameters()]``,
        ``chain(a.parameters(), b.parameters())``, ``[x]`` or ``[self.image]`` (tensors, no module), ``list(a.parameters()) + list(b.parameters())``;
        None when it cannot be read (a list built elsewhere)."""
        if method_called(params) in PARAMETER_METHODS:
            name = dotted_name(method_receiver(params))
            return {name} if name else None
        if type(params) is cst.BinaryOperation and type(params.operator) is cst.Add:
            left, right = self._optimized_modules(params.left), self._optimized_modules(params.right)
            return None if left is None or right is None else left | right
        if isinstance(params, (cst.List, cst.Tuple)):
            parts = [e.value for e in params.elements]
        elif isinstance(params, cst.Call) and (is_name(params.func, "list") or method_called(params) == "chain"):
            parts = [a.value for a in params.args]
        else:
            return None
        class_name = self._classes[-1] if self._classes else None
        modules: set[str] = set()
        for part in parts:
            if method_called(part) in PARAMETER_METHODS:
                found = self._optimized_modules(part)
                if found is None:
                    return None
                modules |= found
            elif isinstance(part, cst.Dict):
                return None  # parameter groups
            elif isinstance(part, cst.Name) and self._key(part) in self.names.leaf_tensors:
                self.names.optimized_leaves.add(part.value)
            elif not (isinstance(part, cst.Attribute) and self.names.is_parameter(part, class_name) and dotted_name(part.value) == "self"):
                return None  # ``model.weight``, a list built elsewhere: whose parameters is not known here
        return modules

    # frozen modules ----------------------------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        """``for p in vgg.parameters(): p.requires_grad = False`` freezes a module; ``for p in model.parameters(): p -= lr * p.grad`` (or
        ``p.data.add_(...)``) trains it by hand; ``for p in [W, b]: p.requires_grad = True`` makes tensors leaves that require grad."""
        self._note_leaves_made(node)
        self.names.manually_trained |= modules_changed_by_a_loop(self._tree, node)
        iterated = self.names.module(node.iter, self._classes[-1] if self._classes else None)
        if iterated is not None and not iterated.unread and isinstance(node.target, cst.Name):
            self.names.modules.setdefault(self._key(node.target) or "", ModuleInfo(""))  # ``for model in models:`` of modules built here
        if method_called(node.iter) not in PARAMETER_METHODS:
            return
        target = node.target.elements[-1].value if isinstance(node.target, cst.Tuple) and node.target.elements else node.target
        variable = dotted_name(target)  # (``for name, p in model.named_parameters()``)
        if variable is None:
            return
        # Frozen where every parameter is: the body turns each off unconditionally (not under an ``if``
        # on its name, nor past a ``continue``), or only some parameters are frozen.
        every = [small for line in node.body.body if type(line) is cst.SimpleStatementLine for small in line.body]
        if not any(self._tree.findall(node.body, leaving) for leaving in (cst.Continue, cst.Break)):
            assigned = (t.target for a in every if type(a) is cst.Assign and is_name(a.value, "False") for t in a.targets)
            called = (method_receiver(small.value) for small in every if type(small) is cst.Expr and turns_gradients_off(small.value))
            if f"{variable}.requires_grad" in map(dotted_name, assigned) or variable in map(dotted_name, called):
                self._switch(method_receiver(node.iter), where=node)  # p.requires_grad = False, p.requires_grad_(False)
        calls = [
            c for c in self._tree.findall(node.body, cst.Call) if method_called(c) == "requires_grad_" and dotted_name(method_receiver(c)) == variable
        ]
        stores = [
            a for a in self._tree.findall(node.body, cst.Assign) if any(dotted_name(t.target) == f"{variable}.requires_grad" for t in a.targets)
        ]
        if (calls or stores) and (key := self._key(method_receiver(node.iter))) is not None:
            self.names.partly_frozen.add(key)  # (``p.requires_grad_(name.endswith("bias"))``: some of them, maybe)
        if any(not turns_gradients_off(c) for c in calls) or any(not is_name(a.value, "False") for a in stores):
            self._switch(method_receiver(node.iter), on=True)  # (a GAN's D, frozen for G's step and trained again after)
        self._by_parameter_loops.update(map(id, self._tree.findall(node.body, cst.AugAssign)))
        self._by_parameter_loops.update(map(id, self._tree.findall(node.body, cst.Call, changes_in_place)))

    def _note_leaves_made(self, node: cst.For) -> None:
        variable = dotted_name(node.target)
        if variable is None:
            return
        turned_on = any(
            dotted_name(t.target) == f"{variable}.requires_grad" and is_name(assign.value, "True")
            for assign in self._tree.findall(node.body, cst.Assign)
            for t in assign.targets
        ) or any(
            method_called(call) == "requires_grad_" and dotted_name(method_receiver(call)) == variable and not call.args
            for call in self._tree.findall(node.body, cst.Call)
        )
        items = self._listed_names(node.iter)
        if turned_on and items:
            self.names.leaves_made_by[node] = items
            self.names.leaf_tensors.update(self._scopes.key_of(item, node) for item in items)

    def _listed_names(self, iterable: cst.BaseExpression | None) -> tuple[str, ...]:
        """The names a list or tuple literal holds, or one a name was bound to (``parameters = [C, W1, b1]``); else empty."""
        if isinstance(iterable, cst.Name):
            iterable = self._name_lists.get(self._key(iterable) or "")
        if not isinstance(iterable, (cst.List, cst.Tuple)):
            return ()
        names = tuple(name for e in iterable.elements if (name := dotted_name(e.value)) is not None)
        return () if len(names) < len(iterable.elements) else names

    def _switch(self, owner: cst.BaseExpression, on: bool = False, where: cst.CSTNode | None = None) -> None:
        """``owner``'s parameters set not to require grad (``on``: to require it, or to what gradfix cannot read); where
        that runs only under a test, they may be left as they were too."""
        if not on and where is not None and runs_only_under_a_test(self._tree, where):
            self._switch(owner, on=True)
        name = self._key(owner)
        if name == "self" and self._classes:
            (self._switched_on_classes if on else self._frozen_classes).add(self._classes[-1])
        elif name is not None:
            (self._switched_on if on else self._frozen_names).add(name)
            parts = name.split(".")  # (``model.weight``: ``model`` is frozen, or switched, in part)
            self.names.partly_frozen.update(".".join(parts[:n]) for n in range(1, len(parts)))

    def resolve_stored(self) -> None:
        """Names kept in containers or on objects, and names handed to one of the file's own functions or classes that stores (or hands on) the
        parameter they arrive as, or to one defined later than gradfix reads it (``_callables`` then has no entry). A module handed to a function that
        freezes (or turns on) the parameter it arrives as is frozen (turned on) too."""
        for stored in self._stored_in.values():
            self.names.stored_values |= stored
        for index, (name, callee, position, keyword, _, key) in enumerate(self._handed):
            function = self._callables.get(callee) if callee not in self.names.rebound_functions else None
            parameter = None if function is None else parameter_receiving(function, position, keyword, callee in self.names.local_classes)
            inner = self._scopes.key_in(function, parameter) if function is not None and parameter is not None else None
            if inner in self._frozen_names:
                self._frozen_names.add(key)
            if inner in self._switched_on or inner in self._frozen_names and index in self._handed_under_a_test:
                self._switched_on.add(key)  # (turned on again; or frozen by a call only under a test: maybe trained)
            handed_on = any(passed == parameter and scope is function for passed, *_, scope, _ in self._handed)
            if parameter is None or parameter in self._stored_in.get(function, set()) or handed_on:
                self.names.stored_values.add(name)

    def resolve_handed_facts(self) -> None:
        """Parameters that every call of the file hands a module, a framework object or an instance of its class (``call_flow``)."""
        plain = self._plain_classes - self._derived - self._rebound_classes
        self._apply_freezing()  # (a module is handed on as it is: frozen, ``encode_prompt(text_encoder, ...)``)
        flow_along_calls(
            self.names, self._scopes, self._tree, self._calls, self._callables_of_the_module(), self._methods, plain, self._constructed_module
        )

    def _callables_of_the_module(self) -> dict[str, cst.FunctionDef]:
        return {name: function for name, function in self._callables.items() if name not in self.names.local_classes | self.names.rebound_functions}

    def resolve_aliases(self) -> None:
        """``self.model = model`` where ``model`` turned out to be a module; modules frozen by their
        own constructor or after it are not trainable. A LightningModule derived from a mixin that sets
        ``automatic_optimization``, or whose subclass of the file optimizes by hand, may optimize by hand."""
        self._apply_freezing()
        for name in self.names.lightning_classes:
            bases, seen = list(self._local_bases.get(name, ())), set[str]()
            while bases and not seen & self._switching_classes:
                seen.add(base := bases.pop())
                bases.extend(self._local_bases.get(base, ()))
            if seen & self._switching_classes:
                self.names.manual_optimization.add(name)
        pending = list(self.names.manual_optimization)
        while pending:
            for base in self._local_bases.get(pending.pop(), ()):
                if base in self.names.lightning_classes and base not in self.names.manual_optimization:
                    self.names.manual_optimization.add(base)
                    pending.append(base)
        for name, bound in self._bindings.items():
            callee = bound[0] if len(bound) == 1 else None
            function = self._callables.get(callee) if callee is not None else None
            if callee is not None and function is not None and callee not in self.names.local_classes and name not in self._callables:
                self.names.function_aliases[name] = callee
        # A module of the module's scope that a class reads (kept on ``self``, built into what it
        # keeps, or called in its forward) is every instance's; one a method builds
        # (``layer = nn.Linear(...)``: a key of the method's scope) is that instance's own.
        # (a module's own key is its spelling: only names of that spelling are looked up)
        of_the_module = {key for key in self.names.modules if key == spelling(key)}
        for class_node in self._class_nodes if of_the_module else ():
            if any(self._key(name) in of_the_module for name in self._tree.names(class_node.body, of_the_module)):
                self.names.sharing_classes.add(class_node.name.value)
        for class_name, target, source in self._aliases:
            aliased = self.names.modules.get(source)
            if aliased is None:
                continue
            if target.startswith("self.") and class_name:
                known = self.names.self_modules.setdefault(class_name, {})
                if not known.get(target[5:], ModuleInfo("")).class_name:  # (``self.model.train()`` saw a module of no class)
                    known[target[5:]] = aliased
            elif not self.names.modules.get(target, ModuleInfo("")).class_name:
                self.names.modules[target] = aliased

    def _enclosing_scope(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The function or class whose body holds ``node`` (None: the module's)."""
        parent = self._tree.parent(node)
        while parent is not None and type(parent) is not cst.FunctionDef and type(parent) is not cst.ClassDef:
            parent = self._tree.parent(parent)
        return parent

    def resolve_dispatch(self) -> None:
        """``TorchNames.dispatched``: each method a class of the file defines again, in each class it derives from (through the file's classes), and
        each placeholder method; ``TorchNames.hidden_methods``: each method of the name of an attribute the file stores on some object (every one
        where it stores attributes whose names it does not write out), or with a decorator gradfix does not model;
        ``TorchNames.rebound_functions``."""
        stored = stored_attribute_names(self._tree)
        for (class_name, method), node in self._methods.items():
            if stored is None or method in stored or not decorators_modelled(node, self.names, METHOD_DECORATORS):
                self.names.hidden_methods.add((class_name, method))
            if placeholder(node, self.names):
                self.names.dispatched.add((class_name, method))
            pending, seen = list(self._local_bases.get(class_name, ())), {class_name}
            while pending:
                base = pending.pop()
                if base in seen:
                    continue
                seen.add(base)
                if (base, method) in self._methods:
                    self.names.dispatched.add((base, method))
                pending.extend(self._local_bases.get(base, ()))
        self.names.rebound_functions = rebound_functions(self._tree, self.names, self._module_defs)
        # A class whose name the module binds again may not be what a call of the name builds.
        rebound = self._rebound_classes = bound_again(self._tree, self.names.local_classes)
        self.names.forget_classes(rebound)
        self.names.instances = {name: built for name, built in self.names.instances.items() if built not in rebound}
        self.names.modules = {name: module for name, module in self.names.modules.items() if module.class_name not in rebound}

    def _apply_freezing(self) -> None:
        """Modules frozen by their own constructor or after it are not trainable; where some code
        turns their gradients on again, whether they are depends on which ran last (``toggled``)."""
        for name, module in list(self.names.modules.items()):
            self.names.modules[name] = self._as_frozen(module, name)
        for attributes in self.names.self_modules.values():
            for attribute, module in list(attributes.items()):
                attributes[attribute] = self._as_frozen(module, f"self.{attribute}")

    def _as_frozen(self, module: ModuleInfo, name: str) -> ModuleInfo:
        if name not in self._frozen_names and module.class_name not in self._frozen_classes:
            return module
        if name in self._switched_on or module.class_name in self._switched_on_classes:
            return replace(module, toggled=True)
        return replace(module, frozen=True)


def _names_automatic_optimization(target: cst.BaseExpression) -> bool:
    return (type(target) is cst.Name or type(target) is cst.Attribute) and (dotted_name(target) or "").endswith(LIGHTNING_AUTOMATIC_OPTIMIZATION)


def collect_torch_names(tree: SyntaxTree, project: ProjectSummaries | None = None) -> TorchNames:
    """What the file's names mean to torch; ``project``: the summaries of the project's modules it imports, whose module classes
    (``ExportedModuleClass``) it learns by the qualified names its imports give them. A class whose name (or its module's) the file binds again,
    anywhere, is left unread: the file's aliases are read file-wide, and that name may mean another object."""
    classes = {key: summary.module_class for key, summary in (project or {}).items() if summary.module_class is not None}
    names = _collect(tree, classes)
    if classes:
        bound = _bound_anywhere(tree, names)
        rebound = {full for local, full in names.aliases.items() if local in bound}
        kept = {key: facts for key, facts in classes.items() if not any(key == full or key.startswith(f"{full}.") for full in rebound)}
        if len(kept) < len(classes):
            names = _collect(tree, kept)
    return names


def _bound_anywhere(tree: SyntaxTree, names: TorchNames) -> set[str]:
    """Every name the file binds but by an import: assigned in any scope, a class or a function."""
    bound = set(names.local_classes) | assigned_names(tree.module, tree=tree)
    for function in tree.findall(tree.module, cst.FunctionDef):
        bound |= assigned_names(function.body, tree=tree) | {function.name.value}
    return bound


def _collect(tree: SyntaxTree, project_classes: dict[str, ExportedModuleClass]) -> TorchNames:
    collector = _TorchNamesCollector(tree)
    collector.names.project_classes = dict(project_classes)
    tree.replay(collector)
    collector.resolve_dispatch()
    collector.resolve_stored()
    collector.resolve_handed_facts()
    collector.resolve_aliases()
    names = collector.names
    collector.lightning.resolve(names.optimized_modules, names.optimizers_of_unknown_parameters, names.optimizers)
    return names


def _names_it_is_part_of(value: cst.BaseExpression) -> set[str]:
    """``teacher[0].weight``: the names and attribute chains of ``value`` and of what holds it, up to the name it
    starts from (``teacher``; ``self.net.fc`` for ``self.net.fc.weight``, and ``self.net``, ``self``)."""
    node = value
    while (name := dotted_name(node)) is None and (type(node) is cst.Attribute or type(node) is cst.Subscript):
        node = node.value
    parts = name.split(".") if name is not None else []
    return {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
