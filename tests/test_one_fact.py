"""Each small fact has one definition that its callers share: the decoder of source bytes, the diff
of two files' lines."""

from __future__ import annotations

import ast

from .test_layers import CODEMODS, IMPORTS, MODULES, TREES


def _calls_of(attribute: str) -> set[str]:
    """The modules of the library and the command line (outside the analysis) with a call of
    ``….attribute(…)``."""
    return {
        module
        for module, tree in TREES.items()
        if module.startswith((f"{CODEMODS}.", "gradfix.cli.")) and not module.startswith(f"{CODEMODS}.analysis")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
    }


def test_source_bytes_are_decoded_in_one_place():
    assert _calls_of("detect_encoding") == {f"{CODEMODS}.source"}


def test_the_diff_helper_sits_below_files_and_notebook():
    diffs = f"{CODEMODS}.diffs"
    assert not (IMPORTS[diffs][0] | IMPORTS[diffs][1]) & MODULES.keys()
    assert diffs in IMPORTS[f"{CODEMODS}.files"][0] and diffs in IMPORTS[f"{CODEMODS}.notebook"][0]
    assert f"{CODEMODS}.files" not in IMPORTS[f"{CODEMODS}.notebook"][0] | IMPORTS[f"{CODEMODS}.notebook"][1]
