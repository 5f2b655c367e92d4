"""The analysis every rule shares, computed once per file.

``FileAnalysis`` wraps one parsed module with its structure (parents and searches, from one walk:
``tree``; positions, computed only when asked for), what its names mean in torch terms, and the
dataflow facts: backward sites, loops and the values that cross them.
"""
from __future__ import annotations

import importlib

# Where each name is defined. A name is loaded on first use, so that reading reports back from the
# cache, which needs only ``project`` (plain data), does not load LibCST.
_DEFINED_IN = {
    "assigned_names": "assignments",
    "read_names": "assignments",
    "target_names": "assignments",
    "BackwardSite": "dataflow",
    "FunctionSummary": "dataflow",
    "Loop": "dataflow",
    "Scope": "dataflow",
    "expand": "dataflow",
    "Block": "file_analysis",
    "FileAnalysis": "file_analysis",
    "GanSteps": "gan",
    "GradientEffect": "optimizers",
    "stepped_optimizers": "optimizers",
    "ExportedSummary": "project",
    "ProjectSummaries": "project",
    "module_names": "project",
    "project_summaries": "project",
    "appended": "syntax",
    "as_operand": "syntax",
    "code_of": "syntax",
    "detached": "syntax",
    "detached_where_stored": "syntax",
    "expression_key": "syntax",
    "find_nodes": "tree",
    "is_detach": "syntax",
    "is_grad": "syntax",
    "is_name": "syntax",
    "is_single_assignment": "syntax",
    "loss_handed_to_trainer": "syntax",
    "is_single_call": "syntax",
    "method_called": "syntax",
    "parenthesized": "syntax",
    "dotted_name": "torch_names",
    "Carried": "values",
    "Element": "values",
    "ListOf": "values",
    "NONE": "values",
    "NUMBER": "values",
    "Origin": "values",
    "Structure": "values",
    "TENSOR": "values",
    "TupleOf": "values",
    "UNKNOWN": "values",
    "Value": "values",
}
__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str) -> object:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_DEFINED_IN[name]}", __name__), name)
    globals()[name] = value
    return value
