"""What a statement does to gradients and parameters: optimizer updates, zeroing, clipping, reading
``.grad``. Fixes consult it so that no edit ever removes or moves an optimizer update.

Optimizers are found by what they do, not by their names: ``x.step()`` and ``x.zero_grad()`` on any
object (a ``torch.optim`` optimizer, the one ``accelerator.prepare`` or ``fabric.setup`` returns, a
LightningModule's ``self.optimizers()``, a DeepSpeed engine), ``scaler.step(optimizer)`` and
``scaler.update()``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import libcst as cst

from ..frameworks import CLIPPING_FUNCTIONS, READING_METHODS, UPDATING_METHODS
from .syntax import expression_key, is_grad, is_name, method_called
from .tree import find_nodes

Findall = Callable[..., Sequence[cst.CSTNode]]  # (root, node type, where): ``SyntaxTree.findall``


def gradient_effects(node: cst.CSTNode, findall: Findall = find_nodes) -> set[str]:
    """What in ``node`` changes parameters or reads or changes gradients: ``step``, ``zero_grad``,
    ``update``, clipping and unscaling, ``grad`` (reading ``.grad``). ``findall``: the analysed
    module's ``SyntaxTree.findall``, which answers without walking ``node`` again."""
    effects = set()
    for call in findall(node, cst.Call, method_called):
        method = call.func.attr.value
        if method in UPDATING_METHODS and not _is_dict_update(call) or method in READING_METHODS:
            effects.add(method)
    for call in findall(node, cst.Call, lambda call: is_name(call.func)):
        if call.func.value in CLIPPING_FUNCTIONS:
            effects.add(call.func.value)
    if findall(node, cst.Attribute, is_grad):
        effects.add("grad")
    return effects


def updates_parameters(node: cst.CSTNode, findall: Findall = find_nodes) -> bool:
    """Whether ``node`` steps or zeroes an optimizer (or a scaler's step)."""
    return bool(gradient_effects(node, findall) & UPDATING_METHODS)


def stepped_optimizers(node: cst.CSTNode) -> set[str]:
    """The optimizers ``node`` steps, as written: ``opt_d`` for ``opt_d.step()`` and for
    ``scaler.step(opt_d)``."""
    stepped = set()
    for call in find_nodes(node, cst.Call, lambda call: method_called(call) == "step"):
        receiver = call.args[0].value if call.args and call.args[0].keyword is None else call.func.value
        stepped.add(expression_key(receiver))
    return stepped


def _is_dict_update(call: cst.Call) -> bool:
    """``metrics.update({...})`` / ``d.update(k=v)`` is a dict's, not a GradScaler's."""
    return call.func.attr.value == "update" and bool(call.args)
