"""Which optimizer a LightningModule's ``self.optimizers()`` hands back, by position.

Lightning's trainer calls the module's ``configure_optimizers`` once and keeps the optimizers it
returns in order; ``self.optimizers()`` gives them back (the one optimizer itself when there is
one, else the list). So ``g_opt, d_opt = self.optimizers()`` binds ``d_opt`` to the second
optimizer ``configure_optimizers`` returns, whatever its local name was there.

What is read, the shapes Lightning's own reading of the returned value takes: one optimizer; a
tuple or list of them; a dict literal's ``"optimizer"`` entry (alone or as each item of a tuple or
list); two lists, the optimizers then the schedulers (``return [opt_g, opt_d], [sched]``). An item
is an optimizer when it is built there (``torch.optim.Adam(self.G.parameters())``) or is a name
the file binds to optimizers. The positions are known only where the method is the class's own,
its one ``return`` (no other return, no ``yield``) is such a shape, every item is read, no class of
the file derived from it defines the method again, and the unpacking has as many names as the
method returns optimizers; otherwise every name bound by ``self.optimizers()`` stays an optimizer
of unknown parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from ..frameworks import LIGHTNING_OPTIMIZERS_HOOK

from .syntax import dotted_name, is_name

# The dict key of ``configure_optimizers``' returned dict that holds the optimizer.
_OPTIMIZER_KEY = "optimizer"

# One returned optimizer: the modules it trains (read where it is built), or the name bound to it
# (read once the whole file is), or None where gradfix cannot read it.
ConfiguredOptimizer = set[str] | str | None


@dataclass
class LightningOptimizers:
    """What the file's LightningModules configure, gathered while ``torch_names`` reads the file."""

    # class -> what each ``return`` of its own ``configure_optimizers`` returns, in order
    configured: dict[str, list[list[ConfiguredOptimizer] | None]] = field(default_factory=dict)
    # (class, the names ``self.optimizers()`` is unpacked into or the one name bound to it, whether unpacked)
    unpacked: list[tuple[str, list[cst.BaseExpression], bool]] = field(default_factory=list)
    local_bases: dict[str, set[str]] = field(default_factory=dict)  # class -> the file's classes it derives from

    def note_return(self, class_name: str, returned: cst.BaseExpression | None, built: Callable[[cst.Call], set[str] | None]) -> None:
        """A ``return`` of ``class_name``'s own ``configure_optimizers`` (``returned`` None: one
        gradfix does not read); ``built(call)``: the modules the optimizer a call builds trains."""
        items = None if returned is None else _returned_items(returned)
        read = None if items is None else [_configured(item, built) for item in items]
        self.configured.setdefault(class_name, []).append(read)

    def note_unpacked(self, class_name: str, targets: list[cst.BaseExpression], unpacking: bool) -> None:
        self.unpacked.append((class_name, targets, unpacking))

    def resolve(self, optimized_modules: dict[str, set[str]], unknown: set[str], optimizers: set[str]) -> None:
        """Names bound by ``self.optimizers()`` get the modules of the optimizer at their
        position, or join ``unknown``."""
        found: list[tuple[str, set[str] | None]] = []
        for class_name, targets, unpacking in self.unpacked:
            returned = self._positions(class_name, optimized_modules, unknown, optimizers)
            names = [dotted_name(target) for target in targets]
            # (one optimizer is handed back itself, not in a list: ``(opt,) = self.optimizers()`` fails)
            if returned is None or len(returned) != len(targets) or unpacking and len(targets) == 1:
                found += [(name, None) for name in names if name is not None]
            else:
                found += [(name, modules) for name, modules in zip(names, returned) if name is not None]
        for name, modules in found:
            if modules is None:
                unknown.add(name)
            else:
                optimized_modules.setdefault(name, set()).update(modules)

    def _positions(self, class_name: str, optimized_modules: dict[str, set[str]], unknown: set[str], optimizers: set[str]) -> list[set[str]] | None:
        returns = self.configured.get(class_name, [])
        overridden = any(class_name in self._ancestors(other) for other in self.configured if other != class_name)
        if len(returns) != 1 or returns[0] is None or overridden:
            return None
        modules: list[set[str]] = []
        for item in returns[0]:
            if isinstance(item, str):
                item = optimized_modules.get(item) if item in optimizers and item not in unknown else None
            if item is None:
                return None
            modules.append(item)
        return modules

    def _ancestors(self, class_name: str) -> set[str]:
        seen: set[str] = set()
        pending = [class_name]
        while pending:
            for base in self.local_bases.get(pending.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    pending.append(base)
        return seen


def is_configure_optimizers(function: cst.FunctionDef) -> bool:
    return function.name.value == LIGHTNING_OPTIMIZERS_HOOK


def _returned_items(returned: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The optimizer expressions a returned value holds, in Lightning's order; None for a shape
    gradfix does not read."""
    if type(returned) is cst.Tuple or type(returned) is cst.List:
        elements = returned.elements
        if any(type(element) is cst.StarredElement for element in elements):
            return None
        values = [element.value for element in elements]
        if len(values) == 2 and type(values[0]) is cst.List:  # ([optimizers], [schedulers])
            listed = cst.ensure_type(values[0], cst.List).elements
            return _returned_items(values[0]) if all(type(e.value) is not cst.Dict for e in listed) else None
        return [_dict_optimizer(value) if type(value) is cst.Dict else value for value in values]
    if type(returned) is cst.Dict:
        return [_dict_optimizer(returned)]
    return [returned]


def _dict_optimizer(value: cst.Dict) -> cst.BaseExpression:
    """The ``"optimizer"`` entry of a dict literal, or the dict itself (unread) when its keys are
    not all string literals or it has none."""
    entries = [e for e in value.elements if type(e) is cst.DictElement and type(e.key) is cst.SimpleString]
    if len(entries) != len(value.elements):
        return value
    return next((e.value for e in entries if cst.ensure_type(e.key, cst.SimpleString).evaluated_value == _OPTIMIZER_KEY), value)


def _configured(item: cst.BaseExpression, built: Callable[[cst.Call], set[str] | None]) -> ConfiguredOptimizer:
    if type(item) is cst.Call:
        return built(item)
    return None if is_name(item, "None") else dotted_name(item)
