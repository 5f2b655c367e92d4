"""What the file's names mean to torch, as ``torch_names`` found them: import aliases, module
classes and instances, optimizers, framework objects, leaves; and the questions the analysis asks
of an expression (``module``, ``framework``, ``instance_class``, ``qualify``).

The facts, apart from the pass that collects them, so that what reads them while they are
collected (``call_flow``, ``detaching``) needs no import of that pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import libcst as cst

from ..frameworks import EXCEPTION_KEEPING_CONTEXTS
from ..summaries import ExportedModuleClass
from ..torch_api import (
    FUNCTION_NAMESPACES,
    MODULE_RETURNING,
    RANDOM_METHODS,
    RANDOM_FUNCTIONS,
    RANDOM_MODULES,
    TORCH_SUBMODULES,
    WITH_INDICES,
    WITH_INDICES_GIVEN_A_DIMENSION,
)
from .module_info import ModuleInfo
from .scopes import Scopes
from .syntax import dotted_name
from .tree import find_nodes


# The tables of ``TorchNames`` that a ``class`` statement of the file fills, by the class's name,
# from its name and bases alone: what a use of the name reads of the class.
CLASS_TABLES = ("local_classes", "module_classes", "optimizer_classes", "lightning_classes", "manual_optimization", "record_classes", "trainer_hooks")


@dataclass
class TorchNames:
    """What the file's names mean to torch. A table keyed by a "dotted name" holds a variable's
    fact: the key is ``Scopes.key`` of the name (``train:model`` for the ``model`` a function
    ``train`` binds, ``model`` for the module's), so what one function learns of its ``model``
    says nothing of another's. Kept by spelling, file-wide: import ``aliases`` (an import binds the
    same module object in every scope that makes it) and the tables that only widen what *may*
    hold, where merging two variables of one spelling can only add (``optimizers``,
    ``optimized_modules``, ``optimizers_of_unknown_parameters``, ``optimized_leaves``,
    ``stored_values``, ``manually_trained``): see ``FileAnalysis.may_train``."""

    aliases: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    module_classes: set[str] = field(default_factory=set)  # local nn.Module subclasses
    # The nn.Module classes of the project's other modules the file imports, by qualified name
    # (``nets.Discriminator``), with what their module's analysis proved (``ExportedModuleClass``).
    project_classes: dict[str, ExportedModuleClass] = field(default_factory=dict)
    modules: dict[str, ModuleInfo] = field(default_factory=dict)  # dotted name -> module
    self_modules: dict[str, dict[str, ModuleInfo]] = field(default_factory=dict)  # class -> attr -> module
    self_parameters: dict[str, set[str]] = field(default_factory=dict)  # class -> attrs holding parameters
    detaching_functions: set[str] = field(default_factory=set)
    frameworks: dict[str, str] = field(default_factory=dict)  # dotted name -> "accelerator", "fabric", …
    local_classes: set[str] = field(default_factory=set)  # every class defined in the file
    # The file's named tuple classes (``class State(NamedTuple)``), with their fields in order.
    record_classes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # dotted name -> local class it was built from
    wrapped_modules: dict[str, ModuleInfo] = field(default_factory=dict)  # an engine -> the model it runs (``WRAPPED_MODEL_KEYWORDS``)
    constructed: dict[str, str] = field(default_factory=dict)  # dotted name -> qualified callee it came from
    # A name bound once, to one of the file's module-level functions (``loss_fn = my_loss``): that function.
    function_aliases: dict[str, str] = field(default_factory=dict)  # key -> the function it holds (an alias, a nested ``def``)
    trainer_hooks: dict[str, str] = field(default_factory=dict)  # class -> method whose result a trainer backwards
    lightning_classes: set[str] = field(default_factory=set)
    local_bases: dict[str, list[str]] = field(default_factory=dict)  # class -> the classes of the file it derives from
    manual_optimization: set[str] = field(default_factory=set)  # LightningModules that optimize by hand, or may (not proved automatic)
    # Whether Lightning optimizes automatically is proved only where ``automatic_optimization`` is never anything but a
    # literal set in a LightningModule's own body: set from an argument, a flag, a property, ``setattr``, a helper or on a
    # built module, it is unknown for every class.
    automatic_optimization_unknown: bool = False
    optimizer_classes: set[str] = field(default_factory=set)  # local torch.optim.Optimizer subclasses
    optimizers: set[str] = field(default_factory=set)  # dotted names bound to optimizers
    optimized_modules: dict[str, set[str]] = field(default_factory=dict)  # optimizer -> modules it updates
    # Code that sees each backward's gradient on its own (``frameworks.GRADIENT_HOOK_METHODS``).
    gradient_hooks: list[cst.CSTNode] = field(default_factory=list)
    # Optimizers given parameters gradfix cannot read (``add_param_group`` of a list built elsewhere).
    optimizers_of_unknown_parameters: set[str] = field(default_factory=set)
    # Dotted names handed to a call or kept in a container or on another object (``nn.ModuleDict(
    # {"teacher": teacher})``, ``wrapper.teacher = teacher``): a module among them may be trained
    # through whatever holds it; and modules that hold a module or a part of one (``teacher[0] =
    # student[0]``): they may be trained through it.
    stored_values: set[str] = field(default_factory=set)
    # Modules one of whose parameters the file makes not require grad (``model.weight.requires_grad_(False)``):
    # a layer of them may save nothing for its backward (nothing of it to differentiate).
    partly_frozen: set[str] = field(default_factory=set)
    # Local classes that read a module of the module's scope (``self.body = SHARED``,
    # ``nn.Sequential(SHARED, ...)``, ``SHARED(x)`` in a forward): their instances share its
    # parameters with each other and with whatever else holds it.
    sharing_classes: set[str] = field(default_factory=set)
    # (class, method) of the file whose call on an object that may be of a subclass (``self``) may
    # run another body: a class of the file derived from it defines the method again,
    # or its own is a placeholder (abstract, or a body that only passes or raises) that a subclass
    # gradfix did not read is there to replace.
    dispatched: set[tuple[str, str]] = field(default_factory=set)
    # (class, method) of the file that an attribute of the object may hide: the file stores an
    # attribute of that name on some object (``self.extra_loss = fn``, ``trainer.extra_loss = fn``),
    # or attributes whose names it does not write out (``setattr(self, key, value)``).
    hidden_methods: set[tuple[str, str]] = field(default_factory=set)
    # Functions of the module's scope whose name a call may find bound to another object than their
    # ``def`` (defined twice, bound again, or decorated by a decorator gradfix does not model).
    rebound_functions: set[str] = field(default_factory=set)
    leaf_tensors: set[str] = field(default_factory=set)  # names bound to ``nn.Parameter(...)`` and the like
    optimized_leaves: set[str] = field(default_factory=set)  # those an optimizer is given (``SGD([image])``)
    # Objects that are no tensors by what the program calls on them (``x.zero_grad()``, ``x.step()``:
    # a tensor has neither method): an optimizer or a wrapper of one, whatever class built it.
    objects: set[str] = field(default_factory=set)
    manually_trained: set[str] = field(default_factory=set)  # modules whose parameters the program updates itself
    # ``for p in [W, b]: p.requires_grad = True``: the loop, and the names it makes leaves.
    leaves_made_by: dict[cst.For, tuple[str, ...]] = field(default_factory=dict)
    # Tensors updated by hand from their gradients (``w -= lr * w.grad``) whose module gradfix cannot name.
    updated_by_hand: bool = False
    scopes: Scopes | None = None  # which function binds a name: the key of the tables above

    def forget_classes(self, classes: Iterable[str]) -> None:
        """Unlearn what ``CLASS_TABLES`` hold of these classes of the file (``classes_below``)."""
        for table in CLASS_TABLES:
            facts = getattr(self, table)
            for name in classes:
                if isinstance(facts, dict):
                    facts.pop(name, None)
                else:
                    facts.discard(name)

    def key(self, node: cst.CSTNode) -> str | None:
        """The key of the variable a dotted expression names where it is written (``Scopes.key``)."""
        return dotted_name(node) if self.scopes is None else self.scopes.key(node)

    def framework(self, node: cst.CSTNode) -> str | None:
        """What framework object an expression names (``accelerator``, ``self.fabric``), if known."""
        name = self.key(node)
        return None if name is None else self.frameworks.get(name)

    def is_imported_module(self, node: cst.CSTNode) -> bool:
        """``kernels`` after ``import kernels`` (or ``from pkg import kernels``): a module object."""
        return isinstance(node, cst.Name) and node.value in self.aliases

    def instance_class(self, node: cst.CSTNode, class_name: str | None) -> str | None:
        """The local class of the object an expression names (``self`` inside that class)."""
        name = self.key(node)
        if name is None:
            return None
        if name == "self" and class_name:
            return class_name
        return self.instances.get(name)

    def method_class(self, receiver: cst.CSTNode, class_name: str | None, *methods: str) -> str | None:
        """The local class whose ``methods`` a call on ``receiver`` certainly runs: the class of the
        object it names (``instance_class``), where no attribute of the object may hide them
        (``hidden_methods``), and where the object was built from that class or none of them is
        ``dispatched``: ``self`` may be an instance of any class derived from its own."""
        owner = self.instance_class(receiver, class_name)
        if owner is None:
            return None
        if any((owner, method) in self.hidden_methods for method in methods):
            return None
        if self.constructed.get(self.key(receiver) or "") == owner:
            return owner
        return None if any((owner, method) in self.dispatched for method in methods) else owner

    def runs_its_class_method(self, receiver: cst.CSTNode, class_name: str | None, method: str) -> bool:
        """Whether a call of ``method`` on ``receiver`` runs the method of the class gradfix takes
        its object for (``method_class``), where it takes it for an instance of a class of the file."""
        return self.instance_class(receiver, class_name) is None or self.method_class(receiver, class_name, method) is not None

    def module_function(self, func: cst.Name) -> str | None:
        """The name of the module's function (or class) a call of ``func`` runs: the function an
        alias of the calling scope holds, or the name's own where the calling scope does not bind
        it (a parameter, a local of that name) and the module binds it to its ``def`` alone."""
        key = self.key(func) or ""
        name = self.function_aliases.get(key) or (func.value if key == func.value else None)
        return None if name is None or name in self.rebound_functions else name

    def qualify(self, node: cst.CSTNode) -> str | None:
        """The qualified name of a dotted expression, following import aliases."""
        name = dotted_name(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.aliases:
            head = self.aliases[head]
        return f"{head}.{rest}" if rest else head

    def torch_function(self, node: cst.CSTNode) -> str | None:
        """The function of torch's a dotted expression names (``F.mse_loss``, ``torch.tanh``), by its
        qualified name: a function of ``FUNCTION_NAMESPACES``, not a class, a submodule or a
        context that switches gradients (``torch.no_grad``)."""
        name = self.qualify(node)
        if name is None or name in TORCH_SUBMODULES or name in EXCEPTION_KEEPING_CONTEXTS:
            return None
        namespace, _, function = name.rpartition(".")
        return name if namespace in FUNCTION_NAMESPACES and function[:1].islower() else None

    def draws_other_values(self, node: cst.CSTNode) -> cst.Call | None:
        """A call under ``node`` that draws other values each time it runs (``RANDOM_FUNCTIONS``
        of torch, a tensor's ``uniform_()``, a distribution's ``sample()``, Python's or numpy's random numbers, ``next(batches)``)."""
        for call in find_nodes(node, cst.Call):
            name = self.qualify(call.func) or ""
            namespace, _, function = name.rpartition(".")
            if name == "next" or name.startswith(RANDOM_MODULES) or namespace == "torch" and function in RANDOM_FUNCTIONS:
                return call
            if type(call.func) is cst.Attribute and call.func.attr.value in RANDOM_METHODS:
                return call
        return None

    def is_torch(self, node: cst.CSTNode) -> bool:
        name = self.qualify(node)
        return name is not None and name.split(".")[0] == "torch"

    def returns_indices(self, call: cst.Call) -> bool:
        """Whether ``call`` is a torch reduction (function or tensor method) that returns values
        and their indices."""
        qualified = self.qualify(call.func) or ""
        positional = [arg.value for arg in call.args if arg.keyword is None]
        if qualified.startswith("torch.") and qualified.count(".") == 1:
            name, after = qualified[6:], positional[1:2]  # (the tensor is the first argument)
        elif isinstance(call.func, cst.Attribute) and not self.is_torch(call.func):
            name, after = call.func.attr.value, positional[:1]
        else:
            return False
        # A dimension is ``dim=`` or a whole number written out: ``torch.max(x, y)`` of two tensors
        # (or ``x.max(y)``) returns their elementwise maximum, one tensor with the graph of both.
        dimension = any(arg.keyword is not None and arg.keyword.value == "dim" for arg in call.args) or any(
            _is_whole_number(value) for value in after
        )
        return name in WITH_INDICES or name in WITH_INDICES_GIVEN_A_DIMENSION and dimension

    def module_class(self, callee: cst.CSTNode) -> str | None:
        """If calling ``callee`` constructs an nn.Module, the class's short name."""
        name = self.qualify(callee)
        if name is None:
            return None
        if name in self.module_classes or name in self.project_classes:
            return name
        if name.startswith("torch.nn.") and name.count(".") == 2 and name[9:10].isupper() and name != "torch.nn.Parameter":
            return name.rsplit(".", 1)[1]
        return None

    def built_module(self, func: cst.CSTNode, class_name: str) -> ModuleInfo:
        """The module a call of ``func`` builds, of the class ``module_class`` named: by the qualified
        callee (a class of the file may share its name with torch.nn's, ``class RNN``)."""
        qualified = self.qualify(func)
        return ModuleInfo(class_name, is_local=qualified in self.module_classes, project=self.project_classes.get(qualified or ""))

    def is_parameter(self, node: cst.Attribute, class_name: str | None) -> bool:
        """``self.w`` set from ``nn.Parameter`` in the class, or ``<module>.weight`` / ``.bias``."""
        name = dotted_name(node)
        if name is not None and class_name and name.startswith("self.") and name.count(".") == 1:
            return name[5:] in self.self_parameters.get(class_name, set())
        return self.module(node.value, class_name) is not None and node.attr.value.startswith(("weight", "bias"))

    def module(self, node: cst.CSTNode, class_name: str | None) -> ModuleInfo | None:
        """The module an expression names (``model``, ``self.encoder``, ``self.layers[i]``, one built
        where it is called: ``nn.L1Loss()``, one a method hands back: ``model.to(device)``), if any."""
        if type(node) is cst.Subscript:  # (exact types: see ``dotted_name``)
            container = self.module(node.value, class_name)
            return None if container is None else ModuleInfo("")
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in MODULE_RETURNING:
            return self.module(node.func.value, class_name)
        if type(node) is cst.Call:
            built = self.module_class(node.func)
            return None if built is None else self.built_module(node.func, built)
        name = self.key(node)
        if name is None:
            return None
        if name in self.modules:
            return self.modules[name]
        if class_name and name.startswith("self."):
            return self.self_modules.get(class_name, {}).get(name[5:])
        return None


def _is_whole_number(node: cst.BaseExpression) -> bool:
    """``1``, ``-1``: a literal integer."""
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus:
        node = node.expression
    return type(node) is cst.Integer
