from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import BackwardSite, code_of
from ..rule import Rule, Violation


class FreedGraph(Rule):
    """
    A backward walks a graph that an earlier backward already freed.

    A backward that does not keep its graph (no ``retain_graph=True``) frees the tensors each node
    of that graph saved for it. Any later backward that reaches one of those nodes raises
    ``RuntimeError: Trying to backward through the graph a second time``: a second loss built on
    the same forward, a value computed once and used by every step, state carried from the
    previous iteration, a loss a helper or framework already backwarded.

    gradfix says this when its analysis proves that what a backward walks was built from a value
    an earlier backward freed, on some path through the code, and no other rule explains the same
    backward with its shape and its fix. It names the backward that freed the graph and the line
    that built it. The fix depends on what the program means: backward the losses together once,
    compute the value again after the first backward (inside the loop), or detach what must not
    train. ``retain_graph=True`` only hides it. gradfix does not rewrite this on its own; run
    ``gradfix diagnose --fix`` on the script to try the candidate fixes.
    """

    CODE = "GF010"
    NAME = "freed_graph"
    SUMMARY = "a backward walks a graph an earlier backward freed"
    FIX = None
    DEFERS = True
    EXAMPLE_BEFORE = """\
encoder = nn.Linear(4, 8)
features = encoder(torch.randn(2, 4))
if check_features:
    features.sum().backward()
features.pow(2).mean().backward()
"""
    EXAMPLE_AFTER = EXAMPLE_BEFORE

    def violations(self) -> Iterator[Violation]:
        for site in self.analysis.backward_sites:
            if not site.value.freed or not site.value.graph or self.analysis.backwards_a_parameter(site):
                continue  # (a helper's backward of its parameter fails at the call that passes a freed graph)
            nodes = self.analysis.graph_nodes(site)
            freeing = [
                other
                for other in self.analysis.backward_sites
                if other is not site
                and other.retain_graph is False
                and not other.api.guessed
                and self.analysis.graph_nodes(other) & nodes
            ]
            if freeing and all(self.analysis.exclusive(other.statement, site.statement) for other in freeing):
                continue  # no run reaches both
            earlier = [other for other in freeing if self.analysis.order(other.call) < self.analysis.order(site.call)]
            shared = set().union(*(self.analysis.graph_nodes(other) & nodes for other in freeing)) if freeing else set()
            built = min((origin.statement for origin in shared), key=self.analysis.order, default=None)
            inside = self.analysis.calls_freeing(site)
            if earlier:
                by = f"the backward at line {self.analysis.line(earlier[-1].call)}"
            elif inside:
                by = f"a backward inside `{code_of(inside[-1].func)}(...)`, called at line {self.analysis.line(inside[-1])},"
                built = built or self.analysis.statement_of(inside[-1])
            else:
                by = "an earlier backward (a previous iteration's, or one gradfix does not place)"
            where = f", built at line {self.analysis.line(built)}" if built is not None else ""
            yield self.violation(
                site.call,
                f"`{code_of(site.tensor if site.tensor is not None else site.call)}` is backwarded through a graph "
                f"that {by} already freed{where}; backward the losses together once, compute the value again "
                "after that backward, or detach what must not train (retain_graph=True only hides it)",
                related=tuple(node for node in (*(other.call for other in earlier[-1:]), built) if node is not None),
                sites=(site,),
            )
