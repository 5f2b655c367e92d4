"""What a statement does to gradients and parameters: optimizer updates, zeroing, clipping, reading
``.grad``, backwarding. Fixes consult it so that no edit ever removes or moves an optimizer update.

Optimizers are found by what they do, not by their names: ``x.step()`` and ``x.zero_grad()`` on any
object (``frameworks.GRADIENT_METHODS``), ``scaler.step(optimizer)`` and ``scaler.update()``, and
any method of an object the file binds to an optimizer.
"""

from __future__ import annotations

from typing import Callable, Collection, Protocol, Sequence

import libcst as cst

from ..frameworks import CLIPPING_FUNCTIONS, GRADIENT_METHODS, GradientEffect
from .syntax import dotted_name, expression_key, is_grad, is_name, method_called
from .tree import N, find_nodes


class Findall(Protocol):
    """``SyntaxTree.findall``: the nodes of a type under a root that ``where`` accepts."""

    def __call__(self, root: cst.CSTNode, node_type: type[N], where: Callable[[N], object] | None = None, /) -> Sequence[N]: ...


def gradient_effects(
    node: cst.CSTNode, findall: Findall, optimizers: Collection[str], holds_a_backward: Callable[[cst.CSTNode], bool]
) -> GradientEffect:
    """What ``node`` does to gradients and parameters; ``FileAnalysis.gradient_effects`` asks it
    with the analysed file's facts: ``findall``, its ``SyntaxTree.findall`` (answers without walking
    ``node`` again), ``optimizers``, the dotted names bound to optimizers, ``holds_a_backward``,
    whether a backward site is in a node."""
    effects = GradientEffect(0)
    for call in findall(node, cst.Call, method_called):
        func = cst.ensure_type(call.func, cst.Attribute)  # (a method's call)
        method = func.attr.value
        effect = None if _is_dict_update(call, method) else GRADIENT_METHODS.get(method)
        if effect is None and (receiver := dotted_name(func.value)) is not None and receiver in optimizers:
            effect = GradientEffect.STEP  # first_step(), second_step(), a wrapper's own update methods
        if effect is not None:
            effects |= effect
    for call in findall(node, cst.Call, lambda call: is_name(call.func)):
        if cst.ensure_type(call.func, cst.Name).value in CLIPPING_FUNCTIONS:
            effects |= GradientEffect.CLIP
    if findall(node, cst.Attribute, is_grad):
        effects |= GradientEffect.READ_GRAD
    if holds_a_backward(node):
        effects |= GradientEffect.BACKWARD
    return effects


def steps_for_certain(node: cst.CSTNode, findall: Findall, optimizers: Collection[str]) -> bool:
    """Whether ``node`` steps one of ``optimizers`` (the dotted names bound to optimizers): its
    ``step()``, ``scaler.step(opt)``, or another method of it that ``gradient_effects`` takes for
    a step (``opt.first_step()``). What ``gradient_effects`` takes for a step of anything else (a
    scheduler's ``step()``, an object gradfix does not know) may change no parameter."""
    for call in findall(node, cst.Call, method_called):
        func = cst.ensure_type(call.func, cst.Attribute)
        effect = None if _is_dict_update(call, func.attr.value) else GRADIENT_METHODS.get(func.attr.value)
        if effect is None and dotted_name(func.value) in optimizers:
            return True
        if effect is GradientEffect.STEP and _stepped(call) in optimizers:
            return True
    return False


def stepped_optimizers(node: cst.CSTNode) -> set[str]:
    """The optimizers ``node`` steps, as written: ``opt_d`` for ``opt_d.step()`` and for
    ``scaler.step(opt_d)``."""
    return {
        _stepped(call) for call in find_nodes(node, cst.Call, lambda call: GRADIENT_METHODS.get(method_called(call) or "") is GradientEffect.STEP)
    }


def _stepped(call: cst.Call) -> str:
    """The optimizer a step's call steps, as written: its receiver, or ``scaler.step``'s argument."""
    receiver = call.args[0].value if call.args and call.args[0].keyword is None else cst.ensure_type(call.func, cst.Attribute).value
    return expression_key(receiver)


def _is_dict_update(call: cst.Call, method: str) -> bool:
    """``metrics.update({...})`` / ``d.update(k=v)`` is a dict's, not a GradScaler's."""
    return GRADIENT_METHODS.get(method) is GradientEffect.SCALER_UPDATE and bool(call.args)
