"""A GAN's two steps, told apart by their graphs.

Two backwards in one scope (and one iteration) are a GAN's discriminator and generator steps when
their graphs share a trainable module's output (the generator's ``fake``) and both graphs pass that
output through one module (the discriminator ``D(fake)``). The discriminator step is the one whose
graph also runs that module on something else (``D(real)``).

The discriminator's backward must not reach what built ``fake``: the generator step backwards it
again. It reaches it through every read of ``fake`` (or of a value of the generator's own chain) in
the part of its graph the generator step does not share: ``D(fake)``, a gradient penalty's
interpolation ``alpha * real + (1 - alpha) * fake``. Those reads are where a ``.detach()`` belongs,
all of them. When the two graphs share more than the generator's chain (a prediction ``D(fake)``
reused by both losses, an encoder output both use), no detach of ``fake`` fixes it.

Two heads on one encoder are not a GAN: no module consumes the shared output in both graphs.

The functions read the file's ``FileAnalysis`` (``analysis``), which calls them: they name it, and
do not import it (no import loop runs through the analysis, not even a type's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import libcst as cst

from ..frameworks import GradientEffect
from ..torch_api import (
    AUTOGRAD_RECORD,
    FORWARD_METHOD,
    GRAPHLESS_ATTRIBUTES,
    METADATA_ATTRIBUTES,
    METADATA_METHODS,
    MODULE_ATTRIBUTES_WITHOUT_PARAMETERS,
    VALUE_METHODS,
)
from .backward_calls import BackwardSite
from .optimizers import stepped_optimizers
from .syntax import dotted_name, is_single_assignment
from .values import Origin

# Reads that take no graph from what they read: nothing to detach there.
_GRAPHLESS_USES = {"detach", "detach_", *VALUE_METHODS, *GRAPHLESS_ATTRIBUTES, *METADATA_ATTRIBUTES, *METADATA_METHODS, *AUTOGRAD_RECORD}


@dataclass(frozen=True)
class GanSteps:
    discriminator_step: BackwardSite
    generator_step: BackwardSite
    generator_output: str  # the name holding the generator's output (``fake``)
    discriminator: str  # the module both losses run on it
    # Reads of the generator's chain in the discriminator's own graph: each needs a ``.detach()``.
    detach_at: tuple[cst.Name, ...]
    # Nodes both losses share beyond the generator's chain (``pred_fake = D(fake)`` used by both).
    reused: tuple[cst.CSTNode, ...]
    # Why the reads cannot all be detached where they are (an in-place use, a read inside a lambda).
    unfixable: str = ""

    @property
    def sites(self) -> frozenset[BackwardSite]:
        return frozenset({self.discriminator_step, self.generator_step})


def find_gan_steps(analysis) -> list[GanSteps]:
    sites = [s for s in analysis.backward_sites if s.api.accumulates and s.value.graph]
    found = []
    for index, first in enumerate(sites):
        for second in sites[index + 1 :]:
            if first.scope is not second.scope or analysis.graph_nodes(first).isdisjoint(analysis.graph_nodes(second)):
                continue  # (the two steps of a GAN share the generator's output)
            steps = _gan_steps(analysis, first, second)
            if steps is not None:
                found.append(steps)
    return found


def _gan_steps(analysis, first: BackwardSite, second: BackwardSite) -> GanSteps | None:
    graphs = {site: analysis.graph_nodes(site) for site in (first, second)}
    shared = graphs[first] & graphs[second]
    for output, chain, built in _generator_outputs(analysis, shared):
        on_output = {site: _calls_taking(graphs[site], output) for site in (first, second)}
        modules = {site: {name for call in calls if (name := _module_name(analysis, site, call)) is not None} for site, calls in on_output.items()}
        for discriminator in sorted(modules[first] & modules[second]):
            elsewhere = [
                site
                for site in (first, second)
                if any(_module_name(analysis, site, origin.node) == discriminator and origin.node not in on_output[site] for origin in graphs[site])
            ]
            if len(elsewhere) != 1:
                elsewhere = [site for site in (first, second) if discriminator in (_stepped_after(analysis, site) or ())]
            if len(elsewhere) != 1:
                continue
            d_step = elsewhere[0]
            g_step = second if d_step is first else first
            if not graphs[d_step] - graphs[g_step]:
                continue  # (nothing of the discriminator's own: the same graph backwarded twice, GF001's)
            trained = _stepped_after(analysis, d_step)
            if trained is not None and discriminator not in trained:
                continue  # (a loss module both graphs run on a prediction trains nothing: no discriminator)
            reused = tuple(sorted({o.node for o in shared - chain}, key=analysis.order))
            detach_at, unfixable = _reads_of_chain(analysis, graphs[d_step] - graphs[g_step], chain)
            if trained is None:
                unfixable = unfixable or f"gradfix cannot tell what the optimizer stepped after `{discriminator}`'s loss trains"
            elif _runs_what_trains(analysis, d_step.scope.class_name, chain | {built}, trained):
                unfixable = unfixable or f"`{output}` may be built by what `{discriminator}`'s optimizer trains"
            return GanSteps(d_step, g_step, output, discriminator, detach_at, reused, unfixable)
    return None


def _generator_outputs(analysis, shared: frozenset[Origin]) -> Iterable[tuple[str, frozenset[Origin], Origin]]:
    """Names assigned a call's output that both graphs share (``fake = G(z)``,
    ``fake = self.sample(n)``), each with the nodes that built it (the generator's chain) and the
    call that built it. A target of ``fake, q = G(z)``, or ``fake = G(z)[0]``, is one where the
    callee's returns, read by gradfix, prove which item holds which graph (a function or ``forward``
    of the file, a torch.nn module's outputs); the items the call builds from no node in common each
    stand for their own part, written at their target, so whether building one runs what the
    discriminator's optimizer trains is read through the whole call (``built``). A value whose graph is only guessed (an item of a tuple of code
    gradfix cannot read, or built by such code), or only possible (a generator frozen in one place
    and trained in another: made while frozen, it holds none), is no generator's output: the
    discriminator may not reach the generator through it."""
    seen: set[cst.BaseStatement] = set()
    for origin in sorted(shared, key=lambda o: analysis.order(o.node)):
        if not is_single_assignment(origin.statement):
            continue
        assignment = cst.ensure_type(origin.statement.body[0], cst.Assign)
        target = assignment.targets[0].target
        unpacked = [element.value for element in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
        taken = assignment.value if isinstance(assignment.value, cst.Subscript) and not unpacked else None  # ``fake = G(z)[0]``
        call = taken.value if taken is not None else assignment.value
        if not isinstance(call, cst.Call) or not any(origin.node is node for node in (call, taken, *unpacked)):
            continue
        if any(isinstance(element, cst.StarredElement) for element in getattr(target, "elements", ())):
            continue  # (``fake, *rest = G(z)``: which item a name holds depends on the length)
        if origin.statement in seen:
            continue  # (another item of the same call)
        seen.add(origin.statement)
        built = Origin(call, origin.statement, origin.possible)
        for item, value in [(element, analysis.value_assigned(element)) for element in unpacked] or [
            (target, analysis.value_assigned(assignment.value))
        ]:
            name = dotted_name(item)
            if (
                name is not None
                and value is not None
                and not (value.guessed or value.unread or value.possible)
                and (value.graph or call is assignment.value)
            ):
                yield name, analysis.value_nodes(value), built


def _reads_of_chain(analysis, own: frozenset[Origin], chain: frozenset[Origin]) -> tuple[tuple[cst.Name, ...], str]:
    """The reads, in the nodes only the discriminator's graph has, of names whose graph is the
    generator's chain alone: detaching each cuts every path from the discriminator's loss into the
    chain (a name built in the discriminator's own part is cut at its own reads)."""
    reads: dict[cst.Name, None] = {}
    for origin in own:
        for name in analysis.tree.findall(origin.node, cst.Name):
            value = analysis.value_read(name)
            if value is None or not value.graph:
                continue
            nodes = analysis.value_nodes(value)
            if nodes and nodes <= chain and not _graphless_use(analysis, name):
                reads[name] = None
    for name in reads:
        parent = analysis.tree.parent(name)
        if isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value.endswith("_"):
            return (), f"`{name.value}` is changed in place by `.{parent.attr.value}()` in the discriminator's loss"
        if _in_function_or_lambda(analysis, name):
            return (), f"`{name.value}` is read inside a lambda or nested function"
    return tuple(sorted(reads, key=analysis.order)), ""


def _graphless_use(analysis, name: cst.Name) -> bool:
    parent = analysis.tree.parent(name)
    return isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value in _GRAPHLESS_USES


def _in_function_or_lambda(analysis, node: cst.CSTNode) -> bool:
    statement = analysis.statement_of(node)
    ancestor: cst.CSTNode | None = node
    while ancestor is not None and ancestor is not statement:
        if isinstance(ancestor, (cst.Lambda, cst.FunctionDef)):
            return True
        ancestor = analysis.tree.parent(ancestor)
    return statement is None


def _stepped_after(analysis, site: BackwardSite) -> set[str] | None:
    """The modules whose optimizers step after ``site`` in its block, before the next backward;
    None when one of those optimizers updates parameters gradfix cannot name."""
    block = analysis.block_of(site.statement)
    if block is None:
        return set()
    names = analysis.names
    modules: set[str] = set()
    for statement in block.statements[block.index(site.statement) + 1 :]:
        if GradientEffect.BACKWARD in analysis.gradient_effects(statement):
            break
        for optimizer in stepped_optimizers(statement):
            if optimizer not in names.optimized_modules or optimizer in names.optimizers_of_unknown_parameters:
                return None
            modules |= names.optimized_modules[optimizer]
    return modules


def _runs_what_trains(analysis, class_name: str | None, chain: frozenset[Origin], trained: set[str]) -> bool:
    """Whether building the generator's output may run a module in ``trained`` (the discriminator
    step's): a detach there would also cut the discriminator's own gradient. Read through the
    file's functions and the class's own methods the chain calls (``self.sample(n)``, ``self(x)``),
    at every depth."""
    nodes: list[cst.CSTNode] = [origin.node for origin in chain]
    read: set[cst.FunctionDef] = set()
    while nodes:
        node = nodes.pop()
        for function in analysis.closed_world.functions_called(node):
            if function not in read and analysis.class_name_of(function) in (None, class_name):
                read.add(function)
                nodes.append(function.body)
        for name in (*analysis.tree.findall(node, cst.Name), *analysis.tree.findall(node, cst.Attribute)):
            module = _module_named(analysis, name, class_name)
            if module is not None and analysis.may_train(module, trained):
                return True
    return False


def _module_named(analysis, node: cst.Name | cst.Attribute, class_name: str | None) -> str | None:
    """The module a dotted expression reads, when it is the whole expression (``self.G`` of
    ``self.G.weight``): its longest part that names a module; not ``self`` where it only runs one
    of its class's own methods (``self.sample(n)``, ``self(x)``: their bodies are read), nor a
    module's attribute that holds no parameter (``self.device``)."""
    parent = analysis.tree.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return None  # (a part of a longer expression, read with it)
    part: cst.BaseExpression = node
    reading: cst.Attribute | None = None  # the attribute read from ``part``
    while analysis.names.module(part, class_name) is None:
        if not isinstance(part, cst.Attribute):
            return None
        part, reading = part.value, part
    if dotted_name(part) == "self" and isinstance(parent, cst.Call) and parent.func is node and analysis.closed_world.functions_run_by(parent):
        return None
    if reading is not None and reading.attr.value in MODULE_ATTRIBUTES_WITHOUT_PARAMETERS:
        return None
    return dotted_name(part)


def _calls_taking(nodes: frozenset[Origin], name: str) -> set[cst.Call]:
    return {origin.node for origin in nodes if isinstance(origin.node, cst.Call) and any(dotted_name(arg.value) == name for arg in origin.node.args)}


def _module_name(analysis, site: BackwardSite, node: cst.CSTNode) -> str | None:
    """The module that may hold parameters a call runs: ``D(x)``, ``D.forward(x)``, or
    ``gradient_penalty(D, real, fake)`` that is given it (a loss or an activation trains nothing,
    and is no discriminator)."""
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    forward = func.value if isinstance(func, cst.Attribute) and func.attr.value == FORWARD_METHOD else None
    for candidate in (func, *((forward,) if forward is not None else ()), *(arg.value for arg in node.args)):
        module = analysis.names.module(candidate, site.scope.class_name)
        if module is not None:
            return dotted_name(candidate) if module.trainable else None
    return None
