"""The packages whose long modules were split along their seams (the execution layer: runner and
repair; the command line: its app and commands), and gradfix as a whole, depend on their own modules
one way: no loop among them, not even through an import in a function or under ``if
TYPE_CHECKING:``, as test_layers.py holds the analysis to. A loop would tie the pieces back
together: none could be read, tested or moved alone."""

import pytest

from .test_layers import MODULES, _loop

SPLIT_PACKAGES = ("gradfix.codemods.execution", "gradfix.cli", "gradfix")


@pytest.mark.parametrize("package", SPLIT_PACKAGES)
def test_no_import_loop_in_a_split_package_not_even_through_a_function_or_a_type(package):
    assert _loop((m for m in MODULES if m == package or m.startswith(package + ".")), through_any_import=True) == []
