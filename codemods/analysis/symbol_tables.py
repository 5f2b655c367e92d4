"""Python's own symbol tables of a file's source (``symtable``): which names each function reads
from the functions around it, and which it reads or writes as the module's. The analysis reads
scopes from LibCST's tree; where the answer must be Python's (a free variable, a global), it asks
these."""

from __future__ import annotations

import symtable
from functools import lru_cache


@lru_cache(maxsize=4)
def function_scopes(source: bytes) -> tuple[symtable.Function, ...] | None:
    """Every function's symbol table in ``source``; None where Python cannot read it."""
    try:
        table = symtable.symtable(source.decode("utf-8"), "<gradfix>", "exec")
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    functions: list[symtable.Function] = []
    pending: list[symtable.SymbolTable] = [table]
    while pending:
        scope = pending.pop()
        if isinstance(scope, symtable.Function):
            functions.append(scope)
        pending.extend(scope.get_children())
    return tuple(functions)
