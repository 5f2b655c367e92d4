"""Questions the analysis answers for every node its types admit: mypy's strict check showed them
asked of a kind of node they did not handle."""

import textwrap

import libcst as cst

from gradfix.codemods.analysis import FileAnalysis, Scope


def test_the_module_s_own_code_has_nothing_built_outside_it():
    # ``built_outside`` read the function's name before it looked at what the scope was, and
    # failed for the module (a Scope's node is the Module or a FunctionDef).
    analysis = FileAnalysis(
        cst.parse_module(
            textwrap.dedent(
                """\
                import torch
                weight = torch.randn(3, requires_grad=True)
                loss = (weight * 2).sum()
                loss.backward()
                """
            )
        )
    )
    (site,) = analysis.backward_sites
    assert site.scope.node is analysis.module
    assert analysis.built_outside(Scope(analysis.module), [site.value]) == []
