"""A GAN's two steps, told apart by their graphs.

Two backwards in one scope (and one iteration) are a GAN's discriminator and generator steps when
their graphs share a trainable module's output (the generator's ``fake``) and both graphs pass that
output through one module (the discriminator ``D(fake)``). The discriminator step is the one whose
graph also runs that module on something else (``D(real)``). The calls of the discriminator's loss
that take ``fake`` directly are where a ``.detach()`` belongs; when a call on ``fake`` is shared by
both losses (a prediction reused for the generator step), no single detach fixes it.

Two heads on one encoder are not a GAN: no module consumes the shared output in both graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import libcst as cst

from .dataflow import BackwardSite
from .optimizers import stepped_optimizers
from .syntax import is_single_assignment
from .torch_names import dotted_name
from .values import Origin

if TYPE_CHECKING:
    from . import FileAnalysis


@dataclass(frozen=True)
class GanSteps:
    discriminator_step: BackwardSite
    generator_step: BackwardSite
    generator_output: str  # the name holding the generator's output (``fake``)
    discriminator: str  # the module both losses run on it
    consumers: tuple[cst.Call, ...]  # calls of the discriminator's loss that take the output directly
    reused: tuple[cst.Call, ...]  # calls on the output whose result both losses use

    @property
    def sites(self) -> frozenset[BackwardSite]:
        return frozenset({self.discriminator_step, self.generator_step})


def find_gan_steps(analysis: "FileAnalysis") -> list[GanSteps]:
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


def _gan_steps(analysis: "FileAnalysis", first: BackwardSite, second: BackwardSite) -> GanSteps | None:
    graphs = {site: analysis.graph_nodes(site) for site in (first, second)}
    shared = graphs[first] & graphs[second]
    for output in _generator_outputs(analysis, first, shared):
        on_output = {site: _calls_taking(graphs[site], output) for site in (first, second)}
        modules = {site: {_module_name(analysis, site, call) for call in calls} - {None} for site, calls in on_output.items()}
        for discriminator in sorted(modules[first] & modules[second]):
            elsewhere = [
                site
                for site in (first, second)
                if any(
                    _module_name(analysis, site, origin.node) == discriminator and origin.node not in on_output[site]
                    for origin in graphs[site]
                )
            ]
            if len(elsewhere) != 1:
                elsewhere = [site for site in (first, second) if discriminator in _stepped_after(analysis, site)]
            if len(elsewhere) != 1:
                continue
            d_step = elsewhere[0]
            g_step = second if d_step is first else first
            consumers = tuple(sorted(on_output[d_step] - on_output[g_step], key=analysis.start))
            reused = tuple(sorted(on_output[d_step] & on_output[g_step], key=analysis.start))
            return GanSteps(d_step, g_step, output, discriminator, consumers, reused)
    return None


def _generator_outputs(analysis: "FileAnalysis", site: BackwardSite, shared: set[Origin]) -> Iterable[str]:
    """Names assigned a call's output that both graphs share (``fake = G(z)``,
    ``fake = self.sample(n)``)."""
    for origin in sorted(shared, key=lambda o: analysis.order(o.node)):
        if not isinstance(origin.node, cst.Call) or not is_single_assignment(origin.statement):
            continue
        if origin.statement.body[0].value is not origin.node:
            continue
        target = dotted_name(origin.statement.body[0].targets[0].target)
        if target is not None:
            yield target


def _stepped_after(analysis: "FileAnalysis", site: BackwardSite) -> set[str]:
    """The modules whose optimizers step after ``site`` in its block, before the next backward."""
    block = analysis.block_of(site.statement)
    if block is None:
        return set()
    modules: set[str] = set()
    for statement in block.statements[block.index(site.statement) + 1 :]:
        if "backward" in analysis.gradient_effects(statement):
            break
        for optimizer in stepped_optimizers(statement):
            modules |= analysis.names.optimized_modules.get(optimizer, set())
    return modules


def _calls_taking(nodes: set[Origin], name: str) -> set[cst.Call]:
    return {
        origin.node
        for origin in nodes
        if isinstance(origin.node, cst.Call) and any(dotted_name(arg.value) == name for arg in origin.node.args)
    }


def _module_name(analysis: "FileAnalysis", site: BackwardSite, node: cst.CSTNode) -> str | None:
    """The module a call runs: ``D(x)``, or ``gradient_penalty(D, real, fake)`` that is given it."""
    if not isinstance(node, cst.Call):
        return None
    for candidate in (node.func, *(arg.value for arg in node.args)):
        if analysis.names.module(candidate, site.scope.class_name) is not None:
            return dotted_name(candidate)
    return None
