"""The metamorphic opacity check's constructs: each is one statement gradfix does not see through,
written right after each backward of a ``{tensor}`` (on the path of any fix about that backward), with
the import it needs and the obligation it bears on. A program that gets a safe rewrite must get
none once one of them is there, from a rule that declares that obligation, and keep it from a rule
that does not (tests/test_closed_world.py on a sample, benchmarks/opacity.py on every fixture and
fuzzed program)."""

from __future__ import annotations

import re

from gradfix.codemods.analysis.closed_world import NO_BOOKKEEPING_READS, NO_GRADIENT_HOOKS, NO_HIDDEN_BACKWARD, READS_MODELLED_CODE

# name -> (import line, statement, the obligation it leaves unknown or disproves)
OPAQUE_CONSTRUCTS: dict[str, tuple[str, str, str]] = {
    "a call of a module beside it": ("import unread_helpers\n", "unread_helpers.inspect({tensor})", READS_MODELLED_CODE),
    "getattr": ("", 'getattr({tensor}, "shape")', READS_MODELLED_CODE),
    "a lambda that reads it": ("", "(lambda: {tensor}.sum())()", READS_MODELLED_CODE),
    "a method taken as a value": ("", "_later = {tensor}.backward", NO_HIDDEN_BACKWARD),
    "a read of is_leaf": ("", "_leaf = {tensor}.is_leaf", NO_BOOKKEEPING_READS),
    "a gradient hook": ("", "{tensor}.register_hook(lambda grad: grad)", NO_GRADIENT_HOOKS),
    "a list emptied in place": ("", "_kept = [{tensor}]; _kept.clear()", READS_MODELLED_CODE),
}
_BACKWARD = re.compile(r"^(?P<indent>[ \t]*)(?P<tensor>\S.*?)\.backward\(.*\)[ \t]*$", re.M)


def insertable(source: str) -> bool:
    """Whether a construct can be written after one of the source's backwards."""
    return "from __future__" not in source and _BACKWARD.search(source) is not None


def with_construct(source: str, construct: str) -> str:
    """``source`` with ``construct`` written after each ``<tensor>.backward(...)`` line, so that it
    is on the path of a fix about any of them."""
    imports, statement, _ = OPAQUE_CONSTRUCTS[construct]
    assert insertable(source), "no backward to write the construct after"
    return imports + _BACKWARD.sub(
        lambda match: match.group(0).rstrip("\n") + "\n" + match.group("indent") + statement.format(tensor=match.group("tensor")), source
    )
