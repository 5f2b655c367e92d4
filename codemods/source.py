"""A file's text before any parse: the prefilter that tells, from the bytes alone, whether a file
could backward a graph. A file that could not is never parsed by LibCST.

Plain text tests: this module never loads LibCST (a run answered by the cache, or by the
prefilter, never pays for it).
"""

from __future__ import annotations

import re
from typing import Iterable

from .frameworks import TRAINER_HOOKS

_BACKWARD_CALL = re.compile(rb"backward\s*\(")
# A class reaches a trainer's base only through a name whose last part the file writes (imported,
# or read as an attribute), and a trainer backwards only the hook the file's class defines.
_TRAINER_BASES_BY_HOOK = {
    hook.encode(): {base.rpartition(".")[2].encode() for base, its_hook in TRAINER_HOOKS.items() if its_hook == hook}
    for hook in dict.fromkeys(TRAINER_HOOKS.values())
}


def may_backward(source: bytes, helpers: Iterable[tuple[bytes, bytes, bytes]] = ()) -> bool:
    """Whether a file's text could backward anything in a way ``frameworks``' table knows: every
    row's method or function is called as ``…backward(`` or lives in ``autograd``; a trainer
    backwards what its hooks return; ``helpers`` are other checked files' functions that backward, each as the module,
    name and method a file that calls it writes (``project.written_names``).
    ("backward" alone would also take every "backward compatibility" of a docstring; plain
    substring tests first, as one regular expression of alternatives is slow.)"""
    if b"autograd" in source:
        return True
    if any(hook in source and any(base in source for base in bases) for hook, bases in _TRAINER_BASES_BY_HOOK.items()):
        return True
    if b"backward" in source and _BACKWARD_CALL.search(source) is not None:
        return True
    return may_call(source, helpers)


def may_call(source: bytes, helpers: Iterable[tuple[bytes, bytes, bytes]]) -> bool:
    """Whether a file's text could call one of ``helpers`` (module, name and method, as
    ``project.written_names`` spells them)."""
    return any(
        module in source and name in source and (not method or re.search(rb"\b%s\s*\(" % method, source))
        for module, name, method in helpers
    )
