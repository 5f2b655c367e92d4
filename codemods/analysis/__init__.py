"""The analysis every rule shares, computed once per file; rules and the execution layer import
what they ask of it from here.

``FileAnalysis`` wraps one parsed module with its structure (parents and searches, from one walk:
``tree``; positions, computed only when asked for), what its names mean in torch terms, and the
dataflow facts: backward sites, loops and the values that cross them. The rest of this door is the
types of those facts and the small syntax questions several rules share.

Importing it loads LibCST. The plain data a run answered by the cache needs lives outside this
package: the framework rows in ``codemods.frameworks``, the cross-file summaries in
``codemods.summaries``.
"""

from ..frameworks import GradientEffect
from ..torch_api import ACCUMULATING_METHODS, BUILTINS_WITHOUT_GRADIENTS
from .assignments import APPENDING_METHODS, assigned_names, read_for_data, read_names, target_names
from .backward_calls import BackwardSite, argument, with_retained_graph
from .closed_world import NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS, NO_GRADIENT_HOOKS, NO_HIDDEN_BACKWARD, READS_MODELLED_CODE
from .file_analysis import Block, FileAnalysis
from .gan import GanSteps
from .kept_on_self import KeptArgument, KeptOnSelf, operands
from .loops import Carried, Element, Loop, Scope, expand
from .module_info import ModuleInfo
from .optimizers import stepped_optimizers
from .syntax import (
    appended,
    as_operand,
    code_of,
    detached,
    detached_where_stored,
    dotted_name,
    expression_key,
    is_detach,
    is_view,
    is_name,
    is_single_assignment,
    is_single_call,
    loss_handed_to_trainer,
    method_called,
    with_backward_merged_into_branches,
    with_reads_replaced,
)
from .tree import LAYOUT, find_nodes
from .unread_parameters import none_test
from .values import NONE, NUMBER, TENSOR, UNKNOWN, FunctionOf, ListOf, Origin, RecordOf, Structure, TupleOf, Value, certain_origins

__all__ = [
    "APPENDING_METHODS",
    "ACCUMULATING_METHODS",
    "BUILTINS_WITHOUT_GRADIENTS",
    "NO_BOOKKEEPING_READS",
    "NO_CAUGHT_ERRORS",
    "NO_GRADIENT_HOOKS",
    "NO_HIDDEN_BACKWARD",
    "READS_MODELLED_CODE",
    "LAYOUT",
    "NONE",
    "NUMBER",
    "TENSOR",
    "UNKNOWN",
    "BackwardSite",
    "Block",
    "Carried",
    "Element",
    "FunctionOf",
    "FileAnalysis",
    "GanSteps",
    "GradientEffect",
    "KeptArgument",
    "KeptOnSelf",
    "ListOf",
    "Loop",
    "ModuleInfo",
    "Origin",
    "RecordOf",
    "Scope",
    "Structure",
    "TupleOf",
    "Value",
    "appended",
    "argument",
    "as_operand",
    "assigned_names",
    "certain_origins",
    "code_of",
    "detached",
    "detached_where_stored",
    "dotted_name",
    "expand",
    "expression_key",
    "find_nodes",
    "is_detach",
    "is_view",
    "is_name",
    "is_single_assignment",
    "is_single_call",
    "loss_handed_to_trainer",
    "method_called",
    "none_test",
    "operands",
    "read_for_data",
    "read_names",
    "stepped_optimizers",
    "target_names",
    "with_backward_merged_into_branches",
    "with_retained_graph",
    "with_reads_replaced",
]
